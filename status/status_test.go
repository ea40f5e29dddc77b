package status

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/topics"
)

// A process's figures are read from its registry: counters by stage, generate's endpoints by label.
func TestFiguresFromRegistry(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	records := prometheus.NewCounterVec(prometheus.CounterOpts{Name: mRecords}, []string{"stage", "result", "class"})
	tokens := prometheus.NewCounterVec(prometheus.CounterOpts{Name: mTokens}, []string{"stage"})
	out := prometheus.NewCounterVec(prometheus.CounterOpts{Name: mOutputTokens}, []string{"endpoint"})
	up := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: mEndpointUp}, []string{"endpoint"})
	usage := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: mKVUsage}, []string{"endpoint"})
	reqs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: mRequests}, []string{"endpoint", "outcome"})
	reg.MustRegister(records, tokens, out, up, usage, reqs)
	records.WithLabelValues("generate", "generated", "").Add(7)
	records.WithLabelValues("generate", "in_shards", "").Add(3)
	records.WithLabelValues("generate", "rejected", "server_rejected").Add(1)
	records.WithLabelValues("generate", "rejected", "undecodable").Add(1)
	records.WithLabelValues("tokenize", "tokenized", "").Add(40) // another stage's: not generate's
	records.WithLabelValues("tokenize", "rejected", "too_long").Add(4)
	tokens.WithLabelValues("generate").Add(600)
	tokens.WithLabelValues("tokenize").Add(9000)
	out.WithLabelValues("http://a").Add(500)
	out.WithLabelValues("http://b").Add(100)
	up.WithLabelValues("http://a").Set(1)
	up.WithLabelValues("http://b").Set(0)
	usage.WithLabelValues("http://a").Set(0.5)
	reqs.WithLabelValues("http://a", "ok").Add(9)
	reqs.WithLabelValues("http://a", "busy").Add(4)
	fams, err := gather(reg)
	if err != nil {
		t.Fatal(err)
	}
	s := &topics.Status{Stage: "generate"}
	fams.figures(s)
	if s.Records != 12 || s.Rejected != 2 || s.Tokens != 600 || len(s.Endpoints) != 2 {
		t.Fatalf("figures %+v", s)
	}
	tok := &topics.Status{Stage: "tokenize"}
	fams.figures(tok)
	if tok.Records != 44 || tok.Rejected != 4 || tok.Tokens != 9000 || len(tok.Endpoints) != 0 {
		t.Fatalf("tokenize figures %+v", tok)
	}
	a, b := s.Endpoints[0], s.Endpoints[1]
	if a.Name != "http://a" || !a.Up || a.KVUsage != 0.5 || a.OutputTokens != 500 || a.Requests != 9 || b.Up || b.OutputTokens != 100 {
		t.Fatalf("endpoints %+v", s.Endpoints)
	}
}

// Published rates are differences over the window, per stage and per endpoint.
func TestRatesOverWindow(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	var hist []sample
	for i := 0; i <= 30; i++ {
		s := &topics.Status{Time: t0.Add(time.Duration(i) * 5 * time.Second), Records: int64(10 * i), Tokens: int64(1000 * i),
			Endpoints: []topics.EndpointStatus{{Name: "e", OutputTokens: int64(500 * i)}}}
		hist = rates(s, hist, time.Minute)
		if i == 30 {
			if s.RecordsPerSecond != 2 || s.TokensPerSecond != 200 || s.Endpoints[0].OutputTokensPerSecond != 100 ||
				s.RateWindowSeconds != 60 {
				t.Fatalf("rates %+v", s)
			}
		}
	}
	if len(hist) != 13 {
		t.Fatalf("%d samples kept for a 60 s window at 5 s", len(hist))
	}
}

func TestReasonClass(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		r    topics.Rejection
		want string
	}{
		{topics.Rejection{Class: "too_long", Reason: "prompt x is 900 tokens"}, "too_long"},
		{topics.Rejection{Reason: "server failed the request 3 times, last: boom"}, "server failed the request N times, last"},
		{topics.Rejection{}, "unknown"},
	} {
		if got := ReasonClass(&c.r); got != c.want {
			t.Errorf("ReasonClass(%+v) = %q, want %q", c.r, got, c.want)
		}
	}
}

func TestRenderShowsStagesEndpointsAndWarnings(t *testing.T) {
	t.Parallel()
	eta := 90.0
	r := &Report{Time: time.Unix(0, 0).UTC(), Stages: []StageReport{{Stage: "generate", Group: "g", Topic: "tokenized",
		Committed: 10, End: 100, Lag: 90, RecordsPerSecond: 1, ETASeconds: &eta,
		Endpoints: []EndpointReport{{Instance: "i", EndpointStatus: topics.EndpointStatus{Name: "http://gpu", Up: true, KVUsage: 0.42}}}}},
		Rejections: []RejectionCount{{Stage: "tokenize", Reason: "too_long", Count: 3}}, RejectedTotal: 3,
		Warnings: []string{"generate: something"}}
	var b bytes.Buffer
	if err := Render(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"generate  g", "1m30s", "http://gpu", "42%", "too_long", "! generate: something"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("render lacks %q:\n%s", want, b.String())
		}
	}
}

