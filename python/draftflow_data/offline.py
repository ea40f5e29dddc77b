"""Rows plus the target's EAGLE-3 features, exported to the offline layouts the trainers read.

Input (the interchange a capture step writes):

- rows: draftflow shards (a ``draftflow run`` output directory, read with ``iter_rows``; one run) or a JSONL
  file of ``{"id", "turn"?, "input_ids", "loss_mask"}`` rows (``draftflow export --format specforge`` writes
  them without ``turn``: use it for single-turn runs only). A row is (``id``, ``turn``), as in the shards;
  ``turn`` defaults to 0;
- features: a directory with ``index.jsonl``, one line per row, ``{"id": ROW_ID, "turn": N, "file": NAME}``
  (``turn`` defaults to 0), where NAME (relative to the directory) is a ``.safetensors`` file holding
  ``features`` [T, 4, H] and ``input_ids`` [T], or a ``.npy`` file holding the ``features`` array alone. The four planes along axis 1 are, in order, the
  three EAGLE-3 auxiliary hidden states (low, mid, high layer: what SGLang's
  ``--enable-return-aux-hidden-states`` returns) and the final hidden state after the last norm (what
  ``lm_head`` reads: SGLang's ``return_hidden_states`` without the aux flag). T is the row's token count.

Outputs:

- ``specforge``: SpecForge 0.2.0's offline "v1" files, one ``torch.save`` dict per row (``data_00000000.ckpt``
  ..., in row order): ``input_ids`` [T] int64, ``loss_mask`` [T] int64, ``hidden_state`` [T, H] (the final
  state) and ``aux_hidden_state`` [T, 3H] (the three auxiliary planes concatenated), in ``--dtype``;
  ``data.hidden_states_path`` of a SpecForge offline run points at the directory.
- ``speculators``: speculators 0.9's offline layout: the directory is a ``datasets`` ``save_to_disk`` dataset
  (``input_ids``, ``loss_mask``, ``seq_len``; torch format, as its ``prepare_data`` leaves it) and holds
  ``hidden_states/hs_{i}.safetensors`` (``token_ids`` [T] int64, ``hidden_states`` [T, 4, H]) for row i.
  speculators reads the 4th plane as the last layer's output BEFORE the final norm and applies the target's
  norm itself (``verifier_norm``); an unpatched SGLang returns it only after the norm. So the 4th plane is
  written as ``final / w`` (w: the target's ``model.norm.weight``, from ``--target``): an RMS-normalised
  vector has RMS 1, so ``RMSNorm_w(final / w) = final`` up to the norm's epsilon, and speculators' teacher
  logits equal the target's.

``--features`` may also be draftflow's own feature files (``shard/features``, read with
``draftflow_data.features.FeatureFile``): a ``.dff`` file or a directory of them (a ``draftflow run`` run
directory, the same as ``--rows``), the same four planes per row as bf16 [T, 4 x H] (layers three ``aux:N`` then
``final``), keyed by (row id, turn) as the shards are.

Every row must have its features, with T equal to the row's length and (where the file holds them) the same
input ids; any mismatch stops the export with an error naming the row. Needs torch and safetensors (the
speculators layout also ``datasets``).

``python -m draftflow_data.offline specforge|speculators --rows ROWS --features DIR --out DIR [...]``
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np

#: Planes along axis 1 of a row's feature array, in order.
PLANES = ("aux_low", "aux_mid", "aux_high", "final")


class FeatureError(ValueError):
    """A row or its features are not usable; the message names the row."""


def iter_source_rows(rows: str) -> Iterator[Dict[str, Any]]:
    """Yields ``{"id", "input_ids", "loss_mask"}`` from draftflow shards (a directory) or a JSONL file."""
    if os.path.isdir(rows):
        from .shards import iter_rows

        for r in iter_rows(rows, columns=("id", "turn", "input_ids", "loss_mask")):
            yield {"id": r["id"], "turn": int(r["turn"]), "input_ids": np.asarray(r["input_ids"], dtype=np.int64),
                   "loss_mask": np.asarray(r["loss_mask"], dtype=np.int64)}
        return
    with open(rows, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
                yield {"id": str(r["id"]), "turn": int(r.get("turn", 0)), "input_ids": np.asarray(r["input_ids"], dtype=np.int64),
                       "loss_mask": np.asarray(r["loss_mask"], dtype=np.int64)}
            except (KeyError, ValueError, TypeError) as e:
                raise FeatureError(f"{rows}:{n}: not a row with id, input_ids and loss_mask: {e}") from e


def row_name(rid: str, turn: int) -> str:
    """How errors name a row: its id and, past the first, its turn."""
    return f"{rid!r}" + (f" turn {turn}" if turn else "")


def read_index(features: str) -> Dict[Tuple[str, int], str]:
    """The features directory's ``index.jsonl`` as {(row id, turn): file path}."""
    path = os.path.join(features, "index.jsonl")
    out: Dict[Tuple[str, int], str] = {}
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                e = json.loads(line)
                rid, turn, name = str(e["id"]), int(e.get("turn", 0)), str(e["file"])
            except (KeyError, ValueError, TypeError) as err:
                raise FeatureError(f"{path}:{n}: want {{\"id\", \"file\"}}: {err}") from err
            if (rid, turn) in out:
                raise FeatureError(f"{path}:{n}: row {row_name(rid, turn)} listed twice")
            if os.path.isabs(name) or ".." in name.split("/"):
                raise FeatureError(f"{path}:{n}: row {row_name(rid, turn)}: file {name!r} is not inside the directory")
            out[(rid, turn)] = os.path.join(features, name)
    return out


