package sim

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// call sends one request to ts and returns the status and body.
func call(t *testing.T, url, method, path, auth string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// getObject GETs path and decodes a JSON object.
func getObject(t *testing.T, url, path string) map[string]any {
	t.Helper()
	code, data := call(t, url, http.MethodGet, path, "", nil)
	var m map[string]any
	if code != 200 || json.Unmarshal(data, &m) != nil {
		t.Fatalf("GET %s: %d %.300s", path, code, data)
	}
	return m
}

// loadCoreKeys are LoadSnapshot's flat fields (managers/load_snapshot.py _CORE_KEYS).
var loadCoreKeys = []string{"cache_hit_rate", "decode_moments", "dp_rank", "gen_throughput", "max_running_requests",
	"max_total_num_tokens", "num_active_tokens", "num_prealloc_ready_tokens", "num_running_reqs", "num_total_tokens",
	"num_used_tokens", "num_waiting_reqs", "num_waiting_uncached_tokens", "timestamp", "token_usage",
	"total_prefill_busy_us", "total_prefill_uncached_tokens", "utilization"}

func TestServerInfoShape(t *testing.T) {
	t.Parallel()
	graphKeys := []string{"decode", "draft_decode", "draft_extend", "draft_prefill", "prefill", "target_verify"}
	cases := []struct {
		name string
		cfg  Config
	}{
		{"dp1 unset", Config{}},
		{"dp1 set", Config{MaxRunningRequests: 48, ContextLength: 32768, MaxTotalTokens: 20000}},
		{"dp2 unset", Config{DPSize: 2}},
		{"dp3 set", Config{DPSize: 3, MaxRunningRequests: 7, ContextLength: 4096, MaxTotalTokens: 5000, APIKey: "k"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.cfg
			cfg.Instant = true
			s, ts := newTestServer(t, cfg)
			code, data := call(t, ts.URL, http.MethodGet, "/server_info", "Bearer "+cfg.APIKey, nil)
			var info map[string]any
			if code != 200 || json.Unmarshal(data, &info) != nil {
				t.Fatalf("%d %.300s", code, data)
			}
			eff := s.Config()
			nullUnless := map[string]int{"max_running_requests": c.cfg.MaxRunningRequests, "context_length": c.cfg.ContextLength,
				"max_total_tokens": c.cfg.MaxTotalTokens, "max_queued_requests": 0}
			for k, v := range nullUnless {
				got, ok := info[k]
				if !ok || (v == 0 && got != nil) || (v != 0 && got != float64(v)) {
					t.Errorf("%s = %v (present %v), want %v", k, got, ok, map[bool]any{true: nil, false: v}[v == 0])
				}
			}
			if c.cfg.APIKey == "" && info["api_key"] != nil {
				t.Errorf("api_key %v", info["api_key"])
			}
			for k, want := range map[string]any{"version": "0.5.23", "dp_size": float64(eff.DPSize), "status": "ready",
				"max_total_num_tokens": float64(eff.MaxTotalTokens), "frontend": "python", "load_balance_method": "round_robin"} {
				if info[k] != want {
					t.Errorf("%s = %v, want %v", k, info[k], want)
				}
			}
			for _, k := range []string{"launch_command", "max_req_input_len", "kv_events", "hicache_object_layout", "simulator"} {
				if _, ok := info[k]; !ok {
					t.Errorf("no %s", k)
				}
			}
			st := info["startup_time"].(map[string]any)
			if k := sortedKeys(st); !slices.Equal(k, []string{"cuda_graph", "kv_cache_allocation", "load_weight", "scheduler_e2e", "tokenizer_e2e"}) {
				t.Errorf("startup_time keys %v", k)
			}
			if k := sortedKeys(st["cuda_graph"].(map[string]any)); !slices.Equal(k, graphKeys) {
				t.Errorf("startup_time.cuda_graph keys %v", k)
			}
			states := info["internal_states"].([]any)
			if len(states) != eff.DPSize {
				t.Fatalf("%d internal_states for %d ranks", len(states), eff.DPSize)
			}
			for i, x := range states {
				e := x.(map[string]any)
				if e["effective_max_running_requests_per_dp"] != float64(eff.MaxRunningRequests) || e["max_running_requests"] != info["max_running_requests"] {
					t.Errorf("internal_states[%d]: effective %v, server arg %v", i, e["effective_max_running_requests_per_dp"], e["max_running_requests"])
				}
				mu := e["memory_usage"].(map[string]any)
				if k := sortedKeys(mu); !slices.Equal(k, []string{"graph", "kvcache", "startup_available", "token_capacity", "token_capacity_swa", "weight"}) {
					t.Errorf("memory_usage keys %v", k)
				}
				if mu["token_capacity"] != float64(eff.MaxTotalTokens) {
					t.Errorf("token_capacity %v", mu["token_capacity"])
				}
				rs := e["startup_time"].(map[string]any)
				if k := sortedKeys(rs); !slices.Equal(k, []string{"cuda_graph", "kv_cache_allocation", "load_weight", "scheduler_e2e"}) {
					t.Errorf("internal_states[%d].startup_time keys %v", i, k)
				}
				for _, k := range []string{"last_gen_throughput", "world_size", "disaggregation_mode", "decode_cuda_graph_bs"} {
					if _, ok := e[k]; !ok {
						t.Errorf("internal_states[%d] lacks %s", i, k)
					}
				}
				// the engine's critical path covers every rank
				if rs["load_weight"].(float64) > st["load_weight"].(float64) {
					t.Errorf("rank load_weight %v over the engine's %v", rs["load_weight"], st["load_weight"])
				}
			}
			// /get_server_info is the same answer
			if a := sortedKeys(getObjectAuth(t, ts.URL, "/get_server_info", cfg.APIKey)); !slices.Equal(a, sortedKeys(info)) {
				t.Errorf("/get_server_info keys differ: %v", a)
			}
		})
	}
}

func getObjectAuth(t *testing.T, url, path, key string) map[string]any {
	t.Helper()
	auth := ""
	if key != "" {
		auth = "Bearer " + key
	}
	code, data := call(t, url, http.MethodGet, path, auth, nil)
	var m map[string]any
	if code != 200 || json.Unmarshal(data, &m) != nil {
		t.Fatalf("GET %s: %d %.300s", path, code, data)
	}
	return m
}

// TestStartupTimeRestarts: startup_time differs between seeds and changes on
// every simulated restart.
func TestStartupTimeRestarts(t *testing.T) {
	t.Parallel()
	startup := func(url string) string {
		b, _ := json.Marshal(getObject(t, url, "/server_info")["startup_time"])
		return string(b)
	}
	_, a := newTestServer(t, Config{Instant: true, Seed: 1})
	_, b := newTestServer(t, Config{Instant: true, Seed: 2})
	if startup(a.URL) == startup(b.URL) {
		t.Fatal("two seeds, one startup_time")
	}
	s, ts := newTestServer(t, Config{Instant: true, Seed: 1, Faults: Faults{CrashEvery: time.Minute}})
	before := startup(ts.URL)
	if before != startup(a.URL) {
		t.Fatal("same seed, different startup_time")
	}
	// ~80 simulated seconds of decoding meet the crash at the minute mark
	body, _ := json.Marshal(map[string]any{"input_ids": []int{1, 2, 3}, "sampling_params": map[string]any{"max_new_tokens": 3000, "ignore_eos": true}})
	if resp, err := http.Post(ts.URL+"/generate", "application/json", bytes.NewReader(body)); err == nil {
		resp.Body.Close()
		t.Fatalf("request survived the crash: %d", resp.StatusCode)
	}
	if s.Stats().Crashes != 1 {
		t.Fatalf("crashes %d", s.Stats().Crashes)
	}
	after := startup(ts.URL)
	if after == before {
		t.Fatal("startup_time unchanged by the restart")
	}
	if r := getObject(t, ts.URL, "/server_info")["simulator"].(map[string]any)["restarts"]; r != float64(1) {
		t.Fatalf("simulator.restarts %v", r)
	}
}

func TestLoadsShapeAndQuery(t *testing.T) {
	t.Parallel()
	s, ts := newTestServer(t, Config{Instant: true, DPSize: 2, MaxTotalTokens: 4000})
	for i := 0; i < 4; i++ {
		generate(t, ts.URL, map[string]any{"input_ids": []int{1, 2, 3, i}, "sampling_params": map[string]any{"max_new_tokens": 50, "ignore_eos": true}})
	}
	sections := []string{"disaggregation", "memory", "queues"}
	cases := []struct {
		query    string
		status   int
		ranks    []int
		sections []string
	}{
		{"", 200, []int{0, 1}, sections},
		{"?include=all", 200, []int{0, 1}, sections},
		{"?include=core", 200, []int{0, 1}, nil},
		{"?include=memory,disagg", 200, []int{0, 1}, []string{"disaggregation", "memory"}},
		{"?include=core,queues", 200, []int{0, 1}, []string{"queues"}},
		{"?include=spec,lora", 200, []int{0, 1}, nil}, // valid, but the sim runs neither
		{"?dp_rank=1", 200, []int{1}, sections},
		{"?dp_rank=1&include=queues", 200, []int{1}, []string{"queues"}},
		{"?dp_rank=2", 200, nil, nil},
		{"?dp_rank=-1", 200, nil, nil},
		{"?dp_rank=2&include=bogus", 200, nil, nil}, // nothing to render: no error
		{"?include=bogus", 500, nil, nil},           // to_dict raises outside the handler's try
		{"?include=core,bogus", 500, nil, nil},
		{"?dp_rank=x", 400, nil, nil},
	}
	for _, c := range cases {
		code, data := call(t, ts.URL, http.MethodGet, "/v1/loads"+c.query, "", nil)
		if code != c.status {
			t.Errorf("%s: %d %.200s, want %d", c.query, code, data, c.status)
			continue
		}
		switch code {
		case 500:
			if string(data) != "Internal Server Error" {
				t.Errorf("%s: body %q", c.query, data)
			}
			continue
		case 400:
			var e ErrorResponse
			if json.Unmarshal(data, &e) != nil || e.Code != 400 || e.Object != "error" {
				t.Errorf("%s: body %s", c.query, data)
			}
			continue
		}
		var top map[string]any
		if err := json.Unmarshal(data, &top); err != nil {
			t.Fatal(err)
		}
		if k := sortedKeys(top); !slices.Equal(k, []string{"accelerator", "loads", "num_accelerators", "timestamp", "version"}) {
			t.Errorf("%s: top-level keys %v", c.query, k)
		}
		loads := top["loads"].([]any)
		if len(loads) != len(c.ranks) {
			t.Errorf("%s: %d loads, want ranks %v", c.query, len(loads), c.ranks)
			continue
		}
		for i, x := range loads {
			l := x.(map[string]any)
			if l["dp_rank"] != float64(c.ranks[i]) {
				t.Errorf("%s: loads[%d].dp_rank %v", c.query, i, l["dp_rank"])
			}
			var core, secs []string
			for _, k := range sortedKeys(l) {
				if _, isObj := l[k].(map[string]any); isObj {
					secs = append(secs, k)
				} else {
					core = append(core, k)
				}
			}
			if !slices.Equal(core, loadCoreKeys) || !slices.Equal(secs, c.sections) {
				t.Errorf("%s: loads[%d] core %v sections %v, want sections %v", c.query, i, core, secs, c.sections)
			}
			if l["num_active_tokens"] != l["num_total_tokens"] || l["max_total_num_tokens"] != float64(4000) {
				t.Errorf("%s: loads[%d] %v", c.query, i, l)
			}
			if m, ok := l["memory"].(map[string]any); ok && m["token_capacity"] != float64(4000) {
				t.Errorf("memory %v", m)
			}
			if d, ok := l["decode_moments"].([]any); !ok || len(d) != 6 {
				t.Errorf("decode_moments %v after decoding", l["decode_moments"])
			}
		}
	}
	_ = s
}

// TestLoadsNumTotalTokens: num_total_tokens = num_used_tokens + seqlen of
// every waiting request (load_inquirer.get_loads), past the pool when the
// queue backs up; the waiting queue is per rank.
func TestLoadsNumTotalTokens(t *testing.T) {
	t.Parallel()
	for _, dp := range []int{1, 2} {
		s, ts := newTestServer(t, Config{Instant: true, DPSize: dp, MaxTotalTokens: 2500, DisableRadixCache: true})
		call(t, ts.URL, http.MethodPost, "/pause_generation", "", map[string]any{})
		var wg sync.WaitGroup
		for i := 0; i < 6; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				generate(t, ts.URL, map[string]any{"input_ids": make([]int, 1000), "rid": fmt.Sprint("q", i),
					"sampling_params": map[string]any{"max_new_tokens": 4, "ignore_eos": true}})
			}(i)
		}
		deadline := time.Now().Add(10 * time.Second)
		for s.Stats().Waiting < 6 && time.Now().Before(deadline) {
			time.Sleep(2 * time.Millisecond)
		}
		loads := getObject(t, ts.URL, "/v1/loads")["loads"].([]any)
		for i, x := range loads {
			l := x.(map[string]any)
			want := l["num_used_tokens"].(float64) + 1000*l["num_waiting_reqs"].(float64)
			if l["num_total_tokens"] != want || l["num_waiting_reqs"] != float64(6/dp) || want <= 2500 {
				t.Errorf("dp %d loads[%d]: total %v waiting %v used %v", dp, i, l["num_total_tokens"], l["num_waiting_reqs"], l["num_used_tokens"])
			}
			if st := s.RankStats(i); st.Waiting != 6/dp {
				t.Errorf("dp %d: RankStats(%d) %+v", dp, i, st)
			}
		}
		call(t, ts.URL, http.MethodPost, "/continue_generation", "", map[string]any{})
		wg.Wait()
		for i, x := range getObject(t, ts.URL, "/v1/loads")["loads"].([]any) {
			if l := x.(map[string]any); l["num_total_tokens"] != l["num_used_tokens"] {
				t.Errorf("dp %d loads[%d] after draining: %v", dp, i, l)
			}
		}
	}
}

