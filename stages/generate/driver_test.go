package generate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/draftflow/draftflow/internal/testutil"
	"github.com/draftflow/draftflow/metrics/metricstest"
	"github.com/draftflow/draftflow/sglang"
	"github.com/draftflow/draftflow/stages/generate/admission"
	"github.com/draftflow/draftflow/stages/generate/internal/fakesglang"
)

// The driver's tests run in a testing/synctest bubble: its timers (probe back-off, health checks, polls,
// retry back-off, request timeouts) run on the bubble's fake clock, the fake servers live on an in-process
// network inside the bubble, and synctest.Wait returns once every goroutine waits for something, so a test
// waits for no wall-clock time.

// testDriver is a driver of the fake servers with its run loop started.
type testDriver struct {
	*driver
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error // run's error
}

// stop ends run and returns its error.
func (d *testDriver) stop() error {
	d.cancel()
	return <-d.done
}

// ended waits for run to end by itself (the Controller failed) and returns its error.
func (d *testDriver) ended() error { return <-d.done }

// startDriver starts a driver for cfg's endpoints on fakes and waits until every goroutine waits (the servers
// that answer are up).
func startDriver(t *testing.T, fakes *fakesglang.Net, cfg admission.Config, log *slog.Logger) *testDriver {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.HTTPClient, cfg.Registerer = fakes.Client(), reg
	if log == nil {
		log = testLogger(t)
	}
	cfg.Logger = log
	ctl, err := admission.NewController(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := newDriver(ctl, log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.run(ctx) }()
	synctest.Wait()
	return &testDriver{driver: d, reg: reg, cancel: cancel, done: done}
}

// attempts reads draftflow_generate_requests_total of an endpoint and outcome.
func (d *testDriver) attempts(t *testing.T, endpoint, outcome string) float64 {
	return metricstest.Counter(t, d.reg, "draftflow_generate_requests_total", map[string]string{"endpoint": endpoint, "outcome": outcome})
}

func testRequest(rid string, prompt, maxNew int) *admission.Request {
	return &admission.Request{RID: rid, Key: admission.LengthKey{Dataset: "d", Lane: DefaultLane}, InputIDs: make([]uint32, prompt),
		Sampling: sglang.SamplingParams{MaxNewTokens: maxNew}}
}

// doAsync runs do in the background and returns a channel with its error.
func doAsync(ctx context.Context, d *testDriver, r *admission.Request, startBy <-chan struct{}) <-chan error {
	ch := make(chan error, 1)
	go func() { _, err := d.do(ctx, r, startBy); ch <- err }()
	return ch
}

func TestDriverRetriesAndRejections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := fakesglang.NewNet()
		f := fakes.Add(t, 100000)
		f.Release(100)
		d := startDriver(t, fakes, admission.Config{Endpoints: []string{f.URL}, MaxServerErrors: 3, HealthFailures: 100}, nil)
		defer d.stop()

		// 503, 500, a reset connection, a 502 and an abort without status (abort_all, pause_generation, a weight
		// update), then success: retried, with a fresh rid each attempt.
		f.Script = []func(http.ResponseWriter) bool{fakesglang.Status(503, "The request queue is full."),
			fakesglang.Status(500, "boom"), fakesglang.Reset, fakesglang.Status(502, "gw"), fakesglang.Aborted("Abort all requests", 0)}
		res, err := d.do(context.Background(), testRequest("ok", 10, 20), nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Attempts != 6 || len(res.Response.OutputIDs) != 10 || res.ServedModel != "fake/model" || res.Endpoint != f.URL {
			t.Fatalf("result %+v", res)
		}
		f.Lock()
		rids := strings.Join(f.RIDs, " ")
		f.RIDs = nil
		f.Unlock()
		if rids != "ok.1; ok.2; ok.3; ok.4; ok.5; ok.6;" {
			t.Fatalf("rids %q", rids)
		}

		for _, tc := range []struct {
			script []func(http.ResponseWriter) bool
			reason string
		}{
			{[]func(http.ResponseWriter) bool{fakesglang.Status(400, "The input (9 tokens) is longer than the model's context length")}, "context length"},
			{[]func(http.ResponseWriter) bool{fakesglang.Status(500, "a"), fakesglang.Status(500, "b"), fakesglang.Status(500, "c")}, "3 times, last: c"},
			{[]func(http.ResponseWriter) bool{fakesglang.Aborted("bad grammar", 400)}, "bad grammar"},
			{[]func(http.ResponseWriter) bool{fakesglang.Body(`{"text": "no ids"}`)}, "no output_ids"},
		} {
			f.Lock()
			f.Script = tc.script
			f.Unlock()
			_, err := d.do(context.Background(), testRequest("bad", 10, 20), nil)
			var rej *admission.RejectedError
			if !errors.As(err, &rej) || !strings.Contains(rej.Reason, tc.reason) {
				t.Errorf("got %v, want a rejection mentioning %q", err, tc.reason)
			}
		}
		if st := d.ctl.Endpoints()[0]; st.InFlight != 0 || st.Used != 0 {
			t.Fatalf("charges leaked: %+v", st)
		}
		if _, err := d.do(context.Background(), testRequest("none", 10, 0), nil); err == nil {
			t.Fatal("a request without max_new_tokens was sent")
		}
	})
}

func TestDriverCancelWhileWaitingAndRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := fakesglang.NewNet()
		f := fakes.Add(t, 1000)
		d := startDriver(t, fakes, admission.Config{Endpoints: []string{f.URL}, Policy: PolicyFixed, Concurrency: 1}, nil)
		defer d.stop()
		ctx, cancel := context.WithCancel(context.Background())
		running := doAsync(ctx, d, testRequest("a", 1, 1), nil)
		synctest.Wait()
		waiting := doAsync(ctx, d, testRequest("b", 1, 1), nil)
		synctest.Wait()
		if f.RunningNow() != 1 || d.ctl.Waiting() != 1 {
			t.Fatalf("%d running, %d waiting; want 1 and 1", f.RunningNow(), d.ctl.Waiting())
		}
		cancel()
		for _, ch := range []<-chan error{running, waiting} {
			if err := <-ch; !errors.Is(err, context.Canceled) {
				t.Fatalf("got %v, want context.Canceled", err)
			}
		}
		if st := d.ctl.Endpoints()[0]; st.InFlight != 0 || d.ctl.Waiting() != 0 {
			t.Fatalf("state after cancel: %+v, %d waiting", st, d.ctl.Waiting())
		}
		f.Lock()
		aborts := slices.Clone(f.Aborts)
		f.Unlock()
		if !slices.Equal(aborts, []string{"a.1;"}) {
			t.Fatalf("aborts %v, want the running request's a.1;", aborts)
		}
	})
}

func TestDriverTimeoutsAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := fakesglang.NewNet()
		f := fakes.Add(t, 100000) // nothing released: every attempt runs into RequestTimeout
		d := startDriver(t, fakes, admission.Config{Endpoints: []string{f.URL}, RequestTimeout: 30 * time.Second}, nil)
		defer d.stop()
		start := time.Now()
		_, err := d.do(context.Background(), testRequest("slow", 10, 20), nil)
		var rej *admission.RejectedError
		if !errors.As(err, &rej) || !strings.Contains(rej.Reason, "timed out 3 times") {
			t.Fatalf("got %v, want a rejection after %d timeouts", err, admission.DefaultMaxTimeouts)
		}
		if took := time.Since(start); took < 90*time.Second || took > 2*time.Minute {
			t.Fatalf("three 30 s timeouts took %s", took)
		}
		f.Lock()
		rids, aborts := strings.Join(f.RIDs, " "), strings.Join(f.Aborts, " ")
		f.RIDs, f.Aborts = nil, nil
		f.Unlock()
		if want := "slow.1; slow.2; slow.3;"; rids != want || aborts != want {
			t.Fatalf("rids %q, aborts %q, want %q for both", rids, aborts, want)
		}
		if n := d.attempts(t, f.URL, "timeout"); n != 3 {
			t.Fatalf("%g timeouts counted, want 3", n)
		}
		if st := d.ctl.Endpoints()[0]; st.InFlight != 0 || st.Used != 0 || !st.Ready {
			t.Fatalf("endpoint after timeouts: %+v", st)
		}
		// Fewer timeouts than the limit: the request still succeeds.
		slow := func(http.ResponseWriter) bool { time.Sleep(time.Minute); return true }
		f.Lock()
		f.Script = []func(http.ResponseWriter) bool{slow, slow}
		f.Unlock()
		f.Release(1)
		res, err := d.do(context.Background(), testRequest("late", 10, 20), nil)
		if err != nil || res.Attempts != 3 {
			t.Fatalf("got %+v, %v; want success on attempt 3", res, err)
		}
		time.Sleep(time.Minute) // the slow answers' handlers end
	})
}

