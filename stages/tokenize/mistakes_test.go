package tokenize

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/draftflow/draftflow/internal/testutil"
	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/topics"
)

// toolBlindTemplate shows no tools and, like several real templates, looks for a tag in an assistant's
// content, which fails on a None content.
const toolBlindTemplate = `{%- for message in messages %}<|{{ message.role }}|>` +
	`{%- if message.role == 'assistant' and '<think>' in message.content %}T{% endif %}{{ message.content }}
{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}`

// TestStageNamesTemplateErrorsAndWarnsOfIgnoredTools: a template error names the prompt, its source line,
// the message index and the field, once ("chat template" once); a dataset whose tools the template leaves out
// gets one warning, however many of its prompts have tools, and a dataset without tools none.
func TestStageNamesTemplateErrorsAndWarnsOfIgnoredTools(t *testing.T) {
	dir := bundledDir(t, func(dir string) { writeFile(t, filepath.Join(dir, "chat_template.jinja"), toolBlindTemplate) })
	m, err := LoadModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	kc := kafkatest.Config(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	in := kafkatest.Client(t, kc).NewProducer(topics.TopicPrompts, kafka.ProducerConfig{})
	tools := json.RawMessage(`[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]`)
	send := func(p *topics.Prompt) {
		if err := in.SendSync(ctx, p.ID, kafkatest.Encode(t, p)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		send(&topics.Prompt{ID: fmt.Sprintf("bfcl-%d", i), Dataset: "bfcl", Tools: tools, Sampling: topics.Sampling{MaxNewTokens: 10},
			Messages: []topics.Message{{Role: "user", Content: "weather?"}}})
		send(&topics.Prompt{ID: fmt.Sprintf("chat-%d", i), Dataset: "chat", Sampling: topics.Sampling{MaxNewTokens: 10},
			Messages: []topics.Message{{Role: "user", Content: "hi"}}})
	}
	send(&topics.Prompt{ID: "nullcontent", Dataset: "chat", Sampling: topics.Sampling{MaxNewTokens: 10},
		Source:   topics.Source{File: "calls.jsonl", Line: 7},
		Messages: []topics.Message{{Role: "user", Content: "q"}, {Role: "assistant", ContentNull: true}, {Role: "user", Content: "again"}}})
	in.Close()

	var logs testutil.Buffer
	stageCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	cfg := Config{Client: kafkatest.Client(t, kc), Model: m, ContextLength: 256, Workers: 2, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	go func() { done <- Run(stageCtx, cfg) }()
	n := kafkatest.Size(t, kc, topics.TopicTokenized)
	for ; n < 8; n = kafkatest.Size(t, kc, topics.TopicTokenized) {
		if ctx.Err() != nil {
			t.Fatalf("%d of 8 prompts tokenized", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	rejs := kafkatest.Collect[topics.Rejection](t, kc, topics.TopicRejected, 1, 30*time.Second)
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(rejs) != 1 {
		t.Fatalf("%d rejections, want 1", len(rejs))
	}
	reason := rejs[0].Reason
	for _, want := range []string{"nullcontent", "calls.jsonl line 7", "NoneType", "messages[1].content, which is None"} {
		if !strings.Contains(reason, want) {
			t.Errorf("reason %q does not name %q", reason, want)
		}
	}
	if strings.Count(reason, "chat template") != 1 {
		t.Errorf("reason %q says \"chat template\" more than once", reason)
	}
	out := logs.String()
	if c := strings.Count(out, "ignores tools"); c != 1 || !strings.Contains(out, "dataset=bfcl") {
		t.Errorf("%d warnings that the template ignores tools, want 1 for bfcl:\n%s", c, out)
	}
}
