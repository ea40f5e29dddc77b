package chattemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// ErrNoChatTemplate is returned by Load for a model directory that has no chat template.
var ErrNoChatTemplate = errors.New("no chat template")

// Template is a parsed chat template (or the set of named templates a model ships) with the
// special-token strings transformers passes to it. It is safe for concurrent use.
type Template struct {
	named   map[string]*parsed // "default", "tool_use", ...
	single  *parsed            // the only template, when the model has one
	special map[string]string  // bos_token, eos_token, ... (absent when unset)
	now     func() time.Time
}

// parsed is one template: its source and its statement tree.
type parsed struct {
	source string
	nodes  []node
}

// Message is one message of a conversation as apply_chat_template receives it. It reaches the
// template as a mapping with "role" and "content" (the ContentParts list when set, None when
// ContentNull, else the Content string) always present and "reasoning_content", "tool_calls"
// (decoded JSON, key order kept), "tool_call_id" and "name" only when set, in that order. The JSON
// names are those of the reference corpora in testdata.
type Message struct {
	// Role is the message's role: system, user, assistant, tool, or whatever the template knows.
	Role string `json:"role"`
	// Content is the message text, used when ContentParts is empty and ContentNull is false.
	Content string `json:"content"`
	// ContentParts, when set, is the content as a JSON list of parts (for example
	// [{"type": "text", "text": "..."}]); the template receives the decoded list.
	ContentParts json.RawMessage `json:"content_parts,omitempty"`
	// ContentNull makes the content None (when Content is empty), as for an assistant message that
	// only calls tools.
	ContentNull bool `json:"content_null,omitempty"`
	// ReasoningContent is an assistant's thinking.
	ReasoningContent string `json:"reasoning_content,omitempty"`
	// ToolCalls is an assistant's tool calls, a JSON list.
	ToolCalls json.RawMessage `json:"tool_calls,omitempty"`
	// ToolCallID links a tool result to the call it answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// Name is the tool name of a tool result, or a participant name.
	Name string `json:"name,omitempty"`
}

// Input is one render request: what apply_chat_template receives.
type Input struct {
	// Messages is the conversation.
	Messages []Message
	// Tools is the JSON list of tool schemas, or empty for none (the template then sees tools=None).
	Tools json.RawMessage
	// AddGenerationPrompt appends the assistant header.
	AddGenerationPrompt bool
	// Kwargs are extra template variables (for example enable_thinking); they override special
	// tokens of the same name. Values are JSON-like Go values; json.RawMessage values are decoded
	// keeping key order (Go maps are passed with sorted keys).
	Kwargs map[string]any
}

// Parse parses one chat template. bos and eos are the bos_token and eos_token strings; an empty
// string leaves the variable undefined, as transformers does for an unset token.
func Parse(source string, bos, eos string) (*Template, error) {
	c, err := parseSource(source)
	if err != nil {
		return nil, err
	}
	special := map[string]string{}
	if bos != "" {
		special["bos_token"] = bos
	}
	if eos != "" {
		special["eos_token"] = eos
	}
	return &Template{single: c, special: special, now: time.Now}, nil
}

// parseSource lexes and parses one template.
func parseSource(source string) (*parsed, error) {
	items, err := lex(source)
	if err != nil {
		return nil, err
	}
	nodes, err := buildTree(items)
	if err != nil {
		return nil, err
	}
	return &parsed{source: source, nodes: nodes}, nil
}

