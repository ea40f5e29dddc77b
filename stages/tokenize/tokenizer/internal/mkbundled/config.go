package main

import "strconv"

// chatTemplate is a ChatML (Qwen-style) template: optional system prompt with a <tools> listing,
// assistant reasoning_content inside <think>, tool calls inside <tool_call>, consecutive tool
// results grouped into one user turn as <tool_response>, add_generation_prompt and
// enable_thinking=false (an empty think block). Content given as a list of parts renders as its text parts,
// one per line.
const chatTemplate = `{%- set sys = namespace(content='') %}
{%- if messages[0].content is string %}
    {%- set sys.content = messages[0].content %}
{%- elif messages[0].content %}
    {%- for part in messages[0].content if part.type == 'text' %}
        {%- set sys.content = sys.content + ('' if loop.first else '\n') + part.text %}
    {%- endfor %}
{%- endif %}
{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- sys.content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\n' + sys.content + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
    {#- Content given as a list of parts renders as its text parts, one per line. #}
    {%- set ns = namespace(content='') %}
    {%- if message.content is string %}
        {%- set ns.content = message.content %}
    {%- elif message.content %}
        {%- for part in message.content if part.type == 'text' %}
            {%- set ns.content = ns.content + ('' if loop.first else '\n') + part.text %}
        {%- endfor %}
    {%- endif %}
    {%- set content = ns.content %}
    {%- if message.role == 'system' %}
        {%- if not loop.first %}
            {{- raise_exception('The system message must come first.') }}
        {%- endif %}
    {%- elif message.role == 'user' %}
        {{- '<|im_start|>user\n' + content + '<|im_end|>\n' }}
    {%- elif message.role == 'assistant' %}
        {{- '<|im_start|>assistant\n' }}
        {%- if message.reasoning_content %}
            {{- '<think>\n' + message.reasoning_content.strip('\n') + '\n</think>\n\n' }}
        {%- endif %}
        {%- if content %}
            {{- content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- set call = tool_call.function if tool_call.function is defined else tool_call %}
                {%- if loop.first and not content %}
                    {{- '<tool_call>\n' }}
                {%- else %}
                    {{- '\n<tool_call>\n' }}
                {%- endif %}
                {{- '{"name": "' + call.name + '", "arguments": ' }}
                {%- if call.arguments is string %}
                    {{- call.arguments }}
                {%- else %}
                    {{- call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == 'tool' %}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' + content + '\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- else %}
        {{- raise_exception('Unknown role: ' + message.role) }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}
`

type addedTokenConfig struct {
	Content    string `json:"content"`
	LStrip     bool   `json:"lstrip"`
	Normalized bool   `json:"normalized"`
	RStrip     bool   `json:"rstrip"`
	SingleWord bool   `json:"single_word"`
	Special    bool   `json:"special"`
}

func specialID(vocabSize int, content string) int {
	for i, t := range specialTokens {
		if t.content == content {
			return vocabSize + i
		}
	}
	panic("unknown special token " + content)
}

// tokenizerConfig is the transformers tokenizer_config.json of the bundled model.
func tokenizerConfig(vocabSize int) map[string]any {
	decoder := map[string]addedTokenConfig{}
	for i, t := range specialTokens {
		decoder[strconv.Itoa(vocabSize+i)] = addedTokenConfig{Content: t.content, Special: t.special}
	}
	return map[string]any{
		"add_bos_token":                false,
		"add_eos_token":                false,
		"added_tokens_decoder":         decoder,
		"bos_token":                    "<|begin_of_text|>",
		"eos_token":                    "<|im_end|>",
		"pad_token":                    "<|endoftext|>",
		"unk_token":                    nil,
		"chat_template":                chatTemplate,
		"clean_up_tokenization_spaces": false,
		"model_max_length":             32768,
		"tokenizer_class":              "PreTrainedTokenizerFast",
	}
}

// modelConfig is a minimal transformers config.json describing a tiny Llama-shaped model.
func modelConfig(vocabSize int) map[string]any {
	total := vocabSize + len(specialTokens)
	return map[string]any{
		"architectures":           []string{"LlamaForCausalLM"},
		"model_type":              "llama",
		"vocab_size":              total,
		"bos_token_id":            specialID(vocabSize, "<|begin_of_text|>"),
		"eos_token_id":            specialID(vocabSize, "<|im_end|>"),
		"pad_token_id":            specialID(vocabSize, "<|endoftext|>"),
		"hidden_size":             256,
		"intermediate_size":       688,
		"num_attention_heads":     4,
		"num_key_value_heads":     4,
		"num_hidden_layers":       2,
		"max_position_embeddings": 32768,
		"rms_norm_eps":            1e-6,
		"rope_theta":              10000,
		"tie_word_embeddings":     true,
		"torch_dtype":             "bfloat16",
	}
}
