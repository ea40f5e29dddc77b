package admission

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/draftflow/draftflow/sglang"
)

// Request is one generation for the Controller to admit.
type Request struct {
	// RID is the base of SGLang's request ids (see RequestID); attempt n is sent as AttemptRID(RID, n).
	RID string
	// Key is the dataset and lane whose output lengths this request shares.
	Key LengthKey
	// InputIDs is the prompt.
	InputIDs []uint32
	// Sampling holds the sampling parameters; MaxNewTokens must be set.
	Sampling sglang.SamplingParams
	// Prefer is the URL of the server that generated the previous turn of the request's conversation: the
	// request goes there when it has room (its prompt prefix is in that server's radix cache), else wherever
	// routing sends it. Empty: no preference.
	Prefer string
}

// Result is a finished generation.
type Result struct {
	// Response is the server's answer, token-exact.
	Response *sglang.GenerateResponse
	// Endpoint is the base URL of the server that produced it.
	Endpoint string
	// ServedModel is the model path that server reported, if known.
	ServedModel string
	// Attempts counts the attempts made (1 when the first succeeded).
	Attempts int
}

// RejectedError is a request that must not be retried: the server refused it (HTTP 400), aborted it with a
// 4xx status, answered with something unusable, failed it too often, or never finished it within
// Config.RequestTimeout in Config.MaxTimeouts attempts. Reason is the server's message (or what happened),
// fit for a dead letter.
type RejectedError struct {
	// Reason says why, fit for a dead letter.
	Reason string
	// Err is the last attempt's error.
	Err error
}

// Error returns the reason.
func (e *RejectedError) Error() string { return "generate: rejected: " + e.Reason }

// Unwrap returns the last attempt's error.
func (e *RejectedError) Unwrap() error { return e.Err }

// ErrRequestTimeout marks the error of an attempt that ran into Config.RequestTimeout: Fail counts it towards
// Config.MaxTimeouts.
var ErrRequestTimeout = errors.New("generate: request timeout")

// Ticket is one attempt at a request: offered (Offer, Retry), admitted to a server, then settled exactly once
// with Finish, Fail, Abandon or Withdraw. The caller sends GenerateRequest(t) with Client(t.Endpoint()) on its
// own clock: the stage in real time, the benchmark on simulated time. A Ticket belongs to one goroutine:
// settle it from the goroutine that offered it (or synchronise).
type Ticket struct {
	// Request is the offered request.
	Request *Request
	attempt int
	// serverErrors and timeouts count the request's attempts so far that the server failed with HTTP 500s or
	// that ran into the request timeout; Retry carries them over.
	serverErrors, timeouts int
	w                      *waiter
	done                   bool
}

// Offer queues the first attempt at r for admission, behind requests already waiting (a later turn of a
// conversation, Prefer set, ahead of first turns). granted, when not nil, is called once the ticket is
// admitted, with the Controller's lock held: it must not call back into the Controller (record the ticket
// and act on it afterwards); Granted is closed at the same time. Admissions happen inside the calls that
// offer, settle, poll or bring up servers.
func (c *Controller) Offer(r *Request, granted func(*Ticket)) *Ticket {
	return c.offer(&Ticket{Request: r, attempt: 1}, nil, granted)
}

// Retry queues the next attempt at prev's request, after prev failed or was abandoned: it avoids prev's
// server while another one is ready, and carries the counts Fail keeps towards Config.MaxServerErrors and
// Config.MaxTimeouts.
func (c *Controller) Retry(prev *Ticket, granted func(*Ticket)) *Ticket {
	var avoid *endpoint
	if prev.w.lease != nil {
		avoid = prev.w.lease.ep
	}
	t := &Ticket{Request: prev.Request, attempt: prev.attempt + 1, serverErrors: prev.serverErrors, timeouts: prev.timeouts}
	return c.offer(t, avoid, granted)
}

func (c *Controller) offer(t *Ticket, avoid *endpoint, granted func(*Ticket)) *Ticket {
	var hook func()
	if granted != nil {
		hook = func() { granted(t) }
	}
	t.w = &waiter{req: t.Request, lane: c.laneOf(t.Request), avoid: avoid, ready: make(chan struct{}), since: c.now(), granted: hook}
	c.enqueue(t.w)
	return t
}

// Granted is closed once t is admitted to a server.
func (t *Ticket) Granted() <-chan struct{} { return t.w.ready }

// Attempt is t's attempt number: 1 for Offer's, one more for each Retry.
func (t *Ticket) Attempt() int { return t.attempt }

