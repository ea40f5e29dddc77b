// Package bench measures the generate stage's admission policies against the in-process SGLang simulator
// (stages/generate/sim): `draftflow bench generate`. Each run is a deterministic discrete-event simulation:
// the simulated servers' engines run pass by pass on the bench's own clock (sim.NewManual), and the
// stage's Controller runs on the same clock (generate.Config.Clock), driven through Offer, Finish and
// Feedback: the admission, output-length estimation, routing and budget code that Controller.Do and
// Controller.Run use, fed what the stage's client reads over HTTP (/get_server_info, /v1/loads, the
// /metrics retraction counter, meta_info; TestFeedbackMatchesHTTP checks that the two agree). No Kafka and
// no HTTP: a backlog of waiting requests is kept deep enough that the policy, not the feed, is the limit.
// The same seed gives the same figures on a busy or an idle machine. Each run measures, in simulated time,
// output tok/s, retractions, the servers' queue depth and request latency over the steady-state window
// after a warm-up.
//
// Scenarios: one server (the reference run's 159,277-token pool); a heterogeneous fleet of three servers
// (pools of 80K, 160K and 320K tokens); and one server whose workload's output lengths shift halfway. The
// workload is the issue's: prompts of 1-4K tokens, heavy-tailed (lognormal) outputs clipped at 10,240 new
// tokens. Policies: fixed 150 in flight per server (the reference run), fixed 64 per server round-robin
// (SpecForge's default), the KV-budgeted controller, and the oracle: the best fixed concurrency per server,
// found by sweeping. On the fleet the oracle is the sum of each server's own oracle.
package bench

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/draftflow/draftflow/stages/generate"
	"github.com/draftflow/draftflow/stages/generate/sim"
)

// Scenario names.
const (
	ScenarioOneServer = "one-server"
	ScenarioFleet     = "fleet"
	ScenarioShift     = "shift"
)

// Policy names.
const (
	PolicyFixed150  = "fixed-150"
	PolicyFixed64RR = "fixed-64-rr"
	PolicyKVBudget  = "kv-budget"
	// PolicyKVThroughput is the kv-budget controller tuned for throughput (--kv-safe-completions 4
	// --kv-headroom-outputs 4, ThroughputBudget): a looser KV gate that runs the pool as full as SGLang's own
	// admission does, trading a few retractions for the last percent of tok/s.
	PolicyKVThroughput = "kv-budget-tput"
	PolicyOracle       = "oracle"
)

// ThroughputBudget is the budget of PolicyKVThroughput.
var ThroughputBudget = generate.BudgetConfig{SafeCompletions: 4, HeadroomOutputs: 4}

// Scenarios and Policies list every scenario and policy, in report order.
var (
	Scenarios = []string{ScenarioOneServer, ScenarioFleet, ScenarioShift}
	Policies  = []string{PolicyFixed150, PolicyFixed64RR, PolicyKVBudget, PolicyKVThroughput, PolicyOracle}
)

// BenchOptions configures Bench. Zero values are the documented defaults.
type BenchOptions struct {
	// Scenarios to run (default all).
	Scenarios []string
	// Policies to run (default all). The oracle needs sweeps, the costliest part.
	Policies []string
	// SimDuration is the simulated length of one run (default 60 min); the first WarmupFraction is not measured.
	SimDuration time.Duration
	// WarmupFraction of SimDuration excluded from the figures (default 0.25).
	WarmupFraction float64
	// TimeScale is ignored: runs are discrete-event simulations that take as long as the CPU needs. (It was
	// the wall-clock speed-up of an earlier bench; kept so existing callers compile.)
	TimeScale float64
	// Parallel runs at once (default: the number of CPUs). It changes the wall time only, never the figures.
	Parallel int
	// Seed makes workloads reproducible (default 1).
	Seed int64
	// Budget tunes the kv-budget policy (default: the stage's defaults, generate.BudgetConfig{}).
	Budget generate.BudgetConfig
	// PlotFile, when set, receives an SVG figure of tok/s and KV usage over time per policy (see WritePlot).
	PlotFile string
	// JSON makes Bench print nothing on w (the caller prints the results as JSON).
	JSON bool
	// Logger receives progress (default: discard).
	Logger *slog.Logger
}

