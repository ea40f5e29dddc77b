package sink

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/shard/shardtest"
	"github.com/draftflow/draftflow/sink/journal"
	"github.com/draftflow/draftflow/topics"
)

// mkTurn is shardtest.Generation(i) as turn 0 of a multi-turn conversation: continued for i%3 != 0, else the end.
func mkTurn(i int) *topics.Generation {
	g := shardtest.Generation(i, 0.7)
	g.Thread = &topics.Thread{
		Messages: []topics.Message{{Role: "user", Content: fmt.Sprintf("question %d", i)}},
		Rest: []topics.Message{{Role: "assistant", Content: "original"}, {Role: "user", Content: "and then?"},
			{Role: "assistant", Content: "original 2"}},
	}
	g.Reply = &topics.Message{Role: "assistant", Content: fmt.Sprintf("regenerated %d", i), ReasoningContent: "thought"}
	g.StopReason = topics.StopContinued
	if i%3 == 0 {
		g.StopReason = topics.StopToolDivergence
	}
	return g
}

func mkTurns(from, to int) []*topics.Generation {
	var out []*topics.Generation
	for i := from; i < to; i++ {
		out = append(out, mkTurn(i))
	}
	return out
}

// nextPrompts reads the prompts topic: every next turn the sink sent, by id (copies must be identical).
func nextPrompts(t *testing.T, kc kafka.Config, want int) map[string]*topics.Prompt {
	t.Helper()
	got := map[string]*topics.Prompt{}
	for _, p := range kafkatest.Collect[topics.Prompt](t, kc, topics.TopicPrompts, want, 30*time.Second) {
		if prev, ok := got[p.ID]; ok && !reflect.DeepEqual(prev, p) {
			t.Errorf("%s: two different next turns sent:\n %+v\n %+v", p.ID, prev, p)
		}
		got[p.ID] = p
	}
	return got
}

// checkContinuations: every continued turn in the shards has exactly its Next() prompt on the prompts topic,
// and nothing else is there.
func checkContinuations(t *testing.T, kc kafka.Config, dir string, gens []*topics.Generation) {
	t.Helper()
	continued := 0
	for _, g := range gens {
		if g.StopReason == topics.StopContinued {
			continued++
		}
	}
	sent := nextPrompts(t, kc, kafkatest.Size(t, kc, topics.TopicPrompts))
	byID := map[string]*topics.Generation{}
	for _, g := range gens {
		byID[g.ID] = g
	}
	rows := 0
	for _, rs := range shardtest.ReadRows(t, dir) {
		for _, r := range rs {
			rows++
			g := byID[r.ID]
			if r.StopReason != g.StopReason {
				t.Errorf("%s: stop_reason %q, want %q", r.ID, r.StopReason, g.StopReason)
			}
			next, ok := g.Next()
			if !ok {
				if sent[r.ID] != nil {
					t.Errorf("%s ended (%s) but a next turn was sent", r.ID, g.StopReason)
				}
				continue
			}
			if p := sent[r.ID]; p == nil || !reflect.DeepEqual(*p, next) {
				t.Errorf("%s: next turn on the prompts topic %+v, want %+v", r.ID, p, next)
			}
		}
	}
	if rows != len(gens) || len(sent) != continued {
		t.Fatalf("%d rows and %d next turns, want %d and %d", rows, len(sent), len(gens), continued)
	}
}

// TestSinkSendsNextTurns: a continued turn's next prompt is on the prompts topic once its row is durable;
// OnDurable reports only the conversations that ended.
func TestSinkSendsNextTurns(t *testing.T) {
	kc := kafkatest.Config(t, 4)
	dir := t.TempDir()
	gens := mkTurns(0, 90)
	produceGens(t, kc, gens)
	cfg := baseConfig(t, kc, dir)
	sr := startSink(t, cfg)
	var ended []string
	for _, g := range gens {
		if g.StopReason != topics.StopContinued {
			ended = append(ended, g.ID)
		}
	}
	sr.waitFor(t, "ended conversations durable", allDurable(ended))
	// Duplicates of a continued turn send nothing again (the next turn is on this topic already) and are not
	// reported as conversations present. The checks below hold only once the sink has handled them.
	produceGens(t, kc, gens[:12])
	waitConsumed(t, kc, cfg.Group)
	sr.waitFor(t, "the ended conversations among the duplicates reported present", func(_, dups map[string]int) bool {
		for _, g := range gens[:12] {
			if g.StopReason != topics.StopContinued && dups[g.ID] == 0 {
				return false
			}
		}
		return true
	})
	if err := sr.stop(t); err != nil {
		t.Fatal(err)
	}
	sr.mu.Lock()
	for id := range sr.durable {
		if g := mkTurn(idNum(id)); g.StopReason == topics.StopContinued {
			t.Errorf("OnDurable reported %s, whose conversation goes on", id)
		}
	}
	for id := range sr.dups {
		if g := mkTurn(idNum(id)); g.StopReason == topics.StopContinued {
			t.Errorf("OnDuplicate reported %s, whose conversation goes on", id)
		}
	}
	sr.mu.Unlock()
	checkContinuations(t, kc, dir, gens)
}

