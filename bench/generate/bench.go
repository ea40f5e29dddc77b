// Package generate measures the generate stage's admission policies against the in-process SGLang simulator
// (sglang/sim): `draftflow-bench generate`. Each run is a deterministic discrete-event simulation:
// the simulated servers' engines run pass by pass on the bench's own clock (sim.NewManual), and the stage's
// Controller runs on the same clock (admission.Config.Clock), driven through Offer, Finish, Fail, Abandon,
// Probe, Health and Poll: the admission, output-length estimation, routing, health and budget code that
// Controller.Do and Controller.Run use. Everything the Controller learns travels through the stage's own
// sglang.Client over the simulators' real HTTP handlers, called in-process (simNet): /health and /server_info
// when a server comes up, /v1/loads and /metrics on every poll, /generate answers with their meta_info. No Kafka: a
// backlog of waiting requests is kept deep enough that the policy, not the feed, is the limit. The same seed
// gives the same figures on a busy or an idle machine.
//
// Steady-state scenarios measure, over a window after a warm-up, output tok/s, retractions, the servers'
// queue depth and request latency: one server (the reference run's 159,277-token pool); a heterogeneous
// fleet of three servers (pools of 80K, 160K and 320K tokens); one server whose workload's output lengths
// shift halfway. Finite scenarios run a dataset the size of one reference-run partition (14,700 prompts) on
// the fleet to its end and measure the makespan, once as is and once with the 160K server down for 10
// simulated minutes (its requests in flight lost, retried elsewhere) and a fourth server joining later. The
// workload is the reference run's: prompts of 1-4K tokens, heavy-tailed (lognormal) outputs clipped at 10,240 new
// tokens. Policies: fixed 150 in flight per server (the reference run), fixed 64 per server round-robin
// (SpecForge's default), the KV-budgeted controller with its defaults (what `draftflow generate` runs) and
// tuned for throughput, and the oracle: the best fixed concurrency per server, found by sweeping (on the
// fleet the sum of each server's own oracle; in a finite scenario the uniform concurrency with the shortest
// makespan, which `--policy fixed --concurrency N` runs).
//
// Two scenarios give the servers more than one client, each a Controller of its own (as separate processes
// are) polling the same simulated servers: ScenarioShared puts another client that keeps SharedPeerN
// requests on the reference server (a fixed-concurrency job) beside the policy, whose figures are then its
// own client's, measured against a fixed client with SharedPeerN in flight in its place; ScenarioReplicas
// splits the partition dataset between two replicas of the policy on the fleet and compares their makespan
// with one replica's, and the replicas' tok/s with each other.
//
// MultiTurn (`draftflow-bench generate --multi-turn`) runs conversations whose every assistant turn is
// generated, each later turn offered once the previous one is answered with the previous prompt, reply and a
// new user message as its prompt, through the same simulation twice: with affinity (Request.Prefer, the
// server that ran the previous turn) and without. It reports the prefill the servers computed and the prompt
// tokens their radix caches served (meta_info cached_tokens), the Controller's affinity hits and misses, the
// makespan and output tok/s of each mode.
//
// ScenarioLoops, run only when named, is ScenarioPartition with a share of the replies looping to
// max_new_tokens, each policy run with and without generate's loop stop (see loops.go).
package generate

import (
	"context"
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

	"golang.org/x/sync/errgroup"

	"github.com/draftflow/draftflow/sglang/sim"
	"github.com/draftflow/draftflow/stages/generate/admission"
)