// Endpoint returns the index (in Config.Endpoints) of the server t was admitted to, or -1 while it waits.
func (t *Ticket) Endpoint() int {
	select {
	case <-t.w.ready:
		return t.w.lease.ep.srv.idx
	default:
		return -1
	}
}

// Drained is closed once the server t was admitted to is drained (failed health checks or connections, or
// restarted): an attempt in flight there is cut short and abandoned (Abandon), and retried elsewhere.
func (t *Ticket) Drained() <-chan struct{} { return t.w.lease.drain }

// GenerateRequest is the /generate body of an admitted ticket: the prompt, the sampling parameters, the
// attempt's rid (AttemptRID) and, on a server with data-parallel ranks, the rank it was admitted to.
func (c *Controller) GenerateRequest(t *Ticket) *sglang.GenerateRequest {
	g := &sglang.GenerateRequest{InputIDs: t.Request.InputIDs, RID: AttemptRID(t.Request.RID, t.attempt),
		SamplingParams: t.Request.Sampling}
	if ep := t.w.lease.ep; ep.rank >= 0 {
		rank := ep.rank
		g.RoutedDPRank = &rank
	}
	return g
}

// Client returns the client of server i (in Config.Endpoints).
func (c *Controller) Client(i int) *sglang.Client { return c.srv[i].cl }

// Finish reports the server's answer to an admitted ticket: the server's failure count resets, the
// completion length is learnt, the retractions meta_info reported count as feedback, the charge returns to
// the budget and waiting requests that now fit are admitted. took is the request's latency, for the metrics.
func (c *Controller) Finish(t *Ticket, resp *sglang.GenerateResponse, took time.Duration) (*Result, error) {
	if err := c.settle(t); err != nil {
		return nil, err
	}
	ls := t.w.lease
	c.mu.Lock()
	ls.ep.srv.fails = 0
	served := ls.ep.srv.cap.ServedModel
	c.mu.Unlock()
	c.finish(ls, t.Request, resp, took)
	return &Result{Response: resp, Endpoint: ls.ep.srv.url, ServedModel: served, Attempts: t.attempt}, nil
}

// Fail reports an admitted ticket whose attempt ended in err, an error answer or no answer: the charge
// returns to the budget and the error is classified and counted. A connection error counts against the
// server (HealthFailures in a row drain it), unless the server was drained meanwhile (the attempt is
// abandoned, as with Abandon); err wrapping ErrRequestTimeout counts towards MaxTimeouts, an HTTP 500 or a
// server-side abort towards MaxServerErrors. Fail returns nil when the request is to be tried again (Retry),
// a *RejectedError when no retry can cure it, or the error that stopped the Controller (a server refusing
// the API key; see Fatal).
func (c *Controller) Fail(t *Ticket, err error) error {
	if serr := c.settle(t); serr != nil {
		return serr
	}
	ep := t.w.lease.ep
	c.release(t.w.lease, 0)
	var ae *sglang.AuthError
	if errors.As(err, &ae) {
		// No retry can cure a refused key: the Controller stops (the record is redelivered after the fix).
		c.met.outcome(ep, "unauthorized")
		c.fail(err)
		return err
	}
	kind, reason := classify(err)
	switch kind {
	case outcomeReject:
		c.met.outcome(ep, "rejected")
		return &RejectedError{Reason: reason, Err: err}
	case outcomeServerError:
		t.serverErrors++
		c.met.outcome(ep, "server_error")
		if t.serverErrors >= c.cfg.MaxServerErrors {
			return &RejectedError{Reason: fmt.Sprintf("server failed the request %d times, last: %s", t.serverErrors, reason), Err: err}
		}
	case outcomeBusy:
		c.met.outcome(ep, "busy")
	case outcomeMisconfigured:
		c.met.outcome(ep, "client_error")
		c.log.Error("endpoint refuses requests; check --sglang", "endpoint", ep.name, "err", err)
	case outcomeConnection:
		return c.failConnection(t, ep, err)
	}
	return nil
}

// failConnection is Fail for an attempt that got no answer: a timeout, an attempt cut short by a drain, or a
// connection failure.
func (c *Controller) failConnection(t *Ticket, ep *endpoint, err error) error {
	if errors.Is(err, ErrRequestTimeout) {
		t.timeouts++
		c.met.outcome(ep, "timeout")
		if t.timeouts >= c.cfg.MaxTimeouts {
			c.log.Warn("request keeps timing out; dead-lettering it", "rid", t.Request.RID, "endpoint", ep.name,
				"timeouts", t.timeouts, "request_timeout", c.cfg.RequestTimeout)
			return &RejectedError{Reason: fmt.Sprintf("request timed out %d times (request timeout %s)", t.timeouts,
				c.cfg.RequestTimeout), Err: err}
		}
		return nil
	}
	select {
	case <-t.w.lease.drain:
		// The drain is the failure, counted once already.
		c.met.outcome(ep, "drained")
		c.log.Info("request moved off a drained endpoint", "endpoint", ep.name, "rid", AttemptRID(t.Request.RID, t.attempt))
	default:
		c.met.outcome(ep, "connection_error")
		c.countHealth(ep.srv, err)
	}
	return nil
}