func TestAPIKey(t *testing.T) {
	t.Parallel()
	type tc struct {
		method, path, auth string
		status             int
	}
	const key = "s3cret"
	guarded := func(method, path string, ok int) []tc {
		return []tc{
			{method, path, "", 401}, {method, path, "Bearer wrong", 401}, {method, path, "Basic " + key, 401},
			{method, path, key, 401}, {method, path, "Bearer " + key, ok},
		}
	}
	cases := map[string][]tc{
		Release0523: slices.Concat(
			guarded(http.MethodGet, "/server_info", 200), guarded(http.MethodGet, "/get_server_info", 200),
			guarded(http.MethodGet, "/v1/loads", 200), guarded(http.MethodPost, "/abort_request", 200),
			guarded(http.MethodGet, "/nope", 404), guarded(http.MethodGet, "/get_model_info", 200),
			[]tc{
				{http.MethodGet, "/server_info", "bearer " + key, 200}, {http.MethodGet, "/server_info", "BEARER " + key, 200},
				{http.MethodGet, "/health", "", 200}, {http.MethodGet, "/health_generate", "", 200},
				{http.MethodGet, "/ready", "", 200}, {http.MethodGet, "/metrics", "", 200}, {http.MethodGet, "/metrics/", "", 200},
				{http.MethodGet, "/healthz", "", 404}, // prefix match: no key needed, no such route
			}),
		Release054: slices.Concat(
			guarded(http.MethodGet, "/get_server_info", 200), guarded(http.MethodGet, "/get_load", 200),
			guarded(http.MethodGet, "/ready", 404), // not exempt in 0.5.4, and no such route
			[]tc{
				{http.MethodGet, "/get_server_info", "bearer " + key, 401}, // exact "Bearer " + key
				{http.MethodGet, "/health", "", 200}, {http.MethodGet, "/metrics", "", 200},
			}),
	}
	for rel, tcs := range cases {
		_, ts := newTestServer(t, Config{Instant: true, APIKey: key, Release: rel})
		for _, c := range tcs {
			var body any
			if c.method == http.MethodPost {
				body = map[string]any{"rid": "nope"}
			}
			code, data := call(t, ts.URL, c.method, c.path, c.auth, body)
			if code != c.status {
				t.Errorf("%s %s %s auth %q: %d %.100s, want %d", rel, c.method, c.path, c.auth, code, data, c.status)
			}
			if code == 401 && string(data) != "{\"error\":\"Unauthorized\"}\n" {
				t.Errorf("%s %s: 401 body %q", rel, c.path, data)
			}
		}
		// /generate with and without the key
		body := map[string]any{"input_ids": []int{1}, "sampling_params": map[string]any{"max_new_tokens": 1}}
		if code, _ := call(t, ts.URL, http.MethodPost, "/generate", "", body); code != 401 {
			t.Errorf("%s: /generate without a key %d", rel, code)
		}
		if code, data := call(t, ts.URL, http.MethodPost, "/generate", "Bearer "+key, body); code != 200 {
			t.Errorf("%s: /generate with the key %d %s", rel, code, data)
		}
	}
}

