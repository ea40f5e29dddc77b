package generate

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"text/tabwriter"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/draftflow/draftflow/sglang/sim"
	"github.com/draftflow/draftflow/stages/generate/admission"
)

// ScenarioMultiTurn names the multi-turn workload (MultiTurn): conversations whose every assistant turn is
// generated, each turn's prompt extending the previous turn's prompt and reply.
const ScenarioMultiTurn = "multi-turn"

// Multi-turn workload defaults (MultiTurnOptions).
const (
	DefaultConversations = 2000
	DefaultTurns         = 5
	DefaultServers       = 4
)

// turnGap is the simulated seconds between a turn's answer and the next turn's offer to the Controller: the
// reply's trip through the sink, the tokenize stage (which renders the next prompt) and Kafka.
const turnGap = 1.0

// MultiTurnOptions configures MultiTurn. Zero values are the documented defaults.
type MultiTurnOptions struct {
	// Conversations is the number of conversations (default DefaultConversations).
	Conversations int
	// Turns is the number of assistant turns generated per conversation (default DefaultTurns). Turn n+1 is
	// offered only after turn n's answer came back; its prompt is turn n's prompt, turn n's output ids and a
	// new user message (100-300 tokens), so it shares a prefix with turn n in the radix cache of the server
	// that ran turn n.
	Turns int
	// Servers is the number of simulated servers, each with the default KV pool (sim.DefaultMaxTotalTokens;
	// default DefaultServers).
	Servers int
	// Backlog is how many requests are kept waiting for admission at the Controller while conversations
	// remain to start (default 64, the policy bench's): a later turn is offered behind the requests already
	// waiting, so the deeper the backlog, the longer its prefix must survive in its server's radix cache.
	Backlog int
	// Seed makes the workload reproducible (default 1). Both modes run the same conversations.
	Seed int64
	// Budget tunes the kv-budget controller (default: the stage's defaults).
	Budget admission.BudgetConfig
	// Parallel runs at once (default: the number of CPUs, at most 2). It changes the wall time only.
	Parallel int
	// JSON makes MultiTurn print nothing on w (the caller prints the results as JSON).
	JSON bool
	// Logger receives progress (default: discard).
	Logger *slog.Logger
}

// MultiTurnResult is one routing mode's figures on the multi-turn workload.
type MultiTurnResult struct {
	// Affinity is true when each later turn was offered with Request.Prefer set to the server that ran the
	// previous turn, false when it had no preference.
	Affinity bool `json:"affinity"`
	// Conversations, Turns, Servers and Backlog describe the workload (MultiTurnOptions).
	Conversations int `json:"conversations"`
	Turns         int `json:"turns"`
	Servers       int `json:"servers"`
	Backlog       int `json:"backlog"`
	// Requests counts the turns generated.
	Requests int64 `json:"requests"`
	// PromptTokens is the servers' received prompt tokens (the sum of the turns' prompt lengths).
	PromptTokens int64 `json:"prompt_tokens"`
	// PrefillTokens is the tokens the servers computed in prefill (extend tokens, re-prefills included).
	PrefillTokens int64 `json:"prefill_tokens"`
	// CachedTokens is the sum of the answers' meta_info cached_tokens: prompt tokens served from the radix
	// cache, prefill saved.
	CachedTokens int64 `json:"cached_tokens"`
	// CacheHitRate is CachedTokens over PromptTokens.
	CacheHitRate float64 `json:"cache_hit_rate"`
	// OutputTokens is the tokens generated over all turns.
	OutputTokens int64 `json:"output_tokens"`
	// MakespanS is the simulated seconds until the last turn finished.
	MakespanS float64 `json:"makespan_s"`
	// TokPerS is OutputTokens per simulated second over the makespan.
	TokPerS float64 `json:"tok_per_s"`
	// AffinityHits and AffinityMisses are the Controller's draftflow_generate_affinity_total{result}: later
	// turns admitted to their preferred server, and elsewhere (0 without affinity).
	AffinityHits   int64 `json:"affinity_hits"`
	AffinityMisses int64 `json:"affinity_misses"`
	// SameServer counts later turns that ran on the server of their previous turn, whatever the mode (without
	// affinity: by chance).
	SameServer int64 `json:"same_server"`
	// Retractions counts requests the servers retracted.
	Retractions int64 `json:"retractions"`
	// P50LatencyS and P99LatencyS are turn latencies (server e2e, simulated seconds).
	P50LatencyS float64 `json:"p50_latency_s"`
	P99LatencyS float64 `json:"p99_latency_s"`
}

