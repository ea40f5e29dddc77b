package kafka

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Plumbing metrics, registered on the default Prometheus registry that every stage's /metrics serves.
var (
	producedRecords = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "draftflow_produced_records_total", Help: "Records acknowledged by Kafka, per topic.",
	}, []string{"topic"})
	producedBytes = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "draftflow_produced_bytes_total", Help: "Encoded record bytes acknowledged by Kafka, per topic.",
	}, []string{"topic"})
	produceErrors = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "draftflow_produce_errors_total", Help: "Records Kafka failed to acknowledge, per topic.",
	}, []string{"topic"})
	consumedRecords = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "draftflow_consumed_records_total", Help: "Records fetched, per topic and consumer group.",
	}, []string{"topic", "group"})
	commitErrors = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "draftflow_commit_errors_total", Help: "Failed offset commits (retried), per topic and group.",
	}, []string{"topic", "group"})
	committedOffset = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "draftflow_committed_offset", Help: "Last committed offset, per topic, group and partition.",
	}, []string{"topic", "group", "partition"})
)

// Group membership metrics.
var (
	assignedPartitions = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "draftflow_assigned_partitions", Help: "Partitions this member owns in the current group generation, per topic and group.",
	}, []string{"topic", "group"})
	rebalances = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "draftflow_group_generations_total", Help: "Group generations this member joined (each rebalance starts one), per topic and group.",
	}, []string{"topic", "group"})
	revokedAbandoned = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "draftflow_revoked_unfinished_total", Help: "Deliveries still unfinished when their partition was given up (the next owner does them again), per topic and group.",
	}, []string{"topic", "group"})
)
