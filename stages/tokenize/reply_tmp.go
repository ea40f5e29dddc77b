package tokenize

import (
	"slices"

	"github.com/draftflow/draftflow/stages/tokenize/chattemplate"
	"github.com/draftflow/draftflow/topics"
)

// This file stands in for EncodeReply (stages/tokenize/reply.go, written on another branch) so that the
// tokenize stage's kept rows build and run before it lands; it is deleted when that branch is merged.

// ReplyClass is the short, stable name of why a kept reply cannot be a row (topics.Rejection.Class).
type ReplyClass string

// ReplyError is why EncodeReply refuses a reply: its class and, in words a user can act on, the reason.
type ReplyError struct {
	Class  ReplyClass
	Reason string
	// Err is the chat template's error, else nil.
	Err error
}

func (e *ReplyError) Error() string {
	if e.Err != nil {
		return e.Reason + ": " + e.Err.Error()
	}
	return e.Reason
}

func (e *ReplyError) Unwrap() error { return e.Err }

// EncodeReply returns the ids of a kept assistant reply: prompt is Encode(p) (the history with the generation
// prompt), output the ids the chat template renders for reply after it: those of the history with the reply,
// rendered without a generation prompt, after the prompt's ids. A rendering whose ids do not extend the prompt's
// is refused with a *ReplyError.
func (m *Model) EncodeReply(p *topics.Prompt, reply topics.Message) (prompt, output []uint32, err error) {
	prompt, err = m.Encode(p)
	if err != nil {
		return nil, nil, &ReplyError{Class: "template", Reason: "the history with the generation prompt", Err: err}
	}
	text, err := m.Render(chattemplate.Input{
		Messages: templateMessages(append(slices.Clone(p.Messages), reply)),
		Tools:    p.Tools,
		Kwargs:   p.Sampling.TemplateKwargs,
	})
	if err != nil {
		return nil, nil, &ReplyError{Class: "template", Reason: "the history with the reply", Err: err}
	}
	full := m.Tokenizer.Encode(text)
	if len(full) <= len(prompt) || !slices.Equal(full[:len(prompt)], prompt) {
		return nil, nil, &ReplyError{Class: "reply_rewrites_prompt",
			Reason: "the chat template's rendering of the conversation with the reply does not extend the prompt"}
	}
	return prompt, full[len(prompt):], nil
}
