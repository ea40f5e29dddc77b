package pipeline

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/stages/ingest"
	"github.com/draftflow/draftflow/topics"
)

// The synthetic dataset is deterministic, valid input for ingest, and about as long as asked.
func TestSyntheticDataset(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl")
	for _, p := range []string{a, b} {
		if err := WriteSyntheticDataset(p, 200, 60, 9); err != nil {
			t.Fatal(err)
		}
	}
	da, _ := os.ReadFile(a)
	db, _ := os.ReadFile(b)
	if !bytes.Equal(da, db) {
		t.Fatal("two datasets of the same seed differ")
	}
	var ids []string
	words := 0
	sc := bufio.NewScanner(bytes.NewReader(da))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var row struct {
			ID       string `json:"id"`
			Messages []struct {
				Role, Content string
			} `json:"messages"`
		}
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			t.Fatal(err)
		}
		if last := row.Messages[len(row.Messages)-1]; last.Role != "user" {
			t.Fatalf("%s ends with a %s message", row.ID, last.Role)
		}
		ids = append(ids, row.ID)
		for _, m := range row.Messages {
			if m.Role != "system" {
				words += len(strings.Fields(m.Content))
			}
		}
	}
	if len(ids) != 200 || ids[0] != "synth-000000" || ids[199] != "synth-000199" {
		t.Fatalf("%d conversations, first %q", len(ids), ids[0])
	}
	if mean := words / len(ids); mean < 40 || mean > 80 {
		t.Fatalf("mean conversation length %d words, asked for about 60", mean)
	}
	// ingest accepts every line.
	n := 0
	err := ingest.ReadFile(a, func(p topics.Prompt, perr error, src topics.Source, raw []byte) error {
		if perr != nil {
			t.Errorf("line %d rejected: %v", src.Line, perr)
		}
		n++
		return nil
	})
	if err != nil || n != 200 {
		t.Fatalf("ingest read %d lines: %v", n, err)
	}
}

// Run pushes every record through against the embedded broker (and the test cluster, when one is
// given), and the runs agree on what they wrote.
func TestBenchPipelineSmall(t *testing.T) {
	const records = 60
	o := Options{Records: records, Partitions: 3, PromptWords: 30, OutputTokens: 8, Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))}
	want := 1
	if kafkatest.Real() {
		o.Brokers = kafkatest.Brokers(t)
		want = 2
	}
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != want || len(rep.Summary) != want {
		t.Fatalf("%d runs and %d summaries, want %d", len(rep.Runs), len(rep.Summary), want)
	}
	for _, r := range rep.Runs {
		if r.Records != records || r.Seconds <= 0 || r.RecordsPerSecond <= 0 {
			t.Errorf("%s: %+v", r.Broker, r)
		}
		// Each row is a prompt plus exactly OutputTokens completion tokens.
		if r.Tokens <= int64(records*(o.OutputTokens+1)) || r.Tokens != rep.Runs[0].Tokens {
			t.Errorf("%s wrote %d tokens (first run: %d)", r.Broker, r.Tokens, rep.Runs[0].Tokens)
		}
	}
	if (want == 2) != (rep.Ratio > 0) {
		t.Errorf("ratio %v with %d brokers", rep.Ratio, want)
	}
	var out bytes.Buffer
	if err := rep.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "records/s") || !strings.Contains(out.String(), "embedded") {
		t.Errorf("table:\n%s", out.String())
	}
}
