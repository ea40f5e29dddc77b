package kafka

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	kafkago "github.com/segmentio/kafka-go"
)

// ErrGroupActive is wrapped by the error of ResetGroup on a group that still has live members.
var ErrGroupActive = errors.New("consumer group has live members")

// StartOffsets returns the log start offset of every partition of an existing (logical) topic: its oldest
// record still kept (retention deletes the ones before it).
func (a *Admin) StartOffsets(ctx context.Context, topic string) (map[int]int64, error) {
	return a.listOffsets(ctx, topic, "start offsets", kafkago.FirstOffsetOf)
}

// OffsetsForTime returns, for every partition of an existing (logical) topic, the offset of its first record
// with a timestamp at or after t, or the partition's end offset when it has none (ListOffsets with a
// timestamp).
func (a *Admin) OffsetsForTime(ctx context.Context, topic string, t time.Time) (map[int]int64, error) {
	found, err := a.listOffsets(ctx, topic, "offsets for "+t.Format(time.RFC3339), func(p int) kafkago.OffsetRequest {
		return kafkago.TimeOffsetOf(p, t)
	})
	if err != nil {
		return nil, err
	}
	var ends map[int]int64
	for p, off := range found {
		if off >= 0 {
			continue
		}
		if ends == nil {
			if ends, err = a.EndOffsets(ctx, topic); err != nil {
				return nil, err
			}
		}
		found[p] = ends[p]
	}
	return found, nil
}

// listOffsets sends one ListOffsets request for every partition of topic and returns the offset each answered
// (-1 for a timestamp no record reaches).
func (a *Admin) listOffsets(ctx context.Context, topic, what string, req func(partition int) kafkago.OffsetRequest) (map[int]int64, error) {
	n, err := a.PartitionCount(ctx, topic)
	if err != nil {
		return nil, err
	}
	physical := a.cfg.Topic(topic)
	lr := &kafkago.ListOffsetsRequest{Topics: map[string][]kafkago.OffsetRequest{}}
	for p := 0; p < n; p++ {
		lr.Topics[physical] = append(lr.Topics[physical], req(p))
	}
	client, err := a.cl.adminClient()
	if err != nil {
		return nil, err
	}
	resp, err := client.ListOffsets(ctx, lr)
	if err != nil {
		return nil, fmt.Errorf("kafka: %s of %s: %w", what, physical, a.cl.explain(ctx, err))
	}
	out := make(map[int]int64, n)
	for _, po := range resp.Topics[physical] {
		if po.Error != nil {
			return nil, fmt.Errorf("kafka: %s of %s/%d: %w", what, physical, po.Partition, po.Error)
		}
		switch {
		case len(po.Offsets) > 0: // a timestamp request that found a record
			for off := range po.Offsets {
				out[po.Partition] = off
			}
		case po.FirstOffset >= 0 && lr.Topics[physical][po.Partition].Timestamp == kafkago.FirstOffset:
			out[po.Partition] = po.FirstOffset
		default: // the end offset, or -1: a timestamp after every record
			out[po.Partition] = po.LastOffset
		}
	}
	if len(out) != n {
		return nil, fmt.Errorf("kafka: %s of %s: %d of %d partitions answered", what, physical, len(out), n)
	}
	return out, nil
}

// ResetGroup moves a stopped consumer group's committed offsets on a (logical) topic to offsets (partition ->
// next offset to read; partitions not named keep theirs), so its next members start there: the replay of a
// stage. The group is namespaced like ConsumerConfig.Group. It refuses, with an error wrapping ErrGroupActive
// and listing the members, while the group has live members (their commits would overwrite the reset), and
// refuses offsets outside [log start, end] of their partition. The check and the commit are two requests:
// stop the stage before, and start it after.
func (a *Admin) ResetGroup(ctx context.Context, group, topic string, offsets map[int]int64) error {
	g, err := a.DescribeGroup(ctx, group)
	if err != nil {
		return err
	}
	if len(g.Members) > 0 {
		return fmt.Errorf("kafka: reset group %s: %w (state %s; stop them first): %s", a.cfg.Topic(group), ErrGroupActive, g.State,
			g.MemberList())
	}
	starts, err := a.StartOffsets(ctx, topic)
	if err != nil {
		return err
	}
	ends, err := a.EndOffsets(ctx, topic)
	if err != nil {
		return err
	}
	parts := slices.Sorted(maps.Keys(offsets))
	for _, p := range parts {
		end, ok := ends[p]
		if !ok {
			return fmt.Errorf("kafka: reset group %s: %s has no partition %d (it has %d)", a.cfg.Topic(group), a.cfg.Topic(topic), p, len(ends))
		}
		if off := offsets[p]; off < starts[p] || off > end {
			return fmt.Errorf("kafka: reset group %s: offset %d of %s/%d is outside [%d, %d] (log start, end)",
				a.cfg.Topic(group), off, a.cfg.Topic(topic), p, starts[p], end)
		}
	}
	if len(offsets) == 0 {
		return nil
	}
	return a.StartGroupAt(ctx, group, topic, offsets)
}