func TestRoutesPerRelease(t *testing.T) {
	t.Parallel()
	cases := []struct {
		method, path string
		new, old     int // status in 0.5.23, in 0.5.4
	}{
		{http.MethodGet, "/server_info", 200, 404},
		{http.MethodGet, "/get_server_info", 200, 200},
		{http.MethodGet, "/model_info", 200, 404},
		{http.MethodGet, "/get_model_info", 200, 200},
		{http.MethodGet, "/ready", 200, 404},
		{http.MethodGet, "/v1/loads", 200, 404},
		{http.MethodGet, "/get_load", 404, 200},
		{http.MethodGet, "/health", 200, 200},
		{http.MethodHead, "/health", 200, 200},
		{http.MethodGet, "/metrics", 200, 200},
		{http.MethodGet, "/generate", 405, 405},
		{http.MethodPost, "/health", 405, 405},
		{http.MethodGet, "/nope", 404, 404},
	}
	for _, rel := range []string{Release0523, Release054} {
		_, ts := newTestServer(t, Config{Instant: true, Release: rel})
		for _, c := range cases {
			want := c.new
			if rel == Release054 {
				want = c.old
			}
			code, data := call(t, ts.URL, c.method, c.path, "", nil)
			if code != want {
				t.Errorf("%s %s %s: %d, want %d", rel, c.method, c.path, code, want)
			}
			switch {
			case code == 404 && string(data) != "{\"detail\":\"Not Found\"}\n":
				t.Errorf("%s %s: 404 body %q", rel, c.path, data)
			case code == 405 && string(data) != "{\"detail\":\"Method Not Allowed\"}\n":
				t.Errorf("%s %s: 405 body %q", rel, c.path, data)
			}
		}
		if v := getObject(t, ts.URL, "/get_server_info")["version"]; v != rel {
			t.Errorf("%s: version %v", rel, v)
		}
	}
}

