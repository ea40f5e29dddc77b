package topics

import "encoding/json"

// Topic names: the only coupling between stages.
const (
	// TopicPrompts carries one Prompt per conversation, written by ingest.
	TopicPrompts = "prompts"
	// TopicTokenized carries one Tokenized per prompt, written by tokenize.
	TopicTokenized = "tokenized"
	// TopicGenerated carries one Generation per prompt, written by generate.
	TopicGenerated = "generated"
	// TopicRejected is the dead-letter topic: one Rejection per record a stage could not process.
	TopicRejected = "rejected"
)

// Retained returns the topics whose records are kept for the configured retention, in pipeline order, then
// TopicStatus: the topics a process creates, with the configured partition count, before it starts its stages
// (kafka's Admin.EnsureTopics).
func Retained() []string {
	return []string{TopicPrompts, TopicTokenized, TopicGenerated, TopicRejected, TopicStatus}
}

// Compacted returns the compacted topics, TopicShards and TopicShardFiles: one partition each, the latest record
// of each key kept. The stage that writes or follows one creates it (kafka's Admin.EnsureCompactedTopic) when it
// starts; a pipeline without capture never creates TopicShardFiles.
func Compacted() []string {
	return []string{TopicShards, TopicShardFiles}
}

// All returns every topic of the pipeline: Retained, then Compacted.
func All() []string {
	return append(Retained(), Compacted()...)
}

// Message is one chat message, in the OpenAI/Hugging Face shape that chat templates consume.
type Message struct {
	// Role is system, user, assistant or tool.
	Role string `json:"role"`
	// Content is the message text. When the source gave a list of content parts, it is their texts
	// joined with "\n" (as vLLM and SGLang join them) and ContentParts holds the list itself.
	Content string `json:"content"`
	// ContentParts is the content as given when it was a list of parts (a JSON list, for example
	// [{"type": "text", "text": "..."}]); chat templates receive this list as the message's content,
	// as Hugging Face passes it. Empty when the content was a string.
	ContentParts json.RawMessage `json:"content_parts,omitempty"`
	// ContentNull is true when the source gave the content as JSON null (OpenAI's shape of an assistant turn
	// that only calls tools). Content is then empty and chat templates receive None, as Hugging Face passes
	// it: DeepSeek-V3's template, for one, writes tool calls only for an assistant message whose content is
	// None, and others render None as "None" or raise.
	ContentNull bool `json:"content_null,omitempty"`
	// ReasoningContent is an assistant's thinking, kept apart from Content as chat templates expect.
	ReasoningContent string `json:"reasoning_content,omitempty"`
	// ToolCalls is an assistant's tool calls, passed to the chat template as they came (a JSON list).
	ToolCalls json.RawMessage `json:"tool_calls,omitempty"`
	// ToolCallID links a tool result to the call it answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// Name is the tool name of a tool result, or a participant name.
	Name string `json:"name,omitempty"`
}

// Sampling holds the generation settings of one request; zero values mean "server default".
type Sampling struct {
	// MaxNewTokens caps the completion length (SGLang max_new_tokens).
	MaxNewTokens int `json:"max_new_tokens,omitempty"`
	// Temperature; nil means the server default. 0 means greedy.
	Temperature *float64 `json:"temperature,omitempty"`
	// TopP nucleus sampling; 0 means the server default.
	TopP float64 `json:"top_p,omitempty"`
	// TopK; 0 means the server default.
	TopK int `json:"top_k,omitempty"`
	// MinP; 0 means the server default.
	MinP float64 `json:"min_p,omitempty"`
	// Seed is SGLang's sampling_seed; nil means unseeded.
	Seed *int64 `json:"sampling_seed,omitempty"`
	// StopTokenIDs end generation when produced.
	StopTokenIDs []int `json:"stop_token_ids,omitempty"`
	// Lane names the scheduling class (for example "short" or "long") that the generate stage budgets separately.
	Lane string `json:"lane,omitempty"`
	// TemplateKwargs are extra chat-template variables such as enable_thinking.
	TemplateKwargs map[string]any `json:"template_kwargs,omitempty"`
}

// Source says where a record came from, for error messages and dead letters.
type Source struct {
	// File is the input file path as given to ingest.
	File string `json:"file,omitempty"`
	// Line is the 1-based line (JSONL) or row (Parquet) number in File.
	Line int64 `json:"line,omitempty"`
}

