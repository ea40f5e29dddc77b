package pipeline

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/stages/tokenize"
)

func TestRunModelDir(t *testing.T) {
	bm, cleanup, err := tokenize.LoadModelOrBundled("")
	defer cleanup()
	if err != nil {
		t.Fatal(err)
	}
	dirOf := func(m shard.Manifest) string {
		t.Helper()
		dir, cleanup, err := RunModelDir(&m)
		t.Cleanup(cleanup)
		if err != nil {
			t.Fatal(err)
		}
		return dir
	}
	// The bundled model, recorded as such or (before manifests recorded the path) by name and tokenizer hash:
	// a directory holding its config.json.
	for _, m := range []shard.Manifest{
		{ModelPath: shard.BundledModelPath},
		{Run: shard.RunInfo{Model: tokenize.BundledModelName, TokenizerHash: bm.Hash}},
	} {
		dir := dirOf(m)
		if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
			t.Errorf("%+v: %v", m, err)
		}
	}
	cases := []struct {
		m    shard.Manifest
		want string
	}{
		{shard.Manifest{ModelPath: "/models/qwen", Run: shard.RunInfo{Model: "qwen"}}, "/models/qwen"},
		{shard.Manifest{Run: shard.RunInfo{Model: "models/qwen"}}, "models/qwen"},
		{shard.Manifest{Run: shard.RunInfo{Model: tokenize.BundledModelName, TokenizerHash: "another"}}, tokenize.BundledModelName},
	}
	for _, c := range cases {
		if got := dirOf(c.m); got != c.want {
			t.Errorf("%+v: %q, want %q", c.m, got, c.want)
		}
	}
}