// TestReady: /ready answers 503 while paused (or down); /health stays 200.
func TestReady(t *testing.T) {
	t.Parallel()
	_, ts := newTestServer(t, Config{Instant: true})
	status := func(p string) int { c, _ := call(t, ts.URL, http.MethodGet, p, "", nil); return c }
	if status("/ready") != 200 {
		t.Fatal("not ready")
	}
	code, data := call(t, ts.URL, http.MethodPost, "/pause_generation", "", map[string]any{})
	if code != 200 || string(data) != "{\"message\":\"Generation paused successfully.\",\"status\":\"ok\"}\n" {
		t.Fatalf("pause %d %s", code, data)
	}
	if status("/ready") != 503 || status("/health") != 200 {
		t.Fatalf("paused: ready %d health %d", status("/ready"), status("/health"))
	}
	call(t, ts.URL, http.MethodPost, "/continue_generation", "", map[string]any{})
	if status("/ready") != 200 {
		t.Fatal("not ready after continue")
	}
}

// TestMetaInfoKeys: the keys of a finished answer per release.
func TestMetaInfoKeys(t *testing.T) {
	t.Parallel()
	cases := []struct {
		rel  string
		dp   int
		keys []string
	}{
		{Release0523, 1, []string{"cached_tokens", "completion_tokens", "dp_rank", "e2e_latency", "finish_reason", "id",
			"num_retractions", "prompt_tokens", "reasoning_tokens", "response_sent_to_client_ts", "weight_version"}},
		{Release054, 2, []string{"cached_tokens", "completion_tokens", "e2e_latency", "finish_reason", "id", "prompt_tokens", "weight_version"}},
	}
	for _, c := range cases {
		_, ts := newTestServer(t, Config{Instant: true, Release: c.rel, DPSize: c.dp})
		code, data := call(t, ts.URL, http.MethodPost, "/generate", "", map[string]any{"input_ids": []int{1, 2}, "sampling_params": map[string]any{"max_new_tokens": 2}})
		var g map[string]any
		if code != 200 || json.Unmarshal(data, &g) != nil {
			t.Fatalf("%s: %d %s", c.rel, code, data)
		}
		meta := g["meta_info"].(map[string]any)
		if k := sortedKeys(meta); !slices.Equal(k, c.keys) {
			t.Errorf("%s: meta_info keys %v, want %v", c.rel, k, c.keys)
		}
		if c.rel == Release0523 && meta["dp_rank"] != nil {
			t.Errorf("dp_rank %v without DP, want null", meta["dp_rank"])
		}
	}
}

