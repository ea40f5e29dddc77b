// Package ingest owns the first stage of draftflow: it reads conversation datasets (JSONL, optionally gzip or
// zstd compressed, and Parquet), turns every conversation into a topics.Prompt and writes it to the prompts
// topic, keyed by a stable id. Lines it cannot use go to the rejected topic with file, line and reason, and the
// run continues.
//
// Accepted rows (one JSON object per line, or one Parquet row with the same columns):
//
//	{"id"?: string|number, "messages"|"conversations": [message...], "tools"?: [tool schema...]}
//
// A message is either OpenAI/Hugging Face shaped
//
//	{"role": "system|developer|user|assistant|tool|function", "content": string|null|[{"type":"text","text":...}],
//	 "reasoning_content"?, "tool_calls"?, "tool_call_id"?, "name"?}
//
// or ShareGPT shaped, {"from": "system|human|user|gpt|assistant|tool|function_call|observation|...", "value"}.
// Text content parts are joined with a newline; any other part (an image, audio) rejects the line.
//
// The id of a conversation is its "id" field when present, else "h-" followed by the first 24 hex digits of
// a SHA-256 over a canonical encoding of the whole conversation (normalised messages and tools), so the same
// conversation gets the same id in every run and in every input format. The sink deduplicates by id, which
// makes re-running ingest on the same file harmless; within one run a repeated id is rejected, because the
// sink would otherwise drop it silently. The ids a run has seen are kept in a temporary file (Config.TempDir,
// internal/idset), so memory does not grow with the size of the input; Run returns counts, and a caller that
// needs the ids gets them through Config.OnPrompt.
//
// The prompt is every message up to and including the last user message; what follows is the part the
// target model regenerates and is dropped. Per-dataset generation settings (topics.Sampling) come from
// flags and an optional JSON settings file (see LoadSettings).
//
// Rows brought in with their output are never generated again (topics.Kept); they reach the shards like
// generated rows, marked with their origin:
//
//   - a line with "input_ids" and "output_ids" is a /generate result, a line with "input_ids" and "loss_mask"
//     a pre-tokenized training record: their ids are kept as they are (tokens.go says the shapes and the
//     rules; the model's checks are tokenize's);
//   - under the replies setting "keep" (--replies keep, or "replies": "keep" in a dataset's settings) a
//     conversation's own assistant replies are kept: one prompt per reply, its history every message before
//     it, the reply rendered by the model's chat template in tokenize.
//
// A run accounts for a conversation by its id and for a kept row by its id and turn (topics.AccountKey); the
// duplicate check goes by the same key.
package ingest
