package sink

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/offline"
	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/shard/shardtest"
	"github.com/draftflow/draftflow/sink/journal"
	"github.com/draftflow/draftflow/topics"
)

// testIdleFlush is the idle flush of baseConfig: the tests' inputs are finite and short.
const testIdleFlush = 300 * time.Millisecond

func baseConfig(t testing.TB, kc kafka.Config, dir string) Config {
	return Config{Client: kafkatest.Client(t, kc), Dir: dir, Group: "sink-test", RotateRows: 40, IdleFlush: testIdleFlush, RowGroupRows: 16}
}

func allDurable(ids []string) func(durable, dups map[string]int) bool {
	return func(durable, _ map[string]int) bool {
		for _, id := range ids {
			if durable[id] == 0 {
				return false
			}
		}
		return true
	}
}

func idsOf(gens []*topics.Generation) []string {
	out := make([]string, len(gens))
	for i, g := range gens {
		out[i] = g.ID
	}
	return out
}

// collectRejections reads the rejected topic until n rejections arrived.
func collectRejections(t *testing.T, kc kafka.Config, n int) []*topics.Rejection {
	t.Helper()
	out := kafkatest.Collect[topics.Rejection](t, kc, topics.TopicRejected, n, 60*time.Second)
	if len(out) < n {
		t.Fatalf("%d rejections, want %d", len(out), n)
	}
	return out
}

