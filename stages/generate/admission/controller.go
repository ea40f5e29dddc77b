package admission

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/draftflow/draftflow/sglang"
)

// Request is one generation for the Controller to run.
type Request struct {
	// RID is the base of SGLang's request ids (see RequestID); attempt n is sent as AttemptRID(RID, n).
	RID string
	// Key is the dataset and lane whose output lengths this request shares.
	Key LengthKey
	// InputIDs is the prompt.
	InputIDs []uint32
	// Sampling holds the sampling parameters; MaxNewTokens must be set.
	Sampling sglang.SamplingParams
	// Prefer is the URL of the server that generated the previous turn of the request's conversation: the
	// request goes there when it has room (its prompt prefix is in that server's radix cache), else wherever
	// routing sends it. Empty: no preference.
	Prefer string
	// StartBy, when set, ends the request's wait for a server: once it is closed, Do returns ErrNotStarted
	// instead of sending the request (or an attempt after a failed one). The stage closes it when the record's
	// partition is being given up, so work that has not started is left to the next owner.
	StartBy <-chan struct{}
}

// ErrNotStarted is Do's error for a request whose StartBy closed before a server took it: nothing was sent.
var ErrNotStarted = errors.New("generate: request not started: its record is being handed over")

// Result is a finished generation.
type Result struct {
	// Response is the server's answer, token-exact.
	Response *sglang.GenerateResponse
	// Endpoint is the base URL of the server that produced it.
	Endpoint string
	// ServedModel is the model path that server reported, if known.
	ServedModel string
	// Attempts counts the attempts made (1 when the first succeeded).
	Attempts int
}

// RejectedError is a request that must not be retried: the server refused it (HTTP 400), aborted it with a
// 4xx status, answered with something unusable, failed it too often, or never finished it within
// Config.RequestTimeout in Config.MaxTimeouts attempts. Reason is the server's message (or what happened),
// fit for a dead letter.
type RejectedError struct {
	// Reason says why, fit for a dead letter.
	Reason string
	// Err is the last attempt's error.
	Err error
}

// Error returns the reason.
func (e *RejectedError) Error() string { return "generate: rejected: " + e.Reason }

// Unwrap returns the last attempt's error.
func (e *RejectedError) Unwrap() error { return e.Err }

// Server states.
const (
	stateProbing  = iota // capacity not read yet (start, or after a drain): admits nothing
	stateReady           // admits requests
	stateDraining        // failed health checks or restarted: admits nothing until a probe succeeds
)

// server is one SGLang server: its client, health and capacity. Its requests are admitted through its
// endpoints. Fields below cl are guarded by Controller.mu.
type server struct {
	idx int // position in Config.Endpoints
	url string
	cl  *sglang.Client

	state         int
	cap           sglang.Capacity
	fails         int           // consecutive health/connection failures
	drainedSignal chan struct{} // closed and replaced when the server is drained
	// eps are the server's admission units: one per data-parallel rank under kv-budget (each rank has its own
	// KV pool and running batch), else one for the whole server.
	eps []*endpoint
	// retracted is the server's retraction counter at the last poll (when per-rank series are missing).
	retracted     float64
	haveRetracted bool
	// metaSilent is set once an answer's meta_info carried no retraction count (releases before 0.5.x
	// per-request counts): then meta_info cannot tell retractions apart from their absence.
	metaSilent bool

	// poll state, touched only by the server's watch goroutine (or the driver)
	polls          int  // polls since the server came up
	noLoads        bool // the server has no /v1/loads
	noMetrics      bool // the server exports no SGLang metrics
	warnedMismatch bool
	lastRecent     float64 // the retraction gauge at the last poll
}

// endpoint is an admission unit: a server, or one data-parallel rank of it, and the Controller's view of
// its budget and load. Fields are guarded by Controller.mu.
type endpoint struct {
	srv  *server
	rank int    // the DP rank requests are pinned to (routed_dp_rank), or -1: the server's balancer chooses
	name string // the metrics label: the server's URL, with "?dp_rank=N" for a rank

	pool       int // KV pool tokens (the rank's, or the server's sum)
	maxRunning int // running-batch limit, 0 when unknown

	budget   float64 // admission budget in charge units (tokens for kv-budget, requests for fixed)
	used     float64 // sum of the charges of in-flight requests
	inflight int
	leases   []*lease // in flight, in a deterministic order (see lease.pos)

	// feedback state (kv-budget)
	retracted     float64 // last value of the server's retraction counter for this rank
	haveRetracted bool    // the counter was read before
	metaRetracts  int     // retractions reported in meta_info since the last feedback tick
	cooldownUntil time.Time
	load          sglang.Load
	haveLoads     bool // the server answered /v1/loads at least once since it came up
	// KV gate (kv-budget with load data): the server's used KV tokens predicted from the last poll.
	gated          bool      // a poll gave load data: the gate applies
	polled         time.Time // time of the last poll
	sinceTok       float64   // prompt tokens admitted minus tokens freed by answers since the last poll
	lastAdmitBlock time.Time // last time a waiter found no room here
	// others is how many requests of other clients the rank ran or queued at the last poll (kv-budget with
	// load data; see holdsShare).
	others int
}

