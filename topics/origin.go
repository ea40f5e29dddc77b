package topics

import "strconv"

// Origins of a row's output: the Origin of a Prompt, Tokenized and Generation, and the shards' origin column.
// The values are stable: they are written into shards and manifests.
const (
	// OriginGenerated: the target model generated the output through the pipeline. Records written before
	// Origin existed carry it empty, which means the same (OriginOf).
	OriginGenerated = "generated"
	// OriginResult: token ids brought in from a /generate result (a line with input_ids and output_ids), kept
	// as they are.
	OriginResult = "result"
	// OriginRecord: token ids brought in from a pre-tokenized training record (a line with input_ids and
	// loss_mask), kept as they are.
	OriginRecord = "record"
	// OriginDataset: the dataset's own assistant reply, kept as the output (ingest's `replies: keep`) and
	// rendered by the model's chat template after the prompt.
	OriginDataset = "dataset"
)

// Origins returns every origin, in the order summaries show them.
func Origins() []string {
	return []string{OriginGenerated, OriginResult, OriginRecord, OriginDataset}
}

// OriginOf returns origin, or OriginGenerated when it is empty (a record or shard written before origins
// existed).
func OriginOf(origin string) string {
	if origin == "" {
		return OriginGenerated
	}
	return origin
}

// Kept reports whether origin names an output brought in with the row rather than generated: OriginResult,
// OriginRecord or OriginDataset. Such a row is never sent to a server.
func Kept(origin string) bool {
	switch origin {
	case OriginResult, OriginRecord, OriginDataset:
		return true
	}
	return false
}

// KnownOrigin reports whether origin is empty or one of Origins.
func KnownOrigin(origin string) bool {
	return origin == "" || origin == OriginGenerated || Kept(origin)
}

// AccountKey is the key under which a run accounts for what it ingested until it is in the shards (or
// rejected): the conversation id for a prompt to generate, whose turns follow one another and whose last
// turn ends it; the id and the turn for a row with a kept output, which stands alone (one conversation can
// bring several). The sink reports the rows it made durable by it, and a Rejection names both parts.
func AccountKey(id string, turn int, origin string) string {
	if !Kept(origin) {
		return id
	}
	return id + "\x00" + strconv.Itoa(turn)
}
