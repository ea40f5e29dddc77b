package livesglang

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestLoopStopLive runs the same prompts through `draftflow run` on the live server twice at temperature 0:
// without watching, then with --loop-action keep at thresholds low enough for the random-weight target's
// repetitions (a unit of at most 8 tokens repeated over 16). Every reply it stops must be a strict prefix of the
// same reply unwatched (the server's greedy decoding is deterministic here: the ids kept are exactly the ids the
// server produced, cut where the abort took effect) and end in a repetition of at most 8 tokens; every reply it
// does not stop must equal the unwatched one. It logs how many replies loop and the tokens the stop saved, and
// what the default thresholds find in the same replies.
func TestLoopStopLive(t *testing.T) {
	need(t)
	srv := mainServer(t)
	dir := t.TempDir()
	// The prompts of draftflow-bench sglang, whose greedy replies from this target hold short repetitions.
	subjects := []string{"a lighthouse keeper", "the sea at night", "a clockmaker's apprentice", "the first winter",
		"a lost key", "the far side of the moon", "an overgrown garden", "the last train home", "a library of maps",
		"two rival bakers", "a river that runs uphill", "a letter never sent"}
	const n, newTokens = 16, 256
	var lines []any
	for i := range n {
		lines = append(lines, chat(fmt.Sprintf("loop-%02d", i), fmt.Sprintf("Tell a long story about %s, number %d.", subjects[i%len(subjects)], i)))
	}
	data := filepath.Join(dir, "loops.jsonl")
	writeJSONL(t, data, lines)
	run := func(name string, args ...string) map[string]map[int]shardRow {
		out := filepath.Join(dir, name)
		p := startDraftflow(t, "draftflow run "+name, nil, append([]string{"run", "--input", data, "--model", modelDir,
			"--sglang", srv.url, "--out", out, "--max-new-tokens", fmt.Sprint(newTokens), "--temperature", "0"}, args...)...)
		start := time.Now()
		if err := p.wait(t, 15*time.Minute); err != nil {
			t.Fatalf("run %s: %v\n%s", name, err, tail(p.output(), 4000))
		}
		t.Logf("run %s: %.0f s", name, time.Since(start).Seconds())
		return readRows(t, out)
	}
	off := run("off", "--loop-action", "off")
	kept := run("keep", "--loop-action", "keep", "--loop-max-period", "8", "--loop-min-repeats", "4", "--loop-min-tokens", "16")

	stopped, saved, offTokens := 0, 0, 0
	for i := range n {
		id := fmt.Sprintf("loop-%02d", i)
		a, b := off[id][0], kept[id][0]
		if len(a.InputIDs) == 0 || len(b.InputIDs) == 0 {
			t.Fatalf("%s: missing from a run's shards (unwatched %d ids, watched %d)", id, len(a.InputIDs), len(b.InputIDs))
		}
		offTokens += int(a.CompletionLen)
		if b.FinishReason != "loop" {
			if !slices.Equal(a.InputIDs, b.InputIDs) || a.FinishReason != b.FinishReason {
				t.Errorf("%s: not stopped, but its ids or finish reason (%s) differ from the unwatched run's (%s)", id, b.FinishReason, a.FinishReason)
			}
			continue
		}
		stopped++
		if len(b.InputIDs) >= len(a.InputIDs) || !slices.Equal(b.InputIDs, a.InputIDs[:len(b.InputIDs)]) {
			t.Errorf("%s: stopped after %d output ids, not a strict prefix of the unwatched reply (%d output ids)", id, b.CompletionLen, a.CompletionLen)
			continue
		}
		// The loop ends the ids the detector saw; the server may have produced a few more before the abort
		// took effect (docs/sglang.md), which need not repeat.
		out, found := b.InputIDs[b.PromptLen:], false
		for extra := 0; extra <= 8 && extra < len(out) && !found; extra++ {
			found = periodicTail(out[:len(out)-extra], 8, 16) > 0
		}
		if !found {
			t.Errorf("%s: stopped as a loop, but no 16 of its last output ids repeat a unit of at most 8: %v", id, out[max(0, len(out)-32):])
		}
		saved += int(a.CompletionLen - b.CompletionLen)
	}
	defaults := 0
	for _, rs := range off {
		r := rs[0]
		if periodicTail(r.InputIDs[r.PromptLen:], 256, 256) > 0 {
			defaults++
		}
	}
	t.Logf("%d of %d replies stopped as loops (unit <= 8 over >= 16 tokens), saving %d of %d output tokens (%.1f%%); "+
		"at the default thresholds (a unit of at most 256 over at least 256 tokens, 4 copies) %d of the unwatched replies end in a loop",
		stopped, n, saved, offTokens, 100*float64(saved)/float64(max(offTokens, 1)), defaults)
	if stopped == 0 {
		t.Error("no reply stopped: the live server's streamed replies were never found looping (these prompts' greedy replies repeat one token 17 times or more within 256 tokens)")
	}
}

// periodicTail returns the shortest period p <= maxPeriod whose repetition covers the last minTokens ids of ids
// (and at least four copies of p), or 0.
func periodicTail(ids []int32, maxPeriod, minTokens int) int {
	for p := 1; p <= maxPeriod; p++ {
		need := max(minTokens, 4*p)
		if len(ids) < need {
			return 0
		}
		ok := true
		for i := len(ids) - need + p; i < len(ids) && ok; i++ {
			ok = ids[i] == ids[i-p]
		}
		if ok {
			return p
		}
	}
	return 0
}
