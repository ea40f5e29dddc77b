package chattemplate

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestWildTemplatesMatchTransformers renders the corpus through real chat templates from the wild
// (testdata/wild: gpt-oss, Kimi, DeepSeek, GLM, Llama 3.2 with tools, Mistral, Gemma 4, Qwen 3.x,
// Nemotron, ...) and compares with transformers.
func TestWildTemplatesMatchTransformers(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "wild", "*.jinja"))
	if len(files) == 0 {
		t.Fatal("no templates in testdata/wild")
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
			if perr == nil {
				pinClock(tmpl)
			}
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
