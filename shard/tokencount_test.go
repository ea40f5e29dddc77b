package shard

import (
	"slices"
	"testing"
)

func TestCounts(t *testing.T) {
	t.Parallel()
	rows := []*WriteRow{{ID: "a", Prompt: []uint32{9, 9}, Output: []uint32{5, 1, 5}}, {ID: "b", Prompt: []uint32{1}, Output: []uint32{7, 5}}}
	acc := &Counts{}
	acc.AddOutputs(rows)
	if got := acc.Sorted(); !slices.Equal(got, []TokenCount{{1, 1}, {5, 3}, {7, 1}}) || len(acc.dense) != 8 {
		t.Fatalf("dense: %v", got)
	}
	more := &Counts{}
	more.AddOutputs([]*WriteRow{{ID: "c", Prompt: []uint32{1}, Output: []uint32{1 << 30, 5, 100}}})
	acc.AddCounts(more)
	if got := acc.Sorted(); !slices.Equal(got, []TokenCount{{1, 1}, {5, 4}, {7, 1}, {100, 1}, {1 << 30, 1}}) || len(acc.dense) > denseCountLimit {
		t.Fatalf("past the dense range: %v (dense %d)", got, len(acc.dense))
	}
}
