package admission

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	dfmetrics "github.com/draftflow/draftflow/metrics"

	"github.com/draftflow/draftflow/sglang"
)

// metrics are the Controller's Prometheus series (named draftflow_generate_*: they are the generate stage's).
// Several Controllers in one process (tests, benchmarks) share the collectors of one registry.
type metrics struct {
	inflightRequests *prometheus.GaugeVec
	inflightTokens   *prometheus.GaugeVec
	budget           *prometheus.GaugeVec
	up               *prometheus.GaugeVec
	poolTokens       *prometheus.GaugeVec
	maxRunning       *prometheus.GaugeVec
	serverRetracted  *prometheus.GaugeVec
	serverQueue      *prometheus.GaugeVec
	serverRunning    *prometheus.GaugeVec
	otherRequests    *prometheus.GaugeVec
	tokenUsage       *prometheus.GaugeVec
	retractions      *prometheus.CounterVec
	outputTokens     *prometheus.CounterVec
	requests         *prometheus.CounterVec
	latency          *prometheus.HistogramVec
	admissionWait    *prometheus.HistogramVec
	waiting          *prometheus.GaugeVec
	expected         *prometheus.GaugeVec
	affinity         *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	ep := []string{"endpoint"}
	return &metrics{
		inflightRequests: register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "draftflow_generate_inflight_requests", Help: "Requests admitted to an endpoint and not finished."}, ep)),
		inflightTokens: register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "draftflow_generate_inflight_tokens", Help: "Budget charge of in-flight requests (kv-budget: prompt + expected output tokens)."}, ep)),
		budget: register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "draftflow_generate_budget", Help: "Admission budget of an endpoint (kv-budget: tokens; fixed: requests)."}, ep)),
		up: register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "draftflow_generate_endpoint_up", Help: "1 while an endpoint admits requests, 0 while it is probed or drained."}, ep)),
		poolTokens: register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "draftflow_generate_kv_pool_tokens", Help: "KV pool size the endpoint reported (max_total_num_tokens)."}, ep)),
		maxRunning: register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "draftflow_generate_server_max_running_requests",
			Help: "Running-request limit the endpoint reported (/server_info effective_max_running_requests_per_dp); 0 when unknown."}, ep)),
		serverRetracted: register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "draftflow_generate_server_retracted_requests",
			Help: "The server's retraction counter for the endpoint (sglang:num_retracted_requests_total) as last polled; absent until the stage has read it."}, ep)),
		serverQueue: register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "draftflow_generate_server_queue_requests", Help: "Requests waiting in the server's queue (/v1/loads)."}, ep)),
		serverRunning: register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "draftflow_generate_server_running_requests", Help: "Requests in the server's running batch (/v1/loads)."}, ep)),
		otherRequests: register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "draftflow_generate_server_other_requests", Help: "Other clients' requests on the server: its running and waiting requests beyond this process's in flight (/v1/loads, kv-budget)."}, ep)),
		tokenUsage: register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "draftflow_generate_server_token_usage", Help: "KV token usage of the server (/v1/loads)."}, ep)),
		retractions: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "draftflow_generate_retractions_total", Help: "Retractions of finished requests, as meta_info reports them."}, ep)),
		outputTokens: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "draftflow_generate_output_tokens_total", Help: "Output tokens received; its rate is the output tok/s."}, ep)),
		requests: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "draftflow_generate_requests_total", Help: "Request attempts by outcome (ok, rejected, server_error, busy, connection_error, timeout, drained, client_error)."},
			[]string{"endpoint", "outcome"})),
		latency: register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "draftflow_generate_request_seconds", Help: "Latency of successful request attempts.",
			Buckets: prometheus.ExponentialBuckets(0.5, 2, 14)}, ep)),
		admissionWait: register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "draftflow_generate_admission_wait_seconds", Help: "Time a request waited for admission, per lane.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 10)}, []string{"lane"})),
		waiting: register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "draftflow_generate_waiting_requests", Help: "Requests waiting for admission (client-side queue), per lane."}, []string{"lane"})),
		expected: register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "draftflow_generate_expected_output_tokens", Help: "Learnt conservative output length quantile, per dataset and lane."},
			[]string{"dataset", "lane"})),
		affinity: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "draftflow_generate_affinity_total",
			Help: "Later turns of conversations routed to the server of their previous turn (hit) or elsewhere because it had no room (miss)."},
			[]string{"result"})),
	}
}

// register registers c on reg, or returns the collector already registered under the same descriptor.
func register[T prometheus.Collector](reg prometheus.Registerer, c T) T {
	return dfmetrics.Register(reg, c)
}

func (m *metrics) endpointState(ep *endpoint) {
	m.inflightRequests.WithLabelValues(ep.name).Set(float64(ep.inflight))
	m.inflightTokens.WithLabelValues(ep.name).Set(ep.used)
	m.budget.WithLabelValues(ep.name).Set(ep.budget)
	m.poolTokens.WithLabelValues(ep.name).Set(float64(ep.pool))
	m.maxRunning.WithLabelValues(ep.name).Set(float64(ep.maxRunning))
	if ep.haveRetracted {
		m.serverRetracted.WithLabelValues(ep.name).Set(ep.retracted)
	}
	up := 0.0
	if ep.ready() {
		up = 1
	}
	m.up.WithLabelValues(ep.name).Set(up)
}

func (m *metrics) admitted(ep *endpoint, lane string, waited time.Duration) {
	m.endpointState(ep)
	m.admissionWait.WithLabelValues(lane).Observe(waited.Seconds())
}

func (m *metrics) queue(lane string, n int) { m.waiting.WithLabelValues(lane).Set(float64(n)) }

func (m *metrics) finished(ep *endpoint, outputTokens, retractions int, took time.Duration) {
	m.outputTokens.WithLabelValues(ep.name).Add(float64(outputTokens))
	m.requests.WithLabelValues(ep.name, "ok").Inc()
	m.latency.WithLabelValues(ep.name).Observe(took.Seconds())
	if retractions > 0 {
		m.retractions.WithLabelValues(ep.name).Add(float64(retractions))
	}
}

func (m *metrics) outcome(ep *endpoint, outcome string) {
	m.requests.WithLabelValues(ep.name, outcome).Inc()
}

func (m *metrics) estimate(key LengthKey, tokens int) {
	m.expected.WithLabelValues(key.Dataset, key.Lane).Set(float64(tokens))
}

func (m *metrics) serverLoad(ep *endpoint, l sglang.Load) {
	m.serverQueue.WithLabelValues(ep.name).Set(float64(l.Waiting))
	m.serverRunning.WithLabelValues(ep.name).Set(float64(l.Running))
	m.tokenUsage.WithLabelValues(ep.name).Set(l.TokenUsage)
}
