package sglang_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/draftflow/draftflow/secret"
	"github.com/draftflow/draftflow/sglang"
	"github.com/draftflow/draftflow/sglang/sim"
)

// canned serves one streamed answer, written as given.
func canned(t *testing.T, events ...string) *sglang.Client {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/abort_request" {
			w.WriteHeader(http.StatusOK)
			return
		}
		body, _ := io.ReadAll(r.Body)
		if !strings.Contains(string(body), `"stream":true`) {
			t.Errorf("request without stream: %s", body)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range events {
			_, _ = io.WriteString(w, "data: "+e+"\n\n")
		}
	}))
	t.Cleanup(ts.Close)
	return sglang.NewClient(ts.URL, nil, secret.Value{})
}

func collect(t *testing.T, cl *sglang.Client, stopAfter int) (*sglang.StreamResult, []uint32, error) {
	t.Helper()
	var seen []uint32
	res, err := cl.GenerateStream(context.Background(), &sglang.GenerateRequest{InputIDs: []uint32{1}, RID: "r",
		SamplingParams: sglang.SamplingParams{MaxNewTokens: 100}}, func(ids []uint32) bool {
		seen = append(seen, ids...)
		return stopAfter > 0 && len(seen) >= stopAfter
	})
	return res, seen, err
}

func TestGenerateStreamCumulativeAndDeltas(t *testing.T) {
	meta := func(n int, fin string) string {
		return `"meta_info":{"id":"r","finish_reason":` + fin + `,"prompt_tokens":1,"completion_tokens":` + string(rune('0'+n)) + `}`
	}
	stop := `{"type":"stop","matched":9}`
	for name, events := range map[string][]string{
		"cumulative": {`{"text":"a","output_ids":[5],` + meta(1, "null") + `}`,
			`{"text":"ab \"output_ids\":[1]","output_ids":[5, 6,7],` + meta(3, "null") + `}`,
			`{"text":"abc","output_ids":[5,6,7,9],` + meta(4, stop) + `}`, `[DONE]`},
		"deltas": {`{"text":"a","output_ids":[5],` + meta(1, "null") + `}`,
			`{"text":"b","output_ids":[6,7],` + meta(3, "null") + `}`,
			`{"text":"c","output_ids":[9],` + meta(4, stop) + `}`, `[DONE]`},
	} {
		t.Run(name, func(t *testing.T) {
			res, seen, err := collect(t, canned(t, events...), 0)
			if err != nil {
				t.Fatal(err)
			}
			want := []uint32{5, 6, 7, 9}
			if !slices.Equal(res.Response.OutputIDs, want) || !slices.Equal(seen, want) || res.Stopped ||
				res.Response.MetaInfo.FinishReason.Type != sglang.FinishStop {
				t.Fatalf("result %+v, watched %v", res, seen)
			}
		})
	}
}

func TestGenerateStreamErrors(t *testing.T) {
	_, _, err := collect(t, canned(t, `{"error":{"message":"too long","type":"invalid_request_error","code":400,"retryable":false}}`, `[DONE]`), 0)
	var se *sglang.StatusError
	if !errors.As(err, &se) || se.Code != 400 || se.Message != "too long" {
		t.Fatalf("error event: %v", err)
	}
	_, _, err = collect(t, canned(t, `{"output_ids":[5],"meta_info":{"finish_reason":null,"completion_tokens":1}}`), 0)
	var ie *sglang.InvalidResponseError
	if !errors.As(err, &ie) {
		t.Fatalf("unfinished stream: %v", err)
	}
	_, _, err = collect(t, canned(t, `{"output_ids":[5],"meta_info":{"finish_reason":{"type":"abort","message":"Aborted"},"completion_tokens":1}}`, `[DONE]`), 0)
	var ae *sglang.AbortedError
	if !errors.As(err, &ae) {
		t.Fatalf("abort nobody asked for: %v", err)
	}
	_, _, err = collect(t, canned(t, `{"output_ids":[5,6],"meta_info":{"finish_reason":null,"completion_tokens":5}}`), 0)
	if !errors.As(err, &ie) {
		t.Fatalf("fewer ids than completion_tokens: %v", err)
	}
}

// TestGenerateStreamStopOnSimulator stops a streamed request on the simulator after 50 ids: the server
// aborts it, the answer is the abort, and its output ids are a prefix of what the same request (same rid,
// same seed) produces unstopped, at least as long as what the watch saw.
func TestGenerateStreamStopOnSimulator(t *testing.T) {
	mk := func() *sglang.Client {
		s, err := sim.New(sim.Config{TimeScale: 50, Seed: 7, OutputLenDistribution: sim.DistFixed, OutputLenMean: 2000,
			MaxTotalTokens: 20000, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		ts := httptest.NewServer(s)
		t.Cleanup(func() { ts.Close(); s.Close() })
		return sglang.NewClient(ts.URL, nil, secret.Value{})
	}
	req := &sglang.GenerateRequest{InputIDs: []uint32{1, 2, 3}, RID: "loop#0.1;", SamplingParams: sglang.SamplingParams{MaxNewTokens: 1500}}
	full, err := mk().Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var seen []uint32
	res, err := mk().GenerateStream(context.Background(), req, func(ids []uint32) bool {
		seen = append(seen, ids...)
		return len(seen) >= 50
	})
	if err != nil {
		t.Fatal(err)
	}
	got := res.Response.OutputIDs
	if !res.Stopped || res.StoppedAt < 50 || res.Response.MetaInfo.FinishReason.Type != sglang.FinishAbort {
		t.Fatalf("stopped %v at %d, finish %+v", res.Stopped, res.StoppedAt, res.Response.MetaInfo.FinishReason)
	}
	if len(got) < res.StoppedAt || len(got) >= len(full.OutputIDs) || !slices.Equal(got, full.OutputIDs[:len(got)]) ||
		!slices.Equal(seen, got[:len(seen)]) || res.Response.MetaInfo.CompletionTokens != len(got) {
		t.Fatalf("stopped output (%d ids, watched %d) is not a prefix of the full one (%d ids)", len(got), len(seen), len(full.OutputIDs))
	}
	t.Logf("stopped after %d ids seen, %d produced, of %d", res.StoppedAt, len(got), len(full.OutputIDs))
}
