package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/compress"
)

// kafkaGoWriter writes through segmentio/kafka-go: an asynchronous Writer, and a synchronous one of one record
// per batch for the records written alone, sharing one transport.
type kafkaGoWriter struct {
	w, solo   *kafkago.Writer
	transport *kafkago.Transport
}

func newKafkaGoWriter(cl *Client, topic string, pc ProducerConfig) (writer, error) {
	c := cl.cfg
	if pc.BatchTimeout <= 0 {
		pc.BatchTimeout = 5 * time.Millisecond
	}
	if pc.BatchSize <= 0 {
		pc.BatchSize = 100
	}
	transport, err := c.newTransport()
	if err != nil {
		return nil, err
	}
	// Each failed attempt is retried (MaxAttempts); a record that fails for good reaches its done callback.
	errorLogger := kafkago.LoggerFunc(func(msg string, args ...any) { c.logger().Debug(fmt.Sprintf(msg, args...), "topic", topic) })
	w := &kafkago.Writer{
		Addr:         kafkago.TCP(c.Brokers...),
		Topic:        topic,
		Balancer:     &kafkago.Hash{},
		BatchTimeout: pc.BatchTimeout,
		BatchSize:    pc.BatchSize,
		BatchBytes:   int64(c.maxMessageBytes()),
		RequiredAcks: kafkago.RequireAll,
		MaxAttempts:  10,
		Async:        true,
		Transport:    transport,
		ErrorLogger:  errorLogger,
	}
	solo := &kafkago.Writer{
		Addr:         w.Addr,
		Topic:        topic,
		Balancer:     &kafkago.Hash{},
		BatchTimeout: time.Millisecond,
		BatchSize:    1,
		BatchBytes:   w.BatchBytes,
		RequiredAcks: kafkago.RequireAll,
		MaxAttempts:  10,
		Transport:    transport,
		ErrorLogger:  errorLogger,
	}
	if !pc.NoCompression {
		w.Compression = compress.Zstd
		solo.Compression = compress.Zstd
	}
	w.Completion = func(msgs []kafkago.Message, err error) {
		for _, m := range msgs {
			if fin, ok := m.WriterData.(func(error, bool)); ok {
				fin(err, len(msgs) == 1)
			}
		}
	}
	return &kafkaGoWriter{w: w, solo: solo, transport: transport}, nil
}

func (k *kafkaGoWriter) write(ctx context.Context, key, value []byte, fin func(error, bool)) error {
	return k.w.WriteMessages(ctx, kafkago.Message{Key: key, Value: value, WriterData: fin})
}

func (k *kafkaGoWriter) writeAlone(key, value []byte) error {
	err := k.solo.WriteMessages(context.Background(), kafkago.Message{Key: key, Value: value})
	var werrs kafkago.WriteErrors
	if errors.As(err, &werrs) && len(werrs) == 1 {
		err = werrs[0]
	}
	return err
}

func (k *kafkaGoWriter) flush() error { return k.w.Close() }

func (k *kafkaGoWriter) close() error {
	err := k.solo.Close()
	k.transport.CloseIdleConnections()
	return err
}
