package shard

import "github.com/apache/arrow/go/v17/arrow"

// FormatVersion is the shard and manifest format this package writes.
const FormatVersion = 1

// Parquet key-value metadata keys of a shard.
const (
	MetaFormat      = "draftflow.format"       // FormatVersion
	MetaSchema      = "draftflow.schema"       // JSON list of {name, type, doc}: the column documentation
	MetaRun         = "draftflow.run"          // JSON RunInfo: model, tokenizer hash, sampling, fingerprint
	MetaTopic       = "draftflow.topic"        // physical topic the rows came from
	MetaPartition   = "draftflow.partition"    // partition of that topic
	MetaFirstOffset = "draftflow.first_offset" // first offset of the flush that wrote the shard
	MetaLastOffset  = "draftflow.last_offset"  // last offset of that flush (inclusive)
	MetaLog         = "draftflow.log"          // short topic ID of the topic incarnation the offsets belong to
	MetaRows        = "draftflow.rows"         // rows in the shard
	MetaTokens      = "draftflow.tokens"       // total tokens (sum of input_ids lengths)
)

// Column is one documented shard column.
type Column struct {
	// Name of the column.
	Name string `json:"name"`
	// Type in Arrow notation.
	Type string `json:"type"`
	// Doc says what the column holds.
	Doc string `json:"doc"`
}

// columns documents the shard schema, in column order (Columns).
var columns = [...]Column{
	{"id", "string", "conversation id, stable across runs; (id, turn) is unique within a run"},
	{"input_ids", "list<int32>", "prompt token ids followed by output token ids, exactly as the target model saw and produced them"},
	{"loss_mask", "list<uint8>", "one per input id: 0 on prompt tokens, 1 on output tokens"},
	{"prompt_len", "int32", "number of prompt tokens (leading zeros of loss_mask)"},
	{"completion_len", "int32", "number of output tokens (trailing ones of loss_mask)"},
	{"finish_reason", "string", "why generation ended: stop, length, or loop (stopped as a repetition loop)"},
	{"dataset", "string", "dataset the conversation came from"},
	{"turn", "int32", "index of the generated assistant turn (0 for the first)"},
	{"endpoint", "string", "server that generated the completion"},
	{"stop_reason", "string", "how the turn bears on its conversation: end, continued (the next turn was built from it), tool_divergence, length or parse_error"},
	{"reply", "string", "the completion parsed into an assistant message (JSON: role, content, reasoning_content, tool_calls) for turns of multi-turn conversations; empty otherwise"},
	{"origin", "string", "where the output came from: generated (by the target, through the pipeline), result (a /generate result's ids brought in), record (a pre-tokenized training record brought in) or dataset (the dataset's own reply, rendered by the chat template); shards written before the column read as generated"},
}

// Columns documents the shard schema, in column order. It is written into every shard (MetaSchema) and every
// manifest. Each call returns a new slice.
func Columns() []Column { return append([]Column(nil), columns[:]...) }

// readableColumns are the column counts of the shards this package reads: the schema's, and those of older
// shards, whose missing columns read as empty (stop_reason and reply, added at 11) or as topics.OriginGenerated
// (origin, added at 12).
var readableColumns = []int{9, 11, 12}

var schema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.BinaryTypes.String},
	{Name: "input_ids", Type: arrow.ListOfNonNullable(arrow.PrimitiveTypes.Int32)},
	{Name: "loss_mask", Type: arrow.ListOfNonNullable(arrow.PrimitiveTypes.Uint8)},
	{Name: "prompt_len", Type: arrow.PrimitiveTypes.Int32},
	{Name: "completion_len", Type: arrow.PrimitiveTypes.Int32},
	{Name: "finish_reason", Type: arrow.BinaryTypes.String},
	{Name: "dataset", Type: arrow.BinaryTypes.String},
	{Name: "turn", Type: arrow.PrimitiveTypes.Int32},
	{Name: "endpoint", Type: arrow.BinaryTypes.String},
	{Name: "stop_reason", Type: arrow.BinaryTypes.String},
	{Name: "reply", Type: arrow.BinaryTypes.String},
	{Name: "origin", Type: arrow.BinaryTypes.String},
}, nil)

// Col is a column's index in the schema (each column has exactly one Parquet leaf, so it is its leaf index
// too). File.Scan reads the columns it is given.
type Col int

// The columns, in schema order.
const (
	ColID Col = iota
	ColInputIDs
	ColLossMask
	ColPromptLen
	ColCompletionLen
	ColFinishReason
	ColDataset
	ColTurn
	ColEndpoint
	ColStopReason
	ColReply
	ColOrigin
)
