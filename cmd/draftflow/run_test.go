package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/draftflow/draftflow/internal/testutil"
	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/offline"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"

	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/pipeline"
	"github.com/draftflow/draftflow/stages/ingest"
	"github.com/draftflow/draftflow/stages/tokenize"
	"github.com/draftflow/draftflow/topics"
)

const sampleFile = "../../testdata/sample/conversations.jsonl"

type shardRow struct {
	id        string
	inputIDs  []int32
	lossMask  []uint8
	promptLen int
}

// eachShardBatch calls fn for every record batch of every shard under dir (one directory per run), read with
// Arrow's Parquet reader; col returns a named column, failing the test if it is missing.
func eachShardBatch(t *testing.T, dir string, fn func(rec arrow.Record, col func(string) arrow.Array)) {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(dir, "*", "*.parquet"))
	if len(paths) == 0 {
		t.Fatalf("no shards under %s", dir)
	}
	for _, p := range paths {
		testutil.ReadParquet(t, p, fn)
	}
}

// readShards reads every row of every shard under dir.
func readShards(t *testing.T, dir string) []shardRow {
	t.Helper()
	var rows []shardRow
	eachShardBatch(t, dir, func(rec arrow.Record, col func(string) arrow.Array) {
		ids := col("id").(*array.String)
		inp := col("input_ids").(*array.List)
		mask := col("loss_mask").(*array.List)
		plen := col("prompt_len")
		inVals := inp.ListValues().(*array.Int32)
		maskVals := mask.ListValues().(*array.Uint8)
		for i := 0; i < int(rec.NumRows()); i++ {
			r := shardRow{id: ids.Value(i)}
			s, e := inp.ValueOffsets(i)
			r.inputIDs = append([]int32(nil), inVals.Int32Values()[s:e]...)
			s, e = mask.ValueOffsets(i)
			r.lossMask = append([]uint8(nil), maskVals.Uint8Values()[s:e]...)
			switch c := plen.(type) {
			case *array.Int32:
				r.promptLen = int(c.Value(i))
			case *array.Int64:
				r.promptLen = int(c.Value(i))
			default:
				t.Fatalf("prompt_len is %T", plen)
			}
			rows = append(rows, r)
		}
	})
	return rows
}

// readRejections reads the rejected topic until want records arrived or the deadline passed.
func readRejections(t *testing.T, kc kafka.Config, want int) []topics.Rejection {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	var out []topics.Rejection
	c := kafkatest.Client(t, kc).NewConsumer(topics.TopicRejected, kafka.ConsumerConfig{Group: "test-reader"})
	c.Run(ctx, func(d *kafka.Delivery) {
		var r topics.Rejection
		if err := topics.Unmarshal(d.Message.Value, &r); err != nil {
			t.Error(err)
		}
		mu.Lock()
		out = append(out, r)
		if len(out) >= want {
			cancel()
		}
		mu.Unlock()
		d.Done()
	})
	return out
}

