package admission

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/draftflow/draftflow/secret"
	"github.com/draftflow/draftflow/sglang"
)

// Regression tests for what the released SGLang server (0.5.23) answers and the simulator once did not:
// see ../shared/notes/sglang.md, "What the released server really answers". Most drive the Controller
// through its driver API (Probe, Poll: the same HTTP client and feedback code as Run, one step at a time), so
// "after 75 polls" is 75 calls, not a sleep.

// newDriven returns a Controller whose endpoints the test brings up and polls itself (no Run loop).
func newDriven(t *testing.T, cfg Config) *Controller {
	t.Helper()
	cfg.Registerer = prometheus.NewRegistry()
	cfg.Logger = testLogger(t)
	if cfg.RetryInitial == 0 {
		cfg.RetryInitial, cfg.RetryMax = time.Millisecond, 10*time.Millisecond
	}
	c, err := NewController(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range cfg.Endpoints {
		if err := c.Probe(context.Background(), i); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// polls runs n polls of server i.
func polls(t *testing.T, c *Controller, i, n int) {
	t.Helper()
	for range n {
		if _, err := c.Poll(context.Background(), i); err != nil {
			t.Fatal(err)
		}
	}
}

// A server shared with another client backs its queue up: /v1/loads' num_total_tokens (used plus waiting
// tokens) then exceeds the pool. That is load, not a restart: nothing is drained or aborted.
func TestSharedServerQueueIsNotARestart(t *testing.T) {
	f := newFake(t, 10000)
	f.mu.Lock()
	f.load = map[string]any{"num_running_reqs": 12, "num_waiting_reqs": 40, "num_used_tokens": 9000,
		"num_total_tokens": 9000 + 40*4000, "token_usage": 0.9, "gen_throughput": 300.0}
	f.mu.Unlock()
	c := newDriven(t, Config{Endpoints: []string{f.srv.URL}})
	t.Cleanup(func() { f.release(3) })
	var errs []<-chan error
	for i := range 3 {
		errs = append(errs, doAsync(c, context.Background(), req(fmt.Sprint("s", i), 10, 10)))
	}
	waitFor(t, "three running", func() bool { return f.runningNow() == 3 })
	infos := f.infos.Load()
	polls(t, c, 0, 75)
	f.release(3)
	for _, e := range errs {
		if err := <-e; err != nil {
			t.Fatal(err)
		}
	}
	f.mu.Lock()
	aborts := len(f.aborts)
	f.mu.Unlock()
	if aborts != 0 || attempts(t, c, f.srv.URL, "drained") != 0 {
		t.Fatalf("%d aborts, %g drained attempts: a backed-up queue was read as a restart", aborts, attempts(t, c, f.srv.URL, "drained"))
	}
	// Only the periodic check reads /server_info again (one read per capacityCheckPolls polls).
	if n := f.infos.Load() - infos; n != 75/capacityCheckPolls {
		t.Fatalf("/server_info read %d times in 75 polls, want %d", n, 75/capacityCheckPolls)
	}
	if st := c.Endpoints()[0]; st.Capacity.MaxTotalTokens != 10000 || !st.Ready {
		t.Fatalf("endpoint %+v", st)
	}
}

// sglang:num_retracted_requests_total is a labelled counter: no sample until the first retraction. A server
// that exports SGLang metrics without it has retracted nothing yet; the feedback stays on for when it does.
func TestRetractionCounterWithoutSamplesKeepsFeedback(t *testing.T) {
	f := newFake(t, 100000)
	f.noCounter = true
	c := newDriven(t, Config{Endpoints: []string{f.srv.URL}})
	polls(t, c, 0, 3)
	b0 := c.Endpoints()[0].Budget
	if c.Endpoints()[0].Load.MaxTokens != 100000 {
		t.Fatalf("no load read: %+v", c.Endpoints()[0])
	}
	f.mu.Lock()
	f.noCounter, f.retracted = false, 4 // the first retractions: the series appears
	f.mu.Unlock()
	polls(t, c, 0, 1)
	if b := c.Endpoints()[0].Budget; b >= b0 {
		t.Fatalf("budget %g after the first retractions, want below %g", b, b0)
	}
}

// max_running_requests is null in /server_info unless set on the command line; the effective per-rank figure
// of internal_states bounds what the stage keeps in flight.
func TestNullMaxRunningRequestsKeepsTheCap(t *testing.T) {
	f := newFake(t, 1000000)
	f.maxRun = 2
	c := newTestController(t, Config{Endpoints: []string{f.srv.URL}, Budget: BudgetConfig{MaxServerQueue: 1}})
	waitFor(t, "endpoint ready", func() bool { return c.Endpoints()[0].Ready })
	if got := c.Endpoints()[0].Capacity.MaxRunningRequests; got != 2 {
		t.Fatalf("max running requests %d, want internal_states' 2", got)
	}
	t.Cleanup(func() { f.release(6) })
	var errs []<-chan error
	for i := range 6 {
		errs = append(errs, doAsync(c, context.Background(), req(fmt.Sprint("m", i), 10, 10)))
	}
	// Admission happens only when a request is offered or one finishes: once all six were offered (three
	// waiting) and three reached the server, nothing else can be admitted until a release.
	waitFor(t, "three in flight, three waiting", func() bool { return f.runningNow() == 3 && c.Waiting() == 3 })
	if n, w := f.runningNow(), c.Waiting(); n != 3 || w != 3 {
		t.Fatalf("%d in flight, %d waiting; want 3 (2 running + 1 queued on the server) and 3", n, w)
	}
	f.release(6)
	for _, e := range errs {
		if err := <-e; err != nil {
			t.Fatal(err)
		}
	}
}

// runController starts c.Run and returns a channel with its result.
func runController(t *testing.T, c *Controller) <-chan error {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	go func() { ch <- c.Run(ctx) }()
	t.Cleanup(cancel)
	return ch
}

// A server started with --api-key answers 401 without the key: a clear fatal error naming the endpoint, under
// either policy, never a retry loop.
func TestAPIKeyMissingIsFatal(t *testing.T) {
	for _, policy := range []string{PolicyKVBudget, PolicyFixed} {
		t.Run(policy, func(t *testing.T) {
			f := newFake(t, 10000)
			f.apiKey = "s3cret-key"
			c, err := NewController(Config{Endpoints: []string{f.srv.URL}, Policy: policy, Registerer: prometheus.NewRegistry(),
				Logger: testLogger(t), RetryInitial: time.Millisecond, HealthInterval: 10 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			done := runController(t, c)
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Run kept retrying a server that refuses the API key")
			}
			var ae *sglang.AuthError
			if !errors.As(err, &ae) || ae.Code != 401 || !strings.Contains(err.Error(), f.srv.URL) ||
				!strings.Contains(err.Error(), "--sglang-api-key-file") {
				t.Fatalf("Run: %v; want an sglang.AuthError naming %s and how to set a key", err, f.srv.URL)
			}
			select {
			case <-c.Fatal():
			default:
				t.Fatal("Fatal not closed")
			}
			// A request waiting for admission does not wait forever either: the stage stops on Fatal.
			if c.Err() == nil {
				t.Fatal("Err is nil")
			}
		})
	}
}

// With the key every call carries it as a bearer token, and the key never appears in logs or in a printed
// Config.
func TestAPIKeySentNeverLogged(t *testing.T) {
	const key = "s3cret-key-1234"
	f := newFake(t, 10000)
	f.apiKey = key
	f.release(5)
	// The key as the stage's flags read it (generate's TestAPIKeyFlags).
	cfg := Config{Endpoints: []string{f.srv.URL}, APIKey: secret.New(key), Policy: PolicyFixed}
	var logs bytes.Buffer
	var mu sync.Mutex
	cfg.Logger = slog.New(slog.NewJSONHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg.Registerer = prometheus.NewRegistry()
	cfg.HealthInterval = 10 * time.Millisecond
	c, err := NewController(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runController(t, c)
	waitFor(t, "endpoint ready", func() bool { return c.Endpoints()[0].Ready })
	if _, err := c.Do(context.Background(), req("k", 5, 5)); err != nil {
		t.Fatal(err)
	}
	cfg.Logger.Info("config", "cfg", cfg, "key", cfg.APIKey)
	printed := fmt.Sprintf("%v %+v %#v %s", cfg, cfg, cfg, cfg.APIKey)
	mu.Lock()
	echoed := strings.Contains(logs.String(), key) || strings.Contains(printed, key)
	mu.Unlock()
	if echoed {
		t.Fatal("the API key was echoed")
	}
	// A key the server stops accepting (rotated) is fatal for a request in flight too, not retried forever.
	f.mu.Lock()
	f.apiKey = "rotated"
	f.mu.Unlock()
	_, err = c.Do(context.Background(), req("k2", 5, 5))
	var ae *sglang.AuthError
	if !errors.As(err, &ae) || !ae.KeySet {
		t.Fatalf("Do with a refused key: %v", err)
	}
	<-c.Fatal()
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// A release before /v1/loads and per-request retraction counts gives no evidence the budget can grow on:
// it stays within the KV pool.
func TestLegacyServerBudgetStaysWithinPool(t *testing.T) {
	f := newFake(t, 10000)
	f.legacy, f.noMetrics = true, true
	c := newDriven(t, Config{Endpoints: []string{f.srv.URL}})
	f.release(1)
	if _, err := c.Do(context.Background(), req("first", 10, 10)); err != nil { // meta_info without a count
		t.Fatal(err)
	}
	t.Cleanup(func() { f.release(1) })
	done := doAsync(c, context.Background(), req("binding", 4000, 5000)) // charged 9000 of 10000: binding
	waitFor(t, "running", func() bool { return f.runningNow() == 1 })
	polls(t, c, 0, 75)
	if b := c.Endpoints()[0].Budget; b > 10000 {
		t.Fatalf("budget %g grew past the pool without /v1/loads or retraction counts", b)
	}
	f.release(1)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A restart shows as a changed startup_time: the server is drained, its request in flight retried. A pool
// reading that disagrees while startup_time stays the same is not a restart.
func TestRestartDetectedByStartupTime(t *testing.T) {
	f := newFake(t, 10000)
	c := newDriven(t, Config{Endpoints: []string{f.srv.URL}})
	t.Cleanup(func() { f.release(2) })

	// Same startup_time, other pool in /v1/loads: read /server_info, find no restart, go on.
	f.mu.Lock()
	f.load["max_total_num_tokens"] = 12000
	f.mu.Unlock()
	infos := f.infos.Load()
	for range 3 {
		if restarted, err := c.Poll(context.Background(), 0); err != nil || restarted {
			t.Fatalf("poll with a pool mismatch: restarted %v, %v", restarted, err)
		}
	}
	if f.infos.Load() != infos+3 || attempts(t, c, f.srv.URL, "drained") != 0 || !c.Endpoints()[0].Ready {
		t.Fatal("a pool mismatch with an unchanged startup_time was not checked, or drained the endpoint")
	}
	f.mu.Lock()
	delete(f.load, "max_total_num_tokens")
	f.mu.Unlock()

	type outcome struct {
		res *Result
		err error
	}
	ch := make(chan outcome, 1)
	go func() { res, err := c.Do(context.Background(), req("r", 5, 5)); ch <- outcome{res, err} }()
	waitFor(t, "running", func() bool { return f.runningNow() == 1 })
	f.mu.Lock()
	f.startup = 99.5 // the server restarted (the fake keeps the connection; a real restart drops it)
	f.mu.Unlock()
	restarted := false
	for i := 0; i < capacityCheckPolls && !restarted; i++ { // the periodic check finds it
		var err error
		if restarted, err = c.Poll(context.Background(), 0); err != nil {
			t.Fatal(err)
		}
	}
	if !restarted || c.Endpoints()[0].Ready {
		t.Fatal("a changed startup_time was not taken for a restart")
	}
	waitFor(t, "the attempt on the restarted server cancelled", func() bool { return attempts(t, c, f.srv.URL, "drained") == 1 })
	if err := c.Probe(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	f.release(2)
	o := <-ch
	if o.err != nil || o.res.Attempts != 2 {
		t.Fatalf("request across the restart: %+v %v; want success on attempt 2", o.res, o.err)
	}
}