def read_feature_files(features: str) -> Dict[Tuple[str, int], Tuple[Any, int]]:
    """draftflow's own feature files (``shard/features``; one ``.dff`` file, or a directory of them, such as a run
    directory) as {(row id, turn): (FeatureFile, row index in it)}. Their planes must be three ``aux:`` layers
    then ``final``. Rows a capture server refused (a file's ``missing``) have no entry."""
    from .features import FeatureFile

    if os.path.isfile(features):
        paths = [features]
    else:
        paths = sorted(os.path.join(features, n) for n in os.listdir(features) if n.endswith(".dff"))
    if not paths:
        raise FeatureError(f"{features}: neither index.jsonl nor .dff feature files")
    out: Dict[Tuple[str, int], Tuple[Any, int]] = {}
    for path in paths:
        try:
            ff = FeatureFile(path)
        except (ValueError, KeyError) as e:
            raise FeatureError(str(e)) from e
        kinds = [name.split(":")[0] for name in ff.layers]
        if kinds != ["aux", "aux", "aux", "final"]:
            raise FeatureError(f"{path}: layers {ff.layers}, want three aux layers then final")
        for i, r in enumerate(ff.rows):
            key = (str(r["id"]), int(r.get("turn", 0)))
            if key in out:
                raise FeatureError(f"row {row_name(*key)} is in two feature files ({out[key][0].path}, {path})")
            out[key] = (ff, i)
    return out


def load_features(path: Any, row: Dict[str, Any]):
    """The row's feature array as a torch tensor [T, 4, H], checked against the row. ``path`` is an
    interchange file, or (FeatureFile, row index) for draftflow's own feature files."""
    import torch

    rid = row_name(row["id"], row["turn"])
    if isinstance(path, tuple):
        ff, key = path
        try:
            flat = ff.read_torch(key)
        except ValueError as e:
            raise FeatureError(f"row {rid}: {e}") from e
        return _checked(flat.reshape(flat.shape[0], len(ff.layers), ff.hidden), None, row, rid, ff.path)
    if not os.path.exists(path):
        raise FeatureError(f"row {rid}: feature file {path} does not exist")
    ids = None
    if path.endswith(".npy"):
        arr = torch.from_numpy(np.load(path))
    else:
        from safetensors.torch import load_file

        t = load_file(path)
        if "features" not in t:
            raise FeatureError(f"row {rid}: {path} has no 'features' tensor (has {sorted(t)})")
        arr, ids = t["features"], t.get("input_ids")
    return _checked(arr, ids, row, rid, path)


def _checked(arr, ids, row, rid, path):
    import torch

    T = len(row["input_ids"])
    if arr.dim() != 3 or arr.shape[0] != T or arr.shape[1] != len(PLANES):
        raise FeatureError(f"row {rid}: features of shape {tuple(arr.shape)}, want [{T}, {len(PLANES)}, H]")
    if not arr.is_floating_point():
        raise FeatureError(f"row {rid}: features of dtype {arr.dtype}, want a float type")
    if ids is not None and not np.array_equal(ids.to(torch.int64).numpy(), row["input_ids"]):
        bad = int(np.argmax(ids.to(torch.int64).numpy() != row["input_ids"])) if ids.numel() == T else -1
        raise FeatureError(f"row {rid}: the feature file's input_ids differ from the row's"
                           + (f" (first at token {bad})" if bad >= 0 else f" ({ids.numel()} ids, row has {T})"))
    if not bool(torch.isfinite(arr).all()):
        raise FeatureError(f"row {rid}: features hold non-finite values")
    return arr


def _pairs(rows: str, features: str) -> Iterator[Tuple[Dict[str, Any], Any]]:
    if os.path.exists(os.path.join(features, "index.jsonl")):
        index: Dict[Any, Any] = read_index(features)
        where = f"{features}/index.jsonl"
    else:  # draftflow's feature files, keyed by (id, turn) as the shards are
        index, where = read_feature_files(features), features
    seen = set()
    for row in iter_source_rows(rows):
        key = (row["id"], row["turn"])
        if key in seen:
            raise FeatureError(f"row {row_name(*key)} appears twice in {rows}")
        seen.add(key)
        if key not in index:
            raise FeatureError(f"row {row_name(*key)} has no features in {where}")
        yield row, index[key]
    extra = sorted(set(index) - seen)
    if extra:
        raise FeatureError(f"{len(extra)} feature rows have no row in {rows}, e.g. row {row_name(*extra[0])}")


