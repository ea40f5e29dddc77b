package generate

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/draftflow/draftflow/internal/testutil"
	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/sglang/sim"
	"github.com/draftflow/draftflow/stages/generate/admission"
	"github.com/draftflow/draftflow/topics"
)

// writeShards writes records to the shards topic as a sink would.
func writeShards(t *testing.T, kc kafka.Config, recs ...any) {
	cl := kafkatest.Client(t, kc)
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.Admin().EnsureCompactedTopic(ctx, topics.TopicShards); err != nil {
		t.Fatal(err)
	}
	p := cl.NewProducer(topics.TopicShards, kafka.ProducerConfig{})
	defer p.Close()
	for _, r := range recs {
		key := topics.ShardsEpochKey
		if st, ok := r.(*topics.ShardedTurn); ok {
			key = topics.ShardKey(st.Run, st.ID, st.Turn)
		}
		if err := p.SendSync(ctx, key, kafkatest.Encode(t, r)); err != nil {
			t.Fatal(err)
		}
	}
}

func sendTokenized(t *testing.T, kc kafka.Config, recs []*topics.Tokenized) {
	t.Helper()
	p := kafkatest.Client(t, kc).NewProducer(topics.TopicTokenized, kafka.ProducerConfig{})
	defer p.Close()
	for _, r := range recs {
		if err := p.SendSync(context.Background(), r.ID, kafkatest.Encode(t, r)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStageSkipsTurnsInShards: a turn the shards topic says the sink's shards hold is not sent to a server;
// the stage writes an in-shards record carrying the thread instead. Turns of an older epoch (another sink
// directory), of another run (other sampling) or not listed are generated. Before any sink has said what its
// shards hold, the stage waits (ShardsWait) rather than generating what they may hold.
func TestStageSkipsTurnsInShards(t *testing.T) {
	kc := startKafka(t)
	if err := kafkatest.Client(t, kc).Admin().EnsureTopics(context.Background(), topics.Retained()...); err != nil {
		t.Fatal(err)
	}
	_, rec, url := startSim(t, sim.Config{MaxTotalTokens: 20000, ContextLength: 4096, Instant: true, OutputLenMean: 20, Seed: 7})
	sampling := topics.Sampling{MaxNewTokens: 64}
	run := topics.RunFingerprint("m", "h", sampling)
	const n = 20
	var recs []*topics.Tokenized
	for i := range n {
		r := &topics.Tokenized{ID: fmt.Sprintf("conv-%d", i), Dataset: "ds", Turn: i % 2, Model: "m", TokenizerHash: "h",
			Sampling: sampling, InputIDs: prompt(50+i, i)}
		if i == 3 {
			r.Thread = &topics.Thread{Messages: []topics.Message{{Role: "user", Content: "q"}},
				Rest: []topics.Message{{Role: "assistant", Content: "a"}, {Role: "user", Content: "q2"}}}
		}
		recs = append(recs, r)
	}
	old := &topics.ShardsEpoch{Epoch: "old", State: topics.EpochComplete, Dir: "dir-a"}
	seeding := &topics.ShardsEpoch{Epoch: "new", State: topics.EpochSeeding, Dir: "dir-b"}
	complete := *seeding
	complete.State, complete.Turns = topics.EpochComplete, 10
	writeShards(t, kc, old, &topics.ShardedTurn{Epoch: "old", Run: run, ID: "conv-10", Turn: 0}, seeding)
	inShards := map[string]bool{}
	var turns []any
	for i := range 10 {
		turns = append(turns, &topics.ShardedTurn{Epoch: "new", Run: run, ID: recs[i].ID, Turn: recs[i].Turn})
		inShards[recs[i].ID] = true
	}
	// conv-11 is in the shards of another run (other sampling): it is generated.
	turns = append(turns, &topics.ShardedTurn{Epoch: "new", Run: topics.RunFingerprint("m", "h", topics.Sampling{MaxNewTokens: 65}),
		ID: "conv-11", Turn: 1})
	writeShards(t, kc, turns...)
	sendTokenized(t, kc, recs)

	reg := prometheus.NewRegistry()
	var logs testutil.Buffer
	log := slog.New(slog.NewTextHandler(io.MultiWriter(&logs, testWriter{t}), nil))
	stop := runStage(t, Config{Client: kafkatest.Client(t, kc), ShardsWait: time.Minute, Config: admission.Config{Endpoints: []string{url},
		Policy: PolicyFixed, Concurrency: 4, HealthInterval: 200 * time.Millisecond, Registerer: reg, Logger: log}})
	// The latest epoch is seeding, from another directory than the complete one before it: once the stage has
	// read the shards topic to its end it says it waits, and sends nothing.
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), "waiting for a sink to say what its shards hold") {
		if time.Now().After(deadline) {
			t.Fatalf("the stage never said it waits for the shards:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	rec.mu.Lock()
	early := rec.calls
	rec.mu.Unlock()
	if early != 0 {
		t.Fatalf("%d requests sent before a sink said what its shards hold", early)
	}
	writeShards(t, kc, &complete)

	gens := kafkatest.Collect[topics.Generation](t, kc, topics.TopicGenerated, n, 60*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	skipped := 0
	for _, g := range gens {
		if inShards[g.ID] {
			skipped++
			if g.InShards != "new" || len(g.PromptIDs) != 0 || len(g.OutputIDs) != 0 || g.Model != "m" || g.TokenizerHash != "h" ||
				g.Sampling.MaxNewTokens != 64 || g.Turn != recs[idNum(g.ID)].Turn {
				t.Errorf("%s: in-shards record %+v", g.ID, g)
			}
			if g.ID == "conv-3" && (g.Thread == nil || len(g.Thread.Rest) != 2) {
				t.Errorf("conv-3: the in-shards record lost the thread: %+v", g.Thread)
			}
			continue
		}
		if g.InShards != "" || len(g.OutputIDs) == 0 {
			t.Errorf("%s: not in the shards, but got %+v", g.ID, g)
		}
	}
	rec.mu.Lock()
	calls := rec.calls
	rec.mu.Unlock()
	if skipped != 10 || calls != n-10 {
		t.Fatalf("%d in-shards records and %d requests, want 10 and %d", skipped, calls, n-10)
	}
	if got := counterValue(t, reg, "draftflow_records_total", "in_shards"); got != 10 {
		t.Fatalf("draftflow_records_total{stage=generate,result=in_shards} = %v, want 10", got)
	}
}

func idNum(id string) int {
	var n int
	fmt.Sscanf(id, "conv-%d", &n)
	return n
}

// counterValue returns the value of a CounterVec series of reg by its one label value.
func counterValue(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == label {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{%s}", name, label)
	return 0
}
