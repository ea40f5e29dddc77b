package generate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Client speaks SGLang's native HTTP API to one server.
type Client struct {
	base string
	hc   *http.Client
}

// NewClient returns a client of the server at base (e.g. "http://host:30000").
func NewClient(base string, hc *http.Client) *Client {
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Client{base: strings.TrimRight(base, "/"), hc: hc}
}

// URL returns the server's base URL.
func (c *Client) URL() string { return c.base }

// SamplingParams are the sampling_params of a /generate request. Zero optional fields are omitted so the
// server's (model's) defaults apply.
type SamplingParams struct {
	MaxNewTokens int      `json:"max_new_tokens"`
	Temperature  *float64 `json:"temperature,omitempty"`
	TopP         float64  `json:"top_p,omitempty"`
	TopK         int      `json:"top_k,omitempty"`
	MinP         float64  `json:"min_p,omitempty"`
	SamplingSeed *int64   `json:"sampling_seed,omitempty"`
	StopTokenIDs []int    `json:"stop_token_ids,omitempty"`
	MinNewTokens int      `json:"min_new_tokens,omitempty"`
	IgnoreEOS    bool     `json:"ignore_eos,omitempty"`
}

// GenerateRequest is the body of POST /generate for one prompt.
type GenerateRequest struct {
	InputIDs       []uint32       `json:"input_ids"`
	RID            string         `json:"rid,omitempty"`
	SamplingParams SamplingParams `json:"sampling_params"`
}

// FinishReason is meta_info.finish_reason.
type FinishReason struct {
	// Type is "stop", "length" or "abort".
	Type string `json:"type"`
	// Matched is the stop token id or string (stop only).
	Matched json.RawMessage `json:"matched,omitempty"`
	// Length is the output length (length only).
	Length int `json:"length,omitempty"`
	// Message and StatusCode explain an abort.
	Message    string `json:"message,omitempty"`
	StatusCode int    `json:"status_code,omitempty"`
}

// MetaInfo is the part of SGLang's meta_info the stage keeps.
type MetaInfo struct {
	ID               string        `json:"id"`
	FinishReason     *FinishReason `json:"finish_reason"`
	PromptTokens     int           `json:"prompt_tokens"`
	CompletionTokens int           `json:"completion_tokens"`
	CachedTokens     int           `json:"cached_tokens"`
	E2ELatency       float64       `json:"e2e_latency"`
	// NumRetractions (SGLang main) and TotalRetractions (some 2026 builds) both count retractions.
	NumRetractions   *int `json:"num_retractions,omitempty"`
	TotalRetractions *int `json:"total_retractions,omitempty"`
}

// Retractions returns the retraction count under whichever name the server used.
func (m *MetaInfo) Retractions() int {
	switch {
	case m.NumRetractions != nil:
		return *m.NumRetractions
	case m.TotalRetractions != nil:
		return *m.TotalRetractions
	}
	return 0
}

// GenerateResponse is the answer of POST /generate for one prompt.
type GenerateResponse struct {
	OutputIDs []uint32 `json:"output_ids"`
	MetaInfo  MetaInfo `json:"meta_info"`
}

// StatusError is a non-200 HTTP answer.
type StatusError struct {
	// Code is the HTTP status.
	Code int
	// Message is the server's error message ({"error":{"message"}} or {"message"}), else the raw body.
	Message string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("sglang: HTTP %d: %s", e.Code, e.Message)
}

// InvalidResponseError is a complete answer the stage cannot use: not JSON, no output_ids, no finish reason.
type InvalidResponseError struct{ Reason string }

func (e *InvalidResponseError) Error() string { return "sglang: invalid response: " + e.Reason }

// AbortedError is a request the server ended with finish_reason abort.
type AbortedError struct {
	Message    string
	StatusCode int
}

func (e *AbortedError) Error() string {
	if e.StatusCode != 0 {
		return fmt.Sprintf("sglang: request aborted (status %d): %s", e.StatusCode, e.Message)
	}
	return "sglang: request aborted: " + e.Message
}

// maxResponseBytes bounds a /generate answer (a few hundred thousand token ids as JSON fit easily).
const maxResponseBytes = 256 << 20

// Generate sends one request and returns the server's answer. A non-200 answer is a *StatusError, a body
// that is not a usable answer an *InvalidResponseError, an abort an *AbortedError; anything else is a
// transport error (connection refused or reset, timeout, truncated body).
func (c *Client) Generate(ctx context.Context, req *GenerateRequest) (*GenerateResponse, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("sglang: encode request: %w", err)
	}
	data, err := c.do(ctx, http.MethodPost, "/generate", body)
	if err != nil {
		return nil, err
	}
	return parseGenerateResponse(data)
}