// TestRoutedDPRank: routed_dp_rank (or data_parallel_rank) pins the rank; out
// of range is the tokenizer manager's 400.
func TestRoutedDPRank(t *testing.T) {
	t.Parallel()
	cases := []struct {
		rel    string
		dp     int
		extra  map[string]any
		stream bool
		status int
		rank   any // meta_info.dp_rank (0.5.23), or the error message
	}{
		{Release0523, 1, map[string]any{"routed_dp_rank": 0}, false, 200, nil},
		{Release0523, 1, map[string]any{"data_parallel_rank": 0}, false, 200, nil},
		{Release0523, 1, map[string]any{"routed_dp_rank": 1}, false, 400, "routed_dp_rank=1 out of range [0, 1)"},
		{Release0523, 3, map[string]any{"routed_dp_rank": 2}, false, 200, 2.0},
		{Release0523, 3, map[string]any{"data_parallel_rank": 1}, false, 200, 1.0},
		{Release0523, 3, map[string]any{"routed_dp_rank": 2, "data_parallel_rank": 1}, false, 200, 2.0},
		{Release0523, 3, map[string]any{"routed_dp_rank": 3}, false, 400, "routed_dp_rank=3 out of range [0, 3)"},
		{Release0523, 3, map[string]any{"data_parallel_rank": -1}, false, 400, "routed_dp_rank=-1 out of range [0, 3)"},
		{Release0523, 2, map[string]any{"routed_dp_rank": 5}, true, 200, "routed_dp_rank=5 out of range [0, 2)"},
		{Release054, 1, map[string]any{"data_parallel_rank": 5}, false, 200, nil}, // no DP controller: ignored
		{Release054, 2, map[string]any{"routed_dp_rank": 9}, false, 200, nil},     // unknown field in 0.5.4
	}
	for i, c := range cases {
		_, ts := newTestServer(t, Config{Instant: true, Release: c.rel, DPSize: c.dp})
		body := map[string]any{"input_ids": []int{1, 2}, "stream": c.stream, "sampling_params": map[string]any{"max_new_tokens": 2}}
		for k, v := range c.extra {
			body[k] = v
		}
		code, data := call(t, ts.URL, http.MethodPost, "/generate", "", body)
		if code != c.status {
			t.Errorf("case %d: %d %s, want %d", i, code, data, c.status)
			continue
		}
		switch want := c.rank.(type) {
		case string:
			if c.stream {
				if !strings.Contains(string(data), fmt.Sprintf(`{"error":{"message":%q,"type":"invalid_request_error","code":400,"retryable":false}}`, want)) {
					t.Errorf("case %d: stream %s", i, data)
				}
			} else if string(data) != fmt.Sprintf("{\"error\":{\"message\":%q}}\n", want) {
				t.Errorf("case %d: body %s", i, data)
			}
		default:
			var g map[string]any
			_ = json.Unmarshal(data, &g)
			if meta, _ := g["meta_info"].(map[string]any); c.rel == Release0523 && meta["dp_rank"] != c.rank {
				t.Errorf("case %d: dp_rank %v, want %v", i, meta["dp_rank"], c.rank)
			}
		}
	}
}

