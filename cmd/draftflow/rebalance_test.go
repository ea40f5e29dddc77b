package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	sglangbench "github.com/draftflow/draftflow/bench/sglang"
	"github.com/draftflow/draftflow/internal/testutil"
	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/topics"
)

// completion is one generation on the generated topic: when generate produced it (the record's timestamp) and
// the output tokens it carries.
type completion struct {
	at     time.Time
	tokens int
	// latency is the server's e2e latency of the request, in seconds.
	latency float64
}

// tokensPerSecond is the output tokens of the completions whose time falls in [from, from+width), per second.
func tokensPerSecond(cs []completion, from time.Time, width time.Duration) float64 {
	to := from.Add(width)
	sum := 0
	for _, c := range cs {
		if !c.at.Before(from) && c.at.Before(to) {
			sum += c.tokens
		}
	}
	return float64(sum) / width.Seconds()
}

// counterSample is a reading of a monotonic counter (the servers' output tokens decoded) at a moment, with, in
// the harness, the servers' running and queued requests then.
type counterSample struct {
	at              time.Time
	value           float64
	running, queued float64
}

// counterAt is the counter's value at t, interpolated linearly between the samples around it (samples are in
// time order; outside them, the nearest sample's value).
func counterAt(s []counterSample, t time.Time) float64 {
	i, _ := slices.BinarySearchFunc(s, t, func(c counterSample, t time.Time) int { return c.at.Compare(t) })
	switch {
	case len(s) == 0:
		return 0
	case i == 0:
		return s[0].value
	case i == len(s):
		return s[len(s)-1].value
	}
	a, b := s[i-1], s[i]
	f := t.Sub(a.at).Seconds() / b.at.Sub(a.at).Seconds()
	return a.value + f*(b.value-a.value)
}

// counterRate is the counter's increase over [from, from+width), per second.
func counterRate(s []counterSample, from time.Time, width time.Duration) float64 {
	return (counterAt(s, from.Add(width)) - counterAt(s, from)) / width.Seconds()
}

