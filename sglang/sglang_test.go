package sglang

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestParseGenerateResponse(t *testing.T) {
	r, err := parseGenerateResponse([]byte(`{"text":"hi","output_ids":[5,6,151645],"meta_info":{"id":"a#0.1;",
		"finish_reason":{"type":"stop","matched":151645},"prompt_tokens":3,"completion_tokens":3,"cached_tokens":1,
		"e2e_latency":1.5,"total_retractions":2}}`))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r.OutputIDs, []uint32{5, 6, 151645}) || r.MetaInfo.Retractions() != 2 ||
		string(r.MetaInfo.FinishReason.Matched) != "151645" || r.MetaInfo.E2ELatency != 1.5 || r.MetaInfo.CachedTokens != 1 {
		t.Fatalf("parsed %+v", r)
	}
	r, err = parseGenerateResponse([]byte(`{"output_ids":[],"meta_info":{"finish_reason":{"type":"length","length":0},"num_retractions":4}}`))
	if err != nil || len(r.OutputIDs) != 0 || r.MetaInfo.Retractions() != 4 {
		t.Fatalf("empty output: %+v %v", r, err)
	}
	for body, want := range map[string]any{
		`{"output_ids":[1],"meta_info":{"finish_reason":{"type":"abort","message":"m","status_code":400}}}`: &AbortedError{},
		`{"output_ids":[-1],"meta_info":{"finish_reason":{"type":"stop"}}}`:                                 &InvalidResponseError{},
		`{"meta_info":{"finish_reason":{"type":"stop"}}}`:                                                   &InvalidResponseError{},
		`{"output_ids":[1],"meta_info":{"finish_reason":null}}`:                                             &InvalidResponseError{},
		`[{"output_ids":[1]}]`: &InvalidResponseError{},
		`not json`:             &InvalidResponseError{},
	} {
		_, err := parseGenerateResponse([]byte(body))
		if err == nil || reflect.TypeOf(err) != reflect.TypeOf(want) {
			t.Errorf("%s: got %v (%T), want %T", body, err, err, want)
		}
	}
}

