package tokenize

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/draftflow/draftflow/kafka"

	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/stages/tokenize/tokenizer/bundled"
	"github.com/draftflow/draftflow/topics"
)

func bundledModel(t *testing.T) *Model {
	t.Helper()
	dir := t.TempDir()
	if err := bundled.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	m, err := LoadModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestLoadModelBundled(t *testing.T) {
	m := bundledModel(t)
	if m.ContextLength != 32768 {
		t.Errorf("context length %d", m.ContextLength)
	}
	if len(m.EOSTokenIDs) == 0 {
		t.Error("no EOS ids")
	}
	for _, id := range m.EOSTokenIDs {
		if !m.Tokenizer.IsSpecial(id) {
			t.Errorf("EOS id %d is not a special token", id)
		}
	}
	if m.SpecialTokenStart <= 0 || m.SpecialTokenStart >= m.Tokenizer.VocabSize() {
		t.Errorf("special token start %d of %d", m.SpecialTokenStart, m.Tokenizer.VocabSize())
	}
	ids, err := m.Encode(&topics.Prompt{Messages: []topics.Message{{Role: "user", Content: "hello"}}})
	if err != nil {
		t.Fatal(err)
	}
	// The rendered prompt must end with the generation prompt (assistant header), tokenized exactly.
	text := m.Tokenizer.Decode(ids)
	if !strings.Contains(text, "hello") || !strings.HasSuffix(text, "<|im_start|>assistant\n") {
		t.Fatalf("rendered prompt %q", text)
	}
}

// The stage produces exactly the model's ids, and dead-letters over-long and undecodable prompts with reasons.
func TestStageTokenizesAndRejects(t *testing.T) {
	kc := kafkatest.Config(t, 3)
	cl := kafkatest.Client(t, kc)
	m := bundledModel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	in := cl.NewProducer(topics.TopicPrompts, kafka.ProducerConfig{})
	prompts := map[string]*topics.Prompt{}
	for i := 0; i < 40; i++ {
		p := &topics.Prompt{ID: fmt.Sprintf("p%d", i), Dataset: "d", Sampling: topics.Sampling{MaxNewTokens: 100},
			Messages: []topics.Message{{Role: "user", Content: strings.Repeat("word ", i)}}}
		if i == 39 {
			p.Messages[0].Content = strings.Repeat("long text ", 200) // over the 256-token test context
		}
		prompts[p.ID] = p
		if err := in.SendSync(ctx, p.ID, kafkatest.Encode(t, p)); err != nil {
			t.Fatal(err)
		}
	}
	if err := in.Send(ctx, "junk", []byte("not a record"), nil); err != nil {
		t.Fatal(err)
	}
	in.Close()

	stageCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- Run(stageCtx, Config{Client: cl, Model: m, ContextLength: 256, Workers: 2}) }()

	var mu sync.Mutex
	got := map[string][]uint32{}
	var rejected []topics.Rejection
	check := func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 39 && len(rejected) == 2 }
	readAll := func(topic string, fn func(*kafka.Delivery)) {
		c := cl.NewConsumer(topic, kafka.ConsumerConfig{Group: "reader-" + topic})
		go c.Run(stageCtx, func(d *kafka.Delivery) { fn(d); d.Done() })
	}
	readAll(topics.TopicTokenized, func(d *kafka.Delivery) {
		var r topics.Tokenized
		if err := topics.Unmarshal(d.Message.Value, &r); err != nil {
			t.Error(err)
		}
		mu.Lock()
		got[r.ID] = r.InputIDs
		mu.Unlock()
		if r.Model != m.Name || r.TokenizerHash != m.Hash || r.Dataset != "d" || r.Sampling.MaxNewTokens != 100 {
			t.Errorf("record %s lost fields: %+v", r.ID, r)
		}
	})
	readAll(topics.TopicRejected, func(d *kafka.Delivery) {
		var r topics.Rejection
		if err := topics.Unmarshal(d.Message.Value, &r); err != nil {
			t.Error(err)
		}
		mu.Lock()
		rejected = append(rejected, r)
		mu.Unlock()
	})
	for !check() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out: %d tokenized, %d rejected", len(got), len(rejected))
		case <-time.After(50 * time.Millisecond):
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for id, ids := range got {
		want, err := m.Encode(prompts[id])
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(ids) != fmt.Sprint(want) {
			t.Errorf("%s: stage ids %v, model ids %v", id, ids, want)
		}
	}
	var reasons []string
	for _, r := range rejected {
		if r.Stage != "tokenize" || r.Topic == "" {
			t.Errorf("rejection without stage/location: %+v", r)
		}
		reasons = append(reasons, r.ID+": "+r.Reason)
	}
	joined := strings.Join(reasons, "\n")
	if !strings.Contains(joined, "p39: prompt p39") || !strings.Contains(joined, "does not fit the model context of 256 tokens") {
		t.Errorf("over-long prompt not rejected with its reason:\n%s", joined)
	}
	if !strings.Contains(joined, "undecodable prompt") {
		t.Errorf("junk record not rejected as undecodable:\n%s", joined)
	}
}

