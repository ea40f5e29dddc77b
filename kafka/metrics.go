package kafka

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/draftflow/draftflow/metrics"
)

// plumbing are the Kafka plumbing metrics, registered on Config.Registerer (shared by every producer and
// consumer of one registry).
type plumbing struct {
	producedRecords, producedBytes, produceErrors *prometheus.CounterVec
	consumedRecords, commitErrors                 *prometheus.CounterVec
	committedOffset                               *prometheus.GaugeVec
	lag                                           *prometheus.GaugeVec
	assignedPartitions                            *prometheus.GaugeVec
	rebalances, revokedAbandoned, handedOver      *prometheus.CounterVec
}

func newPlumbing(reg prometheus.Registerer) *plumbing {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels))
	}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return metrics.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels))
	}
	return &plumbing{
		producedRecords: counter("draftflow_produced_records_total", "Records acknowledged by Kafka, per topic.", "topic"),
		producedBytes:   counter("draftflow_produced_bytes_total", "Encoded record bytes acknowledged by Kafka, per topic.", "topic"),
		produceErrors:   counter("draftflow_produce_errors_total", "Records Kafka failed to acknowledge, per topic.", "topic"),
		consumedRecords: counter("draftflow_consumed_records_total", "Records fetched, per topic and consumer group.", "topic", "group"),
		commitErrors:    counter("draftflow_commit_errors_total", "Failed offset commits (retried), per topic and group.", "topic", "group"),
		committedOffset: gauge("draftflow_committed_offset", "Last committed offset, per topic, group and partition.", "topic", "group", "partition"),
		lag: gauge("draftflow_consumer_lag",
			"Records of a partition this member owns that the group has not committed yet: the partition's high watermark at "+
				"the last fetch minus the committed offset, per topic, group and partition.", "topic", "group", "partition"),
		assignedPartitions: gauge("draftflow_assigned_partitions",
			"Partitions this member owns in the current group generation, per topic and group.", "topic", "group"),
		rebalances: counter("draftflow_group_generations_total",
			"Group generations this member joined (each rebalance starts one), per topic and group.", "topic", "group"),
		handedOver: counter("draftflow_handed_over_records_total",
			"Records the partition's previous owner had finished after its committed offset (named in the commit's metadata), skipped instead of done again, per topic and group.", "topic", "group"),
		revokedAbandoned: counter("draftflow_revoked_unfinished_total",
			"Deliveries still unfinished when their partition was given up (the next owner does them again), per topic and group.", "topic", "group"),
	}
}
