// Package generate is draftflow's generation stage: it consumes tokenized prompts, sends their input_ids to
// one or more SGLang servers through the native POST /generate API, and produces the completions token-exact
// (output_ids and meta_info) to the generated topic.
//
// The stage reads like a short story. A Consumer delivers a topics.Tokenized record; the stage resolves its
// lane and max_new_tokens and hands a Request to the Controller; the Controller waits until some endpoint
// has room for it, sends it, retries transient failures with exponential backoff (possibly on another
// endpoint), and returns the server's answer; the stage writes a topics.Generation (or, for a request the
// server refused with HTTP 400 or answered with an abort or an invalid body, a topics.Rejection) and marks
// the delivery Done from the producer's acknowledgement callback, so a committed offset always means the
// output is durable in Kafka. On shutdown the stage stops fetching, aborts requests still running on the
// servers (/abort_request) and leaves their deliveries unfinished, so they are redelivered.
//
// The Controller owns the admission policy. Policy "fixed" keeps at most Concurrency requests in flight per
// endpoint. Policy "kv-budget" (the default) keeps, per endpoint, as much work in flight as that server's KV
// pool can actually run: it reads the pool size from /get_server_info, charges every in-flight request its
// prompt tokens plus the output tokens it is expected to produce (a conservative quantile, learnt online per
// dataset and lane, of the completions seen so far, clipped by max_new_tokens), and admits a request only
// while the charges fit the endpoint's budget. The budget adapts from live feedback polled from /v1/loads and
// /metrics: it shrinks on retractions (the server's counter, else meta_info counts), on a server queue above
// its band and on KV usage above target, and grows while the server's queue runs short (a few waiting
// requests keep the server busy between a completion and the next arrival). Requests are routed to the endpoint with the most headroom;
// an endpoint failing health checks is drained and re-admitted, with a fresh capacity read, once it answers
// again. Lanes (per-dataset or per-length-class settings) get a guaranteed share of the budget so long
// requests neither starve nor crowd out short ones.
//
// Files: config.go (Config and flags), sglang.go (the HTTP client of one server), estimate.go (output
// length learning), controller.go (admission, routing, retries), feedback.go (capacity reads, load polling,
// health checks), metrics.go (Prometheus), stage.go (the Kafka loop). The bench subpackage measures the
// policies against the simulator in stages/generate/sim.
package generate