// Prompt is a conversation ready to be tokenized: everything up to and including the last user message.
type Prompt struct {
	// ID is stable per conversation: the dataset's own id, else a content hash.
	ID string `json:"id"`
	// Dataset names the dataset the conversation came from.
	Dataset string `json:"dataset"`
	// Turn is the index of the assistant turn to generate (0 for the first; single-turn prompts use 0).
	Turn int `json:"turn"`
	// Messages is the prompt conversation.
	Messages []Message `json:"messages"`
	// Tools is the row-level tool list (a JSON list of tool schemas), passed to the chat template.
	Tools json.RawMessage `json:"tools,omitempty"`
	// Sampling holds the per-dataset generation settings.
	Sampling Sampling `json:"sampling"`
	// Source locates the record in its input file.
	Source Source `json:"source"`
	// Rest is the source conversation after Messages when every turn is regenerated (the dataset's
	// `turns: all`): the original assistant reply to Messages first, then every later message. Empty for
	// the conversation's last turn and under `turns: last`. See Thread.
	Rest []Message `json:"rest,omitempty"`
	// Endpoint is the server that generated the previous turn of the conversation (empty for its first):
	// a hint to send this turn there, where the shared prefix is still cached.
	Endpoint string `json:"endpoint,omitempty"`
	// Continuation marks a prompt built from a generated turn (Generation.Next) rather than ingested: its
	// history holds one pipeline's own replies, so a stage reading another namespace's prompts, or
	// regenerating with other settings, must not take it for its own.
	Continuation bool `json:"continuation,omitempty"`
	// Origin says where the row's output comes from: empty for a prompt the target generates a reply to;
	// OriginResult, OriginRecord or OriginDataset for a row that brings its output with it (Kept), which is
	// never sent to a server.
	Origin string `json:"origin,omitempty"`
	// Reply is the dataset's own assistant reply to Messages (Origin OriginDataset), kept as the row's output:
	// tokenize renders it with the chat template after the prompt.
	Reply *Message `json:"reply,omitempty"`
	// InputIDs and OutputIDs are the prompt and output token ids of a row brought in as ids (Origin
	// OriginResult or OriginRecord), kept as they are: nothing is rendered. On the wire as packed
	// little-endian uint32, not JSON; empty for every other prompt.
	InputIDs  []uint32 `json:"-"`
	OutputIDs []uint32 `json:"-"`
	// FinishReason is why a brought-in output ended, as its source said ("stop", "length"); empty when it did
	// not say.
	FinishReason string `json:"finish_reason,omitempty"`
}

// Tokenized is a prompt rendered through the chat template and tokenized.
type Tokenized struct {
	// ID, Dataset, Turn, Sampling and Source are copied from the Prompt.
	ID       string   `json:"id"`
	Dataset  string   `json:"dataset"`
	Turn     int      `json:"turn"`
	Sampling Sampling `json:"sampling"`
	Source   Source   `json:"source"`
	// Model names the model directory whose tokenizer produced InputIDs.
	Model string `json:"model"`
	// TokenizerHash fingerprints the tokenizer files and chat template used.
	TokenizerHash string `json:"tokenizer_hash"`
	// InputIDs are the prompt token ids (on the wire as packed little-endian uint32, not JSON).
	InputIDs []uint32 `json:"-"`
	// Thread is the conversation this turn belongs to, set when later turns follow (the Prompt's Rest is
	// not empty); nil otherwise.
	Thread *Thread `json:"thread,omitempty"`
	// Parsers says how the reply is split into reasoning, content and tool calls; set with Thread.
	Parsers Parsers `json:"parsers,omitzero"`
	// Endpoint and Continuation are copied from the Prompt.
	Endpoint     string `json:"endpoint,omitempty"`
	Continuation bool   `json:"continuation,omitempty"`
	// Origin and FinishReason are copied from the Prompt: a row with a kept output (Kept(Origin)) is not sent
	// to a server, its OutputIDs are its output.
	Origin       string `json:"origin,omitempty"`
	FinishReason string `json:"finish_reason,omitempty"`
	// OutputIDs is the kept output of a row that brings one (the ids brought in, or the dataset's reply as the
	// chat template renders it after InputIDs, through the end-of-turn token); empty for a prompt to generate.
	// On the wire as packed little-endian uint32, not JSON.
	OutputIDs []uint32 `json:"-"`
}

