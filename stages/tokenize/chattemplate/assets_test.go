package chattemplate

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/draftflow/draftflow/internal/testassets"
)

// Test assets: real tokenizer files fetched with npm into the shared cache (testassets.Tokenizer), and
// reference renders from the pinned Python transformers, cached by a hash of everything that determines them.

// transformersPin reads the transformers version pinned in the repository's requirements-test.txt.
func transformersPin(t testing.TB) string {
	t.Helper()
	data, err := os.ReadFile("../../../requirements-test.txt")
	if err != nil {
		t.Fatalf("read requirements-test.txt: %v", err)
	}
	m := regexp.MustCompile(`(?m)^transformers==(\S+)`).FindSubmatch(data)
	if m == nil {
		t.Fatal("requirements-test.txt pins no transformers version")
	}
	return string(m[1])
}

type refCase struct {
	ID                  string            `json:"id"`
	Messages            []json.RawMessage `json:"messages,omitempty"`
	Tools               json.RawMessage   `json:"tools,omitempty"`
	Kwargs              json.RawMessage   `json:"kwargs,omitempty"`
	AddGenerationPrompt *bool             `json:"add_generation_prompt,omitempty"`
	Template            string            `json:"template,omitempty"`
	Vars                json.RawMessage   `json:"vars,omitempty"`
	// Unsupported marks a case this package deliberately refuses: Go must fail, whatever Python does.
	Unsupported bool `json:"unsupported,omitempty"`
}

type refRequest struct {
	Mode             string    `json:"mode"`
	ModelDir         string    `json:"model_dir,omitempty"`
	WantTransformers string    `json:"want_transformers"`
	Tokenize         bool      `json:"tokenize,omitempty"`
	Template         string    `json:"template,omitempty"`
	BOS              string    `json:"bos,omitempty"`
	EOS              string    `json:"eos,omitempty"`
	Cases            []refCase `json:"cases"`
	// Now is the wall clock strftime_now reads on the reference side (naive local time); tests pin
	// the Go side to the same instant with pinClock, so a render with a date does not depend on the
	// day the cached reference was made.
	Now string `json:"now"`
}

// refNow is the instant every reference render and every compared Go render take as "now".
var refNow = time.Date(2026, 7, 4, 15, 4, 5, 0, time.UTC)

// pinClock makes tmpl read refNow as the current time, as the reference renders do.
func pinClock(tmpl *Template) *Template {
	tmpl.now = func() time.Time { return refNow }
	return tmpl
}

type refResult struct {
	ID   string   `json:"id"`
	Text *string  `json:"text,omitempty"`
	IDs  []uint32 `json:"ids,omitempty"`
	// RawIDs are the tokenizers library's ids for Text from tokenizer.json alone.
	RawIDs []uint32 `json:"raw_ids,omitempty"`
	Error  string   `json:"error,omitempty"`
}

// reference runs testdata/reference.py (or reuses its cached answer) and returns results by case id.
func reference(t testing.TB, req refRequest) map[string]refResult {
	t.Helper()
	req.WantTransformers = transformersPin(t)
	req.Now = refNow.Format("2006-01-02T15:04:05")
	script, err := os.ReadFile("testdata/reference.py")
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	h.Write(script)
	keyReq := req
	keyReq.ModelDir = ""
	kb, _ := json.Marshal(keyReq)
	h.Write(kb)
	if req.ModelDir != "" {
		for _, f := range []string{"tokenizer_config.json", "tokenizer.json", "chat_template.jinja"} {
			if data, err := os.ReadFile(filepath.Join(req.ModelDir, f)); err == nil {
				fmt.Fprintf(h, "%s:%d:", f, len(data))
				h.Write(data)
			}
		}
	}
	key := hex.EncodeToString(h.Sum(nil))[:32]
	cachePath := filepath.Join(testassets.CacheDir(), "golden", "chattemplate", key+".json")
	out, err := os.ReadFile(cachePath)
	if err != nil {
		out = runReference(t, req)
		if err := os.MkdirAll(filepath.Dir(cachePath), 0o755); err == nil {
			tmp := fmt.Sprintf("%s.tmp%d", cachePath, os.Getpid())
			if os.WriteFile(tmp, out, 0o644) == nil {
				_ = os.Rename(tmp, cachePath)
			}
		}
	}
	var resp struct {
		Results []refResult `json:"results"`
	}
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatalf("reference output: %v", err)
	}
	byID := make(map[string]refResult, len(resp.Results))
	for _, r := range resp.Results {
		byID[r.ID] = r
	}
	return byID
}

func runReference(t testing.TB, req refRequest) []byte {
	t.Helper()
	py := testassets.Python()
	if _, err := exec.LookPath(py); err != nil {
		testassets.Unavailable(t, "%s not found for reference renders", py)
	}
	probe := exec.Command(py, "-c", "import transformers, sys; sys.stdout.write(transformers.__version__)")
	probe.Env = append(os.Environ(), "TRANSFORMERS_VERBOSITY=error", "HF_HUB_OFFLINE=1")
	v, err := probe.Output()
	if err != nil {
		testassets.Unavailable(t, "python transformers not importable (pip install -r requirements-test.txt): %v", err)
	}
	if string(v) != req.WantTransformers {
		testassets.Unavailable(t, "python transformers %s installed, %s pinned", v, req.WantTransformers)
	}
	in, _ := json.Marshal(req)
	cmd := exec.Command(py, "testdata/reference.py")
	cmd.Env = append(os.Environ(), "TRANSFORMERS_VERBOSITY=error", "HF_HUB_OFFLINE=1", "TRANSFORMERS_NO_ADVISORY_WARNINGS=1")
	cmd.Stdin = bytes.NewReader(in)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("reference.py: %v\n%s", err, stderr.String())
	}
	return stdout.Bytes()
}

// readJSONL reads one JSON value per non-empty line into a slice of T.
func readJSONL[T any](t testing.TB, path string) []T {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var v T
		if err := json.Unmarshal(line, &v); err != nil {
			t.Fatalf("%s:%d: %v", path, n, err)
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// diffExcerpt shows where two strings first differ, with some context.
func diffExcerpt(want, got string) string {
	i := 0
	for i < len(want) && i < len(got) && want[i] == got[i] {
		i++
	}
	lo := max(0, i-80)
	clip := func(s string) string {
		hi := min(len(s), i+80)
		if lo > len(s) {
			return ""
		}
		return s[lo:hi]
	}
	return fmt.Sprintf("first difference at byte %d (want %d bytes, got %d)\n  want: %q\n  got:  %q",
		i, len(want), len(got), clip(want), clip(got))
}

// shortErr trims a Python error for messages.
func shortErr(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}
