package kafka

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Finished work beyond the committed offset, handed to the partition's next owner.
//
// A Kafka offset says "everything before this is done", but work finishes out of order: when a member gives a
// partition up (a rebalance, a shutdown) with one record still unfinished, every record after it that did
// finish would be done again by the next owner, which starts at the committed offset. For generate that is GPU
// work, and measured with `make rebalance` it was most of what a rebalance redid. So every commit carries, in
// the offset commit's metadata string, the offsets after the committed one that are already finished; a member
// taking the partition over reads it and marks those records finished without handing them out (the approach of
// Confluent's parallel consumer). A member is told of them as its new partitions' committed offsets are fetched
// (Consumer.handOver). The metadata is bounded below the broker's offset.metadata.max.bytes (4 KiB by
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

// commitWithDone commits offsets (partition -> next offset to read) in the member's group session, each with
// the metadata of the finished offsets above it (done, per partition). It is franz-go's synchronous commit (in
// order with any other, with the session's generation and member id); only the metadata is set here, as the
// request goes out.
func (c *Consumer) commitWithDone(ctx context.Context, cl *kgo.Client, offsets map[int]int64, done map[int][]int64) error {
	commit := make(map[int32]kgo.EpochOffset, len(offsets))
	for p, off := range offsets {
		commit[int32(p)] = kgo.EpochOffset{Epoch: -1, Offset: off}
	}
	ctx = kgo.PreCommitFnContext(ctx, func(req *kmsg.OffsetCommitRequest) error {
		for i := range req.Topics {
			for j := range req.Topics[i].Partitions {
				p := &req.Topics[i].Partitions[j]
				meta := encodeDone(p.Offset, done[int(p.Partition)])
				p.Metadata = &meta
			}
		}
		return nil
	})
	var errs []error
	cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{c.topic: commit},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			if err != nil {
				errs = append(errs, err)
				return
			}
			for _, t := range resp.Topics {
				for _, p := range t.Partitions {
					if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
						errs = append(errs, fmt.Errorf("partition %d: %w", p.Partition, err))
					}
				}
			}
		})
	return errors.Join(errs...)
}
