package sim

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Version is the version the default release reports (/server_info and
// /v1/loads "version"); a server set to another Config.Release reports that
// release.
const Version = Release0523

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
	// RoutedDPRank pins every request of the call to one DP rank
	// (GenerateReqInput.routed_dp_rank, 0.5.23).
	RoutedDPRank *int `json:"routed_dp_rank,omitempty"`
	// DataParallelRank is the deprecated alias of RoutedDPRank, used when
	// RoutedDPRank is unset (GenerateReqInput.normalize_batch_and_arguments);
	// the only spelling 0.5.4 knows.
	DataParallelRank *int `json:"data_parallel_rank,omitempty"`
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
	// NoStopTrim keeps a matched stop token's text in `text` (SGLang
	// trims it by default: DetokenizerManager.trim_matched_stop).
	NoStopTrim   bool   `json:"no_stop_trim,omitempty"`
	SamplingSeed *int64 `json:"sampling_seed,omitempty"`
	N            int    `json:"n,omitempty"`
}

// GenerateResponse is one element of a /generate answer or stream chunk.
type GenerateResponse struct {
	// Text is the detokenized output (cumulative in a stream).
	Text string `json:"text"`
	// OutputIDs are the generated token ids (cumulative in a stream).
	OutputIDs []int32 `json:"output_ids"`
	// MetaInfo is the request's meta_info.
	MetaInfo MetaInfo `json:"meta_info"`
	// Index is the position in a batch; set on streamed batch chunks only.
	Index *int `json:"index,omitempty"`
}

