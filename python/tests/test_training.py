"""A drafter trained from draftflow rows plus target features by SpecForge 0.2.0's own trainer, on the CPU.

``make test-train`` runs this (DRAFTFLOW_TRAIN=1); without it the training test is skipped, as it takes
minutes and pins both cores. The harness (docs/training.md):

- the trainer venv of ``deploy/specforge/specforge.sh install`` (SpecForge 0.2.0, speculators 0.9.0,
  accelerate, pinned with hashes, over the SGLang venv's torch and transformers);
- a 4-layer random-weight Qwen3-shaped target (``deploy/sglang/make_model.py --layers 4 --head-std 0.2
  --embed-std 1.0``: SpecForge's default EAGLE-3 layers ``[1, L//2-1, L-4]`` need at least 4 layers, and
  with the default std 0.02 the target's next token is a near-flat, chaotic function of the context that a
  drafter does not learn in 100 steps; docs/training.md has the measurements);
- ``standin_capture.py``: the STAND-IN for draftflow's capture (a transformers greedy generation and forward
  pass writing rows + the feature interchange), until the capture from the live server exists;
- ``draftflow_data.offline``: the exports to SpecForge's v1 files and speculators' layout, the latter read
  back with speculators' own ``ArrowDataset``;
- ``deploy/specforge/cpu_train.py``: ``specforge train`` (offline) and ``specforge export --to sglang`` with
  the CPU substitutions.

The exporter's checks run without the flag wherever torch and safetensors are importable.
"""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "python"))

TRAIN_ROWS, EVAL_ROWS, NEW_TOKENS = 64, 16, 48
STEPS, EVAL_INTERVAL = 100, 10
DRAFT_VOCAB = 2048


def _run(argv, timeout, env=None, **kw):
    e = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"), PYTHONPATH=os.path.join(REPO, "python"))
    e.update(env or {})
    r = subprocess.run(argv, cwd=REPO, env=e, capture_output=True, text=True, timeout=timeout, **kw)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, argv[:3]))} ... exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}")
    return r


# --- the exporter on its own (needs torch + safetensors, not the trainer venv) -------------------------------

def _write_interchange(tmp_path, rows, H=8, bad=None):
    """rows: (id, turn, input_ids, loss_mask); writes rows.jsonl and features/ (random features, seeded)."""
    torch = pytest.importorskip("torch")
    st = pytest.importorskip("safetensors.torch")
    fdir = tmp_path / "features"
    fdir.mkdir()
    with open(tmp_path / "rows.jsonl", "w") as rf, open(fdir / "index.jsonl", "w") as xf:
        for n, (rid, turn, ids, mask) in enumerate(rows):
            g = torch.Generator().manual_seed(n)
            feats = torch.randn((len(ids), 4, H), generator=g)
            fids = torch.tensor(np.asarray(ids, dtype=np.int64))
            if bad == ("ids", rid, turn):
                fids = fids.clone()
                fids[1] += 1
            if bad == ("len", rid, turn):
                feats = feats[:-1]
            st.save_file({"features": feats, "input_ids": fids}, str(fdir / f"{n}.safetensors"))
            rf.write(json.dumps({"id": rid, "turn": turn, "input_ids": list(map(int, ids)),
                                 "loss_mask": list(map(int, mask))}) + "\n")
            if bad != ("missing", rid, turn):
                xf.write(json.dumps({"id": rid, "turn": turn, "file": f"{n}.safetensors"}) + "\n")
    return str(tmp_path / "rows.jsonl"), str(fdir)


# Two turns of one conversation share its id: a row is (id, turn).
ROWS = [("a", 0, [5, 6, 7, 8], [0, 0, 1, 1]), ("a", 1, [5, 6, 7, 8, 9, 10, 11], [0, 0, 1, 1, 0, 1, 1]),
        ("b", 0, [9, 10, 11], [0, 1, 1])]


def _check_v1(torch, out, fdir, rows):
    st = pytest.importorskip("safetensors.torch")
    for n, (rid, turn, ids, mask) in enumerate(rows):
        rec = torch.load(os.path.join(out, f"data_{n:08d}.ckpt"), weights_only=True)
        src = st.load_file(os.path.join(fdir, f"{n}.safetensors"))["features"]
        T = len(ids)
        assert rec["input_ids"].dtype == torch.int64 and rec["input_ids"].tolist() == list(ids), (rid, turn)
        assert rec["loss_mask"].tolist() == list(mask), (rid, turn)
        assert torch.equal(rec["hidden_state"], src[:, 3]), (rid, turn)
        assert rec["aux_hidden_state"].shape == (T, 3 * src.shape[2])
        assert torch.equal(rec["aux_hidden_state"].reshape(T, 3, -1), src[:, :3]), (rid, turn)