func idNum(id string) int {
	var n int
	fmt.Sscanf(strings.TrimPrefix(id, "conv-"), "%d", &n)
	return n
}

// TestSinkNextTurnsSurviveKills: the sink is SIGKILLed at several points of a run (between a row's next turn
// and its flush, between flushes, ...) and restarted each time: in the end every continued row in the shards
// has its next turn on the prompts topic (a kill before the commit point may send it twice: identical
// copies), and no next turn exists for a row that is not in the shards.
func TestSinkNextTurnsSurviveKills(t *testing.T) {
	kc := kafkatest.Config(t, 4)
	dir := t.TempDir()
	gens := mkTurns(0, 300)
	produceGens(t, kc, gens)
	child := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperSinkProcess$")
		cmd.Env = append(os.Environ(), "DRAFTFLOW_SINK_HELPER=1", "HELPER_BROKERS="+strings.Join(kc.Brokers, ","),
			"HELPER_NAMESPACE="+kc.Namespace, "HELPER_DIR="+dir)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	kills := 0
	for _, shards := range []int{2, 9, 20} {
		cmd := child()
		deadline := time.Now().Add(60 * time.Second)
		for {
			runs, _ := shard.RunDirs(dir)
			if len(runs) > 0 {
				if m, err := shard.ReadManifest(runs[0]); err == nil && len(m.Shards) >= shards {
					break
				}
			}
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				t.Fatalf("child sink did not reach %d shards", shards)
			}
			time.Sleep(2 * time.Millisecond)
		}
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		kills++
	}
	cfg := baseConfig(t, kc, dir)
	sr := startSink(t, cfg)
	var ended []string
	for _, g := range gens {
		if g.StopReason != topics.StopContinued {
			ended = append(ended, g.ID)
		}
	}
	// Ended conversations are reported as durable now, or as duplicates of rows a killed child wrote.
	sr.waitFor(t, "every conversation end accounted for", func(d, dups map[string]int) bool {
		for _, id := range ended {
			if d[id] == 0 && dups[id] == 0 {
				rows := readRowsQuiet(dir)
				if !rows[id] {
					return false
				}
			}
		}
		return true
	})
	waitConsumed(t, kc, cfg.Group)
	if err := sr.stop(t); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d kills", kills)
	checkContinuations(t, kc, dir, gens)
	assertNoTemps(t, dir)
}

// readRowsQuiet returns the ids in the shards under dir, or nil when they cannot be read yet.
func readRowsQuiet(dir string) map[string]bool {
	ids := map[string]bool{}
	runs, err := shard.RunDirs(dir)
	if err != nil {
		return nil
	}
	for _, run := range runs {
		m, err := shard.ReadManifest(run)
		if err != nil {
			return nil
		}
		for _, sh := range m.Shards {
			sf, err := shard.Open(run + "/" + sh.File)
			if err != nil {
				return nil
			}
			sf.Scan(context.Background(), []shard.Col{shard.ColID}, func(r *shard.Row) error { ids[r.ID] = true; return nil })
			sf.Close()
		}
	}
	return ids
}

// TestSinkSendsNextTurnsAgainForANewBroker: rows written from one broker's generated topic, then the same
// generations replayed from a new broker into the same directory (a second `draftflow run`): the duplicates
// of continued turns send their next turns again, built from the rows' recorded replies, to the new
// broker's prompts topic, where the first broker's copies are gone.
func TestSinkSendsNextTurnsAgainForANewBroker(t *testing.T) {
	dir := t.TempDir()
	broker := func() kafka.Config { return freshBroker(t, "again") }
	gens := mkTurns(0, 30)
	kc := broker()
	produceGens(t, kc, gens)
	cfg := baseConfig(t, kc, dir)
	sr := startSink(t, cfg)
	sr.waitFor(t, "first broker's rows durable", func(d, _ map[string]int) bool { return len(readRowsQuiet(dir)) == len(gens) })
	waitConsumed(t, kc, cfg.Group)
	if err := sr.stop(t); err != nil {
		t.Fatal(err)
	}

	kc = broker()
	// The replayed copies carry other replies: the next turns must be built from the rows' (the first ones).
	replay := mkTurns(0, 30)
	for _, g := range replay {
		g.Reply = &topics.Message{Role: "assistant", Content: "a different reply"}
	}
	produceGens(t, kc, replay)
	sr = startSink(t, baseConfig(t, kc, dir))
	// Every replayed copy handled: each continued one has sent its next turn (acknowledged before its offset is
	// committed), and one that sent a wrong or second copy has done so too.
	waitConsumed(t, kc, cfg.Group)
	if err := sr.stop(t); err != nil {
		t.Fatal(err)
	}
	checkContinuations(t, kc, dir, gens)
}

