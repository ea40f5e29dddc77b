package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
)

// SGLang constants the scheduler model depends on (sglang global_config /
// schedule_policy.py).
const (
	// clipMaxNewTokens caps max_new_tokens in admission estimates
	// (CLIP_MAX_NEW_TOKENS_ESTIMATION).
	clipMaxNewTokens = 4096
	// initNewTokenRatio is default_init_new_token_ratio.
	initNewTokenRatio = 0.7
	// minNewTokenRatioFactor is default_min_new_token_ratio_factor.
	minNewTokenRatioFactor = 0.14
	// newTokenRatioDecaySteps is default_new_token_ratio_decay_steps.
	newTokenRatioDecaySteps = 600
	// retractDecodeSteps is retract_decode_steps, used to re-estimate the
	// ratio after a retraction.
	retractDecodeSteps = 20
	// cacheHitRateWindow is SGLANG_CACHE_HIT_RATE_WINDOW_SECONDS (environ.py),
	// the window of the recent cache hit rate that estimates
	// num_waiting_uncached_tokens (scheduler_components/metrics_reporter.py).
	cacheHitRateWindow = 15.0
	// genThroughputStaleness is GEN_THROUGHPUT_STALENESS_SECONDS
	// (metrics_reporter.py): gen_throughput decays to 0 once no decode
	// statistics arrived for this long.
	genThroughputStaleness = 30.0
	// stepMaxUS is STEP_MAX_US (managers/scheduler.py): decode steps this long
	// or longer stay out of the decode moments.
	stepMaxUS = 2_000_000
)

// FinishReason is meta_info.finish_reason, in SGLang's JSON shape.
type FinishReason struct {
	// Type is "stop", "length" or "abort".
	Type string `json:"type"`
	// Matched is the token id that stopped the request (Type "stop").
	Matched *int `json:"matched,omitempty"`
	// Length is max_new_tokens for Type "length".
	Length *int `json:"length,omitempty"`
	// Message explains an abort.
	Message string `json:"message,omitempty"`
	// StatusCode is the HTTP status an abort maps to (null when none).
	StatusCode *int `json:"status_code,omitempty"`
	// ErrType is FINISH_ABORT's err_type (always null in the simulator).
	ErrType *string `json:"err_type,omitempty"`

	// full marks a FINISH_ABORT(...).to_json() abort (managers/schedule_batch.py),
	// which always carries status_code and err_type, null or not; other aborts
	// are dict literals with only the keys they set.
	full bool
	// crashed marks aborts caused by a simulated crash: the HTTP layer drops
	// the connection instead of answering.
	crashed bool
}

