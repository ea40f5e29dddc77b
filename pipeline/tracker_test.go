package pipeline

import (
	"fmt"
	"testing"
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
