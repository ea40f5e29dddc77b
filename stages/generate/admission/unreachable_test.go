package admission

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"log/slog"
)

// lockedBuffer collects logs written from several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// skewedClock is the wall clock moved forward by what a test adds.
type skewedClock struct{ skew atomic.Int64 }

func (c *skewedClock) now() time.Time          { return time.Now().Add(time.Duration(c.skew.Load())) }
func (c *skewedClock) advance(d time.Duration) { c.skew.Add(int64(d)) }

// unreachableController starts a fixed-policy Controller for url with a clock the test moves.
func unreachableController(t *testing.T, url string, clock *skewedClock, logs *lockedBuffer) (*Controller, *prometheus.Registry, <-chan error) {
	t.Helper()
	reg := prometheus.NewRegistry()
	c, err := NewController(Config{Endpoints: []string{url}, Policy: PolicyFixed, Registerer: reg, Clock: clock.now,
		Logger: slog.New(slog.NewTextHandler(logs, nil)), RetryInitial: time.Millisecond, RetryMax: 5 * time.Millisecond,
		HealthInterval: 5 * time.Millisecond, UnreachableTimeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(cancel)
	return c, reg, done
}

// TestUnreachableEndpointGivesUp: an endpoint where nothing listens is down in the metrics (and so in
// status) from the start, its warning repeats, and after UnreachableTimeout the Controller fails with an
// error naming the endpoint and the flag.
func TestUnreachableEndpointGivesUp(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String()
	l.Close() // nothing listens there now
	var clock skewedClock
	var logs lockedBuffer
	_, reg, done := unreachableController(t, url, &clock, &logs)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range fams {
		if f.GetName() == "draftflow_generate_endpoint_up" {
			for _, m := range f.GetMetric() {
				found = m.GetGauge().GetValue() == 0 && len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == url
			}
		}
	}
	if !found {
		t.Errorf("no endpoint_up 0 series for %s before any probe: status would not show it", url)
	}
	time.Sleep(50 * time.Millisecond)
	clock.advance(90 * time.Second)
	waitFor(t, "the warning to repeat", func() bool { return strings.Contains(logs.String(), "still not ready") })
	select {
	case err := <-done:
		t.Fatalf("gave up after 90 s: %v", err)
	default:
	}
	clock.advance(10 * time.Minute)
	select {
	case err := <-done:
		for _, want := range []string{"no SGLang endpoint answered", url, "--unreachable-timeout", "--sglang"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("error %v does not say %q", err, want)
			}
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no give-up after the timeout")
	}
}

// TestLoadingEndpointIsWaitedFor: a server that answers 503 (SGLang loading a large model) for longer than
// UnreachableTimeout is waited for, and admits once it answers 200.
func TestLoadingEndpointIsWaitedFor(t *testing.T) {
	var ready atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !ready.Load() {
			http.Error(w, "loading", http.StatusServiceUnavailable)
			return
		}
		if r.URL.Path == "/health" {
			w.WriteHeader(http.StatusOK)
			return
		}
		http.NotFound(w, r)
	}))
	defer srv.Close()
	var clock skewedClock
	var logs lockedBuffer
	c, _, done := unreachableController(t, srv.URL, &clock, &logs)
	time.Sleep(50 * time.Millisecond)
	clock.advance(time.Hour)
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("gave up on a loading server: %v", err)
	default:
	}
	ready.Store(true)
	waitFor(t, "the server to be ready", c.AnyReady)
	select {
	case err := <-done:
		t.Fatalf("stopped: %v", err)
	default:
	}
}