// TestDPRanksHavePools: each rank has its own pool of MaxTotalTokens and its
// own queue; dispatch is round robin.
func TestDPRanksHavePools(t *testing.T) {
	t.Parallel()
	s, ts := newTestServer(t, Config{Instant: true, DPSize: 3, MaxTotalTokens: 5000})
	call(t, ts.URL, http.MethodPost, "/pause_generation", "", map[string]any{})
	var wg sync.WaitGroup
	for i := 0; i < 7; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			generate(t, ts.URL, map[string]any{"input_ids": make([]int, 2000), "sampling_params": map[string]any{"max_new_tokens": 10, "ignore_eos": true}})
		}()
		// one at a time, so the round robin order is the submission order
		deadline := time.Now().Add(5 * time.Second)
		for s.Stats().Waiting < i+1 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
	for r, want := range []int{3, 2, 2} {
		if st := s.RankStats(r); st.Waiting != want || st.MaxTotalTokens != 5000 {
			t.Errorf("rank %d: %+v, want %d waiting", r, st, want)
		}
	}
	if st := s.Stats(); st.MaxTotalTokens != 15000 || st.Waiting != 7 {
		t.Errorf("aggregate %+v", st)
	}
	call(t, ts.URL, http.MethodPost, "/continue_generation", "", map[string]any{})
	wg.Wait()
	// 2000-token prompts: a rank holds two at once (2 x 2010 < 5000), so all
	// three ranks ran in parallel
	for r := 0; r < 3; r++ {
		if st := s.RankStats(r); st.PrefillBatches == 0 || st.FinishedRequests == 0 {
			t.Errorf("rank %d never ran: %+v", r, st)
		}
	}
	if s.RankStats(3) != (Stats{}) {
		t.Error("RankStats of a missing rank")
	}
}

