package kafka

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	kafkago "github.com/segmentio/kafka-go"
)

// Finished work beyond the committed offset, handed to the partition's next owner.
//
// A Kafka offset says "everything before this is done", but work finishes out of order: when a member gives a
// partition up (a rebalance, a shutdown) with one record still unfinished, every record after it that did
// finish would be done again by the next owner, which starts at the committed offset. For generate that is GPU
// work, and measured with `make rebalance` it was most of what a rebalance redid. So every commit carries, in
// the offset commit's metadata string, the offsets after the committed one that are already finished; a member
// taking the partition over reads it and marks those records finished without handing them out (the approach of
// Confluent's parallel consumer). The metadata is bounded below the broker's offset.metadata.max.bytes (4 KiB by
// default); offsets that do not fit are simply done again.

// doneMetaPrefix starts a metadata string in this format: version 1, then base64 (URL alphabet, no padding) of
// uvarint deltas: the first finished offset minus the committed offset, then each next one minus the previous.
const doneMetaPrefix = "draftflow-done1:"

// maxDoneMeta bounds the metadata string.
const maxDoneMeta = 3800

// encodeDone returns the metadata for a commit of offset committed with the finished offsets done (sorted, all
// above committed); offsets that do not fit in maxDoneMeta are left out.
func encodeDone(committed int64, done []int64) string {
	if len(done) == 0 {
		return ""
	}
	maxRaw := base64.RawURLEncoding.DecodedLen(maxDoneMeta - len(doneMetaPrefix))
	buf := make([]byte, 0, min(maxRaw, len(done)*2))
	prev := committed
	for _, off := range done {
		if off <= prev {
			continue // not sorted or not above the commit: skip rather than encode nonsense
		}
		var tmp [binary.MaxVarintLen64]byte
		n := binary.PutUvarint(tmp[:], uint64(off-prev))
		if len(buf)+n > maxRaw {
			break
		}
		buf = append(buf, tmp[:n]...)
		prev = off
	}
	if len(buf) == 0 {
		return ""
	}
	return doneMetaPrefix + base64.RawURLEncoding.EncodeToString(buf)
}

// decodeDone returns the finished offsets a commit of offset committed with metadata meta names; nil for
// metadata of another format (or none). A malformed string is an error.
func decodeDone(committed int64, meta string) ([]int64, error) {
	rest, ok := strings.CutPrefix(meta, doneMetaPrefix)
	if !ok {
		return nil, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return nil, fmt.Errorf("kafka: offset metadata %q: %w", meta, err)
	}
	var out []int64
	prev := committed
	for len(raw) > 0 {
		d, n := binary.Uvarint(raw)
		if n <= 0 || d == 0 || d > 1<<40 {
			return nil, fmt.Errorf("kafka: offset metadata %q: bad delta", meta)
		}
		prev += int64(d)
		out = append(out, prev)
		raw = raw[n:]
	}
	return out, nil
}

// commitWithDone commits offsets (partition -> next offset to read) through gen, each with the metadata of the
// finished offsets above it (done, per partition). kafka-go's Generation.CommitOffsets cannot send metadata,
// so this sends the OffsetCommit itself, with the generation's id and member id as that would.
func (c *Consumer) commitWithDone(ctx context.Context, gen *kafkago.Generation, offsets map[int]int64, done map[int][]int64) error {
	client, err := c.cl.adminClient()
	if err != nil {
		return err
	}
	req := &kafkago.OffsetCommitRequest{GroupID: c.cc.Group, GenerationID: int(gen.ID), MemberID: gen.MemberID,
		Topics: map[string][]kafkago.OffsetCommit{}}
	for _, p := range slices.Sorted(maps.Keys(offsets)) {
		req.Topics[c.topic] = append(req.Topics[c.topic], kafkago.OffsetCommit{Partition: p, Offset: offsets[p],
			Metadata: encodeDone(offsets[p], done[p])})
	}
	resp, err := client.OffsetCommit(ctx, req)
	if err != nil {
		return c.cl.explain(ctx, err)
	}
	var errs []error
	for _, tp := range resp.Topics {
		for _, p := range tp {
			if p.Error != nil {
				errs = append(errs, fmt.Errorf("partition %d: %w", p.Partition, p.Error))
			}
		}
	}
	return errors.Join(errs...)
}

// handedOver reads, for the partitions just assigned, the finished offsets the previous owner committed beyond
// each committed offset (start: the offset each partition is read from). A partition whose committed offset is
// not its start, or whose metadata is of another format, has none.
func (c *Consumer) handedOver(ctx context.Context, start map[int]int64) (map[int]map[int64]bool, error) {
	client, err := c.cl.adminClient()
	if err != nil {
		return nil, err
	}
	parts := slices.Sorted(maps.Keys(start))
	resp, err := client.OffsetFetch(ctx, &kafkago.OffsetFetchRequest{GroupID: c.cc.Group, Topics: map[string][]int{c.topic: parts}})
	if err != nil {
		return nil, c.cl.explain(ctx, err)
	}
	out := map[int]map[int64]bool{}
	for _, p := range resp.Topics[c.topic] {
		if p.Error != nil || p.CommittedOffset < 0 || p.CommittedOffset != start[p.Partition] || p.Metadata == "" {
			continue
		}
		done, err := decodeDone(p.CommittedOffset, p.Metadata)
		if err != nil {
			return nil, err
		}
		if len(done) > 0 {
			out[p.Partition] = make(map[int64]bool, len(done))
			for _, off := range done {
				out[p.Partition][off] = true
			}
		}
	}
	return out, nil
}

// countSkips counts the offsets of a handedOver result.
func countSkips(skip map[int]map[int64]bool) int {
	n := 0
	for _, s := range skip {
		n += len(s)
	}
	return n
}
