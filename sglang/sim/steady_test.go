package sim

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// closedLoop keeps inFlight requests outstanding against e for simHours of
// simulated time, like the reference run's client (concurrency 150), and
// returns time-weighted averages.
type loopFigures struct {
	running, waiting, usage, tokPerSec, retractPerMin, reqPerSec float64
	finished                                                     int
}

func closedLoop(t testing.TB, e *engine, inFlight, prompt, maxNew int, simSeconds float64, seed uint64) loopFigures {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed+1))
	next := 0
	newReq := func() *request {
		rid := fmt.Sprintf("c%06d", next)
		next++
		greedy := false
		return &request{
			rid: rid, input: distinctPrompt(rng, prompt), maxNew: maxNew,
			plan:   newOutputPlan(e.cfg, planSeed(e.cfg.Seed, rid, nil, greedy, nil), 0, false, nil),
			notify: make(chan struct{}, 1),
		}
	}
	outstanding := map[*request]bool{}
	for i := 0; i < inFlight; i++ {
		r := newReq()
		outstanding[r] = true
		e.submit(r)
	}
	var f loopFigures
	var wRun, wWait, wUse, total float64
	gen0 := e.stats.generated
	warm := simSeconds / 10 // skip the start-up transient
	var genWarm int64 = -1
	var retractWarm int64
	for e.now < simSeconds {
		b := e.step()
		if b == nil {
			t.Fatal("engine idle with requests outstanding")
		}
		if e.now >= warm {
			if genWarm < 0 {
				genWarm = e.stats.generated
				retractWarm = e.stats.retractions
			}
			wRun += float64(len(e.running)) * b.dur
			wWait += float64(len(e.waiting)) * b.dur
			wUse += float64(e.usedTokens()) / float64(e.cfg.MaxTotalTokens) * b.dur
			total += b.dur
		}
		for r := range outstanding {
			if r.finish != nil {
				delete(outstanding, r)
				if e.now >= warm {
					f.finished++
				}
				nr := newReq()
				outstanding[nr] = true
				e.submit(nr)
			}
		}
	}
	_ = gen0
	f.running, f.waiting, f.usage = wRun/total, wWait/total, wUse/total
	f.tokPerSec = float64(e.stats.generated-genWarm) / total
	f.retractPerMin = float64(e.stats.retractions-retractWarm) / total * 60
	f.reqPerSec = float64(f.finished) / total
	return f
}

// TestReferenceRunSteadyState runs the reference run's short lane (150 in
// flight, ~1K prompt, max_new_tokens 10240, ~3K outputs) for two simulated
// hours and checks the figures stay in the reference run's regime: a few
// dozen running, the rest queued, a nearly full pool, hundreds of tok/s.
func TestReferenceRunSteadyState(t *testing.T) {
	t.Parallel()
	e := testEngine(t, Config{Seed: 11})
	f := closedLoop(t, e, 150, 1024, 10240, 2*3600, 1)
	t.Logf("steady state: running %.1f waiting %.1f token_usage %.3f gen %.0f tok/s, %.3f req/s, retractions %.2f/min",
		f.running, f.waiting, f.usage, f.tokPerSec, f.reqPerSec, f.retractPerMin)
	// Reference: 34-35 running, 115 queued, token usage 0.92-0.94, ~600
	// tok/s, 0.29 req/s. The run is deterministic, so the bounds are tight.
	if f.running < 33 || f.running > 50 {
		t.Errorf("mean running %.1f outside 33..50", f.running)
	}
	if f.waiting < 100 || f.waiting+f.running > 150.5 {
		t.Errorf("mean waiting %.1f: the queue should hold the rest of the 150", f.waiting)
	}
	if f.usage < 0.85 || f.usage > 0.97 {
		t.Errorf("token usage %.3f outside 0.85..0.97", f.usage)
	}
	if f.tokPerSec < 500 || f.tokPerSec > 900 {
		t.Errorf("throughput %.0f tok/s outside 500..900", f.tokPerSec)
	}
	if f.retractPerMin <= 0 {
		t.Errorf("no retractions: the oversubscription sawtooth is missing")
	}
}
