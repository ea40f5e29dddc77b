package shard_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/shard/shardtest"
	"github.com/draftflow/draftflow/topics"
)

// runsDir writes 60 generations alternating between two runs of one model (temperatures 0.5 and 1.0) under a
// new output directory, plus one generation of another model, and returns the directory and the two runs'
// generations.
func runsDir(t *testing.T) (string, []*topics.Generation, []*topics.Generation) {
	t.Helper()
	dir := t.TempDir()
	var all, a, b []*topics.Generation
	for i := range 60 {
		temp := 0.5
		if i%2 == 1 {
			temp = 1.0
		}
		g := shardtest.Generation(i, temp)
		all = append(all, g)
		if temp == 0.5 {
			a = append(a, g)
		} else {
			b = append(b, g)
		}
	}
	all = append(all, otherModel())
	shardtest.Flush(t, dir, 0, all)
	return dir, a, b
}

func otherModel() *topics.Generation {
	g := shardtest.Generation(500, 0.5)
	g.Model = "models/Other"
	return g
}

func TestSelectRuns(t *testing.T) {
	t.Parallel()
	dir, a, b := runsDir(t)
	ra, rb := shard.RunOf(a[0]).DirName(), shard.RunOf(b[0]).DirName()
	if _, err := shard.SelectRuns(dir, nil); err == nil || !strings.Contains(err.Error(), "--run") || !strings.Contains(err.Error(), ra) {
		t.Fatalf("several runs without --run: %v", err)
	}
	got, err := shard.SelectRuns(dir, []string{ra})
	if err != nil || len(got) != 1 || filepath.Base(got[0]) != ra {
		t.Fatalf("by name: %v %v", got, err)
	}
	got, err = shard.SelectRuns(dir, []string{shard.RunOf(b[0]).Fingerprint[:8], ra})
	if err != nil || len(got) != 2 {
		t.Fatalf("by fingerprint prefix and name: %v %v", got, err)
	}
	if _, err := shard.SelectRuns(dir, []string{"Tiny-Chat"}); err == nil || !strings.Contains(err.Error(), "ambiguous") {
		t.Fatalf("ambiguous prefix: %v", err)
	}
	if _, err := shard.SelectRuns(dir, []string{"nope"}); err == nil || !strings.Contains(err.Error(), "no run") {
		t.Fatalf("unknown run: %v", err)
	}
	other := shard.RunOf(otherModel()).DirName()
	if _, err := shard.SelectRuns(dir, []string{ra, other}); err == nil || !strings.Contains(err.Error(), "refusing to mix") {
		t.Fatalf("mixed models: %v", err)
	}
	// One run directory given directly needs no --run.
	if got, err := shard.SelectRuns(filepath.Join(dir, rb), nil); err != nil || len(got) != 1 {
		t.Fatalf("a run directory: %v %v", got, err)
	}
}

// TestScanRows: every row of every run is read, and a cancelled context stops the scan with its error.
func TestScanRows(t *testing.T) {
	t.Parallel()
	dir, a, b := runsDir(t)
	ids := map[string]bool{}
	if err := shard.ScanRows(context.Background(), dir, func(r *shard.Row) error {
		if r.InputIDs != nil || r.Dataset == "" || r.PromptLen == 0 {
			t.Fatalf("row %s: token ids read or metadata missing: %+v", r.ID, r)
		}
		ids[r.ID] = true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := len(a) + len(b) + 1; len(ids) != want {
		t.Fatalf("%d ids, want %d", len(ids), want)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	n := 0
	err := shard.ScanRows(ctx, dir, func(*shard.Row) error { n++; return nil })
	if !errors.Is(err, context.Canceled) || n != 0 {
		t.Fatalf("cancelled scan: %d rows, %v", n, err)
	}
}

func TestRowValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		row    shard.Row
		merged bool
		want   string // "" when valid
	}{
		{shard.Row{ID: "x", InputIDs: []int32{1, 2, 3}, LossMask: []uint8{0, 0, 1}, PromptLen: 2, CompletionLen: 1}, false, ""},
		{shard.Row{ID: "x", InputIDs: []int32{1, 2, 3}, LossMask: []uint8{0, 1, 1}, PromptLen: 2, CompletionLen: 1}, false, "loss_mask[1]"},
		{shard.Row{ID: "x", InputIDs: []int32{1, 2, 3}, LossMask: []uint8{0, 1, 1}, PromptLen: 2, CompletionLen: 1}, true, ""},
		{shard.Row{ID: "x", InputIDs: []int32{1, 2, 3}, LossMask: []uint8{0, 1}, PromptLen: 1, CompletionLen: 2}, false, "loss_mask has 2"},
		{shard.Row{ID: "x", InputIDs: []int32{1, 2, 3}, LossMask: []uint8{0, 1, 1}, PromptLen: 1, CompletionLen: 1}, false, "prompt_len+completion_len"},
		{shard.Row{InputIDs: []int32{1}, LossMask: []uint8{1}, CompletionLen: 1}, false, "empty id"},
		{shard.Row{ID: "x", PromptLen: -1, CompletionLen: 1}, false, "negative"},
	} {
		err := tc.row.Validate(tc.merged)
		if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v (merged %v): %v, want %q", tc.row, tc.merged, err, tc.want)
		}
	}
}
