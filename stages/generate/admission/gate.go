package admission

import "math"

// charge is what an in-flight request costs its endpoint's budget.
func (c *Controller) charge(r *Request) float64 {
	if c.cfg.Policy == PolicyFixed {
		return 1
	}
	return float64(len(r.InputIDs) + c.est.Expected(r.Key, r.Sampling.MaxNewTokens))
}

// fits reports whether ep can take a request of charge now.
func (c *Controller) fits(ep *endpoint, charge float64, prompt, maxNew int) bool {
	if !ep.ready() {
		return false
	}
	if c.cfg.Policy == PolicyKVBudget && ep.maxRunning > 0 &&
		ep.inflight >= ep.maxRunning+c.cfg.Budget.MaxServerQueue {
		return false
	}
	if ep.inflight == 0 {
		return true
	}
	if ep.used+charge <= ep.budget && c.gateOpen(ep, prompt, maxNew) {
		return true
	}
	return c.holdsShare(ep, prompt)
}

// holdsShare reports whether a request the budget or the KV gate holds back may go to ep anyway, because
// other clients share the server. SGLang admits first come, first served, so waiting for room only hands
// each freed slot to another client's waiting requests; a server's batch is shared out in proportion to
// the requests each client keeps on it. So while the last poll saw other clients' requests on ep
// (ep.others), a request goes while this Controller keeps fewer there than they do and the pool holds
// that many of its requests at their mean size (prompts in flight, half the recent mean output). c.mu
// must be held.
func (c *Controller) holdsShare(ep *endpoint, prompt int) bool {
	if !ep.gated || ep.inflight+1 >= ep.others {
		return false
	}
	prompts := prompt
	for _, ls := range ep.leases {
		prompts += len(ls.req.InputIDs)
	}
	n := float64(len(ep.leases) + 1)
	return float64(prompts)+n*c.est.RecentMean(recentMeanWindow)/2 <= float64(ep.pool)
}

// recentMeanWindow is how many recent completions the gate's backstop averages: few enough to follow a
// workload whose lengths shift within minutes.
const recentMeanWindow = 128

// maxFinishShare caps one request's chance to finish in the gate's sum, so a request sure to end counts as
// a large but finite term.
const maxFinishShare = 0.9

// gateOpen is the KV gate of the kv-budget policy: whether a request with a prompt of prompt tokens may go
// to ep now, judged by the KV tokens the server is predicted to hold (predictedUsed) and the running
// batch's ages. The server retracts when its running requests grow into a full pool before enough of them
// finish; SGLang's own admission counts on them needing only a fraction of their max_new_tokens and fills
// the pool. So a request goes only while the headroom left after its prompt, shared by the batch (each
// request may grow headroom/n tokens before the pool is full), is expected to see at least
// BudgetConfig.SafeCompletions of the running requests finish, each with the chance that a request still
// running after the tokens it produced so far ends within that much more (LengthEstimator.FinishShare),
// and while usage stays under TargetUsage. Young batches of short requests run close to the pool; old
// batches of long ones keep more room. c.mu must be held.
func (c *Controller) gateOpen(ep *endpoint, prompt, maxNew int) bool {
	if !ep.gated {
		return true
	}
	return c.gateOpenAt(ep, c.predictedUsed(ep), prompt, maxNew)
}

// gateOpenAt is the KV gate with the pool holding predicted KV tokens. c.mu must be held.
func (c *Controller) gateOpenAt(ep *endpoint, predicted float64, prompt, maxNew int) bool {
	pool := float64(ep.pool)
	used := predicted + float64(prompt)
	if used > c.cfg.Budget.TargetUsage*pool {
		return false
	}
	// Backstop against a length estimate the batch has outgrown: past half the pool, keep free the KV of
	// HeadroomOutputs recent mean outputs.
	if used > pool/2 && pool-used < c.cfg.Budget.HeadroomOutputs*c.est.RecentMean(recentMeanWindow) {
		return false
	}
	want := c.cfg.Budget.SafeCompletions
	if f := c.cfg.Budget.SafeFraction; f > 0 {
		// On a small pool the batch is small: expecting SafeCompletions of a dozen requests to finish is
		// asking most of them to, and the pool runs half empty. A fraction of the batch bounds the demand.
		want = min(want, max(1, f*float64(len(ep.leases))))
	}
	if want <= 0 {
		return true
	}
	share := (pool - used) / float64(len(ep.leases)+1)
	rate := 0.0
	if ep.load.Running > 0 {
		rate = ep.load.GenThroughput / float64(ep.load.Running)
	}
	now := c.now()
	hazard, worst := 0.0, float64(maxNew)
	for _, ls := range ep.leases {
		produced := int(rate * now.Sub(ls.start).Seconds())
		worst += float64(max(0, ls.req.Sampling.MaxNewTokens-produced))
		p := c.est.FinishShare(ls.req.Key, produced, int(share), ls.req.Sampling.MaxNewTokens)
		hazard -= math.Log(1 - min(p, maxFinishShare))
		if hazard >= want {
			return true
		}
	}
	// A batch that cannot overflow the pool even if every request runs to max_new_tokens is safe.
	return worst <= pool-used
}

// predictedUsed is the KV tokens the server is predicted to hold now: the last poll's num_used_tokens,
// plus the prompts of the requests waiting on the server then and of those sent since, less what answers
// received since freed, plus what the running batch decoded since (gen_throughput times the time
// elapsed). c.mu must be held.
func (c *Controller) predictedUsed(ep *endpoint) float64 {
	grown := ep.load.GenThroughput * c.now().Sub(ep.polled).Seconds()
	return float64(ep.load.UsedTokens) + ep.sinceTok + grown
}
