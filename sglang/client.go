package sglang

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/draftflow/draftflow/secret"
)

// Client speaks SGLang's native HTTP API to one server.
type Client struct {
	base   string
	hc     *http.Client
	apiKey secret.Value
}

// NewClient returns a client of the server at base (e.g. "http://host:30000"). A non-empty apiKey is sent
// as "Authorization: Bearer <key>" on every call, as servers started with --api-key require.
func NewClient(base string, hc *http.Client, apiKey secret.Value) *Client {
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Client{base: strings.TrimRight(base, "/"), hc: hc, apiKey: apiKey}
}

// URL returns the server's base URL.
func (c *Client) URL() string { return c.base }

// SamplingParams are the sampling_params of a /generate request. Zero optional fields are omitted so the
// server's (model's) defaults apply.
type SamplingParams struct {
	// MaxNewTokens bounds the output (SGLang's default, 128, is never relied on: it is always sent).
	MaxNewTokens int `json:"max_new_tokens"`
	// Temperature, TopP, TopK and MinP shape sampling (a nil Temperature and zero others: the model's
	// defaults); a temperature under 1e-6 is greedy.
	Temperature *float64 `json:"temperature,omitempty"`
	TopP        float64  `json:"top_p,omitempty"`
	TopK        int      `json:"top_k,omitempty"`
	MinP        float64  `json:"min_p,omitempty"`
	// SamplingSeed makes sampling reproducible on one server.
	SamplingSeed *int64 `json:"sampling_seed,omitempty"`
	// StopTokenIDs end the output when generated (besides the model's EOS).
	StopTokenIDs []int `json:"stop_token_ids,omitempty"`
	// MinNewTokens and IgnoreEOS keep the server from stopping early (the simulator's benchmarks pin
	// output lengths with them).
	MinNewTokens int  `json:"min_new_tokens,omitempty"`
	IgnoreEOS    bool `json:"ignore_eos,omitempty"`
	// SkipSpecialTokens, when set, says whether the response's text leaves special tokens out (SGLang's
	// default: true).
	SkipSpecialTokens *bool `json:"skip_special_tokens,omitempty"`
}

// GenerateRequest is the body of POST /generate for one prompt.
type GenerateRequest struct {
	// InputIDs is the prompt, token ids.
	InputIDs []uint32 `json:"input_ids"`
	// RID is the request id (/abort_request matches rids by prefix: keep them prefix-free).
	RID string `json:"rid,omitempty"`
	// SamplingParams are the request's sampling_params.
	SamplingParams SamplingParams `json:"sampling_params"`
	// RoutedDPRank pins the request to one data-parallel rank of a server started with --dp-size > 1
	// (GenerateReqInput.routed_dp_rank, io_struct.py); nil lets the server's balancer choose.
	RoutedDPRank *int `json:"routed_dp_rank,omitempty"`
	// ReturnHiddenStates asks for meta_info.hidden_states (a server started with --enable-return-hidden-states
	// or --enable-return-aux-hidden-states; see hidden.go for what comes back). Read it with
	// ParseGenerateHidden or Client.CaptureHidden: Generate ignores it.
	ReturnHiddenStates bool `json:"return_hidden_states,omitempty"`
}

// The forms of meta_info.finish_reason's type.
const (
	// FinishStop: a stop token or string matched (FinishReason.Matched says which).
	FinishStop = "stop"
	// FinishLength: the output reached max_new_tokens (FinishReason.Length).
	FinishLength = "length"
	// FinishAbort: the server ended the request (FinishReason.Message, StatusCode); never a usable answer.
	FinishAbort = "abort"
)

// FinishReason is meta_info.finish_reason.
type FinishReason struct {
	// Type is FinishStop, FinishLength or FinishAbort.
	Type string `json:"type"`
	// Matched is the stop token id or string (stop only).
	Matched json.RawMessage `json:"matched,omitempty"`
	// Length is the output length (length only).
	Length int `json:"length,omitempty"`
	// Message and StatusCode explain an abort.
	Message string `json:"message,omitempty"`
	// StatusCode is the abort's HTTP-like status (0: null).
	StatusCode int `json:"status_code,omitempty"`
}

// MetaInfo is the part of SGLang's meta_info the client keeps.
type MetaInfo struct {
	// ID is the request's rid.
	ID string `json:"id"`
	// FinishReason says why the generation ended (null on intermediate stream chunks).
	FinishReason *FinishReason `json:"finish_reason"`
	// PromptTokens counts the prompt.
	PromptTokens int `json:"prompt_tokens"`
	// CompletionTokens counts the output.
	CompletionTokens int `json:"completion_tokens"`
	// CachedTokens is the part of the prompt the radix (prefix) cache held.
	CachedTokens int `json:"cached_tokens"`
	// E2ELatency is the request's latency on the server, in seconds.
	E2ELatency float64 `json:"e2e_latency"`
	// NumRetractions (SGLang 0.5.23, tokenizer_manager.py) and TotalRetractions (some 2026 builds) both
	// count retractions; older releases report neither.
	NumRetractions *int `json:"num_retractions,omitempty"`
	// TotalRetractions is NumRetractions' other spelling.
	TotalRetractions *int `json:"total_retractions,omitempty"`
	// DPRank is the data-parallel rank that ran the request, when the server reports it.
	DPRank *int `json:"dp_rank,omitempty"`
}

