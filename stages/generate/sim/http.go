package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Version is reported as the server version by the introspection routes.
const Version = "0.5.0-draftflow-sim"

// GenerateRequest is the body of POST /generate (SGLang GenerateReqInput).
// Text, InputIDs, RID and SamplingParams hold either one value or a list (a
// batch); Parse resolves them.
type GenerateRequest struct {
	Text           json.RawMessage `json:"text,omitempty"`
	InputIDs       json.RawMessage `json:"input_ids,omitempty"`
	InputEmbeds    json.RawMessage `json:"input_embeds,omitempty"`
	RID            json.RawMessage `json:"rid,omitempty"`
	SamplingParams json.RawMessage `json:"sampling_params,omitempty"`
	Stream         bool            `json:"stream,omitempty"`
}

// SamplingParams are the sampling parameters the simulator honours; others
// SGLang accepts (top_p, top_k, penalties, ...) are accepted and ignored.
type SamplingParams struct {
	MaxNewTokens      *int     `json:"max_new_tokens,omitempty"`
	MinNewTokens      int      `json:"min_new_tokens,omitempty"`
	Temperature       *float64 `json:"temperature,omitempty"`
	StopTokenIDs      []int    `json:"stop_token_ids,omitempty"`
	IgnoreEOS         bool     `json:"ignore_eos,omitempty"`
	SkipSpecialTokens *bool    `json:"skip_special_tokens,omitempty"`
	SamplingSeed      *int64   `json:"sampling_seed,omitempty"`
	N                 int      `json:"n,omitempty"`
}

// GenerateResponse is one element of a /generate answer or stream chunk.
type GenerateResponse struct {
	Text      string   `json:"text"`
	OutputIDs []int32  `json:"output_ids"`
	MetaInfo  MetaInfo `json:"meta_info"`
	// Index is the position in a batch; set on streamed batch chunks only.
	Index *int `json:"index,omitempty"`
}

// MetaInfo is SGLang's meta_info.
type MetaInfo struct {
	ID               string        `json:"id"`
	FinishReason     *FinishReason `json:"finish_reason"`
	PromptTokens     int           `json:"prompt_tokens"`
	CompletionTokens int           `json:"completion_tokens"`
	CachedTokens     int           `json:"cached_tokens"`
	ReasoningTokens  int           `json:"reasoning_tokens"`
	E2ELatency       float64       `json:"e2e_latency"`
	NumRetractions   int           `json:"num_retractions"`
	WeightVersion    string        `json:"weight_version"`
}

// ErrorResponse is the body FastAPI HTTPExceptions get in SGLang (503 queue
// full, 500, 404 ...).
type ErrorResponse struct {
	Object  string  `json:"object"`
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

// validationError is an SGLang ValueError: HTTP 400 {"error":{"message":...}}.
type validationError struct{ msg string }

func (e validationError) Error() string { return e.msg }

func badRequest(format string, a ...any) error { return validationError{fmt.Sprintf(format, a...)} }

func (s *Server) routes() {
	m := http.NewServeMux()
	m.HandleFunc("/generate", s.handleGenerate)
	m.HandleFunc("GET /health", s.handleHealth)
	m.HandleFunc("GET /health_generate", s.handleHealth)
	m.HandleFunc("GET /get_server_info", s.handleServerInfo)
	m.HandleFunc("GET /server_info", s.handleServerInfo)
	m.HandleFunc("GET /get_model_info", s.handleModelInfo)
	m.HandleFunc("GET /model_info", s.handleModelInfo)
	m.HandleFunc("GET /v1/loads", s.handleLoads)
	m.HandleFunc("GET /get_load", s.handleGetLoad)
	m.HandleFunc("POST /abort_request", s.handleAbort)
	m.HandleFunc("/flush_cache", s.handleFlush)
	m.HandleFunc("POST /pause_generation", s.handlePause(true))
	m.HandleFunc("POST /continue_generation", s.handlePause(false))
	m.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeHTTPError(w, http.StatusNotFound, "Not Found")
	})
	s.mux = m
}

// ServeHTTP serves SGLang's native routes: /generate, /health,
// /health_generate, /get_server_info, /server_info, /get_model_info,
// /model_info, /v1/loads, /get_load, /metrics, /abort_request, /flush_cache,
// /pause_generation and /continue_generation.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeHTTPError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, ErrorResponse{Object: "error", Message: msg, Type: strconv.Itoa(status), Code: status})
}

