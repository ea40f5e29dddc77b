// Package generate is draftflow's generation stage: it consumes tokenized prompts, sends their input_ids to
// one or more SGLang servers through the native POST /generate API, and produces the completions token-exact
// (output_ids and meta_info) to the generated topic.
//
// The stage reads like a short story. The record lifecycle (package kafka/stream) hands it a decoded
// topics.Tokenized record; the stage resolves its lane and max_new_tokens and hands a Request to the
// Controller; the Controller waits until some endpoint has room for it, sends it, retries transient failures
// with exponential backoff (possibly on another endpoint), and returns the server's answer; the stage produces
// a topics.Generation (or, for a request the server refused with HTTP 400 or answered with an abort or an
// invalid body, rejects the record) and the lifecycle finishes the record once the output is acknowledged, so a
// committed offset always means the output is durable in Kafka. On shutdown the stage stops fetching, aborts
// requests still running on the servers (/abort_request) and abandons their records (stream.Record.Abandon:
// the slot is freed at once, the offset never committed), so the consumer stops without waiting them out and
// they are redelivered.
//
// Admission (the kv-budget and fixed policies, routing, retries, the KV gate, health checks and budget
// feedback) is the Controller's, in stages/generate/internal/admission; the SGLang client and wire types are
// package sglang's. Config holds the stage's settings and the Controller's (the flags of RegisterFlags);
// the stage hands the Controller its part.
//
// Files: config.go (Config and flags), stage.go (the Kafka loop), shards.go (what the sink's shards hold:
// turns not to send again), turns.go (a turn's reply and stop reason, through sglang/reply), override.go
// (--override-* sampling settings), metrics.go (the records' Prometheus series). The bench subpackage measures
// the policies against the simulator in sglang/sim.
package generate
