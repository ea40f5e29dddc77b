#!/usr/bin/env bash
# The real SGLang server (sglang==0.5.23) on a machine without a GPU, for trying draftflow against it and for
# the live test tier (make test-sglang). Facts behind the flags: docs/sglang.md, "Real SGLang without a GPU".
#
#   sglang.sh install                 the pinned venv at $DRAFTFLOW_CACHE/venv/sglang-0.5.23 (reused once complete)
#   sglang.sh model [--family qwen3|llama] [--dtype float32|bfloat16] [--seed N] [--layers N]
#                                     a small random-weight model of that family; prints its directory
#   sglang.sh up [--name NAME] [--port P] [--model DIR] [--pool TOKENS] [-- SGLANG_ARGS...]
#                                     starts a server, waits until it serves, prints its URL
#   sglang.sh down [--name NAME]      stops it (SIGTERM to its process group, then SIGKILL)
#   sglang.sh kill [--name NAME]      SIGKILLs it (a crash, for tests)
#   sglang.sh status|url|log|pid [--name NAME]
#
# State per server under $DRAFTFLOW_SGLANG_DIR (default /tmp/draftflow-sglang)/NAME: pid (the process group
# leader), url, port, log (the server's output; kept after down). OMP_NUM_THREADS (default 2) bounds its threads.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SGLANG_VERSION=0.5.23
CACHE="${DRAFTFLOW_CACHE:-$HOME/.cache/draftflow}"
VENV="$CACHE/venv/sglang-$SGLANG_VERSION"
STATE="${DRAFTFLOW_SGLANG_DIR:-/tmp/draftflow-sglang}"
PY="${PYTHON:-python3}"
REPO="$(cd "$HERE/../.." && pwd)"

die() { echo "sglang.sh: $*" >&2; exit 1; }

venv_ok() { [ -f "$VENV/.draftflow-complete" ] && [ -x "$VENV/bin/python" ]; }

cmd_install() {
  if venv_ok; then echo "$VENV"; return; fi
  mkdir -p "$(dirname "$VENV")"
  exec 9>"$VENV.lock"
  flock 9
  if venv_ok; then echo "$VENV"; return; fi
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  echo "sglang.sh: installing sglang==$SGLANG_VERSION into $VENV (~3 min, ~11 GB the first time)" >&2
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "sglang==$SGLANG_VERSION" >&2
  # The pinned version, and the imports the server and the reference need.
  "$VENV/bin/python" - <<PYEOF >&2
import importlib.metadata as md, torch, transformers, safetensors
v = md.version("sglang")
assert v == "$SGLANG_VERSION", f"sglang {v} installed, want $SGLANG_VERSION"
print(f"sglang {v}, torch {torch.__version__}, transformers {transformers.__version__}")
PYEOF
  touch "$VENV/.draftflow-complete"
  echo "$VENV"
}

cmd_model() {
  local family=qwen3 dtype=float32 seed=22 layers=2
  while [ $# -gt 0 ]; do
    case "$1" in
      --family) family="$2"; shift 2 ;;
      --layers) layers="$2"; shift 2 ;;
      --dtype) dtype="$2"; shift 2 ;;
      --seed) seed="$2"; shift 2 ;;
      *) die "model: unknown argument $1" ;;
    esac
  done
  local tok
  case "$family" in
    qwen3) tok=qwen3 ;;
    llama) tok=llama3_1 ;;
    *) die "model: unknown family $family (qwen3, llama)" ;;
  esac
  venv_ok || die "no complete venv at $VENV: run sglang.sh install"
  local tokdir
  tokdir="$(bash "$REPO/internal/testassets/fetch.sh" "$tok" | tail -n1)"
  local sum
  sum="$( (cat "$HERE/make_model.py" "$tokdir"/*.json; echo "$family $dtype $seed $layers") | sha256sum | cut -c1-10)"
  local out="$CACHE/sglang-models/$family-$dtype-s$seed-l$layers-$sum"
  if [ ! -f "$out/.complete" ]; then
    mkdir -p "$CACHE/sglang-models"
    exec 8>"$out.lock"
    flock 8
    if [ ! -f "$out/.complete" ]; then
      "$VENV/bin/python" "$HERE/make_model.py" --family "$family" --dtype "$dtype" --seed "$seed" \
        --layers "$layers" --tokenizer-dir "$tokdir" --out "$out" >/dev/null
    fi
  fi
  echo "$out"
}

