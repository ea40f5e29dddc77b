package generate

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/draftflow/draftflow/sglang"
	"github.com/draftflow/draftflow/sglang/sim"
	"github.com/draftflow/draftflow/stages/generate/admission"
)

// Client-side delays of the simulated network, in simulated seconds: from admission to the server's queue,
// and from the server's answer to the client's release of the request (HTTP, tokenizer manager, detokenizer).
const (
	sendDelay  = 0.005
	replyDelay = 0.005
	// sampleEvery is the simulated interval between samples of the time series.
	sampleEvery = 10.0
	// backlogDepth is how many requests wait for admission at all times (while the dataset lasts): the feed
	// is never the limit.
	backlogDepth = 64
)

// event kinds of the discrete-event simulation.
const (
	evPassEnd = iota // a server's forward pass ends
	evArrive         // an admitted request reaches its server
	evReply          // a finished request's answer reaches the client
	evPoll           // the controller polls a server's load (kv-budget)
	evHealth         // the controller checks a server's health
	evProbe          // the controller tries to bring a server up
	evSample         // the bench samples the servers
	evDown           // a server dies (scenario outage)
	evUp             // a server (re)starts
	evTurn           // a conversation's next turn reaches the Controller (multi-turn)
)

type event struct {
	t    float64
	seq  int64 // FIFO among simultaneous events
	kind int
	srv  int
	gen  int // the server's generation (polls and health checks of an earlier bring-up are stale)
	cl   int // the client whose probe, poll or health check it is
	f    *flight
	row  *turnRow // evTurn's turn
}