func writeValueError(w http.ResponseWriter, msg string) {
	writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]string{"message": msg}})
}

// isDown reports whether a simulated crash is in progress or the server closed.
func (s *Server) isDown() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed || s.eng.now < s.eng.downUntil
}

func (s *Server) handleHealth(w http.ResponseWriter, _ *http.Request) {
	if s.isDown() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Server) handleServerInfo(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	e := s.eng
	state := map[string]any{
		"last_gen_throughput": e.genThroughput,
		"memory_usage": map[string]any{
			"token_capacity": s.cfg.MaxTotalTokens,
			"used_tokens":    e.usedTokens(),
			"cached_tokens":  e.tree.size,
		},
		"new_token_ratio": e.ratio,
	}
	maxReqInput := e.maxReqInputLen
	s.mu.Unlock()
	c := s.cfg
	writeJSON(w, http.StatusOK, map[string]any{
		"model_path":                c.ModelPath,
		"tokenizer_path":            c.ModelPath,
		"served_model_name":         c.ModelPath,
		"context_length":            c.ContextLength,
		"max_total_tokens":          c.MaxTotalTokens,
		"max_total_num_tokens":      c.MaxTotalTokens,
		"max_running_requests":      c.MaxRunningRequests,
		"max_queued_requests":       nilIfZero(c.MaxQueuedRequests),
		"max_req_input_len":         maxReqInput,
		"chunked_prefill_size":      c.ChunkedPrefillSize,
		"max_prefill_tokens":        c.MaxPrefillTokens,
		"schedule_policy":           "fcfs",
		"schedule_conservativeness": c.ScheduleConservativeness,
		"page_size":                 1,
		"disable_radix_cache":       c.DisableRadixCache,
		"decode_log_interval":       c.DecodeLogInterval,
		"stream_interval":           c.StreamInterval,
		"random_seed":               c.Seed,
		"enable_metrics":            true,
		"dp_size":                   1,
		"internal_states":           []any{state},
		"version":                   Version,
		"simulator": map[string]any{
			"time_scale": c.TimeScale,
			"instant":    c.Instant,
			"vocab_size": c.VocabSize,
			"eos_ids":    c.EOSTokenIDs,
		},
	})
}

func nilIfZero(v int) any {
	if v == 0 {
		return nil
	}
	return v
}

func (s *Server) handleModelInfo(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"model_path":                  s.cfg.ModelPath,
		"tokenizer_path":              s.cfg.ModelPath,
		"is_generation":               true,
		"preferred_sampling_params":   nil,
		"weight_version":              "default",
		"has_image_understanding":     false,
		"has_audio_understanding":     false,
		"model_type":                  "simulated",
		"architectures":               []string{"SimulatedForCausalLM"},
		"max_total_num_tokens":        s.cfg.MaxTotalTokens,
		"context_length":              s.cfg.ContextLength,
		"eos_token_ids":               s.cfg.EOSTokenIDs,
		"vocab_size":                  s.cfg.VocabSize,
		"simulated_tokenizer_is_byte": true,
	})
}

func (s *Server) handleLoads(w http.ResponseWriter, _ *http.Request) {
	st := s.Stats()
	s.mu.Lock()
	hit := s.eng.cacheHitRate()
	s.mu.Unlock()
	util := float64(st.Running) / float64(s.cfg.MaxRunningRequests)
	load := map[string]any{
		"dp_rank":              0,
		"num_running_reqs":     st.Running,
		"num_waiting_reqs":     st.Waiting,
		"num_total_reqs":       st.Running + st.Waiting + st.Chunked,
		"num_used_tokens":      st.UsedTokens,
		"num_total_tokens":     st.MaxTotalTokens,
		"max_total_num_tokens": st.MaxTotalTokens,
		"max_running_requests": s.cfg.MaxRunningRequests,
		"token_usage":          st.TokenUsage,
		"gen_throughput":       st.GenThroughput,
		"cache_hit_rate":       hit,
		"utilization":          util,
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"timestamp":     time.Now().UTC().Format(time.RFC3339Nano),
		"version":       Version,
		"dp_rank_count": 1,
		"loads":         []any{load},
		"aggregate": map[string]any{
			"total_running_reqs": st.Running,
			"total_waiting_reqs": st.Waiting,
			"total_reqs":         st.Running + st.Waiting + st.Chunked,
			"avg_token_usage":    st.TokenUsage,
			"avg_throughput":     st.GenThroughput,
			"avg_utilization":    util,
		},
	})
}

