package generate

import (
	"github.com/prometheus/client_golang/prometheus"

	dfmetrics "github.com/draftflow/draftflow/metrics"
)

// stageMetrics are the stage's own Prometheus series. What became of the records is counted by the record
// lifecycle (draftflow_records_total{stage="generate"}, package kafka/stream); the Controller's series
// (endpoints, budgets, requests) are registered by the Controller, on the same registry.
type stageMetrics struct {
	turns        *prometheus.CounterVec
	cachedTokens prometheus.Counter
	loops        *prometheus.CounterVec
}

func newStageMetrics(reg prometheus.Registerer) *stageMetrics {
	return &stageMetrics{
		turns: dfmetrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "draftflow_generate_turns_total",
			Help: "Generated turns of multi-turn conversations by stop reason (continued, end, tool_divergence, length, parse_error, loop)."},
			[]string{"stop_reason"})),
		cachedTokens: dfmetrics.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "draftflow_generate_cached_prompt_tokens_total",
			Help: "Prompt tokens the servers reported as prefix-cache hits (meta_info cached_tokens): prefill saved."})),
		loops: dfmetrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "draftflow_generate_loops_total",
			Help: "Replies found in a repetition loop, by what was done (--loop-action: keep, drop, mark)."},
			[]string{"action"})),
	}
}
