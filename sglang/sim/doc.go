// Package sim is a simulated SGLang server: the engine double that tests, the
// `draftflow sim` demo and benchmarks talk to instead of eight GPUs. It owns
// in-process engines (one scheduler per data-parallel rank, driven by one
// loop) and an http.Handler serving SGLang's native API with the same JSON
// shapes, status codes and error bodies, so a client tuned on it behaves the
// same against the real server. It is friendlier than SGLang only where the
// real one would hang, crash or lose state for no reason a client can act on.
//
//	s, _ := sim.New(sim.Config{TimeScale: 1000})
//	defer s.Close()
//	http.ListenAndServe(addr, s)          // or sim.ListenAndServe(ctx, addr, cfg)
//
// # Releases
//
// Config.Release (--release) picks the SGLang release whose API is served:
// "0.5.23" (default, the pinned release; Version) or "0.5.4", the last plain
// 0.5.x release before /v1/loads (added in 0.5.8) and before the per-request
// retraction count in meta_info (total_retractions from 0.5.4.post3,
// num_retractions in 0.5.23). Everything below describes 0.5.23; 0.5.4
// differs as noted. The shapes were read from the released wheels'
// sources (entrypoints/http_server.py, entrypoints/v1_loads.py,
// managers/load_snapshot.py, managers/scheduler_components/*.py,
// observability/*.py, utils/auth.py, managers/tokenizer_manager.py,
// managers/data_parallel_controller.py), cited where each is implemented.
//
// # Routes
//
// POST|PUT /generate (single or batch; input_ids or text; stream with
// cumulative SSE chunks ending in "data: [DONE]"; routed_dp_rank or its
// deprecated alias data_parallel_rank pins a DP rank), GET /health and
// /health_generate (503 while a crash keeps the server down), GET /ready
// (503 also while paused), GET /server_info and its deprecated alias
// /get_server_info, GET /model_info and /get_model_info, GET /v1/loads, GET
// /metrics (and every path under it, like SGLang's mount), POST
// /abort_request ({"rid", "abort_all"}; rid prefix match once the exact rid
// is in flight), GET|POST /flush_cache, POST /pause_generation and
// /continue_generation (requests queue but nothing runs while paused, like
// SGLang's "in_place" mode; SGLang's default mode "abort" would abort them).
// 0.5.4 serves /get_server_info, /get_model_info and /get_load (one
// {dp_rank, num_reqs, num_waiting_reqs, num_tokens} per rank) and no
// /server_info, /model_info, /ready or /v1/loads. Unknown paths answer 404
// {"detail":"Not Found"}, known paths with another method 405 {"detail":
// "Method Not Allowed"}, as FastAPI does.
//
// /server_info returns the resolved server args the simulator models, with
// the ones SGLang leaves None unless given on the command line
// (max_running_requests, context_length, max_total_tokens,
// max_queued_requests, api_key) null unless set in the Config; then
// launch_command, the scheduler's init info (status, max_total_num_tokens
// per rank, max_req_input_len, hicache_object_layout; scheduler_pids with
// DP), kv_events, startup_time (the engine's critical-path startup
// durations: load_weight, kv_cache_allocation, scheduler_e2e, cuda_graph by
// phase, tokenizer_e2e; drawn from Config.Seed and the restart count, so
// they differ between seeds and change on every simulated restart),
// internal_states (one per DP rank: the server args plus world_size,
// startup_time, effective_max_running_requests_per_dp, last_gen_throughput,
// memory_usage with token_capacity, disaggregation_mode), version and
// frontend. Sim-only figures are under "simulator". 0.5.4's
// /get_server_info has the server args, status, max_total_num_tokens,
// max_req_input_len, internal_states (server args, last_gen_throughput,
// memory_usage {weight, kvcache, token_capacity, graph}) and version.
//
// /v1/loads returns {"timestamp","version","accelerator","num_accelerators",
// "loads"} with one LoadSnapshot per DP rank: every core key (num_total_tokens
// is num_used_tokens plus the seqlen of every waiting request, as
// load_inquirer.get_loads computes it, so it exceeds the pool when the queue
// backs up; utilization stays 0 as in 0.5.23, whose
// max_running_requests_under_SLO has no setter) and the sections memory,
// disaggregation and queues (speculative and lora are None without those
// features). ?dp_rank=N keeps one rank (an empty list when out of range);
// ?include=core,memory,spec,lora,disagg,queues,all selects sections; an
// unknown section makes LoadSnapshot.to_dict raise outside the handler's try,
// which the real server answers with 500 "Internal Server Error", and so
// does the simulator; ?format=prometheus renders gauges.
//
// Errors follow SGLang: validation failures (input at or over the context
// length, input + max_new_tokens at or over it, bad sampling parameters, a
// routed_dp_rank outside [0, dp_size)) are HTTP 400 {"error":{"message":...}}
// with SGLang's messages; a full queue (Config.MaxQueuedRequests) is HTTP 503
// {"object":"error","message":"The request queue is full.","type":"503",
// "param":null,"code":503}; in stream mode validation errors arrive in-band
// as HTTP 200 "data: {"error":{"message","type":"invalid_request_error",
// "code":400,"retryable":false}}" then [DONE] (0.5.4: {"error":{"message"}}),
// and an abort with a status code ends the stream as its last chunk. A
// client that disconnects aborts its requests. /abort_request ends running
// requests with FINISH_ABORT's {"type":"abort","message":"Aborted",
// "status_code":null,"err_type":null} and waiting ones with {"type":"abort",
// "message":"Abort in waiting queue"} and a shorter meta_info (0.5.4: "Abort
// before prefill", {"text":"","meta_info":{id, finish_reason, prompt_tokens
// 0, completion_tokens 0}}), all with HTTP 200.
//
// meta_info carries id, finish_reason, prompt_tokens, weight_version,
// num_retractions, reasoning_tokens, completion_tokens, cached_tokens,
// dp_rank (null without DP) and, once finished, e2e_latency and
// response_sent_to_client_ts. 0.5.4 has no num_retractions, reasoning_tokens,
// dp_rank or response_sent_to_client_ts.
//
// # API key
//
// With Config.APIKey (--api-key) every route but those under /health,
// /ready and /metrics (0.5.4: /health and /metrics), unknown paths included,
// answers 401 {"error":"Unauthorized"} unless the request carries
// "Authorization: Bearer <key>" (0.5.23 accepts any case of "Bearer"),
// compared in constant time.
//
// # Data parallelism
//
// Config.DPSize (--dp-size) runs that many ranks, each with its own KV pool
// of MaxTotalTokens (max_total_num_tokens is per rank), running batch,
// waiting queue, prefix cache and MaxRunningRequests. Requests go round
// robin, one per request of a batch (0.5.23's default load_balance_method
// "auto" resolves to round_robin outside PD disaggregation), unless they
// name a rank with routed_dp_rank / data_parallel_rank. Stats sums over the
// ranks and RankStats reports one; /v1/loads, internal_states and the
// scheduler metrics (labelled dp_rank) are per rank.
//
// The `text` field is tokenized trivially: one token per byte, id = byte
// value (TokenizeText). Output text is rendered by DetokenizeIDs: ids below
// 128 as that ASCII byte, others as a pseudo-word spelling the id; special
// ids are dropped unless skip_special_tokens is false. output_ids are what
// matters; the text only has to be deterministic. As in SGLang
// (DetokenizerManager.trim_matched_stop), `text` leaves out the matched stop
// token of a request that finished with finish_reason stop (EOS or a
// stop_token_ids id), even with skip_special_tokens false, unless the
// request sets no_stop_trim; output_ids keep it. The contract test pins this.
//
// # Scheduler model
//
// Each rank runs SGLang's event loop (scheduler.py,
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
//     last token), completed chunks of a chunked prompt, and the computed
//     prompt of every running request once its prefill completes
//     (checkpoint_kv_cache), locked while it runs: requests that share a
//     prefix with a running one (a chat template's header, a system prompt)
//     hold that prefix's KV once. Unlocked entries
//     count as free for admission and token_usage and are evicted LRU, leaves
//     first, when an allocation needs room. A prefix match is reported as
//     meta_info.cached_tokens (at least one token is always computed).
//   - token_usage = (pool - available - evictable) / pool.
//   - max_new_tokens is clipped to min(context-1, pool-1) - input - 1; an
//     input of at least that minus 5 tokens is aborted (400), as the scheduler does.
//   - MaxRunningRequests defaults as SGLang resolves it per rank:
//     min(clamp(pool/context*512, 2048, 4096), pool/2); a given value is
//     capped at pool/2.
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
// the Prometheus histograms are simulated seconds. A request arrives at the
// simulated time it was received (a rank that sat idle moves its clock up to
// it; a rank in a forward pass takes it into its next plan), never at the
// clock as it stood before an idle gap. The ranks run their passes
// concurrently on the one simulated clock.
//
// A server built by NewManual has no engine goroutine and no clock at all:
// its owner (a discrete-event simulation such as the generate benchmark)
// submits requests at simulated instants with Submit, starts forward passes
// with Poll and completes them with Finish, which reports the requests that
// ended (with DP, each Finish completes the earliest-ending pass). Runs are
// then a pure function of their inputs. The owner may also drive the real
// HTTP handler: SetTime sets the instant POST /generate submits at, and a
// request whose context comes from WithSubmitted(ctx, fn), served in-process
// with s.ServeHTTP, calls fn once its requests are queued (or an error was
// answered), then blocks until a later Finish ends them and writes the
// normal answer. GET routes serve the engines' current state. Operations
// from HTTP (aborts, disconnects) apply at once to a rank between passes,
// else when its pass ends.
//
// # Metrics
//
// /metrics exports SGLang's series with the real names, help and labels:
// scheduler series (num_running_reqs, num_queue_reqs, token_usage,
// num_used_tokens, gen_throughput, cache_hit_rate, max_total_num_tokens,
// new_token_ratio, num_retracted_reqs, num_retracted_requests_total,
// queue_time_seconds) per rank with model_name, engine_type, tp_rank,
// pp_rank, moe_ep_rank and, with DP, dp_rank; tokenizer series
// (prompt_tokens_total, generation_tokens_total, num_requests_total,
// time_to_first_token_seconds, e2e_request_latency_seconds with
// is_streaming; num_aborted_requests_total) with model_name and
// engine_type. As in SGLang's multiprocess mode, a labelled series has no
// sample, and its family does not appear, until first set:
// sglang:num_retracted_requests_total shows up with the first retraction;
// the gauge sglang:num_retracted_reqs (retractions since the previous
// scheduler log, labelled pid as multiprocess_mode "all" does) is always
// there. 0.5.4 has no max_total_num_tokens, new_token_ratio or
// num_retracted_requests_total, no moe_ep_rank label, and only model_name on
// tokenizer series.
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
// # Scripted replies
//
// With Config.ReplyFormat (--reply-format) and Config.Conversations
// (--conversations FILE), a request can be answered with a dataset's
// original assistant message instead of random ids, so that tests exercise
// the generate stage's reasoning and tool-call parsing end to end.
// Conversations is JSONL in the ingest format: rows {"id", "messages" or
// "conversations": [{"role" or "from", "content" or "value",
// "reasoning_content", "tool_calls"}], "tools"}, with the role and ShareGPT
// from names the ingest stage accepts (human, gpt, function_call whose value
// is the call, observation, ...); content may be text parts (joined with
// "\n"); tool_calls are OpenAI calls ({"function": {"name", "arguments"}},
// arguments an object or a JSON string) or flat {"name", "arguments" or
// "parameters"}. A numeric id is taken as its literal. Rows without an "id"
// cannot be matched to a request and are skipped; New logs how many. The
// file is read once, by New (a line that is not a usable row is skipped and counted in the log, as ingest dead-letters it).
//
// A request's rid is read as the generate stage writes it (RequestID and
// AttemptRID): "<escaped id>#<turn>.<attempt>;", with "%3B" and "%25" in the
// id standing for ";" and "%" (ParseRID). turn is the 0-based index of the
// assistant message among the conversation's assistant messages. When the row
// and its turn-th assistant message exist, the output is that message written
// as the family's model writes it, one token per byte (id = byte value, the
// trivial tokenizer of TokenizeText), then an EOS id: finish_reason stop
// matched that EOS, and max_new_tokens shorter than the script cuts it
// (finish_reason length) as it cuts any output; ignore_eos or a larger
// min_new_tokens continues with random ids. Prompt, KV and time accounting
// are those of any output of that length; reasoning_tokens counts the bytes
// through the reasoning end marker. Any other rid (unknown id, a turn past
// the row's assistant messages, another shape), or no ReplyFormat, gets the
// random output described under Output, exactly as without scripting.
//
// The reply holds reasoning (reasoning_content, or the ASCII filler
// "Simulated reasoning for assistant turn N." when it has none or it is
// empty; not in llama3), content and tool calls (name and arguments; the
// arguments re-marshalled as compact JSON with sorted keys). Formats, each
// checked against SGLang 0.5.23's parsers (srt/function_call/*_detector.py,
// srt/parser/reasoning_parser.py; see the Reply* constants):
//
//	qwen3       <think>\n{reasoning}\n</think>\n\n{content}[\n]<tool_call>\n{"name": N, "arguments": A}\n</tool_call>...
//	kimi_k2     <think>{reasoning}</think>{content}<|tool_calls_section_begin|><|tool_call_begin|>functions.N:I<|tool_call_argument_begin|>A<|tool_call_end|>...<|tool_calls_section_end|>
//	llama3      {"name": N, "parameters": A}; {"name": ...}   (a turn with calls is only its calls; else its content)
//	deepseekv3  <think>{reasoning}</think>{content}<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N\n```json\nA\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
//
// (kimi_k2's I counts the conversation's tool calls from 0.) The text is
// ASCII but for deepseekv3's markers: in JSON arguments a non-ASCII
// character is written as a \uXXXX escape (a surrogate pair above U+FFFF),
// the same JSON value; in reasoning and content each non-ASCII rune is
// replaced by the ASCII escape \uXXXX (BMP) or \UXXXXXXXX (above it), hex
// upper-case, so content is not byte-identical to the original when it had
// any. deepseekv3's markers are UTF-8, one token per byte (ids 128-255): a
// scripted reply's text renders ids below 256 as raw bytes (DetokenizeIDs
// would spell ids 128-255 as pseudo-words), and a stream holds back a
// character until all its bytes are out, as SGLang's detokenizer does. Special
// tokens such as <|tool_call_begin|> are plain text here, which is what SGLang
// returns for them with skip_special_tokens false; the generate stage sends
// that. ScriptedReply returns the text a Config answers for a rid.
//
// Config.ToolDivergenceRate (--tool-divergence-rate) makes that share of
// scripted turns with tool calls diverge: the first call's arguments change
// (the first key in sorted order gets another value of its kind: a string
// gains " (diverged)", a number +1, a boolean flips, anything else becomes
// "diverged"; an empty object gains "sim_diverged": true), the name stays.
// Whether a turn diverges is Diverges(Seed, rate, id, turn): a hash of the
// seed, the conversation id and the turn, never the attempt, so a retry
// decides the same and a test can predict which turns end in
// tool_divergence.
//
// # Faults
//
// Config.Faults injects HTTP 500s, 503 queue-full answers, added latency,
// connection resets (after the work is done: the response is lost) and a
// crash/restart cycle (every request in flight on every rank loses its
// connection, KV and cache are wiped, /health answers 503 and new calls are
// reset for CrashDowntime; the restarted server reports a new
// startup_time). Per-call decisions depend only on Seed, the call's rid and
// how often that rid was seen, so runs are reproducible and retries draw
// afresh; crashes happen after fixed spans of simulated uptime.
package sim
