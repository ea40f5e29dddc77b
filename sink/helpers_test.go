package sink

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/offline"
	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/shard/shardtest"
	"github.com/draftflow/draftflow/topics"
)

func quietLogger() *slog.Logger {
	if os.Getenv("DRAFTFLOW_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func mkGens(from, to int, temp float64) []*topics.Generation {
	var out []*topics.Generation
	for i := from; i < to; i++ {
		out = append(out, shardtest.Generation(i, temp))
	}
	return out
}

// produce writes values to the generated topic, keyed, and waits for every ack.
func produce(t testing.TB, kc kafka.Config, keys []string, values [][]byte) {
	t.Helper()
	recs := make([]kafkatest.Record, len(keys))
	for i := range keys {
		recs[i] = kafkatest.Record{Key: keys[i], Value: values[i]}
	}
	kafkatest.Produce(t, kc, topics.TopicGenerated, recs...)
}

func produceGens(t testing.TB, kc kafka.Config, gens []*topics.Generation) {
	t.Helper()
	keys := make([]string, len(gens))
	vals := make([][]byte, len(gens))
	for i, g := range gens {
		b, err := topics.Marshal(g)
		if err != nil {
			t.Fatal(err)
		}
		keys[i], vals[i] = g.ID, b
	}
	produce(t, kc, keys, vals)
}

// sinkRun is a sink running in the background of a test.
type sinkRun struct {
	cancel context.CancelFunc
	done   chan error

	mu      sync.Mutex
	durable map[string]int
	dups    map[string]int
	result  Result // Run's, once it returned
	change  chan struct{}
}

func startSink(t testing.TB, cfg Config) *sinkRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	sr := &sinkRun{cancel: cancel, done: make(chan error, 1), durable: map[string]int{}, dups: map[string]int{}, change: make(chan struct{}, 1)}
	cfg.Logger = quietLogger()
	cfg.OnDurable = func(ids []string) {
		sr.mu.Lock()
		for _, id := range ids {
			sr.durable[id]++
		}
		sr.mu.Unlock()
		sr.poke()
	}
	cfg.OnDuplicate = func(id string) {
		sr.mu.Lock()
		sr.dups[id]++
		sr.mu.Unlock()
		sr.poke()
	}
	go func() {
		res, err := Run(ctx, cfg)
		sr.mu.Lock()
		sr.result = res
		sr.mu.Unlock()
		sr.done <- err
	}()
	t.Cleanup(func() { sr.stop(t) })
	return sr
}

func (sr *sinkRun) poke() {
	select {
	case sr.change <- struct{}{}:
	default:
	}
}

// waitFor waits until cond holds (checked under the lock) or fails the test after a minute.
func (sr *sinkRun) waitFor(t testing.TB, what string, cond func(durable, dups map[string]int) bool) {
	t.Helper()
	deadline := time.After(90 * time.Second)
	for {
		sr.mu.Lock()
		ok := cond(sr.durable, sr.dups)
		nd, nu := len(sr.durable), len(sr.dups)
		sr.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-sr.change:
		case <-time.After(100 * time.Millisecond):
		case err := <-sr.done:
			sr.done <- err
			t.Fatalf("sink stopped (%v) while waiting for %s", err, what)
		case <-deadline:
			t.Fatalf("timed out waiting for %s (durable %d, duplicates %d)", what, nd, nu)
		}
	}
}

func (sr *sinkRun) stop(t testing.TB) error {
	t.Helper()
	sr.cancel()
	select {
	case err := <-sr.done:
		sr.done <- err
		return err
	case <-time.After(60 * time.Second):
		t.Fatal("sink did not stop")
		return nil
	}
}

