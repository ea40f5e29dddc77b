package admission

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/draftflow/draftflow/sglang"
)

// countHealth records one health check or connection outcome of s: a success resets its failure count, and
// HealthFailures failures in a row drain it while it is up.
func (c *Controller) countHealth(s *server, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		s.fails = 0
		return
	}
	s.fails++
	if s.state != stateReady {
		s.lastErr = err
	}
	if s.state == stateReady && s.fails >= c.cfg.HealthFailures {
		c.drainLocked(s, err)
	}
}

// drainLocked stops admissions to s until a probe brings it back, and cancels the attempts in flight on it
// (they are retried elsewhere). c.mu must be held.
func (c *Controller) drainLocked(s *server, err error) {
	if s.state == stateDraining {
		return
	}
	inflight := 0
	for _, ep := range s.eps {
		inflight += ep.inflight
	}
	c.log.Warn("endpoint drained", "endpoint", s.url, "inflight", inflight, "err", err)
	s.state = stateDraining
	s.lastErr = fmt.Errorf("drained: %w", err)
	close(s.drainedSignal)
	s.drainedSignal = make(chan struct{})
	for _, ep := range s.eps {
		c.met.endpointState(ep)
	}
}

// Probe checks server i's health and reads its capacity (under the fixed policy a server without
// /server_info is still usable), and on success makes it admit requests with fresh budgets. The caller probes
// a server that is starting or was drained until it succeeds. A refused API key fails the Controller, and so
// does the UnreachableTimeout passing since NewController while no server answered anything (see Fatal): Probe
// returns that error.
func (c *Controller) Probe(ctx context.Context, i int) error {
	s := c.srv[i]
	info, err := c.readCapacity(ctx, s)
	if err == nil || answered(err) {
		c.mu.Lock()
		c.answered = true
		c.mu.Unlock()
	}
	if err == nil {
		c.bringUp(s, info)
		return nil
	}
	c.mu.Lock()
	s.lastErr = err
	c.mu.Unlock()
	var ae *sglang.AuthError
	if errors.As(err, &ae) {
		c.fail(err)
		return err
	}
	if uerr := c.unreachable(c.now(), err); uerr != nil {
		c.fail(uerr)
		return uerr
	}
	return err
}

// Health runs one health check of server i (bounded by the larger of Config.HealthInterval and 5 s): a
// success resets the server's failure count, HealthFailures failures in a row drain it (Probe brings it
// back). A check cut short because ctx ended counts for nothing.
func (c *Controller) Health(ctx context.Context, i int) error {
	s := c.srv[i]
	hctx, cancel := context.WithTimeout(ctx, max(c.cfg.HealthInterval, healthTimeout))
	err := s.cl.Health(hctx)
	cancel()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	c.countHealth(s, err)
	return err
}

// Ready reports whether server i admits requests.
func (c *Controller) Ready(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.srv[i].state == stateReady
}

// Drained returns a channel closed when server i is next drained (HealthFailures failed health checks or
// connections in a row, or a restart): whoever watches the server probes it again.
func (c *Controller) Drained(i int) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.srv[i].drainedSignal
}

// Poll reads server i's load (/v1/loads) and retraction counter (/metrics), bounded by the larger of
// BudgetConfig.PollInterval and 1 s, and adapts the budgets of its admission units (kv-budget: the caller
// polls every PollInterval). It reports a server restart (the server is drained; Probe brings it back). A
// server refusing the API key fails the Controller (see Fatal).
func (c *Controller) Poll(ctx context.Context, i int) (restarted bool, err error) {
	s := c.srv[i]
	c.mu.Lock()
	ready := s.state == stateReady
	c.mu.Unlock()
	if !ready {
		return false, errors.New("generate: poll of a server that is not up")
	}
	pctx, cancel := context.WithTimeout(ctx, max(c.cfg.Budget.PollInterval, time.Second))
	defer cancel()
	restarted, err = c.poll(pctx, s)
	var ae *sglang.AuthError
	if errors.As(err, &ae) {
		c.fail(err)
	}
	return restarted, err
}

// answered reports whether err came with an answer from the server (an HTTP status, an unusable body): it
// is running, if not ready. Anything else (refused, unreachable, timed out) is no answer.
func answered(err error) bool {
	var se *sglang.StatusError
	var ie *sglang.InvalidResponseError
	var ae *sglang.AuthError
	return errors.As(err, &se) || errors.As(err, &ie) || errors.As(err, &ae)
}

// unreachable returns the error that ends the stage when no endpoint has answered anything since the
// Controller was made, UnreachableTimeout ago; last is the latest failure.
func (c *Controller) unreachable(now time.Time, last error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.answered || c.cfg.UnreachableTimeout < 0 || now.Sub(c.started) < c.cfg.UnreachableTimeout {
		return nil
	}
	urls := make([]string, len(c.srv))
	for i, s := range c.srv {
		urls[i] = s.url
	}
	return fmt.Errorf("no SGLang endpoint answered in %s (%s; last error: %v): check --sglang and that the server is "+
		"running; --unreachable-timeout waits longer (a server that answers, even 503 while it loads, is waited for)",
		c.cfg.UnreachableTimeout, strings.Join(urls, ", "), last)
}