// TestNextTurnsNotHeldByShards: a continued turn's next prompt is sent as soon as the sink takes the turn in
// (and has it in the journal), not when a shard is written: with shards of a million rows and no idle flush,
// every next turn is on the prompts topic while no shard exists yet. The shards written at the stop then
// hold exactly the turns whose next turns were sent.
func TestNextTurnsNotHeldByShards(t *testing.T) {
	kc := kafkatest.Config(t, 4)
	dir := t.TempDir()
	gens := mkTurns(0, 60)
	continued := 0
	for _, g := range gens {
		if g.StopReason == topics.StopContinued {
			continued++
		}
	}
	produceGens(t, kc, gens)
	cfg := baseConfig(t, kc, dir)
	cfg.RotateRows, cfg.IdleFlush = 1_000_000, -1
	sr := startSink(t, cfg)
	deadline := time.Now().Add(60 * time.Second)
	for kafkatest.Size(t, kc, topics.TopicPrompts) < continued {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d next turns sent after a minute", kafkatest.Size(t, kc, topics.TopicPrompts), continued)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if runs, _ := shard.RunDirs(dir); len(runs) != 0 {
		t.Fatalf("a shard was written (%v): the test proves nothing", runs)
	}
	if err := sr.stop(t); err != nil {
		t.Fatal(err)
	}
	checkContinuations(t, kc, dir, gens)
}

// TestJournalKeepsSentNextTurns: a sink holding continued turns in its journal alone (no shard yet), whose next
// turns the broker acknowledged, is SIGKILLed and started again on the same topic: it buffers the turns again
// from the journal and does not send their next turns a second time (the journal records each
// acknowledgement), so a kill costs no generation twice.
func TestJournalKeepsSentNextTurns(t *testing.T) {
	kc := kafkatest.Config(t, 4)
	dir := t.TempDir()
	gens := mkTurns(0, 90)
	continued := 0
	for _, g := range gens {
		if g.StopReason == topics.StopContinued {
			continued++
		}
	}
	produceGens(t, kc, gens)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperSinkProcess$")
	cmd.Env = append(os.Environ(), "DRAFTFLOW_SINK_HELPER=1", "HELPER_MODE=journal", "HELPER_BROKERS="+strings.Join(kc.Brokers, ","),
		"HELPER_NAMESPACE="+kc.Namespace, "HELPER_DIR="+dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait until the journal records every acknowledgement.
	deadline := time.Now().Add(60 * time.Second)
	for acknowledged(t, dir) < continued {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("%d of %d next turns acknowledged in the journal after a minute", acknowledged(t, dir), continued)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if runs, _ := shard.RunDirs(dir); len(runs) != 0 {
		t.Fatalf("the child wrote shards (%v); the test proves nothing", runs)
	}
	if n := kafkatest.Size(t, kc, topics.TopicPrompts); n != continued {
		t.Fatalf("%d next turns on the prompts topic before the restart, want %d", n, continued)
	}

	cfg := baseConfig(t, kc, dir)
	cfg.Group = "sink-after-kill" // the killed member would hold the partitions until its session timed out
	sr := startSink(t, cfg)
	var ended []string
	for _, g := range gens {
		if g.StopReason != topics.StopContinued {
			ended = append(ended, g.ID)
		}
	}
	sr.waitFor(t, "ended conversations durable", allDurable(ended))
	waitConsumed(t, kc, cfg.Group)
	if err := sr.stop(t); err != nil {
		t.Fatal(err)
	}
	if n := kafkatest.Size(t, kc, topics.TopicPrompts); n != continued {
		t.Errorf("%d next turns on the prompts topic after the restart, want %d: acknowledged ones were sent again", n, continued)
	}
	checkContinuations(t, kc, dir, gens)
}

// acknowledged counts the next-turn acknowledgements recorded in the journal under dir.
func acknowledged(t *testing.T, dir string) int {
	t.Helper()
	segs, _ := filepath.Glob(filepath.Join(dir, journal.Dir, "*.wal"))
	n := 0
	for _, seg := range segs {
		_, entries, _, _, _, err := journal.ReadSegment(seg)
		if err != nil {
			t.Fatal(err)
		}
		for _, en := range entries {
			if en.Kind == journal.Emitted {
				n++
			}
		}
	}
	return n
}