// TestDriverDrainMovesInFlightRequests: an attempt in flight on a server that is drained is cut short and
// retried on another server, not counted as a timeout; its abort on the drained server goes beside the retry,
// and wait returns only once it is done.
func TestDriverDrainMovesInFlightRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := fakesglang.NewNet()
		a, b := fakes.Add(t, 10000), fakes.Add(t, 10000)
		b.Healthy.Store(false)
		a.AbortDelay = 3 * time.Second // a dying server answers slowly
		// MaxTimeouts 1: were the cut attempt counted as a timeout, the request would be dead-lettered.
		d := startDriver(t, fakes, admission.Config{Endpoints: []string{a.URL, b.URL}, Policy: PolicyFixed, Concurrency: 4,
			RequestTimeout: time.Minute, MaxTimeouts: 1}, nil)
		defer d.stop()
		type answer struct {
			res *outcome
			err error
		}
		done := make(chan answer, 1)
		go func() { res, err := d.do(context.Background(), testRequest("m", 5, 5), nil); done <- answer{res, err} }()
		synctest.Wait()
		if a.RunningNow() != 1 {
			t.Fatal("not running on a")
		}
		b.Healthy.Store(true)
		time.Sleep(admission.DefaultHealthInterval) // b's next probe
		synctest.Wait()
		if !d.ctl.Ready(1) {
			t.Fatal("b not up")
		}
		b.Release(1)
		a.Healthy.Store(false) // a's gate stays shut: the request finishes only if it moves to b
		o := <-done
		if o.err != nil {
			t.Fatalf("request on the drained endpoint: %v", o.err)
		}
		if o.res.Endpoint != b.URL || o.res.Attempts != 2 {
			t.Fatalf("result %+v, want attempt 2 on %s", o.res, b.URL)
		}
		d.wait()
		a.Lock()
		aborted := slices.Contains(a.Aborts, "m.1;")
		a.Unlock()
		if !aborted {
			t.Fatal("wait returned before the abort of the cut attempt on a was done")
		}
		if n := d.attempts(t, a.URL, "drained"); n != 1 {
			t.Fatalf("%g drained attempts counted, want 1", n)
		}
		if n := d.attempts(t, a.URL, "timeout"); n != 0 {
			t.Fatalf("%g timeouts counted, want 0", n)
		}
	})
}

// TestDriverStartByLeavesQueuedWorkUnstarted: when a record's partition is being handed over (startBy closes),
// a request still waiting for a server returns errNotStarted and is never sent, while the running one finishes.
func TestDriverStartByLeavesQueuedWorkUnstarted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := fakesglang.NewNet()
		f := fakes.Add(t, 1000)
		d := startDriver(t, fakes, admission.Config{Endpoints: []string{f.URL}, Policy: PolicyFixed, Concurrency: 1}, nil)
		defer d.stop()
		revoking := make(chan struct{})
		running := doAsync(context.Background(), d, testRequest("a", 1, 1), revoking)
		synctest.Wait()
		waiting := doAsync(context.Background(), d, testRequest("b", 1, 1), revoking)
		synctest.Wait()
		close(revoking)
		if err := <-waiting; !errors.Is(err, errNotStarted) {
			t.Fatalf("queued request: %v, want errNotStarted", err)
		}
		f.Release(1)
		if err := <-running; err != nil {
			t.Fatalf("the running request was stopped: %v", err)
		}
		f.Lock()
		defer f.Unlock()
		if f.MaxSeen != 1 || d.ctl.Waiting() != 0 || !slices.Equal(f.RIDs, []string{"a.1;"}) {
			t.Fatalf("server saw %d at once and rids %v, %d still waiting", f.MaxSeen, f.RIDs, d.ctl.Waiting())
		}
	})
}

