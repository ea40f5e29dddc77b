package admission

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/draftflow/draftflow/sglang"
)

// Ticket is a request offered with Offer. Offer, Finish, Fail, Probe, Health and Poll are the Controller's
// admission, routing, health and budget logic without its goroutines and timers, for a caller that sends
// requests itself on its own clock (Config.Clock): the benchmark's discrete-event simulation drives every
// policy this way, through the same sglang.Client (HTTP, parsing, feedback) Do and Run use. A Ticket belongs to one
// goroutine: finish it from the goroutine that offered it (or synchronise).
type Ticket struct {
	// Request is the offered request.
	Request *Request
	w       *waiter
	done    bool
}

// Offer queues r for admission, behind requests already waiting, exactly as Do does. granted, when not nil,
// is called once r is admitted, with the Controller's lock held: it must not call back into the Controller
// (record the ticket and act on it afterwards). Admissions happen inside Offer, Finish, Fail, Probe, Health
// and Poll calls. The caller sends GenerateRequest(t) with Client(t.Endpoint()) and reports the answer with
// Finish, or the failure with Fail.
func (c *Controller) Offer(r *Request, granted func(*Ticket)) *Ticket {
	t := &Ticket{Request: r}
	var hook func()
	if granted != nil {
		hook = func() { granted(t) }
	}
	t.w = &waiter{req: r, lane: c.laneOf(r), ready: make(chan struct{}), since: c.now(), granted: hook}
	c.enqueue(t.w)
	return t
}

// Endpoint returns the index (in Config.Endpoints) of the server t was admitted to, or -1 while it waits.
func (t *Ticket) Endpoint() int {
	select {
	case <-t.w.ready:
		return t.w.lease.ep.srv.idx
	default:
		return -1
	}
}

// GenerateRequest is the /generate body the stage sends for an admitted ticket (its first attempt): the
// prompt, the sampling parameters and, on a server with data-parallel ranks, the rank it was admitted to.
func (c *Controller) GenerateRequest(t *Ticket) *sglang.GenerateRequest {
	return c.generateRequest(t.w.lease.ep, t.Request, AttemptRID(t.Request.RID, 1))
}

// Client returns the client of server i (in Config.Endpoints).
func (c *Controller) Client(i int) *sglang.Client { return c.srv[i].cl }

// Finish reports the server's answer to an admitted ticket: the completion length is learnt, the
// retractions meta_info reported count as feedback, the charge returns to the budget and waiting requests
// that now fit are admitted. took is the request's latency, for the metrics.
func (c *Controller) Finish(t *Ticket, resp *sglang.GenerateResponse, took time.Duration) error {
	if err := c.settle(t); err != nil {
		return err
	}
	c.finish(t.w.lease, t.Request, resp, took)
	return nil
}

// Fail reports an admitted ticket whose attempt got no answer (a connection error: the server died): the
// charge returns to the budget and the failure counts against the server, as in Do. The caller offers the
// request again to retry it.
func (c *Controller) Fail(t *Ticket, err error) error {
	if err2 := c.settle(t); err2 != nil {
		return err2
	}
	c.release(t.w.lease, 0)
	c.reportFailure(t.w.lease.ep, err)
	return nil
}

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

// EndpointUp makes server i admit requests with fresh budgets for info, as Run does once the server
// answered its health check and capacity read.
func (c *Controller) EndpointUp(i int, info sglang.Capacity) {
	c.bringUp(c.srv[i], info)
}

// Probe checks server i's health and reads its capacity over HTTP, and on success makes it admit requests
// with fresh budgets, as Run does for a server that is starting or was drained.
func (c *Controller) Probe(ctx context.Context, i int) error {
	info, err := c.readCapacity(ctx, c.srv[i])
	if err != nil {
		return err
	}
	c.bringUp(c.srv[i], info)
	return nil
}

// Health runs one health check of server i, as Run does every Config.HealthInterval: HealthFailures
// failures in a row drain it (Probe brings it back).
func (c *Controller) Health(ctx context.Context, i int) error {
	s := c.srv[i]
	err := s.cl.Health(ctx)
	c.countHealth(s, err)
	return err
}

// Ready reports whether server i admits requests.
func (c *Controller) Ready(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.srv[i].state == stateReady
}

// Poll applies one poll of server i (its /v1/loads answer and /metrics retraction counter, over HTTP) as Run
// does every BudgetConfig.PollInterval under the kv-budget policy. It reports a server restart (the server
// is drained; Probe brings it back).
func (c *Controller) Poll(ctx context.Context, i int) (restarted bool, err error) {
	s := c.srv[i]
	c.mu.Lock()
	ready := s.state == stateReady
	c.mu.Unlock()
	if !ready {
		return false, errors.New("generate: poll of a server that is not up")
	}
	return c.poll(ctx, s)
}

// Drained is closed once the server t was admitted to is drained (failed health checks, or restarted): Do
// cancels such an attempt at once and retries it elsewhere; a driver does the same with Abandon.
func (t *Ticket) Drained() <-chan struct{} { return t.w.lease.drain }

// Abandon hands an admitted ticket back without an answer, because its server was drained: the charge
// returns to the budget without counting a failure, as Do does for an attempt it cancels on a drained
// server. The caller aborts the request on the server and offers it again to retry it.
func (c *Controller) Abandon(t *Ticket) error {
	if err := c.settle(t); err != nil {
		return err
	}
	c.release(t.w.lease, 0)
	c.met.outcome(t.w.lease.ep, "drained")
	return nil
}
