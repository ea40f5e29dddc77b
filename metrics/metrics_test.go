package metrics

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(body)
}

func TestHandlerServesMetricsHealthAndReadiness(t *testing.T) {
	t.Parallel()
	reg := NewRegistry()
	c := Register(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "draftflow_test_total", Help: "h"}))
	// A second registration of the same series returns the first collector: stages and runs share series.
	if again := Register(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "draftflow_test_total", Help: "h"})); again != c {
		t.Fatal("Register did not return the collector already registered")
	}
	c.Add(3)
	var ready Readiness
	consuming := false
	ready.Add("sink", func() error {
		if !consuming {
			return errors.New("no partitions assigned")
		}
		return nil
	})
	ready.Add("generate", func() error { return nil })
	h := Handler(reg, &ready, false)
	if code, _ := get(t, h, "/debug/pprof/heap"); code != 404 {
		t.Fatalf("/debug/pprof/heap served without profile: %d", code)
	}
	if code, body := get(t, Handler(reg, &ready, true), "/debug/pprof/heap?debug=1"); code != 200 || !strings.Contains(body, "heap profile") {
		t.Fatalf("/debug/pprof/heap with profile: %d %.100q", code, body)
	}

	if code, body := get(t, h, "/metrics"); code != 200 || !strings.Contains(body, "draftflow_test_total 3") ||
		!strings.Contains(body, "go_goroutines") {
		t.Fatalf("/metrics: %d\n%.300s", code, body)
	}
	if code, _ := get(t, h, "/healthz"); code != 200 {
		t.Fatalf("/healthz: %d", code)
	}
	if code, body := get(t, h, "/readyz"); code != 503 || !strings.Contains(body, "sink: no partitions assigned") ||
		strings.Contains(body, "generate") {
		t.Fatalf("/readyz before: %d %q", code, body)
	}
	consuming = true
	if code, _ := get(t, h, "/readyz"); code != 200 {
		t.Fatalf("/readyz after: %d", code)
	}
	// Expected parts are not ready until they Add their own check.
	var starting Readiness
	starting.Expect("tokenize")
	if err := starting.Check(); err == nil || !strings.Contains(err.Error(), "tokenize: starting") {
		t.Fatalf("expected part not started: %v", err)
	}
	starting.Add("tokenize", func() error { return nil })
	if err := starting.Check(); err != nil {
		t.Fatalf("after its Add: %v", err)
	}
	// A nil Readiness (a process with no stage checks) is ready and ignores Add.
	var none *Readiness
	none.Add("x", func() error { return errors.New("never") })
	if none.Check() != nil {
		t.Fatal("nil Readiness not ready")
	}
}

// Serve's server runs until its context ends; Wait returns only once the requests in flight have finished and
// the serving goroutine has returned, after which nothing listens on the address.
func TestServeIsWaitedFor(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ready Readiness
	entered, release := make(chan struct{}), make(chan struct{})
	ready.Add("slow", func() error {
		select {
		case entered <- struct{}{}:
			<-release
		default: // only the first request waits
		}
		return nil
	})
	s, err := Serve(ctx, "127.0.0.1:0", NewRegistry(), &ready, false, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- s.Wait() }()
	select {
	case err := <-waited:
		t.Fatalf("Wait returned while serving: %v", err)
	default:
	}
	answer := make(chan int, 1)
	go func() {
		resp, err := http.Get("http://" + s.Addr() + "/readyz")
		if err != nil {
			answer <- 0
			return
		}
		resp.Body.Close()
		answer <- resp.StatusCode
	}()
	<-entered
	cancel()
	select {
	case err := <-waited:
		t.Fatalf("Wait returned with a request in flight: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if err := <-waited; err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if code := <-answer; code != http.StatusOK {
		t.Fatalf("the request in flight at shutdown got %d, want 200", code)
	}
	if _, err := http.Get("http://" + s.Addr() + "/healthz"); err == nil {
		t.Fatal("the address still answers after Wait returned")
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close after the shutdown: %v", err)
	}
}

// Close stops a server whose context lives on, and an address in use is an error of Serve itself.
func TestServeCloseAndListenError(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	s, err := Serve(context.Background(), "127.0.0.1:0", NewRegistry(), nil, false, log)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Serve(context.Background(), s.Addr(), NewRegistry(), nil, false, log); err == nil {
		t.Fatalf("a second server on %s: no error", s.Addr())
	}
	resp, err := http.Get("http://" + s.Addr() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get("http://" + s.Addr() + "/healthz"); err == nil {
		t.Fatal("the address still answers after Close")
	}
}
