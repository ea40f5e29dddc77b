"""Shared fixtures: sample shards written by the real Go sink (go run ./sink/internal/mkshards)."""

import json
import os
import shutil
import subprocess
import sys

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


@pytest.fixture(scope="session")
def draftflow_bin(tmp_path_factory):
    """The draftflow binary, built from this tree."""
    if shutil.which("go") is None:
        _require_or_skip("go is not on PATH; cannot build draftflow")
    path = tmp_path_factory.mktemp("bin") / "draftflow"
    subprocess.run(["go", "build", "-o", str(path), "./cmd/draftflow"], cwd=REPO, check=True, timeout=900)
    return str(path)


def _cache_dir():
    return os.environ.get("DRAFTFLOW_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "draftflow")


@pytest.fixture(scope="session")
def trainer_wheels():
    """{"specforge": path, "speculators": path}: the pinned wheels of requirements-trainers.txt, which
    `make deps-python` downloads (without their dependencies) into $DRAFTFLOW_CACHE/wheels."""
    wheels = os.path.join(_cache_dir(), "wheels")
    req = os.path.join(REPO, "requirements-trainers.txt")
    pins = {}
    with open(req, encoding="utf-8") as f:
        for line in f:
            line = line.split("#")[0].strip()
            if line:
                name, version = line.split()[0].split("==")
                pins[name] = os.path.join(wheels, f"{name}-{version}-py3-none-any.whl")
    if not all(os.path.exists(p) for p in pins.values()):
        os.makedirs(wheels, exist_ok=True)
        r = subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--require-hashes", "-r", req, "-d", wheels],
            capture_output=True, text=True, timeout=600,
        )
        if r.returncode != 0 or not all(os.path.exists(p) for p in pins.values()):
            _require_or_skip(f"cannot download the trainers' wheels ({r.stderr.strip()[-300:]})")
    return pins
