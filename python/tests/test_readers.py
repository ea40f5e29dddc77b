"""The shards load token-exact in pyarrow, Hugging Face datasets, and draftflow_data."""

import glob
import json
import os
import sys

import numpy as np
import pytest

pq = pytest.importorskip("pyarrow.parquet")

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
import draftflow_data as dd  # noqa: E402


def _check(row, want):
    assert list(row["input_ids"]) == want["input_ids"]
    assert list(row["loss_mask"]) == want["loss_mask"]
    assert row["prompt_len"] == want["prompt_len"]
    assert row["completion_len"] == want["completion_len"]
    assert row["dataset"] == want["dataset"]
    assert row["finish_reason"] == want["finish_reason"]
    if "origin" in row:
        assert row["origin"] == want["origin"]


def _manifest_paths(out):
    paths = []
    for m in dd.read_manifests(out):
        paths += m.paths()
    return paths


def test_pyarrow_reads_every_row_exactly(sample):
    out, expected = sample
    seen = set()
    for p in _manifest_paths(out):
        run = os.path.basename(os.path.dirname(p))
        f = pq.ParquetFile(p)
        meta = f.schema_arrow.metadata
        run_meta = json.loads(meta[b"draftflow.run"])
        assert run_meta["model"] == "models/Sample-Model"
        assert b"draftflow.schema" in meta and int(meta[b"draftflow.partition"]) >= 0
        assert str(f.schema_arrow.field("input_ids").type) in ("list<item: int32>", "list<element: int32>",
                                                               "list<item: int32 not null>",
                                                               "list<element: int32 not null>")
        for row in f.read().to_pylist():
            key = (run, row["id"])
            assert key not in seen, f"{key} twice"
            seen.add(key)
            _check(row, expected[key])
    assert seen == set(expected)
    # No file outside the manifests is a published shard.
    assert sorted(glob.glob(os.path.join(out, "*", "*.parquet"))) == sorted(_manifest_paths(out))


def test_hf_datasets_load_parquet(sample):
    datasets = pytest.importorskip("datasets")
    out, expected = sample
    for m in dd.read_manifests(out):
        run = os.path.basename(m.run_dir)
        ds = datasets.load_dataset("parquet", data_files=m.paths(), split="train")
        assert ds.num_rows == m.totals["rows"]
        ids = set()
        for row in ds:
            _check(row, expected[(run, row["id"])])
            ids.add(row["id"])
        assert len(ids) == ds.num_rows


def _all_runs(out):
    return [os.path.basename(m.run_dir) for m in dd.read_manifests(out)]


def test_iter_rows_token_exact(sample):
    out, expected = sample
    seen = {}
    for row in dd.iter_rows(out, verify_checksums=True, runs=_all_runs(out)):
        assert row["input_ids"].dtype == np.int32 and row["loss_mask"].dtype == np.uint8
        seen[row["id"]] = seen.get(row["id"], 0) + 1
    # Two runs share ids: each id appears once per run.
    assert set(seen.values()) == {2}
    for m in dd.read_manifests(out):
        run = os.path.basename(m.run_dir)
        n = 0
        for row in dd.iter_rows(m.run_dir):
            _check(row, expected[(run, row["id"])])
            n += 1
        assert n == m.totals["rows"]


@pytest.mark.parametrize("world,workers", [(1, 1), (2, 1), (3, 2), (4, 3)])
def test_rank_and_worker_split_is_a_partition(sample, world, workers):
    out, expected = sample
    shards = dd.Shards(out, runs=_all_runs(out))
    assert shards.num_rows == len(expected)
    got = []
    for rank in range(world):
        for w in range(workers):
            got += [
                (r["id"], r["input_ids"].shape[0])
                for r in dd.iter_rows(out, rank=rank, world_size=world, worker_id=w, num_workers=workers,
                                      shuffle=True, seed=3, epoch=1, columns=("id", "input_ids"),
                                      runs=_all_runs(out))
            ]
    assert len(got) == len(expected)
    assert sorted(got) == sorted((k[1], len(v["input_ids"])) for k, v in expected.items())


