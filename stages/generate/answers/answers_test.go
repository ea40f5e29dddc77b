package answers

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

func TestAppendReopenLookup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	j, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := j.Append(Key{"run", fmt.Sprintf("id-%d", i), i % 2}, []byte(fmt.Sprintf("value %d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Sync(); err != nil {
		t.Fatal(err)
	}
	// Looked up in the process that wrote it, and (not closed: a kill) in the next one.
	if v, ok, err := j.Lookup(Key{"run", "id-3", 1}); err != nil || !ok || string(v) != "value 3" {
		t.Fatalf("lookup: %q %v %v", v, ok, err)
	}
	j2, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer j2.Close()
	if j2.Len() != 5 {
		t.Fatalf("reopened journal holds %d generations, want 5", j2.Len())
	}
	for i := range 5 {
		v, ok, err := j2.Lookup(Key{"run", fmt.Sprintf("id-%d", i), i % 2})
		if err != nil || !ok || string(v) != fmt.Sprintf("value %d", i) {
			t.Fatalf("id-%d: %q %v %v", i, v, ok, err)
		}
	}
	for _, k := range []Key{{"run", "id-3", 0}, {"other", "id-3", 1}, {"run", "id-9", 0}} {
		if _, ok, _ := j2.Lookup(k); ok {
			t.Fatalf("%v found", k)
		}
	}
	// New answers go to a new segment.
	if err := j2.Append(Key{"run", "id-5", 0}, []byte("value 5")); err != nil {
		t.Fatal(err)
	}
	if segs, _ := filepath.Glob(filepath.Join(dir, "*"+ext)); len(segs) != 2 {
		t.Fatalf("%d segments, want 2", len(segs))
	}
	j.Close()
}

// A torn tail (a crash mid-write) loses the torn record alone.
func TestTornTail(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	j, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := j.Append(Key{"r", fmt.Sprint(i), 0}, []byte("0123456789")); err != nil {
			t.Fatal(err)
		}
	}
	j.Close()
	segs, _ := filepath.Glob(filepath.Join(dir, "*"+ext))
	st, _ := os.Stat(segs[0])
	if err := os.Truncate(segs[0], st.Size()-3); err != nil {
		t.Fatal(err)
	}
	j2, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer j2.Close()
	if j2.Len() != 2 {
		t.Fatalf("%d generations after a torn tail, want 2", j2.Len())
	}
	if _, ok, _ := j2.Lookup(Key{"r", "2", 0}); ok {
		t.Fatal("the torn record was found")
	}
}

// Prune removes a segment once everything in it is held elsewhere, and only then.
func TestPrune(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	j, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	j.segmentBytes = 40 // a segment per two records of 23 bytes
	for i := range 6 {
		if err := j.Append(Key{"r", fmt.Sprint(i), 0}, []byte("0123456789")); err != nil {
			t.Fatal(err)
		}
	}
	count := func() int { s, _ := filepath.Glob(filepath.Join(dir, "*"+ext)); return len(s) }
	if count() != 3 {
		t.Fatalf("%d segments, want 3", count())
	}
	held := map[string]bool{"0": true, "1": true, "2": true}
	n, err := j.Prune(func(k Key) bool { return held[k.ID] })
	if err != nil || n != 1 || count() != 2 || j.Len() != 4 {
		t.Fatalf("pruned %d (%v): %d segments and %d generations left, want 1, 2 and 4", n, err, count(), j.Len())
	}
	if _, ok, _ := j.Lookup(Key{"r", "2", 0}); !ok {
		t.Fatal("a generation of a kept segment is gone")
	}
	n, err = j.Prune(func(Key) bool { return true })
	if err != nil || n != 2 || count() != 0 || j.Len() != 0 {
		t.Fatalf("pruned %d (%v): %d segments and %d generations left, want 2, 0 and 0", n, err, count(), j.Len())
	}
	if err := j.Append(Key{"r", "6", 0}, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if v, ok, _ := j.Lookup(Key{"r", "6", 0}); !ok || string(v) != "x" {
		t.Fatal("append after pruning everything")
	}
}
