// Package livesglang is the live SGLang test tier (make test-sglang): draftflow's own binary against the real
// sglang 0.5.23 server, run on this machine's CPU by deploy/sglang/sglang.sh with a small random-weight model.
// Its tests check what no simulator can: token-exact capture against a transformers greedy decode of the same
// weights, the real scheduler's retractions under KV pressure, restarts, API keys, aborts on shutdown, data
// parallelism, and that the simulator answers every request the stage makes as the real server does.
//
// The tests run only when DRAFTFLOW_LIVE_SGLANG=1 (make test-sglang sets it), so `go test ./...` starts no
// server. Without the venv or the tokenizer files they skip, unless DRAFTFLOW_REQUIRE_ASSETS is set (CI),
// where they fail. The package holds no code outside its tests.
package livesglang
