package generate

import (
	"context"
	"strings"
	"testing"

	"github.com/draftflow/draftflow/stages/generate/loop"
)

// TestLoopModelFoundWhereDetectorFinds pins the loop model's stop point to the detector: a reply that falls
// into a loop of period p at token at is stopped where a loop.Detector with the default thresholds, fed the
// reply, reports it (plus abortTokens), and a unit longer than the detector's MaxPeriod is never stopped.
func TestLoopModelFoundWhereDetectorFinds(t *testing.T) {
	const at = 300
	for _, p := range []int{1, 7, 32, 64, 100, 256, 257} {
		m := loopModel{rate: 1, period: p, stop: true}
		ids := make([]uint32, 0, 4096)
		for i := range at {
			ids = append(ids, uint32(10000+i)) // no repetition before the loop
		}
		for i := 0; len(ids) < 4096; i++ {
			ids = append(ids, uint32(i%p))
		}
		l, found, err := loop.Scan(loop.Config{}, ids)
		if err != nil {
			t.Fatal(err)
		}
		n := m.foundAfter()
		switch {
		case p > loop.DefaultMaxPeriod:
			if found || n >= 0 {
				t.Errorf("period %d: detector found %v (%+v), model stops after %d", p, found, l, n)
			}
			continue
		case !found:
			t.Fatalf("period %d: the detector found no loop", p)
		case l.End != at+n:
			t.Errorf("period %d: detector found the loop after %d tokens, the model stops after %d", p, l.End, at+n)
		}
	}
}

// TestLoopModelRows checks the loop model's rows: about LoopRate of them loop, the same rows with and without
// the stop and whatever the order they are drawn in; without the stop a loop runs to max_new_tokens, with it
// a loop ends within the detector's reach of where it started; the other rows keep their lengths.
func TestLoopModelRows(t *testing.T) {
	w := workload{seed: 3, before: lengthDist{2500, 0.9}, maxNew: 10240, minInput: 1024, maxInput: 4096}
	on := loopModel{rate: LoopRate, period: LoopPeriod, stop: true}
	off := on
	off.stop = false
	const n = 20000
	loops := 0
	for i := int64(1); i <= n; i++ {
		_, out := w.draw(i)
		a, la := on.reply(w.seed, i, out, w.maxNew)
		b, lb := off.reply(w.seed, i, out, w.maxNew)
		if la != lb {
			t.Fatalf("row %d loops with the stop (%v) and without (%v)", i, la, lb)
		}
		if !la {
			if a != out || b != out {
				t.Fatalf("row %d does not loop and its length changed: %d -> %d, %d", i, out, a, b)
			}
			continue
		}
		loops++
		if b != w.maxNew {
			t.Fatalf("row %d loops without the stop to %d, want max_new_tokens %d", i, b, w.maxNew)
		}
		if a > w.maxNew || a < on.foundAfter()+abortTokens && a < w.maxNew || a > min(out, w.maxNew)+on.foundAfter()+abortTokens {
			t.Fatalf("row %d (natural %d) stopped at %d", i, out, a)
		}
	}
	if got := float64(loops) / n; got < 0.8*LoopRate || got > 1.2*LoopRate {
		t.Errorf("%d of %d rows loop (%.2f%%), want about %.0f%%", loops, n, 100*got, 100*LoopRate)
	}
	if a, _ := (loopModel{}).reply(w.seed, 1, 1234, w.maxNew); a != 1234 {
		t.Errorf("the zero loop model changed a length: %d", a)
	}
}

// TestLoopStopSaves runs ScenarioLoops on a small dataset (simulated time, seed 1): the stop saves the tokens
// the loops would have spent up to max_new_tokens and does not lengthen the makespan, under the default policy
// and a fixed one; the table shows both runs side by side.
func TestLoopStopSaves(t *testing.T) {
	var out strings.Builder
	res, err := Bench(context.Background(), BenchOptions{Scenarios: []string{ScenarioLoops},
		Policies: []string{PolicyKVBudget, PolicyFixed150}, Prompts: 300, Seed: 1}, &out)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	if len(res) != 2 {
		t.Fatalf("results %+v", res)
	}
	for _, r := range res {
		if r.LoopRows == 0 {
			t.Fatalf("%s: no row loops", r.Policy)
		}
		// Each loop runs to 10,240 tokens without the stop; with it, a few hundred tokens past its start.
		if saved := r.NoStopOutputTokens - r.OutputTokens; saved < int64(r.LoopRows)*5000 {
			t.Errorf("%s: %d looping rows, %d tokens without the stop, %d with it: saved %d", r.Policy, r.LoopRows,
				r.NoStopOutputTokens, r.OutputTokens, saved)
		}
		if r.MakespanS > r.NoStopMakespanS || r.RowsPerHour < r.NoStopRowsPerHour {
			t.Errorf("%s: makespan %.1f s with the stop, %.1f s without (rows/h %.0f, %.0f)", r.Policy, r.MakespanS,
				r.NoStopMakespanS, r.RowsPerHour, r.NoStopRowsPerHour)
		}
	}
	if res[0].LoopRows != res[1].LoopRows || res[0].NoStopOutputTokens != res[1].NoStopOutputTokens {
		t.Errorf("the policies ran different datasets: %+v", res)
	}
	if !strings.Contains(out.String(), "tokens saved") {
		t.Errorf("no loop table:\n%s", out.String())
	}
	// Opt-in: the default list does not run it, and a named run does.
	for _, s := range Scenarios() {
		if s == ScenarioLoops {
			t.Errorf("%s is in the default scenarios", s)
		}
	}
}
