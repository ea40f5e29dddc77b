#!/usr/bin/env python3
"""Reference ids for the Go tokenizer conformance tests.

Usage: golden.py REQUEST.json OUTPUT.json
REQUEST: {"tokenizer": "/path/tokenizer.json", "texts": ["...", ...]}
OUTPUT:  {"tokenizers_version": "...", "ids": [[...], ...], "decoded": ["...", ...]}
ids are Tokenizer.from_file(path).encode(text, add_special_tokens=False).ids with the pinned PyPI
`tokenizers`; decoded is decode(ids, skip_special_tokens=False).
"""
import json
import sys

import tokenizers
from tokenizers import Tokenizer


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        req = json.load(f)
    tok = Tokenizer.from_file(req["tokenizer"])
    encs = tok.encode_batch(req["texts"], add_special_tokens=False) if req.get("batch") else [
        tok.encode(t, add_special_tokens=False) for t in req["texts"]]
    ids = [e.ids for e in encs]
    out = {
        "tokenizers_version": tokenizers.__version__,
        "ids": ids,
        "decoded": [tok.decode(i, skip_special_tokens=False) for i in ids],
    }
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