// Abandon hands back an admitted ticket whose server was drained before the attempt ended: the charge returns
// to the budget without counting a failure. The caller aborts the request on the server and retries it.
func (c *Controller) Abandon(t *Ticket) error {
	if err := c.settle(t); err != nil {
		return err
	}
	c.release(t.w.lease, 0)
	c.met.outcome(t.w.lease.ep, "drained")
	return nil
}

// Withdraw takes back a ticket the caller gives up on (its context ended, or its work is handed over): off
// the queue while it waits, else its charge returns to the budget, no failure counted. A settled ticket is
// left as it is.
func (c *Controller) Withdraw(t *Ticket) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.done {
		return
	}
	t.done = true
	l := t.w.lane
	select {
	case <-t.w.ready:
		c.releaseLocked(t.w.lease)
	default:
		l.waiters = slices.DeleteFunc(l.waiters, func(x *waiter) bool { return x == t.w })
	}
	c.met.queue(l.cfg.Name, len(l.waiters))
}

// settle marks an admitted ticket settled, or says why it cannot be.
func (c *Controller) settle(t *Ticket) error {
	if t.Endpoint() < 0 {
		return fmt.Errorf("generate: request %q settled before it was admitted", t.Request.RID)
	}
	if t.done {
		return fmt.Errorf("generate: request %q settled twice", t.Request.RID)
	}
	t.done = true
	return nil
}

// finish ends a lease whose request the server answered: the output length is learnt, the retractions count
// as feedback, and the charge goes back to the budget.
func (c *Controller) finish(ls *lease, r *Request, resp *sglang.GenerateResponse, took time.Duration) {
	outputTokens := len(resp.OutputIDs)
	retractions, reported := resp.MetaInfo.RetractionCount()
	c.est.Observe(r.Key, outputTokens)
	c.mu.Lock()
	ls.ep.sinceTok -= float64(len(r.InputIDs) + outputTokens)
	if !reported && !ls.ep.srv.metaSilent {
		ls.ep.srv.metaSilent = true
		c.log.Info("server reports no per-request retraction counts in meta_info", "endpoint", ls.ep.srv.url)
	}
	c.mu.Unlock()
	c.release(ls, retractions)
	c.met.finished(ls.ep, outputTokens, retractions, took)
	c.met.estimate(r.Key, c.est.Expected(r.Key, 0))
}

// release returns a lease's charge and admits whoever now fits.
func (c *Controller) release(ls *lease, retractions int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ls.ep.metaRetracts += retractions
	c.releaseLocked(ls)
}

func (c *Controller) releaseLocked(ls *lease) {
	if l := ls.ep.leases; ls.pos < len(l) && l[ls.pos] == ls {
		last := l[len(l)-1]
		l[ls.pos], last.pos = last, ls.pos
		ls.ep.leases = l[:len(l)-1]
	}
	ls.ep.used -= ls.charge
	ls.ep.inflight--
	ls.lane.used -= ls.charge
	if ls.ep.inflight == 0 {
		ls.ep.used = 0 // shed float drift
	}
	c.met.endpointState(ls.ep)
	c.admit()
	c.met.queue(ls.lane.cfg.Name, len(ls.lane.waiters))
}

// RequestID is the base request id of a record's turn: "<id>#<turn>", with '%' and ';' in id written as
// %25 and %3B, so that the only ';' of an attempt's rid is its terminator (see AttemptRID) and distinct
// (id, turn) pairs keep distinct rids.
func RequestID(id string, turn int) string { return ridEscaper.Replace(id) + "#" + strconv.Itoa(turn) }

var ridEscaper = strings.NewReplacer("%", "%25", ";", "%3B")

// AttemptRID is the rid sent for attempt n (1-based) of a request: "<base>.<n>;". Every attempt has its own
// rid, so aborting an abandoned attempt never hits its retry, and the terminator keeps rids prefix-free
// (SGLang's /abort_request matches by prefix).
func AttemptRID(base string, n int) string { return base + "." + strconv.Itoa(n) + ";" }
