package kafka_test

import (
	"context"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/embedded"
	"github.com/draftflow/draftflow/kafka/kafkatest"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/draftflow/draftflow/topics"
)

// failCommits makes the embedded broker refuse OffsetCommit requests while *n > 0, decrementing it each time.
func failCommits(e *embedded.Broker, n *atomic.Int64) {
	c := e.Cluster()
	c.ControlKey(int16(kmsg.OffsetCommit), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if n.Add(-1) < 0 {
			n.Store(0)
			return nil, nil, false
		}
		req := kreq.(*kmsg.OffsetCommitRequest)
		resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewOffsetCommitResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetCommitResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.CoordinatorLoadInProgress.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
}

// consumeAllThenStop consumes n records in group and stops; failing commits are armed when the last arrives.
func consumeAllThenStop(t *testing.T, cfg kafka.Config, cc kafka.ConsumerConfig, n int, arm func()) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	seen := 0
	return kafkatest.Client(t, cfg).NewConsumer(topics.TopicTokenized, cc).Run(ctx, func(d *kafka.Delivery) {
		d.Done()
		if seen++; seen == n {
			arm()
			cancel()
		}
	})
}

func committed(t *testing.T, cfg kafka.Config, group string) int64 {
	t.Helper()
	offs, err := kafkatest.Client(t, cfg).Admin().CommittedOffsets(context.Background(), group, topics.TopicTokenized)
	if err != nil {
		t.Fatal(err)
	}
	if off, ok := offs[0]; ok {
		return off
	}
	return -1
}

func commitBroker(t *testing.T) (*embedded.Broker, kafka.Config) {
	t.Helper()
	e := kafkatest.Embedded(t) // refuses commits through its control hooks
	cfg := kafka.Config{Brokers: e.Brokers(), Partitions: 1, Namespace: "commit", Logger: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := kafkatest.Client(t, cfg).Admin().EnsureTopics(ctx, topics.Retained()...); err != nil {
		t.Fatal(err)
	}
	return e, cfg
}

// The final commit on shutdown outlasts a few refused commits, retried with backoff by the Consumer.
func TestFinalCommitRetried(t *testing.T) {
	e, cfg := commitBroker(t)
	produceN(t, cfg, 20)
	var refuse atomic.Int64
	failCommits(e, &refuse)
	// CommitInterval: only the final commit runs.
	cc := kafka.ConsumerConfig{Group: "final", CommitInterval: time.Hour}
	if err := consumeAllThenStop(t, cfg, cc, 20, func() { refuse.Store(5) }); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := committed(t, cfg, "final"); got != 20 {
		t.Fatalf("committed offset %d after shutdown, want 20", got)
	}
}

// A final commit that never succeeds is bounded in time and fails Run.
func TestFinalCommitFailureReturned(t *testing.T) {
	e, cfg := commitBroker(t)
	produceN(t, cfg, 5)
	var refuse atomic.Int64
	failCommits(e, &refuse)
	cc := kafka.ConsumerConfig{Group: "never", CommitInterval: time.Hour, FinalCommitTimeout: 3 * time.Second}
	start := time.Now()
	err := consumeAllThenStop(t, cfg, cc, 5, func() { refuse.Store(1 << 30) })
	if err == nil {
		t.Fatal("Run returned nil although no commit succeeded")
	}
	if el := time.Since(start); el > 30*time.Second {
		t.Errorf("Run took %v to give up", el)
	}
	t.Logf("Run: %v", err)
	if got := committed(t, cfg, "never"); got != -1 {
		t.Errorf("committed offset %s", strconv.FormatInt(got, 10))
	}
}
