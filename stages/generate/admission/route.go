package admission

import "slices"

// route picks the endpoint for a request of charge, or nil when none has room.
// routePreferring is route, except that a request with a preferred server goes to it (its rank with the
// most room, for a DP server) when one fits and it did not just fail the request. It counts affinity hits
// and misses.
func (c *Controller) routePreferring(prefer string, charge float64, prompt, maxNew int, avoid *endpoint) *endpoint {
	if prefer == "" {
		return c.route(charge, prompt, maxNew, avoid)
	}
	var best *endpoint
	for _, ep := range c.eps {
		if ep.srv.url != prefer || (avoid != nil && ep.srv == avoid.srv) || !c.fits(ep, charge, prompt, maxNew) {
			continue
		}
		if best == nil || ep.budget-ep.used > best.budget-best.used {
			best = ep
		}
	}
	if best != nil {
		c.met.affinity.WithLabelValues("hit").Inc()
		return best
	}
	ep := c.route(charge, prompt, maxNew, avoid)
	if ep != nil {
		c.met.affinity.WithLabelValues("miss").Inc()
	}
	return ep
}

func (c *Controller) route(charge float64, prompt, maxNew int, avoid *endpoint) *endpoint {
	if avoid != nil {
		others := false
		for _, ep := range c.eps {
			others = others || (ep.srv != avoid.srv && ep.ready())
		}
		if !others {
			avoid = nil
		}
	}
	if c.cfg.Routing == RouteRoundRobin {
		for i := range c.eps {
			ep := c.eps[(c.rr+i)%len(c.eps)]
			if (avoid == nil || ep.srv != avoid.srv) && c.fits(ep, charge, prompt, maxNew) {
				c.rr = (c.rr + i + 1) % len(c.eps)
				return ep
			}
		}
		return nil
	}
	var best *endpoint
	bestRoom := 0.0
	for _, ep := range c.eps {
		if (avoid != nil && ep.srv == avoid.srv) || !c.fits(ep, charge, prompt, maxNew) {
			continue
		}
		room := 1.0
		switch {
		case ep.gated:
			// KV headroom the server is predicted to have, relative to its pool.
			pool := float64(ep.pool)
			room = (pool - c.predictedUsed(ep) - float64(prompt)) / pool
		case ep.budget > 0:
			room = (ep.budget - ep.used - charge) / ep.budget
		}
		if best == nil || room > bestRoom {
			best, bestRoom = ep, room
		}
	}
	return best
}

// admit grants waiting requests while some endpoint has room. Lanes are served most-underserved first
// (charge in flight relative to their share of the total budget); when an underserved lane's head does not
// fit anywhere, lanes already over their share wait, so capacity frees up for it. c.mu must be held.
func (c *Controller) admit() {
	for {
		total := 0.0
		for _, ep := range c.eps {
			if ep.ready() {
				total += ep.budget
			}
		}
		cands := make([]*lane, 0, len(c.order))
		for _, l := range c.order {
			if len(l.waiters) > 0 {
				cands = append(cands, l)
			}
		}
		if len(cands) == 0 || total == 0 {
			return
		}
		slices.SortStableFunc(cands, func(a, b *lane) int {
			x, y := a.used/a.share, b.used/b.share
			switch {
			case x < y:
				return -1
			case x > y:
				return 1
			}
			return 0
		})
		granted, reserve := false, false
		for _, l := range cands {
			under := l.used < l.share*total
			if reserve && !under {
				continue
			}
			w := l.waiters[0]
			charge := c.charge(w.req)
			ep := c.routePreferring(w.req.Prefer, charge, len(w.req.InputIDs), w.req.Sampling.MaxNewTokens, w.avoid)
			if ep == nil {
				now := c.now()
				for _, e := range c.eps {
					e.lastAdmitBlock = now
				}
				if under {
					reserve = true
				}
				continue
			}
			l.waiters = l.waiters[1:]
			w.lease = &lease{ep: ep, lane: l, req: w.req, start: c.now(), charge: charge, drain: ep.srv.drainedSignal}
			w.lease.pos = len(ep.leases)
			ep.leases = append(ep.leases, w.lease)
			ep.sinceTok += float64(len(w.req.InputIDs))
			ep.used += charge
			ep.inflight++
			l.used += charge
			c.met.admitted(ep, l.cfg.Name, c.now().Sub(w.since))
			close(w.ready)
			if w.granted != nil {
				w.granted()
			}
			granted = true
			break
		}
		if !granted {
			return
		}
	}
}

// laneOf returns the lane state of r.
func (c *Controller) laneOf(r *Request) *lane {
	if l := c.lanes[r.Key.Lane]; l != nil {
		return l
	}
	return c.order[0]
}

// enqueue queues w for admission and admits whatever fits.
func (c *Controller) enqueue(w *waiter) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.req.Prefer != "" {
		// A later turn of a conversation goes ahead of the first turns waiting in its lane (after the later
		// turns already waiting): it finishes conversations sooner and reaches its server while the
		// previous turn's prefix is still in the radix cache.
		i := len(w.lane.waiters)
		for i > 0 && w.lane.waiters[i-1].req.Prefer == "" {
			i--
		}
		w.lane.waiters = slices.Insert(w.lane.waiters, i, w)
	} else {
		w.lane.waiters = append(w.lane.waiters, w)
	}
	c.met.queue(w.lane.cfg.Name, len(w.lane.waiters))
	c.admit()
}
