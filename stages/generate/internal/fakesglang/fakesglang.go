// Package fakesglang is a scriptable SGLang server for the admission Controller's and the generate stage's
// tests: SGLang 0.5.23's answers to /health, /server_info, /v1/loads, /metrics, /abort_request and /generate,
// with /generate holding each request until the test releases it, unless a scripted answer says otherwise.
// Its servers live on a Net, an in-process network (no sockets), so a test can run them inside a
// testing/synctest bubble, on fake time.
package fakesglang

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/draftflow/draftflow/sglang"
)

// Net is an in-process network of fake servers: an http.RoundTripper that serves each request with the
// handler of the server its host names, in a goroutine of the caller's. A host without a server refuses
// connections; a handler that panics with http.ErrAbortHandler resets the connection.
type Net struct {
	mu      sync.Mutex
	servers map[string]*Server
}

// NewNet returns an empty network.
func NewNet() *Net { return &Net{servers: map[string]*Server{}} }

// Client returns an HTTP client whose requests go over n.
func (n *Net) Client() *http.Client { return &http.Client{Transport: n} }

// Add starts a fake server with a KV pool of pool tokens on n: healthy, one DP rank, ten output tokens per
// answer.
func (n *Net) Add(t testing.TB, pool int) *Server {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := &Server{t: t, URL: fmt.Sprintf("http://fake-%d.invalid:30000", len(n.servers)), Pool: pool, gate: make(chan struct{}, 1000),
		OutLen: 10, Startup: 12.25, MaxRun: 1000,
		Load: map[string]any{"num_running_reqs": 0, "num_waiting_reqs": 0, "token_usage": 0.0}}
	s.Healthy.Store(true)
	n.servers[strings.TrimPrefix(s.URL, "http://")] = s
	return s
}

// RoundTrip serves req with the handler of the server its host names.
func (n *Net) RoundTrip(req *http.Request) (*http.Response, error) {
	n.mu.Lock()
	s := n.servers[req.URL.Host]
	n.mu.Unlock()
	if s == nil {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	}
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
	}
	sreq := httptest.NewRequestWithContext(req.Context(), req.Method, req.URL.String(), bytes.NewReader(body))
	sreq.Header = req.Header.Clone()
	rec := httptest.NewRecorder()
	done := make(chan bool, 1) // true: the handler reset the connection
	go func() {
		reset := false
		defer func() { done <- reset }()
		defer func() {
			if r := recover(); r != nil {
				if r != http.ErrAbortHandler {
					panic(r)
				}
				reset = true
			}
		}()
		s.ServeHTTP(rec, sreq)
	}()
	select {
	case reset := <-done:
		if reset {
			return nil, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
		}
		return rec.Result(), nil
	case <-req.Context().Done():
		return nil, req.Context().Err()
	}
}

// Server is one fake SGLang server. Lock it to read or change the fields below Mutex.
type Server struct {
	t testing.TB
	// URL is the server's base URL on its Net.
	URL string
	// Healthy makes every route answer 503 while false (abort requests are still recorded).
	Healthy atomic.Bool
	// Infos counts /server_info calls.
	Infos atomic.Int32

	sync.Mutex
	// Pool is the KV pool per rank, in tokens.
	Pool int
	// Running is how many /generate calls are held now, MaxSeen the most at once.
	Running, MaxSeen int
	// Script answers the next /generate calls, one step each: a step that returns true has answered (a
	// step may panic with http.ErrAbortHandler to reset the connection); else the call is held as usual.
	Script []func(w http.ResponseWriter) bool
	// RIDs are the rids of the /generate calls, Routed the routed_dp_rank of those that set one, Aborts the
	// rids of the /abort_request calls (healthy or not).
	RIDs   []string
	Routed []int
	Aborts []string
	// DP is the number of data-parallel ranks the server reports (0: one, no dp fields).
	DP int
	// Load overrides fields of every rank's /v1/loads entry.
	Load map[string]any
	// Retracted is the value of sglang:num_retracted_requests_total.
	Retracted float64
	// OutLen is the number of output tokens of every answer.
	OutLen int
	// Startup is the startup_time durations: a change means a restart.
	Startup float64
	// MaxRun is effective_max_running_requests_per_dp.
	MaxRun int
	// APIKey is the server's --api-key: every route but /health and /metrics answers 401 without it.
	APIKey string
	// Legacy is an SGLang release before /v1/loads, /server_info and meta_info retraction counts.
	Legacy bool
	// NoMetrics is a server without --enable-metrics: /metrics is 404.
	NoMetrics bool
	// NoCounter is a server with metrics but no retraction yet: the labelled counter has no sample.
	NoCounter bool
	// AbortDelay is how long /abort_request takes before the call is recorded and answered.
	AbortDelay time.Duration

	gate chan struct{} // one token per held /generate call allowed to finish
}

// Release lets n held (or future) /generate calls finish.
func (s *Server) Release(n int) {
	for range n {
		s.gate <- struct{}{}
	}
}

// RunningNow returns how many /generate calls are held.
func (s *Server) RunningNow() int {
	s.Lock()
	defer s.Unlock()
	return s.Running
}

// Status returns a script step that answers with the HTTP status code and SGLang's error body.
func Status(code int, msg string) func(w http.ResponseWriter) bool {
	return func(w http.ResponseWriter) bool {
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg}})
		return true
	}
}

