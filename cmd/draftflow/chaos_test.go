package main

import (
	"bytes"
	"context"
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
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/draftflow/draftflow/internal/testutil"
	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/offline"
	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/stages/tokenize/tokenizer/bundled"
	"github.com/draftflow/draftflow/topics"
)

// proc is one process of the chaos harness, restarted with the same command line after each kill.
type proc struct {
	name string
	args []string
	// oneShot processes (ingest) are done once they exit 0; the others run until stopped.
	oneShot bool

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan error
	done   bool // a one-shot process finished
	kills  int
	logs   *testutil.Buffer
}

func (p *proc) start(t *testing.T, bin string) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	cmd := exec.Command(bin, p.args...)
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", p.name, err)
	}
	p.cmd, p.exited = cmd, make(chan error, 1)
	go func(c *exec.Cmd, ch chan error) {
		err := c.Wait()
		p.mu.Lock()
		if p.oneShot && err == nil && p.cmd == c {
			p.done = true
		}
		p.mu.Unlock()
		ch <- err
	}(cmd, p.exited)
}

// running reports whether the process is running now.
func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case err := <-p.exited:
		p.exited <- err
		return false
	default:
		return true
	}
}

// kill SIGKILLs the process and waits for it.
func (p *proc) kill() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.kills++
	p.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGKILL)
	err := <-exited
	exited <- err
}

// stop ends the process with SIGTERM (a graceful leave) and returns how it exited.
func (p *proc) stop() error {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		exited <- err
		return err
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		return fmt.Errorf("%s did not stop within 60 s of SIGTERM", p.name)
	}
}

