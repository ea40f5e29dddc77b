package sink

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/draftflow/draftflow/metrics"
)

// sinkMetrics are the sink's series, registered on Config.Registerer.
type sinkMetrics struct {
	rowsWritten, tokensWritten, shardsWritten, shardBytes prometheus.Counter
	// redoneGenerations counts work done twice: a generation whose (id, turn) was already written or buffered
	// for its run (a rebalance or crash handed in-flight or uncommitted work to another replica, a retry, or a
	// prompt ingested again while its first copy was still being generated). The sink drops it; the GPU time is
	// spent all the same. Turns already in the shards when they reached generate are not sent to a server and
	// count in inShards instead.
	redoneGenerations prometheus.Counter
	// inShards counts turns generate did not send to a server because the shards topic said the shards hold
	// them (topics.Generation.InShards), found in the shards: no work done twice.
	inShards     prometheus.Counter
	covered      prometheus.Counter
	rejected     *prometheus.CounterVec
	flushSeconds prometheus.Histogram
	bufferedRows prometheus.Gauge
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
		redoneGenerations: counter("draftflow_sink_redone_generations_total",
			"Generations dropped because their (id, turn) was already written or buffered for their run: GPU work done twice."),
		inShards: counter("draftflow_sink_in_shards_total",
			"Turns generate did not send to a server because the shards already hold them (the shards topic said so): no work redone."),
		covered: counter("draftflow_sink_covered_total", "Records skipped because their offset is already in a shard on disk."),
		rejected: metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "draftflow_sink_rejected_total", Help: "Records sent to the rejected topic, by reason class.",
		}, []string{"reason"})),
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

// turnCounts mirrors draftflow_sink_turns_total for TurnOutcomes.
var turnCounts sync.Map // stop reason -> *atomic.Int64

// TurnOutcomes returns how many rows the sinks of this process wrote so far, by stop reason (see
// topics.StopReasons): for a run summary.
func TurnOutcomes() map[string]int64 {
	out := map[string]int64{}
	turnCounts.Range(func(k, v any) bool {
		out[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return out
}

func countTurn(reason string) {
	v, _ := turnCounts.LoadOrStore(reason, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

// redoneCount mirrors draftflow_sink_redone_generations_total for RedoneGenerations.
var redoneCount atomic.Int64

// RedoneGenerations returns how many generations the sinks of this process dropped as duplicates so far (the
// draftflow_sink_redone_generations_total counter): work done more than once.
func RedoneGenerations() int64 { return redoneCount.Load() }

// inShardsCount mirrors draftflow_sink_in_shards_total for InShardsTurns.
var inShardsCount atomic.Int64

// InShardsTurns returns how many turns the sinks of this process received as already in the shards so far (the
// draftflow_sink_in_shards_total counter): turns generate did not send to a server again.
func InShardsTurns() int64 { return inShardsCount.Load() }