type eventQueue []*event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].t != q[j].t {
		return q[i].t < q[j].t
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// flight is one attempt of one prompt: admitted by a client's Controller, sent through the stage's Client.
type flight struct {
	c        *client
	prompt   int64 // the dataset row
	attempt  int
	t        *admission.Ticket
	srv      int
	rid      string
	res      chan attempt // the client goroutine's result
	got      *attempt     // the result, once taken
	finished bool         // the server ended it (its answer is on the way)
	settled  bool         // reported to the Controller (answered, failed or abandoned)
}

type attempt struct {
	resp *sglang.GenerateResponse
	err  error
}

// take waits for the client goroutine's result.
func (f *flight) take() attempt {
	if f.got == nil {
		a := <-f.res
		f.got = &a
	}
	return *f.got
}

// slotCounters accumulate a slot's server figures over its restarts.
type slotCounters struct{ gen, retr, prompt, prefill int64 }

// client is one client of a run's servers: a Controller (a `draftflow generate` process, or another team's
// job under the fixed policy) with its own backlog of dataset rows, requests in flight and figures. Every
// client polls and probes the servers itself, as separate processes do.
type client struct {
	idx     int
	ctl     *admission.Controller
	reg     *prometheus.Registry
	policy  string
	foreign bool // the scenario's other client, not measured as the policy under test
	// Its dataset rows: base+first, base+first+stride, ... (up to the scenario's prompts when finite).
	base, first, stride int64
	offered             int64 // rows offered so far
	granted             []*admission.Ticket
	flights             map[*admission.Ticket]*flight
	retries             []*flight // prompts to offer again
	waiting             int
	gens                []int  // bring-ups per slot: polls and health checks of older ones are stale
	probing             []bool // a probe chain is scheduled
	probeWait           []float64
	completed           int64
	outputTokens        int64
	windowTokens        int64     // output tokens of answers received in the measured window
	done                []doneRec // answers, in order (finite runs)
	clientAborts        int64
}

// doneRec is one answer a client received: when, and how many output tokens it carried.
type doneRec struct {
	t      float64
	tokens int
}

// row returns the client's n-th dataset row (1-based).
func (c *client) row(n int64) int64 { return c.base + c.first + (n-1)*c.stride }

// rows is how many dataset rows the client has of a finite dataset of prompts rows.
func (c *client) rows(prompts int64) int64 {
	if c.first > prompts {
		return 0
	}
	return (prompts-c.first)/c.stride + 1
}

// foreignBase offsets the other client's rows: its prompts are its own, sharing no prefix with the dataset's.
const foreignBase = 1 << 32

// run executes one run as a discrete-event simulation and returns its figures (Policy left for the caller).
// Simulated time is the bench's own: the servers' engines are driven pass by pass (sim.NewManual) and the
// stage's Controller runs on the same clock (Config.Clock). Everything the Controller learns comes through
// the stage's own Client over the simulators' real HTTP handlers (simNet, in-process): /health and
// /server_info when it brings a server up, /v1/loads and /metrics when it polls, each /generate answer's
// meta_info. A run's figures depend on its inputs only, not on the machine or its load.
func (b *bencher) run(ctx context.Context, spec runSpec) (*BenchResult, error) {
	r, _, err := b.runFull(ctx, spec)
	return r, err
}

// runFull is run, also returning the multi-turn figures (prompt, prefill and cached tokens, affinity). At most
// BenchOptions.Parallel runs are under way at once.
func (b *bencher) runFull(ctx context.Context, spec runSpec) (*BenchResult, *turnFigures, error) {
	select {
	case b.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	defer func() { <-b.sem }()
	d, err := newDES(ctx, b.opts, spec)
	if err != nil {
		return nil, nil, err
	}
	defer d.close()
	return d.run()
}

// Probe back-off of the simulated clients, in simulated seconds: the first retry, and the most between two.
const probeFirst, probeMax = 0.25, 5.0

// des is one run of the discrete-event simulation: the server slots and the simulators in them, the clients,
// the event queue, the requests in flight and the figures gathered so far. The policy under test runs as
// sc.replicas clients (replicas of `draftflow generate` splitting the dataset between them, row i to replica
// i mod replicas), beside the scenario's other client when it has one. Its methods are the run's steps: run
// pops events in time order and hands each to its handler, then sends what was admitted and plans the
// servers' next passes.
type des struct {
	ctx  context.Context
	opts BenchOptions
	spec runSpec
	sc   scenario

	now              float64 // simulated seconds
	duration, warmup float64 // the run's end and the start of its measured window (steady state)
	finite           bool    // the run ends when the dataset is done
	replicas         int
	depth            int // requests kept waiting for admission per client

	// The server slots: their pools (sc.pools, then the late server's), the simulated network, how often each
	// slot's server was started, its figures over earlier lives, and its base URL.
	pools    []int
	net      *simNet
	starts   []int
	counters []slotCounters
	urls     []string
	calls    sync.WaitGroup // goroutines sending /generate calls

	clients []*client

	q        eventQueue
	seq      int64
	passEnds []map[float64]bool // scheduled evPassEnd instants per slot
	dirty    []bool             // the slot's server received or ended requests since its last planned pass

	byRID     map[string]*flight
	inflight  []*flight // admitted and not settled, in admission order (all clients)
	completed int64     // answers of the clients under test

	// Multi-turn (one client): the turns by dataset row (until answered), the conversations started, the figures.
	rows  map[int64]*turnRow
	convs int
	tf    turnFigures

	// Figures: the result, the servers' counters at the last sample and at the warm-up, the sums behind the
	// means, the latencies of measured answers, the tested clients' output tokens, the finite run's makespan.
	res          *BenchResult
	prev         snap
	atWarmup     *snap
	queueSum     float64
	kvSum        float64
	queueN       int
	latencies    []float64
	outputTokens int64
	makespan     float64
	loopRows     int // dataset rows whose reply loops (sc.work.loops)
}

// snap is the servers' cumulative generated tokens and retractions, per slot.
type snap struct{ gen, retr []int64 }

// newDES sets up a run: its slots (no server started yet) and its clients, each with its own Controller.
func newDES(ctx context.Context, opts BenchOptions, spec runSpec) (*des, error) {
	sc := spec.sc
	d := &des{ctx: ctx, opts: opts, spec: spec, sc: sc, duration: opts.SimDuration.Seconds(), finite: sc.prompts > 0,
		replicas: max(1, sc.replicas), depth: backlogDepth, byRID: map[string]*flight{}, rows: map[int64]*turnRow{},
		res: &BenchResult{Scenario: sc.name}}
	d.warmup = d.duration * opts.WarmupFraction
	if d.finite {
		d.duration, d.warmup = math.Inf(1), 0
	}
	if sc.conv != nil && (d.replicas > 1 || sc.foreign > 0) {
		return nil, errors.New("bench: multi-turn runs have one client")
	}
	if sc.backlog > 0 {
		d.depth = sc.backlog
	}
	d.pools = slices.Clone(sc.pools)
	if sc.late != nil {
		d.pools = append(d.pools, sc.late.pool)
	}
	n := len(d.pools)
	d.net = newSimNet(n)
	d.starts = make([]int, n)
	d.counters = make([]slotCounters, n)
	d.passEnds = make([]map[float64]bool, n)
	d.dirty = make([]bool, n)
	d.urls = make([]string, n)
	for i := range n {
		d.passEnds[i] = map[float64]bool{}
		d.urls[i] = slotURL(i)
	}
	budget := opts.Budget
	if spec.budget != nil {
		budget = *spec.budget
	}
	for r := range d.replicas {
		c, err := d.newClient(spec.policy, spec.routing, spec.concurrency, budget)
		if err != nil {
			return nil, err
		}
		c.first, c.stride = int64(r+1), int64(d.replicas)
	}
	if sc.foreign > 0 {
		c, err := d.newClient(admission.PolicyFixed, admission.RouteHeadroom, sc.foreign, admission.BudgetConfig{})
		if err != nil {
			return nil, err
		}
		c.foreign, c.base = true, foreignBase
	}
	return d, nil
}

// newClient adds a client with a Controller of its own on the run's clock, talking to every slot.
func (d *des) newClient(policy, routing string, concurrency int, budget admission.BudgetConfig) (*client, error) {
	reg := prometheus.NewRegistry()
	ctl, err := admission.NewController(admission.Config{
		Endpoints:   d.urls,
		Policy:      policy,
		Concurrency: concurrency,
		Routing:     routing,
		Budget:      budget,
		HTTPClient:  &http.Client{Transport: d.net},
		Registerer:  reg,
		Logger:      d.opts.Logger,
		Clock:       d.clock,
	})
	if err != nil {
		return nil, err
	}
	n := len(d.pools)
	c := &client{idx: len(d.clients), ctl: ctl, reg: reg, policy: policy, first: 1, stride: 1,
		flights: map[*admission.Ticket]*flight{}, gens: make([]int, n), probing: make([]bool, n), probeWait: make([]float64, n)}
	d.clients = append(d.clients, c)
	return c, nil
}

// clock is the Controllers' clock: the simulated time since the Unix epoch.
func (d *des) clock() time.Time {
	return time.Unix(0, 0).Add(time.Duration(d.now * float64(time.Second)))
}

// close stops every server still up and waits for the goroutines of the run's /generate calls and of the
// simulated network.
func (d *des) close() {
	for i := range d.pools {
		if s := d.net.down(i); s != nil {
			_ = s.Close()
		}
	}
	d.calls.Wait()
	d.net.wait()
}

// startServer starts a simulator in slot i at the current instant.
func (d *des) startServer(i int) error {
	s, err := sim.NewManual(sim.Config{MaxTotalTokens: d.pools[i], OutputLenDistribution: sim.DistFixed,
		OutputLenMean: 1, Seed: d.opts.Seed + int64(i) + 1000*int64(d.starts[i]), Logger: d.opts.Logger})
	if err != nil {
		return err
	}
	d.starts[i]++
	s.SetTime(d.now)
	d.net.up(i, s)
	return nil
}

// stopServer takes slot i's server down, keeping its figures.
func (d *des) stopServer(i int) {
	if s := d.net.down(i); s != nil {
		st := s.Stats()
		d.counters[i].gen += st.GeneratedTokens
		d.counters[i].retr += st.RetractionsTotal
		d.counters[i].prompt += st.PromptTokens
		d.counters[i].prefill += st.PrefillTokens
		_ = s.Close()
	}
}

// slotFigures returns a slot's cumulative generated tokens and retractions (all its lives).
func (d *des) slotFigures(i int) (gen, retr int64) {
	gen, retr = d.counters[i].gen, d.counters[i].retr
	if s := d.net.server(i); s != nil {
		st := s.Stats()
		gen, retr = gen+st.GeneratedTokens, retr+st.RetractionsTotal
	}
	return gen, retr
}

// snapshot returns every slot's cumulative figures now.
func (d *des) snapshot() snap {
	var s snap
	for i := range d.pools {
		g, r := d.slotFigures(i)
		s.gen = append(s.gen, g)
		s.retr = append(s.retr, r)
	}
	return s
}

// push schedules e; simultaneous events run in the order they were pushed.
func (d *des) push(e *event) {
	d.seq++
	e.seq = d.seq
	heap.Push(&d.q, e)
}

// offer hands a dataset row's request (attempt attemptNo) to c's Controller.
func (d *des) offer(c *client, prompt int64, attemptNo int) {
	sc := d.sc
	var ids []uint32
	var out int
	prefer := ""
	if row := d.rows[prompt]; row != nil {
		ids, out = row.ids, row.out
		if d.spec.affinity {
			prefer = row.prefer
		}
	} else {
		plen, o := sc.work.draw(prompt)
		o, looped := sc.work.loops.reply(sc.work.seed, prompt, o, sc.work.maxNew)
		if looped && attemptNo == 1 && !c.foreign {
			d.loopRows++
		}
		ids, out = promptIDs(prompt, plen, sc.work.sharedPrefix), o
	}
	rid := fmt.Sprintf("req-%d", prompt)
	if attemptNo > 1 {
		rid = fmt.Sprintf("req-%d~%d", prompt, attemptNo)
	}
	c.waiting++
	t := c.ctl.Offer(&admission.Request{
		RID:      rid,
		Key:      admission.LengthKey{Dataset: "bench", Lane: admission.DefaultLane},
		InputIDs: ids,
		Sampling: sglang.SamplingParams{MaxNewTokens: sc.work.maxNew, MinNewTokens: min(out-1, sc.work.maxNew)},
		Prefer:   prefer,
	}, func(t *admission.Ticket) { c.granted = append(c.granted, t) })
	c.flights[t] = &flight{c: c, prompt: prompt, attempt: attemptNo, t: t}
}

// refill offers c's retries, then new rows until depth requests wait (while the dataset lasts).
func (d *des) refill(c *client) {
	sc := d.sc
	for len(c.retries) > 0 {
		f := c.retries[0]
		c.retries = c.retries[1:]
		d.offer(c, f.prompt, f.attempt+1)
	}
	for c.waiting < d.depth && (!d.finite || c.foreign || c.offered < c.rows(int64(sc.prompts))) {
		if sc.conv != nil {
			// A new conversation starts; its later turns are offered as their previous turns finish.
			if d.convs == sc.conv.conversations {
				break
			}
			d.rows[c.offered+1] = &turnRow{conv: d.convs, ids: sc.conv.user(d.convs, 0), out: sc.conv.replyLen(d.convs, 0, sc.work.maxNew)}
			d.convs++
		}
		c.offered++
		d.offer(c, c.row(c.offered), 1)
	}
}

// settle takes f out of the flights in progress.
func (d *des) settle(f *flight) {
	f.settled = true
	delete(d.byRID, f.rid)
	d.inflight = slices.DeleteFunc(d.inflight, func(x *flight) bool { return x == f })
}

// fail reports an attempt that got no answer (its server died) and offers the prompt again.
func (d *des) fail(f *flight, err error) error {
	d.settle(f)
	if err := f.c.ctl.Fail(f.t, err); err != nil {
		return err
	}
	f.c.retries = append(f.c.retries, f)
	return nil
}

// abandonDrained cancels the attempts on servers their Controller drained, as the stage does: the charge goes
// back, the request is aborted on its server (when it still answers) and retried.
func (d *des) abandonDrained() error {
	for _, f := range slices.Clone(d.inflight) {
		select {
		case <-f.t.Drained():
		default:
			continue
		}
		d.settle(f)
		if err := f.c.ctl.Abandon(f.t); err != nil {
			return err
		}
		if d.net.server(f.srv) != nil && !f.finished {
			if err := f.c.ctl.Client(f.srv).Abort(d.ctx, f.rid); err == nil {
				f.c.clientAborts++
				d.dirty[f.srv] = true
			}
		}
		f.c.retries = append(f.c.retries, f)
	}
	return nil
}

// send puts every admitted request on its way to its server and refills the clients' backlogs, until nothing
// more is admitted.
func (d *des) send() {
	for _, c := range d.clients {
		for len(c.granted) > 0 || len(c.retries) > 0 {
			g := c.granted
			c.granted = nil
			for _, t := range g {
				c.waiting--
				f := c.flights[t]
				delete(c.flights, t)
				f.srv = t.Endpoint()
				f.rid = c.ctl.GenerateRequest(t).RID
				f.res = make(chan attempt, 1)
				d.byRID[f.rid] = f
				d.inflight = append(d.inflight, f)
				d.push(&event{t: d.now + sendDelay, kind: evArrive, srv: f.srv, f: f})
			}
			d.refill(c)
		}
	}
}

// schedulePass plans slot i's next forward pass, if its server has work and the pass is not planned yet.
func (d *des) schedulePass(i int) {
	s := d.net.server(i)
	if s == nil {
		return
	}
	if end, busy := s.Poll(d.now); busy && !d.passEnds[i][end] {
		d.passEnds[i][end] = true
		d.push(&event{t: end, kind: evPassEnd, srv: i})
	}
}

// scheduleProbe plans c's next attempt to bring slot i up, unless one is planned.
func (d *des) scheduleProbe(c *client, i int, at float64) {
	if !c.probing[i] {
		c.probing[i] = true
		d.push(&event{t: at, kind: evProbe, srv: i, cl: c.idx})
	}
}

// run starts the servers and the clients, works through the events until the run ends, and returns its
// figures.
func (d *des) run() (*BenchResult, *turnFigures, error) {
	sc := d.sc
	for i := range sc.pools {
		if err := d.startServer(i); err != nil {
			return nil, nil, err
		}
	}
	for _, c := range d.clients {
		for i := range d.pools {
			c.probeWait[i] = probeFirst
			d.scheduleProbe(c, i, 0)
		}
	}
	if sc.outage != nil {
		d.push(&event{t: sc.outage.at, kind: evDown, srv: sc.outage.slot})
		d.push(&event{t: sc.outage.at + sc.outage.dur, kind: evUp, srv: sc.outage.slot})
	}
	if sc.late != nil {
		d.push(&event{t: sc.late.at, kind: evUp, srv: len(d.pools) - 1})
	}
	for _, c := range d.clients {
		d.refill(c)
	}
	d.push(&event{t: sampleEvery, kind: evSample})
	d.prev = d.snapshot()

	for d.q.Len() > 0 {
		if d.ctx.Err() != nil {
			return nil, nil, d.ctx.Err()
		}
		e := heap.Pop(&d.q).(*event)
		d.now = e.t
		if d.now > d.duration {
			break
		}
		for i := range d.pools {
			if s := d.net.server(i); s != nil {
				s.SetTime(d.now)
			}
		}
		if err := d.handle(e); err != nil {
			return nil, nil, err
		}
		if err := d.abandonDrained(); err != nil {
			return nil, nil, err
		}
		d.send()
		if d.finite && d.makespan > 0 {
			break
		}
		// Plan the servers' next passes once every event of this instant is in, as the scheduler receives
		// everything queued before it plans.
		if d.q.Len() == 0 || d.q[0].t > d.now {
			for i := range d.pools {
				if d.dirty[i] {
					d.schedulePass(i)
				}
				d.dirty[i] = false
			}
		}
	}
	return d.results()
}

// handle runs one event.
func (d *des) handle(e *event) error {
	switch e.kind {
	case evPassEnd:
		return d.passEnd(e)
	case evArrive:
		return d.arrive(e.f)
	case evReply:
		return d.reply(e.f)
	case evProbe:
		return d.probe(d.clients[e.cl], e.srv)
	case evPoll:
		return d.poll(d.clients[e.cl], e)
	case evHealth:
		d.health(d.clients[e.cl], e)
	case evDown:
		return d.down(e.srv)
	case evTurn:
		c := d.clients[0]
		c.offered++
		d.rows[c.offered] = e.row
		d.offer(c, c.offered, 1)
	case evUp:
		if err := d.startServer(e.srv); err != nil {
			return err
		}
		for _, c := range d.clients {
			d.scheduleProbe(c, e.srv, d.now)
		}
	case evSample:
		d.sample()
	}
	return nil
}

// passEnd ends a forward pass of a slot's server: the requests it finished send their answers.
func (d *des) passEnd(e *event) error {
	delete(d.passEnds[e.srv], e.t)
	s := d.net.server(e.srv)
	if s == nil {
		return nil
	}
	if end, busy := s.Poll(d.now); !busy || end > d.now {
		return nil // a pass of a server that died since, or planned again
	}
	for _, fin := range s.Finish() {
		f := d.byRID[fin.RID]
		if f == nil || f.settled {
			continue // an attempt abandoned before (aborted on our request)
		}
		if fin.FinishReason == "abort" {
			return fmt.Errorf("bench: request %s aborted by the simulator", fin.RID)
		}
		f.finished = true
		d.push(&event{t: d.now + replyDelay, kind: evReply, srv: e.srv, f: f})
	}
	d.dirty[e.srv] = true
	return nil
}

// arrive submits an admitted attempt to its server through the stage's Client: its call runs in a goroutine
// (the handler answers once the request finishes), and arrive returns once the request is in the server's
// queue, or failed.
func (d *des) arrive(f *flight) error {
	if f.settled {
		return nil
	}
	cl := f.c.ctl.Client(f.srv)
	req := f.c.ctl.GenerateRequest(f.t)
	queued := make(chan struct{})
	d.calls.Add(1)
	go func() {
		defer d.calls.Done()
		resp, err := cl.Generate(sim.WithSubmitted(d.ctx, func() { close(queued) }), req)
		f.res <- attempt{resp, err}
	}()
	select {
	case <-queued:
		d.dirty[f.srv] = true
	case a := <-f.res:
		f.got = &a
		if a.err == nil {
			return fmt.Errorf("bench: request %s answered before it was queued", f.rid)
		}
		var se *sglang.StatusError
		if errors.As(a.err, &se) {
			return fmt.Errorf("bench: request %s refused: %w", f.rid, a.err)
		}
		return d.fail(f, a.err)
	}
	return nil
}

// reply delivers an answer to its client: the Controller learns from it, and the figures count it. In a
// multi-turn run the conversation's next turn follows turnGap later.
func (d *des) reply(f *flight) error {
	if f.settled {
		return nil
	}
	a := f.take()
	if a.err != nil {
		return d.fail(f, a.err)
	}
	d.settle(f)
	lat := a.resp.MetaInfo.E2ELatency
	if _, err := f.c.ctl.Finish(f.t, a.resp, time.Duration(lat*float64(time.Second))); err != nil {
		return err
	}
	fc := f.c
	fc.completed++
	fc.outputTokens += int64(len(a.resp.OutputIDs))
	if d.finite {
		fc.done = append(fc.done, doneRec{t: d.now, tokens: len(a.resp.OutputIDs)})
	} else if d.atWarmup != nil {
		fc.windowTokens += int64(len(a.resp.OutputIDs))
	}
	if fc.foreign {
		return nil
	}
	d.completed++
	d.outputTokens += int64(len(a.resp.OutputIDs))
	if row := d.rows[f.prompt]; row != nil {
		d.nextTurn(f, row, a.resp)
	}
	if d.now >= d.warmup {
		d.latencies = append(d.latencies, lat)
	}
	if d.finite && d.completed == int64(d.sc.prompts) {
		d.makespan = d.now
	}
	return nil
}

// nextTurn counts an answered turn and, unless it was its conversation's last, schedules the next one: this
// turn's prompt and reply, then the next user message.
func (d *des) nextTurn(f *flight, row *turnRow, resp *sglang.GenerateResponse) {
	sc := d.sc
	delete(d.rows, f.prompt)
	d.tf.requests++
	d.tf.cached += int64(resp.MetaInfo.CachedTokens)
	d.tf.output += int64(len(resp.OutputIDs))
	if row.prefer == d.urls[f.srv] {
		d.tf.sameServer++
	}
	next := row.turn + 1
	if next >= sc.conv.turns {
		return
	}
	user := sc.conv.user(row.conv, next)
	ids := make([]uint32, 0, len(row.ids)+len(resp.OutputIDs)+len(user))
	ids = append(append(append(ids, row.ids...), resp.OutputIDs...), user...)
	d.push(&event{t: d.now + turnGap, kind: evTurn, row: &turnRow{conv: row.conv, turn: next, ids: ids,
		out: sc.conv.replyLen(row.conv, next, sc.work.maxNew), prefer: d.urls[f.srv]}})
}

// probe is c's attempt to bring slot i up (Controller.Probe): on success its polls (kv-budget) and health
// checks start, else the next attempt is planned with back-off.
func (d *des) probe(c *client, i int) error {
	c.probing[i] = false
	if c.ctl.Ready(i) {
		return nil
	}
	if err := c.ctl.Probe(d.ctx, i); err != nil {
		var ae *sglang.AuthError
		if errors.As(err, &ae) {
			return err
		}
		d.scheduleProbe(c, i, d.now+c.probeWait[i])
		c.probeWait[i] = min(2*c.probeWait[i], probeMax)
		return nil
	}
	c.probeWait[i] = probeFirst
	c.gens[i]++
	if c.policy == admission.PolicyKVBudget {
		d.push(&event{t: d.now + admission.DefaultPollInterval.Seconds(), kind: evPoll, srv: i, gen: c.gens[i], cl: c.idx})
	}
	d.push(&event{t: d.now + admission.DefaultHealthInterval.Seconds(), kind: evHealth, srv: i, gen: c.gens[i], cl: c.idx})
	return nil
}

// poll is one of c's load polls of a server (Controller.Poll); a restart found sends c back to probing.
func (d *des) poll(c *client, e *event) error {
	if e.gen != c.gens[e.srv] || !c.ctl.Ready(e.srv) {
		return nil
	}
	if d.opts.Logger.Enabled(d.ctx, slog.LevelDebug) {
		for _, ep := range c.ctl.Endpoints() {
			d.opts.Logger.Debug("poll", "t", d.now, "client", c.idx, "ep", ep.URL, "rank", ep.Rank, "budget", int(ep.Budget),
				"charged", int(ep.Used), "inflight", ep.InFlight, "queue", ep.Load.Waiting, "kv", ep.Load.TokenUsage)
		}
	}
	restarted, err := c.ctl.Poll(d.ctx, e.srv)
	if err != nil {
		return err
	}
	if restarted {
		d.scheduleProbe(c, e.srv, d.now+probeFirst)
		return nil
	}
	d.push(&event{t: d.now + admission.DefaultPollInterval.Seconds(), kind: evPoll, srv: e.srv, gen: e.gen, cl: c.idx})
	return nil
}

// health is one of c's health checks of a server (Controller.Health); a drained server is probed again.
func (d *des) health(c *client, e *event) {
	if e.gen != c.gens[e.srv] || !c.ctl.Ready(e.srv) {
		return
	}
	_ = c.ctl.Health(d.ctx, e.srv) // a failure counts in the Controller: Ready says what it did
	if !c.ctl.Ready(e.srv) {
		d.scheduleProbe(c, e.srv, d.now+probeFirst)
		return
	}
	d.push(&event{t: d.now + admission.DefaultHealthInterval.Seconds(), kind: evHealth, srv: e.srv, gen: e.gen, cl: c.idx})
}

// down kills slot i's server: answers already on their way arrive; what still runs on it is lost and failed.
func (d *des) down(i int) error {
	for _, f := range d.inflight {
		if f.srv == i && f.finished {
			f.take()
		}
	}
	d.stopServer(i)
	for _, f := range slices.Clone(d.inflight) {
		if f.srv == i && !f.finished {
			if err := d.fail(f, f.take().err); err != nil {
				return err
			}
		}
	}
	clear(d.passEnds[i])
	return nil
}

// sample records one point of the time series, and the sums behind the measured window's means.
func (d *des) sample() {
	cur := d.snapshot()
	smp := Sample{T: d.now}
	var used, pool int64
	for i := range d.pools {
		smp.TokPerS += float64(cur.gen[i]-d.prev.gen[i]) / sampleEvery
		if s := d.net.server(i); s != nil {
			st := s.Stats()
			smp.Queue += st.Waiting
			used += int64(st.UsedTokens)
			pool += int64(st.MaxTotalTokens)
		}
	}
	if pool > 0 {
		smp.KVUsage = float64(used) / float64(pool)
	}
	d.res.Series = append(d.res.Series, smp)
	if d.now >= d.warmup {
		if d.atWarmup == nil && !d.finite {
			c := cur
			d.atWarmup = &c
		} else {
			d.queueSum += float64(smp.Queue)
			d.kvSum += smp.KVUsage
			d.queueN++
		}
	}
	d.prev = cur
	if !d.finite || d.makespan == 0 {
		d.push(&event{t: d.now + sampleEvery, kind: evSample})
	}
}

// results computes the run's figures from what it gathered.
func (d *des) results() (*BenchResult, *turnFigures, error) {
	sc, res := d.sc, d.res
	end := d.snapshot()
	if d.finite {
		if d.makespan == 0 {
			return nil, nil, fmt.Errorf("bench: %s stalled at %.0fs with %d of %d prompts done", sc.name, d.now, d.completed, sc.prompts)
		}
		res.MakespanS = d.makespan
		res.TokPerS = float64(d.outputTokens) / d.makespan
		for i := range d.pools {
			res.RetractionsTotal += end.retr[i]
		}
		res.Retractions = res.RetractionsTotal
		if sc.work.loops.rate > 0 {
			res.LoopRows, res.OutputTokens = d.loopRows, d.outputTokens
			res.RowsPerHour = float64(sc.prompts) / d.makespan * 3600
		}
	} else if err := d.steadyFigures(end); err != nil {
		return nil, nil, err
	}
	for _, c := range d.clients {
		res.ClientAborts += c.clientAborts
	}
	if d.replicas > 1 && d.finite {
		res.ReplicaTokPerS, res.ReplicaBalance = replicaFigures(d.clients[:d.replicas], d.makespan)
	}
	if d.queueN > 0 {
		res.MeanQueue = d.queueSum / float64(d.queueN)
		res.MeanKVUsage = d.kvSum / float64(d.queueN)
	}
	slices.Sort(d.latencies)
	res.P50LatencyS, res.P99LatencyS = quantile(d.latencies, 0.5), quantile(d.latencies, 0.99)
	d.opts.Logger.Info("run", "scenario", sc.name, "policy", d.spec.policy, "routing", d.spec.routing,
		"concurrency", d.spec.concurrency, "pools", sc.pools, "replicas", d.replicas, "foreign", sc.foreign,
		"tok_per_s", math.Round(res.TokPerS), "makespan_s", math.Round(res.MakespanS), "retractions", res.Retractions,
		"client_aborts", res.ClientAborts, "mean_queue", res.MeanQueue)
	if sc.conv != nil {
		if err := d.turnFigures(); err != nil {
			return nil, nil, err
		}
	}
	return res, &d.tf, nil
}

// steadyFigures computes a steady-state run's tok/s and retractions over the measured window, from the
// servers' figures at its end (and, with another client on the servers, each client's own tok/s).
func (d *des) steadyFigures(end snap) error {
	res := d.res
	if d.atWarmup == nil {
		return errors.New("bench: run ended before its warm-up")
	}
	span := res.Series[len(res.Series)-1].T - warmupSampleT(res.Series, d.warmup)
	for i := range d.pools {
		if span > 0 {
			res.TokPerS += float64(end.gen[i]-d.atWarmup.gen[i]) / span
		}
		res.Retractions += end.retr[i] - d.atWarmup.retr[i]
		res.RetractionsTotal += end.retr[i]
	}
	if d.sc.foreign > 0 && span > 0 {
		// The servers' tokens are both clients': each client's are those of the answers it received in
		// the window (a request's tokens count when its answer arrives; over the window the requests
		// running at its start and at its end make up for each other).
		res.ServerTokPerS = res.TokPerS
		res.TokPerS = 0
		for _, c := range d.clients {
			if c.foreign {
				res.ForeignTokPerS += float64(c.windowTokens) / span
			} else {
				res.TokPerS += float64(c.windowTokens) / span
			}
		}
	}
	return nil
}

// turnFigures completes a multi-turn run's figures: the servers' prompt and prefill tokens over all their
// lives, and the Controller's affinity hits and misses.
func (d *des) turnFigures() error {
	for i := range d.pools {
		d.tf.prompt += d.counters[i].prompt
		d.tf.prefill += d.counters[i].prefill
		if s := d.net.server(i); s != nil {
			st := s.Stats()
			d.tf.prompt += st.PromptTokens
			d.tf.prefill += st.PrefillTokens
		}
	}
	var err error
	if d.tf.hits, d.tf.misses, err = affinityCounts(d.clients[0].reg); err != nil {
		return err
	}
	d.opts.Logger.Info("multi-turn run", "affinity", d.spec.affinity, "turns", d.tf.requests, "prompt_tokens", d.tf.prompt,
		"prefill_tokens", d.tf.prefill, "cached_tokens", d.tf.cached, "affinity_hits", d.tf.hits, "affinity_misses", d.tf.misses)
	return nil
}

// balanceSlices is how many equal slices of the middle 80% of a run ReplicaBalance compares the replicas in.
const balanceSlices = 4

// replicaFigures returns each replica's output tok/s over the middle 80% of a finite run (answers received
// from 10% to 90% of the makespan), and the balance: the least, over that span and each of its
// balanceSlices slices, of the slowest replica's tok/s over the fastest's.
func replicaFigures(reps []*client, makespan float64) (tokPerS []float64, balance float64) {
	from, to := 0.1*makespan, 0.9*makespan
	rate := func(c *client, a, b float64) float64 {
		n := 0
		for _, d := range c.done {
			if d.t >= a && d.t < b {
				n += d.tokens
			}
		}
		return float64(n) / (b - a)
	}
	ratio := func(a, b float64) float64 {
		lo, hi := math.Inf(1), 0.0
		for _, c := range reps {
			r := rate(c, a, b)
			lo, hi = min(lo, r), max(hi, r)
		}
		if hi == 0 {
			return 1
		}
		return lo / hi
	}
	for _, c := range reps {
		tokPerS = append(tokPerS, rate(c, from, to))
	}
	balance = ratio(from, to)
	step := (to - from) / balanceSlices
	for k := range balanceSlices {
		balance = min(balance, ratio(from+float64(k)*step, from+float64(k+1)*step))
	}
	return tokPerS, balance
}
