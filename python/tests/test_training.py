"""A drafter trained by SpecForge 0.2.0's own trainer, on the CPU, from what ``draftflow run`` captured on the live
SGLang server.

``make test-train`` runs this (DRAFTFLOW_TRAIN=1); without it the training test is skipped, as it takes
minutes and pins both cores. The path (docs/training.md):

- the trainer venv of ``deploy/specforge/specforge.sh install`` (SpecForge 0.2.0, speculators 0.9.0,
  accelerate, pinned with hashes, over the SGLang venv's torch and transformers);
- a 4-layer random-weight Qwen3-shaped target (``deploy/sglang/make_model.py --layers 4 --head-std 0.2
  --embed-std 1.0``: with the default std 0.02 the target's next token is a near-flat, chaotic function of the
  context that a drafter does not learn in 100 steps; docs/training.md has the measurements);
- two live SGLang 0.5.23 servers of that target (``deploy/sglang/sglang.sh up``): an aux-capture server and a
  final-state server that also serves the generation;
- ``draftflow run`` with ``--capture-aux``/``--capture-final`` (embedded broker, temperature 0), once for the
  training conversations and once for other, evaluation conversations;
- ``draftflow vocab`` and ``python -m draftflow_data.vocab`` (the draft vocabulary SpecForge trains with);
- ``draftflow_data.offline``: the exports to SpecForge's v1 files and speculators' layout from the runs' shards
  and feature files, the latter read back with speculators' own ``ArrowDataset``;
- the servers stopped, then ``deploy/specforge/cpu_train.py``: ``specforge train`` (offline) and
  ``specforge export --to sglang`` with the CPU substitutions.

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

# The conversations: the bundled sample's lines of at most MAX_LINE_BYTES bytes (short prompts keep the CPU's
# generation, capture and training small), in file order; the first TRAIN_CONVS train, the next EVAL_CONVS
# evaluate. Lines draftflow rejects (malformed, or refused by the chat template) make no row.
TRAIN_CONVS, EVAL_CONVS, MAX_LINE_BYTES = 60, 16, 1500
NEW_TOKENS = 48
# Training steps (batch 1) and evaluations. The rows' order in the shards follows generation's finishing order,
# so SpecForge sees them in another order each run and the curve varies: measured over four orders of the same
# 55 rows, eval accuracy at 100 steps went from 0.14-0.25 at step 10 (0.15-0.18 at step 5) to 0.34-0.41, the
# rise as low as 0.135; at 150 steps the two lowest ended at 0.43 and 0.45 (rise 0.27-0.28 from step 5).
STEPS, EVAL_INTERVAL = 150, 5
DRAFT_VOCAB = 2048
# The EAGLE-3 layers of the 4-layer target: the outputs of decoder layers 0, 1, 2 (= the inputs of layers 1, 2,
# 3). The trainers' and SGLang's defaults are not three distinct layers at 4 layers (SpecForge [1, L//2-1, L-4]
# = [1, 1, 0]; SGLang captures the inputs of [2, L//2, L-3] = [2, 2, 1] and silently keeps fewer than three),
# so the layers are named everywhere: the aux server's --return-aux-hidden-state-layer-ids (SGLang's ids:
# outputs), draftflow's --capture-aux-layers (inputs: the ids + 1, the feature files' "aux:N" names) and the
# draft config's eagle_aux_hidden_state_layer_ids (what SGLang reads when it serves the draft).
AUX_LAYER_IDS = [0, 1, 2]
# Both capture modes need every position of a prefill (--disable-radix-cache: cached positions are not
# returned; docs/hidden-states.md). sglang.sh adds --sleep-on-idle: without it an idle SGLang 0.5.23 scheduler
# spins a core at 100%, and with two servers on two cores the busy one decodes 4-15x slower (measured: 16
# requests of 48 tokens in 44 s instead of 2.8 s; the training run's draftflow run 2 min 17 s instead of 21 s).
SERVER_COMMON = ["--disable-radix-cache", "--context-length", "2048"]
AUX_SERVER = ["--enable-return-aux-hidden-states", "--speculative-algorithm", "EAGLE3",
              "--return-aux-hidden-state-layer-ids", *map(str, AUX_LAYER_IDS)] + SERVER_COMMON
# The final-state server also serves the generation: requests without return_hidden_states get plain answers,
# and the two servers are all this machine holds at once (~5.4 GB each).
FINAL_SERVER = ["--enable-return-hidden-states"] + SERVER_COMMON
POOL = 8192


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


class Servers:
    """Live SGLang servers started with deploy/sglang/sglang.sh, their state (pid, url, log) in a directory of
    the test's own so that names do not meet other servers on the machine."""

    def __init__(self, state):
        self.state = str(state)
        self.names = []

    def _sh(self, *args):
        env = dict(os.environ, DRAFTFLOW_SGLANG_DIR=self.state, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"))
        return ["bash", os.path.join(REPO, "deploy", "sglang", "sglang.sh"), *args], env

    def up(self, model, specs):
        """Starts every (name, server args) at once; returns their URLs in order."""
        procs = []
        for name, args in specs:
            argv, env = self._sh("up", "--name", name, "--pool", str(POOL), "--model", model, "--", *args)
            self.names.append(name)
            procs.append(subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        urls = []
        for (name, _), p in zip(specs, procs):
            out, err = p.communicate(timeout=600)
            if p.returncode != 0:
                raise AssertionError(f"sglang.sh up --name {name} exited {p.returncode}:\n{err[-4000:]}")
            urls.append(out.strip().splitlines()[-1])
        return urls

    def down(self):
        for name in self.names:
            argv, env = self._sh("down", "--name", name)
            subprocess.run(argv, cwd=REPO, env=env, capture_output=True, timeout=120)
        for name in self.names:
            argv, env = self._sh("status", "--name", name)
            r = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
            assert r.stdout.strip() == "down", f"server {name} still up after down: {r.stdout}"

    def log_tails(self, n=40):
        out = []
        for name in self.names:
            path = os.path.join(self.state, name, "log")
            if os.path.exists(path):
                with open(path, errors="replace") as fh:
                    out.append(f"--- {path}\n" + "".join(fh.readlines()[-n:]))
        return "\n".join(out)


def _conversations(tmp_path):
    """Writes train.jsonl and eval.jsonl: disjoint slices of the bundled sample's short lines."""
    with open(os.path.join(REPO, "testdata", "sample", "conversations.jsonl"), "rb") as fh:
        lines = [line for line in fh if len(line) <= MAX_LINE_BYTES]
    assert len(lines) >= TRAIN_CONVS + EVAL_CONVS, len(lines)
    paths = {}
    for name, part in (("train", lines[:TRAIN_CONVS]), ("eval", lines[TRAIN_CONVS:TRAIN_CONVS + EVAL_CONVS])):
        paths[name] = tmp_path / f"{name}.jsonl"
        paths[name].write_bytes(b"".join(part))
    return paths


def _draft_config(target, path):
    """A 1-layer LlamaForCausalLMEagle3 draft of the target's width, draft vocabulary DRAFT_VOCAB."""
    with open(os.path.join(target, "config.json")) as fh:
        t = json.load(fh)
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": t["hidden_size"],
        "intermediate_size": t["intermediate_size"], "num_hidden_layers": 1,
        "num_attention_heads": t["num_attention_heads"], "num_key_value_heads": t["num_key_value_heads"],
        "head_dim": t["head_dim"], "hidden_act": "silu", "max_position_embeddings": t["max_position_embeddings"],
        "rms_norm_eps": t["rms_norm_eps"], "rope_theta": (t.get("rope_parameters") or {}).get("rope_theta", t.get("rope_theta")),
        "vocab_size": t["vocab_size"], "draft_vocab_size": DRAFT_VOCAB, "tie_word_embeddings": False,
        "pad_token_id": 0, "bos_token_id": t["bos_token_id"], "eos_token_id": t["eos_token_id"],
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": AUX_LAYER_IDS},
    }
    with open(path, "w") as fh:
        json.dump(cfg, fh, indent=1)
    return path


# SpecForge's console line after each evaluation: "step N: {'eval/avg_loss': ..., 'eval/avg_acc': A, ...}".
_EVAL = re.compile(r"'eval/avg_acc': ([0-9.eE+-]+)")


def _captured_run(out):
    """The one run directory draftflow wrote into out, its rows, and its feature files checked: every row has
    its features, in the aux layers the server was started with."""
    import draftflow_data as dd
    from draftflow_data.features import RunFeatures

    manifests = dd.read_manifests(str(out))
    assert len(manifests) == 1, [m.run_dir for m in manifests]
    run = manifests[0].run_dir
    rows = list(dd.iter_rows(run, columns=("id", "turn", "input_ids", "loss_mask", "completion_len")))
    feats = RunFeatures(run)
    assert feats.shards() == sorted(s["file"] for s in manifests[0].shards), (feats.shards(), manifests[0].shards)
    assert not feats.missing(), f"rows without features: {feats.missing()}"
    for shard in feats.shards():
        ff = feats.file(shard)
        assert ff.layers == [f"aux:{i + 1}" for i in AUX_LAYER_IDS] + ["final"] and ff.hidden == 256, (shard, ff.layers, ff.hidden)
    for r in rows:  # the loss mask covers the generated reply
        n = int(r["completion_len"])
        assert 0 < n <= NEW_TOKENS and n == int(np.asarray(r["loss_mask"], dtype=np.int64).sum()), (r["id"], n)
    return run, rows


@needs_train
def test_specforge_trains_offline_on_cpu(venv_python, target, draftflow_bin, tmp_path):
    import time

    t0 = time.monotonic()
    phases = {}
    convs = _conversations(tmp_path)
    servers = Servers(tmp_path / "sglang")
    try:
        aux, final = servers.up(target, [("train-aux", AUX_SERVER), ("train-final", FINAL_SERVER)])
        phases["servers up"] = time.monotonic() - t0
        # draftflow on the live servers: generation on the final-state server at temperature 0, both captures,
        # the embedded broker; the training and the evaluation conversations in runs of their own.
        for name in ("train", "eval"):
            t = time.monotonic()
            r = _run([draftflow_bin, "run", "--input", str(convs[name]), "--model", target, "--sglang", final,
                      "--capture-aux", aux, "--capture-final", final,
                      "--capture-aux-layers", ",".join(str(i + 1) for i in AUX_LAYER_IDS),
                      "--temperature", "0", "--max-new-tokens", str(NEW_TOKENS), "--out", str(tmp_path / f"out-{name}"),
                      "--timeout", "10m"], timeout=900)
            phases[f"draftflow run ({name})"] = time.monotonic() - t
            summary = r.stdout + r.stderr
            print(summary[summary.rfind("draftflow run: shards"):].strip())
            _run([draftflow_bin, "inspect", str(tmp_path / f"out-{name}")], timeout=300)
    except BaseException:
        print(servers.log_tails())
        raise
    finally:
        servers.down()  # before any training: the trainer runs with the servers stopped
    run_train, rows_train = _captured_run(tmp_path / "out-train")
    run_eval, rows_eval = _captured_run(tmp_path / "out-eval")
    train_ids, eval_ids = {r["id"] for r in rows_train}, {r["id"] for r in rows_eval}
    print(f"rows: {len(rows_train)} train ({sum(len(r['input_ids']) for r in rows_train)} tokens), "
          f"{len(rows_eval)} eval ({sum(len(r['input_ids']) for r in rows_eval)} tokens)")
    assert len(rows_train) >= 40 and len(rows_eval) >= 10, (len(rows_train), len(rows_eval))
    assert not train_ids & eval_ids, f"evaluation rows of training conversations: {sorted(train_ids & eval_ids)[:5]}"

    # The draft vocabulary from the training run's generated tokens, and the exports.
    t = time.monotonic()
    vocab = tmp_path / "vocab"
    _run([draftflow_bin, "vocab", str(tmp_path / "out-train"), "--draft-vocab-size", str(DRAFT_VOCAB), "--model", target,
          "--out", str(vocab)], timeout=300)
    _run([venv_python, "-m", "draftflow_data.vocab", str(vocab)], timeout=300)
    for run, name in ((run_train, "v1-train"), (run_eval, "v1-eval")):
        _run([venv_python, "-m", "draftflow_data.offline", "specforge", "--rows", run, "--features", run,
              "--out", str(tmp_path / name)], timeout=600)
    spec = tmp_path / "speculators-train"
    _run([venv_python, "-m", "draftflow_data.offline", "speculators", "--rows", run_train, "--features", run_train,
          "--out", str(spec), "--target", target], timeout=600)
    # speculators' own offline dataset reads it back: every row, no generation fallback.
    check = _run([venv_python, "-c", SPECULATORS_CHECK, str(spec), run_train], timeout=600)
    assert f"speculators rows {len(rows_train)}" in check.stdout, check.stdout
    phases["vocab + exports"] = time.monotonic() - t
    size = lambda d, ext: sum(os.path.getsize(os.path.join(d, n)) for n in os.listdir(d) if n.endswith(ext))  # noqa: E731
    train_tokens = sum(len(r["input_ids"]) for r in rows_train)
    print(f"bytes per token: draftflow feature files {size(run_train, '.dff') / train_tokens:.0f}, "
          f"SpecForge v1 files (bf16) {size(tmp_path / 'v1-train', '.ckpt') / train_tokens:.0f}")

    # SpecForge's own trainer, offline, on the CPU, with draftflow's draft vocabulary.
    t = time.monotonic()
    target_sf = _run([venv_python, "deploy/specforge/cpu_train.py", "target", "--model", target, "--out",
                      str(tmp_path / "target-sf")], timeout=120).stdout.strip().splitlines()[-1]
    draft = _draft_config(target, str(tmp_path / "draft.json"))
    out = tmp_path / "run"
    cfg = {
        "run_id": "draftflow-cpu", "output_dir": str(out),
        "model": {"target_model_path": target_sf, "draft_model_config": draft, "torch_dtype": "bfloat16",
                  "vocab_mapping_path": str(vocab / "vocab_mapping.pt")},
        "data": {"hidden_states_path": str(tmp_path / "v1-train"), "eval_hidden_states_path": str(tmp_path / "v1-eval"),
                 "max_length": 2048, "cache_dir": str(tmp_path / "cache"), "dataloader_num_workers": 0},
        "training": {"max_steps": STEPS, "num_epochs": -(-STEPS // len(rows_train)), "batch_size": 1, "learning_rate": 2e-3, "lr_scheduler": "constant",
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
    phases["specforge train"] = time.monotonic() - t
    accs = [float(x) for x in _EVAL.findall(log)]
    print(f"eval acc over {STEPS} steps: {accs}")
    assert len(accs) >= 2, f"no eval accuracy in SpecForge's output:\n{log[-4000:]}"
    assert accs[-1] >= accs[0] + 0.1, f"eval accuracy {accs[0]:.3f} -> {accs[-1]:.3f}: the drafter did not learn"

    # SpecForge's own export to an SGLang draft, carrying draftflow's vocabulary maps.
    t = time.monotonic()
    sg = tmp_path / "draft-sglang"
    _run([venv_python, "deploy/specforge/cpu_train.py", "export", "--to", "sglang", "--checkpoint", str(out),
          "--draft-config", draft, "--output-dir", str(sg)], timeout=600)
    with open(sg / "config.json") as fh:
        dcfg = json.load(fh)
    assert dcfg["architectures"] == ["LlamaForCausalLMEagle3"], dcfg
    assert dcfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == AUX_LAYER_IDS, dcfg
    keys = _run([venv_python, "-c", DRAFT_CHECK, str(sg), str(vocab)], timeout=120).stdout
    for k in ("fc.weight", "lm_head.weight", "d2t", "t2d", "norm.weight"):
        assert f"'{k}'" in keys, keys
    assert "maps equal" in keys, keys
    phases["specforge export"] = time.monotonic() - t
    print("phases (s): " + ", ".join(f"{k} {v:.1f}" for k, v in phases.items()) + f"; total {time.monotonic() - t0:.1f}")


# The exported draft's tensors, and its d2t/t2d against draftflow vocab's.
DRAFT_CHECK = r"""
import glob, sys, numpy as np
from safetensors import safe_open
t = {}
for f in glob.glob(sys.argv[1] + '/*.safetensors'):
    with safe_open(f, 'pt') as st:
        t.update({k: st.get_tensor(k) for k in st.keys()})
print(sorted(t))
d2t, t2d = np.load(sys.argv[2] + '/d2t.npy'), np.load(sys.argv[2] + '/t2d.npy')
assert np.array_equal(t['d2t'].numpy(), d2t) and np.array_equal(t['t2d'].numpy(), t2d), 'draft maps differ from draftflow vocab'
print('maps equal')
"""

SPECULATORS_CHECK = r"""
import sys, torch
from draftflow_data import iter_rows
from speculators.train.data import ArrowDataset
out, run = sys.argv[1], sys.argv[2]
ds = ArrowDataset(max_len=4096, datapath=out, on_missing="raise")
want = list(iter_rows(run, columns=("id", "turn", "input_ids", "loss_mask")))
assert len(ds) == len(want), (len(ds), len(want))
for i, w in enumerate(want):
    s = ds[i]
    assert s["input_ids"].tolist() == w["input_ids"].tolist(), i
    assert s["loss_mask"].tolist() == w["loss_mask"].tolist(), i
    T = len(w["input_ids"])
    assert tuple(s["hidden_states"].shape)[0] == T and tuple(s["verifier_last_hidden_states"].shape)[0] == T, i
print("speculators rows", len(ds))
"""


def test_specforge_v1_from_draftflow_feature_files(tmp_path):
    """draftflow's own feature files (the real Go writer, shard/features) as --features: the v1 dicts equal
    FeatureFile.specforge_v1's; a row with non-finite values and a missing row are refused by name."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("pyarrow")
    import shutil

    from draftflow_data import offline as df
    from draftflow_data.features import FeatureFile

    if shutil.which("go") is None:
        pytest.skip("go is not on PATH; cannot write feature files")
    out = tmp_path / "dff"
    subprocess.run(["go", "run", "./shard/features/internal/mkfeatures", "-out", str(out)], cwd=REPO, check=True, timeout=600)
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
