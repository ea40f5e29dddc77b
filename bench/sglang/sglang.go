// Package sglang is the benchmark of the generate stage against a live SGLang server (draftflow-bench
// sglang, make bench-sglang): it starts the real server (deploy/sglang/sglang.sh) at each KV pool size, runs
// one finite dataset through draftflow's own run command under each policy (the default, --policy fixed at
// several concurrencies, the best uniform concurrency found by a sweep) and through SGLang's own
// bench_serving as an outside baseline, in interleaved repeats with the policy order rotated each repeat,
// and reports per pool and policy the median and range of the makespan, output tokens/s, the server's
// retractions and its queue.
//
// Every figure comes from the server, so draftflow and bench_serving are measured alike: the makespan is the
// time the server had a request running or waiting (its /v1/loads sampled every PollInterval, from the first
// sample with work to the first idle sample after the last), output tokens the delta of
// sglang:generation_tokens_total, retractions the delta of sglang:num_retracted_requests_total (absent until
// the first retraction), and the queue the mean and peak of num_waiting_reqs over the busy samples. Between
// runs the server is idle and its radix cache flushed, so no run reuses another's prefixes.
package sglang

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Options configure one benchmark.
type Options struct {
	Script       string        // path of deploy/sglang/sglang.sh
	Draftflow    string        // the draftflow binary whose run command is measured
	Model        string        // model directory (sglang.sh model); empty: the script's default model
	Pools        []int         // KV pool sizes (--max-total-tokens), one server each
	Prompts      int           // dataset size
	NewTokens    int           // max_new_tokens of every request (ignore_eos false)
	Fixed        []int         // --policy fixed --concurrency values run in every repeat
	Sweep        []int         // concurrencies run once before the repeats; the best joins them if new
	Repeats      int           // interleaved repeats per policy
	BenchServing bool          // also run SGLang's bench_serving
	WorkDir      string        // datasets, run outputs and the server state go under it
	ServerArgs   []string      // more arguments for every server
	PollInterval time.Duration // /v1/loads sampling interval (default 250ms)
	RunTimeout   time.Duration // one run's limit (default 20m)
	URL          string        // an already running server (with --enable-metrics) to use instead of starting one per pool
	LoopActions  []string      // --loop-action values the default policy also runs with, each a policy of its own ("default --loop-action mark")
	Logger       *slog.Logger
}

// Run is one measured run of one policy.
type Run struct {
	Pool        int     `json:"pool"`
	Policy      string  `json:"policy"`
	Repeat      int     `json:"repeat"` // 0: the sweep, -1: the warm-up pass
	Makespan    float64 `json:"makespan_s"`
	OutputToks  float64 `json:"output_tokens"`
	TokPerSec   float64 `json:"output_tok_per_s"`
	Retractions float64 `json:"retractions"`
	MeanQueue   float64 `json:"mean_queue"`
	MaxQueue    int     `json:"max_queue"`
	MeanRunning float64 `json:"mean_running"`
	MaxRunning  int     `json:"max_running"`
	ClientWall  float64 `json:"client_wall_s"` // the client process from start to exit
	ClientCPU   float64 `json:"client_cpu_s"`  // the client process's user and system CPU time
	Loops       int     `json:"loops"`         // replies the client's log says it found in a repetition loop
}

// Stat is the median and range of one figure over the repeats.
type Stat struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// Row summarises one policy on one pool.
type Row struct {
	Pool        int     `json:"pool"`
	Policy      string  `json:"policy"`
	Repeats     int     `json:"repeats"`
	Makespan    Stat    `json:"makespan_s"`
	TokPerSec   Stat    `json:"output_tok_per_s"`
	Retractions Stat    `json:"retractions"`
	MeanQueue   Stat    `json:"mean_queue"`
	MaxRunning  Stat    `json:"max_running"`
	VsBestFixed float64 `json:"makespan_vs_best_fixed"` // median makespan / the best fixed policy's median
	// CPUPerKTok is the client's CPU milliseconds per thousand output tokens (the whole draftflow run process:
	// embedded broker, stages, sink).
	CPUPerKTok Stat `json:"client_cpu_ms_per_1k_tokens"`
	OutputToks Stat `json:"output_tokens"`
	Loops      Stat `json:"loops"`
}