func TestParseIntrospection(t *testing.T) {
	// SGLang 0.5.23 /server_info: server arguments null unless set, per-rank figures in internal_states.
	c, err := parseServerInfo([]byte(`{"context_length":null,"max_running_requests":null,"model_path":"m",
		"max_total_num_tokens":159277,"dp_size":1,"version":"0.5.23",
		"startup_time":{"load_weight":10.5,"kv_cache_allocation":1.25,"scheduler_e2e":30.0,"cuda_graph":{}},
		"internal_states":[{"effective_max_running_requests_per_dp":48,"memory_usage":{"token_capacity":159277}}]}`))
	if err != nil || c.MaxTotalTokens != 159277 || c.MaxRunningRequests != 48 || c.ContextLength != 0 || c.ServedModel != "m" ||
		c.Version != "0.5.23" || !strings.Contains(c.StartupTime, `"load_weight":10.5`) || len(c.Ranks) != 1 {
		t.Fatalf("server info %+v %v", c, err)
	}
	// A top-level max_running_requests set on the command line bounds every replica without its own figure.
	c, err = parseServerInfo([]byte(`{"context_length":8192,"max_running_requests":512,"model_path":"m",
		"max_total_num_tokens":1000,"dp_size":2}`))
	if err != nil || c.MaxTotalTokens != 2000 || c.MaxRunningRequests != 1024 || c.ContextLength != 8192 || len(c.Ranks) != 2 {
		t.Fatalf("server info from server arguments %+v %v", c, err)
	}
	// --dp 2: one internal state per rank, each with its own pool.
	c, err = parseServerInfo([]byte(`{"max_total_num_tokens":1000,"dp_size":2,
		"internal_states":[{"memory_usage":{"token_capacity":1000},"effective_max_running_requests_per_dp":64},
		{"memory_usage":{"token_capacity":900},"effective_max_running_requests_per_dp":64}]}`))
	if err != nil || c.MaxTotalTokens != 1900 || c.MaxRunningRequests != 128 ||
		!slices.Equal(c.Ranks, []RankCapacity{{1000, 64}, {900, 64}}) {
		t.Fatalf("dp server info %+v %v", c, err)
	}
	// Older builds: dp_size, but a single internal state.
	c, err = parseServerInfo([]byte(`{"max_total_num_tokens":1000,"dp_size":4,"internal_states":[{"max_total_num_tokens":1000}]}`))
	if err != nil || c.MaxTotalTokens != 4000 || len(c.Ranks) != 4 || c.MaxRunningRequests != 0 {
		t.Fatalf("dp server info, one state %+v %v", c, err)
	}
	// Unusable answers name the field.
	for body, field := range map[string]string{
		`{"context_length":8192}`:                                              "max_total_num_tokens",
		`{"max_total_num_tokens":"lots"}`:                                      "max_total_num_tokens",
		`{"max_total_num_tokens":100,"max_running_requests":-1}`:               "max_running_requests",
		`{"max_total_num_tokens":100,"internal_states":{}}`:                    "internal_states",
		`{"max_total_num_tokens":100,"internal_states":[{"memory_usage":[]}]}`: "internal_states[0].memory_usage",
		`{"max_total_num_tokens":100,"context_length":1.5}`:                    "context_length",
		`[]`: "answer",
	} {
		if _, err := parseServerInfo([]byte(body)); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("server info %s: got %v, want an error naming %s", body, err, field)
		}
	}

	// /v1/loads: the pool is max_total_num_tokens, never num_total_tokens (used + waiting tokens).
	l, err := parseLoads([]byte(`{"loads":[{"dp_rank":0,"num_running_reqs":3,"num_waiting_reqs":40,"num_used_tokens":10,
		"num_total_tokens":450000,"max_total_num_tokens":100,"max_running_requests":48,"token_usage":0.1,"gen_throughput":5},
		{"dp_rank":1,"num_running_reqs":2,"num_waiting_reqs":0,"num_used_tokens":20,"token_usage":0.4,
		"num_total_tokens":100,"memory":{"token_capacity":120}}]}`))
	if err != nil || l.Running != 5 || l.Waiting != 40 || l.MaxTokens != 220 || l.TokenUsage != 0.4 || l.UsedTokens != 30 ||
		len(l.Ranks) != 2 || l.Ranks[0].MaxTokens != 100 || l.Ranks[1].MaxTokens != 120 || l.MaxRunningRequests != 0 {
		t.Fatalf("loads %+v %v", l, err)
	}
	for body, field := range map[string]string{
		`{"loads":[]}`: "loads",
		`{"loads":[{"num_running_reqs":1,"num_waiting_reqs":0,"num_used_tokens":1,"token_usage":0.1}]}`:                              "max_total_num_tokens",
		`{"loads":[{"num_running_reqs":1,"num_waiting_reqs":0,"max_total_num_tokens":9,"token_usage":0.1}]}`:                         "num_used_tokens",
		`{"loads":[{"num_running_reqs":"1","num_waiting_reqs":0,"num_used_tokens":1,"max_total_num_tokens":9,"token_usage":0.1}]}`:   "loads[0].num_running_reqs",
		`{"loads":[{"num_running_reqs":1,"num_waiting_reqs":0,"num_used_tokens":1,"max_total_num_tokens":9}]}`:                       "token_usage",
		`{"loads":[{"num_running_reqs":1,"num_waiting_reqs":0,"num_used_tokens":1,"max_total_num_tokens":9,"token_usage":0.1},"x"]}`: "loads[1]",
	} {
		if _, err := parseLoads([]byte(body)); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("loads %s: got %v, want an error naming %s", body, err, field)
		}
	}

	x, err := parseRetracted([]byte("# TYPE sglang:num_retracted_requests_total counter\n" +
		"sglang:num_retracted_requests_total{model_name=\"a\",dp_rank=\"0\"} 3\nsglang:num_retracted_requests_total{model_name=\"a\",dp_rank=\"1\"} 4\n"))
	if err != nil || !x.Supported || x.Total != 7 || x.ForRank(1) != 4 || x.ForRank(-1) != 7 {
		t.Fatalf("retracted %+v %v", x, err)
	}
	// The labelled counter has no sample before the first retraction: a server exporting SGLang metrics
	// without it has retracted nothing, and the feedback stays on.
	x, err = parseRetracted([]byte("# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name=\"a\"} 3\n" +
		"# HELP sglang:num_retracted_requests_total Total number of retracted requests.\n# TYPE sglang:num_retracted_requests_total counter\n"))
	if err != nil || !x.Supported || x.Total != 0 {
		t.Fatalf("counter without samples: %+v %v", x, err)
	}
	if x, err := parseRetracted([]byte("other_metric 1\n")); x.Supported || err != nil {
		t.Fatalf("no SGLang metrics: %+v err=%v", x, err)
	}
}