// TestChaosSeparateStages is `make chaos` (and, bounded, part of .ci/run): the sample dataset through the
// pipeline as users deploy it — ingest, tokenize, two generate replicas and the sink as separate processes —
// against a real Kafka broker and two simulated SGLang servers that fail requests, stall, reset connections,
// crash and are restarted. At seeded random moments each stage is SIGKILLed several times and started again,
// the broker is restarted (SIGTERM and SIGKILL) and the servers are killed and started again. Afterwards:
// every valid conversation is in the shards, every turn (id, turn) exactly once and each conversation whole
// (turns 0..n, each continued but the last); every malformed line is on the rejected topic with its file,
// line and reason and nothing valid is; no shard is partial; the manifests match the shards and the token
// counts match the rows (offline.Inspect). It needs a broker it may restart: DRAFTFLOW_CHAOS_KAFKA_DIR names
// the state dir of a deploy/kafka/kafka.sh broker (`make chaos` starts one); DRAFTFLOW_CHAOS_SEED replays a
// run, DRAFTFLOW_CHAOS_ROUNDS sets how many times each stage is killed (default 2).
func TestChaosSeparateStages(t *testing.T) {
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
	rounds := 2
	if s := os.Getenv("DRAFTFLOW_CHAOS_ROUNDS"); s != "" {
		var err error
		if rounds, err = strconv.Atoi(s); err != nil || rounds < 1 {
			t.Fatalf("DRAFTFLOW_CHAOS_ROUNDS=%q", s)
		}
	}
	t.Logf("chaos seed %d (DRAFTFLOW_CHAOS_SEED=%d replays it), %d rounds", seed, seed, rounds)
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

	dir := t.TempDir()
	bin := filepath.Join(dir, "draftflow")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	modelDir := filepath.Join(dir, "model")
	if err := bundled.WriteDir(modelDir); err != nil {
		t.Fatal(err)
	}
	freeAddr := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	simArgs := func(addr string, faults ...string) []string {
		return append([]string{"sim", "--addr", addr, "--time-scale", "8", "--output-len-mean", "200",
			"--vocab-size", "3035", "--eos-token-ids", "3030", "--special-token-start", "3027",
			"--seed", fmt.Sprint(seed % 1000), "--log-level", "warn"}, faults...)
	}
	simA, simB := freeAddr(), freeAddr()
	out := filepath.Join(dir, "out")
	ns := fmt.Sprintf("chaos-%d", seed)
	kafkaArgs := []string{"--brokers", brokers, "--namespace", ns, "--metrics-addr", "", "--log-level", "warn"}
	sglang := "http://" + simA + ",http://" + simB
	procs := map[string]*proc{
		// Server A fails 5% of calls with a 500, resets 3% of connections after the work, stalls 10% by a second.
		"sim-a": {args: simArgs(simA, "--error-rate", "0.05", "--reset-rate", "0.03", "--added-latency", "1s", "--added-latency-rate", "0.1")},
		// Server B answers 3% with "queue full" and crashes every 40 simulated seconds (5 s of wall time).
		"sim-b": {args: simArgs(simB, "--queue-full-rate", "0.03", "--crash-every", "40s", "--crash-downtime", "8s")},
		"ingest": {oneShot: true, args: append([]string{"ingest", "--input", "../../testdata/sample/conversations.jsonl",
			"--max-new-tokens", "512"}, kafkaArgs...)},
		"tokenize":   {args: append([]string{"tokenize", "--model", modelDir}, kafkaArgs...)},
		"generate-a": {args: append([]string{"generate", "--sglang", sglang, "--shutdown-grace", "0"}, kafkaArgs...)},
		"generate-b": {args: append([]string{"generate", "--sglang", sglang, "--shutdown-grace", "0"}, kafkaArgs...)},
		"sink":       {args: append([]string{"sink", "--out", out, "--idle-flush", "2s"}, kafkaArgs...)},
	}
	order := []string{"sim-a", "sim-b", "sink", "tokenize", "generate-a", "generate-b", "ingest"}
	for _, name := range order {
		p := procs[name]
		p.name, p.logs = name, &testutil.Buffer{}
		p.start(t, bin)
	}
	defer func() {
		for _, p := range procs {
			if p.running() {
				_ = p.cmd.Process.Kill()
			}
		}
	}()

	// The faults, in a seeded order: every stage killed `rounds` times, the broker restarted gracefully and
	// killed, each server killed and started again.
	var faults []string
	for range rounds {
		faults = append(faults, "kill tokenize", "kill generate-a", "kill generate-b", "kill sink")
	}
	faults = append(faults, "broker restart", "broker restart --kill", "kill sim-a", "kill sim-b")
	rng.Shuffle(len(faults), func(i, j int) { faults[i], faults[j] = faults[j], faults[i] })
	// Ingest reads the sample in well under a second: it is killed first, mid-file, and once more if it is
	// still at work later (a restarted ingest reads the file again; the sink drops what is already written).
	faults = append([]string{"kill ingest"}, faults...)
	faults = slices.Insert(faults, 1+rng.IntN(len(faults)-1), "kill ingest")
	injected := map[string]int{}
	for i, f := range faults {
		wait := time.Duration(1500+rng.IntN(3000)) * time.Millisecond
		if i == 0 {
			wait = time.Duration(20+rng.IntN(200)) * time.Millisecond
		}
		time.Sleep(wait)
		switch {
		case strings.HasPrefix(f, "broker "):
			kafkaSh(strings.Fields(strings.TrimPrefix(f, "broker "))...)
		default:
			p := procs[strings.TrimPrefix(f, "kill ")]
			if p.oneShot && !p.running() {
				t.Logf("%s: already finished", f)
				continue
			}
			p.kill()
			time.Sleep(time.Duration(100+rng.IntN(900)) * time.Millisecond)
			p.start(t, bin)
		}
		injected[f]++
		t.Logf("fault: %s", f)
	}
	t.Logf("faults injected: %v", injected)

	// Recovery: wait until every valid conversation has ended in the shards.
	var want struct {
		IDs            []string `json:"ids"`
		MalformedLines []int64  `json:"malformed_lines"`
	}
	b, err := os.ReadFile("../../testdata/sample/expected.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Minute)
	for {
		if ended := endedConversations(out); ended >= len(want.IDs) {
			break
		}
		if time.Now().After(deadline) {
			for _, name := range order {
				t.Logf("== %s (killed %d times)\n%s", name, procs[name].kills, tail(procs[name].logs.String(), 15))
			}
			t.Fatalf("after 10 minutes %d of %d conversations have ended in the shards", endedConversations(out), len(want.IDs))
		}
		time.Sleep(2 * time.Second)
	}
	for _, name := range []string{"generate-a", "generate-b", "tokenize", "sink"} {
		if err := procs[name].stop(); err != nil {
			t.Errorf("%s: %v\n%s", name, err, tail(procs[name].logs.String(), 20))
		}
	}
	if p := procs["ingest"]; p.running() {
		t.Error("ingest still running after every conversation ended")
	}

	// No partial shard, manifests and token counts match the rows.
	if _, err := offline.Inspect(context.Background(), out, &bytes.Buffer{}); err != nil {
		t.Fatalf("inspect: %v", err)
	}
	// Every (id, turn) once, every conversation whole, exactly the valid ids.
	conv := checkConversationsHang(t, out)
	var ids []string
	for id := range conv {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	slices.Sort(want.IDs)
	if !slices.Equal(ids, want.IDs) {
		t.Errorf("shards hold %d conversations, want the %d valid ones", len(ids), len(want.IDs))
	}
	rows := 0
	for _, turns := range conv {
		rows += len(turns)
	}
	// Every malformed line on the rejected topic with file, line and reason; nothing else rejected.
	kc := kafka.Config{Brokers: strings.Split(brokers, ","), Namespace: ns}
	n := kafkatest.Size(t, kc, topics.TopicRejected)
	seen := map[int64]bool{}
	for _, r := range kafkatest.Collect[topics.Rejection](t, kc, topics.TopicRejected, n, time.Minute) {
		switch {
		case r.Stage != "ingest":
			t.Errorf("a valid record was rejected by %s: %s (%s)", r.Stage, r.ID, r.Reason)
		case !strings.HasSuffix(r.Source.File, "conversations.jsonl") || r.Reason == "" || r.Class == "":
			t.Errorf("rejection without file, reason or class: %+v", r)
		default:
			seen[r.Source.Line] = true
		}
	}
	for _, line := range want.MalformedLines {
		if !seen[line] {
			t.Errorf("malformed line %d is not on the rejected topic", line)
		}
	}
	kills := 0
	for _, p := range procs {
		kills += p.kills
	}
	t.Logf("survived %d process kills, %d broker restarts and server faults: %d conversations, %d turn rows, lost 0, duplicated 0",
		kills, injected["broker restart"]+injected["broker restart --kill"], len(conv), rows)
}

// endedConversations counts the conversations whose last turn in the shards under out ended it (0 while the
// shards cannot be read).
func endedConversations(out string) int {
	runs, err := shard.RunDirs(out)
	if err != nil || len(runs) == 0 {
		return 0
	}
	last := map[string]struct {
		turn int32
		stop string
	}{}
	err = shard.ScanRows(context.Background(), out, func(r *shard.Row) error {
		if l, ok := last[r.ID]; !ok || r.Turn > l.turn {
			last[r.ID] = struct {
				turn int32
				stop string
			}{r.Turn, r.StopReason}
		}
		return nil
	})
	if err != nil {
		return 0
	}
	n := 0
	for _, l := range last {
		if l.stop != topics.StopContinued {
			n++
		}
	}
	return n
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
