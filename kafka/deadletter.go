package kafka

import (
	"context"
	"fmt"

	"github.com/draftflow/draftflow/topics"
)

// DeadLetters is the one dead-letter policy of every stage: a record a stage cannot process becomes a
// topics.Rejection on the rejected topic, naming the record (its topic, partition and offset, or its input
// file and line) and the reason, and the record's delivery is finished only once the dead letter is durable.
//
//   - A dead letter always fits: the Producer shortens its payload to the topic's message limit.
//   - A write the broker fails is retried with exponential backoff for as long as the caller's context lasts:
//     a failing broker holds the record back, it never drops it and never stops the stage.
//   - When the context ends first (shutdown), done gets its error: the caller abandons the delivery, which is
//     redelivered, and dead-lettered again, after a restart.
//
// Create it with Client.NewDeadLetters; it is safe for concurrent use.
type DeadLetters struct {
	stage string
	p     *Producer
}

// NewDeadLetters returns the dead-letter writer of stage (the name recorded in every Rejection's Stage).
func (c *Client) NewDeadLetters(stage string) *DeadLetters {
	return &DeadLetters{stage: stage, p: c.NewProducer(topics.TopicRejected, ProducerConfig{})}
}

// Reject writes r to the rejected topic (Producer.SendRetrying) and calls done once, never before Reject
// returns: with nil when the broker acknowledged it, or with ctx's error when ctx ended before it could be
// written. r.Stage is set to the writer's stage; when d is not nil (a record read from a topic), r's Topic,
// Partition and Offset are d's (the payload is the caller's: package kafka/stream sets it to the record's value,
// trimmed). The record is keyed by r.ID, else by where it came from.
func (dl *DeadLetters) Reject(ctx context.Context, d *Delivery, r *topics.Rejection, done func(error)) {
	r.Stage = dl.stage
	key := r.ID
	if d != nil {
		m := d.Message
		r.Topic, r.Partition, r.Offset = m.Topic, m.Partition, m.Offset
		if key == "" {
			key = d.Where()
		}
	}
	if key == "" {
		key = fmt.Sprintf("%s:%d", r.Source.File, r.Source.Line)
	}
	dl.p.SendRetrying(ctx, key, r, done)
}

// Close stops pending retries (their done runs with an error) and flushes and closes the producer (the
// done callbacks of writes in flight run); every done has returned when it returns.
func (dl *DeadLetters) Close() error { return dl.p.Close() }
