package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/pipeline"
)

// A run counts only the rejections of its own prompts made during it: a second run on the same broker and
// namespace must not take the first run's dead letters for its own. The first run rejects "long" (it does not
// fit a small context); the second has room for it, and must wait until it is written (its generation is
// held back long enough for the first run's dead letter to be read, if it were).
func TestRunIgnoresEarlierRunsRejections(t *testing.T) {
	kc := kafkatest.Config(t, 2)
	dir := t.TempDir()
	write := func(name string, lines ...string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	short := `{"id": "short", "messages": [{"role": "user", "content": "hi"}]}`
	long := fmt.Sprintf(`{"id": "long", "messages": [{"role": "user", "content": %q}]}`,
		strings.Repeat("tell me about the weather in every city you know ", 40))
	run := func(input, out string, contextLength int, latency time.Duration) *pipeline.Result {
		t.Helper()
		rc := simRun(kc, out, input)
		rc.Ingest.Defaults.MaxNewTokens = 32
		rc.Tokenize.ContextLength = contextLength
		rc.Sim.OutputLenMean = 300
		rc.Sim.Faults.AddedLatency = latency
		rc.Timeout = 2 * time.Minute
		res, err := pipeline.Run(context.Background(), rc)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	first := run(write("first.jsonl", short, long), filepath.Join(dir, "out1"), 128, 0)
	if first.Prompts != 2 || first.Written != 1 || first.PipelineRejected != 1 || len(first.Missing) != 0 {
		t.Fatalf("first run: %d prompts, %d written, %d rejected, missing %v; want 2, 1, 1", first.Prompts,
			first.Written, first.PipelineRejected, first.Missing)
	}
	second := run(write("second.jsonl", long), filepath.Join(dir, "out2"), 0, 5*time.Second)
	if second.Prompts != 1 || second.Written != 1 || second.PipelineRejected != 0 || len(second.Missing) != 0 {
		t.Fatalf("second run: %d prompts, %d written, %d rejected, missing %v; want 1, 1, 0 (the first run's "+
			"rejection counted again?)", second.Prompts, second.Written, second.PipelineRejected, second.Missing)
	}
	// Neither run leaves its dead-letter reader's group behind.
	groups, err := kafkatest.Client(t, kc).Admin().Groups(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		if strings.HasPrefix(g, kc.Topic("draftflow-run-")) {
			t.Errorf("group %s of a finished run is still on the broker", g)
		}
	}
}
