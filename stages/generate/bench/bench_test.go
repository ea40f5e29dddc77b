package bench

import (
	"context"
	"encoding/xml"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"
)

// TestBenchSmoke runs a short bench and checks the figures are sane (no performance assertions).
func TestBenchSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	var out strings.Builder
	res, err := Bench(context.Background(), BenchOptions{
		Scenarios: []string{ScenarioOneServer}, Policies: []string{PolicyFixed150, PolicyKVBudget},
		SimDuration: 8 * time.Minute, TimeScale: 600,
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

// TestBenchFull runs the whole benchmark when DRAFTFLOW_BENCH is set (make bench uses the CLI instead).
func TestBenchFull(t *testing.T) {
	if os.Getenv("DRAFTFLOW_BENCH") == "" {
		t.Skip("set DRAFTFLOW_BENCH=1 to run the full benchmark")
	}
	opts := BenchOptions{Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))}
	if s := os.Getenv("DRAFTFLOW_BENCH_SCENARIOS"); s != "" {
		opts.Scenarios = strings.Split(s, ",")
	}
	if s := os.Getenv("DRAFTFLOW_BENCH_POLICIES"); s != "" {
		opts.Policies = strings.Split(s, ",")
	}
	if s := os.Getenv("DRAFTFLOW_BENCH_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		opts.SimDuration = d
	}
	var out strings.Builder
	start := time.Now()
	if _, err := Bench(context.Background(), opts, &out); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s\nwall time %s", out.String(), time.Since(start).Round(time.Second))
}