// Generation is a prompt with the target model's completion, token-exact.
type Generation struct {
	// ID, Dataset, Turn, Sampling, Source, Model and TokenizerHash are copied from the Tokenized record.
	ID            string   `json:"id"`
	Dataset       string   `json:"dataset"`
	Turn          int      `json:"turn"`
	Sampling      Sampling `json:"sampling"`
	Source        Source   `json:"source"`
	Model         string   `json:"model"`
	TokenizerHash string   `json:"tokenizer_hash"`
	// Meta is what the server reported about the request.
	Meta GenerationMeta `json:"meta"`
	// PromptIDs are the prompt token ids sent to the server.
	PromptIDs []uint32 `json:"-"`
	// OutputIDs are the completion token ids the server returned (reasoning and tool calls included).
	OutputIDs []uint32 `json:"-"`
	// Thread is copied from the Tokenized record (nil for single turns and last turns).
	Thread *Thread `json:"thread,omitempty"`
	// Reply is the completion parsed into an assistant message (reasoning, content, tool calls), set when
	// Thread is; the next turn's history holds it.
	Reply *Message `json:"reply,omitempty"`
	// StopReason says how this turn bears on its conversation: StopEnd, StopContinued, StopToolDivergence,
	// StopLength or StopParseError. Empty in records written before it existed, which mean StopEnd.
	StopReason string `json:"stop_reason,omitempty"`
	// StopDetail explains a StopReason other than StopEnd and StopContinued in words.
	StopDetail string `json:"stop_detail,omitempty"`
	// InShards is set when generate did not send this turn to a server because TopicShards says the sink's
	// shards already hold it: the epoch of TopicShards that said so. Such a record has no PromptIDs,
	// OutputIDs, Meta, Reply or StopReason; it carries the Thread, so that the sink can send the conversation's
	// next turn from the reply its shards recorded (see the sink package).
	InShards string `json:"in_shards,omitempty"`
	// Origin says where OutputIDs come from: empty when a server generated them (OriginGenerated), else the
	// Tokenized record's Origin (a kept output, which no server saw; Meta then holds only FinishReason and
	// the token counts).
	Origin string `json:"origin,omitempty"`
}

// FinishLoop is GenerationMeta.FinishReason of a reply generate found in a repetition loop and stopped (its
// output ids are exactly those the server produced before the stop; GenerationMeta.Loop says where the loop is).
const FinishLoop = "loop"

// GenerationMeta is SGLang's meta_info, normalised.
type GenerationMeta struct {
	// FinishReason is "stop", "length", "abort", or FinishLoop for a reply generate stopped in a loop.
	FinishReason string `json:"finish_reason"`
	// FinishMatched is the stop token id or string that ended the request, if any (raw JSON).
	FinishMatched json.RawMessage `json:"finish_matched,omitempty"`
	// PromptTokens, CompletionTokens and CachedTokens are the server's token counts.
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	CachedTokens     int `json:"cached_tokens"`
	// Retractions counts how often the server retracted the request.
	Retractions int `json:"retractions"`
	// LatencySeconds is the server's e2e_latency.
	LatencySeconds float64 `json:"e2e_latency"`
	// Endpoint is the server URL that produced the completion.
	Endpoint string `json:"endpoint"`
	// ServedModel is the model path the server reported, if known.
	ServedModel string `json:"served_model,omitempty"`
	// Loop is the repetition loop generate found at the end of the reply, if any: set with FinishReason
	// FinishLoop, or beside the server's finish reason when generate only marks loops.
	Loop *LoopMeta `json:"loop,omitempty"`
}

// LoopMeta locates a repetition loop in a reply's output ids: OutputIDs[Start:Found] repeats one Period.
type LoopMeta struct {
	// Period is the repeated unit's length in tokens.
	Period int `json:"period"`
	// Start is the index of the loop's first token in OutputIDs.
	Start int `json:"start"`
	// Found is how many output ids generate had seen when it found the loop; OutputIDs may hold a few more,
	// produced before the server took the stop in.
	Found int `json:"found"`
}

// Rejection is a dead letter: a record a stage could not process, with the reason.
type Rejection struct {
	// ID is the record id when one is known (ingest may reject lines before an id exists).
	ID string `json:"id,omitempty"`
	// Dataset is the record's dataset when known.
	Dataset string `json:"dataset,omitempty"`
	// Stage is the stage that rejected it: ingest, tokenize, generate, sink or capture.
	Stage string `json:"stage"`
	// Reason says why, in words a user can act on.
	Reason string `json:"reason"`
	// Class is a short, stable name of the kind of reason (for example too_long, template, invalid_json):
	// what the stage's rejected-records metric calls it, and what `draftflow status` counts by. Empty in
	// records written before it existed.
	Class string `json:"class,omitempty"`
	// Source locates the record in its input file.
	Source Source `json:"source"`
	// Turn and Origin are the record's when it has them: a row with a kept output is accounted for by id and
	// turn (AccountKey). Empty in records written before they existed.
	Turn   int    `json:"turn,omitempty"`
	Origin string `json:"origin,omitempty"`
	// Topic, Partition and Offset locate the consumed message that was rejected (empty for ingest).
	Topic     string `json:"topic,omitempty"`
	Partition int    `json:"partition,omitempty"`
	Offset    int64  `json:"offset,omitempty"`
	// Payload is the offending input, truncated to MaxRejectedPayload bytes.
	Payload []byte `json:"payload,omitempty"`
}

// MaxRejectedPayload bounds Rejection.Payload so a dead letter always fits a Kafka message.
const MaxRejectedPayload = 64 << 10
