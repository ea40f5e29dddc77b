package kafka_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/topics"
)

// PartitionOf places keys where kafka-go's Hash balancer, which wrote the topics of earlier draftflow builds,
// placed them (FNV-1a, as Sarama): a conversation keeps its partition across the upgrade. The cases are that
// balancer's answers.
func TestPartitionOfKeepsThePlacement(t *testing.T) {
	for _, c := range []struct {
		key     string
		n, want int
	}{
		{"conv-0", 1, 0}, {"conv-0", 2, 0}, {"conv-0", 8, 6}, {"conv-0", 12, 2},
		{"conv-1", 2, 1}, {"conv-1", 8, 3}, {"conv-1", 12, 3},
		{"synth-000042", 8, 2}, {"synth-000042", 12, 2},
		{"a", 8, 4}, {"a", 12, 0},
		{"shard/xyz", 2, 1}, {"shard/xyz", 8, 7}, {"shard/xyz", 12, 11},
		{"", 2, 1}, {"", 8, 3},
		{"ä-unicode", 8, 0}, {"ä-unicode", 12, 8},
		{"p1", 8, 6}, {"p1", 12, 6},
	} {
		if got := kafka.PartitionOf(c.key, c.n); got != c.want {
			t.Errorf("PartitionOf(%q, %d) = %d, want %d", c.key, c.n, got, c.want)
		}
	}
}

// A Producer writes each record to the partition PartitionOf names for its key.
func TestProducerWritesToPartitionOf(t *testing.T) {
	const partitions = 8
	cfg := kafkatest.Config(t, partitions)
	var recs []kafkatest.Record
	for i := range 40 {
		id := fmt.Sprintf("conv-%d", i)
		recs = append(recs, kafkatest.Record{Key: id, Value: &topics.Prompt{ID: id}})
	}
	kafkatest.Produce(t, cfg, topics.TopicPrompts, recs...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var mu sync.Mutex
	seen := 0
	err := kafkatest.Client(t, cfg).NewConsumer(topics.TopicPrompts, kafka.ConsumerConfig{Group: "placement", SessionTimeout: 6 * time.Second}).
		Run(ctx, func(d *kafka.Delivery) {
			if want := kafka.PartitionOf(string(d.Message.Key), partitions); d.Message.Partition != want {
				t.Errorf("%s on partition %d, PartitionOf says %d", d.Message.Key, d.Message.Partition, want)
			}
			d.Done()
			mu.Lock()
			defer mu.Unlock()
			if seen++; seen == len(recs) {
				cancel()
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	if seen != len(recs) {
		t.Fatalf("read %d of %d records", seen, len(recs))
	}
}