// Scenario names.
const (
	ScenarioOneServer = "one-server"
	ScenarioFleet     = "fleet"
	ScenarioShift     = "shift"
	// ScenarioPartition is a finite dataset the size of one reference-run partition (14,700 prompts) on the
	// 80K/160K/320K fleet: the figure is the makespan.
	ScenarioPartition = "partition"
	// ScenarioPartitionOutage is ScenarioPartition with the 160K server down for 10 simulated minutes a third
	// into the run and a fourth server (160K) added about halfway.
	ScenarioPartitionOutage = "partition-outage"
	// ScenarioShared is one server (the reference pool) that another client shares: it keeps SharedPeerN
	// requests on the server (a fixed-concurrency client, such as another team's job), and the policy's
	// client runs beside it. Its oracle is the reference: a fixed client with SharedPeerN in flight
	// in the policy's place.
	ScenarioShared = "shared-server"
	// ScenarioReplicas is ScenarioPartition run by two replicas of the policy (two `draftflow generate`
	// processes, each with half the dataset's rows) on the same servers; it also runs one replica on the same
	// servers and dataset for the comparison (BenchResult.SingleMakespanS). It has no oracle.
	ScenarioReplicas = "two-replicas"
	// ScenarioSmallPool and ScenarioSmallPool1K are the live benchmark's dataset (`draftflow-bench sglang`'s
	// defaults) in the simulator: SmallPoolPrompts short chat prompts (16-28 tokens) whose outputs all run to
	// SmallPoolNewTokens (random weights never emit EOS), on one server with a KV pool of 512 or 1,024 tokens
	// (six or twelve requests at full length). Finite: the figure is the makespan, against fixed concurrencies
	// from 4 to 64 (smallPoolGrid), so the simulator's answer can be set beside the live server's.
	ScenarioSmallPool   = "small-pool"
	ScenarioSmallPool1K = "small-pool-1k"
)

// SmallPoolPrompts and SmallPoolNewTokens size the small-pool scenarios' dataset.
const (
	SmallPoolPrompts   = 32
	SmallPoolNewTokens = 64
)

// smallPoolGrid is the fixed concurrencies the small-pool scenarios' oracle tries (the live benchmark's 8,
// 16, 32 and 64, and the points between).
func smallPoolGrid() []int { return []int{4, 6, 8, 10, 12, 16, 24, 32, 64} }

// SharedPeerN is how many requests the other client of ScenarioShared keeps on the server: as many as the
// reference pool holds at the workload's mean length (159,277 tokens over a mean prompt of 2,560 and a mean
// output of 2,500, half of it generated on average: ~42; rounded to 40).
const SharedPeerN = 40

// Replicas is how many replicas of the policy run ScenarioReplicas.
const Replicas = 2

// PartitionPrompts is the size of one reference-run partition.
const PartitionPrompts = 14700

// Policy names.
const (
	PolicyFixed150  = "fixed-150"
	PolicyFixed64RR = "fixed-64-rr"
	PolicyKVBudget  = "kv-budget"
	// PolicyKVThroughput is the kv-budget controller tuned for throughput (--kv-safe-completions 4
	// --kv-headroom-outputs 4): a looser KV gate that runs the pool as full as SGLang's own
	// admission does, trading a few retractions for the last percent of tok/s.
	PolicyKVThroughput = "kv-budget-tput"
	PolicyOracle       = "oracle"
)

// The gate settings of PolicyKVThroughput (its --kv-safe-completions and --kv-headroom-outputs).
const (
	throughputSafeCompletions = 4
	throughputHeadroomOutputs = 4
)

// Scenarios lists every scenario, in report order.
func Scenarios() []string {
	return []string{ScenarioOneServer, ScenarioFleet, ScenarioShift, ScenarioPartition, ScenarioPartitionOutage,
		ScenarioShared, ScenarioReplicas, ScenarioSmallPool, ScenarioSmallPool1K}
}

