package main

// Resuming from the shards: a turn already in a run's shards is never sent to a server again, whether `draftflow
// run` starts again into the same --out after a kill, the stages start again on topics that were lost, or a
// file is ingested twice. Requests are counted at the simulated server.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/pipeline"
	"github.com/draftflow/draftflow/sglang/sim"
	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/sink"
	"github.com/draftflow/draftflow/stages/generate"
	"github.com/draftflow/draftflow/stages/generate/admission"
	"github.com/draftflow/draftflow/stages/ingest"
	"github.com/draftflow/draftflow/topics"
)

// countingServer counts the /generate requests a simulated server received and finished answering.
type countingServer struct {
	h                  http.Handler
	started, completed atomic.Int64
}

func (c *countingServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/generate" {
		c.h.ServeHTTP(w, r)
		return
	}
	c.started.Add(1)
	defer c.completed.Add(1)
	c.h.ServeHTTP(w, r)
}

// inFlight is how many requests the server holds unanswered.
func (c *countingServer) inFlight() int64 { return c.started.Load() - c.completed.Load() }

// startCountingSim starts a simulated server shaped after the bundled model, behind a request counter.
func startCountingSim(t *testing.T, h *itest, cfg sim.Config) (*countingServer, string) {
	t.Helper()
	cfg.Logger = h.log
	cfg.VocabSize = h.model.Tokenizer.VocabSize()
	cfg.SpecialTokenStart = h.model.SpecialTokenStart
	cfg.EOSTokenIDs = nil
	for _, id := range h.model.EOSTokenIDs {
		cfg.EOSTokenIDs = append(cfg.EOSTokenIDs, int(id))
	}
	cfg.ContextLength = h.model.ContextLength
	s, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cs := &countingServer{h: s}
	srv := httptest.NewServer(cs)
	t.Cleanup(func() { s.Close(); srv.Close() })
	return cs, srv.URL
}

