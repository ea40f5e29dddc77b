package sglang

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
)

// StreamResult is the answer of a streamed /generate (GenerateStream).
type StreamResult struct {
	// Response is the stream's last chunk: the whole output, token-exact, and the final meta_info. When the
	// watch stopped the request, its finish_reason is normally the abort the server answered /abort_request
	// with ({"type": "abort", "message": "Aborted"}, no status), or stop or length when the request ended on
	// its own before the abort reached it.
	Response *GenerateResponse
	// Stopped tells that the watch asked for the request to stop.
	Stopped bool
	// StoppedAt is how many output ids the watch had seen when it asked (0 unless Stopped).
	StoppedAt int
}

// GenerateStream sends req as a streaming /generate ("stream": true: server-sent events, one JSON chunk per
// decode step or group of steps, then "data: [DONE]") and calls watch with the output ids each chunk adds,
// in order. The server's chunks carry the output so far (SGLang's default) or, on a server started with
// --incremental-streaming-output, only what is new; both are read, telling them apart by meta_info's
// completion_tokens. Only the new ids of an intermediate chunk are decoded; the last chunk is decoded whole,
// and its output_ids are what Response holds.
//
// When watch returns true the request is aborted on the server (POST /abort_request with req.RID) and the
// stream is read to its end: the server's last chunk says exactly which ids it produced. If the abort cannot
// be sent, the connection is closed instead (SGLang aborts a request whose client goes away) and Response
// holds the ids read so far, with a finish_reason abort whose message says so.
//
// Errors are Generate's: a non-200 answer or an error event in the stream is a *StatusError (or *AuthError),
// a stream that is not a usable answer an *InvalidResponseError, an abort the watch did not ask for an
// *AbortedError, anything else a transport error.
func (c *Client) GenerateStream(ctx context.Context, req *GenerateRequest, watch func(ids []uint32) bool) (*StreamResult, error) {
	body, err := json.Marshal(struct {
		*GenerateRequest
		Stream bool `json:"stream"`
	}{req, true})
	if err != nil {
		return nil, fmt.Errorf("sglang: encode request: %w", err)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp, err := c.send(sctx, http.MethodPost, "/generate", body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return nil, c.statusError(resp.StatusCode, data)
	}
	invalid := func(reason string) error {
		return &InvalidResponseError{Reason: c.base + "/generate (stream): " + reason}
	}
	st := &streamState{}
	res := &StreamResult{}
	rd := bufio.NewReaderSize(resp.Body, 64<<10)
	var line []byte
	for {
		line, err = readLine(rd, line[:0], maxResponseBytes)
		if err != nil {
			if res.Stopped && st.final == nil {
				break // the connection was closed after a failed abort
			}
			if errors.Is(err, io.EOF) {
				return nil, invalid("stream ended without a finished chunk")
			}
			return nil, fmt.Errorf("sglang: read /generate stream: %w", err)
		}
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue // blank separators, comments, other fields
		}
		data = bytes.TrimSpace(data)
		if bytes.Equal(data, []byte("[DONE]")) {
			if st.final == nil {
				return nil, invalid("[DONE] before a finished chunk")
			}
			break
		}
		fresh, err := st.chunk(data)
		if err != nil {
			var se *StatusError
			if errors.As(err, &se) {
				return nil, err
			}
			return nil, invalid(err.Error())
		}
		if res.Stopped || len(fresh) == 0 || !watch(fresh) || st.final != nil {
			continue // a finished chunk is followed by [DONE]
		}
		res.Stopped, res.StoppedAt = true, st.seen
		if aerr := c.Abort(ctx, req.RID); aerr != nil {
			cancel()
		}
	}
	if st.final == nil {
		// Stopped, the abort not sent, the connection closed: what was read is what the server produced.
		out := &GenerateResponse{OutputIDs: st.got,
			MetaInfo: MetaInfo{ID: req.RID, PromptTokens: len(req.InputIDs), CompletionTokens: len(st.got)}}
		out.MetaInfo.FinishReason = &FinishReason{Type: FinishAbort, Message: "connection closed by the client: /abort_request failed"}
		res.Response = out
		return res, nil
	}
	fr := st.final.MetaInfo.FinishReason
	if fr.Type == FinishAbort && !res.Stopped {
		return nil, &AbortedError{Message: fr.Message, StatusCode: fr.StatusCode}
	}
	res.Response = st.final
	return res, nil
}

// readLine appends the next line of rd (without its end of line) to buf; a line longer than limit is an error.
func readLine(rd *bufio.Reader, buf []byte, limit int) ([]byte, error) {
	for {
		part, err := rd.ReadSlice('\n')
		buf = append(buf, part...)
		if len(buf) > limit {
			return nil, fmt.Errorf("stream line longer than %d bytes", limit)
		}
		switch {
		case err == nil:
			return bytes.TrimRight(buf, "\r\n"), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(buf) > 0:
			return bytes.TrimRight(buf, "\r\n"), nil
		default:
			return nil, err
		}
	}
}

// streamState is what a streamed answer has said so far.
type streamState struct {
	got    []uint32          // output ids read so far
	seen   int               // len(got)
	chunks int               // intermediate chunks read
	final  *GenerateResponse // the finished chunk, whole
}

var (
	keyOutputIDs        = []byte(`"output_ids":`)
	keyFinishReason     = []byte(`"finish_reason":`)
	keyCompletionTokens = []byte(`"completion_tokens":`)
	keyError            = []byte(`"error":`)
)

