package sglang

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// An exposition as SGLang 0.5.23 writes it: labelled samples summed, HELP/TYPE lines and look-alike names skipped.
func TestSumMetrics(t *testing.T) {
	text := `# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{engine_type="unified",is_streaming="false",model_name="m"} 3072.0
sglang:generation_tokens_total{engine_type="unified",is_streaming="true",model_name="m"} 28.0
sglang:generation_tokens_total_created{engine_type="unified"} 1.7e9
sglang:num_retracted_reqs{pid="981"} 3.0
`
	m, err := SumMetrics(strings.NewReader(text), "sglang:generation_tokens_total", "sglang:num_retracted_requests_total")
	if err != nil {
		t.Fatal(err)
	}
	if m["sglang:generation_tokens_total"] != 3100 || m["sglang:num_retracted_requests_total"] != 0 {
		t.Fatalf("got %v, want 3100 generated and no retraction counter yet (0)", m)
	}
	m, err = SumMetrics(strings.NewReader("sglang:num_retracted_requests_total{a=\"x}y\"} 4\n"), "sglang:num_retracted_requests_total")
	if err != nil || m["sglang:num_retracted_requests_total"] != 4 {
		t.Fatalf("a brace inside a label value: %v, %v", m, err)
	}
	if _, err := SumMetrics(strings.NewReader("sglang:generation_tokens_total{a=\"b\"} x\n"), "sglang:generation_tokens_total"); err == nil ||
		!strings.Contains(err.Error(), "sglang:generation_tokens_total") {
		t.Fatalf("a bad value: err %v, want one naming the line", err)
	}
}

func TestFillLoad(t *testing.T) {
	ss := []loadSample{{0, 0}, {2, 3}, {4, 1}, {0, 0}, {3, 0}, {0, 0}, {0, 0}}
	var r Run
	fillLoad(&r, ss, 250*time.Millisecond)
	// busy from sample 1 to sample 4: 4 intervals, the idle gap inside included
	if r.Makespan != 1.0 || r.MaxQueue != 3 || r.MaxRunning != 4 || r.MeanQueue != 1 || r.MeanRunning != 2.25 {
		t.Fatalf("got %+v", r)
	}
	var idle Run
	fillLoad(&idle, []loadSample{{0, 0}}, time.Second)
	if idle.Makespan != 0 {
		t.Fatalf("no busy sample: makespan %v, want 0", idle.Makespan)
	}
}

// Every policy takes every place in the order across as many repeats as there are policies.
func TestRotate(t *testing.T) {
	p := []string{"default", "fixed 8", "fixed 16"}
	for k := range p {
		r := rotate(p, k)
		if r[0] != p[k] || len(r) != 3 || !slices.Contains(r, "default") {
			t.Fatalf("rotate %d: %v", k, r)
		}
	}
	if r := rotate(p, 4); !slices.Equal(r, []string{"fixed 8", "fixed 16", "default"}) {
		t.Fatalf("rotate 4: %v", r)
	}
}

func TestSummarise(t *testing.T) {
	runs := []Run{
		{Pool: 512, Policy: "fixed 4", Repeat: 0, Makespan: 1},   // the sweep: not a row
		{Pool: 512, Policy: "fixed 32", Repeat: -1, Makespan: 1}, // the warm-up: not a row
		{Pool: 512, Policy: "fixed 16", Repeat: 1, Makespan: 12, Retractions: 2},
		{Pool: 512, Policy: "default", Repeat: 1, Makespan: 11},
		{Pool: 512, Policy: "fixed 8", Repeat: 1, Makespan: 10},
		{Pool: 512, Policy: "default", Repeat: 2, Makespan: 13},
		{Pool: 512, Policy: "fixed 8", Repeat: 2, Makespan: 20},
		{Pool: 512, Policy: "fixed 16", Repeat: 2, Makespan: 14, Retractions: 4},
		{Pool: 512, Policy: "bench_serving 32", Repeat: 1, Makespan: 9},
		{Pool: 1024, Policy: "default", Repeat: 1, Makespan: 5},
	}
	rows := Summarise(runs)
	var got []string
	for _, r := range rows {
		got = append(got, r.Policy)
	}
	if want := []string{"default", "fixed 8", "fixed 16", "bench_serving 32", "default"}; !slices.Equal(got, want) {
		t.Fatalf("rows %v, want %v", got, want)
	}
	d, f16 := rows[0], rows[2]
	if d.Makespan != (Stat{Median: 12, Min: 11, Max: 13}) || d.Repeats != 2 {
		t.Fatalf("default %+v", d)
	}
	// best fixed median: fixed 16 (13) beats fixed 8 (15); bench_serving is not a fixed policy
	if d.VsBestFixed != 12.0/13 || f16.VsBestFixed != 1 || f16.Retractions.Median != 3 {
		t.Fatalf("default vs best fixed %v, fixed 16 %+v", d.VsBestFixed, f16)
	}
	if rows[4].VsBestFixed != 0 {
		t.Fatalf("a pool without a fixed policy: %v, want 0 (none)", rows[4].VsBestFixed)
	}
}

