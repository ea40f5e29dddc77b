package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/topics"
)

// Record is one record a stage works on: Value, decoded, and the acknowledgement that travels with it. It ends
// exactly once, in one of these ways, from any goroutine and in any order among records:
//
//   - Finish: its result is decided and durable (Produce finishes it once its result is acknowledged);
//   - Reject: it is dead-lettered, then finished with result Rejected;
//   - Settle now, Ack later: the result is decided (and counted) now, acknowledged when it is durable (the
//     sink: when its shard commits);
//   - Abandon: not finished; a consumed record is redelivered after a restart or rebalance.
//
// Further calls after the first acknowledgement or abandonment do nothing; the outcome is counted at most once.
type Record[T any] struct {
	// Value is the decoded record (for a record that did not decode, what the codec could fill in).
	Value *T

	s     *Stage
	d     *kafka.Delivery // nil for records started with From
	where string          // From: where it came from
	then  func(Outcome, error)

	settle  sync.Once
	outcome Outcome
	end     sync.Once
}

// From starts a record that did not come from Kafka (ingest's input lines), named by where for logs. It waits
// while Config.MaxInFlight such records are unfinished. then, if not nil, runs once the record ends: with its
// outcome when it was finished, or with the error that made it abandoned (a write that the stage's context
// ended first). Stage.Wait waits for every such record.
func From[T any](s *Stage, v *T, where string, then func(Outcome, error)) *Record[T] {
	s.slots <- struct{}{}
	s.open.Add(1)
	return &Record[T]{Value: v, s: s, where: where, then: then}
}

// Where names the record for logs and dead letters: its topic, partition and offset ("tokenized/3@1207"), or
// where it came from.
func (r *Record[T]) Where() string {
	if r.d == nil {
		return r.where
	}
	return r.d.Where()
}

// Key is the consumed record's key ("" for a record started with From).
func (r *Record[T]) Key() string {
	if r.d == nil {
		return ""
	}
	return string(r.d.Message.Key)
}

// Message is the consumed Kafka record (the zero Message for a record started with From).
func (r *Record[T]) Message() kafka.Message {
	if r.d == nil {
		return kafka.Message{}
	}
	return r.d.Message
}

// Revoking is closed when this member starts giving the record's partition up (kafka.Delivery.Revoking): work
// not started by then should not start; Abandon the record. Nil (never) for a record started with From.
func (r *Record[T]) Revoking() <-chan struct{} {
	if r.d == nil {
		return nil
	}
	return r.d.Revoking()
}

// Lost is cancelled once the record's partition is gone (kafka.Delivery.Lost): work still running for it is
// wasted; stop it and Abandon the record.
func (r *Record[T]) Lost() context.Context {
	if r.d == nil {
		return context.Background()
	}
	return r.d.Lost()
}

// Settle decides the record's outcome and counts it (draftflow_records_total, draftflow_tokens_total) without
// acknowledging the record: Ack does that once the result is durable. Only the first call counts.
func (r *Record[T]) Settle(o Outcome) {
	r.settle.Do(func() {
		r.outcome = o
		r.s.met.count(o)
	})
}

// Ack acknowledges the record: a consumed record's offset may be committed (in the partition's order, by the
// consumer's watermark), a record started with From frees its place. Call it once the record's result is
// durable; Settle first, or the record counts nowhere.
func (r *Record[T]) Ack() { r.finish(nil, false) }

// Finish settles the record with o and acknowledges it.
func (r *Record[T]) Finish(o Outcome) {
	r.Settle(o)
	r.Ack()
}

// Abandon gives the record up without finishing it: a consumed record's offset is never committed by this
// member, and Kafka redelivers it after a restart or rebalance. Use it for work cut short by shutdown or a
// rebalance.
func (r *Record[T]) Abandon() { r.finish(errAbandoned, true) }

var errAbandoned = errors.New("stream: record abandoned")