// TestDriverDrainAndReadmit: a server failing its health checks is drained and requests go elsewhere; once
// it answers again it is probed back, with a fresh capacity read.
func TestDriverDrainAndReadmit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := fakesglang.NewNet()
		a, b := fakes.Add(t, 10000), fakes.Add(t, 10000)
		a.Release(1000)
		b.Release(1000)
		d := startDriver(t, fakes, admission.Config{Endpoints: []string{a.URL, b.URL}, Policy: PolicyFixed, Concurrency: 4}, nil)
		defer d.stop()
		infos := a.Infos.Load()
		a.Healthy.Store(false)
		time.Sleep(admission.DefaultHealthFailures * admission.DefaultHealthInterval)
		synctest.Wait()
		if d.ctl.Ready(0) {
			t.Fatal("a not drained after failing its health checks")
		}
		for i := range 4 {
			res, err := d.do(context.Background(), testRequest(fmt.Sprint("x", i), 5, 5), nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.Endpoint != b.URL {
				t.Fatalf("request went to drained endpoint %s", res.Endpoint)
			}
		}
		a.Healthy.Store(true)
		time.Sleep(admission.DefaultHealthInterval) // the longest wait between probes
		synctest.Wait()
		if !d.ctl.Ready(0) || a.Infos.Load() <= infos {
			t.Fatal("a not re-admitted with a fresh capacity read")
		}
		// A request that fails on a dying endpoint moves to the other one.
		a.Lock()
		a.Script = []func(http.ResponseWriter) bool{func(w http.ResponseWriter) bool {
			a.Healthy.Store(false)
			return fakesglang.Reset(w)
		}}
		a.Unlock()
		for i := range 4 {
			if _, err := d.do(context.Background(), testRequest(fmt.Sprint("y", i), 5, 5), nil); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestDriverUnreachableEndpoint: an endpoint where nothing listens is warned about at once and again every
// minute while it stays down, and after UnreachableTimeout run fails with an error naming the endpoint and
// the flag.
func TestDriverUnreachableEndpoint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const url = "http://nothing-listens.invalid:30000"
		var logs testutil.Buffer
		start := time.Now()
		d := startDriver(t, fakesglang.NewNet(), admission.Config{Endpoints: []string{url}, Policy: PolicyFixed,
			UnreachableTimeout: 10 * time.Minute}, slog.New(slog.NewTextHandler(&logs, nil)))
		if !strings.Contains(logs.String(), "endpoint not ready; will keep trying") {
			t.Fatalf("no warning at the first failure:\n%s", logs.String())
		}
		time.Sleep(90 * time.Second)
		synctest.Wait()
		if !strings.Contains(logs.String(), "still not ready") {
			t.Fatalf("the warning did not repeat after 90 s:\n%s", logs.String())
		}
		err := d.ended()
		if took := time.Since(start); took < 10*time.Minute || took > 11*time.Minute {
			t.Fatalf("gave up after %s, want the 10 min timeout", took)
		}
		for _, want := range []string{"no SGLang endpoint answered", url, "--unreachable-timeout", "--sglang"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("error %v does not say %q", err, want)
			}
		}
	})
}

// TestDriverLoadingEndpointIsWaitedFor: a server that answers 503 (SGLang loading a large model) for longer
// than UnreachableTimeout is waited for, and admits once it answers 200.
func TestDriverLoadingEndpointIsWaitedFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := fakesglang.NewNet()
		f := fakes.Add(t, 10000)
		f.Healthy.Store(false)
		d := startDriver(t, fakes, admission.Config{Endpoints: []string{f.URL}, Policy: PolicyFixed, UnreachableTimeout: 10 * time.Minute}, nil)
		time.Sleep(time.Hour)
		synctest.Wait()
		if d.ctl.Err() != nil {
			t.Fatalf("gave up on a loading server: %v", d.ctl.Err())
		}
		f.Healthy.Store(true)
		time.Sleep(admission.DefaultHealthInterval)
		synctest.Wait()
		if !d.ctl.AnyReady() {
			t.Fatal("not up once it answers")
		}
		if err := d.stop(); err != nil {
			t.Fatalf("run: %v", err)
		}
	})
}

// TestDriverRefusedKeyStops: a server refusing the API key ends run at once with the Controller's error.
func TestDriverRefusedKeyStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := fakesglang.NewNet()
		f := fakes.Add(t, 10000)
		f.APIKey = "s3cret-key"
		d := startDriver(t, fakes, admission.Config{Endpoints: []string{f.URL}}, nil)
		var ae *sglang.AuthError
		if err := d.ended(); !errors.As(err, &ae) {
			t.Fatalf("run: %v, want the sglang.AuthError", err)
		}
	})
}
