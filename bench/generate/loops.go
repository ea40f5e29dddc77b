package generate

import (
	"fmt"
	"io"
	"math/rand/v2"
	"text/tabwriter"

	"github.com/draftflow/draftflow/sglang/sim"
	"github.com/draftflow/draftflow/stages/generate/loop"
)

// ScenarioLoops is ScenarioPartition with LoopRate of the replies falling into a repetition loop that runs
// to max_new_tokens, as a reasoning model's replies sometimes do. Every policy runs it twice on the same
// dataset: with generate's loop stop (each loop cut where the detector, at its default thresholds, finds it,
// plus abortTokens for the abort to take effect) and without (each loop runs to max_new_tokens). The row's
// figures are the run with the stop; BenchResult.NoStop* hold the other run's. It is not in Scenarios(): the
// default benchmark's output stays what it was; name it with --scenario.
const ScenarioLoops = "loops"

// The loops of ScenarioLoops: the share of replies that loop, and the length of the unit a loop repeats
// (the simulator's default, sim.Config.LoopPeriod).
const (
	LoopRate   = 0.02
	LoopPeriod = sim.DefaultLoopPeriod
)

// abortTokens is how many tokens a stopped loop's server produces after the one that completed the loop:
// generate sends /abort_request as the chunk with that token arrives, and the server takes it in before its
// next decode step, which still runs (one decode step of latency).
const abortTokens = 1

// OptInScenarios lists the scenarios Bench runs only when named (BenchOptions.Scenarios), in report order.
func OptInScenarios() []string { return []string{ScenarioLoops} }

// loopModel makes a share of a workload's replies loop, as the simulator's LoopRate does: at a point drawn
// uniformly within the reply's natural length (clipped at max_new_tokens) the reply starts repeating a unit of
// period tokens, exactly, and never ends on its own. Whether a row loops and where depends on the seed and the
// row only, so the runs with and without the stop, and every policy, see the same loops. The zero value makes
// no reply loop.
type loopModel struct {
	rate   float64
	period int
	// stop cuts each loop where a loop.Detector with thresholds detect first reports it, plus abortTokens.
	stop   bool
	detect loop.Config
}

// foundAfter is how many tokens of a loop (from its first token) a loop.Detector with the model's thresholds
// has seen when it reports the loop: the repeating tail must cover MinTokens tokens and MinRepeats copies of
// the unit. It returns -1 for a unit longer than the detector's MaxPeriod (never found).
func (m loopModel) foundAfter() int {
	cfg := m.detect.WithDefaults()
	if m.period > cfg.MaxPeriod {
		return -1
	}
	return max(cfg.MinTokens, cfg.MinRepeats*m.period)
}

// reply returns row i's output length given its natural length (out, unclipped) and whether the row loops:
// a loop runs to maxNew, or with the stop to where it is found plus abortTokens.
func (m loopModel) reply(seed int64, i int64, out, maxNew int) (int, bool) {
	if m.rate <= 0 {
		return out, false
	}
	// Its own generator, apart from the workload's: the rows that do not loop keep their lengths.
	rng := rand.New(rand.NewPCG(uint64(seed)^0x6c6f6f70, uint64(i)))
	if rng.Float64() >= m.rate {
		return out, false
	}
	at := rng.IntN(max(1, min(out, maxNew)))
	n := m.foundAfter()
	if !m.stop || n < 0 {
		return maxNew, true
	}
	return min(maxNew, at+n+abortTokens), true
}

// WriteLoopTable prints the figures of ScenarioLoops (with and without the loop stop, side by side) as a
// table of its own; it prints nothing when results have none.
func WriteLoopTable(w io.Writer, results []BenchResult) {
	var rows []BenchResult
	for _, r := range results {
		if r.NoStopMakespanS > 0 {
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tpolicy\tlooping rows\tmakespan s no stop\tmakespan s stop\tmakespan change\toutput tokens no stop\toutput tokens stop\ttokens saved\trows/h no stop\trows/h stop\t")
	for _, r := range rows {
		policy := r.policyLabel()
		saved := r.NoStopOutputTokens - r.OutputTokens
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%.0f\t%+.1f%%\t%d\t%d\t%d (%.1f%%)\t%.0f\t%.0f\t\n", r.Scenario, policy, r.LoopRows,
			r.NoStopMakespanS, r.MakespanS, 100*(r.MakespanS/r.NoStopMakespanS-1), r.NoStopOutputTokens, r.OutputTokens,
			saved, 100*float64(saved)/float64(r.NoStopOutputTokens), r.NoStopRowsPerHour, r.RowsPerHour)
	}
	_ = tw.Flush()
}
