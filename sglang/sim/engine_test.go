package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// testEngine builds an engine over cfg with defaults applied.
func testEngine(t *testing.T, cfg Config) *engine {
	t.Helper()
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	return newEngine(&cfg)
}

// distinctPrompt returns n token ids unlikely to share a prefix with others.
func distinctPrompt(rng *rand.Rand, n int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(rng.IntN(100000))
	}
	return p
}

// newTestReq builds a request whose natural output length is natural tokens
// (ending in EOS) unless ignoreEOS.
func newTestReq(e *engine, rid string, input []int32, maxNew, natural int, ignoreEOS bool) *request {
	cfg := *e.cfg
	cfg.OutputLenDistribution = DistFixed
	cfg.OutputLenMean = float64(natural)
	return &request{
		rid:       rid,
		input:     input,
		maxNew:    maxNew,
		ignoreEOS: ignoreEOS,
		plan:      newOutputPlan(&cfg, planSeed(1, rid, nil, false, nil), 0, ignoreEOS, nil),
		notify:    make(chan struct{}, 1),
	}
}

// checkAccounting verifies the KV pool invariants.
func checkAccounting(t *testing.T, e *engine) {
	t.Helper()
	own := 0
	for _, r := range e.running {
		own += r.kvLen - r.prefixLen
		if r.kvLen != len(r.input)+len(r.output)-1 {
			t.Fatalf("%s: kvLen %d, want input %d + output %d - 1", r.rid, r.kvLen, len(r.input), len(r.output))
		}
	}
	if e.chunked != nil {
		own += e.chunked.kvLen - e.chunked.prefixLen
	}
	if own != e.ownTokens {
		t.Fatalf("ownTokens %d, requests hold %d", e.ownTokens, own)
	}
	if e.available() < 0 {
		t.Fatalf("available %d < 0", e.available())
	}
	if e.tree.protected < 0 || e.tree.protected > e.tree.size {
		t.Fatalf("tree protected %d of %d", e.tree.protected, e.tree.size)
	}
}

// admitUntilDecode steps the engine until it runs its first decode step.
func admitUntilDecode(t *testing.T, e *engine) {
	t.Helper()
	for i := 0; i < 1000; i++ {
		b := e.nextBatch()
		if b == nil {
			t.Fatal("engine idle before decoding")
		}
		e.complete(b)
		checkAccounting(t, e)
		if !b.prefill {
			return
		}
	}
	t.Fatal("no decode step after 1000 batches")
}

// expectedPlateau computes, independently of the engine, how many requests
// SGLang admits before the first decode step when every request has the
// same prompt length and max_new_tokens: prefill batches of at most
// min(chunk, maxPrefill) tokens, each admitting while
// extend + min(max_new, 4096) < pool - used - running*min(max_new-1, 4096)*ratio - in-batch reservations.
func expectedPlateau(pool, prompt, maxNew, chunk, maxRunning int, ratio float64) int {
	running := 0
	for {
		used := running * prompt
		offset := float64(running) * float64(min(maxNew-1, clipMaxNewTokens)) * ratio
		remChunk := chunk
		added := 0
		for running+added < maxRunning {
			rem := float64(pool-used) - offset
			if float64(prompt+min(maxNew, clipMaxNewTokens)) >= rem {
				break
			}
			if prompt > remChunk {
				break // would be chunked; not the case in this scenario
			}
			added++
			offset += float64(prompt + min(maxNew, clipMaxNewTokens))
			used += 0 // KV is allocated after the batch forms
			remChunk -= prompt
			if remChunk <= 0 {
				break
			}
		}
		if added == 0 {
			return running
		}
		running += added
	}
}

