package bundled

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	if err := WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		want, _ := FS.ReadFile(Dir + "/" + name)
		if !bytes.Equal(got, want) || len(got) == 0 {
			t.Fatalf("%s: written file differs from the embedded one", name)
		}
	}
}

func TestConfigs(t *testing.T) {
	var tc struct {
		ChatTemplate string `json:"chat_template"`
		BOS          string `json:"bos_token"`
		EOS          string `json:"eos_token"`
	}
	data, err := ReadFile("tokenizer_config.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &tc); err != nil {
		t.Fatal(err)
	}
	if tc.BOS != "<|begin_of_text|>" || tc.EOS != "<|im_end|>" {
		t.Fatalf("bos/eos = %q/%q", tc.BOS, tc.EOS)
	}
	for _, want := range []string{"<|im_start|>", "add_generation_prompt", "reasoning_content", "<think>", "tools", "<tool_call>"} {
		if !bytes.Contains([]byte(tc.ChatTemplate), []byte(want)) {
			t.Errorf("chat_template lacks %q", want)
		}
	}
	var cfg struct {
		MaxPos int `json:"max_position_embeddings"`
	}
	data, _ = ReadFile("config.json")
	if err := json.Unmarshal(data, &cfg); err != nil || cfg.MaxPos != 32768 {
		t.Fatalf("config.json max_position_embeddings = %d (%v)", cfg.MaxPos, err)
	}
	tj, _ := ReadFile("tokenizer.json")
	if len(tj) > 500<<10 {
		t.Fatalf("tokenizer.json is %d bytes, want < 500 KB", len(tj))
	}
}
