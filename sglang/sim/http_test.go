package sim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

func newTestServer(t *testing.T, cfg Config) (*Server, *httptest.Server) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = discardLogger()
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(func() {
		ts.Close()
		s.Close()
	})
	return s, ts
}

func post(t *testing.T, url string, body any) (*http.Response, []byte) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, data
}

func generate(t *testing.T, url string, body any) GenerateResponse {
	t.Helper()
	resp, data := post(t, url+"/generate", body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, data)
	}
	var g GenerateResponse
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatalf("%v: %s", err, data)
	}
	return g
}

func TestGenerateSingle(t *testing.T) {
	t.Parallel()
	_, ts := newTestServer(t, Config{Instant: true, Seed: 3, OutputLenMean: 50})
	g := generate(t, ts.URL, map[string]any{
		"input_ids": []int{1, 2, 3, 4},
		"rid":       "req-1",
		"sampling_params": map[string]any{
			"max_new_tokens": 1000, "temperature": 0.7,
		},
	})
	m := g.MetaInfo
	if m.ID != "req-1" || m.PromptTokens != 4 || m.CompletionTokens != len(g.OutputIDs) || m.CompletionTokens == 0 {
		t.Fatalf("meta %+v (%d ids)", m, len(g.OutputIDs))
	}
	if m.FinishReason == nil || m.FinishReason.Type != "stop" || *m.FinishReason.Matched != int(g.OutputIDs[len(g.OutputIDs)-1]) {
		t.Fatalf("finish %+v", m.FinishReason)
	}
	if m.E2ELatency <= 0 {
		t.Fatalf("e2e %v", m.E2ELatency)
	}
	for _, id := range g.OutputIDs {
		if id < 0 || id >= DefaultVocabSize {
			t.Fatalf("id %d outside vocab", id)
		}
	}
	// Same rid -> same output; another rid -> different output.
	again := generate(t, ts.URL, map[string]any{"input_ids": []int{1, 2, 3, 4}, "rid": "req-1",
		"sampling_params": map[string]any{"max_new_tokens": 1000, "temperature": 0.7}})
	if !reflect.DeepEqual(again.OutputIDs, g.OutputIDs) {
		t.Fatal("same rid gave different output")
	}
	other := generate(t, ts.URL, map[string]any{"input_ids": []int{1, 2, 3, 4}, "rid": "req-2",
		"sampling_params": map[string]any{"max_new_tokens": 1000, "temperature": 0.7}})
	if reflect.DeepEqual(other.OutputIDs, g.OutputIDs) {
		t.Fatal("different rids gave identical output")
	}
	seeded := generate(t, ts.URL, map[string]any{"input_ids": []int{1, 2, 3, 4}, "rid": "req-1",
		"sampling_params": map[string]any{"max_new_tokens": 1000, "sampling_seed": 9}})
	if reflect.DeepEqual(seeded.OutputIDs, g.OutputIDs) {
		t.Fatal("sampling_seed did not change the output")
	}
	// The raw JSON carries SGLang's key names.
	_, raw := post(t, ts.URL+"/generate", map[string]any{"input_ids": []int{5, 6}, "sampling_params": map[string]any{"max_new_tokens": 3, "ignore_eos": true}})
	for _, key := range []string{`"text":`, `"output_ids":`, `"meta_info":`, `"finish_reason":{"type":"length","length":3}`,
		`"prompt_tokens":2`, `"completion_tokens":3`, `"cached_tokens":`, `"e2e_latency":`, `"num_retractions":0`} {
		if !bytes.Contains(raw, []byte(key)) {
			t.Errorf("response lacks %s: %s", key, raw)
		}
	}
}

