package kafka

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// ErrGroupActive is wrapped by the error of ResetGroup on a group that still has live members.
var ErrGroupActive = errors.New("consumer group has live members")

// StartOffsets returns the log start offset of every partition of an existing (logical) topic: its oldest
// record still kept (retention deletes the ones before it).
func (a *Admin) StartOffsets(ctx context.Context, topic string) (map[int]int64, error) {
	return a.listOffsets(ctx, topic, "start offsets", func(adm *kadm.Client, physical string) (kadm.ListedOffsets, error) {
		return adm.ListStartOffsets(ctx, physical)
	})
}

// OffsetsForTime returns, for every partition of an existing (logical) topic, the offset of its first record
// with a timestamp at or after t, or the partition's end offset when it has none (ListOffsets with a
// timestamp).
func (a *Admin) OffsetsForTime(ctx context.Context, topic string, t time.Time) (map[int]int64, error) {
	return a.listOffsets(ctx, topic, "offsets for "+t.Format(time.RFC3339), func(adm *kadm.Client, physical string) (kadm.ListedOffsets, error) {
		return adm.ListOffsetsAfterMilli(ctx, t.UnixMilli(), physical)
	})
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
