#!/usr/bin/env python3
"""Single-thread encode throughput of the Python `tokenizers` reference, for bench.sh.

Usage: RAYON_NUM_THREADS=1 bench.py TOKENIZER.json TEXTS.json SECONDS
Prints one JSON object: {"mb_per_s": ..., "tokens_per_s": ..., "bytes": ..., "tokens": ...,
"loop_mb_per_s": ..., "batch_mb_per_s": ...}. Both a loop of encode() calls and encode_batch() with
one Rayon thread are measured; the headline figures are the faster of the two, so the comparison
does not count Python call overhead against the reference.
"""
import json
import os
import sys
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from tokenizers import Tokenizer  # noqa: E402


def main():
    tok = Tokenizer.from_file(sys.argv[1])
    with open(sys.argv[2], encoding="utf-8") as f:
        texts = json.load(f)
    seconds = float(sys.argv[3])
    nbytes = sum(len(t.encode("utf-8")) for t in texts)
    for t in texts:  # warm the BPE cache like the Go benchmark's first iteration does
        tok.encode(t, add_special_tokens=False)
    def measure(run):
        rounds = total = 0
        start = time.perf_counter()
        while True:
            total += run()
            rounds += 1
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                return rounds * nbytes / elapsed / 1e6, total / elapsed, total // rounds

    def loop():
        return sum(len(tok.encode(t, add_special_tokens=False).ids) for t in texts)

    def batch():
        return sum(len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False))

    loop_mb, loop_tok, tokens = measure(loop)
    batch_mb, batch_tok, _ = measure(batch)
    print(json.dumps({
        "mb_per_s": max(loop_mb, batch_mb),
        "tokens_per_s": max(loop_tok, batch_tok),
        "bytes": nbytes,
        "tokens": tokens,
        "loop_mb_per_s": loop_mb,
        "batch_mb_per_s": batch_mb,
    }))


if __name__ == "__main__":
    main()
