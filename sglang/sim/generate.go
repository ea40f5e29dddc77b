package sim

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"
)

// maxBodyBytes bounds a /generate body (SGLang accepts large batches).
const maxBodyBytes = 512 << 20

func newRID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// isSpecial reports ids that skip_special_tokens drops from text.
func (s *Server) isSpecial(id int32) bool {
	if s.cfg.SpecialTokenStart > 0 && int(id) >= s.cfg.SpecialTokenStart {
		return true
	}
	for _, l := range [][]int{s.cfg.EOSTokenIDs, s.cfg.ReasoningTokenIDs, s.cfg.ToolCallTokenIDs} {
		for _, v := range l {
			if int(id) == v {
				return true
			}
		}
	}
	return false
}

// outputText renders the `text` of r's output ids as SGLang's detokenizer
// does: a matched stop token (the last id of a request that finished with
// finish_reason stop) is left out unless no_stop_trim is set
// (DetokenizerManager.trim_matched_stop, managers/detokenizer_manager.py).
// In a stream, acc holds the text of ids[:sent] and gets the rest appended;
// a scripted reply is rendered whole each time, its text cut before an
// incomplete UTF-8 sequence until it finishes (the detokenizer's "printable
// prefix" for a token that ends mid-character).
func (s *Server) outputText(r *request, ids []int32, fin *FinishReason, sent int, acc *strings.Builder) string {
	if fin != nil && fin.Type == "stop" && fin.Matched != nil && !r.keepStop && len(ids) > 0 && ids[len(ids)-1] == int32(*fin.Matched) {
		ids = ids[:len(ids)-1]
	}
	if r.byteText {
		text := detokenize(ids, s.isSpecial, r.skipSpecial(), true)
		if fin == nil {
			for cut := len(text) - 1; cut >= 0 && cut >= len(text)-utf8.UTFMax; cut-- {
				if utf8.RuneStart(text[cut]) {
					if !utf8.FullRuneInString(text[cut:]) {
						text = text[:cut]
					}
					break
				}
			}
		}
		return text
	}
	if acc == nil {
		return DetokenizeIDs(ids, s.isSpecial, r.skipSpecial())
	}
	if sent < len(ids) {
		acc.WriteString(DetokenizeIDs(ids[sent:], s.isSpecial, r.skipSpecial()))
	}
	return acc.String()
}

