// Package generate is draftflow's generation stage: it consumes tokenized prompts, sends their input_ids to
// one or more SGLang servers through the native POST /generate API, and produces the completions token-exact
// (output_ids and meta_info) to the generated topic.
//
// The stage reads like a short story. The record lifecycle (package kafka/stream) hands it a decoded
// topics.Tokenized record; the stage resolves its lane and max_new_tokens and sends a Request through its
// driver: the request waits until the admission Controller admits it to some endpoint with room, is sent,
// and is retried on transient failures with exponential backoff (possibly on another endpoint) until the
// server answers; the stage produces a topics.Generation (or, for a request the server refused with HTTP 400
// or answered with an abort or an invalid body, rejects the record) and the lifecycle finishes the record
// once the output is acknowledged, so a committed offset always means the output is durable in Kafka. On
// shutdown the stage stops fetching, aborts requests still running on the servers (/abort_request) and
// abandons their records (stream.Record.Abandon: the slot is freed at once, the offset never committed), so
// the consumer stops without waiting them out and they are redelivered.
//
// Admission (the kv-budget and fixed policies, routing, the KV gate, health and budget feedback, what a
// failed attempt means) is the Controller's, in stages/generate/admission, which keeps no goroutines or
// timers; the driver (driver.go) runs it in real time: it brings every server up and watches its health and
// load, and sends each request with retries. The benchmark (bench/generate) drives the same Controller on
// simulated time. The SGLang client and wire types are package sglang's. Config holds the stage's settings
// and embeds the Controller's (the flags of RegisterFlags).
//
// Files: config.go (Config and flags), stage.go (the Kafka loop), driver.go (the Controller in real time),
// shards.go (what the sink's shards hold: turns not to send again), turns.go (a turn's reply and stop reason,
// through sglang/reply), override.go (--override-* sampling settings), metrics.go (the records' Prometheus
// series).
package generate
