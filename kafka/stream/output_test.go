package stream_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/kafka/stream"
	"github.com/draftflow/draftflow/topics"
)

// A result the topics/ codec cannot encode is never written: Output.Send reports it (IsUnencodable) only after
// Send returned, and Record.Produce dead-letters the record with class unencodable and acknowledges it.
func TestProduceRejectsWhatCannotBeEncoded(t *testing.T) {
	kc := kafkatest.Config(t, 1)
	kc.Logger = quiet
	admin := kafkatest.Client(t, kc)
	reg := prometheus.NewRegistry()
	st := stream.New(context.Background(), stream.Config{Client: kafkatest.Client(t, kc), Stage: "generate", Registerer: reg, Logger: quiet})
	defer st.Close()
	out := st.Output(topics.TopicGenerated)

	returned := make(chan struct{})
	sent := make(chan error, 1)
	out.Send("x", struct{}{}, func(err error) {
		select {
		case <-returned:
		case <-time.After(5 * time.Second): // Send has not returned: done runs within it
			t.Error("done ran within Send")
		}
		sent <- err
	})
	close(returned)
	if err := <-sent; !stream.IsUnencodable(err) {
		t.Fatalf("Send of a value the codec does not know: done(%v), want an unencodable error", err)
	}

	kafkatest.Produce(t, kc, topics.TopicTokenized, tokenized("odd")...)
	stop := run(t, kc, st, "g", stream.Options[topics.Tokenized]{}, func(r *stream.Record[topics.Tokenized]) {
		r.Produce(out, r.Value.ID, *r.Value, stream.Outcome{Result: "generated"}) // a value, not a pointer: the codec refuses it
	})
	waitCommitted(t, admin, "g", 1)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	rejs := kafkatest.Collect[topics.Rejection](t, kc, topics.TopicRejected, 1, 30*time.Second)
	if len(rejs) != 1 || rejs[0].ID != "odd" || rejs[0].Class != stream.Unencodable {
		t.Fatalf("dead letters %+v", rejs)
	}
	if n := counted(t, reg, "generate", stream.Rejected, stream.Unencodable); n != 1 {
		t.Fatalf("rejected{unencodable} counted %v, want 1", n)
	}
}
