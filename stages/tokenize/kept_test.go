package tokenize

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/topics"
)

// Rows brought in with their output: ids are kept as they are, the dataset's reply is rendered after the
// prompt as EncodeReply renders it, and rows that are not this model's (an id outside the vocabulary), empty,
// or longer than the context window are dead-lettered with the reason, their turn and their origin.
func TestStageKeepsRows(t *testing.T) {
	kc := kafkatest.Config(t, 2)
	cl := kafkatest.Client(t, kc)
	m := bundledModel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	vocab := uint32(m.Tokenizer.VocabSize())
	user := topics.Message{Role: "user", Content: "what is two and two"}
	reply := topics.Message{Role: "assistant", Content: "four"}
	good := []*topics.Prompt{
		{ID: "res", Dataset: "d", Origin: topics.OriginResult, FinishReason: "length", InputIDs: []uint32{1, 2, 3}, OutputIDs: []uint32{4, vocab - 1}},
		{ID: "rec", Dataset: "d", Turn: 1, Origin: topics.OriginRecord, InputIDs: []uint32{5, 6}, OutputIDs: []uint32{7}},
		{ID: "chat", Dataset: "d", Turn: 0, Origin: topics.OriginDataset, Messages: []topics.Message{user}, Reply: &reply},
		{ID: "gen", Dataset: "d", Origin: topics.OriginGenerated, Messages: []topics.Message{user}},
	}
	bad := map[string]*topics.Prompt{
		"out_of_vocabulary": {ID: "vocab", Turn: 2, Origin: topics.OriginResult, InputIDs: []uint32{1}, OutputIDs: []uint32{2, vocab}},
		"empty_output":      {ID: "empty", Origin: topics.OriginRecord, InputIDs: []uint32{1}},
		"empty_prompt":      {ID: "noprompt", Origin: topics.OriginRecord, OutputIDs: []uint32{1}},
		"too_long":          {ID: "long", Origin: topics.OriginRecord, InputIDs: make([]uint32, 200), OutputIDs: make([]uint32, 57)},
		"no_reply":          {ID: "noreply", Turn: 1, Origin: topics.OriginDataset, Messages: []topics.Message{user}},
		"unknown_origin":    {ID: "odd", Origin: "imported", InputIDs: []uint32{1}, OutputIDs: []uint32{2}},
	}
	in := cl.NewProducer(topics.TopicPrompts, kafka.ProducerConfig{})
	for _, p := range append(slices.Clone(good), valuesOf(bad)...) {
		if err := in.SendSync(ctx, p.ID, kafkatest.Encode(t, p)); err != nil {
			t.Fatal(err)
		}
	}
	in.Close()
	stageCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- Run(stageCtx, Config{Client: cl, Model: m, ContextLength: 256, Workers: 2}) }()
	toks := kafkatest.Collect[topics.Tokenized](t, kc, topics.TopicTokenized, len(good), 30*time.Second)
	rejs := kafkatest.Collect[topics.Rejection](t, kc, topics.TopicRejected, len(bad), 30*time.Second)
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	byID := map[string]*topics.Tokenized{}
	for _, tk := range toks {
		byID[tk.ID] = tk
	}
	for _, p := range good {
		tk := byID[p.ID]
		if tk == nil {
			t.Fatalf("no tokenized record of %s", p.ID)
		}
		wantIn, wantOut := p.InputIDs, p.OutputIDs
		switch p.Origin {
		case topics.OriginDataset:
			var err error
			if wantIn, wantOut, err = m.EncodeReply(p, *p.Reply); err != nil {
				t.Fatal(err)
			}
		case topics.OriginGenerated:
			wantIn, _ = m.Encode(p)
			wantOut = nil
		}
		if !slices.Equal(tk.InputIDs, wantIn) || !slices.Equal(tk.OutputIDs, wantOut) || topics.OriginOf(tk.Origin) != topics.OriginOf(p.Origin) ||
			tk.FinishReason != p.FinishReason || tk.Turn != p.Turn || tk.Model != m.Name || tk.TokenizerHash != m.Hash {
			t.Errorf("%s: %+v (in %v out %v), want in %v out %v", p.ID, tk, tk.InputIDs, tk.OutputIDs, wantIn, wantOut)
		}
	}
	if tk := byID["chat"]; tk != nil && !strings.Contains(m.Tokenizer.Decode(tk.OutputIDs), "four") {
		t.Errorf("the dataset's reply renders as %q", m.Tokenizer.Decode(tk.OutputIDs))
	}
	got := map[string]*topics.Rejection{}
	for _, r := range rejs {
		got[r.ID] = r
	}
	for class, p := range bad {
		r := got[p.ID]
		if r == nil || r.Class != class || r.Stage != "tokenize" || r.Turn != p.Turn || r.Origin != p.Origin ||
			!strings.Contains(r.Reason, fmt.Sprintf("turn %d of %s", p.Turn, p.ID)) {
			t.Errorf("%s: rejection %+v, want class %s naming turn %d", p.ID, r, class, p.Turn)
		}
	}
	if r := got["vocab"]; r != nil && !strings.Contains(r.Reason, fmt.Sprintf("output id %d (at 1) is outside the vocabulary", vocab)) {
		t.Errorf("out-of-vocabulary reason: %s", r.Reason)
	}
}

func valuesOf(m map[string]*topics.Prompt) []*topics.Prompt {
	var out []*topics.Prompt
	for _, p := range m {
		out = append(out, p)
	}
	return out
}
