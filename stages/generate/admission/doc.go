// Package admission is the generate stage's admission controller: it decides which SGLang request goes to
// which server when, classifies and counts the outcomes, and learns from them and from the servers' health
// and load. It takes its own Config (the policy, the budgets, the lanes and the timings, nothing of Kafka)
// and keeps no goroutines or timers: a driver calls it on its own clock. The generate stage
// (stages/generate) drives it in real time, sending each request with retries; the benchmark (bench/generate)
// drives the same calls on simulated time.
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
// The driving API: Probe brings a server up (a health check and a capacity read), Health checks it, Poll reads
// its load and adapts its budgets; Offer queues a request and Retry its next attempt, and every admitted
// attempt is settled with Finish (the answer), Fail (an error, classified: retry, reject or fatal), Abandon
// (its server was drained) or Withdraw (the caller gave up). The Controller learns everything through the
// sglang.Client of each server (Client), so the benchmark's simulation over the simulator's HTTP handlers
// (sglang/sim) exercises the same parsing and feedback as the stage.
//
// Files: config.go (Config, lanes, budgets), controller.go (the Controller and its state), ticket.go (the
// requests' life: offer, settle, retry counts), route.go (queueing and routing), gate.go (the budget charge
// and the KV gate), health.go (bringing servers up, health checks, draining), feedback.go (capacity reads,
// load polling, budget adaptation), classify.go (what a failed attempt means), estimate.go (output length
// learning), metrics.go (Prometheus).
package admission
