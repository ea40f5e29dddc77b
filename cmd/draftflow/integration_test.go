package main

// Integration tests of the pipeline against a Kafka cluster: the embedded broker under plain `go test`, a real
// Apache Kafka when DRAFTFLOW_TEST_BROKERS is set (`make test-integration`). Unlike the end-to-end test, which
// runs pipeline.Run as a whole, these assemble the stages one by one so that a test can run two replicas of a
// stage, stop one mid-run, or restart it, and then check the shards row by row.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	pipelinebench "github.com/draftflow/draftflow/bench/pipeline"
	"github.com/draftflow/draftflow/internal/testutil"
	"github.com/draftflow/draftflow/kafka"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/metrics/metricstest"
	"github.com/draftflow/draftflow/sglang/sim"
	"github.com/draftflow/draftflow/sink"
	"github.com/draftflow/draftflow/stages/generate"
	"github.com/draftflow/draftflow/stages/generate/admission"
	"github.com/draftflow/draftflow/stages/ingest"
	"github.com/draftflow/draftflow/stages/tokenize"
	"github.com/draftflow/draftflow/topics"
)

// itestDataset is the dataset name of every integration-test prompt.
const itestDataset = "itest"

// itest is the pipeline of one integration test, assembled stage by stage.
type itest struct {
	t     *testing.T
	kc    kafka.Config
	kcl   *kafka.Client // every stage's: the replicas of a stage differ by their consumers, not their clients
	model *tokenize.Model
	log   *slog.Logger
	out   string // the sink's output directory
	turns string // ingest's turns setting (tests that check one row per id use last; see newITest)

	fatal chan error // a stage that failed on its own

	mu      sync.Mutex
	durable map[string]int // id -> how many times a sink reported it durable
}

func newITest(t *testing.T, kc kafka.Config) *itest {
	t.Helper()
	model, cleanup, err := tokenize.LoadModelOrBundled("")
	t.Cleanup(cleanup)
	if err != nil {
		t.Fatal(err)
	}
	h := &itest{t: t, kc: kc, model: model, log: testLogger(t), out: t.TempDir(), turns: ingest.TurnsLast, fatal: make(chan error, 16),
		durable: map[string]int{}}
	h.kc.Logger = h.log
	if len(kc.Brokers) > 0 { // else the test runs whole processes, with brokers of their own
		h.kcl = kafkatest.Client(t, h.kc) // registered before any stage: closed after every stage stopped
	}
	return h
}

// testLogger logs warnings and errors to the test's output while the test runs, and drops what stragglers log
// after it ended (the Kafka client's goroutines may outlive a stage by a moment).
func testLogger(t *testing.T) *slog.Logger {
	w := &testWriter{w: t.Output()}
	t.Cleanup(w.close)
	level := slog.LevelWarn
	if os.Getenv("DRAFTFLOW_TEST_LOG") == "debug" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

type testWriter struct {
	mu     sync.Mutex
	w      io.Writer
	closed bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return len(p), nil
	}
	return w.w.Write(p)
}

func (w *testWriter) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
}

// runningStage is a stage running in its own goroutine.
type runningStage struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{}
	err    error
	once   sync.Once
}

// start runs a stage until stop (or the end of the test). A stage that returns an error on its own fails the test
// at the next wait.
func (h *itest) start(name string, run func(context.Context) error) *runningStage {
	ctx, cancel := context.WithCancel(context.Background())
	s := &runningStage{name: name, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		s.err = run(ctx)
		if s.err != nil && ctx.Err() == nil {
			select {
			case h.fatal <- fmt.Errorf("%s: %w", name, s.err):
			default:
			}
		}
	}()
	h.t.Cleanup(func() {
		if err := s.stop(); err != nil {
			h.t.Errorf("stopping %s: %v", name, err)
		}
	})
	return s
}

// stop cancels the stage and waits until it returned; it returns the stage's error.
func (s *runningStage) stop() error {
	s.once.Do(func() {
		s.cancel()
		select {
		case <-s.done:
		case <-time.After(90 * time.Second):
			s.err = fmt.Errorf("%s did not stop within 90 s", s.name)
		}
	})
	return s.err
}