def test_shuffle_changes_order_by_epoch(sample):
    out, _ = sample
    s = dd.Shards(out, runs=_all_runs(out))
    a = s.split(shuffle=True, seed=1, epoch=0)
    b = s.split(shuffle=True, seed=1, epoch=1)
    assert sorted(a, key=repr) == sorted(b, key=repr) and a != b


def test_run_filter_and_bad_checksum(sample, tmp_path):
    out, _ = sample
    ms = dd.read_manifests(out)
    assert len(ms) == 2
    one = dd.Shards(out, runs=[ms[0].run["fingerprint"][:12]])
    assert one.num_rows == ms[0].totals["rows"]
    # A copy of one run with a corrupted shard fails the checksum check.
    import shutil

    dst = tmp_path / "run"
    shutil.copytree(ms[0].run_dir, dst)
    victim = dst / ms[0].shards[0]["file"]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="sha256"):
        dd.Shards(str(dst), verify_checksums=True)


def test_torch_dataset(sample):
    torch = pytest.importorskip("torch")
    out, expected = sample
    ds = dd.ShardDataset(out, rank=0, world_size=1, runs=_all_runs(out))
    assert isinstance(ds, torch.utils.data.IterableDataset)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    n = 0
    for row in loader:
        assert row["input_ids"].dtype == torch.int64
        assert int(row["loss_mask"].sum()) == row["completion_len"]
        n += 1
    assert n == len(expected)


def test_one_run_unless_named(sample, tmp_path):
    out, _ = sample
    ms = dd.read_manifests(out)
    names = [os.path.basename(m.run_dir) for m in ms]
    with pytest.raises(ValueError, match="2 runs") as e:
        dd.Shards(out)
    assert all(n in str(e.value) for n in names)
    with pytest.raises(ValueError, match="ambiguous"):
        dd.Shards(out, runs=["Sample-Model"])
    with pytest.raises(ValueError, match="no run"):
        dd.Shards(out, runs=["nope"])
    assert dd.Shards(ms[1].run_dir).num_rows == ms[1].totals["rows"]
    # A run of another tokenizer is never read together with these.
    import shutil

    other = tmp_path / "out"
    shutil.copytree(out, other)
    mpath = other / names[1] / "manifest.json"
    m = json.loads(mpath.read_text())
    m["run"]["tokenizer_hash"] = "another-tokenizer"
    mpath.write_text(json.dumps(m))
    with pytest.raises(ValueError, match="refusing to mix"):
        dd.Shards(str(other), runs=names)


def test_origins(sample):
    out, expected = sample
    want = {}
    for (run, _), r in expected.items():
        want.setdefault(run, {}).setdefault(r["origin"], 0)
        want[run][r["origin"]] += 1
    for m in dd.read_manifests(out):
        run = os.path.basename(m.run_dir)
        assert set(want[run]) == set(dd.ORIGINS)
        assert m.origins == want[run]
        got = {}
        for row in dd.iter_rows(m.run_dir, columns=("id", "origin")):
            got[row["origin"]] = got.get(row["origin"], 0) + 1
        assert got == want[run]


def test_older_shards_read_as_generated(sample, tmp_path):
    """Shards and manifests written before the origin column: every row reads as generated."""
    out, expected = sample
    import shutil

    m = dd.read_manifests(out)[0]
    dst = tmp_path / "old"
    shutil.copytree(m.run_dir, dst)
    mpath = dst / "manifest.json"
    man = json.loads(mpath.read_text())
    for entry in man["shards"]:
        p = dst / entry["file"]
        t = pq.read_table(p)
        pq.write_table(t.drop_columns(["stop_reason", "reply", "origin"]), p, row_group_size=16)
        entry.pop("origins", None)
    man.pop("origins", None)
    mpath.write_text(json.dumps(man))
    old = dd.read_manifests(str(dst))[0]
    assert old.origins == {"generated": man["totals"]["rows"]}
    rows = list(dd.iter_rows(str(dst)))
    assert len(rows) == man["totals"]["rows"]
    assert {r["origin"] for r in rows} == {"generated"} and {r["reply"] for r in rows} == {""}
    run = os.path.basename(m.run_dir)
    for r in rows:
        assert list(r["input_ids"]) == expected[(run, r["id"])]["input_ids"]