// TestReferenceRunAdmission reproduces the reference observation: 150
// concurrent requests of ~1K prompt tokens with max_new_tokens 10240 (the
// short lane) into a 159,277-token pool run ~35-40 at once and queue the rest.
func TestReferenceRunAdmission(t *testing.T) {
	t.Parallel()
	e := testEngine(t, Config{Seed: 7})
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 150; i++ {
		e.submit(newTestReq(e, fmt.Sprintf("r%03d", i), distinctPrompt(rng, 1024), 10240, 3000, false))
	}
	admitUntilDecode(t, e)
	want := expectedPlateau(DefaultMaxTotalTokens, 1024, 10240, DefaultChunkedPrefillSize, e.cfg.MaxRunningRequests, e.initRatio)
	if len(e.running) != want {
		t.Fatalf("running %d, formula says %d", len(e.running), want)
	}
	if want < 35 || want > 40 {
		t.Fatalf("plateau %d outside the reference run's 35-40", want)
	}
	if len(e.waiting) != 150-want {
		t.Fatalf("waiting %d, want %d", len(e.waiting), 150-want)
	}
	// No admission while nothing finishes: batch_is_full holds the plateau.
	for i := 0; i < 300; i++ {
		b := e.step()
		if b == nil || b.prefill {
			t.Fatalf("step %d: unexpected batch %+v", i, b)
		}
	}
	if len(e.running) != want {
		t.Fatalf("running drifted to %d without finishes", len(e.running))
	}
	usage := float64(e.usedTokens()) / float64(e.cfg.MaxTotalTokens)
	t.Logf("plateau: running=%d waiting=%d token_usage=%.3f ratio=%.4f", len(e.running), len(e.waiting), usage, e.ratio)
}

func TestNewTokenRatioDecayAndReset(t *testing.T) {
	t.Parallel()
	e := testEngine(t, Config{ScheduleConservativeness: 1.2})
	if math.Abs(e.initRatio-0.84) > 1e-12 || math.Abs(e.minRatio-0.84*0.14) > 1e-12 {
		t.Fatalf("init %v min %v", e.initRatio, e.minRatio)
	}
	wantDecay := (0.84 - 0.84*0.14) / 600
	if math.Abs(e.decay-wantDecay) > 1e-15 {
		t.Fatalf("decay %v want %v", e.decay, wantDecay)
	}
	e.submit(newTestReq(e, "a", []int32{1, 2, 3}, 1000, 1000, true))
	admitUntilDecode(t, e) // one decode step done
	if math.Abs(e.ratio-(0.84-wantDecay)) > 1e-12 {
		t.Fatalf("after 1 decode step ratio %v", e.ratio)
	}
	for i := 0; i < 700; i++ {
		e.step()
	}
	if e.ratio != e.minRatio {
		t.Fatalf("after 701 steps ratio %v, want floor %v", e.ratio, e.minRatio)
	}
	for e.step() != nil {
	}
	if e.ratio != e.initRatio {
		t.Fatalf("idle ratio %v, want reset to %v", e.ratio, e.initRatio)
	}
	if e.stats.decodeSteps != 999 {
		t.Fatalf("decode steps %d, want 999 (first token comes from prefill)", e.stats.decodeSteps)
	}
	if max := min(1.2*0.7, 1.0); e.initRatio != max {
		t.Fatal("init ratio not capped formula")
	}
}

// TestRetractionOrder pins retract_decode's order: fewest output tokens
// first, ties broken by the longest input, and the ratio re-estimate.
func TestRetractionOrder(t *testing.T) {
	t.Parallel()
	e := testEngine(t, Config{MaxTotalTokens: 100})
	mk := func(rid string, in, out, maxNew int) *request {
		r := newTestReq(e, rid, make([]int32, in), maxNew, 1000, true)
		for i := 0; i < out; i++ {
			r.output = append(r.output, 7)
		}
		r.kvLen = in + out - 1
		e.ownTokens += r.kvLen
		e.running = append(e.running, r)
		return r
	}
	r1 := mk("r1", 10, 5, 50)
	r2 := mk("r2", 20, 5, 60)
	r3 := mk("r3", 10, 8, 70)
	e.retract()
	if len(e.waiting) != 1 || e.waiting[0] != r2 {
		t.Fatalf("retracted %v, want r2 (fewest outputs, longest input)", rids(e.waiting))
	}
	if r2.kvLen != 0 || r2.retractions != 1 || len(r2.output) != 5 {
		t.Fatalf("r2 after retraction: kv %d retractions %d output %d", r2.kvLen, r2.retractions, len(r2.output))
	}
	wantRatio := float64(8+5+20*2) / float64(70+50+1)
	if math.Abs(e.ratio-wantRatio) > 1e-12 {
		t.Fatalf("ratio %v want %v", e.ratio, wantRatio)
	}
	if got := rids(e.running); got != "r3,r1" {
		t.Fatalf("running %s", got)
	}
	_ = r1
	_ = r3
	if e.ownTokens != 14+17 {
		t.Fatalf("ownTokens %d after freeing r2", e.ownTokens)
	}
}

func rids(rs []*request) string {
	s := ""
	for i, r := range rs {
		if i > 0 {
			s += ","
		}
		s += r.rid
	}
	return s
}

