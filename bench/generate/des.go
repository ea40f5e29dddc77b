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

// runFull is run, also returning the multi-turn figures (prompt, prefill and cached tokens, affinity).
// The policy under test runs as sc.replicas clients (replicas of `draftflow generate` splitting the dataset
// between them, row i to replica i mod replicas), beside the scenario's other client when it has one.
func (b *bencher) runFull(ctx context.Context, spec runSpec) (*BenchResult, *turnFigures, error) {
	select {
	case b.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	defer func() { <-b.sem }()
	opts := b.opts
	sc := spec.sc
	duration := opts.SimDuration.Seconds()
	warmup := duration * opts.WarmupFraction
	finite := sc.prompts > 0
	if finite {
		duration, warmup = math.Inf(1), 0
	}
	replicas := max(1, sc.replicas)
	if sc.conv != nil && (replicas > 1 || sc.foreign > 0) {
		return nil, nil, errors.New("bench: multi-turn runs have one client")
	}

	pools := slices.Clone(sc.pools)
	if sc.late != nil {
		pools = append(pools, sc.late.pool)
	}
	nslots := len(pools)
	simnet := newSimNet(nslots)
	starts := make([]int, nslots)
	counters := make([]slotCounters, nslots)
	var now float64 // simulated seconds
	defer func() {
		for i := range nslots {
			if s := simnet.down(i); s != nil {
				_ = s.Close()
			}
		}
	}()
	start := func(i int) error {
		s, err := sim.NewManual(sim.Config{MaxTotalTokens: pools[i], OutputLenDistribution: sim.DistFixed,
			OutputLenMean: 1, Seed: opts.Seed + int64(i) + 1000*int64(starts[i]), Logger: opts.Logger})
		if err != nil {
			return err
		}
		starts[i]++
		s.SetTime(now)
		simnet.up(i, s)
		return nil
	}
	stop := func(i int) {
		if s := simnet.down(i); s != nil {
			st := s.Stats()
			counters[i].gen += st.GeneratedTokens
			counters[i].retr += st.RetractionsTotal
			counters[i].prompt += st.PromptTokens
			counters[i].prefill += st.PrefillTokens
			_ = s.Close()
		}
	}
	// figures returns a slot's cumulative generated tokens and retractions (all its lives).
	figures := func(i int) (gen, retr int64) {
		gen, retr = counters[i].gen, counters[i].retr
		if s := simnet.server(i); s != nil {
			st := s.Stats()
			gen, retr = gen+st.GeneratedTokens, retr+st.RetractionsTotal
		}
		return gen, retr
	}

	urls := make([]string, nslots)
	for i := range urls {
		urls[i] = slotURL(i)
	}
	epoch := time.Unix(0, 0)
	clock := func() time.Time { return epoch.Add(time.Duration(now * float64(time.Second))) }
	newClient := func(idx int, policy, routing string, concurrency int, budget admission.BudgetConfig) (*client, error) {
		reg := prometheus.NewRegistry()
		ctl, err := admission.NewController(admission.Config{
			Endpoints:   urls,
			Policy:      policy,
			Concurrency: concurrency,
			Routing:     routing,
			Budget:      budget,
			HTTPClient:  &http.Client{Transport: simnet},
			Registerer:  reg,
			Logger:      opts.Logger,
			Clock:       clock,
		})
		if err != nil {
			return nil, err
		}
		return &client{idx: idx, ctl: ctl, reg: reg, policy: policy, first: 1, stride: 1, flights: map[*admission.Ticket]*flight{},
			gens: make([]int, nslots), probing: make([]bool, nslots), probeWait: make([]float64, nslots)}, nil
	}
	budget := opts.Budget
	if spec.budget != nil {
		budget = *spec.budget
	}
	var clients []*client
	for r := range replicas {
		c, err := newClient(len(clients), spec.policy, spec.routing, spec.concurrency, budget)
		if err != nil {
			return nil, nil, err
		}
		c.first, c.stride = int64(r+1), int64(replicas)
		clients = append(clients, c)
	}
	if sc.foreign > 0 {
		c, err := newClient(len(clients), admission.PolicyFixed, admission.RouteHeadroom, sc.foreign, admission.BudgetConfig{})
		if err != nil {
			return nil, nil, err
		}
		c.foreign, c.base = true, foreignBase
		clients = append(clients, c)
	}
	pollEvery := admission.DefaultPollInterval.Seconds()
	healthEvery := admission.DefaultHealthInterval.Seconds()
	const probeFirst, probeMax = 0.25, 5.0

	var q eventQueue
	var seq int64
	push := func(e *event) {
		seq++
		e.seq = seq
		heap.Push(&q, e)
	}
	passEnds := make([]map[float64]bool, nslots) // scheduled evPassEnd instants per slot
	for i := range passEnds {
		passEnds[i] = map[float64]bool{}
	}
	dirty := make([]bool, nslots)

	byRID := map[string]*flight{}
	var inflight []*flight // admitted and not settled, in admission order (all clients)
	var completed int64    // answers of the clients under test
	depth := backlogDepth
	if sc.backlog > 0 {
		depth = sc.backlog
	}
	// Multi-turn (one client): the turns by dataset row (until answered), the conversations started, the figures.
	rows := map[int64]*turnRow{}
	convs := 0
	var tf turnFigures
	offer := func(c *client, prompt int64, attemptNo int) {
		var ids []uint32
		var out int
		prefer := ""
		if row := rows[prompt]; row != nil {
			ids, out = row.ids, row.out
			if spec.affinity {
				prefer = row.prefer
			}
		} else {
			plen, o := sc.work.draw(prompt)
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
	refill := func(c *client) {
		for len(c.retries) > 0 {
			f := c.retries[0]
			c.retries = c.retries[1:]
			offer(c, f.prompt, f.attempt+1)
		}
		for c.waiting < depth && (!finite || c.foreign || c.offered < c.rows(int64(sc.prompts))) {
			if sc.conv != nil {
				// A new conversation starts; its later turns are offered as their previous turns finish.
				if convs == sc.conv.conversations {
					break
				}
				rows[c.offered+1] = &turnRow{conv: convs, ids: sc.conv.user(convs, 0), out: sc.conv.replyLen(convs, 0, sc.work.maxNew)}
				convs++
			}
			c.offered++
			offer(c, c.row(c.offered), 1)
		}
	}
	settle := func(f *flight) {
		f.settled = true
		delete(byRID, f.rid)
		inflight = slices.DeleteFunc(inflight, func(x *flight) bool { return x == f })
	}
	// fail reports an attempt that got no answer (its server died) and offers the prompt again.
	fail := func(f *flight, err error) error {
		settle(f)
		if err := f.c.ctl.Fail(f.t, err); err != nil {
			return err
		}
		f.c.retries = append(f.c.retries, f)
		return nil
	}
	// abandonDrained cancels the attempts on servers their Controller drained, as Do does: the charge goes
	// back, the request is aborted on its server (when it still answers) and retried.
	abandonDrained := func() error {
		for _, f := range slices.Clone(inflight) {
			select {
			case <-f.t.Drained():
			default:
				continue
			}
			settle(f)
			if err := f.c.ctl.Abandon(f.t); err != nil {
				return err
			}
			if simnet.server(f.srv) != nil && !f.finished {
				if err := f.c.ctl.Client(f.srv).Abort(ctx, f.rid); err == nil {
					f.c.clientAborts++
					dirty[f.srv] = true
				}
			}
			f.c.retries = append(f.c.retries, f)
		}
		return nil
	}
	send := func() {
		for _, c := range clients {
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
					byRID[f.rid] = f
					inflight = append(inflight, f)
					push(&event{t: now + sendDelay, kind: evArrive, srv: f.srv, f: f})
				}
				refill(c)
			}
		}
	}
	schedulePass := func(i int) {
		s := simnet.server(i)
		if s == nil {
			return
		}
		if end, busy := s.Poll(now); busy && !passEnds[i][end] {
			passEnds[i][end] = true
			push(&event{t: end, kind: evPassEnd, srv: i})
		}
	}
	scheduleProbe := func(c *client, i int, at float64) {
		if !c.probing[i] {
			c.probing[i] = true
			push(&event{t: at, kind: evProbe, srv: i, cl: c.idx})
		}
	}

	for i := range sc.pools {
		if err := start(i); err != nil {
			return nil, nil, err
		}
	}
	for _, c := range clients {
		for i := range nslots {
			c.probeWait[i] = probeFirst
			scheduleProbe(c, i, 0)
		}
	}
	if sc.outage != nil {
		push(&event{t: sc.outage.at, kind: evDown, srv: sc.outage.slot})
		push(&event{t: sc.outage.at + sc.outage.dur, kind: evUp, srv: sc.outage.slot})
	}
	if sc.late != nil {
		push(&event{t: sc.late.at, kind: evUp, srv: nslots - 1})
	}
	for _, c := range clients {
		refill(c)
	}
	push(&event{t: sampleEvery, kind: evSample})

	type snap struct{ gen, retr []int64 }
	take := func() snap {
		var s snap
		for i := range nslots {
			g, r := figures(i)
			s.gen = append(s.gen, g)
			s.retr = append(s.retr, r)
		}
		return s
	}
	res := &BenchResult{Scenario: sc.name}
	prev := take()
	var atWarmup *snap
	var queueSum, kvSum float64
	var queueN int
	var latencies []float64
	var outputTokens int64
	makespan := 0.0
	tested := int64(sc.prompts)

	for q.Len() > 0 {
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		e := heap.Pop(&q).(*event)
		now = e.t
		if now > duration {
			break
		}
		for i := range nslots {
			if s := simnet.server(i); s != nil {
				s.SetTime(now)
			}
		}
		var c *client
		if e.kind == evProbe || e.kind == evPoll || e.kind == evHealth {
			c = clients[e.cl]
		}
		switch e.kind {
		case evPassEnd:
			delete(passEnds[e.srv], e.t)
			s := simnet.server(e.srv)
			if s == nil {
				break
			}
			if end, busy := s.Poll(now); !busy || end > now {
				break // a pass of a server that died since, or planned again
			}
			for _, fin := range s.Finish() {
				f := byRID[fin.RID]
				if f == nil || f.settled {
					continue // an attempt abandoned before (aborted on our request)
				}
				if fin.FinishReason == "abort" {
					return nil, nil, fmt.Errorf("bench: request %s aborted by the simulator", fin.RID)
				}
				f.finished = true
				push(&event{t: now + replyDelay, kind: evReply, srv: e.srv, f: f})
			}
			dirty[e.srv] = true
		case evArrive:
			f := e.f
			if f.settled {
				break
			}
			cl := f.c.ctl.Client(f.srv)
			req := f.c.ctl.GenerateRequest(f.t)
			queued := make(chan struct{})
			go func() {
				resp, err := cl.Generate(sim.WithSubmitted(ctx, func() { close(queued) }), req)
				f.res <- attempt{resp, err}
			}()
			select {
			case <-queued:
				dirty[f.srv] = true
			case a := <-f.res:
				f.got = &a
				if a.err == nil {
					return nil, nil, fmt.Errorf("bench: request %s answered before it was queued", f.rid)
				}
				var se *sglang.StatusError
				if errors.As(a.err, &se) {
					return nil, nil, fmt.Errorf("bench: request %s refused: %w", f.rid, a.err)
				}
				if err := fail(f, a.err); err != nil {
					return nil, nil, err
				}
			}
		case evReply:
			f := e.f
			if f.settled {
				break
			}
			a := f.take()
			if a.err != nil {
				if err := fail(f, a.err); err != nil {
					return nil, nil, err
				}
				break
			}
			settle(f)
			lat := a.resp.MetaInfo.E2ELatency
			if err := f.c.ctl.Finish(f.t, a.resp, time.Duration(lat*float64(time.Second))); err != nil {
				return nil, nil, err
			}
			fc := f.c
			fc.completed++
			fc.outputTokens += int64(len(a.resp.OutputIDs))
			if finite {
				fc.done = append(fc.done, doneRec{t: now, tokens: len(a.resp.OutputIDs)})
			} else if atWarmup != nil {
				fc.windowTokens += int64(len(a.resp.OutputIDs))
			}
			if fc.foreign {
				break
			}
			completed++
			outputTokens += int64(len(a.resp.OutputIDs))
			if row := rows[f.prompt]; row != nil {
				delete(rows, f.prompt)
				tf.requests++
				tf.cached += int64(a.resp.MetaInfo.CachedTokens)
				tf.output += int64(len(a.resp.OutputIDs))
				if row.prefer == urls[f.srv] {
					tf.sameServer++
				}
				if next := row.turn + 1; next < sc.conv.turns {
					// The next turn's prompt: this turn's prompt and reply, then the next user message.
					user := sc.conv.user(row.conv, next)
					ids := make([]uint32, 0, len(row.ids)+len(a.resp.OutputIDs)+len(user))
					ids = append(append(append(ids, row.ids...), a.resp.OutputIDs...), user...)
					push(&event{t: now + turnGap, kind: evTurn, row: &turnRow{conv: row.conv, turn: next, ids: ids,
						out: sc.conv.replyLen(row.conv, next, sc.work.maxNew), prefer: urls[f.srv]}})
				}
			}
			if now >= warmup {
				latencies = append(latencies, lat)
			}
			if finite && completed == tested {
				makespan = now
			}
		case evProbe:
			c.probing[e.srv] = false
			if c.ctl.Ready(e.srv) {
				break
			}
			if err := c.ctl.Probe(ctx, e.srv); err != nil {
				var ae *sglang.AuthError
				if errors.As(err, &ae) {
					return nil, nil, err
				}
				scheduleProbe(c, e.srv, now+c.probeWait[e.srv])
				c.probeWait[e.srv] = min(2*c.probeWait[e.srv], probeMax)
				break
			}
			c.probeWait[e.srv] = probeFirst
			c.gens[e.srv]++
			if c.policy == admission.PolicyKVBudget {
				push(&event{t: now + pollEvery, kind: evPoll, srv: e.srv, gen: c.gens[e.srv], cl: c.idx})
			}
			push(&event{t: now + healthEvery, kind: evHealth, srv: e.srv, gen: c.gens[e.srv], cl: c.idx})
		case evPoll:
			if e.gen != c.gens[e.srv] || !c.ctl.Ready(e.srv) {
				break
			}
			if opts.Logger.Enabled(ctx, slog.LevelDebug) {
				for _, ep := range c.ctl.Endpoints() {
					opts.Logger.Debug("poll", "t", now, "client", c.idx, "ep", ep.URL, "rank", ep.Rank, "budget", int(ep.Budget),
						"charged", int(ep.Used), "inflight", ep.InFlight, "queue", ep.Load.Waiting, "kv", ep.Load.TokenUsage)
				}
			}
			restarted, err := c.ctl.Poll(ctx, e.srv)
			if err != nil {
				return nil, nil, err
			}
			if restarted {
				scheduleProbe(c, e.srv, now+probeFirst)
				break
			}
			push(&event{t: now + pollEvery, kind: evPoll, srv: e.srv, gen: e.gen, cl: c.idx})
		case evHealth:
			if e.gen != c.gens[e.srv] || !c.ctl.Ready(e.srv) {
				break
			}
			_ = c.ctl.Health(ctx, e.srv)
			if !c.ctl.Ready(e.srv) {
				scheduleProbe(c, e.srv, now+probeFirst)
				break
			}
			push(&event{t: now + healthEvery, kind: evHealth, srv: e.srv, gen: e.gen, cl: c.idx})
		case evDown:
			// Answers already on their way arrive; what still runs on the server is lost with it.
			for _, f := range inflight {
				if f.srv == e.srv && f.finished {
					f.take()
				}
			}
			stop(e.srv)
			for _, f := range slices.Clone(inflight) {
				if f.srv == e.srv && !f.finished {
					if err := fail(f, f.take().err); err != nil {
						return nil, nil, err
					}
				}
			}
			clear(passEnds[e.srv])
		case evTurn:
			c := clients[0]
			c.offered++
			rows[c.offered] = e.row
			offer(c, c.offered, 1)
		case evUp:
			if err := start(e.srv); err != nil {
				return nil, nil, err
			}
			for _, c := range clients {
				scheduleProbe(c, e.srv, now)
			}
		case evSample:
			cur := take()
			smp := Sample{T: now}
			var used, pool int64
			for i := range nslots {
				smp.TokPerS += float64(cur.gen[i]-prev.gen[i]) / sampleEvery
				if s := simnet.server(i); s != nil {
					st := s.Stats()
					smp.Queue += st.Waiting
					used += int64(st.UsedTokens)
					pool += int64(st.MaxTotalTokens)
				}
			}
			if pool > 0 {
				smp.KVUsage = float64(used) / float64(pool)
			}
			res.Series = append(res.Series, smp)
			if now >= warmup {
				if atWarmup == nil && !finite {
					c := cur
					atWarmup = &c
				} else {
					queueSum += float64(smp.Queue)
					kvSum += smp.KVUsage
					queueN++
				}
			}
			prev = cur
			if !finite || makespan == 0 {
				push(&event{t: now + sampleEvery, kind: evSample})
			}
		}
		if err := abandonDrained(); err != nil {
			return nil, nil, err
		}
		send()
		if finite && makespan > 0 {
			break
		}
		// Plan the servers' next passes once every event of this instant is in, as the scheduler receives
		// everything queued before it plans.
		if q.Len() == 0 || q[0].t > now {
			for i := range nslots {
				if dirty[i] {
					schedulePass(i)
				}
				dirty[i] = false
			}
		}
	}
	end := take()
	if finite {
		if makespan == 0 {
			return nil, nil, fmt.Errorf("bench: %s stalled at %.0fs with %d of %d prompts done", sc.name, now, completed, sc.prompts)
		}
		res.MakespanS = makespan
		res.TokPerS = float64(outputTokens) / makespan
		for i := range nslots {
			res.RetractionsTotal += end.retr[i]
		}
		res.Retractions = res.RetractionsTotal
	} else {
		if atWarmup == nil {
			return nil, nil, errors.New("bench: run ended before its warm-up")
		}
		span := res.Series[len(res.Series)-1].T - warmupSampleT(res.Series, warmup)
		for i := range nslots {
			if span > 0 {
				res.TokPerS += float64(end.gen[i]-atWarmup.gen[i]) / span
			}
			res.Retractions += end.retr[i] - atWarmup.retr[i]
			res.RetractionsTotal += end.retr[i]
		}
		if sc.foreign > 0 && span > 0 {
			// The servers' tokens are both clients': each client's are those of the answers it received in
			// the window (a request's tokens count when its answer arrives; over the window the requests
			// running at its start and at its end make up for each other).
			res.ServerTokPerS = res.TokPerS
			res.TokPerS = 0
			for _, c := range clients {
				if c.foreign {
					res.ForeignTokPerS += float64(c.windowTokens) / span
				} else {
					res.TokPerS += float64(c.windowTokens) / span
				}
			}
		}
	}
	for _, c := range clients {
		res.ClientAborts += c.clientAborts
	}
	if replicas > 1 && finite {
		res.ReplicaTokPerS, res.ReplicaBalance = replicaFigures(clients[:replicas], makespan)
	}
	if queueN > 0 {
		res.MeanQueue = queueSum / float64(queueN)
		res.MeanKVUsage = kvSum / float64(queueN)
	}
	slices.Sort(latencies)
	res.P50LatencyS, res.P99LatencyS = quantile(latencies, 0.5), quantile(latencies, 0.99)
	opts.Logger.Info("run", "scenario", sc.name, "policy", spec.policy, "routing", spec.routing,
		"concurrency", spec.concurrency, "pools", sc.pools, "replicas", replicas, "foreign", sc.foreign,
		"tok_per_s", math.Round(res.TokPerS), "makespan_s", math.Round(res.MakespanS), "retractions", res.Retractions,
		"client_aborts", res.ClientAborts, "mean_queue", res.MeanQueue)
	if sc.conv != nil {
		for i := range nslots {
			tf.prompt += counters[i].prompt
			tf.prefill += counters[i].prefill
			if s := simnet.server(i); s != nil {
				st := s.Stats()
				tf.prompt += st.PromptTokens
				tf.prefill += st.PrefillTokens
			}
		}
		var err error
		if tf.hits, tf.misses, err = affinityCounts(clients[0].reg); err != nil {
			return nil, nil, err
		}
		opts.Logger.Info("multi-turn run", "affinity", spec.affinity, "turns", tf.requests, "prompt_tokens", tf.prompt,
			"prefill_tokens", tf.prefill, "cached_tokens", tf.cached, "affinity_hits", tf.hits, "affinity_misses", tf.misses)
	}
	return res, &tf, nil
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
