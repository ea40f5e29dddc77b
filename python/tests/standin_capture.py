#!/usr/bin/env python3
"""STAND-IN for draftflow's capture of target features (issue 25), used by test_training.py until the
capture from the live SGLang server exists. Runs in the trainer venv (deploy/specforge/specforge.sh).

For the usable conversations [first, first+count) of a draftflow input file (those that parse and whose
prompt has at most --max-prompt-tokens tokens, in file order) it does with transformers what the pipeline
plus the capture will do with the server: renders the chat template (the tokenize stage), greedily generates
--new-tokens tokens from the target in one left-padded batch (the generate stage at temperature 0; the live-tier notes measured
SGLang's greedy tokens equal to transformers' on these models), and writes

- OUT/rows.jsonl: ``{"id", "turn", "input_ids", "loss_mask"}`` per row (turn 0: the first reply) (loss on the generated tokens), the form of
  ``draftflow export --format specforge``;
- OUT/features/index.jsonl + OUT/features/NNNNN.safetensors: ``features`` [T, 4, H] float32 and
  ``input_ids`` [T]: the interchange ``draftflow_data.offline`` reads. The planes are the EAGLE-3 auxiliary
  states and the final one, from one forward pass over the whole row: for SpecForge's default aux layer ids
  ``[1, L//2 - 1, L - 4]`` (``resolve_eagle_capture_layers``) the OUTPUTS of those decoder layers, i.e.
  transformers' ``hidden_states[i + 1]`` (SGLang's ``set_eagle3_layers_to_capture`` stores ``i + 1`` and
  captures the input of that layer: the same tensor); the final plane is the input of ``lm_head`` (after
  the final norm), taken with a forward hook.
"""
import argparse
import json
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer


def text_of(content):
    if isinstance(content, str):
        return content
    return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))


def aux_layer_ids(num_layers):
    """SpecForge 0.2.0's default EAGLE-3 capture layers (model_providers.resolve_eagle_capture_layers)."""
    ids = [1, num_layers // 2 - 1, num_layers - 4]
    if any(i < 0 for i in ids):
        raise SystemExit(f"a target of {num_layers} layers has no EAGLE-3 default layers {ids}: use >= 4")
    return ids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--conversations", required=True)
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--max-prompt-tokens", type=int, default=256,
                    help="leave out conversations whose prompt is longer (keeps the left-padded batch small)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32).eval()
    layers = aux_layer_ids(model.config.num_hidden_layers)
    final = {}
    model.lm_head.register_forward_hook(lambda m, inp, out: final.__setitem__("x", inp[0]))

    convs = []
    with open(a.conversations, encoding="utf-8", errors="replace") as fh:
        for line in fh:  # the bundled sample holds malformed records on purpose; ingest drops them too
            try:
                conv = json.loads(line)
            except ValueError:
                continue
            if isinstance(conv, dict) and isinstance(conv.get("messages"), list) and conv["messages"] and "id" in conv:
                convs.append(conv)
    fdir = os.path.join(a.out, "features")
    os.makedirs(fdir, exist_ok=True)
    prompts, kept = [], []
    for conv in convs:
        msgs = [{"role": m["role"], "content": text_of(m.get("content", ""))} for m in conv["messages"]]
        while msgs and msgs[-1]["role"] == "assistant":
            msgs.pop()
        p = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=False)
        p = list(p["input_ids"] if hasattr(p, "keys") else p)
        if len(p) <= a.max_prompt_tokens:
            prompts.append(p)
            kept.append(conv)
    convs, prompts = kept[a.first:a.first + a.count], prompts[a.first:a.first + a.count]
    if len(convs) < a.count:
        raise SystemExit(f"{a.conversations} has fewer than {a.first + a.count} usable conversations")
    # Greedy generation, the whole batch at once (left-padded; per-row generate is ~10x slower here).
    width = max(len(p) for p in prompts)
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    batch = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    attn = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.no_grad():
        out = model.generate(batch, attention_mask=attn, max_new_tokens=a.new_tokens, min_new_tokens=a.new_tokens,
                             do_sample=False, pad_token_id=pad)
    with open(os.path.join(a.out, "rows.jsonl"), "w") as rows, open(os.path.join(fdir, "index.jsonl"), "w") as idx:
        for n, (conv, prompt) in enumerate(zip(convs, prompts)):
            ids = torch.tensor(prompt + out[n, width:].tolist())
            with torch.no_grad():  # the features: one unpadded forward pass over the whole row
                hs = model(ids[None], output_hidden_states=True).hidden_states
            feats = torch.stack([hs[i + 1][0] for i in layers] + [final["x"][0]], dim=1).float().contiguous()
            rid = conv["id"]
            name = f"{n:05d}.safetensors"
            save_file({"features": feats, "input_ids": ids.to(torch.int64).contiguous()}, os.path.join(fdir, name))
            T = ids.numel()
            rows.write(json.dumps({"id": rid, "turn": 0, "input_ids": ids.tolist(),
                                   "loss_mask": [0] * len(prompt) + [1] * (T - len(prompt))}) + "\n")
            idx.write(json.dumps({"id": rid, "turn": 0, "file": name}) + "\n")
    with open(os.path.join(a.out, "capture.json"), "w") as fh:
        json.dump({"standin": True, "aux_layer_ids": layers, "planes": ["aux_low", "aux_mid", "aux_high", "final"],
                   "rows": len(convs), "new_tokens": a.new_tokens}, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
