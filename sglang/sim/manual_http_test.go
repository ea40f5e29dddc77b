package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"
)

// callResult is the answer of one in-process call.
type callResult struct {
	code int
	body []byte
}

// serveAsync serves one request through s.ServeHTTP in a goroutine, the way
// a discrete-event owner drives a manual-mode server. It returns once the
// WithSubmitted hook fired, with the channel that delivers the answer.
func serveAsync(t *testing.T, s *Server, method, path string, body any, auth string) <-chan callResult {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	queued := make(chan struct{})
	calls := 0
	ctx := WithSubmitted(context.Background(), func() { calls++; close(queued) })
	req := httptest.NewRequest(method, path, rd).WithContext(ctx)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	out := make(chan callResult, 1)
	go func() {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		out <- callResult{rec.Code, rec.Body.Bytes()}
	}()
	select {
	case <-queued:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s %s: the submitted hook never fired", method, path)
	}
	return out
}

// serveSync serves one request in-process and returns its answer.
func serveSync(s *Server, method, path string, body any) callResult {
	var b []byte
	if body != nil {
		b, _ = json.Marshal(body)
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(method, path, bytes.NewReader(b)))
	return callResult{rec.Code, rec.Body.Bytes()}
}

// drive runs Poll/Finish from now until every rank is idle and returns the
// finish instant of every request.
func drive(s *Server, now float64) map[string]float64 {
	at := map[string]float64{}
	end, busy := s.Poll(now)
	for busy {
		for _, f := range s.Finish() {
			at[f.RID] = end
		}
		end, busy = s.Poll(end)
	}
	return at
}

