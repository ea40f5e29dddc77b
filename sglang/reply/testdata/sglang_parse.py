#!/usr/bin/env python3
"""Run SGLang's own reasoning parser and tool-call detectors over a corpus.

Usage: sglang_parse.py --cache DIR < corpus.json > results.json

Fetches sglang==PIN into DIR/sglang-PIN with `pip download --no-deps` (once;
the same wheel and directory as sglang/sim/testdata/contract/
extract.py) and imports the parser modules straight from the wheel (a zip) by
zipimport. Importing `sglang` itself needs CUDA builds, so the packages are
created empty and the few heavy or unrelated modules the parser files import
at the top (transformers, the OpenAI protocol models, partial_json_parser,
sglang.srt.environ, the response-template parsers) are stubs; every line that
parses is SGLang's.

The corpus is a JSON list of {"name", "text", "reasoning", "tools", "open",
"functions"}; for each case this prints {"name", "reasoning", "content",
"calls": [{"name", "arguments"}], "error"} the way serving_chat.py
_build_chat_response fills a non-streaming chat response:
ReasoningParser(stream_reasoning=False, force_reasoning=open).parse_non_stream,
then FunctionCallParser.parse_non_stream's body on the normal text when the
detector's has_tool_call sees a call (_process_tool_calls). With "functions"
null, every call is kept (SGLANG_FORWARD_UNKNOWN_TOOLS=1 and one placeholder
tool); otherwise the tools offered are those names.

Exit 2: the wheel could not be obtained (no pip, no network); the Go test
skips unless DRAFTFLOW_REQUIRE_ASSETS is set.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import types

PIN = "0.5.23"
# The one sglang wheel fetcher: the simulator's contract extractor's (same cache, same platform tag).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sim", "testdata", "contract"))
from extract import Unavailable, obtain_wheel  # noqa: E402

EXIT_UNAVAILABLE = 2


# ---------------------------------------------------------------------------
# stubs


class _Auto(types.ModuleType):
    """A module whose every attribute is a fresh empty class."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        cls = type(name, (), {"__init__": lambda self, *a, **k: None})
        setattr(self, name, cls)
        return cls


class _EnvFlag:
    def __init__(self, value):
        self.value = value

    def get(self):
        return self.value


class _Envs:
    """sglang.srt.environ.envs: the flags the detectors read."""

    def __init__(self):
        self.SGLANG_FORWARD_UNKNOWN_TOOLS = _EnvFlag(False)
        self.SGLANG_TOOL_STRICT_LEVEL = _EnvFlag(0)

    def __getattr__(self, name):
        return _EnvFlag(None)


ENVS = _Envs()


def install(wheel: str):
    def package(name, path):
        m = types.ModuleType(name)
        m.__path__ = [wheel + "/" + path]
        sys.modules[name] = m

    for name in ["sglang", "sglang.srt", "sglang.srt.parser", "sglang.srt.function_call",
                 "sglang.srt.entrypoints", "sglang.srt.entrypoints.openai"]:
        package(name, name.replace(".", "/"))
    for name in ["transformers", "partial_json_parser", "partial_json_parser.core",
                 "partial_json_parser.core.exceptions", "partial_json_parser.core.options",
                 "sglang.srt.entrypoints.openai.protocol",
                 "sglang.srt.parser.beam", "sglang.srt.parser.response_template"]:
        sys.modules[name] = _Auto(name)
    env = _Auto("sglang.srt.environ")
    env.envs = ENVS
    sys.modules["sglang.srt.environ"] = env
    sys.path.insert(0, wheel)


class _Fn:
    def __init__(self, name):
        self.name = name
        self.parameters = {"type": "object", "properties": {}}
        self.strict = False


class _Tool:
    def __init__(self, name):
        self.type = "function"
        self.function = _Fn(name)


DETECTORS = {
    "qwen25": ("qwen25_detector", "Qwen25Detector"),
    "qwen": ("qwen25_detector", "Qwen25Detector"),
    "llama3": ("llama32_detector", "Llama32Detector"),
    "kimi_k2": ("kimik2_detector", "KimiK2Detector"),
    "deepseekv3": ("deepseekv3_detector", "DeepSeekV3Detector"),
    "gpt-oss": ("gpt_oss_detector", "GptOssDetector"),
}


def parse(case, ReasoningParser):
    text = case["text"]
    reasoning = None
    if case.get("reasoning"):
        rp = ReasoningParser(model_type=case["reasoning"], stream_reasoning=False,
                             force_reasoning=bool(case.get("open")))
        reasoning, text = rp.parse_non_stream(text)
    calls = []
    tools_name = case.get("tools")
    if tools_name:
        mod, cls = DETECTORS[tools_name]
        detector = getattr(importlib.import_module("sglang.srt.function_call." + mod), cls)()
        functions = case.get("functions")
        ENVS.SGLANG_FORWARD_UNKNOWN_TOOLS.value = functions is None
        tools = [_Tool(n) for n in (functions if functions is not None else ["__placeholder__"])]
        # FunctionCallParser.parse_non_stream, behind _process_tool_calls'
        # has_tool_call check; an exception keeps the text, as there.
        if detector.has_tool_call(text):
            try:
                result = detector.detect_and_parse(text, tools)
                text = result.normal_text
                calls = [{"name": c.name, "arguments": c.parameters} for c in result.calls]
            except Exception as e:  # noqa: BLE001 - _process_tool_calls catches all
                calls = []
                case["_exception"] = repr(e)
    return {"name": case["name"], "reasoning": reasoning or "", "content": text or "",
            "calls": calls, "exception": case.get("_exception", "")}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", required=True)
    args = ap.parse_args()
    try:
        wheel = obtain_wheel(args.cache, PIN)
    except Unavailable as e:
        print(str(e), file=sys.stderr)
        return EXIT_UNAVAILABLE
    install(wheel)
    import logging
    logging.disable(logging.CRITICAL)
    ReasoningParser = importlib.import_module("sglang.srt.parser.reasoning_parser").ReasoningParser
    corpus = json.load(sys.stdin)
    out = {"pin": PIN, "wheel": os.path.basename(wheel),
           "results": [parse(c, ReasoningParser) for c in corpus]}
    json.dump(out, sys.stdout, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
