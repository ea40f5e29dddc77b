package sim

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Server is one simulated SGLang server: an engine goroutine running the
// scheduler model, and an http.Handler serving SGLang's native API.
type Server struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex // guards eng and pending
	eng     *engine
	pending []func(*engine) // applied between engine steps (aborts, flushes)
	closed  bool
	paused  bool // /pause_generation: requests queue but nothing runs

	wake   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}

	// wall <-> simulated time anchor (scaled mode)
	wallAnchor time.Time
	simAnchor  float64

	reg    *prometheus.Registry
	met    *metrics
	faults *faultInjector
	mux    *http.ServeMux

	// manual mode (NewManual): no loop; the owner drives the engine. Guarded by mu.
	manual  bool
	current *batch     // the forward pass in progress
	early   []*request // requests the scheduler ended at submission (reported by the next Finish)
}

// Stats is a point-in-time view of the engine, read live (unlike the
// Prometheus gauges, which refresh on SGLang's logging cadence).
type Stats struct {
	// Running is the number of requests in the running (decode) batch.
	Running int
	// Waiting is the number of requests in the waiting queue, including
	// retracted ones.
	Waiting int
	// Chunked is 1 while a long prompt is being prefilled chunk by chunk.
	Chunked int
	// UsedTokens is KV slots neither free nor evictable.
	UsedTokens int
	// CachedTokens is KV slots held by the radix cache (evictable or locked).
	CachedTokens int
	// MaxTotalTokens is the KV pool size.
	MaxTotalTokens int
	// TokenUsage is UsedTokens / MaxTotalTokens, SGLang's token_usage.
	TokenUsage float64
	// NewTokenRatio is the scheduler's current new_token_ratio.
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
	// decode log interval.
	GenThroughput float64
	// SimTime is the simulated time elapsed since start.
	SimTime time.Duration
	// Crashes counts simulated crashes; Down is true while one lasts.
	Crashes int64
	Down    bool
}

// New starts a simulated server. Close stops its engine loop.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		cfg:        cfg,
		log:        cfg.Logger.With("component", "sim"),
		eng:        newEngine(&cfg),
		wake:       make(chan struct{}, 1),
		cancel:     cancel,
		done:       make(chan struct{}),
		wallAnchor: time.Now(),
		reg:        prometheus.NewRegistry(),
		faults:     newFaultInjector(cfg.Seed, cfg.Faults),
	}
	s.eng.cfg = &s.cfg
	s.met = newMetrics(s.reg, cfg.ModelPath)
	s.eng.observer = s.met
	s.met.onLog(s.eng)
	s.routes()
	go s.loop(ctx)
	s.log.Info("simulated SGLang server started",
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
	s.eng.abort("", true, "server shut down")
	s.mu.Unlock()
	return nil
}

// Stats returns a live snapshot of the engine.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.eng
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
		SimTime:          time.Duration(e.now * float64(time.Second)),
		Crashes:          e.stats.crashes,
		Down:             e.now < e.downUntil,
	}
	if e.chunked != nil {
		st.Chunked = 1
	}
	st.TokenUsage = float64(st.UsedTokens) / float64(st.MaxTotalTokens)
	return st
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

// poke wakes the engine loop if it is idle.
func (s *Server) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// later queues an operation for the engine loop to apply between steps.
func (s *Server) later(op func(*engine)) {
	s.mu.Lock()
	s.pending = append(s.pending, op)
	s.mu.Unlock()
	s.poke()
}

// loop is the engine goroutine: apply pending operations, handle crashes,
// plan a batch, let its simulated duration pass, complete it.
func (s *Server) loop(ctx context.Context) {
	defer close(s.done)
	for {
		s.mu.Lock()
		e := s.eng
		for _, op := range s.pending {
			op(e)
		}
		s.pending = s.pending[:0]
		var b *batch
		var wait float64 // simulated seconds to wait when idle; <0 = until woken
		if e.now < e.downUntil && s.cfg.Instant {
			e.now = e.downUntil // Instant mode: the restart takes no wall time
		}
		switch {
		case e.now < e.downUntil:
			wait = e.downUntil - e.now
		case s.paused:
			wait = -1
		case s.cfg.Faults.CrashEvery > 0 && e.now >= e.nextCrash:
			s.log.Warn("simulated crash", "sim_time_s", e.now, "down_for", s.cfg.Faults.CrashDowntime)
			e.crash()
			wait = e.downUntil - e.now
			if s.cfg.Instant {
				e.now = e.downUntil
				wait = 0
				s.poke()
			}
		default:
			b = e.nextBatch()
			wait = -1
			if b == nil && s.cfg.Faults.CrashEvery > 0 {
				wait = e.nextCrash - e.now
			}
		}
		s.mu.Unlock()

		if b == nil {
			if !s.idle(ctx, wait) {
				return
			}
			continue
		}
		if !s.sleepSim(ctx, e.now+b.dur) {
			return
		}
		s.mu.Lock()
		e.complete(b)
		s.mu.Unlock()
	}
}

// idle blocks until woken, ctx ends, or wait simulated seconds pass (wait <
// 0: no limit), then advances the simulated clock to track wall time.
func (s *Server) idle(ctx context.Context, wait float64) bool {
	var timer <-chan time.Time
	if wait >= 0 && !s.cfg.Instant {
		t := time.NewTimer(time.Duration(wait / s.cfg.TimeScale * float64(time.Second)))
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-ctx.Done():
		return false
	case <-s.wake:
	case <-timer:
	}
	if !s.cfg.Instant {
		s.mu.Lock()
		wallSim := s.simAnchor + time.Since(s.wallAnchor).Seconds()*s.cfg.TimeScale
		if wallSim > s.eng.now {
			s.eng.now = wallSim
		} else {
			s.wallAnchor, s.simAnchor = time.Now(), s.eng.now
		}
		s.mu.Unlock()
	}
	return true
}

// sleepSim sleeps until the wall-clock instant matching simulated time t.
// When the engine has fallen more than 50 ms (wall) behind, the anchor moves
// so that simulated time does not later rush to catch up.
func (s *Server) sleepSim(ctx context.Context, t float64) bool {
	if s.cfg.Instant {
		return ctx.Err() == nil
	}
	target := s.wallAnchor.Add(time.Duration((t - s.simAnchor) / s.cfg.TimeScale * float64(time.Second)))
	d := time.Until(target)
	if d <= 0 {
		if d < -50*time.Millisecond {
			s.wallAnchor, s.simAnchor = time.Now(), t
		}
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}