// Both datasets hold the same user messages, one per prompt, in the forms draftflow and bench_serving read.
func TestWriteDataset(t *testing.T) {
	dir := t.TempDir()
	data, serving, err := writeDataset(dir, 5)
	if err != nil {
		t.Fatal(err)
	}
	read := func(path string, f func(map[string]any) string) []string {
		fh, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Close()
		var out []string
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			var v map[string]any
			if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
				t.Fatal(err)
			}
			out = append(out, f(v))
		}
		return out
	}
	first := func(key string) func(map[string]any) string {
		return func(v map[string]any) string {
			return v[key].([]any)[0].(map[string]any)["content"].(string)
		}
	}
	a, b := read(data, first("messages")), read(serving, first("conversations"))
	if len(a) != 5 || !slices.Equal(a, b) || filepath.Dir(data) != dir {
		t.Fatalf("draftflow %v, bench_serving %v", a, b)
	}
}

// The default policy's --loop-action variants sort right after it, and a second table gives their output tokens,
// loops found and client CPU per thousand output tokens; without such a variant there is no second table.
func TestLoopVariants(t *testing.T) {
	runs := []Run{
		{Pool: 512, Policy: "fixed 8", Repeat: 1, Makespan: 9, OutputToks: 1000, ClientCPU: 1},
		{Pool: 512, Policy: loopPrefix + "keep", Repeat: 1, Makespan: 6, OutputToks: 600, ClientCPU: 1.2, Loops: 3},
		{Pool: 512, Policy: loopPrefix + "mark", Repeat: 1, Makespan: 10, OutputToks: 1000, ClientCPU: 2.5, Loops: 3},
		{Pool: 512, Policy: PolicyDefault, Repeat: 1, Makespan: 10, OutputToks: 1000, ClientCPU: 2},
	}
	rows := Summarise(runs)
	var order []string
	for _, r := range rows {
		order = append(order, r.Policy)
	}
	if want := []string{PolicyDefault, loopPrefix + "keep", loopPrefix + "mark", "fixed 8"}; !slices.Equal(order, want) {
		t.Fatalf("order %q, want %q", order, want)
	}
	if got := rows[2].CPUPerKTok.Median; got != 2500 {
		t.Errorf("mark's client CPU %v ms per 1k tokens, want 2500", got)
	}
	var b strings.Builder
	WriteTable(&b, rows, 4, 250)
	for _, want := range []string{
		"| 512 | default --loop-action mark | 10.0 [10.0-10.0] | 0.0 [0.0-0.0] | 1000 [1000-1000] | 3 [3-3] | 2500 [2500-2500] |",
		"| 512 | default | 10.0 [10.0-10.0] | 0.0 [0.0-0.0] | 1000 [1000-1000] | 0 [0-0] | 2000 [2000-2000] |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	WriteTable(&b, Summarise(runs[:1]), 4, 250)
	if strings.Contains(b.String(), "loops found") {
		t.Errorf("a table without loop variants has the loop table:\n%s", b.String())
	}
}
