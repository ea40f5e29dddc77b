package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/offline"
	"github.com/draftflow/draftflow/shard"

	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/sink"
	"github.com/draftflow/draftflow/stages/tokenize/tokenizer/bundled"
	"github.com/draftflow/draftflow/topics"
)

// TestEncodeContextLength: a model directory without a usable context length still encodes (the ids need
// none).
func TestEncodeContextLength(t *testing.T) {
	dir := t.TempDir()
	if err := bundled.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "config.json")); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "tokenizer_config.json")
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte(strings.Replace(string(b), `"model_max_length": 32768`, `"model_max_length": 1e30`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	// A tokenizer-only directory: the ids need no context window, so encode prints them without the check.
	if err := cmdEncode(context.Background(), []string{"--model", dir}); err != nil {
		t.Fatalf("encode of a model without a context length: %v", err)
	}
	if err := cmdEncode(context.Background(), []string{"--model", dir, "--text"}); err != nil {
		t.Fatalf("encode --text needs no context length: %v", err)
	}
	if err := cmdEncode(context.Background(), []string{"--model", dir, "--context-length", "4096"}); err != nil {
		t.Fatalf("encode --context-length 4096: %v", err)
	}
}

// TestVocabAndExportCommands runs `draftflow vocab` and `draftflow export` on a sink directory of one run:
// vocab into the run directory with the target size from a model directory's config.json, export with
// length limits, flags after the positional arguments.
func TestVocabAndExportCommands(t *testing.T) {
	dir := t.TempDir()
	writeSampleRun(t, dir)
	runs, err := shard.RunDirs(dir)
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs %v %v", runs, err)
	}
	if err := cmdVocab(context.Background(), []string{dir, "--draft-vocab-size", "8"}); err == nil ||
		!strings.Contains(err.Error(), "--target-vocab-size") {
		t.Fatalf("vocab without a model directory or size: %v", err)
	}
	model := t.TempDir()
	os.WriteFile(filepath.Join(model, "config.json"), []byte(`{"vocab_size": 1000}`), 0o644)
	if err := cmdVocab(context.Background(), []string{dir, "--draft-vocab-size", "8", "--model", model}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{offline.D2TName, offline.T2DName, offline.TokenCountsName, offline.VocabInfoName} {
		if _, err := os.Stat(filepath.Join(runs[0], f)); err != nil {
			t.Fatal(err)
		}
	}
	var info offline.VocabInfo
	b, _ := os.ReadFile(filepath.Join(runs[0], offline.VocabInfoName))
	if err := json.Unmarshal(b, &info); err != nil || info.TargetVocabSize != 1000 || info.DraftVocabSize != 8 || info.Source != "sink" {
		t.Fatalf("vocab.json %+v %v", info, err)
	}
	// vocab.json and the maps are not shards: the run still inspects clean.
	if _, err := offline.Inspect(context.Background(), dir, nil); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "rows.jsonl")
	if err := cmdExport(context.Background(), []string{dir, out, "--max-length", "6", "--overlong", "drop"}); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(out)
	if n := strings.Count(string(data), "\n"); n != 1 {
		t.Fatalf("%d rows exported, want the 1 of at most 6 tokens", n)
	}
	if err := cmdExport(context.Background(), []string{dir, out, "--overlong", "wrap"}); err == nil {
		t.Fatal("bad --overlong accepted")
	}
}

// writeSampleRun writes a run of three rows (lengths 5, 8 and 12) to dir through a sink on an embedded broker.
func writeSampleRun(t *testing.T, dir string) {
	t.Helper()
	kc := kafkatest.Config(t, 1)
	kcl := kafkatest.Client(t, kc)
	p := kcl.NewProducer(topics.TopicGenerated, kafka.ProducerConfig{})
	for i, n := range []int{5, 8, 12} {
		g := &topics.Generation{ID: fmt.Sprintf("c%d", i), Model: "draftflow-sample-bpe", TokenizerHash: "h",
			Meta: topics.GenerationMeta{FinishReason: "stop"}}
		for j := 0; j < n; j++ {
			if j < 3 {
				g.PromptIDs = append(g.PromptIDs, uint32(100+j))
			} else {
				g.OutputIDs = append(g.OutputIDs, uint32(j))
			}
		}
		if err := p.Send(context.Background(), g.ID, kafkatest.Encode(t, g), func(error) {}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var mu sync.Mutex
	durable := 0
	all := make(chan struct{})
	go func() {
		_, err := sink.Run(ctx, sink.Config{Client: kcl, Dir: dir, IdleFlush: 100 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), OnDurable: func(ids []string) {
				mu.Lock()
				defer mu.Unlock()
				if durable += len(ids); durable == 3 {
					close(all)
				}
			}})
		done <- err
	}()
	select {
	case <-all:
	case err := <-done:
		t.Fatalf("sink stopped: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("rows not durable")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestRunNeedsContextLength: `draftflow run` with a model directory that gives no usable context
// length stops before any stage starts and names --context-length.
func TestRunNeedsContextLength(t *testing.T) {
	dir := t.TempDir()
	if err := bundled.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type": "sample"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "tokenizer_config.json")
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte(strings.Replace(string(b), `"model_max_length": 32768`, `"model_max_length": 1e30`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	input := filepath.Join(t.TempDir(), "in.jsonl")
	if err := os.WriteFile(input, []byte(`{"messages": [{"role": "user", "content": "hi"}]}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err = cmdRun(context.Background(), []string{"--input", input, "--model", dir, "--out", t.TempDir(), "--timeout", "1m"})
	if err == nil || !strings.Contains(err.Error(), "--context-length") {
		t.Fatalf("run of a model without a context length: %v", err)
	}
}
