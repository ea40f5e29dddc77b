#!/usr/bin/env python3
"""The transformers reference for captured EAGLE-3 features (TestFeaturesMatchTransformers).

Runs in the SGLang venv (torch, transformers 5.19.0, pyarrow). Reads one JSON request on stdin:
  {"model_dir", "repo", "features": PATH (draftflow feature file, bf16), "fp32": PATH (the captured float32
   values: per row, aux [T, k*H] then final [T, H], little-endian), "aux_layers": [i...], "rows": [{"id", "ids"}],
   "v1_dir": DIR}
and answers, per layer name, the largest absolute and relative differences between the server's capture and
one transformers fp32 forward pass of the same weights (eager attention), for the fp32 capture ("fp32") and
for the bf16 file read back by draftflow_data.features ("bf16"), with the bf16 bound's worst ratio; and the
sizes of SpecForge's offline v1 files (torch.save of input_ids, loss_mask, hidden_state, aux_hidden_state)
for the same rows in bf16 and fp32.

aux layer i is the input of decoder layer i: transformers' hidden_states[i] (output_hidden_states=True),
checked against a forward pre-hook on the layer; "final" is what lm_head reads (a forward pre-hook on it).
"""
import json
import os
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM


def main():
    req = json.load(sys.stdin)
    sys.path.insert(0, os.path.join(req["repo"], "python"))
    from draftflow_data.features import FeatureFile

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(req["model_dir"], dtype=torch.float32, attn_implementation="eager")
    model.eval()
    H = model.config.hidden_size
    aux_layers = req["aux_layers"]
    names = [f"aux:{i}" for i in aux_layers] + ["final"]
    seen = {}
    hooks = [model.lm_head.register_forward_pre_hook(lambda m, a: seen.__setitem__("final", a[0][0].clone()))]
    for i in aux_layers:
        hooks.append(model.model.layers[i].register_forward_pre_hook(
            lambda m, a, kw, i=i: seen.__setitem__(i, (a[0] if a else kw["hidden_states"])[0].clone()), with_kwargs=True))

    ff = FeatureFile(req["features"])
    assert ff.layers == names, (ff.layers, names)
    raw = np.fromfile(req["fp32"], dtype="<f4")
    off = 0
    stats = {n: {"fp32_abs": 0.0, "fp32_rel": 0.0, "bf16_abs": 0.0, "bf16_rel": 0.0, "bf16_bound": 0.0,
                 "ref_absmax": 0.0} for n in names}
    v1 = {"bf16": 0, "fp32": 0}
    tokens = 0
    os.makedirs(req["v1_dir"], exist_ok=True)
    with torch.no_grad():
        for row in req["rows"]:
            ids = row["ids"]
            T = len(ids)
            tokens += T
            seen.clear()
            out = model(input_ids=torch.tensor([ids]), output_hidden_states=True)
            hs = out.hidden_states
            ref = {}
            for i in aux_layers:
                # hidden_states[i] is the input of layer i.
                assert torch.equal(hs[i][0], seen[i]), f"hidden_states[{i}] is not layer {i}'s input"
                ref[f"aux:{i}"] = seen[i].numpy()
            ref["final"] = seen["final"].numpy()
            k = len(aux_layers)
            cap_aux = raw[off:off + T * k * H].reshape(T, k * H)
            off += T * k * H
            cap_fin = raw[off:off + T * H].reshape(T, H)
            off += T * H
            cap = {f"aux:{i}": cap_aux[:, j * H:(j + 1) * H] for j, i in enumerate(aux_layers)}
            cap["final"] = cap_fin
            got = ff.read(row["id"])
            assert got.shape == (T, (k + 1) * H), got.shape
            for j, n in enumerate(names):
                r = ref[n]
                s = stats[n]
                d = np.abs(cap[n] - r)
                s["fp32_abs"] = max(s["fp32_abs"], float(d.max()))
                s["fp32_rel"] = max(s["fp32_rel"], float((d / np.maximum(np.abs(r), 1e-3)).max()))
                b = np.abs(got[:, j * H:(j + 1) * H] - r)
                s["bf16_abs"] = max(s["bf16_abs"], float(b.max()))
                s["bf16_rel"] = max(s["bf16_rel"], float((b / np.maximum(np.abs(r), 1e-3)).max()))
                # bf16 rounding moves a value by at most 2^-8 of itself; 1e-4 absolute covers fp32 drift.
                s["bf16_bound"] = max(s["bf16_bound"], float((b / (np.abs(r) / 256 + 1e-4)).max()))
                s["ref_absmax"] = max(s["ref_absmax"], float(np.abs(r).max()))
            for dt, name in ((torch.bfloat16, "bf16"), (torch.float32, "fp32")):
                fin = torch.from_numpy(ref["final"]).to(dt)
                aux = torch.from_numpy(np.concatenate([ref[f"aux:{i}"] for i in aux_layers], axis=1)).to(dt)
                path = os.path.join(req["v1_dir"], f"{name}-{row['id']}.ckpt")
                torch.save({"input_ids": torch.tensor(ids, dtype=torch.int64),
                            "loss_mask": torch.ones(T, dtype=torch.int64),
                            "hidden_state": fin, "aux_hidden_state": aux}, path)
                v1[name] += os.path.getsize(path)
    assert off == raw.size, (off, raw.size)
    print(json.dumps({"layers": stats, "tokens": tokens, "v1_bytes": v1,
                      "features_bytes": os.path.getsize(req["features"])}))


if __name__ == "__main__":
    main()
