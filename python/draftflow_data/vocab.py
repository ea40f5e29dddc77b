"""Turn ``draftflow vocab`` output into the trainers' torch files.

``draftflow vocab DIR --run NAME --draft-vocab-size N`` writes, next to the run's shards (or into ``--out``):

- ``d2t.npy``: int64, shape ``[N]``, target id minus draft id for each draft id (speculators loads it with
  ``np.load``; so does this module);
- ``t2d.npy``: bool, shape ``[target vocab size]``, true for the target ids the draft vocabulary keeps;
- ``token_counts.tsv``: ``token_id<TAB>count`` for every generated token id (loss mask 1), ids ascending.

This module writes, from those files and the same selection:

- ``token_freq.pt``: speculators' token frequency file, ``torch.save`` of a ``{token_id: count}`` dict
  (what ``save_token_frequency_distribution`` writes and ``torch.load(..., weights_only=True)`` reads);
- ``vocab_mapping.pt``: SpecForge's ``vocab_mapping_path`` file, ``torch.save({"d2t": int64 tensor,
  "t2d": bool tensor})`` (what ``generate_vocab_mapping_file`` writes and ``load_vocab_mapping`` reads).

Usage: ``python -m draftflow_data.vocab DIR [--out DIR2]``.
"""

from __future__ import annotations

import argparse
import os
from typing import Dict, Optional, Tuple

import numpy as np

TOKEN_COUNTS = "token_counts.tsv"
D2T = "d2t.npy"
T2D = "t2d.npy"
TOKEN_FREQ = "token_freq.pt"
VOCAB_MAPPING = "vocab_mapping.pt"


def read_token_counts(path: str) -> Dict[int, int]:
    """``{token_id: count}`` from ``token_counts.tsv`` (``path`` is the file or its directory)."""
    if os.path.isdir(path):
        path = os.path.join(path, TOKEN_COUNTS)
    out: Dict[int, int] = {}
    with open(path, encoding="utf-8") as f:
        header = f.readline().rstrip("\n")
        if header != "token_id\tcount":
            raise ValueError(f"{path}: header {header!r}, want 'token_id<TAB>count'")
        for line in f:
            tid, count = line.split("\t")
            out[int(tid)] = int(count)
    return out


def read_maps(vocab_dir: str) -> Tuple[np.ndarray, np.ndarray]:
    """``(d2t, t2d)`` as numpy arrays, checked: d2t int64 [N], t2d bool [V], nonzero(t2d) == d2t + arange(N)."""
    d2t = np.load(os.path.join(vocab_dir, D2T))
    t2d = np.load(os.path.join(vocab_dir, T2D))
    if d2t.dtype != np.int64 or d2t.ndim != 1 or t2d.dtype != np.bool_ or t2d.ndim != 1:
        raise ValueError(f"{vocab_dir}: d2t {d2t.dtype}{d2t.shape}, t2d {t2d.dtype}{t2d.shape}; want int64 [N], bool [V]")
    if not np.array_equal(np.flatnonzero(t2d), d2t + np.arange(d2t.shape[0])):
        raise ValueError(f"{vocab_dir}: t2d and d2t select different ids")
    return d2t, t2d


def write_torch_files(vocab_dir: str, out_dir: Optional[str] = None) -> Tuple[str, str]:
    """Write ``token_freq.pt`` and ``vocab_mapping.pt`` into ``out_dir`` (default ``vocab_dir``); needs torch."""
    import torch

    out_dir = out_dir or vocab_dir
    os.makedirs(out_dir, exist_ok=True)
    counts = read_token_counts(vocab_dir)
    d2t, t2d = read_maps(vocab_dir)
    freq_path = os.path.join(out_dir, TOKEN_FREQ)
    map_path = os.path.join(out_dir, VOCAB_MAPPING)
    for path, obj in (
        (freq_path, counts),
        (map_path, {"d2t": torch.from_numpy(d2t), "t2d": torch.from_numpy(t2d)}),
    ):
        tmp = f"{path}.{os.getpid()}.tmp"
        torch.save(obj, tmp)
        os.replace(tmp, path)
    return freq_path, map_path


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m draftflow_data.vocab", description=__doc__.split("\n\n")[0])
    p.add_argument("vocab_dir", help="directory draftflow vocab wrote (the run directory unless --out was given)")
    p.add_argument("--out", help="write the .pt files here (default: vocab_dir)")
    a = p.parse_args(argv)
    for path in write_torch_files(a.vocab_dir, a.out):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