func TestGenerateBatchAndText(t *testing.T) {
	t.Parallel()
	_, ts := newTestServer(t, Config{Instant: true, OutputLenMean: 20})
	resp, data := post(t, ts.URL+"/generate", map[string]any{
		"input_ids":       [][]int{{1, 2}, {3, 4, 5}},
		"rid":             []string{"a", "b"},
		"sampling_params": []map[string]any{{"max_new_tokens": 4, "ignore_eos": true}, {"max_new_tokens": 6, "ignore_eos": true}},
	})
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, data)
	}
	var out []GenerateResponse
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 || out[0].MetaInfo.ID != "a" || len(out[0].OutputIDs) != 4 || out[1].MetaInfo.ID != "b" || len(out[1].OutputIDs) != 6 {
		t.Fatalf("batch %+v", out)
	}
	if out[1].MetaInfo.PromptTokens != 3 {
		t.Fatalf("prompt tokens %d", out[1].MetaInfo.PromptTokens)
	}
	g := generate(t, ts.URL, map[string]any{"text": "hello", "sampling_params": map[string]any{"max_new_tokens": 2}})
	if g.MetaInfo.PromptTokens != 5 || len(g.MetaInfo.ID) != 32 {
		t.Fatalf("text input: %+v", g.MetaInfo)
	}
}

func TestGenerateErrors(t *testing.T) {
	t.Parallel()
	_, ts := newTestServer(t, Config{Instant: true, ContextLength: 100, MaxQueuedRequests: 1, MaxRunningRequests: 1})
	cases := []struct {
		body   any
		status int
		want   string
	}{
		{map[string]any{"input_ids": make([]int, 100)}, 400,
			`{"error":{"message":"The input (100 tokens) is longer than the model's context length (100 tokens)."}}`},
		{map[string]any{"input_ids": make([]int, 50), "sampling_params": map[string]any{"max_new_tokens": 60}}, 400,
			"Requested token count exceeds the model's maximum context length of 100 tokens. You requested a total of 110 tokens: 50 tokens from the input messages and 60 tokens for the completion."},
		{map[string]any{}, 400, "Either text, input_ids or input_embeds should be provided."},
		{map[string]any{"input_ids": [][]int{{1}, {2}}, "sampling_params": map[string]any{"max_new_tokens": 5}}, 503,
			`{"object":"error","message":"The request queue is full.","type":"503","param":null,"code":503}`},
	}
	for i, c := range cases {
		resp, data := post(t, ts.URL+"/generate", c.body)
		if resp.StatusCode != c.status || !strings.Contains(string(data), c.want) {
			t.Errorf("case %d: %d %s, want %d containing %s", i, resp.StatusCode, data, c.status, c.want)
		}
	}
	// Stream mode reports errors in-band with HTTP 200.
	resp, data := post(t, ts.URL+"/generate", map[string]any{"input_ids": make([]int, 100), "stream": true})
	if resp.StatusCode != 200 || !strings.Contains(string(data), `data: {"error":{"message":"The input (100 tokens)`) ||
		!strings.HasSuffix(string(data), "data: [DONE]\n\n") {
		t.Errorf("stream error: %d %q", resp.StatusCode, data)
	}
}

func TestGenerateStream(t *testing.T) {
	t.Parallel()
	_, ts := newTestServer(t, Config{Instant: true})
	b, _ := json.Marshal(map[string]any{"input_ids": []int{1, 2, 3}, "stream": true, "rid": "s1",
		"sampling_params": map[string]any{"max_new_tokens": 30, "ignore_eos": true}})
	resp, err := http.Post(ts.URL+"/generate", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	var chunks []GenerateResponse
	sawDone := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		payload, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("bad line %q", line)
		}
		if payload == "[DONE]" {
			sawDone = true
			break
		}
		var c GenerateResponse
		if err := json.Unmarshal([]byte(payload), &c); err != nil {
			t.Fatal(err)
		}
		chunks = append(chunks, c)
	}
	if !sawDone || len(chunks) == 0 {
		t.Fatalf("done %v chunks %d", sawDone, len(chunks))
	}
	prev := 0
	for i, c := range chunks {
		if len(c.OutputIDs) < prev {
			t.Fatalf("chunk %d not cumulative", i)
		}
		prev = len(c.OutputIDs)
		last := i == len(chunks)-1
		if (c.MetaInfo.FinishReason != nil) != last {
			t.Fatalf("chunk %d finish %+v", i, c.MetaInfo.FinishReason)
		}
	}
	final := chunks[len(chunks)-1]
	if len(final.OutputIDs) != 30 || final.MetaInfo.FinishReason.Type != "length" {
		t.Fatalf("final %+v", final.MetaInfo)
	}
	// A streamed and a non-streamed call with the same rid agree.
	g := generate(t, ts.URL, map[string]any{"input_ids": []int{1, 2, 3}, "rid": "s1",
		"sampling_params": map[string]any{"max_new_tokens": 30, "ignore_eos": true}})
	if !reflect.DeepEqual(g.OutputIDs, final.OutputIDs) || g.Text != final.Text {
		t.Fatal("stream and non-stream disagree")
	}
}

