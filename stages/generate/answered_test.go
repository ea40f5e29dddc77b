package generate

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/sglang/sim"
	"github.com/draftflow/draftflow/stages/generate/admission"
	"github.com/draftflow/draftflow/topics"
)

// TestStageAnswersSurviveLostBroker: the stage answers records and stops; the broker is lost with everything it
// held (an embedded broker dies with its process, before any sink read the generations). A stage started on a
// new broker with the same AnswersDir produces the answers it journaled without asking the server again, and
// asks for what it never answered.
func TestStageAnswersSurviveLostBroker(t *testing.T) {
	_, rec, url := startSim(t, sim.Config{MaxTotalTokens: 20000, ContextLength: 4096, TimeScale: 500, OutputLenMean: 30, Seed: 3})
	dir := t.TempDir()
	records := func(from, to int) []*topics.Tokenized {
		var out []*topics.Tokenized
		for i := from; i < to; i++ {
			out = append(out, &topics.Tokenized{ID: fmt.Sprintf("conv-%d", i), Model: "m", TokenizerHash: "h",
				Sampling: topics.Sampling{MaxNewTokens: 64}, InputIDs: prompt(40+i, i)})
		}
		return out
	}
	round := func(recs []*topics.Tokenized) (map[string][]uint32, int) {
		kc := startKafka(t)
		cl := kafkatest.Client(t, kc)
		ctx := context.Background()
		if err := cl.Admin().EnsureTopics(ctx, topics.Retained()...); err != nil {
			t.Fatal(err)
		}
		p := cl.NewProducer(topics.TopicTokenized, kafka.ProducerConfig{})
		for _, r := range recs {
			if err := p.SendSync(ctx, r.ID, kafkatest.Encode(t, r)); err != nil {
				t.Fatal(err)
			}
		}
		_ = p.Close()
		rec.mu.Lock()
		before := rec.calls
		rec.mu.Unlock()
		stop := runStage(t, Config{Client: cl, AnswersDir: dir, Config: admission.Config{Endpoints: []string{url}, Policy: PolicyFixed,
			Concurrency: 4, HealthInterval: 100 * time.Millisecond, Registerer: prometheus.NewRegistry(), Logger: testLogger(t)}})
		gens := kafkatest.Collect[topics.Generation](t, kc, topics.TopicGenerated, len(recs), 60*time.Second)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		out := map[string][]uint32{}
		for _, g := range gens {
			out[g.ID] = g.OutputIDs
		}
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return out, rec.calls - before
	}
	first, calls1 := round(records(0, 10))
	if calls1 != 10 || len(first) != 10 {
		t.Fatalf("first round: %d requests, %d generations; want 10 and 10", calls1, len(first))
	}
	second, calls2 := round(records(0, 13))
	if calls2 != 3 {
		t.Fatalf("second round asked the server %d times; want 3 (the records the first never answered)", calls2)
	}
	for id, ids := range first {
		if !slices.Equal(second[id], ids) {
			t.Errorf("%s: the journaled answer differs from the first round's", id)
		}
	}
	if len(second) != 13 {
		t.Fatalf("second round: %d generations, want 13", len(second))
	}
}
