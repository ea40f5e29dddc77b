package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/draftflow/draftflow/sink"
)

// TestChaosBrokerRestartsAndKills is `make chaos`: the sample dataset through `draftflow run` against a real
// Kafka broker and a separate simulated SGLang server whose requests take seconds, while the broker is
// restarted (SIGTERM and SIGKILL) and the pipeline process is SIGKILLed and started again, at seeded random
// moments. Afterwards every valid id is in the shards exactly once, the shards match their manifest, and the
// last run exits 0. It needs a broker it may restart: DRAFTFLOW_CHAOS_KAFKA_DIR names the state dir of a
// deploy/kafka/kafka.sh broker (`make chaos` starts one); DRAFTFLOW_CHAOS_SEED replays a run.
func TestChaosBrokerRestartsAndKills(t *testing.T) {
	stateDir := os.Getenv("DRAFTFLOW_CHAOS_KAFKA_DIR")
	if stateDir == "" {
		t.Skip("set DRAFTFLOW_CHAOS_KAFKA_DIR to a kafka.sh broker's state dir (make chaos)")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("DRAFTFLOW_CHAOS_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("chaos seed %d (DRAFTFLOW_CHAOS_SEED=%d replays it)", seed, seed)
	defer func() {
		if t.Failed() {
			t.Logf("failed with chaos seed %d", seed)
		}
	}()
	rng := rand.New(rand.NewPCG(seed, 7))
	kafkaSh := func(args ...string) string {
		cmd := exec.Command("bash", append([]string{"../../deploy/kafka/kafka.sh"}, args...)...)
		cmd.Env = append(os.Environ(), "DRAFTFLOW_KAFKA_DIR="+stateDir)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("kafka.sh %v: %v", args, err)
		}
		return strings.TrimSpace(string(out))
	}
	brokers := kafkaSh("addr")

	bin := filepath.Join(t.TempDir(), "draftflow")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	simAddr := ln.Addr().String()
	ln.Close()
	sim := exec.Command(bin, "sim", "--addr", simAddr, "--time-scale", "8", "--output-len-mean", "200",
		"--vocab-size", "3035", "--eos-token-ids", "3030", "--special-token-start", "3027", "--seed", fmt.Sprint(seed%1000),
		"--log-level", "warn")
	if err := sim.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sim.Process.Kill(); _ = sim.Wait() }()

	out := t.TempDir()
	ns := fmt.Sprintf("chaos-%d", seed)
	logs := &bytes.Buffer{}
	start := func() *exec.Cmd {
		cmd := exec.Command(bin, "run", "--brokers", brokers, "--namespace", ns, "--input", "../../testdata/sample/conversations.jsonl",
			"--out", out, "--sglang", "http://"+simAddr, "--max-new-tokens", "512", "--shutdown-grace", "0", "--log-level", "warn")
		cmd.Stdout, cmd.Stderr = logs, logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	run := start()
	exited := make(chan error, 1)
	go func() { exited <- run.Wait() }()

	faults := []string{"restart", "restart --kill", "kill run"}
	rng.Shuffle(len(faults), func(i, j int) { faults[i], faults[j] = faults[j], faults[i] })
	for _, f := range faults {
		wait := time.Duration(2000+rng.IntN(4000)) * time.Millisecond
		select {
		case err := <-exited:
			t.Logf("the run finished (%v) before fault %q", err, f)
			exited <- err
		case <-time.After(wait):
		}
		t.Logf("after %s: %s", wait, f)
		switch f {
		case "kill run":
			_ = run.Process.Kill()
			<-exited
			run = start()
			go func() { exited <- run.Wait() }()
		default:
			kafkaSh(strings.Fields(f)...)
		}
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the last run failed: %v\n%s", err, tail(logs.String(), 40))
		}
	case <-time.After(10 * time.Minute):
		_ = run.Process.Kill()
		t.Fatalf("the run did not finish\n%s", tail(logs.String(), 40))
	}

	// Every valid id exactly once, shards consistent with the manifest.
	if _, err := sink.Inspect(out, &bytes.Buffer{}); err != nil {
		t.Fatalf("inspect: %v", err)
	}
	var rows bytes.Buffer
	if _, err := sink.Export(out, sink.ExportOptions{Format: sink.FormatSpecForge}, &rows); err != nil {
		t.Fatal(err)
	}
	var ids []string
	sc := bufio.NewScanner(&rows)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var r struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	var want struct {
		IDs []string `json:"ids"`
	}
	b, err := os.ReadFile("../../testdata/sample/expected.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	slices.Sort(want.IDs)
	if !slices.Equal(ids, want.IDs) {
		t.Fatalf("shards hold %d ids (%d distinct), want the %d valid ones exactly once", len(ids), len(slices.Compact(slices.Clone(ids))), len(want.IDs))
	}
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
