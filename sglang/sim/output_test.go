package sim

import (
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

func TestOutputLengthDistribution(t *testing.T) {
	t.Parallel()
	cfg := Config{}.withDefaults()
	rng := rand.New(rand.NewPCG(1, 1))
	var sum float64
	lengths := make([]int, 20000)
	for i := range lengths {
		lengths[i] = drawLength(&cfg, rng)
		sum += float64(lengths[i])
	}
	mean := sum / float64(len(lengths))
	if math.Abs(mean-3000)/3000 > 0.05 {
		t.Fatalf("lognormal mean %.0f, want ~3000", mean)
	}
	over := 0
	for _, l := range lengths {
		if l > 3*3000 {
			over++
		}
	}
	if over == 0 {
		t.Fatal("no heavy tail beyond 3x the mean")
	}
	cfg.OutputLenDistribution = DistFixed
	if drawLength(&cfg, rng) != 3000 {
		t.Fatal("fixed distribution")
	}
}

func TestOutputPatterns(t *testing.T) {
	t.Parallel()
	cfg := Config{
		OutputLenDistribution: DistFixed, OutputLenMean: 200,
		ReasoningTokenIDs: []int{151667, 151668}, ToolCallTokenIDs: []int{151657, 151658}, ToolCallRate: 1,
	}.withDefaults()
	p := newOutputPlan(&cfg, 99, 0, false, nil)
	out := make([]int32, 200)
	for i := range out {
		out[i] = p.token(i)
	}
	if out[0] != 151667 || out[100] != 151668 {
		t.Fatalf("reasoning markers at 0/100: %d %d", out[0], out[100])
	}
	if out[198] != 151658 || out[p.toolStart] != 151657 || p.toolStart <= 100 {
		t.Fatalf("tool call markers: start %d at %d, end %d", out[p.toolStart], p.toolStart, out[198])
	}
	if out[199] != 151645 && out[199] != 151643 {
		t.Fatalf("no EOS at the end: %d", out[199])
	}
	for i, id := range out {
		special := id >= DefaultSpecialTokenStart
		marker := i == 0 || i == 100 || i == p.toolStart || i >= 198
		if special != marker {
			t.Fatalf("position %d id %d special=%v marker=%v", i, id, special, marker)
		}
	}
	if p.reasoningTokens(50) != 50 || p.reasoningTokens(200) != 101 {
		t.Fatalf("reasoning tokens %d %d", p.reasoningTokens(50), p.reasoningTokens(200))
	}
}

func TestPlanSeedDeterminism(t *testing.T) {
	t.Parallel()
	in := []int32{1, 2, 3}
	seed := int64(5)
	if planSeed(1, "a", nil, true, in) != planSeed(1, "b", nil, true, in) {
		t.Fatal("greedy output depends on rid")
	}
	if planSeed(1, "a", nil, false, in) == planSeed(1, "b", nil, false, in) {
		t.Fatal("sampled output ignores rid")
	}
	if planSeed(1, "a", &seed, false, in) == planSeed(1, "a", nil, false, in) {
		t.Fatal("sampling_seed ignored")
	}
	if planSeed(1, "a", nil, false, in) == planSeed(2, "a", nil, false, in) {
		t.Fatal("server seed ignored")
	}
}

func TestTextRoundTrip(t *testing.T) {
	t.Parallel()
	ids := TokenizeText("hi!")
	if !reflect.DeepEqual(ids, []int32{'h', 'i', '!'}) {
		t.Fatalf("tokenize %v", ids)
	}
	special := func(id int32) bool { return id == 151645 }
	if got := DetokenizeIDs(append(ids, 151645), special, true); got != "hi!" {
		t.Fatalf("detokenize %q", got)
	}
	if got := DetokenizeIDs([]int32{151645}, special, false); got != "<|151645|>" {
		t.Fatalf("special kept %q", got)
	}
	if DetokenizeIDs([]int32{1000}, nil, true) == DetokenizeIDs([]int32{1001}, nil, true) {
		t.Fatal("distinct ids render alike")
	}
}

// TestOutputLoops checks LoopRate: about that share of outputs repeat LoopPeriod tokens from a point within
// their natural length to max_new_tokens, without EOS; the others are token for token those of LoopRate 0.
func TestOutputLoops(t *testing.T) {
	t.Parallel()
	plain := Config{OutputLenMean: 300}.withDefaults()
	loopy := Config{OutputLenMean: 300, LoopRate: 0.25, LoopPeriod: 7}.withDefaults()
	const n, maxNew = 2000, 2000
	loops := 0
	for k := range n {
		seed := uint64(k) * 7919
		a, b := newOutputPlan(&plain, seed, 0, false, nil), newOutputPlan(&loopy, seed, 0, false, nil)
		if b.loopAt < 0 {
			for i := range a.natural {
				if a.token(i) != b.token(i) {
					t.Fatalf("output %d, not looping, differs at %d", k, i)
				}
			}
			continue
		}
		loops++
		if b.loopAt >= a.natural {
			t.Fatalf("loop at %d beyond the natural length %d", b.loopAt, a.natural)
		}
		out := make([]int32, maxNew)
		for i := range out {
			out[i] = b.token(i)
			if out[i] == b.endToken || slices.Contains(loopy.EOSTokenIDs, int(out[i])) {
				t.Fatalf("looping output %d ends at %d", k, i)
			}
		}
		for i := b.loopAt + 7; i < maxNew; i++ {
			if out[i] != out[i-7] {
				t.Fatalf("output %d: position %d breaks the period", k, i)
			}
		}
	}
	if share := float64(loops) / n; math.Abs(share-0.25) > 0.03 {
		t.Fatalf("%.3f of outputs loop, want ~0.25", share)
	}
}
