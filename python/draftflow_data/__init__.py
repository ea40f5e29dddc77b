"""Stream draftflow training shards by manifest.

draftflow's sink writes one directory per run (model, tokenizer, sampling settings), each with a
``manifest.json`` listing committed zstd Parquet shards. This package finds those runs, splits the
shards' row groups across distributed ranks and data-loader workers, and yields rows with
``input_ids`` and ``loss_mask`` ready for EAGLE-3 drafter training.

``iter_rows`` and ``Shards`` read one run (or several of one model and tokenizer, named with ``runs``)
and need only pyarrow and numpy. ``Limits`` cuts or leaves out rows by length as ``draftflow export
--max-length/--overlong/--min-loss-tokens`` does, counting what it did in a ``LimitReport``. ``ShardDataset`` is a
``torch.utils.data.IterableDataset`` when torch is installed, and a plain iterable otherwise.

``draftflow_data.vocab`` turns what ``draftflow vocab`` wrote (``token_counts.tsv``, ``d2t.npy``,
``t2d.npy``) into the trainers' torch files: speculators' ``token_freq.pt`` and SpecForge's
``vocab_mapping_path`` file (``python -m draftflow_data.vocab DIR``; needs torch).

``draftflow_data.offline`` exports rows plus the target's EAGLE-3 features to SpecForge's offline v1 files
and speculators' ``hs_{i}.safetensors`` layout (``python -m draftflow_data.offline``; needs torch and
safetensors; docs/training.md).
"""

from .shards import (
    COLUMNS,
    LimitReport,
    Limits,
    Manifest,
    ShardDataset,
    Shards,
    Unit,
    iter_rows,
    read_manifests,
    select_runs,
)

__all__ = ["COLUMNS", "LimitReport", "Limits", "Manifest", "ShardDataset", "Shards", "Unit", "iter_rows", "read_manifests", "select_runs"]
__version__ = "0.1.0"
