package sim

import (
	"os"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics exports SGLang's Prometheus series on a per-Server registry, with
// the names, help texts and labels of observability/metrics_collector.py
// (0.5.23) or metrics/collector.py (0.5.4).
//
// Scheduler series (one set per DP rank) carry model_name, engine_type
// ("unified"), tp_rank, pp_rank, moe_ep_rank (0.5.23 only) and, with
// --dp-size > 1, dp_rank (SchedulerMetricsCollector labels). Tokenizer series
// carry model_name and engine_type (0.5.4: model_name only), and the request
// counters and latency histograms also is_streaming ("true"/"false").
//
// SGLang exports in prometheus_client's multiprocess mode, where a labelled
// metric has no sample (and no family in the exposition) until its first
// .labels() call: sglang:num_retracted_requests_total (0.5.23) appears only
// after the first retraction, as here, where every series is a labelled
// vector. The gauge sglang:num_retracted_reqs (multiprocess_mode "all")
// carries a pid label in that mode. Scheduler gauges refresh on every prefill
// batch, every DecodeLogInterval decode steps and when the engine goes idle,
// so while busy they are as stale as SGLang's; counters and histograms update
// as events happen (the token and request counters when a request finishes,
// as TokenizerMetricsCollector.observe_one_finished_request does).
type metrics struct {
	legacy bool // 0.5.4: no moe_ep_rank/engine_type on tokenizer series, no retraction counter
	model  string
	dp     bool

	numRunning, numQueue, tokenUsage, numUsed, genThroughput, cacheHitRate,
	maxTotal, newTokenRatio, numRetracted *prometheus.GaugeVec
	retractedTotal              *prometheus.CounterVec // nil in 0.5.4
	queueTime                   *prometheus.HistogramVec
	promptTokens, genTokens     *prometheus.CounterVec
	requests, aborted           *prometheus.CounterVec
	ttft, e2e                   *prometheus.HistogramVec
	tokenizerLabels             []string // values of the tokenizer labels
	schedulerNames, tokenizerNs []string // label names
}

func newMetrics(reg prometheus.Registerer, cfg *Config) *metrics {
	m := &metrics{legacy: cfg.Release == Release054, model: cfg.ModelPath, dp: cfg.DPSize > 1}
	m.schedulerNames = []string{"model_name", "engine_type", "tp_rank", "pp_rank"}
	if !m.legacy {
		m.schedulerNames = append(m.schedulerNames, "moe_ep_rank")
	}
	if m.dp {
		m.schedulerNames = append(m.schedulerNames, "dp_rank")
	}
	m.tokenizerNs, m.tokenizerLabels = []string{"model_name"}, []string{cfg.ModelPath}
	if !m.legacy {
		m.tokenizerNs, m.tokenizerLabels = append(m.tokenizerNs, "engine_type"), append(m.tokenizerLabels, "unified")
	}
	gauge := func(name, help string, extra ...string) *prometheus.GaugeVec {
		g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sglang:" + name, Help: help},
			append(append([]string(nil), m.schedulerNames...), extra...))
		reg.MustRegister(g)
		return g
	}
	counter := func(name, help string, labels []string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sglang:" + name, Help: help}, labels)
		reg.MustRegister(c)
		return c
	}
	hist := func(name, help string, labels []string, buckets []float64) *prometheus.HistogramVec {
		h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sglang:" + name, Help: help, Buckets: buckets}, labels)
		reg.MustRegister(h)
		return h
	}
	streaming := append(append([]string(nil), m.tokenizerNs...), "is_streaming")
	if m.legacy {
		streaming = m.tokenizerNs
	}
	latency := []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 60, 120, 300, 600, 1200, 1800, 3600, 7200}
	m.numRunning = gauge("num_running_reqs", "The number of running requests.")
	m.numQueue = gauge("num_queue_reqs", "The number of requests in the waiting queue.")
	m.tokenUsage = gauge("token_usage", "The token usage.")
	m.numUsed = gauge("num_used_tokens", "The number of used tokens.")
	m.genThroughput = gauge("gen_throughput", "The generation throughput (token/s).")
	m.cacheHitRate = gauge("cache_hit_rate", "The prefix cache hit rate.")
	m.numRetracted = gauge("num_retracted_reqs", "The number of retracted requests.", "pid")
	if !m.legacy {
		m.maxTotal = gauge("max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.")
		m.newTokenRatio = gauge("new_token_ratio", "The new token ratio.")
		m.retractedTotal = counter("num_retracted_requests_total", "Total number of retracted requests.", m.schedulerNames)
	}
	m.queueTime = hist("queue_time_seconds", "Histogram of queueing time in seconds.", m.schedulerNames, latency)
	m.promptTokens = counter("prompt_tokens_total", "Number of prefill tokens processed.", streaming)
	m.genTokens = counter("generation_tokens_total", "Number of generation tokens processed.", streaming)
	m.requests = counter("num_requests_total", "Number of requests processed.", streaming)
	m.aborted = counter("num_aborted_requests_total", "Number of requests aborted.", m.tokenizerNs)
	m.ttft = hist("time_to_first_token_seconds", "Histogram of time to first token in seconds.", streaming, latency)
	m.e2e = hist("e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", streaming, latency)
	return m
}