// ready reports whether ep admits requests.
func (ep *endpoint) ready() bool { return ep.srv.state == stateReady }

// lane is a scheduling class's state in the Controller.
type lane struct {
	cfg     Lane
	share   float64
	used    float64
	waiters []*waiter
}

// waiter is a request waiting for admission.
type waiter struct {
	req     *Request
	lane    *lane
	avoid   *endpoint // endpoint that just failed this request: used only when no other is ready
	ready   chan struct{}
	granted func() // called, c.mu held, once admitted (Offer)
	lease   *lease // set on admission
	since   time.Time
}

// lease is an admitted request's hold on an endpoint's budget. Its charge is re-estimated as the request
// ages (see recharge). Fields are guarded by Controller.mu.
type lease struct {
	ep     *endpoint
	lane   *lane
	req    *Request
	start  time.Time // admission
	charge float64
	pos    int           // index in ep.leases
	drain  chan struct{} // the server's drainedSignal at admission: closed once it is drained
}

// errDrained is the cause of an attempt cancelled because its endpoint was drained.
var errDrained = errors.New("generate: endpoint drained")

// Controller admits requests to SGLang endpoints under the configured policy, routes them, sends them with
// retries, and learns from their outcomes. Create it with NewController, start its feedback loops with Run,
// and send requests with Do from any number of goroutines.
type Controller struct {
	cfg Config
	now func() time.Time
	log *slog.Logger
	est *LengthEstimator
	met *metrics
	srv []*server

	mu     sync.Mutex
	eps    []*endpoint // every server's admission units, in server order (rebuilt as servers come up)
	fatal  error       // set once: the stage cannot go on (sglang.AuthError)
	failed chan struct{}
	lanes  map[string]*lane
	order  []*lane
	rr     int
	notify chan struct{} // poked when something in the admission state changes (tests and feedback)
	// started is when Run began; answered is set once any server answered anything (see UnreachableTimeout).
	started  time.Time
	answered bool
}

// NewController validates cfg and builds a Controller for cfg.Endpoints. It does no I/O; Run brings the
// endpoints up.
func NewController(cfg Config) (*Controller, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Controller{
		cfg:    cfg,
		now:    cfg.Clock,
		log:    cfg.Logger.With("stage", "generate"),
		est:    NewLengthEstimator(cfg.Budget.Quantile, cfg.Budget.Window, cfg.Budget.PriorOutputTokens),
		met:    newMetrics(cfg.Registerer),
		lanes:  map[string]*lane{},
		notify: make(chan struct{}, 1),
		failed: make(chan struct{}),
	}
	for i, u := range cfg.Endpoints {
		s := &server{idx: i, url: u, cl: sglang.NewClient(u, cfg.HTTPClient, cfg.APIKey), drainedSignal: make(chan struct{})}
		s.eps = []*endpoint{{srv: s, rank: -1, name: u}}
		c.srv = append(c.srv, s)
		c.eps = append(c.eps, s.eps...)
		c.met.endpointState(s.eps[0]) // down until probed: status shows an endpoint that never comes up
	}
	lanes := cfg.Lanes
	if len(lanes) == 0 {
		lanes = []Lane{{Name: DefaultLane}}
	}
	given, free := 0.0, 0
	for _, l := range lanes {
		given += l.Share
		if l.Share == 0 {
			free++
		}
	}
	for _, l := range lanes {
		ls := &lane{cfg: l, share: l.Share}
		if ls.share == 0 {
			ls.share = (1 - given) / float64(free)
		}
		c.lanes[l.Name] = ls
		c.order = append(c.order, ls)
	}
	return c, nil
}

// Estimator returns the Controller's output length estimator.
func (c *Controller) Estimator() *LengthEstimator { return c.est }

// ResolveLane returns the lane of a record of dataset that names lane (possibly ""): the named lane when it
// is configured, else the first lane listing the dataset, else the first configured lane (DefaultLane
// when none is).
func (c *Controller) ResolveLane(dataset, laneName string) Lane {
	if l, ok := c.lanes[laneName]; ok && laneName != "" {
		return l.cfg
	}
	for _, l := range c.order {
		if slices.Contains(l.cfg.Datasets, dataset) {
			return l.cfg
		}
	}
	return c.order[0].cfg
}

