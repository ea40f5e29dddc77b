package admission

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/draftflow/draftflow/metrics/metricstest"
	"github.com/draftflow/draftflow/sglang"
	"github.com/draftflow/draftflow/stages/generate/internal/fakesglang"
)

// The Controller keeps no goroutines or timers, so its tests call it step by step as a driver does: Probe
// brings the fake servers up, Offer queues requests, Finish, Fail, Abandon and Withdraw settle them, Health
// and Poll stand for the driver's timers. Nothing waits for time to pass; a test that needs time to pass
// moves the Controller's clock.

// newDriven returns a Controller for the fake servers, each brought up with Probe.
func newDriven(t *testing.T, fakes *fakesglang.Net, cfg Config) *Controller {
	t.Helper()
	cfg.HTTPClient = fakes.Client()
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	c, err := NewController(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range cfg.Endpoints {
		if err := c.Probe(context.Background(), i); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func req(rid string, prompt, maxNew int) *Request {
	return &Request{RID: rid, Key: LengthKey{Dataset: "d", Lane: DefaultLane}, InputIDs: make([]uint32, prompt),
		Sampling: sglang.SamplingParams{MaxNewTokens: maxNew}}
}

// offer offers n requests and returns their tickets.
func offer(c *Controller, n int, mk func(i int) *Request) []*Ticket {
	var ts []*Ticket
	for i := range n {
		ts = append(ts, c.Offer(mk(i), nil))
	}
	return ts
}

// admitted returns the tickets of ts admitted so far, and how many each server got.
func admitted(ts []*Ticket) (in []*Ticket, perServer map[int]int) {
	perServer = map[int]int{}
	for _, t := range ts {
		if i := t.Endpoint(); i >= 0 {
			in = append(in, t)
			perServer[i]++
		}
	}
	return in, perServer
}

// finishAll answers every ticket of ts as it is admitted, until all are.
func finishAll(t *testing.T, c *Controller, ts []*Ticket) {
	t.Helper()
	done := map[*Ticket]bool{}
	for len(done) < len(ts) {
		progress := false
		for _, tk := range ts {
			if done[tk] || tk.Endpoint() < 0 {
				continue
			}
			if _, err := c.Finish(tk, answer(10), time.Second); err != nil {
				t.Fatal(err)
			}
			done[tk], progress = true, true
		}
		if !progress {
			t.Fatalf("%d of %d tickets never admitted", len(ts)-len(done), len(ts))
		}
	}
}

func TestAdmissionAgainstKVBudget(t *testing.T) {
	fakes := fakesglang.NewNet()
	f := fakes.Add(t, 10000)
	c := newDriven(t, fakes, Config{Endpoints: []string{f.URL}})
	// Each request charges 1000 prompt + 1000 (prior = max_new_tokens): five fit a 10000-token budget.
	ts := offer(c, 8, func(i int) *Request { return req(fmt.Sprint("r", i), 1000, 1000) })
	in, _ := admitted(ts)
	if len(in) != 5 || c.Waiting() != 3 {
		t.Fatalf("%d admitted, %d waiting; want 5 (budget 10000 / charge 2000) and 3", len(in), c.Waiting())
	}
	if got, want := c.Stalled(), "every SGLang server is full: 3 requests wait for admission, 5 in flight"; got != want {
		t.Errorf("Stalled %q, want %q", got, want)
	}
	if st := c.Endpoints()[0]; st.Used != 10000 || st.InFlight != 5 {
		t.Fatalf("endpoint state %+v", st)
	}
	// An answer frees its charge: the sixth goes.
	if _, err := c.Finish(in[0], answer(10), time.Second); err != nil {
		t.Fatal(err)
	}
	if in, _ = admitted(ts); len(in) != 6 || c.Waiting() != 2 || c.Endpoints()[0].InFlight != 5 {
		t.Fatalf("%d admitted, %d waiting, %d in flight after an answer; want 6, 2 and 5", len(in), c.Waiting(), c.Endpoints()[0].InFlight)
	}
	finishAll(t, c, ts[1:])
	if st := c.Endpoints()[0]; st.Used != 0 || st.InFlight != 0 {
		t.Fatalf("charges not returned: %+v", st)
	}
	if got := c.Stalled(); got != "" {
		t.Errorf("Stalled %q with nothing waiting, want none", got)
	}
}

func TestFixedPolicyRoundRobin(t *testing.T) {
	fakes := fakesglang.NewNet()
	a, b := fakes.Add(t, 1000), fakes.Add(t, 1000)
	c := newDriven(t, fakes, Config{Endpoints: []string{a.URL, b.URL}, Policy: PolicyFixed, Concurrency: 3,
		Routing: RouteRoundRobin})
	ts := offer(c, 10, func(i int) *Request { return req(fmt.Sprint("r", i), 10, 10) })
	in, per := admitted(ts)
	if per[0] != 3 || per[1] != 3 || c.Waiting() != 4 {
		t.Fatalf("admitted %v, %d waiting; want 3 on each and 4 waiting", per, c.Waiting())
	}
	// Round robin: the servers take turns.
	for i, tk := range in {
		if tk.Endpoint() != i%2 {
			t.Fatalf("ticket %d on server %d, want %d", i, tk.Endpoint(), i%2)
		}
	}
	finishAll(t, c, ts)
}

// TestWithdraw: a request given up while it waits leaves the queue; one given up once admitted returns its
// charge, and the next waiting one takes its place.
func TestWithdraw(t *testing.T) {
	fakes := fakesglang.NewNet()
	f := fakes.Add(t, 1000)
	c := newDriven(t, fakes, Config{Endpoints: []string{f.URL}, Policy: PolicyFixed, Concurrency: 1})
	ts := offer(c, 3, func(i int) *Request { return req(fmt.Sprint("r", i), 1, 1) })
	c.Withdraw(ts[1])
	if c.Waiting() != 1 {
		t.Fatalf("%d waiting after a waiting request was withdrawn, want 1", c.Waiting())
	}
	c.Withdraw(ts[0])
	if ts[2].Endpoint() != 0 || c.Waiting() != 0 || c.Endpoints()[0].InFlight != 1 {
		t.Fatalf("after the admitted request was withdrawn: last on %d, %d waiting, %+v", ts[2].Endpoint(), c.Waiting(), c.Endpoints()[0])
	}
	c.Withdraw(ts[2])
	c.Withdraw(ts[2]) // settled: nothing happens
	if st := c.Endpoints()[0]; st.InFlight != 0 || st.Used != 0 {
		t.Fatalf("charges leaked: %+v", st)
	}
	if _, err := c.Finish(ts[2], answer(1), time.Second); err == nil {
		t.Fatal("a withdrawn ticket finished")
	}
}

// TestDrainAndReadmit: HealthFailures failed health checks in a row drain a server (requests go elsewhere);
// a probe brings it back with a fresh capacity read.
func TestDrainAndReadmit(t *testing.T) {
	fakes := fakesglang.NewNet()
	a, b := fakes.Add(t, 10000), fakes.Add(t, 10000)
	c := newDriven(t, fakes, Config{Endpoints: []string{a.URL, b.URL}, Policy: PolicyFixed, Concurrency: 4})
	drained := c.Drained(0)
	infos := a.Infos.Load()
	a.Healthy.Store(false)
	for range DefaultHealthFailures {
		if err := c.Health(context.Background(), 0); err == nil {
			t.Fatal("health check of an unhealthy server passed")
		}
	}
	select {
	case <-drained:
	default:
		t.Fatal("Drained not closed")
	}
	if c.Ready(0) || !c.Ready(1) {
		t.Fatal("a not drained, or b drained")
	}
	if got := c.Stalled(); got != "" {
		t.Errorf("Stalled %q while b is up with room, want none", got)
	}
	b.Healthy.Store(false)
	for range DefaultHealthFailures {
		_ = c.Health(context.Background(), 1)
	}
	if got := c.Stalled(); !strings.HasPrefix(got, "no SGLang server is ready ("+a.URL+": drained: ") || !strings.Contains(got, "; "+b.URL+": drained: ") {
		t.Errorf("Stalled %q with both drained, want each URL and why", got)
	}
	b.Healthy.Store(true)
	if err := c.Probe(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	ts := offer(c, 4, func(i int) *Request { return req(fmt.Sprint("x", i), 5, 5) })
	if _, per := admitted(ts); per[1] != 4 {
		t.Fatalf("admitted %v, want all four on b", per)
	}
	if err := c.Probe(context.Background(), 0); err == nil {
		t.Fatal("probe of an unhealthy server passed")
	}
	a.Healthy.Store(true)
	if err := c.Probe(context.Background(), 0); err != nil || !c.Ready(0) {
		t.Fatalf("probe of a healthy server: %v", err)
	}
	if a.Infos.Load() <= infos {
		t.Fatal("re-admission did not re-read the server's capacity")
	}
	if tk := c.Offer(req("y", 5, 5), nil); tk.Endpoint() != 0 {
		t.Fatalf("request on server %d once a is back with room, want 0", tk.Endpoint())
	}
}

func TestBudgetFeedback(t *testing.T) {
	fakes := fakesglang.NewNet()
	f := fakes.Add(t, 100000)
	c := newDriven(t, fakes, Config{Endpoints: []string{f.URL}})
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
	fakes := fakesglang.NewNet()
	f := fakes.Add(t, 100000)
	c := newDriven(t, fakes, Config{Endpoints: []string{f.URL}})
	polls(t, c, 0, 1)
	if c.Endpoints()[0].Load.MaxTokens != 100000 {
		t.Fatalf("no load read: %+v", c.Endpoints()[0])
	}
	b0 := c.Endpoints()[0].Budget
	f.Lock()
	f.Retracted = 5
	f.Unlock()
	polls(t, c, 0, 1)
	if b := c.Endpoints()[0].Budget; b >= b0 {
		t.Fatalf("budget %g after the server's retraction counter rose, want below %g", b, b0)
	}
}

func TestLanesShareTheBudget(t *testing.T) {
	fakes := fakesglang.NewNet()
	f := fakes.Add(t, 10000)
	c := newDriven(t, fakes, Config{Endpoints: []string{f.URL}, Policy: PolicyFixed, Concurrency: 4,
		Lanes: []Lane{{Name: "short", Share: 0.5}, {Name: "long", Share: 0.5, MaxNewTokens: 16384, Datasets: []string{"books"}}}})
	if l := c.ResolveLane("books", ""); l.Name != "long" || c.MaxNewTokens(0, l) != 16384 || c.MaxNewTokens(99, l) != 99 {
		t.Fatalf("lane resolution: %+v", l)
	}
	if l := c.ResolveLane("chat", ""); l.Name != "short" || c.MaxNewTokens(0, l) != DefaultMaxNewTokens {
		t.Fatalf("default lane: %+v", l)
	}
	mk := func(lane string) func(int) *Request {
		return func(i int) *Request {
			r := req(fmt.Sprint(lane, i), 10, 10)
			r.Key.Lane = lane
			return r
		}
	}
	// The short lane fills the endpoint while the long lane is idle (work-conserving)...
	short := offer(c, 8, mk("short"))
	in, _ := admitted(short)
	if len(in) != 4 {
		t.Fatalf("short lane holds %d slots, want all 4", len(in))
	}
	// ...but once long requests wait, freed slots go to them until they hold their half.
	long := offer(c, 4, mk("long"))
	if c.Waiting() != 8 {
		t.Fatalf("%d waiting, want 8", c.Waiting())
	}
	for _, tk := range in[:2] {
		if _, err := c.Finish(tk, answer(10), time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := admitted(long); len(got) != 2 || c.Waiting() != 6 {
		t.Fatalf("long lane holds %d slots after two were freed (%d waiting), want 2 (6)", len(got), c.Waiting())
	}
	finishAll(t, c, append(short[2:], long...))
}

func TestDataParallelRanksAdmittedSeparately(t *testing.T) {
	fakes := fakesglang.NewNet()
	f := fakes.Add(t, 50000)
	f.DP = 4 // four ranks of 50000 tokens each, each its own pool
	c := newDriven(t, fakes, Config{Endpoints: []string{f.URL}})
	if e := c.Endpoints(); len(e) != 4 || !e[3].Ready {
		t.Fatalf("units %+v, want four ready ranks", e)
	}
	infos := f.Infos.Load()
	polls(t, c, 0, 20)
	if n := f.Infos.Load() - infos; n != 20/capacityCheckPolls {
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
	ts := offer(c, 5, func(i int) *Request { return req(fmt.Sprint("r", i), 15000, 15000) })
	in, _ := admitted(ts)
	if len(in) != 4 || c.Waiting() != 1 {
		t.Fatalf("%d admitted, %d waiting; want 4 and 1 (one 30000-token request per 50000-token rank)", len(in), c.Waiting())
	}
	ranks := map[int]bool{}
	for _, tk := range in {
		if g := c.GenerateRequest(tk); g.RoutedDPRank != nil {
			ranks[*g.RoutedDPRank] = true
		}
	}
	if len(ranks) != 4 {
		t.Fatalf("requests pinned to ranks %v, want each of 0-3 once (routed_dp_rank)", ranks)
	}
	finishAll(t, c, ts)
}

// TestLaterTurnsWaitAheadOfFirstTurns: a request that continues a conversation (Prefer set) waits for
// admission ahead of the first turns queued in its lane, behind the later turns queued before it.
func TestLaterTurnsWaitAheadOfFirstTurns(t *testing.T) {
	// No server is up: nothing is admitted, the queue order stays to be seen.
	c, err := NewController(Config{Endpoints: []string{"http://fake.invalid:30000"}, Registerer: prometheus.NewRegistry(),
		Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []struct{ rid, prefer string }{
		{"first-1", ""}, {"first-2", ""}, {"later-1", "http://a"}, {"first-3", ""}, {"later-2", "http://b"},
	} {
		r := req(o.rid, 10, 10)
		r.Prefer = o.prefer
		c.Offer(r, nil)
	}
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

// attempts reads draftflow_generate_requests_total of an endpoint and outcome from c's registry.
func attempts(t *testing.T, c *Controller, endpoint, outcome string) float64 {
	t.Helper()
	return metricstest.Counter(t, c.cfg.Registerer.(prometheus.Gatherer), "draftflow_generate_requests_total",
		map[string]string{"endpoint": endpoint, "outcome": outcome})
}