// waitFor polls cond until it holds; it fails the test after timeout or when a stage failed.
func (h *itest) waitFor(what string, timeout time.Duration, cond func() bool) {
	h.t.Helper()
	testutil.WaitFor(h.t, timeout, what, func() bool {
		select {
		case err := <-h.fatal:
			h.t.Fatalf("waiting for %s: stage failed: %v", what, err)
		default:
		}
		return cond()
	})
}

// startSim starts a simulated SGLang server shaped after the test model; cfg's other fields are kept.
func (h *itest) startSim(cfg sim.Config) (*sim.Server, string) {
	h.t.Helper()
	cfg.Instant = true
	cfg.Logger = h.log
	cfg.VocabSize = h.model.Tokenizer.VocabSize()
	cfg.SpecialTokenStart = h.model.SpecialTokenStart
	cfg.EOSTokenIDs = nil
	for _, id := range h.model.EOSTokenIDs {
		cfg.EOSTokenIDs = append(cfg.EOSTokenIDs, int(id))
	}
	if cfg.ContextLength == 0 {
		cfg.ContextLength = h.model.ContextLength
	}
	s, err := sim.New(cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	// Registered before any stage, so it runs after every stage stopped.
	h.t.Cleanup(func() {
		s.Close()
		srv.Close()
	})
	return s, srv.URL
}

func (h *itest) tokenize(group string) func(context.Context) error {
	cfg := tokenize.Config{Client: h.kcl, Group: group, Model: h.model, Logger: h.log}
	return func(ctx context.Context) error { return tokenize.Run(ctx, cfg) }
}

// generate runs the generate stage with the fixed policy: concurrency requests at a time per endpoint, at most
// maxInFlight records fetched and unfinished.
func (h *itest) generate(group string, concurrency, maxInFlight int, endpoints ...string) func(context.Context) error {
	cfg := generate.Config{Client: h.kcl, Group: group, MaxInFlight: maxInFlight, Config: admission.Config{Endpoints: endpoints,
		Policy: generate.PolicyFixed, Concurrency: concurrency, HealthInterval: 500 * time.Millisecond, Logger: h.log}}
	return func(ctx context.Context) error { return generate.Run(ctx, cfg) }
}

// sink runs the sink on h.out, counting every id it reports durable; rotateRows 0 is the sink's default.
func (h *itest) sink(rotateRows int) func(context.Context) error {
	cfg := sink.Config{Client: h.kcl, Dir: h.out, RotateRows: rotateRows, IdleFlush: 200 * time.Millisecond, Logger: h.log,
		OnDurable: func(ids []string) {
			h.mu.Lock()
			for _, id := range ids {
				h.durable[id]++
			}
			h.mu.Unlock()
		}}
	return func(ctx context.Context) error { _, err := sink.Run(ctx, cfg); return err }
}

// durableCount returns how many distinct ids the sinks reported durable.
func (h *itest) durableCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.durable)
}

// writtenTwice lists ids a sink reported durable more than once.
func (h *itest) writtenTwice() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for id, n := range h.durable {
		if n > 1 {
			out = append(out, id)
		}
	}
	return out
}

// ingest writes the prompts of path (sampling maxNewTokens) and returns their ids.
func (h *itest) ingest(path string, maxNewTokens int) []string {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var mu sync.Mutex
	var ids []string
	res, err := ingest.Run(ctx, ingest.Config{Client: h.kcl, Inputs: []string{path}, Dataset: itestDataset,
		Defaults: topics.Sampling{MaxNewTokens: maxNewTokens}, Logger: h.log, Turns: h.turns,
		OnPrompt: func(p *topics.Prompt) { mu.Lock(); ids = append(ids, p.ID); mu.Unlock() }})
	if err != nil {
		h.t.Fatal(err)
	}
	if res.Rejected != 0 {
		h.t.Fatalf("ingest rejected %d lines of %s", res.Rejected, path)
	}
	return ids
}

