// Package sink is draftflow's last stage: it consumes Generation records from the generated topic and writes
// them, exactly once, into the shards of package shard (zstd-compressed Parquet, one directory per run, with
// a manifest and token counts), which drafter training reads directly. Package shard says what the output
// directory holds and what a shard's columns are; this package is the stage that writes it: buffering,
// journaling, flushing, deduplication, next turns of multi-turn conversations, dead letters, and what it
// publishes about its shards. The tools that check and convert the shards are package offline.
//
// # Output directory
//
// Each run (shard.RunInfo) has its own directory under Config.Dir (shard.RunInfo.DirName); beside the runs the
// stage keeps its own state:
//
//	DIR/
//	  .lock                           one sink process owns DIR at a time (an advisory lock)
//	  dir_id                          the directory's identity on the shards topics (shard.DirIDFile)
//	  checkpoint.json                 recovery point: per partition, the next offset to write (sink/journal)
//	  journal/                        per partition, the records absorbed since its last flush (sink/journal)
//	  answers/                        `draftflow run`'s generate stage: answered generations (stages/generate/answers)
//	    generated+3+000000001400+5b0c7d1e9a2f.wal
//	  Qwen3-8B-3f2a9c1b7d4e/          one run (package shard)
//	    manifest.json, token_counts.bin, *.parquet
//	    id_index.bolt                 the (id, turn) keys of the run's shards, on disk (IDIndexFile)
//
// A shard's name holds the topic, the partition, the offset range of the flush that wrote it and the short
// topic ID of the topic incarnation those offsets belong to (shard.Origin). Offsets are only meaningful within
// one incarnation of a topic: a topic deleted and recreated, or the in-process broker of a new `draftflow
// run`, starts again at 0. The recovery point is therefore kept per topic ID (Kafka 2.8+ and the embedded
// broker report one), and offsets recorded for another incarnation are ignored: its records are then
// deduplicated by (id, turn) alone. A shard is never overwritten. Within a run, (id, turn) is unique.
//
// # Flush policy and journal
//
// A shard's size does not depend on how fast rows arrive: a partition is flushed when its buffer holds
// Config.RotateRows rows (10,000) or Config.RotateBytes, when the buffers together hold more than the sink
// may, after Config.IdleFlush (1 min) without any record (the tail of a finite input), optionally when its
// oldest row is Config.RotateInterval old (off by default), and when the sink stops. What makes a buffered
// row durable before that is the journal: every record the sink absorbs (a row, a duplicate, an offset whose
// dead letter was acknowledged) is appended, with its offset and Kafka value and a CRC, to its partition's
// segment under DIR/journal (package sink/journal) before anything else happens to it, in particular before
// its next turn is sent; a next turn's acknowledgement by the broker is appended too. The segments are fsynced every
// Config.JournalSync (1 s), and a partition's segments are removed once a flush committed their records. So a
// SIGKILL loses no absorbed row (the kernel holds what was written), and a machine crash loses at most the
// last JournalSync of them. A reader takes the longest valid prefix of a segment; a conversation's turns share
// a partition, so a turn is never in the journal without the turn it was built from.
//
// On start, after the shard recovery below, the journal is replayed. A partition of the topic incarnation
// being consumed is buffered again exactly as it was (its segment kept and appended to); the consumer
// redelivers the same records from the group's committed offset, and those at or below the last journaled
// offset are resolved by the next flush like any rewind; next turns whose acknowledgement is in the journal
// are not sent again. A partition of another incarnation (a new embedded broker: the next `draftflow run`;
// a topic recreated) never sees its offsets again: its rows are written into shards at once, under that
// incarnation's offsets, duplicates dropped as always. Either way a row the journal holds is never
// generated again, and what a kill of `draftflow run` costs is its in-flight requests.
//
// # Exactly-once protocol
//
// Kafka delivers at least once and a consumer group may rewind. The sink makes the output exactly-once with a
// recovery point that lives next to the shards, not in Kafka:
//
//  1. Rows are buffered per topic partition, whatever run they belong to. A flush always takes every buffered
//     record of one partition, the contiguous offset range [first, last] absorbed since the previous flush, so
//     rows of several runs interleaved in one partition are made durable together: flushing one run can never
//     let recovery skip another run's unflushed rows.
//  2. A flush writes one shard per run present in the buffer to a temporary name (".tmp-" + final name) in the
//     run directory, fsyncs each file and each directory.
//  3. It then rewrites checkpoint.json atomically (temporary file, fsync, rename, directory fsync) with the
//     partition's next offset, last+1, and the list of shards this flush wrote. This rename is the commit point.
//  4. It renames each temporary shard to its final name, fsyncs the run directories, rewrites each run's
//     manifest.json atomically, then its token_counts.bin (shard.TokenCountsFile: the generated-token counts
//     and the manifest shards they cover), then adds the flush's (id, turn) keys to its id_index.bolt (IDIndexFile)
//     (fsynced; its last transaction records the manifest shards the index covers), removes the partition's
//     journal segments, and only then marks the Kafka deliveries Done (so the group commits their offsets)
//     and reports the ids through Config.OnDurable. Token counts and id index are caches of the shards: a crash before they are updated
//     leaves them covering a prefix of the manifest, which recovery extends.
//
// On start, before consuming, the sink recovers: the shards named by the checkpoint's last flush of each
// partition are rolled forward (a temporary file the checkpoint names is renamed to its final name); every
// other temporary file is a torn write and is deleted; each manifest is reconciled with the shards on disk;
// the next offset of each partition is the larger of the checkpoint's and, as in the Kafka Connect S3 sink,
// the last offset + 1 of the shards on disk (a final shard name only ever exists for a committed flush); and the
// token counts and the id index of each run are brought up to the manifest from the rows of the shards they do
// not cover (the id index is rebuilt from every shard when it is missing, unreadable, or covers shards the
// manifest does not list). The (id, turn) keys of committed rows stay on disk; memory holds only the keys
// buffered since the last flush, so it does not grow with the size of the output. While consuming, a record at an offset below its partition's
// next offset is already in a shard and is acknowledged without being written, whatever the group's committed
// offset says, and a record whose (id, turn) is already written (or buffered) for its run is dropped as a
// duplicate and reported through Config.OnDuplicate. Readers never see a partial shard: final names appear
// only for complete, fsynced, committed files, and manifest.json lists only those.
//
// # What the shards hold, published
//
// So that a turn already in the shards is never sent to a server again, also by a generate stage on another
// machine, the sink publishes what its shards hold on topics.TopicShards (compacted, one partition). On every
// start, after recovery and before consuming, it writes a new epoch: a topics.ShardsEpoch in state seeding
// naming the directory (shard.DirIDFile), a topics.ShardedTurn for every (run, id, turn) of every run's id
// index, and the epoch in state complete, each acknowledged before the next; Config.OnSeeded is called then.
// After every flush, once its keys are in the id index, it publishes them (retried while the run lasts; a lost
// publication costs at most a generation, never a row, and the next start publishes everything again).
//
// Generate sends, for a turn the topic lists, a Generation with InShards set and the thread, no token ids. The sink
// looks it up: if the run's shards hold it, it is counted apart from redone work (draftflow_records_total{stage="sink",result="in_shards"}, Result.InShards);
// when the row in the shards continued its conversation, the next turn is sent again from the reply the id index
// recorded (whatever topics carried it before), so a conversation whose first k turns are in the shards resumes
// at turn k and one wholly in the shards is followed to its end; when it ended its conversation,
// Config.OnDuplicate reports it. If the shards do not hold it (the topic spoke for another directory, or rows
// were deleted), it is dead-lettered (class not_in_shards): nothing here can generate it.
//
// Records reach the sink through the record lifecycle of package kafka/stream: decoded, counted in
// draftflow_records_total{stage="sink"} when taken in, acknowledged when the flush that holds them commits.
// Records that cannot be written (undecodable values, empty prompts or completions, aborted generations,
// token ids outside int32) go to the rejected topic as a topics.Rejection with stage "sink", in their
// partition's order; the record is finished once the broker acknowledged the rejection (written again while
// the run lasts). If Kafka refuses the sink's writes, or a flush fails, Run stops with an error and nothing
// after the failure is ever acknowledged, so a restart resumes cleanly.
//
// One sink process owns a Config.Dir at a time (an advisory lock on DIR/.lock enforces it). The guarantee is
// per directory: replicas of the sink in one consumer group, each with its own directory, can each write a
// row when a rebalance moves a partition between them (the old owner flushes what it buffered, the new one
// re-reads from the group's offset), so across replica directories readers must deduplicate by (id, turn).
// Run one sink per output for exactly-once output.
package sink