// TestRetractionUnderPressure drives a real oversubscription: an aggressive
// ratio admits more than fits, a decode step cannot allocate, the youngest
// request is retracted and later re-prefills input + output.
func TestRetractionUnderPressure(t *testing.T) {
	t.Parallel()
	e := testEngine(t, Config{MaxTotalTokens: 1000, ScheduleConservativeness: 0.1})
	rng := rand.New(rand.NewPCG(3, 4))
	var reqs []*request
	for i := 0; i < 4; i++ {
		r := newTestReq(e, fmt.Sprintf("q%d", i), distinctPrompt(rng, 100), 300, 1000, true)
		reqs = append(reqs, r)
		e.submit(r)
	}
	var retractedAt int
	var outAtRetract int
	for i := 0; i < 5000 && e.stats.retractions == 0; i++ {
		if e.step() == nil {
			t.Fatal("idle before any retraction")
		}
		checkAccounting(t, e)
		retractedAt = i
	}
	if e.stats.retractions == 0 {
		t.Fatal("no retraction")
	}
	if len(e.waiting) != 1 || e.waiting[0] != reqs[3] {
		t.Fatalf("retracted %s, want q3 (admitted last, fewest outputs)", rids(e.waiting))
	}
	victim := reqs[3]
	outAtRetract = len(victim.output)
	var decoded, maxNew int
	for _, r := range e.running {
		decoded += len(r.output)
		maxNew += r.maxNew
	}
	// The ratio was computed before the surviving requests' decode step
	// appended one token each.
	decoded -= len(e.running)
	if want := math.Min(1, float64(decoded+20*len(e.running))/float64(maxNew+1)); math.Abs(e.ratio-want) > 1e-9 {
		t.Fatalf("ratio after retraction %v want %v", e.ratio, want)
	}
	t.Logf("retraction at step %d, victim had %d outputs", retractedAt, outAtRetract)
	// The victim's re-prefill must compute input + output (nothing cached:
	// retraction frees KV without inserting it into the radix cache).
	for victim.kvLen == 0 {
		prefillAt := e.stats.prefillTokens
		b := e.step()
		if b == nil {
			t.Fatal("idle while the victim waits")
		}
		checkAccounting(t, e)
		if victim.kvLen > 0 {
			if !b.prefill || len(b.reqs) != 1 {
				t.Fatalf("victim re-admitted by %+v", b)
			}
			if got := e.stats.prefillTokens - prefillAt; got != int64(100+outAtRetract) {
				t.Fatalf("re-prefill computed %d tokens, want input 100 + output %d", got, outAtRetract)
			}
			if len(victim.output) != outAtRetract+1 {
				t.Fatalf("re-prefill emitted %d outputs, want %d", len(victim.output), outAtRetract+1)
			}
		}
	}
	for e.step() != nil {
		checkAccounting(t, e)
	}
	for _, r := range reqs {
		if r.finish == nil || r.finish.Type != "length" || len(r.output) != 300 {
			t.Fatalf("%s finished %+v with %d outputs", r.rid, r.finish, len(r.output))
		}
	}
	if victim.retractions < 1 {
		t.Fatalf("victim retractions %d", victim.retractions)
	}
	t.Logf("retractions total %d in %d events", e.stats.retractions, e.stats.retractEvents)
}

func TestChunkedPrefill(t *testing.T) {
	t.Parallel()
	e := testEngine(t, Config{ChunkedPrefillSize: 8192})
	rng := rand.New(rand.NewPCG(5, 6))
	r := newTestReq(e, "long", distinctPrompt(rng, 20000), 10, 10, true)
	e.submit(r)
	var extends []int
	for {
		b := e.step()
		checkAccounting(t, e)
		if b == nil || !b.prefill {
			break
		}
		extends = append(extends, b.extend[0])
	}
	if fmt.Sprint(extends) != "[8192 8192 3616]" {
		t.Fatalf("chunks %v", extends)
	}
	if r.cachedTokens != 0 {
		t.Fatalf("own chunks counted as cached: %d", r.cachedTokens)
	}
	for e.step() != nil {
	}
	if len(r.output) != 10 {
		t.Fatalf("output %d", len(r.output))
	}
}

