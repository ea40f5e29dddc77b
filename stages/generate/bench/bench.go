// Package bench measures the generate stage's admission policies against the in-process SGLang simulator
// (stages/generate/sim): `draftflow bench generate`. Each run starts simulated servers at a fast time scale,
// drives them through the same Controller and SGLang client the stage uses (no Kafka: the bench hands
// requests to Controller.Do directly, with a backlog deep enough that the policy, not the feed, is the
// limit), and measures, in simulated time, output tok/s, retractions, the servers' queue depth and request
// latency over the steady-state window after a warm-up.
//
// Scenarios: one server (the reference run's 159,277-token pool); a heterogeneous fleet of three servers
// (pools of 80K, 160K and 320K tokens); and one server whose workload's output lengths shift halfway. The
// workload is the issue's: prompts of 1-4K tokens, heavy-tailed (lognormal) outputs clipped at 10,240 new
// tokens. Policies: fixed 150 in flight per server (the reference run), fixed 64 per server round-robin
// (SpecForge's default), the KV-budgeted controller, and the oracle: the best fixed concurrency per server,
// found by sweeping. On the fleet the oracle is the sum of each server's own oracle.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
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
	PolicyOracle    = "oracle"
)

// Scenarios and Policies list every scenario and policy, in report order.
var (
	Scenarios = []string{ScenarioOneServer, ScenarioFleet, ScenarioShift}
	Policies  = []string{PolicyFixed150, PolicyFixed64RR, PolicyKVBudget, PolicyOracle}
)

// BenchOptions configures Bench. Zero values are the documented defaults.
type BenchOptions struct {
	// Scenarios to run (default all).
	Scenarios []string
	// Policies to run (default all). The oracle needs sweeps, the costliest part.
	Policies []string
	// SimDuration is the simulated length of one run (default 75 min); the first WarmupFraction is not measured.
	SimDuration time.Duration
	// WarmupFraction of SimDuration excluded from the figures (default 0.25).
	WarmupFraction float64
	// TimeScale is simulated seconds per wall second (default 300).
	TimeScale float64
	// Parallel runs at once (default 6). Runs sleep most of the time (the simulator follows the wall clock), so
	// this may exceed the core count.
	Parallel int
	// Seed makes workloads reproducible (default 1).
	Seed int64
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

// workload generates the requests of a scenario.
type workload struct {
	seed     int64
	shiftAt  float64 // simulated seconds; 0 = no shift
	before   lengthDist
	after    lengthDist
	maxNew   int
	minInput int
	maxInput int
}

type lengthDist struct{ mean, sigma float64 }

// draw returns the i-th request's prompt length and natural output length.
func (w *workload) draw(i int64, simNow float64) (prompt, output int) {
	rng := rand.New(rand.NewPCG(uint64(w.seed), uint64(i)))
	prompt = w.minInput + rng.IntN(w.maxInput-w.minInput+1)
	d := w.before
	if w.shiftAt > 0 && simNow >= w.shiftAt {
		d = w.after
	}
	mu := math.Log(d.mean) - d.sigma*d.sigma/2
	output = max(1, int(math.Exp(mu+d.sigma*rng.NormFloat64())))
	return prompt, output
}

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
	shift.shiftAt = opts.SimDuration.Seconds() / 2
	return map[string]scenario{
		ScenarioOneServer: {name: ScenarioOneServer, pools: []int{sim.DefaultMaxTotalTokens}, work: base},
		ScenarioFleet:     {name: ScenarioFleet, pools: []int{80000, 160000, 320000}, work: base},
		ScenarioShift:     {name: ScenarioShift, pools: []int{sim.DefaultMaxTotalTokens}, work: shift},
	}
}

// runSpec is one run: a scenario's servers under one policy.
type runSpec struct {
	sc          scenario
	policy      string // generate.PolicyFixed or generate.PolicyKVBudget
	routing     string
	concurrency int
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
		opts.SimDuration = 75 * time.Minute
	}
	if opts.WarmupFraction <= 0 || opts.WarmupFraction >= 1 {
		opts.WarmupFraction = 0.25
	}
	if opts.TimeScale <= 0 {
		opts.TimeScale = 300
	}
	if opts.Parallel <= 0 {
		opts.Parallel = 6
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
	b := &bencher{opts: opts, sem: make(chan struct{}, opts.Parallel)}

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
	return results, ctx.Err()
}

