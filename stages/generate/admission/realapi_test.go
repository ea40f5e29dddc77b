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
	"github.com/draftflow/draftflow/stages/generate/internal/fakesglang"
)

// Regression tests for what the released SGLang server (0.5.23) answers and the simulator once did not:
// see ../shared/notes/sglang.md, "What the released server really answers". They drive the Controller one
// step at a time (Probe, Poll, Offer, a /generate call through Client, Finish), so "after 75 polls" is 75
// calls, not a sleep.

// polls runs n polls of server i.
func polls(t *testing.T, c *Controller, i, n int) {
	t.Helper()
	for range n {
		if _, err := c.Poll(context.Background(), i); err != nil {
			t.Fatal(err)
		}
	}
}

// send sends an admitted ticket's /generate call and reports the answer (the fake answers at once only when
// released beforehand).
func send(t *testing.T, c *Controller, tk *Ticket) (*Result, error) {
	t.Helper()
	resp, err := c.Client(tk.Endpoint()).Generate(context.Background(), c.GenerateRequest(tk))
	if err != nil {
		return nil, c.Fail(tk, err)
	}
	return c.Finish(tk, resp, time.Second)
}

// A server shared with another client backs its queue up: /v1/loads' num_total_tokens (used plus waiting
// tokens) then exceeds the pool. That is load, not a restart: nothing is drained or aborted.
func TestSharedServerQueueIsNotARestart(t *testing.T) {
	fakes := fakesglang.NewNet()
	f := fakes.Add(t, 10000)
	f.Load = map[string]any{"num_running_reqs": 12, "num_waiting_reqs": 40, "num_used_tokens": 9000,
		"num_total_tokens": 9000 + 40*4000, "token_usage": 0.9, "gen_throughput": 300.0}
	c := newDriven(t, fakes, Config{Endpoints: []string{f.URL}})
	ts := offer(c, 3, func(i int) *Request { return req(fmt.Sprint("s", i), 10, 10) })
	infos := f.Infos.Load()
	polls(t, c, 0, 75)
	for _, tk := range ts {
		select {
		case <-tk.Drained():
			t.Fatal("a backed-up queue was read as a restart")
		default:
		}
	}
	finishAll(t, c, ts)
	// Only the periodic check reads /server_info again (one read per capacityCheckPolls polls).
	if n := f.Infos.Load() - infos; n != 75/capacityCheckPolls {
		t.Fatalf("/server_info read %d times in 75 polls, want %d", n, 75/capacityCheckPolls)
	}
	if st := c.Endpoints()[0]; st.Capacity.MaxTotalTokens != 10000 || !st.Ready {
		t.Fatalf("endpoint %+v", st)
	}
}

// sglang:num_retracted_requests_total is a labelled counter: no sample until the first retraction. A server
// that exports SGLang metrics without it has retracted nothing yet; the feedback stays on for when it does.
func TestRetractionCounterWithoutSamplesKeepsFeedback(t *testing.T) {
	fakes := fakesglang.NewNet()
	f := fakes.Add(t, 100000)
	f.NoCounter = true
	c := newDriven(t, fakes, Config{Endpoints: []string{f.URL}})
	polls(t, c, 0, 3)
	b0 := c.Endpoints()[0].Budget
	if c.Endpoints()[0].Load.MaxTokens != 100000 {
		t.Fatalf("no load read: %+v", c.Endpoints()[0])
	}
	f.Lock()
	f.NoCounter, f.Retracted = false, 4 // the first retractions: the series appears
	f.Unlock()
	polls(t, c, 0, 1)
	if b := c.Endpoints()[0].Budget; b >= b0 {
		t.Fatalf("budget %g after the first retractions, want below %g", b, b0)
	}
}

// max_running_requests is null in /server_info unless set on the command line; the effective per-rank figure
// of internal_states bounds what the stage keeps in flight.
func TestNullMaxRunningRequestsKeepsTheCap(t *testing.T) {
	fakes := fakesglang.NewNet()
	f := fakes.Add(t, 1000000)
	f.MaxRun = 2
	c := newDriven(t, fakes, Config{Endpoints: []string{f.URL}, Budget: BudgetConfig{MaxServerQueue: 1}})
	if got := c.Endpoints()[0].Capacity.MaxRunningRequests; got != 2 {
		t.Fatalf("max running requests %d, want internal_states' 2", got)
	}
	ts := offer(c, 6, func(i int) *Request { return req(fmt.Sprint("m", i), 10, 10) })
	if in, _ := admitted(ts); len(in) != 3 || c.Waiting() != 3 {
		t.Fatalf("%d in flight, %d waiting; want 3 (2 running + 1 queued on the server) and 3", len(in), c.Waiting())
	}
	finishAll(t, c, ts)
}

