#!/usr/bin/env bash
# scale.sh: `make scale`. N small conversations (default 2,000,000) through ingest, tokenize, generate (against
# SCALE_ENDPOINTS simulated servers, default 32, instant, 8-token outputs) and sink, each a separate draftflow
# process, against a real Kafka broker (deploy/kafka/kafka.sh). Prints each stage's peak memory and CPU time,
# the throughput, each stage's peak records/s, tokens/s and input lag (from `draftflow status --json` every
# 5 s), and which stage limits the run; not run in CI.
#
#   SCALE_N=200000 bash internal/scalegen/scale.sh      # or: make scale SCALE_N=200000
#
# Memory per stage, sampled every second from /proc/PID/status: VmHWM is the kernel's peak resident set
# (heap plus file-backed pages, such as the memory-mapped id indexes, which the kernel may reclaim);
# RssAnon is the anonymous part (Go heap and stacks), the memory a stage holds itself. At each new peak of a
# stage's Go heap in use its heap profile is saved as $WORK/NAME.heap.pprof (go tool pprof -sample_index=inuse_space).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
N=${SCALE_N:-2000000}
WORK=${SCALE_DIR:-out/scale}
BIN=bin/draftflow
NS=scale-$N-$$
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
OUT=$WORK/out-$N
rm -rf "$OUT"

go build -o "$BIN" ./cmd/draftflow
go build -o "$WORK/scalegen" ./internal/scalegen
[[ -s $WORK/input-$N.jsonl ]] || "$WORK/scalegen" -n "$N" -out "$WORK/input-$N.jsonl" -model "$WORK/model"

# shellcheck source=internal/scalegen/lib.sh
source internal/scalegen/lib.sh