def test_specforge_v1_layout(tmp_path):
    torch = pytest.importorskip("torch")
    from draftflow_data import offline as df

    rows, fdir = _write_interchange(tmp_path, ROWS)
    assert df.export_specforge(rows, fdir, str(tmp_path / "v1"), dtype="float32") == len(ROWS)
    _check_v1(torch, str(tmp_path / "v1"), fdir, ROWS)


def test_specforge_v1_from_shards(sample, tmp_path):
    """The rows read from real shards (the Go sink's, via iter_rows), features keyed by (id, turn)."""
    torch = pytest.importorskip("torch")
    import draftflow_data as dd
    from draftflow_data import offline as df

    out, _ = sample
    run = sorted(m.run_dir for m in dd.read_manifests(out))[0]
    rows = [(r["id"], int(r["turn"]), r["input_ids"], r["loss_mask"])
            for r in dd.iter_rows(os.path.join(out, run), columns=("id", "turn", "input_ids", "loss_mask"))][:12]
    _, fdir = _write_interchange(tmp_path, rows)
    # Features for rows the export must not find are an error: give exactly the first 12 of a run of 12+.
    full = list(dd.iter_rows(os.path.join(out, run), columns=("id",)))
    if len(full) > 12:
        with pytest.raises(df.FeatureError, match="has no features"):
            df.export_specforge(os.path.join(out, run), fdir, str(tmp_path / "v1-all"))
    sub = tmp_path / "sub.jsonl"
    with open(sub, "w") as fh:
        for rid, turn, ids, mask in rows:
            fh.write(json.dumps({"id": rid, "turn": turn, "input_ids": [int(x) for x in ids],
                                 "loss_mask": [int(x) for x in mask]}) + "\n")
    assert df.export_specforge(str(sub), fdir, str(tmp_path / "v1"), dtype="float32") == 12
    _check_v1(torch, str(tmp_path / "v1"), fdir, rows)


@pytest.mark.parametrize("bad,msg", [(("missing", "b", 0), "row 'b' has no features"),
                                     (("ids", "a", 1), "row 'a' turn 1: the feature file's input_ids differ"),
                                     (("len", "b", 0), r"row 'b': features of shape \(2, 4, 8\), want \[3, 4, H\]")])
def test_export_rejects_bad_features(tmp_path, bad, msg):
    from draftflow_data import offline as df

    rows, fdir = _write_interchange(tmp_path, ROWS, bad=bad)
    with pytest.raises(df.FeatureError, match=msg):
        df.export_specforge(rows, fdir, str(tmp_path / "v1"))


# --- the training run (DRAFTFLOW_TRAIN=1) --------------------------------------------------------------------

needs_train = pytest.mark.skipif(not os.environ.get("DRAFTFLOW_TRAIN"), reason="DRAFTFLOW_TRAIN=1 (make test-train) runs it")


@pytest.fixture(scope="module")
def venv_python():
    r = _run(["bash", "deploy/specforge/specforge.sh", "python"], timeout=1800)
    return r.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def target(venv_python, tmp_path_factory):
    tok = _run(["bash", "internal/testassets/fetch.sh", "qwen3"], timeout=600).stdout.strip().splitlines()[-1]
    out = str(tmp_path_factory.mktemp("target") / "qwen3-4l")
    _run([venv_python, "deploy/sglang/make_model.py", "--family", "qwen3", "--layers", "4", "--head-std", "0.2",
          "--embed-std", "1.0", "--tokenizer-dir", tok, "--out", out], timeout=600)
    return out


def _draft_config(target, path):
    """A 1-layer LlamaForCausalLMEagle3 draft of the target's width, draft vocabulary DRAFT_VOCAB."""
    with open(os.path.join(target, "config.json")) as fh:
        t = json.load(fh)
    L = t["num_hidden_layers"]
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": t["hidden_size"],
        "intermediate_size": t["intermediate_size"], "num_hidden_layers": 1,
        "num_attention_heads": t["num_attention_heads"], "num_key_value_heads": t["num_key_value_heads"],
        "head_dim": t["head_dim"], "hidden_act": "silu", "max_position_embeddings": t["max_position_embeddings"],
        "rms_norm_eps": t["rms_norm_eps"], "rope_theta": (t.get("rope_parameters") or {}).get("rope_theta", t.get("rope_theta")),
        "vocab_size": t["vocab_size"], "draft_vocab_size": DRAFT_VOCAB, "tie_word_embeddings": False,
        "pad_token_id": 0, "bos_token_id": t["bos_token_id"], "eos_token_id": t["eos_token_id"],
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, L // 2 - 1, L - 4]},
    }
    with open(path, "w") as fh:
        json.dump(cfg, fh, indent=1)
    return path


