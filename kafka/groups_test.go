package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/topics"
)

// lagOf sums draftflow_consumer_lag of topic over the partitions reg has series for.
func lagOf(t *testing.T, reg *prometheus.Registry, topic string) (sum float64, series int) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "draftflow_consumer_lag" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelOf(m, "topic") == topic {
				sum += m.GetGauge().GetValue()
				series++
			}
		}
	}
	return sum, series
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// A running consumer is listed with its client id and partitions; its lag gauge falls to 0 once it committed
// everything, and its group's committed offsets then equal the end offsets, which ReadPartition reads up to.
func TestKafkaDescribeGroupMembersAndLag(t *testing.T) {
	cfg := kafkatest.Config(t, 2)
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	cfg.ClientID = "lag-test"
	cl := kafkatest.Client(t, cfg)
	const n = 40
	produceN(t, cfg, n)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	desc, err := cl.Admin().DescribeGroup(ctx, "lag-group")
	if err != nil || len(desc.Members) != 0 {
		t.Fatalf("unknown group: %+v, %v", desc, err)
	}
	c := cl.NewConsumer(topics.TopicTokenized, kafka.ConsumerConfig{Group: "lag-group", CommitInterval: 50 * time.Millisecond})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	seen := 0
	go func() {
		done <- c.Run(runCtx, func(d *kafka.Delivery) { seen++; d.Done() })
	}()
	phys := cfg.Topic(topics.TopicTokenized)
	deadline := time.Now().Add(time.Minute)
	for {
		desc, err = cl.Admin().DescribeGroup(ctx, "lag-group")
		if err != nil {
			t.Fatal(err)
		}
		lag, series := lagOf(t, reg, phys)
		if len(desc.Members) == 1 && desc.State == "Stable" && len(desc.Members[0].Partitions[topics.TopicTokenized]) == 2 &&
			series == 2 && lag == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %+v, lag %v over %d series", desc, lag, series)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if m := desc.Members[0]; m.ClientID != "lag-test" || m.Host == "" || m.ID == "" {
		t.Fatalf("member %+v", m)
	}
	ends, err := cl.Admin().EndOffsets(ctx, topics.TopicTokenized)
	if err != nil {
		t.Fatal(err)
	}
	committed, err := cl.Admin().CommittedOffsets(ctx, "lag-group", topics.TopicTokenized)
	if err != nil {
		t.Fatal(err)
	}
	starts, err := cl.Admin().StartOffsets(ctx, topics.TopicTokenized)
	if err != nil {
		t.Fatal(err)
	}
	read := 0
	for p, end := range ends {
		if committed[p] != end || starts[p] != 0 {
			t.Errorf("partition %d: start %d, committed %d, end %d", p, starts[p], committed[p], end)
		}
		if err := cl.ReadPartition(ctx, topics.TopicTokenized, p, starts[p], end, func(m kafka.Message) error {
			var r topics.Tokenized
			if err := topics.Unmarshal(m.Value, &r); err != nil {
				return err
			}
			if m.Partition != p {
				t.Errorf("record %s of partition %d read from %d", r.ID, m.Partition, p)
			}
			read++
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if read != n {
		t.Fatalf("ReadPartition read %d records, want %d", read, n)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, series := lagOf(t, reg, phys); series != 0 {
		t.Fatalf("%d lag series left after the member gave its partitions up", series)
	}
}
