package stream

import (
	"bytes"
	"fmt"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/topics"
)

// deadLetter writes r, the dead letter of a record (d: the consumed record, nil for one that did not come from
// Kafka), to the rejected topic and calls done once, never before it returns: with nil once it is durable, or
// with the error that stopped it. It is the one dead-letter policy of every stage:
//
//   - r names the stage and, for a consumed record, its topic, partition and offset; it is keyed by r.ID, else
//     by where the record came from;
//   - its payload is trimmed here, once, to topics.MaxRejectedPayload and to what the rejected topic accepts:
//     a dead letter always fits. A broker may still refuse it as too large (an existing topic whose
//     max.message.bytes is below Config.MaxMessageBytes, which the producer learns from that refusal): it is
//     then written again with what the topic's limit leaves room for, and at last with no payload;
//   - a write the broker fails is retried while the stage's context lives (kafka.Producer.SendRetrying): a
//     failing broker holds the record back, never drops it and never stops the stage;
//   - when the context ends first (shutdown), done gets its error: the caller abandons the record, which is
//     redelivered, and dead-lettered again, after a restart. Any other error (credentials the brokers refuse)
//     makes the stage fail.
func (s *Stage) deadLetter(d *kafka.Delivery, r *topics.Rejection, done func(error)) {
	r.Stage = s.name
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
	// A copy: the caller's buffer may be reused (ingest's line reader) while the write is retried.
	r.Payload = bytes.Clone(r.Payload[:min(len(r.Payload), topics.MaxRejectedPayload)])
	s.writeDeadLetter(key, r, 0, func(err error) {
		if err != nil && !s.ended(err) {
			s.stop(fmt.Errorf("%s: dead letter of %s: %w", s.name, rejectedWhat(r), err))
		}
		done(err)
	})
}

// maxShrinks is how many times a dead letter the broker refused as too large is written again with less
// payload: with what the topic's limit leaves room for, then with none.
const maxShrinks = 2

// writeDeadLetter encodes r with as much of its payload as the rejected topic takes now and writes it, writing
// it again with less payload when the broker refuses it as too large (shrunk counts those times).
func (s *Stage) writeDeadLetter(key string, r *topics.Rejection, shrunk int, done func(error)) {
	fit, value, err := fitRejection(r, s.dead.MaxValueBytes(key))
	if err != nil {
		s.later(func() { done(fmt.Errorf("encode the dead letter: %w", err)) })
		return
	}
	s.dead.SendRetrying(s.ctx, key, value, func(err error) {
		if !kafka.IsRecordTooLarge(err) || shrunk >= maxShrinks || len(fit.Payload) == 0 {
			done(err)
			return
		}
		smaller := *fit
		if shrunk > 0 || s.dead.MaxValueBytes(key) >= len(value) {
			smaller.Payload = nil // the limit is not lower than what was refused: fitting again would send the same
		}
		s.log.Warn("dead letter refused as too large; writing it with less payload", "key", key, "bytes", len(value),
			"err", err)
		s.writeDeadLetter(key, &smaller, shrunk+1, done)
	})
}

// fitRejection encodes r, keeping as much of its payload as fits in maxBytes, and returns the rejection it
// encoded (r itself, or a copy with a shorter payload).
func fitRejection(r *topics.Rejection, maxBytes int) (*topics.Rejection, []byte, error) {
	value, err := topics.Marshal(r)
	if err != nil || len(value) <= maxBytes || len(r.Payload) == 0 {
		return r, value, err
	}
	c := *r
	c.Payload = nil
	if value, err = topics.Marshal(&c); err != nil {
		return nil, nil, err
	}
	room := (maxBytes-len(value))*3/4 - 16 // the payload travels as base64 in JSON
	if room <= 0 {
		return &c, value, nil
	}
	c.Payload = r.Payload[:min(room, len(r.Payload))]
	value, err = topics.Marshal(&c)
	return &c, value, err
}
