package sim

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// lagReanchor is how far (wall time) the engine loop may fall behind a pass
// end before the wall/simulated anchor moves, so that simulated time does not
// later rush to catch up.
const lagReanchor = 50 * time.Millisecond

// Server is one simulated SGLang server: one engine per data-parallel rank,
// an engine goroutine driving them on one simulated clock, and an
// http.Handler serving SGLang's native API.
type Server struct {
	cfg   Config
	given Config // as the caller passed it, before defaults: server args unset there are null
	log   *slog.Logger

	mu     sync.Mutex // guards everything below up to reg, and every engine
	ranks  []*engine
	closed bool
	paused bool // /pause_generation: requests queue but nothing runs
	rr     int  // round-robin dispatch counter (DataParallelController.round_robin_scheduler)

	// crash cycle, server-wide: every rank goes down together
	downUntil float64 // down until this simulated time
	nextCrash float64
	crashes   int64

	now        float64   // the loop's simulated clock (seconds since start)
	wallAnchor time.Time // scaled mode: wall instant matching simAnchor
	simAnchor  float64

	wake   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}

	// scripts holds Config.Conversations' assistant messages by row id,
	// loaded once at New (nil without Config.ReplyFormat).
	scripts map[string][]scriptTurn

	reg    *prometheus.Registry
	met    *metrics
	faults *faultInjector
	routes map[string]route

	// live holds the rid of every request the HTTP layer has admitted and not
	// yet answered (TokenizerManager.rid_to_state), for 0.5.23's duplicate
	// request id check.
	live map[string]struct{}

	// manual mode (NewManual): no loop; the owner drives the engines.
	manual    bool
	manualNow float64 // the simulated instant HTTP handlers use (SetTime)
}

// Stats is a point-in-time view of the engine, read live (unlike the
// Prometheus gauges, which refresh on SGLang's logging cadence). Server.Stats
// sums it over the DP ranks; Server.RankStats reports one rank.
type Stats struct {
	// Running is the number of requests in the running (decode) batch.
	Running int
	// Waiting is the number of requests in the waiting queue, including
	// retracted ones.
	Waiting int
	// Chunked is 1 while a long prompt is being prefilled chunk by chunk (per
	// rank; summed over ranks).
	Chunked int
	// UsedTokens is KV slots neither free nor evictable.
	UsedTokens int
	// CachedTokens is KV slots held by the radix cache (evictable or locked).
	CachedTokens int
	// MaxTotalTokens is the KV pool size (summed over ranks).
	MaxTotalTokens int
	// TokenUsage is UsedTokens / MaxTotalTokens, SGLang's token_usage.
	TokenUsage float64
	// NewTokenRatio is the scheduler's current new_token_ratio (the mean over
	// ranks).
	NewTokenRatio float64
	// RetractionsTotal counts retracted requests since start.
	RetractionsTotal int64
	// RetractionEvents counts decode steps that had to retract.
	RetractionEvents int64
	// GeneratedTokens counts output tokens produced since start.
	GeneratedTokens int64
	// PromptTokens counts input tokens received.
	PromptTokens int64
	// PrefillTokens counts tokens computed by prefill, re-prefills included.
	PrefillTokens int64
	// CacheHitTokens counts prompt tokens served from the prefix cache.
	CacheHitTokens int64
	// FinishedRequests counts requests that ended with stop or length.
	FinishedRequests int64
	// AbortedRequests counts requests that ended with abort.
	AbortedRequests int64
	// DecodeSteps and PrefillBatches count forward passes.
	DecodeSteps, PrefillBatches int64
	// GenThroughput is output tokens per simulated second over the last
	// decode log interval (summed over ranks).
	GenThroughput float64
	// SimTime is the simulated time elapsed since start.
	SimTime time.Duration
	// Crashes counts simulated crashes; Down is true while one lasts.
	Crashes int64
	Down    bool
}

// newServer builds the parts New and NewManual share. cfg has defaults applied.
func newServer(given, cfg Config, manual bool) *Server {
	s := &Server{
		cfg:        cfg,
		given:      given,
		log:        cfg.Logger.With("component", "sim"),
		wake:       make(chan struct{}, 1),
		cancel:     func() {},
		done:       make(chan struct{}),
		wallAnchor: time.Now(),
		reg:        prometheus.NewRegistry(),
		faults:     newFaultInjector(cfg.Seed, cfg.Faults),
		manual:     manual,
	}
	s.met = newMetrics(s.reg, &s.cfg)
	for i := 0; i < cfg.DPSize; i++ {
		e := newEngine(&s.cfg)
		e.rank = i
		e.collect = manual
		e.observer = s.met.rank(i)
		e.observer.onLog(e)
		s.ranks = append(s.ranks, e)
	}
	if cfg.Faults.CrashEvery > 0 {
		s.nextCrash = cfg.Faults.CrashEvery.Seconds()
	}
	s.buildRoutes()
	return s
}