// meanRunning is the mean of the running requests of the samples taken in [from, from+width) (0 if none).
func meanRunning(s []counterSample, from time.Time, width time.Duration) float64 {
	to := from.Add(width)
	sum, n := 0.0, 0
	for _, c := range s {
		if !c.at.Before(from) && c.at.Before(to) {
			sum += c.running
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// dipPercent is how much lower after is than before, in percent of before (negative: after is higher).
func dipPercent(before, after float64) float64 {
	if before == 0 {
		return 0
	}
	return 100 * (before - after) / before
}

func TestTokensPerMinute(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 5, 4, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	cs := []completion{
		{at: at(-0.001), tokens: 1000}, // just before the first minute
		{at: at(0), tokens: 60},        // on its first instant: in
		{at: at(30), tokens: 120},
		{at: at(59.999), tokens: 60},
		{at: at(60), tokens: 600}, // the second minute's first instant
		{at: at(119), tokens: 1200},
		{at: at(120), tokens: 7}, // after both
	}
	if got, want := tokensPerSecond(cs, t0, time.Minute), 240.0/60; got != want {
		t.Errorf("first minute: %v tokens/s, want %v", got, want)
	}
	if got, want := tokensPerSecond(cs, at(60), time.Minute), 1800.0/60; got != want {
		t.Errorf("second minute: %v tokens/s, want %v", got, want)
	}
	if got := tokensPerSecond(nil, t0, time.Minute); got != 0 {
		t.Errorf("no completions: %v tokens/s", got)
	}
	if got, want := dipPercent(30, 4), 100*26.0/30; got != want {
		t.Errorf("dip %v, want %v", got, want)
	}
	if got := dipPercent(100, 110); got != -10 {
		t.Errorf("a rise is a negative dip: %v", got)
	}

	// A counter sampled about once a second, with jitter, growing 100/s until 90 s, then 40/s.
	var s []counterSample
	value := func(sec float64) float64 {
		if sec <= 90 {
			return 100 * sec
		}
		return 9000 + 40*(sec-90)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for sec := -5.0; sec < 200; sec += 0.5 + rng.Float64() {
		s = append(s, counterSample{at: at(sec), value: value(sec)})
	}
	near := func(got, want float64) bool { return got > want-1e-6 && got < want+1e-6 }
	if got := counterRate(s, t0, time.Minute); !near(got, 100) {
		t.Errorf("counter, first minute: %v/s, want 100", got)
	}
	// 30 s at 100/s and 30 s at 40/s; the bend at 90 s falls between two samples, so allow for the
	// interpolation across it: at most one sample gap (< 1.5 s) of the 60/s difference, over 60 s.
	if got := counterRate(s, at(60), time.Minute); got < 70-1.5 || got > 70+1.5 {
		t.Errorf("counter, second minute: %v/s, want about 70", got)
	}
	if got := counterRate(s, at(120), time.Minute); !near(got, 40) {
		t.Errorf("counter, third minute: %v/s, want 40", got)
	}
	// Running requests: 60 until 30 s, then 0 for 10 s, then 30.
	var g []counterSample
	for sec := 0.0; sec < 60; sec++ {
		r := 60.0
		switch {
		case sec >= 40:
			r = 30
		case sec >= 30:
			r = 0
		}
		g = append(g, counterSample{at: at(sec), running: r})
	}
	if got, want := meanRunning(g, t0, time.Minute), (30*60.0+20*30)/60; got != want {
		t.Errorf("mean running requests %v, want %v", got, want)
	}
	if got := meanRunning(g, at(30), 10*time.Second); got != 0 {
		t.Errorf("mean running requests while empty: %v", got)
	}
	if got := meanRunning(g, at(100), time.Minute); got != 0 {
		t.Errorf("mean running requests without samples: %v", got)
	}
	if got := counterAt(s, at(-100)); got != s[0].value {
		t.Errorf("before the samples: %v, want the first sample %v", got, s[0].value)
	}
	if got := counterAt(s, at(1000)); got != s[len(s)-1].value {
		t.Errorf("after the samples: %v, want the last sample %v", got, s[len(s)-1].value)
	}
}

func TestScrapeLabelled(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, `# HELP draftflow_records_total records
# TYPE draftflow_records_total counter
draftflow_records_total{class="",result="duplicate",stage="sink"} 3
draftflow_records_total{class="x",result="duplicate",stage="sink"} 2
draftflow_records_total{class="",result="written",stage="sink"} 100
draftflow_records_total{class="",result="duplicate",stage="generate"} 7
draftflow_records_total_more{class="",result="duplicate",stage="sink"} 50
`)
	}))
	defer srv.Close()
	got, err := scrapeLabelled(context.Background(), srv.URL, "draftflow_records_total", `stage="sink"`, `result="duplicate"`)
	if err != nil || got != 5 {
		t.Errorf("sink duplicates: %v, %v; want 5", got, err)
	}
	if got, err := scrapeLabelled(context.Background(), srv.URL, "draftflow_records_total", `result="dropped"`); err != nil || got != 0 {
		t.Errorf("a label set never counted: %v, %v; want 0", got, err)
	}
	if _, err := scrapeLabelled(context.Background(), srv.URL+"/nothing", "draftflow_records_total"); err == nil {
		t.Error("a missing page read as no samples")
	}
}

