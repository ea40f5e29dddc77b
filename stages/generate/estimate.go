package generate

import (
	"slices"
	"sync"
)

// LengthKey names a population of requests whose output lengths are learnt together.
type LengthKey struct {
	Dataset string
	Lane    string
}

// minLengthSamples is how many completions a key needs before its own quantile is trusted; below it the
// estimate falls back to the lane's, then to all completions', then to the prior.
const minLengthSamples = 16

// LengthEstimator learns output lengths online: for each dataset/lane it keeps the most recent completion
// lengths in a sliding window and answers a conservative quantile of them, clipped by the request's
// max_new_tokens. Before a key has enough data it falls back to its lane, then to every completion, then to
// a prior. It is safe for concurrent use.
type LengthEstimator struct {
	quantile float64
	window   int
	prior    int // 0: use max_new_tokens

	mu   sync.Mutex
	keys map[LengthKey]*lengthWindow
}

// NewLengthEstimator returns an estimator answering the q-quantile of the last window completions per key,
// and prior (or, when prior is 0, the request's max_new_tokens) before data exists.
func NewLengthEstimator(q float64, window, prior int) *LengthEstimator {
	if q <= 0 || q > 1 {
		q = DefaultQuantile
	}
	if window <= 0 {
		window = DefaultLengthWindow
	}
	return &LengthEstimator{quantile: q, window: window, prior: prior, keys: make(map[LengthKey]*lengthWindow)}
}

type lengthWindow struct {
	ring  []int
	next  int
	total int64 // completions ever observed
	dirty bool
	quant int
}

func (w *lengthWindow) add(n, size int) {
	if len(w.ring) < size {
		w.ring = append(w.ring, n)
	} else {
		w.ring[w.next] = n
		w.next = (w.next + 1) % size
	}
	w.total++
	w.dirty = true
}

func (w *lengthWindow) q(q float64) int {
	if w.dirty {
		s := slices.Clone(w.ring)
		slices.Sort(s)
		i := int(q*float64(len(s))+0.5) - 1
		w.quant = s[min(max(i, 0), len(s)-1)]
		w.dirty = false
	}
	return w.quant
}

// Observe records a finished request's output length (completion tokens).
func (e *LengthEstimator) Observe(key LengthKey, completionTokens int) {
	if completionTokens < 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, k := range chain(key) {
		w := e.keys[k]
		if w == nil {
			w = &lengthWindow{}
			e.keys[k] = w
		}
		w.add(completionTokens, e.window)
	}
}

// chain returns key, its lane and the global key, without repeats.
func chain(key LengthKey) []LengthKey {
	out := []LengthKey{key}
	if lane := (LengthKey{Lane: key.Lane}); lane != key {
		out = append(out, lane)
	}
	if key.Lane != "" {
		out = append(out, LengthKey{})
	}
	return out
}

// Expected returns the output tokens to charge a request of key with the given max_new_tokens.
func (e *LengthEstimator) Expected(key LengthKey, maxNewTokens int) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	est := -1
	for _, k := range chain(key) {
		if w := e.keys[k]; w != nil && len(w.ring) >= min(minLengthSamples, e.window) {
			est = w.q(e.quantile)
			break
		}
	}
	if est < 0 {
		est = maxNewTokens
		if e.prior > 0 {
			est = e.prior
		}
	}
	if maxNewTokens > 0 && est > maxNewTokens {
		est = maxNewTokens
	}
	return est
}

// Snapshot returns the current estimate (without clipping) and sample count of every key with data.
func (e *LengthEstimator) Snapshot() map[LengthKey]LengthStat {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[LengthKey]LengthStat, len(e.keys))
	for k, w := range e.keys {
		if len(w.ring) > 0 {
			out[k] = LengthStat{Quantile: w.q(e.quantile), Samples: w.total}
		}
	}
	return out
}

// LengthStat is one key's learnt state.
type LengthStat struct {
	// Quantile is the current conservative quantile of output lengths.
	Quantile int
	// Samples is how many completions were observed in all.
	Samples int64
}