// BenchResult is one policy's figures in one scenario.
type BenchResult struct {
	Scenario string `json:"scenario"`
	Policy   string `json:"policy"`
	// TokPerS is output tokens per simulated second over the measured window, summed over servers.
	TokPerS float64 `json:"tok_per_s"`
	// RatioToOracle is TokPerS divided by the scenario's oracle TokPerS.
	RatioToOracle float64 `json:"ratio_to_oracle"`
	// Retractions counts requests the servers retracted in the measured (steady-state) window.
	Retractions int64 `json:"retractions"`
	// RetractionsTotal counts retractions over the whole run, warm-up included.
	RetractionsTotal int64 `json:"retractions_total"`
	// MeanQueue is the mean number of requests waiting in the servers' queues, summed over servers.
	MeanQueue float64 `json:"mean_queue"`
	// MeanKVUsage is the mean KV token usage over the servers' pools (used tokens over pool tokens).
	MeanKVUsage float64 `json:"mean_kv_usage"`
	// P50LatencyS and P99LatencyS are request latencies (server e2e, simulated seconds) of requests that
	// finished in the window.
	P50LatencyS float64 `json:"p50_latency_s"`
	P99LatencyS float64 `json:"p99_latency_s"`
	// Concurrency is the fixed per-server concurrency of a fixed or oracle policy (per server, in order).
	Concurrency []int `json:"concurrency,omitempty"`
	// Series samples the run over time, for plots.
	Series []Sample `json:"-"`
}

// Sample is one point of a run's time series.
type Sample struct {
	// T is simulated seconds since the run started.
	T float64
	// TokPerS is output tok/s over the last sample interval, summed over servers.
	TokPerS float64
	// KVUsage is used KV tokens over pool tokens, over all servers.
	KVUsage float64
	// Queue is the servers' waiting requests.
	Queue int
}

// workload generates the requests of a scenario: the i-th request's lengths depend on the seed and i only,
// so every policy works through the same list of requests, as it would through a dataset.
type workload struct {
	seed     int64
	shiftAt  int64 // first request drawn from after; 0 = no shift
	before   lengthDist
	after    lengthDist
	maxNew   int
	minInput int
	maxInput int
}

type lengthDist struct{ mean, sigma float64 }

// draw returns the i-th request's prompt length and natural output length.
func (w *workload) draw(i int64) (prompt, output int) {
	rng := rand.New(rand.NewPCG(uint64(w.seed), uint64(i)))
	prompt = w.minInput + rng.IntN(w.maxInput-w.minInput+1)
	d := w.before
	if w.shiftAt > 0 && i >= w.shiftAt {
		d = w.after
	}
	mu := math.Log(d.mean) - d.sigma*d.sigma/2
	output = max(1, int(math.Exp(mu+d.sigma*rng.NormFloat64())))
	return prompt, output
}

// referenceTokPerS is the reference run's server throughput, to place the shift of the shift scenario.
const referenceTokPerS = 600

type scenario struct {
	name  string
	pools []int
	work  workload
}

