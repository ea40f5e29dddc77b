// Package shard is draftflow's training-data format on disk: the zstd-compressed Parquet shards, the run
// directories that hold them with their manifest and token counts, and the output directory of runs. Drafter
// training reads the shards directly (pyarrow, Hugging Face datasets, or the python/draftflow_data package).
// The sink stage (package sink) writes them; the capture stage (stages/capture) and the offline tools (package
// offline) read them. Package shard/features is the format of the feature files that lie beside the shards.
//
// The package owns the names, the schema and the files of a run directory (Write, WriteFile, Open, File.Scan,
// Manifest, RunInfo, Counts), the listing and selection of runs (RunDirs, SelectRuns, ScanRows) and the small
// helpers every writer of the format uses (WriteFileAtomic, TempPrefix). It knows nothing of Kafka: what a
// shard's offsets mean, and how the sink makes its writes exactly-once, is package sink's.
//
// # Layout
//
// A run is the set of rows produced with one model, one tokenizer and one set of sampling settings (RunInfo;
// the scheduling lane is not part of it). Each run has its own directory under the output directory, named
// from the model and a fingerprint of those settings (RunInfo.DirName), so a replay with new settings never
// mixes with old rows:
//
//	DIR/
//	  dir_id                          the directory's identity (DirIDFile)
//	  checkpoint.json, journal/       the sink's recovery state (package sink/journal); no shard
//	  Qwen3-8B-3f2a9c1b7d4e/          one run
//	    manifest.json                 shards (rows, tokens, bytes, sha256, offsets) and totals (ManifestName)
//	    token_counts.bin              generated-token counts of the shards (TokenCountsFile)
//	    id_index.bolt                 the sink's index of the shards' (id, turn) keys (sink.IDIndexFile)
//	    config-3c9e0d41a7b2.yaml      the effective configuration of a process that wrote it (ConfigFile)
//	    generated+3+000000001200-000000001399+5b0c7d1e9a2f.parquet
//	    generated+3+000000001200-000000001399+5b0c7d1e9a2f.dff    its feature file, when captured
//	    features.json                 the run's feature files (package shard/features)
//	    ...
//
// A shard's name (Origin.Name) holds the topic, the partition, the offset range of the flush that wrote it and
// the short topic ID of the topic incarnation those offsets belong to; the same facts are in the shard's
// Parquet key-value metadata (the Meta constants), with the run's RunInfo and the column documentation. A
// final shard name only ever exists for a complete, fsynced, committed file, and a shard is never overwritten:
// writers write a temporary name (TempPrefix) first, and manifest.json lists only committed shards, so a
// reader that follows the manifest never sees a partial shard.
//
// # Schema
//
// One row per generated turn, or per row brought in with its output (Columns gives the same list with the same
// documentation, in column order):
//
//	id              string        conversation id, stable across runs; (id, turn) is unique within a run
//	input_ids       list<int32>   prompt token ids followed by output token ids
//	loss_mask       list<uint8>   one per input id: 0 on prompt tokens, 1 on output tokens
//	prompt_len      int32         number of prompt tokens (leading zeros of loss_mask)
//	completion_len  int32         number of output tokens (trailing ones of loss_mask)
//	finish_reason   string        why generation ended: stop, length, or loop (stopped as a repetition loop)
//	dataset         string        dataset the conversation came from
//	turn            int32         index of the generated assistant turn (0 for the first)
//	endpoint        string        server that generated the completion
//	stop_reason     string        end, continued, tool_divergence, length, parse_error or loop (topics.StopReasons)
//	reply           string        the completion as an assistant message in JSON (multi-turn only; else empty)
//	origin          string        generated, result, record or dataset (topics.Origins): who made the output
//
// Shards written before stop_reason and reply existed have the first nine columns, those written before origin
// the first eleven; both are still read, the missing fields empty and origin generated. The manifest counts
// each shard's rows by origin (ManifestShard.Origins) and the run's (Manifest.Origins). A run whose conversations were merged into one row each (Manifest.Merged) has ones in the
// prompt part of loss_mask where earlier turns' outputs are. Row groups hold at most
// WriteOptions.RowGroupRows rows (DefaultRowGroupRows), so a reader streams a shard a row group at a time.
package shard