// expectedPrompts tokenizes every prompt of path locally: what the tokenize stage must have produced.
func (h *itest) expectedPrompts(path string, maxNewTokens int) map[string][]uint32 {
	h.t.Helper()
	want := map[string][]uint32{}
	err := ingest.ReadFile(path, func(p topics.Prompt, perr error, src topics.Source, raw []byte) error {
		if perr != nil {
			return perr
		}
		p.Dataset = itestDataset
		if h.turns == ingest.TurnsLast {
			p = ingest.LastTurn(p)
		}
		p.Sampling.MaxNewTokens = maxNewTokens
		ids, err := h.model.Encode(&p)
		if err != nil {
			return err
		}
		want[p.ID] = ids
		return nil
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return want
}

// checkShards reads every shard and checks that each expected id is there exactly once, nothing else is,
// and every row is its tokenized prompt followed by a completion, with a matching loss mask. It returns the
// rows by id.
func (h *itest) checkShards(want map[string][]uint32) map[string]shardRow {
	h.t.Helper()
	t := h.t
	byID := map[string]shardRow{}
	count := map[string]int{}
	for _, r := range readShards(t, h.out) {
		count[r.id]++
		byID[r.id] = r
		prompt, ok := want[r.id]
		if !ok {
			t.Errorf("shard row %q is not an input id", r.id)
			continue
		}
		if r.promptLen != len(prompt) || len(r.inputIDs) <= r.promptLen {
			t.Errorf("%s: prompt_len %d and %d ids, tokenized prompt has %d ids", r.id, r.promptLen, len(r.inputIDs), len(prompt))
			continue
		}
		for i, id := range prompt {
			if r.inputIDs[i] != int32(id) {
				t.Errorf("%s: input_ids[%d] = %d, tokenizer gives %d", r.id, i, r.inputIDs[i], id)
				break
			}
		}
		if len(r.lossMask) != len(r.inputIDs) {
			t.Errorf("%s: %d ids but %d mask values", r.id, len(r.inputIDs), len(r.lossMask))
			continue
		}
		for i, m := range r.lossMask {
			if (i < r.promptLen) != (m == 0) {
				t.Errorf("%s: loss_mask[%d] = %d with prompt_len %d", r.id, i, m, r.promptLen)
				break
			}
		}
	}
	var missing, twice []string
	for id := range want {
		switch count[id] {
		case 0:
			missing = append(missing, id)
		case 1:
		default:
			twice = append(twice, id)
		}
	}
	if len(missing) > 0 || len(twice) > 0 {
		slices.Sort(missing)
		slices.Sort(twice)
		t.Fatalf("%d ids missing from the shards (e.g. %v), %d written more than once (e.g. %v)",
			len(missing), head(missing), len(twice), head(twice))
	}
	if dup := h.writtenTwice(); len(dup) > 0 {
		t.Fatalf("the sinks reported %d ids durable more than once, e.g. %v", len(dup), head(dup))
	}
	return byID
}

func head(s []string) []string { return s[:min(len(s), 5)] }

// readShardStrings returns, for every row of every shard under dir, id -> the value of string column col.
func readShardStrings(t *testing.T, dir, col string) map[string]string {
	t.Helper()
	out := map[string]string{}
	eachShardBatch(t, dir, func(rec arrow.Record, index func(string) arrow.Array) {
		idc, vc := index("id").(*array.String), index(col).(*array.String)
		for i := 0; i < int(rec.NumRows()); i++ {
			out[idc.Value(i)] = vc.Value(i)
		}
	})
	return out
}

// counter returns the value of a counter of the default Prometheus registry with these labels (0 when it has no
// such series yet).
func counter(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	return metricstest.Counter(t, prometheus.DefaultGatherer, name, labels)
}

// consumed is how many records group (logical) fetched from topic (logical) in this process.
func (h *itest) consumed(topic, group string) int {
	return int(counter(h.t, "draftflow_consumed_records_total",
		map[string]string{"topic": h.kc.Topic(topic), "group": h.kc.Topic(group)}))
}

// produced is how many records Kafka acknowledged on topic (logical) in this process.
func (h *itest) produced(topic string) int {
	return int(counter(h.t, "draftflow_produced_records_total", map[string]string{"topic": h.kc.Topic(topic)}))
}

// writeDataset writes n synthetic conversations of about words words and returns the file.
func writeDataset(t *testing.T, n, words int, seed uint64) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "conversations.jsonl")
	if err := pipelinebench.WriteSyntheticDataset(path, n, words, seed); err != nil {
		t.Fatal(err)
	}
	return path
}

