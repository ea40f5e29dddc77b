package stream_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/kafka/stream"
	"github.com/draftflow/draftflow/topics"
)

// deadLetter writes rej through st and waits for its done.
func deadLetter(t *testing.T, st *stream.Stage, rej *topics.Rejection) error {
	t.Helper()
	done := make(chan error, 1)
	st.DeadLetter(rej, func(err error) { done <- err })
	select {
	case err := <-done:
		return err
	case <-time.After(60 * time.Second):
		t.Fatal("dead letter not answered in 60 s")
		return nil
	}
}

// A dead letter is written with the stage's name, keyed by the record's id or where it came from, and its
// payload trimmed to topics.MaxRejectedPayload; the caller's buffer is not kept.
func TestDeadLetterWrite(t *testing.T) {
	kc := kafkatest.Config(t, 1)
	kc.Logger = quiet
	st := stream.New(context.Background(), stream.Config{Client: kafkatest.Client(t, kc), Stage: "ingest", Logger: quiet})
	huge := bytes.Repeat([]byte("x"), topics.MaxRejectedPayload+100)
	if err := deadLetter(t, st, &topics.Rejection{ID: "a", Reason: "too long", Payload: huge}); err != nil {
		t.Fatal(err)
	}
	line := []byte("{")
	if err := deadLetter(t, st, &topics.Rejection{Reason: "bad line", Source: topics.Source{File: "x.jsonl", Line: 7}, Payload: line}); err != nil {
		t.Fatal(err)
	}
	line[0] = 'z' // the line reader reuses its buffer
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	got := map[string]*topics.Rejection{}
	for _, r := range kafkatest.Collect[topics.Rejection](t, kc, topics.TopicRejected, 2, 30*time.Second) {
		got[r.Reason] = r
	}
	if r := got["too long"]; r == nil || r.Stage != "ingest" || r.ID != "a" || len(r.Payload) != topics.MaxRejectedPayload {
		t.Errorf("dead letter of a record with an id: %+v", r)
	}
	if r := got["bad line"]; r == nil || r.Stage != "ingest" || r.Source.Line != 7 || string(r.Payload) != "{" {
		t.Errorf("dead letter of a line: %+v", r)
	}
	ends, err := kafkatest.Client(t, kc).Admin().EndOffsets(context.Background(), topics.TopicRejected)
	if err != nil {
		t.Fatal(err)
	}
	if ends[0] != 2 {
		t.Errorf("%d records on the rejected topic, want 2", ends[0])
	}
}

// A broker that fails the writes holds the dead letter back: it is retried while the stage's context lives,
// then done reports the context's error (the caller abandons the record, redelivered after a restart), and the
// stage has not failed. Once the broker accepts writes again, dead letters go through.
func TestDeadLetterRetriesUntilShutdown(t *testing.T) {
	if kafkatest.Real() {
		t.Skip("fails writes through the embedded broker's control hooks")
	}
	e := kafkatest.Embedded(t)
	kc := kafka.Config{Brokers: e.Brokers(), Partitions: 1, Namespace: "t-deadletters-retry", Logger: quiet}
	cl := kafkatest.Client(t, kc)
	if err := cl.Admin().EnsureTopics(context.Background(), topics.TopicRejected); err != nil {
		t.Fatal(err)
	}
	refused, accept := kafkatest.RefuseProduce(e, "")
	ctx, cancel := context.WithCancel(context.Background())
	st := stream.New(ctx, stream.Config{Client: cl, Stage: "sink", Logger: quiet})
	done := make(chan error, 1)
	st.DeadLetter(&topics.Rejection{ID: "held", Reason: "undecodable"}, func(err error) { done <- err })
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
	if err := st.Err(); err != nil {
		t.Fatalf("the stage failed at shutdown: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	accept()
	later := stream.New(context.Background(), stream.Config{Client: cl, Stage: "sink", Logger: quiet})
	defer later.Close()
	if err := deadLetter(t, later, &topics.Rejection{ID: "later", Reason: "undecodable"}); err != nil {
		t.Fatalf("after the broker recovered: %v", err)
	}
}

// A dead letter the broker refuses as too large (the rejected topic's max.message.bytes is below the client's
// limit, which only that refusal tells the client) is written again with less payload: a prefix of the
// offending record's.
func TestDeadLetterRefusedAsTooLargeIsShortened(t *testing.T) {
	const limit = 16 << 10
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	small := kafkatest.Cluster(t, kafka.Config{Partitions: 1, MaxMessageBytes: limit, Logger: quiet})
	if err := kafkatest.Client(t, small).Admin().EnsureTopics(ctx, topics.Retained()...); err != nil {
		t.Fatal(err)
	}
	kc := small
	kc.MaxMessageBytes = 0 // the default, above the topic's
	st := stream.New(ctx, stream.Config{Client: kafkatest.Client(t, kc), Stage: "test", Logger: quiet})
	defer st.Close()
	r := rand.New(rand.NewPCG(1, 2))
	var payload []byte
	for len(payload) < 60<<10 { // hex that zstd cannot shrink below the topic's limit
		payload = strconv.AppendUint(payload, r.Uint64(), 16)
	}
	if err := deadLetter(t, st, &topics.Rejection{ID: "big", Reason: "too large", Payload: payload}); err != nil {
		t.Fatalf("dead letter over the topic's limit: %v", err)
	}
	got := kafkatest.Collect[topics.Rejection](t, kc, topics.TopicRejected, 1, 30*time.Second)
	if len(got) != 1 {
		t.Fatalf("%d dead letters, want 1", len(got))
	}
	if g := got[0]; g.ID != "big" || g.Reason != "too large" || len(g.Payload) == 0 || len(g.Payload) >= len(payload) ||
		!bytes.HasPrefix(payload, g.Payload) {
		t.Errorf("dead letter read back: id %q reason %q payload %d of %d bytes", g.ID, g.Reason, len(g.Payload), len(payload))
	}
}