// A prompt whose record would exceed the message limit is dead-lettered, not retried forever.
func TestStageRejectsOversizedRecord(t *testing.T) {
	big := kafkatest.Config(t, 1) // topics accept 8 MiB
	kc := big
	kc.MaxMessageBytes = 8 << 10 // the stage's writers send at most 8 KiB
	m := bundledModel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	in := kafkatest.Client(t, big).NewProducer(topics.TopicPrompts, kafka.ProducerConfig{})
	for _, p := range []*topics.Prompt{
		{ID: "small", Messages: []topics.Message{{Role: "user", Content: "hi"}}},
		{ID: "huge", Messages: []topics.Message{{Role: "user", Content: strings.Repeat("lorem ipsum dolor ", 2000)}}},
	} {
		if err := in.SendSync(ctx, p.ID, kafkatest.Encode(t, p)); err != nil {
			t.Fatal(err)
		}
	}
	in.Close()
	stageCtx, stop := context.WithCancel(ctx)
	defer stop()
	stageCl := kafkatest.Client(t, kc)
	go Run(stageCtx, Config{Client: stageCl, Model: m})
	joined := stageOutputs(t, ctx, stageCtx, kc, nil, 2)
	if !strings.Contains(joined, "tokenized small") || !strings.Contains(joined, "rejected huge") ||
		!strings.Contains(joined, "over the 8192-byte limit") {
		t.Fatalf("got:\n%s", joined)
	}
}

// A prompt whose record the broker refuses (the existing tokenized topic accepts less than the stage's writers
// send) is dead-lettered like one over the client-side limit, and the stage goes on.
func TestStageRejectsRecordRefusedByBroker(t *testing.T) {
	base := kafkatest.Config(t, 1)
	kc := base
	kc.Namespace += "-small"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := kafkatest.Client(t, kc).Admin().EnsureTopics(ctx, topics.TopicPrompts); err != nil {
		t.Fatal(err)
	}
	kc.MaxMessageBytes = 16 << 10 // the other topics are created with max.message.bytes 16 KiB ...
	if err := kafkatest.Client(t, kc).Admin().EnsureTopics(ctx, topics.Retained()...); err != nil {
		t.Fatal(err)
	}
	kc.MaxMessageBytes = 0 // ... and written by a stage whose writers send up to 8 MiB
	m := bundledModel(t)
	in := kafkatest.Client(t, kc).NewProducer(topics.TopicPrompts, kafka.ProducerConfig{})
	// Random letters: thousands of tokens whose ids zstd cannot squeeze under 16 KiB.
	r := rand.New(rand.NewPCG(1, 2))
	text := make([]byte, 40000)
	for i := range text {
		text[i] = "abcdefghijklmnopqrstuvwxyz     "[r.IntN(31)]
	}
	for _, p := range []*topics.Prompt{
		{ID: "huge", Messages: []topics.Message{{Role: "user", Content: string(text)}}},
		{ID: "small", Messages: []topics.Message{{Role: "user", Content: "hi"}}},
	} {
		if err := in.SendSync(ctx, p.ID, kafkatest.Encode(t, p)); err != nil {
			t.Fatal(err)
		}
	}
	in.Close()
	stageCtx, stop := context.WithCancel(ctx)
	defer stop()
	stageErr := make(chan error, 1)
	stageCl := kafkatest.Client(t, kc)
	go func() { stageErr <- Run(stageCtx, Config{Client: stageCl, Model: m}) }()
	joined := stageOutputs(t, ctx, stageCtx, kc, stageErr, 2)
	if !strings.Contains(joined, "tokenized small") || !strings.Contains(joined, "rejected huge") ||
		!strings.Contains(joined, "16384-byte max.message.bytes") {
		t.Fatalf("got:\n%s", joined)
	}
}

// stageOutputs reads the tokenized and rejected topics (as "tokenized ID" and "rejected ID: reason" lines)
// until n records arrived, and returns them joined by newlines. It fails the test when ctx ends first or the
// stage stops (an error on stageErr; nil: not watched).
func stageOutputs(t *testing.T, ctx, stageCtx context.Context, kc kafka.Config, stageErr <-chan error, n int) string {
	t.Helper()
	got := make(chan string, 2*n)
	for _, topic := range []string{topics.TopicTokenized, topics.TopicRejected} {
		c := kafkatest.Client(t, kc).NewConsumer(topic, kafka.ConsumerConfig{Group: "r-" + topic})
		go c.Run(stageCtx, func(d *kafka.Delivery) {
			var r topics.Rejection
			var tk topics.Tokenized
			if topics.Unmarshal(d.Message.Value, &r) == nil {
				got <- "rejected " + r.ID + ": " + r.Reason
			} else if topics.Unmarshal(d.Message.Value, &tk) == nil {
				got <- "tokenized " + tk.ID
			}
			d.Done()
		})
	}
	var seen []string
	for len(seen) < n {
		select {
		case s := <-got:
			seen = append(seen, s)
		case err := <-stageErr:
			t.Fatalf("stage stopped: %v; saw %v", err, seen)
		case <-ctx.Done():
			t.Fatalf("timed out; saw %v", seen)
		}
	}
	return strings.Join(seen, "\n")
}
