package ingest

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"strconv"

	"github.com/draftflow/draftflow/topics"
)

// Rows of token ids: a line with "input_ids" is not a conversation but a row brought in with its output, kept
// as it is (topics.Kept), never generated again. Its shape says which:
//
//	{"id"?, "input_ids": [int...], "output_ids": [int...], "turn"?, "finish_reason"?, "meta_info"?: {"id"?, "finish_reason"?}}
//
// is a /generate result (topics.OriginResult): SGLang's /generate answer with the prompt ids beside it, as the
// reference regeneration's raw_responses.jsonl holds them; the row is input_ids then output_ids.
//
//	{"id"?, "input_ids": [int...], "loss_mask": [0|1...], "turn"?, "finish_reason"?, "metadata"?: {"finish_reason"?}}
//
// is a pre-tokenized training record (topics.OriginRecord), as SpecForge's prompts_path and speculators read
// them. Its loss mask is one run of zeros then one run of ones as a rule: the prompt, then the output. A mask
// with several runs of ones (a multi-turn record) makes one row per run, turn "turn"+k for the k-th run, its
// prompt every id before the run (earlier outputs included) and its output the run; ids after the last run
// (masked out) are dropped.
//
// Lists may be wrapped once ([[...]], a batch of one, as SpecForge accepts). Ids are integers in [0, 2^32);
// whether the model knows them is checked by tokenize, which knows the model. The finish reason is a string or
// SGLang's {"type": ...} object, at the top level, in meta_info or in metadata; an aborted result is rejected.
// With several runs it is the last row's, the others' is "stop". The id is "id", else meta_info's (SGLang's
// request id), else TokenRowID of the ids.

// tokenKeys are the row-level keys a row of token ids is read from; others are reported and ignored.
var tokenKeys = []string{"id", "input_ids", "output_ids", "loss_mask", "turn", "finish_reason", "meta_info", "metadata"}

// parseTokenRow returns the rows of a line of token ids (row.InputIDs set).
func parseTokenRow(src topics.Source, dataset string, row *wireRow) ([]topics.Prompt, error) {
	hasOut, hasMask := !isNull(row.OutputIDs), !isNull(row.LossMask)
	switch {
	case hasOut && hasMask:
		return nil, lineErr(ReasonBadField, "the row has both \"output_ids\" and \"loss_mask\": a /generate result has output_ids, "+
			"a pre-tokenized record loss_mask; give one")
	case !hasOut && !hasMask:
		return nil, lineErr(ReasonBadField, "a row with \"input_ids\" needs \"output_ids\" (a /generate result) or \"loss_mask\" "+
			"(a pre-tokenized training record); the row's keys: %s", quotedList(row.Keys))
	}
	in, err := idList(row.InputIDs, "input_ids")
	if err != nil {
		return nil, err
	}
	if len(in) == 0 {
		return nil, lineErr(ReasonEmptyIDs, "\"input_ids\" is empty")
	}
	turn, err := parseTurn(row.Turn)
	if err != nil {
		return nil, err
	}
	finish, err := finishReason(row)
	if err != nil {
		return nil, err
	}
	id, err := parseID(row.ID)
	if err != nil {
		return nil, err
	}
	if id == "" {
		if id, err = metaID(row.MetaInfo); err != nil {
			return nil, err
		}
	}
	base := topics.Prompt{ID: id, Dataset: dataset, Source: src}
	if hasOut {
		out, err := idList(row.OutputIDs, "output_ids")
		if err != nil {
			return nil, err
		}
		if len(out) == 0 {
			return nil, lineErr(ReasonEmptyIDs, "\"output_ids\" is empty: a result without output is no row")
		}
		if base.ID == "" {
			base.ID = TokenRowID(in, out, nil)
		}
		base.Turn, base.Origin, base.FinishReason, base.InputIDs, base.OutputIDs = turn, topics.OriginResult, finish, in, out
		return []topics.Prompt{base}, nil
	}
	mask, err := lossMask(row.LossMask, len(in))
	if err != nil {
		return nil, err
	}
	if base.ID == "" {
		base.ID = TokenRowID(in, nil, mask)
	}
	var out []topics.Prompt
	for i := 0; i < len(mask); {
		if mask[i] == 0 {
			i++
			continue
		}
		end := i
		for end < len(mask) && mask[end] == 1 {
			end++
		}
		p := base
		p.Turn, p.Origin, p.InputIDs, p.OutputIDs = turn+len(out), topics.OriginRecord, in[:i:i], in[i:end:end]
		out = append(out, p)
		i = end
	}
	out[len(out)-1].FinishReason = finish
	return out, nil
}

