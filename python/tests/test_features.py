"""draftflow feature files (written by the real Go writer, shard/features) read by draftflow_data.features."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("pyarrow")

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
from draftflow_data.features import FeatureFile  # noqa: E402

from conftest import REPO, _require_or_skip  # noqa: E402


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    if shutil.which("go") is None:
        _require_or_skip("go is not on PATH; cannot write sample feature files")
    out = tmp_path_factory.mktemp("features")
    subprocess.run(["go", "run", "./shard/features/internal/mkfeatures", "-out", str(out)], cwd=REPO, check=True, timeout=600)
    with open(out / "expected.json") as f:
        return out, json.load(f)


def bf16_bits(x):
    """float32 -> bf16 bits, round to nearest even (torch's .to(torch.bfloat16)); NaN stays NaN."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    r[nan] = (u[nan] >> 16).astype(np.uint16) | 0x40
    return r


@pytest.mark.parametrize("codec", ["zstd-planes", "raw"])
def test_rows_read_back(sample, codec):
    out, exp = sample
    f = FeatureFile(str(out / f"{codec}.dff"))
    assert f.codec == codec and f.hidden == exp["hidden"] and f.layers == exp["layers"]
    assert f.ids() == [r["id"] for r in exp["rows"]]
    for i, r in enumerate(exp["rows"]):
        vals = np.load(out / f"row{i}.npy")
        assert vals.shape == (r["tokens"], f.width)
        bits = f.read_bits(r["id"])
        np.testing.assert_array_equal(bits, bf16_bits(vals))
        got = f.read(i)
        fin = np.isfinite(vals)
        assert np.all(np.abs(got[fin] - vals[fin]) <= np.abs(vals[fin]) / 256 + 1e-38)
        np.testing.assert_array_equal(got[~fin & ~np.isnan(vals)], vals[~fin & ~np.isnan(vals)])
        assert np.all(np.isnan(got[np.isnan(vals)]))
        h = f.hidden
        np.testing.assert_array_equal(f.layer(i, "final"), got[:, 3 * h:])


def test_damaged_files(sample, tmp_path):
    out, exp = sample
    data = (out / "zstd-planes.dff").read_bytes()
    (tmp_path / "cut.dff").write_bytes(data[:-1])
    with pytest.raises(ValueError, match="magic"):
        FeatureFile(str(tmp_path / "cut.dff"))
    flip = bytearray(data)
    flip[10] ^= 0xFF
    (tmp_path / "flip.dff").write_bytes(bytes(flip))
    f = FeatureFile(str(tmp_path / "flip.dff"))
    with pytest.raises(ValueError, match="CRC"):
        f.read(0)


def test_specforge_v1(sample):
    torch = pytest.importorskip("torch")
    out, exp = sample
    f = FeatureFile(str(out / "zstd-planes.dff"))
    r = exp["rows"][3]
    d = f.specforge_v1(r["id"], list(range(r["tokens"])), [1] * r["tokens"])
    h = f.hidden
    assert d["hidden_state"].shape == (r["tokens"], h) and d["aux_hidden_state"].shape == (r["tokens"], 3 * h)
    assert d["hidden_state"].dtype == torch.bfloat16 and d["input_ids"].dtype == torch.int64
    full = torch.from_numpy(f.read(r["id"]))
    assert torch.equal(d["aux_hidden_state"].float(), full[:, : 3 * h])
    assert torch.equal(d["hidden_state"].float(), full[:, 3 * h:])


M64 = (1 << 64) - 1


def sim_hidden_value(token, pos, layer, col):
    """sglang/sim HiddenValue: the simulated capture servers' value of (token, position, layer, column)."""
    x = ((token & 0xFFFFFFFF) << 32) ^ (pos << 12) ^ ((layer << 56) & M64) ^ ((col * 0x9E3779B97F4A7C15) & M64)
    x &= M64
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & M64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & M64
    x ^= x >> 31
    b = x & 0xFF
    return np.float32((b - 256 if b >= 128 else b) / 64)


def test_run_features_beside_shards(tmp_path):
    """`draftflow run --capture-aux sim --capture-final sim`: RunFeatures finds every shard's file, its rows join
    the shard's by position, and the values are the simulated servers' (bf16-exact)."""
    if shutil.which("go") is None:
        _require_or_skip("go is not on PATH; cannot run draftflow")
    import pyarrow.parquet as pq
    from draftflow_data.features import RunFeatures, feature_path

    out = tmp_path / "out"
    subprocess.run(["go", "run", "./cmd/draftflow", "run", "--input", "testdata/sample/conversations.jsonl", "--out", str(out),
                    "--capture-aux", "sim", "--capture-final", "sim", "--capture-sim-hidden", "8", "--shard-rows", "40",
                    "--sim-output-mean", "20", "--log-level", "warn"], cwd=REPO, check=True, timeout=600)
    (run_dir,) = [p for p in out.iterdir() if (p / "manifest.json").exists()]
    with open(run_dir / "manifest.json") as f:
        shards = [s["file"] for s in json.load(f)["shards"]]
    rf = RunFeatures(str(run_dir))
    assert rf.shards() == sorted(shards)
    assert rf.header["layers"] == ["aux:2", "aux:4", "aux:5", "final"] and rf.header["hidden"] == 8
    assert rf.missing() == []
    checked = 0
    for shard in shards:
        f = rf.file(shard)
        assert f.path == feature_path(str(run_dir / shard))
        t = pq.read_table(run_dir / shard, columns=["id", "turn", "input_ids"]).to_pylist()
        assert len(f) == len(t)
        for pos, row in enumerate(t[:5]):
            i = f.at(pos)
            r = f.rows[i]
            assert (r["id"], r["turn"], r["tokens"]) == (row["id"], row["turn"], len(row["input_ids"]))
            got = f.read(i)
            want = np.array([[sim_hidden_value(tok, p, layer, c) for layer in range(4) for c in range(8)]
                             for p, tok in enumerate(row["input_ids"])], dtype=np.float32)
            np.testing.assert_array_equal(got, want)
            checked += 1
    assert checked > 0