// Two replicas of the generate stage share one consumer group on a 6-partition topic; one is stopped mid-run.
// Its partitions move to the other (a rebalance), and nothing is lost: every id is in the shards exactly once.
func TestIntegrationRebalance(t *testing.T) {
	const n, partitions = 600, 6
	h := newITest(t, kafkatest.Config(t, partitions))
	path := writeDataset(t, n, 40, 11)
	want := h.expectedPrompts(path, 64)

	// Each replica talks to its own server, so the endpoint column of the shards says which replica wrote a row.
	// Slow servers (40 ms a request, 2 at a time per replica) keep the run long enough to stop a replica in it.
	simCfg := sim.Config{OutputLenDistribution: sim.DistFixed, OutputLenMean: 16, Seed: 7,
		Faults: sim.Faults{AddedLatency: 40 * time.Millisecond}}
	simA, urlA := h.startSim(simCfg)
	simB, urlB := h.startSim(simCfg)

	h.start("sink", h.sink(20))
	h.start("tokenize", h.tokenize(""))
	genA := h.start("generate-A", h.generate("", 2, 8, urlA))
	h.start("generate-B", h.generate("", 2, 8, urlB))
	ids := h.ingest(path, 64)
	if len(ids) != n {
		t.Fatalf("ingest wrote %d prompts, want %d", len(ids), n)
	}

	// Stop A once both replicas have been working (the group is split between them) and A has done a little:
	// it then still holds unfinished records of its partitions, which must move to B. (How the first split
	// falls depends on which replica joined first and on the fetch order, so do not wait for more.)
	h.waitFor("both replicas generating", 60*time.Second, func() bool {
		return simA.Stats().FinishedRequests >= 20 && simB.Stats().FinishedRequests >= 10
	})
	if err := genA.stop(); err != nil {
		t.Fatalf("generate-A: %v", err)
	}
	doneA := simA.Stats().FinishedRequests
	t.Logf("replica A stopped after %d requests (B: %d, durable: %d)", doneA, simB.Stats().FinishedRequests, h.durableCount())
	if doneA >= n*5/6 {
		t.Fatalf("replica A finished %d of %d requests before it was stopped: little was left to hand over", doneA, n)
	}
	h.waitFor("every id durable", 90*time.Second, func() bool { return h.durableCount() >= n })
	if a := simA.Stats().FinishedRequests; a != doneA {
		t.Fatalf("replica A's server got %d requests after A stopped", a-doneA)
	}

	h.checkShards(want)

	// Which replica wrote each row, by the tokenized partition it came from (records are keyed by id and the
	// writers hash keys, so an id's partition is known).
	endpoint := readShardStrings(t, h.out, "endpoint")
	byPart := map[int]map[string]int{}
	for id, ep := range endpoint {
		p := kafka.PartitionOf(id, partitions)
		if byPart[p] == nil {
			byPart[p] = map[string]int{}
		}
		byPart[p][ep]++
	}
	var handedOver []int
	rowsA, rowsB := 0, 0
	for p, eps := range byPart {
		rowsA += eps[urlA]
		rowsB += eps[urlB]
		if eps[urlA] > 0 && eps[urlB] > 0 {
			handedOver = append(handedOver, p)
		}
	}
	t.Logf("rows by partition and replica: %v (A=%s, B=%s)", byPart, urlA, urlB)
	if rowsA == 0 || rowsB == 0 || rowsA+rowsB != n {
		t.Fatalf("rows written by replica A %d, by B %d, want both > 0 and %d in all", rowsA, rowsB, n)
	}
	if len(handedOver) == 0 {
		t.Fatalf("no partition was served by both replicas: no rebalance handed work over (%v)", byPart)
	}
}

