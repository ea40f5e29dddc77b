package generate

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/draftflow/draftflow/kafka/kafkatest"

	"github.com/draftflow/draftflow/kafka"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/draftflow/draftflow/sglang/sim"
	"github.com/draftflow/draftflow/stages/generate/admission"
	"github.com/draftflow/draftflow/topics"
)

// recorder wraps a server and remembers the output_ids of every /generate answer it actually delivered (a
// plain answer, or a stream's last chunk), by rid, so tests can check the stage wrote exactly what the server returned.
type recorder struct {
	h     http.Handler
	mu    sync.Mutex
	out   map[string][]uint32
	calls int
}

func newRecorder(h http.Handler) *recorder { return &recorder{h: h, out: map[string][]uint32{}} }

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != "/generate" {
		r.h.ServeHTTP(w, req)
		return
	}
	r.mu.Lock()
	r.calls++
	r.mu.Unlock()
	tw := &teeWriter{ResponseWriter: w, status: http.StatusOK}
	r.h.ServeHTTP(tw, req)
	if tw.status != http.StatusOK || tw.hijacked {
		return
	}
	var resp struct {
		OutputIDs []uint32 `json:"output_ids"`
		Meta      struct {
			ID string `json:"id"`
		} `json:"meta_info"`
	}
	body := tw.buf.Bytes()
	if bytes.HasPrefix(body, []byte("data:")) {
		// A stream (the stage watches replies for loops): the last chunk before [DONE] holds the whole output.
		events := bytes.Split(bytes.TrimSpace(body), []byte("\n\n"))
		for i := len(events) - 1; i >= 0; i-- {
			if ev := bytes.TrimSpace(bytes.TrimPrefix(events[i], []byte("data:"))); len(ev) > 0 && ev[0] == '{' {
				body = ev
				break
			}
		}
	}
	if json.Unmarshal(body, &resp) == nil && resp.Meta.ID != "" {
		r.mu.Lock()
		r.out[resp.Meta.ID] = resp.OutputIDs
		r.mu.Unlock()
	}
}

func (r *recorder) output(rid string) ([]uint32, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids, ok := r.out[rid]
	return ids, ok
}

type teeWriter struct {
	http.ResponseWriter
	buf      bytes.Buffer
	status   int
	hijacked bool
}

func (t *teeWriter) WriteHeader(code int) { t.status = code; t.ResponseWriter.WriteHeader(code) }
func (t *teeWriter) Write(b []byte) (int, error) {
	t.buf.Write(b)
	return t.ResponseWriter.Write(b)
}
func (t *teeWriter) Flush() {
	if f, ok := t.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
func (t *teeWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	t.hijacked = true
	return t.ResponseWriter.(http.Hijacker).Hijack()
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// startSim starts a simulated SGLang server behind a recorder.
func startSim(t *testing.T, cfg sim.Config) (*sim.Server, *recorder, string) {
	t.Helper()
	s, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(s)
	hs := httptest.NewServer(rec)
	t.Cleanup(func() { hs.Close(); _ = s.Close() })
	return s, rec, hs.URL
}

func startKafka(t *testing.T) kafka.Config {
	t.Helper()
	return kafkatest.Cluster(t, kafka.Config{Partitions: 4, Logger: testLogger(t)})
}

func prompt(n, seed int) []uint32 {
	ids := make([]uint32, n)
	for i := range ids {
		ids[i] = uint32((seed*7919 + i*104729) % 150000)
	}
	return ids
}

// runStage runs the stage until stop is called; stop returns Run's error.
func runStage(t *testing.T, cfg Config) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- Run(ctx, cfg) }()
	return func() error {
		cancel()
		select {
		case err := <-errc:
			return err
		case <-time.After(60 * time.Second):
			t.Fatal("stage did not stop")
			return nil
		}
	}
}

