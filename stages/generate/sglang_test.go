package generate

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
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
	c, err := parseServerInfo([]byte(`{"context_length":8192,"max_running_requests":512,"model_path":"m",
		"internal_states":[{"memory_usage":{"token_capacity":159277}}]}`))
	if err != nil || c.MaxTotalTokens != 159277 || c.MaxRunningRequests != 512 || c.ContextLength != 8192 || c.ServedModel != "m" {
		t.Fatalf("server info %+v %v", c, err)
	}
	if _, err := parseServerInfo([]byte(`{"context_length":8192}`)); err == nil {
		t.Fatal("server info without a pool size accepted")
	}
	l, err := parseLoads([]byte(`{"loads":[{"num_running_reqs":3,"num_waiting_reqs":1,"num_used_tokens":10,
		"max_total_num_tokens":100,"token_usage":0.1},{"num_running_reqs":2,"num_waiting_reqs":0,"token_usage":0.4,
		"num_total_tokens":100}]}`))
	if err != nil || l.Running != 5 || l.Waiting != 1 || l.MaxTokens != 200 || l.TokenUsage != 0.4 {
		t.Fatalf("loads %+v %v", l, err)
	}
	// --dp 2: the top level is one rank's pool; internal_states has one entry per rank.
	c, err = parseServerInfo([]byte(`{"max_total_num_tokens":1000,"max_running_requests":64,"dp_size":2,
		"internal_states":[{"dp_rank":0,"max_total_num_tokens":1000},{"dp_rank":1,"max_total_num_tokens":1000}]}`))
	if err != nil || c.MaxTotalTokens != 2000 {
		t.Fatalf("dp server info %+v %v", c, err)
	}
	// Older builds: dp_size, but a single internal state.
	c, err = parseServerInfo([]byte(`{"max_total_num_tokens":1000,"dp_size":4,"internal_states":[{"max_total_num_tokens":1000}]}`))
	if err != nil || c.MaxTotalTokens != 4000 {
		t.Fatalf("dp server info, one state %+v %v", c, err)
	}
	v, ok, err := parseRetracted([]byte("# TYPE sglang:num_retracted_requests_total counter\n" +
		"sglang:num_retracted_requests_total{model_name=\"a\"} 3\nsglang:num_retracted_requests_total{model_name=\"b\"} 4\n"))
	if err != nil || !ok || v != 7 {
		t.Fatalf("retracted %v %v %v", v, ok, err)
	}
	if _, ok, err := parseRetracted([]byte("other_metric 1\n")); ok || err != nil {
		t.Fatalf("absent counter: ok=%v err=%v", ok, err)
	}
}

func TestErrorMessageAndClassify(t *testing.T) {
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
	for _, tc := range []struct {
		err  error
		kind int
	}{
		{&StatusError{Code: 400, Message: "x"}, outcomeReject},
		{&StatusError{Code: 400, Message: "Duplicate request ID: a"}, outcomeBusy},
		{&StatusError{Code: 503}, outcomeBusy},
		{&StatusError{Code: 500}, outcomeServerError},
		{&StatusError{Code: 404}, outcomeMisconfigured},
		{&AbortedError{Message: "oom", StatusCode: 500}, outcomeServerError},
		{&AbortedError{Message: "bad", StatusCode: 400}, outcomeReject},
		{&AbortedError{Message: "bad", StatusCode: 422}, outcomeReject},
		{&AbortedError{Message: "queue timeout", StatusCode: 503}, outcomeBusy},
		{&AbortedError{Message: "Abort all requests"}, outcomeBusy}, // abort_all, pause_generation, weight update
		{&AbortedError{Message: "Abort before prefill"}, outcomeBusy},
		{&InvalidResponseError{Reason: "x"}, outcomeReject},
		{errors.New("connection reset by peer"), outcomeConnection},
	} {
		if k, _ := classify(tc.err); k != tc.kind {
			t.Errorf("classify(%v) = %d, want %d", tc.err, k, tc.kind)
		}
	}
}

func TestRequestIDsArePrefixFree(t *testing.T) {
	rids := []string{AttemptRID(RequestID("a1", 0), 1), AttemptRID(RequestID("a1", 0), 10), AttemptRID(RequestID("a10", 0), 1),
		AttemptRID(RequestID("a1", 1), 1), AttemptRID(RequestID("a1", 10), 1),
		// Ids holding the separators themselves: "x"'s first attempt must not be a prefix of these.
		AttemptRID(RequestID("x#0.1;y", 0), 1), AttemptRID(RequestID("x#0.1;", 0), 1), AttemptRID(RequestID("x", 0), 1),
		AttemptRID(RequestID("x%3B", 0), 1), AttemptRID(RequestID("x;", 0), 1)}
	for i, a := range rids {
		for j, b := range rids {
			if i != j && strings.HasPrefix(b, a) {
				t.Errorf("rid %q is a prefix of %q", a, b)
			}
		}
	}
}

func TestFlagsAndLanes(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "eps")
	if err := os.WriteFile(file, []byte("# fleet\nhttp://b:30000/\n\nhttp://c:30000 # big\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var c Config
	fs := flag.NewFlagSet("generate", flag.ContinueOnError)
	c.RegisterFlags(fs)
	err := fs.Parse([]string{"--sglang", "http://a:30000", "--sglang-file", file, "--policy", "fixed", "--concurrency", "150",
		"--lane", "short,max_new_tokens=10240,share=0.75", "--lane", "long,max-new-tokens=16384,datasets=books|papers",
		"--request-timeout", "10m", "--max-timeouts", "5", "--max-new-tokens", "2048"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"http://a:30000", "http://b:30000", "http://c:30000"}
	if !reflect.DeepEqual(c.Endpoints, want) || c.Policy != PolicyFixed || c.Concurrency != 150 ||
		c.RequestTimeout != 10*time.Minute || c.MaxTimeouts != 5 || c.DefaultMaxNewTokens != 2048 || len(c.Lanes) != 2 {
		t.Fatalf("config %+v", c)
	}
	if got := c.Lanes[1].String(); got != "long,max_new_tokens=16384,datasets=books|papers" {
		t.Fatalf("lane %q", got)
	}
	if err := c.withDefaults().validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "x,share=2", "x,max_new_tokens=-1", "x,color=red", "x,share"} {
		if _, err := ParseLane(bad); err == nil {
			t.Errorf("lane %q accepted", bad)
		}
	}
	for _, bad := range []Config{
		{},
		{Endpoints: []string{"a:1"}},
		{Endpoints: []string{"http://a:1", "http://a:1"}},
		{Endpoints: []string{"http://a:1"}, Policy: "magic"},
		{Endpoints: []string{"http://a:1"}, Lanes: []Lane{{Name: "x", Share: 0.7}, {Name: "y", Share: 0.7}}},
	} {
		if err := bad.withDefaults().validate(); err == nil {
			t.Errorf("config %+v accepted", bad)
		}
	}
}

func FuzzParseGenerateResponse(f *testing.F) {
	f.Add([]byte(`{"output_ids":[1,2],"meta_info":{"finish_reason":{"type":"stop","matched":2},"num_retractions":1}}`))
	f.Add([]byte(`{"output_ids":[],"meta_info":{"finish_reason":{"type":"abort","message":"x","status_code":503}}}`))
	f.Add([]byte(`{"loads":[{"num_running_reqs":1}]}`))
	f.Add([]byte(`{"max_total_num_tokens":5}`))
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
		_, _ = parseLoads(data)
		_, _, _ = parseRetracted(data)
		_ = errorMessage(data)
	})
}
