#!/usr/bin/env python3
"""Reference renders for the chattemplate conformance tests, from pinned Python transformers/Jinja2.

Reads one JSON request on stdin, writes one JSON response on stdout.

  Every request may carry "now" (ISO time): strftime_now then renders that instant, not the clock.

  {"mode": "chat", "model_dir": DIR, "want_transformers": "5.25.0", "tokenize": bool,
   "cases": [{"id", "messages", "tools", "kwargs", "add_generation_prompt"}]}
    -> {"results": [{"id", "text"?, "ids"?, "raw_ids"?, "error"?}]}
    Renders with AutoTokenizer.from_pretrained(DIR).apply_chat_template(messages, tools=...,
    add_generation_prompt=..., tokenize=False, **kwargs), and with tokenize=True when asked; raw_ids
    are the `tokenizers` library's ids for the rendered text straight from DIR/tokenizer.json, to tell
    a transformers loading quirk from a real mismatch.
    Messages arrive in draftflow's topics.Message JSON shape and are turned into the dicts the tokenize
    stage stands for: role and content always (None when content_null), other keys only when non-empty, tool_calls decoded.

  {"mode": "template", "template": SRC, "bos": ..., "eos": ..., "want_transformers": ..., "cases": [...]}
    -> as "chat", rendering SRC with transformers' render_jinja_template (what apply_chat_template calls)
    and bos_token/eos_token as the special tokens.

  {"mode": "jinja", "want_transformers": ..., "cases": [{"id", "template", "vars"}]}
    -> {"results": [{"id", "text"?, "error"?}]}
    Renders a bare template in the Jinja environment transformers builds for chat templates.
"""
import json
import sys


def message_dict(m):
    content = m.get("content_parts") or m.get("content", "")
    if not m.get("content_parts") and m.get("content_null") and not m.get("content"):
        content = None
    d = {"role": m.get("role", ""), "content": content}
    if m.get("reasoning_content"):
        d["reasoning_content"] = m["reasoning_content"]
    if m.get("tool_calls") is not None:
        d["tool_calls"] = m["tool_calls"]
    if m.get("tool_call_id"):
        d["tool_call_id"] = m["tool_call_id"]
    if m.get("name"):
        d["name"] = m["name"]
    return d


def error_text(e):
    return f"{type(e).__name__}: {e}"


def pin_clock(now):
    """Makes transformers' strftime_now read `now` (ISO, naive local time) instead of the wall clock.

    transformers defines strftime_now as datetime.now().strftime(format) over its module's own
    `datetime` name; the Go side of each comparison pins its clock to the same instant.
    """
    if not now:
        return
    from datetime import datetime

    import transformers.utils.chat_template_utils as ctu

    fixed = datetime.fromisoformat(now)

    class PinnedDatetime(datetime):
        @classmethod
        def now(cls, tz=None):
            return fixed if tz is None else fixed.astimezone(tz)

    if getattr(ctu, "datetime", None) is not datetime:
        raise SystemExit("transformers.utils.chat_template_utils no longer imports datetime as expected; cannot pin strftime_now")
    ctu.datetime = PinnedDatetime
    ctu._compile_jinja_template.cache_clear()


def main():
    req = json.load(sys.stdin)
    import transformers

    if transformers.__version__ != req["want_transformers"]:
        raise SystemExit(
            f"transformers {transformers.__version__} installed, {req['want_transformers']} pinned in requirements-test.txt"
        )
    pin_clock(req.get("now"))
    results = []
    if req["mode"] == "jinja":
        from transformers.utils.chat_template_utils import _compile_jinja_template

        for case in req["cases"]:
            r = {"id": case["id"]}
            try:
                r["text"] = _compile_jinja_template(case["template"]).render(**case["vars"])
            except Exception as e:  # noqa: BLE001 - every failure is a result to compare
                r["error"] = error_text(e)
            results.append(r)
    elif req["mode"] == "template":
        from transformers.utils.chat_template_utils import render_jinja_template

        special = {k: v for k, v in (("bos_token", req.get("bos")), ("eos_token", req.get("eos"))) if v}
        for case in req["cases"]:
            r = {"id": case["id"]}
            kwargs = {**special, **(case.get("kwargs") or {})}
            msgs = [message_dict(m) for m in case["messages"]]
            try:
                rendered, _ = render_jinja_template(
                    conversations=[msgs],
                    tools=case.get("tools"),
                    chat_template=req["template"],
                    add_generation_prompt=case.get("add_generation_prompt", True),
                    **kwargs,
                )
                r["text"] = rendered[0]
            except Exception as e:  # noqa: BLE001
                r["error"] = error_text(e)
            results.append(r)
    else:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(req["model_dir"])
        raw = None
        if req.get("tokenize"):
            from tokenizers import Tokenizer

            raw = Tokenizer.from_file(req["model_dir"] + "/tokenizer.json")
        for case in req["cases"]:
            r = {"id": case["id"]}
            kwargs = dict(case.get("kwargs") or {})
            msgs = [message_dict(m) for m in case["messages"]]
            agp = case.get("add_generation_prompt", True)
            try:
                r["text"] = tok.apply_chat_template(
                    msgs, tools=case.get("tools"), add_generation_prompt=agp, tokenize=False, **kwargs
                )
                if req.get("tokenize"):
                    out = tok.apply_chat_template(
                        msgs, tools=case.get("tools"), add_generation_prompt=agp, tokenize=True, **kwargs
                    )
                    ids = out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out
                    r["ids"] = list(ids)
                    r["raw_ids"] = raw.encode(r["text"], add_special_tokens=False).ids
            except Exception as e:  # noqa: BLE001
                r["error"] = error_text(e)
            results.append(r)
    json.dump({"results": results}, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