// rebalanceRun is what one run of TestRebalanceThroughput measured.
type rebalanceRun struct {
	// Run numbers the run, from 1.
	Run int
	// Output tokens/s from the generated topic (records' timestamps and completion tokens) and decoded
	// tokens/s from the servers' counters, in the minutes around the events: [0] the minute before the minute
	// before the join (the steady-state reference), [1] before the join, [2] after it, [3] before the leave,
	// [4] after it (after the SIGTERM), [5] after the leaving replica left the group (its drain over, it exited:
	// the rebalance the leave causes starts then).
	Output  [6]float64 `json:"output_tokens_per_s"`
	Decoded [6]float64 `json:"decoded_tokens_per_s"`
	// Running is the servers' mean running requests (their batches, summed) in the same windows: the dip in
	// it is the rebalance's alone, while a machine short of CPU slows the simulated servers' clock and with
	// it their tokens/s, but not their batches.
	Running [6]float64 `json:"running_requests"`
	// LeftAfter is how long after the SIGTERM the leaving replica exited, in seconds.
	LeftAfter float64
	// Generations on the generated topic, distinct turns among them, rows in the shards, duplicates the sink
	// dropped, tokenized records (the backlog never ran out: Generations < Input).
	Generations, Distinct, Rows, SinkRedone, Input int
	// Latency is the requests' e2e latency on the servers, in seconds: the shortest, median, 99th percentile and
	// longest.
	Latency [4]float64
	// ServerTokens is what the servers decoded, KeptTokens the completion tokens on the generated topic.
	ServerTokens, KeptTokens float64
	// Revocations are the replicas' "partitions revoked" lines (drain time, abandoned), in time order.
	Revocations []string
	// AroundJoin and AroundLeave are the servers' decoded tokens/s in 5-second steps from 10 s before the
	// event to a window after it (the leave: after the leaving replica exited): the shape of the dip.
	AroundJoin, AroundLeave []float64
	// Load is /proc/loadavg at the join, at the SIGTERM and at the end.
	Load []string
}

// TestRebalanceThroughput is `make rebalance`: what a consumer-group rebalance costs the generate fleet's
// throughput, on a real Kafka broker, with every replica its own `draftflow generate` process against shared
// simulated SGLang servers in real time (time scale 1; requests decode for 1-20 s, to which the servers' queue
// adds its wait). The tokenized topic is filled
// directly (prompts of 100-300 random tokens, max_new_tokens 480) with more records than the run can do; the
// sink runs. Two replicas work for DRAFTFLOW_REBALANCE_WARMUP (default 30 s) after the first generation plus
// DRAFTFLOW_REBALANCE_STEADY (default 2m); then a third replica joins; DRAFTFLOW_REBALANCE_GAP later (default
// 2m30s) the first gets SIGTERM (a graceful leave, with the Kubernetes manifests' --shutdown-grace 240s: it
// finishes its own in-flight work, then leaves the group, which rebalances then); a window after it left, every
// replica is stopped. It reports, per run and as the median of DRAFTFLOW_REBALANCE_RUNS runs (default 3), the
// fleet's output tokens/s in the window (DRAFTFLOW_REBALANCE_WINDOW, default 1m) after each event (the join, the
// SIGTERM, the leaving replica's exit) against the window before the event (the join) or the SIGTERM (the
// leave), from the generated topic: each record's timestamp and completion tokens;
// the servers' decoded tokens/s alike (their sglang:generation_tokens_total, sampled every second), and checks
// that nothing was redone: every generation a distinct turn, as many rows in the shards, no duplicate dropped
// by the sink. It needs DRAFTFLOW_REBALANCE_BROKERS (`make rebalance` starts a kafka.sh broker);
// DRAFTFLOW_REBALANCE_SERVERS sets the simulated servers (default 2), DRAFTFLOW_REBALANCE_OUT a directory for
// the processes' logs and the figures (rebalance.json).
func TestRebalanceThroughput(t *testing.T) {
	brokers := os.Getenv("DRAFTFLOW_REBALANCE_BROKERS")
	if brokers == "" {
		t.Skip("set DRAFTFLOW_REBALANCE_BROKERS to a real Kafka broker (make rebalance)")
	}
	env := func(name string, def time.Duration) time.Duration {
		if s := os.Getenv(name); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil || d <= 0 {
				t.Fatalf("%s=%q: want a positive duration", name, s)
			}
			return d
		}
		return def
	}
	envInt := func(name string, def int) int {
		if s := os.Getenv(name); s != "" {
			var n int
			if _, err := fmt.Sscan(s, &n); err != nil || n < 1 {
				t.Fatalf("%s=%q: want a positive integer", name, s)
			}
			return n
		}
		return def
	}
	sc := rebalanceScenario{
		brokers: brokers,
		warmup:  env("DRAFTFLOW_REBALANCE_WARMUP", 30*time.Second),
		steady:  env("DRAFTFLOW_REBALANCE_STEADY", 2*time.Minute),
		gap:     env("DRAFTFLOW_REBALANCE_GAP", 150*time.Second),
		window:  env("DRAFTFLOW_REBALANCE_WINDOW", time.Minute),
		grace:   env("DRAFTFLOW_REBALANCE_GRACE", 240*time.Second),
		servers: envInt("DRAFTFLOW_REBALANCE_SERVERS", 2),
	}
	if sc.steady < 2*sc.window || sc.gap < sc.window {
		t.Fatalf("the steady load (%v) must hold two windows (%v) and the gap between events (%v) one", sc.steady, sc.window, sc.gap)
	}
	runs := envInt("DRAFTFLOW_REBALANCE_RUNS", 3)
	out := os.Getenv("DRAFTFLOW_REBALANCE_OUT")
	if out == "" {
		out = t.TempDir()
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	sc.bin = filepath.Join(t.TempDir(), "draftflow")
	if b, err := exec.Command("go", "build", "-o", sc.bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	var results []rebalanceRun
	for i := range runs {
		sc.dir = filepath.Join(out, fmt.Sprintf("run%d", i+1))
		r := sc.run(t, i+1)
		results = append(results, r)
		b, _ := json.MarshalIndent(results, "", "  ")
		if err := os.WriteFile(filepath.Join(out, "rebalance.json"), b, 0o644); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			return
		}
	}
	t.Log(rebalanceTable(results))
}