func (s *Server) handleGetLoad(w http.ResponseWriter, _ *http.Request) {
	st := s.Stats()
	writeJSON(w, http.StatusOK, []any{map[string]any{
		"dp_rank":          0,
		"num_reqs":         st.Running + st.Waiting + st.Chunked,
		"num_waiting_reqs": st.Waiting,
		"num_tokens":       st.UsedTokens,
	}})
}

func (s *Server) handleAbort(w http.ResponseWriter, r *http.Request) {
	var body struct {
		RID      string `json:"rid"`
		AbortAll bool   `json:"abort_all"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&body); err != nil && !errors.Is(err, io.EOF) {
		writeHTTPError(w, http.StatusBadRequest, err.Error())
		return
	}
	s.later(func(e *engine) { e.abortByRID(body.RID, body.AbortAll) })
	w.WriteHeader(http.StatusOK)
}

// handlePause serves /pause_generation and /continue_generation: while
// paused, requests are accepted and queued but no batch runs.
func (s *Server) handlePause(pause bool) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		s.paused = pause
		s.mu.Unlock()
		s.poke()
		writeJSON(w, http.StatusOK, map[string]any{"success": true})
	}
}

func (s *Server) handleFlush(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		writeHTTPError(w, http.StatusMethodNotAllowed, "Method Not Allowed")
		return
	}
	s.mu.Lock()
	ok := s.eng.flushCache()
	s.mu.Unlock()
	if !ok {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, "Cache flush failed. When there are running or waiting requests, the operation will not be performed.\n")
		return
	}
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n")
}

// rawList decodes raw as either one T or a list of T.
func rawList[T any](raw json.RawMessage, field string) (vals []T, batch bool, err error) {
	t := strings.TrimSpace(string(raw))
	if t == "" || t == "null" {
		return nil, false, nil
	}
	if t[0] == '[' {
		if err := json.Unmarshal(raw, &vals); err == nil {
			return vals, true, nil
		}
	}
	var one T
	if err := json.Unmarshal(raw, &one); err != nil {
		return nil, false, badRequest("invalid %s: %v", field, err)
	}
	return []T{one}, false, nil
}

// genItem is one request of a (possibly batched) /generate call.
type genItem struct {
	rid    string
	input  []int32
	params SamplingParams
}

// parseGenerate resolves single vs batch input and validates it the way
// SGLang's tokenizer manager does.
func (s *Server) parseGenerate(req *GenerateRequest) ([]genItem, bool, error) {
	if len(req.InputEmbeds) > 0 && string(req.InputEmbeds) != "null" {
		return nil, false, badRequest("input_embeds is not supported by the simulator")
	}
	var inputs [][]int32
	var batch bool
	hasText := len(req.Text) > 0 && string(req.Text) != "null"
	hasIDs := len(req.InputIDs) > 0 && string(req.InputIDs) != "null"
	switch {
	case hasText && hasIDs:
		return nil, false, badRequest("Either text, input_ids or input_embeds should be provided, not several.")
	case hasText:
		texts, b, err := rawList[string](req.Text, "text")
		if err != nil {
			return nil, false, err
		}
		batch = b
		for _, t := range texts {
			inputs = append(inputs, TokenizeText(t))
		}
	case hasIDs:
		var nested [][]int32
		if isNestedList(req.InputIDs) {
			if err := json.Unmarshal(req.InputIDs, &nested); err != nil {
				return nil, false, badRequest("invalid input_ids: %v", err)
			}
			batch = true
			inputs = nested
		} else {
			var flat []int32
			if err := json.Unmarshal(req.InputIDs, &flat); err != nil {
				return nil, false, badRequest("invalid input_ids: %v", err)
			}
			inputs = [][]int32{flat}
		}
	default:
		return nil, false, badRequest("Either text, input_ids or input_embeds should be provided.")
	}
	if batch && len(inputs) == 0 {
		return nil, false, badRequest("The batch is empty.")
	}
	rids, _, err := rawList[string](req.RID, "rid")
	if err != nil {
		return nil, false, err
	}
	if len(rids) != 0 && len(rids) != len(inputs) {
		return nil, false, badRequest("The rid should be a list of the same length as the batch.")
	}
	params, pbatch, err := rawList[SamplingParams](req.SamplingParams, "sampling_params")
	if err != nil {
		return nil, false, err
	}
	if pbatch && len(params) != len(inputs) {
		return nil, false, badRequest("The sampling_params should be a list of the same length as the batch.")
	}
	items := make([]genItem, len(inputs))
	for i, in := range inputs {
		it := genItem{input: in}
		if len(rids) > 0 {
			it.rid = rids[i]
		} else {
			it.rid = newRID()
		}
		switch {
		case pbatch:
			it.params = params[i]
		case len(params) == 1:
			it.params = params[0]
		}
		if err := s.validateItem(&it); err != nil {
			return nil, false, err
		}
		items[i] = it
	}
	return items, batch, nil
}

// validateItem applies SGLang's sampling-parameter and context checks.
func (s *Server) validateItem(it *genItem) error {
	p := &it.params
	if p.N > 1 {
		return badRequest("n > 1 (parallel sampling) is not supported by the simulator")
	}
	if p.Temperature != nil && *p.Temperature < 0 {
		return badRequest("temperature must be non-negative, got %v.", *p.Temperature)
	}
	if p.MaxNewTokens != nil && *p.MaxNewTokens < 0 {
		return badRequest("max_new_tokens must be at least 0, got %d.", *p.MaxNewTokens)
	}
	if p.MinNewTokens < 0 {
		return badRequest("min_new_tokens must be in [0, max_new_tokens], got %d.", p.MinNewTokens)
	}
	for _, id := range p.StopTokenIDs {
		if id < 0 || id >= s.cfg.VocabSize {
			return badRequest("stop_token_ids contains %d, outside the vocabulary [0, %d).", id, s.cfg.VocabSize)
		}
	}
	for _, id := range it.input {
		if id < 0 || int(id) >= s.cfg.VocabSize {
			return badRequest("Token id %d is out of vocabulary (vocab size %d).", id, s.cfg.VocabSize)
		}
	}
	n := len(it.input)
	if n == 0 {
		return badRequest("The input_ids is empty.")
	}
	if n >= s.cfg.ContextLength {
		return badRequest("The input (%d tokens) is longer than the model's context length (%d tokens).", n, s.cfg.ContextLength)
	}
	maxNew := s.cfg.DefaultMaxNewTokens
	if p.MaxNewTokens != nil {
		maxNew = *p.MaxNewTokens
	}
	if p.MinNewTokens > maxNew {
		return badRequest("min_new_tokens must be in [0, max_new_tokens], got %d.", p.MinNewTokens)
	}
	if maxNew+n >= s.cfg.ContextLength {
		return badRequest("Requested token count exceeds the model's maximum context length of %d tokens. "+
			"You requested a total of %d tokens: %d tokens from the input messages and %d tokens for the completion. "+
			"Please reduce the number of tokens in the input messages or the completion to fit within the limit.",
			s.cfg.ContextLength, maxNew+n, n, maxNew)
	}
	return nil
}

// newRequest builds the engine request for an item.
func (s *Server) newRequest(it genItem, notify chan struct{}) *request {
	p := it.params
	maxNew := s.cfg.DefaultMaxNewTokens
	if p.MaxNewTokens != nil {
		maxNew = *p.MaxNewTokens
	}
	greedy := p.Temperature != nil && *p.Temperature < 1e-6
	seed := planSeed(s.cfg.Seed, it.rid, p.SamplingSeed, greedy, it.input)
	r := &request{
		rid:       it.rid,
		input:     it.input,
		maxNew:    maxNew,
		ignoreEOS: p.IgnoreEOS,
		plan:      newOutputPlan(&s.cfg, seed, p.MinNewTokens, p.IgnoreEOS, p.StopTokenIDs),
		notify:    notify,
		keepSpec:  p.SkipSpecialTokens != nil && !*p.SkipSpecialTokens,
	}
	if len(p.StopTokenIDs) > 0 {
		r.stopIDs = make(map[int32]bool, len(p.StopTokenIDs))
		for _, id := range p.StopTokenIDs {
			r.stopIDs[int32(id)] = true
		}
	}
	return r
}

// isNestedList reports whether raw is a JSON list whose first element is a
// list ([[...], ...]), i.e. a batch of input_ids.
func isNestedList(raw json.RawMessage) bool {
	t := strings.TrimSpace(string(raw))
	if !strings.HasPrefix(t, "[") {
		return false
	}
	return strings.HasPrefix(strings.TrimSpace(t[1:]), "[")
}