# peak NAME PID [METRICS_PORT]: sample PID's memory every second into $WORK/NAME.mem until it exits: VmHWM and
# RssAnon from /proc, and, when the stage serves /metrics, the Go heap in use (go_memstats_heap_inuse_bytes,
# live objects and their spans: what the process holds, without the memory the runtime keeps but has freed).
peak() {
	local name=$1 pid=$2 mport=${3:-} hwm=0 anon=0 heap=0 cpu=0 a h g c
	while [[ -r /proc/$pid/status ]]; do
		# CPU seconds so far: utime + stime (fields 14 and 15 of /proc/PID/stat, in clock ticks)
		c=$(awk -v hz="$(getconf CLK_TCK)" '{ printf "%.1f", ($14 + $15) / hz }' "/proc/$pid/stat" 2>/dev/null || true)
		[[ -n $c ]] && cpu=$c
		h=$(awk '/^VmHWM:/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
		a=$(awk '/^RssAnon:/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
		[[ -n $h ]] && ((h > hwm)) && hwm=$h
		[[ -n $a ]] && ((a > anon)) && anon=$a
		if [[ -n $mport ]]; then
			g=$(curl -s --max-time 1 "http://127.0.0.1:$mport/metrics" 2>/dev/null | awk '/^go_memstats_heap_inuse_bytes / {printf "%d", $2/1024}' || true)
			if [[ -n $g ]] && ((g > heap)); then
				heap=$g
				# at each new peak of heap in use, keep the heap profile (stages run with --pprof)
				curl -s --max-time 5 -o "$WORK/$name.heap.pprof" "http://127.0.0.1:$mport/debug/pprof/heap" 2>/dev/null || true
			fi
		fi
		echo "$hwm $anon $heap $cpu" >"$WORK/$name.mem"
		sleep 1
	done
}
start() { # start NAME METRICS_PORT ARGS...: run a stage in the background, logging to $WORK/NAME.log
	local name=$1 mport=$2
	shift 2
	"$@" >"$WORK/$name.log" 2>&1 &
	pids+=($!)
	peak "$name" $! "$mport" &
}

# SCALE_ENDPOINTS simulated SGLang servers (default 32), each its own process, in accelerated time (--instant:
# the engine steps as fast as the CPU allows, with the real scheduler and KV accounting).
ENDPOINTS=${SCALE_ENDPOINTS:-32}
sglang=()
for i in $(seq 1 "$ENDPOINTS"); do
	port=$(freeport)
	sglang+=(--sglang "http://127.0.0.1:$port")
	start "sim$i" "" "$BIN" sim --addr 127.0.0.1:$port --instant --output-len-dist fixed --output-len-mean 8 --vocab-size 3035 \
		--eos-token-ids 3030 --special-token-start 3027 --seed "$i" --log-level warn
done
ms=$(freeport) mg=$(freeport) mt=$(freeport) mi=$(freeport)
start sink "$ms" "$BIN" sink --pprof --metrics-addr "127.0.0.1:$ms" --out "$OUT" --idle-flush 2s --log-level warn
start generate "$mg" "$BIN" generate --pprof --metrics-addr "127.0.0.1:$mg" "${sglang[@]}" --max-new-tokens 8 --log-level warn
start tokenize "$mt" "$BIN" tokenize --pprof --metrics-addr "127.0.0.1:$mt" --model "$WORK/model" --log-level warn

# Where records wait: every 5 s, `draftflow status --json` (lag, records/s and tokens/s per stage).
(while sleep 5; do "$BIN" status --json --log-level error 2>/dev/null | tr -d '\n'; echo; done >"$WORK/status.jsonl") &
statuspid=$!
pids+=($statuspid)
t0=$(date +%s.%N)
"$BIN" ingest --pprof --input "$WORK/input-$N.jsonl" --progress=false --metrics-addr "127.0.0.1:$mi" --log-level warn >"$WORK/ingest.log" 2>&1 &
ipid=$!
peak ingest $ipid "$mi" &
wait $ipid
t1=$(date +%s.%N)

rows() { python3 -c 'import glob,json,sys; print(sum(json.load(open(p))["totals"]["rows"] for p in glob.glob(sys.argv[1]+"/*/manifest.json")))' "$OUT" 2>/dev/null || echo 0; }
while (($(rows) < N)); do
	sleep 2
	for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || { echo "a stage exited early; see $WORK/*.log" >&2; exit 1; }; done
done
t2=$(date +%s.%N)
sleep 2 # one more sample of every stage
for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
wait "${pids[@]}" 2>/dev/null || true
pids=()

echo "scale: $N conversations, namespace $NS, output $OUT"
awk -v n="$N" -v a="$t0" -v b="$t1" -v c="$t2" 'BEGIN {
	printf "  ingest      %8.1f s  %9.0f records/s\n", b-a, n/(b-a)
	printf "  end to end  %8.1f s  %9.0f records/s\n", c-a, n/(c-a) }'
printf '  %-10s %10s %12s %12s %8s\n' stage "VmHWM MiB" "RssAnon MiB" "Go heap MiB" "CPU s"
for s in ingest tokenize generate sink; do
	read -r h a g c <"$WORK/$s.mem"
	printf '  %-10s %10.1f %12.1f %12.1f %8.1f\n' "$s" "$(echo "$h/1024" | bc -l)" "$(echo "$a/1024" | bc -l)" "$(echo "${g:-0}/1024" | bc -l)" "${c:-0}"
done
# The simulators, summed (memory: the largest one).
cat "$WORK"/sim*.mem | awk -v n="$ENDPOINTS" '{ if ($1 > h) h = $1; if ($2 > a) a = $2; c += $4 }
	END { printf "  %-10s %10.1f %12.1f %12s %8.1f   (%d servers: the largest; CPU summed)\n", "simulators", h/1024, a/1024, "-", c, n }'
# Rates per stage at their peaks, and where records waited longest: the stage whose input lag stayed highest
# is the one that limits the run (ingest, when no stage kept a backlog).
python3 - "$WORK/status.jsonl" "$N" <<'PY'
import json, sys
peak, lagsum, n = {}, {}, 0
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    n += 1
    for st in r.get("stages") or []:
        s = st["stage"]
        p = peak.setdefault(s, [0.0, 0.0, 0])
        # What waits for the stage: its input's end offset less the records it has taken in (the sink counts rows
        # as it buffers them, while its committed offsets move only when it flushes), else its lag.
        lag = st.get("lag") or 0
        if st.get("records") and st.get("end"):
            lag = max(0, st["end"] - st["records"] - (st.get("rejected") or 0))
        p[0], p[1], p[2] = max(p[0], st.get("records_per_s") or 0), max(p[1], st.get("tokens_per_s") or 0), max(p[2], lag)
        lagsum[s] = lagsum.get(s, 0) + lag
print("  %-10s %14s %14s %12s %12s" % ("stage", "peak records/s", "peak tokens/s", "peak backlog", "mean backlog"))
for s, (rps, tps, lag) in peak.items():
    print("  %-10s %14.0f %14.0f %12d %12.0f" % (s, rps, tps, lag, lagsum[s] / max(n, 1)))
limit = max(lagsum, key=lagsum.get) if lagsum else None
if limit and lagsum[limit] / max(n, 1) > 0.01 * int(sys.argv[2]):
    print("  limiting stage: %s (its input kept the largest backlog)" % limit)
else:
    print("  limiting stage: none downstream of ingest (no stage kept a backlog)")
PY