// TestRetractionMetrics: sglang:num_retracted_requests_total has no family
// until the first retraction (0.5.23) and never exists in 0.5.4; the gauge
// sglang:num_retracted_reqs always does. The counter's total matches the sum
// of meta_info.num_retractions.
func TestRetractionMetrics(t *testing.T) {
	t.Parallel()
	for _, rel := range []string{Release0523, Release054} {
		s, ts := newTestServer(t, Config{Instant: true, Release: rel, MaxTotalTokens: 1000, ScheduleConservativeness: 0.1, DisableRadixCache: true})
		metrics := func() string { _, b := call(t, ts.URL, http.MethodGet, "/metrics", "", nil); return string(b) }
		m := metrics()
		if strings.Contains(m, "sglang:num_retracted_requests_total") {
			t.Fatalf("%s: retraction counter before any retraction:\n%s", rel, m)
		}
		if !strings.Contains(m, "sglang:num_retracted_reqs{") || !strings.Contains(m, `pid="`) {
			t.Fatalf("%s: no num_retracted_reqs gauge", rel)
		}
		call(t, ts.URL, http.MethodPost, "/pause_generation", "", map[string]any{})
		var wg sync.WaitGroup
		var mu sync.Mutex
		perRequest := 0
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				ids := make([]int, 100)
				for j := range ids {
					ids[j] = i*1000 + j
				}
				code, data := call(t, ts.URL, http.MethodPost, "/generate", "", map[string]any{"input_ids": ids,
					"sampling_params": map[string]any{"max_new_tokens": 300, "ignore_eos": true}})
				var g map[string]any
				if code != 200 || json.Unmarshal(data, &g) != nil {
					t.Errorf("%d %s", code, data)
					return
				}
				n, has := g["meta_info"].(map[string]any)["num_retractions"]
				if has != (rel == Release0523) {
					t.Errorf("%s: num_retractions present %v", rel, has)
				}
				if has {
					mu.Lock()
					perRequest += int(n.(float64))
					mu.Unlock()
				}
			}(i)
		}
		deadline := time.Now().Add(5 * time.Second)
		for s.Stats().Waiting < 4 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		call(t, ts.URL, http.MethodPost, "/continue_generation", "", map[string]any{})
		wg.Wait()
		st := s.Stats()
		if st.RetractionsTotal == 0 {
			t.Fatalf("%s: the scenario did not retract: %+v", rel, st)
		}
		m = metrics()
		if rel == Release054 {
			if strings.Contains(m, "num_retracted_requests_total") {
				t.Errorf("0.5.4 exports the retraction counter")
			}
			continue
		}
		want := fmt.Sprintf(`sglang:num_retracted_requests_total{engine_type="unified",model_name="draftflow/sim",moe_ep_rank="0",pp_rank="0",tp_rank="0"} %d`, st.RetractionsTotal)
		if !strings.Contains(m, want) || int64(perRequest) != st.RetractionsTotal {
			t.Errorf("counter line %q missing or meta_info sum %d != %d", want, perRequest, st.RetractionsTotal)
		}
	}
}