// The generate stage and then the sink are stopped mid-run and started again: each resumes from its group's
// committed offsets instead of starting over, and every id still lands exactly once.
func TestIntegrationRestartResumes(t *testing.T) {
	const n, maxInFlight = 300, 8
	// A restarted stage may redo what it had fetched and not yet committed: at most what it held in flight, plus
	// completions past an unfinished record of the same partition. A stage that started over would redo ~n/3.
	const slack = 3 * maxInFlight
	h := newITest(t, kafkatest.Config(t, 4))
	path := writeDataset(t, n, 40, 12)
	want := h.expectedPrompts(path, 64)
	srv, url := h.startSim(sim.Config{OutputLenDistribution: sim.DistFixed, OutputLenMean: 16, Seed: 3,
		Faults: sim.Faults{AddedLatency: 30 * time.Millisecond}})

	sinkGroup, genGroup := sink.DefaultGroup, generate.DefaultGroup
	sink1 := h.start("sink", h.sink(10))
	h.start("tokenize", h.tokenize(""))
	gen1 := h.start("generate", h.generate("", 2, maxInFlight, url))
	if ids := h.ingest(path, 64); len(ids) != n {
		t.Fatalf("ingest wrote %d prompts, want %d", len(ids), n)
	}

	// Generate: stop it a third of the way in, then start it again.
	h.waitFor("a third generated", 60*time.Second, func() bool { return srv.Stats().FinishedRequests >= n/3 })
	if err := gen1.stop(); err != nil {
		t.Fatalf("generate (first run): %v", err)
	}
	before := srv.Stats().FinishedRequests
	fetched1 := h.consumed(topics.TopicTokenized, genGroup)
	t.Logf("generate stopped after %d requests, %d records fetched", before, fetched1)
	h.start("generate (restarted)", h.generate("", 2, maxInFlight, url))

	// Sink: stop it two thirds of the way in, then start it again on the same directory.
	h.waitFor("two thirds durable", 60*time.Second, func() bool { return h.durableCount() >= 2*n/3 })
	if err := sink1.stop(); err != nil {
		t.Fatalf("sink (first run): %v", err)
	}
	sinkFetched1 := h.consumed(topics.TopicGenerated, sinkGroup)
	durable1 := h.durableCount()
	t.Logf("sink stopped with %d ids durable, %d records fetched", durable1, sinkFetched1)
	h.start("sink (restarted)", h.sink(10))

	h.waitFor("every id durable", 90*time.Second, func() bool { return h.durableCount() >= n })
	h.checkShards(want)

	// Generate resumed: the server saw each prompt about once, and the group fetched each record about once.
	total := srv.Stats().FinishedRequests
	redone := int(total) - n
	t.Logf("server finished %d requests for %d prompts: %d before the restart, %d after", total, n, before, total-before)
	if redone < 0 || redone > slack {
		t.Fatalf("the restarted generate stage redid %d requests (finished %d before the restart, %d in all, %d prompts); want at most %d",
			redone, before, total, n, slack)
	}
	if refetched := h.consumed(topics.TopicTokenized, genGroup) - h.produced(topics.TopicTokenized); refetched > slack {
		t.Fatalf("the generate group fetched %d tokenized records more than were written", refetched)
	}
	// Sink resumed: it fetched each generated record about once over both runs.
	generated := h.produced(topics.TopicGenerated)
	sinkFetched := h.consumed(topics.TopicGenerated, sinkGroup)
	t.Logf("sink fetched %d generated records over both runs (%d before the restart); %d were written", sinkFetched, sinkFetched1, generated)
	if sinkFetched-generated > slack {
		t.Fatalf("the restarted sink fetched %d records again (%d fetched over both runs, %d written)", sinkFetched-generated, sinkFetched, generated)
	}
	if durable1 >= n {
		t.Fatalf("sink stopped with all %d ids durable: the restart was not mid-run", n)
	}
}