# SpecForge's console line after each evaluation: "step N: {'eval/avg_loss': ..., 'eval/avg_acc': A, ...}".
_EVAL = re.compile(r"'eval/avg_acc': ([0-9.eE+-]+)")


@needs_train
def test_specforge_trains_offline_on_cpu(venv_python, target, tmp_path):
    # Rows and features: the stand-in capture, train and eval conversations disjoint.
    cap_train, cap_eval = tmp_path / "cap-train", tmp_path / "cap-eval"
    conv = os.path.join(REPO, "testdata", "sample", "conversations.jsonl")
    for out, first, count in ((cap_train, 0, TRAIN_ROWS), (cap_eval, TRAIN_ROWS, EVAL_ROWS)):
        _run([venv_python, "python/tests/standin_capture.py", "--model", target, "--conversations", conv,
              "--first", str(first), "--count", str(count), "--new-tokens", str(NEW_TOKENS), "--out", str(out)], timeout=900)
    ids = lambda d: {json.loads(line)["id"] for line in open(d / "rows.jsonl")}  # noqa: E731
    assert len(ids(cap_train)) == TRAIN_ROWS and len(ids(cap_eval)) == EVAL_ROWS
    assert not ids(cap_train) & ids(cap_eval)

    # The exports.
    for cap, name in ((cap_train, "v1-train"), (cap_eval, "v1-eval")):
        _run([venv_python, "-m", "draftflow_data.offline", "specforge", "--rows", str(cap / "rows.jsonl"),
              "--features", str(cap / "features"), "--out", str(tmp_path / name)], timeout=600)
    spec = tmp_path / "speculators-train"
    _run([venv_python, "-m", "draftflow_data.offline", "speculators", "--rows", str(cap_train / "rows.jsonl"),
          "--features", str(cap_train / "features"), "--out", str(spec), "--target", target], timeout=600)
    # speculators' own offline dataset reads it back: every row, no generation fallback.
    check = _run([venv_python, "-c", SPECULATORS_CHECK, str(spec), str(cap_train / "rows.jsonl")], timeout=600)
    assert f"speculators rows {TRAIN_ROWS}" in check.stdout, check.stdout

    # SpecForge's own trainer, offline, on the CPU.
    target_sf = _run([venv_python, "deploy/specforge/cpu_train.py", "target", "--model", target, "--out",
                      str(tmp_path / "target-sf")], timeout=120).stdout.strip().splitlines()[-1]
    draft = _draft_config(target, str(tmp_path / "draft.json"))
    out = tmp_path / "run"
    cfg = {
        "run_id": "draftflow-cpu", "output_dir": str(out),
        "model": {"target_model_path": target_sf, "draft_model_config": draft, "torch_dtype": "bfloat16"},
        "data": {"hidden_states_path": str(tmp_path / "v1-train"), "eval_hidden_states_path": str(tmp_path / "v1-eval"),
                 "max_length": 2048, "cache_dir": str(tmp_path / "cache"), "dataloader_num_workers": 0},
        "training": {"max_steps": STEPS, "num_epochs": 2, "batch_size": 1, "learning_rate": 2e-3, "lr_scheduler": "constant",
                     "warmup_ratio": 0.0, "fsdp_sharding": "NO_SHARD", "attention_backend": "sdpa",
                     "eval_interval": EVAL_INTERVAL, "log_interval": 10, "save_interval": STEPS},
        "deployment": {"mode": "local_colocated"},
    }
    with open(tmp_path / "train.json", "w") as fh:
        json.dump(cfg, fh, indent=1)
    r = _run([venv_python, "deploy/specforge/cpu_train.py", "train", "-c", str(tmp_path / "train.json")], timeout=1500)
    log = r.stdout + r.stderr
    with open(tmp_path / "train.log", "w") as fh:
        fh.write(log)
    accs = [float(x) for x in _EVAL.findall(log)]
    print(f"eval acc over {STEPS} steps: {accs}")
    assert len(accs) >= 2, f"no eval accuracy in SpecForge's output:\n{log[-4000:]}"
    assert accs[-1] >= accs[0] + 0.1, f"eval accuracy {accs[0]:.3f} -> {accs[-1]:.3f}: the drafter did not learn"

    # SpecForge's own export to an SGLang draft.
    sg = tmp_path / "draft-sglang"
    _run([venv_python, "deploy/specforge/cpu_train.py", "export", "--to", "sglang", "--checkpoint", str(out),
          "--draft-config", draft, "--output-dir", str(sg)], timeout=600)
    with open(sg / "config.json") as fh:
        assert json.load(fh)["architectures"] == ["LlamaForCausalLMEagle3"]
    keys = _run([venv_python, "-c", "import sys, glob; from safetensors import safe_open; "
                 "print(sorted(k for f in glob.glob(sys.argv[1] + '/*.safetensors') for k in safe_open(f, 'pt').keys()))",
                 str(sg)], timeout=120).stdout
    for k in ("fc.weight", "lm_head.weight", "d2t", "t2d", "norm.weight"):
        assert f"'{k}'" in keys, keys