// rebalanceScenario is one configuration of TestRebalanceThroughput.
type rebalanceScenario struct {
	brokers, bin, dir                  string
	warmup, steady, gap, window, grace time.Duration
	servers                            int
}

// simArgs starts a simulated server whose requests take 1-20 s at time scale 1: outputs lognormal around 200
// tokens (capped at 480 by the records), a KV pool of 12,000 tokens (so about 25 requests decode at once), each
// decode step 25 ms + 0.4 ms per request + 120 ns per KV token: about 28 tokens/s per request.
func (sc rebalanceScenario) simArgs(addr string, seed int) []string {
	return []string{"sim", "--addr", addr, "--time-scale", "1", "--output-len-mean", "200", "--output-len-sigma", "0.6",
		"--max-total-tokens", "12000", "--vocab-size", "3035", "--eos-token-ids", "3030", "--special-token-start", "3027",
		"--decode-log-interval", "4", "--seed", fmt.Sprint(seed), "--log-level", "warn"}
}

func (sc rebalanceScenario) run(t *testing.T, n int) rebalanceRun {
	t.Helper()
	if err := os.RemoveAll(sc.dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(sc.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ns := fmt.Sprintf("rebalance-%d-%d", time.Now().Unix(), n)
	kc := kafka.Config{Brokers: strings.Split(sc.brokers, ","), Namespace: ns}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := kafkatest.Client(t, kc)
	if err := cl.Admin().EnsureTopics(ctx, topics.Retained()...); err != nil {
		t.Fatal(err)
	}
	generated := func() int { // the records on the generated topic
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ends, err := cl.Admin().EndOffsets(ctx, topics.TopicGenerated)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, end := range ends {
			n += int(end)
		}
		return n
	}

	// The backlog: more prompts than the servers can finish in the run (checked at the end). At ~25 requests
	// of ~7 s on each server, a server finishes about 3.5 a second.
	total := sc.warmup + sc.steady + sc.gap + sc.window + time.Minute
	input := int(total.Seconds()*3.5*float64(sc.servers)*1.5) + 500
	rng := rand.New(rand.NewPCG(uint64(n), 11))
	recs := make([]kafkatest.Record, input)
	for i := range recs {
		ids := make([]uint32, 100+rng.IntN(201))
		for j := range ids {
			ids[j] = uint32(10 + rng.IntN(3000))
		}
		id := fmt.Sprintf("%s-%06d", ns, i)
		recs[i] = kafkatest.Record{Key: id, Value: &topics.Tokenized{ID: id, Dataset: "rebalance", Model: "sim",
			TokenizerHash: "random-ids", Source: topics.Source{File: "rebalance", Line: int64(i + 1)},
			Sampling: topics.Sampling{MaxNewTokens: 480}, InputIDs: ids}}
	}
	kafkatest.Produce(t, kc, topics.TopicTokenized, recs...)

	kafkaArgs := []string{"--brokers", sc.brokers, "--namespace", ns, "--log-level", "info"}
	procs := map[string]*proc{}
	var sglang []string
	var simURLs []string
	for i := range sc.servers {
		addr := freeLoopback(t)
		name := fmt.Sprintf("sim-%d", i+1)
		procs[name] = &proc{name: name, args: sc.simArgs(addr, 1000*n+i)}
		sglang = append(sglang, "--sglang", "http://"+addr)
		simURLs = append(simURLs, "http://"+addr)
	}
	sinkMetrics := freeLoopback(t)
	shards := filepath.Join(sc.dir, "out")
	procs["sink"] = &proc{name: "sink", args: append([]string{"sink", "--out", shards, "--idle-flush", "2s",
		"--metrics-addr", sinkMetrics}, kafkaArgs...)}
	gen := func(name string) *proc {
		args := append([]string{"generate", "--shutdown-grace", sc.grace.String(), "--metrics-addr", freeLoopback(t)}, sglang...)
		return &proc{name: name, args: append(args, kafkaArgs...)}
	}
	procs["generate-a"], procs["generate-b"], procs["generate-c"] = gen("generate-a"), gen("generate-b"), gen("generate-c")
	for _, p := range procs {
		p.logs = &testutil.Buffer{}
	}
	defer func() {
		for name, p := range procs {
			if p.running() {
				_ = p.cmd.Process.Kill()
			}
			if p.logs != nil {
				_ = os.WriteFile(filepath.Join(sc.dir, name+".log"), []byte(p.logs.String()), 0o644)
			}
		}
	}()
	order := []string{"sink", "generate-a", "generate-b"}
	for i := range sc.servers {
		order = append([]string{fmt.Sprintf("sim-%d", i+1)}, order...)
	}
	for _, name := range order {
		procs[name].start(t, sc.bin)
	}

	// The servers' decoded tokens, every second, until the end of the run.
	var mu sync.Mutex
	var decoded []counterSample
	sampling, stopSampling := context.WithCancel(context.Background())
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			sample, ok := counterSample{at: time.Now()}, true
			for _, u := range simURLs {
				m, err := scrapeSums(sampling, u, "sglang:generation_tokens_total", "sglang:num_running_reqs", "sglang:num_queue_reqs")
				if err != nil {
					ok = false
					break
				}
				sample.value += m["sglang:generation_tokens_total"]
				sample.running += m["sglang:num_running_reqs"]
				sample.queued += m["sglang:num_queue_reqs"]
			}
			if ok {
				mu.Lock()
				decoded = append(decoded, sample)
				mu.Unlock()
			}
			select {
			case <-sampling.Done():
				return
			case <-tick.C:
			}
		}
	}()
	defer func() { stopSampling(); <-sampled }()

	alive := func() {
		for _, name := range order {
			if !procs[name].running() {
				t.Fatalf("%s exited:\n%s", name, tail(procs[name].logs.String(), 20))
			}
		}
	}
	// The load starts with the first generation once both replicas have partitions (the group formed: the
	// second member's first assignment is in a generation that holds both).
	deadline := time.Now().Add(2 * time.Minute)
	assigned := func(name string) bool { return strings.Contains(procs[name].logs.String(), "partitions assigned") }
	for !assigned("generate-a") || !assigned("generate-b") || generated() == 0 {
		alive()
		if time.Now().After(deadline) {
			t.Fatalf("no generation within 2 minutes")
		}
		time.Sleep(500 * time.Millisecond)
	}
	loadStart := time.Now()
	res := rebalanceRun{Run: n, Input: input}
	sleepUntil := func(at time.Time) {
		for time.Now().Before(at) {
			alive()
			time.Sleep(min(time.Second, time.Until(at)))
		}
	}
	joinAt := loadStart.Add(sc.warmup + sc.steady)
	sleepUntil(joinAt)
	res.Load = append(res.Load, loadavg())
	procs["generate-c"].start(t, sc.bin)
	order = append(order, "generate-c")
	t.Logf("run %d: %s joined at %s (load %s)", n, "generate-c", joinAt.Format(time.TimeOnly), res.Load[0])

	leaveAt := joinAt.Add(sc.gap)
	sleepUntil(leaveAt)
	res.Load = append(res.Load, loadavg())
	order = slices.DeleteFunc(order, func(s string) bool { return s == "generate-a" })
	left := make(chan error, 1)
	go func() { left <- procs["generate-a"].stop() }()
	t.Logf("run %d: generate-a got SIGTERM at %s (load %s)", n, time.Now().Format(time.TimeOnly), res.Load[1])

	// It leaves the group (and the others rebalance) once its own in-flight work is done.
	var leftAt time.Time
	for leftAt.IsZero() {
		alive()
		select {
		case err := <-left:
			if err != nil {
				t.Errorf("generate-a after SIGTERM: %v", err)
			}
			leftAt = time.Now()
		case <-time.After(time.Second):
		}
	}
	res.LeftAfter = leftAt.Sub(leaveAt).Seconds()
	t.Logf("run %d: generate-a left the group %.1f s after SIGTERM", n, res.LeftAfter)
	sleepUntil(leftAt.Add(sc.window + 5*time.Second))
	res.Load = append(res.Load, loadavg())
	// Stop generating; the sink writes what was generated.
	var wg sync.WaitGroup
	for _, name := range []string{"generate-b", "generate-c"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := procs[name].stop(); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}()
	}
	wg.Wait()
	stopSampling()
	<-sampled

	res.Generations = generated()
	if res.Generations >= input {
		t.Errorf("the backlog ran out (%d generations of %d prompts): the load was not steady", res.Generations, input)
	}
	cs, distinct := readGenerated(t, cl, res.Generations)
	res.Distinct = distinct
	lat := make([]float64, 0, len(cs))
	for _, c := range cs {
		res.KeptTokens += float64(c.tokens)
		lat = append(lat, c.latency)
	}
	slices.Sort(lat)
	if len(lat) > 0 {
		res.Latency = [4]float64{lat[0], lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1]}
	}
	deadline = time.Now().Add(time.Minute)
	for res.Rows = int(shardRows(t, shards)); res.Rows < res.Distinct && time.Now().Before(deadline); res.Rows = int(shardRows(t, shards)) {
		time.Sleep(time.Second)
	}
	// Generations the sink dropped as already written or buffered: work done twice.
	dup, err := scrapeLabelled(context.Background(), "http://"+sinkMetrics, "draftflow_records_total", `stage="sink"`, `result="duplicate"`)
	if err != nil {
		t.Error(err)
	}
	res.SinkRedone = int(dup)
	if err := procs["sink"].stop(); err != nil {
		t.Error(err)
	}
	res.ServerTokens = decoded[len(decoded)-1].value

	windows := []time.Time{joinAt.Add(-2 * sc.window), joinAt.Add(-sc.window), joinAt, leaveAt.Add(-sc.window), leaveAt, leftAt}
	for i, from := range windows {
		res.Output[i] = tokensPerSecond(cs, from, sc.window)
		res.Decoded[i] = counterRate(decoded, from, sc.window)
		res.Running[i] = meanRunning(decoded, from, sc.window)
	}
	around := func(at, until time.Time) []float64 {
		var v []float64
		for from := at.Add(-10 * time.Second); from.Before(until); from = from.Add(5 * time.Second) {
			v = append(v, math.Round(counterRate(decoded, from, 5*time.Second)))
		}
		return v
	}
	res.AroundJoin, res.AroundLeave = around(joinAt, joinAt.Add(sc.window)), around(leaveAt, leftAt.Add(sc.window))
	// The raw series, for a closer look: the servers' counter every second and every completion.
	var raw strings.Builder
	fmt.Fprintf(&raw, "# join %s leave %s\n# d unix_seconds decoded_tokens running_requests queued_requests (the servers, summed)\n# c unix_seconds completion_tokens e2e_latency (each generation)\n", joinAt.Format(time.RFC3339Nano), leaveAt.Format(time.RFC3339Nano))
	for _, d := range decoded {
		fmt.Fprintf(&raw, "d %.3f %.0f %.0f %.0f\n", float64(d.at.UnixMilli())/1000, d.value, d.running, d.queued)
	}
	for _, c := range cs {
		fmt.Fprintf(&raw, "c %.3f %d %.3f\n", float64(c.at.UnixMilli())/1000, c.tokens, c.latency)
	}
	if err := os.WriteFile(filepath.Join(sc.dir, "series.txt"), []byte(raw.String()), 0o644); err != nil {
		t.Error(err)
	}
	revoked := regexp.MustCompile(`time=(\S+).*partitions revoked.*reason=(\S+).*drained_in=(\S+).*unfinished=(\d+) abandoned=(\d+)`)
	for _, name := range []string{"generate-a", "generate-b", "generate-c"} {
		for _, m := range revoked.FindAllStringSubmatch(procs[name].logs.String(), -1) {
			res.Revocations = append(res.Revocations, fmt.Sprintf("%s %s: %s, drained in %s, %s unfinished, %s abandoned", m[1], name, m[2], m[3], m[4], m[5]))
		}
	}
	slices.Sort(res.Revocations)

	if res.Distinct != res.Generations || res.Rows != res.Generations || res.SinkRedone != 0 {
		t.Errorf("work redone: %d generations, %d distinct turns, %d rows, %d duplicates dropped by the sink",
			res.Generations, res.Distinct, res.Rows, res.SinkRedone)
	}
	t.Logf("run %d:\n%s", n, rebalanceTable([]rebalanceRun{res}))
	return res
}

