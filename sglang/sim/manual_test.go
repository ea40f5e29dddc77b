package sim

import (
	"reflect"
	"strings"
	"testing"
)

// runManual drives a manual-mode server through a fixed arrival pattern and returns what finished.
func runManual(t *testing.T) ([]Finished, Stats) {
	t.Helper()
	s, err := NewManual(Config{MaxTotalTokens: 6000, OutputLenMean: 1500, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out []Finished
	now := 0.0
	next := 0
	for len(out) < 20 {
		// Two requests arrive every 0.5 simulated seconds until 20 were sent.
		for next < 20 && float64(next/2)*0.5 <= now {
			maxNew := 2000
			ids := make([]int32, 200+next*10)
			for j := range ids {
				ids[j] = int32(next*1000 + j)
			}
			if err := s.Submit(now, Prompt{RID: "m" + string(rune('a'+next)), InputIDs: ids,
				Sampling: SamplingParams{MaxNewTokens: &maxNew}}); err != nil {
				t.Fatal(err)
			}
			next++
		}
		end, busy := s.Poll(now)
		if !busy {
			now = float64(next/2) * 0.5
			continue
		}
		now = end
		out = append(out, s.Finish()...)
	}
	return out, s.Stats()
}

func TestManualModeIsDeterministic(t *testing.T) {
	t.Parallel()
	a, sa := runManual(t)
	b, sb := runManual(t)
	if !reflect.DeepEqual(a, b) || sa != sb {
		t.Fatalf("two identical runs differ:\n%+v\n%+v", a, b)
	}
	seen := map[string]bool{}
	for _, f := range a {
		if seen[f.RID] || f.FinishReason != "stop" && f.FinishReason != "length" || f.CompletionTokens < 1 || f.E2ELatency <= 0 {
			t.Fatalf("bad or repeated finish %+v", f)
		}
		seen[f.RID] = true
	}
	// The pool (6,000 tokens) is too small for the arrivals: the run must exercise retraction and re-prefill,
	// or it does not show that they are deterministic too.
	if sa.RetractionsTotal == 0 {
		t.Fatal("no retraction in this run: the scenario no longer covers retractions")
	}
	if sa.FinishedRequests != 20 || sa.Running+sa.Waiting != 0 {
		t.Fatalf("stats %+v", sa)
	}
}

func TestManualModeValidates(t *testing.T) {
	t.Parallel()
	s, err := NewManual(Config{ContextLength: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	maxNew := 10
	if err := s.Submit(0, Prompt{RID: "x", InputIDs: make([]int32, 1000), Sampling: SamplingParams{MaxNewTokens: &maxNew}}); err == nil ||
		!strings.Contains(err.Error(), "longer than the model's context length") {
		t.Fatalf("over-long prompt: %v", err)
	}
	if _, busy := s.Poll(0); busy {
		t.Fatal("idle server busy")
	}
	if got := s.Finish(); len(got) != 0 {
		t.Fatalf("Finish on an idle server returned %v", got)
	}
	live, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if err := live.Submit(0, Prompt{RID: "y", InputIDs: []int32{1}}); err == nil {
		t.Fatal("Submit on a server with its own loop succeeded")
	}
}
