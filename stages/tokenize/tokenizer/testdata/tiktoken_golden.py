#!/usr/bin/env python3
"""Reference ids from the `tiktoken` library for LoadTiktoken's conformance test.

Usage: tiktoken_golden.py REQUEST.json OUTPUT.json
REQUEST: {"ranks": "/path/file.tiktoken", "pattern": "...", "specials": {"<|x|>": id}, "texts": [...]}
OUTPUT:  {"tiktoken_version": "...", "ids": [[...], ...]}
ids are tiktoken.Encoding(...).encode(text, allowed_special="all").
"""
import base64
import json
import sys

import tiktoken


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        req = json.load(f)
    ranks = {}
    with open(req["ranks"], "rb") as f:
        for line in f:
            if line.strip():
                tok, rank = line.split()
                ranks[base64.b64decode(tok)] = int(rank)
    enc = tiktoken.Encoding("draftflow-test", pat_str=req["pattern"], mergeable_ranks=ranks,
                            special_tokens=req["specials"])
    ids = [enc.encode(t, allowed_special="all") for t in req["texts"]]
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump({"tiktoken_version": tiktoken.__version__, "ids": ids}, f)


if __name__ == "__main__":
    main()
