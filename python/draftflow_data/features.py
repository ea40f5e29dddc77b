"""Read draftflow feature files: the target model's EAGLE-3 hidden states of each row (Go writer:
shard/features; format: docs/hidden-states.md).

A file holds the rows of one shard, each a bf16 array [tokens, width], width = len(layers) x hidden, layers
in the order ``FeatureFile.layers`` names them ("aux:N": the input of decoder layer N, transformers'
``hidden_states[N]``; "final": the final norm's output, what lm_head reads). Needs numpy and pyarrow (for
zstd); ``read_torch`` needs torch.

  f = FeatureFile(path)
  x = f.read("row-id")            # numpy float32 [tokens, width]
  t = f.read_torch("row-id")      # torch.bfloat16 [tokens, width], the stored bits
  d = f.specforge_v1("row-id", input_ids, loss_mask)   # SpecForge's offline v1 dict (torch)

A run captured by draftflow (``draftflow run --capture-aux/--capture-final``, ``draftflow capture``) has one
file per shard beside it (``X.parquet`` -> ``X.dff``), listed in the run's ``features.json``; a file's
rows join the shard's by position (``FeatureFile.at``), and the shard rows whose features could not be captured
are listed in ``FeatureFile.missing`` with the reason:

  rf = RunFeatures(run_dir)
  for shard in rf.shards():                 # shard file names, as in manifest.json
      f = rf.file(shard)
      i = f.at(position)                    # index of the shard's row at position, or None (missing)
"""

import json
import os
import struct
import zlib

import numpy as np

MAGIC = b"DFFEAT01"


class FeatureFile:
    """One feature file: its index on open, rows on demand."""

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            if size < 2 * len(MAGIC) + 8:
                raise ValueError(f"{path}: not a feature file: too short")
            f.seek(0)
            head = f.read(len(MAGIC))
            f.seek(size - 8 - len(MAGIC))
            tail = f.read(8 + len(MAGIC))
            if head != MAGIC or tail[8:] != MAGIC:
                raise ValueError(f"{path}: not a feature file: no magic at both ends (an unfinished write?)")
            (n,) = struct.unpack("<Q", tail[:8])
            if n > size - 2 * len(MAGIC) - 8:
                raise ValueError(f"{path}: not a feature file: index length out of range")
            f.seek(size - 8 - len(MAGIC) - n)
            self.index = json.loads(f.read(n))
        ix = self.index
        if ix.get("version") != 1 or ix.get("dtype") != "bfloat16" or ix.get("codec") not in ("zstd-planes", "raw"):
            raise ValueError(f"{path}: unsupported feature file {ix.get('version')}/{ix.get('dtype')}/{ix.get('codec')}")
        self.hidden = int(ix["hidden"])
        self.layers = list(ix["layers"])
        self.width = self.hidden * len(self.layers)
        self.codec = ix["codec"]
        self.rows = ix["rows"]
        self._by_id = {}
        for i, r in enumerate(self.rows):
            self._by_id.setdefault(r["id"], i)  # an id's first turn; rows join shards by position (at)
        # The shard rows without features: id, turn, row (position in the shard), tokens, class, reason.
        self.missing = list(ix.get("missing") or [])
        self._by_pos = {r["row"]: i for i, r in enumerate(self.rows) if "row" in r}

    def at(self, position):
        """The index of the row holding the features of the shard's row at ``position``, or None when that row
        has none (it is in ``missing``)."""
        return self._by_pos.get(int(position))

    def __len__(self):
        return len(self.rows)

    def ids(self):
        return [r["id"] for r in self.rows]

    def _row(self, key):
        i = self._by_id[key] if isinstance(key, str) else int(key)
        return self.rows[i]

    def read_bits(self, key):
        """Row ``key`` (id or index) as uint16 bf16 bits, shape [tokens, width]."""
        r = self._row(key)
        with open(self.path, "rb") as f:
            f.seek(r["offset"])
            block = f.read(r["bytes"])
        if (zlib.crc32(block) & 0xFFFFFFFF) != r["crc32"]:
            raise ValueError(f"{self.path}: row {r['id']}: CRC mismatch")
        n = r["tokens"] * self.width
        if self.codec == "raw":
            if len(block) != 2 * n:
                raise ValueError(f"{self.path}: row {r['id']}: {len(block)} bytes for {n} values")
            bits = np.frombuffer(block, dtype="<u2")
        else:
            import pyarrow as pa

            raw = np.frombuffer(pa.decompress(block, decompressed_size=2 * n, codec="zstd"), dtype=np.uint8)
            bits = (raw[:n].astype(np.uint16) << 8) | raw[n:]
        return bits.reshape(r["tokens"], self.width)

    def read(self, key):
        """Row ``key`` widened to float32, shape [tokens, width]."""
        return (self.read_bits(key).astype(np.uint32) << 16).view(np.float32)

    def read_torch(self, key):
        """Row ``key`` as a torch.bfloat16 tensor [tokens, width] (the stored values, no rounding)."""
        import torch

        return torch.from_numpy(self.read_bits(key).view(np.int16).copy()).view(torch.bfloat16)

    def layer(self, key, name):
        """The columns of one layer of row ``key``, float32 [tokens, hidden]."""
        j = self.layers.index(name)
        return self.read(key)[:, j * self.hidden:(j + 1) * self.hidden]

    def specforge_v1(self, key, input_ids, loss_mask):
        """SpecForge's offline v1 dict for row ``key``: input_ids, loss_mask, hidden_state [T, H] (the
        "final" layer) and aux_hidden_state [T, 3H] (the aux layers in file order), bf16 tensors as stored."""
        import torch

        t = self.read_torch(key)
        aux = [j for j, name in enumerate(self.layers) if name.startswith("aux:")]
        fin = self.layers.index("final")
        h = self.hidden
        return {
            "input_ids": torch.as_tensor(np.asarray(input_ids, dtype=np.int64)),
            "loss_mask": torch.as_tensor(np.asarray(loss_mask, dtype=np.int64)),
            "hidden_state": t[:, fin * h:(fin + 1) * h].clone(),
            "aux_hidden_state": torch.cat([t[:, j * h:(j + 1) * h] for j in aux], dim=1),
        }


def feature_path(shard_path):
    """The feature file of the shard at ``shard_path`` (beside it: X.parquet -> X.dff)."""
    base = shard_path[:-len(".parquet")] if shard_path.endswith(".parquet") else shard_path
    return base + ".dff"


class RunFeatures:
    """The feature files of one run directory, as its ``features.json`` lists them (written by the capture
    stage beside the sink's manifest.json)."""

    def __init__(self, run_dir):
        self.run_dir = run_dir
        path = os.path.join(run_dir, "features.json")
        with open(path) as f:
            m = json.load(f)
        if m.get("version") != 1:
            raise ValueError(f"{path}: version {m.get('version')}, this reader reads 1")
        self.header = m["header"]
        self.entries = {e["shard"]: e for e in m["files"]}
        self._open = {}

    def shards(self):
        """The shard file names that have a feature file, sorted."""
        return sorted(self.entries)

    def file(self, shard):
        """The FeatureFile of shard (a file name in the run directory)."""
        if shard not in self.entries:
            raise KeyError(f"{self.run_dir}: shard {shard} has no feature file in features.json")
        f = self._open.get(shard)
        if f is None:
            f = FeatureFile(os.path.join(self.run_dir, self.entries[shard]["file"]))
            self._open[shard] = f
        return f

    def missing(self):
        """Every shard row without features: (shard, the missing row's dict)."""
        return [(s, m) for s in self.shards() for m in self.file(s).missing]
