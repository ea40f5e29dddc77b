#!/usr/bin/env python3
"""SpecForge 0.2.0's own CLI on a machine without a GPU: the CPU substitutions, then ``specforge.cli.main``.

Usage (in the venv of ``specforge.sh install``):

    cpu_train.py train -c CONFIG.yaml [overrides...]     specforge train, offline, on the CPU
    cpu_train.py export --to sglang ...                  specforge export (no substitution needed)
    cpu_train.py target --model DIR --out DIR            a target directory SpecForge's head loader accepts

What the CPU needs, and nothing else is changed (docs/training.md):

1. The EAGLE-3 loss ``specforge.core.loss.LogSoftmaxLoss`` is a Triton kernel, and Triton has no CPU driver
   ("0 active drivers"). ``TorchLogSoftmaxLoss`` computes the same quantity in plain torch (per position
   ``-sum(target * log_softmax(logits))`` where ``position_mask`` is set, else 0; the mean over all positions)
   and is put in place of the two module attributes the training code reads it from
   (``specforge.algorithms.eagle3.model.LogSoftmaxLoss`` and ``specforge.algorithms.peagle.model``'s).
2. The target-head loader reads ``lm_head.weight`` through ``model.safetensors.index.json`` (a sharded
   checkpoint) and needs an untied head: ``target`` links a single-file checkpoint's files into a directory
   with that index added, and refuses a checkpoint whose head is tied (no ``lm_head.weight``).

Everything else is SpecForge's own code: ``deployment.mode: local_colocated`` with world size 1 runs in this
process, on gloo, which SpecForge chooses itself on a CPU.
"""
import json
import os
import sys

import torch


class TorchLogSoftmaxLoss(torch.autograd.Function):
    """Plain-torch ``LogSoftmaxLoss``: the mean over B*T positions of ``-sum_v target * log_softmax(logits)``
    at positions whose ``position_mask`` is set (0 elsewhere), as SpecForge's Triton forward kernel computes;
    the gradient is its analytic one, ``(softmax(logits) * sum(target) - target) * mask / (B*T)``, as its
    backward kernel computes."""

    @staticmethod
    def forward(ctx, logits, target, position_mask):
        B, T, V = logits.shape
        logp = torch.log_softmax(logits.float().reshape(B * T, V), dim=-1)
        tgt = target.float().reshape(B * T, V)
        mask = position_mask.reshape(B * T, 1).bool()
        loss = torch.where(mask.squeeze(1), -(tgt * logp).sum(-1), torch.zeros((), dtype=logp.dtype))
        ctx.save_for_backward(logp, tgt, mask)
        ctx.shape = (B, T, V)
        ctx.dtype = logits.dtype
        return loss.mean()

    @staticmethod
    def backward(ctx, grad_output):
        logp, tgt, mask = ctx.saved_tensors
        B, T, V = ctx.shape
        grad = (logp.exp() * tgt.sum(-1, keepdim=True) - tgt) * mask * (grad_output / (B * T))
        return grad.reshape(B, T, V).to(ctx.dtype), None, None


def patch_cpu():
    """Puts TorchLogSoftmaxLoss where SpecForge's training code looks up its Triton loss."""
    import specforge.core.loss as loss_mod
    import specforge.algorithms.eagle3.model as eagle3_model

    loss_mod.LogSoftmaxLoss = TorchLogSoftmaxLoss
    eagle3_model.LogSoftmaxLoss = TorchLogSoftmaxLoss
    try:
        import specforge.algorithms.peagle.model as peagle_model

        peagle_model.LogSoftmaxLoss = TorchLogSoftmaxLoss
    except ImportError:  # pragma: no cover - P-EAGLE is not trained here
        pass


def make_target(model_dir, out):
    """Links model_dir's files into out and writes the ``model.safetensors.index.json`` SpecForge's head
    loader reads (every tensor of the single ``model.safetensors``); returns out."""
    from safetensors import safe_open

    src = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(os.path.join(model_dir, "model.safetensors.index.json")):
        return model_dir
    if not os.path.exists(src):
        raise SystemExit(f"cpu_train.py target: {model_dir} has neither model.safetensors nor an index")
    with safe_open(src, "pt") as f:
        names = list(f.keys())
    if "lm_head.weight" not in names:
        raise SystemExit(f"cpu_train.py target: {src} has no lm_head.weight (tied head); SpecForge needs an untied one")
    os.makedirs(out, exist_ok=True)
    for name in os.listdir(model_dir):
        dst = os.path.join(out, name)
        if not os.path.lexists(dst):
            os.symlink(os.path.abspath(os.path.join(model_dir, name)), dst)
    index = {"metadata": {"total_size": os.path.getsize(src)},
             "weight_map": {n: "model.safetensors" for n in sorted(names)}}
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as fh:
        json.dump(index, fh, indent=1)
    return out


def main(argv):
    if argv[:1] == ["target"]:
        import argparse

        ap = argparse.ArgumentParser(prog="cpu_train.py target")
        ap.add_argument("--model", required=True)
        ap.add_argument("--out", required=True)
        a = ap.parse_args(argv[1:])
        print(make_target(a.model, a.out))
        return 0
    if argv[:1] == ["train"]:
        patch_cpu()
    from specforge.cli import main as specforge_main

    return specforge_main(list(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]) or 0)
