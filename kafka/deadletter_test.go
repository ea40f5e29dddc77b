package kafka_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/topics"
)

// A dead letter is written with the writer's stage and keyed by the record's id, or where it came from.
func TestDeadLettersWrite(t *testing.T) {
	kc := kafkatest.Config(t, 1)
	dl := kafkatest.Client(t, kc).NewDeadLetters("tokenize")
	done := make(chan error, 2)
	dl.Reject(context.Background(), nil, &topics.Rejection{ID: "a", Reason: "too long"}, func(err error) { done <- err })
	dl.Reject(context.Background(), nil, &topics.Rejection{Reason: "bad line", Source: topics.Source{File: "x.jsonl", Line: 7},
		Payload: []byte("{")}, func(err error) { done <- err })
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if err := dl.Close(); err != nil {
		t.Fatal(err)
	}
	got := kafkatest.Collect[topics.Rejection](t, kc, topics.TopicRejected, 2, 30*time.Second)
	if len(got) != 2 {
		t.Fatalf("%d dead letters, want 2", len(got))
	}
	for _, r := range got {
		if r.Stage != "tokenize" || r.Reason == "" {
			t.Errorf("dead letter %+v", r)
		}
	}
}

// A broker that fails the writes holds the dead letter back: it is retried until the caller's context ends,
// then done reports the context's error (the caller abandons the delivery, redelivered after a restart).
// Once the broker accepts writes again, dead letters go through.
func TestDeadLettersRetryUntilShutdown(t *testing.T) {
	if kafkatest.Real() {
		t.Skip("fails writes through the embedded broker's control hooks")
	}
	e := kafkatest.Embedded(t)
	kc := kafka.Config{Brokers: e.Brokers(), Partitions: 1, Namespace: "t-deadletters-retry"}
	cl := kafkatest.Client(t, kc)
	if err := cl.Admin().EnsureTopics(context.Background(), topics.TopicRejected); err != nil {
		t.Fatal(err)
	}
	refused, accept := kafkatest.RefuseProduce(e, "")
	dl := cl.NewDeadLetters("sink")
	defer dl.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	dl.Reject(ctx, nil, &topics.Rejection{ID: "held", Reason: "undecodable"}, func(err error) { done <- err })
	// Several attempts, each refused: done must not be called while the context lasts.
	deadline := time.After(30 * time.Second)
	for refused.Load() < 3 {
		select {
		case err := <-done:
			t.Fatalf("done(%v) while the broker refused the writes and the context lasted", err)
		case <-deadline:
			t.Fatalf("%d writes refused in 30 s: the dead letter was not retried", refused.Load())
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("done(%v) at shutdown, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("done not called at shutdown")
	}
	accept()
	ok := make(chan error, 1)
	dl.Reject(context.Background(), nil, &topics.Rejection{ID: "later", Reason: "undecodable"}, func(err error) { ok <- err })
	if err := <-ok; err != nil {
		t.Fatalf("after the broker recovered: %v", err)
	}
}
