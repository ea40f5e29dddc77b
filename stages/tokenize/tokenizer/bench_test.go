package tokenizer

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/draftflow/draftflow/stages/tokenize/tokenizer/bundled"
)

// benchTexts is the benchmark input: every corpus line plus every corpus file whole. With
// natural set, the pathological long_words.txt (multi-kilobyte single words, which no cache helps
// and which dominate the corpus by size) is left out.
func benchTexts(t testing.TB, natural bool) ([]string, int) {
	var texts []string
	for _, s := range corpusTexts(t) {
		if natural && (strings.Contains(s, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa") || len(s) >= 200 && !strings.Contains(s[:200], " ")) {
			continue
		}
		texts = append(texts, s)
	}
	n := 0
	for _, s := range texts {
		n += len(s)
	}
	return texts, n
}

func benchTokenizer(b testing.TB, name string) (*Tokenizer, string) {
	if name == "bundled" {
		data, err := bundled.ReadFile("tokenizer.json")
		if err != nil {
			b.Fatal(err)
		}
		path := filepath.Join(b.TempDir(), "tokenizer.json")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			b.Fatal(err)
		}
		tk, err := Parse(data)
		if err != nil {
			b.Fatal(err)
		}
		return tk, path
	}
	path := fetchTokenizer(b, name)
	tk, err := Load(path)
	if err != nil {
		b.Fatal(err)
	}
	return tk, path
}

// encodeAll encodes every text once and returns the number of tokens.
func encodeAll(tk *Tokenizer, texts []string, buf []uint32) int {
	n := 0
	for _, s := range texts {
		buf = tk.AppendEncode(buf[:0], s)
		n += len(buf)
	}
	return n
}

var benchModels = []string{"bundled", "llama3_1", "qwen3", "deepseek_v3", "gptoss", "llama2", "gemma3"}

// BenchmarkEncode measures single-goroutine encode throughput on the corpus (MB/s via SetBytes,
// tokens/s as a custom metric).
func BenchmarkEncode(b *testing.B) {
	for _, name := range benchModels {
		b.Run(name, func(b *testing.B) {
			tk, _ := benchTokenizer(b, name)
			texts, nbytes := benchTexts(b, false)
			buf := make([]uint32, 0, 1<<16)
			tokens := encodeAll(tk, texts, buf)
			b.SetBytes(int64(nbytes))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				encodeAll(tk, texts, buf)
			}
			b.ReportMetric(float64(tokens)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// BenchmarkEncodeParallel measures throughput with all cores encoding concurrently.
func BenchmarkEncodeParallel(b *testing.B) {
	tk, _ := benchTokenizer(b, "llama3_1")
	texts, nbytes := benchTexts(b, false)
	b.SetBytes(int64(nbytes))
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]uint32, 0, 1<<16)
		for pb.Next() {
			encodeAll(tk, texts, buf)
		}
	})
}

type pyBench struct {
	MBPerS     float64 `json:"mb_per_s"`
	TokensPerS float64 `json:"tokens_per_s"`
	Tokens     int     `json:"tokens"`
}

// TestBenchVsPython prints Go and Python single-thread throughput side by side, measured in the
// same run on the same texts. It only runs with DRAFTFLOW_BENCH=1 (see bench.sh); it asserts
// nothing about speed, only that both sides produced the same number of tokens.
func TestBenchVsPython(t *testing.T) {
	if os.Getenv("DRAFTFLOW_BENCH") == "" {
		t.Skip("set DRAFTFLOW_BENCH=1 (bench.sh) to run the side-by-side benchmark")
	}
	requirePython(t)
	models := benchModels
	if m := os.Getenv("DRAFTFLOW_BENCH_MODELS"); m != "" {
		models = strings.Split(m, ",")
	}
	seconds := 2.0
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	var report strings.Builder
	for _, natural := range []bool{false, true} {
		texts, nbytes := benchTexts(t, natural)
		textsPath := filepath.Join(t.TempDir(), "texts.json")
		data, _ := json.Marshal(texts)
		if err := os.WriteFile(textsPath, data, 0o644); err != nil {
			t.Fatal(err)
		}
		set := "full corpus"
		if natural {
			set = "corpus without long_words.txt"
		}
		fmt.Fprintf(&report, "\nencode throughput, single thread, %s: %d texts / %d bytes\n", set, len(texts), nbytes)
		fmt.Fprintf(&report, "%-12s %10s %12s %10s %12s %8s\n", "model", "Go MB/s", "Go tok/s", "Py MB/s", "Py tok/s", "ratio")
		for _, name := range models {
			tk, path := benchTokenizer(t, name)
			buf := make([]uint32, 0, 1<<16)
			tokens := encodeAll(tk, texts, buf) // warm the cache, as bench.py does
			rounds := 0
			start := time.Now()
			for time.Since(start) < time.Duration(seconds*float64(time.Second)) {
				encodeAll(tk, texts, buf)
				rounds++
			}
			el := time.Since(start).Seconds()
			goMB := float64(rounds*nbytes) / el / 1e6
			goTok := float64(rounds*tokens) / el
			cmd := exec.Command("python3", "testdata/bench.py", path, textsPath, fmt.Sprint(seconds))
			cmd.Env = append(os.Environ(), "RAYON_NUM_THREADS=1", "TOKENIZERS_PARALLELISM=false")
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("bench.py %s: %v", name, err)
			}
			var py pyBench
			if err := json.Unmarshal(out, &py); err != nil {
				t.Fatalf("bench.py output %q: %v", out, err)
			}
			if py.Tokens != tokens {
				t.Errorf("%s: Go produced %d tokens, Python %d", name, tokens, py.Tokens)
			}
			fmt.Fprintf(&report, "%-12s %10.2f %12.0f %10.2f %12.0f %7.2fx\n", name, goMB, goTok, py.MBPerS, py.TokensPerS, goMB/py.MBPerS)
		}
	}
	fmt.Print(report.String())
}
