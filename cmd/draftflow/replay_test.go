package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
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
	"github.com/draftflow/draftflow/stages/tokenize"
	"github.com/draftflow/draftflow/stages/tokenize/tokenizer/bundled"
	"github.com/draftflow/draftflow/topics"
)

// firstRun runs the bundled sample through every stage on kc (max_new_tokens left to generate's default,
// maxNew) into out and returns the distinct ids in the shards.
func firstRun(t *testing.T, kc kafka.Config, out string, maxNew int) map[string]bool {
	t.Helper()
	rc := simRun(kc, out, sampleFile)
	rc.Generate.DefaultMaxNewTokens = maxNew
	rc.Sim.OutputLenMean = 200
	rc.Timeout = 3 * time.Minute
	res, err := pipeline.Run(context.Background(), rc)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Missing) != 0 {
		t.Fatalf("first run lost %v", res.Missing)
	}
	ids := map[string]bool{}
	for _, r := range readShards(t, out) {
		ids[r.id] = true
	}
	if len(ids) == 0 {
		t.Fatal("first run wrote no rows")
	}
	return ids
}

// replayCLI runs `draftflow replay` with args against kc's brokers and namespace.
func replayCLI(t *testing.T, kc kafka.Config, args ...string) error {
	t.Helper()
	return cmdReplay(context.Background(), append([]string{"--brokers", strings.Join(kc.Brokers, ","), "--namespace", kc.Namespace}, args...))
}

// runStages runs the given stages (tokenize and/or generate, always sink into out) on one client of kc until the
// sink made every id of want durable, and returns the manifests of out's runs. tk's InputNamespace is kept.
func runStages(t *testing.T, kc kafka.Config, tk *tokenize.Config, gen generate.Config, out string, want map[string]bool) []shard.Manifest {
	t.Helper()
	log := slog.Default()
	model, cleanup, err := tokenize.LoadModelOrBundled("")
	defer cleanup()
	if err != nil {
		t.Fatal(err)
	}
	ctxLen, err := model.ContextWindow(0)
	if err != nil {
		t.Fatal(err)
	}
	url, stopSim, err := pipeline.StartSim(sim.Config{Instant: true, OutputLenMean: 200}, model, ctxLen, log)
	if err != nil {
		t.Fatal(err)
	}
	defer stopSim()
	kcl := kafkatest.Client(t, kc)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 3)
	start := func(name string, run func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				errc <- fmt.Errorf("%s: %w", name, err)
			}
		}()
	}
	if tk != nil {
		tk.Client, tk.Logger = kcl, log
		if tk.Model == nil {
			tk.Model = model
		}
		start("tokenize", func(ctx context.Context) error { return tokenize.Run(ctx, *tk) })
	}
	gen.Client, gen.Logger, gen.Endpoints = kcl, log, []string{url}
	start("generate", func(ctx context.Context) error { return generate.Run(ctx, gen) })
	var mu sync.Mutex
	durable := map[string]bool{}
	done := make(chan struct{})
	sk := sink.Config{Client: kcl, Logger: log, Dir: out, IdleFlush: 200 * time.Millisecond, OnDurable: func(ids []string) {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			durable[id] = true
		}
		if len(durable) == len(want) {
			select {
			case <-done:
			default:
				close(done)
			}
		}
	}}
	start("sink", func(ctx context.Context) error { _, err := sink.Run(ctx, sk); return err })
	select {
	case <-done:
	case err := <-errc:
		t.Fatal(err)
	case <-ctx.Done():
		mu.Lock()
		t.Fatalf("only %d of %d ids reached the shards", len(durable), len(want))
	}
	cancel()
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	return manifests(t, out)
}

func manifests(t *testing.T, out string) []shard.Manifest {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(out, "*", "manifest.json"))
	var ms []shard.Manifest
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var m shard.Manifest
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	return ms
}

// checkOnce checks the shards under out hold every id of want exactly once per turn-0 row and nothing else.
func checkOnce(t *testing.T, out string, want map[string]bool) []shardRow {
	t.Helper()
	rows := readShards(t, out)
	seen := map[string]int{}
	for _, r := range rows {
		seen[r.id]++
		if !want[r.id] {
			t.Errorf("row %q was not in the first run", r.id)
		}
	}
	for id := range want {
		if seen[id] == 0 {
			t.Errorf("id %q missing from %s", id, out)
		}
	}
	return rows
}