func TestChunkedPrefillWithoutRadixCache(t *testing.T) {
	t.Parallel()
	e := testEngine(t, Config{ChunkedPrefillSize: 4096, DisableRadixCache: true})
	r := newTestReq(e, "long", make([]int32, 10000), 5, 5, true)
	e.submit(r)
	for e.step() != nil {
		checkAccounting(t, e)
	}
	if e.stats.prefillTokens != 10000 || e.stats.prefillBatches != 3 {
		t.Fatalf("prefill tokens %d batches %d", e.stats.prefillTokens, e.stats.prefillBatches)
	}
	if e.ownTokens != 0 || e.tree.size != 0 || e.available() != e.cfg.MaxTotalTokens {
		t.Fatalf("leak: own %d tree %d", e.ownTokens, e.tree.size)
	}
}

// TestCachedTokens: a finished request's sequence is cached and a later
// request sharing its prefix reports it as cached_tokens.
func TestCachedTokens(t *testing.T) {
	t.Parallel()
	e := testEngine(t, Config{})
	rng := rand.New(rand.NewPCG(8, 9))
	prompt := distinctPrompt(rng, 500)
	a := newTestReq(e, "a", prompt, 20, 20, true)
	e.submit(a)
	for e.step() != nil {
	}
	if a.cachedTokens != 0 {
		t.Fatalf("first request cached %d", a.cachedTokens)
	}
	if e.tree.size != 500+20-1 || e.tree.evictable() != e.tree.size {
		t.Fatalf("tree size %d evictable %d", e.tree.size, e.tree.evictable())
	}
	if e.usedTokens() != 0 {
		t.Fatalf("cached tokens counted as used: %d", e.usedTokens())
	}
	b := newTestReq(e, "b", append(append([]int32{}, prompt...), 1, 2, 3), 5, 5, true)
	c := newTestReq(e, "c", prompt, 5, 5, true)
	e.submit(b)
	e.submit(c)
	for e.step() != nil {
		checkAccounting(t, e)
	}
	if b.cachedTokens != 500 {
		t.Fatalf("b cached %d, want 500", b.cachedTokens)
	}
	if c.cachedTokens != 499 {
		t.Fatalf("c cached %d, want 499 (one token must be computed)", c.cachedTokens)
	}
	if e.stats.cacheHitTokens != 999 {
		t.Fatalf("cache hits %d", e.stats.cacheHitTokens)
	}
}

// TestRunningPromptShared: once a request's prefill completes its prompt is in
// the tree (checkpoint_kv_cache), locked while it runs, so a request arriving
// while it decodes matches the shared prefix and the pool holds it once.
// The live server runs six 24-token chat prompts sharing an 8-token header in
// a 512-token pool; a simulator that cached only finished requests ran five.
func TestRunningPromptShared(t *testing.T) {
	e := testEngine(t, Config{})
	rng := rand.New(rand.NewPCG(12, 13))
	header := distinctPrompt(rng, 100)
	a := newTestReq(e, "a", append(append([]int32{}, header...), distinctPrompt(rng, 50)...), 50, 50, true)
	e.submit(a)
	if b := e.step(); b == nil || !b.prefill {
		t.Fatal("no prefill")
	}
	e.step() // a decodes
	if e.tree.size < 150 || e.tree.evictable() != 0 {
		t.Fatalf("running prompt not in the tree, locked: size %d evictable %d", e.tree.size, e.tree.evictable())
	}
	used := e.usedTokens()
	b := newTestReq(e, "b", append(append([]int32{}, header...), distinctPrompt(rng, 30)...), 50, 50, true)
	e.submit(b)
	if bt := e.step(); bt == nil || !bt.prefill || bt.extend[0] != 30 {
		t.Fatalf("b's prefill computed %v tokens, want 30 (its header is a's)", bt.extend)
	}
	checkAccounting(t, e)
	if b.cachedTokens != 100 {
		t.Fatalf("b cached %d, want 100", b.cachedTokens)
	}
	if got := e.usedTokens() - used; got != 30 {
		t.Fatalf("b's prefill added %d tokens to the pool, want its own 30", got)
	}
	for e.step() != nil {
		checkAccounting(t, e)
	}
	if len(a.output) != 50 || len(b.output) != 50 || e.usedTokens() != 0 {
		t.Fatalf("outputs %d %d, used %d", len(a.output), len(b.output), e.usedTokens())
	}
}

