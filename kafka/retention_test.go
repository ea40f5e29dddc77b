package kafka_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/embedded"
	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/topics"
)

func TestParseRetention(t *testing.T) {
	for in, want := range map[string]time.Duration{"": 0, "forever": 0, "-1": 0, "72h": 72 * time.Hour, "7d": 7 * 24 * time.Hour,
		"1.5d": 36 * time.Hour, "90m": 90 * time.Minute} {
		if got, err := kafka.ParseRetention(in); err != nil || got != want {
			t.Errorf("ParseRetention(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"soon", "-5h", "0", "0d", "xd"} {
		if _, err := kafka.ParseRetention(bad); err == nil {
			t.Errorf("ParseRetention(%q) accepted", bad)
		}
	}
}

// retentionCluster returns brokers for a retention test (DRAFTFLOW_TEST_BROKERS, else a fresh embedded broker,
// returned too) and a fresh namespace.
func retentionCluster(t *testing.T) ([]string, *embedded.Broker, string) {
	ns := fmt.Sprintf("t-%s-%d", t.Name(), time.Now().UnixNano())
	if kafkatest.Real() {
		return kafkatest.Brokers(t), nil, ns
	}
	e := kafkatest.Embedded(t)
	return e.Brokers(), e, ns
}

// TestEnsureTopicsRetention: created topics keep everything by default, or what Retention says.
func TestEnsureTopicsRetention(t *testing.T) {
	brokers, _, ns := retentionCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range []struct {
		retention time.Duration
		want      string
	}{{0, "-1"}, {72 * time.Hour, "259200000"}} {
		cfg := kafka.Config{Brokers: brokers, Partitions: 1, Namespace: fmt.Sprintf("%s-%d", ns, c.retention), Retention: c.retention}
		cl := kafkatest.Client(t, cfg)
		if err := cl.Admin().EnsureTopics(ctx, topics.TopicPrompts); err != nil {
			t.Fatal(err)
		}
		for name, want := range map[string]string{"retention.ms": c.want, "retention.bytes": "-1"} {
			if got, err := cl.Admin().TopicConfigValue(ctx, topics.TopicPrompts, name); err != nil || got != want {
				t.Errorf("retention %s: %s = %q, %v; want %q", c.retention, name, got, err, want)
			}
		}
	}
}

// TestKafkaRetentionRisk: RetentionRisk reports unconsumed records, their age against retention.ms, and (on the
// embedded broker, whose retention can be applied on demand) records deleted before the group read them.
func TestKafkaRetentionRisk(t *testing.T) {
	brokers, e, ns := retentionCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const retention = 3 * time.Second
	cfg := kafka.Config{Brokers: brokers, Partitions: 1, Namespace: ns, Retention: retention}
	cl := kafkatest.Client(t, cfg)
	if err := cl.Admin().EnsureTopics(ctx, topics.Retained()...); err != nil {
		t.Fatal(err)
	}
	produceN(t, cfg, 6)
	if err := cl.Admin().StartGroupAt(ctx, "g", topics.TopicTokenized, map[int]int64{0: 2}); err != nil {
		t.Fatal(err)
	}
	r, err := cl.Admin().RetentionRisk(ctx, "g", topics.TopicTokenized)
	if err != nil {
		t.Fatal(err)
	}
	if r.Retention != retention || len(r.Partitions) != 1 || r.Group != cfg.Topic("g") || r.Topic != cfg.Topic(topics.TopicTokenized) {
		t.Fatalf("risk %+v", r)
	}
	p := r.Partitions[0]
	if p.LogStart != 0 || p.End != 6 || p.Committed != 2 || p.Unconsumed != 4 || p.Lost != 0 {
		t.Fatalf("partition %+v", p)
	}
	if p.Oldest.IsZero() || time.Since(p.Oldest) > 30*time.Second || time.Since(p.Oldest) < -5*time.Second {
		t.Fatalf("oldest unconsumed record at %s", p.Oldest)
	}
	if r.AtRisk(time.Now()) {
		t.Errorf("fresh records at risk: %v", r.Warnings(time.Now()))
	}
	later := p.Oldest.Add(retention)
	if w := r.Warnings(later); len(w) != 1 || !strings.Contains(w[0], "has not read") {
		t.Errorf("warnings once the oldest record is retention.ms old: %v", w)
	}

	// A group that never committed reads from the log start: nothing lost.
	fresh, err := cl.Admin().RetentionRisk(ctx, "never", topics.TopicTokenized)
	if err != nil || fresh.Partitions[0].Committed != -1 || fresh.Partitions[0].Unconsumed != 6 || fresh.Lost() != 0 {
		t.Fatalf("group without commits: %+v, %v", fresh, err)
	}

	// A topic kept forever: never at risk, no record read.
	forever := cfg
	forever.Namespace, forever.Retention = ns+"-forever", 0
	foreverCl := kafkatest.Client(t, forever)
	if err := foreverCl.Admin().EnsureTopics(ctx, topics.Retained()...); err != nil {
		t.Fatal(err)
	}
	produceN(t, forever, 3)
	fr, err := foreverCl.Admin().RetentionRisk(ctx, "g", topics.TopicTokenized)
	if err != nil || fr.Retention >= 0 || fr.AtRisk(time.Now().Add(1000*time.Hour)) || !fr.Partitions[0].Oldest.IsZero() {
		t.Fatalf("forever: %+v, %v", fr, err)
	}

	if e == nil {
		return // Apache Kafka deletes on its own schedule (log.retention.check.interval.ms)
	}
	time.Sleep(retention + 200*time.Millisecond)
	e.Cluster().ApplyRetention()
	r, err = cl.Admin().RetentionRisk(ctx, "g", topics.TopicTokenized)
	if err != nil {
		t.Fatal(err)
	}
	p = r.Partitions[0]
	if p.LogStart <= 2 || p.Lost != p.LogStart-2 || r.Lost() != p.Lost {
		t.Fatalf("after retention: %+v", p)
	}
	if w := r.Warnings(time.Now()); len(w) == 0 || !strings.Contains(w[0], "deleted by retention") {
		t.Errorf("warnings after records were lost: %v", w)
	}
}
