package sink

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Sink metrics, on the default Prometheus registry.
var (
	rowsWritten = promauto.NewCounter(prometheus.CounterOpts{
		Name: "draftflow_sink_rows_total", Help: "Rows written to durable shards.",
	})
	tokensWritten = promauto.NewCounter(prometheus.CounterOpts{
		Name: "draftflow_sink_tokens_total", Help: "Tokens (prompt + completion) written to durable shards.",
	})
	shardsWritten = promauto.NewCounter(prometheus.CounterOpts{
		Name: "draftflow_sink_shards_total", Help: "Shards made durable.",
	})
	shardBytes = promauto.NewCounter(prometheus.CounterOpts{
		Name: "draftflow_sink_shard_bytes_total", Help: "Bytes of durable shards.",
	})
	// redoneGenerations counts work done twice: a generation whose (id, turn) was already written or buffered for
	// its run (a rebalance or crash handed in-flight or uncommitted work to another replica, a retry, or a prompt
	// ingested again). The sink drops it; the GPU time is spent all the same.
	redoneGenerations = promauto.NewCounter(prometheus.CounterOpts{
		Name: "draftflow_sink_redone_generations_total",
		Help: "Generations dropped because their (id, turn) was already written or buffered for their run: GPU work done twice.",
	})
	covered = promauto.NewCounter(prometheus.CounterOpts{
		Name: "draftflow_sink_covered_total", Help: "Records skipped because their offset is already in a shard on disk.",
	})
	rejected = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "draftflow_sink_rejected_total", Help: "Records sent to the rejected topic, by reason class.",
	}, []string{"reason"})
	flushSeconds = promauto.NewHistogram(prometheus.HistogramOpts{
		Name: "draftflow_sink_flush_seconds", Help: "Time to make one partition's buffer durable (all its shards and the checkpoint).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
	})
	bufferedRows = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "draftflow_sink_buffered_rows", Help: "Rows held in memory, not yet durable.",
	})
)

// redoneCount mirrors redoneGenerations for RedoneGenerations.
var redoneCount atomic.Int64

// RedoneGenerations returns how many generations the sinks of this process dropped as duplicates so far (the
// draftflow_sink_redone_generations_total counter): work done more than once.
func RedoneGenerations() int64 { return redoneCount.Load() }
