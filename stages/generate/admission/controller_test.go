package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/draftflow/draftflow/sglang"
)

// fakeServer is a scriptable SGLang: /generate waits on the gate unless a scripted answer says otherwise.
type fakeServer struct {
	t       *testing.T
	pool    int
	healthy atomic.Bool
	infos   atomic.Int32 // /server_info calls

	mu        sync.Mutex
	running   int
	maxSeen   int
	gate      chan struct{} // one token per request allowed to finish
	script    []func(w http.ResponseWriter) bool
	rids      []string
	routed    []int    // routed_dp_rank of /generate calls that set one
	aborts    []string // rids of /abort_request calls, healthy or not
	dp        int      // data-parallel ranks the server reports (0: one, no dp fields)
	load      map[string]any
	retracted float64
	outLen    int
	startup   float64 // the startup_time durations: a change means a restart
	maxRun    int     // effective_max_running_requests_per_dp
	apiKey    string  // --api-key: 401 without it
	legacy    bool    // an SGLang release before /v1/loads, /server_info and meta_info retraction counts
	noMetrics bool    // no --enable-metrics: /metrics is 404
	noCounter bool    // metrics, but no retraction yet: the labelled counter has no sample
	srv       *httptest.Server
}

func newFake(t *testing.T, pool int) *fakeServer {
	f := &fakeServer{t: t, pool: pool, gate: make(chan struct{}, 1000), outLen: 10, startup: 12.25, maxRun: 1000,
		load: map[string]any{"num_running_reqs": 0, "num_waiting_reqs": 0, "token_usage": 0.0}}
	f.healthy.Store(true)
	f.srv = httptest.NewServer(f)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/abort_request" {
		var body struct {
			RID string `json:"rid"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		f.mu.Lock()
		f.aborts = append(f.aborts, body.RID)
		f.mu.Unlock()
	}
	if !f.healthy.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	f.mu.Lock()
	key, legacy, noMetrics, noCounter := f.apiKey, f.legacy, f.noMetrics, f.noCounter
	f.mu.Unlock()
	if key != "" && r.URL.Path != "/health" && r.URL.Path != "/metrics" && r.Header.Get("Authorization") != "Bearer "+key {
		// sglang 0.5.23 utils/auth.py: every route but health and metrics needs the key.
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"error":"Unauthorized"}`)
		return
	}
	if (legacy && (r.URL.Path == "/v1/loads" || r.URL.Path == "/server_info")) || (noMetrics && r.URL.Path == "/metrics") {
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"detail":"Not Found"}`)
		return
	}
	switch r.URL.Path {
	case "/health":
	case "/get_server_info", "/server_info":
		// SGLang 0.5.23: server arguments (max_running_requests and context_length null unless set), the
		// scheduler's pool, startup_time, and one internal state per DP rank.
		f.infos.Add(1)
		f.mu.Lock()
		startup := f.startup
		f.mu.Unlock()
		ranks := max(f.dp, 1)
		states := make([]any, ranks)
		for i := range states {
			states[i] = map[string]any{"dp_rank": i, "effective_max_running_requests_per_dp": f.maxRun,
				"memory_usage": map[string]any{"token_capacity": f.pool}, "startup_time": map[string]any{"scheduler_e2e": startup}}
		}
		info := map[string]any{"max_total_num_tokens": f.pool, "max_running_requests": nil, "context_length": nil,
			"model_path": "fake/model", "dp_size": ranks, "internal_states": states, "version": "0.5.23",
			"startup_time": map[string]any{"load_weight": 1.5, "scheduler_e2e": startup}}
		_ = json.NewEncoder(w).Encode(info)
	case "/v1/loads":
		f.mu.Lock()
		var loads []any
		for rank := range max(f.dp, 1) {
			// num_total_tokens adds the waiting requests' tokens to the used ones (load_inquirer.get_loads).
			l := map[string]any{"dp_rank": rank, "max_total_num_tokens": f.pool, "num_total_tokens": f.pool,
				"num_used_tokens": 0, "gen_throughput": 0.0, "max_running_requests": 1000}
			for k, v := range f.load {
				l[k] = v
			}
			loads = append(loads, l)
		}
		f.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"version": "0.5.23", "loads": loads})
	case "/metrics":
		f.mu.Lock()
		fmt.Fprintf(w, "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name=\"x\"} %d\n", f.running)
		if !noCounter {
			fmt.Fprintf(w, "# TYPE sglang:num_retracted_requests_total counter\nsglang:num_retracted_requests_total{model_name=\"x\"} %g\n", f.retracted)
		}
		f.mu.Unlock()
	case "/abort_request": // recorded above
	case "/generate":
		var req sglang.GenerateRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			f.t.Errorf("bad request body: %v", err)
		}
		f.mu.Lock()
		f.rids = append(f.rids, req.RID)
		if req.RoutedDPRank != nil {
			f.routed = append(f.routed, *req.RoutedDPRank)
		}
		var step func(http.ResponseWriter) bool
		if len(f.script) > 0 {
			step, f.script = f.script[0], f.script[1:]
		}
		f.mu.Unlock()
		if step != nil && step(w) {
			return
		}
		f.mu.Lock()
		f.running++
		f.maxSeen = max(f.maxSeen, f.running)
		f.mu.Unlock()
		defer func() { f.mu.Lock(); f.running--; f.mu.Unlock() }()
		select {
		case <-f.gate:
		case <-r.Context().Done():
			return
		}
		out := make([]uint32, f.outLen)
		for i := range out {
			out[i] = uint32(i + 1)
		}
		meta := map[string]any{"id": req.RID, "finish_reason": map[string]any{"type": "stop", "matched": 2},
			"prompt_tokens": len(req.InputIDs), "completion_tokens": len(out), "num_retractions": 0}
		if legacy {
			delete(meta, "num_retractions") // releases before per-request retraction counts
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"output_ids": out, "meta_info": meta})
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

func (f *fakeServer) release(n int) {
	for range n {
		f.gate <- struct{}{}
	}
}

func (f *fakeServer) runningNow() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.running
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func newTestController(t *testing.T, cfg Config) *Controller {
	t.Helper()
	cfg.Registerer = prometheus.NewRegistry()
	cfg.Logger = testLogger(t)
	if cfg.RetryInitial == 0 {
		cfg.RetryInitial, cfg.RetryMax = time.Millisecond, 10*time.Millisecond
	}
	if cfg.HealthInterval == 0 {
		cfg.HealthInterval = 20 * time.Millisecond
	}
	if cfg.Budget.PollInterval == 0 {
		cfg.Budget.PollInterval = time.Hour // feedback off unless a test turns it on
	}
	c, err := NewController(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return c
}

func req(rid string, prompt, maxNew int) *Request {
	return &Request{RID: rid, Key: LengthKey{Dataset: "d", Lane: DefaultLane}, InputIDs: make([]uint32, prompt),
		Sampling: sglang.SamplingParams{MaxNewTokens: maxNew}}
}

// doAsync runs Do in the background and returns a channel with its error.
func doAsync(c *Controller, ctx context.Context, r *Request) <-chan error {
	ch := make(chan error, 1)
	go func() { _, err := c.Do(ctx, r); ch <- err }()
	return ch
}

func TestAdmissionAgainstKVBudget(t *testing.T) {
	f := newFake(t, 10000)
	c := newTestController(t, Config{Endpoints: []string{f.srv.URL}})
	waitFor(t, "endpoint ready", func() bool { return c.Endpoints()[0].Ready })
	// Each request charges 1000 prompt + 1000 (prior = max_new_tokens): five fit a 10000-token budget.
	var errs []<-chan error
	for i := range 8 {
		errs = append(errs, doAsync(c, context.Background(), req(fmt.Sprint("r", i), 1000, 1000)))
	}
	// Admission happens only when a request is offered or one finishes: once all eight were offered and five
	// reached the server, nothing else is admitted until a release.
	waitFor(t, "five running, three waiting", func() bool { return f.runningNow() == 5 && c.Waiting() == 3 })
	if got := f.runningNow(); got != 5 {
		t.Fatalf("%d running, want 5 (budget 10000 / charge 2000)", got)
	}
	if w := c.Waiting(); w != 3 {
		t.Fatalf("%d waiting, want 3", w)
	}
	if st := c.Endpoints()[0]; st.Used != 10000 || st.InFlight != 5 {
		t.Fatalf("endpoint state %+v", st)
	}
	f.release(1)
	waitFor(t, "a sixth admitted", func() bool { return c.Waiting() == 2 && f.runningNow() == 5 })
	f.release(7)
	for _, e := range errs {
		if err := <-e; err != nil {
			t.Fatal(err)
		}
	}
	if st := c.Endpoints()[0]; st.Used != 0 || st.InFlight != 0 {
		t.Fatalf("charges not returned: %+v", st)
	}
	if f.maxSeen != 5 {
		t.Fatalf("server saw %d concurrent requests, want at most 5", f.maxSeen)
	}
}

func TestFixedPolicyRoundRobin(t *testing.T) {
	a, b := newFake(t, 1000), newFake(t, 1000)
	c := newTestController(t, Config{Endpoints: []string{a.srv.URL, b.srv.URL}, Policy: PolicyFixed, Concurrency: 3,
		Routing: RouteRoundRobin})
	waitFor(t, "endpoints ready", func() bool { e := c.Endpoints(); return e[0].Ready && e[1].Ready })
	var errs []<-chan error
	for i := range 10 {
		errs = append(errs, doAsync(c, context.Background(), req(fmt.Sprint("r", i), 10, 10)))
	}
	waitFor(t, "3+3 running", func() bool { return a.runningNow() == 3 && b.runningNow() == 3 })
	if c.Waiting() != 4 {
		t.Fatalf("%d waiting, want 4", c.Waiting())
	}
	a.release(10)
	b.release(10)
	for _, e := range errs {
		if err := <-e; err != nil {
			t.Fatal(err)
		}
	}
}

func TestRetriesAndRejections(t *testing.T) {
	status := func(code int, msg string) func(w http.ResponseWriter) bool {
		return func(w http.ResponseWriter) bool {
			w.WriteHeader(code)
			_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg}})
			return true
		}
	}
	reset := func(w http.ResponseWriter) bool {
		conn, _, _ := w.(http.Hijacker).Hijack()
		_ = conn.Close()
		return true
	}
	abort := func(w http.ResponseWriter) bool {
		_ = json.NewEncoder(w).Encode(map[string]any{"output_ids": []int{}, "meta_info": map[string]any{
			"finish_reason": map[string]any{"type": "abort", "message": "bad grammar", "status_code": 400}}})
		return true
	}
	garbage := func(w http.ResponseWriter) bool { _, _ = w.Write([]byte(`{"text": "no ids"}`)); return true }
	// abort_all, pause_generation and weight updates end running requests with an abort without status.
	abortAll := func(w http.ResponseWriter) bool {
		_ = json.NewEncoder(w).Encode(map[string]any{"output_ids": []int{}, "meta_info": map[string]any{
			"finish_reason": map[string]any{"type": "abort", "message": "Abort all requests", "status_code": nil}}})
		return true
	}

	f := newFake(t, 100000)
	f.release(100)
	c := newTestController(t, Config{Endpoints: []string{f.srv.URL}, MaxServerErrors: 3, HealthFailures: 100})
	waitFor(t, "endpoint ready", func() bool { return c.Endpoints()[0].Ready })

	// 503, 500, a reset connection, a 502 and an abort without status, then success: retried, with a fresh rid
	// each attempt.
	f.script = append(f.script, status(503, "The request queue is full."), status(500, "boom"), reset, status(502, "gw"), abortAll)
	res, err := c.Do(context.Background(), req("ok", 10, 20))
	if err != nil {
		t.Fatal(err)
	}
	if res.Attempts != 6 || len(res.Response.OutputIDs) != 10 || res.ServedModel != "fake/model" {
		t.Fatalf("result %+v", res)
	}
	f.mu.Lock()
	rids := strings.Join(f.rids, " ")
	f.rids = nil
	f.mu.Unlock()
	if rids != "ok.1; ok.2; ok.3; ok.4; ok.5; ok.6;" {
		t.Fatalf("rids %q", rids)
	}

	cases := []struct {
		script []func(http.ResponseWriter) bool
		reason string
	}{
		{[]func(http.ResponseWriter) bool{status(400, "The input (9 tokens) is longer than the model's context length")}, "context length"},
		{[]func(http.ResponseWriter) bool{status(500, "a"), status(500, "b"), status(500, "c")}, "3 times, last: c"},
		{[]func(http.ResponseWriter) bool{abort}, "bad grammar"},
		{[]func(http.ResponseWriter) bool{garbage}, "no output_ids"},
	}
	for _, tc := range cases {
		f.script = tc.script
		_, err := c.Do(context.Background(), req("bad", 10, 20))
		var rej *RejectedError
		if !errors.As(err, &rej) || !strings.Contains(rej.Reason, tc.reason) {
			t.Errorf("got %v, want a rejection mentioning %q", err, tc.reason)
		}
	}
	if st := c.Endpoints()[0]; st.InFlight != 0 || st.Used != 0 {
		t.Fatalf("charges leaked: %+v", st)
	}
}

func TestCancelWhileWaitingAndRunning(t *testing.T) {
	f := newFake(t, 1000)
	c := newTestController(t, Config{Endpoints: []string{f.srv.URL}, Policy: PolicyFixed, Concurrency: 1})
	waitFor(t, "endpoint ready", func() bool { return c.Endpoints()[0].Ready })
	ctx, cancel := context.WithCancel(context.Background())
	running := doAsync(c, ctx, req("a", 1, 1))
	waitFor(t, "one running", func() bool { return f.runningNow() == 1 })
	waiting := doAsync(c, ctx, req("b", 1, 1))
	waitFor(t, "one waiting", func() bool { return c.Waiting() == 1 })
	cancel()
	for _, ch := range []<-chan error{running, waiting} {
		if err := <-ch; !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
	}
	if st := c.Endpoints()[0]; st.InFlight != 0 || c.Waiting() != 0 {
		t.Fatalf("state after cancel: %+v, %d waiting", st, c.Waiting())
	}
}

func TestDrainAndReadmit(t *testing.T) {
	a, b := newFake(t, 10000), newFake(t, 10000)
	a.release(1000)
	b.release(1000)
	c := newTestController(t, Config{Endpoints: []string{a.srv.URL, b.srv.URL}, Policy: PolicyFixed, Concurrency: 4})
	waitFor(t, "endpoints ready", func() bool { e := c.Endpoints(); return e[0].Ready && e[1].Ready })
	infos := a.infos.Load()

	a.healthy.Store(false)
	waitFor(t, "a drained", func() bool { return !c.Endpoints()[0].Ready })
	for i := range 10 {
		res, err := c.Do(context.Background(), req(fmt.Sprint("x", i), 5, 5))
		if err != nil {
			t.Fatal(err)
		}
		if res.Endpoint != b.srv.URL {
			t.Fatalf("request went to drained endpoint %s", res.Endpoint)
		}
	}
	a.healthy.Store(true)
	waitFor(t, "a re-admitted", func() bool { return c.Endpoints()[0].Ready })
	if a.infos.Load() <= infos {
		t.Fatal("re-admission did not re-read the server's capacity")
	}
	// A request that fails on a dying endpoint moves to the other one.
	a.mu.Lock()
	a.script = []func(http.ResponseWriter) bool{func(w http.ResponseWriter) bool {
		a.healthy.Store(false)
		conn, _, _ := w.(http.Hijacker).Hijack()
		_ = conn.Close()
		return true
	}}
	a.mu.Unlock()
	for i := range 4 {
		if _, err := c.Do(context.Background(), req(fmt.Sprint("y", i), 5, 5)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestBudgetFeedback(t *testing.T) {
	f := newFake(t, 100000)
	c := newTestController(t, Config{Endpoints: []string{f.srv.URL}})
	waitFor(t, "endpoint ready", func() bool { return c.Endpoints()[0].Ready })
	ep := c.eps[0]
	budget := func() float64 { c.mu.Lock(); defer c.mu.Unlock(); return ep.budget }
	setUsed := func(u float64) { c.mu.Lock(); ep.used = u; c.mu.Unlock() }
	b0 := budget()
	if b0 != 100000 {
		t.Fatalf("initial budget %g, want the pool", b0)
	}
	load := sglang.Load{TokenUsage: 0.5, MaxTokens: 100000}

	// Below target but the budget does not bind: no growth.
	c.adjust(ep, load, true, 0, true)
	if budget() != b0 {
		t.Fatalf("budget grew while not binding: %g", budget())
	}
	// Below target and binding: grows, by at most 5%.
	setUsed(b0)
	c.adjust(ep, load, true, 0, true)
	if b := budget(); b <= b0 || b > b0*1.05+1e-6 {
		t.Fatalf("budget %g after a binding low-usage poll, want (%g, %g]", b, b0, b0*1.05)
	}
	// Retractions cut it and hold growth off.
	b1 := budget()
	c.adjust(ep, load, true, 3, true)
	if b := budget(); b != b1*retractCut {
		t.Fatalf("budget %g after retractions, want %g", b, b1*retractCut)
	}
	b2 := budget()
	setUsed(b2)
	c.adjust(ep, load, true, 3, true)
	if budget() != b2 {
		t.Fatalf("budget grew during the retraction cooldown")
	}
	// A growing server queue of its own requests shrinks it.
	setInflight := func(n int) { c.mu.Lock(); ep.inflight = n; c.mu.Unlock() }
	setInflight(50)
	c.adjust(ep, sglang.Load{TokenUsage: 0.5, Waiting: 50, MaxTokens: 100000}, true, 3, true)
	if b := budget(); b != b2*queueCut {
		t.Fatalf("budget %g with a long server queue, want %g", b, b2*queueCut)
	}
	// Another client's queue does not: it is not this budget admitting more than the server runs.
	setInflight(0)
	b2 = budget()
	c.adjust(ep, sglang.Load{TokenUsage: 0.5, Waiting: 50, MaxTokens: 100000}, true, 3, true)
	if b := budget(); b != b2 {
		t.Fatalf("budget %g with another client's queue on the server, want %g", b, b2)
	}
	// Usage over target does not cut the budget (the KV gate holds admissions instead; see gate_test.go).
	b3 := budget()
	c.adjust(ep, sglang.Load{TokenUsage: 0.99, MaxTokens: 100000}, true, 3, true)
	if b := budget(); b != b3 {
		t.Fatalf("budget %g changed at 99%% usage, want %g", b, b3)
	}
	// Retractions reported only through meta_info count when the server exports no counter.
	b4 := budget()
	c.release(&lease{ep: ep, lane: c.order[0]}, 2) // a finished request that was retracted twice
	setUsed(0)
	c.adjust(ep, load, true, 0, false)
	if b := budget(); b != b4*retractCut {
		t.Fatalf("budget %g after meta_info retractions, want %g", b, b4*retractCut)
	}
	// The budget never leaves [0.2, 8] pools.
	for range 200 {
		c.adjust(ep, load, true, 1, false)
		c.mu.Lock()
		ep.metaRetracts = 1
		c.mu.Unlock()
	}
	if b := budget(); b < 0.2*100000-1e-6 {
		t.Fatalf("budget %g under its floor", b)
	}
}

func TestBudgetFeedbackFromPolls(t *testing.T) {
	f := newFake(t, 100000)
	c := newTestController(t, Config{Endpoints: []string{f.srv.URL}, Budget: BudgetConfig{PollInterval: 5 * time.Millisecond}})
	waitFor(t, "endpoint ready", func() bool { return c.Endpoints()[0].Ready })
	waitFor(t, "first load poll", func() bool { return c.Endpoints()[0].Load.MaxTokens == 100000 })
	b0 := c.Endpoints()[0].Budget
	f.mu.Lock()
	f.retracted = 5
	f.mu.Unlock()
	waitFor(t, "budget cut after the server's retraction counter rose", func() bool { return c.Endpoints()[0].Budget < b0 })
}

func TestLanesShareTheBudget(t *testing.T) {
	f := newFake(t, 10000)
	c := newTestController(t, Config{Endpoints: []string{f.srv.URL}, Policy: PolicyFixed, Concurrency: 4,
		Lanes: []Lane{{Name: "short", Share: 0.5}, {Name: "long", Share: 0.5, MaxNewTokens: 16384, Datasets: []string{"books"}}}})
	waitFor(t, "endpoint ready", func() bool { return c.Endpoints()[0].Ready })
	if l := c.ResolveLane("books", ""); l.Name != "long" || c.MaxNewTokens(0, l) != 16384 || c.MaxNewTokens(99, l) != 99 {
		t.Fatalf("lane resolution: %+v", l)
	}
	if l := c.ResolveLane("chat", ""); l.Name != "short" || c.MaxNewTokens(0, l) != DefaultMaxNewTokens {
		t.Fatalf("default lane: %+v", l)
	}
	mk := func(lane string, i int) *Request {
		r := req(fmt.Sprint(lane, i), 10, 10)
		r.Key.Lane = lane
		return r
	}
	// The short lane fills the endpoint while the long lane is idle (work-conserving)...
	var errs []<-chan error
	for i := range 8 {
		errs = append(errs, doAsync(c, context.Background(), mk("short", i)))
	}
	waitFor(t, "short lane uses all 4 slots", func() bool { return f.runningNow() == 4 })
	// ...but once long requests wait, freed slots go to them until they hold their half.
	for i := range 4 {
		errs = append(errs, doAsync(c, context.Background(), mk("long", i)))
	}
	waitFor(t, "long requests queued", func() bool { return c.Waiting() == 8 })
	f.release(2)
	waitFor(t, "two slots freed", func() bool { return c.Waiting() == 6 })
	c.mu.Lock()
	long := c.lanes["long"].used
	c.mu.Unlock()
	if long != 2 {
		t.Fatalf("long lane holds %g slots after two were freed, want 2", long)
	}
	f.release(100)
	for _, e := range errs {
		if err := <-e; err != nil {
			t.Fatal(err)
		}
	}
}

func TestTimeoutsAreBounded(t *testing.T) {
	f := newFake(t, 100000) // the gate stays shut: every attempt runs into RequestTimeout
	c := newTestController(t, Config{Endpoints: []string{f.srv.URL}, RequestTimeout: 30 * time.Millisecond})
	waitFor(t, "endpoint ready", func() bool { return c.Endpoints()[0].Ready })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := c.Do(ctx, req("slow", 10, 20))
	var rej *RejectedError
	if !errors.As(err, &rej) || !strings.Contains(rej.Reason, "timed out 3 times") {
		t.Fatalf("got %v, want a rejection after %d timeouts", err, DefaultMaxTimeouts)
	}
	f.mu.Lock()
	rids, aborts := strings.Join(f.rids, " "), strings.Join(f.aborts, " ")
	f.rids, f.aborts = nil, nil
	f.mu.Unlock()
	if want := "slow.1; slow.2; slow.3;"; rids != want || aborts != want {
		t.Fatalf("rids %q, aborts %q, want %q for both", rids, aborts, want)
	}
	if n := attempts(t, c, f.srv.URL, "timeout"); n != 3 {
		t.Fatalf("%g timeouts counted, want 3", n)
	}
	if st := c.Endpoints()[0]; st.InFlight != 0 || st.Used != 0 || !st.Ready {
		t.Fatalf("endpoint after timeouts: %+v", st)
	}
	// Fewer timeouts than the limit: the request still succeeds.
	slow := func(http.ResponseWriter) bool { time.Sleep(60 * time.Millisecond); return true }
	f.mu.Lock()
	f.script = []func(http.ResponseWriter) bool{slow, slow}
	f.mu.Unlock()
	f.release(1)
	res, err := c.Do(ctx, req("late", 10, 20))
	if err != nil || res.Attempts != 3 {
		t.Fatalf("got %+v, %v; want success on attempt 3", res, err)
	}
}

func TestDataParallelRanksAdmittedSeparately(t *testing.T) {
	f := newFake(t, 50000)
	f.dp = 4 // four ranks of 50000 tokens each, each its own pool
	c := newDriven(t, Config{Endpoints: []string{f.srv.URL}})
	if e := c.Endpoints(); len(e) != 4 || !e[3].Ready {
		t.Fatalf("units %+v, want four ready ranks", e)
	}
	infos := f.infos.Load()
	polls(t, c, 0, 20)
	if n := f.infos.Load() - infos; n != 20/capacityCheckPolls {
		t.Fatalf("capacity re-read %d times in 20 polls: polls looked like restarts", n)
	}
	if c.Endpoints()[3].Load.MaxTokens != 50000 {
		t.Fatalf("rank 3 load %+v", c.Endpoints()[3].Load)
	}
	for r, st := range c.Endpoints() {
		if !st.Ready || st.Rank != r || st.Pool != 50000 || st.Budget != 50000 || st.Capacity.MaxTotalTokens != 200000 {
			t.Fatalf("unit %d: %+v, want rank %d ready with its own 50000-token pool and budget", r, st, r)
		}
	}
	// Each rank holds one request charged 30000 tokens (a second would overflow its pool); a fifth waits,
	// although the ranks' sum (200000) would hold six.
	t.Cleanup(func() { f.release(5) }) // before the server's Close, should the test fail early
	var errs []<-chan error
	for i := range 5 {
		errs = append(errs, doAsync(c, context.Background(), req(fmt.Sprint("r", i), 15000, 15000)))
	}
	waitFor(t, "four running, one waiting", func() bool { return f.runningNow() == 4 && c.Waiting() == 1 })
	if n, w := f.runningNow(), c.Waiting(); n != 4 || w != 1 {
		t.Fatalf("%d running, %d waiting; want 4 and 1 (one 30000-token request per 50000-token rank)", n, w)
	}
	f.mu.Lock()
	ranks := map[int]bool{}
	for _, r := range f.routed {
		ranks[r] = true
	}
	f.mu.Unlock()
	if len(ranks) != 4 {
		t.Fatalf("requests pinned to ranks %v, want each of 0-3 once (routed_dp_rank)", ranks)
	}
	f.release(5)
	for _, e := range errs {
		if err := <-e; err != nil {
			t.Fatal(err)
		}
	}
}

func TestDrainMovesInFlightRequests(t *testing.T) {
	a, b := newFake(t, 10000), newFake(t, 10000)
	b.healthy.Store(false)
	// MaxTimeouts 1: were the cancelled attempt counted as a timeout, the request would be dead-lettered.
	c := newTestController(t, Config{Endpoints: []string{a.srv.URL, b.srv.URL}, Policy: PolicyFixed, Concurrency: 4,
		RequestTimeout: time.Minute, MaxTimeouts: 1})
	waitFor(t, "a ready", func() bool { return c.Endpoints()[0].Ready })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	type outcome struct {
		res *Result
		err error
	}
	done := make(chan outcome, 1)
	go func() { res, err := c.Do(ctx, req("m", 5, 5)); done <- outcome{res, err} }()
	waitFor(t, "running on a", func() bool { return a.runningNow() == 1 })
	b.healthy.Store(true)
	waitFor(t, "b ready", func() bool { return c.Endpoints()[1].Ready })
	b.release(1)
	a.healthy.Store(false) // a's gate stays shut: the request finishes only if it moves to b
	o := <-done
	if o.err != nil {
		t.Fatalf("request on the drained endpoint: %v", o.err)
	}
	if o.res.Endpoint != b.srv.URL || o.res.Attempts != 2 {
		t.Fatalf("result %+v, want attempt 2 on %s", o.res, b.srv.URL)
	}
	waitFor(t, "abort of the cancelled attempt on a", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return slices.Contains(a.aborts, "m.1;")
	})
	if n := attempts(t, c, a.srv.URL, "drained"); n != 1 {
		t.Fatalf("%g drained attempts counted, want 1", n)
	}
	if n := attempts(t, c, a.srv.URL, "timeout"); n != 0 {
		t.Fatalf("%g timeouts counted, want 0", n)
	}
}

// attempts reads draftflow_generate_requests_total of an endpoint and outcome from c's registry.
func attempts(t *testing.T, c *Controller, endpoint, outcome string) float64 {
	t.Helper()
	fams, err := c.cfg.Registerer.(prometheus.Gatherer).Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "draftflow_generate_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["endpoint"] == endpoint && labels["outcome"] == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestStartByLeavesQueuedWorkUnstarted: when a record's partition is being handed over (StartBy closes), a
// request still waiting for a server returns ErrNotStarted and is never sent, while the running one finishes.
func TestStartByLeavesQueuedWorkUnstarted(t *testing.T) {
	f := newFake(t, 1000)
	c := newTestController(t, Config{Endpoints: []string{f.srv.URL}, Policy: PolicyFixed, Concurrency: 1})
	waitFor(t, "endpoint ready", func() bool { return c.Endpoints()[0].Ready })
	revoking := make(chan struct{})
	ra, rb := req("a", 1, 1), req("b", 1, 1)
	ra.StartBy, rb.StartBy = revoking, revoking
	running := doAsync(c, context.Background(), ra)
	waitFor(t, "one running", func() bool { return f.runningNow() == 1 })
	waiting := doAsync(c, context.Background(), rb)
	waitFor(t, "one waiting", func() bool { return c.Waiting() == 1 })
	close(revoking)
	if err := <-waiting; !errors.Is(err, ErrNotStarted) {
		t.Fatalf("queued request: %v, want ErrNotStarted", err)
	}
	f.release(1)
	if err := <-running; err != nil {
		t.Fatalf("the running request was stopped: %v", err)
	}
	if f.maxSeen != 1 || c.Waiting() != 0 {
		t.Fatalf("server saw %d at once, %d still waiting", f.maxSeen, c.Waiting())
	}
}

// TestLaterTurnsWaitAheadOfFirstTurns: a request that continues a conversation (Prefer set) waits for
// admission ahead of the first turns queued in its lane, behind the later turns queued before it.
func TestLaterTurnsWaitAheadOfFirstTurns(t *testing.T) {
	// An endpoint that never answers: nothing is admitted, the queue order stays to be seen.
	c := newTestController(t, Config{Endpoints: []string{"http://127.0.0.1:1"}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	offer := func(rid, prefer string) {
		r := req(rid, 10, 10)
		r.Prefer = prefer
		doAsync(c, ctx, r)
		waitFor(t, rid+" queued", func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			for _, w := range c.laneOf(r).waiters {
				if w.req.RID == rid {
					return true
				}
			}
			return false
		})
	}
	offer("first-1", "")
	offer("first-2", "")
	offer("later-1", "http://a")
	offer("first-3", "")
	offer("later-2", "http://b")
	c.mu.Lock()
	var order []string
	for _, w := range c.lanes[DefaultLane].waiters {
		order = append(order, w.req.RID)
	}
	c.mu.Unlock()
	if want := []string{"later-1", "later-2", "first-1", "first-2", "first-3"}; !slices.Equal(order, want) {
		t.Fatalf("queue %v, want %v", order, want)
	}
}