// MaxNewTokens resolves a record's max_new_tokens: its own setting, else its lane's, else the default.
func (c *Controller) MaxNewTokens(own int, l Lane) int {
	switch {
	case own > 0:
		return own
	case l.MaxNewTokens > 0:
		return l.MaxNewTokens
	}
	return c.cfg.DefaultMaxNewTokens
}

// charge is what an in-flight request costs its endpoint's budget.
func (c *Controller) charge(r *Request) float64 {
	if c.cfg.Policy == PolicyFixed {
		return 1
	}
	return float64(len(r.InputIDs) + c.est.Expected(r.Key, r.Sampling.MaxNewTokens))
}

// fits reports whether ep can take a request of charge now.
func (c *Controller) fits(ep *endpoint, charge float64, prompt, maxNew int) bool {
	if !ep.ready() {
		return false
	}
	if c.cfg.Policy == PolicyKVBudget && ep.maxRunning > 0 &&
		ep.inflight >= ep.maxRunning+c.cfg.Budget.MaxServerQueue {
		return false
	}
	if ep.inflight == 0 {
		return true
	}
	if ep.used+charge <= ep.budget && c.gateOpen(ep, prompt, maxNew) {
		return true
	}
	return c.holdsShare(ep, prompt)
}

// holdsShare is the kv-budget policy's answer to a server that other clients share: whether a request the
// budget or the KV gate holds back may go to ep anyway, so that this Controller keeps its share of the
// server.
//
// The gate and the budget wait for room on the server. That works while this Controller is the server's
// only client: what it holds back stays free for its own later requests. Another client's requests cannot
// be displaced by waiting: SGLang admits first come, first served, so while other clients keep the pool
// full, every slot that frees goes to whatever waits on the server, and a client that sends only when
// there is room is left with a request or two in flight (issue 22: 0.28x the tok/s of a fixed client in
// its place). A server shares its running batch out in proportion to the requests each client keeps on it.
// So while the last poll saw other clients' requests on the rank (its running and waiting requests beyond
// this Controller's in flight), a request goes as long as this Controller, with it, keeps fewer requests
// there than the others do, and as long as the pool holds that many of its requests at their mean length
// (the mean prompt in flight and half the mean recent output: what a request holds on average over its
// life). It never takes more than the others hold, nor more than it would run alone. Against a client that
// keeps N in flight whatever happens, it keeps N-1, about what a fixed client in its place gets. Two
// Controllers (two replicas of the stage) can each only come up to one fewer than the other this way, so
// this path lets the one behind catch up and cannot hold either's level: the pair steps down to what the
// pool holds, where the KV gate governs again. Without others on the rank nothing changes. c.mu must be
// held.
func (c *Controller) holdsShare(ep *endpoint, prompt int) bool {
	if !ep.gated || ep.inflight+1 >= ep.others {
		return false
	}
	prompts := prompt
	for _, ls := range ep.leases {
		prompts += len(ls.req.InputIDs)
	}
	n := float64(len(ep.leases) + 1)
	return float64(prompts)+n*c.est.RecentMean(recentMeanWindow)/2 <= float64(ep.pool)
}

// recentMeanWindow is how many recent completions the gate's backstop averages: few enough to follow a
// workload whose lengths shift within minutes.
const recentMeanWindow = 128

// maxFinishShare caps one request's chance to finish in the gate's sum, so a request sure to end counts as
// a large but finite term.
const maxFinishShare = 0.9

// gateOpen is the KV gate of the kv-budget policy: whether a request with a prompt of prompt tokens may go
// to ep now, judged by the KV tokens the server is predicted to hold (predictedUsed) and the running
// batch's ages. The server retracts when its running requests grow into a full pool before enough of them
// finish; SGLang's own admission counts on them needing only a fraction of their max_new_tokens and fills
// the pool. So a request goes only while the headroom left after its prompt, shared by the batch (each
// request may grow headroom/n tokens before the pool is full), is expected to see at least
// BudgetConfig.SafeCompletions of the running requests finish, each with the chance that a request still
// running after the tokens it produced so far ends within that much more (LengthEstimator.FinishShare),
// and while usage stays under TargetUsage. Young batches of short requests run close to the pool; old
// batches of long ones keep more room. c.mu must be held.
func (c *Controller) gateOpen(ep *endpoint, prompt, maxNew int) bool {
	if !ep.gated {
		return true
	}
	return c.gateOpenAt(ep, c.predictedUsed(ep), prompt, maxNew)
}

