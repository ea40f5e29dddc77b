package stream

import (
	"errors"
	"fmt"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/topics"
)

// Output is a topic a stage writes its results to.
type Output struct {
	s     *Stage
	topic string
	p     *kafka.Producer
}

// Output returns a writer of the (logical) topic; Close closes it.
func (s *Stage) Output(topic string) *Output {
	o := &Output{s: s, topic: topic, p: s.cl.NewProducer(topic, kafka.ProducerConfig{})}
	s.mu.Lock()
	s.outs = append(s.outs, o)
	s.mu.Unlock()
	return o
}

// Send encodes rec (a *topics.Prompt, *topics.Tokenized or *topics.Generation) with the topics/ codec and writes
// it keyed by key under the one produce policy of every stage, and calls done once, never before Send returns:
//
//   - with nil once every in-sync replica acknowledged the record;
//   - at once, with the error, when the record can never be written: it cannot be encoded (IsUnencodable) or it
//     is over the message size limit, the client's or the topic's (kafka.IsRecordTooLarge). The record is at
//     fault, not Kafka: Record.Produce dead-letters it (class Unencodable or TooLarge);
//   - any other failure is retried with exponential backoff (100 ms, growing to 10 s) for as long as the stage's
//     context lives: a failing broker holds the record back, never drops it, and never stops the stage;
//   - with the context's error when the context ends before a write succeeded, or an error when the stage closes
//     first: the record is abandoned and redelivered after a restart (what ingest read is read again);
//   - with the error when no retry can help and no record is at fault (credentials the brokers refuse, a
//     security setting that cannot be used): the stage fails (Stage.Err, Stage.Failed; Consume stops) and the
//     record is abandoned.
//
// Nothing but the stage's context ending or Kafka refusing the stage's credentials stops a stage: the writes of
// every stage behave alike, and a record is acknowledged only once its result is durable, so nothing is lost and
// the sink makes the shards exactly-once.
func (o *Output) Send(key string, rec any, done func(error)) {
	value, err := topics.Marshal(rec)
	if err != nil {
		err = &encodeError{fmt.Errorf("%s: encode %q for %s: %w", o.s.name, key, o.topic, err)}
		o.s.later(func() { done(err) })
		return
	}
	o.p.SendRetrying(o.s.ctx, key, value, func(err error) {
		if err != nil && !kafka.IsRecordTooLarge(err) && !o.s.ended(err) {
			o.s.stop(fmt.Errorf("%s: write %q to %s: %w", o.s.name, key, o.topic, err))
		}
		done(err)
	})
}

// encodeError is a record Output.Send could not encode: writing it again cannot help.
type encodeError struct{ err error }

func (e *encodeError) Error() string { return e.err.Error() }
func (e *encodeError) Unwrap() error { return e.err }

// IsUnencodable reports whether err says a record could not be encoded (Output.Send): permanent for that record,
// whatever the broker does.
func IsUnencodable(err error) bool {
	var ee *encodeError
	return errors.As(err, &ee)
}
