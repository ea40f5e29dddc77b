// Package pipeline is the benchmark of `draftflow-bench pipeline`: the whole pipeline, in process, against the
// embedded broker and (optionally) a real Kafka cluster, side by side on the same synthetic dataset, with an
// instant simulated engine so that the broker hops, the tokenizer and the sink are what is measured.
package pipeline

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/embedded"
	runner "github.com/draftflow/draftflow/pipeline"
	"github.com/draftflow/draftflow/stages/tokenize"
	"github.com/draftflow/draftflow/topics"
)

// Options configures Run; zero values are documented defaults.
type Options struct {
	// Brokers is a real cluster to measure next to the embedded broker (nil: embedded only).
	Brokers []string
	// Security is how to reach Brokers (TLS, SASL); the embedded broker is reached without.
	Security kafka.Security
	// Records is the number of synthetic conversations (default 10000).
	Records int
	// Partitions of the benchmark topics (default kafka.DefaultPartitions).
	Partitions int
	// PromptWords is the mean length of a conversation in words (default 120).
	PromptWords int
	// OutputTokens is the simulated engine's fixed completion length (default 32).
	OutputTokens int
	// Seed of the synthetic dataset (default 1).
	Seed uint64
	// Repeat runs the pipeline this many times on each broker, alternating brokers, and summarises each by
	// its median run (default 1). On a shared machine, several interleaved runs keep the comparison fair.
	Repeat int
	// Timeout bounds each pipeline run (default 10 min).
	Timeout time.Duration
	// Logger receives the pipeline's logs (default: warnings and errors on stderr).
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.Records <= 0 {
		o.Records = 10000
	}
	if o.Partitions <= 0 {
		o.Partitions = kafka.DefaultPartitions
	}
	if o.PromptWords <= 0 {
		o.PromptWords = 120
	}
	if o.OutputTokens <= 0 {
		o.OutputTokens = 32
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Repeat <= 0 {
		o.Repeat = 1
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return o
}

// Result is the throughput of one pipeline run.
type Result struct {
	// Broker is "embedded" or "kafka" (a real cluster).
	Broker string `json:"broker"`
	// Addr is the bootstrap address the run used.
	Addr string `json:"addr"`
	// Run numbers the repetitions of one broker from 1.
	Run int `json:"run"`
	// Records is the number of rows in the shards at the end (every prompt, exactly once).
	Records int `json:"records"`
	// Tokens is the number of tokens (prompt + completion) in the shards.
	Tokens int64 `json:"tokens"`
	// Seconds is the wall time from the first stage starting to the last row being durable.
	Seconds float64 `json:"seconds"`
	// RecordsPerSecond and TokensPerSecond are Records and Tokens over Seconds.
	RecordsPerSecond float64 `json:"records_per_s"`
	TokensPerSecond  float64 `json:"tokens_per_s"`
}

// Summary is one broker's runs in short: its median run by records/s, and its best.
type Summary struct {
	Broker string `json:"broker"`
	Addr   string `json:"addr"`
	Runs   int    `json:"runs"`
	// Median is the run with the median records/s; Best the fastest.
	Median Result `json:"median"`
	Best   Result `json:"best"`
}

// Report is what Run found: `draftflow-bench pipeline --json` prints it.
type Report struct {
	Records      int       `json:"records"`
	Partitions   int       `json:"partitions"`
	OutputTokens int       `json:"output_tokens"`
	Repeat       int       `json:"repeat"`
	Runs         []Result  `json:"runs"`
	Summary      []Summary `json:"summary"`
	// Ratio is the real cluster's median records/s over the embedded broker's (0 without a real cluster).
	Ratio float64 `json:"ratio,omitempty"`
}

// Run generates the synthetic dataset once, then runs the whole pipeline on it against the embedded
// broker and, when o.Brokers is set, against that cluster.
func Run(ctx context.Context, o Options) (*Report, error) {
	o = o.withDefaults()
	tmp, err := os.MkdirTemp("", "draftflow-bench-pipeline-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	input := filepath.Join(tmp, "synthetic.jsonl")
	if err := WriteSyntheticDataset(input, o.Records, o.PromptWords, o.Seed); err != nil {
		return nil, err
	}
	model, cleanup, err := tokenize.LoadModelOrBundled("")
	defer cleanup()
	if err != nil {
		return nil, err
	}

	rep := &Report{Records: o.Records, Partitions: o.Partitions, OutputTokens: o.OutputTokens, Repeat: o.Repeat}
	targets := []string{"embedded"}
	if len(o.Brokers) > 0 {
		targets = append(targets, "kafka")
	}
	for run := 1; run <= o.Repeat; run++ {
		for _, target := range targets {
			res, err := runOnce(ctx, o, target, input, filepath.Join(tmp, fmt.Sprintf("out-%s-%d", target, run)), model)
			if err != nil {
				return nil, fmt.Errorf("bench pipeline: %s (run %d): %w", target, run, err)
			}
			res.Run = run
			rep.Runs = append(rep.Runs, *res)
		}
	}
	for _, target := range targets {
		var runs []Result
		for _, r := range rep.Runs {
			if r.Broker == target {
				runs = append(runs, r)
			}
		}
		slices.SortFunc(runs, func(a, b Result) int { return cmp.Compare(a.RecordsPerSecond, b.RecordsPerSecond) })
		rep.Summary = append(rep.Summary, Summary{Broker: target, Addr: runs[0].Addr, Runs: len(runs),
			Median: runs[len(runs)/2], Best: runs[len(runs)-1]})
	}
	if len(rep.Summary) == 2 && rep.Summary[0].Median.RecordsPerSecond > 0 {
		rep.Ratio = rep.Summary[1].Median.RecordsPerSecond / rep.Summary[0].Median.RecordsPerSecond
	}
	return rep, nil
}

// runOnce runs the pipeline once on target ("embedded": a fresh embedded broker; "kafka": o.Brokers)
// in a namespace of its own, writing shards under out (removed afterwards).
func runOnce(ctx context.Context, o Options, target, input, out string, model *tokenize.Model) (*Result, error) {
	brokers := o.Brokers
	if target == "embedded" {
		e, err := embedded.Start(embedded.Config{})
		if err != nil {
			return nil, err
		}
		defer e.Close()
		brokers = e.Brokers()
		o.Security = kafka.Security{}
	}
	kc := kafka.Config{
		Brokers:    brokers,
		Partitions: o.Partitions,
		Security:   o.Security, // none for the embedded broker (plaintext only)
		Namespace:  fmt.Sprintf("draftflow-bench-%x", rand.Uint64()),
		Logger:     o.Logger,
	}
	// Topics are created, and their partitions serving (EnsureTopics waits for that), before the clock starts;
	// the run then reuses them.
	kcl, err := kafka.NewClient(kc)
	if err != nil {
		return nil, err
	}
	defer kcl.Close()
	tctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	err = kcl.Admin().EnsureTopics(tctx, topics.Retained()...)
	cancel()
	if target == "kafka" {
		defer deleteTopics(ctx, kcl, o.Logger)
	}
	if err != nil {
		return nil, err
	}
	var rc runner.Config
	rc.Client = kcl
	rc.Ingest.Inputs = []string{input}
	rc.Ingest.Dataset = "synthetic"
	rc.Ingest.Defaults.MaxNewTokens = o.OutputTokens
	rc.Tokenize.Model = model
	rc.Sink.Dir = out
	defer os.RemoveAll(out)
	// The tail of a finite input lands once the sink sees no record for IdleFlush: keep that short so the
	// figure is the pipeline's rate, not the sink's idle timer.
	rc.Sink.IdleFlush = 100 * time.Millisecond
	rc.Sim.Instant = true
	rc.Sim.OutputLenDistribution = "fixed"
	rc.Sim.OutputLenMean = float64(o.OutputTokens)
	rc.Timeout = o.Timeout
	rc.Logger = o.Logger
	o.Logger.Info("bench pipeline: running", "broker", target, "addr", strings.Join(brokers, ","), "records", o.Records)
	res, err := runner.Run(ctx, rc)
	if err != nil {
		return nil, err
	}
	if len(res.Missing) > 0 || res.Written != o.Records {
		return nil, fmt.Errorf("%d of %d records written, %d missing, %d rejected",
			res.Written, o.Records, len(res.Missing), res.PipelineRejected+res.IngestRejected)
	}
	secs := res.Elapsed.Seconds()
	return &Result{
		Broker: target, Addr: strings.Join(brokers, ","), Records: res.Written, Tokens: res.Tokens, Seconds: secs,
		RecordsPerSecond: float64(res.Written) / secs, TokensPerSecond: float64(res.Tokens) / secs,
	}, nil
}

// deleteTopics removes a benchmark's namespaced topics from a real cluster, so repeated runs leave nothing behind.
func deleteTopics(ctx context.Context, kcl *kafka.Client, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	err := kcl.Admin().DeleteTopics(ctx, topics.Retained()...)
	if err != nil {
		log.Warn("bench pipeline: could not delete the benchmark topics", "namespace", kcl.Config().Namespace, "err", err)
	}
}

// WriteTable writes rep as the tables `draftflow-bench pipeline` prints: every run, the medians with Repeat, and
// the ratio of the real cluster to the embedded broker.
func (rep *Report) WriteTable(w io.Writer) error {
	if _, err := fmt.Fprintf(w, "pipeline throughput: %d synthetic conversations, %d partitions, instant engine with %d-token completions\n\n",
		rep.Records, rep.Partitions, rep.OutputTokens); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "broker\taddress\trun\trecords\ttokens\tseconds\trecords/s\ttokens/s\t")
	for _, r := range rep.Runs {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%.2f\t%.0f\t%.0f\t\n", r.Broker, r.Addr, r.Run, r.Records, r.Tokens, r.Seconds,
			r.RecordsPerSecond, r.TokensPerSecond)
	}
	if err := tw.Flush(); err != nil { // the tabwriter's writes fail with w's error, reported here
		return err
	}
	if rep.Repeat > 1 {
		fmt.Fprintf(w, "\nmedian of %d runs each:\n", rep.Repeat)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "broker\trecords/s\ttokens/s\tbest records/s\tbest tokens/s\t")
		for _, s := range rep.Summary {
			fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.0f\t%.0f\t\n", s.Broker, s.Median.RecordsPerSecond, s.Median.TokensPerSecond,
				s.Best.RecordsPerSecond, s.Best.TokensPerSecond)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if rep.Ratio > 0 {
		_, err := fmt.Fprintf(w, "\nreal Kafka / embedded (records/s): %.2fx\n", rep.Ratio)
		return err
	}
	return nil
}

// syntheticWords is the vocabulary of synthetic conversations: plain English, so the bundled BPE tokenizer
// splits it the way it splits real text.
var syntheticWords = strings.Fields(`the a of to and in is that for it as with was on be by this are from at or an
have not which but can has more one all their they there been will would about into these other some when what
time only its also over after than first new most two used such between many through during system data model
token stream broker partition record offset group replica shard engine request batch prompt answer reason
explain describe compare why how simple careful quick long short history science music river mountain garden
kitchen network protocol memory cache queue worker signal market health energy travel language library window`)

// SyntheticText returns n words drawn from syntheticWords, ending with a period.
func SyntheticText(r *rand.Rand, n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(syntheticWords[r.IntN(len(syntheticWords))])
	}
	b.WriteByte('.')
	return b.String()
}

// WriteSyntheticDataset writes n deterministic conversations ("synth-000000", ...) to path as JSONL: some with a
// system prompt, some multi-turn, about meanWords words each.
func WriteSyntheticDataset(path string, n, meanWords int, seed uint64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	for i := 0; i < n; i++ {
		words := max(4, meanWords/2+r.IntN(meanWords+1))
		var msgs []msg
		if r.IntN(4) == 0 {
			msgs = append(msgs, msg{"system", SyntheticText(r, 12)})
		}
		turns := 1 + r.IntN(3)
		for t := 0; t < turns; t++ {
			share := max(1, words/(2*turns-1))
			if t > 0 {
				msgs = append(msgs, msg{"assistant", SyntheticText(r, share)})
			}
			msgs = append(msgs, msg{"user", SyntheticText(r, share)})
		}
		if err := enc.Encode(struct {
			ID       string `json:"id"`
			Messages []msg  `json:"messages"`
		}{fmt.Sprintf("synth-%06d", i), msgs}); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