// Policies lists every policy, in report order.
func Policies() []string {
	return []string{PolicyFixed150, PolicyFixed64RR, PolicyKVBudget, PolicyKVThroughput, PolicyOracle}
}

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
	// Prompts is the dataset size of the finite scenarios (default PartitionPrompts).
	Prompts int
	// Budget tunes the kv-budget policy (default: the stage's defaults, admission.BudgetConfig{}).
	Budget admission.BudgetConfig
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
	// MakespanS is the simulated seconds until the last prompt of a finite scenario finished (0: steady state).
	MakespanS float64 `json:"makespan_s,omitempty"`
	// ClientAborts counts requests the client aborted on a server that was still up (an attempt it gave up on
	// because it took the server for dead or restarted).
	ClientAborts int64 `json:"client_aborts"`
	// Default is true for the policy `draftflow generate` uses without policy flags.
	Default bool `json:"default,omitempty"`
	// ForeignTokPerS is, in a scenario with another client on the servers (ScenarioShared), that client's
	// output tok/s; TokPerS is then the policy's own client's and ServerTokPerS both together. A client's
	// tokens are those of the answers it received in the window.
	ForeignTokPerS float64 `json:"foreign_tok_per_s,omitempty"`
	ServerTokPerS  float64 `json:"server_tok_per_s,omitempty"`
	// SingleMakespanS is, in ScenarioReplicas, the makespan of one replica of the policy alone on the same
	// servers and dataset (MakespanS is the replicas').
	SingleMakespanS float64 `json:"single_makespan_s,omitempty"`
	// ReplicaTokPerS is each replica's output tok/s over the middle 80% of the run (ScenarioReplicas).
	ReplicaTokPerS []float64 `json:"replica_tok_per_s,omitempty"`
	// ReplicaBalance is the slowest replica's output tok/s over the fastest's, the least over the middle 80%
	// of the run and each quarter of it (ScenarioReplicas; 1: equal).
	ReplicaBalance float64 `json:"replica_balance,omitempty"`
	// LoopRows counts the dataset rows whose reply loops (ScenarioLoops).
	LoopRows int `json:"loop_rows,omitempty"`
	// OutputTokens is the output tokens of every answer of a finite run (ScenarioLoops; with the loop stop).
	OutputTokens int64 `json:"output_tokens,omitempty"`
	// RowsPerHour is the dataset's rows over the makespan, per simulated hour (ScenarioLoops; with the stop).
	RowsPerHour float64 `json:"rows_per_hour,omitempty"`
	// NoStopMakespanS, NoStopOutputTokens and NoStopRowsPerHour are, in ScenarioLoops, the same policy's
	// figures on the same dataset without the loop stop (each loop runs to max_new_tokens).
	NoStopMakespanS    float64 `json:"no_stop_makespan_s,omitempty"`
	NoStopOutputTokens int64   `json:"no_stop_output_tokens,omitempty"`
	NoStopRowsPerHour  float64 `json:"no_stop_rows_per_hour,omitempty"`
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
	// sharedPrefix is how many leading prompt tokens every request shares (a chat template's header and a
	// common instruction), which the servers' radix caches hold once; 0: none.
	sharedPrefix int
	// loops makes a share of the replies loop (ScenarioLoops; the zero value: none).
	loops loopModel
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
	// prompts makes the run finite: the dataset's size (0: steady state for SimDuration).
	prompts int
	outage  *outage     // a server that dies and restarts
	late    *lateServer // a server that joins later
	// conv, when set, makes the requests conversation turns (ScenarioMultiTurn) instead of work's independent
	// prompts; prompts is then the number of turns in all.
	conv *convWorkload
	// backlog is how many requests wait for admission while the dataset lasts (0: backlogDepth).
	backlog int
	// foreign, when set, is another client on the servers: it keeps foreign requests in flight on each (fixed
	// policy, headroom routing) with prompts of its own drawn from work, and keeps its backlog full.
	foreign int
	// replicas runs the policy as this many clients splitting the dataset (0: one).
	replicas int
	// grid is the fixed concurrencies a finite scenario's oracle tries (nil: finiteGrid).
	grid []int
}

// outage takes server slot down at at (simulated seconds) for dur.
type outage struct {
	slot    int
	at, dur float64
}

// lateServer is a server with a pool of pool tokens that starts at at.
type lateServer struct {
	pool int
	at   float64
}