// New starts a simulated server. Close stops its engine loop.
func New(cfg Config) (*Server, error) {
	given := cfg
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := newServer(given, cfg, false)
	if err := s.loadScripts(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go s.loop(ctx)
	s.log.Info("simulated SGLang server started", "release", cfg.Release, "dp_size", cfg.DPSize,
		"max_total_tokens", cfg.MaxTotalTokens, "max_running_requests", cfg.MaxRunningRequests,
		"context_length", cfg.ContextLength, "time_scale", cfg.TimeScale, "instant", cfg.Instant)
	return s, nil
}

// Config returns the configuration in effect, defaults filled in.
func (s *Server) Config() Config { return s.cfg }

// Registry returns the server's own Prometheus registry (served on /metrics).
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// Close stops the engine loop and aborts every request still in flight. It
// is safe to call more than once.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	<-s.done
	s.mu.Lock()
	for _, e := range s.ranks {
		if b := e.current; b != nil {
			// Requests of a prefill in progress are in no queue: end them too.
			e.current = nil
			for _, r := range b.reqs {
				if r.finish == nil {
					e.finishReq(r, abortReason("server shut down", 0))
				}
			}
		}
		e.abort("", true, "server shut down")
	}
	s.mu.Unlock()
	return nil
}

// Stats returns a live snapshot of the engine, summed over the DP ranks.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	var st Stats
	for _, e := range s.ranks {
		r := s.rankStatsLocked(e)
		st.Running += r.Running
		st.Waiting += r.Waiting
		st.Chunked += r.Chunked
		st.UsedTokens += r.UsedTokens
		st.CachedTokens += r.CachedTokens
		st.MaxTotalTokens += r.MaxTotalTokens
		st.NewTokenRatio += r.NewTokenRatio / float64(len(s.ranks))
		st.RetractionsTotal += r.RetractionsTotal
		st.RetractionEvents += r.RetractionEvents
		st.GeneratedTokens += r.GeneratedTokens
		st.PromptTokens += r.PromptTokens
		st.PrefillTokens += r.PrefillTokens
		st.CacheHitTokens += r.CacheHitTokens
		st.FinishedRequests += r.FinishedRequests
		st.AbortedRequests += r.AbortedRequests
		st.DecodeSteps += r.DecodeSteps
		st.PrefillBatches += r.PrefillBatches
		st.GenThroughput += r.GenThroughput
	}
	st.TokenUsage = float64(st.UsedTokens) / float64(st.MaxTotalTokens)
	st.SimTime = s.simTimeLocked()
	st.Crashes = s.crashes
	st.Down = s.downLocked()
	return st
}

// RankStats returns a live snapshot of DP rank rank (the zero Stats when
// there is no such rank). SimTime, Crashes and Down are the server's.
func (s *Server) RankStats(rank int) Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rank < 0 || rank >= len(s.ranks) {
		return Stats{}
	}
	return s.rankStatsLocked(s.ranks[rank])
}

// rankStatsLocked is one rank's Stats. s.mu held.
func (s *Server) rankStatsLocked(e *engine) Stats {
	st := Stats{
		Running:          len(e.running),
		Waiting:          len(e.waiting),
		UsedTokens:       e.usedTokens(),
		CachedTokens:     e.tree.size,
		MaxTotalTokens:   s.cfg.MaxTotalTokens,
		NewTokenRatio:    e.ratio,
		RetractionsTotal: e.stats.retractions,
		RetractionEvents: e.stats.retractEvents,
		GeneratedTokens:  e.stats.generated,
		PromptTokens:     e.stats.promptTokens,
		PrefillTokens:    e.stats.prefillTokens,
		CacheHitTokens:   e.stats.cacheHitTokens,
		FinishedRequests: e.stats.finished,
		AbortedRequests:  e.stats.aborted,
		DecodeSteps:      e.stats.decodeSteps,
		PrefillBatches:   e.stats.prefillBatches,
		GenThroughput:    e.genThroughput,
		SimTime:          s.simTimeLocked(),
		Crashes:          s.crashes,
		Down:             s.downLocked(),
	}
	if e.chunked != nil {
		st.Chunked = 1
	}
	st.TokenUsage = float64(st.UsedTokens) / float64(st.MaxTotalTokens)
	return st
}

