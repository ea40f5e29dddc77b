package offline

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/shard/shardtest"
	"github.com/draftflow/draftflow/topics"
)

// TestMergeTurns: a conversation whose every later prompt begins with the earlier turns' ids becomes one row
// with the loss mask on each regenerated span; one whose history was rewritten, one with a missing turn and a
// single turn keep their rows, each with its reason in the report.
func TestMergeTurns(t *testing.T) {
	t.Parallel()
	dir, out := t.TempDir(), t.TempDir()
	run := shard.RunInfo{Model: "m", TokenizerHash: "h"}
	rd := filepath.Join(dir, run.DirName())
	if err := os.MkdirAll(rd, 0o755); err != nil {
		t.Fatal(err)
	}
	seq := func(from, n uint32) []uint32 {
		var s []uint32
		for i := range n {
			s = append(s, from+i)
		}
		return s
	}
	turn := func(id string, n int32, prompt, output []uint32, stop string) *shard.WriteRow {
		return &shard.WriteRow{ID: id, Dataset: "d", FinishReason: "stop", StopReason: stop, Turn: n, Prompt: prompt, Output: output}
	}
	// a: P0=[1..5] O0=[100..102]; P1 = P0+O0+[6,7]; O1=[200,201]; P2 = P1+O1+[8]; O2=[300].
	p0, o0 := seq(1, 5), seq(100, 3)
	p1 := slices.Concat(p0, o0, []uint32{6, 7})
	o1 := seq(200, 2)
	p2 := slices.Concat(p1, o1, []uint32{8})
	o2 := []uint32{300}
	rows := []*shard.WriteRow{
		turn("a", 0, p0, o0, topics.StopContinued), turn("a", 1, p1, o1, topics.StopContinued), turn("a", 2, p2, o2, topics.StopEnd),
		// b: turn 1's history drops turn 0's reasoning (its first output token).
		turn("b", 0, seq(1, 3), seq(50, 4), topics.StopContinued), turn("b", 1, slices.Concat(seq(1, 3), seq(51, 3), []uint32{9}), seq(60, 2), topics.StopEnd),
		turn("c", 0, seq(1, 4), seq(70, 2), topics.StopToolDivergence),
		turn("d", 0, seq(1, 4), seq(80, 2), topics.StopContinued), turn("d", 2, seq(1, 9), seq(81, 2), topics.StopEnd),
	}
	si := shard.Origin{Topic: "generated", FirstOffset: 0, LastOffset: 7}
	entry, err := shard.WriteFile(filepath.Join(rd, si.Name()), run, si, rows, shard.WriteOptions{RowGroupRows: 4})
	if err != nil {
		t.Fatal(err)
	}
	entry.File = si.Name()
	if err := shard.WriteManifest(rd, &shard.Manifest{FormatVersion: shard.FormatVersion, Run: run, Schema: shard.Columns(), Shards: []shard.ManifestShard{entry}}); err != nil {
		t.Fatal(err)
	}

	sum, err := MergeTurns(context.Background(), dir, out, MergeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Conversations != 4 || sum.Merged != 1 || sum.Separate["rewritten"] != 1 || sum.Separate["single"] != 1 || sum.Separate["incomplete"] != 1 {
		t.Fatalf("summary %+v", sum)
	}
	got := shardtest.ReadRows(t, out)[run.DirName()]
	byID := map[string][]shard.Row{}
	for _, r := range got {
		byID[r.ID] = append(byID[r.ID], r)
	}
	a := byID["a"]
	if len(a) != 1 {
		t.Fatalf("a: %d rows, want one merged", len(a))
	}
	wantIDs := slices.Concat(p2, o2)
	wantMask := make([]uint8, len(wantIDs))
	for _, span := range [][2]int{{len(p0), len(p0) + len(o0)}, {len(p1), len(p1) + len(o1)}, {len(p2), len(p2) + len(o2)}} {
		for i := span[0]; i < span[1]; i++ {
			wantMask[i] = 1
		}
	}
	if !slices.Equal(asUint32s(a[0].InputIDs), wantIDs) || !slices.Equal(a[0].LossMask, wantMask) ||
		a[0].PromptLen != int32(len(p2)) || a[0].CompletionLen != int32(len(o2)) || a[0].Turn != 2 || a[0].StopReason != topics.StopEnd {
		t.Fatalf("merged row %+v\n want ids %v mask %v", a[0], wantIDs, wantMask)
	}
	for id, n := range map[string]int{"b": 2, "c": 1, "d": 2} {
		if len(byID[id]) != n {
			t.Errorf("%s: %d rows, want its %d turn rows", id, len(byID[id]), n)
		}
	}
	f, err := os.Open(filepath.Join(out, run.DirName(), MergeReportFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	reasons := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l struct {
			ID     string `json:"id"`
			Merged bool   `json:"merged"`
			Reason string `json:"reason"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		reasons[l.ID] = l.Reason
		if l.Merged != (l.ID == "a") {
			t.Errorf("%s: merged %v", l.ID, l.Merged)
		}
	}
	if r := reasons["b"]; r == "" || !containsAll(r, "turn 1's prompt does not begin with turn 0's", "in its reply, 0 tokens in") {
		t.Errorf("b's reason: %q", r)
	}
	if _, err := MergeTurns(context.Background(), dir, out, MergeOptions{}); err == nil {
		t.Error("merging into a directory that holds the run again succeeded")
	}
	if _, err := Inspect(context.Background(), filepath.Join(out, run.DirName()), nil); err != nil {
		t.Errorf("Inspect of the merged run: %v", err)
	}
}

func asUint32s(ids []int32) []uint32 {
	out := make([]uint32, len(ids))
	for i, v := range ids {
		out[i] = uint32(v)
	}
	return out
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