// chunk reads one event's JSON and returns the output ids it adds. A finished chunk (a finish_reason that is
// not null) is decoded whole into s.final; an intermediate one is only searched: a key's pattern ("key":)
// cannot occur inside a JSON string, whose quotes are escaped.
func (s *streamState) chunk(data []byte) ([]uint32, error) {
	at := bytes.Index(data, keyOutputIDs)
	if at < 0 {
		if bytes.Contains(data, keyError) && !bytes.Contains(data, keyFinishReason) {
			return nil, streamEventError(data)
		}
		return s.finish(data) // an abort in the waiting queue has no output_ids in some releases
	}
	arrStart := at + len(keyOutputIDs)
	for arrStart < len(data) && data[arrStart] == ' ' {
		arrStart++
	}
	if arrStart >= len(data) || data[arrStart] != '[' {
		return nil, errors.New("output_ids is not a list")
	}
	arrEnd := bytes.IndexByte(data[arrStart:], ']')
	if arrEnd < 0 {
		return nil, errors.New("output_ids is not closed")
	}
	arrEnd += arrStart
	// meta_info follows output_ids in SGLang's chunks; look before them too.
	fin := metaValue(data, at, arrEnd, keyFinishReason)
	total, err := strconv.Atoi(string(numberPrefix(metaValue(data, at, arrEnd, keyCompletionTokens))))
	if err != nil {
		return nil, errors.New("a chunk without meta_info.completion_tokens")
	}
	if fin == nil {
		return nil, errors.New("a chunk without meta_info.finish_reason")
	}
	if !bytes.HasPrefix(fin, []byte("null")) {
		return s.finish(data)
	}
	if total < s.seen {
		return nil, fmt.Errorf("completion_tokens went back from %d to %d", s.seen, total)
	}
	// The new ids are the array's last total-seen; the array holds them alone (deltas) or after the ids
	// already read (cumulative).
	fresh, err := lastIDs(data[arrStart+1:arrEnd], total-s.seen)
	if err != nil {
		return nil, err
	}
	s.got = append(s.got, fresh...)
	s.seen = total
	s.chunks++
	return fresh, nil
}

// finish decodes the finished chunk. Its output_ids are cumulative (SGLang's default) or the last delta
// (--incremental-streaming-output), told apart by completion_tokens.
func (s *streamState) finish(data []byte) ([]uint32, error) {
	var raw struct {
		GenerateResponse
		OutputIDs *[]uint32 `json:"output_ids"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, err
	}
	fr := raw.MetaInfo.FinishReason
	if fr == nil || (fr.Type != FinishStop && fr.Type != FinishLength && fr.Type != FinishAbort) {
		return nil, errors.New("missing or unknown finish_reason")
	}
	if raw.OutputIDs == nil {
		if fr.Type != FinishAbort {
			return nil, errors.New("no output_ids")
		}
		raw.OutputIDs = &[]uint32{}
	}
	ids := *raw.OutputIDs
	total := raw.MetaInfo.CompletionTokens
	var fresh []uint32
	switch {
	case len(ids) == total && len(ids) >= s.seen:
		fresh = ids[s.seen:]
	case s.seen+len(ids) == total:
		fresh = ids
		ids = append(s.got, ids...)
	case s.seen == total:
		// An abort answered for the tokenizer manager (incremental streams repeat only the last id): the
		// output is what was read.
		ids = s.got
	default:
		return nil, fmt.Errorf("the finished chunk has %d output ids, %d read before, completion_tokens %d", len(ids), s.seen, total)
	}
	out := raw.GenerateResponse
	out.OutputIDs = ids
	s.final = &out
	return fresh, nil
}

// metaValue is valueAfter(key) in the chunk data outside its output_ids, which run from at to arrEnd.
func metaValue(data []byte, at, arrEnd int, key []byte) []byte {
	if v := valueAfter(data[arrEnd:], key); v != nil {
		return v
	}
	return valueAfter(data[:at], key)
}

// valueAfter returns data after key and any spaces, or nil when key is not in data.
func valueAfter(data, key []byte) []byte {
	at := bytes.Index(data, key)
	if at < 0 {
		return nil
	}
	return bytes.TrimLeft(data[at+len(key):], " ")
}

// numberPrefix returns the leading digits of data.
func numberPrefix(data []byte) []byte {
	n := 0
	for n < len(data) && data[n] >= '0' && data[n] <= '9' {
		n++
	}
	return data[:n]
}

// lastIDs decodes the last n numbers of a JSON list's inside (between the brackets), reading backwards.
func lastIDs(arr []byte, n int) ([]uint32, error) {
	if n == 0 {
		return nil, nil
	}
	out := make([]uint32, n)
	end := len(arr)
	for k := n - 1; k >= 0; k-- {
		start := bytes.LastIndexByte(arr[:end], ',') + 1
		if start == 0 && k > 0 {
			return nil, fmt.Errorf("output_ids holds fewer ids than completion_tokens says")
		}
		v, err := strconv.ParseUint(string(bytes.TrimSpace(arr[start:end])), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("output_ids: %w", err)
		}
		out[k] = uint32(v)
		end = max(start-1, 0)
	}
	return out, nil
}

// streamEventError is the error of an error event: {"error": {"message", "code", ...}} (or a string).
func streamEventError(data []byte) error {
	var body struct {
		Error json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(data, &body); err != nil {
		return err
	}
	var e struct {
		Message string `json:"message"`
		Code    int    `json:"code"`
	}
	if json.Unmarshal(body.Error, &e) != nil || e.Message == "" {
		var s string
		_ = json.Unmarshal(body.Error, &s)
		e.Message = s
	}
	if e.Code == 0 {
		e.Code = http.StatusBadRequest
	}
	return &StatusError{Code: e.Code, Message: e.Message}
}