// gateOpenAt is the KV gate with the pool holding predicted KV tokens. c.mu must be held.
func (c *Controller) gateOpenAt(ep *endpoint, predicted float64, prompt, maxNew int) bool {
	pool := float64(ep.pool)
	used := predicted + float64(prompt)
	if used > c.cfg.Budget.TargetUsage*pool {
		return false
	}
	// Backstop against a length estimate the batch has outgrown: past half the pool, keep free the KV of
	// HeadroomOutputs recent mean outputs.
	if used > pool/2 && pool-used < c.cfg.Budget.HeadroomOutputs*c.est.RecentMean(recentMeanWindow) {
		return false
	}
	want := c.cfg.Budget.SafeCompletions
	if f := c.cfg.Budget.SafeFraction; f > 0 {
		// On a small pool the batch is small: expecting SafeCompletions of a dozen requests to finish is
		// asking most of them to, and the pool runs half empty. A fraction of the batch bounds the demand.
		want = min(want, max(1, f*float64(len(ep.leases))))
	}
	if want <= 0 {
		return true
	}
	share := (pool - used) / float64(len(ep.leases)+1)
	rate := 0.0
	if ep.load.Running > 0 {
		rate = ep.load.GenThroughput / float64(ep.load.Running)
	}
	now := c.now()
	hazard, worst := 0.0, float64(maxNew)
	for _, ls := range ep.leases {
		produced := int(rate * now.Sub(ls.start).Seconds())
		worst += float64(max(0, ls.req.Sampling.MaxNewTokens-produced))
		p := c.est.FinishShare(ls.req.Key, produced, int(share), ls.req.Sampling.MaxNewTokens)
		hazard -= math.Log(1 - min(p, maxFinishShare))
		if hazard >= want {
			return true
		}
	}
	// A batch that cannot overflow the pool even if every request runs to max_new_tokens is safe.
	return worst <= pool-used
}

// predictedUsed is the KV tokens the server is predicted to hold now: the last poll's num_used_tokens,
// plus the prompts of the requests waiting on the server then and of those sent since, less what answers
// received since freed, plus what the running batch decoded since (gen_throughput times the time
// elapsed). c.mu must be held.
func (c *Controller) predictedUsed(ep *endpoint) float64 {
	grown := ep.load.GenThroughput * c.now().Sub(ep.polled).Seconds()
	return float64(ep.load.UsedTokens) + ep.sinceTok + grown
}

// route picks the endpoint for a request of charge, or nil when none has room.
// routePreferring is route, except that a request with a preferred server goes to it (its rank with the
// most room, for a DP server) when one fits and it did not just fail the request. It counts affinity hits
// and misses.
func (c *Controller) routePreferring(prefer string, charge float64, prompt, maxNew int, avoid *endpoint) *endpoint {
	if prefer == "" {
		return c.route(charge, prompt, maxNew, avoid)
	}
	var best *endpoint
	for _, ep := range c.eps {
		if ep.srv.url != prefer || (avoid != nil && ep.srv == avoid.srv) || !c.fits(ep, charge, prompt, maxNew) {
			continue
		}
		if best == nil || ep.budget-ep.used > best.budget-best.used {
			best = ep
		}
	}
	if best != nil {
		c.met.affinity.WithLabelValues("hit").Inc()
		return best
	}
	ep := c.route(charge, prompt, maxNew, avoid)
	if ep != nil {
		c.met.affinity.WithLabelValues("miss").Inc()
	}
	return ep
}

func (c *Controller) route(charge float64, prompt, maxNew int, avoid *endpoint) *endpoint {
	if avoid != nil {
		others := false
		for _, ep := range c.eps {
			others = others || (ep.srv != avoid.srv && ep.ready())
		}
		if !others {
			avoid = nil
		}
	}
	if c.cfg.Routing == RouteRoundRobin {
		for i := range c.eps {
			ep := c.eps[(c.rr+i)%len(c.eps)]
			if (avoid == nil || ep.srv != avoid.srv) && c.fits(ep, charge, prompt, maxNew) {
				c.rr = (c.rr + i + 1) % len(c.eps)
				return ep
			}
		}
		return nil
	}
	var best *endpoint
	bestRoom := 0.0
	for _, ep := range c.eps {
		if (avoid != nil && ep.srv == avoid.srv) || !c.fits(ep, charge, prompt, maxNew) {
			continue
		}
		room := 1.0
		switch {
		case ep.gated:
			// KV headroom the server is predicted to have, relative to its pool.
			pool := float64(ep.pool)
			room = (pool - c.predictedUsed(ep) - float64(prompt)) / pool
		case ep.budget > 0:
			room = (ep.budget - ep.used - charge) / ep.budget
		}
		if best == nil || room > bestRoom {
			best, bestRoom = ep, room
		}
	}
	return best
}

