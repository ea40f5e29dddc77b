"""Manifest discovery, work splitting and row iteration for draftflow shards."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Sequence

import numpy as np
import pyarrow.parquet as pq

try:  # torch is optional
    import torch
    from torch.utils.data import IterableDataset as _Base

    _HAVE_TORCH = True
except ImportError:  # pragma: no cover - exercised only without torch
    torch = None
    _Base = object
    _HAVE_TORCH = False

_log = logging.getLogger("draftflow_data")

MANIFEST = "manifest.json"
FORMAT_VERSION = 1

#: Shard columns in file order.
COLUMNS = (
    "id",
    "input_ids",
    "loss_mask",
    "prompt_len",
    "completion_len",
    "finish_reason",
    "dataset",
    "turn",
    "endpoint",
    "stop_reason",
    "reply",
)


@dataclass
class Manifest:
    """One run directory's manifest.json."""

    run_dir: str
    run: Dict[str, Any]
    shards: List[Dict[str, Any]]
    totals: Dict[str, Any]

    @classmethod
    def load(cls, run_dir: str) -> "Manifest":
        with open(os.path.join(run_dir, MANIFEST), encoding="utf-8") as f:
            m = json.load(f)
        if m.get("format_version") != FORMAT_VERSION:
            raise ValueError(
                f"{run_dir}: manifest format version {m.get('format_version')}, this reader knows {FORMAT_VERSION}"
            )
        return cls(run_dir=run_dir, run=m["run"], shards=m["shards"], totals=m["totals"])

    def paths(self) -> List[str]:
        """Absolute paths of the shards, in manifest order."""
        return [os.path.join(self.run_dir, s["file"]) for s in self.shards]


def read_manifests(path: str) -> List[Manifest]:
    """Manifests under ``path``: the run directory itself, or every run directory in it (sorted)."""
    if os.path.exists(os.path.join(path, MANIFEST)):
        return [Manifest.load(path)]
    out = []
    for name in sorted(os.listdir(path)):
        d = os.path.join(path, name)
        if os.path.isdir(d) and os.path.exists(os.path.join(d, MANIFEST)):
            out.append(Manifest.load(d))
    if not out:
        raise FileNotFoundError(f"no {MANIFEST} in {path} or its subdirectories")
    return out


def select_runs(manifests: List[Manifest], runs: Optional[Sequence[str]] = None) -> List[Manifest]:
    """The runs named in ``runs``, as ``draftflow export --run`` picks them.

    A name matches a run directory's name exactly, or is a prefix of its name or fingerprint that no other
    run shares. Without names there must be exactly one run; otherwise the error lists them. Runs of
    different models or tokenizers are refused together: their token ids do not mean the same thing.
    """

    def listing(ms: List[Manifest]) -> str:
        return "\n".join(
            f"  {os.path.basename(m.run_dir)}  model {m.run.get('model')}  tokenizer {m.run.get('tokenizer_hash')}"
            f"  {m.totals.get('rows')} rows"
            for m in ms
        )

    if not runs:
        if len(manifests) == 1:
            return list(manifests)
        raise ValueError(f"{len(manifests)} runs; choose with runs=[...]:\n{listing(manifests)}")
    chosen: List[Manifest] = []
    for name in runs:
        exact = [m for m in manifests if os.path.basename(m.run_dir) == name]
        hits = exact or [
            m
            for m in manifests
            if os.path.basename(m.run_dir).startswith(name) or m.run.get("fingerprint", "").startswith(name)
        ]
        if not hits:
            raise ValueError(f"no run {name!r}; the runs are:\n{listing(manifests)}")
        if len(hits) > 1:
            raise ValueError(f"run {name!r} is ambiguous; the runs are:\n{listing(manifests)}")
        if hits[0] not in chosen:
            chosen.append(hits[0])
    first = chosen[0].run
    for m in chosen[1:]:
        if (m.run.get("model"), m.run.get("tokenizer_hash")) != (first.get("model"), first.get("tokenizer_hash")):
            raise ValueError("refusing to mix runs of different models or tokenizers:\n" + listing(chosen))
    return chosen