// parseGenerateResponse decodes and checks one /generate answer.
func parseGenerateResponse(data []byte) (*GenerateResponse, error) {
	var resp struct {
		GenerateResponse
		OutputIDs *[]uint32 `json:"output_ids"`
	}
	if err := json.Unmarshal(data, &resp); err != nil {
		// A list means the server treated the request as a batch: not what we sent.
		return nil, &InvalidResponseError{Reason: err.Error()}
	}
	fr := resp.MetaInfo.FinishReason
	if fr != nil && fr.Type == "abort" {
		return nil, &AbortedError{Message: fr.Message, StatusCode: fr.StatusCode}
	}
	if resp.OutputIDs == nil {
		return nil, &InvalidResponseError{Reason: "no output_ids"}
	}
	if fr == nil || (fr.Type != "stop" && fr.Type != "length") {
		return nil, &InvalidResponseError{Reason: "missing or unknown finish_reason"}
	}
	out := &resp.GenerateResponse
	out.OutputIDs = *resp.OutputIDs
	return out, nil
}

// Capacity is what /get_server_info says about a server's KV pool and limits.
type Capacity struct {
	// MaxTotalTokens is the KV pool size (max_total_num_tokens), summed over the server's data-parallel ranks
	// (dp_size; each has its own pool) as /v1/loads figures are (see Load).
	MaxTotalTokens int
	// MaxRunningRequests bounds the server's running batch.
	MaxRunningRequests int
	// ContextLength is the model's context length.
	ContextLength int
	// ServedModel is the model path the server reports.
	ServedModel string
}

// ServerInfo reads the server's capacity from /get_server_info, falling back to /server_info.
func (c *Client) ServerInfo(ctx context.Context) (Capacity, error) {
	data, err := c.do(ctx, http.MethodGet, "/get_server_info", nil)
	var se *StatusError
	if errors.As(err, &se) && se.Code == http.StatusNotFound {
		data, err = c.do(ctx, http.MethodGet, "/server_info", nil)
	}
	if err != nil {
		return Capacity{}, err
	}
	return parseServerInfo(data)
}

func parseServerInfo(data []byte) (Capacity, error) {
	var info struct {
		MaxTotalNumTokens  int    `json:"max_total_num_tokens"`
		MaxTotalTokens     int    `json:"max_total_tokens"`
		MaxRunningRequests int    `json:"max_running_requests"`
		ContextLength      int    `json:"context_length"`
		ModelPath          string `json:"model_path"`
		DPSize             int    `json:"dp_size"`
		InternalStates     []struct {
			MaxTotalNumTokens int `json:"max_total_num_tokens"`
			MemoryUsage       struct {
				TokenCapacity int `json:"token_capacity"`
			} `json:"memory_usage"`
		} `json:"internal_states"`
	}
	if err := json.Unmarshal(data, &info); err != nil {
		return Capacity{}, &InvalidResponseError{Reason: "server info: " + err.Error()}
	}
	c := Capacity{MaxRunningRequests: info.MaxRunningRequests, ContextLength: info.ContextLength,
		ServedModel: info.ModelPath}
	ranks := max(info.DPSize, len(info.InternalStates), 1)
	// The pool is per data-parallel rank: the top level is one rank's scheduler info, internal_states has one
	// entry per rank. /v1/loads reports every rank (Load sums them), so the capacity is the sum over ranks.
	perRank := info.MaxTotalNumTokens
	ranksSeen, sum := 0, 0
	for _, s := range info.InternalStates {
		if n := max(s.MaxTotalNumTokens, s.MemoryUsage.TokenCapacity); n > 0 {
			ranksSeen++
			sum += n
			if perRank == 0 {
				perRank = n // the top level lacks the pool size (it is a scheduler value)
			}
		}
	}
	if perRank == 0 {
		perRank = info.MaxTotalTokens
	}
	c.MaxTotalTokens = perRank * ranks
	if ranks > 1 && ranksSeen == ranks {
		c.MaxTotalTokens = sum // every rank reported its own pool
	}
	if c.MaxTotalTokens <= 0 {
		return c, &InvalidResponseError{Reason: "server info has no max_total_num_tokens"}
	}
	return c, nil
}

// Load is one poll of /v1/loads, summed over the server's data-parallel ranks (one loads[] entry per rank, or
// one entry with the server's totals), so MaxTokens compares with Capacity.MaxTotalTokens.
type Load struct {
	Running, Waiting      int
	UsedTokens, MaxTokens int
	// TokenUsage is the KV usage in [0,1] (the worst rank's, where there are several).
	TokenUsage float64
	// GenThroughput is the server's recent output tokens per second.
	GenThroughput float64
}