// Result is the whole benchmark.
type Result struct {
	Prompts   int    `json:"prompts"`
	NewTokens int    `json:"new_tokens"`
	Repeats   int    `json:"repeats"`
	Rows      []Row  `json:"rows"`
	Runs      []Run  `json:"runs"`
	Started   string `json:"started"`
	Finished  string `json:"finished"`
}

// Default policy names.
const (
	PolicyDefault = "default"
	loopPrefix    = "default --loop-action "
	fixedPrefix   = "fixed "
	servingPrefix = "bench_serving "
)

// Bench runs the benchmark; the table is written to w as pools finish.
func Bench(ctx context.Context, o Options, w io.Writer) (*Result, error) {
	if o.PollInterval <= 0 {
		o.PollInterval = 250 * time.Millisecond
	}
	if o.RunTimeout <= 0 {
		o.RunTimeout = 20 * time.Minute
	}
	if o.Repeats < 1 || o.Prompts < 1 || o.NewTokens < 1 || len(o.Pools) == 0 {
		return nil, errors.New("bench sglang: need at least one pool, prompt, new token and repeat")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(filepath.Join(o.WorkDir, "runs"), 0o755); err != nil {
		return nil, err
	}
	if o.Model == "" {
		out, err := exec.CommandContext(ctx, "bash", o.Script, "model").Output()
		if err != nil {
			return nil, fmt.Errorf("bench sglang: %s model: %w", o.Script, err)
		}
		o.Model = lastLine(out)
	}
	data, serving, err := writeDataset(o.WorkDir, o.Prompts)
	if err != nil {
		return nil, err
	}
	res := &Result{Prompts: o.Prompts, NewTokens: o.NewTokens, Repeats: o.Repeats, Started: time.Now().UTC().Format(time.RFC3339)}
	if o.URL != "" {
		var info struct {
			Pool int `json:"max_total_num_tokens"`
		}
		if err := getJSON(ctx, o.URL+"/server_info", &info); err != nil {
			return nil, fmt.Errorf("bench sglang: %w", err)
		}
		o.Pools = []int{info.Pool}
	}
	for _, pool := range o.Pools {
		b := &poolBench{o: o, pool: pool, data: data, serving: serving}
		runs, err := b.run(ctx)
		res.Runs = append(res.Runs, runs...)
		if err != nil {
			return res, err
		}
		rows := Summarise(runs)
		res.Rows = append(res.Rows, rows...)
		if w != nil {
			WriteTable(w, rows, o.Prompts, o.NewTokens)
		}
	}
	res.Finished = time.Now().UTC().Format(time.RFC3339)
	return res, nil
}

type poolBench struct {
	o             Options
	pool          int
	data, serving string
	url           string
	name          string
}

func (b *poolBench) run(ctx context.Context) ([]Run, error) {
	if b.o.URL != "" {
		b.url = b.o.URL
		return b.policies(ctx)
	}
	b.name = fmt.Sprintf("bench-%d", b.pool)
	args := append([]string{b.o.Script, "up", "--name", b.name, "--model", b.o.Model, "--pool", strconv.Itoa(b.pool), "--"}, b.o.ServerArgs...)
	cmd := exec.CommandContext(ctx, "bash", args...)
	cmd.Stderr = os.Stderr
	cmd.Env = append(os.Environ(), "DRAFTFLOW_SGLANG_DIR="+filepath.Join(b.o.WorkDir, "servers"))
	b.o.Logger.Info("starting the server", "pool", b.pool)
	out, err := cmd.Output()
	defer func() {
		down := exec.Command("bash", b.o.Script, "down", "--name", b.name)
		down.Env = cmd.Env
		down.Stderr = os.Stderr
		_ = down.Run()
	}()
	if err != nil {
		return nil, fmt.Errorf("bench sglang: server with pool %d: %w", b.pool, err)
	}
	b.url = lastLine(out)
	return b.policies(ctx)
}

// policies runs the sweep and the repeats on the started server.
func (b *poolBench) policies(ctx context.Context) ([]Run, error) {
	var runs []Run
	// A fresh server's first requests run slower (allocations, first shapes): one unmeasured pass of the
	// dataset first, so that no policy pays for it.
	if _, err := b.measure(ctx, fixedPrefix+strconv.Itoa(b.o.Prompts), -1); err != nil {
		return runs, err
	}
	policies := []string{PolicyDefault}
	for _, a := range b.o.LoopActions {
		policies = append(policies, loopPrefix+a)
	}
	for _, c := range b.o.Fixed {
		policies = append(policies, fixedPrefix+strconv.Itoa(c))
	}
	best := 0
	if len(b.o.Sweep) > 0 {
		bestSpan := math.Inf(1)
		for _, c := range b.o.Sweep {
			r, err := b.measure(ctx, fixedPrefix+strconv.Itoa(c), 0)
			if err != nil {
				return runs, err
			}
			runs = append(runs, r)
			if r.Makespan < bestSpan {
				best, bestSpan = c, r.Makespan
			}
		}
		if !slices.Contains(b.o.Fixed, best) {
			policies = append(policies, fixedPrefix+strconv.Itoa(best))
		}
		b.o.Logger.Info("sweep done", "pool", b.pool, "best_concurrency", best, "makespan_s", bestSpan)
	}
	if b.o.BenchServing {
		c := best
		if c == 0 {
			c = b.o.Prompts
		}
		policies = append(policies, servingPrefix+strconv.Itoa(c))
	}
	for rep := 1; rep <= b.o.Repeats; rep++ {
		order := rotate(policies, rep-1)
		for _, p := range order {
			r, err := b.measure(ctx, p, rep)
			if err != nil {
				return runs, err
			}
			runs = append(runs, r)
		}
	}
	return runs, nil
}

// rotate returns s rotated left by k, so every policy takes every place in the order across repeats.
func rotate(s []string, k int) []string {
	k %= len(s)
	return append(slices.Clone(s[k:]), s[:k]...)
}

// measure runs one policy on an idle, flushed server and reads what the server did.
func (b *poolBench) measure(ctx context.Context, policy string, rep int) (Run, error) {
	r := Run{Pool: b.pool, Policy: policy, Repeat: rep}
	if err := b.idle(ctx); err != nil {
		return r, err
	}
	before, err := b.counters(ctx)
	if err != nil {
		return r, err
	}
	runCtx, cancel := context.WithTimeout(ctx, b.o.RunTimeout)
	defer cancel()
	cmd, err := b.client(runCtx, policy, rep)
	if err != nil {
		return r, err
	}
	var logBuf strings.Builder
	cmd.Stdout, cmd.Stderr = &logBuf, &logBuf
	samples := make(chan []loadSample, 1)
	stop := make(chan struct{})
	go func() { samples <- b.sample(ctx, stop) }()
	start := time.Now()
	err = cmd.Run()
	r.ClientWall = time.Since(start).Seconds()
	if ps := cmd.ProcessState; ps != nil {
		r.ClientCPU = (ps.UserTime() + ps.SystemTime()).Seconds()
	}
	r.Loops = strings.Count(logBuf.String(), loopLogLine)
	// The server may still be finishing what the client abandoned; sampling ends at its next idle sample.
	time.Sleep(2 * b.o.PollInterval)
	close(stop)
	ss := <-samples
	if err != nil {
		return r, fmt.Errorf("bench sglang: %s (pool %d, repeat %d): %w\n%s", policy, b.pool, rep, err, tail(logBuf.String(), 4000))
	}
	after, err := b.counters(ctx)
	if err != nil {
		return r, err
	}
	r.OutputToks = after.generated - before.generated
	r.Retractions = after.retracted - before.retracted
	fillLoad(&r, ss, b.o.PollInterval)
	if r.Makespan > 0 {
		r.TokPerSec = r.OutputToks / r.Makespan
	}
	if want := float64(b.o.Prompts * b.o.NewTokens); r.OutputToks > want {
		// A retracted request's re-decoded tokens are not counted again by the server; more than the dataset
		// asks for means something else used the server.
		b.o.Logger.Warn("the server generated more tokens than the dataset asks for: was it shared?", "policy", policy, "tokens", r.OutputToks, "want", want)
	}
	b.o.Logger.Info("run", "pool", b.pool, "policy", policy, "repeat", rep, "makespan_s", round(r.Makespan, 2),
		"tok_s", round(r.TokPerSec, 1), "retractions", r.Retractions, "mean_queue", round(r.MeanQueue, 1), "client_wall_s", round(r.ClientWall, 1))
	return r, nil
}

// client is the command that runs the dataset under policy.
func (b *poolBench) client(ctx context.Context, policy string, rep int) (*exec.Cmd, error) {
	n := strconv.Itoa(b.o.NewTokens)
	switch {
	case policy == PolicyDefault || strings.HasPrefix(policy, fixedPrefix) || strings.HasPrefix(policy, loopPrefix):
		out := filepath.Join(b.o.WorkDir, "runs", fmt.Sprintf("%d-%s-%d", b.pool, strings.ReplaceAll(policy, " ", "-"), rep))
		if err := os.RemoveAll(out); err != nil {
			return nil, err
		}
		args := []string{"run", "--input", b.data, "--model", b.o.Model, "--sglang", b.url, "--out", out,
			"--max-new-tokens", n, "--temperature", "0"}
		if c, ok := strings.CutPrefix(policy, fixedPrefix); ok {
			args = append(args, "--policy", "fixed", "--concurrency", c)
		}
		if a, ok := strings.CutPrefix(policy, loopPrefix); ok {
			args = append(args, "--loop-action", a)
		}
		return exec.CommandContext(ctx, b.o.Draftflow, args...), nil
	case strings.HasPrefix(policy, servingPrefix):
		c := strings.TrimPrefix(policy, servingPrefix)
		py := filepath.Join(b.venv(), "bin", "python")
		return exec.CommandContext(ctx, py, "-m", "sglang.bench_serving", "--backend", "sglang", "--base-url", b.url,
			"--tokenizer", b.o.Model, "--model", b.o.Model, "--dataset-name", "custom", "--dataset-path", b.serving,
			"--num-prompts", strconv.Itoa(b.o.Prompts), "--sharegpt-output-len", n, "--apply-chat-template",
			"--disable-ignore-eos", "--temperature", "0", "--disable-stream", "--disable-tqdm", "--warmup-requests", "0",
			"--request-rate", "inf", "--max-concurrency", c,
			// its own report, which it writes to the working directory otherwise
			"--output-file", filepath.Join(b.o.WorkDir, "runs", fmt.Sprintf("bench-serving-%d-%s-%d.jsonl", b.pool, c, rep))), nil
	}
	return nil, fmt.Errorf("bench sglang: unknown policy %q", policy)
}

func (b *poolBench) venv() string {
	out, err := exec.Command("bash", b.o.Script, "venv").Output()
	if err != nil {
		return ""
	}
	return lastLine(out)
}

type loadSample struct {
	running, waiting int
}

// sample polls /v1/loads until stop; a failed poll is skipped (the server is alive: the runs check).
func (b *poolBench) sample(ctx context.Context, stop <-chan struct{}) []loadSample {
	var out []loadSample
	t := time.NewTicker(b.o.PollInterval)
	defer t.Stop()
	for {
		if s, err := b.load(ctx); err == nil {
			out = append(out, s)
		}
		select {
		case <-stop:
			return out
		case <-ctx.Done():
			return out
		case <-t.C:
		}
	}
}

func (b *poolBench) load(ctx context.Context) (loadSample, error) {
	var v struct {
		Loads []struct {
			Running int `json:"num_running_reqs"`
			Waiting int `json:"num_waiting_reqs"`
		} `json:"loads"`
	}
	if err := getJSON(ctx, b.url+"/v1/loads", &v); err != nil {
		return loadSample{}, err
	}
	var s loadSample
	for _, l := range v.Loads {
		s.running += l.Running
		s.waiting += l.Waiting
	}
	return s, nil
}

// fillLoad sets the makespan and queue figures from the samples: the busy span runs from the first sample
// with work to the first idle sample after the last one with work (one interval is added when the sampling
// ended busy).
func fillLoad(r *Run, ss []loadSample, interval time.Duration) {
	first, last := -1, -1
	for i, s := range ss {
		if s.running+s.waiting > 0 {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if first < 0 {
		return
	}
	r.Makespan = float64(last-first+1) * interval.Seconds()
	var q, run float64
	for _, s := range ss[first : last+1] {
		q += float64(s.waiting)
		run += float64(s.running)
		r.MaxQueue = max(r.MaxQueue, s.waiting)
		r.MaxRunning = max(r.MaxRunning, s.running)
	}
	n := float64(last - first + 1)
	r.MeanQueue, r.MeanRunning = q/n, run/n
}

// idle waits until the server has no request and flushes its radix cache.
func (b *poolBench) idle(ctx context.Context) error {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		s, err := b.load(ctx)
		if err == nil && s.running+s.waiting == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench sglang: server %s not idle after 5m (last: %+v, %v)", b.url, s, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(b.o.PollInterval):
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.url+"/flush_cache", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("bench sglang: flush_cache: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil
}

type counters struct{ generated, retracted float64 }

func (b *poolBench) counters(ctx context.Context) (counters, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.url+"/metrics", nil)
	if err != nil {
		return counters{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return counters{}, fmt.Errorf("bench sglang: %s/metrics: %w", b.url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return counters{}, fmt.Errorf("bench sglang: %s/metrics: %s (start the server with --enable-metrics)", b.url, resp.Status)
	}
	m, err := SumMetrics(resp.Body, "sglang:generation_tokens_total", "sglang:num_retracted_requests_total")
	if err != nil {
		return counters{}, err
	}
	return counters{generated: m["sglang:generation_tokens_total"], retracted: m["sglang:num_retracted_requests_total"]}, nil
}

// SumMetrics reads a Prometheus text exposition and returns, for each name, the sum of its samples over all
// label sets (0 when it has none, as SGLang's retraction counter before the first retraction).
func SumMetrics(r io.Reader, names ...string) (map[string]float64, error) {
	out := make(map[string]float64, len(names))
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		for _, n := range names {
			rest, ok := strings.CutPrefix(line, n)
			if !ok || rest == "" || (rest[0] != '{' && rest[0] != ' ') {
				continue
			}
			if i := strings.LastIndexByte(rest, '}'); i >= 0 {
				rest = rest[i+1:]
			}
			fields := strings.Fields(rest)
			if len(fields) == 0 {
				return nil, fmt.Errorf("bench sglang: metric line without a value: %q", line)
			}
			v, err := strconv.ParseFloat(fields[0], 64)
			if err != nil {
				return nil, fmt.Errorf("bench sglang: metric line %q: %w", line, err)
			}
			out[n] += v
		}
	}
	return out, sc.Err()
}

// Summarise groups the repeats' runs (not the sweep's) by pool and policy.
func Summarise(runs []Run) []Row {
	type key struct {
		pool   int
		policy string
	}
	var keys []key
	by := map[key][]Run{}
	for _, r := range runs {
		if r.Repeat <= 0 {
			continue
		}
		k := key{r.Pool, r.Policy}
		if _, ok := by[k]; !ok {
			keys = append(keys, k)
		}
		by[k] = append(by[k], r)
	}
	slices.SortStableFunc(keys, func(a, b key) int {
		if a.pool != b.pool {
			return a.pool - b.pool
		}
		return policyRank(a.policy) - policyRank(b.policy)
	})
	var rows []Row
	bestFixed := map[int]float64{}
	for _, k := range keys {
		rs := by[k]
		row := Row{Pool: k.pool, Policy: k.policy, Repeats: len(rs),
			Makespan:    stat(rs, func(r Run) float64 { return r.Makespan }),
			TokPerSec:   stat(rs, func(r Run) float64 { return r.TokPerSec }),
			Retractions: stat(rs, func(r Run) float64 { return r.Retractions }),
			MeanQueue:   stat(rs, func(r Run) float64 { return r.MeanQueue }),
			MaxRunning:  stat(rs, func(r Run) float64 { return float64(r.MaxRunning) }),
			CPUPerKTok: stat(rs, func(r Run) float64 {
				if r.OutputToks == 0 {
					return 0
				}
				return r.ClientCPU * 1e6 / r.OutputToks
			}),
			OutputToks: stat(rs, func(r Run) float64 { return r.OutputToks }),
			Loops:      stat(rs, func(r Run) float64 { return float64(r.Loops) }),
		}
		if strings.HasPrefix(k.policy, fixedPrefix) {
			if b, ok := bestFixed[k.pool]; !ok || row.Makespan.Median < b {
				bestFixed[k.pool] = row.Makespan.Median
			}
		}
		rows = append(rows, row)
	}
	for i := range rows {
		if b := bestFixed[rows[i].Pool]; b > 0 {
			rows[i].VsBestFixed = rows[i].Makespan.Median / b
		}
	}
	return rows
}

// policyRank orders the table: the default, the fixed concurrencies ascending, bench_serving last.
func policyRank(p string) int {
	switch {
	case p == PolicyDefault:
		return 0
	case strings.HasPrefix(p, loopPrefix):
		return 1
	case strings.HasPrefix(p, fixedPrefix):
		c, _ := strconv.Atoi(strings.TrimPrefix(p, fixedPrefix))
		return 2 + c
	}
	return 1 << 20
}

func stat(rs []Run, f func(Run) float64) Stat {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	s := Stat{Min: v[0], Max: v[len(v)-1]}
	if n := len(v); n%2 == 1 {
		s.Median = v[n/2]
	} else {
		s.Median = (v[n/2-1] + v[n/2]) / 2
	}
	return s
}

// loopLogLine is what the generate stage logs for each reply it finds in a repetition loop.
const loopLogLine = "reply in a repetition loop"

// WriteTable writes rows as a Markdown table: medians with the range in brackets. When a row runs the default
// policy with a --loop-action, a second table gives each default row's output tokens, loops found and client CPU.
func WriteTable(w io.Writer, rows []Row, prompts, newTokens int) {
	defer writeLoopTable(w, rows)
	fmt.Fprintf(w, "\n%d prompts x %d new tokens (median [min-max] over the repeats)\n\n", prompts, newTokens)
	fmt.Fprintln(w, "| pool | policy | repeats | makespan s | vs best fixed | output tok/s | retractions | mean server queue | peak running |")
	fmt.Fprintln(w, "|---:|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		pol := r.Policy
		if pol == PolicyDefault {
			pol = "**default** (kv-budget)"
		}
		fmt.Fprintf(w, "| %d | %s | %d | %s | %s | %s | %s | %s | %s |\n", r.Pool, pol, r.Repeats,
			fmtStat(r.Makespan, 1), pct(r.VsBestFixed), fmtStat(r.TokPerSec, 1), fmtStat(r.Retractions, 0),
			fmtStat(r.MeanQueue, 1), fmtStat(r.MaxRunning, 0))
	}
}

func fmtStat(s Stat, prec int) string {
	return fmt.Sprintf("%.*f [%.*f-%.*f]", prec, s.Median, prec, s.Min, prec, s.Max)
}

func pct(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%+.1f%%", (v-1)*100)
}

// writeDataset writes the prompts for draftflow (one chat per line) and for bench_serving's custom dataset
// (the same user message; the reply it requires is not used, the output length is --sharegpt-output-len).
func writeDataset(dir string, n int) (data, serving string, err error) {
	topics := []string{"a lighthouse keeper", "the sea at night", "a clockmaker's apprentice", "the first winter",
		"a lost key", "the far side of the moon", "an overgrown garden", "the last train home", "a library of maps",
		"two rival bakers", "a river that runs uphill", "a letter never sent"}
	data, serving = filepath.Join(dir, "prompts.jsonl"), filepath.Join(dir, "prompts-bench-serving.jsonl")
	var a, b strings.Builder
	for i := range n {
		msg := fmt.Sprintf("Tell a long story about %s, number %d.", topics[i%len(topics)], i)
		la, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("bench-%03d", i),
			"messages": []map[string]string{{"role": "user", "content": msg}}})
		lb, _ := json.Marshal(map[string]any{"conversations": []map[string]string{
			{"role": "user", "content": msg}, {"role": "assistant", "content": "-"}}})
		a.Write(append(la, '\n'))
		b.Write(append(lb, '\n'))
	}
	if err := os.WriteFile(data, []byte(a.String()), 0o644); err != nil {
		return "", "", err
	}
	return data, serving, os.WriteFile(serving, []byte(b.String()), 0o644)
}

func getJSON(ctx context.Context, url string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func round(v float64, d int) float64 {
	p := math.Pow(10, float64(d))
	return math.Round(v*p) / p
}

// writeLoopTable writes, when rows hold a --loop-action variant of the default policy, the default policy's rows
// with what watching replies costs and saves: output tokens, loops found, client CPU per thousand output tokens.
func writeLoopTable(w io.Writer, rows []Row) {
	var def []Row
	watched := false
	for _, r := range rows {
		if r.Policy == PolicyDefault || strings.HasPrefix(r.Policy, loopPrefix) {
			def = append(def, r)
			watched = watched || r.Policy != PolicyDefault
		}
	}
	if !watched {
		return
	}
	fmt.Fprintln(w, "\n| pool | policy | makespan s | output tok/s | output tokens | loops found | client CPU ms / 1k output tokens |")
	fmt.Fprintln(w, "|---:|---|---:|---:|---:|---:|---:|")
	for _, r := range def {
		fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %s | %s |\n", r.Pool, r.Policy, fmtStat(r.Makespan, 1), fmtStat(r.TokPerSec, 1),
			fmtStat(r.OutputToks, 0), fmtStat(r.Loops, 0), fmtStat(r.CPUPerKTok, 0))
	}
}
