package admission

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/draftflow/draftflow/sglang"
	"github.com/draftflow/draftflow/stages/generate/internal/fakesglang"
)

// retryUntil fails the request's attempts with errs in turn, retrying after each, and returns the last
// ticket and what Fail returned for it (nil: retry).
func retryUntil(t *testing.T, c *Controller, r *Request, errs ...error) (*Ticket, error) {
	t.Helper()
	tk := c.Offer(r, nil)
	for i, err := range errs {
		if tk.Endpoint() < 0 {
			t.Fatalf("attempt %d not admitted", tk.Attempt())
		}
		if ferr := c.Fail(tk, err); ferr != nil || i == len(errs)-1 {
			return tk, ferr
		}
		tk = c.Retry(tk, nil)
	}
	return tk, nil
}

var errReset = &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}

// TestFailRetriesAndRejects: what a failed attempt means for its request. Busy servers, connection errors
// and 500s are retried, each attempt with a rid of its own; a refused request, too many 500s or too many
// timeouts reject it; the charge returns every time.
func TestFailRetriesAndRejects(t *testing.T) {
	fakes := fakesglang.NewNet()
	f := fakes.Add(t, 100000)
	c := newDriven(t, fakes, Config{Endpoints: []string{f.URL}, MaxServerErrors: 3, MaxTimeouts: 2, HealthFailures: 100})

	// 503, 500, a reset connection, a 502 and an abort without status: retried, with a fresh rid each attempt.
	tk, err := retryUntil(t, c, req("ok", 10, 20), &sglang.StatusError{Code: 503, Message: "The request queue is full."},
		&sglang.StatusError{Code: 500, Message: "boom"}, errReset, &sglang.StatusError{Code: 502, Message: "gw"},
		&sglang.AbortedError{Message: "Abort all requests"})
	if err != nil {
		t.Fatal(err)
	}
	tk = c.Retry(tk, nil)
	if rid := c.GenerateRequest(tk).RID; rid != "ok.6;" {
		t.Fatalf("sixth attempt's rid %q, want ok.6;", rid)
	}
	res, err := c.Finish(tk, answer(10), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.Attempts != 6 || len(res.Response.OutputIDs) != 10 || res.ServedModel != "fake/model" || res.Endpoint != f.URL {
		t.Fatalf("result %+v", res)
	}

	timeout := fmt.Errorf("%w: %w", ErrRequestTimeout, context.DeadlineExceeded)
	for _, tc := range []struct {
		errs   []error
		reason string
	}{
		{[]error{&sglang.StatusError{Code: 400, Message: "The input (9 tokens) is longer than the model's context length"}}, "context length"},
		{[]error{&sglang.StatusError{Code: 500, Message: "a"}, &sglang.StatusError{Code: 500, Message: "b"},
			&sglang.StatusError{Code: 500, Message: "c"}}, "3 times, last: c"},
		{[]error{&sglang.AbortedError{Message: "bad grammar", StatusCode: 400}}, "bad grammar"},
		{[]error{&sglang.InvalidResponseError{Reason: "no output_ids"}}, "no output_ids"},
		{[]error{timeout, &sglang.StatusError{Code: 503}, timeout}, "timed out 2 times"},
	} {
		_, err := retryUntil(t, c, req("bad", 10, 20), tc.errs...)
		var rej *RejectedError
		if !errors.As(err, &rej) || !strings.Contains(rej.Reason, tc.reason) {
			t.Errorf("got %v, want a rejection mentioning %q", err, tc.reason)
		}
	}
	if st := c.Endpoints()[0]; st.InFlight != 0 || st.Used != 0 || !st.Ready {
		t.Fatalf("endpoint after the failures: %+v", st)
	}
	if n := attempts(t, c, f.URL, "timeout"); n != 2 {
		t.Fatalf("%g timeouts counted, want 2", n)
	}
	// A refused key: no retry, and the Controller stops.
	auth := &sglang.AuthError{Endpoint: f.URL, Code: 401}
	if _, err := retryUntil(t, c, req("k", 10, 20), auth); !errors.Is(err, auth) || c.Err() == nil {
		t.Fatalf("Fail with a refused key: %v, Err %v", err, c.Err())
	}
	<-c.Fatal()
}

// TestFailDrainsAfterConnectionErrors: HealthFailures connection errors in a row drain a server and the retry
// avoids it; an attempt that fails on a server drained meanwhile counts as drained, not as another failure.
func TestFailDrainsAfterConnectionErrors(t *testing.T) {
	fakes := fakesglang.NewNet()
	a, b := fakes.Add(t, 10000), fakes.Add(t, 10000)
	c := newDriven(t, fakes, Config{Endpoints: []string{a.URL, b.URL}, Policy: PolicyFixed, Concurrency: 4, Routing: RouteRoundRobin})
	ts := offer(c, 6, func(i int) *Request { return req(fmt.Sprint("r", i), 5, 5) })
	var onA []*Ticket
	for _, tk := range ts {
		if tk.Endpoint() == 0 {
			onA = append(onA, tk)
		}
	}
	if len(onA) != 3 {
		t.Fatalf("%d of 6 on a, want 3 (round robin)", len(onA))
	}
	if err := c.Fail(onA[0], errReset); err != nil || !c.Ready(0) {
		t.Fatalf("one connection error: %v, ready %v", err, c.Ready(0))
	}
	if retry := c.Retry(onA[0], nil); retry.Endpoint() != 1 {
		t.Fatalf("retry on server %d, want the other one", retry.Endpoint())
	}
	if err := c.Fail(onA[1], errReset); err != nil || c.Ready(0) {
		t.Fatalf("second connection error in a row: %v, ready %v; want a drained", err, c.Ready(0))
	}
	select {
	case <-onA[2].Drained():
	default:
		t.Fatal("the attempt still on a was not told of the drain")
	}
	if err := c.Fail(onA[2], errReset); err != nil {
		t.Fatal(err)
	}
	if d, ce := attempts(t, c, a.URL, "drained"), attempts(t, c, a.URL, "connection_error"); d != 1 || ce != 2 {
		t.Fatalf("a: %g drained, %g connection errors counted; want 1 and 2", d, ce)
	}
	if err := c.Probe(context.Background(), 0); err != nil || !c.Ready(0) {
		t.Fatalf("a not back after a probe: %v", err)
	}
}