// MarshalJSON writes the answer's keys in SGLang's order; a 0.5.4 request
// aborted in the waiting queue has no output_ids (TokenizerManager
// _handle_abort_req there answers {"text": "", "meta_info": {...}}).
func (g GenerateResponse) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"text":`)
	writeJSONValue(&b, g.Text)
	if g.MetaInfo.layout != metaLegacyWaitAbort {
		b.WriteString(`,"output_ids":`)
		ids := g.OutputIDs
		if ids == nil {
			ids = []int32{}
		}
		writeJSONValue(&b, ids)
	}
	b.WriteString(`,"meta_info":`)
	mi, err := g.MetaInfo.MarshalJSON()
	if err != nil {
		return nil, err
	}
	b.Write(mi)
	if g.Index != nil {
		b.WriteString(`,"index":`)
		writeJSONValue(&b, *g.Index)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// MetaInfo is SGLang's meta_info. Which keys an answer carries depends on
// the release and on how the request ended; see MarshalJSON.
type MetaInfo struct {
	// ID is the request id (rid).
	ID string `json:"id"`
	// FinishReason is null until the request ends.
	FinishReason *FinishReason `json:"finish_reason"`
	// PromptTokens is the input length.
	PromptTokens int `json:"prompt_tokens"`
	// CompletionTokens is the output length so far.
	CompletionTokens int `json:"completion_tokens"`
	// CachedTokens counts prompt tokens served from the prefix cache.
	CachedTokens int `json:"cached_tokens"`
	// ReasoningTokens counts tokens of the reasoning segment.
	ReasoningTokens int `json:"reasoning_tokens"`
	// E2ELatency is simulated seconds from arrival to finish; SGLang sets it
	// on the final answer only.
	E2ELatency float64 `json:"e2e_latency"`
	// NumRetractions counts the request's retractions (0.5.23).
	NumRetractions int `json:"num_retractions"`
	// WeightVersion is the serving weights' version ("default").
	WeightVersion string `json:"weight_version"`
	// DPRank is the DP rank that served the request (null without DP), as
	// the scheduler's output streamer reports it (0.5.23).
	DPRank *int `json:"dp_rank"`
	// ResponseSentToClientTS is the wall-clock Unix time the answer left
	// (0.5.23: set on the first answer sent for a request).
	ResponseSentToClientTS float64 `json:"response_sent_to_client_ts,omitempty"`

	layout metaLayout
}

// metaLayout selects the keys of a meta_info.
type metaLayout int

const (
	// metaFull is 0.5.23's TokenizerManager._handle_batch_output meta_info:
	// id, finish_reason, prompt_tokens, weight_version, num_retractions,
	// reasoning_tokens, completion_tokens, cached_tokens, dp_rank, and
	// e2e_latency once finished.
	metaFull metaLayout = iota
	// metaWaitAbort is 0.5.23's _handle_abort_req meta_info (a request
	// aborted in the waiting queue, or turned away by a full queue): id,
	// finish_reason, weight_version, e2e_latency, completion_tokens.
	metaWaitAbort
	// metaLegacy is 0.5.4's meta_info: id, finish_reason, prompt_tokens,
	// weight_version, completion_tokens, cached_tokens, and e2e_latency once
	// finished. No retraction count, no reasoning_tokens, no dp_rank.
	metaLegacy
	// metaLegacyWaitAbort is 0.5.4's _handle_abort_req meta_info: id,
	// finish_reason, prompt_tokens 0, completion_tokens 0.
	metaLegacyWaitAbort
)

// MarshalJSON writes the keys the release's tokenizer manager writes.
func (m MetaInfo) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	first := true
	field := func(k string, v any) {
		if !first {
			b.WriteByte(',')
		}
		first = false
		b.WriteString(`"` + k + `":`)
		writeJSONValue(&b, v)
	}
	b.WriteByte('{')
	field("id", m.ID)
	field("finish_reason", m.FinishReason)
	finished := m.FinishReason != nil
	switch m.layout {
	case metaWaitAbort:
		field("weight_version", m.WeightVersion)
		field("e2e_latency", m.E2ELatency)
		field("completion_tokens", m.CompletionTokens)
	case metaLegacy:
		field("prompt_tokens", m.PromptTokens)
		field("weight_version", m.WeightVersion)
		field("completion_tokens", m.CompletionTokens)
		field("cached_tokens", m.CachedTokens)
		if finished {
			field("e2e_latency", m.E2ELatency)
		}
	case metaLegacyWaitAbort:
		field("prompt_tokens", 0)
		field("completion_tokens", 0)
	default:
		field("prompt_tokens", m.PromptTokens)
		field("weight_version", m.WeightVersion)
		field("num_retractions", m.NumRetractions)
		field("reasoning_tokens", m.ReasoningTokens)
		field("completion_tokens", m.CompletionTokens)
		field("cached_tokens", m.CachedTokens)
		field("dp_rank", m.DPRank)
		if finished {
			field("e2e_latency", m.E2ELatency)
		}
	}
	if m.ResponseSentToClientTS != 0 && (m.layout == metaFull || m.layout == metaWaitAbort) {
		field("response_sent_to_client_ts", m.ResponseSentToClientTS)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// ErrorResponse is the body FastAPI HTTPExceptions get in SGLang (503 queue
// full, 500 ...): entrypoints/http_server.py validation_exception_handler.
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

// route is one path of the API: the methods it answers and its handler.
type route struct {
	methods []string
	h       http.HandlerFunc
}

// buildRoutes lays out the release's routes. GET routes answer HEAD too, as
// Starlette's do.
func (s *Server) buildRoutes() {
	get := []string{http.MethodGet, http.MethodHead}
	getPost := []string{http.MethodGet, http.MethodHead, http.MethodPost}
	post := []string{http.MethodPost}
	r := map[string]route{
		"/generate":            {[]string{http.MethodPost, http.MethodPut}, s.handleGenerate},
		"/health":              {get, s.handleHealth},
		"/health_generate":     {get, s.handleHealth},
		"/get_server_info":     {get, s.handleServerInfo},
		"/get_model_info":      {get, s.handleModelInfo},
		"/abort_request":       {post, s.handleAbort},
		"/flush_cache":         {getPost, s.handleFlush},
		"/pause_generation":    {post, s.handlePause(true)},
		"/continue_generation": {post, s.handlePause(false)},
	}
	if s.cfg.Release == Release054 {
		// 0.5.4 http_server.py: /get_load, no /server_info, /model_info, /ready or /v1/loads.
		r["/get_load"] = route{get, s.handleGetLoad}
	} else {
		r["/server_info"] = route{get, s.handleServerInfo}
		r["/model_info"] = route{get, s.handleModelInfo}
		r["/ready"] = route{get, s.handleReady}
		r["/v1/loads"] = route{get, s.handleLoads}
	}
	s.routes = r
}

// submittedKey is the context key of WithSubmitted's hook.
type submittedKey struct{}

// submittedHook calls its function at most once.
type submittedHook struct {
	once sync.Once
	fn   func()
}

func (h *submittedHook) call() {
	if h != nil {
		h.once.Do(h.fn)
	}
}

// hookFrom returns the request's WithSubmitted hook (nil when none).
func hookFrom(ctx context.Context) *submittedHook {
	h, _ := ctx.Value(submittedKey{}).(*submittedHook)
	return h
}

// ServeHTTP serves SGLang's native routes for the configured release
// (0.5.23: /generate, /health, /health_generate, /ready, /server_info,
// /get_server_info, /model_info, /get_model_info, /v1/loads, /metrics,
// /abort_request, /flush_cache, /pause_generation, /continue_generation;
// 0.5.4: /get_load instead of /server_info, /model_info, /ready and
// /v1/loads). With Config.APIKey set, every path but /health*, /ready* and
// /metrics* (0.5.4: /health* and /metrics*) needs "Authorization: Bearer
// <key>". Unknown paths answer FastAPI's 404 {"detail":"Not Found"}.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h := hookFrom(r.Context()); h != nil {
		defer h.call() // whatever happens, the caller is not left waiting
	}
	if !s.authorized(r) {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "Unauthorized"})
		return
	}
	path := r.URL.Path
	if strings.HasPrefix(path, "/metrics") {
		// add_prometheus_middleware mounts the metrics app at /metrics with
		// path_regex ^/metrics(?P<path>.*)$: every method, every sub-path.
		promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}).ServeHTTP(w, r)
		return
	}
	rt, ok := s.routes[path]
	if !ok {
		writeDetail(w, http.StatusNotFound, "Not Found")
		return
	}
	if !slices.Contains(rt.methods, r.Method) {
		w.Header().Set("Allow", strings.Join(rt.methods, ", "))
		writeDetail(w, http.StatusMethodNotAllowed, "Method Not Allowed")
		return
	}
	rt.h(w, r)
}

// authorized is SGLang's API-key check (0.5.23 utils/auth.py
// decide_request_auth; 0.5.4 utils/common.py add_api_key_middleware): OPTIONS
// and the probe prefixes pass; otherwise the Authorization header must be
// "Bearer <key>" (0.5.23: scheme case-insensitive), compared in constant time.
// Without a key every request passes. The routes the simulator serves are all
// NORMAL or ADMIN_OPTIONAL, which with only --api-key set both need the key.
func (s *Server) authorized(r *http.Request) bool {
	key := s.cfg.APIKey
	if key == "" || r.Method == http.MethodOptions {
		return true
	}
	prefixes := []string{"/health", "/ready", "/metrics"}
	if s.cfg.Release == Release054 {
		prefixes = []string{"/health", "/metrics"}
	}
	for _, p := range prefixes {
		if strings.HasPrefix(r.URL.Path, p) {
			return true
		}
	}
	header := r.Header.Get("Authorization")
	var token string
	if s.cfg.Release == Release054 {
		var ok bool
		if token, ok = strings.CutPrefix(header, "Bearer "); !ok {
			return false
		}
	} else {
		scheme, rest, ok := strings.Cut(header, " ")
		if !ok || !strings.EqualFold(scheme, "bearer") {
			return false
		}
		token = rest
	}
	return subtle.ConstantTimeCompare([]byte(token), []byte(key)) == 1
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// writeHTTPError answers like an HTTPException through SGLang's handler.
func writeHTTPError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, ErrorResponse{Object: "error", Message: msg, Type: strconv.Itoa(status), Code: status})
}

// writeDetail answers like Starlette's own HTTPException (routing 404/405):
// FastAPI's default {"detail": ...}.
func writeDetail(w http.ResponseWriter, status int, detail string) {
	writeJSON(w, status, map[string]string{"detail": detail})
}

func writeValueError(w http.ResponseWriter, msg string) {
	writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]string{"message": msg}})
}

// writeInternalError is Starlette's ServerErrorMiddleware answer to an
// unhandled exception.
func writeInternalError(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusInternalServerError)
	_, _ = io.WriteString(w, "Internal Server Error")
}

// isDown reports whether a simulated crash is in progress or the server closed.
func (s *Server) isDown() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed || s.downLocked()
}

// handleHealth serves /health and /health_generate: 503 while the server is
// down (crashed, or shutting down), else 200 with an empty body. A paused
// server is healthy.
func (s *Server) handleHealth(w http.ResponseWriter, _ *http.Request) {
	if s.isDown() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// handleReady serves /ready: 503 while down or paused
// (TokenizerManager.is_ready: not paused and healthy), else 200.
func (s *Server) handleReady(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	ready := !s.closed && !s.downLocked() && !s.paused
	s.mu.Unlock()
	if !ready {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Server) handleModelInfo(w http.ResponseWriter, _ *http.Request) {
	c := s.cfg
	info := map[string]any{
		"model_path":                c.ModelPath,
		"tokenizer_path":            c.ModelPath,
		"is_generation":             true,
		"preferred_sampling_params": nil,
		"weight_version":            "default",
	}
	if c.Release != Release054 {
		// 0.5.23 http_server.py model_info
		info["served_model_name"] = c.ModelPath
		info["load_format"] = "auto"
		info["reasoning_parser"] = nil
		info["tool_call_parser"] = nil
		info["disaggregation_mode"] = "null"
		info["has_image_understanding"] = false
		info["has_audio_understanding"] = false
		info["model_type"] = "simulated"
		info["architectures"] = []string{"SimulatedForCausalLM"}
	}
	info["simulator"] = map[string]any{
		"max_total_num_tokens":    c.MaxTotalTokens,
		"context_length":          c.ContextLength,
		"eos_token_ids":           c.EOSTokenIDs,
		"vocab_size":              c.VocabSize,
		"tokenizer_is_byte_level": true,
	}
	writeJSON(w, http.StatusOK, info)
}

// handleGetLoad is 0.5.4's /get_load: one GetLoadReqOutput per DP rank,
// num_tokens being used KV plus the prompts of the waiting queue
// (Scheduler.get_load).
func (s *Server) handleGetLoad(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	out := make([]any, len(s.ranks))
	for i, e := range s.ranks {
		tokens := e.usedTokens()
		for _, r := range e.waiting {
			tokens += len(r.input)
		}
		var rank any
		if s.cfg.DPSize > 1 {
			rank = e.rank
		}
		out[i] = map[string]any{
			"rid":              nil,
			"http_worker_ipc":  nil,
			"dp_rank":          rank,
			"num_reqs":         len(e.running) + len(e.waiting),
			"num_waiting_reqs": len(e.waiting),
			"num_tokens":       tokens,
		}
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

// handleAbort serves POST /abort_request ({"rid", "abort_all"}). As the
// tokenizer manager does, an empty rid without abort_all is ignored and a rid
// not in flight aborts nothing; otherwise every rank aborts the requests
// whose rid starts with rid (everything with abort_all): waiting ones answer
// {"type":"abort","message":"Abort in waiting queue"}, running ones
// FINISH_ABORT() ("Aborted", status_code null), both with HTTP 200.
func (s *Server) handleAbort(w http.ResponseWriter, r *http.Request) {
	var body struct {
		RID      string `json:"rid"`
		AbortAll bool   `json:"abort_all"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&body); err != nil && !errors.Is(err, io.EOF) {
		writeHTTPError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !body.AbortAll && (body.RID == "" || !s.inFlight(body.RID)) {
		w.WriteHeader(http.StatusOK)
		return
	}
	s.met.abortDispatched()
	s.later(-1, func(e *engine) { e.abortAsScheduler(body.RID, body.AbortAll) })
	w.WriteHeader(http.StatusOK)
}

