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

// TestStageStopsLoops runs the stage against a simulator whose outputs loop half the time (a 16-token unit
// repeated to max_new_tokens): with --loop-action keep, every looping reply is stopped well short of
// max_new_tokens (under half of it: the server decodes on while the abort is on its way, more so on a loaded
// machine; the simulator runs at 30x so that slack is over a second) and written with finish_reason loop, its output ids exactly those the server's last chunk
// held, periodic from meta.loop.start; the others are written as the server finished them. With drop, the
// looping records are dead-lettered (class loop) instead.
func TestStageStopsLoops(t *testing.T) {
	const records, maxNew = 16, 4000
	for _, action := range []string{LoopKeep, LoopDrop} {
		t.Run(action, func(t *testing.T) {
			kc := startKafka(t)
			cl := kafkatest.Client(t, kc)
			s, rec, url := startSim(t, sim.Config{TimeScale: 30, OutputLenMean: 200, OutputLenDistribution: sim.DistFixed,
				LoopRate: 0.5, LoopPeriod: 16, Seed: 3})
			ctx := context.Background()
			if err := cl.Admin().EnsureTopics(ctx, topics.Retained()...); err != nil {
				t.Fatal(err)
			}
			p := cl.NewProducer(topics.TopicTokenized, kafka.ProducerConfig{})
			for i := range records {
				r := &topics.Tokenized{ID: fmt.Sprintf("loopy-%d", i), InputIDs: prompt(30, i), Sampling: topics.Sampling{MaxNewTokens: maxNew}}
				if err := p.SendSync(ctx, r.ID, kafkatest.Encode(t, r)); err != nil {
					t.Fatal(err)
				}
			}
			_ = p.Close()
			stop := runStage(t, Config{Client: cl, Loops: LoopsConfig{Action: action}, Config: admission.Config{Endpoints: []string{url},
				HealthInterval: 100 * time.Millisecond, Registerer: prometheus.NewRegistry(), Logger: testLogger(t)}})
			deadline := time.Now().Add(60 * time.Second)
			for kafkatest.Size(t, kc, topics.TopicGenerated)+kafkatest.Size(t, kc, topics.TopicRejected) < records && time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
			}
			ng, nr := kafkatest.Size(t, kc, topics.TopicGenerated), kafkatest.Size(t, kc, topics.TopicRejected)
			if ng+nr != records {
				t.Fatalf("%d generated and %d rejected, want %d records", ng, nr, records)
			}
			gens := kafkatest.Collect[topics.Generation](t, kc, topics.TopicGenerated, ng, 30*time.Second)
			var rejs []*topics.Rejection
			if nr > 0 {
				rejs = kafkatest.Collect[topics.Rejection](t, kc, topics.TopicRejected, nr, 30*time.Second)
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			loops := 0
			for _, g := range gens {
				out, ok := rec.output(admission.AttemptRID(admission.RequestID(g.ID, 0), 1))
				if !ok || !slices.Equal(out, g.OutputIDs) {
					t.Errorf("%s: output ids (%d) are not the server's (%d)", g.ID, len(g.OutputIDs), len(out))
				}
				if g.Meta.FinishReason != topics.FinishLoop {
					if g.Meta.Loop != nil || len(g.OutputIDs) != 200 {
						t.Errorf("%s: finish %s, %d ids, loop %+v", g.ID, g.Meta.FinishReason, len(g.OutputIDs), g.Meta.Loop)
					}
					continue
				}
				loops++
				l := g.Meta.Loop
				if action != LoopKeep || l == nil || l.Period != 16 || len(g.OutputIDs) >= maxNew/2 || l.Found > len(g.OutputIDs) ||
					l.Found-l.Start < 256 || l.Start > 200 {
					t.Fatalf("%s: loop %+v, %d ids", g.ID, l, len(g.OutputIDs))
				}
				for i := l.Start + l.Period; i < len(g.OutputIDs); i++ {
					if g.OutputIDs[i] != g.OutputIDs[i-l.Period] {
						t.Fatalf("%s: not periodic at %d", g.ID, i)
					}
				}
			}
			for _, r := range rejs {
				if r.Class != "loop" {
					t.Errorf("%s: rejected %s: %s", r.ID, r.Class, r.Reason)
				}
				loops++
			}
			if loops == 0 || loops == records {
				t.Fatalf("%d of %d replies looped: the simulator's rate is 0.5", loops, records)
			}
			if st := s.Stats(); st.AbortedRequests < int64(loops) {
				t.Errorf("%d loops, %d requests aborted on the server", loops, st.AbortedRequests)
			}
			t.Logf("%s: %d of %d replies stopped in a loop; %d generated, %d dead-lettered", action, loops, records, len(gens), len(rejs))
		})
	}
}