// TestMetricLabels: scheduler series carry dp_rank with DP; 0.5.4's label sets.
func TestMetricLabels(t *testing.T) {
	t.Parallel()
	cases := []struct {
		rel, want string
		dp        int
	}{
		{Release0523, `sglang:num_running_reqs{dp_rank="1",engine_type="unified",model_name="draftflow/sim",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0`, 2},
		{Release0523, `sglang:max_total_num_tokens{engine_type="unified",model_name="draftflow/sim",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 159277`, 1},
		{Release054, `sglang:num_running_reqs{engine_type="unified",model_name="draftflow/sim",pp_rank="0",tp_rank="0"} 0`, 1},
		{Release054, `sglang:generation_tokens_total{model_name="draftflow/sim"} 2`, 1},
		{Release0523, `sglang:generation_tokens_total{engine_type="unified",is_streaming="false",model_name="draftflow/sim"} 2`, 1},
	}
	for _, c := range cases {
		_, ts := newTestServer(t, Config{Instant: true, Release: c.rel, DPSize: c.dp})
		generate(t, ts.URL, map[string]any{"input_ids": []int{1}, "sampling_params": map[string]any{"max_new_tokens": 2, "ignore_eos": true}})
		if _, m := call(t, ts.URL, http.MethodGet, "/metrics", "", nil); !strings.Contains(string(m), c.want) {
			t.Errorf("%s dp %d: no %s", c.rel, c.dp, c.want)
		}
	}
}

func TestNewFlags(t *testing.T) {
	t.Parallel()
	var c Config
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"--api-key=k1", "--dp-size=4", "--release=0.5.4"}); err != nil {
		t.Fatal(err)
	}
	if c.APIKey != "k1" || c.DPSize != 4 || c.Release != Release054 {
		t.Fatalf("%+v", c)
	}
	if _, err := New(Config{Release: "0.4.0"}); err == nil {
		t.Fatal("unknown release accepted")
	}
}
