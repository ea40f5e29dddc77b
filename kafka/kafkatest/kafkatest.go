// Package kafkatest is the test support of every package that talks to Kafka: a cluster for the test (the one
// named by DRAFTFLOW_TEST_BROKERS, a real Apache Kafka as `make test-integration` starts, or else an embedded
// broker private to the test), a kafka.Client closed when the test ends, helpers that produce and collect
// records, and fault injection on the embedded broker. Each Config call returns a kafka.Config with a fresh
// Namespace, so tests sharing one real cluster never see each other's topics or groups.
//
// A test that talks to Kafka gets its broker here and nowhere else: every broker address a test dials comes from
// this package (TestBrokersComeFromKafkatest checks the test files of the module), so every such test lives in a
// package whose tests import kafkatest, and `make test-integration` runs every test of those packages with
// DRAFTFLOW_TEST_BROKERS set to a real Apache Kafka. Which broker a test gets is its own visible choice:
//
//   - Brokers, Cluster and Config give the test's cluster: the real one of DRAFTFLOW_TEST_BROKERS when it is
//     set, else an embedded broker private to the test. Use them unless the test needs what only the embedded
//     broker gives.
//   - Embedded and SecureEmbedded always start an in-process broker, for a test that injects faults through its
//     control hooks (HoldProduce, RefuseProduce, Cluster().ControlKey, ApplyRetention), needs a new incarnation
//     of a cluster, or TLS and SASL users of its own. Such a test runs on the embedded broker in every tier.
//
// Unlike the rest of draftflow, which reads environment variables only in cmd/draftflow, this test support reads
// its own: DRAFTFLOW_TEST_BROKERS (Real, Config), DRAFTFLOW_TEST_SASL_* (RealSASL) and DRAFTFLOW_REQUIRE_ASSETS.
package kafkatest

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/embedded"
	"github.com/draftflow/draftflow/topics"
)

// Real reports whether tests run against an external cluster (DRAFTFLOW_TEST_BROKERS is set).
func Real() bool { return os.Getenv("DRAFTFLOW_TEST_BROKERS") != "" }