func TestSinkEndToEnd(t *testing.T) {
	kc := kafkatest.Config(t, 4)
	dir := t.TempDir()
	gens := mkGens(0, 300, 0.7)
	produceGens(t, kc, gens)
	// Two bad records: not a draftflow value, and a generation without output.
	empty := shardtest.Generation(9999, 0.7)
	empty.OutputIDs = nil
	emptyVal, _ := topics.Marshal(empty)
	produce(t, kc, []string{"junk", empty.ID}, [][]byte{[]byte("not a record"), emptyVal})

	sr := startSink(t, baseConfig(t, kc, dir))
	sr.waitFor(t, "every generation durable", allDurable(idsOf(gens)))
	rej := collectRejections(t, kc, 2)
	if err := sr.stop(t); err != nil {
		t.Fatal(err)
	}
	reasons := map[string]string{}
	for _, r := range rej {
		if r.Stage != "sink" || r.Topic != kc.Topic(topics.TopicGenerated) || len(r.Payload) == 0 {
			t.Errorf("bad rejection %+v", r)
		}
		reasons[r.ID] = r.Reason
	}
	if !strings.Contains(reasons["junk"], "magic") || !strings.Contains(reasons[empty.ID], "empty completion") {
		t.Errorf("rejection reasons %q", reasons)
	}

	rows := shardtest.ReadRows(t, dir)
	if len(rows) != 1 {
		t.Fatalf("%d runs, want 1", len(rows))
	}
	for _, rs := range rows {
		checkRowsExact(t, rs, gens)
	}
	var out bytes.Buffer
	sum, err := inspect(dir, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	var wantTokens int64
	for _, g := range gens {
		wantTokens += int64(len(g.PromptIDs) + len(g.OutputIDs))
	}
	if sum.Rows != 300 || sum.Tokens != wantTokens || sum.Shards < 4 {
		t.Fatalf("inspect summary rows %d tokens %d shards %d; want 300, %d, >= 4", sum.Rows, sum.Tokens, sum.Shards, wantTokens)
	}

	// Shard names and metadata locate the partition and offsets; run metadata is there.
	runDirs, _ := shard.RunDirs(dir)
	m, err := shard.ReadManifest(runDirs[0])
	if err != nil {
		t.Fatal(err)
	}
	if m.Totals.Rows != 300 || m.Totals.Tokens != wantTokens || m.Run.Model != "models/Tiny-Chat" || m.Run.Sampling.Lane != "" {
		t.Fatalf("manifest totals/run wrong: %+v %+v", m.Totals, m.Run)
	}
	for _, sh := range m.Shards {
		si, ok := shard.ParseName(sh.File)
		if !ok || si.Partition != sh.Partition || si.FirstOffset != sh.FirstOffset || si.Topic != kc.Topic(topics.TopicGenerated) {
			t.Fatalf("shard %s does not match its manifest entry %+v", sh.File, sh)
		}
		sf, err := shard.Open(filepath.Join(runDirs[0], sh.File))
		if err != nil {
			t.Fatal(err)
		}
		var ri shard.RunInfo
		json.Unmarshal([]byte(sf.Meta(shard.MetaRun)), &ri)
		if ri.Fingerprint != m.Run.Fingerprint || ri.Sampling.Temperature == nil || *ri.Sampling.Temperature != 0.7 ||
			sf.Meta(shard.MetaPartition) != strconv.Itoa(sh.Partition) || sf.Meta(shard.MetaLastOffset) != strconv.FormatInt(sh.LastOffset, 10) ||
			!strings.Contains(sf.Meta(shard.MetaSchema), "loss_mask") {
			t.Fatalf("shard %s metadata wrong: run %+v", sh.File, ri)
		}
		sf.Close()
	}

	// Export: both formats, token-exact.
	byID := map[string]*topics.Generation{}
	for _, g := range gens {
		byID[g.ID] = g
	}
	for _, format := range []string{offline.FormatSpecForge, offline.FormatSpeculators} {
		var buf bytes.Buffer
		rep, err := offline.Export(context.Background(), dir, offline.ExportOptions{Format: format}, &buf)
		if err != nil || rep.Kept != 300 || rep.Rows != 300 {
			t.Fatalf("export %s: %+v, %v", format, rep, err)
		}
		sc := bufio.NewScanner(&buf)
		sc.Buffer(nil, 1<<24)
		for sc.Scan() {
			var r struct {
				ID        string  `json:"id"`
				PrimaryID string  `json:"primary_id"`
				InputIDs  []int64 `json:"input_ids"`
				LossMask  []int   `json:"loss_mask"`
				Metadata  struct {
					FinishReason string `json:"finish_reason"`
				} `json:"metadata"`
			}
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatal(err)
			}
			id := r.ID
			if format == offline.FormatSpeculators {
				id = r.PrimaryID
				if r.ID != id+"_gen0" || r.Metadata.FinishReason != byID[id].Meta.FinishReason {
					t.Fatalf("speculators row %s/%s metadata %+v", r.ID, r.PrimaryID, r.Metadata)
				}
			}
			g := byID[id]
			var want []int64
			var mask []int
			for _, v := range g.PromptIDs {
				want, mask = append(want, int64(v)), append(mask, 0)
			}
			for _, v := range g.OutputIDs {
				want, mask = append(want, int64(v)), append(mask, 1)
			}
			if !slices.Equal(r.InputIDs, want) || !slices.Equal(r.LossMask, mask) {
				t.Fatalf("%s export of %s is not token-exact", format, id)
			}
		}
	}
	if _, err := offline.Export(context.Background(), dir, offline.ExportOptions{Format: "csv"}, &bytes.Buffer{}); err == nil {
		t.Fatal("unknown export format accepted")
	}
}

