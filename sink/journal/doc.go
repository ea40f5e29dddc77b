// Package journal is the sink's recovery state in its output directory, beside the shards (package shard):
// the checkpoint and the journal.
//
// The checkpoint (CheckpointName) holds, per partition of each incarnation of the consumed topic (Key), the
// next offset not yet in a shard and the shards of the partition's last flush; its atomic rename is the
// commit point of a flush. The journal (Dir) holds, per partition, every record the sink absorbed since that
// partition's last flush, appended as it is absorbed:
//
//	DIR/journal/generated+3+000000001400+5b0c7d1e9a2f.wal
//
// A segment is named after the partition, the first offset it holds and the topic incarnation ("nolog" when
// the broker reports none). It is a sequence of records, each a uint32 little-endian payload length, the
// payload's CRC-32C (Castagnoli) as uint32 little-endian, then the payload: a kind byte, then for the header
// (the first record) the JSON of the partition and the format version, for the others the offset as a
// varint and, for a Record, the record's Kafka value. A reader takes the longest valid prefix of a segment.
//
// Pending counts what a journal holds past the checkpoint without changing anything, for `draftflow inspect`.
package journal
