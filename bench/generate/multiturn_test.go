package generate

import (
	"context"
	"reflect"
	"strings"
	"testing"
)

// TestMultiTurnAffinity runs a small multi-turn workload with and without affinity. The DES is a pure
// function of its inputs (checked: a second run, one mode at a time, gives the same results), so the comparison on the fixed seed
// is exact, not noisy: with affinity, later turns run on the server that holds their prefix and the servers
// report more cached tokens and compute fewer prefill tokens.
func TestMultiTurnAffinity(t *testing.T) {
	opts := MultiTurnOptions{Conversations: 150, Turns: 4, Seed: 3}
	var out strings.Builder
	res, err := MultiTurn(context.Background(), opts, &out)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	serial := opts
	serial.Parallel = 1
	again, err := MultiTurn(context.Background(), serial, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(res, again) {
		t.Fatalf("same seed, different results:\n%+v\n%+v", res, again)
	}
	if len(res) != 2 || !res[0].Affinity || res[1].Affinity {
		t.Fatalf("results %+v", res)
	}
	on, off := res[0], res[1]
	for _, r := range res {
		if r.Requests != 150*4 || r.Servers != DefaultServers || r.MakespanS <= 0 || r.TokPerS <= 0 {
			t.Errorf("affinity %v: implausible figures %+v", r.Affinity, r)
		}
		// Every prompt token is either computed or served from the cache (more computed after retractions).
		if r.PrefillTokens+r.CachedTokens < r.PromptTokens || r.CachedTokens > r.PromptTokens {
			t.Errorf("affinity %v: prompt %d, prefill %d, cached %d", r.Affinity, r.PromptTokens, r.PrefillTokens, r.CachedTokens)
		}
	}
	// The same conversations in both modes: same prompt and output lengths.
	if on.PromptTokens != off.PromptTokens || on.OutputTokens != off.OutputTokens {
		t.Errorf("modes ran different workloads: prompt %d/%d, output %d/%d", on.PromptTokens, off.PromptTokens,
			on.OutputTokens, off.OutputTokens)
	}
	// Later turns asked for a server only with affinity; each was admitted once (no failures here).
	if off.AffinityHits+off.AffinityMisses != 0 || on.AffinityHits+on.AffinityMisses != 150*3 || on.AffinityHits == 0 {
		t.Errorf("affinity hits/misses: on %d/%d, off %d/%d", on.AffinityHits, on.AffinityMisses, off.AffinityHits, off.AffinityMisses)
	}
	if on.SameServer != on.AffinityHits {
		t.Errorf("affinity on: %d turns on their previous server, %d hits", on.SameServer, on.AffinityHits)
	}
	if on.CachedTokens <= off.CachedTokens || on.PrefillTokens >= off.PrefillTokens {
		t.Errorf("affinity did not save prefill: cached %d (off %d), prefill %d (off %d)", on.CachedTokens, off.CachedTokens,
			on.PrefillTokens, off.PrefillTokens)
	}
	if !strings.Contains(out.String(), "on/off") {
		t.Errorf("table lacks the ratio row:\n%s", out.String())
	}
}

// BenchmarkMultiTurn runs a small multi-turn workload (150 conversations of 4 turns), affinity on and off,
// once per iteration: ns/op is what it costs the machine, cache-hit% and sim-tok/s the figures of each mode,
// the same in every iteration. draftflow-bench generate --multi-turn runs the full workload.
func BenchmarkMultiTurn(b *testing.B) {
	var res []MultiTurnResult
	for b.Loop() {
		var err error
		if res, err = MultiTurn(context.Background(), MultiTurnOptions{Conversations: 150, Turns: 4, Seed: 3}, nil); err != nil {
			b.Fatal(err)
		}
	}
	for _, r := range res {
		mode := "off"
		if r.Affinity {
			mode = "on"
		}
		b.ReportMetric(100*r.CacheHitRate, "cache-hit%-affinity-"+mode)
		b.ReportMetric(r.TokPerS, "sim-tok/s-affinity-"+mode)
	}
}
