package chattemplate

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestWildTemplatesMatchTransformers renders the corpus through the real chat templates that the
// github.com/ardanlabs/jinja module ships as test data (gpt-oss, Kimi, DeepSeek, GLM, Llama 3.2 with
// tools, Mistral, Gemma 4, Qwen 3.x, Nemotron, ...) and compares with transformers.
func TestWildTemplatesMatchTransformers(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/ardanlabs/jinja").Output()
	if err != nil {
		needAsset(t, "locate github.com/ardanlabs/jinja module: %v", err)
	}
	files, _ := filepath.Glob(filepath.Join(strings.TrimSpace(string(out)), "testdata", "templates", "*.jinja"))
	if len(files) == 0 {
		needAsset(t, "no templates in the ardanlabs/jinja module's testdata")
	}
	corpus := loadCorpus(t)
	var cases []refCase
	for _, c := range corpus {
		if len(c.Models) == 0 || slices.Contains(c.Models, "wild") {
			cases = append(cases, c.refCase)
		}
	}
	const bos, eos = "<|bos|>", "<|eos|>"
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".jinja")
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			refs := reference(t, refRequest{Mode: "template", Template: string(src), BOS: bos, EOS: eos, Cases: cases})
			tmpl, perr := Parse(string(src), bos, eos)
			for _, c := range cases {
				t.Run(c.ID, func(t *testing.T) {
					ref := refs[c.ID]
					if perr != nil {
						if ref.Error == "" {
							t.Fatalf("Parse: %v", perr)
						}
						return
					}
					got, err := tmpl.Render(conversation{refCase: c}.input(t))
					checkAgainstReference(t, ref, got, err)
				})
			}
		})
	}
}
