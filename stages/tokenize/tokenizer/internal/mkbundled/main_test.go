package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestBundledUpToDate regenerates the bundled model and compares it with the committed files, so
// the generator and its output cannot drift apart (and the output is deterministic).
func TestBundledUpToDate(t *testing.T) {
	dir := t.TempDir()
	if err := run(dir); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json", "config.json"} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join("..", "..", "bundled", "model", name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("bundled/model/%s is stale: run go run ./stages/tokenize/tokenizer/internal/mkbundled", name)
		}
	}
}

func TestTrainMergesInRange(t *testing.T) {
	words, err := pretokenize(trainingText())
	if err != nil {
		t.Fatal(err)
	}
	vocab, merges := train(words, maxMerges)
	if len(merges) < 2000 || len(merges) > 4000 || len(vocab) != 256+len(merges) {
		t.Errorf("vocab %d, merges %d: want 2000-4000 merges, one new token each", len(vocab), len(merges))
	}
}
