#!/usr/bin/env python3
"""Render the bundled chat template the way transformers' apply_chat_template does (Jinja2 sandbox,
trim_blocks, lstrip_blocks, loop controls, tojson = json.dumps(ensure_ascii=False), raise_exception).

Usage: render.py TOKENIZER_CONFIG.json < {"messages": [...], "tools": [...], "add_generation_prompt": bool, ...}
"""
import json
import sys

from jinja2 import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        cfg = json.load(f)
    ctx = json.load(sys.stdin)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    tmpl = env.from_string(cfg["chat_template"])
    sys.stdout.write(tmpl.render(bos_token=cfg.get("bos_token"), eos_token=cfg.get("eos_token"), **ctx))


if __name__ == "__main__":
    main()
