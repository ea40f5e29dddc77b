package admission

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/draftflow/draftflow/sglang"
)

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
	lastErr       error         // why the server is not up: the last failed probe, or what drained it
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

// Controller admits requests to SGLang endpoints under the configured policy, routes them, and learns from
// their outcomes and from the servers' health and load. It keeps no goroutines or timers: a driver calls
// it on its own clock (Config.Clock): Probe, Health and Poll for each server, Offer (then Retry) for each
// request, and Finish, Fail, Abandon or Withdraw for each admitted attempt. The generate stage drives it in
// real time, the benchmark on simulated time. Its methods are safe for concurrent use.
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
	// started is when the Controller was made; answered is set once any server answered anything (see
	// UnreachableTimeout).
	started  time.Time
	answered bool
}

// NewController validates cfg and builds a Controller for cfg.Endpoints. It does no I/O; Probe brings the
// endpoints up.
func NewController(cfg Config) (*Controller, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Controller{
		cfg:     cfg,
		now:     cfg.Clock,
		log:     cfg.Logger.With("stage", "generate"),
		est:     NewLengthEstimator(cfg.Budget.Quantile, cfg.Budget.Window, cfg.Budget.PriorOutputTokens),
		met:     newMetrics(cfg.Registerer),
		lanes:   map[string]*lane{},
		failed:  make(chan struct{}),
		started: cfg.Clock(),
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

// Stalled says why no request can be admitted now, in words for an operator ("" when one can, none waits, or a
// server was not probed yet): no server is up (each server's URL and why: its last failed probe, or what drained
// it; "answers" when none of them answered anything yet), or requests wait while every server that is up is at
// its admission budget.
func (c *Controller) Stalled() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var down []string
	for _, s := range c.srv {
		if s.state == stateReady {
			down = nil
			break
		}
		if s.lastErr == nil {
			return "" // not probed yet: too soon to say
		}
		down = append(down, s.url+": "+s.lastErr.Error())
	}
	if len(down) > 0 {
		verb := "is ready"
		if !c.answered {
			verb = "answers"
		}
		return "no SGLang server " + verb + " (" + strings.Join(down, "; ") + ")"
	}
	waiting, inflight := 0, 0
	for _, l := range c.order {
		waiting += len(l.waiters)
	}
	if waiting == 0 {
		return ""
	}
	for _, ep := range c.eps {
		inflight += ep.inflight
	}
	return fmt.Sprintf("every SGLang server is full: %d requests wait for admission, %d in flight", waiting, inflight)
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

// Config returns the Controller's configuration, defaults applied.
func (c *Controller) Config() Config { return c.cfg }