// MarshalJSON writes the keys SGLang writes: "matched" for stop, "length"
// for length, "message" (and "status_code"/"err_type" as FINISH_ABORT or the
// scheduler's dict literal sets them) for abort.
func (f FinishReason) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"type":`)
	writeJSONValue(&b, f.Type)
	field := func(k string, v any) {
		b.WriteString(`,"` + k + `":`)
		writeJSONValue(&b, v)
	}
	switch f.Type {
	case "stop":
		if f.Matched != nil {
			field("matched", *f.Matched)
		}
	case "length":
		if f.Length != nil {
			field("length", *f.Length)
		}
	default:
		if f.full {
			field("message", f.Message)
			field("status_code", f.StatusCode)
			field("err_type", f.ErrType)
		} else {
			if f.StatusCode != nil {
				field("status_code", *f.StatusCode)
			}
			field("message", f.Message)
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// writeJSONValue appends v encoded as JSON (no trailing newline, no HTML escaping).
func writeJSONValue(b *bytes.Buffer, v any) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	b.Truncate(b.Len() - 1) // Encode's newline
}

func stopReason(tok int32) *FinishReason {
	m := int(tok)
	return &FinishReason{Type: "stop", Matched: &m}
}

func lengthReason(n int) *FinishReason { return &FinishReason{Type: "length", Length: &n} }

func abortReason(msg string, status int) *FinishReason {
	fr := &FinishReason{Type: "abort", Message: msg}
	if status != 0 {
		fr.StatusCode = &status
	}
	return fr
}

// finishAbort is FINISH_ABORT(message).to_json() (managers/schedule_batch.py):
// message "Aborted" when none is given, status_code and err_type present.
func finishAbort(msg string) *FinishReason {
	if msg == "" {
		msg = "Aborted"
	}
	return &FinishReason{Type: "abort", Message: msg, full: true}
}

// request is one generation inside the engine. Fields above mu belong to the
// engine goroutine (guarded by engine.mu); the published view below mu is
// what HTTP handlers read.
type request struct {
	rid       string
	input     []int32
	maxNew    int
	ignoreEOS bool
	stopIDs   map[int32]bool
	plan      *outputPlan
	output    []int32
	stream    bool // publish progress, not just the end
	keepSpec  bool // skip_special_tokens=false
	keepStop  bool // no_stop_trim: a matched stop token stays in text
	byteText  bool // a scripted reply: ids below 256 are UTF-8 bytes of the text

	kvLen           int        // KV slots computed for input+output
	prefixLen       int        // leading part of kvLen held by the radix tree
	node            *radixNode // locked tree node ending at prefixLen
	alreadyComputed int        // tokens this request computed itself this round
	cachedTokens    int
	retractions     int
	queued          bool

	arrival, scheduled, firstToken, finished float64 // simulated seconds; -1 = not yet
	finish                                   *FinishReason
	// waitAbort marks a request aborted while still in the waiting queue: the
	// tokenizer manager answers it from the AbortReq (_handle_abort_req), with
	// fewer meta_info keys.
	waitAbort bool
	dpRank    int // the DP rank serving it

	mu        sync.Mutex
	pubOut    []int32
	pubFinish *FinishReason
	pubMeta   requestMeta
	notify    chan struct{} // shared by the requests of one HTTP call
}

// requestMeta is the published accounting of a request.
type requestMeta struct {
	cachedTokens    int
	retractions     int
	reasoningTokens int
	e2e             float64
}

// fillLen is the length of the sequence a (re)prefill must cover.
func (r *request) fillLen() int { return len(r.input) + len(r.output) }

// fill returns input+output[:n-len(input)], the first n tokens of the sequence.
func (r *request) fill(n int) []int32 {
	if n <= len(r.input) {
		return r.input[:n]
	}
	s := make([]int32, 0, n)
	s = append(s, r.input...)
	return append(s, r.output[:n-len(r.input)]...)
}

func (r *request) skipSpecial() bool { return !r.keepSpec }

// publish hands the request's progress, as of simulated time now, to its
// HTTP handler.
func (r *request) publish(now float64) {
	r.mu.Lock()
	r.pubOut = r.output
	r.pubFinish = r.finish
	r.pubMeta = requestMeta{
		cachedTokens:    r.cachedTokens,
		retractions:     r.retractions,
		reasoningTokens: r.plan.reasoningTokens(len(r.output)),
	}
	if r.finish != nil {
		r.pubMeta.e2e = r.finished - r.arrival
	} else {
		r.pubMeta.e2e = now - r.arrival
	}
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// snapshot returns the published progress.
func (r *request) snapshot() ([]int32, *FinishReason, requestMeta) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pubOut, r.pubFinish, r.pubMeta
}

// batch is one forward pass: a prefill over reqs or a decode over running.
type batch struct {
	prefill bool
	reqs    []*request
	extend  []int   // tokens each request computes (prefill)
	hit     int64   // prompt tokens served from the prefix cache (prefill)
	dur     float64 // simulated seconds
}

// engine is SGLang's scheduler reduced to accounting: a KV pool, a radix
// prefix cache, a waiting queue, a running batch and at most one chunked
// request. It is not safe for concurrent use; Server serialises access.
type engine struct {
	cfg  *Config
	tree *radixCache

	ownTokens int // KV slots held by requests outside the tree
	waiting   []*request
	running   []*request
	chunked   *request
	full      bool // SGLang running_batch.batch_is_full
	idle      bool // the last iteration found nothing to run

	initRatio, minRatio, decay, ratio float64

	maxReqLen, maxReqInputLen int

	now float64 // simulated seconds since start

	decodeSinceLog int
	lastLogTime    float64
	lastLogTokens  int64
	genThroughput  float64

	stats    engineCounters
	observer observer
	// collect keeps every request that finishes in done (manual mode).
	collect bool
	done    []*request

	rank      int             // DP rank
	current   *batch          // the forward pass in progress (nil: between passes)
	busyUntil float64         // when current ends
	pending   []func(*engine) // operations waiting for the pass in progress to end

	lastPassDecode bool // the previous pass was a decode step, back to back
	// hitWindow holds (time, hit, total) per prefill batch over the last
	// cacheHitRateWindow simulated seconds.
	hitWindow            []hitSample
	lastPrefillHitRate   float64 // cache_hit_rate of the last prefill log
	lastDecodeLogTime    float64
	retractedSinceLog    int // metrics_reporter.num_retracted_reqs
	retractedLogged      int // stats.num_retracted_reqs (as of the last log)
	decodeMoments        [6]float64
	totalPrefillBusyUS   int64
	totalPrefillUncached int64
}

// hitSample is one prefill batch's prefix-cache figures.
type hitSample struct {
	t          float64
	hit, total int64
}

// engineCounters are cumulative counters exported by Stats.
type engineCounters struct {
	retractions     int64
	retractEvents   int64
	lastRetracted   int
	generated       int64
	promptTokens    int64
	prefillTokens   int64
	cacheHitTokens  int64
	finished        int64
	aborted         int64
	decodeSteps     int64
	prefillBatches  int64
	crashes         int64
	queueFullAborts int64
}

// observer receives scheduler events; the metrics implementation records
// them. All methods are called with the engine lock held.
type observer interface {
	onQueued(r *request)
	onScheduled(r *request)
	onFirstToken(r *request)
	onFinish(r *request)
	onRetract(n int)
	onGenerated(n int)
	onLog(e *engine)
}

func newEngine(cfg *Config) *engine {
	e := &engine{cfg: cfg, tree: newRadixCache(cfg.DisableRadixCache)}
	e.initRatio = min(initNewTokenRatio*cfg.ScheduleConservativeness, 1.0)
	e.minRatio = min(e.initRatio*minNewTokenRatioFactor, 1.0)
	e.decay = (e.initRatio - e.minRatio) / newTokenRatioDecaySteps
	e.ratio = e.initRatio
	e.maxReqLen = min(cfg.ContextLength-1, cfg.MaxTotalTokens-1)
	e.maxReqInputLen = e.maxReqLen - 5
	return e
}

// available is the number of free KV slots (SGLang available_size).
func (e *engine) available() int { return e.cfg.MaxTotalTokens - e.tree.size - e.ownTokens }

// usedTokens counts slots neither free nor evictable.
func (e *engine) usedTokens() int {
	return e.cfg.MaxTotalTokens - e.available() - e.tree.evictable()
}

// alloc takes n slots, evicting cached prefixes as needed.
func (e *engine) alloc(n int) bool {
	if a := e.available(); a < n {
		e.tree.evict(n - a)
	}
	if e.available() < n {
		return false
	}
	e.ownTokens += n
	return true
}

// submit puts a new request, arriving now, into the waiting queue.
func (e *engine) submit(r *request) { e.submitAt(r, e.now) }

// submitAt puts a new request that arrived at simulated time t into the
// waiting queue, or finishes it at once with an abort when SGLang's scheduler
// would reject it.
func (e *engine) submitAt(r *request, t float64) {
	r.arrival, r.scheduled, r.firstToken, r.finished = t, -1, -1, -1
	r.dpRank = e.rank
	e.stats.promptTokens += int64(len(r.input))
	// managers/utils.py validate_input_length: len >= max_req_input_len is
	// refused with Req.set_finish_with_abort (FINISH_ABORT(msg, 400,
	// "BadRequestError")).
	if len(r.input) >= e.maxReqInputLen {
		status, errType := http.StatusBadRequest, "BadRequestError"
		e.finishReq(r, &FinishReason{Type: "abort", full: true, StatusCode: &status, ErrType: &errType, Message: fmt.Sprintf(
			"Input length (%d tokens) exceeds the maximum allowed length (%d tokens). Use a shorter input or enable --allow-auto-truncate.",
			len(r.input), e.maxReqInputLen)})
		return
	}
	r.maxNew = min(r.maxNew, e.maxReqLen-len(r.input)-1)
	if r.maxNew < 0 {
		r.maxNew = 0
	}
	if e.cfg.MaxQueuedRequests > 0 && len(e.waiting)+1 > e.cfg.MaxQueuedRequests {
		e.stats.queueFullAborts++
		// Scheduler._abort_on_queued_limit: answered from the AbortReq.
		r.waitAbort = true
		e.finishReq(r, abortReason("The request queue is full.", http.StatusServiceUnavailable))
		return
	}
	e.enqueue(r)
	if e.observer != nil {
		e.observer.onQueued(r)
	}
}

func (e *engine) enqueue(r *request) {
	r.queued = true
	e.waiting = append(e.waiting, r)
}

// step runs one scheduler iteration: plan a batch and complete it. It returns
// the batch (nil when idle). Tests drive the engine with it directly.
func (e *engine) step() *batch {
	b := e.nextBatch()
	if b != nil {
		e.complete(b)
	}
	return b
}

// nextBatch is SGLang's get_next_batch_to_run: a prefill batch when one can
// be formed, otherwise a decode step over the running batch (after the
// memory check that may retract), otherwise nil (idle: the ratio resets).
func (e *engine) nextBatch() *batch {
	e.idle = false
	if b := e.newPrefillBatch(); b != nil {
		return b
	}
	if len(e.running) > 0 {
		e.updateRunningBatch()
		if len(e.running) == 0 {
			return nil
		}
		if !e.alloc(len(e.running)) {
			// Unreachable after updateRunningBatch's memory check.
			panic("sim: decode allocation failed after memory check")
		}
		kv := 0
		for _, r := range e.running {
			r.kvLen++
			kv += r.kvLen
		}
		return &batch{reqs: slices.Clone(e.running), dur: e.cfg.Timing.DecodeSeconds(len(e.running), kv)}
	}
	e.ratio = e.initRatio
	e.full = false
	e.lastPassDecode = false
	if !e.idle {
		e.idle = true
		if e.observer != nil {
			e.observer.onLog(e) // so idle gauges do not keep the last busy values
		}
	}
	return nil
}

// prefillAdder mirrors SGLang's PrefillAdder budget.
type prefillAdder struct {
	e               *engine
	remInput        int
	remChunk        int // < 0: unlimited
	totalOffset     float64
	curOffset       float64
	canRun          []*request
	extend          []int
	prefix          []int
	newChunked      *request
	attnPairs       float64
	extendTokensSum int
}

type addResult int

const (
	addContinue addResult = iota
	addNoToken
	addOther
)

func (a *prefillAdder) remTotal() float64 {
	return float64(a.e.available()+a.e.tree.evictable()) - a.totalOffset
}

func (a *prefillAdder) curRem() float64 {
	return float64(a.e.available()+a.e.tree.evictable()) - a.curOffset
}

func (a *prefillAdder) budgetState() addResult {
	if a.remTotal() <= 0 || a.curRem() <= 0 {
		return addNoToken
	}
	if a.remInput <= 0 || (a.remChunk >= 0 && a.remChunk <= 0) {
		return addOther
	}
	return addContinue
}

func (a *prefillAdder) update(extend, maxNewEstimate int) {
	a.totalOffset += float64(extend + maxNewEstimate)
	a.curOffset += float64(extend)
	a.remInput -= extend
	if a.remChunk >= 0 {
		a.remChunk -= extend
	}
}

func (a *prefillAdder) take(r *request, prefix, extend int) {
	a.canRun = append(a.canRun, r)
	a.extend = append(a.extend, extend)
	a.prefix = append(a.prefix, prefix)
	a.extendTokensSum += extend
	a.attnPairs += float64(extend) * (float64(prefix) + float64(extend)/2)
}

// addChunked continues the chunked request (SGLang add_chunked_req).
func (a *prefillAdder) addChunked(r *request) {
	ext := r.fillLen() - r.kvLen
	rem := int(a.remTotal())
	if a.remChunk >= 0 {
		rem = min(rem, a.remChunk)
	}
	truncated := ext > rem
	ext = min(ext, rem)
	if ext <= 0 {
		a.newChunked = r
		return
	}
	a.take(r, r.kvLen, ext)
	est := 0
	if !truncated {
		est = min(r.maxNew, clipMaxNewTokens)
	} else {
		a.newChunked = r
	}
	a.update(ext, est)
}

// addOne is SGLang add_one_req: admit r if extend + min(max_new, 4096) fits
// in rem_total_tokens, chunking it when it overflows the chunk budget.
func (a *prefillAdder) addOne(r *request) addResult {
	e := a.e
	fill := r.fill(r.fillLen())
	prefix, node := e.tree.match(fill)
	if prefix > len(fill)-1 { // at least one token must be computed
		prefix = len(fill) - 1
		prefix, node = e.tree.match(fill[:prefix])
	}
	ext := len(fill) - prefix
	total := ext + min(r.maxNew, clipMaxNewTokens)
	if float64(total) >= a.remTotal() {
		return addNoToken
	}
	if ext >= a.remInput && len(a.canRun) != 0 {
		return addOther
	}
	e.tree.lock(node) // the matched prefix is no longer evictable
	if float64(total) >= a.remTotal() {
		e.tree.unlock(node)
		return addNoToken
	}
	if a.remChunk < 0 || ext <= a.remChunk {
		r.node = node
		a.take(r, prefix, ext)
		a.update(ext, min(r.maxNew, clipMaxNewTokens))
	} else {
		trunc := a.remChunk
		if trunc <= 0 {
			e.tree.unlock(node)
			return addOther
		}
		r.node = node
		a.take(r, prefix, trunc)
		a.newChunked = r
		a.update(trunc, 0)
	}
	return a.budgetState()
}

// newPrefillBatch is SGLang get_new_batch_prefill (FCFS policy).
func (e *engine) newPrefillBatch() *batch {
	if (e.full || len(e.waiting) == 0) && e.chunked == nil {
		return nil
	}
	runningBS := len(e.running)
	if runningBS >= e.cfg.MaxRunningRequests {
		e.full = true
		return nil
	}
	a := &prefillAdder{e: e, remInput: e.cfg.MaxPrefillTokens, remChunk: e.cfg.ChunkedPrefillSize}
	if a.remChunk < 0 {
		a.remChunk = -1
	}
	for _, r := range e.running {
		a.totalOffset += float64(min(r.maxNew-len(r.output), clipMaxNewTokens)) * e.ratio
	}
	if e.chunked != nil {
		a.addChunked(e.chunked)
	}
	for _, r := range e.waiting {
		if len(a.canRun) >= e.cfg.MaxRunningRequests-runningBS {
			e.full = true
			break
		}
		if res := a.addOne(r); res != addContinue {
			if res == addNoToken {
				e.full = true
			}
			break
		}
	}
	e.chunked = a.newChunked
	if len(a.canRun) == 0 {
		return nil
	}
	if !e.alloc(a.extendTokensSum) {
		panic(fmt.Sprintf("sim: prefill allocation of %d tokens failed (available %d, evictable %d)",
			a.extendTokensSum, e.available(), e.tree.evictable()))
	}
	admitted := map[*request]bool{}
	var batchHit int64
	for i, r := range a.canRun {
		admitted[r] = true
		if r.scheduled < 0 {
			r.scheduled = e.now
			if e.observer != nil {
				e.observer.onScheduled(r)
			}
		}
		prefix := a.prefix[i]
		hit := max(0, prefix-r.alreadyComputed)
		r.cachedTokens += hit
		e.stats.cacheHitTokens += int64(hit)
		batchHit += int64(hit)
		if r.kvLen == 0 { // a fresh or retracted request: its prefix is tree-held
			r.prefixLen = prefix
		}
		r.kvLen = prefix + a.extend[i]
		r.alreadyComputed = r.kvLen
		e.stats.prefillTokens += int64(a.extend[i])
	}
	e.waiting = slices.DeleteFunc(e.waiting, func(r *request) bool {
		if admitted[r] {
			r.queued = false
			return true
		}
		return false
	})
	return &batch{
		prefill: true,
		reqs:    a.canRun,
		extend:  a.extend,
		hit:     batchHit,
		dur:     e.cfg.Timing.PrefillSeconds(a.extendTokensSum, a.attnPairs),
	}
}

// updateRunningBatch is SGLang update_running_batch: retract when the next
// decode step cannot get one slot per request, else decay new_token_ratio.
func (e *engine) updateRunningBatch() {
	if !e.decodeFits(len(e.running)) {
		e.retract()
		return
	}
	e.ratio = max(e.ratio-e.decay, e.minRatio)
}

func (e *engine) decodeFits(n int) bool { return e.available()+e.tree.evictable() >= n }

// retract is SGLang retract_decode: order the batch by (output length,
// -input length) descending and pop from the end, i.e. retract the request
// with the FEWEST output tokens first (ties: the longest input), always at
// least one, until a decode step fits. Retracted requests free their KV
// without caching it and rejoin the back of the waiting queue, to re-prefill
// input + output later. The ratio jumps to (decoded + 20*n)/(sum max_new + 1).
func (e *engine) retract() {
	sorted := slices.Clone(e.running)
	slices.SortStableFunc(sorted, func(x, y *request) int {
		if len(x.output) != len(y.output) {
			return len(y.output) - len(x.output)
		}
		return len(x.input) - len(y.input)
	})
	var retracted []*request
	for first := true; first || !e.decodeFits(len(sorted)); first = false {
		if len(sorted) == 1 {
			break
		}
		r := sorted[len(sorted)-1]
		sorted = sorted[:len(sorted)-1]
		e.releaseKV(r, false)
		retracted = append(retracted, r)
	}
	if len(sorted) == 1 && !e.decodeFits(1) {
		last := sorted[0]
		sorted = sorted[:0]
		e.releaseKV(last, false)
		e.finishReq(last, abortReason("Out of memory even after retracting all other requests in the decode batch. Aborting the last request.", http.StatusInternalServerError))
	}
	e.running = sorted
	decoded, maxNew := 0, 0
	for _, r := range sorted {
		decoded += len(r.output)
		maxNew += r.maxNew
	}
	e.ratio = min(1.0, float64(decoded+retractDecodeSteps*len(sorted))/float64(maxNew+1))
	for _, r := range retracted {
		r.retractions++
		r.alreadyComputed = 0
		e.enqueue(r)
	}
	e.stats.retractions += int64(len(retracted))
	e.retractedSinceLog += len(retracted)
	e.stats.retractEvents++
	e.stats.lastRetracted = len(retracted)
	e.full = false
	if e.observer != nil {
		e.observer.onRetract(len(retracted))
	}
}

// releaseKV frees a request's KV. With insert (a finished request) its
// sequence is donated to the radix cache first, as SGLang
// cache_finished_req does; without (retraction, abort) it is simply freed.
func (e *engine) releaseKV(r *request, insert bool) {
	if r.kvLen == 0 && r.node == nil {
		return
	}
	if insert {
		e.tree.insert(r.fill(r.kvLen))
	}
	e.ownTokens -= r.kvLen - r.prefixLen
	if r.node != nil {
		e.tree.unlock(r.node)
	}
	r.node, r.kvLen, r.prefixLen = nil, 0, 0
}

// cacheUnfinished is SGLang checkpoint_kv_cache (cache_unfinished_req before
// 0.5) for a chunked request or one whose prefill completed: the computed
// tokens move into the tree and the request locks them as its prefix.
func (e *engine) cacheUnfinished(r *request) {
	seq := r.fill(r.kvLen)
	e.tree.insert(seq)
	e.ownTokens -= r.kvLen - r.prefixLen
	if r.node != nil {
		e.tree.unlock(r.node)
	}
	n, node := e.tree.match(seq)
	e.tree.lock(node)
	// Own whatever the tree could not take (only when the cache is off).
	e.ownTokens += r.kvLen - n
	r.node, r.prefixLen = node, n
}

// complete applies the results of a batch at simulated time now + dur.
func (e *engine) complete(b *batch) {
	e.now += b.dur
	if b.prefill {
		e.stats.prefillBatches++
		// managers/scheduler.py: prefill busy time and uncached tokens feed
		// the cumulative /v1/loads counters.
		e.totalPrefillBusyUS += int64(b.dur * 1e6)
		for _, n := range b.extend {
			e.totalPrefillUncached += int64(n)
		}
		e.lastPassDecode = false
		for _, r := range b.reqs {
			if r == e.chunked {
				e.cacheUnfinished(r)
				continue
			}
			if e.emit(r) {
				continue
			}
			// checkpoint_kv_cache (mem_cache/common.py, from the prefill branch of
			// managers/scheduler_components/batch_result_processor.py): an unfinished
			// request's computed prompt goes into the tree, locked as its prefix, so
			// the next requests sharing it (a chat template's header, a system
			// prompt) match it while it still runs.
			e.cacheUnfinished(r)
			e.running = append(e.running, r)
		}
		// Newer SGLang resets batch_is_full after merging a prefill batch.
		e.full = false
		var computed int64
		for _, n := range b.extend {
			computed += int64(n)
		}
		e.notePrefillHits(b.hit, computed)
		e.maybeLog(true)
		return
	}
	e.stats.decodeSteps++
	// _accumulate_decode_moment (managers/scheduler.py): decode steps back to
	// back only, shorter than STEP_MAX_US; one token per request.
	if us := int64(b.dur * 1e6); e.lastPassDecode && us > 0 && us < stepMaxUS {
		bs, t := float64(len(b.reqs)), float64(us)
		m := &e.decodeMoments
		m[0]++
		m[1] += bs
		m[2] += t
		m[3] += bs * bs
		m[4] += bs * t
		m[5] += bs
	}
	e.lastPassDecode = true
	done := false
	for _, r := range b.reqs {
		if e.emit(r) {
			done = true
		}
	}
	if done {
		e.running = slices.DeleteFunc(e.running, func(r *request) bool { return r.finish != nil })
		e.full = false
	}
	e.decodeSinceLog++
	e.maybeLog(false)
}

// emit appends the next output token of r and reports whether r finished.
func (e *engine) emit(r *request) bool {
	if r.maxNew == 0 { // prefill only
		e.releaseKV(r, true)
		e.finishReq(r, lengthReason(0))
		return true
	}
	tok := r.plan.token(len(r.output))
	r.output = append(r.output, tok)
	e.stats.generated++
	if e.observer != nil {
		e.observer.onGenerated(1)
	}
	if r.firstToken < 0 {
		r.firstToken = e.now
		if e.observer != nil {
			e.observer.onFirstToken(r)
		}
	}
	var fr *FinishReason
	switch {
	case len(r.output) >= r.maxNew:
		fr = lengthReason(r.maxNew)
	case !r.ignoreEOS && (slices.Contains(e.cfg.EOSTokenIDs, int(tok)) || r.stopIDs[tok]):
		fr = stopReason(tok)
	}
	if fr == nil {
		if r.stream && len(r.output)%e.cfg.StreamInterval == 0 {
			r.publish(e.now)
		}
		return false
	}
	e.releaseKV(r, true)
	e.finishReq(r, fr)
	return true
}

// finishReq records the end of a request and publishes it.
func (e *engine) finishReq(r *request, fr *FinishReason) {
	r.finish = fr
	r.finished = e.now
	if fr.Type == "abort" {
		e.stats.aborted++
	} else {
		e.stats.finished++
	}
	if e.observer != nil {
		e.observer.onFinish(r)
	}
	if e.collect {
		e.done = append(e.done, r)
	}
	r.publish(e.now)
}

// abortByRID is POST /abort_request: with all set it aborts everything;
// otherwise, if a request with exactly this rid is in flight (the tokenizer
// manager's check), every request whose rid starts with rid is aborted (the
// scheduler's prefix match). It returns how many were aborted.
func (e *engine) abortByRID(rid string, all bool) int {
	if !all {
		found := e.chunked != nil && e.chunked.rid == rid
		for _, l := range [][]*request{e.waiting, e.running} {
			for _, r := range l {
				found = found || r.rid == rid
			}
		}
		if !found {
			return 0
		}
	}
	return e.abortAsScheduler(rid, all)
}

// waitingAbortMessage is the message the tokenizer manager gives a request
// the scheduler popped from its waiting queue: "Abort in waiting queue"
// (0.5.23 TokenizerManager._handle_abort_req), "Abort before prefill" (0.5.4).
func (e *engine) waitingAbortMessage() string {
	if e.cfg.Release == Release054 {
		return "Abort before prefill"
	}
	return "Abort in waiting queue"
}

// abortAsScheduler is Scheduler.abort_request for an AbortReq without a
// reason: waiting requests are popped and answered from the AbortReq
// (finish_reason {"type":"abort","message":<waitingAbortMessage>}); the
// chunked and running ones end with FINISH_ABORT() ("Aborted", status_code
// and err_type null). It returns how many were aborted.
func (e *engine) abortAsScheduler(prefix string, all bool) int {
	msg := e.waitingAbortMessage()
	return e.abortMatching(prefix, all, func() *FinishReason { return abortReason(msg, 0) },
		func() *FinishReason { return finishAbort("") }, true)
}

// abort ends every request whose rid starts with prefix (all when all is
// set), wherever it is, with msg.
func (e *engine) abort(prefix string, all bool, msg string) int {
	fr := func() *FinishReason { return abortReason(msg, 0) }
	return e.abortMatching(prefix, all, fr, fr, false)
}

// abortMatching ends every request whose rid starts with prefix (all when
// all is set): waiting ones with waiting (marked as answered from the queue
// when fromQueue), the chunked and running ones with started. It returns
// how many it ended.
func (e *engine) abortMatching(prefix string, all bool, waiting, started func() *FinishReason, fromQueue bool) int {
	n := 0
	match := func(r *request) bool {
		return all || strings.HasPrefix(r.rid, prefix)
	}
	e.waiting = slices.DeleteFunc(e.waiting, func(r *request) bool {
		if match(r) {
			r.queued = false
			r.waitAbort = fromQueue
			e.finishReq(r, waiting())
			n++
			return true
		}
		return false
	})
	if c := e.chunked; c != nil && match(c) {
		e.releaseKV(c, false)
		e.chunked = nil
		e.finishReq(c, started())
		n++
	}
	e.running = slices.DeleteFunc(e.running, func(r *request) bool {
		if match(r) {
			e.releaseKV(r, false)
			e.finishReq(r, started())
			n++
			return true
		}
		return false
	})
	if n > 0 {
		e.full = false
	}
	return n
}

// abortRequest aborts one specific request (a client that went away).
func (e *engine) abortRequest(target *request, msg string) {
	if target.finish != nil {
		return
	}
	if target.queued {
		e.waiting = slices.DeleteFunc(e.waiting, func(r *request) bool { return r == target })
		target.queued = false
	} else if target == e.chunked {
		e.releaseKV(target, false)
		e.chunked = nil
	} else {
		e.running = slices.DeleteFunc(e.running, func(r *request) bool { return r == target })
		e.releaseKV(target, false)
	}
	e.full = false
	e.finishReq(target, abortReason(msg, 0))
}

// crash simulates the server process dying: every request in flight,
// including those of the forward pass in progress, is aborted (its
// connection will be dropped) and KV and cache are wiped. The server keeps
// it down for CrashDowntime.
func (e *engine) crash() {
	fr := &FinishReason{Type: "abort", Message: "server crashed", crashed: true}
	all := slices.Concat(e.waiting, e.running)
	if e.chunked != nil {
		all = append(all, e.chunked)
	}
	if e.current != nil {
		all = append(all, e.current.reqs...)
	}
	for _, r := range all {
		if r.finish != nil {
			continue // listed twice (a running request in the pass in progress)
		}
		r.node = nil
		r.queued = false
		e.finishReq(r, fr)
	}
	e.waiting, e.running, e.chunked, e.current = nil, nil, nil, nil
	e.pending = nil
	e.ownTokens = 0
	e.tree.reset()
	e.ratio = e.initRatio
	e.full = false
	e.lastPassDecode = false
	e.stats.crashes++
}

// flushCache empties the radix cache when no request is in flight, as SGLang
// flush_cache does; it reports whether it flushed.
func (e *engine) flushCache() bool {
	if len(e.waiting) > 0 || len(e.running) > 0 || e.chunked != nil {
		return false
	}
	e.tree.reset()
	return true
}

// maybeLog refreshes throughput and the observer's gauges after every
// prefill and every DecodeLogInterval decode steps, like SGLang's
// log_prefill_stats / log_decode_stats.
func (e *engine) maybeLog(prefill bool) {
	if !prefill && e.decodeSinceLog < e.cfg.DecodeLogInterval {
		return
	}
	if !prefill {
		if dt := e.now - e.lastLogTime; dt > 0 {
			e.genThroughput = float64(e.stats.generated-e.lastLogTokens) / dt
		}
		e.lastLogTime = e.now
		e.lastDecodeLogTime = e.now
		e.lastLogTokens = e.stats.generated
		e.decodeSinceLog = 0
	} else if e.now-e.lastDecodeLogTime > genThroughputStaleness {
		// _current_gen_throughput: a stale decode window decays to 0.
		e.genThroughput = 0
	}
	// Retract: stats.num_retracted_reqs is the count since the previous log.
	e.retractedLogged, e.retractedSinceLog = e.retractedSinceLog, 0
	if e.observer != nil {
		e.observer.onLog(e)
	}
}

// notePrefillHits records one prefill batch's prefix-cache hit and computed
// tokens: the per-report cache_hit_rate and the windowed recent rate
// (metrics_reporter.py log_prefill_stats, _CacheHitRateWindow).
func (e *engine) notePrefillHits(hit, computed int64) {
	total := hit + computed
	if total > 0 {
		e.lastPrefillHitRate = float64(hit) / float64(total)
		e.hitWindow = append(e.hitWindow, hitSample{t: e.now, hit: hit, total: total})
	} else {
		e.lastPrefillHitRate = 0
	}
	e.trimHitWindow()
}

// trimHitWindow drops the samples older than cacheHitRateWindow.
func (e *engine) trimHitWindow() {
	cut := 0
	for cut < len(e.hitWindow) && e.hitWindow[cut].t <= e.now-cacheHitRateWindow {
		cut++
	}
	if cut > 0 {
		e.hitWindow = append(e.hitWindow[:0], e.hitWindow[cut:]...)
	}
}

// recentCacheHitRate is the hit rate over the last cacheHitRateWindow
// simulated seconds.
func (e *engine) recentCacheHitRate() float64 {
	e.trimHitWindow()
	var hit, total int64
	for _, s := range e.hitWindow {
		hit += s.hit
		total += s.total
	}
	if total == 0 {
		return 0
	}
	return float64(hit) / float64(total)
}

// cacheHitRate is cached prompt tokens over prefilled+cached tokens.
func (e *engine) cacheHitRate() float64 {
	total := e.stats.cacheHitTokens + e.stats.prefillTokens
	if total == 0 {
		return 0
	}
	return float64(e.stats.cacheHitTokens) / float64(total)
}