free_port() {
  "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

alive() { [ -f "$1/pid" ] && kill -0 "$(cat "$1/pid")" 2>/dev/null; }

cmd_up() {
  local name=default port="" model="" pool=8192 timeout="${DRAFTFLOW_SGLANG_START_TIMEOUT:-300}"
  local extra=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --name) name="$2"; shift 2 ;;
      --port) port="$2"; shift 2 ;;
      --model) model="$2"; shift 2 ;;
      --pool) pool="$2"; shift 2 ;;
      --) shift; extra=("$@"); break ;;
      *) die "up: unknown argument $1 (server arguments go after --)" ;;
    esac
  done
  venv_ok || die "no complete venv at $VENV: run sglang.sh install"
  [ -n "$model" ] || model="$(cmd_model)"
  local dir="$STATE/$name"
  if alive "$dir"; then die "server $name is already running (pid $(cat "$dir/pid"), $(cat "$dir/url"))"; fi
  mkdir -p "$dir"
  [ -n "$port" ] || port="$(free_port)"
  local url="http://127.0.0.1:$port"
  : >>"$dir/log"
  # --dp-size N on the CPU: sglang wants one NUMA node per rank unless SGLANG_CPU_OMP_THREADS_BIND gives
  # each rank its cores ("0|1"); bind rank i to core i modulo the cores here unless the caller set it.
  local dp=1 i
  for ((i = 0; i < ${#extra[@]}; i++)); do
    case "${extra[$i]}" in
      --dp-size|--data-parallel-size) dp="${extra[$((i + 1))]:-1}" ;;
      --dp-size=*|--data-parallel-size=*) dp="${extra[$i]#*=}" ;;
    esac
  done
  if [ "$dp" -gt 1 ] && [ -z "${SGLANG_CPU_OMP_THREADS_BIND:-}" ]; then
    local bind="" cores
    cores="$(nproc)"
    for ((i = 0; i < dp; i++)); do bind="${bind:+$bind|}$((i % cores))"; done
    export SGLANG_CPU_OMP_THREADS_BIND="$bind"
  fi
  echo "== $(date -u +%FT%TZ) start on port $port: ${extra[*]:-}${SGLANG_CPU_OMP_THREADS_BIND:+ (SGLANG_CPU_OMP_THREADS_BIND=$SGLANG_CPU_OMP_THREADS_BIND)}" >>"$dir/log"
  # setsid: the server's scheduler and detokenizer processes share its process group, so down and kill
  # reach all of them through the leader's pid. --sleep-on-idle: an idle 0.5.23 scheduler otherwise spins a
  # core at 100%, and beside a second server on two cores the busy one decodes 4-15x slower (docs/training.md).
  SGLANG_USE_CPU_ENGINE=1 CUDA_VISIBLE_DEVICES="" OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}" \
    PYTHONPATH="$HERE/cpu_kernel" \
    setsid "$VENV/bin/python" -m sglang.launch_server --model-path "$model" --host 127.0.0.1 --port "$port" \
      --device cpu --attention-backend torch_native --disable-cuda-graph --dtype float32 \
      --max-total-tokens "$pool" --enable-metrics --sleep-on-idle \
      --skip-server-warmup "${extra[@]}" >>"$dir/log" 2>&1 < /dev/null &
  local pid=$!
  echo "$pid" >"$dir/pid"; echo "$port" >"$dir/port"; echo "$url" >"$dir/url"
  local t0=$SECONDS
  while :; do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -n 30 "$dir/log" >&2
      die "server $name exited during start; log: $dir/log"
    fi
    if curl -fsS -o /dev/null --max-time 5 "$url/health" 2>/dev/null; then break; fi
    if [ $((SECONDS - t0)) -ge "$timeout" ]; then
      tail -n 30 "$dir/log" >&2
      kill -KILL -- "-$pid" 2>/dev/null || true
      die "server $name not ready after ${timeout}s; log: $dir/log"
    fi
    sleep 1
  done
  echo "sglang.sh: $name ready at $url in $((SECONDS - t0))s (pid $pid, log $dir/log)" >&2
  echo "$url"
}

name_arg() {
  local name=default
  while [ $# -gt 0 ]; do
    case "$1" in
      --name) name="$2"; shift 2 ;;
      *) die "unknown argument $1" ;;
    esac
  done
  echo "$STATE/$name"
}

cmd_down() {
  local dir; dir="$(name_arg "$@")"
  [ -f "$dir/pid" ] || { echo "sglang.sh: no server at $dir" >&2; return 0; }
  local pid; pid="$(cat "$dir/pid")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM -- "-$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  fi
  # The group's other processes (scheduler, detokenizer) too, whatever the leader did.
  kill -KILL -- "-$pid" 2>/dev/null || true
  rm -f "$dir/pid"
  echo "sglang.sh: stopped $(basename "$dir") (log kept: $dir/log)" >&2
}

cmd_kill() {
  local dir; dir="$(name_arg "$@")"
  [ -f "$dir/pid" ] || die "no server at $dir"
  kill -KILL -- "-$(cat "$dir/pid")" 2>/dev/null || true
  rm -f "$dir/pid"
}

case "${1:-}" in
  install) shift; cmd_install "$@" ;;
  model) shift; cmd_model "$@" ;;
  up) shift; cmd_up "$@" ;;
  down) shift; cmd_down "$@" ;;
  kill) shift; cmd_kill "$@" ;;
  status) shift; d="$(name_arg "$@")"; if alive "$d"; then echo "up $(cat "$d/url") pid $(cat "$d/pid")"; else echo down; exit 1; fi ;;
  url|pid|log) what="$1"; shift; d="$(name_arg "$@")"; if [ "$what" = log ]; then echo "$d/log"; else cat "$d/$what"; fi ;;
  venv) echo "$VENV" ;;
  *) sed -n '2,16p' "$0" >&2; exit 2 ;;
esac
