// Package sglang is draftflow's client of an SGLang server's native HTTP API, and the wire types it speaks.
//
// It owns what the server's answers mean and nothing about what to do with them: the body of POST /generate
// (GenerateRequest, SamplingParams) and its answer (GenerateResponse, MetaInfo with the finish_reason forms
// and both spellings of the retraction count), the error forms of an answer (StatusError for a non-200,
// AuthError for a refused API key, InvalidResponseError for a body that is not a usable answer,
// AbortedError for finish_reason abort), what a server says about itself (ServerInfo: /server_info, falling
// back to /get_server_info; Loads: /v1/loads; RetractedTotal: the retraction series of /metrics, named by
// the Metric constants), POST /abort_request (Abort) and GET /health. Admission, retries and routing belong
// to the generate stage (stages/generate).
//
// The shapes are those of the sglang 0.5.23 release. Every field the client relies on is checked: an answer
// of the wrong shape is an *InvalidResponseError naming the endpoint, the route and the field, never a
// silent zero. The simulator in sglang/sim is a double of the same server, its contract tests pinned to the
// wheel's source; the reply parsers in sglang/reply read a turn's text as SGLang's own parsers do.
//
// Hidden states (hidden.go): GenerateRequest.ReturnHiddenStates asks for meta_info.hidden_states;
// ParseGenerateHidden reads them into float32 in one pass over the answer (no generic JSON tree), and
// Client.CaptureHidden sends the prefill of one row and checks that every position came back (what SGLang
// returns, and the server flags it needs, are in hidden.go and docs/hidden-states.md).
//
// Files: client.go (Client, /generate, /health, /abort_request, the error forms), introspect.go
// (/server_info, /v1/loads, /metrics), hidden.go (hidden-state capture).
package sglang
