package sim

import (
	"context"
	"errors"
	"math"
)

// Manual mode: a Server built by NewManual has no engine goroutine and no clock of its own. Its owner, a
// discrete-event simulation, submits requests at simulated instants it chooses (Submit, or POST /generate
// after SetTime), starts forward passes with Poll and completes them with Finish, so a run depends only on
// its inputs, never on the wall clock or the machine's load. The HTTP routes serve the engines' current
// state (/v1/loads, /metrics, /server_info), which lets a test check that an HTTP client reads the same
// feedback the owner does. With Config.DPSize > 1 every rank runs its own passes; Poll and Finish work on
// the earliest-ending one.

// Prompt is one request handed to a manual-mode server without HTTP.
type Prompt struct {
	// RID is the request id; it must be unique among requests in flight.
	RID string
	// InputIDs is the prompt.
	InputIDs []int32
	// Sampling holds the sampling parameters, validated as POST /generate validates them.
	Sampling SamplingParams
	// RoutedDPRank pins the request to a DP rank, as routed_dp_rank does; nil dispatches round robin.
	RoutedDPRank *int
}

// Finished is a request a manual-mode server ended, as Finish reports it: what a /generate answer's
// meta_info would carry.
type Finished struct {
	// RID is the request id.
	RID string
	// FinishReason is "stop", "length" or "abort".
	FinishReason string
	// PromptTokens and CompletionTokens are the input and output lengths.
	PromptTokens, CompletionTokens int
	// Retractions is meta_info.num_retractions.
	Retractions int
	// E2ELatency is simulated seconds from arrival to finish.
	E2ELatency float64
	// DPRank is the DP rank that served the request.
	DPRank int
}

// errNotManual is returned by the manual-mode methods of a server that runs its own loop.
var errNotManual = errors.New("sim: not a manual-mode server (use NewManual)")

// NewManual builds a server in manual mode (see Submit, Poll, Finish and SetTime). Config.TimeScale,
// Config.Instant and Config.Faults are ignored: time is the caller's and nothing fails. Close releases it.
func NewManual(cfg Config) (*Server, error) {
	given := cfg
	cfg.Faults = Faults{}
	cfg.Instant = true
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := newServer(given, cfg, true)
	close(s.done)
	if err := s.loadScripts(); err != nil {
		return nil, err
	}
	return s, nil
}

// submittedCtx wraps fn for WithSubmitted.
func submittedCtx(ctx context.Context, fn func()) context.Context {
	return context.WithValue(ctx, submittedKey{}, &submittedHook{fn: fn})
}

// WithSubmitted returns a copy of ctx carrying fn. A manual-mode server's POST /generate, served for a
// request with this context (s.ServeHTTP called in-process), calls fn exactly once: as soon as the call's
// requests are in the engines' queues, or once an error answer was written (validation error, 401, ...),
// whichever comes first. The handler then blocks until a later Finish ends the requests and writes the
// normal answer. This lets a discrete-event owner submit through the real HTTP handler and know when to
// Poll: go s.ServeHTTP(w, req.WithContext(sim.WithSubmitted(ctx, func() { close(queued) }))); <-queued.
// Servers with their own loop call it too.
func WithSubmitted(ctx context.Context, fn func()) context.Context { return submittedCtx(ctx, fn) }

// SetTime sets the simulated instant, in seconds, at which a manual-mode server's HTTP handlers submit
// requests (POST /generate). It should not move backwards; an instant before a rank's clock is read as
// that clock. Submit and Poll move it forward to their now, Finish to the end of the pass it completed.
// It does nothing on a server with its own loop.
func (s *Server) SetTime(t float64) {
	if !s.manual {
		return
	}
	s.mu.Lock()
	s.manualNow = t
	s.mu.Unlock()
}

// Submit hands p to the engine at simulated time now: its arrival is now, or the clock of the rank it is
// dispatched to when that is later; while the rank is in a forward pass, at most that pass's end. A rank
// between passes moves its clock forward to the arrival. It validates p as POST /generate does and
// returns the error message SGLang would answer with HTTP 400. A request the scheduler refuses outright
// (input over the context length) is not an error: it finishes with an abort at the next Finish.
func (s *Server) Submit(now float64, p Prompt) error {
	if !s.manual {
		return errNotManual
	}
	req := GenerateRequest{RoutedDPRank: p.RoutedDPRank}
	rank, err := s.routedRank(&req)
	if err != nil {
		return err
	}
	it := genItem{rid: p.RID, input: p.InputIDs, params: p.Sampling, rank: rank}
	if err := s.validateItem(&it); err != nil {
		return err
	}
	r := s.newRequest(it, make(chan struct{}, 1))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.manualNow = max(s.manualNow, now)
	s.enqueueLocked(r, rank, now)
	return nil
}

// Poll brings every rank between passes forward to now and starts its next forward pass if it has work
// (operations from HTTP handlers, such as aborts, are applied first). It reports when the earliest pass in
// progress ends (busy false: every rank is idle). Call it after every batch of submissions at one
// instant, so requests arriving together are planned together, as the scheduler's event loop receives
// everything queued before it plans.
func (s *Server) Poll(now float64) (end float64, busy bool) {
	if !s.manual {
		return 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.manualNow = max(s.manualNow, now)
	for _, e := range s.ranks {
		if e.current == nil {
			e.now = max(e.now, now)
			s.planLocked(e, !s.paused)
		}
	}
	end = s.nextPassEndLocked()
	if math.IsInf(end, 1) {
		return 0, false
	}
	return end, true
}

// Finish completes the earliest-ending forward pass in progress (every pass ending at that instant; the
// rank's clock moves to its end), applies the operations waiting for it, starts the next passes of the
// ranks between passes, and returns the requests that finished since the last Finish — in passes, at
// submission (refused outright), by aborts, or through HTTP — in the order the engines ended them.
func (s *Server) Finish() []Finished {
	if !s.manual {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if end := s.nextPassEndLocked(); !math.IsInf(end, 1) {
		s.completeDueLocked(end)
		s.manualNow = max(s.manualNow, end)
		for _, e := range s.ranks {
			if e.current == nil {
				e.now = max(e.now, end)
				s.planLocked(e, !s.paused)
			}
		}
	}
	var out []Finished
	for _, e := range s.ranks {
		for _, r := range e.done {
			out = append(out, Finished{RID: r.rid, FinishReason: r.finish.Type, PromptTokens: len(r.input),
				CompletionTokens: len(r.output), Retractions: r.retractions, E2ELatency: r.finished - r.arrival,
				DPRank: e.rank})
		}
		e.done = nil
	}
	if out == nil {
		out = []Finished{}
	}
	return out
}