// Loads polls /v1/loads.
func (c *Client) Loads(ctx context.Context) (Load, error) {
	data, err := c.do(ctx, http.MethodGet, "/v1/loads", nil)
	if err != nil {
		return Load{}, err
	}
	return parseLoads(data)
}

func parseLoads(data []byte) (Load, error) {
	var body struct {
		Loads []struct {
			NumRunningReqs    int     `json:"num_running_reqs"`
			NumWaitingReqs    int     `json:"num_waiting_reqs"`
			NumUsedTokens     int     `json:"num_used_tokens"`
			NumTotalTokens    int     `json:"num_total_tokens"`
			MaxTotalNumTokens int     `json:"max_total_num_tokens"`
			TokenUsage        float64 `json:"token_usage"`
			GenThroughput     float64 `json:"gen_throughput"`
		} `json:"loads"`
	}
	if err := json.Unmarshal(data, &body); err != nil {
		return Load{}, &InvalidResponseError{Reason: "loads: " + err.Error()}
	}
	if len(body.Loads) == 0 {
		return Load{}, &InvalidResponseError{Reason: "loads: empty"}
	}
	var l Load
	for _, r := range body.Loads {
		l.Running += r.NumRunningReqs
		l.Waiting += r.NumWaitingReqs
		l.UsedTokens += r.NumUsedTokens
		l.MaxTokens += max(r.MaxTotalNumTokens, r.NumTotalTokens)
		l.TokenUsage = max(l.TokenUsage, r.TokenUsage)
		l.GenThroughput += r.GenThroughput
	}
	return l, nil
}

// RetractedTotal reads the server's cumulative retraction counter from /metrics
// (sglang:num_retracted_requests_total, needs --enable-metrics). ok is false when the server exports none.
func (c *Client) RetractedTotal(ctx context.Context) (total float64, ok bool, err error) {
	data, err := c.do(ctx, http.MethodGet, "/metrics", nil)
	if err != nil {
		return 0, false, err
	}
	return parseRetracted(data)
}

func parseRetracted(data []byte) (float64, bool, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(data))
	if err != nil {
		return 0, false, &InvalidResponseError{Reason: "metrics: " + err.Error()}
	}
	for _, name := range []string{"sglang:num_retracted_requests_total", "sglang:num_retracted_requests"} {
		f, ok := fams[name]
		if !ok {
			continue
		}
		total := 0.0
		for _, m := range f.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				total += m.GetCounter().GetValue()
			case m.GetUntyped() != nil:
				total += m.GetUntyped().GetValue()
			}
		}
		return total, true, nil
	}
	return 0, false, nil
}

// Health checks GET /health: nil when the server answers 200.
func (c *Client) Health(ctx context.Context) error {
	_, err := c.do(ctx, http.MethodGet, "/health", nil)
	return err
}

// Abort asks the server to abort the request with rid (POST /abort_request). SGLang aborts every request
// whose rid starts with rid, once one with exactly this rid is in flight.
func (c *Client) Abort(ctx context.Context, rid string) error {
	body, _ := json.Marshal(map[string]any{"rid": rid})
	_, err := c.do(ctx, http.MethodPost, "/abort_request", body)
	return err
}

// do sends one call and returns the body of a 200 answer.
func (c *Client) do(ctx context.Context, method, path string, body []byte) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return nil, fmt.Errorf("sglang: read %s answer: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &StatusError{Code: resp.StatusCode, Message: errorMessage(data)}
	}
	return data, nil
}

// errorMessage extracts the message of an SGLang error body: {"error":{"message":...}} (ValueError),
// {"message":...} (HTTPException) or {"detail":...}; else the body itself, shortened.
func errorMessage(data []byte) string {
	var body struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(data, &body) == nil {
		var inner struct {
			Message string `json:"message"`
		}
		var s string
		switch {
		case len(body.Error) > 0 && json.Unmarshal(body.Error, &inner) == nil && inner.Message != "":
			return inner.Message
		case len(body.Error) > 0 && json.Unmarshal(body.Error, &s) == nil && s != "":
			return s
		case body.Message != "":
			return body.Message
		case len(body.Detail) > 0:
			if json.Unmarshal(body.Detail, &s) == nil {
				return s
			}
			return string(body.Detail)
		}
	}
	msg := strings.TrimSpace(string(data))
	if len(msg) > 512 {
		msg = msg[:512] + "..."
	}
	if msg == "" {
		msg = "(empty body)"
	}
	return msg
}