// admit grants waiting requests while some endpoint has room. Lanes are served most-underserved first
// (charge in flight relative to their share of the total budget); when an underserved lane's head does not
// fit anywhere, lanes already over their share wait, so capacity frees up for it. c.mu must be held.
func (c *Controller) admit() {
	for {
		total := 0.0
		for _, ep := range c.eps {
			if ep.ready() {
				total += ep.budget
			}
		}
		cands := make([]*lane, 0, len(c.order))
		for _, l := range c.order {
			if len(l.waiters) > 0 {
				cands = append(cands, l)
			}
		}
		if len(cands) == 0 || total == 0 {
			return
		}
		slices.SortStableFunc(cands, func(a, b *lane) int {
			x, y := a.used/a.share, b.used/b.share
			switch {
			case x < y:
				return -1
			case x > y:
				return 1
			}
			return 0
		})
		granted, reserve := false, false
		for _, l := range cands {
			under := l.used < l.share*total
			if reserve && !under {
				continue
			}
			w := l.waiters[0]
			charge := c.charge(w.req)
			ep := c.routePreferring(w.req.Prefer, charge, len(w.req.InputIDs), w.req.Sampling.MaxNewTokens, w.avoid)
			if ep == nil {
				now := c.now()
				for _, e := range c.eps {
					e.lastAdmitBlock = now
				}
				if under {
					reserve = true
				}
				continue
			}
			l.waiters = l.waiters[1:]
			w.lease = &lease{ep: ep, lane: l, req: w.req, start: c.now(), charge: charge, drain: ep.srv.drainedSignal}
			w.lease.pos = len(ep.leases)
			ep.leases = append(ep.leases, w.lease)
			ep.sinceTok += float64(len(w.req.InputIDs))
			ep.used += charge
			ep.inflight++
			l.used += charge
			c.met.admitted(ep, l.cfg.Name, c.now().Sub(w.since))
			close(w.ready)
			if w.granted != nil {
				w.granted()
			}
			granted = true
			break
		}
		if !granted {
			return
		}
	}
}

// laneOf returns the lane state of r.
func (c *Controller) laneOf(r *Request) *lane {
	if l := c.lanes[r.Key.Lane]; l != nil {
		return l
	}
	return c.order[0]
}

// enqueue queues w for admission and admits whatever fits.
func (c *Controller) enqueue(w *waiter) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.req.Prefer != "" {
		// A later turn of a conversation goes ahead of the first turns waiting in its lane (after the later
		// turns already waiting): it finishes conversations sooner and reaches its server while the
		// previous turn's prefix is still in the radix cache.
		i := len(w.lane.waiters)
		for i > 0 && w.lane.waiters[i-1].req.Prefer == "" {
			i--
		}
		w.lane.waiters = slices.Insert(w.lane.waiters, i, w)
	} else {
		w.lane.waiters = append(w.lane.waiters, w)
	}
	c.met.queue(w.lane.cfg.Name, len(w.lane.waiters))
	c.admit()
}

// acquire waits until r is admitted on some endpoint.
func (c *Controller) acquire(ctx context.Context, r *Request, avoid *endpoint) (*lease, error) {
	l := c.laneOf(r)
	w := &waiter{req: r, lane: l, avoid: avoid, ready: make(chan struct{}), since: c.now()}
	c.enqueue(w)
	gaveUp := error(nil)
	select {
	case <-w.ready:
		return w.lease, nil
	case <-ctx.Done():
		gaveUp = ctx.Err()
	case <-r.StartBy: // nil: never
		gaveUp = ErrNotStarted
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-w.ready: // granted while we were giving up: hand it back
		c.releaseLocked(w.lease)
	default:
		l.waiters = slices.DeleteFunc(l.waiters, func(x *waiter) bool { return x == w })
	}
	c.met.queue(l.cfg.Name, len(l.waiters))
	return nil, gaveUp
}

// finish ends a lease whose request the server answered: the output length is learnt, the retractions count
// as feedback, and the charge goes back to the budget.
func (c *Controller) finish(ls *lease, r *Request, resp *sglang.GenerateResponse, took time.Duration) {
	outputTokens := len(resp.OutputIDs)
	retractions, reported := resp.MetaInfo.RetractionCount()
	c.est.Observe(r.Key, outputTokens)
	c.mu.Lock()
	ls.ep.sinceTok -= float64(len(r.InputIDs) + outputTokens)
	if !reported && !ls.ep.srv.metaSilent {
		ls.ep.srv.metaSilent = true
		c.log.Info("server reports no per-request retraction counts in meta_info", "endpoint", ls.ep.srv.url)
	}
	c.mu.Unlock()
	c.release(ls, retractions)
	c.met.finished(ls.ep, outputTokens, retractions, took)
	c.met.estimate(r.Key, c.est.Expected(r.Key, 0))
}