// waitConsumed waits until group has committed every record now on the generated topic: the sink handled
// each to its end (buffered durably or written, or dropped as a duplicate, its next turn sent where one was
// due), since an offset is committed only then. It fails the test after a minute, saying how far it got.
func waitConsumed(t testing.TB, kc kafka.Config, group string) {
	t.Helper()
	ctx := context.Background()
	admin := kafkatest.Client(t, kc).Admin()
	end, err := admin.EndOffsets(ctx, topics.TopicGenerated)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		committed, err := admin.CommittedOffsets(ctx, group, topics.TopicGenerated)
		if err != nil {
			t.Fatal(err)
		}
		behind := 0
		for p, e := range end {
			if committed[p] < e {
				behind++
			}
		}
		if behind == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s has not committed the generated topic's end after a minute: committed %v, end %v", group, committed, end)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkRowsExact asserts rows hold each generation exactly once, token-exact.
func checkRowsExact(t testing.TB, rows []shard.Row, gens []*topics.Generation) {
	t.Helper()
	want := map[string]*topics.Generation{}
	for _, g := range gens {
		want[g.ID] = g
	}
	seen := map[string]int{}
	for _, r := range rows {
		seen[r.ID]++
		g := want[r.ID]
		if g == nil {
			t.Errorf("unexpected row %q", r.ID)
			continue
		}
		ids := make([]int32, 0, len(g.PromptIDs)+len(g.OutputIDs))
		for _, v := range append(slices.Clone(g.PromptIDs), g.OutputIDs...) {
			ids = append(ids, int32(v))
		}
		if !slices.Equal(r.InputIDs, ids) {
			t.Errorf("%s: input_ids differ from prompt+output", r.ID)
		}
		if int(r.PromptLen) != len(g.PromptIDs) || int(r.CompletionLen) != len(g.OutputIDs) {
			t.Errorf("%s: lengths %d/%d, want %d/%d", r.ID, r.PromptLen, r.CompletionLen, len(g.PromptIDs), len(g.OutputIDs))
		}
		if len(r.LossMask) != len(ids) {
			t.Errorf("%s: loss_mask length %d, want %d", r.ID, len(r.LossMask), len(ids))
		} else {
			for i, v := range r.LossMask {
				if want := uint8(0); i >= len(g.PromptIDs) && v != 1 || i < len(g.PromptIDs) && v != want {
					t.Errorf("%s: loss_mask[%d] = %d with prompt_len %d", r.ID, i, v, r.PromptLen)
					break
				}
			}
		}
		if r.Dataset != g.Dataset || r.FinishReason != g.Meta.FinishReason || r.Endpoint != g.Meta.Endpoint || int(r.Turn) != g.Turn {
			t.Errorf("%s: metadata columns %q %q %q %d differ", r.ID, r.Dataset, r.FinishReason, r.Endpoint, r.Turn)
		}
	}
	var missing, doubled []string
	for id := range want {
		switch seen[id] {
		case 0:
			missing = append(missing, id)
		case 1:
		default:
			doubled = append(doubled, id)
		}
	}
	sort.Strings(missing)
	sort.Strings(doubled)
	if len(missing) > 0 || len(doubled) > 0 {
		t.Fatalf("%d rows for %d generations: missing %v, more than once %v", len(rows), len(want), missing, doubled)
	}
}

// checkTokenCounts asserts that every run's generated-token counts, as the sink kept them with its shards, are
// exactly those of the rows on disk and add up to the manifest's completion-token total.
func checkTokenCounts(t testing.TB, dir string) {
	t.Helper()
	rows := shardtest.ReadRows(t, dir)
	runs, err := shard.RunDirs(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, rd := range runs {
		want := map[int32]int64{}
		for _, r := range rows[filepath.Base(rd)] {
			for _, id := range r.InputIDs[r.PromptLen:] {
				want[id]++
			}
		}
		got, err := shard.RunTokenCounts(context.Background(), rd)
		if err != nil {
			t.Fatal(err)
		}
		m, err := shard.ReadManifest(rd)
		if err != nil {
			t.Fatal(err)
		}
		var sum int64
		for _, tc := range got {
			sum += tc.Count
			if want[tc.ID] != tc.Count {
				t.Fatalf("%s: token %d counted %d times, the rows hold it %d times", filepath.Base(rd), tc.ID, tc.Count, want[tc.ID])
			}
		}
		if len(got) != len(want) || sum != m.Totals.CompletionTokens {
			t.Fatalf("%s: %d distinct ids summing to %d; rows have %d distinct, manifest %d completion tokens",
				filepath.Base(rd), len(got), sum, len(want), m.Totals.CompletionTokens)
		}
	}
}

// inspect checks the shards under dir as `draftflow inspect` does.
func inspect(dir string, w io.Writer) (offline.Summary, error) {
	return offline.Inspect(context.Background(), dir, w)
}
