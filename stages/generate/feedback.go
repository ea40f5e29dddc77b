package generate

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"
)

// Budget adaptation constants of the kv-budget policy.
const (
	// retractCut multiplies the budget when the server retracted requests since the last poll.
	retractCut = 0.85
	// queueCut multiplies the budget while the server's queue is longer than BudgetConfig.MaxServerQueue.
	queueCut = 0.98
	// maxGrowStep is one poll's growth while the server's queue runs short.
	maxGrowStep = 0.05
	// cooldownPolls is how many polls after a retraction the budget does not grow.
	cooldownPolls = 10
	// minBudgetFactor and maxBudgetFactor clamp the budget relative to the KV pool.
	minBudgetFactor, maxBudgetFactor = 0.2, 8.0
	// healthTimeout is the least time a health check may take before it counts as failed.
	healthTimeout = 5 * time.Second
	// bindingShare is how full the budget must be for growth to make sense (the budget is what limits).
	bindingShare = 0.85
)

// Run brings every endpoint up (a health check and a capacity read) and keeps its health, capacity and, under
// kv-budget, its budget current until ctx ends. Do admits requests only to endpoints Run has brought up.
func (c *Controller) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, ep := range c.eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if !c.probe(ctx, ep) {
					return
				}
				c.watch(ctx, ep)
			}
		}()
	}
	wg.Wait()
	return nil
}

// probe waits until ep answers its health check and (under kv-budget) its capacity read, then admits to it
// with a fresh budget. It returns false when ctx ended first.
func (c *Controller) probe(ctx context.Context, ep *endpoint) bool {
	wait := c.cfg.RetryInitial
	for logged := false; ; {
		info, err := c.readCapacity(ctx, ep)
		if err == nil {
			c.bringUp(ep, info)
			c.log.Info("endpoint ready", "endpoint", ep.url, "max_total_num_tokens", info.MaxTotalTokens,
				"max_running_requests", info.MaxRunningRequests, "context_length", info.ContextLength,
				"budget", ep.budget, "policy", c.cfg.Policy)
			return true
		}
		if !logged {
			c.log.Warn("endpoint not ready; will keep trying", "endpoint", ep.url, "err", err)
			logged = true
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		wait = min(2*wait, c.cfg.HealthInterval)
	}
}

// bringUp admits to ep with a fresh budget for the capacity just read.
func (c *Controller) bringUp(ep *endpoint, info Capacity) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ep.cap = info
	ep.state = stateReady
	ep.fails = 0
	ep.haveRetracted = false
	ep.metaRetracts = 0
	ep.cooldownUntil = time.Time{}
	if c.cfg.Policy == PolicyFixed {
		ep.budget = float64(c.cfg.Concurrency)
	} else {
		ep.budget = float64(info.MaxTotalTokens) * c.cfg.Budget.InitialFactor
	}
	c.met.endpointState(ep)
	c.admit()
}

// readCapacity checks health and reads the server's capacity. Under the fixed policy a server without
// /get_server_info is still usable.
func (c *Controller) readCapacity(ctx context.Context, ep *endpoint) (Capacity, error) {
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := ep.cl.Health(hctx); err != nil {
		return Capacity{}, err
	}
	info, err := ep.cl.ServerInfo(hctx)
	if err != nil && c.cfg.Policy == PolicyFixed {
		c.log.Debug("no server info; fixed policy goes on without it", "endpoint", ep.url, "err", err)
		return Capacity{}, nil
	}
	return info, err
}

// watch health-checks ep and, under kv-budget, polls its load and adapts its budget. It returns when ep is
// drained (the caller probes it again) or ctx ends.
func (c *Controller) watch(ctx context.Context, ep *endpoint) {
	c.mu.Lock()
	drained := ep.drainedSignal
	c.mu.Unlock()
	health := time.NewTicker(c.cfg.HealthInterval)
	defer health.Stop()
	var poll <-chan time.Time
	if c.cfg.Policy == PolicyKVBudget {
		t := time.NewTicker(c.cfg.Budget.PollInterval)
		defer t.Stop()
		poll = t.C
	}
	loadsOK, metricsOK := true, true
	for {
		select {
		case <-ctx.Done():
			return
		case <-drained:
			return
		case <-health.C:
			hctx, cancel := context.WithTimeout(ctx, max(c.cfg.HealthInterval, healthTimeout))
			err := ep.cl.Health(hctx)
			cancel()
			if ctx.Err() != nil {
				return
			}
			c.mu.Lock()
			if err == nil {
				ep.fails = 0
			} else {
				ep.fails++
				if ep.fails >= c.cfg.HealthFailures {
					c.drainLocked(ep, err)
					c.mu.Unlock()
					return
				}
			}
			c.mu.Unlock()
		case <-poll:
			pctx, cancel := context.WithTimeout(ctx, max(c.cfg.Budget.PollInterval, time.Second))
			var load Load
			var lerr error
			if loadsOK {
				load, lerr = ep.cl.Loads(pctx)
				if isNotFound(lerr) {
					c.log.Warn("server has no /v1/loads; the budget adapts from retractions only", "endpoint", ep.url)
					loadsOK = false
				}
			}
			var total float64
			var have bool
			if metricsOK {
				var merr error
				total, have, merr = ep.cl.RetractedTotal(pctx)
				if isNotFound(merr) || (merr == nil && !have) {
					c.log.Info("server exports no retraction counter (--enable-metrics); using meta_info counts", "endpoint", ep.url)
					metricsOK = false
				}
				if merr != nil {
					have = false
				}
			}
			cancel()
			if ctx.Err() != nil {
				return
			}
			if !loadsOK || lerr == nil {
				if restarted := c.adjust(ep, load, loadsOK, total, have); restarted {
					c.log.Warn("endpoint restarted; re-reading its capacity", "endpoint", ep.url)
					c.mu.Lock()
					c.drainLocked(ep, errors.New("server restarted"))
					c.mu.Unlock()
					return
				}
			}
		}
	}
}