// release returns a lease's charge and admits whoever now fits.
func (c *Controller) release(ls *lease, retractions int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ls.ep.metaRetracts += retractions
	c.releaseLocked(ls)
}

func (c *Controller) releaseLocked(ls *lease) {
	if l := ls.ep.leases; ls.pos < len(l) && l[ls.pos] == ls {
		last := l[len(l)-1]
		l[ls.pos], last.pos = last, ls.pos
		ls.ep.leases = l[:len(l)-1]
	}
	ls.ep.used -= ls.charge
	ls.ep.inflight--
	ls.lane.used -= ls.charge
	if ls.ep.inflight == 0 {
		ls.ep.used = 0 // shed float drift
	}
	c.met.endpointState(ls.ep)
	c.admit()
	c.met.queue(ls.lane.cfg.Name, len(ls.lane.waiters))
}

// Waiting returns how many requests wait for admission, over all lanes.
func (c *Controller) Waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, l := range c.order {
		n += len(l.waiters)
	}
	return n
}

// EndpointStatus is a snapshot of one admission unit as the Controller sees it: a server, or one
// data-parallel rank of it.
type EndpointStatus struct {
	// URL is the server's base URL.
	URL string
	// Rank is the DP rank requests are pinned to, or -1 for the whole server.
	Rank int
	// Ready is true while it admits requests.
	Ready bool
	// Capacity is what the server reported (all of its ranks).
	Capacity sglang.Capacity
	// Pool is this unit's KV pool in tokens.
	Pool int
	// Budget is the unit's admission budget (kv-budget: tokens; fixed: requests).
	Budget float64
	// Used is the budget charge of the requests in flight.
	Used float64
	// InFlight counts the requests admitted and not finished.
	InFlight int
	// Load is the unit's last /v1/loads figures (its rank's).
	Load sglang.Load
}

// Endpoints returns a snapshot of every admission unit, in server order.
func (c *Controller) Endpoints() []EndpointStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]EndpointStatus, len(c.eps))
	for i, ep := range c.eps {
		out[i] = EndpointStatus{URL: ep.srv.url, Rank: ep.rank, Ready: ep.ready(), Capacity: ep.srv.cap, Pool: ep.pool,
			Budget: ep.budget, Used: ep.used, InFlight: ep.inflight, Load: ep.load}
	}
	return out
}

// AnyReady reports whether some server admits requests.
func (c *Controller) AnyReady() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.srv {
		if s.state == stateReady {
			return true
		}
	}
	return false
}

// Fatal is closed once the Controller met an error retrying cannot cure (a server refusing the API key);
// Err returns it.
func (c *Controller) Fatal() <-chan struct{} { return c.failed }

// Err returns the error that closed Fatal, or nil.
func (c *Controller) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fatal
}

// fail records a fatal error (the first one wins) and closes Fatal.
func (c *Controller) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fatal == nil {
		c.fatal = err
		c.log.Error("generate cannot go on", "err", err)
		close(c.failed)
	}
}

