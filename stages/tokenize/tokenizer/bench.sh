#!/usr/bin/env bash
# Side-by-side single-thread encode throughput: this package vs the Python `tokenizers` library,
# measured in one run on the conformance corpus. Prints MB/s and tokens/s for both and the ratio.
# Usage: stages/tokenize/tokenizer/bench.sh [model,model,...]   (default: all; see bench_test.go)
# Needs python3 with the pinned `tokenizers` (requirements-test.txt); fetches tokenizers like the tests.
set -euo pipefail
cd "$(dirname "$0")"
export DRAFTFLOW_BENCH=1
if [ "${1:-}" != "" ]; then export DRAFTFLOW_BENCH_MODELS="$1"; fi
go test -count=1 -run '^TestBenchVsPython$' -v . | grep -v -E '^(=== RUN|--- PASS|PASS|ok )'