func TestSinkRestartDuplicatesAndRewind(t *testing.T) {
	kc := kafkatest.Config(t, 4)
	dir := t.TempDir()
	first := mkGens(0, 200, 0.7)
	produceGens(t, kc, first)
	cfg := baseConfig(t, kc, dir)
	cfg.RotateRows = 25
	sr := startSink(t, cfg)
	sr.waitFor(t, "some shards", func(d, _ map[string]int) bool { return len(d) >= 60 })
	if err := sr.stop(t); err != nil {
		t.Fatal(err)
	}

	// Upstream redelivers the first 50 (new offsets, same ids) and sends 200 new ones.
	second := mkGens(200, 400, 0.7)
	produceGens(t, kc, append(mkGens(0, 50, 0.7), second...))
	sr = startSink(t, cfg)
	sr.waitFor(t, "the rest durable and the copies dropped", func(d, dups map[string]int) bool {
		for _, g := range second {
			if d[g.ID] == 0 {
				return false
			}
		}
		return len(dups) >= 50
	})
	if err := sr.stop(t); err != nil {
		t.Fatal(err)
	}

	// A new group starts from offset 0: everything on disk is skipped by offset, whatever Kafka says.
	cfg.Group = "sink-test-rewound"
	sr = startSink(t, cfg)
	sentinels := mkGens(400, 440, 0.7)
	produceGens(t, kc, sentinels)
	sr.waitFor(t, "sentinels durable", allDurable(idsOf(sentinels)))
	sr.mu.Lock()
	for id, n := range sr.durable {
		if !strings.HasPrefix(id, "conv-004") || n != 1 {
			t.Errorf("after rewind %s was written again (%d)", id, n)
		}
	}
	// Everything the rewound group re-reads lies below the recovered offsets: it must be skipped by offset
	// before id deduplication sees it (which would also keep it out of the shards, but count it as a duplicate).
	if len(sr.dups) != 0 {
		t.Errorf("after rewind %d records below the recovered offsets were dropped by id instead of skipped by offset", len(sr.dups))
	}
	sr.mu.Unlock()
	if err := sr.stop(t); err != nil {
		t.Fatal(err)
	}
	all := append(append(mkGens(0, 200, 0.7), second...), sentinels...)
	for _, rs := range shardtest.ReadRows(t, dir) {
		checkRowsExact(t, rs, all)
	}
	checkTokenCounts(t, dir)
	if _, err := inspect(dir, nil); err != nil {
		t.Fatal(err)
	}
}

func TestReplayWithNewSamplingGoesToNewRun(t *testing.T) {
	kc := kafkatest.Config(t, 2)
	dir := t.TempDir()
	a, b := mkGens(0, 60, 0.7), mkGens(0, 60, 1.0)
	mixed := make([]*topics.Generation, 0, 120)
	for i := range a {
		mixed = append(mixed, a[i], b[i]) // interleaved in each partition
	}
	produceGens(t, kc, mixed)
	sr := startSink(t, baseConfig(t, kc, dir))
	sr.waitFor(t, "both runs durable", func(d, _ map[string]int) bool {
		for _, g := range a {
			if d[g.ID] < 2 {
				return false
			}
		}
		return true
	})
	if err := sr.stop(t); err != nil {
		t.Fatal(err)
	}
	rows := shardtest.ReadRows(t, dir)
	if len(rows) != 2 {
		t.Fatalf("%d run directories, want 2", len(rows))
	}
	want := map[string][]*topics.Generation{shard.RunOf(a[0]).DirName(): a, shard.RunOf(b[0]).DirName(): b}
	for name, rs := range rows {
		if want[name] == nil {
			t.Fatalf("unexpected run directory %s", name)
		}
		checkRowsExact(t, rs, want[name])
	}
	checkTokenCounts(t, dir)
	if _, err := inspect(dir, nil); err != nil {
		t.Fatal(err)
	}
}

