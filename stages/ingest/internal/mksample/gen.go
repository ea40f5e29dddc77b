package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/draftflow/draftflow/stages/ingest"
)

// sampleFile is the data file name, also the sample's dataset name ("conversations").
const sampleFile = "conversations.jsonl"

// validCount is the number of valid conversations; malformed lines are interleaved at malformedAt.
const validCount = 300

// msg is a message in OpenAI shape. Field order is the JSON key order of the file.
type msg struct {
	Role             string `json:"role"`
	Content          any    `json:"content"`
	ReasoningContent string `json:"reasoning_content,omitempty"`
	ToolCalls        []call `json:"tool_calls,omitempty"`
	ToolCallID       string `json:"tool_call_id,omitempty"`
	Name             string `json:"name,omitempty"`
}

type part struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type call struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function fnCall `json:"function"`
}

type fnCall struct {
	Name      string         `json:"name"`
	Arguments map[string]any `json:"arguments"`
}

type row struct {
	ID       any    `json:"id,omitempty"`
	Messages []msg  `json:"messages"`
	Tools    []tool `json:"tools,omitempty"`
}

type shareGPTTurn struct {
	From  string `json:"from"`
	Value string `json:"value"`
}

type shareGPTRow struct {
	ID            any            `json:"id,omitempty"`
	Conversations []shareGPTTurn `json:"conversations"`
	Tools         string         `json:"tools,omitempty"` // glaive-style: the schema list as a JSON string
}

type tool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string         `json:"name"`
		Description string         `json:"description"`
		Parameters  map[string]any `json:"parameters"`
	} `json:"function"`
}

// malformed lines: position (1-based line) and content builder.
var malformedAt = []struct {
	line   int64
	reason ingest.Reason
	why    string
	text   string
}{
	{17, ingest.ReasonInvalidJSON, "invalid JSON: the line is cut off in the middle of a string",
		`{"id": "broken-json", "messages": [{"role": "user", "content": "What is the capital of`},
	{58, ingest.ReasonUnknownRole, "unknown role \"wizard\" in the second message",
		`{"id": "bad-role", "messages": [{"role": "user", "content": "Cast a spell."}, {"role": "wizard", "content": "Abracadabra."}, {"role": "user", "content": "Again?"}]}`},
	{121, ingest.ReasonEmptyConversation, "empty conversation: \"messages\" is an empty list",
		`{"id": "empty-conversation", "messages": []}`},
	{170, ingest.ReasonInvalidUTF8, "invalid UTF-8: raw bytes 0xff 0xfe inside the user message",
		"{\"id\": \"bad-utf8\", \"messages\": [{\"role\": \"user\", \"content\": \"caf\xff\xfe au lait?\"}]}"},
	{233, ingest.ReasonNoUserMessage, "no user message: only a system prompt and an assistant turn",
		`{"id": "no-user", "messages": [{"role": "system", "content": "You are terse."}, {"role": "assistant", "content": "Hello."}]}`},
	{288, ingest.ReasonUnsupportedContent, "unsupported content: an image_url content part (only text is supported)",
		`{"id": "image-part", "messages": [{"role": "user", "content": [{"type": "text", "text": "Describe this picture."}, {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]}]}`},
}

func generate() sample {
	g := &gen{r: rand.New(rand.NewPCG(2024, 7))}
	var valid [][]byte
	for i := 0; i < validCount; i++ {
		valid = append(valid, g.conversation(i))
	}
	var buf bytes.Buffer
	exp := Expected{File: sampleFile}
	line := int64(0)
	mi := 0
	for vi := 0; vi < len(valid) || mi < len(malformedAt); {
		line++
		var data []byte
		if mi < len(malformedAt) && malformedAt[mi].line == line {
			m := malformedAt[mi]
			mi++
			data = []byte(m.text)
			if _, err := ingest.Parse(sampleFile, line, data, "conversations"); ingest.ReasonOf(err) != m.reason {
				panic(fmt.Sprintf("malformed line %d: ingest says %v, want reason %s", line, err, m.reason))
			}
			exp.MalformedLines = append(exp.MalformedLines, line)
			exp.Malformed = append(exp.Malformed, Malformed{Line: line, Reason: string(m.reason), Why: m.why})
		} else {
			data = valid[vi]
			vi++
			p, err := ingest.Parse(sampleFile, line, data, "conversations")
			if err != nil {
				panic(fmt.Sprintf("valid line %d rejected: %v\n%s", line, err, data))
			}
			exp.IDs = append(exp.IDs, p.ID)
		}
		buf.Write(data)
		buf.WriteByte('\n')
	}
	exp.Lines = int(line)
	exp.Valid = len(exp.IDs)
	seen := map[string]bool{}
	for _, id := range exp.IDs {
		if seen[id] {
			panic("duplicate id " + id)
		}
		seen[id] = true
	}
	return sample{jsonl: buf.Bytes(), exp: exp}
}

