#!/usr/bin/env python3
"""The transformers reference for the live SGLang tier: greedy decoding of the served weights, in fp32.

Runs in the SGLang venv (it needs torch; the system python of the other reference tests has none). Reads one
JSON request on stdin, writes one JSON answer on stdout.

  {"mode": "decode", "model_dir": DIR, "prompts": [[id...]], "max_new_tokens": N, "stop": [id...]}
    -> {"outputs": [[id...]]}: greedy continuations, each ending at its first id in stop (kept) or at N ids.

  {"mode": "check", "model_dir": DIR, "rows": [{"prompt": [id...], "output": [id...]}]}
    -> {"rows": [{"argmax": [...], "gap": [...], "deficit": [...]}]}: one forward pass over prompt + output
    (teacher forcing); for each output position i, the reference's greedy choice there (argmax), the gap
    between its two largest logits, and how far the logit of the row's own token output[i] is below the
    largest (0 where they agree). A row equals the greedy decode from its prompt exactly when argmax ==
    output at every position; checking every position on the row's own prefix keeps one near tie from
    hiding the rest of the row.
"""
import json
import sys

import torch
from transformers import AutoModelForCausalLM


def load(model_dir):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    return model


@torch.no_grad()
def decode(model, prompt, n, stop):
    ids = torch.tensor([prompt])
    out = []
    past = None
    step = ids
    for _ in range(n):
        res = model(input_ids=step, past_key_values=past, use_cache=True)
        past = res.past_key_values
        tok = int(torch.argmax(res.logits[0, -1]))
        out.append(tok)
        if tok in stop:
            break
        step = torch.tensor([[tok]])
    return out


@torch.no_grad()
def check(model, prompt, output):
    seq = torch.tensor([prompt + output[:-1]])
    logits = model(input_ids=seq).logits[0, len(prompt) - 1:].float()
    top = torch.topk(logits, 2, dim=-1)
    own = logits.gather(1, torch.tensor(output).view(-1, 1)).view(-1)
    return {
        "argmax": top.indices[:, 0].tolist(),
        "gap": (top.values[:, 0] - top.values[:, 1]).tolist(),
        "deficit": (top.values[:, 0] - own).tolist(),
    }


def main():
    req = json.load(sys.stdin)
    torch.set_num_threads(2)
    model = load(req["model_dir"])
    if req["mode"] == "decode":
        stop = set(req.get("stop") or [])
        ans = {"outputs": [decode(model, p, req["max_new_tokens"], stop) for p in req["prompts"]]}
    elif req["mode"] == "check":
        ans = {"rows": [check(model, r["prompt"], r["output"]) for r in req["rows"]]}
    else:
        raise SystemExit(f"unknown mode {req['mode']}")
    import transformers
    ans["transformers"] = transformers.__version__
    ans["torch"] = torch.__version__
    json.dump(ans, sys.stdout)


if __name__ == "__main__":
    main()
