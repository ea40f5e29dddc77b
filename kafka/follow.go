package kafka

import (
	"context"
	"fmt"
	"time"

	kafkago "github.com/segmentio/kafka-go"
)

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
	dialer, err := c.dialer()
	if err != nil {
		return err
	}
	r := kafkago.NewReader(kafkago.ReaderConfig{
		Brokers:   c.cfg.Brokers,
		Topic:     c.cfg.Topic(topic),
		Partition: 0,
		Dialer:    dialer,
		MinBytes:  1,
		MaxBytes:  c.cfg.maxMessageBytes() * 2,
		MaxWait:   200 * time.Millisecond,
		Logger:    kafkago.LoggerFunc(func(string, ...any) {}),
		ErrorLogger: kafkago.LoggerFunc(func(msg string, args ...any) {
			c.cfg.logger().Debug(fmt.Sprintf(msg, args...), "topic", c.cfg.Topic(topic))
		}),
	})
	defer r.Close()
	if err := r.SetOffset(from); err != nil {
		return fmt.Errorf("kafka: follow %s from %d: %w", c.cfg.Topic(topic), from, err)
	}
	for {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("kafka: follow %s at %d: %w", c.cfg.Topic(topic), r.Offset(), c.explain(ctx, err))
		}
		fn(Message{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Key: m.Key, Value: m.Value, Time: m.Time})
		if caughtUp != nil && m.Offset >= to-1 {
			caughtUp()
			caughtUp = nil
		}
	}
}