// simTimeLocked is Stats.SimTime: the simulated time now (manual mode: the
// furthest engine clock, so that it depends only on the owner's calls).
func (s *Server) simTimeLocked() time.Duration {
	t := 0.0
	for _, e := range s.ranks {
		t = max(t, e.now)
	}
	if !s.manual {
		t = max(t, s.clockLocked())
	}
	return time.Duration(t * float64(time.Second))
}

// ListenAndServe serves a simulated server on addr until ctx is done, then
// shuts the HTTP server down gracefully (10 s at most) and closes the engine.
func ListenAndServe(ctx context.Context, addr string, cfg Config) error {
	s, err := New(cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: s, ReadHeaderTimeout: 30 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	s.log.Info("listening", "addr", ln.Addr().String())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = s.Close() // end in-flight generations so handlers return
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// clockLocked returns the current simulated time: the owner's instant in
// manual mode, the loop's clock in Instant mode (it only moves with forward
// passes), and the wall clock scaled by TimeScale otherwise. s.mu held.
func (s *Server) clockLocked() float64 {
	switch {
	case s.manual:
		return s.manualNow
	case s.cfg.Instant:
		return s.now
	default:
		return max(s.now, s.simAnchor+time.Since(s.wallAnchor).Seconds()*s.cfg.TimeScale)
	}
}

// downLocked reports whether a simulated crash keeps the server down. s.mu held.
func (s *Server) downLocked() bool { return s.clockLocked() < s.downUntil }

// poke wakes the engine loop if it is waiting.
func (s *Server) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// later runs op on DP rank rank (every rank when rank < 0) between forward
// passes: at once when the rank is between passes, else when its pass in
// progress ends. Aborts and other state changes from HTTP handlers go through
// it, so a pass never loses a request under its feet.
func (s *Server) later(rank int, op func(*engine)) {
	s.mu.Lock()
	for _, e := range s.ranks {
		if rank >= 0 && e.rank != rank {
			continue
		}
		if e.current == nil {
			op(e)
		} else {
			e.pending = append(e.pending, op)
		}
	}
	s.mu.Unlock()
	s.poke()
}

// pickRankLocked is the DP controller's dispatch: the routed rank when the
// request names one (already validated), else round robin
// (DataParallelController.round_robin_scheduler, the default
// load_balance_method "auto" resolving to "round_robin" outside PD
// disaggregation: arg_groups/serving_hook.py handle_load_balance_method).
func (s *Server) pickRankLocked(routed int) *engine {
	if routed >= 0 && routed < len(s.ranks) {
		return s.ranks[routed]
	}
	e := s.ranks[s.rr%len(s.ranks)]
	s.rr = (s.rr + 1) % len(s.ranks)
	return e
}

// enqueueLocked dispatches r to a rank and submits it as arriving at
// simulated time t: no earlier than the rank's clock and, while the rank is in
// a forward pass, no later than that pass's end (the request joins the
// scheduler's next plan). A rank between passes moves its clock up to t, so a
// request arriving after an idle gap is stamped with the time it arrived, not
// with the time the rank last ran. s.mu held.
func (s *Server) enqueueLocked(r *request, routed int, t float64) {
	e := s.pickRankLocked(routed)
	if e.current != nil {
		t = min(max(t, e.now), e.busyUntil)
	} else {
		t = max(t, e.now)
		e.now = t
	}
	e.submitAt(r, t)
}

// planLocked applies rank e's pending operations and, unless the server is
// paused or down, starts its next forward pass. e must be between passes.
// s.mu held.
func (s *Server) planLocked(e *engine, run bool) {
	for len(e.pending) > 0 {
		ops := e.pending
		e.pending = nil
		for _, op := range ops {
			op(e)
		}
	}
	if !run {
		return
	}
	if b := e.nextBatch(); b != nil {
		e.current, e.busyUntil = b, e.now+b.dur
	}
}

// completeDueLocked completes, earliest first, every forward pass that ends
// at or before t. s.mu held.
func (s *Server) completeDueLocked(t float64) {
	for {
		var first *engine
		for _, e := range s.ranks {
			if e.current != nil && e.busyUntil <= t && (first == nil || e.busyUntil < first.busyUntil) {
				first = e
			}
		}
		if first == nil {
			return
		}
		b := first.current
		first.current = nil
		first.complete(b)
	}
}

// nextPassEndLocked is the earliest end of a forward pass in progress
// (+Inf when every rank is between passes). s.mu held.
func (s *Server) nextPassEndLocked() float64 {
	next := math.Inf(1)
	for _, e := range s.ranks {
		if e.current != nil {
			next = min(next, e.busyUntil)
		}
	}
	return next
}

// crashLocked crashes every rank at simulated time t. s.mu held.
func (s *Server) crashLocked(t float64) {
	s.log.Warn("simulated crash", "sim_time_s", t, "down_for", s.cfg.Faults.CrashDowntime)
	for _, e := range s.ranks {
		e.crash()
		e.now = max(e.now, t)
	}
	s.crashes++
	s.downUntil = t + s.cfg.Faults.CrashDowntime.Seconds()
	// The next crash comes CrashEvery of uptime after the restart (measured
	// from the crash, a downtime longer than CrashEvery would crash the server
	// again the moment it came back, forever).
	s.nextCrash = s.downUntil + s.cfg.Faults.CrashEvery.Seconds()
}

// tickLocked advances the loop's clock: to the scaled wall clock (moving the
// anchor when the loop fell more than lagReanchor behind the earliest pass
// end), never backwards. It returns the new time. s.mu held.
func (s *Server) tickLocked() float64 {
	if s.cfg.Instant {
		return s.now
	}
	t := s.simAnchor + time.Since(s.wallAnchor).Seconds()*s.cfg.TimeScale
	if due := s.nextPassEndLocked(); due < t-lagReanchor.Seconds()*s.cfg.TimeScale {
		s.wallAnchor, s.simAnchor = time.Now(), max(due, s.now)
		t = s.simAnchor
	}
	if t < s.now {
		// The clock ran ahead of the wall (Instant-like downtime skips): the
		// wall catches up from here.
		s.wallAnchor, s.simAnchor = time.Now(), s.now
		t = s.now
	}
	s.now = t
	return t
}

// loop is the engine goroutine. Each round it completes the forward passes
// that ended, handles the crash cycle, applies pending operations and starts
// a pass on every rank between passes, then waits (scaled mode: until the
// wall-clock instant of the next pass end, crash or restart, or a new
// request; Instant mode: not at all while a pass is in progress).
func (s *Server) loop(ctx context.Context) {
	defer close(s.done)
	for {
		s.mu.Lock()
		now := s.tickLocked()
		s.completeDueLocked(now)
		if s.cfg.Faults.CrashEvery > 0 && now >= s.nextCrash && now >= s.downUntil {
			s.crashLocked(now)
		}
		if s.cfg.Instant && now < s.downUntil {
			now = s.downUntil // Instant mode: the restart takes no time
			s.now = now
			for _, e := range s.ranks {
				e.now = max(e.now, now)
			}
		}
		run := now >= s.downUntil && !s.paused
		for _, e := range s.ranks {
			if e.current == nil {
				s.planLocked(e, run)
			}
		}
		next := s.nextPassEndLocked()
		if !s.cfg.Instant {
			if now < s.downUntil {
				next = min(next, s.downUntil)
			} else if s.cfg.Faults.CrashEvery > 0 {
				next = min(next, s.nextCrash)
			}
		}
		if s.cfg.Instant && !math.IsInf(next, 1) {
			s.now = max(s.now, next)
			s.mu.Unlock()
			if ctx.Err() != nil {
				return
			}
			continue
		}
		var wait time.Duration = -1
		if !math.IsInf(next, 1) {
			wait = s.wallAnchor.Add(time.Duration((next - s.simAnchor) / s.cfg.TimeScale * float64(time.Second))).Sub(time.Now())
			wait = max(wait, 0)
		}
		s.mu.Unlock()
		if !s.sleep(ctx, wait) {
			return
		}
	}
}

// sleep blocks until woken, ctx ends, or d passes (d < 0: no limit). It
// reports false when ctx ended.
func (s *Server) sleep(ctx context.Context, d time.Duration) bool {
	var timer <-chan time.Time
	if d >= 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-ctx.Done():
		return false
	case <-s.wake:
	case <-timer:
	}
	return true
}

// resumeLocked resumes after /continue_generation: ranks between passes
// bring their clocks up to now, so the queued requests start when the
// server resumed. s.mu held.
func (s *Server) resumeLocked() {
	t := s.clockLocked()
	for _, e := range s.ranks {
		if e.current == nil {
			e.now = max(e.now, t)
		}
	}
}
