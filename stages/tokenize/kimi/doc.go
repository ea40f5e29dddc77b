// Package kimi reproduces, in Go, the custom tokenizer code that Kimi-K2-family model directories ship
// instead of a tokenizer.json: tokenization_kimi.py (a TikTokenTokenizer with its own pre-tokenizer
// pattern, 256 reserved special tokens and the cutting of runs longer than 25,000 characters) and its
// apply_chat_template override (tool schemas recursively key-sorted; for Kimi-K2.5 also rendered as a
// TypeScript-like block by tool_declaration_ts.py and handed to the template as tools_ts_str).
//
// Python code is never run. A directory's files are recognised by a fingerprint of their content
// (Fingerprint: sha256 of the source without comments, docstrings and blank lines), so the same code
// with other comments is accepted and any other code is refused at load (Recognize), naming the file
// and listing the variants this package implements. Conformance with transformers
// (trust_remote_code=True) is checked by the tests on the copies in ../shared/models.
package kimi
