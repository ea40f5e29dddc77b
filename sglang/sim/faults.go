package sim

import (
	"hash/fnv"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// faultInjector makes the per-call fault decisions. A decision depends only
// on the seed, the call's key (its rid, or its arrival number when it has
// none) and how many calls with that key came before, so a client retrying a
// rid draws afresh and a rerun with the same seed sees the same faults.
type faultInjector struct {
	seed   int64
	f      Faults
	mu     sync.Mutex
	seen   map[string]int
	anon   int
	active bool
}

// faultDecision is what happens to one /generate call.
type faultDecision struct {
	internalError bool
	queueFull     bool
	reset         bool
	delay         time.Duration
}

const maxTrackedRIDs = 1 << 20

func newFaultInjector(seed int64, f Faults) *faultInjector {
	return &faultInjector{
		seed:   seed,
		f:      f,
		seen:   map[string]int{},
		active: f.ErrorRate > 0 || f.QueueFullRate > 0 || f.ResetRate > 0 || f.AddedLatency > 0,
	}
}

// decide draws the faults for a call keyed by key ("" when the call has no rid).
func (fi *faultInjector) decide(key string) faultDecision {
	if !fi.active {
		return faultDecision{}
	}
	fi.mu.Lock()
	if key == "" {
		fi.anon++
		key = "#" + strconv.Itoa(fi.anon)
	}
	if len(fi.seen) >= maxTrackedRIDs {
		fi.seen = map[string]int{}
	}
	attempt := fi.seen[key]
	fi.seen[key] = attempt + 1
	fi.mu.Unlock()

	u := func(kind string) float64 {
		h := fnv.New64a()
		h.Write([]byte(strconv.FormatInt(fi.seed, 10)))
		h.Write([]byte{0})
		h.Write([]byte(key))
		h.Write([]byte{0})
		h.Write([]byte(strconv.Itoa(attempt)))
		h.Write([]byte(kind))
		return float64(h.Sum64()>>11) / (1 << 53)
	}
	var d faultDecision
	d.internalError = u("error") < fi.f.ErrorRate
	d.queueFull = !d.internalError && u("queue") < fi.f.QueueFullRate
	d.reset = u("reset") < fi.f.ResetRate
	if fi.f.AddedLatency > 0 && (fi.f.AddedLatencyRate == 0 || u("latency") < fi.f.AddedLatencyRate) {
		d.delay = fi.f.AddedLatency
	}
	return d
}

// resetConnection drops the client's connection without a response: a TCP
// RST when the connection can be hijacked, otherwise an aborted handler.
func resetConnection(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			if tc, ok := conn.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			_ = conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}
