// Package admission is the generate stage's admission controller: it decides which SGLang request goes to
// which server when, sends it with retries, and learns from the outcomes. It is internal to the stage
// (stages/generate runs it; stages/generate/bench measures it) and takes its own Config: the policy, the
// budgets, the lanes and the timings, nothing of Kafka.
//
// The Controller owns the admission policy. Policy "fixed" keeps at most Concurrency requests in flight per
// endpoint. Policy "kv-budget" (the default) keeps, per endpoint, as much work in flight as that server's KV
// pool can actually run, without letting it retract:
//
//   - Budget. It reads the pool size from /get_server_info and charges every in-flight request its prompt
//     tokens plus the output tokens it is expected to produce: a conservative quantile, learnt online per
//     dataset and lane, of the completions seen so far, clipped by max_new_tokens; as a request ages (tokens
//     produced ~ its age times the server's decode rate per request) it is re-charged the quantile of the
//     completions longer than what it produced, so long requests do not pile up unnoticed. A request is
//     admitted only while the charges fit the endpoint's budget. The budget adapts from live feedback
//     polled from /v1/loads and /metrics: it shrinks on retractions (the server's counter, else meta_info
//     counts) and on a server queue above its band, and grows while the server's queue runs short and the
//     budget is what limits.
//   - KV gate. Between polls the Controller predicts the server's used KV tokens (the last num_used_tokens,
//     plus prompts sent and waiting, less what answers freed, plus the decode rate times the time since).
//     A request goes only while usage stays under TargetUsage and the headroom left, shared by the batch,
//     is expected to see SafeCompletions running requests (at most SafeFraction of them) finish before the rest fill it (each request's
//     chance to end within its share, from the learnt lengths of requests that ran as long), unless even
//     every request running to max_new_tokens fits; past half the pool, HeadroomOutputs recent mean
//     outputs stay free. SGLang's own admission counts on running requests needing a fraction of their
//     max_new_tokens and fills the pool until it retracts; the gate keeps its queue near empty while the
//     pool is tight, so admission stays with the client.
//
// Requests are routed to the endpoint with the most headroom (predicted free KV relative to its pool where
// the gate applies, else free budget relative to the budget); an endpoint failing health checks is drained
// and re-admitted, with a fresh capacity read, once it answers again. Lanes (per-dataset or
// per-length-class settings) get a guaranteed share of the budget so long requests neither starve nor crowd
// out short ones.
//
// A server with several data-parallel ranks (dp_size > 1) has one KV pool and running batch per rank: under
// kv-budget each rank is an admission unit of its own, with its own budget and gate, and its requests carry
// routed_dp_rank. What the Controller reads from the server (package sglang) is SGLang 0.5.23's API,
// checked field by field: an answer of the wrong shape is an error naming the endpoint and field. A restart
// is a changed startup_time in /server_info; a server refusing the API key (Config.APIKey) is fatal
// (Controller.Fatal): the stage stops.
//
// Offer, Finish, Fail, Abandon, Probe, Health and Poll expose that logic without goroutines and timers, on an
// injected clock (Config.Clock), through the same sglang.Client: the benchmark (stages/generate/bench) drives
// the Controller with them in a deterministic discrete-event simulation over the simulator's HTTP handlers
// (sglang/sim).
//
// Files: config.go (Config, lanes, budgets), controller.go (admission, the KV gate, routing, retries),
// feedback.go (capacity reads, load polling, budget adaptation, health checks), estimate.go (output length
// learning), driver.go (the I/O-free API), metrics.go (Prometheus).
package admission
