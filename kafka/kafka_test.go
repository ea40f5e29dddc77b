package kafka_test

import (
	"context"
	"fmt"
	"math/rand"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/draftflow/draftflow/kafka"

	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/topics"
)

func produceN(t *testing.T, cfg kafka.Config, n int) {
	t.Helper()
	recs := make([]kafkatest.Record, n)
	for i := range recs {
		rec := &topics.Tokenized{ID: "r" + strconv.Itoa(i), InputIDs: []uint32{uint32(i)}}
		recs[i] = kafkatest.Record{Key: rec.ID, Value: rec}
	}
	kafkatest.Produce(t, cfg, topics.TopicTokenized, recs...)
}

// tracker counts finished ids across consumers.
type tracker struct {
	mu     sync.Mutex
	count  map[string]int
	change chan struct{}
}

func newTracker() *tracker { return &tracker{count: map[string]int{}, change: make(chan struct{}, 1)} }

func (tr *tracker) add(id string) {
	tr.mu.Lock()
	tr.count[id]++
	tr.mu.Unlock()
	select {
	case tr.change <- struct{}{}:
	default:
	}
}

func (tr *tracker) distinct() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.count)
}

// consume runs one consumer until stop() reports true after a delivery (or ctx ends), finishing deliveries out
// of order from concurrent goroutines and recording them in tr.
func consume(ctx context.Context, t *testing.T, cfg kafka.Config, group string, tr *tracker, stop func(seen int) bool) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c := kafkatest.Client(t, cfg).NewConsumer(topics.TopicTokenized, kafka.ConsumerConfig{Group: group, MaxInFlight: 64, SessionTimeout: 6 * time.Second})
	var seen atomic.Int64
	go func() {
		// Several consumers share tr.change, so also poll: a wake-up may go to the other one.
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tr.change:
			case <-tick.C:
			}
			if stop(int(seen.Load())) {
				cancel()
			}
		}
	}()
	err := c.Run(ctx, func(d *kafka.Delivery) {
		var rec topics.Tokenized
		if err := topics.Unmarshal(d.Message.Value, &rec); err != nil {
			t.Error(err)
		}
		if stop(int(seen.Add(1))) {
			cancel()
		}
		go func() {
			time.Sleep(time.Duration(rand.Intn(3)) * time.Millisecond)
			tr.add(rec.ID)
			d.Done()
		}()
	})
	if err != nil {
		t.Error(err)
	}
}

// A consumer stopped mid-topic commits exactly what it finished; the next one resumes right after it.
func TestConsumerResumesFromWatermark(t *testing.T) {
	cfg := kafkatest.Config(t, 4)
	const n = 1200
	produceN(t, cfg, n)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	tr := newTracker()
	consume(ctx, t, cfg, "g", tr, func(seen int) bool { return seen >= 500 })
	if tr.distinct() < 500 {
		t.Fatalf("first consumer finished %d", tr.distinct())
	}
	consume(ctx, t, cfg, "g", tr, func(int) bool { return tr.distinct() >= n })
	for i := 0; i < n; i++ {
		id := "r" + strconv.Itoa(i)
		if tr.count[id] != 1 {
			t.Errorf("%s delivered %d times", id, tr.count[id])
		}
	}
}

// Two members share the topic; one leaves mid-run; nothing is lost (duplicates allowed: at-least-once).
func TestConsumerRebalanceLosesNothing(t *testing.T) {
	cfg := kafkatest.Config(t, 4)
	const n = 2000
	produceN(t, cfg, n)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	tr := newTracker()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); consume(ctx, t, cfg, "g2", tr, func(seen int) bool { return seen >= 300 }) }()
	go func() { defer wg.Done(); consume(ctx, t, cfg, "g2", tr, func(int) bool { return tr.distinct() >= n }) }()
	wg.Wait()
	if got := tr.distinct(); got != n {
		t.Fatalf("%d distinct ids delivered of %d", got, n)
	}
}

func TestEnsureTopicsReusesExisting(t *testing.T) {
	cfg := kafkatest.Config(t, 3)
	cl := kafkatest.Client(t, cfg)
	ctx := context.Background()
	n, err := cl.Admin().PartitionCount(ctx, topics.TopicPrompts)
	if err != nil || n != 3 {
		t.Fatalf("partitions %d, %v", n, err)
	}
	produceN(t, cfg, 10)
	again := cfg
	again.Partitions = 6
	if err := kafkatest.Client(t, again).Admin().EnsureTopics(ctx, topics.Retained()...); err != nil {
		t.Fatal(err)
	}
	if n, _ := cl.Admin().PartitionCount(ctx, topics.TopicTokenized); n != 3 {
		t.Fatalf("existing topic changed to %d partitions", n)
	}
	v, err := cl.Admin().TopicConfigValue(ctx, topics.TopicGenerated, "max.message.bytes")
	if err != nil || v != fmt.Sprint(kafka.DefaultMaxMessageBytes) {
		t.Fatalf("max.message.bytes %q, %v", v, err)
	}
}
