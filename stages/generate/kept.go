package generate

import (
	"cmp"

	"github.com/draftflow/draftflow/kafka/stream"
	"github.com/draftflow/draftflow/topics"
)

// keep produces the Generation of a record whose output was brought in with it: its prompt and output ids as
// they are, its origin, the finish reason its source gave (else "stop"), the run's sampling (so it is a row of
// the same run as the generated ones), stop reason end (no later turn is built from it). It is not sent to a
// server, not looked up in the shards (the sink drops a copy already written) and not journaled as an answer.
func (s *stage) keep(r *record, sampling topics.Sampling) {
	t := r.Value
	if len(t.OutputIDs) == 0 {
		r.Reject("empty_output", "row brought in with an empty output (no output ids)", nil)
		return
	}
	g := &topics.Generation{
		ID: t.ID, Dataset: t.Dataset, Turn: t.Turn, Sampling: sampling, Source: t.Source,
		Model: t.Model, TokenizerHash: t.TokenizerHash,
		PromptIDs: t.InputIDs, OutputIDs: t.OutputIDs,
		Meta: topics.GenerationMeta{
			FinishReason:     cmp.Or(t.FinishReason, "stop"),
			PromptTokens:     len(t.InputIDs),
			CompletionTokens: len(t.OutputIDs),
		},
		StopReason: topics.StopEnd,
		Origin:     t.Origin,
	}
	r.Produce(s.gen, g.ID, g, stream.Outcome{Result: resultKept, Tokens: len(g.OutputIDs)})
}