// TestStageReplayRegenerate is the README's recipe (a): regenerate `tokenized` with other sampling settings
// (here max_new_tokens) into a new sink directory, without ingesting or tokenizing again: stop generate and
// sink, `replay --stage sink --to-latest`, `replay --stage generate --to-earliest`, start them again.
func TestStageReplayRegenerate(t *testing.T) {
	kc := kafkatest.Config(t, 2)
	out1, out2 := t.TempDir(), t.TempDir()
	want := firstRun(t, kc, out1, 256)
	tokenizedBefore := kafkatest.Size(t, kc, topics.TopicTokenized)
	promptsBefore := kafkatest.Size(t, kc, topics.TopicPrompts)

	if err := replayCLI(t, kc, "--stage", "sink", "--to-latest"); err != nil {
		t.Fatal(err)
	}
	if err := replayCLI(t, kc, "--stage", "generate", "--to-earliest", "--dry-run"); err != nil {
		t.Fatal(err)
	}
	if err := replayCLI(t, kc, "--stage", "generate", "--to-earliest"); err != nil {
		t.Fatal(err)
	}
	maxNew, temp, seed := 16, 0.25, int64(7)
	// tokenize keeps running: the later turns of the new generations come back through it. It tokenizes
	// nothing else again (its group is at the end of prompts), and generate skips the first run's later
	// turns it finds on tokenized (built from the first run's replies).
	ms := runStages(t, kc, &tokenize.Config{}, generate.Config{Override: generate.Override{MaxNewTokens: &maxNew, Temperature: &temp, Seed: &seed}}, out2, want)
	if len(ms) != 1 {
		t.Fatalf("second run's manifests: %+v, want one run", ms)
	}
	if got := ms[0].Run.Sampling; got.MaxNewTokens != 16 || got.Temperature == nil || *got.Temperature != 0.25 ||
		got.Seed == nil || *got.Seed != 7 {
		t.Fatalf("second run's sampling %+v, want the overrides (max_new_tokens 16, temperature 0.25, seed 7)", got)
	}
	rows := checkOnce(t, out2, want)
	for _, r := range rows {
		if n := len(r.inputIDs) - r.promptLen; n > 16 {
			t.Errorf("%s: %d completion tokens, over the new max_new_tokens 16", r.id, n)
		}
	}
	grewT := kafkatest.Size(t, kc, topics.TopicTokenized) - tokenizedBefore
	grewP := kafkatest.Size(t, kc, topics.TopicPrompts) - promptsBefore
	if grewT != grewP {
		t.Errorf("tokenized grew by %d records, prompts by %d (the second run's later turns): the recipe must not tokenize again", grewT, grewP)
	}
	// Every later turn in the new shards continues the new run's own previous turn: none of the first run's
	// later turns (on tokenized, replayed) was generated again into it.
	checkConversationsHang(t, out2)
}

