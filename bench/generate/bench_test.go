package generate

import (
	"context"
	"encoding/xml"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestBenchSmoke runs a short bench and checks the figures are sane (no performance assertions).
func TestBenchSmoke(t *testing.T) {
	var out strings.Builder
	res, err := Bench(context.Background(), BenchOptions{
		Scenarios: []string{ScenarioOneServer}, Policies: []string{PolicyFixed150, PolicyKVBudget},
		SimDuration: 8 * time.Minute,
	}, &out)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	if len(res) != 2 || res[0].Policy != PolicyFixed150 || res[1].Policy != PolicyKVBudget {
		t.Fatalf("results %+v", res)
	}
	for _, r := range res {
		if r.TokPerS <= 0 || r.P50LatencyS <= 0 || r.P99LatencyS < r.P50LatencyS || len(r.Series) == 0 {
			t.Errorf("%s: implausible figures %+v", r.Policy, r)
		}
	}
	if !strings.Contains(out.String(), "kv-budget") {
		t.Errorf("table lacks the policy:\n%s", out.String())
	}
	var svg strings.Builder
	if err := WritePlot(&svg, res); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		XMLName  xml.Name
		Polyline []struct {
			Points string `xml:"points,attr"`
		} `xml:"polyline"`
	}
	if err := xml.Unmarshal([]byte(svg.String()), &doc); err != nil {
		t.Fatalf("plot is not valid SVG: %v", err)
	}
	// Two panels (tok/s, KV usage) per policy.
	if doc.XMLName.Local != "svg" || len(doc.Polyline) != 4 || !strings.Contains(svg.String(), ">kv-budget<") {
		t.Fatalf("plot has %d lines:\n%.500s", len(doc.Polyline), svg.String())
	}
}

// TestBenchDeterministic checks that a run's figures depend on its inputs only: the same seed gives the same
// results whatever the parallelism (and so whatever the machine's load), another seed other ones.
func TestBenchDeterministic(t *testing.T) {
	opts := BenchOptions{Scenarios: []string{ScenarioFleet}, Policies: []string{PolicyKVBudget, PolicyFixed64RR},
		SimDuration: 6 * time.Minute, Seed: 7, Parallel: 1}
	a, err := Bench(context.Background(), opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	opts.Parallel = 4
	b, err := Bench(context.Background(), opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("same seed, different results:\n%+v\n%+v", a, b)
	}
	// A finite run with a server outage and a late server: every answer travels through goroutines of the
	// in-process HTTP transport, and still the run is a pure function of its inputs.
	fin := BenchOptions{Scenarios: []string{ScenarioPartitionOutage}, Policies: []string{PolicyKVBudget, PolicyFixed150},
		Prompts: 500, Seed: 7, Parallel: 2}
	x, err := Bench(context.Background(), fin, nil)
	if err != nil {
		t.Fatal(err)
	}
	y, err := Bench(context.Background(), fin, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(x, y) {
		t.Fatalf("finite scenario, same seed, different results:\n%+v\n%+v", x, y)
	}
	opts.Seed = 8
	c, err := Bench(context.Background(), opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if reflect.DeepEqual(a[0].Series, c[0].Series) {
		t.Fatal("another seed gave the same time series")
	}
}

// BenchmarkPolicies runs the one-server scenario for ten simulated minutes under each policy, once per
// iteration: ns/op is what a run costs the machine (the oracle's includes its sweep), sim-tok/s the policy's
// figure, the same in every iteration. draftflow-bench generate runs the whole benchmark.
func BenchmarkPolicies(b *testing.B) {
	for _, p := range Policies() {
		b.Run(p, func(b *testing.B) {
			var res []BenchResult
			for b.Loop() {
				var err error
				res, err = Bench(context.Background(), BenchOptions{Scenarios: []string{ScenarioOneServer}, Policies: []string{p},
					SimDuration: 10 * time.Minute}, nil)
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(res[0].TokPerS, "sim-tok/s")
		})
	}
}

// TestThroughputBudgetApplies checks that PolicyKVThroughput runs the controller with its looser gate settings: its
// looser gate runs the simulated pool fuller than the default kv-budget policy on the same workload.
func TestThroughputBudgetApplies(t *testing.T) {
	res, err := Bench(context.Background(), BenchOptions{Scenarios: []string{ScenarioOneServer},
		Policies: []string{PolicyKVBudget, PolicyKVThroughput}, SimDuration: 20 * time.Minute}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[1].Policy != PolicyKVThroughput {
		t.Fatalf("results %+v", res)
	}
	if res[1].MeanKVUsage <= res[0].MeanKVUsage {
		t.Errorf("kv-budget-tput mean KV usage %.3f, not above kv-budget's %.3f", res[1].MeanKVUsage, res[0].MeanKVUsage)
	}
}

// TestPartitionOutage runs a small finite dataset through the outage scenario: every prompt finishes once,
// the makespan is reported, and no policy aborts requests on a server that is up (the outage's lost requests
// are connection failures, retried elsewhere).
func TestPartitionOutage(t *testing.T) {
	res, err := Bench(context.Background(), BenchOptions{Scenarios: []string{ScenarioPartitionOutage},
		Policies: []string{PolicyKVBudget, PolicyFixed150}, Prompts: 600}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 {
		t.Fatalf("results %+v, want one per policy", res)
	}
	for _, r := range res {
		if r.MakespanS <= 0.5*600+600 || r.TokPerS <= 0 || r.ClientAborts != 0 {
			t.Errorf("%s: %+v; want a makespan past the outage and no client aborts", r.Policy, r)
		}
		if r.Default != (r.Policy == PolicyKVBudget) {
			t.Errorf("%s: default %v", r.Policy, r.Default)
		}
	}
}
