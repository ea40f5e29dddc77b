package tokenize

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/draftflow/draftflow/internal/testassets"
)

// TestKimiBenchVsTiktoken (DRAFTFLOW_BENCH=1) measures single-thread encode throughput of the Kimi
// tokenizer in Go and of Python tiktoken (one thread, the library TikTokenTokenizer calls) on the
// tokenizer corpus, side by side, and prints MB/s, tokens/s and the ratio.
func TestKimiBenchVsTiktoken(t *testing.T) {
	if os.Getenv("DRAFTFLOW_BENCH") == "" {
		t.Skip("set DRAFTFLOW_BENCH=1 to run")
	}
	dir := kimiDir(t, "kimi-k2.5")
	m, err := LoadModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("tokenizer/testdata/corpus/*.txt")
	for _, natural := range []bool{false, true} {
		var texts []string
		nbytes := 0
		for _, f := range files {
			if natural && strings.HasSuffix(f, "long_words.txt") {
				continue
			}
			data, _ := os.ReadFile(f)
			texts = append(texts, string(data))
			nbytes += len(data)
		}
		prev := runtime.GOMAXPROCS(1)
		for _, s := range texts { // warm the word cache, as the Python side warms
			m.Tokenizer.Encode(s)
		}
		rounds, toks := 0, 0
		start := time.Now()
		for time.Since(start) < 3*time.Second {
			for _, s := range texts {
				toks += len(m.Tokenizer.Encode(s))
			}
			rounds++
		}
		el := time.Since(start).Seconds()
		runtime.GOMAXPROCS(prev)
		goMB, goTok := float64(rounds*nbytes)/el/1e6, float64(toks)/el
		tmp := filepath.Join(t.TempDir(), "texts.json")
		b, _ := json.Marshal(texts)
		os.WriteFile(tmp, b, 0o644)
		out, err := exec.Command("python3", "testdata/kimi_bench.py", dir, tmp, "3").Output()
		if err != nil {
			testassets.Unavailable(t, "python tiktoken: %v", err)
		}
		var py struct {
			MB  float64 `json:"mb_per_s"`
			Tok float64 `json:"tokens_per_s"`
		}
		if err := json.Unmarshal(out, &py); err != nil {
			t.Fatal(err)
		}
		name := "full corpus"
		if natural {
			name = "natural text"
		}
		t.Logf("kimi %s: Go %.2f MB/s (%.0f tok/s), Python tiktoken %.2f MB/s (%.0f tok/s), ratio %.1fx",
			name, goMB, goTok, py.MB, py.Tok, goMB/py.MB)
	}
}