@dataclass(frozen=True)
class Unit:
    """The unit of work: one row group of one shard."""

    path: str
    row_group: int
    rows: int


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass
class Shards:
    """The shards under a path, as units of work (row groups) that ranks and workers split.

    ``runs`` names the runs to read (see ``select_runs``): required when ``path`` holds several, and
    only runs of one model and tokenizer together. ``verify_checksums`` checks every shard's sha256
    against its manifest first.
    """

    path: str
    runs: Optional[Sequence[str]] = None
    verify_checksums: bool = False
    manifests: List[Manifest] = field(init=False)
    units: List[Unit] = field(init=False)

    def __post_init__(self) -> None:
        ms = select_runs(read_manifests(self.path), self.runs)
        self.manifests = ms
        self.units = []
        for m in ms:
            for entry, p in zip(m.shards, m.paths()):
                if self.verify_checksums and _sha256(p) != entry["sha256"]:
                    raise ValueError(f"{p}: sha256 does not match its manifest")
                md = pq.ParquetFile(p).metadata
                if md.num_rows != entry["rows"]:
                    raise ValueError(f"{p}: {md.num_rows} rows, manifest says {entry['rows']}")
                for rg in range(md.num_row_groups):
                    self.units.append(Unit(p, rg, md.row_group(rg).num_rows))

    @property
    def num_rows(self) -> int:
        """Rows over all units."""
        return sum(u.rows for u in self.units)

    def split(
        self,
        rank: int = 0,
        world_size: int = 1,
        worker_id: int = 0,
        num_workers: int = 1,
        shuffle: bool = False,
        seed: int = 0,
        epoch: int = 0,
    ) -> List[Unit]:
        """The units of one consumer: unit i goes to consumer i % (world_size * num_workers), consumer
        rank * num_workers + worker_id. With ``shuffle`` the unit order is permuted by (seed, epoch) first,
        identically on every consumer, so the split stays a partition."""
        if not (0 <= rank < world_size and 0 <= worker_id < num_workers):
            raise ValueError(f"rank {rank}/{world_size}, worker {worker_id}/{num_workers} out of range")
        units = list(self.units)
        if shuffle:
            random.Random(seed * 1_000_003 + epoch).shuffle(units)
        n = world_size * num_workers
        me = rank * num_workers + worker_id
        return units[me::n]


@dataclass(frozen=True)
class Limits:
    """The length rules a trainer applies, applied while reading so that what is cut or left out is counted:
    the same rules as ``draftflow export --max-length N --overlong truncate|drop --min-loss-tokens N``.

    A row longer than ``max_length`` (0: no limit) is cut to its first ``max_length`` tokens
    (``overlong="truncate"``, what SpecForge and speculators do) or left out (``"drop"``); a row left with
    fewer than ``min_loss_tokens`` generated tokens (loss mask 1; at least 1) after that is left out.
    """

    max_length: int = 0
    overlong: str = "truncate"
    min_loss_tokens: int = 0

    def __post_init__(self) -> None:
        if self.max_length < 0:
            raise ValueError(f"max_length {self.max_length} is negative")
        if self.min_loss_tokens < 0:
            raise ValueError(f"min_loss_tokens {self.min_loss_tokens} is negative")
        if self.overlong not in ("truncate", "drop"):
            raise ValueError(f"overlong {self.overlong!r}: want 'truncate' or 'drop'")


@dataclass
class LimitReport:
    """What ``Limits`` did to the rows read (``str()`` reads as ``draftflow export``'s report)."""

    limits: Limits
    rows: int = 0
    kept: int = 0
    truncated: int = 0
    dropped_overlong: int = 0
    dropped_loss: int = 0
    tokens_cut: int = 0
    generated_tokens_cut: int = 0

    def __str__(self) -> str:
        lm = self.limits
        s = (
            f"rows: {self.rows} read, {self.kept} kept, {self.truncated} truncated, "
            f"{self.dropped_overlong + self.dropped_loss} dropped ({self.dropped_overlong} longer than "
            f"{lm.max_length} tokens, {self.dropped_loss} with fewer than {max(lm.min_loss_tokens, 1)} generated tokens)"
        )
        if self.truncated:
            s += f"; truncation removed {self.tokens_cut} tokens, {self.generated_tokens_cut} of them generated"
        return s


def _limit(row: Dict[str, Any], limits: Limits, report: LimitReport) -> bool:
    """Apply limits to one row in place; False when the row is left out."""
    report.rows += 1
    ids, mask = row["input_ids"], row["loss_mask"]
    prompt_len = int(row["prompt_len"])
    n = len(ids)
    truncated = False
    if limits.max_length and n > limits.max_length:
        if limits.overlong == "drop":
            report.dropped_overlong += 1
            return False
        cut = n - limits.max_length
        report.tokens_cut += cut
        report.generated_tokens_cut += int(np.count_nonzero(mask[limits.max_length :]))
        row["input_ids"], row["loss_mask"] = ids[: limits.max_length], mask[: limits.max_length]
        truncated = True
    loss = max(0, len(row["input_ids"]) - prompt_len)
    if loss < max(limits.min_loss_tokens, 1):
        report.dropped_loss += 1
        return False
    report.kept += 1
    report.truncated += truncated
    return True


def _limited(rows: Iterator[Dict[str, Any]], limits: Optional[Limits], report: Optional[LimitReport],
             columns: Sequence[str]) -> Iterator[Dict[str, Any]]:
    """Rows with limits applied (and the columns limits needed but the caller did not ask for removed)."""
    if limits is None:
        yield from rows
        return
    rep = report if report is not None else LimitReport(limits)
    for row in rows:
        if _limit(row, limits, rep):
            for k in [k for k in row if k not in columns]:
                del row[k]
            yield row
    _log.info("%s", rep)