func scenarios(opts BenchOptions) map[string]scenario {
	base := workload{seed: opts.Seed, before: lengthDist{2500, 0.9}, maxNew: 10240, minInput: 1024, maxInput: 4096}
	shift := base
	shift.before = lengthDist{1200, 0.8}
	shift.after = lengthDist{4000, 0.8}
	// The shift comes after the requests the reference server (~600 output tok/s) finishes in half the run.
	shift.shiftAt = int64(opts.SimDuration.Seconds() / 2 * referenceTokPerS / shift.before.mean)
	return map[string]scenario{
		ScenarioOneServer: {name: ScenarioOneServer, pools: []int{sim.DefaultMaxTotalTokens}, work: base},
		// The fleet's middle server is the reference pool (~160K), so its oracle sweep is the one-server one.
		ScenarioFleet: {name: ScenarioFleet, pools: []int{80000, sim.DefaultMaxTotalTokens, 320000}, work: base},
		ScenarioShift: {name: ScenarioShift, pools: []int{sim.DefaultMaxTotalTokens}, work: shift},
	}
}

// runSpec is one run: a scenario's servers under one policy.
type runSpec struct {
	sc          scenario
	policy      string // generate.PolicyFixed or generate.PolicyKVBudget
	routing     string
	concurrency int
	budget      *generate.BudgetConfig // overrides BenchOptions.Budget
}

// Bench runs the selected scenarios under the selected policies, prints a table on w (unless opts.JSON) and
// returns one result per scenario and policy.
func Bench(ctx context.Context, opts BenchOptions, w io.Writer) ([]BenchResult, error) {
	if len(opts.Scenarios) == 0 {
		opts.Scenarios = Scenarios
	}
	if len(opts.Policies) == 0 {
		opts.Policies = Policies
	}
	if opts.SimDuration <= 0 {
		opts.SimDuration = 60 * time.Minute
	}
	if opts.WarmupFraction <= 0 || opts.WarmupFraction >= 1 {
		opts.WarmupFraction = 0.25
	}
	if opts.Parallel <= 0 {
		opts.Parallel = runtime.NumCPU()
	}
	if opts.Seed == 0 {
		opts.Seed = 1
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	all := scenarios(opts)
	for _, s := range opts.Scenarios {
		if _, ok := all[s]; !ok {
			return nil, fmt.Errorf("bench: unknown scenario %q (want %s)", s, strings.Join(Scenarios, ", "))
		}
	}
	for _, p := range opts.Policies {
		if !slices.Contains(Policies, p) {
			return nil, fmt.Errorf("bench: unknown policy %q (want %s)", p, strings.Join(Policies, ", "))
		}
	}
	b := &bencher{opts: opts, sem: make(chan struct{}, opts.Parallel), sweeps: map[string]*sweepOnce{}}

	type job struct {
		sc     scenario
		policy string
		res    *BenchResult
		err    error
	}
	var jobs []*job
	var wg sync.WaitGroup
	for _, name := range opts.Scenarios {
		sc := all[name]
		for _, p := range opts.Policies {
			j := &job{sc: sc, policy: p}
			jobs = append(jobs, j)
			wg.Add(1)
			go func() {
				defer wg.Done()
				j.res, j.err = b.policyResult(ctx, sc, p)
			}()
		}
	}
	wg.Wait()
	var results []BenchResult
	oracle := map[string]float64{}
	for _, j := range jobs {
		if j.err != nil {
			return nil, j.err
		}
		if j.policy == PolicyOracle {
			oracle[j.sc.name] = j.res.TokPerS
		}
	}
	for _, j := range jobs {
		r := *j.res
		if o := oracle[r.Scenario]; o > 0 {
			r.RatioToOracle = r.TokPerS / o
		}
		results = append(results, r)
	}
	if !opts.JSON && w != nil {
		WriteTable(w, results)
	}
	if opts.PlotFile != "" {
		f, err := os.Create(opts.PlotFile)
		if err != nil {
			return results, fmt.Errorf("bench: plot: %w", err)
		}
		err = WritePlot(f, results)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return results, fmt.Errorf("bench: plot: %w", err)
		}
	}
	return results, ctx.Err()
}