func TestStageEndToEnd(t *testing.T) {
	for _, tc := range []struct {
		name   string
		faults sim.Faults
		policy string
	}{
		{name: "clean", policy: PolicyKVBudget},
		{name: "faults", policy: PolicyFixed, faults: sim.Faults{ErrorRate: 0.15, QueueFullRate: 0.15, ResetRate: 0.1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kc := startKafka(t)
			cl := kafkatest.Client(t, kc)
			_, rec, url := startSim(t, sim.Config{
				MaxTotalTokens: 20000, ContextLength: 4096, TimeScale: 200, OutputLenMean: 40, Seed: 7,
				Faults: tc.faults,
			})
			ctx := context.Background()
			if err := cl.Admin().EnsureTopics(ctx, topics.Retained()...); err != nil {
				t.Fatal(err)
			}
			p := cl.NewProducer(topics.TopicTokenized, kafka.ProducerConfig{})
			const n = 40
			sent := map[string]*topics.Tokenized{}
			for i := range n {
				rec := &topics.Tokenized{ID: fmt.Sprintf("conv-%d", i), Dataset: "ds" + fmt.Sprint(i%2), Model: "m",
					TokenizerHash: "h", Source: topics.Source{File: "in.jsonl", Line: int64(i + 1)},
					Sampling: topics.Sampling{MaxNewTokens: 256}, InputIDs: prompt(100+i*13, i)}
				if i == 7 {
					rec.InputIDs = prompt(5000, i) // longer than the context: HTTP 400
				}
				sent[rec.ID] = rec
				if err := p.SendSync(ctx, rec.ID, kafkatest.Encode(t, rec)); err != nil {
					t.Fatal(err)
				}
			}
			_ = p.Close()

			stop := runStage(t, Config{Client: cl, Config: admission.Config{
				Endpoints: []string{url}, Policy: tc.policy, Concurrency: 8,
				RetryInitial: 5 * time.Millisecond, RetryMax: 50 * time.Millisecond, MaxServerErrors: 50,
				HealthInterval: 200 * time.Millisecond, Budget: BudgetConfig{PollInterval: 20 * time.Millisecond},
				Registerer: prometheus.NewRegistry(), Logger: testLogger(t),
			}})
			gens := kafkatest.Collect[topics.Generation](t, kc, topics.TopicGenerated, n-1, 60*time.Second)
			rejs := kafkatest.Collect[topics.Rejection](t, kc, topics.TopicRejected, 1, 30*time.Second)
			if err := stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}

			seen := map[string]int{}
			for _, g := range gens {
				seen[g.ID]++
				in := sent[g.ID]
				if in == nil {
					t.Fatalf("unknown generation %q", g.ID)
				}
				if !slices.Equal(g.PromptIDs, in.InputIDs) {
					t.Errorf("%s: prompt ids differ from the tokenized record", g.ID)
				}
				if len(g.OutputIDs) == 0 || len(g.OutputIDs) > 256 {
					t.Errorf("%s: %d output ids", g.ID, len(g.OutputIDs))
				}
				// The output must be exactly what the server delivered for one of this record's attempts.
				found := false
				for a := 1; a <= 60 && !found; a++ {
					if ids, ok := rec.output(admission.AttemptRID(admission.RequestID(g.ID, 0), a)); ok && slices.Equal(ids, g.OutputIDs) {
						found = true
					}
				}
				if !found {
					t.Errorf("%s: output ids are not what the server returned", g.ID)
				}
				if g.Meta.FinishReason != "stop" && g.Meta.FinishReason != "length" {
					t.Errorf("%s: finish reason %q", g.ID, g.Meta.FinishReason)
				}
				if g.Meta.CompletionTokens != len(g.OutputIDs) || g.Meta.PromptTokens != len(in.InputIDs) {
					t.Errorf("%s: meta %+v", g.ID, g.Meta)
				}
				if g.Meta.Endpoint != url || g.Sampling.MaxNewTokens != 256 || g.Sampling.Lane != DefaultLane ||
					g.Model != "m" || g.Source != in.Source {
					t.Errorf("%s: provenance not carried: %+v", g.ID, g)
				}
			}
			for id := range sent {
				want := 1
				if id == "conv-7" {
					want = 0
				}
				if seen[id] != want {
					t.Errorf("%s: %d generations, want %d", id, seen[id], want)
				}
			}
			if len(rejs) != 1 {
				t.Fatalf("%d rejections, want 1", len(rejs))
			}
			r := rejs[0]
			if r.ID != "conv-7" || r.Stage != "generate" || r.Topic != kc.Topic(topics.TopicTokenized) ||
				!strings.Contains(r.Reason, "context length") || r.Source.Line != 8 {
				t.Errorf("rejection %+v", r)
			}
			if tc.faults.ErrorRate > 0 {
				rec.mu.Lock()
				calls := rec.calls
				rec.mu.Unlock()
				if calls <= n {
					t.Errorf("%d /generate calls for %d records: faults were not retried", calls, n)
				}
			}
		})
	}
}