// TestStageReplayRetokenize is the README's recipe (b): tokenize namespace A's prompts again for another model
// into namespace B (tokenize --namespace B --input-namespace A), then generate and sink in B.
func TestStageReplayRetokenize(t *testing.T) {
	kcA := kafkatest.Config(t, 2)
	out1, out2 := t.TempDir(), t.TempDir()
	want := firstRun(t, kcA, out1, 64)
	promptsBefore := kafkatest.Size(t, kcA, topics.TopicPrompts)

	kcB := kcA
	kcB.Namespace = kcA.Namespace + "-b"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := kafkatest.Client(t, kcB).Admin().EnsureTopics(ctx, topics.Retained()...); err != nil {
		t.Fatal(err)
	}
	ms := runStages(t, kcB, &tokenize.Config{ModelName: "other-model", InputNamespace: kcA.Namespace}, generate.Config{Config: admission.Config{DefaultMaxNewTokens: 64}}, out2, want)
	if len(ms) != 1 || ms[0].Run.Model != "other-model" {
		t.Fatalf("second run's manifests: %+v, want one run of other-model", ms)
	}
	checkOnce(t, out2, want)
	if n := kafkatest.Size(t, kcA, topics.TopicPrompts); n != promptsBefore {
		t.Errorf("A's prompts grew from %d to %d: nothing is ingested again", promptsBefore, n)
	}
	if n := kafkatest.Size(t, kcA, topics.TopicTokenized); n != kafkatest.Size(t, kcB, topics.TopicTokenized) {
		t.Logf("tokenized: %d records in A, %d in B", n, kafkatest.Size(t, kcB, topics.TopicTokenized))
	}
	// B's prompts topic holds only B's own later turns, built from B's replies; A's later turns were skipped.
	nB := kafkatest.Size(t, kcB, topics.TopicPrompts)
	if nB == 0 {
		t.Fatal("B's prompts topic holds none of B's later turns")
	}
	for _, p := range kafkatest.Collect[topics.Prompt](t, kcB, topics.TopicPrompts, nB, 30*time.Second) {
		if !p.Continuation || p.Turn == 0 {
			t.Errorf("B's prompts topic got an ingested prompt: %s turn %d", p.ID, p.Turn)
		}
	}
	if nB == 0 {
		t.Error("B sent no later turns: the sample's multi-turn conversations were not regenerated turn by turn in B")
	}
	checkConversationsHang(t, out2)
}

// `draftflow tokenize --input-namespace NS` checks, on the process's one client, that NS's prompts topic exists
// (the topics of its own namespace do): a namespace without one is an error naming it, before the stage starts.
func TestInputNamespaceMustExist(t *testing.T) {
	kc := kafkatest.Config(t, 1)
	modelDir := t.TempDir()
	if err := bundled.WriteDir(modelDir); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := cmdTokenize(ctx, []string{"--brokers", strings.Join(kc.Brokers, ","), "--namespace", kc.Namespace, "--metrics-addr", "",
		"--model", modelDir, "--input-namespace", kc.Namespace + "-none"})
	if err == nil || !strings.Contains(err.Error(), "--input-namespace "+kc.Namespace+"-none: topic "+kc.Namespace+"-none.prompts") {
		t.Fatalf("tokenize reading a namespace without topics: %v", err)
	}
}

// TestConsumerReplayRefusesLiveGroup: `draftflow replay` on a group with a live member fails, naming it.
func TestConsumerReplayRefusesLiveGroup(t *testing.T) {
	kc := kafkatest.Config(t, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := kafkatest.Client(t, kc).NewConsumer(topics.TopicTokenized, kafka.ConsumerConfig{Group: generate.DefaultGroup, SessionTimeout: 6 * time.Second})
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, func(d *kafka.Delivery) { d.Done() }) }()
	deadline := time.Now().Add(30 * time.Second)
	for c.Assigned() == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	err := replayCLI(t, kc, "--stage", "generate", "--to-earliest")
	if !errors.Is(err, kafka.ErrGroupActive) || !strings.Contains(err.Error(), "live members") || !strings.Contains(err.Error(), "draftflow") {
		t.Errorf("replay of a live group: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestStageReplaySameSettingsNewOut is recipe (a) with the first run's own settings (another checkpoint of the
// same tokenizer, say) into a new --out: replaying the generate stage voids what the shards topic says the first
// output holds, so generate sends every replayed record again instead of skipping it as already in the shards.
func TestStageReplaySameSettingsNewOut(t *testing.T) {
	kc := kafkatest.Config(t, 2)
	out1, out2 := t.TempDir(), t.TempDir()
	want := firstRun(t, kc, out1, 256)
	if err := replayCLI(t, kc, "--stage", "sink", "--to-latest"); err != nil {
		t.Fatal(err)
	}
	if err := replayCLI(t, kc, "--stage", "generate", "--to-earliest"); err != nil {
		t.Fatal(err)
	}
	ms := runStages(t, kc, &tokenize.Config{}, generate.Config{Config: admission.Config{DefaultMaxNewTokens: 256}}, out2, want)
	first := manifests(t, out1)
	if len(ms) != 1 || len(first) != 1 || ms[0].Run.Fingerprint != first[0].Run.Fingerprint {
		t.Fatalf("the replay's run %+v, the first %+v: want one run with the same settings", ms, first)
	}
	checkOnce(t, out2, want)
}
