package generate

import (
	"context"
	"reflect"
	"testing"
	"time"
)

// TestSharedServerTargets runs the default policy on a server another client keeps SharedPeerN requests on,
// and a fixed client with SharedPeerN in flight in its place (the oracle of ScenarioShared): the default
// gets at least 90% of the fixed client's output tok/s with no more retractions and no client aborts.
// The figures are simulated time, the same on any machine.
func TestSharedServerTargets(t *testing.T) {
	res, err := Bench(context.Background(), BenchOptions{Scenarios: []string{ScenarioShared},
		Policies: []string{PolicyKVBudget, PolicyOracle}, SimDuration: 30 * time.Minute}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0].Policy != PolicyKVBudget || res[1].Policy != PolicyOracle {
		t.Fatalf("results %+v", res)
	}
	def, ref := res[0], res[1]
	t.Logf("default %.0f tok/s (other client %.0f), %d retractions; fixed %d in its place %.0f tok/s (other client %.0f), %d retractions",
		def.TokPerS, def.ForeignTokPerS, def.Retractions, SharedPeerN, ref.TokPerS, ref.ForeignTokPerS, ref.Retractions)
	if len(ref.Concurrency) != 1 || ref.Concurrency[0] != SharedPeerN {
		t.Fatalf("reference concurrency %v, want %d", ref.Concurrency, SharedPeerN)
	}
	// Both clients ran: the other one's tokens are measured apart from the policy's.
	for _, r := range res {
		if r.ForeignTokPerS <= 0 || r.ServerTokPerS < r.TokPerS+r.ForeignTokPerS-0.1*r.ServerTokPerS {
			t.Errorf("%s: own %.0f, other %.0f, server %.0f tok/s", r.Policy, r.TokPerS, r.ForeignTokPerS, r.ServerTokPerS)
		}
	}
	if def.RatioToOracle < 0.9 {
		t.Errorf("default gets %.1f%% of the fixed client's tok/s in its place, want >= 90%%", 100*def.RatioToOracle)
	}
	if def.Retractions > ref.Retractions || def.ClientAborts != 0 {
		t.Errorf("default: %d retractions (fixed: %d), %d client aborts", def.Retractions, ref.Retractions, def.ClientAborts)
	}
}

// TestReplicasTargets runs a finite dataset through two replicas of the default policy sharing the fleet,
// and through one replica on the same servers: the two finish within 2% of the one's makespan, and over the
// middle 80% of the run (and each quarter of it) neither replica's output tok/s falls below 0.8x the
// other's.
func TestReplicasTargets(t *testing.T) {
	const prompts = 1500
	res, err := Bench(context.Background(), BenchOptions{Scenarios: []string{ScenarioReplicas},
		Policies: []string{PolicyKVBudget}, Prompts: prompts}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 {
		t.Fatalf("results %+v", res)
	}
	r := res[0]
	t.Logf("two replicas %.0f s, one %.0f s; replicas' tok/s %v, balance %.3f, %d retractions",
		r.MakespanS, r.SingleMakespanS, r.ReplicaTokPerS, r.ReplicaBalance, r.Retractions)
	if len(r.ReplicaTokPerS) != Replicas || r.SingleMakespanS <= 0 || r.MakespanS <= 0 {
		t.Fatalf("incomplete figures %+v", r)
	}
	if r.MakespanS > 1.02*r.SingleMakespanS {
		t.Errorf("two replicas took %.0f s, one %.0f s: %.1f%% longer, want at most 2%%", r.MakespanS, r.SingleMakespanS,
			100*(r.MakespanS/r.SingleMakespanS-1))
	}
	if r.ReplicaBalance < 0.8 {
		t.Errorf("replica balance %.3f (tok/s %v), want >= 0.8", r.ReplicaBalance, r.ReplicaTokPerS)
	}
	if r.ClientAborts != 0 {
		t.Errorf("%d client aborts", r.ClientAborts)
	}
}

// TestSharingDeterministic checks that runs with several clients on the servers (each its own Controller,
// their answers through goroutines of the in-process transport) are still pure functions of their inputs.
func TestSharingDeterministic(t *testing.T) {
	opts := BenchOptions{Scenarios: []string{ScenarioShared, ScenarioReplicas}, Policies: []string{PolicyKVBudget},
		SimDuration: 6 * time.Minute, Prompts: 200, Seed: 3, Parallel: 1}
	a, err := Bench(context.Background(), opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	opts.Parallel = 3
	b, err := Bench(context.Background(), opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("same seed, different results:\n%+v\n%+v", a, b)
	}
}
