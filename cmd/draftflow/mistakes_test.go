package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/offline"
	"github.com/draftflow/draftflow/pipeline"
	"github.com/draftflow/draftflow/sglang"
	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/stages/tokenize/tokenizer/bundled"
)

// TestRunAllRejectedSaysSo: a run whose every line is rejected ends with an error that says so (not an
// unrelated inspect error), its summary shows examples, and its rejections are in the output directory as
// JSON lines with file, line and reason.
func TestRunAllRejectedSaysSo(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(in, []byte(`{"messages": [{"role": "user", "valeu": "typo"}]}
not json
{"messages": []}
`), 0o644)
	rc := simRun(kafkatest.Config(t, 2), filepath.Join(dir, "out"), in)
	rc.Timeout = 2 * time.Minute
	res, err := pipeline.Run(context.Background(), rc)
	if err == nil || !strings.Contains(err.Error(), "every input line was rejected (3)") {
		t.Fatalf("all-rejected run: %v", err)
	}
	if res == nil {
		t.Fatal("no result to summarise")
	}
	var sum strings.Builder
	printSummary(&sum, res)
	if n := strings.Count(sum.String(), "e.g."); n != 3 || !strings.Contains(sum.String(), "bad.jsonl line 2") ||
		!strings.Contains(sum.String(), res.RejectedFile) {
		t.Errorf("summary shows %d examples, or not the file:\n%s", n, sum.String())
	}
	if res.RejectedFile != filepath.Join(rc.Sink.Dir, pipeline.RejectedFileName) {
		t.Fatalf("rejections in %q", res.RejectedFile)
	}
	lines := readRejectionFile(t, res.RejectedFile)
	if len(lines) != 3 {
		t.Fatalf("%d rejection lines, want 3", len(lines))
	}
	for i, l := range lines {
		if l.File != in || l.Line != int64(i+1) || l.Reason == "" || l.Class == "" || l.Stage != "ingest" {
			t.Errorf("line %d: %+v", i+1, l)
		}
	}
	if lines[0].Class != "no_text" {
		t.Errorf("the misspelt key rejected as %s", lines[0].Class)
	}
}

func readRejectionFile(t *testing.T, path string) []pipeline.RejectionLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []pipeline.RejectionLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l pipeline.RejectionLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, l)
	}
	// Sorted by line: partitions interleave.
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].Line < out[j-1].Line; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// TestVocabFindsTheRunsModel: `vocab` without --model finds the model a run was made with, the bundled one
// or a --model directory given by a relative path, from another working directory.
func TestVocabFindsTheRunsModel(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	os.WriteFile(in, []byte(`{"id": "a", "messages": [{"role": "user", "content": "hello there"}]}
{"id": "b", "messages": [{"role": "user", "content": "what is the weather"}]}
`), 0o644)
	modelDir := filepath.Join(dir, "models", "my-model")
	if err := bundled.WriteDir(modelDir); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, model, want string }{
		{"bundled", "", shard.BundledModelPath},
		{"dir", modelDir, modelDir},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := simRun(kafkatest.Config(t, 1), filepath.Join(t.TempDir(), "out"), in)
			rc.Ingest.Defaults.MaxNewTokens = 32
			rc.Tokenize.ModelDir = tc.model
			if tc.model != "" {
				// A relative path, as a user types it.
				wd, _ := os.Getwd()
				rel, err := filepath.Rel(wd, tc.model)
				if err != nil {
					t.Fatal(err)
				}
				rc.Tokenize.ModelDir = rel
			}
			rc.Sim.OutputLenMean = 20
			rc.Timeout = 2 * time.Minute
			if _, err := pipeline.Run(context.Background(), rc); err != nil {
				t.Fatal(err)
			}
			runs, err := shard.RunDirs(rc.Sink.Dir)
			if err != nil || len(runs) != 1 {
				t.Fatalf("runs %v %v", runs, err)
			}
			m, err := shard.ReadManifest(runs[0])
			if err != nil {
				t.Fatal(err)
			}
			if m.ModelPath != tc.want {
				t.Errorf("manifest model_path %q, want %q", m.ModelPath, tc.want)
			}
			t.Chdir(t.TempDir())
			if err := cmdVocab(context.Background(), []string{rc.Sink.Dir, "--draft-vocab-size", "16"}); err != nil {
				t.Fatalf("vocab without --model: %v", err)
			}
			if _, err := os.Stat(filepath.Join(runs[0], offline.VocabInfoName)); err != nil {
				t.Fatal(err)
			}
		})
	}
	// A manifest written before model_path existed, of the bundled model: found by its name and tokenizer.
	rc := simRun(kafkatest.Config(t, 1), filepath.Join(t.TempDir(), "out"), in)
	rc.Ingest.Defaults.MaxNewTokens = 32
	rc.Sink.ModelPath = "-" // set, so run records nothing useful; rewritten to empty below
	rc.Sim.OutputLenMean = 20
	rc.Timeout = 2 * time.Minute
	if _, err := pipeline.Run(context.Background(), rc); err != nil {
		t.Fatal(err)
	}
	runs, _ := shard.RunDirs(rc.Sink.Dir)
	mpath := filepath.Join(runs[0], shard.ManifestName)
	b, _ := os.ReadFile(mpath)
	var raw map[string]any
	json.Unmarshal(b, &raw)
	delete(raw, "model_path")
	b, _ = json.Marshal(raw)
	os.WriteFile(mpath, b, 0o644)
	if err := cmdVocab(context.Background(), []string{rc.Sink.Dir, "--draft-vocab-size", "16"}); err != nil {
		t.Fatalf("vocab of an older bundled run: %v", err)
	}
}

// A stage that fails stops the run with its error: here generate, refused by a server that wants an API key
// the run does not have (else the run would end at its timeout, with a timeout error).
func TestRunStopsOnAFailedStage(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	os.WriteFile(in, []byte(`{"messages": [{"role": "user", "content": "hi"}]}`+"\n"), 0o644)
	rc := simRun(kafkatest.Config(t, 2), filepath.Join(dir, "out"), in)
	rc.Sim.APIKey = "the-server-wants-this"
	rc.Timeout = 2 * time.Minute
	start := time.Now()
	_, err := pipeline.Run(context.Background(), rc)
	var auth *sglang.AuthError
	if !errors.As(err, &auth) || !strings.HasPrefix(err.Error(), "generate: ") {
		t.Fatalf("run against a server refusing the key: %v", err)
	}
	t.Logf("stopped after %v: %v", time.Since(start).Round(time.Millisecond), err)
}
