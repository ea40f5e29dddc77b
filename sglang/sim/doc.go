// Package sim is a simulated SGLang server: the engine double that tests, the
// `draftflow sim` demo and the benchmarks talk to instead of eight GPUs.
//
// It owns two things. The engines: one scheduler per data-parallel rank that
// runs SGLang's admission, decode, retraction and radix-cache accounting over
// a KV pool, on a simulated clock with a calibrated step-time model
// (TimeModel). And an http.Handler that serves SGLang's native API over them
// (/generate, /server_info, /v1/loads, /metrics, /abort_request, ...) with the
// same JSON shapes, status codes and error bodies as the pinned release
// (Version; Config.Release also serves 0.5.4's), so a client tuned on it
// behaves the same against the real server. It is friendlier than SGLang only
// where the real one would hang, crash or lose state for no reason a client
// can act on.
//
// A server with its own engine loop:
//
//	s, _ := sim.New(sim.Config{TimeScale: 1000})
//	defer s.Close()
//	http.ListenAndServe(addr, s)          // or sim.ListenAndServe(ctx, addr, cfg)
//
// Config's zero values are SGLang's defaults and the reference run's
// calibration; its fields also choose what a test needs: DPSize and
// MaxTotalTokens (ranks and their pools), APIKey, the output length
// distribution, ReplyFormat and Conversations (a dataset's own assistant
// turns as replies, for the generate stage's parsers; ScriptedReply,
// ParseRID, Diverges), HiddenStates (an EAGLE-3 capture server; HiddenValue)
// and Faults (errors, resets, crashes). Instant makes simulated time advance
// only by step durations. Stats and RankStats read the engines' counters.
//
// A server built by NewManual has no engine goroutine and no clock: a
// discrete-event simulation drives it with Submit, Poll and Finish (and
// SetTime and WithSubmitted to go through the HTTP handler), and a run is a
// pure function of its inputs.
//
// Every random draw (output lengths and ids, faults, startup times) depends
// only on Config.Seed and the request, so runs are reproducible. The routes, error bodies, metrics, scheduler and time
// models, scripted reply formats and faults, with the SGLang sources each is
// read from, are described in docs/simulator.md; contract_test.go pins the
// shapes to the released SGLang wheel.
package sim
