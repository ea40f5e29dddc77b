package generate

import (
	"fmt"
	"time"
)

// Ticket is a request offered with Offer. Offer, Finish, EndpointUp and Feedback are the Controller's
// admission, routing and budget logic without its I/O and goroutines, for a caller that sends requests
// itself on its own clock (Config.Clock): the benchmark's discrete-event simulation drives every policy
// this way. Do and Run are the same logic with HTTP, retries and timers around it. A Ticket belongs to one
// goroutine: finish it from the goroutine that offered it (or synchronise).
type Ticket struct {
	// Request is the offered request.
	Request *Request
	w       *waiter
	done    bool
}

// Offer queues r for admission, behind requests already waiting, exactly as Do does. granted, when not nil,
// is called once r is admitted, with the Controller's lock held: it must not call back into the Controller
// (record the ticket and act on it afterwards). Admissions happen inside Offer, Finish, EndpointUp and
// Feedback calls. The caller sends the request to Endpoint and reports the answer with Finish.
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

// Endpoint returns the index (in Config.Endpoints) of the endpoint t was admitted to, or -1 while it waits.
func (t *Ticket) Endpoint() int {
	select {
	case <-t.w.ready:
		return t.w.lease.ep.idx
	default:
		return -1
	}
}

// Finish reports the server's answer to an admitted ticket: the completion length is learnt, the
// retractions meta_info reported count as feedback, the charge returns to the budget and waiting requests
// that now fit are admitted. took is the request's latency, for the metrics.
func (c *Controller) Finish(t *Ticket, completionTokens, retractions int, took time.Duration) error {
	if t.Endpoint() < 0 {
		return fmt.Errorf("generate: Finish of request %q before it was admitted", t.Request.RID)
	}
	if t.done {
		return fmt.Errorf("generate: request %q finished twice", t.Request.RID)
	}
	t.done = true
	c.finish(t.w.lease, t.Request, completionTokens, retractions, took)
	return nil
}

// EndpointUp makes endpoint i admit requests with a fresh budget for info, as Run does once the endpoint
// answered its health check and capacity read.
func (c *Controller) EndpointUp(i int, info Capacity) {
	c.bringUp(c.eps[i], info)
}

// Feedback applies one poll of endpoint i (its /v1/loads answer and its server-side retraction counter,
// when it exports one) as Run does every BudgetConfig.PollInterval under the kv-budget policy. It reports a
// server restart (the caller reads the capacity again and calls EndpointUp).
func (c *Controller) Feedback(i int, load Load, retractedTotal float64, haveRetracted bool) (restarted bool) {
	return c.adjust(c.eps[i], load, true, retractedTotal, haveRetracted)
}
