// Package chattemplate renders Hugging Face chat templates (the Jinja `chat_template` of a model's
// tokenizer_config.json or chat_template.jinja) exactly as Python transformers'
// apply_chat_template(..., tokenize=False) renders them.
//
// It owns the template half of the tokenize stage: choosing the template, building the variables
// transformers passes (messages, tools, documents, add_generation_prompt, the special-token strings and
// template kwargs such as enable_thinking), and rendering with Python Jinja2 semantics.
//
// It lexes and parses the template itself, following Jinja2's lexer and grammar as transformers
// configures them (trim_blocks, lstrip_blocks, loop controls, the immutable sandbox), into a tree of
// statements and expressions (tree.go, parser.go), checked once when the template is loaded, and
// renders by walking that tree (eval.go) with Jinja2's scoping. Every operation calls a runtime
// written to Python semantics: the values (value.go: integers beyond int64 kept by their digits, tuples, insertion-
// ordered dicts, Undefined), str() and repr(), json.dumps for tojson, Python string methods, Jinja2
// filters and tests (filters.go), Undefined rules. A construct it does not implement is a parse error
// naming the construct, never a silently different render.
package chattemplate