func scenarios(opts BenchOptions) map[string]scenario {
	base := workload{seed: opts.Seed, before: lengthDist{2500, 0.9}, maxNew: 10240, minInput: 1024, maxInput: 4096}
	shift := base
	shift.before = lengthDist{1200, 0.8}
	shift.after = lengthDist{4000, 0.8}
	// The shift comes after the requests the reference server (~600 output tok/s) finishes in half the run.
	shift.shiftAt = int64(opts.SimDuration.Seconds() / 2 * referenceTokPerS / shift.before.mean)
	// Natural lengths far beyond max_new_tokens: every output runs to it, as the live model's do.
	small := workload{seed: opts.Seed, before: lengthDist{100 * SmallPoolNewTokens, 0.1}, maxNew: SmallPoolNewTokens,
		minInput: 23, maxInput: 26, sharedPrefix: 8}
	// The loop stop at generate's default thresholds (the run without it clears stop).
	looping := base
	looping.loops = loopModel{rate: LoopRate, period: LoopPeriod, stop: true}
	return map[string]scenario{
		ScenarioOneServer: {name: ScenarioOneServer, pools: []int{sim.DefaultMaxTotalTokens}, work: base},
		// The fleet's middle server is the reference pool (~160K), so its oracle sweep is the one-server one.
		ScenarioFleet: {name: ScenarioFleet, pools: []int{80000, sim.DefaultMaxTotalTokens, 320000}, work: base},
		ScenarioShift: {name: ScenarioShift, pools: []int{sim.DefaultMaxTotalTokens}, work: shift},
		ScenarioPartition: {name: ScenarioPartition, pools: []int{80000, sim.DefaultMaxTotalTokens, 320000}, work: base,
			prompts: opts.Prompts},
		// The fleet finishes a prompt about every 1.7 simulated seconds: the outage starts about a third into
		// the run, the fourth server joins about halfway.
		ScenarioPartitionOutage: {name: ScenarioPartitionOutage, pools: []int{80000, sim.DefaultMaxTotalTokens, 320000},
			work: base, prompts: opts.Prompts, outage: &outage{slot: 1, at: 0.5 * float64(opts.Prompts), dur: 600},
			late: &lateServer{pool: sim.DefaultMaxTotalTokens, at: 0.8 * float64(opts.Prompts)}},
		ScenarioShared: {name: ScenarioShared, pools: []int{sim.DefaultMaxTotalTokens}, work: base, foreign: SharedPeerN},
		ScenarioReplicas: {name: ScenarioReplicas, pools: []int{80000, sim.DefaultMaxTotalTokens, 320000}, work: base,
			prompts: opts.Prompts, replicas: Replicas},
		ScenarioSmallPool:   {name: ScenarioSmallPool, pools: []int{512}, work: small, prompts: SmallPoolPrompts, grid: smallPoolGrid()},
		ScenarioSmallPool1K: {name: ScenarioSmallPool1K, pools: []int{1024}, work: small, prompts: SmallPoolPrompts, grid: smallPoolGrid()},
		ScenarioLoops: {name: ScenarioLoops, pools: []int{80000, sim.DefaultMaxTotalTokens, 320000}, work: looping,
			prompts: opts.Prompts},
	}
}

// runSpec is one run: a scenario's servers under one policy.
type runSpec struct {
	sc          scenario
	policy      string // admission.PolicyFixed or admission.PolicyKVBudget
	routing     string
	concurrency int
	budget      *admission.BudgetConfig // overrides BenchOptions.Budget
	// affinity sets each later turn's Request.Prefer to the server that ran the previous turn (sc.conv).
	affinity bool
}

