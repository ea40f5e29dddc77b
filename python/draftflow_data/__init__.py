"""Stream draftflow training shards by manifest.

draftflow's sink writes one directory per run (model, tokenizer, sampling settings), each with a
``manifest.json`` listing committed zstd Parquet shards. This package finds those runs, splits the
shards' row groups across distributed ranks and data-loader workers, and yields rows with
``input_ids`` and ``loss_mask`` ready for EAGLE-3 drafter training.

``iter_rows`` and ``Shards`` need only pyarrow and numpy. ``ShardDataset`` is a
``torch.utils.data.IterableDataset`` when torch is installed, and a plain iterable otherwise.
"""

from .shards import (
    COLUMNS,
    Manifest,
    ShardDataset,
    Shards,
    Unit,
    iter_rows,
    read_manifests,
)

__all__ = ["COLUMNS", "Manifest", "ShardDataset", "Shards", "Unit", "iter_rows", "read_manifests"]
__version__ = "0.1.0"
