// Package chattemplate renders Hugging Face chat templates (the Jinja `chat_template` of a model's
// tokenizer_config.json or chat_template.jinja) exactly as Python transformers'
// apply_chat_template(..., tokenize=False) renders them.
//
// It owns the template half of the tokenize stage: choosing the template, building the variables
// transformers passes (messages, tools, documents, add_generation_prompt, the special-token strings and
// template kwargs such as enable_thinking), and rendering with Python Jinja2 semantics.
//
// Rendering runs on github.com/ardanlabs/jinja, which supplies statements, scopes, loops and macros.
// Its expression semantics differ from Python's in many corners (None prints as "", tojson sorts keys,
// 1.0 prints as 1, loop-body assignments leak across iterations, undefined values are silently
// tolerated), so this package does not hand it the template as written. It lexes and parses the
// template itself, following Jinja2's lexer and grammar as transformers configures them (trim_blocks,
// lstrip_blocks, loop controls, the immutable sandbox), and compiles it into an equivalent template in
// which every expression operation is a call into a runtime written to Python semantics: str() and
// repr() of values, json.dumps for tojson, Python string methods, Jinja2 filters and tests, Undefined
// rules. A construct it does not implement is a parse error naming the construct, never a silently
// different render.
package chattemplate