// WriteTable prints results as an aligned table.
func WriteTable(w io.Writer, results []BenchResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tpolicy\ttok/s\tvs oracle\tretractions (steady/all)\tmean queue\tmean KV usage\tp50 latency s\tp99 latency s\tconcurrency\t")
	for _, r := range results {
		ratio := "-"
		if r.RatioToOracle > 0 {
			ratio = fmt.Sprintf("%.1f%%", 100*r.RatioToOracle)
		}
		conc := "-"
		if len(r.Concurrency) > 0 {
			conc = strings.Trim(strings.Join(strings.Fields(fmt.Sprint(r.Concurrency)), "/"), "[]")
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%s\t%d/%d\t%.1f\t%.3f\t%.0f\t%.0f\t%s\t\n", r.Scenario, r.Policy, r.TokPerS, ratio,
			r.Retractions, r.RetractionsTotal, r.MeanQueue, r.MeanKVUsage, r.P50LatencyS, r.P99LatencyS, conc)
	}
	_ = tw.Flush()
}

type bencher struct {
	opts BenchOptions
	sem  chan struct{}

	mu     sync.Mutex
	sweeps map[string]*sweepOnce // by pool and workload
}

type sweepOnce struct {
	once sync.Once
	res  *BenchResult
	err  error
}

// policyResult runs one policy in one scenario (the oracle: sweeps, per server on a fleet).
func (b *bencher) policyResult(ctx context.Context, sc scenario, policy string) (*BenchResult, error) {
	var spec runSpec
	switch policy {
	case PolicyFixed150:
		spec = runSpec{sc: sc, policy: generate.PolicyFixed, routing: generate.RouteHeadroom, concurrency: 150}
	case PolicyFixed64RR:
		spec = runSpec{sc: sc, policy: generate.PolicyFixed, routing: generate.RouteRoundRobin, concurrency: 64}
	case PolicyKVBudget:
		spec = runSpec{sc: sc, policy: generate.PolicyKVBudget, routing: generate.RouteHeadroom}
	case PolicyKVThroughput:
		budget := b.opts.Budget
		budget.SafeCompletions, budget.HeadroomOutputs = ThroughputBudget.SafeCompletions, ThroughputBudget.HeadroomOutputs
		spec = runSpec{sc: sc, policy: generate.PolicyKVBudget, routing: generate.RouteHeadroom, budget: &budget}
	case PolicyOracle:
		return b.oracle(ctx, sc)
	}
	r, err := b.run(ctx, spec)
	if err != nil {
		return nil, err
	}
	r.Policy = policy
	if spec.policy == generate.PolicyFixed {
		for range sc.pools {
			r.Concurrency = append(r.Concurrency, spec.concurrency)
		}
	}
	return r, nil
}