// TestStageShutdownAbandons checks that a shutdown aborts in-flight requests on the server and leaves their
// records uncommitted, so a second run generates them.
func TestStageShutdownAbandons(t *testing.T) {
	kc := startKafka(t)
	cl := kafkatest.Client(t, kc)
	// Slow: 2000-token outputs at real time never finish during the first run.
	s, _, url := startSim(t, sim.Config{MaxTotalTokens: 100000, TimeScale: 1, OutputLenMean: 2000, OutputLenDistribution: sim.DistFixed})
	ctx := context.Background()
	if err := cl.Admin().EnsureTopics(ctx, topics.Retained()...); err != nil {
		t.Fatal(err)
	}
	p := cl.NewProducer(topics.TopicTokenized, kafka.ProducerConfig{})
	for i := range 5 {
		rec := &topics.Tokenized{ID: fmt.Sprintf("slow-%d", i), InputIDs: prompt(50, i), Sampling: topics.Sampling{MaxNewTokens: 4000}}
		if err := p.SendSync(ctx, rec.ID, kafkatest.Encode(t, rec)); err != nil {
			t.Fatal(err)
		}
	}
	_ = p.Close()
	cfg := Config{Client: cl, Config: admission.Config{Endpoints: []string{url}, HealthInterval: 100 * time.Millisecond,
		Registerer: prometheus.NewRegistry(), Logger: testLogger(t)}}
	stop := runStage(t, cfg)
	deadline := time.Now().Add(30 * time.Second)
	for s.Stats().Running < 5 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := s.Stats().Running; got != 5 {
		t.Fatalf("%d requests running, want 5", got)
	}
	stopping := time.Now()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// Abandoned deliveries free their slots: the consumer does not wait out its drain timeout for them.
	if took := time.Since(stopping); took >= ackDrainTime {
		t.Errorf("shutdown took %s: the consumer waited for abandoned requests", took)
	}
	deadline = time.Now().Add(10 * time.Second)
	for (s.Stats().Running > 0 || s.Stats().Waiting > 0) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if st := s.Stats(); st.Running+st.Waiting != 0 || st.AbortedRequests < 5 {
		t.Fatalf("after shutdown the server still runs %d, waits %d, aborted %d", st.Running, st.Waiting, st.AbortedRequests)
	}
	// Nothing was generated, and the group's offsets were not committed past the abandoned records: a
	// second run against a fast server generates all five.
	_, _, fast := startSim(t, sim.Config{TimeScale: 500, OutputLenMean: 20})
	cfg.Endpoints = []string{fast}
	stop = runStage(t, cfg)
	gens := kafkatest.Collect[topics.Generation](t, kc, topics.TopicGenerated, 5, 60*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, g := range gens {
		ids[g.ID] = true
	}
	if len(ids) != 5 {
		t.Fatalf("second run generated %v, want slow-0..4", ids)
	}
}
