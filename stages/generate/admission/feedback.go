package admission

import (
	"context"
	"errors"
	"math"
	"strconv"
	"time"

	"github.com/draftflow/draftflow/sglang"
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

// capacityCheckPolls is how often (in polls) the server's /server_info is read again to notice a restart
// that left no other trace; a poll whose figures disagree with the capacity, or a retraction counter that
// went backwards, triggers the read at once.
const capacityCheckPolls = 30

// bringUp admits to s with fresh budgets for the capacity just read. Under kv-budget a server with several
// data-parallel ranks gets one admission unit per rank (each rank has its own KV pool, and a budget summed
// over ranks would let one rank retract while the sum shows headroom); requests are pinned to their unit's
// rank with routed_dp_rank.
func (c *Controller) bringUp(s *server, info sglang.Capacity) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s.cap = info
	s.state = stateReady
	s.fails = 0
	s.lastErr = nil
	s.haveRetracted = false
	s.polls = 0
	type unit struct{ rank, pool, maxRunning int }
	units := []unit{{-1, info.MaxTotalTokens, info.MaxRunningRequests}}
	if c.cfg.Policy == PolicyKVBudget && len(info.Ranks) > 1 {
		units = units[:0]
		for r, rc := range info.Ranks {
			units = append(units, unit{r, rc.MaxTotalTokens, rc.MaxRunningRequests})
		}
	}
	eps := make([]*endpoint, len(units))
	for i, u := range units {
		name := s.url
		if u.rank >= 0 {
			name = s.url + "?dp_rank=" + strconv.Itoa(u.rank)
		}
		// Attempts read their endpoint's name and rank without the lock, so those never change: the unit keeps
		// its endpoint (and the accounting of attempts still unwinding from before) only when they are the same.
		ep := &endpoint{srv: s, name: name, rank: u.rank}
		if i < len(s.eps) && s.eps[i].name == name {
			ep = s.eps[i]
		}
		ep.pool, ep.maxRunning = u.pool, u.maxRunning
		ep.haveRetracted, ep.metaRetracts, ep.cooldownUntil = false, 0, time.Time{}
		ep.gated, ep.haveLoads, ep.load, ep.sinceTok, ep.others = false, false, sglang.Load{}, 0, 0
		if c.cfg.Policy == PolicyFixed {
			ep.budget = float64(c.cfg.Concurrency)
		} else {
			ep.budget = float64(u.pool) * c.cfg.Budget.InitialFactor
		}
		eps[i] = ep
		c.met.endpointState(ep)
	}
	s.eps = eps
	c.eps = c.eps[:0]
	for _, x := range c.srv {
		c.eps = append(c.eps, x.eps...)
	}
	c.admit()
}

// readCapacity checks health and reads the server's capacity. Under the fixed policy a server without
// /server_info is still usable (but one refusing the API key is not).
func (c *Controller) readCapacity(ctx context.Context, s *server) (sglang.Capacity, error) {
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.cl.Health(hctx); err != nil {
		return sglang.Capacity{}, err
	}
	info, err := s.cl.ServerInfo(hctx)
	var ae *sglang.AuthError
	if err != nil && c.cfg.Policy == PolicyFixed && !errors.As(err, &ae) {
		c.log.Debug("no server info; fixed policy goes on without it", "endpoint", s.url, "err", err)
		return sglang.Capacity{}, nil
	}
	return info, err
}