func (r *Record[T]) finish(err error, abandon bool) {
	r.end.Do(func() {
		if r.d != nil {
			if abandon {
				r.d.Abandon()
			} else {
				r.d.Done()
			}
			return
		}
		<-r.s.slots
		defer r.s.open.Done()
		if r.then != nil {
			if abandon {
				r.then(Outcome{}, err)
			} else {
				r.then(r.outcome, nil)
			}
		}
	})
}

// Reject dead-letters the record, with class and reason, and then finishes it: settled as Rejected with the
// class once the dead letter is durable, or abandoned when the stage's context ends first (it is dead-lettered
// again after a restart). payload is the offending input when the record did not come from Kafka (nil: for a
// consumed record, its value); it is trimmed to topics.MaxRejectedPayload. The rejection names the record's id,
// dataset and source when Value has them.
func (r *Record[T]) Reject(class, reason string, payload []byte) {
	rej := r.Rejection(class, reason)
	rej.Payload = payload
	r.DeadLetter(rej, func(err error) {
		if err != nil {
			r.finish(err, true)
			return
		}
		r.Finish(Outcome{Result: Rejected, Class: class})
	})
}

// Rejection returns the dead letter Reject writes for the record: the class and reason, and the record's id,
// dataset, source, turn and origin when Value has them (a key for an id when it has none).
func (r *Record[T]) Rejection(class, reason string) *topics.Rejection {
	rej := &topics.Rejection{Class: class, Reason: reason}
	switch v := any(r.Value).(type) {
	case *topics.Prompt:
		rej.ID, rej.Dataset, rej.Source, rej.Turn, rej.Origin = v.ID, v.Dataset, v.Source, v.Turn, v.Origin
	case *topics.Tokenized:
		rej.ID, rej.Dataset, rej.Source, rej.Turn, rej.Origin = v.ID, v.Dataset, v.Source, v.Turn, v.Origin
	case *topics.Generation:
		rej.ID, rej.Dataset, rej.Source, rej.Turn, rej.Origin = v.ID, v.Dataset, v.Source, v.Turn, v.Origin
	}
	if rej.ID == "" {
		rej.ID = r.Key()
	}
	return rej
}

// DeadLetter writes rej for the record without finishing it, and calls done once, never before DeadLetter
// returns: with nil once the dead letter is durable, or with the error that stopped it (the stage's context
// ended; or Kafka refuses the stage's writes, and the stage fails). It is the half of Reject for a stage that
// must order a dead letter among its partition's records (the sink): it then finishes the record itself, with
// Finish(Outcome{Result: Rejected, Class: ...}) or Abandon. A consumed record's dead letter carries its topic,
// partition and offset and, when rej has no payload, its value; the payload is trimmed to
// topics.MaxRejectedPayload and to what the rejected topic accepts. Writes are retried while the stage's
// context lives.
func (r *Record[T]) DeadLetter(rej *topics.Rejection, done func(error)) {
	if r.d != nil && len(rej.Payload) == 0 {
		rej.Payload = r.d.Message.Value
	}
	r.s.logRejection(r.Where(), rej)
	r.s.deadLetter(r.d, rej, done)
}

// Produce writes the record's result rec to o keyed by key (Output.Send) and ends the record by what the write
// did: finished with outcome ok once the broker acknowledged it; rejected (class TooLarge or Unencodable) when
// it can never be written; abandoned when the stage's context ends first or the stage fails.
func (r *Record[T]) Produce(o *Output, key string, rec any, ok Outcome) {
	o.Send(key, rec, func(err error) {
		switch {
		case err == nil:
			r.Finish(ok)
		case kafka.IsRecordTooLarge(err):
			r.Reject(TooLarge, err.Error(), nil)
		case IsUnencodable(err):
			r.Reject(Unencodable, err.Error(), nil)
		default:
			r.s.log.Debug("result not written before the stage stopped; the record is abandoned", "at", r.Where(), "err", err)
			r.finish(err, true)
		}
	})
}

