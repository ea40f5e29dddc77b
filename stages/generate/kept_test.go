package generate

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/sglang/sim"
	"github.com/draftflow/draftflow/stages/generate/admission"
	"github.com/draftflow/draftflow/topics"
)

// Records that bring their output are produced as they are, through the same output as generated ones and
// with the run's sampling, and never reach a server; one of an unknown origin, or without an output, is
// dead-lettered naming why.
func TestStageKeepsBroughtInOutputs(t *testing.T) {
	kc := startKafka(t)
	cl := kafkatest.Client(t, kc)
	_, rec, url := startSim(t, sim.Config{MaxTotalTokens: 20000, ContextLength: 4096, TimeScale: 200, OutputLenMean: 20, Seed: 3})
	ctx := context.Background()
	if err := cl.Admin().EnsureTopics(ctx, topics.Retained()...); err != nil {
		t.Fatal(err)
	}
	p := cl.NewProducer(topics.TopicTokenized, kafka.ProducerConfig{})
	samp := topics.Sampling{MaxNewTokens: 64}
	kept := map[string]*topics.Tokenized{}
	var sent []*topics.Tokenized
	for i, o := range []string{topics.OriginResult, topics.OriginRecord, topics.OriginDataset, topics.OriginDataset} {
		t := &topics.Tokenized{ID: fmt.Sprintf("kept-%d", i/3), Turn: i % 3, Dataset: "d", Model: "m", TokenizerHash: "h", Sampling: samp,
			Origin: o, InputIDs: prompt(30+i, i), OutputIDs: prompt(5+i, 100+i), Source: topics.Source{File: "rows.jsonl", Line: int64(i + 1)}}
		if o == topics.OriginResult {
			t.FinishReason = "length"
		}
		kept[fmt.Sprint(t.ID, "/", t.Turn)] = t
		sent = append(sent, t)
	}
	sent = append(sent,
		&topics.Tokenized{ID: "gen", Model: "m", TokenizerHash: "h", Sampling: samp, InputIDs: prompt(40, 9)},
		&topics.Tokenized{ID: "odd", Turn: 2, Model: "m", TokenizerHash: "h", Sampling: samp, Origin: "imported", InputIDs: prompt(4, 1), OutputIDs: prompt(2, 1)},
		&topics.Tokenized{ID: "hollow", Model: "m", TokenizerHash: "h", Sampling: samp, Origin: topics.OriginRecord, InputIDs: prompt(4, 1)},
	)
	for _, tk := range sent {
		if err := p.SendSync(ctx, tk.ID, kafkatest.Encode(t, tk)); err != nil {
			t.Fatal(err)
		}
	}
	_ = p.Close()
	reg := prometheus.NewRegistry()
	stop := runStage(t, Config{Client: cl, Config: admission.Config{
		Endpoints: []string{url}, Concurrency: 4, HealthInterval: 200 * time.Millisecond,
		Budget: BudgetConfig{PollInterval: 20 * time.Millisecond}, Registerer: reg, Logger: testLogger(t),
	}})
	gens := kafkatest.Collect[topics.Generation](t, kc, topics.TopicGenerated, len(kept)+1, 60*time.Second)
	rejs := kafkatest.Collect[topics.Rejection](t, kc, topics.TopicRejected, 2, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	for _, g := range gens {
		if g.ID == "gen" {
			if g.Origin != "" || g.Meta.Endpoint != url {
				t.Errorf("generated record: origin %q endpoint %q", g.Origin, g.Meta.Endpoint)
			}
			continue
		}
		in := kept[fmt.Sprint(g.ID, "/", g.Turn)]
		if in == nil {
			t.Fatalf("unexpected generation %s turn %d", g.ID, g.Turn)
		}
		wantFinish := "stop"
		if in.FinishReason != "" {
			wantFinish = in.FinishReason
		}
		if g.Origin != in.Origin || !slices.Equal(g.PromptIDs, in.InputIDs) || !slices.Equal(g.OutputIDs, in.OutputIDs) ||
			g.Meta.FinishReason != wantFinish || g.Meta.Endpoint != "" || g.StopReason != topics.StopEnd ||
			g.Sampling.MaxNewTokens != 64 || g.Sampling.Lane != DefaultLane || g.Source != in.Source {
			t.Errorf("%s turn %d: %+v", g.ID, g.Turn, g)
		}
		if _, ok := rec.output(admission.AttemptRID(admission.RequestID(g.ID, g.Turn), 1)); ok {
			t.Errorf("%s turn %d was sent to the server", g.ID, g.Turn)
		}
	}
	reasons := map[string]*topics.Rejection{}
	for _, r := range rejs {
		reasons[r.ID] = r
	}
	if r := reasons["odd"]; r == nil || r.Class != "unknown_origin" || r.Turn != 2 || r.Origin != "imported" {
		t.Errorf("rejection of an unknown origin: %+v", r)
	}
	if r := reasons["hollow"]; r == nil || r.Class != "empty_output" || !strings.Contains(r.Reason, "empty output") {
		t.Errorf("rejection of a kept row without output: %+v", r)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var keptCount float64
	for _, mf := range mfs {
		if mf.GetName() != "draftflow_records_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["stage"] == "generate" && labels["result"] == resultKept {
				keptCount = m.GetCounter().GetValue()
			}
		}
	}
	if keptCount != float64(len(kept)) {
		t.Errorf("draftflow_records_total{result=kept} = %v, want %d", keptCount, len(kept))
	}
}
