package admission

import (
	"slices"
	"sync"
)

// LengthKey names a population of requests whose output lengths are learnt together.
type LengthKey struct {
	// Dataset is the records' dataset.
	Dataset string
	// Lane is the requests' lane.
	Lane string
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
	ring   []int
	next   int
	total  int64 // completions ever observed
	dirty  bool
	sorted []int // ring, sorted (valid when !dirty)
	quant  int
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
	w.sort(q)
	return w.quant
}

func (w *lengthWindow) sort(q float64) {
	if w.dirty {
		w.sorted = append(w.sorted[:0], w.ring...)
		slices.Sort(w.sorted)
		w.quant = quantileOf(w.sorted, q)
		w.dirty = false
	}
}

// quantileOf returns the q-quantile of sorted (not empty).
func quantileOf(sorted []int, q float64) int {
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// minTailSamples is how many completions longer than a running request's output so far ExpectedAfter needs
// to answer from them; with fewer, the request is charged its max_new_tokens.
const minTailSamples = 8

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

// ExpectedAfter returns the output tokens to charge a request of key that has produced `produced` tokens and
// is still running: the conservative quantile of the completions longer than that (a request that outlives
// most of its peers is likely a long one), never less than Expected, clipped by max_new_tokens. With too few
// completions that long it returns max_new_tokens (or, without one, twice what was produced).
func (e *LengthEstimator) ExpectedAfter(key LengthKey, produced, maxNewTokens int) int {
	base := e.Expected(key, maxNewTokens)
	if produced <= 0 {
		return base
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	est := -1
	for _, k := range chain(key) {
		w := e.keys[k]
		if w == nil || len(w.ring) < min(minLengthSamples, e.window) {
			continue
		}
		w.sort(e.quantile)
		i, _ := slices.BinarySearch(w.sorted, produced+1)
		if tail := w.sorted[i:]; len(tail) >= minTailSamples {
			est = quantileOf(tail, e.quantile)
		}
		break
	}
	if est < 0 {
		est = maxNewTokens
		if est <= 0 {
			est = 2 * produced
		}
	}
	if maxNewTokens > 0 {
		est = min(est, maxNewTokens)
	}
	return max(est, base, min(produced, maxNewTokens))
}

// FinishShare returns the chance that a request of key still running after `produced` output tokens ends
// within `more` further tokens: the share of recent completions longer than produced that were at most
// produced+more long. A request that would reach max_new_tokens by then ends for sure. With fewer than a
// few completions longer than produced it answers 0 (nothing known: assume it runs on).
func (e *LengthEstimator) FinishShare(key LengthKey, produced, more, maxNewTokens int) float64 {
	if maxNewTokens > 0 && produced+more >= maxNewTokens {
		return 1
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, k := range chain(key) {
		w := e.keys[k]
		if w == nil || len(w.ring) < min(minLengthSamples, e.window) {
			continue
		}
		w.sort(e.quantile)
		i, _ := slices.BinarySearch(w.sorted, produced+1)
		j, _ := slices.BinarySearch(w.sorted, produced+more+1)
		if len(w.sorted)-i < minTailSamples {
			return 0
		}
		return float64(j-i) / float64(len(w.sorted)-i)
	}
	return 0
}

// RecentMean returns the mean length of the last n completions of every key together (0 before any).
func (e *LengthEstimator) RecentMean(n int) float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	w := e.keys[LengthKey{}]
	if w == nil || len(w.ring) == 0 {
		return 0
	}
	n = min(n, len(w.ring))
	sum := 0
	for j := 1; j <= n; j++ {
		// The newest entry sits just before next (the ring is full) or at the end (it is filling).
		i := (w.next - j + 2*len(w.ring)) % len(w.ring)
		if len(w.ring) < e.window {
			i = len(w.ring) - j
		}
		sum += w.ring[i]
	}
	return float64(sum) / float64(n)
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