// Retractions returns the retraction count under whichever name the server used (0 when it reported none).
func (m *MetaInfo) Retractions() int {
	n, _ := m.RetractionCount()
	return n
}

// RetractionCount returns the retraction count and whether the server reported one at all: releases
// before per-request retraction counts report none, and then meta_info says nothing about retractions.
func (m *MetaInfo) RetractionCount() (int, bool) {
	switch {
	case m.NumRetractions != nil:
		return *m.NumRetractions, true
	case m.TotalRetractions != nil:
		return *m.TotalRetractions, true
	}
	return 0, false
}

// GenerateResponse is the answer of POST /generate for one prompt.
type GenerateResponse struct {
	// Text is the detokenized output (a matched stop token left out, as SGLang's detokenizer trims it).
	Text string `json:"text"`
	// OutputIDs are the generated token ids, token-exact.
	OutputIDs []uint32 `json:"output_ids"`
	// MetaInfo is the server's account of the request.
	MetaInfo MetaInfo `json:"meta_info"`
}

// StatusError is a non-200 HTTP answer.
type StatusError struct {
	// Code is the HTTP status.
	Code int
	// Message is the server's error message ({"error":{"message"}} or {"message"}), else the raw body.
	Message string
}

// Error names the status and the server's message.
func (e *StatusError) Error() string {
	return fmt.Sprintf("sglang: HTTP %d: %s", e.Code, e.Message)
}

// AuthError is a server refusing the client's credentials (HTTP 401 or 403): a server started with --api-key
// and no key, or a wrong one, configured (--sglang-api-key-file, DRAFTFLOW_SGLANG_API_KEY). Retrying cannot
// help; the generate stage stops with this error.
type AuthError struct {
	// Endpoint is the server's base URL.
	Endpoint string
	// Code is the HTTP status, 401 or 403.
	Code int
	// Message is the server's error body.
	Message string
	// KeySet tells whether a key was sent.
	KeySet bool
}

// Error names the server and status and says whether a key was sent, never the key.
func (e *AuthError) Error() string {
	hint := "no API key is configured: set --sglang-api-key-file or DRAFTFLOW_SGLANG_API_KEY"
	if e.KeySet {
		hint = "the configured API key was refused"
	}
	return fmt.Sprintf("sglang %s: HTTP %d %s: %s", e.Endpoint, e.Code, e.Message, hint)
}

// InvalidResponseError is a complete answer the client cannot use: not JSON, no output_ids, no finish reason,
// an introspection answer without a field it needs or with one of the wrong type.
type InvalidResponseError struct {
	// Reason says what is wrong, naming the endpoint and route (and the field).
	Reason string
}

// Error returns the reason.
func (e *InvalidResponseError) Error() string { return "sglang: invalid response: " + e.Reason }

// AbortedError is a request the server ended with finish_reason abort.
type AbortedError struct {
	// Message is the abort's message.
	Message string
	// StatusCode is the abort's status_code: 0 (null) for an abort that is not the request's fault
	// (abort_all, pause_generation, a weight update), else an HTTP status.
	StatusCode int
}

// Error names the status, when there is one, and the message.
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
	resp, err := parseGenerateResponse(data)
	var ir *InvalidResponseError
	if errors.As(err, &ir) {
		return nil, &InvalidResponseError{Reason: c.base + "/generate: " + ir.Reason}
	}
	return resp, err
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
	if fr != nil && fr.Type == FinishAbort {
		return nil, &AbortedError{Message: fr.Message, StatusCode: fr.StatusCode}
	}
	if resp.OutputIDs == nil {
		return nil, &InvalidResponseError{Reason: "no output_ids"}
	}
	if fr == nil || (fr.Type != FinishStop && fr.Type != FinishLength) {
		return nil, &InvalidResponseError{Reason: "missing or unknown finish_reason"}
	}
	out := &resp.GenerateResponse
	out.OutputIDs = *resp.OutputIDs
	return out, nil
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
	return c.doLimit(ctx, method, path, body, maxResponseBytes)
}

// jsonMarshal encodes a request body.
func jsonMarshal(v any) ([]byte, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("sglang: encode request: %w", err)
	}
	return body, nil
}

// doLimit is do reading at most limit bytes of the answer (a longer one is an error, never a cut body).
func (c *Client) doLimit(ctx context.Context, method, path string, body []byte, limit int64) ([]byte, error) {
	resp, err := c.send(ctx, method, path, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("sglang: read %s answer: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, &InvalidResponseError{Reason: fmt.Sprintf("%s%s: answer longer than %d bytes", c.base, path, limit)}
	}
	if err := c.statusError(resp.StatusCode, data); err != nil {
		return nil, err
	}
	return data, nil
}

// send makes one call and returns the server's answer, whatever its status; the caller closes its body.
func (c *Client) send(ctx context.Context, method, path string, body []byte) (*http.Response, error) {
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
	if !c.apiKey.IsZero() {
		req.Header.Set("Authorization", "Bearer "+c.apiKey.Reveal())
	}
	return c.hc.Do(req)
}

// statusError is the error of an answer with HTTP status code and body data, or nil for a 200.
func (c *Client) statusError(code int, data []byte) error {
	switch code {
	case http.StatusOK:
		return nil
	case http.StatusUnauthorized, http.StatusForbidden:
		return &AuthError{Endpoint: c.base, Code: code, Message: errorMessage(data), KeySet: !c.apiKey.IsZero()}
	}
	return &StatusError{Code: code, Message: errorMessage(data)}
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