// poll reads s's load (/v1/loads) and retraction counter (/metrics), checks whether the server restarted,
// and applies the feedback to the budgets of s's admission units. A restarted server is drained (its
// requests in flight were lost with it; they are retried) and restarted is true. A server without
// /v1/loads (releases before it) or without metrics is polled for what it has.
func (c *Controller) poll(ctx context.Context, s *server) (restarted bool, err error) {
	var load sglang.Load
	var lerr error
	if !s.noLoads {
		load, lerr = s.cl.Loads(ctx)
		if sglang.IsNotFound(lerr) {
			c.log.Warn("server has no /v1/loads (an SGLang release before it): budgets stay within the KV pool "+
				"and adapt from retractions only", "endpoint", s.url)
			s.noLoads = true
		} else if lerr != nil {
			var ir *sglang.InvalidResponseError
			if errors.As(lerr, &ir) {
				c.log.Warn("unusable /v1/loads answer; this poll is skipped", "endpoint", s.url, "err", lerr)
			}
		}
	}
	var x sglang.Retracted
	var merr error
	if !s.noMetrics {
		x, merr = s.cl.RetractedTotal(ctx)
		switch {
		case sglang.IsNotFound(merr) || (merr == nil && !x.Supported):
			c.log.Info("server exports no SGLang metrics (--enable-metrics); retractions are read from meta_info",
				"endpoint", s.url)
			s.noMetrics = true
		case merr != nil:
			var ir *sglang.InvalidResponseError
			if errors.As(merr, &ir) {
				c.log.Warn("unusable /metrics answer; this poll is skipped", "endpoint", s.url, "err", merr)
			}
		}
	}
	for _, e := range []error{lerr, merr} {
		var ae *sglang.AuthError
		if errors.As(e, &ae) {
			return false, e
		}
	}
	haveLoad := !s.noLoads && lerr == nil
	haveRetracted := !s.noMetrics && merr == nil && x.Supported

	// A restart leaves traces: a pool that differs from the capacity read, a counter that went backwards.
	// Either (and, every capacityCheckPolls polls, nothing at all) makes the stage read /server_info again;
	// only a changed startup_time (or, from releases without one, a changed pool) is a restart.
	s.polls++
	suspect := s.polls%capacityCheckPolls == 0
	if haveLoad && !sameRanks(load, s.cap) {
		suspect = true
	}
	if haveRetracted && s.haveRetracted && x.Total < s.retracted {
		suspect = true
	}
	if suspect {
		info, err := s.cl.ServerInfo(ctx)
		var ae *sglang.AuthError
		switch {
		case errors.As(err, &ae):
			return false, err
		case err == nil && restartedSince(s.cap, info):
			c.log.Warn("endpoint restarted; its requests in flight are retried and its capacity read again",
				"endpoint", s.url, "startup_time_before", s.cap.StartupTime, "startup_time_now", info.StartupTime)
			c.mu.Lock()
			c.drainLocked(s, errors.New("server restarted"))
			c.mu.Unlock()
			return true, nil
		case err == nil && haveLoad && !sameRanks(load, info):
			if !s.warnedMismatch {
				c.log.Warn("/v1/loads and /server_info disagree on the KV pools; going by /server_info",
					"endpoint", s.url, "loads_pool", load.MaxTokens, "server_info_pool", info.MaxTotalTokens)
				s.warnedMismatch = true
			}
		}
	}
	if haveRetracted {
		s.retracted, s.haveRetracted = x.Total, true
	}
	c.mu.Lock()
	eps := s.eps
	c.mu.Unlock()
	// The gauge refreshes on the scheduler's logging cadence: a value seen before is the same retractions.
	gauge := haveRetracted && !x.HasCounter && x.Recent > 0 && x.Recent != s.lastRecent
	s.lastRecent = x.Recent
	for _, ep := range eps {
		l, ok := load.ForRank(ep.rank)
		if gauge {
			// No counter sample, but the gauge saw retractions: a release without the counter (0.5.4), or
			// the counter's first samples not scraped yet. Count them through meta_info's path.
			c.mu.Lock()
			ep.metaRetracts += int(math.Ceil(x.Recent))
			c.mu.Unlock()
			c.adjust(ep, l, haveLoad && ok, 0, false)
			continue
		}
		c.adjust(ep, l, haveLoad && ok, x.ForRank(ep.rank), haveRetracted)
	}
	return false, nil
}