// WriteTable prints results as an aligned table.
func WriteTable(w io.Writer, results []BenchResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tpolicy\ttok/s\tvs oracle\tretractions (steady/all)\tmean queue\tp50 latency s\tp99 latency s\tconcurrency\t")
	for _, r := range results {
		ratio := "-"
		if r.RatioToOracle > 0 {
			ratio = fmt.Sprintf("%.1f%%", 100*r.RatioToOracle)
		}
		conc := "-"
		if len(r.Concurrency) > 0 {
			conc = strings.Trim(strings.Join(strings.Fields(fmt.Sprint(r.Concurrency)), "/"), "[]")
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%s\t%d/%d\t%.1f\t%.0f\t%.0f\t%s\t\n", r.Scenario, r.Policy, r.TokPerS, ratio,
			r.Retractions, r.RetractionsTotal, r.MeanQueue, r.P50LatencyS, r.P99LatencyS, conc)
	}
	_ = tw.Flush()
}

type bencher struct {
	opts BenchOptions
	sem  chan struct{}
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
			best, err := b.sweep(ctx, one)
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
	var grid []int
	for f := 0.7; f <= 2.0; f *= 1.15 {
		grid = append(grid, int(math.Round(fit*f)))
	}
	if err := try(grid); err != nil {
		return nil, err
	}
	best := bestOf(tried)
	step := max(1, int(math.Round(float64(best.Concurrency[0])*0.07)))
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

// run executes one run and returns its figures (Policy left for the caller).
func (b *bencher) run(ctx context.Context, spec runSpec) (*BenchResult, error) {
	select {
	case b.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-b.sem }()
	opts := b.opts
	scale := opts.TimeScale
	simSeconds := func(d time.Duration) time.Duration { return time.Duration(float64(d) / scale) }

	var servers []*sim.Server
	var urls []string
	var https []*httptest.Server
	defer func() {
		for _, h := range https {
			h.CloseClientConnections()
			h.Close()
		}
		for _, s := range servers {
			_ = s.Close()
		}
	}()
	for i, pool := range spec.sc.pools {
		s, err := sim.New(sim.Config{MaxTotalTokens: pool, TimeScale: scale, OutputLenDistribution: sim.DistFixed,
			OutputLenMean: 1, Seed: opts.Seed + int64(i)})
		if err != nil {
			return nil, err
		}
		servers = append(servers, s)
		h := httptest.NewServer(s)
		https = append(https, h)
		urls = append(urls, h.URL)
	}
	quiet := opts.Logger
	ctl, err := generate.NewController(generate.Config{
		Endpoints:      urls,
		Policy:         spec.policy,
		Concurrency:    spec.concurrency,
		Routing:        spec.routing,
		RequestTimeout: time.Hour,
		RetryInitial:   time.Millisecond,
		RetryMax:       50 * time.Millisecond,
		HealthInterval: simSeconds(30 * time.Second),
		Budget:         generate.BudgetConfig{PollInterval: simSeconds(2 * time.Second)},
		Registerer:     prometheus.NewRegistry(),
		Logger:         quiet,
		HTTPClient: &http.Client{Transport: &http.Transport{MaxIdleConns: 8192, MaxIdleConnsPerHost: 8192,
			IdleConnTimeout: time.Minute}},
	})
	if err != nil {
		return nil, err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	ctlDone := make(chan struct{})
	go func() { defer close(ctlDone); _ = ctl.Run(runCtx) }()
	defer func() { stop(); <-ctlDone }()

	simNow := func() float64 { return servers[0].Stats().SimTime.Seconds() }
	duration := opts.SimDuration.Seconds()
	warmup := duration * opts.WarmupFraction

	// Backlog: enough concurrent callers that admission, not the feed, is the limit.
	backlog := 0
	for _, p := range spec.sc.pools {
		backlog += p/1000 + 200
	}
	var next atomic.Int64
	var latMu sync.Mutex
	var latencies []float64
	var workers sync.WaitGroup
	for range backlog {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for runCtx.Err() == nil {
				i := next.Add(1)
				prompt, out := spec.sc.work.draw(i, simNow())
				req := &generate.Request{
					RID:      fmt.Sprintf("req-%d", i),
					Key:      generate.LengthKey{Dataset: "bench", Lane: generate.DefaultLane},
					InputIDs: promptIDs(i, prompt),
					Sampling: generate.SamplingParams{MaxNewTokens: spec.sc.work.maxNew, MinNewTokens: min(out-1, spec.sc.work.maxNew)},
				}
				res, err := ctl.Do(runCtx, req)
				if err != nil {
					continue
				}
				if t := simNow(); t >= warmup {
					latMu.Lock()
					latencies = append(latencies, res.Response.MetaInfo.E2ELatency)
					latMu.Unlock()
				}
			}
		}()
	}

	// Sample the servers every 10 simulated seconds until the run's simulated duration passed.
	type snap struct {
		t                []float64
		gen, retr, queue []int64
		used, pool       []int64
	}
	take := func() snap {
		var s snap
		for _, srv := range servers {
			st := srv.Stats()
			s.t = append(s.t, st.SimTime.Seconds())
			s.gen = append(s.gen, st.GeneratedTokens)
			s.retr = append(s.retr, st.RetractionsTotal)
			s.queue = append(s.queue, int64(st.Waiting))
			s.used = append(s.used, int64(st.UsedTokens))
			s.pool = append(s.pool, int64(st.MaxTotalTokens))
		}
		return s
	}
	res := &BenchResult{Scenario: spec.sc.name}
	tick := time.NewTicker(simSeconds(10 * time.Second))
	defer tick.Stop()
	prev := take()
	var atWarmup *snap
	var queueSum float64
	var queueN int
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
		cur := take()
		smp := Sample{T: cur.t[0]}
		var used, pool int64
		for i := range servers {
			if dt := cur.t[i] - prev.t[i]; dt > 0 {
				smp.TokPerS += float64(cur.gen[i]-prev.gen[i]) / dt
			}
			smp.Queue += int(cur.queue[i])
			used += cur.used[i]
			pool += cur.pool[i]
		}
		smp.KVUsage = float64(used) / float64(pool)
		res.Series = append(res.Series, smp)
		if opts.Logger.Enabled(ctx, slog.LevelDebug) {
			for _, e := range ctl.Endpoints() {
				opts.Logger.Debug("sample", "policy", spec.policy, "t", int(smp.T), "tok_s", int(smp.TokPerS), "kv", fmt.Sprintf("%.2f", smp.KVUsage),
					"queue", smp.Queue, "budget", int(e.Budget), "charged", int(e.Used), "inflight", e.InFlight, "waiting", ctl.Waiting(),
					"est", ctl.Estimator().Expected(generate.LengthKey{Dataset: "bench", Lane: generate.DefaultLane}, 10240))
			}
		}
		if cur.t[0] >= warmup {
			if atWarmup == nil {
				c := cur
				atWarmup = &c
			} else {
				queueSum += float64(smp.Queue)
				queueN++
			}
		}
		prev = cur
		if cur.t[0] >= duration {
			break
		}
	}
	end := prev
	if atWarmup == nil {
		return nil, errors.New("bench: run ended before its warm-up")
	}
	for i := range servers {
		if dt := end.t[i] - atWarmup.t[i]; dt > 0 {
			res.TokPerS += float64(end.gen[i]-atWarmup.gen[i]) / dt
		}
		res.Retractions += end.retr[i] - atWarmup.retr[i]
		res.RetractionsTotal += end.retr[i]
	}
	if queueN > 0 {
		res.MeanQueue = queueSum / float64(queueN)
	}
	stop()
	workers.Wait()
	latMu.Lock()
	slices.Sort(latencies)
	res.P50LatencyS, res.P99LatencyS = quantile(latencies, 0.5), quantile(latencies, 0.99)
	latMu.Unlock()
	opts.Logger.Info("run", "scenario", spec.sc.name, "policy", spec.policy, "routing", spec.routing,
		"concurrency", spec.concurrency, "pools", spec.sc.pools, "tok_per_s", math.Round(res.TokPerS),
		"retractions", res.Retractions, "mean_queue", res.MeanQueue)
	return res, nil
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
