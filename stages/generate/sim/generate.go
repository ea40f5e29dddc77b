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

// handleGenerate serves POST|PUT /generate.
func (s *Server) handleGenerate(w http.ResponseWriter, hr *http.Request) {
	if hr.Method != http.MethodPost && hr.Method != http.MethodPut {
		writeHTTPError(w, http.StatusMethodNotAllowed, "Method Not Allowed")
		return
	}
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
	if err == nil && fd.queueFull {
		if req.Stream {
			s.streamError(w, "The request queue is full.")
		} else {
			writeHTTPError(w, http.StatusServiceUnavailable, "The request queue is full.")
		}
		return
	}
	if err != nil {
		if req.Stream {
			s.streamError(w, err.Error())
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
	if s.closed || s.eng.now < s.eng.downUntil {
		s.mu.Unlock()
		resetConnection(w)
		return
	}
	for _, r := range reqs {
		s.eng.submit(r)
	}
	s.mu.Unlock()
	s.poke()

	if req.Stream {
		s.streamResults(hr.Context(), w, reqs, batch, fd.reset)
		return
	}
	s.waitResults(hr.Context(), w, reqs, batch, fd.reset)
}

// abandon aborts requests whose client went away.
func (s *Server) abandon(reqs []*request) {
	s.later(func(e *engine) {
		for _, r := range reqs {
			e.abortRequest(r, "The client closed the connection.")
		}
	})
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
		if fin.Type == "abort" && fin.StatusCode != nil {
			writeHTTPError(w, *fin.StatusCode, fin.Message)
			return
		}
		out[i] = s.response(r, ids, DetokenizeIDs(ids, s.isSpecial, r.skipSpecial()), fin, meta)
	}
	if reset {
		resetConnection(w)
		return
	}
	if batch {
		writeJSON(w, http.StatusOK, out)
		return
	}
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
// way SGLang does: HTTP 200, one error event, then [DONE].
func (s *Server) streamError(w http.ResponseWriter, msg string) {
	sseHeaders(w)
	writeEvent(w, map[string]any{"error": map[string]string{"message": msg}})
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
	flush(w)
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
// server-sent events until every request finished, then [DONE].
func (s *Server) streamResults(ctx context.Context, w http.ResponseWriter, reqs []*request, batch, reset bool) {
	sseHeaders(w)
	flush(w)
	sent := make([]int, len(reqs))
	done := make([]bool, len(reqs))
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
			if fin != nil && fin.Type == "abort" && fin.StatusCode != nil {
				writeEvent(w, map[string]any{"error": map[string]any{"message": fin.Message, "code": *fin.StatusCode}})
			} else {
				texts[i].WriteString(DetokenizeIDs(ids[sent[i]:], s.isSpecial, r.skipSpecial()))
				chunk := s.response(r, ids, texts[i].String(), fin, meta)
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

// response renders one request's state in SGLang's shape.
func (s *Server) response(r *request, ids []int32, text string, fin *FinishReason, meta requestMeta) GenerateResponse {
	if ids == nil {
		ids = []int32{}
	}
	return GenerateResponse{
		Text:      text,
		OutputIDs: ids,
		MetaInfo: MetaInfo{
			ID:               r.rid,
			FinishReason:     fin,
			PromptTokens:     len(r.input),
			CompletionTokens: len(ids),
			CachedTokens:     meta.cachedTokens,
			ReasoningTokens:  meta.reasoningTokens,
			E2ELatency:       meta.e2e,
			NumRetractions:   meta.retractions,
			WeightVersion:    "default",
		},
	}
}
