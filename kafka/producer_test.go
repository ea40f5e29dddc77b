package kafka_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/topics"
)

// closeWaitsForDone calls Close on p while the done of a SendRetrying is due (arm has made it so), and fails
// unless that done ran, with an error, before Close returned. done takes a while on purpose: a Close that does
// not wait for it returns first.
func closeWaitsForDone(t *testing.T, p *kafka.Producer, arm func(done func(error))) {
	t.Helper()
	var closed atomic.Bool
	type result struct {
		err        error
		afterClose bool
	}
	got := make(chan result, 2)
	arm(func(err error) {
		time.Sleep(50 * time.Millisecond)
		got <- result{err: err, afterClose: closed.Load()}
	})
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	closed.Store(true)
	select {
	case r := <-got:
		if r.afterClose {
			t.Fatal("done ran after Close returned")
		}
		if r.err == nil {
			t.Fatal("done(nil) for a record that was never written")
		}
		t.Logf("done(%v)", r.err)
	default:
		t.Fatal("Close returned before the done callback of a SendRetrying had run")
	}
	time.Sleep(100 * time.Millisecond)
	if len(got) > 0 {
		t.Fatal("done called twice")
	}
}

// Close returns only once the done callback of every SendRetrying has run: for a record held back by a broker
// that refuses it (a retry waiting out its backoff), and for one that can never be sent (done runs at once,
// but never from within SendRetrying).
func TestSendRetryingDoneBeforeClose(t *testing.T) {
	t.Run("retrying", func(t *testing.T) {
		if kafkatest.Real() {
			t.Skip("fails writes through the embedded broker's control hooks")
		}
		e := kafkatest.Embedded(t)
		cl := kafkatest.Client(t, kafka.Config{Brokers: e.Brokers(), Partitions: 1, Namespace: "t-close-retrying"})
		if err := cl.Admin().EnsureTopics(context.Background(), topics.TopicRejected); err != nil {
			t.Fatal(err)
		}
		refused, _ := kafkatest.RefuseProduce(e, "")
		p := cl.NewProducer(topics.TopicRejected, kafka.ProducerConfig{})
		closeWaitsForDone(t, p, func(done func(error)) {
			p.SendRetrying(context.Background(), "held", kafkatest.Encode(t, &topics.Rejection{ID: "held", Reason: "x"}), func(err error) {
				if err != nil && !strings.Contains(err.Error(), "closed before") {
					t.Errorf("done(%v), want the producer's closing", err)
				}
				done(err)
			})
			deadline := time.Now().Add(30 * time.Second)
			for refused.Load() == 0 {
				if time.Now().After(deadline) {
					t.Fatal("no write refused in 30 s")
				}
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(20 * time.Millisecond) // the refusal reaches SendRetrying, which waits out its backoff
		})
	})
	t.Run("unsendable", func(t *testing.T) {
		// A password file gone after the Client was made: the producer's every Send fails with it.
		pw := filepath.Join(t.TempDir(), "password")
		if err := os.WriteFile(pw, []byte("secret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cl := kafkatest.Client(t, kafka.Config{Brokers: []string{"127.0.0.1:1"},
			Security: kafka.Security{SASL: kafka.SASL{Mechanism: kafka.MechanismPlain, Username: "u", PasswordFile: pw}}})
		if err := os.Remove(pw); err != nil {
			t.Fatal(err)
		}
		p := cl.NewProducer(topics.TopicPrompts, kafka.ProducerConfig{})
		closeWaitsForDone(t, p, func(done func(error)) {
			p.SendRetrying(context.Background(), "k", kafkatest.Encode(t, &topics.Prompt{ID: "k"}), func(err error) {
				if !errors.Is(err, os.ErrNotExist) {
					t.Errorf("done(%v), want the missing password file", err)
				}
				done(err)
			})
		})
	})
}

// A closed Client refuses requests rather than opening connections no one closes.
func TestClientClosed(t *testing.T) {
	cfg := kafkatest.Config(t, 1)
	cl, err := kafka.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cl.Admin().PartitionCount(ctx, topics.TopicPrompts); err != nil {
		t.Fatal(err)
	}
	if err := cl.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Admin().PartitionCount(ctx, topics.TopicPrompts); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("PartitionCount on a closed client: %v", err)
	}
	if _, err := cl.Admin().TopicID(ctx, topics.TopicPrompts); err == nil {
		t.Error("TopicID on a closed client succeeded")
	}
	if err := cl.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := kafka.NewClient(kafka.Config{}); err == nil || !strings.Contains(err.Error(), "no brokers") {
		t.Errorf("NewClient without brokers: %v", err)
	}
}

// A record whose context has ended is not reported written: done gets an error, never nil, whether the client
// failed it for its context or wrote it (then nil is right).
func TestSendWithEndedContext(t *testing.T) {
	cfg := kafkatest.Config(t, 1)
	p := kafkatest.Client(t, cfg).NewProducer(topics.TopicPrompts, kafka.ProducerConfig{})
	defer p.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan error, 1)
	if err := p.Send(ctx, "k", kafkatest.Encode(t, &topics.Prompt{ID: "k"}), func(err error) { done <- err }); err != nil {
		t.Logf("Send: %v", err)
		return
	}
	err := <-done
	if n := kafkatest.Size(t, cfg, topics.TopicPrompts); err == nil && n != 1 {
		t.Fatalf("done(nil) but %d records on the topic", n)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("done(%v), want context.Canceled", err)
	}
	t.Logf("done(%v)", err)
}
