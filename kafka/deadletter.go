package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

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
// Create it with Config.NewDeadLetters; it is safe for concurrent use.
type DeadLetters struct {
	stage   string
	p       *Producer
	log     *slog.Logger
	closing chan struct{} // closed by Close: retries waiting give up
	once    sync.Once
}

// NewDeadLetters returns the dead-letter writer of stage (the name recorded in every Rejection's Stage).
func (c Config) NewDeadLetters(stage string) *DeadLetters {
	return &DeadLetters{
		stage:   stage,
		p:       c.NewProducer(topics.TopicRejected, ProducerConfig{}),
		log:     c.logger().With("stage", stage),
		closing: make(chan struct{}),
	}
}

// Reject writes r to the rejected topic and calls done once, never before Reject returns: with nil when the
// broker acknowledged it, or with ctx's error when ctx ended before it could be written. r.Stage is set to the writer's stage; when d
// is not nil (a record read from a topic), r's Topic, Partition and Offset are d's, and its Payload, when
// empty, is d's value. The record is keyed by r.ID, else by where it came from.
func (dl *DeadLetters) Reject(ctx context.Context, d *Delivery, r *topics.Rejection, done func(error)) {
	r.Stage = dl.stage
	key := r.ID
	if d != nil {
		m := d.Message
		r.Topic, r.Partition, r.Offset = m.Topic, m.Partition, m.Offset
		if len(r.Payload) == 0 {
			r.Payload = m.Value
		}
		if key == "" {
			key = d.Where()
		}
	}
	if key == "" {
		key = fmt.Sprintf("%s:%d", r.Source.File, r.Source.Line)
	}
	b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(100*time.Millisecond),
		backoff.WithMaxInterval(10*time.Second), backoff.WithMaxElapsedTime(0))
	var attempt func()
	retry := func(err error) {
		if ctx.Err() != nil {
			go done(ctx.Err()) // never from within Reject: callers may hold a lock done takes
			return
		}
		wait := b.NextBackOff()
		dl.log.Warn("dead letter not written; retrying", "id", r.ID, "reason", r.Reason, "err", err, "in", wait)
		go func() {
			t := time.NewTimer(wait)
			defer t.Stop()
			select {
			case <-t.C:
				attempt()
			case <-ctx.Done(): // a shutdown does not wait out the backoff
				done(ctx.Err())
			case <-dl.closing:
				done(fmt.Errorf("kafka: dead letters closed before %s was written: %w", key, err))
			}
		}()
	}
	attempt = func() {
		if err := dl.p.Send(context.WithoutCancel(ctx), key, r, func(err error) {
			if err != nil {
				retry(err)
				return
			}
			done(nil)
		}); err != nil {
			retry(err)
		}
	}
	attempt()
}

// Close stops pending retries (their done runs with an error) and flushes and closes the producer (the
// done callbacks of writes in flight run).
func (dl *DeadLetters) Close() error {
	dl.once.Do(func() { close(dl.closing) })
	return dl.p.Close()
}
