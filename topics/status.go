package topics

import "time"

// TopicStatus carries each stage process's periodic Status (`draftflow status` reads it), keyed by StatusKey.
// Only the latest record of a key matters, so the topic may be compacted.
const TopicStatus = "status"

// States of a Status.
const (
	// StatusRunning is the state of a process that is working.
	StatusRunning = "running"
	// StatusStopped is the last record of a process that stopped cleanly.
	StatusStopped = "stopped"
)

// Status is one stage process's figures at one moment: what `draftflow status` cannot read from Kafka itself.
// Counters are cumulative since the process started (a reader takes differences between two records of the
// same instance for its own rates); the rates are the process's own, over RateWindowSeconds.
type Status struct {
	// Stage is ingest, tokenize, generate, sink or capture.
	Stage string `json:"stage"`
	// Instance names the process (host name and process id unless configured); with Stage it is the key.
	Instance string `json:"instance"`
	// Host is the machine (or pod) the process runs on.
	Host string `json:"host,omitempty"`
	// Group and Topic are the stage's consumer group and the topic it consumes (logical names; empty for ingest).
	Group string `json:"group,omitempty"`
	Topic string `json:"topic,omitempty"`
	// State is StatusRunning, or StatusStopped in the last record of a process that stopped.
	State string `json:"state"`
	// Time is when the figures were taken; Started when the process started.
	Time    time.Time `json:"time"`
	Started time.Time `json:"started"`
	// IntervalSeconds is how often the process publishes: a record older than a few intervals is stale.
	IntervalSeconds float64 `json:"interval_s"`
	// Records the stage finished (produced its output for; the sink: rows written or buffered for its next
	// flush), Rejected of them dead-lettered, and Tokens (tokenize: prompt tokens produced; generate: output
	// tokens received; sink: tokens written to shards).
	Records  int64 `json:"records"`
	Rejected int64 `json:"rejected"`
	Tokens   int64 `json:"tokens"`
	// RecordsPerSecond and TokensPerSecond are the process's rates over its last RateWindowSeconds.
	RecordsPerSecond  float64 `json:"records_per_s"`
	TokensPerSecond   float64 `json:"tokens_per_s"`
	RateWindowSeconds float64 `json:"rate_window_s"`
	// Endpoints are the generate stage's admission units (SGLang servers or their DP ranks).
	Endpoints []EndpointStatus `json:"endpoints,omitempty"`
	// Stalled says, in words, why the stage makes no progress (no SGLang server answers, every server is full,
	// ...); empty while it does, in a stopped record, and in records of builds that do not tell.
	Stalled string `json:"stalled,omitempty"`
}

// EndpointStatus is one SGLang endpoint as a generate process sees it.
type EndpointStatus struct {
	// Name is the server URL ("?dp_rank=N" for one data-parallel rank).
	Name string `json:"name"`
	// Up is true while the endpoint admits requests.
	Up bool `json:"up"`
	// InFlight requests, their budget charge InFlightTokens, and the admission Budget (kv-budget: tokens;
	// fixed: requests).
	InFlight       int64   `json:"in_flight"`
	InFlightTokens float64 `json:"in_flight_tokens"`
	Budget         float64 `json:"budget"`
	// KVPoolTokens is the KV pool the server reported; KVUsage its token usage (0-1) from /v1/loads.
	KVPoolTokens int64   `json:"kv_pool_tokens"`
	KVUsage      float64 `json:"kv_usage"`
	// OutputTokens, Retractions and Requests (successful) are cumulative; OutputTokensPerSecond is the rate
	// over the record's RateWindowSeconds.
	OutputTokens          int64   `json:"output_tokens"`
	OutputTokensPerSecond float64 `json:"output_tokens_per_s"`
	Retractions           int64   `json:"retractions"`
	Requests              int64   `json:"requests"`
}

// StatusKey is the record key of a process's Status: "<stage>/<instance>".
func StatusKey(stage, instance string) string { return stage + "/" + instance }