// A server started with --api-key answers 401 without the key: a clear fatal error naming the endpoint, under
// either policy, never a retry loop.
func TestAPIKeyMissingIsFatal(t *testing.T) {
	for _, policy := range []string{PolicyKVBudget, PolicyFixed} {
		t.Run(policy, func(t *testing.T) {
			fakes := fakesglang.NewNet()
			f := fakes.Add(t, 10000)
			f.APIKey = "s3cret-key"
			c, err := NewController(Config{Endpoints: []string{f.URL}, Policy: policy, HTTPClient: fakes.Client(),
				Registerer: prometheus.NewRegistry(), Logger: testLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			err = c.Probe(context.Background(), 0)
			var ae *sglang.AuthError
			if !errors.As(err, &ae) || ae.Code != 401 || !strings.Contains(err.Error(), f.URL) ||
				!strings.Contains(err.Error(), "--sglang-api-key-file") {
				t.Fatalf("Probe: %v; want an sglang.AuthError naming %s and how to set a key", err, f.URL)
			}
			select {
			case <-c.Fatal():
			default:
				t.Fatal("Fatal not closed")
			}
			if !errors.Is(c.Err(), err) {
				t.Fatalf("Err %v, want the probe's error", c.Err())
			}
		})
	}
}

// With the key every call carries it as a bearer token, and the key never appears in logs or in a printed
// Config.
func TestAPIKeySentNeverLogged(t *testing.T) {
	const key = "s3cret-key-1234"
	fakes := fakesglang.NewNet()
	f := fakes.Add(t, 10000)
	f.APIKey = key
	f.Release(5)
	// The key as the stage's flags read it (generate's TestAPIKeyFlags).
	cfg := Config{Endpoints: []string{f.URL}, APIKey: secret.New(key), Policy: PolicyFixed}
	var logs bytes.Buffer
	var mu sync.Mutex
	cfg.Logger = slog.New(slog.NewJSONHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c := newDriven(t, fakes, cfg)
	if _, err := send(t, c, c.Offer(req("k", 5, 5), nil)); err != nil {
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
	// A key the server stops accepting (rotated) is fatal for a request in flight too, not retried.
	f.Lock()
	f.APIKey = "rotated"
	f.Unlock()
	_, err := send(t, c, c.Offer(req("k2", 5, 5), nil))
	var ae *sglang.AuthError
	if !errors.As(err, &ae) || !ae.KeySet {
		t.Fatalf("a request with a refused key: %v", err)
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
	fakes := fakesglang.NewNet()
	f := fakes.Add(t, 10000)
	f.Legacy, f.NoMetrics = true, true
	c := newDriven(t, fakes, Config{Endpoints: []string{f.URL}})
	f.Release(1)
	if _, err := send(t, c, c.Offer(req("first", 10, 10), nil)); err != nil { // meta_info without a count
		t.Fatal(err)
	}
	binding := c.Offer(req("binding", 4000, 5000), nil) // charged 9000 of 10000: binding
	if binding.Endpoint() != 0 {
		t.Fatal("not admitted")
	}
	polls(t, c, 0, 75)
	if b := c.Endpoints()[0].Budget; b > 10000 {
		t.Fatalf("budget %g grew past the pool without /v1/loads or retraction counts", b)
	}
	f.Release(1)
	if _, err := send(t, c, binding); err != nil {
		t.Fatal(err)
	}
}

// A restart shows as a changed startup_time: the server is drained, its request in flight retried. A pool
// reading that disagrees while startup_time stays the same is not a restart.
func TestRestartDetectedByStartupTime(t *testing.T) {
	fakes := fakesglang.NewNet()
	f := fakes.Add(t, 10000)
	c := newDriven(t, fakes, Config{Endpoints: []string{f.URL}})

	// Same startup_time, other pool in /v1/loads: read /server_info, find no restart, go on.
	f.Lock()
	f.Load["max_total_num_tokens"] = 12000
	f.Unlock()
	infos := f.Infos.Load()
	for range 3 {
		if restarted, err := c.Poll(context.Background(), 0); err != nil || restarted {
			t.Fatalf("poll with a pool mismatch: restarted %v, %v", restarted, err)
		}
	}
	if f.Infos.Load() != infos+3 || attempts(t, c, f.URL, "drained") != 0 || !c.Endpoints()[0].Ready {
		t.Fatal("a pool mismatch with an unchanged startup_time was not checked, or drained the endpoint")
	}
	f.Lock()
	delete(f.Load, "max_total_num_tokens")
	f.Unlock()

	tk := c.Offer(req("r", 5, 5), nil)
	f.Lock()
	f.Startup = 99.5 // the server restarted
	f.Unlock()
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
	select {
	case <-tk.Drained():
	default:
		t.Fatal("the attempt on the restarted server was not told")
	}
	if err := c.Abandon(tk); err != nil || attempts(t, c, f.URL, "drained") != 1 {
		t.Fatalf("abandon: %v, %g drained attempts counted", err, attempts(t, c, f.URL, "drained"))
	}
	if err := c.Probe(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	f.Release(1)
	res, err := send(t, c, c.Retry(tk, nil))
	if err != nil || res.Attempts != 2 {
		t.Fatalf("request across the restart: %+v %v; want success on attempt 2", res, err)
	}
}