def export_specforge(rows: str, features: str, out: str, dtype: str = "bfloat16") -> int:
    """Writes SpecForge's v1 offline files for every row into out; returns the row count."""
    import torch

    dt = getattr(torch, dtype)
    os.makedirs(out, exist_ok=True)
    n = 0
    for row, path in _pairs(rows, features):
        arr = load_features(path, row)
        T, _, H = arr.shape
        rec = {
            "input_ids": torch.from_numpy(row["input_ids"]).to(torch.int64),
            "loss_mask": torch.from_numpy(row["loss_mask"]).to(torch.int64),
            "hidden_state": arr[:, 3, :].to(dt).contiguous(),
            "aux_hidden_state": arr[:, :3, :].reshape(T, 3 * H).to(dt).contiguous(),
        }
        name = os.path.join(out, f"data_{n:08d}.ckpt")
        torch.save(rec, name + ".tmp")
        os.replace(name + ".tmp", name)
        n += 1
    return n


def norm_weight(target: str):
    """The target checkpoint's final norm weight (``model.norm.weight``) as float32."""
    from safetensors import safe_open

    idx = os.path.join(target, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx, encoding="utf-8") as fh:
            shard = json.load(fh)["weight_map"].get("model.norm.weight")
        files = [os.path.join(target, shard)] if shard else []
    else:
        files = [os.path.join(target, "model.safetensors")]
    for f in files:
        with safe_open(f, "pt") as st:
            if "model.norm.weight" in st.keys():
                return st.get_tensor("model.norm.weight").float()
    raise FeatureError(f"{target}: no model.norm.weight in its safetensors")


def export_speculators(rows: str, features: str, out: str, target: str, dtype: str = "bfloat16") -> int:
    """Writes speculators 0.9's offline layout (dataset + hidden_states/hs_{i}.safetensors) into out."""
    import torch
    from datasets import Dataset
    from safetensors.torch import save_file

    w = norm_weight(target)
    if bool((w == 0).any()):
        raise FeatureError(f"{target}: model.norm.weight has zeros; final / w is undefined")
    dt = getattr(torch, dtype)
    hs_dir = os.path.join(out, "hidden_states")
    cols: Dict[str, List[Any]] = {"input_ids": [], "loss_mask": [], "seq_len": []}
    pending = []
    for row, path in _pairs(rows, features):
        arr = load_features(path, row).float()
        if arr.shape[2] != w.numel():
            raise FeatureError(f"row {row_name(row['id'], row['turn'])}: hidden size {arr.shape[2]}, the target's norm has {w.numel()}")
        planes = torch.cat([arr[:, :3, :], (arr[:, 3, :] / w).unsqueeze(1)], dim=1)
        cols["input_ids"].append(row["input_ids"].tolist())
        cols["loss_mask"].append(row["loss_mask"].tolist())
        cols["seq_len"].append(len(row["input_ids"]))
        pending.append((torch.from_numpy(row["input_ids"]).to(torch.int64), planes.to(dt).contiguous()))
    ds = Dataset.from_dict(cols)
    ds.set_format(type="torch")
    ds.save_to_disk(out)
    os.makedirs(hs_dir, exist_ok=True)
    for i, (ids, planes) in enumerate(pending):
        name = os.path.join(hs_dir, f"hs_{i}.safetensors")
        save_file({"token_ids": ids, "hidden_states": planes}, name + ".tmp")
        os.replace(name + ".tmp", name)
    return len(pending)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m draftflow_data.offline", description=__doc__.split("\n")[0])
    ap.add_argument("format", choices=("specforge", "speculators"))
    ap.add_argument("--rows", required=True, help="draftflow shards directory, or rows JSONL (id, input_ids, loss_mask)")
    ap.add_argument("--features", required=True,
                    help="features: a directory with index.jsonl, or draftflow's .dff feature files (a run directory, or a .dff file)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--target", help="the target model directory (speculators: its model.norm.weight)")
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    a = ap.parse_args(argv)
    try:
        if a.format == "specforge":
            n = export_specforge(a.rows, a.features, a.out, a.dtype)
        else:
            if not a.target:
                ap.error("speculators needs --target (the final norm's weight)")
            n = export_speculators(a.rows, a.features, a.out, a.target, a.dtype)
    except FeatureError as e:
        print(f"draftflow_data.offline: {e}", file=sys.stderr)
        return 1
    print(f"{a.format}: {n} rows -> {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