func TestErrorMessage(t *testing.T) {
	for body, want := range map[string]string{
		`{"error":{"message":"too long"}}`:                                     "too long",
		`{"object":"error","message":"The request queue is full.","code":503}`: "The request queue is full.",
		`{"detail":"Not Found"}`:                                               "Not Found",
		`plain text`:                                                           "plain text",
		``:                                                                     "(empty body)",
	} {
		if got := errorMessage([]byte(body)); got != want {
			t.Errorf("errorMessage(%q) = %q, want %q", body, got, want)
		}
	}
}

func FuzzParseGenerateResponse(f *testing.F) {
	f.Add([]byte(`{"output_ids":[1,2],"meta_info":{"finish_reason":{"type":"stop","matched":2},"num_retractions":1}}`))
	f.Add([]byte(`{"output_ids":[],"meta_info":{"finish_reason":{"type":"abort","message":"x","status_code":503}}}`))
	f.Add([]byte(`{"loads":[{"num_running_reqs":1}]}`))
	f.Add([]byte(`{"max_total_num_tokens":5}`))
	f.Add([]byte(`{"loads":[{"dp_rank":0,"num_running_reqs":1,"num_waiting_reqs":4,"num_used_tokens":9,"num_total_tokens":90,` +
		`"max_total_num_tokens":50,"token_usage":0.2,"gen_throughput":3.5,"memory":{"token_capacity":50}}]}`))
	f.Add([]byte(`{"max_total_num_tokens":null,"max_running_requests":null,"dp_size":2,"startup_time":{"load_weight":1.5},` +
		`"internal_states":[{"memory_usage":{"token_capacity":7}},{"effective_max_running_requests_per_dp":3}]}`))
	f.Add([]byte("# TYPE sglang:num_retracted_requests_total counter\nsglang:num_retracted_requests_total{dp_rank=\"1\"} 2\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if r, err := parseGenerateResponse(data); err == nil {
			if r.OutputIDs == nil || r.MetaInfo.FinishReason == nil {
				t.Fatalf("accepted an answer without output ids or finish reason: %q", data)
			}
			if ft := r.MetaInfo.FinishReason.Type; ft != "stop" && ft != "length" {
				t.Fatalf("accepted finish reason %q", ft)
			}
		}
		if c, err := parseServerInfo(data); err == nil && c.MaxTotalTokens <= 0 {
			t.Fatalf("accepted server info without a pool: %q", data)
		}
		if l, err := parseLoads(data); err == nil {
			if len(l.Ranks) == 0 || l.MaxTokens <= 0 {
				t.Fatalf("accepted loads without ranks or a pool: %q", data)
			}
			for _, r := range l.Ranks {
				if r.MaxTokens <= 0 {
					t.Fatalf("accepted a rank without a pool: %q", data)
				}
			}
		}
		if x, err := parseRetracted(data); err == nil && x.HasCounter && !x.Supported {
			t.Fatalf("a retraction counter without SGLang metrics: %q", data)
		}
		_ = errorMessage(data)
	})
}
