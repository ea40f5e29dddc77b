package livesglang

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTwoServersAndDataParallel runs one dataset on two live servers: one with a single scheduler and one
// started with --dp-size 2 (two schedulers, each with its own KV pool; on the CPU sglang.sh binds each rank
// to its own core with SGLANG_CPU_OMP_THREADS_BIND, since sglang otherwise asks for one NUMA node per rank).
// Every pool holds twoPool tokens, under a third of what the dataset needs at full length, so no server
// nor rank can take all of it and the stage's budgets must spread it. Every row must land once, both
// servers and both ranks serve requests, and the stage's metrics show each rank's own pool and load as
// /v1/loads reports them.
// Sizing: twoPrompts requests of about 20 prompt and twoNew output tokens (the random-weight model runs to
// max_new_tokens), some 3,400 KV tokens at full length, on three pools of twoPool.
const (
	twoPool    = 1024
	twoPrompts = 48
	twoNew     = 48
)

func TestTwoServersAndDataParallel(t *testing.T) {
	need(t)
	releaseMain() // two servers of its own: the tier's bound
	one := startServer(t, "two", twoPool)
	const rankPool = twoPool
	dp := startServer(t, "dp2", rankPool, "--dp-size", "2")

	var loads struct {
		Loads []struct {
			Rank int `json:"dp_rank"`
			Pool int `json:"max_total_num_tokens"`
		} `json:"loads"`
	}
	getJSON(t, http.MethodGet, dp.url+"/v1/loads", nil, &loads)
	if len(loads.Loads) != 2 || loads.Loads[0].Pool != rankPool || loads.Loads[1].Pool != rankPool {
		t.Fatalf("/v1/loads of the --dp-size 2 server: %+v, want two ranks of %d tokens", loads.Loads, rankPool)
	}
	generated := func() map[string]float64 {
		fams, err := scrape(dp.url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, m := range fams["sglang:realtime_tokens_total"].GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "dp_rank" {
					out[lp.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
		return out
	}
	before := generated()

	dir := t.TempDir()
	const n = twoPrompts
	var lines []any
	for i := range n {
		lines = append(lines, chat(fmt.Sprintf("two-%02d", i), fmt.Sprintf("List %d things to see in a museum.", i)))
	}
	data := filepath.Join(dir, "two.jsonl")
	writeJSONL(t, data, lines)
	out := filepath.Join(dir, "out")
	p := startDraftflow(t, "draftflow run", nil, "run", "--input", data, "--model", modelDir, "--sglang", one.url, "--sglang", dp.url,
		"--out", out, "--max-new-tokens", fmt.Sprint(twoNew), "--temperature", "0")
	if err := p.wait(t, 10*time.Minute); err != nil {
		t.Fatalf("draftflow run: %v", err)
	}
	rows := readRows(t, out)
	if len(rows) != n {
		t.Errorf("%d conversations in the shards, want %d", len(rows), n)
	}
	per := map[string]int{}
	for _, turns := range rows {
		for _, r := range turns {
			per[r.Endpoint]++
		}
	}
	t.Logf("rows per server: %v", per)
	if per[one.url] == 0 || per[dp.url] == 0 {
		t.Errorf("rows per server %v: both must serve", per)
	}
	after := generated()
	t.Logf("tokens per rank of the --dp-size 2 server (sglang:realtime_tokens_total): %v -> %v", before, after)
	for _, r := range []string{"0", "1"} {
		if after[r]-before[r] <= 0 {
			t.Errorf("the --dp-size 2 server's rank %s processed no tokens (sglang:realtime_tokens_total per rank %v -> %v)", r, before, after)
		}
	}

	m := p.lastMetrics()
	for r := range 2 {
		ep := fmt.Sprintf("%s?dp_rank=%d", dp.url, r)
		if v, ok := sample(m, "draftflow_generate_kv_pool_tokens", "endpoint", ep); !ok || v != rankPool {
			t.Errorf("draftflow_generate_kv_pool_tokens{endpoint=%q} = %v (%v), want the rank's pool %d", ep, v, ok, rankPool)
		}
		if _, ok := sample(m, "draftflow_generate_server_token_usage", "endpoint", ep); !ok {
			t.Errorf("no draftflow_generate_server_token_usage for %s: the stage did not read the rank's load", ep)
		}
		if v, _ := sample(m, "draftflow_generate_requests_total", "endpoint", ep, "outcome", "ok"); v == 0 {
			t.Errorf("no requests admitted to %s (pinned with routed_dp_rank)", ep)
		}
	}
	if v, ok := sample(m, "draftflow_generate_kv_pool_tokens", "endpoint", one.url); !ok || v != float64(one.pool) {
		t.Errorf("draftflow_generate_kv_pool_tokens{endpoint=%q} = %v (%v), want %d", one.url, v, ok, one.pool)
	}
	if strings.Contains(p.output(), "level=ERROR") {
		t.Errorf("the run logged errors:\n%s", tail(p.output(), 20))
	}
}
