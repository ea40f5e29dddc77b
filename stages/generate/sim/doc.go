// Package sim is a simulated SGLang server: the engine double that tests, the
// `draftflow sim` demo and benchmarks talk to instead of eight GPUs. It owns
// an in-process engine (one scheduler loop) and an http.Handler serving
// SGLang's native API with the same JSON shapes, status codes and error
// bodies, so a client tuned on it behaves the same against the real server.
//
//	s, _ := sim.New(sim.Config{TimeScale: 1000})
//	defer s.Close()
//	http.ListenAndServe(addr, s)          // or sim.ListenAndServe(ctx, addr, cfg)
//
// # Routes
//
// POST|PUT /generate (single or batch; input_ids or text; stream with
// cumulative SSE chunks ending in "data: [DONE]"), GET /health and
// /health_generate, GET /get_server_info and /server_info, GET
// /get_model_info and /model_info, GET /v1/loads and the legacy /get_load,
// GET /metrics (SGLang's sglang:* series on a per-Server registry), POST
// /abort_request ({"rid", "abort_all"}; rid prefix match), GET|POST
// /flush_cache, POST /pause_generation and /continue_generation (requests
// queue but nothing runs while paused).
//
// Errors follow SGLang: validation failures (input at or over the context
// length, input + max_new_tokens at or over it, bad sampling parameters) are
// HTTP 400 {"error":{"message":...}} with SGLang's messages; a full queue
// (Config.MaxQueuedRequests) is HTTP 503 {"object":"error","message":"The
// request queue is full.","type":"503","param":null,"code":503}; in stream
// mode errors arrive in-band as HTTP 200 "data: {"error":...}" then [DONE].
// A client that disconnects aborts its requests.
//
// The `text` field is tokenized trivially: one token per byte, id = byte
// value (TokenizeText). Output text is rendered by DetokenizeIDs: ids below
// 128 as that ASCII byte, others as a pseudo-word spelling the id; special
// ids are dropped unless skip_special_tokens is false. output_ids are what
// matters; the text only has to be deterministic.
//
// # Scheduler model
//
// One engine goroutine runs SGLang's event loop (scheduler.py,
// schedule_policy.py, schedule_batch.py) with page size 1 and the FCFS
// policy, as accounting over a KV pool of Config.MaxTotalTokens slots:
//
//   - Each iteration forms a prefill batch if it can (prefill has priority,
//     no mixed chunks), else runs one decode step over the running batch,
//     else idles; going idle resets new_token_ratio to its initial value.
//   - Admission (PrefillAdder.add_one_req): a waiting request with extend
//     tokens not in the prefix cache is admitted while
//     extend + min(max_new_tokens, 4096) < rem_total_tokens, where
//     rem_total_tokens is available + evictable, less
//     min(max_new_tokens - output_len, 4096) * new_token_ratio for each
//     running request, less extend + min(max_new_tokens, 4096) for each
//     request admitted earlier into the same batch.
//     A batch also stops at --max-prefill-tokens input tokens, at
//     --chunked-prefill-size tokens (the request that overflows is chunked
//     and continues in the next prefill batches) and at
//     --max-running-requests. A failed admission marks the batch full
//     (batch_is_full): no new admission is tried until a request finishes,
//     is retracted or aborted, or a prefill batch merges.
//   - new_token_ratio starts at init = min(0.7 * conservativeness, 1),
//     decays by (init - init*0.14)/600 per decode step that fits, floored at
//     init * 0.14, and resets to init when the engine goes idle.
//   - A decode step needs one free slot per running request (free plus
//     evictable). When it does not fit, retract_decode runs: the batch is
//     sorted by (output length, -input length) descending and popped from the
//     end, so the request with the FEWEST output tokens goes first (ties: the
//     longest input) — at least one, until the step fits. Retracted requests
//     free their KV without caching it, keep their output, rejoin the back of
//     the queue and later re-prefill input + output. The ratio becomes
//     min(1, (sum output_len + 20 * remaining) / (sum max_new_tokens + 1)).
//     (The project note's "longest output first" is the sort key, not the
//     pop order; the code above is what SGLang runs.)
//   - The radix cache holds finished requests' KV (input + output but the
//     last token) and completed chunks of a chunked prompt. Unlocked entries
//     count as free for admission and token_usage and are evicted LRU, leaves
//     first, when an allocation needs room. A prefix match is reported as
//     meta_info.cached_tokens (at least one token is always computed).
//   - token_usage = (pool - available - evictable) / pool.
//   - max_new_tokens is clipped to min(context-1, pool-1) - input - 1; an
//     input longer than that minus 5 is aborted (400), as the scheduler does.
//
// # Time model
//
// A prefill batch takes
//
//	PrefillBase + PrefillPerToken*extend + PrefillAttentionPerKTokenPair*sum_i extend_i*(prefix_i + extend_i/2)/1000
//
// and a decode step takes
//
//	DecodeBase + DecodePerRequest*batch + DecodePerKVToken*kvTokens
//
// of simulated time. The defaults (25 ms, 0.4 ms, 120 ns; 30 ms, 40 us, 1 us)
// reproduce the reference run: 35 requests holding ~4.2K KV tokens each
// decode at ~615 output tokens/s; an 8192-token prefill chunk takes ~0.39 s.
// Simulated time runs Config.TimeScale times faster than wall time; with
// Config.Instant the engine never sleeps and simulated time only advances by
// step durations (while idle it stands still). Latencies in meta_info and
// the Prometheus histograms are simulated seconds.
//
// A server built by NewManual has no engine goroutine and no clock at all:
// its owner (a discrete-event simulation such as the generate benchmark)
// submits requests at simulated instants with Submit, starts forward passes
// with Poll and completes them with Finish, which reports the requests that
// ended. Runs are then a pure function of their inputs. The HTTP routes keep
// serving the engine's state (/v1/loads, /metrics, /get_server_info).
//
// # Output
//
// Each request draws a natural output length from Config's distribution
// (lognormal with mean OutputLenMean=3000 and sigma 0.8 by default). The token
// at that position is an EOS id (finish_reason {"type":"stop","matched":id});
// max_new_tokens cuts it short ({"type":"length","length":N}); ignore_eos
// removes it. Ordinary ids are uniform over [0, SpecialTokenStart or
// VocabSize) minus EOS, stop and marker ids, so no special id appears
// mid-output unless the reasoning or tool-call patterns put it there. The
// draw is a pure function of (Seed, rid, sampling_seed); with temperature 0
// (greedy) of (Seed, input_ids) instead, as a greedy model would answer.
//
// # Faults
//
// Config.Faults injects HTTP 500s, 503 queue-full answers, added latency,
// connection resets (after the work is done: the response is lost) and a
// crash/restart cycle (every request in flight loses its connection, KV and
// cache are wiped, /health answers 503 and new calls are reset for
// CrashDowntime). Per-call decisions depend only on Seed, the call's rid and
// how often that rid was seen, so runs are reproducible and retries draw
// afresh; crashes happen at fixed simulated times.
package sim
