#!/usr/bin/env bash
# SpecForge 0.2.0's own trainer (and speculators 0.9.0's dataset loader) on a machine without a GPU, for
# make test-train (python/tests/test_training.py). Facts behind it: docs/training.md.
#
#   specforge.sh install    the venv at $DRAFTFLOW_CACHE/venv/trainers-cpu-<hash of requirements.txt>, reused
#                           once complete; prints its directory
#   specforge.sh python     prints the venv's python (installs first if needed)
#
# The venv holds only the packages of requirements.txt (pinned with hashes, installed with --no-deps); torch,
# transformers, datasets and the rest come from the SGLang venv (deploy/sglang/sglang.sh install, installed
# here first if missing) through a .pth file, so the two add ~15 MB, not another ~11 GB.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
CACHE="${DRAFTFLOW_CACHE:-$HOME/.cache/draftflow}"
SUM="$(sha256sum "$HERE/requirements.txt" | cut -c1-10)"
VENV="$CACHE/venv/trainers-cpu-$SUM"

die() { echo "specforge.sh: $*" >&2; exit 1; }

venv_ok() { [ -f "$VENV/.draftflow-complete" ] && [ -x "$VENV/bin/python" ]; }

cmd_install() {
  if venv_ok; then echo "$VENV"; return; fi
  local sg
  sg="$(bash "$REPO/deploy/sglang/sglang.sh" install | tail -n1)"
  [ -x "$sg/bin/python" ] || die "no SGLang venv at $sg"
  mkdir -p "$(dirname "$VENV")"
  exec 9>"$VENV.lock"
  flock 9
  if venv_ok; then echo "$VENV"; return; fi
  rm -rf "$VENV"
  # The SGLang venv's base interpreter, so the two venvs' packages are built for the same Python.
  local base
  base="$("$sg/bin/python" -c 'import sys; print(sys._base_executable)')"
  "$base" -m venv "$VENV"
  local site sgsite
  site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  sgsite="$("$sg/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  echo "$sgsite" >"$site/draftflow-sglang-venv.pth"
  echo "specforge.sh: installing $(grep -c -- --hash "$HERE/requirements.txt") pinned packages into $VENV" >&2
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps --require-hashes \
    -r "$HERE/requirements.txt" >&2
  "$VENV/bin/python" - <<'PYEOF' >&2
import importlib.metadata as md
import torch, transformers, accelerate, specforge.cli  # noqa: F401
from speculators.train.data import ArrowDataset  # noqa: F401
print(f"specforge {md.version('specforge')}, speculators {md.version('speculators')}, "
      f"torch {torch.__version__}, transformers {transformers.__version__}, accelerate {accelerate.__version__}")
PYEOF
  touch "$VENV/.draftflow-complete"
  echo "$VENV"
}

case "${1:-}" in
  install) cmd_install ;;
  python) echo "$(cmd_install | tail -n1)/bin/python" ;;
  *) die "usage: specforge.sh install|python" ;;
esac
