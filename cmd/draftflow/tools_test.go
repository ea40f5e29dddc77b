package main

import (
	"bytes"
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
	"github.com/draftflow/draftflow/stages/ingest"
	"github.com/draftflow/draftflow/stages/tokenize"
	"github.com/draftflow/draftflow/stages/tokenize/tokenizer/bundled"
	"github.com/draftflow/draftflow/topics"
)

func TestEncodeStream(t *testing.T) {
	m, cleanup, err := tokenize.LoadModelOrBundled("")
	defer cleanup()
	if err != nil {
		t.Fatal(err)
	}
	in := `{"id": "a", "messages": [{"role": "user", "content": "Hello there"}]}
{"conversations": [{"from": "human", "value": "你好 🚀"}, {"from": "gpt", "value": "dropped"}]}

{"id": 7, "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "x  123"}]}
`
	var out bytes.Buffer
	if err := encodeStream(strings.NewReader(in), &out, m, map[string]any{"enable_thinking": false}, false, 0, ingest.TurnsAll); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d output lines for 3 conversations:\n%s", len(lines), out.String())
	}
	want := []*topics.Prompt{
		{Messages: []topics.Message{{Role: "user", Content: "Hello there"}}},
		{Messages: []topics.Message{{Role: "user", Content: "你好 🚀"}}},
		{Messages: []topics.Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "x  123"}}},
	}
	for i, l := range lines {
		var row struct {
			ID       string   `json:"id"`
			InputIDs []uint32 `json:"input_ids"`
		}
		if err := json.Unmarshal([]byte(l), &row); err != nil {
			t.Fatal(err)
		}
		want[i].Sampling.TemplateKwargs = map[string]any{"enable_thinking": false}
		ids, err := m.Encode(want[i])
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(ids) != fmt.Sprint(row.InputIDs) {
			t.Errorf("line %d: %v, want %v", i+1, row.InputIDs, ids)
		}
	}
	if !strings.HasPrefix(lines[0], `{"id":"a",`) || !strings.HasPrefix(lines[2], `{"id":"7",`) {
		t.Errorf("ids not carried: %q, %q", lines[0], lines[2])
	}

	out.Reset()
	if err := encodeStream(strings.NewReader(`{"text": "plain  text 42"}`+"\n"), &out, m, nil, true, 0, ingest.TurnsAll); err != nil {
		t.Fatal(err)
	}
	var textRow struct {
		InputIDs []uint32 `json:"input_ids"`
	}
	if err := json.Unmarshal(out.Bytes(), &textRow); err != nil {
		t.Fatal(err)
	}
	if want := m.Tokenizer.Encode("plain  text 42"); len(want) == 0 || fmt.Sprint(textRow.InputIDs) != fmt.Sprint(want) {
		t.Errorf("text mode gave %v, want %v", textRow.InputIDs, want)
	}

	err = encodeStream(strings.NewReader(in+`{"messages": [{"role": "wizard", "content": "x"}]}`+"\n"), &out, m, nil, false, 0, ingest.TurnsAll)
	if err == nil || !strings.Contains(err.Error(), "stdin line 5") || !strings.Contains(err.Error(), "wizard") {
		t.Fatalf("bad line error %v does not name line 5 and the reason", err)
	}
}

// TestEncodeContextLength: encode applies the stage's too-long check where the context window is known; a
// model directory without a usable context length still encodes (the ids need none).
func TestEncodeContextLength(t *testing.T) {
	m, cleanup, err := tokenize.LoadModelOrBundled("")
	defer cleanup()
	if err != nil {
		t.Fatal(err)
	}
	in := `{"id": "a", "messages": [{"role": "user", "content": "Hello there"}]}` + "\n"
	var out bytes.Buffer
	err = encodeStream(strings.NewReader(in), &out, m, nil, false, 5, ingest.TurnsAll)
	if err == nil || !strings.Contains(err.Error(), "stdin line 1") || !strings.Contains(err.Error(), "does not fit") {
		t.Fatalf("a conversation over the context window: %v", err)
	}

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
