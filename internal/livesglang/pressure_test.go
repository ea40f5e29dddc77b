package livesglang

import (
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// Sizing of the KV pressure test: pressurePrompts requests of about 16 prompt and pressureNew output tokens
// (a random-weight model almost never ends a turn, so each runs to max_new_tokens, ~112 tokens of KV at the
// end) on a pool of pressurePool tokens, which holds nine of them whole. SGLang admits a waiting request when
// its prompt and max_new_tokens times new_token_ratio fit beside the running ones' remaining tokens times the
// same ratio. The ratio starts at 0.7 x --schedule-conservativeness and decays to a seventh of that over
// SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS decode steps; a retraction raises it (to the batch's decoded share of its
// max_new_tokens plus 20 steps each, at most 1), and an idle server resets it.
// The server here is an optimistic one: conservativeness 0.3 (ratio 0.21) and a decay over pressureDecay steps
// instead of 600, so that after each retraction it is soon optimistic again. With the fixed client's
// pressureFixed requests waiting it admits most of them, their KV overflows the pool as they grow, it
// retracts, recovers its optimism within a few dozen steps and retracts again. (With the default decay a run
// this short sees one retraction: the ratio stays high for the rest of it.) ignore_eos stays false: with it
// set the scheduler reserves the whole max_new_tokens and queues requests instead of retracting.
const (
	pressurePool    = 1024
	pressurePrompts = 32
	pressureNew     = 96
	pressureFixed   = 32
	pressureDecay   = 10
	// pressureMinFixed is the least retracted requests the fixed client must cause for the sizing to count
	// as pressure.
	pressureMinFixed = 3
)

// TestKVPressure runs the same dataset on a small pool twice: with --policy fixed at pressureFixed requests,
// which makes the real scheduler retract at least pressureMinFixed requests, then with the default policy,
// which must finish every row with no client aborts and fewer retractions (the server's own counter, per
// run). The default run's
// metrics must show that it read the live pool, the rank's running-request limit and the retraction counter
// (which the server exports only from its first retraction on).
func TestKVPressure(t *testing.T) {
	need(t)
	srv := startServerEnv(t, "pressure", pressurePool, []string{fmt.Sprintf("SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS=%d", pressureDecay)},
		"--schedule-conservativeness", "0.3")
	dir := t.TempDir()
	var lines []any
	for i := range pressurePrompts {
		lines = append(lines, chat(fmt.Sprintf("kv-%02d", i), fmt.Sprintf("Tell a long story about %d.", i)))
	}
	data := filepath.Join(dir, "pressure.jsonl")
	writeJSONL(t, data, lines)

	var info struct {
		States []struct {
			MaxRunning int `json:"effective_max_running_requests_per_dp"`
			Memory     struct {
				Capacity int `json:"token_capacity"`
			} `json:"memory_usage"`
		} `json:"internal_states"`
	}
	getJSON(t, http.MethodGet, srv.url+"/server_info", nil, &info)
	if len(info.States) != 1 || info.States[0].Memory.Capacity != pressurePool || info.States[0].MaxRunning <= 0 {
		t.Fatalf("/server_info internal_states %+v: want one rank with a %d-token pool and a running limit", info.States, pressurePool)
	}

	retracted := func() float64 {
		fams, err := scrape(srv.url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		return sum(fams, "sglang:num_retracted_requests_total")
	}
	run := func(name string, args ...string) (retractions float64, stage map[string]*dto.MetricFamily) {
		t.Helper()
		before := retracted()
		args = append([]string{"run", "--input", data, "--model", modelDir, "--sglang", srv.url, "--out", filepath.Join(dir, name),
			"--max-new-tokens", fmt.Sprint(pressureNew), "--temperature", "0"}, args...)
		p := startDraftflow(t, "draftflow run "+name, nil, args...)
		if err := p.wait(t, 10*time.Minute); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		rows := readRows(t, filepath.Join(dir, name))
		if len(rows) != pressurePrompts {
			t.Errorf("%s: %d rows, want %d", name, len(rows), pressurePrompts)
		}
		return retracted() - before, p.lastMetrics()
	}

	fixed, _ := run("fixed", "--policy", "fixed", "--concurrency", fmt.Sprint(pressureFixed))
	afterFixed := retracted()
	def, stage := run("default")
	t.Logf("server retractions: %v with --policy fixed --concurrency %d, %v with the default policy (pool %d, %d prompts x %d new tokens)",
		fixed, pressureFixed, def, pressurePool, pressurePrompts, pressureNew)
	if fixed < pressureMinFixed {
		t.Fatalf("the fixed client made the server retract %v requests, want at least %d: the test's sizing no longer puts the pool under pressure",
			fixed, pressureMinFixed)
	}
	if def >= fixed {
		t.Errorf("the default policy made the server retract %v times, the fixed client %v", def, fixed)
	}

	if stage == nil {
		t.Fatal("no /metrics scrape of the default run")
	}
	ep := []string{"endpoint", srv.url}
	if v, ok := sample(stage, "draftflow_generate_kv_pool_tokens", ep...); !ok || v != pressurePool {
		t.Errorf("draftflow_generate_kv_pool_tokens = %v (%v), want the live pool %d", v, ok, pressurePool)
	}
	if v, ok := sample(stage, "draftflow_generate_server_max_running_requests", ep...); !ok || int(v) != info.States[0].MaxRunning {
		t.Errorf("draftflow_generate_server_max_running_requests = %v (%v), want the live limit %d", v, ok, info.States[0].MaxRunning)
	}
	// The counter exists since the fixed run's retractions: the stage read it at least at that value.
	if v, ok := sample(stage, "draftflow_generate_server_retracted_requests", ep...); !ok || v < afterFixed || v > retracted() {
		t.Errorf("draftflow_generate_server_retracted_requests = %v (%v), want the live counter (%v after the fixed run, %v now)",
			v, ok, afterFixed, retracted())
	}
	for _, m := range stage["draftflow_generate_requests_total"].GetMetric() {
		outcome := ""
		for _, lp := range m.GetLabel() {
			if lp.GetName() == "outcome" {
				outcome = lp.GetValue()
			}
		}
		if outcome != "ok" && m.GetCounter().GetValue() > 0 {
			t.Errorf("the default run had %v request attempts ending %q: want none but ok", m.GetCounter().GetValue(), outcome)
		}
	}
}