// writeThreeTurnChats writes n chat conversations of three user turns each (every turn regenerated: three rows
// per conversation when the server's replies hold no tool calls) and returns the file.
func writeThreeTurnChats(t *testing.T, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "chats.jsonl")
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"id":"chat-%03d","messages":[{"role":"user","content":"Question %d, one"},{"role":"assistant","content":"A one"},`+
			`{"role":"user","content":"Question %d, two"},{"role":"assistant","content":"A two"},{"role":"user","content":"Question %d, three"},`+
			`{"role":"assistant","content":"A three"}]}`+"\n", i, i, i, i)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// shardRows counts the rows the manifests of out list (what a reader sees; committed flushes only).
func shardRows(t *testing.T, out string) int64 {
	t.Helper()
	dirs, err := shard.RunDirs(out)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, d := range dirs {
		m, err := shard.ReadManifest(d)
		if err != nil {
			t.Fatal(err)
		}
		n += m.Totals.Rows
	}
	return n
}

// TestHelperRunProcess is `draftflow run` in a process of its own, for TestRunResumesAfterKill; it is not a test.
func TestHelperRunProcess(t *testing.T) {
	raw := os.Getenv("DRAFTFLOW_HELPER_RUN_ARGS")
	if raw == "" {
		t.Skip("helper process for TestRunResumesAfterKill")
	}
	var args []string
	if err := json.Unmarshal([]byte(raw), &args); err != nil {
		t.Fatal(err)
	}
	if err := cmdRun(context.Background(), args); err != nil {
		fmt.Fprintln(os.Stderr, "run:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// runProcess starts `draftflow run args` in a process of its own; its output goes to log.
func runProcess(t *testing.T, log *os.File, args ...string) *exec.Cmd {
	t.Helper()
	b, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperRunProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "DRAFTFLOW_HELPER_RUN_ARGS="+string(b))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// TestRunResumesAfterKill: `draftflow run` on the multi-turn sample, SIGKILLed about half way (its embedded
// broker dies with it), then started again into the same --out. The second start sends no more requests than
// the turns not yet in the shards at the kill plus the requests in flight then, and the shards end whole: every
// conversation's turns 0..n once.
func TestRunResumesAfterKill(t *testing.T) {
	h := newITest(t, kafka.Config{})
	srv, url := startCountingSim(t, h, sim.Config{Instant: true, OutputLenDistribution: sim.DistFixed, OutputLenMean: 24, Seed: 5,
		Faults: sim.Faults{AddedLatency: 40 * time.Millisecond}})
	out := t.TempDir()
	logf, err := os.Create(filepath.Join(t.TempDir(), "run.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	const conversations, concurrency = 150, 8
	data := writeThreeTurnChats(t, conversations)
	args := []string{"--input", data, "--out", out, "--sglang", url, "--policy", generate.PolicyFixed,
		"--concurrency", fmt.Sprint(concurrency), "--shard-rows", "16", "--log-level", "warn"}

	first := runProcess(t, logf, args...)
	exited := make(chan error, 1)
	go func() { exited <- first.Wait() }()
	deadline := time.Now().Add(3 * time.Minute)
	for srv.completed.Load() < 3*conversations/2 || shardRows(t, out) < conversations {
		select {
		case err := <-exited:
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("the first run ended (%v) before it was killed, after %d requests:\n%s", err, srv.completed.Load(), b)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the first run did not get half way: %d requests, %d rows", srv.completed.Load(), shardRows(t, out))
		}
	}
	window := srv.inFlight()
	_ = first.Process.Signal(syscall.SIGKILL)
	<-exited
	window = max(window, srv.inFlight())
	// Requests the killed run left on the server finish now; they are not the second start's.
	for srv.inFlight() > 0 {
		time.Sleep(10 * time.Millisecond)
	}
	requests1 := srv.started.Load()
	// The rows in the shards at the kill: what the next start recovers (committed flushes).
	recovered := shardRows(t, out)

	second := runProcess(t, logf, args...)
	if err := second.Wait(); err != nil {
		b, _ := os.ReadFile(logf.Name())
		t.Fatalf("the second run: %v\n%s", err, b)
	}
	requests2 := srv.started.Load() - requests1
	conv := checkConversationsHang(t, out)
	total := shardRows(t, out)
	if len(conv) != conversations || total != 3*conversations {
		t.Fatalf("%d conversations and %d rows in the shards, want %d and %d", len(conv), total, conversations, 3*conversations)
	}
	notInShards := total - recovered
	t.Logf("killed after %d requests with %d rows in the shards and %d requests in flight; the second start sent %d requests "+
		"for the %d turns not in the shards (%d rows in all)", requests1, recovered, window, requests2, notInShards, total)
	if requests2 > notInShards+window {
		t.Fatalf("the second start sent %d requests; the turns not yet in the shards (%d) plus the in-flight window at the kill (%d) are %d",
			requests2, notInShards, window, notInShards+window)
	}
	if requests2 == 0 || recovered == 0 {
		t.Fatalf("the kill was not mid-run: %d rows recovered, %d requests after", recovered, requests2)
	}
}

// TestStagesResumeAfterTopicsLost: the stages, each on its own, write about half of the multi-turn sample into
// an output directory; then the topics are lost (a new namespace: a new broker or a deleted topic) and the
// stages start again on the same directory, generate before the sink. The second round sends no more requests
// than the turns not yet in the shards plus what was in flight when the first round stopped. Then the same
// file is ingested a third time into the same topics: not one request. On a real broker when
// DRAFTFLOW_TEST_BROKERS is set.
func TestStagesResumeAfterTopicsLost(t *testing.T) {
	const conversations, concurrency, maxInFlight = 120, 4, 16
	data := writeThreeTurnChats(t, conversations)
	kc1 := kafkatest.Config(t, 3)
	h := newITest(t, kc1)
	h.turns = ingest.TurnsAll
	srv, url := startCountingSim(t, h, sim.Config{Instant: true, OutputLenDistribution: sim.DistFixed, OutputLenMean: 24, Seed: 9,
		Faults: sim.Faults{AddedLatency: 20 * time.Millisecond}})
	genCfg := func(kc kafka.Config) func(context.Context) error {
		cfg := generate.Config{Client: kafkatest.Client(t, kc), MaxInFlight: maxInFlight, ShardsWait: time.Minute, Config: admission.Config{
			Endpoints: []string{url}, Policy: generate.PolicyFixed, Concurrency: concurrency,
			HealthInterval: 500 * time.Millisecond, Logger: h.log}}
		return func(ctx context.Context) error { return generate.Run(ctx, cfg) }
	}

	sink1 := h.start("sink", h.sink(16))
	tok1 := h.start("tokenize", h.tokenize(""))
	gen1 := h.start("generate", genCfg(kc1))
	h.ingest(data, 64)
	h.waitFor("half the rows in the shards", 3*time.Minute, func() bool { return shardRows(t, h.out) >= 3*conversations/2 })
	for _, s := range []*runningStage{gen1, tok1, sink1} {
		if err := s.stop(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
	}
	requests1 := srv.started.Load()
	recovered := shardRows(t, h.out)

	// The topics are lost; the shards remain. Generate starts first: it waits for the sink's epoch.
	kc2 := kc1
	kc2.Namespace += "-2"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := kafkatest.Client(t, kc2).Admin().EnsureTopics(ctx, topics.Retained()...); err != nil {
		t.Fatal(err)
	}
	h.kc, h.kcl = kc2, kafkatest.Client(t, kc2)
	h.start("generate (topics lost)", genCfg(kc2))
	h.start("tokenize (topics lost)", h.tokenize(""))
	h.ingest(data, 64)
	h.waitFor("tokenized records for generate before the sink starts", time.Minute, func() bool {
		return h.produced(topics.TopicTokenized) > 0
	})
	h.start("sink (topics lost)", h.sink(16))
	quiet := func() bool {
		return h.consumed(topics.TopicPrompts, "draftflow-tokenize") == h.produced(topics.TopicPrompts) &&
			h.consumed(topics.TopicTokenized, generate.DefaultGroup) == h.produced(topics.TopicTokenized) &&
			h.consumed(topics.TopicGenerated, sink.DefaultGroup) == h.produced(topics.TopicGenerated)
	}
	settle := func(what string) {
		t.Helper()
		stable := time.Time{}
		h.waitFor(what, 3*time.Minute, func() bool {
			if !quiet() {
				stable = time.Time{}
				return false
			}
			if stable.IsZero() {
				stable = time.Now()
			}
			return time.Since(stable) > 2*time.Second // the sink's idle flush and any next turn it sends
		})
	}
	inShards := inShardsTurns(t)
	settle("every conversation through the pipeline again")
	requests2 := srv.started.Load() - requests1
	conv := checkConversationsHang(t, h.out)
	total := shardRows(t, h.out)
	if len(conv) != conversations || total != 3*conversations {
		t.Fatalf("%d conversations and %d rows in the shards, want %d and %d", len(conv), total, conversations, 3*conversations)
	}
	notInShards := total - recovered
	t.Logf("first round: %d requests, %d rows in the shards; after the topics were lost: %d requests for %d turns not in the shards, %d turns found in the shards",
		requests1, recovered, requests2, notInShards, inShardsTurns(t)-inShards)
	if requests2 > notInShards+concurrency {
		t.Fatalf("after the topics were lost the stages sent %d requests; the turns not yet in the shards (%d) plus the requests in flight (%d) are %d",
			requests2, notInShards, concurrency, notInShards+concurrency)
	}
	if requests2 == 0 || inShardsTurns(t)-inShards < recovered {
		t.Fatalf("%d requests after the topics were lost, %d turns found in the shards (%d rows were there): the resume was not mid-run",
			requests2, inShardsTurns(t)-inShards, recovered)
	}

	// The same file once more, into the same topics: every first turn is in the shards, and the later turns
	// went through these topics already.
	requests3, inShards3 := srv.started.Load(), inShardsTurns(t)
	h.ingest(data, 64)
	settle("the file ingested twice through the pipeline")
	if got := srv.started.Load() - requests3; got != 0 {
		t.Fatalf("the file ingested twice sent %d requests, want 0", got)
	}
	// Every turn is found in the shards: the next turns are sent again from the recorded replies.
	if got := inShardsTurns(t) - inShards3; got != 3*conversations {
		t.Fatalf("the file ingested twice: %d turns found in the shards, want all %d", got, 3*conversations)
	}
	if got := shardRows(t, h.out); got != total {
		t.Fatalf("the file ingested twice changed the shards: %d rows, were %d", got, total)
	}
}

// inShardsTurns reads draftflow_records_total{stage="sink", result="in_shards"} of the process's default
// registry: the turns the sinks running on it found in their shards so far.
func inShardsTurns(t *testing.T) int64 {
	return int64(counter(t, "draftflow_records_total", map[string]string{"stage": "sink", "result": "in_shards", "class": ""}))
}

// TestRunTwiceOnSameTopics: `draftflow run --brokers` twice on the same topics and --out (the file ingested
// twice): the second run sends not one request, finds every turn in the shards, and accounts for every
// conversation as already there.
func TestRunTwiceOnSameTopics(t *testing.T) {
	const conversations = 40
	kc := kafkatest.Config(t, 3)
	h := newITest(t, kc)
	srv, url := startCountingSim(t, h, sim.Config{Instant: true, OutputLenDistribution: sim.DistFixed, OutputLenMean: 24, Seed: 4})
	data := writeThreeTurnChats(t, conversations)
	out := t.TempDir()
	run := func() *pipeline.Result {
		t.Helper()
		var rc pipeline.Config
		rc.Kafka = kc
		rc.Ingest.Inputs = []string{data}
		rc.Sink.Dir = out
		rc.Generate.Endpoints = []string{url}
		rc.Logger = h.log
		rc.Timeout = 3 * time.Minute
		res, err := pipeline.Run(context.Background(), rc)
		if err != nil {
			t.Fatal(err)
		}
		if res.Lost != 0 {
			t.Fatalf("%d conversations lost: %v", res.Lost, res.Missing)
		}
		return res
	}
	first := run()
	requests1 := srv.started.Load()
	if first.Written != conversations || first.Rows != 3*conversations || requests1 < 3*conversations {
		t.Fatalf("first run: %d written, %d rows, %d requests; want %d, %d, at least %d", first.Written, first.Rows, requests1,
			conversations, 3*conversations, 3*conversations)
	}
	second := run()
	if got := srv.started.Load() - requests1; got != 0 {
		t.Fatalf("the second run sent %d requests, want 0", got)
	}
	if second.AlreadyPresent != conversations || second.InShards != 3*conversations || second.Duplicates != 0 || second.Rows != 3*conversations {
		t.Fatalf("second run: %d already present, %d turns reused, %d redone, %d rows; want %d, %d, 0, %d", second.AlreadyPresent,
			second.InShards, second.Duplicates, second.Rows, conversations, 3*conversations, 3*conversations)
	}
	var b strings.Builder
	printSummary(&b, second)
	if !strings.Contains(b.String(), fmt.Sprintf("reused    %d turns already in the shards", 3*conversations)) ||
		!strings.Contains(b.String(), "redone    0 generations") {
		t.Fatalf("summary does not count the reused turns apart:\n%s", b.String())
	}
}