// rebalanceTable prints the runs' figures, and their medians when there are several.
func rebalanceTable(rs []rebalanceRun) string {
	var b strings.Builder
	med := func(f func(rebalanceRun) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	line := func(label string, f func(rebalanceRun) float64, format string) {
		fmt.Fprintf(&b, "  %-38s", label)
		for _, r := range rs {
			fmt.Fprintf(&b, format, f(r))
		}
		if len(rs) > 1 {
			fmt.Fprintf(&b, "   median "+format, med(f))
		}
		b.WriteByte('\n')
	}
	labels := []string{"steady (2nd minute before the join)", "minute before the join", "minute after the join",
		"minute before the leave (SIGTERM)", "minute after the SIGTERM", "minute after it left the group"}
	for _, src := range []struct {
		name string
		get  func(rebalanceRun) [6]float64
	}{{"output tokens/s (generated topic)", func(r rebalanceRun) [6]float64 { return r.Output }},
		{"decoded tokens/s (servers)", func(r rebalanceRun) [6]float64 { return r.Decoded }},
		{"running requests (servers' batches, mean)", func(r rebalanceRun) [6]float64 { return r.Running }}} {
		fmt.Fprintf(&b, "  %s\n", src.name)
		for i, l := range labels {
			line("  "+l, func(r rebalanceRun) float64 { return src.get(r)[i] }, " %8.1f")
		}
		line("  dip, steady minute to minute %", func(r rebalanceRun) float64 { return dipPercent(src.get(r)[0], src.get(r)[1]) }, " %7.1f%%")
		line("  dip after the join %", func(r rebalanceRun) float64 { return dipPercent(src.get(r)[1], src.get(r)[2]) }, " %7.1f%%")
		line("  dip after the SIGTERM %", func(r rebalanceRun) float64 { return dipPercent(src.get(r)[3], src.get(r)[4]) }, " %7.1f%%")
		line("  dip after it left the group %", func(r rebalanceRun) float64 { return dipPercent(src.get(r)[3], src.get(r)[5]) }, " %7.1f%%")
	}
	line("leaving replica exited after SIGTERM s", func(r rebalanceRun) float64 { return r.LeftAfter }, " %8.1f")
	line("generations", func(r rebalanceRun) float64 { return float64(r.Generations) }, " %8.0f")
	line("distinct turns", func(r rebalanceRun) float64 { return float64(r.Distinct) }, " %8.0f")
	line("rows in the shards", func(r rebalanceRun) float64 { return float64(r.Rows) }, " %8.0f")
	line("duplicates the sink dropped", func(r rebalanceRun) float64 { return float64(r.SinkRedone) }, " %8.0f")
	line("request latency: shortest s", func(r rebalanceRun) float64 { return r.Latency[0] }, " %8.1f")
	line("request latency: median s", func(r rebalanceRun) float64 { return r.Latency[1] }, " %8.1f")
	line("request latency: 99th percentile s", func(r rebalanceRun) float64 { return r.Latency[2] }, " %8.1f")
	line("request latency: longest s", func(r rebalanceRun) float64 { return r.Latency[3] }, " %8.1f")
	line("decoded for nothing %", func(r rebalanceRun) float64 {
		return 100 * (r.ServerTokens - r.KeptTokens) / max(r.KeptTokens, 1)
	}, " %7.2f%%")
	for _, r := range rs {
		fmt.Fprintf(&b, "  run %d: load average (1/5/15 min) at the join %s, at the leave %s, at the end %s\n", r.Run, r.Load[0], r.Load[1], r.Load[2])
		fmt.Fprintf(&b, "    decoded tokens/s in 5 s steps from 10 s before the join: %v\n", r.AroundJoin)
		fmt.Fprintf(&b, "    decoded tokens/s in 5 s steps from 10 s before the leave: %v\n", r.AroundLeave)
		for _, rv := range r.Revocations {
			fmt.Fprintf(&b, "    %s\n", rv)
		}
	}
	return b.String()
}

// readGenerated reads the generated topic in a fresh group until want records arrived and returns them as
// completions, with the number of distinct (id, turn) among them.
func readGenerated(t *testing.T, cl *kafka.Client, want int) ([]completion, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var mu sync.Mutex
	var cs []completion
	seen := map[string]bool{}
	cons := cl.NewConsumer(topics.TopicGenerated, kafka.ConsumerConfig{Group: fmt.Sprintf("rebalance-read-%d", time.Now().UnixNano()),
		SessionTimeout: 6 * time.Second})
	err := cons.Run(ctx, func(d *kafka.Delivery) {
		var g topics.Generation
		if err := topics.Unmarshal(d.Message.Value, &g); err != nil {
			t.Errorf("decode %s: %v", d.Where(), err)
		}
		mu.Lock()
		cs = append(cs, completion{at: d.Message.Time, tokens: g.Meta.CompletionTokens, latency: g.Meta.LatencySeconds})
		seen[fmt.Sprintf("%s/%d", g.ID, g.Turn)] = true
		n := len(cs)
		mu.Unlock()
		d.Done()
		if n >= want {
			cancel()
		}
	})
	if err != nil {
		t.Errorf("read %s: %v", topics.TopicGenerated, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(cs) < want {
		t.Errorf("read %d of %d generations", len(cs), want)
	}
	return cs, len(seen)
}

// scrapeSums is the sum of each metric's samples on a /metrics page.
func scrapeSums(ctx context.Context, base string, names ...string) (map[string]float64, error) {
	page, err := metricsPage(ctx, base)
	if err != nil {
		return nil, err
	}
	return sglangbench.SumMetrics(strings.NewReader(page), names...)
}

// scrapeLabelled is the sum of a metric's samples on a /metrics page whose labels include every one of labels
// (each written name="value"); 0 when there is none (a labelled counter appears with its first increment).
func scrapeLabelled(ctx context.Context, base, name string, labels ...string) (float64, error) {
	page, err := metricsPage(ctx, base)
	if err != nil {
		return 0, err
	}
	sum := 0.0
	for _, line := range strings.Split(page, "\n") {
		rest, ok := strings.CutPrefix(line, name+"{")
		end := strings.LastIndexByte(rest, '}')
		if !ok || end < 0 || slices.ContainsFunc(labels, func(l string) bool { return !strings.Contains(rest[:end], l) }) {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest[end+1:]), 64)
		if err != nil {
			return 0, fmt.Errorf("%s/metrics: %q: %w", base, line, err)
		}
		sum += v
	}
	return sum, nil
}

// metricsPage fetches base/metrics.
func metricsPage(ctx context.Context, base string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s/metrics: %s", base, resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// loadavg is the first three fields of /proc/loadavg.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// freeLoopback returns a free 127.0.0.1 address.
func freeLoopback(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
