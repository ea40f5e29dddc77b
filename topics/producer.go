package topics

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/compress"
)

// ProducerConfig tunes a Producer; zero values are documented defaults.
type ProducerConfig struct {
	// BatchTimeout is how long the writer waits to fill a batch (default 5 ms; kafka-go's own default of 1 s
	// would stall every synchronous write).
	BatchTimeout time.Duration
	// BatchSize is the most records per batch (default 1000).
	BatchSize int
	// Compression codec (default zstd). Set NoCompression to send uncompressed.
	NoCompression bool
}

// Producer writes encoded records to one topic. Writes are asynchronous: each Send names a done
// callback that runs once the record is acknowledged by all in-sync replicas (RequiredAcks=RequireAll),
// or with the error that made it fail. That callback is where a stage marks its input Delivery Done,
// so "committed" always means "durable downstream".
type Producer struct {
	topic string
	w     *kafka.Writer
}

// NewProducer returns a Producer for the logical topic. The writer keys records by id (hash balancer), so every version of
// one conversation lands on one partition.
func (c Config) NewProducer(topic string, pc ProducerConfig) *Producer {
	topic = c.Topic(topic)
	if pc.BatchTimeout <= 0 {
		pc.BatchTimeout = 5 * time.Millisecond
	}
	if pc.BatchSize <= 0 {
		pc.BatchSize = 1000
	}
	w := &kafka.Writer{
		Addr:         kafka.TCP(c.Brokers...),
		Topic:        topic,
		Balancer:     &kafka.Hash{},
		BatchTimeout: pc.BatchTimeout,
		BatchSize:    pc.BatchSize,
		BatchBytes:   int64(c.maxMessageBytes()),
		RequiredAcks: kafka.RequireAll,
		MaxAttempts:  10,
		Async:        true,
		Transport:    &kafka.Transport{ClientID: c.clientID(), DialTimeout: 10 * time.Second},
		// Each failed attempt is retried (MaxAttempts); a record that fails for good reaches its done callback.
		ErrorLogger: kafka.LoggerFunc(func(msg string, args ...any) { c.logger().Debug(fmt.Sprintf(msg, args...), "topic", topic) }),
	}
	if !pc.NoCompression {
		w.Compression = compress.Zstd
	}
	w.Completion = func(msgs []kafka.Message, err error) {
		for _, m := range msgs {
			if done, ok := m.WriterData.(func(error)); ok && done != nil {
				done(err)
			}
			if err == nil {
				producedRecords.WithLabelValues(topic).Inc()
				producedBytes.WithLabelValues(topic).Add(float64(len(m.Value)))
			} else {
				produceErrors.WithLabelValues(topic).Inc()
			}
		}
	}
	return &Producer{topic: topic, w: w}
}

// Topic returns the physical topic this producer writes to.
func (p *Producer) Topic() string { return p.topic }

// Send encodes rec (a *Prompt, *Tokenized, *Generation or *Rejection) and writes it keyed by key. done, if not
// nil, runs exactly once: with nil after the broker acknowledged the record, or with the error. An encoding
// error is returned directly and done is not called.
func (p *Producer) Send(ctx context.Context, key string, rec any, done func(error)) error {
	value, err := Marshal(rec)
	if err != nil {
		return err
	}
	if r, ok := rec.(*Rejection); ok && p.tooLarge(key, value) {
		// A dead letter must always fit: keep as much of the offending payload as the limit allows.
		c := *r
		c.Payload = nil
		if value, err = Marshal(&c); err != nil {
			return err
		}
		room := (int(p.w.BatchBytes)-len(value)-len(key)-128)*3/4 - 16 // the payload travels as base64 in JSON
		if room > 0 {
			c.Payload = r.Payload[:min(room, len(r.Payload))]
			if value, err = Marshal(&c); err != nil {
				return err
			}
		}
	}
	return p.SendRaw(ctx, key, value, done)
}

func (p *Producer) tooLarge(key string, value []byte) bool {
	return int64(len(value)+len(key)+64) > p.w.BatchBytes
}

// ErrRecordTooLarge is wrapped by the error of a Send whose record exceeds the message limit
// (Config.MaxMessageBytes). It is permanent for that record: dead-letter it rather than retry.
var ErrRecordTooLarge = errors.New("record over the message size limit")

// SendRaw writes an already encoded value; see Send.
func (p *Producer) SendRaw(ctx context.Context, key string, value []byte, done func(error)) error {
	if p.tooLarge(key, value) {
		return fmt.Errorf("topics: record %q is %d bytes, over the %d-byte limit of %s (raise --max-message-bytes): %w",
			key, len(value), p.w.BatchBytes, p.topic, ErrRecordTooLarge)
	}
	msg := kafka.Message{Key: []byte(key), Value: value}
	if done != nil {
		msg.WriterData = done
	}
	if err := p.w.WriteMessages(ctx, msg); err != nil {
		return fmt.Errorf("topics: write to %s: %w", p.topic, err)
	}
	return nil
}

// SendSync writes rec and waits for the broker's acknowledgement.
func (p *Producer) SendSync(ctx context.Context, key string, rec any) error {
	errc := make(chan error, 1)
	if err := p.Send(ctx, key, rec, func(err error) { errc <- err }); err != nil {
		return err
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close flushes pending records (their done callbacks run) and closes the writer.
func (p *Producer) Close() error {
	err := p.w.Close()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
