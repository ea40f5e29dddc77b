package tokenize

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/draftflow/draftflow/kafka/stream"
	"github.com/draftflow/draftflow/topics"
)

// keep makes the Tokenized record of a row brought in with its output (topics.Kept(p.Origin)): the ids of a
// /generate result or a pre-tokenized record as they are; the dataset's own reply rendered by the chat template
// after the prompt (EncodeReply). The row is checked as a generated one would be, and dead-lettered with the
// reason otherwise: every id inside the model's vocabulary (the tokenizer's ids, added tokens included), a
// prompt and an output that are not empty, and the two together within the model's context window
// (max_new_tokens does not apply: it budgets generation, and nothing is generated).
func (t *worker) keep(r *stream.Record[topics.Prompt]) {
	p := r.Value
	what := fmt.Sprintf("turn %d of %s%s", p.Turn, p.ID, origin(p))
	var in, out []uint32
	switch p.Origin {
	case topics.OriginResult, topics.OriginRecord:
		in, out = p.InputIDs, p.OutputIDs
	case topics.OriginDataset:
		if p.Reply == nil {
			r.Reject("no_reply", fmt.Sprintf("%s: a row of the dataset's own reply without the reply", what), nil)
			return
		}
		start := time.Now()
		var err error
		in, out, err = t.m.EncodeReply(p, *p.Reply)
		t.encode.Observe(time.Since(start).Seconds())
		if err != nil {
			class := "template"
			var re *ReplyError
			if errors.As(err, &re) && re.Class != "" {
				class = string(re.Class)
			}
			r.Reject(class, fmt.Sprintf("%s: the dataset's reply cannot be kept: %v", what, err), nil)
			return
		}
	default:
		r.Reject("unknown_origin", fmt.Sprintf("%s: unknown origin %q (want one of %s)", what, p.Origin, strings.Join(topics.Origins(), ", ")), nil)
		return
	}
	if class, reason := t.checkKept(in, out); class != "" {
		r.Reject(class, what+": "+reason, nil)
		return
	}
	rec := &topics.Tokenized{ID: p.ID, Dataset: p.Dataset, Turn: p.Turn, Sampling: p.Sampling, Source: p.Source,
		Model: t.name, TokenizerHash: t.m.Hash, InputIDs: in, OutputIDs: out, Origin: p.Origin, FinishReason: p.FinishReason}
	r.Produce(t.out, r.Key(), rec, stream.Outcome{Result: resultTokenized, Tokens: len(in)})
}

// checkKept returns the class and reason why a kept row's prompt ids in and output ids out cannot be a row of
// this model, or "" when they can.
func (t *worker) checkKept(in, out []uint32) (class, reason string) {
	switch {
	case len(in) == 0:
		return "empty_prompt", "no prompt ids"
	case len(out) == 0:
		return "empty_output", "no output ids"
	}
	vocab := t.m.Tokenizer.VocabSize()
	for _, part := range []struct {
		name string
		ids  []uint32
	}{{"prompt", in}, {"output", out}} {
		for i, id := range part.ids {
			if int64(id) >= int64(vocab) {
				return "out_of_vocabulary", fmt.Sprintf("%s id %d (at %d) is outside the vocabulary of model %s (%d ids): "+
					"the ids are not this model's", part.name, id, i, t.name, vocab)
			}
		}
	}
	if n := len(in) + len(out); n > t.ctxLen {
		return "too_long", fmt.Sprintf("%d prompt and %d output tokens (%d) do not fit the model context of %d tokens", len(in), len(out), n, t.ctxLen)
	}
	return "", ""
}
