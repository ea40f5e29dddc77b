#!/usr/bin/env python3
"""Single-thread encode throughput of Python tiktoken with Kimi's pattern and ranks, for kimi_bench_test.go.

Usage: kimi_bench.py MODEL_DIR TEXTS.json SECONDS -> {"mb_per_s", "tokens_per_s"}
Measures tiktoken.Encoding.encode(text, allowed_special="all") in a loop (what TikTokenTokenizer.encode
calls per piece), without transformers' Python overhead around it.
"""
import json
import sys
import time

import tiktoken
from tiktoken.load import load_tiktoken_bpe

PAT = "|".join([
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])


def main():
    ranks = load_tiktoken_bpe(sys.argv[1] + "/tiktoken.model")
    n = len(ranks)
    enc = tiktoken.Encoding("kimi", pat_str=PAT, mergeable_ranks=ranks,
                            special_tokens={f"<|reserved_token_{i}|>": i for i in range(n, n + 256)})
    texts = json.load(open(sys.argv[2], encoding="utf-8"))
    seconds = float(sys.argv[3])
    nbytes = sum(len(t.encode("utf-8")) for t in texts)
    for t in texts:
        enc.encode(t, allowed_special="all")
    rounds = total = 0
    start = time.perf_counter()
    while True:
        total += sum(len(enc.encode(t, allowed_special="all")) for t in texts)
        rounds += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            break
    print(json.dumps({"mb_per_s": rounds * nbytes / elapsed / 1e6, "tokens_per_s": total / elapsed}))


if __name__ == "__main__":
    main()
