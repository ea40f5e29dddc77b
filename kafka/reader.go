package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// partitionReader returns a franz-go client that reads one partition of a physical topic from offset from on,
// outside any consumer group (nothing is committed). A record deleted by retention before it is read is skipped
// (the reader goes on at the partition's first offset).
func (c *Client) partitionReader(ctx context.Context, physical string, partition int, from int64, wait time.Duration) (*kgo.Client, error) {
	fetchMax := int32(c.cfg.maxMessageBytes() * 2)
	return c.newFranz(ctx,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{physical: {int32(partition): kgo.NewOffset().At(from)}}),
		kgo.FetchMaxWait(wait), kgo.FetchMaxBytes(fetchMax), kgo.FetchMaxPartitionBytes(fetchMax))
}

// messageOf returns the Message of a record franz-go read.
func messageOf(r *kgo.Record) Message {
	return Message{Topic: r.Topic, Partition: int(r.Partition), Offset: r.Offset, Key: r.Key, Value: r.Value, Time: r.Timestamp}
}

// fetchError returns the first error of a poll: ctx's error once ctx ended, else what the reader could not
// recover from.
func fetchError(ctx context.Context, fs kgo.Fetches) error {
	for _, fe := range fs.Errors() {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !errors.Is(fe.Err, context.Canceled) {
			return fe.Err
		}
	}
	return ctx.Err()
}

// Follow reads partition 0 of a (logical) topic of one partition (EnsureCompactedTopic) from its first record
// on, outside any consumer group (nothing is committed), and calls fn for each record in order until ctx ends.
// caughtUp, if not nil, is called once, when every record that was on the topic when Follow started has been
// passed to fn (at once for an empty topic). Follow returns ctx's error when ctx ends, or an error when the
// topic cannot be read.
func (c *Client) Follow(ctx context.Context, topic string, fn func(Message), caughtUp func()) error {
	first, err := c.Admin().StartOffsets(ctx, topic)
	if err != nil {
		return err
	}
	end, err := c.Admin().EndOffsets(ctx, topic)
	if err != nil {
		return err
	}
	from, to := first[0], end[0]
	if caughtUp != nil && from >= to {
		caughtUp()
		caughtUp = nil
	}
	physical := c.cfg.Topic(topic)
	r, err := c.partitionReader(ctx, physical, 0, from, 200*time.Millisecond)
	if err != nil {
		return fmt.Errorf("kafka: follow %s from %d: %w", physical, from, err)
	}
	defer r.Close()
	at := from
	for {
		fs := r.PollFetches(ctx)
		if err := fetchError(ctx, fs); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("kafka: follow %s at %d: %w", physical, at, c.explain(ctx, err))
		}
		for _, rec := range fs.Records() {
			at = rec.Offset + 1
			fn(messageOf(rec))
			if caughtUp != nil && rec.Offset >= to-1 {
				caughtUp()
				caughtUp = nil
			}
		}
	}
}

// ReadPartition reads the records of one partition of a (logical) topic with offsets in [from, to), outside
// any consumer group (nothing is committed), and calls fn for each in order. It returns fn's first error, or
// an error when ctx ends before the record at to-1 was read. Records deleted by retention or compaction are
// skipped.
func (c *Client) ReadPartition(ctx context.Context, topic string, partition int, from, to int64, fn func(Message) error) error {
	if from >= to {
		return nil
	}
	physical := c.cfg.Topic(topic)
	r, err := c.partitionReader(ctx, physical, partition, from, 100*time.Millisecond)
	if err != nil {
		return fmt.Errorf("kafka: read %s/%d from %d: %w", physical, partition, from, err)
	}
	defer r.Close()
	at := from
	for {
		fs := r.PollFetches(ctx)
		if err := fetchError(ctx, fs); err != nil {
			return fmt.Errorf("kafka: read %s/%d at %d of [%d, %d): %w", physical, partition, at, from, to, c.explain(ctx, err))
		}
		for _, rec := range fs.Records() {
			if rec.Offset >= to {
				return nil
			}
			at = rec.Offset + 1
			if err := fn(messageOf(rec)); err != nil {
				return err
			}
			if rec.Offset >= to-1 {
				return nil
			}
		}
	}
}