// Do runs one request to completion: it waits for admission, sends the request, and retries connection
// errors, timeouts, 5xx and 503 answers and aborts without status with exponential backoff, on another
// endpoint where one is ready. An attempt in flight on an endpoint that gets drained is cancelled at once and
// retried. It returns the Result, a *RejectedError for a request the server refuses (HTTP 400, an abort with
// a 4xx status, an invalid answer, MaxServerErrors HTTP 500s or MaxTimeouts attempts that ran into
// RequestTimeout), or ctx's error once ctx ends; an attempt cut short by ctx, its timeout or a drain is
// aborted on its server.
func (c *Controller) Do(ctx context.Context, r *Request) (*Result, error) {
	if r.Sampling.MaxNewTokens <= 0 {
		return nil, errors.New("generate: request without max_new_tokens")
	}
	b := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(c.cfg.RetryInitial),
		backoff.WithMaxInterval(c.cfg.RetryMax),
		backoff.WithMaxElapsedTime(0),
	)
	var (
		attempts, serverErrors, timeouts int
		avoid                            *endpoint
	)
	op := func() (*Result, error) {
		ls, err := c.acquire(ctx, r, avoid)
		if err != nil {
			return nil, backoff.Permanent(err)
		}
		attempts++
		ep := ls.ep
		// The attempt ends early when its endpoint is drained: a dying server's requests move on at once.
		dctx, drainCancel := context.WithCancelCause(ctx)
		go func() {
			select {
			case <-ls.drain:
				drainCancel(errDrained)
			case <-dctx.Done():
			}
		}()
		actx, cancel := context.WithTimeout(dctx, c.cfg.RequestTimeout)
		start := c.now()
		rid := AttemptRID(r.RID, attempts)
		resp, err := ep.srv.cl.Generate(actx, c.generateRequest(ep, r, rid))
		timedOut := errors.Is(actx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
		drained := errors.Is(context.Cause(dctx), errDrained) && ctx.Err() == nil && !timedOut
		cancel()
		drainCancel(nil)
		if err == nil {
			c.mu.Lock()
			ep.srv.fails = 0
			served := ep.srv.cap.ServedModel
			c.mu.Unlock()
			c.finish(ls, r, resp, c.now().Sub(start))
			return &Result{Response: resp, Endpoint: ep.srv.url, ServedModel: served, Attempts: attempts}, nil
		}
		var ae *sglang.AuthError
		if errors.As(err, &ae) {
			// No retry can cure a refused key: stop the stage (the record is redelivered after the fix).
			c.release(ls, 0)
			c.met.outcome(ep, "unauthorized")
			c.fail(err)
			return nil, backoff.Permanent(err)
		}
		kind, reason := classify(err)
		drained = drained && kind == outcomeConnection // an answer that arrived anyway counts as what it says
		switch {
		case ctx.Err() != nil || timedOut:
			// Abandoned: make sure the server stops spending KV on it.
			c.abort(ep, rid)
		case drained:
			// The same, in the background: a drained server may not answer, and the retry need not wait.
			go c.abort(ep, rid)
		}
		c.release(ls, 0)
		if ctx.Err() != nil {
			return nil, backoff.Permanent(ctx.Err())
		}
		if drained {
			c.met.outcome(ep, "drained")
			c.log.Info("request moved off a drained endpoint", "endpoint", ep.name, "rid", rid)
			avoid = ep
			return nil, err
		}
		switch kind {
		case outcomeReject:
			c.met.outcome(ep, "rejected")
			return nil, backoff.Permanent(&RejectedError{Reason: reason, Err: err})
		case outcomeServerError:
			serverErrors++
			c.met.outcome(ep, "server_error")
			if serverErrors >= c.cfg.MaxServerErrors {
				return nil, backoff.Permanent(&RejectedError{
					Reason: fmt.Sprintf("server failed the request %d times, last: %s", serverErrors, reason), Err: err})
			}
		case outcomeBusy:
			c.met.outcome(ep, "busy")
		case outcomeConnection:
			if !timedOut {
				c.met.outcome(ep, "connection_error")
				c.reportFailure(ep, err)
				break
			}
			timeouts++
			c.met.outcome(ep, "timeout")
			if timeouts >= c.cfg.MaxTimeouts {
				c.log.Warn("request keeps timing out; dead-lettering it", "rid", r.RID, "endpoint", ep.name,
					"timeouts", timeouts, "request_timeout", c.cfg.RequestTimeout)
				return nil, backoff.Permanent(&RejectedError{Reason: fmt.Sprintf(
					"request timed out %d times (request timeout %s)", timeouts, c.cfg.RequestTimeout), Err: err})
			}
		case outcomeMisconfigured:
			c.met.outcome(ep, "client_error")
			c.log.Error("endpoint refuses requests; check --sglang", "endpoint", ep.name, "err", err)
		}
		avoid = ep
		return nil, err
	}
	notify := func(err error, wait time.Duration) {
		c.log.Debug("retrying request", "rid", r.RID, "err", err, "in", wait)
	}
	return backoff.RetryNotifyWithData(op, backoff.WithContext(b, ctx), notify)
}

// RequestID is the base request id of a record's turn: "<id>#<turn>", with '%' and ';' in id written as
// %25 and %3B, so that the only ';' of an attempt's rid is its terminator (see AttemptRID) and distinct
// (id, turn) pairs keep distinct rids.
func RequestID(id string, turn int) string { return ridEscaper.Replace(id) + "#" + strconv.Itoa(turn) }

var ridEscaper = strings.NewReplacer("%", "%25", ";", "%3B")

// AttemptRID is the rid sent for attempt n (1-based) of a request: "<base>.<n>;". Every attempt has its own
// rid, so aborting an abandoned attempt never hits its retry, and the terminator keeps rids prefix-free
// (SGLang's /abort_request matches by prefix).
func AttemptRID(base string, n int) string { return base + "." + strconv.Itoa(n) + ";" }