// Records of 32,768 tokens (a ~16K-token prompt and a 16,384-token completion) pass through every topic with
// max.message.bytes and the writers' BatchBytes set to 512 KiB, and land token-exact in the shards.
func TestIntegrationLargeRecords(t *testing.T) {
	const n, outputTokens, promptTokens, maxMessageBytes = 4, 16384, 16384 + 64, 512 << 10
	// kafkatest picks the cluster (and creates default topics, unused here); this test's topics get a
	// namespace of their own, created with the deliberate limit.
	base := kafkatest.Config(t, 2)
	kc := base
	kc.Namespace = base.Namespace + "-large"
	kc.MaxMessageBytes = maxMessageBytes
	cl := kafkatest.Client(t, kc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.Admin().EnsureTopics(ctx, topics.Retained()...); err != nil {
		t.Fatal(err)
	}
	for _, topic := range topics.Retained() {
		v, err := cl.Admin().TopicConfigValue(ctx, topic, "max.message.bytes")
		if err != nil {
			t.Fatal(err)
		}
		if v != fmt.Sprint(maxMessageBytes) {
			t.Fatalf("%s: max.message.bytes is %s, want %d", kc.Topic(topic), v, maxMessageBytes)
		}
	}
	h := newITest(t, kc)

	// Conversations whose prompt tokenizes to at least promptTokens tokens, grown from a sample's ratio.
	r := rand.New(rand.NewPCG(5, 5))
	path := filepath.Join(t.TempDir(), "long.jsonl")
	var lines []string
	for i := 0; i < n; i++ {
		words := promptTokens / 2
		for {
			p := topics.Prompt{ID: fmt.Sprintf("long-%d", i), Messages: []topics.Message{{Role: "user", Content: pipelinebench.SyntheticText(r, words)}}}
			ids, err := h.model.Encode(&p)
			if err != nil {
				t.Fatal(err)
			}
			if len(ids) >= promptTokens {
				line, err := jsonLine(p)
				if err != nil {
					t.Fatal(err)
				}
				lines = append(lines, line)
				break
			}
			words = words*promptTokens/len(ids) + 16
		}
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := h.expectedPrompts(path, outputTokens)

	// SGLang refuses prompt + max_new_tokens at or above the context length, and the bundled model has a 32K
	// context: give both the server and the tokenize stage a 64K one.
	_, url := h.startSim(sim.Config{ContextLength: 65536, OutputLenDistribution: sim.DistFixed, OutputLenMean: 2 * outputTokens})
	biggest := h.tapSizes(topics.TopicPrompts, topics.TopicTokenized, topics.TopicGenerated)
	gens := h.tapGenerations()
	h.start("sink", h.sink(0))
	tk := tokenize.Config{Client: h.kcl, Model: h.model, ContextLength: 65536, Logger: h.log}
	h.start("tokenize", func(ctx context.Context) error { return tokenize.Run(ctx, tk) })
	h.start("generate", h.generate("", 4, 16, url))
	if ids := h.ingest(path, outputTokens); len(ids) != n {
		t.Fatalf("ingest wrote %d prompts, want %d", len(ids), n)
	}
	h.waitFor("every id durable", 2*time.Minute, func() bool { return h.durableCount() >= n })
	rows := h.checkShards(want)

	for id, row := range rows {
		if len(row.inputIDs) < 32768 || len(row.inputIDs)-row.promptLen != outputTokens {
			t.Errorf("%s: %d tokens (%d prompt), want %d completion tokens and at least 32768 in all",
				id, len(row.inputIDs), row.promptLen, outputTokens)
		}
		g := gens.get(id)
		if g == nil {
			t.Errorf("%s: not seen on the generated topic", id)
			continue
		}
		got := row.inputIDs[row.promptLen:]
		if len(got) != len(g.OutputIDs) {
			t.Errorf("%s: shard has %d completion tokens, the generated record %d", id, len(got), len(g.OutputIDs))
			continue
		}
		for i, tok := range g.OutputIDs {
			if got[i] != int32(tok) {
				t.Errorf("%s: completion token %d is %d in the shard, %d on the generated topic", id, i, got[i], tok)
				break
			}
		}
		if g.Meta.FinishReason != "length" {
			t.Errorf("%s: finish reason %q, want length", id, g.Meta.FinishReason)
		}
	}
	// The records really were that large on the wire (token ids travel as 4 bytes each).
	for topic, least := range map[string]int{topics.TopicPrompts: 4 * promptTokens / 2, topics.TopicTokenized: 4 * promptTokens,
		topics.TopicGenerated: 4 * 32768} {
		if got := biggest.get(topic); got < least {
			t.Errorf("largest %s record is %d bytes, want at least %d", topic, got, least)
		}
	}
}

// jsonLine encodes a prompt as an input JSONL line.
func jsonLine(p topics.Prompt) (string, error) {
	b, err := json.Marshal(map[string]any{"id": p.ID, "messages": p.Messages})
	return string(b), err
}

// sizeTap records the largest record seen on each topic.
type sizeTap struct {
	mu  sync.Mutex
	max map[string]int
}

func (s *sizeTap) get(topic string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.max[topic]
}

// tapSizes reads the topics in groups of its own and records the largest value on each.
func (h *itest) tapSizes(logical ...string) *sizeTap {
	s := &sizeTap{max: map[string]int{}}
	for _, topic := range logical {
		topic := topic
		c := kafkatest.Client(h.t, h.kc).NewConsumer(topic, kafka.ConsumerConfig{Group: "tap-sizes-" + topic})
		h.start("tap "+topic, func(ctx context.Context) error {
			return c.Run(ctx, func(d *kafka.Delivery) {
				s.mu.Lock()
				s.max[topic] = max(s.max[topic], len(d.Message.Value))
				s.mu.Unlock()
				d.Done()
			})
		})
	}
	return s
}

// genTap keeps the first Generation seen for each id.
type genTap struct {
	mu   sync.Mutex
	gens map[string]*topics.Generation
}

func (g *genTap) get(id string) *topics.Generation {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.gens[id]
}

// tapGenerations reads the generated topic in a group of its own.
func (h *itest) tapGenerations() *genTap {
	g := &genTap{gens: map[string]*topics.Generation{}}
	c := kafkatest.Client(h.t, h.kc).NewConsumer(topics.TopicGenerated, kafka.ConsumerConfig{Group: "tap-generations"})
	h.start("tap generations", func(ctx context.Context) error {
		return c.Run(ctx, func(d *kafka.Delivery) {
			var rec topics.Generation
			if err := topics.Unmarshal(d.Message.Value, &rec); err != nil {
				h.t.Errorf("generated record at %s: %v", d.Where(), err)
			} else {
				g.mu.Lock()
				if g.gens[rec.ID] == nil {
					g.gens[rec.ID] = &rec
				}
				g.mu.Unlock()
			}
			d.Done()
		})
	})
	return g
}

// Topics are created with the configured partition count and max.message.bytes; a second EnsureTopics with
// other settings reuses them as they are, data included, and a new topic gets the new settings.
func TestIntegrationTopicsReused(t *testing.T) {
	const n = 25
	kc := kafkatest.Config(t, 3) // creates every pipeline topic
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	check := func(cfg kafka.Config, topic string, partitions int, maxBytes string) {
		t.Helper()
		cl := kafkatest.Client(t, cfg)
		got, err := cl.Admin().PartitionCount(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		if got != partitions {
			t.Errorf("%s has %d partitions, want %d", cfg.Topic(topic), got, partitions)
		}
		v, err := cl.Admin().TopicConfigValue(ctx, topic, "max.message.bytes")
		if err != nil {
			t.Fatal(err)
		}
		if v != maxBytes {
			t.Errorf("%s: max.message.bytes %s, want %s", cfg.Topic(topic), v, maxBytes)
		}
	}
	defaultMax := fmt.Sprint(kafka.DefaultMaxMessageBytes)
	for _, topic := range topics.Retained() {
		check(kc, topic, 3, defaultMax)
	}

	p := kafkatest.Client(t, kc).NewProducer(topics.TopicPrompts, kafka.ProducerConfig{})
	sent := map[string]string{}
	for i := 0; i < n; i++ {
		rec := &topics.Prompt{ID: fmt.Sprintf("reuse-%02d", i), Dataset: "d",
			Messages: []topics.Message{{Role: "user", Content: fmt.Sprintf("question %d", i)}}}
		if err := p.SendSync(ctx, rec.ID, kafkatest.Encode(t, rec)); err != nil {
			t.Fatal(err)
		}
		sent[rec.ID] = rec.Messages[0].Content
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}

	again := kc
	again.Partitions = 7
	again.MaxMessageBytes = 1 << 20
	againCl := kafkatest.Client(t, again)
	if err := againCl.Admin().EnsureTopics(ctx, topics.Retained()...); err != nil {
		t.Fatalf("EnsureTopics on existing topics: %v", err)
	}
	if err := againCl.Admin().EnsureTopics(ctx, "extra"); err != nil {
		t.Fatal(err)
	}
	for _, topic := range topics.Retained() {
		check(again, topic, 3, defaultMax)
	}
	check(again, "extra", 7, fmt.Sprint(1<<20))

	// The records written before are all still there.
	got := map[string]string{}
	var mu sync.Mutex
	rctx, rcancel := context.WithTimeout(ctx, 60*time.Second)
	defer rcancel()
	c := againCl.NewConsumer(topics.TopicPrompts, kafka.ConsumerConfig{Group: "reader"})
	err := c.Run(rctx, func(d *kafka.Delivery) {
		var rec topics.Prompt
		if err := topics.Unmarshal(d.Message.Value, &rec); err != nil {
			t.Error(err)
		}
		mu.Lock()
		got[rec.ID] = rec.Messages[0].Content
		if len(got) == n {
			rcancel()
		}
		mu.Unlock()
		d.Done()
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("read back %d of the %d records written before the second EnsureTopics", len(got), n)
	}
	for id, content := range sent {
		if got[id] != content {
			t.Errorf("%s: read back %q, wrote %q", id, got[id], content)
		}
	}
}
