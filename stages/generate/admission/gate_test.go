package admission

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/draftflow/draftflow/sglang"
)

// virtualController builds a Controller driven through its API (Offer, Finish, its feedback) on a
// clock the test moves, with one endpoint of pool tokens brought up.
func virtualController(t *testing.T, cfg Config, pool int) (*Controller, *time.Time) {
	t.Helper()
	now := time.Unix(1000, 0)
	cfg.Endpoints = []string{"http://sim.invalid:30000"}
	cfg.Registerer = prometheus.NewRegistry()
	cfg.Logger = testLogger(t)
	cfg.Clock = func() time.Time { return now }
	c, err := NewController(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.bringUp(c.srv[0], sglang.Capacity{MaxTotalTokens: pool, MaxRunningRequests: 1000})
	return c, &now
}

// teach feeds the estimator n completions spread evenly over [lo, hi].
func teach(c *Controller, n, lo, hi int) {
	for i := range n {
		c.Estimator().Observe(LengthKey{Dataset: "d", Lane: DefaultLane}, lo+(hi-lo)*i/(n-1))
	}
}

func TestDriverFixedPolicy(t *testing.T) {
	c, _ := virtualController(t, Config{Policy: PolicyFixed, Concurrency: 2}, 100000)
	var granted []*Ticket
	hook := func(tk *Ticket) { granted = append(granted, tk) }
	a, b, d := c.Offer(req("a", 10, 100), hook), c.Offer(req("b", 10, 100), hook), c.Offer(req("c", 10, 100), hook)
	if len(granted) != 2 || a.Endpoint() != 0 || b.Endpoint() != 0 || d.Endpoint() != -1 {
		t.Fatalf("granted %d, endpoints %d %d %d; want the first two on endpoint 0", len(granted), a.Endpoint(), b.Endpoint(), d.Endpoint())
	}
	if _, err := c.Finish(d, answer(5), time.Second); err == nil {
		t.Fatal("Finish of a waiting ticket succeeded")
	}
	if _, err := c.Finish(a, answer(50), time.Second); err != nil {
		t.Fatal(err)
	}
	if len(granted) != 3 || granted[2] != d || d.Endpoint() != 0 {
		t.Fatalf("the waiting ticket was not admitted when a slot freed (granted %d)", len(granted))
	}
	if _, err := c.Finish(a, answer(50), time.Second); err == nil {
		t.Fatal("a ticket finished twice")
	}
	if got := c.Estimator().Snapshot()[LengthKey{Dataset: "d", Lane: DefaultLane}].Samples; got != 1 {
		t.Fatalf("estimator saw %d completions, want 1", got)
	}
}

func TestKVGate(t *testing.T) {
	const pool = 100000
	c, now := virtualController(t, Config{Budget: BudgetConfig{InitialFactor: 8}}, pool)
	teach(c, 200, 100, 2000) // outputs of 100..2000 tokens, mean 1050
	var tickets []*Ticket
	offer := func(prompt int) *Ticket {
		tk := c.Offer(req("r", prompt, 20000), nil)
		tickets = append(tickets, tk)
		return tk
	}
	// Before any poll the gate is off: the budget alone admits.
	for range 10 {
		if offer(1000).Endpoint() != 0 {
			t.Fatal("not admitted before any poll")
		}
	}
	// Ten running at 20 tok/s each.
	load := func(used int) sglang.Load {
		return sglang.Load{Running: 10, UsedTokens: used, MaxTokens: pool, TokenUsage: float64(used) / pool, GenThroughput: 200}
	}
	// Usage over the target: nothing goes.
	feedback(c, 0, load(97000), 0, true)
	if tk := offer(1000); tk.Endpoint() >= 0 {
		t.Fatal("admitted at 97% usage")
	}
	// Young requests, a pool 70% full: many are expected to finish before the rest fill it.
	feedback(c, 0, load(70000), 0, true)
	if tickets[10].Endpoint() != 0 {
		t.Fatal("not admitted at 70% usage with a young batch")
	}
	// The prediction follows what happens between polls: the batch decodes 200 tok/s, admitted prompts
	// count, answers free their tokens.
	predicted := func() float64 { c.mu.Lock(); defer c.mu.Unlock(); return c.predictedUsed(c.eps[0]) }
	p0 := predicted()
	*now = now.Add(10 * time.Second)
	if p1 := predicted(); p1-p0 != 2000 {
		t.Fatalf("prediction grew %v in 10 s at 200 tok/s, want 2000", p1-p0)
	}
	p1 := predicted()
	if _, err := c.Finish(tickets[0], answer(1500), time.Minute); err != nil {
		t.Fatal(err)
	}
	if p2 := predicted(); p1-p2 != 2500 {
		t.Fatalf("an answer of 1000+1500 tokens freed %v predicted tokens, want 2500", p1-p2)
	}

	// The same usage with a batch that has outlived every completion seen (3000 tokens each): none is
	// expected to finish soon, and all of them running to max_new_tokens would overflow the pool.
	*now = now.Add(150 * time.Second)
	feedback(c, 0, load(70000), 0, true)
	if tk := offer(1000); tk.Endpoint() >= 0 {
		t.Fatal("admitted at 70% usage with a batch of old requests")
	}
	// Once most of them are answered, the worst case fits and the request goes.
	for _, tk := range tickets[1:9] {
		if _, err := c.Finish(tk, answer(3000), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	feedback(c, 0, load(30000), 0, true)
	if tickets[len(tickets)-1].Endpoint() != 0 {
		t.Fatal("not admitted once the worst case fits")
	}
}

func TestRechargeByAge(t *testing.T) {
	c, now := virtualController(t, Config{Budget: BudgetConfig{InitialFactor: 8}}, 100000)
	teach(c, 200, 100, 2000)
	tk := c.Offer(req("r", 1000, 4000), nil)
	if tk.Endpoint() != 0 {
		t.Fatal("not admitted")
	}
	load := sglang.Load{Running: 1, UsedTokens: 2000, MaxTokens: 100000, TokenUsage: 0.02, GenThroughput: 20}
	feedback(c, 0, load, 0, true)
	young := c.Endpoints()[0].Used
	if want := float64(1000 + c.Estimator().Expected(LengthKey{Dataset: "d", Lane: DefaultLane}, 4000)); young != want {
		t.Fatalf("young request charged %v, want %v", young, want)
	}
	*now = now.Add(75 * time.Second) // ~1500 tokens produced at 20 tok/s
	feedback(c, 0, load, 0, true)
	old := c.Endpoints()[0].Used
	if old <= young || old > 1000+2000 {
		t.Fatalf("a request past most completions is charged %v (young %v), want more, at most prompt+longest", old, young)
	}
	*now = now.Add(time.Hour) // past every completion seen: charged its max_new_tokens
	feedback(c, 0, load, 0, true)
	if got := c.Endpoints()[0].Used; got != 1000+4000 {
		t.Fatalf("an outlier is charged %v, want 5000", got)
	}
	if _, err := c.Finish(tk, answer(3000), time.Hour); err != nil {
		t.Fatal(err)
	}
	if ep := c.Endpoints()[0]; ep.Used != 0 || ep.InFlight != 0 {
		t.Fatalf("after the answer %v charged, %d in flight", ep.Used, ep.InFlight)
	}
}

// feedback applies one poll's figures to admission unit i, as Controller.poll does after its HTTP reads.
func feedback(c *Controller, i int, load sglang.Load, retracted float64, have bool) {
	c.adjust(c.eps[i], load, true, retracted, have)
}

// answer is a /generate answer with n output tokens and no retractions.
func answer(n int) *sglang.GenerateResponse {
	zero := 0
	return &sglang.GenerateResponse{OutputIDs: make([]uint32, n), MetaInfo: sglang.MetaInfo{NumRetractions: &zero,
		FinishReason: &sglang.FinishReason{Type: "length", Length: n}}}
}

// TestSharedServer checks the KV gate on a server another client keeps full (holdsShare): the requests the
// gate holds back go anyway while this Controller, with them, keeps fewer on the server than the other
// clients do, up to as many as the pool holds at their mean length; on a server it has to itself, a full pool
// still holds them back.
func TestSharedServer(t *testing.T) {
	const pool = 100000
	c, _ := virtualController(t, Config{}, pool)
	teach(c, 200, 100, 2000)
	inflight := func() int { return c.Endpoints()[0].InFlight }
	offer := func(n int) {
		for range n {
			c.Offer(req("r", 1000, 4000), nil)
		}
	}
	offer(4)
	if inflight() != 4 {
		t.Fatalf("%d in flight before any poll, want 4", inflight())
	}
	// Alone on a full server (its 4 requests are all the server has): the gate holds the rest back.
	feedback(c, 0, sglang.Load{Running: 4, UsedTokens: 97000, MaxTokens: pool, TokenUsage: 0.97, GenThroughput: 100}, 0, true)
	offer(100)
	if inflight() != 4 {
		t.Fatalf("%d in flight on a full server with no other client, want 4", inflight())
	}
	// Another client keeps 20 requests on the same full server: this Controller keeps 19.
	feedback(c, 0, sglang.Load{Running: 16, Waiting: 8, UsedTokens: 97000, MaxTokens: pool, TokenUsage: 0.97, GenThroughput: 100}, 0, true)
	if inflight() != 19 {
		t.Fatalf("%d in flight beside another client's 20, want 19", inflight())
	}
	var m dto.Metric
	if err := c.met.otherRequests.WithLabelValues(c.eps[0].name).Write(&m); err != nil || m.GetGauge().GetValue() != 20 {
		t.Fatalf("draftflow_generate_server_other_requests %v (%v), want 20", m.GetGauge().GetValue(), err)
	}
	// Against many more, at most as many as the pool holds at the mean prompt and half the mean output.
	feedback(c, 0, sglang.Load{Running: 40, Waiting: 200, UsedTokens: 97000, MaxTokens: pool, TokenUsage: 0.97, GenThroughput: 100}, 0, true)
	want := int(pool / (1000 + c.Estimator().RecentMean(recentMeanWindow)/2))
	if inflight() != want {
		t.Fatalf("%d in flight beside another client's %d, want the %d the pool holds", inflight(), 240-19, want)
	}
}

// TestSharedQueueKeepsBudget: while other clients keep a long queue on the server and this Controller holds more
// than its budget there (holdsShare admits it), the long queue does not cut the budget; once the others are gone
// the budget is where it was, and the Controller fills the server at once. Alone with the same long queue of its
// own, the budget is cut.
func TestSharedQueueKeepsBudget(t *testing.T) {
	const pool = 100000
	c, _ := virtualController(t, Config{}, pool)
	teach(c, 200, 100, 2000)
	for range 200 {
		c.Offer(req("r", 1000, 4000), nil)
	}
	ep := c.eps[0]
	shared := sglang.Load{Running: 40, Waiting: 200, UsedTokens: 97000, MaxTokens: pool, TokenUsage: 0.97, GenThroughput: 100}
	feedback(c, 0, shared, 0, true) // the poll that shows the other client; holdsShare admits after it
	budget := ep.budget
	for range 60 { // a minute of polls beside a client keeping 200 requests queued
		feedback(c, 0, shared, 0, true)
	}
	if ep.used <= ep.budget {
		t.Fatalf("in flight %.0f tokens within the budget %.0f: holdsShare did not admit beyond it", ep.used, ep.budget)
	}
	if ep.budget != budget {
		t.Errorf("budget %.0f after a minute beside another client's long queue, want %.0f (unchanged)", ep.budget, budget)
	}
	// Alone, with a long queue of its own: the band cuts the budget.
	c2, _ := virtualController(t, Config{}, pool)
	teach(c2, 200, 100, 2000)
	for range 200 {
		c2.Offer(req("r", 1000, 4000), nil)
	}
	ep2 := c2.eps[0]
	n := ep2.inflight
	before := ep2.budget
	feedback(c2, 0, sglang.Load{Running: n / 2, Waiting: n - n/2, UsedTokens: 97000, MaxTokens: pool, TokenUsage: 0.97, GenThroughput: 100}, 0, true)
	if ep2.budget >= before {
		t.Errorf("alone with %d of its own requests waiting, budget %.0f -> %.0f, want a cut", n-n/2, before, ep2.budget)
	}
}
