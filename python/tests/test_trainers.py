"""draftflow's output through the trainers' own code, loaded from their pinned PyPI wheels.

SpecForge 0.2.0 and speculators 0.9.0 pin conflicting torch, transformers and sglang versions, so they are
never installed: the wheels are downloaded without dependencies (requirements-trainers.txt) and the
functions the data path goes through are run from the wheels' source:

- SpecForge ``specforge/data/prompt_builder.py`` (standard library only): the whole module, as
  ``prepare_prompt_tasks`` reads a pre-tokenized JSONL (``data.prompts_path``);
- speculators ``_passthrough_pretokenized``/``_append_row`` (``data_generation/preprocessing.py``), after
  ``datasets.load_dataset("json")`` as its ``load_raw_dataset`` does;
- SpecForge ``process_token_dict_to_mappings`` and speculators ``build_vocab_mappings_from_distribution``,
  on the counts their own counting code would make;
- with torch installed: the ``.pt`` files loaded as ``torch.load`` + ``load_vocab_mapping`` and
  ``torch.load(weights_only=True)`` do, and SpecForge's ``validate_vocab_mapping_consistency``.

Those modules also import torch, datasets or transformers at module level for other functions, so the
functions are taken out of the source by name. Without torch, ``torch.tensor``/``zeros``/``arange`` run as
their numpy equivalents (same dtypes: int64 for torch.long, bool). Training itself needs GPUs: these tests
stop at the last CPU step, the inputs each trainer's training loop reads.
"""

import ast
import collections
import json
import logging
import os
import re
import subprocess
import sys
import typing
import zipfile

import numpy as np
import pytest

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
import draftflow_data as dd  # noqa: E402
from draftflow_data import vocab as ddv  # noqa: E402

try:
    import torch

    HAVE_TORCH = True
except ImportError:
    torch = None
    HAVE_TORCH = False

MAX_LEN = 128


class _NumpyTorch:
    """The few torch calls of the extracted functions, as numpy (used only where torch is absent)."""

    long = np.int64
    bool = np.bool_
    Tensor = np.ndarray

    @staticmethod
    def tensor(x, dtype=None):
        return np.array(x, dtype=dtype)

    @staticmethod
    def arange(n, dtype=None):
        return np.arange(n, dtype=dtype)

    @staticmethod
    def zeros(n, dtype=None):
        return np.zeros(n, dtype=dtype)


def _source(wheel, member):
    with zipfile.ZipFile(wheel) as z:
        return z.read(member).decode("utf-8")


def _functions(wheel, member, names, **extra):
    """The named top-level functions of a wheel's module, compiled from its source."""
    src = _source(wheel, member)
    tree = ast.parse(src)
    nodes = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    assert {n.name for n in nodes} == set(names), f"{member} no longer defines {names}"
    ns = {"torch": torch if HAVE_TORCH else _NumpyTorch, "np": np, "Counter": collections.Counter,
          "log": logging.getLogger("speculators"), "logger": logging.getLogger("speculators"), **vars(typing)}
    ns.update(extra)
    exec(compile(ast.Module(body=nodes, type_ignores=[]), f"{wheel}!{member}", "exec"), ns)
    return [ns[n] for n in names]


def _module(wheel, member, name):
    import types

    mod = types.ModuleType(name)
    exec(compile(_source(wheel, member), f"{wheel}!{member}", "exec"), mod.__dict__)
    return mod


def _np(x):
    return x.numpy() if HAVE_TORCH and isinstance(x, torch.Tensor) else np.asarray(x)


@pytest.fixture(scope="module")
def run_a(sample):
    out, _ = sample
    m = dd.read_manifests(out)[0]
    return out, os.path.basename(m.run_dir), m