// Aborted returns a script step that answers with an abort: finish_reason abort with the message and the
// status_code (0: null, an abort that is not the request's fault).
func Aborted(msg string, status int) func(w http.ResponseWriter) bool {
	return func(w http.ResponseWriter) bool {
		var code any
		if status != 0 {
			code = status
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"output_ids": []int{}, "meta_info": map[string]any{
			"finish_reason": map[string]any{"type": "abort", "message": msg, "status_code": code}}})
		return true
	}
}

// Body returns a script step that answers 200 with body.
func Body(body string) func(w http.ResponseWriter) bool {
	return func(w http.ResponseWriter) bool { _, _ = io.WriteString(w, body); return true }
}

// Reset is a script step that resets the connection.
func Reset(http.ResponseWriter) bool { panic(http.ErrAbortHandler) }

// ServeHTTP answers as SGLang 0.5.23 does.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/abort_request" {
		var body struct {
			RID string `json:"rid"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		s.Lock()
		delay := s.AbortDelay
		s.Unlock()
		time.Sleep(delay)
		s.Lock()
		s.Aborts = append(s.Aborts, body.RID)
		s.Unlock()
	}
	if !s.Healthy.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	s.Lock()
	key, legacy, noMetrics := s.APIKey, s.Legacy, s.NoMetrics
	s.Unlock()
	if key != "" && r.URL.Path != "/health" && r.URL.Path != "/metrics" && r.Header.Get("Authorization") != "Bearer "+key {
		// sglang 0.5.23 utils/auth.py: every route but health and metrics needs the key.
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"error":"Unauthorized"}`)
		return
	}
	if (legacy && (r.URL.Path == "/v1/loads" || r.URL.Path == "/server_info")) || (noMetrics && r.URL.Path == "/metrics") {
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"detail":"Not Found"}`)
		return
	}
	switch r.URL.Path {
	case "/health", "/abort_request":
	case "/get_server_info", "/server_info":
		s.serverInfo(w)
	case "/v1/loads":
		s.loads(w)
	case "/metrics":
		s.Lock()
		fmt.Fprintf(w, "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name=\"x\"} %d\n", s.Running)
		if !s.NoCounter {
			fmt.Fprintf(w, "# TYPE sglang:num_retracted_requests_total counter\nsglang:num_retracted_requests_total{model_name=\"x\"} %g\n", s.Retracted)
		}
		s.Unlock()
	case "/generate":
		s.generate(w, r, legacy)
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

// serverInfo answers /server_info: server arguments (max_running_requests and context_length null unless
// set), the scheduler's pool, startup_time, and one internal state per DP rank.
func (s *Server) serverInfo(w http.ResponseWriter) {
	s.Infos.Add(1)
	s.Lock()
	defer s.Unlock()
	ranks := max(s.DP, 1)
	states := make([]any, ranks)
	for i := range states {
		states[i] = map[string]any{"dp_rank": i, "effective_max_running_requests_per_dp": s.MaxRun,
			"memory_usage": map[string]any{"token_capacity": s.Pool}, "startup_time": map[string]any{"scheduler_e2e": s.Startup}}
	}
	info := map[string]any{"max_total_num_tokens": s.Pool, "max_running_requests": nil, "context_length": nil,
		"model_path": "fake/model", "dp_size": ranks, "internal_states": states, "version": "0.5.23",
		"startup_time": map[string]any{"load_weight": 1.5, "scheduler_e2e": s.Startup}}
	_ = json.NewEncoder(w).Encode(info)
}

// loads answers /v1/loads: one entry per rank.
func (s *Server) loads(w http.ResponseWriter) {
	s.Lock()
	defer s.Unlock()
	var loads []any
	for rank := range max(s.DP, 1) {
		// num_total_tokens adds the waiting requests' tokens to the used ones (load_inquirer.get_loads).
		l := map[string]any{"dp_rank": rank, "max_total_num_tokens": s.Pool, "num_total_tokens": s.Pool,
			"num_used_tokens": 0, "gen_throughput": 0.0, "max_running_requests": 1000}
		for k, v := range s.Load {
			l[k] = v
		}
		loads = append(loads, l)
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"version": "0.5.23", "loads": loads})
}

// generate answers /generate: the next script step, else once released, OutLen tokens.
func (s *Server) generate(w http.ResponseWriter, r *http.Request, legacy bool) {
	var req sglang.GenerateRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		s.t.Errorf("bad request body: %v", err)
	}
	s.Lock()
	s.RIDs = append(s.RIDs, req.RID)
	if req.RoutedDPRank != nil {
		s.Routed = append(s.Routed, *req.RoutedDPRank)
	}
	var step func(http.ResponseWriter) bool
	if len(s.Script) > 0 {
		step, s.Script = s.Script[0], s.Script[1:]
	}
	s.Unlock()
	if step != nil && step(w) {
		return
	}
	s.Lock()
	s.Running++
	s.MaxSeen = max(s.MaxSeen, s.Running)
	out := make([]uint32, s.OutLen)
	s.Unlock()
	defer func() { s.Lock(); s.Running--; s.Unlock() }()
	select {
	case <-s.gate:
	case <-r.Context().Done():
		return
	}
	for i := range out {
		out[i] = uint32(i + 1)
	}
	meta := map[string]any{"id": req.RID, "finish_reason": map[string]any{"type": "stop", "matched": 2},
		"prompt_tokens": len(req.InputIDs), "completion_tokens": len(out), "num_retractions": 0}
	if legacy {
		delete(meta, "num_retractions") // releases before per-request retraction counts
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"output_ids": out, "meta_info": meta})
}