// TestSinkKilledMidRun runs the sink in a child process, kills it with SIGKILL while it writes, and checks that
// a restart (in a new group, so from offset 0) ends with every id exactly once.
func TestSinkKilledMidRun(t *testing.T) {
	kc := kafkatest.Config(t, 4)
	dir := t.TempDir()
	gens := mkGens(0, 400, 0.7)
	produceGens(t, kc, gens)

	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperSinkProcess$")
	cmd.Env = append(os.Environ(), "DRAFTFLOW_SINK_HELPER=1", "HELPER_BROKERS="+strings.Join(kc.Brokers, ","),
		"HELPER_NAMESPACE="+kc.Namespace, "HELPER_DIR="+dir)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		runs, _ := shard.RunDirs(dir)
		if len(runs) > 0 {
			if m, err := shard.ReadManifest(runs[0]); err == nil && len(m.Shards) >= 3 {
				break
			}
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("child sink wrote no shards")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	before := 0
	for _, rs := range shardtest.ReadRows(t, dir) {
		before += len(rs)
	}
	if before >= len(gens) {
		t.Fatalf("the child finished (%d rows) before it was killed; the test proves nothing", before)
	}
	t.Logf("killed the child with %d of %d rows durable", before, len(gens))

	cfg := baseConfig(t, kc, dir)
	cfg.Group = "sink-after-kill"
	sr := startSink(t, cfg)
	sentinels := mkGens(1000, 1040, 0.7)
	produceGens(t, kc, sentinels)
	sr.waitFor(t, "all durable after restart", func(d, _ map[string]int) bool {
		for _, g := range sentinels {
			if d[g.ID] == 0 {
				return false
			}
		}
		return true
	})
	if err := sr.stop(t); err != nil {
		t.Fatal(err)
	}
	for _, rs := range shardtest.ReadRows(t, dir) {
		checkRowsExact(t, rs, append(gens, sentinels...))
	}
	checkTokenCounts(t, dir)
	if _, err := inspect(dir, nil); err != nil {
		t.Fatal(err)
	}
	assertNoTemps(t, dir)
}

// TestSinkKilledKeepsJournaledRows: a sink that has written no shard yet (rows wait for a large one) is
// SIGKILLed; its rows are in the journal alone. A new broker then replaces the old (as a second `draftflow run`
// starts its own): the restarted sink writes every row the killed one reported durable into shards, the new
// broker's copies of the same generations are dropped as duplicates, and every row ends exactly once.
func TestSinkKilledKeepsJournaledRows(t *testing.T) {
	dir := t.TempDir()
	kc := freshBroker(t, "journal")
	gens := mkGens(0, 400, 0.7)
	produceGens(t, kc, gens)

	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperSinkProcess$")
	cmd.Env = append(os.Environ(), "DRAFTFLOW_SINK_HELPER=1", "HELPER_MODE=journal", "HELPER_BROKERS="+strings.Join(kc.Brokers, ","),
		"HELPER_NAMESPACE="+kc.Namespace, "HELPER_DIR="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	reported := map[string]bool{}
	sc := bufio.NewScanner(out)
	for len(reported) < 150 && sc.Scan() {
		if id, ok := strings.CutPrefix(sc.Text(), "journaled "); ok {
			reported[id] = true
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if len(reported) < 150 {
		t.Fatalf("the child reported %d rows before it ended", len(reported))
	}
	if runs, _ := shard.RunDirs(dir); len(runs) != 0 {
		t.Fatalf("the child wrote shards (%v); the test proves nothing", runs)
	}
	if n := journal.Pending(dir); n < int64(len(reported)) {
		t.Errorf("JournalPending counts %d records, want at least the %d reported", n, len(reported))
	}

	kc = freshBroker(t, "journal")
	sr := startSink(t, baseConfig(t, kc, dir))
	sr.waitFor(t, "the journal's rows durable", func(d, _ map[string]int) bool { return len(d) >= len(reported) })
	inShards := readRowsQuiet(dir)
	for id := range reported {
		if !inShards[id] {
			t.Errorf("%s was reported durable by the killed sink but is not in the shards", id)
		}
	}
	t.Logf("killed with %d rows reported durable; %d rows recovered from the journal into shards", len(reported), len(inShards))
	produceGens(t, kc, gens)
	// The copies of what the journal held are duplicates; the rest (the killed sink may have been stopped before
	// it journaled every row) are written now.
	sr.waitFor(t, "the new broker's copies of the journal's rows dropped as duplicates, the rest written",
		func(durable, dups map[string]int) bool {
			for _, g := range gens {
				if inShards[g.ID] && dups[g.ID] == 0 || !inShards[g.ID] && durable[g.ID] == 0 {
					return false
				}
			}
			return true
		})
	if err := sr.stop(t); err != nil {
		t.Fatal(err)
	}
	for _, rs := range shardtest.ReadRows(t, dir) {
		checkRowsExact(t, rs, gens)
	}
	checkTokenCounts(t, dir)
	if _, err := inspect(dir, nil); err != nil {
		t.Fatal(err)
	}
	if n := journal.Pending(dir); n != 0 {
		t.Errorf("JournalPending counts %d records after a clean stop", n)
	}
}

// TestHelperSinkProcess is the child of TestSinkKilledMidRun; it does nothing in a normal test run.
func TestHelperSinkProcess(t *testing.T) {
	if os.Getenv("DRAFTFLOW_SINK_HELPER") != "1" {
		t.Skip("helper process only")
	}
	kc := kafka.Config{Brokers: strings.Split(os.Getenv("HELPER_BROKERS"), ","), Namespace: os.Getenv("HELPER_NAMESPACE")}
	cfg := baseConfig(t, kc, os.Getenv("HELPER_DIR"))
	cfg.RotateRows = 7
	cfg.Logger = quietLogger()
	if os.Getenv("HELPER_MODE") == "journal" {
		// No shard before the kill: rows are durable in the journal alone, and reported as they are.
		cfg.RotateRows, cfg.IdleFlush, cfg.JournalSync = 1_000_000, -1, 20*time.Millisecond
		var mu sync.Mutex
		cfg.OnJournaled = func(ids []string) {
			mu.Lock()
			defer mu.Unlock()
			for _, id := range ids {
				fmt.Println("journaled", id)
			}
		}
	}
	_, err := Run(context.Background(), cfg)
	fmt.Fprintln(os.Stderr, "helper sink returned", err)
}

// TestNewBrokerSameDir replays into an existing directory from a fresh broker (as a second `draftflow run`
// does): offsets restart at 0, so the recovery point of the old topic must not apply; replayed ids are
// dropped as duplicates, new ids written, and no shard is overwritten.
func TestNewBrokerSameDir(t *testing.T) {
	dir := t.TempDir()
	broker := func() kafka.Config { return freshBroker(t, "replay") }
	first := mkGens(0, 80, 0.7)
	kc := broker()
	produceGens(t, kc, first)
	sr := startSink(t, baseConfig(t, kc, dir))
	sr.waitFor(t, "first run durable", allDurable(idsOf(first)))
	if err := sr.stop(t); err != nil {
		t.Fatal(err)
	}

	kc = broker()
	second := mkGens(0, 120, 0.7)
	produceGens(t, kc, second)
	sr = startSink(t, baseConfig(t, kc, dir))
	sr.waitFor(t, "replay resolved", func(d, dups map[string]int) bool {
		for i, g := range second {
			if (i < 80 && dups[g.ID] == 0) || (i >= 80 && d[g.ID] == 0) {
				return false
			}
		}
		return true
	})
	if err := sr.stop(t); err != nil {
		t.Fatal(err)
	}
	for _, rs := range shardtest.ReadRows(t, dir) {
		checkRowsExact(t, rs, second)
	}
	checkTokenCounts(t, dir)
	if _, err := inspect(dir, nil); err != nil {
		t.Fatal(err)
	}
}

// freshBroker starts a new embedded broker (a new incarnation of every topic, offsets from 0) with the
// pipeline's topics in namespace ns.
func freshBroker(t *testing.T, ns string) kafka.Config {
	t.Helper()
	kc := kafka.Config{Brokers: kafkatest.Embedded(t).Brokers(), Partitions: 2, Namespace: ns}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := kafkatest.Client(t, kc).Admin().EnsureTopics(ctx, topics.Retained()...); err != nil {
		t.Fatal(err)
	}
	return kc
}
