package kafka

import (
	"math/rand"
	"reflect"
	"testing"
)

func TestWatermarkCommitsOnlyContiguousPrefix(t *testing.T) {
	w := newWatermark()
	m := make([]mark, 6)
	for i := range m {
		m[i] = w.Add(0, int64(10+i))
	}
	w.Done(m[1])
	w.Done(m[2])
	if adv := w.Advance(); len(adv) != 0 {
		t.Fatalf("advanced over unfinished offset 10: %v", adv)
	}
	w.Done(m[0])
	if adv := w.Advance(); !reflect.DeepEqual(adv, map[int]int64{0: 12}) {
		t.Fatalf("got %v, want partition 0 up to 12", adv)
	}
	if adv := w.Advance(); len(adv) != 0 {
		t.Fatalf("second Advance without progress returned %v", adv)
	}
	w.Done(m[5])
	w.Done(m[3])
	if adv := w.Advance(); !reflect.DeepEqual(adv, map[int]int64{0: 13}) {
		t.Fatalf("got %v, want 13", adv)
	}
	if p := w.Pending(); p != 1 {
		t.Fatalf("pending %d, want 1", p)
	}
}

func TestWatermarkPartitionsIndependent(t *testing.T) {
	w := newWatermark()
	a := w.Add(0, 0)
	b := w.Add(1, 100)
	w.Add(0, 1)
	w.Done(b)
	w.Done(a)
	if adv := w.Advance(); !reflect.DeepEqual(adv, map[int]int64{0: 0, 1: 100}) {
		t.Fatalf("got %v", adv)
	}
}

func TestWatermarkGapsCountAsFinished(t *testing.T) {
	w := newWatermark()
	a := w.Add(0, 5)
	b := w.Add(0, 9) // 6..8 were control records, never delivered
	w.Done(b)
	if adv := w.Advance(); len(adv) != 0 {
		t.Fatalf("advanced past 5: %v", adv)
	}
	w.Done(a)
	if adv := w.Advance(); adv[0] != 9 {
		t.Fatalf("got %v, want 9", adv)
	}
}

func TestWatermarkRewindForgetsStaleMarks(t *testing.T) {
	w := newWatermark()
	old := []mark{w.Add(0, 0), w.Add(0, 1), w.Add(0, 2)}
	w.Done(old[0])
	w.Advance()
	// A rebalance hands the partition back from committed offset 1.
	n1 := w.Add(0, 1)
	if w.Done(old[1]) || w.Done(old[2]) {
		t.Fatal("stale marks were accepted after a rewind")
	}
	if adv := w.Advance(); len(adv) != 0 {
		t.Fatalf("stale marks advanced the watermark: %v", adv)
	}
	w.Done(n1)
	if adv := w.Advance(); adv[0] != 1 {
		t.Fatalf("got %v, want 1", adv)
	}
}

func TestWatermarkRetreatOffersAgain(t *testing.T) {
	w := newWatermark()
	w.Done(w.Add(2, 7))
	adv := w.Advance()
	w.Retreat(2, adv[2])
	if again := w.Advance(); again[2] != 7 {
		t.Fatalf("after a failed commit the offset was not offered again: %v", again)
	}
}

// Property: whatever order work finishes in, the reported watermark never passes an unfinished offset and
// ends at the last offset once all is done.
func TestWatermarkRandomOrder(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for trial := 0; trial < 200; trial++ {
		w := newWatermark()
		n := 1 + rng.Intn(200)
		marks := make([]mark, n)
		for i := range marks {
			marks[i] = w.Add(0, int64(i))
		}
		done := make([]bool, n)
		last := int64(-1)
		for _, i := range rng.Perm(n) {
			w.Done(marks[i])
			done[i] = true
			if adv, ok := w.Advance()[0]; ok {
				for j := int64(0); j <= adv; j++ {
					if !done[j] {
						t.Fatalf("watermark %d passes unfinished offset %d", adv, j)
					}
				}
				if adv <= last {
					t.Fatalf("watermark went back from %d to %d", last, adv)
				}
				last = adv
			}
		}
		if last != int64(n-1) {
			t.Fatalf("final watermark %d, want %d", last, n-1)
		}
	}
}

// TestWatermarkCommitNamesFinishedAfterThePrefix: Commit gives the first unfinished offset and the finished
// ones after it, says whether anything changed since the last call, and offers everything again after Retreat.
func TestWatermarkCommitNamesFinishedAfterThePrefix(t *testing.T) {
	w := newWatermark()
	var marks []mark
	for off := int64(10); off < 16; off++ {
		marks = append(marks, w.Add(0, off))
	}
	w.Done(marks[0]) // 10
	w.Done(marks[2]) // 12
	w.Done(marks[4]) // 14
	offs, done, changed := w.Commit([]int{0, 1})
	if !changed || offs[0] != 11 || !reflect.DeepEqual(done[0], []int64{12, 14}) || len(offs) != 1 {
		t.Fatalf("commit %v %v %v", offs, done, changed)
	}
	if _, _, changed := w.Commit([]int{0}); changed {
		t.Fatal("nothing moved, yet changed")
	}
	w.Done(marks[5]) // 15: the prefix stays, the finished set grows
	if offs, done, changed = w.Commit([]int{0}); !changed || offs[0] != 11 || !reflect.DeepEqual(done[0], []int64{12, 14, 15}) {
		t.Fatalf("after 15: %v %v %v", offs, done, changed)
	}
	w.Done(marks[1]) // 11: the prefix runs to 12
	if offs, done, changed = w.Commit([]int{0}); !changed || offs[0] != 13 || !reflect.DeepEqual(done[0], []int64{14, 15}) {
		t.Fatalf("after 11: %v %v %v", offs, done, changed)
	}
	w.Retreat(0, offs[0]-1) // the commit failed
	if offs, _, changed = w.Commit([]int{0}); !changed || offs[0] != 13 {
		t.Fatalf("after a failed commit: %v %v", offs, changed)
	}
}