// inFlight reports whether a request with exactly this rid is in flight on
// some rank (the tokenizer manager's rid_to_state).
func (s *Server) inFlight(rid string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.ranks {
		lists := [][]*request{e.waiting, e.running}
		if e.current != nil {
			lists = append(lists, e.current.reqs)
		}
		if e.chunked != nil && e.chunked.rid == rid {
			return true
		}
		for _, l := range lists {
			for _, q := range l {
				if q.rid == rid && q.finish == nil {
					return true
				}
			}
		}
	}
	return false
}

// handlePause serves /pause_generation and /continue_generation: while
// paused, requests are accepted and queued but no batch runs (SGLang's
// "in_place" mode; its default "abort" mode would abort them).
func (s *Server) handlePause(pause bool) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		if s.paused && !pause {
			s.resumeLocked()
		}
		s.paused = pause
		s.mu.Unlock()
		s.poke()
		msg := "Generation paused successfully."
		if !pause {
			msg = "Generation continued successfully."
		}
		writeJSON(w, http.StatusOK, map[string]any{"message": msg, "status": "ok"})
	}
}

func (s *Server) handleFlush(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	ok := true
	for _, e := range s.ranks {
		if e.current != nil || len(e.waiting) > 0 || len(e.running) > 0 || e.chunked != nil {
			ok = false
		}
	}
	if ok {
		for _, e := range s.ranks {
			e.flushCache()
		}
	}
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
	rank   int // routed DP rank; -1 = dispatch round robin
}