// recharge re-estimates the charge of every request in flight on ep from its age: a request admitted a
// seconds ago on a server decoding rate tokens/s per running request has produced about rate*a tokens, and
// is charged its prompt plus the conservative quantile of the completions longer than that
// (LengthEstimator.ExpectedAfter). Requests that outlive their peers are the long ones: their growing
// charges hold admissions back while they run, so long requests do not pile up until the pool overflows.
// Charges are whole tokens, so sums do not depend on the order of the set. c.mu must be held.
func (c *Controller) recharge(ep *endpoint, now time.Time, rate float64) {
	if c.cfg.Policy != PolicyKVBudget {
		return
	}
	for _, ls := range ep.leases {
		produced := int(rate * now.Sub(ls.start).Seconds())
		charge := float64(len(ls.req.InputIDs) + c.est.ExpectedAfter(ls.req.Key, produced, ls.req.Sampling.MaxNewTokens))
		ep.used += charge - ls.charge
		ls.lane.used += charge - ls.charge
		ls.charge = charge
	}
}

func isNotFound(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && (se.Code == http.StatusNotFound || se.Code == http.StatusMethodNotAllowed)
}

// adjust applies one poll's feedback to ep's budget. It reports a server restart (a pool size change or a
// retraction counter that went backwards), after which the capacity must be read again.
func (c *Controller) adjust(ep *endpoint, load Load, haveLoad bool, retractedTotal float64, haveRetracted bool) (restarted bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ep.state != stateReady {
		return false
	}
	if haveLoad {
		ep.load = load
		if load.MaxTokens > 0 && ep.cap.MaxTotalTokens > 0 && load.MaxTokens != ep.cap.MaxTotalTokens {
			return true
		}
	}
	retracts := 0.0
	if haveRetracted {
		if ep.haveRetracted && retractedTotal < ep.retracted {
			return true
		}
		if ep.haveRetracted {
			retracts = retractedTotal - ep.retracted
		}
		ep.retracted, ep.haveRetracted = retractedTotal, true
	} else {
		retracts = float64(ep.metaRetracts)
	}
	ep.metaRetracts = 0
	c.met.serverLoad(ep, load)

	now := c.now()
	cfg := c.cfg.Budget
	if haveLoad && load.Running > 0 && load.GenThroughput > 0 {
		c.recharge(ep, now, load.GenThroughput/float64(load.Running))
	}
	// Keep a few requests waiting on the server, so it never idles between a completion and the next
	// arrival, and not many more, so admission stays with the budget: the band scales with the batch.
	qlo := max(cfg.MinServerQueue, load.Running/6)
	qhi := max(cfg.MaxServerQueue, load.Running/3, 2*qlo)
	binding := ep.used >= bindingShare*ep.budget
	// Above the usage target the endpoint takes nothing new until the next poll: what already waits on the
	// server is all SGLang may admit, so its own (optimistic) admission cannot push the pool into a retraction.
	if haveLoad && c.cfg.Policy == PolicyKVBudget {
		// Requests waiting on the server hold no KV yet, but will: count them at the mean prompt in flight.
		prompts := 0
		for _, ls := range ep.leases {
			prompts += len(ls.req.InputIDs)
		}
		queued := 0.0
		if len(ep.leases) > 0 {
			queued = float64(load.Waiting) * float64(prompts) / float64(len(ep.leases))
		}
		ep.gated, ep.polled, ep.sinceTok = true, now, queued
	}
	switch {
	case retracts > 0:
		ep.budget *= retractCut
		ep.cooldownUntil = now.Add(cooldownPolls * cfg.PollInterval)
	case !haveLoad:
		// Without load data, open up slowly while no retraction happens and the budget binds.
		if now.After(ep.cooldownUntil) && binding {
			ep.budget *= 1 + maxGrowStep/5
		}
	case load.Waiting > qhi:
		ep.budget *= queueCut
	case load.Waiting < qlo && binding && now.After(ep.cooldownUntil):
		ep.budget *= 1 + maxGrowStep
	}
	pool := float64(ep.cap.MaxTotalTokens)
	ep.budget = min(max(ep.budget, minBudgetFactor*pool), maxBudgetFactor*pool)
	c.met.endpointState(ep)
	c.admit()
	return false
}
