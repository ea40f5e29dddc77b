package kafka

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
)

// RetentionRiskFraction is the age, as a fraction of retention.ms, from which an unconsumed record counts as
// at risk: the broker deletes it once its age reaches retention.ms (at its next retention check), consumed or
// not, and a consumer whose committed offset falls off the log silently jumps to the first offset.
const RetentionRiskFraction = 0.8

// RetentionRisk is what a topic's retention may cost a consumer group: per partition, the records the group has
// not consumed yet, how old the oldest of them is, and those already deleted before the group read them.
// Admin.RetentionRisk fills it; a status command turns it into warnings (Warnings).
type RetentionRisk struct {
	// Topic and Group are the physical names (namespace included).
	Topic, Group string
	// Retention is the topic's retention.ms; negative when records are kept forever (retention.ms=-1).
	Retention time.Duration
	// Partitions, in partition order.
	Partitions []PartitionRetention
	// Checked is when the offsets were read.
	Checked time.Time
}

// PartitionRetention is one partition of a RetentionRisk.
type PartitionRetention struct {
	Partition int
	// LogStart is the oldest offset still on the log; End is the offset the next record will get.
	LogStart, End int64
	// Committed is the group's committed offset (the next record it reads), -1 when it has none (a group then
	// starts at LogStart).
	Committed int64
	// Unconsumed is how many records from max(Committed, LogStart) to End the group has still to read.
	Unconsumed int64
	// Lost is how many records retention deleted before the group read them: LogStart - Committed when the
	// committed offset is below the log start.
	Lost int64
	// Oldest is the timestamp of the oldest unconsumed record still on the log; zero when nothing is unconsumed,
	// or when retention is forever (not looked up then), or when it could not be read.
	Oldest time.Time
}

// Expires returns when retention deletes the oldest unconsumed record of p (zero: never, or unknown).
func (r *RetentionRisk) Expires(p PartitionRetention) time.Time {
	if r.Retention < 0 || p.Oldest.IsZero() {
		return time.Time{}
	}
	return p.Oldest.Add(r.Retention)
}

// Lost returns the records deleted before the group read them, over all partitions.
func (r *RetentionRisk) Lost() int64 {
	var n int64
	for _, p := range r.Partitions {
		n += p.Lost
	}
	return n
}

// AtRisk reports whether, at now, the group has lost records or has an unconsumed record older than
// RetentionRiskFraction of the retention.
func (r *RetentionRisk) AtRisk(now time.Time) bool { return len(r.Warnings(now)) > 0 }

// Warnings returns one line per partition that lost records or whose oldest unconsumed record is at risk at
// now; none when all is well.
func (r *RetentionRisk) Warnings(now time.Time) []string {
	var out []string
	for _, p := range r.Partitions {
		if p.Lost > 0 {
			out = append(out, fmt.Sprintf("%s/%d: %d records deleted by retention before group %s read them (committed offset %d, log starts at %d)",
				r.Topic, p.Partition, p.Lost, r.Group, p.Committed, p.LogStart))
		}
		if r.Retention < 0 || p.Oldest.IsZero() || p.Unconsumed == 0 {
			continue
		}
		age := now.Sub(p.Oldest)
		if float64(age) >= RetentionRiskFraction*float64(r.Retention) {
			out = append(out, fmt.Sprintf("%s/%d: the oldest of %d records group %s has not read is %s old, retention.ms is %s: it is deleted at %s",
				r.Topic, p.Partition, p.Unconsumed, r.Group, age.Round(time.Second), r.Retention, r.Expires(p).UTC().Format(time.RFC3339)))
		}
	}
	return out
}

// RetentionRisk reads a (logical) topic's retention.ms, each partition's log start and end offsets, a consumer
// group's committed offsets (the group namespaced like ConsumerConfig.Group) and, when retention is finite, the
// timestamp of the oldest record the group has not consumed, and returns them as a RetentionRisk. It changes
// nothing and needs no live member.
func (a *Admin) RetentionRisk(ctx context.Context, group, topic string) (*RetentionRisk, error) {
	r := &RetentionRisk{Topic: a.cfg.Topic(topic), Group: a.cfg.Topic(group), Retention: -1, Checked: time.Now()}
	v, err := a.TopicConfigValue(ctx, topic, "retention.ms")
	if err != nil {
		return nil, fmt.Errorf("kafka: retention of %s: %w", r.Topic, err)
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("kafka: retention.ms of %s is %q, not a number", r.Topic, v)
	}
	if ms >= 0 {
		r.Retention = time.Duration(ms) * time.Millisecond
	}
	starts, err := a.StartOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	ends, err := a.EndOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	committed, err := a.CommittedOffsets(ctx, group, topic)
	if err != nil {
		return nil, err
	}
	for part, start := range starts {
		p := PartitionRetention{Partition: part, LogStart: start, End: ends[part], Committed: -1}
		from := start
		if off, ok := committed[part]; ok {
			p.Committed = off
			if off < start {
				p.Lost = start - off
			} else {
				from = off
			}
		}
		p.Unconsumed = max(p.End-from, 0)
		if p.Unconsumed > 0 && r.Retention >= 0 {
			t, err := a.recordTime(ctx, topic, part, from)
			if err != nil {
				a.cfg.logger().Debug("cannot read the oldest unconsumed record", "topic", r.Topic, "partition", part, "offset", from, "err", err)
			}
			p.Oldest = t
		}
		r.Partitions = append(r.Partitions, p)
	}
	slices.SortFunc(r.Partitions, func(a, b PartitionRetention) int { return a.Partition - b.Partition })
	return r, nil
}

// recordTime returns the timestamp of the record at offset of a (logical) topic's partition (or of the first one
// after it, should it be gone).
func (a *Admin) recordTime(ctx context.Context, topic string, partition int, offset int64) (time.Time, error) {
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var at time.Time
	err := a.cl.ReadPartition(fctx, topic, partition, offset, math.MaxInt64, func(m Message) error {
		at = m.Time
		return errFound
	})
	switch {
	case errors.Is(err, errFound):
		return at, nil
	case fctx.Err() != nil && ctx.Err() == nil:
		return time.Time{}, fmt.Errorf("kafka: no record at %s/%d@%d within 10s", a.cfg.Topic(topic), partition, offset)
	}
	return time.Time{}, err
}

// errFound ends a ReadPartition once the record looked for was read.
var errFound = errors.New("found")