// routedRank resolves routed_dp_rank / data_parallel_rank the way the
// release does. 0.5.23: GenerateReqInput.normalize_batch_and_arguments takes
// data_parallel_rank when routed_dp_rank is unset; TokenizerManager
// .generate_request ignores rank 0 on a single-rank server and rejects a rank
// outside [0, num_dp_ranks) with ValueError "routed_dp_rank=N out of range
// [0, M)" (HTTP 400). 0.5.4 knows data_parallel_rank only and, without a DP
// controller (one rank), ignores it; with DP it indexes the workers list
// (out of range, the real controller dies: here it is the 0.5.23 400).
func (s *Server) routedRank(req *GenerateRequest) (int, error) {
	n := s.cfg.DPSize
	rank := req.RoutedDPRank
	if s.cfg.Release == Release054 {
		rank = req.DataParallelRank
		if rank == nil || n <= 1 {
			return -1, nil
		}
	} else if rank == nil {
		rank = req.DataParallelRank
	}
	if rank == nil || (n <= 1 && *rank == 0) {
		return -1, nil
	}
	if *rank < 0 || *rank >= n {
		return -1, badRequest("routed_dp_rank=%d out of range [0, %d)", *rank, n)
	}
	return *rank, nil
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
	if err := s.batchRIDsUnique(rids); err != nil {
		return nil, false, err
	}
	// After normalize_batch_and_arguments, before tokenization and the
	// per-request checks (TokenizerManager.generate_request).
	rank, err := s.routedRank(req)
	if err != nil {
		return nil, false, err
	}
	items := make([]genItem, len(inputs))
	for i, in := range inputs {
		it := genItem{input: in, rank: rank}
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
		items[i] = it
	}
	// _init_req_state: a rid already in flight is refused before any
	// per-request check runs.
	if err := s.claimRIDs(items); err != nil {
		return nil, false, err
	}
	for i := range items {
		if err := s.validateItem(&items[i]); err != nil {
			s.releaseRIDs(items)
			return nil, false, err
		}
	}
	return items, batch, nil
}

