package sim

import (
	"math"
	"testing"
	"time"
)

// TestArrivalAfterIdleGap is the regression test for requests stamped with
// the simulated clock as it stood before an idle gap: in scaled time the
// engine sat idle (its clock frozen) while wall time went by, and a request
// arriving then took the stale clock as its arrival, so a 2-token request
// reported the whole gap as its e2e_latency (322 s in the report).
func TestArrivalAfterIdleGap(t *testing.T) {
	for _, dp := range []int{1, 2} {
		s, ts := newTestServer(t, Config{TimeScale: 200, DPSize: dp})
		body := map[string]any{"input_ids": []int{1, 2, 3}, "sampling_params": map[string]any{"max_new_tokens": 2, "ignore_eos": true}}
		generate(t, ts.URL, body)
		time.Sleep(400 * time.Millisecond) // 80 simulated seconds of idleness
		before := s.Stats().SimTime.Seconds()
		for i := 0; i < dp; i++ { // one request per rank (round robin)
			g := generate(t, ts.URL, body)
			// a prefill and two decode steps are ~0.08 s; the gap is 80 s
			if g.MetaInfo.E2ELatency > 5 {
				t.Fatalf("dp %d: e2e_latency %.2f s for a 2-token request after an idle gap", dp, g.MetaInfo.E2ELatency)
			}
		}
		// ... and it ran then, not at the rank's stale clock
		s.mu.Lock()
		for _, e := range s.ranks {
			if e.now < before {
				t.Errorf("dp %d: rank %d served the request at %.2f s, before the %.2f s it arrived at", dp, e.rank, e.now, before)
			}
		}
		s.mu.Unlock()
		if st := s.Stats(); st.SimTime < 60*time.Second {
			t.Fatalf("dp %d: simulated clock %v after an 80 s gap", dp, st.SimTime)
		}
	}
}

// TestManualSubmitDuringPass: a request submitted while a forward pass is in
// progress arrives when it was submitted, not when the pass started.
func TestManualSubmitDuringPass(t *testing.T) {
	s, err := NewManual(Config{MaxTotalTokens: 4000})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	maxNew := 2
	sp := SamplingParams{MaxNewTokens: &maxNew, IgnoreEOS: true}
	if err := s.Submit(0, Prompt{RID: "a", InputIDs: make([]int32, 500), Sampling: sp}); err != nil {
		t.Fatal(err)
	}
	end, busy := s.Poll(0)
	if !busy {
		t.Fatal("no pass")
	}
	mid := end / 2
	if err := s.Submit(mid, Prompt{RID: "b", InputIDs: []int32{1, 2}, Sampling: sp}); err != nil {
		t.Fatal(err)
	}
	now := end
	for {
		for _, f := range s.Finish() {
			if f.RID == "b" && math.Abs(f.E2ELatency-(now-mid)) > 1e-9 {
				t.Fatalf("b: e2e %.6f, want %.6f (finished at %.6f, submitted at %.6f)", f.E2ELatency, now-mid, now, mid)
			}
		}
		e, busy := s.Poll(now)
		if !busy {
			break
		}
		now = e
	}
	if st := s.Stats(); st.FinishedRequests != 2 {
		t.Fatalf("stats %+v", st)
	}
}