// idList decodes a list of token ids (or a list holding one such list).
func idList(raw json.RawMessage, field string) ([]uint32, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '[' {
		return nil, lineErr(ReasonBadIDs, "%q is a %s, want a list of token ids", field, jsonKind(raw))
	}
	var ids []uint32
	if err := json.Unmarshal(raw, &ids); err == nil {
		return ids, nil
	}
	var wrapped []json.RawMessage
	if err := json.Unmarshal(raw, &wrapped); err != nil {
		return nil, lineErr(ReasonBadIDs, "%q: %v", field, err)
	}
	if len(wrapped) == 1 && bytes.HasPrefix(bytes.TrimSpace(wrapped[0]), []byte("[")) {
		return idList(wrapped[0], field+"[0]")
	}
	if len(wrapped) > 1 && bytes.HasPrefix(bytes.TrimSpace(wrapped[0]), []byte("[")) {
		return nil, lineErr(ReasonBadIDs, "%q holds %d lists: a row is one sequence", field, len(wrapped))
	}
	for i, v := range wrapped {
		if _, err := strconv.ParseUint(string(v), 10, 32); err != nil {
			return nil, lineErr(ReasonBadIDs, "%s[%d] is %s, want a token id (an integer from 0 to %d)", field, i, clip(v), uint32(math.MaxUint32))
		}
	}
	return nil, lineErr(ReasonBadIDs, "%q is not a list of token ids", field) // unreachable: some element failed above
}

// lossMask decodes a loss mask of n values, each 0 or 1, with at least one 1 that has a prompt before it.
func lossMask(raw json.RawMessage, n int) ([]uint8, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '[' {
		return nil, lineErr(ReasonBadMask, "\"loss_mask\" is a %s, want a list of 0 and 1", jsonKind(raw))
	}
	var vals []json.RawMessage
	if err := json.Unmarshal(raw, &vals); err != nil {
		return nil, lineErr(ReasonBadMask, "\"loss_mask\": %v", err)
	}
	field := "loss_mask"
	if len(vals) == 1 && bytes.HasPrefix(bytes.TrimSpace(vals[0]), []byte("[")) {
		field = "loss_mask[0]"
		if err := json.Unmarshal(vals[0], &vals); err != nil {
			return nil, lineErr(ReasonBadMask, "%q: %v", field, err)
		}
	}
	if len(vals) != n {
		return nil, lineErr(ReasonBadMask, "%q has %d values, \"input_ids\" %d ids: one value per id", field, len(vals), n)
	}
	mask := make([]uint8, n)
	ones := 0
	for i, v := range vals {
		switch string(bytes.TrimSpace(v)) {
		case "0":
		case "1":
			mask[i] = 1
			ones++
		default:
			return nil, lineErr(ReasonBadMask, "%s[%d] is %s, want 0 or 1", field, i, clip(v))
		}
	}
	switch {
	case ones == 0:
		return nil, lineErr(ReasonBadMask, "%q has no 1: no id is an output to train on", field)
	case mask[0] == 1:
		return nil, lineErr(ReasonBadMask, "%q starts with 1: the output has no prompt before it", field)
	}
	return mask, nil
}

// parseTurn reads a row's "turn": a non-negative integer, 0 when absent.
func parseTurn(raw json.RawMessage) (int, error) {
	if isNull(raw) {
		return 0, nil
	}
	n, err := strconv.ParseInt(string(bytes.TrimSpace(raw)), 10, 32)
	if err != nil || n < 0 {
		return 0, lineErr(ReasonBadField, "\"turn\" is %s, want a non-negative integer", clip(raw))
	}
	return int(n), nil
}