type gen struct {
	r *rand.Rand
}

func (g *gen) pick(xs []string) string { return xs[g.r.IntN(len(xs))] }

func marshal(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err)
	}
	return bytes.TrimRight(b.Bytes(), "\n")
}

// id returns the i-th conversation's id: mostly strings, some numbers, some absent (content hash).
func (g *gen) id(i int) any {
	switch i % 10 {
	case 3, 7:
		return nil
	case 5:
		return 100000 + i
	}
	return fmt.Sprintf("sample-%04d", i)
}

// conversation builds the i-th valid line; the kind rotates so every shape is spread over the file.
func (g *gen) conversation(i int) []byte {
	id := g.id(i)
	switch {
	case i%60 == 59:
		return marshal(row{ID: id, Messages: g.long(i)})
	case i%10 == 1:
		return marshal(row{ID: id, Messages: g.withSystem(i)})
	case i%10 == 2:
		return marshal(row{ID: id, Messages: g.multiTurn(i, false)})
	case i%10 == 4:
		msgs, tools := g.toolUse(i)
		return marshal(row{ID: id, Messages: msgs, Tools: tools})
	case i%10 == 6:
		return marshal(row{ID: id, Messages: g.multiTurn(i, true)})
	case i%10 == 8:
		return marshal(g.shareGPT(i, id))
	case i%20 == 9:
		return marshal(row{ID: id, Messages: g.cjk(i)})
	case i%20 == 19:
		return marshal(row{ID: id, Messages: g.code(i)})
	case i%30 == 0:
		// content as a list of text parts
		return marshal(row{ID: id, Messages: []msg{{Role: "user", Content: []part{
			{Type: "text", Text: g.question(i)}, {Type: "text", Text: "Answer in " + g.pick(styles) + "."}}}}})
	}
	return marshal(row{ID: id, Messages: []msg{{Role: "user", Content: g.question(i)}}})
}

func (g *gen) question(i int) string {
	t := templates[g.r.IntN(len(templates))]
	q := fmt.Sprintf(t, g.pick(subjects), g.pick(contexts))
	if g.r.IntN(3) == 0 {
		q += " " + g.sentences(1+g.r.IntN(3))
	}
	return fmt.Sprintf("%s (#%d)", q, i)
}

func (g *gen) sentences(n int) string {
	var b strings.Builder
	for s := 0; s < n; s++ {
		if s > 0 {
			b.WriteByte(' ')
		}
		words := 6 + g.r.IntN(14)
		for w := 0; w < words; w++ {
			word := g.pick(vocab)
			if w == 0 {
				word = strings.ToUpper(word[:1]) + word[1:]
			} else {
				b.WriteByte(' ')
			}
			b.WriteString(word)
		}
		b.WriteByte('.')
	}
	return b.String()
}

func (g *gen) answer() string {
	return g.sentences(2 + g.r.IntN(6))
}

func (g *gen) withSystem(i int) []msg {
	return []msg{
		{Role: "system", Content: g.pick(systemPrompts)},
		{Role: "user", Content: g.question(i)},
	}
}

// multiTurn has 2-4 user turns; the last user turn is sometimes followed by an assistant answer, which
// ingest drops. With reasoning, earlier assistant turns carry reasoning_content.
func (g *gen) multiTurn(i int, reasoning bool) []msg {
	var msgs []msg
	if g.r.IntN(2) == 0 {
		msgs = append(msgs, msg{Role: "system", Content: g.pick(systemPrompts)})
	}
	turns := 2 + g.r.IntN(3)
	for t := 0; t < turns; t++ {
		q := g.question(i*10 + t)
		if t > 0 {
			q = g.pick(followUps) + " " + q
		}
		msgs = append(msgs, msg{Role: "user", Content: q})
		if t < turns-1 || g.r.IntN(2) == 0 {
			a := msg{Role: "assistant", Content: g.answer()}
			if reasoning {
				a.ReasoningContent = "Let me think. " + g.sentences(2+g.r.IntN(4))
			}
			msgs = append(msgs, a)
		}
	}
	return msgs
}

func (g *gen) toolUse(i int) ([]msg, []tool) {
	tools := []tool{weatherTool(), searchTool()}
	city := g.pick(cities)
	callID := fmt.Sprintf("call_%d", i)
	msgs := []msg{
		{Role: "system", Content: "You can call tools. Use them when they help."},
		{Role: "user", Content: fmt.Sprintf("What's the weather like in %s today? (#%d)", city, i)},
		{Role: "assistant", Content: "", ToolCalls: []call{{ID: callID, Type: "function",
			Function: fnCall{Name: "get_weather", Arguments: map[string]any{"city": city, "unit": "celsius"}}}}},
		{Role: "tool", ToolCallID: callID, Name: "get_weather",
			Content: fmt.Sprintf(`{"city": %q, "temperature": %d, "condition": %q}`, city, g.r.IntN(35), g.pick(conditions))},
	}
	if i%20 == 4 {
		// The conversation ends after the tool result and the answer: the prompt keeps only up to the user.
		msgs = append(msgs, msg{Role: "assistant", Content: "It is " + g.pick(conditions) + " in " + city + "."})
		return msgs, tools
	}
	// Otherwise the user follows up, so the tool exchange is part of the prompt.
	msgs = append(msgs,
		msg{Role: "assistant", Content: "It is " + g.pick(conditions) + " in " + city + " right now."},
		msg{Role: "user", Content: "Search the web for things to do there this weekend."},
	)
	return msgs, tools
}

