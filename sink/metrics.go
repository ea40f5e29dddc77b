package sink

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/draftflow/draftflow/metrics"
)

// sinkMetrics are the sink's own series, registered on Config.Registerer: its shards, buffers and journal. What
// became of each record it consumed (a row written, a duplicate, a turn already in the shards, an offset already
// covered, a rejection) is counted by the record lifecycle in draftflow_records_total{stage="sink"}, and what one
// Run did is its Result.
type sinkMetrics struct {
	rowsWritten, tokensWritten, shardsWritten, shardBytes prometheus.Counter
	flushSeconds                                          prometheus.Histogram
	bufferedRows                                          prometheus.Gauge
	// turns counts the rows written by stop reason (topics.StopReasons); continuations counts next-turn
	// prompts written to the prompts topic (again, after a duplicate, when the topic they went to is gone).
	turns         *prometheus.CounterVec
	continuations prometheus.Counter
	// journalBytes counts the bytes appended to the journal; journalSyncSeconds times its fsyncs.
	journalBytes       prometheus.Counter
	journalSyncSeconds prometheus.Histogram
}

func newSinkMetrics(reg prometheus.Registerer) *sinkMetrics {
	counter := func(name, help string) prometheus.Counter {
		return metrics.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help}))
	}
	return &sinkMetrics{
		rowsWritten:   counter("draftflow_sink_rows_total", "Rows written to durable shards."),
		tokensWritten: counter("draftflow_sink_tokens_total", "Tokens (prompt + completion) written to durable shards."),
		shardsWritten: counter("draftflow_sink_shards_total", "Shards made durable."),
		shardBytes:    counter("draftflow_sink_shard_bytes_total", "Bytes of durable shards."),
		flushSeconds: metrics.Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "draftflow_sink_flush_seconds", Help: "Time to make one partition's buffer durable (all its shards and the checkpoint).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		})),
		bufferedRows: metrics.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "draftflow_sink_buffered_rows", Help: "Rows held in memory, not yet in a shard (durable in the journal once it is synced).",
		})),
		turns: metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "draftflow_sink_turns_total",
			Help: "Rows written to durable shards by stop reason: end, continued (its next turn was sent), tool_divergence, length, parse_error.",
		}, []string{"stop_reason"})),
		continuations: counter("draftflow_sink_continuations_total",
			"Next-turn prompts of multi-turn conversations written to the prompts topic."),
		journalBytes: counter("draftflow_sink_journal_bytes_total",
			"Bytes appended to the journal: every absorbed record, durable before it is in a shard."),
		journalSyncSeconds: metrics.Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "draftflow_sink_journal_sync_seconds", Help: "Time of one fsync of the journal (every journal sync interval while records arrive).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		})),
	}
}
