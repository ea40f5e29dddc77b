"""draftflow feature files (written by the real Go writer, sink/features) read by draftflow_data.features."""

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
    subprocess.run(["go", "run", "./sink/features/internal/mkfeatures", "-out", str(out)], cwd=REPO, check=True, timeout=600)
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
