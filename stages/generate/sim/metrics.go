package sim

import "github.com/prometheus/client_golang/prometheus"

// metrics exports SGLang's Prometheus series (python/sglang/srt/metrics/
// collector.py names) on a per-Server registry. Scheduler gauges refresh on
// every prefill batch, every DecodeLogInterval decode steps and when the
// engine goes idle, so while busy they are as stale as SGLang's; counters
// and histograms update as events happen.
type metrics struct {
	numRunning, numQueue, tokenUsage, numUsed, genThroughput, cacheHitRate,
	maxTotal, newTokenRatio, numRetracted prometheus.Gauge
	retractedTotal, promptTokens, generationTokens, requests, aborted prometheus.Counter
	ttft, e2e, queueTime                                              prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer, model string) *metrics {
	labels := prometheus.Labels{"model_name": model}
	gauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sglang:" + name, Help: help, ConstLabels: labels})
		reg.MustRegister(g)
		return g
	}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: "sglang:" + name, Help: help, ConstLabels: labels})
		reg.MustRegister(c)
		return c
	}
	hist := func(name, help string, buckets []float64) prometheus.Histogram {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sglang:" + name, Help: help, ConstLabels: labels, Buckets: buckets})
		reg.MustRegister(h)
		return h
	}
	latency := []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 60, 120, 300, 600, 1200, 1800, 3600, 7200}
	return &metrics{
		numRunning:       gauge("num_running_reqs", "The number of running requests."),
		numQueue:         gauge("num_queue_reqs", "The number of requests in the waiting queue."),
		tokenUsage:       gauge("token_usage", "The token usage of the KV pool."),
		numUsed:          gauge("num_used_tokens", "The number of used KV tokens."),
		genThroughput:    gauge("gen_throughput", "The generation throughput (token/s)."),
		cacheHitRate:     gauge("cache_hit_rate", "The prefix cache hit rate."),
		maxTotal:         gauge("max_total_num_tokens", "The KV pool size in tokens."),
		newTokenRatio:    gauge("new_token_ratio", "The scheduler's new_token_ratio."),
		numRetracted:     gauge("num_retracted_reqs", "Requests retracted by the last retraction."),
		retractedTotal:   counter("num_retracted_requests_total", "Total retracted requests."),
		promptTokens:     counter("prompt_tokens_total", "Number of prefill tokens processed."),
		generationTokens: counter("generation_tokens_total", "Number of generation tokens processed."),
		requests:         counter("num_requests_total", "Number of requests processed."),
		aborted:          counter("num_aborted_requests_total", "Number of aborted requests."),
		ttft:             hist("time_to_first_token_seconds", "Time to first token (simulated seconds).", latency),
		e2e:              hist("e2e_request_latency_seconds", "End-to-end request latency (simulated seconds).", latency),
		queueTime:        hist("queue_time_seconds", "Time spent waiting before the first prefill (simulated seconds).", latency),
	}
}

func (m *metrics) onQueued(r *request) { m.promptTokens.Add(float64(len(r.input))) }

func (m *metrics) onScheduled(r *request) { m.queueTime.Observe(r.scheduled - r.arrival) }

func (m *metrics) onFirstToken(r *request) { m.ttft.Observe(r.firstToken - r.arrival) }

func (m *metrics) onFinish(r *request) {
	m.requests.Inc()
	if r.finish.Type == "abort" {
		m.aborted.Inc()
		return
	}
	m.e2e.Observe(r.finished - r.arrival)
}

func (m *metrics) onRetract(n int) {
	m.retractedTotal.Add(float64(n))
	m.numRetracted.Set(float64(n))
}

func (m *metrics) onGenerated(n int) { m.generationTokens.Add(float64(n)) }

func (m *metrics) onLog(e *engine) {
	m.numRunning.Set(float64(len(e.running)))
	m.numQueue.Set(float64(len(e.waiting)))
	m.numUsed.Set(float64(e.usedTokens()))
	m.tokenUsage.Set(float64(e.usedTokens()) / float64(e.cfg.MaxTotalTokens))
	m.genThroughput.Set(e.genThroughput)
	m.cacheHitRate.Set(e.cacheHitRate())
	m.maxTotal.Set(float64(e.cfg.MaxTotalTokens))
	m.newTokenRatio.Set(e.ratio)
}