// convWorkload is the multi-turn workload: every length and token id depends on the seed, the conversation
// and the turn only (replies' ids are the simulators' own, the same in both modes for the same prompt, rid
// and seed), so both modes work through the same conversations.
type convWorkload struct {
	seed          int64
	conversations int
	turns         int
	// The first prompt (system + user message) has firstMin-firstMax tokens, each later user message (or
	// tool results) userMin-userMax.
	firstMin, firstMax int
	userMin, userMax   int
	// reply is the natural reply length's distribution, at least minReply, clipped at max_new_tokens.
	reply    lengthDist
	minReply int
}

// defaultConvWorkload is the documented workload: prompts of 1-2K tokens, replies of a few hundred tokens
// (lognormal, mean 350), user messages of 100-300 tokens.
func defaultConvWorkload(seed int64, conversations, turns int) *convWorkload {
	return &convWorkload{seed: seed, conversations: conversations, turns: turns, firstMin: 1024, firstMax: 2048,
		userMin: 100, userMax: 300, reply: lengthDist{350, 0.6}, minReply: 16}
}

// rng is the generator of conversation c's turn t (what: 0 the user message, 1 the reply length).
func (w *convWorkload) rng(c, t, what int) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(w.seed), uint64(c)<<16|uint64(t)<<2|uint64(what)))
}

// user returns the ids of the user message that opens turn t of conversation c (the system prompt and first
// user message for t == 0).
func (w *convWorkload) user(c, t int) []uint32 {
	rng := w.rng(c, t, 0)
	lo, hi := w.userMin, w.userMax
	if t == 0 {
		lo, hi = w.firstMin, w.firstMax
	}
	ids := make([]uint32, lo+rng.IntN(hi-lo+1))
	for i := range ids {
		ids[i] = uint32(rng.IntN(150000))
	}
	return ids
}

// replyLen returns the natural length of turn t's reply in conversation c.
func (w *convWorkload) replyLen(c, t, maxNew int) int {
	rng := w.rng(c, t, 1)
	mu := math.Log(w.reply.mean) - w.reply.sigma*w.reply.sigma/2
	return min(maxNew, max(w.minReply, int(math.Exp(mu+w.reply.sigma*rng.NormFloat64()))))
}

// turnRow is one turn to generate.
type turnRow struct {
	conv, turn int
	ids        []uint32
	out        int    // natural reply length
	prefer     string // the server that ran the previous turn ("" for the first)
}

// turnFigures are a run's multi-turn figures, besides its BenchResult.
type turnFigures struct {
	requests, prompt, prefill, cached, output, sameServer int64
	hits, misses                                          int64
}

// multiTurnMaxNew is the max_new_tokens of every turn.
const multiTurnMaxNew = 2048