func TestManualHTTPGenerate(t *testing.T) {
	t.Parallel()
	s, err := NewManual(Config{MaxTotalTokens: 4000, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.SetTime(10)
	body := map[string]any{"input_ids": []int{1, 2, 3}, "rid": "h1", "sampling_params": map[string]any{"max_new_tokens": 3, "ignore_eos": true}}
	answer := serveAsync(t, s, http.MethodPost, "/generate", body, "")
	select {
	case r := <-answer:
		t.Fatalf("answered before any forward pass: %d %s", r.code, r.body)
	case <-time.After(20 * time.Millisecond):
	}
	// GET routes read the current state: the request waits on rank 0.
	var loads struct {
		Loads []map[string]any `json:"loads"`
	}
	if r := serveSync(s, http.MethodGet, "/v1/loads", nil); r.code != 200 || json.Unmarshal(r.body, &loads) != nil ||
		loads.Loads[0]["num_waiting_reqs"] != float64(1) {
		t.Fatalf("/v1/loads in manual mode: %d %s", r.code, r.body)
	}
	at := drive(s, 10)
	var r callResult
	select {
	case r = <-answer:
	case <-time.After(10 * time.Second):
		t.Fatal("no answer after the request finished")
	}
	var g GenerateResponse
	if r.code != 200 || json.Unmarshal(r.body, &g) != nil {
		t.Fatalf("answer %d %s", r.code, r.body)
	}
	if g.MetaInfo.ID != "h1" || len(g.OutputIDs) != 3 || g.MetaInfo.FinishReason.Type != "length" {
		t.Fatalf("answer %s", r.body)
	}
	if want := at["h1"] - 10; math.Abs(g.MetaInfo.E2ELatency-want) > 1e-9 {
		t.Fatalf("e2e_latency %.9f, want %.9f (submitted at 10, finished at %.9f)", g.MetaInfo.E2ELatency, want, at["h1"])
	}

	// The same prompt through Submit finishes identically (same rid, same seed).
	s2, _ := NewManual(Config{MaxTotalTokens: 4000, Seed: 3})
	defer s2.Close()
	maxNew := 3
	if err := s2.Submit(10, Prompt{RID: "h1", InputIDs: []int32{1, 2, 3}, Sampling: SamplingParams{MaxNewTokens: &maxNew, IgnoreEOS: true}}); err != nil {
		t.Fatal(err)
	}
	if at2 := drive(s2, 10); at2["h1"] != at["h1"] {
		t.Fatalf("Submit finished at %v, HTTP at %v", at2["h1"], at["h1"])
	}
}

// TestManualHTTPHookOnErrors: the hook fires (once) when the call ends early.
func TestManualHTTPHookOnErrors(t *testing.T) {
	t.Parallel()
	s, err := NewManual(Config{MaxTotalTokens: 4000, ContextLength: 100, APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cases := []struct {
		name   string
		body   any
		auth   string
		status int
	}{
		{"validation", map[string]any{"input_ids": make([]int, 100)}, "Bearer k", 400},
		{"unauthorized", map[string]any{"input_ids": []int{1}}, "", 401},
		{"routed rank", map[string]any{"input_ids": []int{1}, "routed_dp_rank": 3}, "Bearer k", 400},
	}
	for _, c := range cases {
		r := <-serveAsync(t, s, http.MethodPost, "/generate", c.body, c.auth)
		if r.code != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, r.code, r.body, c.status)
		}
	}
}

// TestManualHTTPAbort: an /abort_request during a pass takes effect when the
// pass ends; a waiting request is aborted at once.
func TestManualHTTPAbort(t *testing.T) {
	t.Parallel()
	for _, rel := range []string{Release0523, Release054} {
		s, err := NewManual(Config{MaxTotalTokens: 4000, Release: rel})
		if err != nil {
			t.Fatal(err)
		}
		long := map[string]any{"input_ids": []int{1, 2, 3}, "rid": "run", "sampling_params": map[string]any{"max_new_tokens": 1000, "ignore_eos": true}}
		running := serveAsync(t, s, http.MethodPost, "/generate", long, "")
		end, _ := s.Poll(0)
		s.Finish() // prefill done: running, and the first decode step is in progress
		if st := s.Stats(); st.Running != 1 {
			t.Fatalf("%s: %+v", rel, st)
		}
		if r := serveSync(s, http.MethodPost, "/abort_request", map[string]any{"rid": "run"}); r.code != 200 {
			t.Fatalf("%s: abort %d", rel, r.code)
		}
		select {
		case r := <-running:
			t.Fatalf("%s: aborted mid-pass: %s", rel, r.body)
		case <-time.After(20 * time.Millisecond):
		}
		fins := s.Finish()
		if len(fins) != 1 || fins[0].RID != "run" || fins[0].FinishReason != "abort" {
			t.Fatalf("%s: Finish after the abort: %+v", rel, fins)
		}
		r := <-running
		var got map[string]any
		if r.code != 200 || json.Unmarshal(r.body, &got) != nil {
			t.Fatalf("%s: running abort answered %d %s", rel, r.code, r.body)
		}
		fr := got["meta_info"].(map[string]any)["finish_reason"]
		want := map[string]any{"type": "abort", "message": "Aborted", "status_code": nil, "err_type": nil}
		if !jsonEqual(fr, want) {
			t.Errorf("%s: running abort finish_reason %v, want FINISH_ABORT().to_json() %v", rel, fr, want)
		}
		_ = end

		// waiting: answered from the AbortReq
		s.SetTime(100)
		waiting := serveAsync(t, s, http.MethodPost, "/generate", map[string]any{"input_ids": []int{4}, "rid": "wait"}, "")
		serveSync(s, http.MethodPost, "/abort_request", map[string]any{"rid": "wait"})
		r = <-waiting
		got = nil
		if r.code != 200 || json.Unmarshal(r.body, &got) != nil {
			t.Fatalf("%s: waiting abort answered %d %s", rel, r.code, r.body)
		}
		meta := got["meta_info"].(map[string]any)
		if rel == Release054 {
			want := map[string]any{"text": "", "meta_info": map[string]any{"id": "wait",
				"finish_reason": map[string]any{"type": "abort", "message": "Abort before prefill"},
				"prompt_tokens": 0.0, "completion_tokens": 0.0}}
			if !jsonEqual(got, want) {
				t.Errorf("0.5.4 waiting abort %s, want %v", r.body, want)
			}
		} else {
			if !jsonEqual(meta["finish_reason"], map[string]any{"type": "abort", "message": "Abort in waiting queue"}) {
				t.Errorf("waiting abort finish_reason %v", meta["finish_reason"])
			}
			if k := sortedKeys(meta); !slices.Equal(k, []string{"completion_tokens", "e2e_latency", "finish_reason", "id", "response_sent_to_client_ts", "weight_version"}) {
				t.Errorf("waiting abort meta_info keys %v", k)
			}
		}
		s.Close()
	}
}

// TestManualDP: a manual-mode server with two ranks dispatches round robin or
// as routed, runs the ranks' passes on one clock, and is deterministic.
func TestManualDP(t *testing.T) {
	t.Parallel()
	run := func() ([]Finished, Stats) {
		s, err := NewManual(Config{MaxTotalTokens: 3000, DPSize: 2, OutputLenMean: 200, Seed: 9})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		one := 1
		maxNew := 400
		for i := 0; i < 8; i++ {
			p := Prompt{RID: string(rune('a' + i)), InputIDs: make([]int32, 100+10*i), Sampling: SamplingParams{MaxNewTokens: &maxNew}}
			if i >= 6 {
				p.RoutedDPRank = &one
			}
			if err := s.Submit(float64(i)*0.05, p); err != nil {
				t.Fatal(err)
			}
		}
		var out []Finished
		now := 0.0
		end, busy := s.Poll(now)
		for busy {
			out = append(out, s.Finish()...)
			end, busy = s.Poll(end)
		}
		return out, s.Stats()
	}
	a, sa := run()
	b, sb := run()
	if !slices.Equal(a, b) || sa != sb {
		t.Fatalf("two runs differ:\n%+v\n%+v", a, b)
	}
	ranks := map[string]int{}
	for _, f := range a {
		ranks[f.RID] = f.DPRank
	}
	// round robin a->0 b->1 c->0 ... f->1, then g and h pinned to rank 1
	want := map[string]int{"a": 0, "b": 1, "c": 0, "d": 1, "e": 0, "f": 1, "g": 1, "h": 1}
	for rid, r := range want {
		if ranks[rid] != r {
			t.Errorf("%s served by rank %d, want %d (all: %v)", rid, ranks[rid], r, ranks)
		}
	}
	if len(a) != 8 || sa.FinishedRequests != 8 || sa.MaxTotalTokens != 6000 {
		t.Fatalf("finished %d, stats %+v", len(a), sa)
	}
}

// jsonEqual compares two values after a JSON round trip.
func jsonEqual(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	var va, vb any
	_ = json.Unmarshal(ja, &va)
	_ = json.Unmarshal(jb, &vb)
	x, _ := json.Marshal(va)
	y, _ := json.Marshal(vb)
	return bytes.Equal(x, y)
}

func sortedKeys(m map[string]any) []string {
	k := make([]string, 0, len(m))
	for key := range m {
		k = append(k, key)
	}
	slices.Sort(k)
	return k
}
