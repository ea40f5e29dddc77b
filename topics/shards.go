package topics

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// TopicShards is the index of what the sink's shards hold: a compacted topic of one partition that the sink
// writes and generate reads, so that a turn already in the shards is not sent to a server again, also when
// generate runs on another machine than the sink and cannot read its directory.
//
// The sink writes it in epochs. On every start it writes a ShardsEpoch (key ShardsEpochKey) in state
// EpochSeeding, then one ShardedTurn per row of its shards (key ShardKey), then the same ShardsEpoch in state
// EpochComplete; after every flush it writes a ShardedTurn for each row the flush made durable. Only the
// latest epoch counts: its turns once it is complete, and while it is seeding also the turns of the complete
// epoch before it when both name the same directory (a restarted sink). A turn of an older epoch (a sink of
// another directory, rows since deleted) counts for nothing. Compaction keeps the latest record of each key.
const TopicShards = "shards"

// ShardsEpochKey is the key of every ShardsEpoch record on TopicShards.
const ShardsEpochKey = "epoch"

// The states of a ShardsEpoch.
const (
	// EpochSeeding: the sink is writing the turns its shards hold; the epoch's turns are not all there yet.
	EpochSeeding = "seeding"
	// EpochComplete: every turn the sink's shards held at its start is on the topic, and later flushes follow.
	EpochComplete = "complete"
	// EpochVoid: nothing is known to be in the shards (written by `draftflow replay` of the generate stage:
	// what was generated before is to be generated again, for a new output).
	EpochVoid = "void"
)

// ShardsEpoch starts, completes or voids an epoch of TopicShards.
type ShardsEpoch struct {
	// Epoch names the sink start (or replay) that wrote it: random, unique.
	Epoch string `json:"epoch"`
	// State is EpochSeeding, EpochComplete or EpochVoid.
	State string `json:"state"`
	// Dir identifies the sink's output directory (a random id kept in the directory), empty for EpochVoid.
	Dir string `json:"dir,omitempty"`
	// Path is the output directory as the sink was given it, for messages only.
	Path string `json:"path,omitempty"`
	// Turns is, with EpochComplete, how many turns the epoch's seeding wrote.
	Turns int64 `json:"turns,omitempty"`
	// Time is when the record was written.
	Time time.Time `json:"time"`
}

// ShardedTurn says that a turn is in a committed shard of the run Run.
type ShardedTurn struct {
	// Epoch is the epoch of the sink start that wrote the record.
	Epoch string `json:"epoch"`
	// Run is the run's fingerprint (RunFingerprint).
	Run string `json:"run"`
	// ID and Turn are the row's (id, turn).
	ID   string `json:"id"`
	Turn int    `json:"turn"`
}

// ShardKey is the TopicShards key of a turn: the first 16 hex digits of the run's fingerprint, the turn and
// the id, separated by "/" (the id last, so any id is unambiguous).
func ShardKey(run, id string, turn int) string {
	if len(run) > 16 {
		run = run[:16]
	}
	var b strings.Builder
	b.Grow(len(run) + len(id) + 8)
	b.WriteString(run)
	b.WriteByte('/')
	b.WriteString(strconv.Itoa(turn))
	b.WriteByte('/')
	b.WriteString(id)
	return b.String()
}

// RunFingerprint is the fingerprint of the run a generation with these settings belongs to: the hex SHA-256
// of the canonical JSON of the model, the tokenizer hash and the sampling settings without the scheduling lane.
// The sink names run directories by it; generate computes it for a record before sending it, to look the
// record up on TopicShards.
func RunFingerprint(model, tokenizerHash string, s Sampling) string {
	s.Lane = "" // scheduling only: the same settings on another lane are the same run
	// encoding/json writes struct fields in order and map keys sorted: a canonical form.
	b, err := json.Marshal(struct {
		Model         string   `json:"model"`
		TokenizerHash string   `json:"tokenizer_hash"`
		Sampling      Sampling `json:"sampling"`
	}{model, tokenizerHash, s})
	if err != nil {
		// Only TemplateKwargs could fail to marshal; it came from JSON, so it cannot.
		b = []byte(model + "\x00" + tokenizerHash)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// TopicShardFiles announces each committed shard, for the capture stage (stages/capture), which writes the
// target model's features of its rows beside it. The sink writes one ShardFile after each shard commits (when
// its Config.AnnounceShards is set) and one for every shard of its directory on every start, so a shard whose
// announcement a crash cut off is announced again; a consumer skips a shard it has already done. Compacted:
// the latest announcement of each shard (key ShardFileKey) is kept.
const TopicShardFiles = "shard-files"

// ShardFile announces one committed shard of the sink's output directory.
type ShardFile struct {
	// Run is the run's fingerprint (RunFingerprint); RunDir its directory's name in the output directory.
	Run    string `json:"run"`
	RunDir string `json:"run_dir"`
	// File is the shard's file name in RunDir; Rows and Tokens count its rows and their tokens.
	File   string `json:"file"`
	Rows   int64  `json:"rows"`
	Tokens int64  `json:"tokens"`
	// SHA256 is the shard's hex checksum (its manifest entry's).
	SHA256 string `json:"sha256"`
	// Dir identifies the sink's output directory (its dir_id file); Path is that directory as the sink was
	// given it, for messages only.
	Dir  string `json:"dir,omitempty"`
	Path string `json:"path,omitempty"`
	// Time is when the record was written.
	Time time.Time `json:"time"`
}

// ShardFileKey is the TopicShardFiles key of a shard: the run directory's name and the file name.
func ShardFileKey(runDir, file string) string { return runDir + "/" + file }