def _needed(columns: Sequence[str], limits: Optional[Limits]) -> Sequence[str]:
    if limits is None:
        return columns
    return tuple(columns) + tuple(c for c in ("input_ids", "loss_mask", "prompt_len") if c not in columns)


def _read_unit(unit: Unit, columns: Sequence[str]) -> Iterator[Dict[str, Any]]:
    table = pq.ParquetFile(unit.path).read_row_group(unit.row_group, columns=list(columns))
    cols: Dict[str, Any] = {}
    for name in columns:
        arr = table.column(name).combine_chunks()
        if name in ("input_ids", "loss_mask"):
            offsets = arr.offsets.to_numpy()
            values = arr.values.to_numpy(zero_copy_only=False)
            cols[name] = (offsets, values)
        else:
            cols[name] = arr.to_pylist()
    for i in range(table.num_rows):
        row: Dict[str, Any] = {}
        for name in columns:
            c = cols[name]
            if isinstance(c, tuple):
                offsets, values = c
                row[name] = values[offsets[i] : offsets[i + 1]]
            else:
                row[name] = c[i]
        yield row


def iter_rows(
    path: str,
    rank: int = 0,
    world_size: int = 1,
    worker_id: int = 0,
    num_workers: int = 1,
    columns: Sequence[str] = COLUMNS,
    shuffle: bool = False,
    seed: int = 0,
    epoch: int = 0,
    runs: Optional[Sequence[str]] = None,
    verify_checksums: bool = False,
    limits: Optional[Limits] = None,
    report: Optional[LimitReport] = None,
) -> Iterator[Dict[str, Any]]:
    """Yield this consumer's rows as dicts; ``input_ids`` (int32) and ``loss_mask`` (uint8) are numpy arrays.

    With ``limits`` the rows are cut or left out as ``draftflow export`` does with the same options; what
    happened is counted in ``report`` (when given) and logged at the end."""
    shards = Shards(path, runs=runs, verify_checksums=verify_checksums)
    read = _needed(columns, limits)

    def rows() -> Iterator[Dict[str, Any]]:
        for unit in shards.split(rank, world_size, worker_id, num_workers, shuffle, seed, epoch):
            yield from _read_unit(unit, read)

    yield from _limited(rows(), limits, report, columns)


def _dist_rank_world() -> "tuple[int, int]":
    if _HAVE_TORCH and torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


class ShardDataset(_Base):  # type: ignore[misc,valid-type]
    """Iterable dataset over draftflow shards.

    With torch installed it is a ``torch.utils.data.IterableDataset``: rank and world size come from
    ``torch.distributed`` (or the RANK / WORLD_SIZE environment variables, or the arguments), the worker
    split from ``torch.utils.data.get_worker_info()``, and rows hold ``input_ids`` and ``loss_mask`` as
    int64 tensors of shape [L] (SpecForge's dtype). Without torch it is a plain iterable of numpy rows.
    Call ``set_epoch`` each epoch when ``shuffle`` is on. ``limits`` cuts or leaves out rows as
    ``draftflow export`` does (``Limits``); each iteration's ``report`` counts what it did.
    """

    def __init__(
        self,
        path: str,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        shuffle: bool = False,
        seed: int = 0,
        columns: Sequence[str] = COLUMNS,
        runs: Optional[Sequence[str]] = None,
        verify_checksums: bool = False,
        limits: Optional[Limits] = None,
    ) -> None:
        if _HAVE_TORCH:
            super().__init__()
        self.shards = Shards(path, runs=runs, verify_checksums=verify_checksums)
        self.limits = limits
        #: What ``limits`` did in the last iteration in this process (each data-loader worker has its own).
        self.report: Optional[LimitReport] = None
        r, w = _dist_rank_world()
        self.rank = r if rank is None else rank
        self.world_size = w if world_size is None else world_size
        self.shuffle, self.seed, self.epoch = shuffle, seed, 0
        self.columns = tuple(columns)

    def set_epoch(self, epoch: int) -> None:
        """Reshuffle for a new epoch (same permutation on every rank and worker)."""
        self.epoch = epoch

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        worker_id, num_workers = 0, 1
        if _HAVE_TORCH:
            info = torch.utils.data.get_worker_info()
            if info is not None:
                worker_id, num_workers = info.id, info.num_workers
        units = self.shards.split(
            self.rank, self.world_size, worker_id, num_workers, self.shuffle, self.seed, self.epoch
        )
        read = _needed(self.columns, self.limits)
        self.report = LimitReport(self.limits) if self.limits is not None else None

        def rows() -> Iterator[Dict[str, Any]]:
            for unit in units:
                yield from _read_unit(unit, read)

        for row in _limited(rows(), self.limits, self.report, self.columns):
            if _HAVE_TORCH:
                for k in ("input_ids", "loss_mask"):
                    if k in row:
                        row[k] = torch.from_numpy(row[k].astype(np.int64))
            yield row