// generateRequest is the /generate body of one attempt of r on ep: pinned to ep's DP rank when ep is one.
func (c *Controller) generateRequest(ep *endpoint, r *Request, rid string) *sglang.GenerateRequest {
	g := &sglang.GenerateRequest{InputIDs: r.InputIDs, RID: rid, SamplingParams: r.Sampling}
	if ep.rank >= 0 {
		rank := ep.rank
		g.RoutedDPRank = &rank
	}
	return g
}

// abort tells ep's server to stop working on rid; best effort, bounded.
func (c *Controller) abort(ep *endpoint, rid string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ep.srv.cl.Abort(ctx, rid); err != nil {
		c.log.Debug("abort_request failed", "endpoint", ep.srv.url, "rid", rid, "err", err)
	}
}

// reportFailure counts a connection failure against ep's server; enough of them in a row drain it.
func (c *Controller) reportFailure(ep *endpoint, err error) { c.countHealth(ep.srv, err) }

// countHealth records one health check or attempt outcome of s: a success resets its failure count, and
// HealthFailures failures in a row drain it while it is up. It reports whether s is drained now.
func (c *Controller) countHealth(s *server, err error) (drained bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		s.fails = 0
		return false
	}
	s.fails++
	if s.state == stateReady && s.fails >= c.cfg.HealthFailures {
		c.drainLocked(s, err)
	}
	return s.state == stateDraining
}

// drainLocked stops admissions to s until a probe brings it back, and cancels the attempts in flight on it
// (they are retried elsewhere). c.mu must be held.
func (c *Controller) drainLocked(s *server, err error) {
	if s.state == stateDraining {
		return
	}
	inflight := 0
	for _, ep := range s.eps {
		inflight += ep.inflight
	}
	c.log.Warn("endpoint drained", "endpoint", s.url, "inflight", inflight, "err", err)
	s.state = stateDraining
	close(s.drainedSignal)
	s.drainedSignal = make(chan struct{})
	for _, ep := range s.eps {
		c.met.endpointState(ep)
	}
}

// outcome kinds of a failed attempt.
const (
	outcomeReject        = iota // permanent: dead-letter the record
	outcomeServerError          // HTTP 500 or a server-side abort: retry, a bounded number of times
	outcomeBusy                 // 503, 429, 408, 502, 504, an abort without status: retry
	outcomeConnection           // transport error or timeout: retry, count against the endpoint
	outcomeMisconfigured        // other 4xx: retry, loudly
)

// classify maps an attempt's error to what to do about it, with the reason to record.
func classify(err error) (int, string) {
	var se *sglang.StatusError
	var ab *sglang.AbortedError
	var ir *sglang.InvalidResponseError
	switch {
	case errors.As(err, &se):
		switch {
		case se.Code == http.StatusBadRequest && strings.Contains(se.Message, "Duplicate request ID"):
			// Another replica runs the same record (a redelivery); the next attempt has a fresh rid.
			return outcomeBusy, se.Message
		case se.Code == http.StatusBadRequest || se.Code == http.StatusRequestEntityTooLarge ||
			se.Code == http.StatusUnprocessableEntity:
			return outcomeReject, se.Message
		case se.Code == http.StatusServiceUnavailable || se.Code == http.StatusTooManyRequests ||
			se.Code == http.StatusRequestTimeout || se.Code == http.StatusBadGateway ||
			se.Code == http.StatusGatewayTimeout:
			return outcomeBusy, se.Message
		case se.Code >= 500:
			return outcomeServerError, se.Message
		}
		return outcomeMisconfigured, se.Message
	case errors.As(err, &ab):
		reason := ab.Message
		if reason == "" {
			reason = "aborted by the server"
		}
		switch code := ab.StatusCode; {
		case code == 0:
			// No status: the server ended the request for its own reasons (abort_all, pause_generation, a
			// weight update), not because of the request. Run it again.
			return outcomeBusy, reason
		case code == http.StatusServiceUnavailable || code == http.StatusTooManyRequests ||
			code == http.StatusRequestTimeout || code == http.StatusBadGateway || code == http.StatusGatewayTimeout:
			return outcomeBusy, reason
		case code >= 500:
			return outcomeServerError, reason
		}
		// A 4xx status: the request itself is at fault (invalid grammar, too long, ...).
		return outcomeReject, reason
	case errors.As(err, &ir):
		return outcomeReject, ir.Error()
	}
	return outcomeConnection, err.Error()
}

// Config returns the Controller's configuration, defaults applied.
func (c *Controller) Config() Config { return c.cfg }