// batchRIDsUnique is GenerateReqInput._validate_rid_uniqueness (0.5.23; 0.5.4
// has no such check): a batch naming one rid twice is a ValueError, HTTP 400,
// naming the repeated rids as a Python list.
func (s *Server) batchRIDsUnique(rids []string) error {
	if s.cfg.Release == Release054 || len(rids) < 2 {
		return nil
	}
	seen := make(map[string]int, len(rids))
	var dups []string
	for _, r := range rids {
		seen[r]++
		if seen[r] == 2 {
			dups = append(dups, pyStrRepr(r))
		}
	}
	if len(dups) == 0 {
		return nil
	}
	return badRequest("Duplicate request IDs detected within the request: [%s]", strings.Join(dups, ", "))
}

// claimRIDs is TokenizerManager._init_req_state's check in 0.5.23: a rid
// already in flight on this server is a ValueError "Duplicate request ID
// detected: <rid>" (HTTP 400). The rids stay claimed until releaseRIDs, when
// the call is answered. 0.5.4 does not check (its second request silently
// replaces the first's state), so nothing is claimed there.
func (s *Server) claimRIDs(items []genItem) error {
	if s.cfg.Release == Release054 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, it := range items {
		if _, ok := s.live[it.rid]; ok {
			return badRequest("Duplicate request ID detected: %s", it.rid)
		}
	}
	if s.live == nil {
		s.live = make(map[string]struct{})
	}
	for _, it := range items {
		s.live[it.rid] = struct{}{}
	}
	return nil
}

// releaseRIDs ends the claim claimRIDs made (the request's state leaves
// rid_to_state once it is answered or aborted).
func (s *Server) releaseRIDs(items []genItem) {
	if s.cfg.Release == Release054 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, it := range items {
		delete(s.live, it.rid)
	}
}

// releaseFinished releases the rids of finished requests before their answer
// is written: TokenizerManager._handle_batch_output deletes a finished
// request's rid_to_state entry when its output arrives, before the HTTP
// handler yields it, so a client that has the answer can reuse the rid at
// once. (releaseRIDs at the end of the call covers the other paths.)
func (s *Server) releaseFinished(reqs ...*request) {
	if s.cfg.Release == Release054 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range reqs {
		delete(s.live, r.rid)
	}
}

// pyStrRepr is Python's repr of a str, for messages that print a list of
// strings: single quotes unless the text holds a single quote and no double
// quote; backslashes and the quote in use escaped.
func pyStrRepr(v string) string {
	q := "'"
	if strings.Contains(v, "'") && !strings.Contains(v, `"`) {
		q = `"`
	}
	var b strings.Builder
	b.WriteString(q)
	for _, r := range v {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case string(r) == q:
			b.WriteString(`\` + q)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteString(q)
	return b.String()
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
		keepStop:  p.NoStopTrim,
	}
	if script, reasonLen := s.scriptFor(it.rid); script != nil {
		r.plan.setScript(script, reasonLen, p.MinNewTokens)
		r.byteText = true
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

// unixNow is the wall clock as Unix seconds, SGLang's time.time().
func unixNow() float64 { return float64(time.Now().UnixNano()) / 1e9 }