def _draftflow(bin_, *args):
    r = subprocess.run([bin_, *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stderr


def _report(stderr):
    m = re.search(r"rows: (\d+) read, (\d+) kept, (\d+) truncated, (\d+) dropped", stderr)
    assert m, stderr
    return tuple(int(x) for x in m.groups())


def _rows(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_export_needs_one_run(sample, draftflow_bin, tmp_path):
    out, _ = sample
    r = subprocess.run([draftflow_bin, "export", out, str(tmp_path / "x.jsonl")], capture_output=True, text=True)
    assert r.returncode != 0 and "--run" in r.stderr
    for m in dd.read_manifests(out):
        assert os.path.basename(m.run_dir) in r.stderr


def test_specforge_prompt_builder(run_a, draftflow_bin, trainer_wheels, tmp_path):
    out, name, m = run_a
    pb = _module(trainer_wheels["specforge"], "specforge/data/prompt_builder.py", "specforge_prompt_builder")

    def prepare(path):
        return pb.prepare_prompt_tasks(path, None, chat_template=None, max_length=MAX_LEN, is_preformatted=False,
                                       train_only_last_turn=False, cache_dir=None, cache_key=None, num_proc=None,
                                       min_loss_tokens=1)

    whole, cut = str(tmp_path / "whole.jsonl"), str(tmp_path / "cut.jsonl")
    _draftflow(draftflow_bin, "export", "--run", name, out, whole)
    rep = _report(_draftflow(draftflow_bin, "export", "--run", name, "--max-length", str(MAX_LEN), out, cut))
    ours = _rows(cut)
    # SpecForge cutting our whole rows gives exactly our cut rows: same rows kept, same tokens, same masks.
    theirs = prepare(whole)
    assert [t["payload"] for t in theirs] == [{"input_ids": r["input_ids"], "loss_mask": r["loss_mask"]} for r in ours]
    read, kept, truncated, dropped = rep
    assert read == m.totals["rows"] and kept == len(ours) == len(theirs) and read - kept == dropped
    assert truncated > 0
    # Our cut rows go through SpecForge unchanged.
    assert [t["payload"] for t in prepare(cut)] == [t["payload"] for t in theirs]


def test_speculators_prepare_data(run_a, draftflow_bin, trainer_wheels, tmp_path):
    datasets = pytest.importorskip("datasets")
    out, name, m = run_a
    _append_row, _warn_seq_length, passthrough = _functions(
        trainer_wheels["speculators"], "speculators/data_generation/preprocessing.py",
        ["_append_row", "_warn_seq_length", "_passthrough_pretokenized"])
    whole, cut = str(tmp_path / "whole.jsonl"), str(tmp_path / "cut.jsonl")
    _draftflow(draftflow_bin, "export", "--format", "speculators", "--run", name, out, whole)
    rep = _report(_draftflow(draftflow_bin, "export", "--format", "speculators", "--run", name,
                             "--max-length", str(MAX_LEN), "--min-loss-tokens", "3", out, cut))
    # load_raw_dataset: load_dataset("json", data_files=FILE); prepare-data then maps _preprocess_batch,
    # which hands pre-tokenized rows to _passthrough_pretokenized.
    raw = datasets.load_dataset("json", data_files=whole, split="train")
    assert raw.num_rows == m.totals["rows"] and {"input_ids", "loss_mask"} <= set(raw.column_names)
    res = passthrough(raw[:], MAX_LEN, 3)
    ours = _rows(cut)
    assert rep[1] == len(ours) == len(res["input_ids"]) and rep[0] == raw.num_rows
    for r, ids, mask, n in zip(ours, res["input_ids"], res["loss_mask"], res["seq_len"]):
        assert _np(ids).dtype == np.int64 and r["input_ids"] == _np(ids).tolist()
        assert r["loss_mask"] == _np(mask).tolist() and n == len(r["input_ids"])
    # Our cut rows pass through unchanged.
    again = passthrough(datasets.load_dataset("json", data_files=cut, split="train")[:], MAX_LEN, 3)
    assert [_np(x).tolist() for x in again["input_ids"]] == [r["input_ids"] for r in ours]


def _masked_counts(rows):
    """Generated-token counts as SpecForge's and speculators' counting loops make them (ids under loss 1),
    in first-appearance order (SpecForge's Counter keeps it)."""
    c = collections.Counter()
    for r in rows:
        ids, mask = np.asarray(r["input_ids"]), np.asarray(r["loss_mask"])
        unique, counts = np.unique(ids[mask == 1], return_counts=True)
        c.update(dict(zip(unique.tolist(), counts.tolist())))
    return c


@pytest.mark.parametrize("limits", [[], ["--max-length", str(MAX_LEN)]], ids=["sink-counts", "max-length"])
def test_vocab_maps_match_trainers(run_a, draftflow_bin, trainer_wheels, tmp_path, limits):
    out, name, m = run_a
    n, target = 64, 151_936
    vdir = str(tmp_path / "vocab")
    _draftflow(draftflow_bin, "vocab", out, "--run", name, "--draft-vocab-size", str(n), "--target-vocab-size",
               str(target), "--out", vdir, *limits)
    export = str(tmp_path / "rows.jsonl")
    _draftflow(draftflow_bin, "export", "--run", name, *limits, out, export)

    d2t, t2d = np.load(os.path.join(vdir, "d2t.npy")), np.load(os.path.join(vdir, "t2d.npy"))
    assert d2t.dtype == np.int64 and d2t.shape == (n,) and t2d.dtype == np.bool_ and t2d.shape == (target,)
    for f in ("d2t.npy", "t2d.npy"):  # byte for byte what np.save writes
        import io

        buf = io.BytesIO()
        np.save(buf, np.load(os.path.join(vdir, f)))
        assert buf.getvalue() == open(os.path.join(vdir, f), "rb").read()

    counts = ddv.read_token_counts(vdir)
    theirs = _masked_counts(_rows(export))
    assert counts == dict(theirs)
    if not limits:
        assert sum(counts.values()) == m.totals["completion_tokens"]

    (build,) = _functions(trainer_wheels["speculators"], "speculators/train/vocab_mapping.py",
                          ["build_vocab_mappings_from_distribution"])
    sd2t, st2d = build(token_freq_dict=dict(theirs), draft_vocab_size=n, target_vocab_size=target)
    assert np.array_equal(_np(sd2t), d2t) and np.array_equal(_np(st2d), t2d)

    (process,) = _functions(trainer_wheels["specforge"], "specforge/data/preprocessing.py",
                            ["process_token_dict_to_mappings"])
    fd2t, ft2d = process(collections.Counter(theirs), n, target)
    fd2t, ft2d = _np(fd2t), _np(ft2d)
    assert fd2t.dtype == np.int64 and ft2d.dtype == np.bool_ and ft2d.shape == (target,)
    ours_sel, their_sel = np.flatnonzero(t2d), np.flatnonzero(ft2d)
    assert np.array_equal(their_sel, fd2t + np.arange(n))
    # SpecForge breaks ties at the cut-off by first appearance: the selections agree up to equally counted ids.
    cutoff = min(theirs[i] for i in ours_sel)
    assert sorted(theirs[i] for i in ours_sel) == sorted(theirs[i] for i in their_sel)
    assert set(i for i in ours_sel if theirs[i] > cutoff) == set(i for i in their_sel if theirs[i] > cutoff)
    # What speculators' _load_mappings does: torch.from_numpy(np.load(...)), draft size = d2t.shape[0].
    d, t = ddv.read_maps(vdir)
    assert d.shape[0] == n and t.sum() == n


def test_torch_files(run_a, draftflow_bin, trainer_wheels, tmp_path):
    if not HAVE_TORCH:
        pytest.skip("torch is not installed (CI installs it): the .pt files need torch.save")
    out, name, _ = run_a
    n, target = 48, 151_936
    vdir = str(tmp_path / "vocab")
    _draftflow(draftflow_bin, "vocab", out, "--run", name, "--draft-vocab-size", str(n), "--target-vocab-size",
               str(target), "--out", vdir)
    subprocess.run([sys.executable, "-m", "draftflow_data.vocab", vdir], check=True,
                   cwd=os.path.join(os.path.dirname(__file__), ".."))
    # speculators: torch.load(token_freq_path, weights_only=True), then build_vocab_mappings_from_distribution.
    freq = torch.load(os.path.join(vdir, "token_freq.pt"), weights_only=True)
    assert freq == ddv.read_token_counts(vdir)
    (build,) = _functions(trainer_wheels["speculators"], "speculators/train/vocab_mapping.py",
                          ["build_vocab_mappings_from_distribution"])
    sd2t, st2d = build(token_freq_dict=freq, draft_vocab_size=n, target_vocab_size=target)
    # SpecForge: load_vocab_mapping copies into buffers t2d = ones(V, bool), d2t = zeros(N, int64).
    mapping = torch.load(os.path.join(vdir, "vocab_mapping.pt"))
    t2d_buf, d2t_buf = torch.ones(target, dtype=torch.bool), torch.zeros(n, dtype=torch.int64)
    t2d_buf.copy_(mapping["t2d"])
    d2t_buf.copy_(mapping["d2t"])
    assert mapping["d2t"].dtype == torch.int64 and mapping["t2d"].dtype == torch.bool
    assert torch.equal(d2t_buf, sd2t) and torch.equal(t2d_buf, st2d)
    (validate,) = _functions(trainer_wheels["specforge"], "specforge/core/compact_teacher.py",
                             ["validate_vocab_mapping_consistency"])
    validate(t2d_buf, d2t_buf)


@pytest.mark.parametrize("overlong", ["truncate", "drop"])
def test_loader_limits_match_export(run_a, draftflow_bin, tmp_path, overlong):
    """The Python loader with Limits yields exactly the rows `draftflow export` writes with the same options,
    and reports the same counts."""
    out, name, m = run_a
    cut = str(tmp_path / "cut.jsonl")
    rep = _report(_draftflow(draftflow_bin, "export", "--run", name, "--max-length", str(MAX_LEN),
                             "--overlong", overlong, "--min-loss-tokens", "3", out, cut))
    ours = _rows(cut)
    limits = dd.Limits(max_length=MAX_LEN, overlong=overlong, min_loss_tokens=3)
    report = dd.LimitReport(limits)
    got = list(dd.iter_rows(out, runs=[name], columns=("id", "input_ids", "loss_mask"), limits=limits, report=report))
    assert sorted((r["id"], r["input_ids"].tolist(), r["loss_mask"].tolist()) for r in got) == \
        sorted((r["id"], r["input_ids"], r["loss_mask"]) for r in ours)
    assert all(set(r) == {"id", "input_ids", "loss_mask"} for r in got)  # prompt_len read for the rule, not returned
    assert (report.rows, report.kept, report.truncated, report.dropped_overlong + report.dropped_loss) == rep
    assert str(report).startswith("rows: %d read, %d kept, %d truncated, %d dropped" % rep)
    with pytest.raises(ValueError):
        dd.Limits(overlong="clip")