// Config returns a kafka.Config for t with a unique Namespace and the given partition count, and creates every
// pipeline topic in it. The embedded broker, if one is started, is closed when the test ends.
func Config(t testing.TB, partitions int) kafka.Config {
	t.Helper()
	cfg := Cluster(t, kafka.Config{Partitions: partitions})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := Client(t, cfg).Admin().EnsureTopics(ctx, topics.Retained()...); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Client returns a kafka.Client of kc, closed when the test ends.
func Client(t testing.TB, kc kafka.Config) *kafka.Client {
	t.Helper()
	cl, err := kafka.NewClient(kc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// Embedded starts an embedded broker for t (whatever DRAFTFLOW_TEST_BROKERS says), closed when the test ends.
func Embedded(t testing.TB) *embedded.Broker {
	t.Helper()
	e, err := embedded.Start(embedded.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// Record is one keyed record for Produce: a *topics.Prompt, *topics.Tokenized, *topics.Generation or
// *topics.Rejection, or already encoded bytes ([]byte).
type Record struct {
	Key   string
	Value any
}

// Encode returns rec (a record of package topics) in the topics/ wire format, failing the test when it cannot be
// encoded.
func Encode(t testing.TB, rec any) []byte {
	t.Helper()
	b, err := topics.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Produce writes records to the (logical) topic and waits until the broker acknowledged every one.
func Produce(t testing.TB, kc kafka.Config, topic string, recs ...Record) {
	t.Helper()
	p := Client(t, kc).NewProducer(topic, kafka.ProducerConfig{})
	defer func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, len(recs))
	done := func(err error) {
		if err != nil {
			errs <- err
		}
		wg.Done()
	}
	for _, r := range recs {
		wg.Add(1)
		raw, ok := r.Value.([]byte)
		if !ok {
			raw = Encode(t, r.Value)
		}
		if err := p.Send(context.Background(), r.Key, raw, done); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// Collect reads the (logical) topic in a fresh consumer group until want records arrived, and returns them
// decoded, in the order they arrived. Fewer by the timeout fail the test, so a loop over what Collect returns
// never passes for want of records.
func Collect[T any](t testing.TB, kc kafka.Config, topic string, want int, timeout time.Duration) []*T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var mu sync.Mutex
	var out []*T
	cons := Client(t, kc).NewConsumer(topic, kafka.ConsumerConfig{Group: fmt.Sprintf("collect-%s-%d", topic, time.Now().UnixNano()),
		SessionTimeout: 6 * time.Second}) // Apache Kafka's group.min.session.timeout.ms
	err := cons.Run(ctx, func(d *kafka.Delivery) {
		v := new(T)
		if err := topics.Unmarshal(d.Message.Value, any(v)); err != nil {
			t.Errorf("decode %s: %v", d.Where(), err)
		}
		mu.Lock()
		out = append(out, v)
		n := len(out)
		mu.Unlock()
		d.Done()
		if n >= want {
			cancel()
		}
	})
	if err != nil {
		t.Errorf("collect %s: %v", topic, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(out) < want {
		t.Fatalf("collect %s: %d of the %d records within %s", topic, len(out), want, timeout)
	}
	return out
}

// Size returns the number of records on the (logical) topic: the sum of its partitions' end offsets.
func Size(t testing.TB, kc kafka.Config, topic string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := Client(t, kc).Admin().EndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, end := range ends {
		total += int(end)
	}
	return total
}

// HoldProduce makes the embedded broker hold every produce request to the physical topic until release is
// called (release is idempotent and also runs when the test ends). held receives once the first request is
// being held.
func HoldProduce(t testing.TB, e *embedded.Broker, physicalTopic string) (held <-chan struct{}, release func()) {
	h := make(chan struct{}, 1)
	gate := make(chan struct{})
	var released atomic.Bool
	release = func() {
		if !released.Swap(true) {
			close(gate)
		}
	}
	t.Cleanup(release)
	c := e.Cluster()
	names := producesTo(e, physicalTopic)
	c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		for _, rt := range kreq.(*kmsg.ProduceRequest).Topics {
			if names(rt) && !released.Load() {
				select {
				case h <- struct{}{}:
				default:
				}
				c.SleepControl(func() { <-gate })
			}
		}
		return nil, nil, false
	})
	return h, release
}

// RefuseProduce makes the embedded broker refuse the produce requests that name the physical topic (every
// request when it is empty) with POLICY_VIOLATION, an error the client does not retry on its own, until accept
// is called (accept is idempotent). refused counts the refusals.
func RefuseProduce(e *embedded.Broker, physicalTopic string) (refused *atomic.Int32, accept func()) {
	refused = new(atomic.Int32)
	var accepting atomic.Bool
	c := e.Cluster()
	names := producesTo(e, physicalTopic)
	c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.ProduceRequest)
		if accepting.Load() || (physicalTopic != "" && !slices.ContainsFunc(req.Topics, names)) {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.PolicyViolation.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		refused.Add(1)
		return resp, nil, true
	})
	return refused, func() { accepting.Store(true) }
}

// producesTo returns whether a topic of a produce request is the physical topic, which it names by name or, from
// Produce v13 on, by topic ID (the topic must exist when producesTo is called).
func producesTo(e *embedded.Broker, physicalTopic string) func(kmsg.ProduceRequestTopic) bool {
	var id [16]byte
	if ti := e.Cluster().TopicInfo(physicalTopic); ti != nil {
		id = ti.TopicID
	}
	return func(rt kmsg.ProduceRequestTopic) bool {
		return rt.Topic == physicalTopic || (rt.TopicID == id && id != [16]byte{})
	}
}
