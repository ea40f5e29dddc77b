"""Shared fixtures: sample shards written by the real Go sink (go run ./sink/internal/mkshards)."""

import json
import os
import shutil
import subprocess

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _require_or_skip(msg):
    if os.environ.get("DRAFTFLOW_REQUIRE_ASSETS"):
        pytest.fail(msg + " (DRAFTFLOW_REQUIRE_ASSETS is set)")
    pytest.skip(msg)


@pytest.fixture(scope="session")
def sample(tmp_path_factory):
    """(shard dir, expected rows by (run_dir, id)) for 2 runs x 120 conversations."""
    if shutil.which("go") is None:
        _require_or_skip("go is not on PATH; cannot build sample shards")
    base = tmp_path_factory.mktemp("shards")
    out, exp = base / "out", base / "expected.jsonl"
    subprocess.run(
        ["go", "run", "./sink/internal/mkshards", "-out", str(out), "-expected", str(exp), "-n", "120"],
        cwd=REPO,
        check=True,
        timeout=600,
    )
    expected = {}
    with open(exp, encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            expected[(r["run_dir"], r["id"])] = r
    return str(out), expected