func (g *gen) shareGPT(i int, id any) shareGPTRow {
	r := shareGPTRow{ID: id}
	if i%40 == 18 {
		// glaive-style function calling
		r.Tools = `[{"name": "convert_currency", "description": "Convert an amount between currencies", "parameters": {"type": "object", "properties": {"amount": {"type": "number"}, "from": {"type": "string"}, "to": {"type": "string"}}, "required": ["amount", "from", "to"]}}]`
		amount := 10 + g.r.IntN(990)
		r.Conversations = []shareGPTTurn{
			{From: "system", Value: "You are a helpful assistant with access to functions."},
			{From: "human", Value: fmt.Sprintf("How much is %d USD in EUR? (#%d)", amount, i)},
			{From: "function_call", Value: fmt.Sprintf(`{"name": "convert_currency", "arguments": {"amount": %d, "from": "USD", "to": "EUR"}}`, amount)},
			{From: "observation", Value: fmt.Sprintf(`{"converted_amount": %.2f}`, float64(amount)*0.92)},
			{From: "gpt", Value: fmt.Sprintf("%d USD is about %.2f EUR.", amount, float64(amount)*0.92)},
			{From: "human", Value: "And in Japanese yen?"},
		}
		return r
	}
	if g.r.IntN(3) == 0 {
		r.Conversations = append(r.Conversations, shareGPTTurn{From: "system", Value: g.pick(systemPrompts)})
	}
	turns := 1 + g.r.IntN(3)
	for t := 0; t < turns; t++ {
		r.Conversations = append(r.Conversations, shareGPTTurn{From: "human", Value: g.question(i*10 + t)})
		r.Conversations = append(r.Conversations, shareGPTTurn{From: "gpt", Value: g.answer()})
	}
	return r
}

func (g *gen) cjk(i int) []msg {
	q := fmt.Sprintf("%s %s (#%d)", g.pick(cjkQuestions), g.pick(emoji), i)
	msgs := []msg{{Role: "user", Content: q}}
	if g.r.IntN(2) == 0 {
		msgs = []msg{
			{Role: "user", Content: "你好！" + g.pick(emoji)},
			{Role: "assistant", Content: "你好！有什么可以帮你的吗？😊"},
			{Role: "user", Content: q},
		}
	}
	return msgs
}

func (g *gen) code(i int) []msg {
	snippet := codeSnippets[g.r.IntN(len(codeSnippets))]
	return []msg{
		{Role: "system", Content: "You are an expert programmer. Answer with code blocks."},
		{Role: "user", Content: fmt.Sprintf("%s (#%d)\n\n```%s\n%s\n```", g.pick(codeAsks), i, snippet.lang, snippet.code)},
	}
}

// long is a conversation of several thousand words: a long document to summarise, or a long chat.
func (g *gen) long(i int) []msg {
	words := 2500 + g.r.IntN(3500)
	var b strings.Builder
	for n := 0; n < words; {
		s := g.sentences(1)
		b.WriteString(s)
		n += strings.Count(s, " ") + 1
		if g.r.IntN(8) == 0 {
			b.WriteString("\n\n")
		} else {
			b.WriteByte(' ')
		}
	}
	return []msg{
		{Role: "system", Content: "You summarise long documents faithfully."},
		{Role: "user", Content: fmt.Sprintf("Summarise the following report in five bullet points (#%d).\n\n%s", i, b.String())},
	}
}

func weatherTool() tool {
	var t tool
	t.Type = "function"
	t.Function.Name = "get_weather"
	t.Function.Description = "Get the current weather in a city"
	t.Function.Parameters = map[string]any{
		"type": "object",
		"properties": map[string]any{
			"city": map[string]any{"type": "string", "description": "City name"},
			"unit": map[string]any{"type": "string", "enum": []string{"celsius", "fahrenheit"}},
		},
		"required": []string{"city"},
	}
	return t
}

func searchTool() tool {
	var t tool
	t.Type = "function"
	t.Function.Name = "search_web"
	t.Function.Description = "Search the web and return the top results"
	t.Function.Parameters = map[string]any{
		"type":       "object",
		"properties": map[string]any{"query": map[string]any{"type": "string"}},
		"required":   []string{"query"},
	}
	return t
}