func TestIntrospection(t *testing.T) {
	t.Parallel()
	_, ts := newTestServer(t, Config{Instant: true})
	generate(t, ts.URL, map[string]any{"input_ids": []int{1, 2, 3}, "sampling_params": map[string]any{"max_new_tokens": 50, "ignore_eos": true}})
	get := func(path string) (int, []byte) {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if code, _ := get("/health"); code != 200 {
		t.Fatalf("health %d", code)
	}
	for _, p := range []string{"/get_server_info", "/server_info"} {
		code, b := get(p)
		var info map[string]any
		if code != 200 || json.Unmarshal(b, &info) != nil {
			t.Fatalf("%s: %d %s", p, code, b)
		}
		if info["max_total_num_tokens"].(float64) != DefaultMaxTotalTokens || info["chunked_prefill_size"].(float64) != 8192 {
			t.Fatalf("%s: %s", p, b)
		}
		if _, ok := info["internal_states"].([]any)[0].(map[string]any)["last_gen_throughput"]; !ok {
			t.Fatalf("no internal_states: %s", b)
		}
	}
	code, b := get("/v1/loads")
	var loads struct {
		Loads []map[string]any `json:"loads"`
	}
	if code != 200 || json.Unmarshal(b, &loads) != nil || len(loads.Loads) != 1 {
		t.Fatalf("loads %d %s", code, b)
	}
	for _, k := range []string{"num_running_reqs", "num_waiting_reqs", "num_used_tokens", "num_total_tokens", "max_total_num_tokens", "token_usage", "gen_throughput", "cache_hit_rate"} {
		if _, ok := loads.Loads[0][k]; !ok {
			t.Errorf("loads lacks %s", k)
		}
	}
	code, b = get("/metrics")
	if code != 200 {
		t.Fatalf("metrics %d", code)
	}
	for _, name := range []string{"sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage", "sglang:num_used_tokens",
		"sglang:gen_throughput", "sglang:cache_hit_rate", "sglang:max_total_num_tokens", "sglang:new_token_ratio",
		"sglang:num_retracted_reqs", "sglang:prompt_tokens_total",
		`sglang:generation_tokens_total{engine_type="unified",is_streaming="false",model_name="draftflow/sim"} 50`,
		"sglang:time_to_first_token_seconds_bucket", "sglang:e2e_request_latency_seconds_count",
		"sglang:queue_time_seconds_sum"} {
		if !strings.Contains(string(b), name) {
			t.Errorf("metrics lack %s", name)
		}
	}
	resp, data := post(t, ts.URL+"/flush_cache", nil)
	if resp.StatusCode != 200 || !strings.HasPrefix(string(data), "Cache flushed.") {
		t.Fatalf("flush %d %s", resp.StatusCode, data)
	}
	if code, _ := get("/nope"); code != 404 {
		t.Fatalf("unknown route %d", code)
	}
}

func TestAbortRequestHTTP(t *testing.T) {
	t.Parallel()
	s, ts := newTestServer(t, Config{TimeScale: 1}) // real time: the request runs for minutes
	var wg sync.WaitGroup
	var g GenerateResponse
	wg.Add(1)
	go func() {
		defer wg.Done()
		g = generate(t, ts.URL, map[string]any{"input_ids": []int{1, 2, 3}, "rid": "victim-1",
			"sampling_params": map[string]any{"max_new_tokens": 100000, "ignore_eos": true}})
	}()
	deadline := time.Now().Add(5 * time.Second)
	for s.Stats().Running == 0 {
		if time.Now().After(deadline) {
			t.Fatal("request never started")
		}
		time.Sleep(5 * time.Millisecond)
	}
	resp, _ := post(t, ts.URL+"/abort_request", map[string]any{"rid": "victim-1"})
	if resp.StatusCode != 200 {
		t.Fatalf("abort status %d", resp.StatusCode)
	}
	wg.Wait()
	if g.MetaInfo.FinishReason == nil || g.MetaInfo.FinishReason.Type != "abort" {
		t.Fatalf("finish %+v", g.MetaInfo.FinishReason)
	}
	if st := s.Stats(); st.Running != 0 || st.UsedTokens != 0 {
		t.Fatalf("after abort: %+v", st)
	}
}

func TestClientDisconnectAborts(t *testing.T) {
	t.Parallel()
	s, ts := newTestServer(t, Config{TimeScale: 1})
	b, _ := json.Marshal(map[string]any{"input_ids": []int{1, 2, 3}, "sampling_params": map[string]any{"max_new_tokens": 100000, "ignore_eos": true}})
	req, _ := http.NewRequest("POST", ts.URL+"/generate", bytes.NewReader(b))
	client := &http.Client{Timeout: 200 * time.Millisecond}
	if _, err := client.Do(req); err == nil {
		t.Fatal("expected a client timeout")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := s.Stats()
		if st.AbortedRequests == 1 && st.Running == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not aborted: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestFaultInjection(t *testing.T) {
	t.Parallel()
	outcomes := func(f Faults) []int {
		_, ts := newTestServer(t, Config{Instant: true, Seed: 42, Faults: f, OutputLenMean: 5})
		var got []int
		for i := 0; i < 40; i++ {
			b, _ := json.Marshal(map[string]any{"input_ids": []int{1}, "rid": fmt.Sprintf("f%d", i)})
			resp, err := http.Post(ts.URL+"/generate", "application/json", bytes.NewReader(b))
			if err != nil {
				got = append(got, -1) // connection reset
				continue
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			got = append(got, resp.StatusCode)
		}
		return got
	}
	f := Faults{ErrorRate: 0.2, QueueFullRate: 0.2, ResetRate: 0.2}
	a, b := outcomes(f), outcomes(f)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("fault injection not deterministic:\n%v\n%v", a, b)
	}
	count := map[int]int{}
	for _, c := range a {
		count[c]++
	}
	if count[500] == 0 || count[503] == 0 || count[-1] == 0 || count[200] == 0 {
		t.Fatalf("outcome mix %v", count)
	}
	// A retry of the same rid draws afresh.
	fi := newFaultInjector(1, Faults{ErrorRate: 0.5})
	var seq []bool
	for i := 0; i < 20; i++ {
		seq = append(seq, fi.decide(`"same"`).internalError)
	}
	if !slices_contains(seq, true) || !slices_contains(seq, false) {
		t.Fatalf("retries of one rid always draw the same: %v", seq)
	}
}

func slices_contains(s []bool, v bool) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func TestCrashCycleHTTP(t *testing.T) {
	t.Parallel()
	// Crash after 1 ms of simulated time and stay down for an hour.
	s, ts := newTestServer(t, Config{TimeScale: 1, Faults: Faults{CrashEvery: time.Millisecond, CrashDowntime: time.Hour}})
	deadline := time.Now().Add(5 * time.Second)
	for !s.Stats().Down {
		if time.Now().After(deadline) {
			t.Fatal("never crashed")
		}
		time.Sleep(2 * time.Millisecond)
	}
	resp, err := http.Get(ts.URL + "/health")
	if err != nil || resp.StatusCode != 503 {
		t.Fatalf("health while down: %v %v", resp, err)
	}
	resp.Body.Close()
	b, _ := json.Marshal(map[string]any{"input_ids": []int{1}})
	if resp, err := http.Post(ts.URL+"/generate", "application/json", bytes.NewReader(b)); err == nil {
		resp.Body.Close()
		t.Fatalf("generate while down answered %d", resp.StatusCode)
	}
}

// TestReferenceRunOverHTTP: 150 concurrent clients of ~1K-token prompts and
// max_new_tokens 10240 see 35-40 running and the rest queued on /v1/loads.
func TestReferenceRunOverHTTP(t *testing.T) {
	t.Parallel()
	// The engine is paused until all 150 arrived, as in the reference run
	// where they arrived at once: with staggered arrivals, decode steps in
	// between decay new_token_ratio and later arrivals are admitted more
	// generously, exactly as SGLang would do.
	s, ts := newTestServer(t, Config{TimeScale: 10, OutputLenDistribution: DistFixed, OutputLenMean: 3000})
	if resp, _ := post(t, ts.URL+"/pause_generation", map[string]any{}); resp.StatusCode != 200 {
		t.Fatalf("pause: %d", resp.StatusCode)
	}
	var wg sync.WaitGroup
	for i := 0; i < 150; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ids := make([]int, 1024)
			for j := range ids {
				ids[j] = (i*7919 + j*104729) % 100000
			}
			b, _ := json.Marshal(map[string]any{"input_ids": ids, "rid": fmt.Sprintf("ref-%03d", i),
				"sampling_params": map[string]any{"max_new_tokens": 10240}})
			resp, err := http.Post(ts.URL+"/generate", "application/json", bytes.NewReader(b))
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}(i)
	}
	defer wg.Wait()
	defer post(t, ts.URL+"/abort_request", map[string]any{"abort_all": true})
	deadline := time.Now().Add(20 * time.Second)
	for s.Stats().Waiting < 150 {
		if time.Now().After(deadline) {
			t.Fatalf("clients never queued: %+v", s.Stats())
		}
		time.Sleep(2 * time.Millisecond)
	}
	if st := s.Stats(); st.Running != 0 || st.PrefillBatches != 0 {
		t.Fatalf("paused engine ran: %+v", st)
	}
	post(t, ts.URL+"/continue_generation", map[string]any{})
	for {
		st := s.Stats()
		if st.Running+st.Waiting == 150 && st.DecodeSteps > 0 && st.Chunked == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never settled: %+v", st)
		}
		time.Sleep(2 * time.Millisecond)
	}
	resp, err := http.Get(ts.URL + "/v1/loads")
	if err != nil {
		t.Fatal(err)
	}
	var loads struct {
		Loads []struct {
			Running    int     `json:"num_running_reqs"`
			Waiting    int     `json:"num_waiting_reqs"`
			TokenUsage float64 `json:"token_usage"`
		} `json:"loads"`
	}
	json.NewDecoder(resp.Body).Decode(&loads)
	resp.Body.Close()
	l := loads.Loads[0]
	if l.Running < 35 || l.Running > 40 || l.Running+l.Waiting != 150 {
		t.Fatalf("running %d waiting %d, want 35-40 running and the rest queued", l.Running, l.Waiting)
	}
	t.Logf("over HTTP: running %d waiting %d token_usage %.3f", l.Running, l.Waiting, l.TokenUsage)
}

// TestCrashCycleInstant: in Instant mode a crash drops the connections in
// flight and the server comes straight back.
func TestCrashCycleInstant(t *testing.T) {
	t.Parallel()
	s, ts := newTestServer(t, Config{Instant: true, Seed: 1, Faults: Faults{CrashEvery: time.Minute}})
	var ok, reset int
	for i := 0; i < 6; i++ {
		b, _ := json.Marshal(map[string]any{"input_ids": []int{1, 2, 3}, "rid": fmt.Sprint("c", i),
			"sampling_params": map[string]any{"max_new_tokens": 1500, "ignore_eos": true}})
		resp, err := http.Post(ts.URL+"/generate", "application/json", bytes.NewReader(b))
		if err != nil {
			reset++
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 {
			ok++
		}
	}
	// 1500 decode steps of ~26 ms each is ~40 s: every other request meets
	// a crash at the minute marks.
	if st := s.Stats(); st.Crashes == 0 || reset == 0 || ok == 0 {
		t.Fatalf("crashes %d, reset %d, ok %d", st.Crashes, reset, ok)
	}
}
