#!/usr/bin/env python3
"""Reference ids for the Kimi conformance tests (stages/tokenize/kimi_test.go), from pinned transformers.

Reads one JSON request on stdin, writes one JSON response on stdout:

  {"model_dir": DIR, "want_transformers": "5.19.0",
   "texts": [str, ...],
   "cases": [{"id", "messages", "tools", "kwargs", "add_generation_prompt"}]}
  -> {"texts": [[id, ...], ...], "pattern": pat_str,
      "results": [{"id", "text"?, "ids"?, "error"?}]}

DIR is a writable copy of a Kimi model directory, loaded with
AutoTokenizer.from_pretrained(DIR, trust_remote_code=True): its own tokenization_kimi.py and
tool_declaration_ts.py run. Plain texts are encoded as apply_chat_template(tokenize=True) encodes
the rendered text: tok.encode(text, add_special_tokens=False). Messages arrive in draftflow's
topics.Message JSON shape and become the dicts the tokenize stage stands for (content_parts as the
content list, None for content_null), by the chattemplate references' message_dict.
"""
import contextlib
import io
import json
import os
import sys

# One mapping from topics.Message JSON to the dict a chat template receives, shared with the chattemplate
# conformance references.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "chattemplate", "testdata"))
from reference import message_dict  # noqa: E402


def main():
    req = json.load(sys.stdin)
    import transformers

    if transformers.__version__ != req["want_transformers"]:
        raise SystemExit(f"transformers {transformers.__version__} installed, {req['want_transformers']} pinned")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(req["model_dir"], trust_remote_code=True)
    out = {"pattern": type(tok).pat_str, "texts": [], "results": []}
    for text in req.get("texts", []):
        out["texts"].append(tok.encode(text, add_special_tokens=False))
    for case in req.get("cases", []):
        r = {"id": case["id"]}
        msgs = [message_dict(m) for m in case["messages"]]
        kwargs = dict(case.get("kwargs") or {})
        agp = case.get("add_generation_prompt", True)
        try:
            # The K2.5 override prints when its TypeScript conversion fails; keep stdout for JSON.
            with contextlib.redirect_stdout(io.StringIO()):
                r["text"] = tok.apply_chat_template(
                    msgs, tools=case.get("tools"), add_generation_prompt=agp, tokenize=False, **kwargs
                )
                enc = tok.apply_chat_template(
                    msgs, tools=case.get("tools"), add_generation_prompt=agp, tokenize=True, **kwargs
                )
            ids = enc["input_ids"] if hasattr(enc, "keys") else enc
            r["ids"] = list(ids)
        except Exception as e:  # noqa: BLE001 - a failure is a result to compare
            r["error"] = f"{type(e).__name__}: {e}"
        out["results"].append(r)
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