// MultiTurn runs the multi-turn workload twice on the same seed, with affinity (each later turn prefers the
// server that ran the previous one) and without, through the kv-budget Controller (the stage's default policy
// and routing), prints a table on w (unless opts.JSON) and returns the two results, affinity first.
func MultiTurn(ctx context.Context, opts MultiTurnOptions, w io.Writer) ([]MultiTurnResult, error) {
	if opts.Conversations <= 0 {
		opts.Conversations = DefaultConversations
	}
	if opts.Turns <= 0 {
		opts.Turns = DefaultTurns
	}
	if opts.Servers <= 0 {
		opts.Servers = DefaultServers
	}
	if opts.Backlog <= 0 {
		opts.Backlog = backlogDepth
	}
	if opts.Seed == 0 {
		opts.Seed = 1
	}
	if opts.Parallel <= 0 {
		opts.Parallel = min(2, runtime.NumCPU())
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	pools := make([]int, opts.Servers)
	for i := range pools {
		pools[i] = sim.DefaultMaxTotalTokens
	}
	sc := scenario{name: ScenarioMultiTurn, pools: pools,
		work: workload{seed: opts.Seed, maxNew: multiTurnMaxNew},
		conv: defaultConvWorkload(opts.Seed, opts.Conversations, opts.Turns),
		// Every turn is a request: the run ends when the last turn of the last conversation is answered.
		prompts: opts.Conversations * opts.Turns, backlog: opts.Backlog}
	b := &bencher{opts: BenchOptions{Seed: opts.Seed, Budget: opts.Budget, Logger: opts.Logger},
		sem: make(chan struct{}, opts.Parallel)}
	results := make([]MultiTurnResult, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, affinity := range []bool{true, false} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, tf, err := b.runFull(ctx, runSpec{sc: sc, policy: admission.PolicyKVBudget, routing: admission.RouteHeadroom,
				affinity: affinity})
			if err != nil {
				errs[i] = err
				return
			}
			results[i] = MultiTurnResult{Affinity: affinity, Conversations: opts.Conversations, Turns: opts.Turns,
				Servers: opts.Servers, Backlog: opts.Backlog, Requests: tf.requests, PromptTokens: tf.prompt, PrefillTokens: tf.prefill,
				CachedTokens: tf.cached, OutputTokens: tf.output, MakespanS: r.MakespanS, TokPerS: r.TokPerS,
				AffinityHits: tf.hits, AffinityMisses: tf.misses, SameServer: tf.sameServer,
				Retractions: r.RetractionsTotal, P50LatencyS: r.P50LatencyS, P99LatencyS: r.P99LatencyS}
			if tf.prompt > 0 {
				results[i].CacheHitRate = float64(tf.cached) / float64(tf.prompt)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	if !opts.JSON && w != nil {
		WriteMultiTurnTable(w, results)
	}
	return results, ctx.Err()
}

// WriteMultiTurnTable prints MultiTurn's results as an aligned table, with a last row of ratios (the first
// result over the second: affinity on over off).
func WriteMultiTurnTable(w io.Writer, results []MultiTurnResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "affinity\tbacklog\tturns\tprompt tokens\tprefill tokens\tcached tokens\tcache hit\tsame server\thits/misses\toutput tok/s\tmakespan s\tretractions\tp50 latency s\tp99 latency s\t")
	for _, r := range results {
		mode := "off"
		if r.Affinity {
			mode = "on"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%.1f%%\t%d\t%d/%d\t%.0f\t%.0f\t%d\t%.1f\t%.1f\t\n", mode, r.Backlog, r.Requests, r.PromptTokens,
			r.PrefillTokens, r.CachedTokens, 100*r.CacheHitRate, r.SameServer, r.AffinityHits, r.AffinityMisses, r.TokPerS,
			r.MakespanS, r.Retractions, r.P50LatencyS, r.P99LatencyS)
	}
	if len(results) == 2 {
		a, b := results[0], results[1]
		ratio := func(x, y float64) string {
			if y == 0 {
				return "-"
			}
			return fmt.Sprintf("x%.3f", x/y)
		}
		fmt.Fprintf(tw, "on/off\t\t\t%s\t%s\t%s\t\t\t\t%s\t%s\t\t%s\t%s\t\n", ratio(float64(a.PromptTokens), float64(b.PromptTokens)),
			ratio(float64(a.PrefillTokens), float64(b.PrefillTokens)), ratio(float64(a.CachedTokens), float64(b.CachedTokens)),
			ratio(a.TokPerS, b.TokPerS), ratio(a.MakespanS, b.MakespanS), ratio(a.P50LatencyS, b.P50LatencyS),
			ratio(a.P99LatencyS, b.P99LatencyS))
	}
	_ = tw.Flush()
}

// affinityCounts reads the Controller's draftflow_generate_affinity_total from its registry.
func affinityCounts(reg *prometheus.Registry) (hits, misses int64, err error) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, 0, err
	}
	for _, mf := range mfs {
		if mf.GetName() != "draftflow_generate_affinity_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() != "result" {
					continue
				}
				switch l.GetValue() {
				case "hit":
					hits += int64(m.GetCounter().GetValue())
				case "miss":
					misses += int64(m.GetCounter().GetValue())
				}
			}
		}
	}
	return hits, misses, nil
}