// finishReason reads the row's finish reason: "finish_reason", else meta_info's, else metadata's; each a string
// or an object with a "type" (SGLang's {"type": "stop", "matched": ...}). An aborted result is an error.
func finishReason(row *wireRow) (string, error) {
	where, raw := "finish_reason", row.FinishReason
	for _, holder := range []struct {
		name string
		raw  json.RawMessage
	}{{"meta_info", row.MetaInfo}, {"metadata", row.Metadata}} {
		if !isNull(raw) || isNull(holder.raw) {
			continue
		}
		var h struct {
			FinishReason json.RawMessage `json:"finish_reason"`
		}
		if err := json.Unmarshal(holder.raw, &h); err != nil {
			return "", lineErr(ReasonBadField, "%q is a %s, want an object", holder.name, jsonKind(bytes.TrimSpace(holder.raw)))
		}
		where, raw = holder.name+".finish_reason", h.FinishReason
	}
	if isNull(raw) {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		var obj struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(raw, &obj); err != nil || obj.Type == "" {
			return "", lineErr(ReasonBadField, "%s is %s, want a string or an object with a \"type\"", where, clip(raw))
		}
		s = obj.Type
	}
	if s == "abort" {
		return "", lineErr(ReasonAborted, "%s is abort: an aborted request's output is not a reply to keep", where)
	}
	return s, nil
}

// metaID reads SGLang's request id from meta_info ("" when absent).
func metaID(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var m struct {
		ID json.RawMessage `json:"id"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return "", lineErr(ReasonBadField, "\"meta_info\" is a %s, want an object", jsonKind(bytes.TrimSpace(raw)))
	}
	id, err := parseID(m.ID)
	if err != nil {
		return "", lineErr(ReasonBadField, "meta_info.%s", err.(*LineError).Detail)
	}
	return id, nil
}

// TokenRowID returns the content-derived id of a row of token ids: HashIDPrefix and the first 24 hex digits of a
// SHA-256 over "draftflow token row v1", then the input ids, then the output ids of a result (output not nil) or
// the loss mask of a record, each as a uvarint count and its values (ids as little-endian uint32). It depends only
// on the ids, never on the file or the dataset.
func TokenRowID(input, output []uint32, mask []uint8) string {
	h := sha256.New()
	h.Write([]byte("draftflow token row v1"))
	var b []byte
	b = binary.AppendUvarint(b, uint64(len(input)))
	for _, id := range input {
		b = binary.LittleEndian.AppendUint32(b, id)
	}
	if output != nil {
		b = append(b, 'o')
		b = binary.AppendUvarint(b, uint64(len(output)))
		for _, id := range output {
			b = binary.LittleEndian.AppendUint32(b, id)
		}
	} else {
		b = append(b, 'm')
		b = binary.AppendUvarint(b, uint64(len(mask)))
		b = append(b, mask...)
	}
	h.Write(b)
	return HashIDPrefix + hex.EncodeToString(h.Sum(nil)[:12])
}

// clip quotes a JSON value for a reason, cut to 40 bytes.
func clip(raw json.RawMessage) string {
	s := string(bytes.TrimSpace(raw))
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	return s
}

// quotedList quotes names for a reason ("none" when there is none).
func quotedList(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	var b bytes.Buffer
	for i, n := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(n))
	}
	return b.String()
}

// keptReplies returns the rows of a conversation whose assistant replies are kept (`replies: keep`): one Prompt
// per assistant message after the conversation's first user message, its Messages every message before it (the
// dataset's own earlier replies included), its Turn the number of assistant messages before it, its Reply the
// message, its Origin topics.OriginDataset. With last, only the last such message's row. Messages after the last
// assistant message answer nothing and are not used. A conversation without such a message is an error.
func keptReplies(p topics.Prompt, last bool) ([]topics.Prompt, error) {
	all := make([]topics.Message, 0, len(p.Messages)+len(p.Rest))
	all = append(append(all, p.Messages...), p.Rest...)
	firstUser := -1
	var out []topics.Prompt
	turn := 0
	for i, m := range all {
		if m.Role == "user" && firstUser < 0 {
			firstUser = i
		}
		if m.Role != "assistant" {
			continue
		}
		if firstUser >= 0 {
			reply := m
			q := topics.Prompt{ID: p.ID, Dataset: p.Dataset, Turn: turn, Messages: all[:i:i], Tools: p.Tools, Sampling: p.Sampling,
				Source: p.Source, Origin: topics.OriginDataset, Reply: &reply}
			out = append(out, q)
		}
		turn++
	}
	if len(out) == 0 {
		return nil, lineErr(ReasonNoReply, "no assistant reply after a user message to keep (`replies: keep`): %d message(s), roles %s",
			len(all), roleList(all))
	}
	if last {
		out = out[len(out)-1:]
	}
	return out, nil
}