// rank returns the observer recording DP rank i's scheduler events.
func (m *metrics) rank(i int) *rankMetrics {
	vals := []string{m.model, "unified", "0", "0"}
	if !m.legacy {
		vals = append(vals, "0")
	}
	if m.dp {
		vals = append(vals, strconv.Itoa(i))
	}
	return &rankMetrics{m: m, labels: vals, pid: strconv.Itoa(os.Getpid() + 1 + i)}
}

// abortDispatched counts one abort sent to the scheduler (an /abort_request
// that found its rid, abort_all, or a client that went away), as
// TokenizerManager.abort_request does.
func (m *metrics) abortDispatched() { m.aborted.WithLabelValues(m.tokenizerLabels...).Inc() }

// streamLabels are the tokenizer label values plus is_streaming (0.5.23).
func (m *metrics) streamLabels(stream bool) []string {
	if m.legacy {
		return m.tokenizerLabels
	}
	return append(append([]string(nil), m.tokenizerLabels...), strconv.FormatBool(stream))
}

// rankMetrics is one DP rank's observer.
type rankMetrics struct {
	m      *metrics
	labels []string // scheduler label values
	pid    string   // the simulated scheduler process id (num_retracted_reqs's pid label)
}

func (o *rankMetrics) onQueued(*request) {}

func (o *rankMetrics) onScheduled(r *request) {
	o.m.queueTime.WithLabelValues(o.labels...).Observe(r.scheduled - r.arrival)
}

func (o *rankMetrics) onFirstToken(r *request) {
	o.m.ttft.WithLabelValues(o.m.streamLabels(r.stream)...).Observe(r.firstToken - r.arrival)
}

// onFinish records a finished request the way the tokenizer manager's
// collect_metrics does: requests answered from an AbortReq (popped from the
// waiting queue) and crashes never reach it.
func (o *rankMetrics) onFinish(r *request) {
	if r.waitAbort || r.finish.crashed {
		return
	}
	l := o.m.streamLabels(r.stream)
	o.m.promptTokens.WithLabelValues(l...).Add(float64(len(r.input)))
	o.m.genTokens.WithLabelValues(l...).Add(float64(len(r.output)))
	o.m.requests.WithLabelValues(l...).Inc()
	o.m.e2e.WithLabelValues(l...).Observe(r.finished - r.arrival)
}

func (o *rankMetrics) onRetract(n int) {
	if o.m.retractedTotal != nil && n > 0 {
		o.m.retractedTotal.WithLabelValues(o.labels...).Add(float64(n))
	}
}

func (o *rankMetrics) onGenerated(int) {}

func (o *rankMetrics) onLog(e *engine) {
	m, l := o.m, o.labels
	m.numRunning.WithLabelValues(l...).Set(float64(len(e.running)))
	m.numQueue.WithLabelValues(l...).Set(float64(len(e.waiting)))
	m.numUsed.WithLabelValues(l...).Set(float64(e.usedTokens()))
	m.tokenUsage.WithLabelValues(l...).Set(float64(e.usedTokens()) / float64(e.cfg.MaxTotalTokens))
	m.genThroughput.WithLabelValues(l...).Set(e.genThroughput)
	m.cacheHitRate.WithLabelValues(l...).Set(e.lastPrefillHitRate)
	m.numRetracted.WithLabelValues(append(append([]string(nil), l...), o.pid)...).Set(float64(e.retractedLogged))
	if m.maxTotal != nil {
		m.maxTotal.WithLabelValues(l...).Set(float64(e.cfg.MaxTotalTokens))
		m.newTokenRatio.WithLabelValues(l...).Set(e.ratio)
	}
}
