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
//
// The test waits until the gap has happened on the simulated clock, then
// bounds each request's e2e_latency by the wall time its call took, scaled:
// a request cannot be in the server longer than that, however slow the
// machine, while one stamped before the gap reports the gap.
func TestArrivalAfterIdleGap(t *testing.T) {
	t.Parallel()
	const scale, gap = 200, 200.0 // the gap: 200 simulated seconds, 1 s of wall time
	for _, dp := range []int{1, 2} {
		s, ts := newTestServer(t, Config{TimeScale: scale, DPSize: dp})
		body := map[string]any{"input_ids": []int{1, 2, 3}, "sampling_params": map[string]any{"max_new_tokens": 2, "ignore_eos": true}}
		for i := 0; i < dp; i++ {
			generate(t, ts.URL, body)
		}
		s.mu.Lock()
		idle := 0.0 // where the ranks' clocks stopped
		for _, e := range s.ranks {
			idle = max(idle, e.now)
		}
		s.mu.Unlock()
		waitSimTime(t, s, idle+gap)
		before := s.Stats().SimTime.Seconds()
		for i := 0; i < dp; i++ { // one request per rank (round robin)
			start := time.Now()
			g := generate(t, ts.URL, body)
			bound := time.Since(start).Seconds() * scale
			if bound >= gap {
				t.Fatalf("dp %d: one call took %v of wall time (%.0f simulated seconds), as long as the gap: this machine cannot tell them apart",
					dp, time.Since(start), bound)
			}
			if g.MetaInfo.E2ELatency > bound+1e-6 {
				t.Fatalf("dp %d: e2e_latency %.2f s for a 2-token request after a %.0f s idle gap; its call lasted %.3f simulated seconds",
					dp, g.MetaInfo.E2ELatency, gap, bound)
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
	}
}

// waitSimTime waits until the server's simulated clock reaches at (seconds), failing after a minute.
func waitSimTime(t *testing.T, s *Server, at float64) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for s.Stats().SimTime.Seconds() < at {
		if time.Now().After(deadline) {
			t.Fatalf("simulated clock at %v after a minute, waiting for %.0f s", s.Stats().SimTime, at)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestManualSubmitDuringPass: a request submitted while a forward pass is in
// progress arrives when it was submitted, not when the pass started.
func TestManualSubmitDuringPass(t *testing.T) {
	t.Parallel()
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
