package pipeline

import (
	"fmt"
	"testing"

	"github.com/draftflow/draftflow/topics"
)

// TestTrackerAccounts: outcomes may arrive before ingest's acknowledgement, twice, or for ids ingest never
// wrote; every expected id counts once, by its first outcome in the order written, present, rejected.
func TestTrackerAccounts(t *testing.T) {
	tr, err := newTracker()
	if err != nil {
		t.Fatal(err)
	}
	defer tr.close()
	tr.mark(idWritten, "a", "a", "b")    // before ingest acknowledged them; "a" twice (two turns)
	tr.mark(idRejected, "c", "stranger") // "stranger": not from this ingest
	for i := range 30 {
		tr.mark(idExpected, fmt.Sprintf("m%02d", i))
	}
	tr.mark(idExpected, "a", "b", "c", "d")
	tr.mark(idPresent, "d", "b")
	if done, missing, err := tr.status(); done != 4 || missing != 30 || err != nil {
		t.Fatalf("status = %d done, %d missing, %v; want 4 and 30", done, missing, err)
	}
	var res Result
	if err := tr.account(&res); err != nil {
		t.Fatal(err)
	}
	if res.Written != 2 || res.AlreadyPresent != 1 || res.PipelineRejected != 1 || res.Lost != 30 ||
		fmt.Sprint(res.Missing) != "[m00 m01 m02 m03 m04 m05 m06 m07 m08 m09]" {
		t.Fatalf("account = %+v", res)
	}
}

// TestTrackerKeptRows: the rows one conversation brings with their output are accounted for each (by id and
// turn, topics.AccountKey), so the run does not end when the first of them is written; a missing one is listed
// with its turn.
func TestTrackerKeptRows(t *testing.T) {
	tr, err := newTracker()
	if err != nil {
		t.Fatal(err)
	}
	defer tr.close()
	k0, k1 := topics.AccountKey("c", 0, topics.OriginDataset), topics.AccountKey("c", 1, topics.OriginDataset)
	tr.mark(idExpected, k0, k1, "g")
	tr.mark(idWritten, k0, "g")
	if done, missing, _ := tr.status(); done != 2 || missing != 1 {
		t.Fatalf("status = %d done, %d missing; want 2 and 1", done, missing)
	}
	var res Result
	if err := tr.account(&res); err != nil {
		t.Fatal(err)
	}
	if res.Lost != 1 || fmt.Sprint(res.Missing) != "[c (turn 1)]" {
		t.Fatalf("account = %+v", res)
	}
	tr.mark(idRejected, k1)
	if done, missing, _ := tr.status(); done != 3 || missing != 0 {
		t.Fatalf("after the rejection: %d done, %d missing", done, missing)
	}
}
