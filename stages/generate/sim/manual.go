package sim

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Manual mode: a Server built by NewManual has no engine goroutine and no clock of its own. Its owner, a
// discrete-event simulation, submits requests with Submit at simulated instants it chooses, starts forward
// passes with Poll and completes them with Finish, so a run depends only on its inputs, never on the wall
// clock or the machine's load. The HTTP routes still serve the engine's state (/v1/loads, /metrics,
// /get_server_info), which lets a test check that an HTTP client reads the same feedback the owner does.

// Prompt is one request handed to a manual-mode server without HTTP.
type Prompt struct {
	// RID is the request id; it must be unique among requests in flight.
	RID string
	// InputIDs is the prompt.
	InputIDs []int32
	// Sampling holds the sampling parameters, validated as POST /generate validates them.
	Sampling SamplingParams
}

// Finished is a request a manual-mode server ended, as Finish reports it: what a /generate answer's
// meta_info would carry.
type Finished struct {
	RID string
	// FinishReason is "stop", "length" or "abort".
	FinishReason     string
	PromptTokens     int
	CompletionTokens int
	// Retractions is meta_info.num_retractions.
	Retractions int
	// E2ELatency is simulated seconds from arrival to finish.
	E2ELatency float64
}

// errNotManual is returned by the manual-mode methods of a server that runs its own loop.
var errNotManual = errors.New("sim: not a manual-mode server (use NewManual)")

// NewManual builds a server in manual mode (see Submit, Poll and Finish). Config.TimeScale, Config.Instant
// and Config.Faults are ignored: time is the caller's and nothing fails. Close releases it.
func NewManual(cfg Config) (*Server, error) {
	cfg.Faults = Faults{}
	cfg.Instant = true
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Server{
		cfg:    cfg,
		log:    cfg.Logger.With("component", "sim"),
		eng:    newEngine(&cfg),
		wake:   make(chan struct{}, 1),
		cancel: func() {},
		done:   make(chan struct{}),
		reg:    prometheus.NewRegistry(),
		faults: newFaultInjector(cfg.Seed, cfg.Faults),
		manual: true,
	}
	close(s.done)
	s.eng.cfg = &s.cfg
	s.met = newMetrics(s.reg, cfg.ModelPath)
	s.eng.observer = s.met
	s.met.onLog(s.eng)
	s.routes()
	return s, nil
}

// Submit hands p to the engine at simulated time now (which must not precede the engine's clock while a
// pass is in progress; an idle engine's clock moves forward to now). It validates p as POST /generate does
// and returns the error message SGLang would answer with HTTP 400. A request the scheduler refuses outright
// (input over the context length) is not an error: it finishes with an abort at the next Finish or Poll.
func (s *Server) Submit(now float64, p Prompt) error {
	if !s.manual {
		return errNotManual
	}
	it := genItem{rid: p.RID, input: p.InputIDs, params: p.Sampling}
	if err := s.validateItem(&it); err != nil {
		return err
	}
	r := s.newRequest(it, make(chan struct{}, 1))
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.current == nil {
		s.eng.now = max(s.eng.now, now)
	}
	s.eng.submit(r)
	if r.finish != nil {
		s.early = append(s.early, r)
	}
	return nil
}

// Poll brings an idle engine's clock forward to now and starts the next forward pass if there is work. It
// reports when the pass in progress ends (busy false: the engine is idle). Call it after every batch of
// submissions at one instant, so requests arriving together are planned together, as the scheduler's
// event loop receives everything queued before it plans.
func (s *Server) Poll(now float64) (end float64, busy bool) {
	if !s.manual {
		return 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.current == nil {
		s.eng.now = max(s.eng.now, now)
		s.current = s.eng.nextBatch()
	}
	if s.current == nil {
		return 0, false
	}
	return s.eng.now + s.current.dur, true
}

// Finish completes the forward pass in progress (the engine's clock moves to its end), starts the next one,
// and returns the requests that finished, in the order the engine ended them.
func (s *Server) Finish() []Finished {
	if !s.manual {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var done []*request
	done, s.early = s.early, nil
	if b := s.current; b != nil {
		s.current = nil
		s.eng.complete(b)
		for _, r := range b.reqs {
			if r.finish != nil {
				done = append(done, r)
			}
		}
		s.current = s.eng.nextBatch()
	}
	out := make([]Finished, len(done))
	for i, r := range done {
		out[i] = Finished{RID: r.rid, FinishReason: r.finish.Type, PromptTokens: len(r.input),
			CompletionTokens: len(r.output), Retractions: r.retractions, E2ELatency: r.finished - r.arrival}
	}
	return out
}
