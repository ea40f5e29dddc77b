// Package encode gives the token ids the tokenize stage would produce for each line of a prompt file, as
// `draftflow encode` prints them: each line is read as the ingest stage reads a JSONL line (or, in text mode,
// as a row whose "text" field is encoded without a chat template) and encoded with the model's chat template and
// tokenizer, with the stage's too-long check where the context window is known.
package encode

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/draftflow/draftflow/stages/ingest"
	"github.com/draftflow/draftflow/stages/tokenize"
)

// Options say how Stream reads and encodes. The zero value encodes every conversation's first prompt
// without a too-long check.
type Options struct {
	// TemplateKwargs are extra chat-template variables given to every conversation (nil: none).
	TemplateKwargs map[string]any
	// Text encodes each line's "text" field without a chat template.
	Text bool
	// ContextLength is the model's context window in tokens, for the tokenize stage's too-long check (0: no
	// check).
	ContextLength int
	// Turns is which turn of each conversation to encode: ingest.TurnsAll ("" too: the prompt of its first
	// assistant turn, what a run sends first) or ingest.TurnsLast (every message up to the last user message).
	Turns string
}

// Stream writes one line {"id": ..., "input_ids": [...]} to w per non-blank line of r, or returns an error
// naming the line ("stdin line N", as `draftflow encode` reads standard input). A conversation that the
// tokenize stage would dead-letter as too long for o.ContextLength is such an error.
func Stream(r io.Reader, w io.Writer, m *tokenize.Model, o Options) error {
	in := bufio.NewReader(r)
	out := bufio.NewWriter(w)
	defer out.Flush()
	enc := json.NewEncoder(out)
	for line := int64(1); ; line++ {
		data, err := in.ReadBytes('\n')
		if len(strings.TrimSpace(string(data))) > 0 {
			var id string
			var ids []uint32
			if o.Text {
				var row struct {
					ID   any     `json:"id"`
					Text *string `json:"text"`
				}
				if err := json.Unmarshal(data, &row); err != nil {
					return fmt.Errorf("stdin line %d: %w", line, err)
				}
				if row.Text == nil {
					return fmt.Errorf(`stdin line %d: no "text" field`, line)
				}
				if row.ID != nil {
					id = fmt.Sprint(row.ID)
				}
				ids = m.Tokenizer.Encode(*row.Text)
			} else {
				p, err := ingest.ParseAll("stdin", line, data, "stdin")
				if o.Turns == ingest.TurnsLast {
					p = ingest.LastTurn(p)
				}
				if err != nil {
					return fmt.Errorf("stdin line %d: %w", line, err)
				}
				if o.TemplateKwargs != nil {
					p.Sampling.TemplateKwargs = o.TemplateKwargs
				}
				if ids, err = m.Encode(&p); err != nil {
					return fmt.Errorf("stdin line %d (id %s): %w", line, p.ID, err)
				}
				if o.ContextLength > 0 && !tokenize.Fits(len(ids), p.Sampling.MaxNewTokens, o.ContextLength) {
					return fmt.Errorf("stdin line %d (id %s): %d tokens; with max_new_tokens %d it does not fit the model context of %d tokens",
						line, p.ID, len(ids), p.Sampling.MaxNewTokens, o.ContextLength)
				}
				id = p.ID
			}
			if ids == nil {
				ids = []uint32{}
			}
			if err := enc.Encode(struct {
				ID       string   `json:"id"`
				InputIDs []uint32 `json:"input_ids"`
			}{id, ids}); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