// specialTokenKeys are the tokenizer_config.json entries transformers exposes to chat templates.
var specialTokenKeys = []string{"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}

// Load reads a model directory's chat template the way transformers' AutoTokenizer does:
// chat_template.jinja and additional_chat_templates/*.jinja take priority over the chat_template
// entry of tokenizer_config.json (a string, or a list of {name, template}). The special-token
// strings come from tokenizer_config.json (plain strings or AddedToken objects).
func Load(modelDir string) (*Template, error) {
	cfg := map[string]json.RawMessage{}
	if data, err := os.ReadFile(filepath.Join(modelDir, "tokenizer_config.json")); err == nil {
		if err := json.Unmarshal(data, &cfg); err != nil {
			return nil, fmt.Errorf("chattemplate: %s/tokenizer_config.json: %w", modelDir, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("chattemplate: %w", err)
	}

	sources := map[string]string{}
	if data, err := os.ReadFile(filepath.Join(modelDir, "chat_template.jinja")); err == nil {
		sources["default"] = string(data)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("chattemplate: %w", err)
	}
	extra, _ := filepath.Glob(filepath.Join(modelDir, "additional_chat_templates", "*.jinja"))
	for _, f := range extra {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("chattemplate: %w", err)
		}
		sources[strings.TrimSuffix(filepath.Base(f), ".jinja")] = string(data)
	}
	single := ""
	hasSingle := false
	if len(sources) == 0 {
		raw, ok := cfg["chat_template"]
		if !ok || string(raw) == "null" {
			return nil, fmt.Errorf("chattemplate: %s: %w (no chat_template.jinja and no chat_template in tokenizer_config.json)", modelDir, ErrNoChatTemplate)
		}
		var s string
		var list []struct {
			Name     string `json:"name"`
			Template string `json:"template"`
		}
		switch {
		case json.Unmarshal(raw, &s) == nil:
			single, hasSingle = s, true
		case json.Unmarshal(raw, &list) == nil:
			for _, t := range list {
				sources[t.Name] = t.Template
			}
		default:
			return nil, fmt.Errorf("chattemplate: %s: chat_template is neither a string nor a list of {name, template}", modelDir)
		}
	} else if len(sources) == 1 && sources["default"] != "" {
		single, hasSingle = sources["default"], true
		delete(sources, "default")
	}

	t := &Template{special: map[string]string{}, now: time.Now}
	if hasSingle {
		c, err := parseSource(single)
		if err != nil {
			return nil, fmt.Errorf("chattemplate: %s: %w", modelDir, err)
		}
		t.single = c
	} else {
		t.named = map[string]*parsed{}
		for name, src := range sources {
			c, err := parseSource(src)
			if err != nil {
				return nil, fmt.Errorf("chattemplate: %s: template %q: %w", modelDir, name, err)
			}
			t.named[name] = c
		}
	}
	for _, k := range specialTokenKeys {
		if s, ok := tokenString(cfg[k]); ok {
			t.special[k] = s
		}
	}
	var extraTokens map[string]json.RawMessage
	if raw, ok := cfg["extra_special_tokens"]; ok && json.Unmarshal(raw, &extraTokens) == nil {
		for k, v := range extraTokens {
			if s, ok := tokenString(v); ok {
				t.special[k] = s
			}
		}
	}
	slog.Debug("chat template loaded", "dir", modelDir, "templates", t.Names(), "special_tokens", len(t.special))
	return t, nil
}

// tokenString reads a special token given as a string or as an AddedToken object.
func tokenString(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, true
	}
	var tok struct {
		Content *string `json:"content"`
	}
	if json.Unmarshal(raw, &tok) == nil && tok.Content != nil {
		return *tok.Content, true
	}
	return "", false
}

// Names lists the template names: ["default"] for a single template.
func (t *Template) Names() []string {
	if t.single != nil {
		return []string{"default"}
	}
	names := make([]string, 0, len(t.named))
	for n := range t.named {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Source returns the template text Render would use with or without tools.
func (t *Template) Source(withTools bool) (string, error) {
	c, err := t.pick(withTools)
	if err != nil {
		return "", err
	}
	return c.source, nil
}

// SpecialTokens returns the special-token variables passed to the template (bos_token, ...).
func (t *Template) SpecialTokens() map[string]string {
	out := make(map[string]string, len(t.special))
	for k, v := range t.special {
		out[k] = v
	}
	return out
}

// pick chooses the template as transformers' get_chat_template does.
func (t *Template) pick(withTools bool) (*parsed, error) {
	if t.single != nil {
		return t.single, nil
	}
	if withTools {
		if c, ok := t.named["tool_use"]; ok {
			return c, nil
		}
	}
	if c, ok := t.named["default"]; ok {
		return c, nil
	}
	return nil, fmt.Errorf("chattemplate: the model has several chat templates (%s) and none is named default", strings.Join(t.Names(), ", "))
}

// reservedVars are the variables Render sets itself; Kwargs may not name them.
var reservedVars = map[string]bool{"messages": true, "tools": true, "documents": true, "add_generation_prompt": true}

// Render renders the conversation as apply_chat_template(messages, tools=..., add_generation_prompt=...,
// tokenize=False, **kwargs) does. A template that calls raise_exception fails with *RaiseError; other
// template failures are *RenderError.
func (t *Template) Render(in Input) (string, error) {
	if len(in.Messages) == 0 {
		return "", &RenderError{Msg: "cannot apply a chat template to an empty conversation"}
	}
	tools := vNone
	hasTools := false
	if trimmed := strings.TrimSpace(string(in.Tools)); trimmed != "" && trimmed != "null" {
		v, err := decodeJSON(in.Tools)
		if err != nil {
			return "", fmt.Errorf("chattemplate: tools: %w", err)
		}
		if !v.IsList() {
			return "", fmt.Errorf("chattemplate: tools must be a JSON list, got %s", typeName(v))
		}
		for i, tool := range v.AsList().Items {
			if !tool.IsDict() {
				return "", fmt.Errorf("chattemplate: tools[%d] is a %s, not a JSON schema object", i, typeName(tool))
			}
		}
		tools, hasTools = v, true
	}
	c, err := t.pick(hasTools)
	if err != nil {
		return "", err
	}
	msgs := make([]value, len(in.Messages))
	for i, m := range in.Messages {
		v, err := messageValue(m)
		if err != nil {
			return "", fmt.Errorf("chattemplate: messages[%d]: %w", i, err)
		}
		v.AsDict().Msg = i + 1
		msgs[i] = v
	}

	vars := make(map[string]value, len(t.special)+len(in.Kwargs)+4)
	for k, v := range t.special {
		vars[k] = str(v)
	}
	for k, v := range in.Kwargs {
		if reservedVars[k] {
			return "", fmt.Errorf("chattemplate: template kwarg %q is reserved", k)
		}
		val, err := goValue(v)
		if err != nil {
			return "", fmt.Errorf("chattemplate: template kwarg %q: %w", k, err)
		}
		vars[k] = val
	}
	vars["messages"] = newList(msgs)
	vars["tools"] = tools
	vars["documents"] = vNone
	vars["add_generation_prompt"] = boolV(in.AddGenerationPrompt)
	return t.renderVars(c, vars)
}

// renderVars renders c with the given template variables and a fresh runtime.
func (t *Template) renderVars(c *parsed, vars map[string]value) (out string, err error) {
	defer func() {
		// A panic here is a bug in this package; fail the one render, not the process.
		if r := recover(); r != nil {
			slog.Error("chat template render panicked", "panic", r)
			out, err = "", &RenderError{Msg: fmt.Sprintf("internal error: %v", r)}
		}
	}()
	st := &state{namespaces: map[*dictValue]bool{}, now: t.now}
	root := &scope{names: make([]string, 0, len(vars)), vals: make([]value, 0, len(vars))}
	for k, v := range vars {
		root.names = append(root.names, k)
		root.vals = append(root.vals, v)
	}
	var b strings.Builder
	r := &renderer{st: st, out: &b, builtins: st.renderBuiltins()}
	if _, err := r.exec(c.nodes, root); err != nil {
		var re *RaiseError
		var rn *RenderError
		switch {
		case errors.As(err, &re):
			re.At = st.lastRead()
		case errors.As(err, &rn):
			rn.At = st.lastRead()
		default:
			return "", &RenderError{Msg: err.Error(), At: st.lastRead()}
		}
		return "", err
	}
	return b.String(), nil
}

// messageValue builds the mapping transformers hands the template for one message. It follows the
// transformers release pinned in requirements-test.txt (5.19.0, the one the pinned SGLang installs), which
// passes messages as given; 5.23 drops keys whose value is None and copies reasoning_content to a "thinking"
// key in front of the others.
func messageValue(m Message) (value, error) {
	d := newDict()
	dd := d.AsDict()
	dd.Set("role", str(m.Role))
	if parts := strings.TrimSpace(string(m.ContentParts)); parts != "" && parts != "null" {
		v, err := decodeJSON(m.ContentParts)
		if err != nil {
			return d, fmt.Errorf("content: %w", err)
		}
		dd.Set("content", v)
	} else if m.ContentNull && m.Content == "" {
		dd.Set("content", vNone)
	} else {
		dd.Set("content", str(m.Content))
	}
	if m.ReasoningContent != "" {
		dd.Set("reasoning_content", str(m.ReasoningContent))
	}
	if tc := strings.TrimSpace(string(m.ToolCalls)); tc != "" && tc != "null" {
		v, err := decodeJSON(m.ToolCalls)
		if err != nil {
			return d, fmt.Errorf("tool_calls: %w", err)
		}
		dd.Set("tool_calls", v)
	}
	if m.ToolCallID != "" {
		dd.Set("tool_call_id", str(m.ToolCallID))
	}
	if m.Name != "" {
		dd.Set("name", str(m.Name))
	}
	return d, nil
}