// oracle sweeps fixed concurrencies for each server of sc alone and sums the best of each.
func (b *bencher) oracle(ctx context.Context, sc scenario) (*BenchResult, error) {
	total := &BenchResult{Scenario: sc.name, Policy: PolicyOracle}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var firstErr error
	bests := make([]*BenchResult, len(sc.pools))
	for i, pool := range sc.pools {
		wg.Add(1)
		go func() {
			defer wg.Done()
			one := sc
			one.pools = []int{pool}
			best, err := b.sweepCached(ctx, one)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			bests[i] = best
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	var lat50, lat99 float64
	for i, best := range bests {
		total.TokPerS += best.TokPerS
		total.Retractions += best.Retractions
		total.RetractionsTotal += best.RetractionsTotal
		total.MeanQueue += best.MeanQueue
		total.MeanKVUsage += best.MeanKVUsage * float64(sc.pools[i]) / float64(sumInts(sc.pools))
		total.Concurrency = append(total.Concurrency, best.Concurrency...)
		lat50 = max(lat50, best.P50LatencyS)
		lat99 = max(lat99, best.P99LatencyS)
		if i == 0 {
			total.Series = best.Series
		} else {
			total.Series = mergeSeries(total.Series, best.Series)
		}
	}
	// On a fleet the oracle's latencies are the worst server's (its servers ran separately).
	total.P50LatencyS, total.P99LatencyS = lat50, lat99
	return total, nil
}

// sweepCached runs each distinct (pool, workload) sweep once, whichever scenario asks first.
func (b *bencher) sweepCached(ctx context.Context, sc scenario) (*BenchResult, error) {
	key := fmt.Sprintf("%d/%+v", sc.pools[0], sc.work)
	b.mu.Lock()
	s := b.sweeps[key]
	if s == nil {
		s = &sweepOnce{}
		b.sweeps[key] = s
	}
	b.mu.Unlock()
	s.once.Do(func() { s.res, s.err = b.sweep(ctx, sc) })
	if s.err != nil {
		return nil, s.err
	}
	r := *s.res
	r.Scenario = sc.name
	return &r, nil
}

// sweep finds the best fixed concurrency for a one-server scenario: a coarse geometric grid around the
// concurrency the pool fits on average, then the neighbours of the best point.
func (b *bencher) sweep(ctx context.Context, sc scenario) (*BenchResult, error) {
	w := sc.work
	meanOut := w.before.mean
	if w.shiftAt > 0 {
		meanOut = (w.before.mean + w.after.mean) / 2
	}
	footprint := float64(w.minInput+w.maxInput)/2 + meanOut/2
	fit := float64(sc.pools[0]) / footprint
	tried := map[int]*BenchResult{}
	try := func(cs []int) error {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var firstErr error
		for _, c := range cs {
			if c < 1 || tried[c] != nil {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := b.run(ctx, runSpec{sc: sc, policy: generate.PolicyFixed, routing: generate.RouteHeadroom, concurrency: c})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					if firstErr == nil {
						firstErr = err
					}
					return
				}
				r.Concurrency = []int{c}
				tried[c] = r
			}()
		}
		wg.Wait()
		return firstErr
	}
	// Throughput rises with concurrency until the server's own admission holds the rest in its queue, then
	// plateaus (or falls, once retractions set in): sweep from the average fit to four times it.
	var grid []int
	for _, f := range []float64{1, 1.5, 2.2, 3.2, 4.5} {
		grid = append(grid, int(math.Round(fit*f)))
	}
	if err := try(grid); err != nil {
		return nil, err
	}
	best := bestOf(tried)
	step := max(1, int(math.Round(float64(best.Concurrency[0])*0.15)))
	if err := try([]int{best.Concurrency[0] - step, best.Concurrency[0] + step}); err != nil {
		return nil, err
	}
	best = bestOf(tried)
	b.opts.Logger.Info("oracle sweep", "scenario", sc.name, "pool", sc.pools[0], "best_concurrency", best.Concurrency[0],
		"tok_per_s", best.TokPerS, "points", len(tried))
	return best, nil
}

func bestOf(tried map[int]*BenchResult) *BenchResult {
	var best *BenchResult
	keys := make([]int, 0, len(tried))
	for c := range tried {
		keys = append(keys, c)
	}
	sort.Ints(keys)
	for _, c := range keys {
		if r := tried[c]; best == nil || r.TokPerS > best.TokPerS {
			best = r
		}
	}
	return best
}

// mergeSeries adds two series sample by sample (same sampling grid).
func mergeSeries(a, b []Sample) []Sample {
	n := min(len(a), len(b))
	out := make([]Sample, n)
	for i := range n {
		out[i] = Sample{T: a[i].T, TokPerS: a[i].TokPerS + b[i].TokPerS, Queue: a[i].Queue + b[i].Queue,
			KVUsage: (a[i].KVUsage + b[i].KVUsage) / 2}
	}
	return out
}

// Client-side delays of the simulated network, in simulated seconds: from admission to the server's queue,
// and from the server's answer to the client's release of the request (HTTP, tokenizer manager, detokenizer).
const (
	sendDelay  = 0.005
	replyDelay = 0.005
	// sampleEvery is the simulated interval between samples of the time series.
	sampleEvery = 10.0
	// backlogDepth is how many requests wait for admission at all times: the feed is never the limit.
	backlogDepth = 64
)

// event kinds of the discrete-event simulation.
const (
	evPassEnd = iota // a server's forward pass ends
	evArrive         // an admitted request reaches its server
	evReply          // a finished request's answer reaches the client
	evPoll           // the controller polls a server's load (kv-budget)
	evSample         // the bench samples the servers
)

type event struct {
	t    float64
	seq  int64 // FIFO among simultaneous events
	kind int
	srv  int
	tk   *generate.Ticket
	fin  sim.Finished
}

type eventQueue []*event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].t != q[j].t {
		return q[i].t < q[j].t
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// capacityOf is what the stage's client reads from the server's /get_server_info.
func capacityOf(s *sim.Server) generate.Capacity {
	c := s.Config()
	return generate.Capacity{MaxTotalTokens: c.MaxTotalTokens, MaxRunningRequests: c.MaxRunningRequests,
		ContextLength: c.ContextLength, ServedModel: c.ModelPath}
}

// loadOf is what the stage's client reads from the server's /v1/loads, and the retraction counter it reads
// from /metrics (sglang:num_retracted_requests_total).
func loadOf(s *sim.Server) (generate.Load, float64) {
	st := s.Stats()
	return generate.Load{Running: st.Running, Waiting: st.Waiting, UsedTokens: st.UsedTokens, MaxTokens: st.MaxTotalTokens,
		TokenUsage: st.TokenUsage, GenThroughput: st.GenThroughput}, float64(st.RetractionsTotal)
}

// run executes one run as a discrete-event simulation and returns its figures (Policy left for the caller).
// Simulated time is the bench's own: the servers' engines are driven pass by pass (sim.NewManual), the
// Controller runs on the same clock (Config.Clock) through Offer, Finish and Feedback, the same admission,
// estimation, routing and budget code Do and Run use, fed what the stage's client reads over HTTP. A run's
// figures depend on its inputs only, not on the machine or its load.
func (b *bencher) run(ctx context.Context, spec runSpec) (*BenchResult, error) {
	select {
	case b.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-b.sem }()
	opts := b.opts
	duration := opts.SimDuration.Seconds()
	warmup := duration * opts.WarmupFraction

	var servers []*sim.Server
	var urls []string
	defer func() {
		for _, s := range servers {
			_ = s.Close()
		}
	}()
	for i, pool := range spec.sc.pools {
		s, err := sim.NewManual(sim.Config{MaxTotalTokens: pool, OutputLenDistribution: sim.DistFixed,
			OutputLenMean: 1, Seed: opts.Seed + int64(i), Logger: opts.Logger})
		if err != nil {
			return nil, err
		}
		servers = append(servers, s)
		urls = append(urls, fmt.Sprintf("http://sim-%d.invalid:30000", i))
	}
	var now float64 // simulated seconds
	epoch := time.Unix(0, 0)
	budget := opts.Budget
	if spec.budget != nil {
		budget = *spec.budget
	}
	ctl, err := generate.NewController(generate.Config{
		Endpoints:   urls,
		Policy:      spec.policy,
		Concurrency: spec.concurrency,
		Routing:     spec.routing,
		Budget:      budget,
		Registerer:  prometheus.NewRegistry(),
		Logger:      opts.Logger,
		Clock:       func() time.Time { return epoch.Add(time.Duration(now * float64(time.Second))) },
	})
	if err != nil {
		return nil, err
	}
	pollEvery := generate.DefaultPollInterval.Seconds()

	var q eventQueue
	var seq int64
	push := func(e *event) {
		seq++
		e.seq = seq
		heap.Push(&q, e)
	}
	// Admissions happen inside Controller calls; the hook records them and the loop sends them afterwards.
	var granted []*generate.Ticket
	onGrant := func(t *generate.Ticket) { granted = append(granted, t) }
	var offered, admitted int64
	waiting := 0
	refill := func() {
		for waiting < backlogDepth {
			offered++
			i := offered
			prompt, out := spec.sc.work.draw(i)
			waiting++
			ctl.Offer(&generate.Request{
				RID:      fmt.Sprintf("req-%d", i),
				Key:      generate.LengthKey{Dataset: "bench", Lane: generate.DefaultLane},
				InputIDs: promptIDs(i, prompt),
				Sampling: generate.SamplingParams{MaxNewTokens: spec.sc.work.maxNew, MinNewTokens: min(out-1, spec.sc.work.maxNew)},
			}, onGrant)
		}
	}
	send := func() {
		for len(granted) > 0 {
			g := granted
			granted = nil
			for _, t := range g {
				waiting--
				admitted++
				push(&event{t: now + sendDelay, kind: evArrive, srv: t.Endpoint(), tk: t})
			}
			refill()
		}
	}
	for i, s := range servers {
		ctl.EndpointUp(i, capacityOf(s))
		if spec.policy == generate.PolicyKVBudget {
			push(&event{t: pollEvery, kind: evPoll, srv: i})
		}
	}
	refill()
	send()
	push(&event{t: sampleEvery, kind: evSample})

	tickets := map[string]*generate.Ticket{}
	busy := make([]bool, len(servers))
	dirty := make([]bool, len(servers))

	type snap struct {
		gen, retr []int64
	}
	take := func() snap {
		var s snap
		for _, srv := range servers {
			st := srv.Stats()
			s.gen = append(s.gen, st.GeneratedTokens)
			s.retr = append(s.retr, st.RetractionsTotal)
		}
		return s
	}
	res := &BenchResult{Scenario: spec.sc.name}
	prev := take()
	var atWarmup *snap
	var queueSum, kvSum float64
	var queueN int
	var latencies []float64

	for q.Len() > 0 {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		e := heap.Pop(&q).(*event)
		now = e.t
		if now > duration {
			break
		}
		switch e.kind {
		case evPassEnd:
			busy[e.srv] = false
			for _, f := range servers[e.srv].Finish() {
				t := tickets[f.RID]
				delete(tickets, f.RID)
				push(&event{t: now + replyDelay, kind: evReply, tk: t, fin: f})
			}
			dirty[e.srv] = true
		case evArrive:
			t := e.tk
			tickets[t.Request.RID] = t
			ids := make([]int32, len(t.Request.InputIDs))
			for j, id := range t.Request.InputIDs {
				ids[j] = int32(id)
			}
			maxNew, minNew := t.Request.Sampling.MaxNewTokens, t.Request.Sampling.MinNewTokens
			if err := servers[e.srv].Submit(now, sim.Prompt{RID: t.Request.RID, InputIDs: ids,
				Sampling: sim.SamplingParams{MaxNewTokens: &maxNew, MinNewTokens: minNew}}); err != nil {
				return nil, fmt.Errorf("bench: submit: %w", err)
			}
			dirty[e.srv] = true
		case evReply:
			if e.fin.FinishReason == "abort" {
				return nil, fmt.Errorf("bench: request %s aborted by the simulator", e.fin.RID)
			}
			if err := ctl.Finish(e.tk, e.fin.CompletionTokens, e.fin.Retractions,
				time.Duration(e.fin.E2ELatency*float64(time.Second))); err != nil {
				return nil, err
			}
			if now >= warmup {
				latencies = append(latencies, e.fin.E2ELatency)
			}
		case evPoll:
			load, retracted := loadOf(servers[e.srv])
			if opts.Logger.Enabled(ctx, slog.LevelDebug) {
				ep := ctl.Endpoints()[e.srv]
				opts.Logger.Debug("poll", "t", now, "ep", e.srv, "kv", load.TokenUsage, "running", load.Running,
					"queue", load.Waiting, "retracted", retracted, "budget", int(ep.Budget), "charged", int(ep.Used), "inflight", ep.InFlight)
			}
			ctl.Feedback(e.srv, load, retracted, true)
			push(&event{t: now + pollEvery, kind: evPoll, srv: e.srv})
		case evSample:
			cur := take()
			smp := Sample{T: now}
			var used, pool int64
			for i, srv := range servers {
				st := srv.Stats()
				smp.TokPerS += float64(cur.gen[i]-prev.gen[i]) / sampleEvery
				smp.Queue += st.Waiting
				used += int64(st.UsedTokens)
				pool += int64(st.MaxTotalTokens)
			}
			smp.KVUsage = float64(used) / float64(pool)
			res.Series = append(res.Series, smp)
			if opts.Logger.Enabled(ctx, slog.LevelDebug) {
				for i, ep := range ctl.Endpoints() {
					st := servers[i].Stats()
					opts.Logger.Debug("sample", "policy", spec.policy, "t", int(now), "ep", i, "tok_s", int(smp.TokPerS),
						"kv", fmt.Sprintf("%.3f", st.TokenUsage), "running", st.Running, "queue", st.Waiting,
						"budget", int(ep.Budget), "charged", int(ep.Used), "inflight", ep.InFlight, "retracted", st.RetractionsTotal,
						"est", ctl.Estimator().Expected(generate.LengthKey{Dataset: "bench", Lane: generate.DefaultLane}, 10240))
				}
			}
			if now >= warmup {
				if atWarmup == nil {
					c := cur
					atWarmup = &c
				} else {
					queueSum += float64(smp.Queue)
					kvSum += smp.KVUsage
					queueN++
				}
			}
			prev = cur
			push(&event{t: now + sampleEvery, kind: evSample})
		}
		send()
		// Plan the servers' next passes once every event of this instant is in, as the scheduler receives
		// everything queued before it plans.
		if q.Len() == 0 || q[0].t > now {
			for i, s := range servers {
				if dirty[i] && !busy[i] {
					if end, ok := s.Poll(now); ok {
						busy[i] = true
						push(&event{t: end, kind: evPassEnd, srv: i})
					}
				}
				dirty[i] = false
			}
		}
	}
	end := prev
	if atWarmup == nil {
		return nil, errors.New("bench: run ended before its warm-up")
	}
	span := res.Series[len(res.Series)-1].T - warmupSampleT(res.Series, warmup)
	for i := range servers {
		if span > 0 {
			res.TokPerS += float64(end.gen[i]-atWarmup.gen[i]) / span
		}
		res.Retractions += end.retr[i] - atWarmup.retr[i]
		res.RetractionsTotal += end.retr[i]
	}
	if queueN > 0 {
		res.MeanQueue = queueSum / float64(queueN)
		res.MeanKVUsage = kvSum / float64(queueN)
	}
	slices.Sort(latencies)
	res.P50LatencyS, res.P99LatencyS = quantile(latencies, 0.5), quantile(latencies, 0.99)
	opts.Logger.Info("run", "scenario", spec.sc.name, "policy", spec.policy, "routing", spec.routing,
		"concurrency", spec.concurrency, "pools", spec.sc.pools, "tok_per_s", math.Round(res.TokPerS),
		"retractions", res.Retractions, "mean_queue", res.MeanQueue)
	return res, nil
}

// warmupSampleT is the time of the first sample at or after the warm-up.
func warmupSampleT(series []Sample, warmup float64) float64 {
	for _, s := range series {
		if s.T >= warmup {
			return s.T
		}
	}
	return 0
}

func sumInts(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// promptIDs builds a distinct prompt per request (no prefix sharing: the radix cache does not help).
func promptIDs(i int64, n int) []uint32 {
	ids := make([]uint32, n)
	x := uint32(i)*2654435761 + 1
	for j := range ids {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		ids[j] = x % 150000
	}
	return ids
}
