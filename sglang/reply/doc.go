// Package reply turns a target model's generated text into the assistant
// message it stands for, the way SGLang 0.5.23's OpenAI chat endpoint does,
// and compares tool calls. It owns one question: given the /generate `text`
// of one turn (requested with skip_special_tokens=false, a matched stop token
// already trimmed), what are its reasoning_content, content and tool calls,
// so the next turn's history renders as the chat template expects, and are
// those calls the dataset's original ones?
//
//	r, err := reply.Parse(text, reply.Options{Reasoning: "qwen3", Tools: "qwen25"})
//	msg := r.Message(nil)                       // topics.Message, role assistant
//	orig, _ := reply.CallsOf(datasetMsg.ToolCalls)
//	same := reply.SameCalls(r.Calls, orig)
//
// Parsers are named with SGLang's own --reasoning-parser and
// --tool-call-parser names (Known lists what is supported). Parse runs the
// reasoning parser first and hands its normal text to the tool-call parser, as
// serving_chat.py's _build_chat_response does; each rule is ported from the
// non-streaming path of the Python source (ReasoningParser.parse_non_stream,
// FunctionCallParser.parse_non_stream, each detector's detect_and_parse) and
// cites the file and function it comes from. The package differs from SGLang
// on purpose in one way: where SGLang silently drops a tool call it cannot
// read (bad JSON, an unterminated block, a call without a name, arguments
// that are not a JSON object), Parse returns a *ParseError, because a
// regenerated turn with a lost call is not a usable training sample.
//
// # The text
//
// Parse expects the text SGLang's chat endpoint hands its parsers, which is
// /generate's text with skip_special_tokens=false. Stop tokens matter:
// SGLang trims a matched stop token (detokenizer_manager.py
// trim_matched_stop) except gpt-oss's <|call|> when the server runs with
// --tool-call-parser gpt-oss, and a harmony call without its <|call|> is
// no call at all (the block stays incomplete). Request gpt-oss turns with
// no_stop_trim, or append the matched stop token, before parsing.
//
// SGLang's rules are kept even where they surprise: no whitespace is
// stripped around reasoning; a start tag later in the text (not at its
// start) puts everything before the end tag into reasoning; reasoning with
// no end tag is all reasoning (unless a tool-call marker ends it: qwen3's
// <tool_call>, kimi_k2's section begin); qwen25 and deepseekv3 strip the
// text before the calls and drop any text after them; llama3 takes a text
// that starts with "{" for a call; gpt-oss text with no harmony markers is
// neither reasoning nor content, and a harmony call counts only after
// "<|start|>assistant".
//
// Calls are kept whatever their name, as SGLang does with
// SGLANG_FORWARD_UNKNOWN_TOOLS set; Options.Functions restores SGLang's
// default of dropping calls to functions the request did not offer.
//
// testdata/sglang_parse.py runs the real detectors from the pinned wheel over
// a corpus, and TestDifferentialSGLang compares Parse with them field by field.
package reply