// TestReportWarnsOfRetentionLoss: a stage whose group had not read records that retention then deleted gets
// a warning naming the topic, the group and how many (the embedded broker applies retention on demand).
func TestReportWarnsOfRetentionLoss(t *testing.T) {
	e := kafkatest.Embedded(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const retention = 100 * time.Millisecond
	kc := kafka.Config{Brokers: e.Brokers(), Partitions: 1, Namespace: "retention", Retention: retention,
		Logger: slog.New(slog.DiscardHandler)}
	cl := kafkatest.Client(t, kc)
	if err := cl.Admin().EnsureTopics(ctx, topics.Retained()...); err != nil {
		t.Fatal(err)
	}
	recs := make([]kafkatest.Record, 5)
	for i := range recs {
		recs[i] = kafkatest.Record{Key: fmt.Sprint(i), Value: &topics.Tokenized{ID: fmt.Sprint(i), InputIDs: []uint32{1}}}
	}
	kafkatest.Produce(t, kc, topics.TopicTokenized, recs...)
	if err := cl.Admin().StartGroupAt(ctx, "gen", topics.TopicTokenized, map[int]int64{0: 1}); err != nil {
		t.Fatal(err)
	}
	col := NewCollector(CollectorConfig{Client: cl, Stages: []Stage{{Name: "generate", Group: "gen", Topic: topics.TopicTokenized}}})
	r, err := col.Collect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range r.Warnings {
		if strings.Contains(w, "deleted by retention") {
			t.Fatalf("a warning before anything was deleted: %q", w)
		}
	}
	time.Sleep(2 * retention) // the records age past retention, which the broker then applies
	e.Cluster().ApplyRetention()
	if r, err = col.Collect(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(r.Warnings, func(w string) bool {
		return strings.Contains(w, "retention.tokenized/0") && strings.Contains(w, "deleted by retention") && strings.Contains(w, "retention.gen")
	}) {
		t.Fatalf("no retention warning: %q", r.Warnings)
	}
}

// Start publishes until its stop is called, and stop returns only once the last record, in state stopped, is
// on the topic: the publisher's goroutine is waited for.
func TestStartIsWaitedFor(t *testing.T) {
	kc := kafkatest.Config(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	stop := Start(ctx, PublisherConfig{Client: kafkatest.Client(t, kc), Gatherer: prometheus.NewRegistry(),
		Stages: []Stage{{Name: "generate"}}, Instance: "test", Interval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	deadline := time.Now().Add(30 * time.Second)
	for kafkatest.Size(t, kc, topics.TopicStatus) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("no running records within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel() // a signal: the publisher keeps going until stop
	stop()
	n := kafkatest.Size(t, kc, topics.TopicStatus)
	recs := kafkatest.Collect[topics.Status](t, kc, topics.TopicStatus, n, 30*time.Second)
	if len(recs) != n || n < 3 {
		t.Fatalf("%d of %d records read, want at least 3", len(recs), n)
	}
	if last := recs[len(recs)-1]; last.State != topics.StatusStopped || last.Stage != "generate" || last.Instance != "test" {
		t.Fatalf("last record %+v, want generate's, stopped", last)
	}
	for _, r := range recs[:len(recs)-1] {
		if r.State != topics.StatusRunning {
			t.Fatalf("a record before the last in state %q", r.State)
		}
	}
}

// TestReportSaysWhyAStageIsStalled: a stage's running records carry what its Stalled says, its last (stopped)
// record does not; a report shows the reason on the instance and as a warning naming the stage and the instance.
func TestReportSaysWhyAStageIsStalled(t *testing.T) {
	kc := kafkatest.Config(t, 1)
	cl := kafkatest.Client(t, kc)
	const why = "no SGLang server answers (http://127.0.0.1:1: connection refused)"
	stop := Start(context.Background(), PublisherConfig{Client: cl, Gatherer: prometheus.NewRegistry(),
		Stages:   []Stage{{Name: "generate", Group: "gen", Topic: topics.TopicTokenized, Stalled: func() string { return why }}},
		Instance: "test", Interval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	defer stop()
	deadline := time.Now().Add(30 * time.Second)
	for kafkatest.Size(t, kc, topics.TopicStatus) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("no running record within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	col := NewCollector(CollectorConfig{Client: cl, Stages: []Stage{{Name: "generate", Group: "gen", Topic: topics.TopicTokenized}}})
	r, err := col.Collect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Stages[0].Instances; len(got) != 1 || got[0].Stalled != why {
		t.Fatalf("instances %+v, want test's, stalled: %s", got, why)
	}
	var b bytes.Buffer
	if err := Render(&b, r); err != nil {
		t.Fatal(err)
	}
	if want := "! generate: instance test makes no progress: " + why; !strings.Contains(b.String(), want) {
		t.Errorf("status lacks %q:\n%s", want, b.String())
	}
	stop()
	n := kafkatest.Size(t, kc, topics.TopicStatus)
	recs := kafkatest.Collect[topics.Status](t, kc, topics.TopicStatus, n, 30*time.Second)
	if last := recs[len(recs)-1]; last.State != topics.StatusStopped || last.Stalled != "" {
		t.Fatalf("last record %+v, want stopped, not stalled", last)
	}
	if first := recs[0]; first.State != topics.StatusRunning || first.Stalled != why {
		t.Fatalf("first record %+v, want running, stalled", first)
	}
}
