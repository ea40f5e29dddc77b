package sink

import (
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/metrics"
	"github.com/draftflow/draftflow/shard"
)

// Config configures Run. Zero values are the documented defaults.
type Config struct {
	// Client is the process's client of the cluster (required); Run does not close it.
	Client *kafka.Client
	// Group is the consumer group of the sink (default "draftflow-sink").
	Group string
	// Dir is the output directory; each run gets a subdirectory (required).
	Dir string
	// ModelPath, when set, is recorded in each run's manifest (shard.Manifest.ModelPath) that has none: where the
	// model the prompts were tokenized with is (`run` sets it).
	ModelPath string
	// JobConfig, when set, is the effective configuration of the process (a job file, secrets redacted), written
	// into each run directory the sink writes a shard to, before the shard, as shard.ConfigFile names it: which
	// settings wrote the run, so that it can be told apart and repeated.
	JobConfig []byte
	// RotateRows flushes a partition's buffer into shards once it holds this many rows (default 10000).
	RotateRows int
	// RotateBytes flushes a partition's buffer once its rows hold about this many bytes in memory, counting 5
	// bytes per token (default 256 MiB).
	RotateBytes int64
	// RotateInterval, when positive, flushes a partition's buffer once its oldest row has waited this long
	// (default 0: never). The journal keeps buffered rows durable, so a row's age is no reason to write a small
	// shard; set it only where readers must see rows within a bound.
	RotateInterval time.Duration
	// IdleFlush flushes every buffer once no record has arrived for this long, so the tail of a finite input
	// reaches the shards (and the group's offsets) without a shutdown (default 1 min; negative disables it).
	// Any pause this long costs a shard per partition, so it is far longer than the gaps between the rows of a
	// slow server (3.4 s on average at the reference run's rate: a minute without a row is a stall); a stream
	// slower than a row a minute should raise it. `draftflow run` does not wait for it (OnJournaled), and a
	// stopping sink flushes everything at once.
	IdleFlush time.Duration
	// JournalSync is how often the journal (package sink/journal) is fsynced (default 1 s): what a machine
	// crash can lose of the rows absorbed since the last flush. A killed process loses none of them: every
	// record is written to the journal as it is absorbed.
	JournalSync time.Duration
	// RowGroupRows is the most rows per Parquet row group (default 1024).
	RowGroupRows int
	// ZstdLevel is the zstd level of the shards (default 0: zstd's default, 3). The encoder has four speeds:
	// 1-2 (fastest), 3-5 (default), 6-9 (better) and 10 or more (best). On text-like token ids 1 writes about 7%
	// more bytes than 3, 7 about 11% fewer at 0.8x the speed, 11 about 19% fewer at 0.35x (BenchmarkShardEncode);
	// any of them is far faster than generation produces tokens.
	ZstdLevel int
	// MaxBufferedRows bounds the rows buffered over all partitions; past it the largest buffer is flushed
	// (default 4 × RotateRows). It is also the consumer's in-flight bound.
	MaxBufferedRows int
	// MaxBufferedBytes bounds the bytes buffered over all partitions, counted like RotateBytes (default 1 GiB).
	MaxBufferedBytes int64
	// OnDurable, if set, is called after each shard is durable with the account keys (topics.AccountKey: the
	// id, and for a row with a kept output also its turn) of its rows that end their conversation (every row but
	// continued turns).
	OnDurable func(ids []string)
	// OnJournaled, if set, is called after each journal fsync with the account keys of the rows it made durable that
	// end their conversation (rows recovered from the journal at start are reported too). Such a row survives
	// a crash and reaches a shard at the partition's next flush, at the latest when the sink next stops or
	// starts; a row flushed before the journal's fsync is reported by OnDurable alone.
	OnJournaled func(ids []string)
	// OnDuplicate, if set, is called with the account key of each record dropped because its id is already written for its run
	// and that copy ended its conversation, and for each turn generate skipped as already in the shards
	// (topics.Generation.InShards) whose row there ended its conversation.
	OnDuplicate func(id string)
	// OnSeeded, if set, is called once the sink has published what its shards hold on topics.TopicShards, before
	// it consumes anything: a generate stage started after it skips every turn they hold.
	OnSeeded func()
	// AnnounceShards makes the sink announce each committed shard on topics.TopicShardFiles (after its commit,
	// and every shard of Dir on each start), for the capture stage (stages/capture).
	AnnounceShards bool
	// Logger receives the sink's logs (default slog.Default()).
	Logger *slog.Logger
	// Registerer receives the sink's metrics (default prometheus.DefaultRegisterer).
	Registerer prometheus.Registerer
	// Ready, when set, gets the sink's readiness check: it owns partitions of the generated topic.
	Ready *metrics.Readiness

	// now is the sink's clock (default time.Now); tests replace it to simulate long runs.
	now func() time.Time
}

// Defaults of Config.
const (
	DefaultGroup            = "draftflow-sink"
	DefaultRotateRows       = shard.DefaultShardRows
	DefaultRotateBytes      = 256 << 20
	DefaultIdleFlush        = time.Minute
	DefaultJournalSync      = time.Second
	DefaultRowGroupRows     = shard.DefaultRowGroupRows
	DefaultMaxBufferedBytes = 1 << 30
)

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() (Config, error) {
	if c.Dir == "" {
		return c, errors.New("sink: Config.Dir is required")
	}
	if c.Group == "" {
		c.Group = DefaultGroup
	}
	if c.RotateRows <= 0 {
		c.RotateRows = DefaultRotateRows
	}
	if c.RotateBytes <= 0 {
		c.RotateBytes = DefaultRotateBytes
	}
	if c.IdleFlush == 0 {
		c.IdleFlush = DefaultIdleFlush
	}
	if c.JournalSync <= 0 {
		c.JournalSync = DefaultJournalSync
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.RowGroupRows <= 0 {
		c.RowGroupRows = DefaultRowGroupRows
	}
	if c.MaxBufferedRows <= 0 {
		c.MaxBufferedRows = 4 * c.RotateRows
	}
	if c.MaxBufferedBytes <= 0 {
		c.MaxBufferedBytes = DefaultMaxBufferedBytes
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}