// Bench runs the selected scenarios under the selected policies, prints a table on w (unless opts.JSON) and
// returns one result per scenario and policy.
func Bench(ctx context.Context, opts BenchOptions, w io.Writer) ([]BenchResult, error) {
	if len(opts.Scenarios) == 0 {
		opts.Scenarios = Scenarios()
	}
	if len(opts.Policies) == 0 {
		opts.Policies = Policies()
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
	if opts.Prompts <= 0 {
		opts.Prompts = PartitionPrompts
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	all := scenarios(opts)
	for _, s := range opts.Scenarios {
		if _, ok := all[s]; !ok {
			return nil, fmt.Errorf("bench: unknown scenario %q (want %s)", s,
				strings.Join(append(Scenarios(), OptInScenarios()...), ", "))
		}
	}
	for _, p := range opts.Policies {
		if !slices.Contains(Policies(), p) {
			return nil, fmt.Errorf("bench: unknown policy %q (want %s)", p, strings.Join(Policies(), ", "))
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
			if p == PolicyOracle && sc.replicas > 1 {
				// Each policy's replicas are measured against one replica of the same policy instead.
				continue
			}
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
	fmt.Fprintln(tw, "scenario\tpolicy\ttok/s\tvs oracle\tmakespan s\tretractions (steady/all)\tclient aborts\tmean queue\tmean KV usage\tp50 latency s\tp99 latency s\tconcurrency\t")
	for _, r := range results {
		ratio := "-"
		if r.RatioToOracle > 0 {
			ratio = fmt.Sprintf("%.1f%%", 100*r.RatioToOracle)
		}
		conc := "-"
		if len(r.Concurrency) > 0 {
			conc = strings.Trim(strings.Join(strings.Fields(fmt.Sprint(r.Concurrency)), "/"), "[]")
		}
		makespan := "-"
		if r.MakespanS >= 100 {
			makespan = fmt.Sprintf("%.0f", r.MakespanS)
		} else if r.MakespanS > 0 {
			makespan = fmt.Sprintf("%.2f", r.MakespanS)
		}
		policy := r.policyLabel()
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%s\t%s\t%d/%d\t%d\t%.1f\t%.3f\t%.0f\t%.0f\t%s\t\n", r.Scenario, policy, r.TokPerS, ratio,
			makespan, r.Retractions, r.RetractionsTotal, r.ClientAborts, r.MeanQueue, r.MeanKVUsage, r.P50LatencyS, r.P99LatencyS, conc)
	}
	_ = tw.Flush()
	WriteSharingTable(w, results)
	WriteLoopTable(w, results)
}

// policyLabel is the result's policy as the tables name it: the default policy marked so.
func (r BenchResult) policyLabel() string {
	if r.Default {
		return r.Policy + " (default)"
	}
	return r.Policy
}

// WriteSharingTable prints the figures of the scenarios whose servers have more than one client
// (ScenarioShared, ScenarioReplicas) as a second table; it prints nothing when results have none.
func WriteSharingTable(w io.Writer, results []BenchResult) {
	var rows []BenchResult
	for _, r := range results {
		if r.ServerTokPerS > 0 || r.SingleMakespanS > 0 {
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tpolicy\town tok/s\tother client tok/s\tserver tok/s\tvs reference\tone replica makespan s\treplicas makespan s\treplicas/one\treplica tok/s\tbalance\t")
	for _, r := range rows {
		policy := r.policyLabel()
		own, other, server, ratio := "-", "-", "-", "-"
		single, many, mratio, reps, bal := "-", "-", "-", "-", "-"
		if r.ServerTokPerS > 0 {
			own, other, server = fmt.Sprintf("%.0f", r.TokPerS), fmt.Sprintf("%.0f", r.ForeignTokPerS), fmt.Sprintf("%.0f", r.ServerTokPerS)
			if r.RatioToOracle > 0 {
				ratio = fmt.Sprintf("%.1f%%", 100*r.RatioToOracle)
			}
		}
		if r.SingleMakespanS > 0 {
			single, many = fmt.Sprintf("%.0f", r.SingleMakespanS), fmt.Sprintf("%.0f", r.MakespanS)
			mratio = fmt.Sprintf("%.4f", r.MakespanS/r.SingleMakespanS)
			var parts []string
			for _, x := range r.ReplicaTokPerS {
				parts = append(parts, fmt.Sprintf("%.0f", x))
			}
			reps, bal = strings.Join(parts, "/"), fmt.Sprintf("%.3f", r.ReplicaBalance)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Scenario, policy, own, other, server, ratio,
			single, many, mratio, reps, bal)
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
		spec = runSpec{sc: sc, policy: admission.PolicyFixed, routing: admission.RouteHeadroom, concurrency: 150}
	case PolicyFixed64RR:
		spec = runSpec{sc: sc, policy: admission.PolicyFixed, routing: admission.RouteRoundRobin, concurrency: 64}
	case PolicyKVBudget:
		spec = runSpec{sc: sc, policy: admission.PolicyKVBudget, routing: admission.RouteHeadroom}
	case PolicyKVThroughput:
		budget := b.opts.Budget
		budget.SafeCompletions, budget.HeadroomOutputs = throughputSafeCompletions, throughputHeadroomOutputs
		spec = runSpec{sc: sc, policy: admission.PolicyKVBudget, routing: admission.RouteHeadroom, budget: &budget}
	case PolicyOracle:
		switch {
		case sc.foreign > 0:
			// On a shared server more in flight always takes more of it: the reference is a fixed client with
			// as many in flight as the other one, in the policy's place.
			spec = runSpec{sc: sc, policy: admission.PolicyFixed, routing: admission.RouteHeadroom, concurrency: sc.foreign}
		case sc.prompts > 0:
			best, err := b.finiteOracle(ctx, sc)
			if err != nil {
				return nil, err
			}
			return best, b.withoutStop(ctx, runSpec{sc: sc, policy: admission.PolicyFixed, routing: admission.RouteHeadroom,
				concurrency: best.Concurrency[0]}, best)
		default:
			return b.oracle(ctx, sc)
		}
	}
	r, err := b.run(ctx, spec)
	if err != nil {
		return nil, err
	}
	if sc.replicas > 1 {
		one := spec
		one.sc.replicas = 1
		single, err := b.run(ctx, one)
		if err != nil {
			return nil, err
		}
		r.SingleMakespanS = single.MakespanS
	}
	if err := b.withoutStop(ctx, spec, r); err != nil {
		return nil, err
	}
	r.Policy = policy
	r.Default = policy == PolicyKVBudget // what `draftflow generate` runs with no policy flags
	if spec.policy == admission.PolicyFixed {
		for range sc.pools {
			r.Concurrency = append(r.Concurrency, spec.concurrency)
		}
	}
	return r, nil
}

// withoutStop runs spec again without the loop stop, when its scenario has loops, and puts that run's
// figures in r.
func (b *bencher) withoutStop(ctx context.Context, spec runSpec, r *BenchResult) error {
	if spec.sc.work.loops.rate <= 0 || !spec.sc.work.loops.stop {
		return nil
	}
	spec.sc.work.loops.stop = false
	off, err := b.run(ctx, spec)
	if err != nil {
		return err
	}
	r.NoStopMakespanS, r.NoStopOutputTokens, r.NoStopRowsPerHour = off.MakespanS, off.OutputTokens, off.RowsPerHour
	return nil
}

// oracle sweeps fixed concurrencies for each server of sc alone and sums the best of each.
func (b *bencher) oracle(ctx context.Context, sc scenario) (*BenchResult, error) {
	total := &BenchResult{Scenario: sc.name, Policy: PolicyOracle}
	var g errgroup.Group
	bests := make([]*BenchResult, len(sc.pools))
	for i, pool := range sc.pools {
		g.Go(func() error {
			one := sc
			one.pools = []int{pool}
			var err error
			bests[i], err = b.sweepCached(ctx, one)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
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

// finiteGrid is the fixed concurrencies (per server) the finite scenarios' oracle tries.
var finiteGrid = []int{24, 32, 48, 64, 96, 150, 200}

// finiteOracle is the best fixed policy of a finite scenario: the uniform per-server concurrency (headroom
// routing, what --policy fixed --concurrency N runs) with the shortest makespan.
func (b *bencher) finiteOracle(ctx context.Context, sc scenario) (*BenchResult, error) {
	grid := finiteGrid
	if sc.grid != nil {
		grid = sc.grid
	}
	results := make([]*BenchResult, len(grid))
	errs := make([]error, len(grid))
	var wg sync.WaitGroup
	for i, c := range grid {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = b.run(ctx, runSpec{sc: sc, policy: admission.PolicyFixed, routing: admission.RouteHeadroom, concurrency: c})
		}()
	}
	wg.Wait()
	var best *BenchResult
	for i, r := range results {
		if errs[i] != nil {
			return nil, errs[i]
		}
		r.Concurrency = []int{grid[i]}
		if best == nil || r.MakespanS < best.MakespanS {
			best = r
		}
	}
	best.Policy = PolicyOracle
	b.opts.Logger.Info("finite oracle", "scenario", sc.name, "best_concurrency", best.Concurrency[0], "makespan_s", best.MakespanS)
	return best, nil
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
		var todo []int // chosen before any run starts: the runs write tried
		for _, c := range cs {
			if c >= 1 && tried[c] == nil && !slices.Contains(todo, c) {
				todo = append(todo, c)
			}
		}
		var g errgroup.Group
		var mu sync.Mutex
		for _, c := range todo {
			g.Go(func() error {
				r, err := b.run(ctx, runSpec{sc: sc, policy: admission.PolicyFixed, routing: admission.RouteHeadroom, concurrency: c})
				if err != nil {
					return err
				}
				r.Concurrency = []int{c}
				mu.Lock()
				tried[c] = r
				mu.Unlock()
				return nil
			})
		}
		return g.Wait()
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

// promptIDs builds a distinct prompt per request whose first shared tokens are the same in every request
// (the rest is not shared: the radix cache does not help beyond that prefix).
func promptIDs(i int64, n, shared int) []uint32 {
	ids := make([]uint32, n)
	x := uint32(i)*2654435761 + 1
	for j := range ids {
		if j < shared {
			ids[j] = 150000 + uint32(j)
			continue
		}
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		ids[j] = x % 150000
	}
	return ids
}
