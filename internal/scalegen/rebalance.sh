#!/usr/bin/env bash
# rebalance.sh: `make rebalance`. The scaling scenario users run, as separate draftflow processes on a real
# Kafka broker (deploy/kafka/kafka.sh): N prompts (default 2,400) through ingest, tokenize and sink, with two
# `draftflow generate` replicas on one simulated SGLang server whose requests take seconds; after JOIN_AT
# seconds (default 12) a third replica joins, after LEAVE_AT seconds (default 24) the first gets SIGTERM (a
# graceful leave, with generate's default --shutdown-grace). When every prompt is in the shards it prints the
# generations the replicas produced, the duplicates the sink dropped (work done twice) and each replica's
# assignments, revocations and abandoned deliveries. REBALANCE_GENERATE_FLAGS adds flags to every replica
# (e.g. --revoke-timeout 60s). Not run in CI (it takes a few minutes).
#
#   REBALANCE_N=2400 bash internal/scalegen/rebalance.sh     # or: make rebalance
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
N=${REBALANCE_N:-2400}
JOIN_AT=${JOIN_AT:-12}
LEAVE_AT=${LEAVE_AT:-24}
WORK=${REBALANCE_DIR:-out/rebalance}
BIN=bin/draftflow
NS=rebalance-$$
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
OUT=$WORK/out
rm -rf "$OUT"

go build -o "$BIN" ./cmd/draftflow
go build -o "$WORK/scalegen" ./internal/scalegen
"$WORK/scalegen" -n "$N" -out "$WORK/input.jsonl" -model "$WORK/model"

# shellcheck source=internal/scalegen/lib.sh
source internal/scalegen/lib.sh
metric() { # metric PORT NAME: the sum of a metric's samples on a stage's /metrics
	curl -s --max-time 2 "http://127.0.0.1:$1/metrics" | awk -v n="$2" '$1 == n || index($1, n "{") == 1 { s += $NF } END { printf "%d", s }'
}
start() { # start NAME ARGS...: a process in the background, logging to $WORK/NAME.log; its pid in $last
	local name=$1
	shift
	"$@" >"$WORK/$name.log" 2>&1 &
	last=$!
	pids+=("$last")
}

port=$(freeport) ms=$(freeport) ma=$(freeport) mb=$(freeport) mc=$(freeport)
# Outputs of ~300 tokens (lognormal) at 4x simulated speed: a request takes 1-10 s, so work is always in
# flight when the group rebalances.
start sim "$BIN" sim --addr "127.0.0.1:$port" --time-scale 4 --output-len-mean 300 --vocab-size 3035 \
	--eos-token-ids 3030 --special-token-start 3027 --log-level warn
start sink "$BIN" sink --metrics-addr "127.0.0.1:$ms" --out "$OUT" --idle-flush 2s
start tokenize "$BIN" tokenize --model "$WORK/model" --log-level warn
gen=(generate --sglang "http://127.0.0.1:$port" --max-new-tokens 1024 ${REBALANCE_GENERATE_FLAGS:-})
start generate-a "$BIN" "${gen[@]}" --metrics-addr "127.0.0.1:$ma"
pid_a=$last
start generate-b "$BIN" "${gen[@]}" --metrics-addr "127.0.0.1:$mb"
"$BIN" ingest --input "$WORK/input.jsonl" --progress=false --log-level warn >"$WORK/ingest.log" 2>&1
t0=$(date +%s)

rows() { python3 -c 'import glob,json,sys; print(sum(json.load(open(p))["totals"]["rows"] for p in glob.glob(sys.argv[1]+"/*/manifest.json")))' "$OUT" 2>/dev/null || echo 0; }
joined=0 left=0
while (($(rows) < N)); do
	sleep 1
	now=$(($(date +%s) - t0))
	if ((!joined && now >= JOIN_AT)); then
		start generate-c "$BIN" "${gen[@]}" --metrics-addr "127.0.0.1:$mc"
		joined=1
		echo "t=${now}s: a third replica joined"
	fi
	if ((!left && now >= LEAVE_AT)); then
		echo "t=${now}s: SIGTERM to the first replica (done at row $(rows))"
		abandoned_a=$(metric "$ma" draftflow_revoked_unfinished_total)
		kill -TERM "$pid_a"
		left=1
	fi
	for p in "${pids[@]}"; do
		if [[ $p != "$pid_a" ]] && ! kill -0 "$p" 2>/dev/null; then echo "a process exited early; see $WORK/*.log" >&2; exit 1; fi
	done
done
elapsed=$(($(date +%s) - t0))
wait "$pid_a" || echo "the first replica exited with status $?"
sleep 3 # the sink's counters of the last records

redone=$(curl -s --max-time 2 "http://127.0.0.1:$ms/metrics" | awk '/^draftflow_records_total\{/ && /stage="sink"/ && /result="duplicate"/ { s += $NF } END { printf "%d", s }')
gpu_tokens=$(metric "$port" sglang:generation_tokens_total)
kept_tokens=$(python3 -c 'import glob,json,sys; print(sum(json.load(open(p))["totals"]["completion_tokens"] for p in glob.glob(sys.argv[1]+"/*/manifest.json")))' "$OUT")
consumed=$(metric "$ms" draftflow_consumed_records_total)
echo "rebalance: $N prompts, namespace $NS, ${elapsed}s, output $OUT"
echo "  rows in the shards          $(rows)"
echo "  generations the sink read   $consumed"
awk -v r="$redone" -v n="$N" 'BEGIN { printf "  duplicates the sink dropped %d (%.2f%% of the prompts)\n", r, 100*r/n }'
# What the GPU did: output tokens the server generated (aborted requests' partial outputs included) against the
# completion tokens in the shards; the difference is decode work spent for nothing. The sink's duplicates also
# count records Kafka delivered twice (a producer's retried write), which cost no GPU time.
awk -v g="$gpu_tokens" -v k="$kept_tokens" 'BEGIN {
	printf "  server: %d output tokens generated, %d kept in the shards: %d (%.2f%%) decoded for nothing\n", g, k, g-k, 100*(g-k)/k }'
for r in a b c; do
	log=$WORK/generate-$r.log
	[[ -s $log ]] || continue
	printf '  replica %s: %d assignments, %d revocations, abandoned: %s\n' "$r" \
		"$(grep -c 'partitions assigned' "$log" || true)" "$(grep -c 'partitions revoked' "$log" || true)" \
		"$(grep -o 'abandoned=[0-9]*' "$log" | awk -F= '{ s += $2 } END { printf "%d", s }')"
done
grep -h 'shutdown\|left the group\|drained' "$WORK"/generate-a.log | tail -3 | sed 's/^/  replica a: /' || true
