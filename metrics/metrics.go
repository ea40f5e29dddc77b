// Package metrics is draftflow's one way to meter and serve: every stage registers its Prometheus
// collectors on the Registerer its Config names (Register), reports whether it is ready to work (Readiness),
// and the process owns one HTTP server (Serve) with /metrics over its registry, /healthz (the process
// answers) and /readyz (every stage in it is ready).
package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Or returns reg, or prometheus.DefaultRegisterer when reg is nil: the default of every Config's Registerer.
func Or(reg prometheus.Registerer) prometheus.Registerer {
	if reg == nil {
		return prometheus.DefaultRegisterer
	}
	return reg
}

// Register registers c on reg (nil: the default registerer) and returns it, or the collector already
// registered under the same descriptor, so that several stages or runs in one process share their series.
// Any other registration error is a programming error and panics.
func Register[T prometheus.Collector](reg prometheus.Registerer, c T) T {
	if err := Or(reg).Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(T); ok {
				return existing
			}
		}
		panic(err)
	}
	return c
}

// NewRegistry returns a registry with the Go runtime and process collectors: the registry of one process.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Readiness collects the readiness checks of the stages of one process. The zero value has no checks and
// is ready; a nil *Readiness ignores Add.
type Readiness struct {
	mu     sync.Mutex
	checks map[string]func() error
}

// Add registers a check under name (a later Add of the same name replaces it; a nil check removes it). A
// check returns nil when its part of the process is ready, else why not.
func (r *Readiness) Add(name string, check func() error) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.checks == nil {
		r.checks = map[string]func() error{}
	}
	if check == nil {
		delete(r.checks, name)
		return
	}
	r.checks[name] = check
}

// Expect registers, for each name, a check that fails ("starting") until the part of the process of that name
// Adds its own: a process is not ready before its stages have said what ready means for them.
func (r *Readiness) Expect(names ...string) {
	for _, n := range names {
		r.Add(n, func() error { return errors.New("starting") })
	}
}

// Check runs every check and returns nil when all pass, else an error listing those that did not.
func (r *Readiness) Check() error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	names := make([]string, 0, len(r.checks))
	for n := range r.checks {
		names = append(names, n)
	}
	checks := make([]func() error, 0, len(names))
	sort.Strings(names)
	for _, n := range names {
		checks = append(checks, r.checks[n])
	}
	r.mu.Unlock()
	var fails []string
	for i, c := range checks {
		if err := c(); err != nil {
			fails = append(fails, names[i]+": "+err.Error())
		}
	}
	if len(fails) > 0 {
		return errors.New(strings.Join(slices.Clip(fails), "; "))
	}
	return nil
}

// Handler serves /metrics (gatherer's series), /healthz (200 while the process answers) and /readyz (200
// when ready's checks pass, else 503 with the reasons); with profile, also Go's profiles under /debug/pprof/
// (net/http/pprof: heap, goroutine, CPU profile, ...), off by default because they reveal the process's insides.
func Handler(gatherer prometheus.Gatherer, ready *Readiness, profile bool) http.Handler {
	mux := http.NewServeMux()
	if profile {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.Handle("/metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready.Check(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprintf(w, "not ready: %v\n", err)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	return mux
}

// Server is the process's one HTTP server of Handler, serving on a goroutine of its own until its context ends
// or Close is called.
type Server struct {
	srv  *http.Server
	addr string
	stop context.CancelFunc
	done chan struct{} // closed once the serving goroutine and the shutdown returned
	err  error         // why serving ended, when not by a shutdown
}

// Serve listens on addr and serves Handler until ctx ends or Close is called. It returns once the listener is
// open, or with an error when it cannot be, so a bad address fails the command at once.
func Serve(ctx context.Context, addr string, gatherer prometheus.Gatherer, ready *Readiness, profile bool, log *slog.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen %s: %w", addr, err)
	}
	ctx, stop := context.WithCancel(ctx)
	s := &Server{srv: &http.Server{Handler: Handler(gatherer, ready, profile), ReadHeaderTimeout: 5 * time.Second},
		addr: ln.Addr().String(), stop: stop, done: make(chan struct{})}
	served := make(chan error, 1)
	go func() { served <- s.srv.Serve(ln) }()
	go func() {
		defer close(s.done)
		select {
		case err := <-served: // the listener failed
			s.err = fmt.Errorf("metrics: serve %s: %w", s.addr, err)
			log.Warn("metrics endpoint stopped", "addr", s.addr, "err", err)
			return
		case <-ctx.Done():
		}
		shut, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if err := s.srv.Shutdown(shut); err != nil {
			s.srv.Close() // requests still running after the grace: cut them off
		}
		<-served // http.ErrServerClosed
	}()
	log.Info("serving /metrics, /healthz and /readyz", "addr", s.addr, "pprof", profile)
	return s, nil
}

// Addr is the address the server listens on: Serve's addr with the port chosen when addr gave port 0.
func (s *Server) Addr() string { return s.addr }

// Wait waits until the server has stopped (its context ended, or Close) and returns why serving ended when it
// was not a shutdown.
func (s *Server) Wait() error {
	<-s.done
	return s.err
}

// Close stops the server (requests in flight get two seconds to finish) and waits for it, as Wait.
func (s *Server) Close() error {
	s.stop()
	return s.Wait()
}
