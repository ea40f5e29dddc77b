package sink

import "flag"

// RegisterFlags binds the stage's settings to flags: --out (default out/run when c.Dir is empty), --shard-rows,
// --shard-bytes, --shard-interval, --idle-flush, --journal-sync, --zstd-level, --group, --announce-shards.
// The Kafka settings and the metrics endpoint are the command's.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	if c.Dir == "" {
		c.Dir = "out/run"
	}
	fs.StringVar(&c.Dir, "out", c.Dir, "output directory for shards (one subdirectory per run)")
	fs.IntVar(&c.RotateRows, "shard-rows", c.RotateRows, "rotate a shard after this many rows (0: sink default)")
	fs.Int64Var(&c.RotateBytes, "shard-bytes", c.RotateBytes, "rotate a shard after about this many bytes (0: sink default)")
	fs.DurationVar(&c.RotateInterval, "shard-interval", c.RotateInterval, "also rotate a shard once its oldest row is this old (0: never; rows wait in the journal, durable)")
	fs.DurationVar(&c.IdleFlush, "idle-flush", c.IdleFlush, "write every buffered row into shards once no record arrived for this long (0: 1m; negative: never)")
	fs.DurationVar(&c.JournalSync, "journal-sync", c.JournalSync, "fsync the journal of buffered rows this often: what a machine crash can lose (0: 1s)")
	fs.IntVar(&c.ZstdLevel, "zstd-level", c.ZstdLevel, "zstd level of the shards: 1, 3, 7 or 11 (0: zstd's default, 3; higher writes fewer bytes, slower)")
	fs.StringVar(&c.Group, "group", c.Group, "consumer group (default draftflow-sink)")
	fs.BoolVar(&c.AnnounceShards, "announce-shards", c.AnnounceShards, "announce each committed shard on the shard-files topic for `draftflow capture`")
}