// handleGenerate serves POST|PUT /generate. In manual mode the call is
// submitted at the owner's instant (SetTime) and blocks until the owner's
// Finish calls end its requests; the WithSubmitted hook of the request's
// context fires once the requests are queued (or an error was answered).
func (s *Server) handleGenerate(w http.ResponseWriter, hr *http.Request) {
	if s.isDown() {
		resetConnection(w)
		return
	}
	body, err := io.ReadAll(io.LimitReader(hr.Body, maxBodyBytes))
	if err != nil {
		writeHTTPError(w, http.StatusBadRequest, "cannot read body: "+err.Error())
		return
	}
	var req GenerateRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeHTTPError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return
	}
	fd := s.faults.decide(strings.TrimSpace(string(req.RID)))
	if fd.delay > 0 {
		t := time.NewTimer(fd.delay)
		select {
		case <-hr.Context().Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
	if fd.internalError {
		writeHTTPError(w, http.StatusInternalServerError, "Internal server error (injected by the simulator).")
		return
	}
	items, batch, err := s.parseGenerate(&req)
	if err == nil {
		defer s.releaseRIDs(items)
	}
	if err == nil && fd.queueFull {
		s.answerQueueFull(w, &req, items, batch)
		return
	}
	if err != nil {
		if req.Stream {
			s.streamError(w, err.Error(), http.StatusBadRequest)
		} else {
			writeValueError(w, err.Error())
		}
		return
	}

	notify := make(chan struct{}, 1)
	reqs := make([]*request, len(items))
	for i, it := range items {
		reqs[i] = s.newRequest(it, notify)
		reqs[i].stream = req.Stream
	}
	s.mu.Lock()
	if s.closed || s.downLocked() {
		s.mu.Unlock()
		resetConnection(w)
		return
	}
	now := s.clockLocked()
	for i, r := range reqs {
		s.enqueueLocked(r, items[i].rank, now)
	}
	s.mu.Unlock()
	hookFrom(hr.Context()).call()
	s.poke()

	if req.Stream {
		s.streamResults(hr.Context(), w, reqs, batch, fd.reset)
		return
	}
	s.waitResults(hr.Context(), w, reqs, batch, fd.reset)
}

// answerQueueFull answers a call the fault injector turned away as if the
// scheduler's queue were full (Scheduler._abort_on_queued_limit): HTTP 503
// (an HTTPException), or in a 0.5.23 stream the abort as an answer chunk.
func (s *Server) answerQueueFull(w http.ResponseWriter, req *GenerateRequest, items []genItem, batch bool) {
	const msg = "The request queue is full."
	if !req.Stream {
		writeHTTPError(w, http.StatusServiceUnavailable, msg)
		return
	}
	if s.cfg.Release == Release054 {
		s.streamError(w, msg, http.StatusServiceUnavailable)
		return
	}
	sseHeaders(w)
	for i, it := range items {
		r := &request{rid: it.rid, input: it.input, waitAbort: true}
		chunk := s.response(r, nil, "", abortReason(msg, http.StatusServiceUnavailable), requestMeta{})
		chunk.MetaInfo.ResponseSentToClientTS = unixNow()
		if batch {
			idx := i
			chunk.Index = &idx
		}
		writeEvent(w, chunk)
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
	flush(w)
}

// abandon aborts requests whose client went away (TokenizerManager
// abort_request on disconnect).
func (s *Server) abandon(reqs []*request) {
	s.met.abortDispatched()
	for _, r := range reqs {
		r := r
		s.later(r.dpRank, func(e *engine) { e.abortRequest(r, "The client closed the connection.") })
	}
}

// waitResults answers a non-streaming call once every request finished.
func (s *Server) waitResults(ctx context.Context, w http.ResponseWriter, reqs []*request, batch, reset bool) {
	for !allFinished(reqs) {
		select {
		case <-reqs[0].notify:
		case <-ctx.Done():
			s.abandon(reqs)
			return
		}
	}
	out := make([]GenerateResponse, len(reqs))
	for i, r := range reqs {
		ids, fin, meta := r.snapshot()
		if fin.crashed {
			resetConnection(w)
			return
		}
		if fin.Type == "abort" && fin.StatusCode != nil && *fin.StatusCode >= 400 && *fin.StatusCode < 600 {
			// _handle_abort_finish_reason: 400 is a ValueError, others an HTTPException.
			if *fin.StatusCode == http.StatusBadRequest {
				writeValueError(w, fin.Message)
			} else {
				writeHTTPError(w, *fin.StatusCode, fin.Message)
			}
			return
		}
		out[i] = s.response(r, ids, s.outputText(r, ids, fin, 0, nil), fin, meta)
		out[i].MetaInfo.ResponseSentToClientTS = unixNow()
	}
	if reset {
		resetConnection(w)
		return
	}
	if batch {
		s.releaseFinished(reqs...)
		writeJSON(w, http.StatusOK, out)
		return
	}
	s.releaseFinished(reqs...)
	writeJSON(w, http.StatusOK, out[0])
}

func allFinished(reqs []*request) bool {
	for _, r := range reqs {
		if _, fin, _ := r.snapshot(); fin == nil {
			return false
		}
	}
	return true
}

// streamError answers a streaming call that failed before it started the
// way SGLang does: HTTP 200, one error event, then [DONE]. 0.5.23's event is
// {"error":{"message","type":"invalid_request_error","code","retryable":false}}
// (http_server.py serve_generate_request); 0.5.4's {"error":{"message"}}.
func (s *Server) streamError(w http.ResponseWriter, msg string, code int) {
	sseHeaders(w)
	if s.cfg.Release == Release054 {
		e := map[string]any{"message": msg}
		if code != http.StatusBadRequest {
			e["code"] = code
		}
		writeEvent(w, map[string]any{"error": e})
	} else {
		writeEvent(w, map[string]any{"error": streamErrorBody{Message: msg, Type: "invalid_request_error", Code: code}})
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
	flush(w)
}

// streamErrorBody is 0.5.23's in-band stream error, keys in SGLang's order.
type streamErrorBody struct {
	Message   string `json:"message"`
	Type      string `json:"type"`
	Code      int    `json:"code"`
	Retryable bool   `json:"retryable"`
}

func sseHeaders(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
}

func writeEvent(w http.ResponseWriter, v any) {
	b, _ := json.Marshal(v)
	_, _ = io.WriteString(w, "data: ")
	_, _ = w.Write(b)
	_, _ = io.WriteString(w, "\n\n")
}

func flush(w http.ResponseWriter) {
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// streamResults streams cumulative chunks (text and output_ids so far) as
// server-sent events until every request finished, then [DONE]. An abort
// with a status code ends the request's stream with the abort as its last
// chunk (0.5.23 _handle_abort_finish_reason), or, in 0.5.4, an error event.
func (s *Server) streamResults(ctx context.Context, w http.ResponseWriter, reqs []*request, batch, reset bool) {
	sseHeaders(w)
	flush(w)
	sent := make([]int, len(reqs))
	done := make([]bool, len(reqs))
	first := make([]bool, len(reqs))
	texts := make([]strings.Builder, len(reqs))
	left := len(reqs)
	for {
		for i, r := range reqs {
			if done[i] {
				continue
			}
			ids, fin, meta := r.snapshot()
			if fin != nil && fin.crashed {
				resetConnection(w)
				return
			}
			if len(ids) == sent[i] && fin == nil {
				continue
			}
			if fin != nil && reset {
				resetConnection(w)
				return
			}
			if fin != nil && fin.Type == "abort" && fin.StatusCode != nil && s.cfg.Release == Release054 {
				e := map[string]any{"message": fin.Message}
				if *fin.StatusCode != http.StatusBadRequest {
					e["code"] = *fin.StatusCode
				}
				writeEvent(w, map[string]any{"error": e})
			} else {
				if fin != nil {
					s.releaseFinished(r)
				}
				chunk := s.response(r, ids, s.outputText(r, ids, fin, sent[i], &texts[i]), fin, meta)
				if !first[i] {
					first[i] = true
					chunk.MetaInfo.ResponseSentToClientTS = unixNow()
				}
				if batch {
					idx := i
					chunk.Index = &idx
				}
				writeEvent(w, chunk)
			}
			sent[i] = len(ids)
			if fin != nil {
				done[i] = true
				left--
			}
		}
		flush(w)
		if left == 0 {
			_, _ = io.WriteString(w, "data: [DONE]\n\n")
			flush(w)
			return
		}
		select {
		case <-reqs[0].notify:
		case <-ctx.Done():
			s.abandon(reqs)
			return
		}
	}
}

// response renders one request's state in the release's shape.
func (s *Server) response(r *request, ids []int32, text string, fin *FinishReason, meta requestMeta) GenerateResponse {
	if ids == nil {
		ids = []int32{}
	}
	mi := MetaInfo{
		ID:               r.rid,
		FinishReason:     fin,
		PromptTokens:     len(r.input),
		CompletionTokens: len(ids),
		CachedTokens:     meta.cachedTokens,
		ReasoningTokens:  meta.reasoningTokens,
		E2ELatency:       meta.e2e,
		NumRetractions:   meta.retractions,
		WeightVersion:    "default",
	}
	switch {
	case s.cfg.Release == Release054 && r.waitAbort:
		mi.layout = metaLegacyWaitAbort
		text = ""
	case s.cfg.Release == Release054:
		mi.layout = metaLegacy
	case r.waitAbort:
		mi.layout = metaWaitAbort
	default:
		mi.layout = metaFull
		if s.cfg.DPSize > 1 {
			rank := r.dpRank
			mi.DPRank = &rank
		}
	}
	return GenerateResponse{Text: text, OutputIDs: ids, MetaInfo: mi}
}