// TestEvictionUnderPressure: cached prefixes are evicted LRU to make room.
func TestEvictionUnderPressure(t *testing.T) {
	t.Parallel()
	e := testEngine(t, Config{MaxTotalTokens: 3000})
	rng := rand.New(rand.NewPCG(10, 11))
	for i := 0; i < 20; i++ {
		r := newTestReq(e, fmt.Sprintf("e%d", i), distinctPrompt(rng, 400), 10, 10, true)
		e.submit(r)
		for e.step() != nil {
			checkAccounting(t, e)
		}
		if r.finish == nil {
			t.Fatalf("%s did not finish", r.rid)
		}
	}
	if e.tree.size > 3000 || e.available() < 0 {
		t.Fatalf("tree %d exceeds pool", e.tree.size)
	}
}

func TestMaxRunningRequests(t *testing.T) {
	t.Parallel()
	e := testEngine(t, Config{MaxRunningRequests: 3})
	for i := 0; i < 10; i++ {
		e.submit(newTestReq(e, fmt.Sprint(i), []int32{int32(i), 5, 6}, 50, 50, true))
	}
	for i := 0; i < 20; i++ {
		e.step()
		if len(e.running) > 3 {
			t.Fatalf("running %d > 3", len(e.running))
		}
	}
	if len(e.running) != 3 {
		t.Fatalf("running %d, want 3", len(e.running))
	}
}

func TestQueueLimitAndOverlongInput(t *testing.T) {
	t.Parallel()
	e := testEngine(t, Config{MaxQueuedRequests: 2, MaxTotalTokens: 1000})
	var got []*request
	for i := 0; i < 3; i++ {
		r := newTestReq(e, fmt.Sprint(i), []int32{1}, 5, 5, true)
		e.submit(r)
		got = append(got, r)
	}
	if got[2].finish == nil || *got[2].finish.StatusCode != 503 || got[2].finish.Message != "The request queue is full." {
		t.Fatalf("third request: %+v", got[2].finish)
	}
	long := newTestReq(e, "long", make([]int32, 995), 5, 5, true)
	e.submit(long)
	if long.finish == nil || *long.finish.StatusCode != 400 {
		t.Fatalf("over-long input: %+v", long.finish)
	}
}

func TestFinishReasons(t *testing.T) {
	t.Parallel()
	e := testEngine(t, Config{})
	stop := newTestReq(e, "s", []int32{1, 2}, 100, 7, false)
	length := newTestReq(e, "l", []int32{1, 3}, 5, 7, false)
	e.submit(stop)
	e.submit(length)
	for e.step() != nil {
	}
	if stop.finish.Type != "stop" || len(stop.output) != 7 || int(stop.output[6]) != *stop.finish.Matched {
		t.Fatalf("stop: %+v %v", stop.finish, stop.output)
	}
	if *stop.finish.Matched != 151645 && *stop.finish.Matched != 151643 {
		t.Fatalf("matched %d not an EOS id", *stop.finish.Matched)
	}
	for _, tok := range stop.output[:6] {
		if tok >= DefaultSpecialTokenStart {
			t.Fatalf("special id %d mid-output", tok)
		}
	}
	if length.finish.Type != "length" || *length.finish.Length != 5 || len(length.output) != 5 {
		t.Fatalf("length: %+v", length.finish)
	}
}

func TestAbortPrefix(t *testing.T) {
	t.Parallel()
	e := testEngine(t, Config{})
	for _, rid := range []string{"job-1", "job-12", "other"} {
		e.submit(newTestReq(e, rid, []int32{1, 2, 3}, 100, 100, true))
	}
	e.step()
	if n := e.abortByRID("job-", false); n != 0 {
		t.Fatalf("unknown exact rid aborted %d", n)
	}
	if n := e.abortByRID("job-1", false); n != 2 {
		t.Fatalf("prefix abort hit %d, want 2", n)
	}
	checkAccounting(t, e)
	if n := e.abortByRID("", true); n != 1 {
		t.Fatalf("abort_all hit %d", n)
	}
	if e.ownTokens != 0 {
		t.Fatalf("ownTokens %d after aborting all", e.ownTokens)
	}
}

func TestCrashWipesState(t *testing.T) {
	t.Parallel()
	e := testEngine(t, Config{Faults: Faults{CrashEvery: 1e9}})
	r := newTestReq(e, "x", []int32{1, 2, 3}, 100, 100, true)
	e.submit(r)
	e.step()
	e.crash()
	if r.finish == nil || !r.finish.crashed {
		t.Fatalf("request not crashed: %+v", r.finish)
	}
	if e.ownTokens != 0 || e.tree.size != 0 || len(e.running) != 0 || e.stats.crashes != 1 {
		t.Fatal("crash left state behind")
	}
}