// sameRanks reports whether a load poll shows the KV pools the capacity read reported.
func sameRanks(l sglang.Load, capa sglang.Capacity) bool {
	if len(l.Ranks) != len(capa.Ranks) {
		return l.MaxTokens == capa.MaxTotalTokens
	}
	for i, r := range l.Ranks {
		if r.MaxTokens != capa.Ranks[i].MaxTotalTokens {
			return false
		}
	}
	return true
}

// restartedSince reports whether a server whose capacity read was before answers now as a restarted one:
// its startup_time changed (it changes on every start). A server that reports no startup_time (older
// releases) has restarted when its pools changed.
func restartedSince(before, now sglang.Capacity) bool {
	if before.StartupTime != "" || now.StartupTime != "" {
		return before.StartupTime != now.StartupTime
	}
	if len(before.Ranks) != len(now.Ranks) || before.MaxTotalTokens != now.MaxTotalTokens {
		return true
	}
	for i := range before.Ranks {
		if before.Ranks[i] != now.Ranks[i] {
			return true
		}
	}
	return false
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

// adjust applies one poll's feedback to ep's budget: load is ep's own (its rank's) /v1/loads figures, and
// retractedTotal the server's retraction counter for ep's rank.
func (c *Controller) adjust(ep *endpoint, load sglang.Load, haveLoad bool, retractedTotal float64, haveRetracted bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !ep.ready() {
		return
	}
	if haveLoad {
		ep.load = load
		ep.haveLoads = true
	}
	retracts := 0.0
	if haveRetracted {
		// A counter that went backwards without a restart (the server's metrics were reset): a new baseline.
		if ep.haveRetracted && retractedTotal >= ep.retracted {
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
	// The band is about this Controller's own waiting requests: another client's queue on the server says
	// nothing about whether this budget admits more than the server runs, and shrinking the budget for it
	// would hand the server to that client (see holdsShare). The rank's requests beyond this Controller's
	// in flight are other clients'; first come, first served, a client's part of the queue is its part of
	// the rank's requests.
	waiting := load.Waiting
	if haveLoad && c.cfg.Policy == PolicyKVBudget {
		ep.others = 0
		if total := load.Running + load.Waiting; total > ep.inflight {
			ep.others = total - ep.inflight
			waiting = int(math.Round(float64(load.Waiting) * float64(ep.inflight) / float64(total)))
		}
		c.met.otherRequests.WithLabelValues(ep.name).Set(float64(ep.others))
	}
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
	// Without load data (releases before /v1/loads) nothing shows that the server runs more than its pool
	// holds, so the budget never exceeds the pool; it grows back towards it only while retractions are
	// observable (a counter or meta_info counts) and none happen.
	evidence := haveRetracted || !ep.srv.metaSilent
	switch {
	case retracts > 0:
		ep.budget *= retractCut
		ep.cooldownUntil = now.Add(cooldownPolls * cfg.PollInterval)
	case !haveLoad:
		if evidence && now.After(ep.cooldownUntil) && binding {
			ep.budget *= 1 + maxGrowStep/5
		}
	case waiting > qhi && !(ep.others > 0 && ep.used > ep.budget):
		// Beside other clients with more in flight than the budget, holdsShare (not the budget) is what admits:
		// a cut would change nothing now and leave the budget near its floor when the others go (a replica
		// leaving the fleet), and the ones left would take dozens of polls to grow it back while the server
		// runs part-empty (make rebalance measured 30 s of it). The budget waits instead.
		ep.budget *= queueCut
	case waiting < qlo && binding && now.After(ep.cooldownUntil):
		ep.budget *= 1 + maxGrowStep
	}
	pool := float64(ep.pool)
	ceiling := maxBudgetFactor
	if !ep.haveLoads {
		ceiling = max(1, c.cfg.Budget.InitialFactor)
	}
	ep.budget = min(max(ep.budget, minBudgetFactor*pool), ceiling*pool)
	c.met.endpointState(ep)
	c.admit()
}