// The acceptance test of the skeleton: the bundled sample through every stage, every valid id exactly once,
// prompts token-exact, masks consistent, every malformed line dead-lettered with file and line.
func TestPipelineEndToEndSample(t *testing.T) {
	var expected struct {
		Valid          int     `json:"valid"`
		MalformedLines []int64 `json:"malformed_lines"`
	}
	b, err := os.ReadFile("../../testdata/sample/expected.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &expected); err != nil {
		t.Fatal(err)
	}
	kc := kafkatest.Config(t, 4)
	out := t.TempDir()
	rc := simRun(kc, out, sampleFile)
	rc.Ingest.Defaults.MaxNewTokens = 2048
	rc.Ingest.Turns = ingest.TurnsLast // one row per id, checked token by token below (TestPipelineMultiTurn: every turn)
	rc.Sim.OutputLenMean = 300
	rc.Timeout = 5 * time.Minute
	res, err := pipeline.Run(context.Background(), rc)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Missing) != 0 {
		t.Fatalf("%d prompts lost: %v", len(res.Missing), res.Missing)
	}
	if res.Prompts != expected.Valid || res.IngestRejected != len(expected.MalformedLines) {
		t.Fatalf("run reported %d valid prompts and %d rejected lines, want %d and %d",
			res.Prompts, res.IngestRejected, expected.Valid, len(expected.MalformedLines))
	}

	// What the tokenize stage must have produced for each prompt.
	model, cleanup, err := tokenize.LoadModelOrBundled("")
	defer cleanup()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]uint32{}
	err = ingest.ReadFile(sampleFile, func(p topics.Prompt, perr error, src topics.Source, raw []byte) error {
		if perr != nil {
			return nil
		}
		p = ingest.LastTurn(p)
		p.Dataset = "conversations"
		p.Sampling.MaxNewTokens = 2048
		ids, err := model.Encode(&p)
		if err != nil {
			t.Errorf("line %d: %v", src.Line, err)
		}
		want[p.ID] = ids
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != expected.Valid {
		t.Fatalf("sample has %d distinct valid ids, expected.json says %d", len(want), expected.Valid)
	}

	rows := readShards(t, out)
	seen := map[string]int{}
	for _, r := range rows {
		seen[r.id]++
		prompt, ok := want[r.id]
		if !ok {
			t.Errorf("shard row %q is not a sample id", r.id)
			continue
		}
		if r.promptLen != len(prompt) {
			t.Errorf("%s: prompt_len %d, tokenized prompt has %d ids", r.id, r.promptLen, len(prompt))
			continue
		}
		for i, id := range prompt {
			if r.inputIDs[i] != int32(id) {
				t.Errorf("%s: input_ids[%d] = %d, tokenizer gives %d", r.id, i, r.inputIDs[i], id)
				break
			}
		}
		if len(r.lossMask) != len(r.inputIDs) || len(r.inputIDs) <= r.promptLen {
			t.Errorf("%s: %d ids, %d mask values, prompt_len %d", r.id, len(r.inputIDs), len(r.lossMask), r.promptLen)
			continue
		}
		for i, m := range r.lossMask {
			if (i < r.promptLen && m != 0) || (i >= r.promptLen && m != 1) {
				t.Errorf("%s: loss_mask[%d] = %d with prompt_len %d", r.id, i, m, r.promptLen)
				break
			}
		}
	}
	for id := range want {
		if seen[id] != 1 {
			t.Errorf("id %s is in the shards %d times", id, seen[id])
		}
	}

	rej := readRejections(t, kc, len(expected.MalformedLines))
	var lines []int64
	for _, r := range rej {
		if r.Stage != "ingest" || r.Source.File != sampleFile || r.Reason == "" {
			t.Errorf("unexpected rejection %+v", r)
		}
		lines = append(lines, r.Source.Line)
	}
	sort.Slice(lines, func(i, j int) bool { return lines[i] < lines[j] })
	if len(lines) != len(expected.MalformedLines) {
		t.Fatalf("rejected lines %v, want %v", lines, expected.MalformedLines)
	}
	for i := range lines {
		if lines[i] != expected.MalformedLines[i] {
			t.Fatalf("rejected lines %v, want %v", lines, expected.MalformedLines)
		}
	}

	// inspect agrees, and a second run on the same output adds nothing.
	sum, err := offline.Inspect(context.Background(), out, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Rows != int64(expected.Valid) {
		t.Fatalf("inspect counts %d rows, want %d", sum.Rows, expected.Valid)
	}
	again, err := pipeline.Run(context.Background(), rc)
	if err != nil {
		t.Fatal(err)
	}
	if again.Written != 0 || again.AlreadyPresent != expected.Valid || len(again.Missing) != 0 {
		t.Fatalf("re-run: written %d, already present %d, missing %d", again.Written, again.AlreadyPresent, len(again.Missing))
	}
	if rows2 := readShards(t, out); len(rows2) != len(rows) {
		t.Fatalf("re-run changed the shards: %d rows, was %d", len(rows2), len(rows))
	}
}

// simRun is the pipeline.Config most pipeline tests start from: the broker kc, the shards in out, the inputs, the
// simulated server answering at once. A test sets what it varies (its timeout among them) on the result.
func simRun(kc kafka.Config, out string, inputs ...string) pipeline.Config {
	var rc pipeline.Config
	rc.Kafka = kc
	rc.Ingest.Inputs = inputs
	rc.Sink.Dir = out
	rc.Sim.Instant = true
	return rc
}