SPECULATORS_CHECK = r"""
import json, sys, torch
from speculators.train.data import ArrowDataset
out, rows = sys.argv[1], sys.argv[2]
ds = ArrowDataset(max_len=4096, datapath=out, on_missing="raise")
want = [json.loads(l) for l in open(rows)]
assert len(ds) == len(want), (len(ds), len(want))
for i, w in enumerate(want):
    s = ds[i]
    assert s["input_ids"].tolist() == w["input_ids"], i
    assert s["loss_mask"].tolist() == w["loss_mask"], i
    T = len(w["input_ids"])
    assert tuple(s["hidden_states"].shape)[0] == T and tuple(s["verifier_last_hidden_states"].shape)[0] == T, i
print("speculators rows", len(ds))
"""


def test_specforge_v1_from_draftflow_feature_files(tmp_path):
    """draftflow's own feature files (the real Go writer, sink/features) as --features: the v1 dicts equal
    FeatureFile.specforge_v1's; a row with non-finite values and a missing row are refused by name."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("pyarrow")
    import shutil

    from draftflow_data import offline as df
    from draftflow_data.features import FeatureFile

    if shutil.which("go") is None:
        pytest.skip("go is not on PATH; cannot write feature files")
    out = tmp_path / "dff"
    subprocess.run(["go", "run", "./sink/features/internal/mkfeatures", "-out", str(out)], cwd=REPO, check=True, timeout=600)
    ff = FeatureFile(str(out / "zstd-planes.dff"))
    feats = tmp_path / "one"
    feats.mkdir()
    shutil.copy(out / "zstd-planes.dff", feats / "shard-0.dff")
    rng = np.random.default_rng(3)
    rows = []
    for r in ff.rows:
        T = r["tokens"]
        rows.append({"id": r["id"], "input_ids": rng.integers(0, 1000, T).tolist(), "loss_mask": [0] + [1] * (T - 1)})

    def write(rs):
        with open(tmp_path / "rows.jsonl", "w") as fh:
            for r in rs:
                fh.write(json.dumps(r) + "\n")
        return str(tmp_path / "rows.jsonl")

    bad = [r for r in rows if not np.isfinite(ff.read(r["id"])).all()]
    good = [r for r in rows if r not in bad]
    assert bad and good
    with pytest.raises(df.FeatureError, match=f"row {bad[0]['id']!r}: features hold non-finite values"):
        df.export_specforge(write(rows), str(feats), str(tmp_path / "v1-bad"))
    with pytest.raises(df.FeatureError, match="feature rows have no row"):
        df.export_specforge(write(good[:-1]), str(feats), str(tmp_path / "v1-short"))
    # The Go writer's sample always holds a non-finite row, so the finite rows are compared one by one, through
    # the same reader the export uses, against the capture's own SpecForge v1 builder.
    for r in good:
        ref = ff.specforge_v1(r["id"], r["input_ids"], r["loss_mask"])
        arr = df.load_features((ff, ff._by_id[r["id"]]), {"id": r["id"], "turn": 0, "input_ids": np.asarray(r["input_ids"])})
        assert torch.equal(arr[:, 3], ref["hidden_state"]), r["id"]
        assert torch.equal(arr[:, :3].reshape(arr.shape[0], -1), ref["aux_hidden_state"]), r["id"]
    # Feature files key rows by (id, turn), as the shards do: a turn the files do not hold is named.
    twice = [dict(r, turn=0) for r in good] + [dict(good[0], turn=1)]
    with pytest.raises(df.FeatureError, match=f"row {good[0]['id']!r} turn 1 has no features"):
        df.export_specforge(write(twice), str(feats), str(tmp_path / "v1-twice"))