// maxLoggedRejections is how many rejections a stage logs at warning level; the rest go to debug.
const maxLoggedRejections = 20

// logRejection logs a dead letter: the stage's first maxLoggedRejections at warning level, the rest at debug
// (every one is on the rejected topic).
func (s *Stage) logRejection(where string, rej *topics.Rejection) {
	n := s.rejections.Add(1)
	level := slog.LevelDebug
	if n <= maxLoggedRejections {
		level = slog.LevelWarn
	}
	s.log.Log(context.Background(), level, "record rejected", "id", rej.ID, "at", where, "class", rej.Class, "reason", rej.Reason)
	if n == maxLoggedRejections {
		s.log.Warn(fmt.Sprintf("%d records rejected: the next rejections are logged at debug level only; every one is on the rejected topic "+
			"(and in rejected.jsonl beside the shards of draftflow run)", maxLoggedRejections))
	}
}

// Options tune Consume; zero values are documented defaults.
type Options[T any] struct {
	// Workers, when above 0, is how many goroutines decode and handle records concurrently (tokenize's encoders);
	// 0 decodes and handles each record on its consumer's goroutine, in partition order.
	Workers int
	// Undecodable, when set, takes a record that does not decode, with the rejection Reject would write for it
	// (class Undecodable): for a stage that orders dead letters among its partition's records (the sink). By
	// default the record is rejected (Record.Reject) and never reaches the handler.
	Undecodable func(*Record[T], *topics.Rejection)
}

// Consume runs the consumers ins until ctx ends, a consumer fails for good, or the stage fails (Stage.Err):
// each record is decoded as T with the topics/ codec and handed to handle, which must end it (see Record) now or
// later, from any goroutine. A record that does not decode is dead-lettered with class Undecodable and
// acknowledged. Consume returns once every consumer has drained and committed (see kafka.Consumer.Run): nil, or
// the stage's error, or the first consumer error.
func Consume[T any](ctx context.Context, s *Stage, opt Options[T], handle func(*Record[T]), ins ...*kafka.Consumer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.failed, cancel)()
	deliver := func(d *kafka.Delivery) {
		r := &Record[T]{Value: new(T), s: s, d: d}
		if err := topics.Unmarshal(d.Message.Value, any(r.Value)); err != nil {
			reason := fmt.Sprintf("undecodable %s at %s: %v", kindName(r.Value), d.Where(), err)
			if opt.Undecodable != nil {
				opt.Undecodable(r, r.Rejection(Undecodable, reason))
				return
			}
			r.Reject(Undecodable, reason, nil)
			return
		}
		handle(r)
	}
	feed := deliver
	var workers sync.WaitGroup
	if opt.Workers > 0 {
		work := make(chan *kafka.Delivery, opt.Workers*4)
		defer func() { close(work); workers.Wait() }()
		for range opt.Workers {
			workers.Add(1)
			go func() {
				defer workers.Done()
				for d := range work {
					if ctx.Err() != nil {
						d.Abandon() // redelivered after a restart
						continue
					}
					deliver(d)
				}
			}()
		}
		feed = func(d *kafka.Delivery) {
			select {
			case work <- d:
			case <-ctx.Done():
				d.Abandon()
			}
		}
	}
	errs := make([]error, len(ins))
	var running sync.WaitGroup
	for i, in := range ins {
		running.Add(1)
		go func() {
			defer running.Done()
			if errs[i] = in.Run(ctx, feed); errs[i] != nil {
				cancel() // one consumer failing for good stops the others
			}
		}()
	}
	running.Wait()
	if err := s.Err(); err != nil {
		return err
	}
	return errors.Join(errs...)
}

// kindName names the record type T holds, for rejection reasons.
func kindName(v any) string {
	switch v.(type) {
	case *topics.Prompt:
		return "prompt"
	case *topics.Tokenized:
		return "tokenized record"
	case *topics.Generation:
		return "generation"
	}
	return "record"
}
