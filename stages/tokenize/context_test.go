package tokenize

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/draftflow/draftflow/stages/tokenize/tokenizer/bundled"
)

// bundledDir writes the bundled model to a temporary directory, then applies edit to it.
func bundledDir(t *testing.T, edit func(dir string)) string {
	t.Helper()
	dir := t.TempDir()
	if err := bundled.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	edit(dir)
	return dir
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// setModelMaxLength rewrites tokenizer_config.json's model_max_length (raw JSON number text).
func setModelMaxLength(t *testing.T, dir, raw string) {
	t.Helper()
	path := filepath.Join(dir, "tokenizer_config.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, `"model_max_length"`)
	if i < 0 {
		t.Fatal("bundled tokenizer_config.json has no model_max_length")
	}
	j := i + strings.IndexAny(s[i:], ",}")
	writeFile(t, path, s[:i]+`"model_max_length": `+raw+s[j:])
}

func TestContextLengthSources(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(t *testing.T, dir string)
		want int
	}{
		{"config.json", func(t *testing.T, dir string) {}, 32768},
		{"max_seq_len", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "config.json"), `{"max_seq_len": 4096}`)
		}, 4096},
		{"text_config", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "config.json"), `{"text_config": {"max_position_embeddings": 8192}}`)
		}, 8192},
		{"model_max_length", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "config.json"))
			setModelMaxLength(t, dir, "131072")
		}, 131072},
		{"placeholder", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "config.json"))
			setModelMaxLength(t, dir, "1000000000000000019884624838656")
		}, 0},
		{"config.json without a length", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "config.json"), `{"model_type": "x"}`)
			setModelMaxLength(t, dir, "1e30")
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := bundledDir(t, func(dir string) { tc.edit(t, dir) })
			m, err := LoadModel(dir)
			if err != nil {
				t.Fatal(err)
			}
			if m.ContextLength != tc.want {
				t.Fatalf("ContextLength %d, want %d", m.ContextLength, tc.want)
			}
			got, err := m.ContextWindow(0)
			if tc.want == 0 {
				if err == nil || !strings.Contains(err.Error(), "--context-length") {
					t.Fatalf("ContextWindow(0) = %d, %v; want an error naming --context-length", got, err)
				}
			} else if err != nil || got != tc.want {
				t.Fatalf("ContextWindow(0) = %d, %v; want %d", got, err, tc.want)
			}
			if got, err := m.ContextWindow(2048); err != nil || got != 2048 {
				t.Fatalf("ContextWindow(2048) = %d, %v", got, err)
			}
			if _, err := m.ContextWindow(-1); err == nil {
				t.Fatal("ContextWindow(-1) accepted")
			}
		})
	}
}

func TestMalformedConfigIsAnError(t *testing.T) {
	for name, content := range map[string]string{
		"not JSON":      `{"max_position_embeddings": 32768,`,
		"wrong type":    `{"max_position_embeddings": "32768"}`,
		"not an object": `[32768]`,
	} {
		t.Run(name, func(t *testing.T) {
			dir := bundledDir(t, func(dir string) { writeFile(t, filepath.Join(dir, "config.json"), content) })
			if _, err := LoadModel(dir); err == nil || !strings.Contains(err.Error(), "config.json") {
				t.Fatalf("LoadModel with a malformed config.json: %v", err)
			}
		})
	}
}

// TestStageNeedsContextLength: a model without a usable context length stops the stage at start,
// naming the flag, unless the flag gives one.
func TestStageNeedsContextLength(t *testing.T) {
	dir := bundledDir(t, func(dir string) {
		os.Remove(filepath.Join(dir, "config.json"))
		setModelMaxLength(t, dir, "1e30")
	})
	m, err := LoadModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	err = Run(context.Background(), Config{Model: m})
	if err == nil || !strings.Contains(err.Error(), "--context-length") {
		t.Fatalf("Run without a context length: %v", err)
	}
}
