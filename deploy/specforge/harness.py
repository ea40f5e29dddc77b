"""The pieces ``make test-train`` (python/tests/test_training.py) and ``make bench-train``
(deploy/specforge/bench_train.py) share: the conversations they take from the bundled sample, live SGLang servers
started with deploy/sglang/sglang.sh, the draft and training configs, and SpecForge's evaluations read from its
console. Standard library only: the test's interpreter imports it; the trainer runs in the venv of
``specforge.sh install`` as a subprocess.
"""

import ast
import json
import os
import re
import subprocess

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SAMPLE = os.path.join(REPO, "testdata", "sample", "conversations.jsonl")

# The EAGLE-3 layers of the 4-layer target: the outputs of decoder layers 0, 1, 2 (= the inputs of layers 1, 2,
# 3). The trainers' and SGLang's defaults are not three distinct layers at 4 layers (SpecForge [1, L//2-1, L-4]
# = [1, 1, 0]; SGLang captures the inputs of [2, L//2, L-3] = [2, 2, 1] and silently keeps fewer than three),
# so the layers are named everywhere: the aux server's --return-aux-hidden-state-layer-ids (SGLang's ids:
# outputs), draftflow's --capture-aux-layers (inputs: the ids + 1, the feature files' "aux:N" names) and the
# draft config's eagle_aux_hidden_state_layer_ids (what SGLang reads when it serves the draft).
AUX_LAYER_IDS = [0, 1, 2]
# Both capture modes need every position of a prefill (--disable-radix-cache: cached positions are not
# returned; docs/hidden-states.md). sglang.sh adds --sleep-on-idle: without it an idle SGLang 0.5.23 scheduler
# spins a core at 100%, and with two servers on two cores the busy one decodes 4-15x slower.
SERVER_COMMON = ["--disable-radix-cache", "--context-length", "2048"]
AUX_SERVER = ["--enable-return-aux-hidden-states", "--speculative-algorithm", "EAGLE3",
              "--return-aux-hidden-state-layer-ids", *map(str, AUX_LAYER_IDS)] + SERVER_COMMON
# The final-state server also serves the generation: requests without return_hidden_states get plain answers,
# and the two servers are all this machine holds at once (~5.4 GB each).
FINAL_SERVER = ["--enable-return-hidden-states"] + SERVER_COMMON
POOL = 8192

# The CPU target (deploy/sglang/make_model.py): 4 layers; a head of std 0.2 and embeddings of std 1.0 so that
# the next token depends mostly on the current one (docs/training.md); --end-share 0.02 so that replies end and
# conversations reach later turns (the end-of-turn token wins after ~2% of the vocabulary's tokens).
TARGET_ARGS = ["--family", "qwen3", "--layers", "4", "--head-std", "0.2", "--embed-std", "1.0", "--end-share", "0.02"]

DRAFT_VOCAB = 2048
# SpecForge's EAGLE-3 trains and evaluates TTT_LENGTH draft positions; its eval/simulated_acc_len is the sum over
# them of the product of the per-position accuracies (a0 + a0*a1 + ...), and with one position it would be a0.
TTT_LENGTH = 7


def run(argv, timeout, env=None, cwd=REPO):
    """Runs argv with OMP_NUM_THREADS (default 2) and PYTHONPATH=python; raises naming the command on failure."""
    e = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"), PYTHONPATH=os.path.join(REPO, "python"))
    e.update(env or {})
    r = subprocess.run(argv, cwd=cwd, env=e, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, argv[:3]))} ... exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}")
    return r


def trainer_python():
    """The trainer venv's python (deploy/specforge/specforge.sh install, installing on first use)."""
    return run(["bash", "deploy/specforge/specforge.sh", "python"], timeout=1800).stdout.strip().splitlines()[-1]


def make_target(python, out):
    """Builds the CPU target into out; returns out."""
    tok = run(["bash", "internal/testassets/fetch.sh", "qwen3"], timeout=600).stdout.strip().splitlines()[-1]
    run([python, "deploy/sglang/make_model.py", *TARGET_ARGS, "--tokenizer-dir", tok, "--out", out], timeout=600)
    return out


def _messages(line):
    """The message list of a sample line, or None where the line is not a JSON conversation."""
    try:
        row = json.loads(line)
    except ValueError:
        return None
    msgs = row.get("messages", row.get("conversations")) if isinstance(row, dict) else None
    if not isinstance(msgs, list) or not all(isinstance(m, dict) for m in msgs):
        return None
    return msgs


def is_chat(msgs):
    """A conversation of at least two user messages and no tool calls or results: every assistant turn of it
    is a plain reply, so a reply that ends lets the conversation go on to its next user message."""
    roles = [m.get("role", m.get("from")) for m in msgs]
    if any(r in ("tool", "function_call", "observation") for r in roles) or any(m.get("tool_calls") for m in msgs):
        return False
    return sum(r in ("user", "human") for r in roles) >= 2


def chats(n_train, n_eval, max_bytes):
    """(train lines, eval lines): the bundled sample's chats (is_chat) of at most max_bytes bytes, in file order,
    the first n_train for training and the next n_eval for evaluation (other conversations)."""
    lines = []
    with open(SAMPLE, "rb") as fh:
        for line in fh:
            msgs = _messages(line) if len(line) <= max_bytes else None
            if msgs is not None and is_chat(msgs):
                lines.append(line)
    if len(lines) < n_train + n_eval:
        raise AssertionError(f"the sample has {len(lines)} chats of at most {max_bytes} bytes, want {n_train + n_eval}")
    return lines[:n_train], lines[n_train:n_train + n_eval]


class Servers:
    """Live SGLang servers started with deploy/sglang/sglang.sh, their state (pid, url, log) in a directory of
    the caller's own so that names do not meet other servers on the machine."""

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
            if r.stdout.strip() != "down":
                raise AssertionError(f"server {name} still up after down: {r.stdout}")

    def log_tails(self, n=40):
        out = []
        for name in self.names:
            path = os.path.join(self.state, name, "log")
            if os.path.exists(path):
                with open(path, errors="replace") as fh:
                    out.append(f"--- {path}\n" + "".join(fh.readlines()[-n:]))
        return "\n".join(out)


def draft_config(target, path):
    """Writes a 1-layer LlamaForCausalLMEagle3 draft config of the target's width, draft vocabulary DRAFT_VOCAB."""
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


def train_config(path, *, out, target_sf, draft, vocab_mapping, train_v1, eval_v1, cache, rows, steps, eval_interval, seed=0):
    """Writes SpecForge's offline training config (JSON) for the CPU: local_colocated, world size 1, NO_SHARD,
    sdpa, batch 1, a constant learning rate, an evaluation every eval_interval steps; returns path."""
    cfg = {
        "run_id": "draftflow-cpu", "output_dir": str(out),
        "model": {"target_model_path": str(target_sf), "draft_model_config": str(draft), "torch_dtype": "bfloat16",
                  "vocab_mapping_path": str(vocab_mapping)},
        "data": {"hidden_states_path": str(train_v1), "eval_hidden_states_path": str(eval_v1),
                 "max_length": 2048, "cache_dir": str(cache), "dataloader_num_workers": 0},
        "training": {"max_steps": steps, "num_epochs": -(-steps // rows), "batch_size": 1, "learning_rate": 2e-3,
                     "lr_scheduler": "constant", "warmup_ratio": 0.0, "fsdp_sharding": "NO_SHARD",
                     "attention_backend": "sdpa", "ttt_length": TTT_LENGTH, "seed": seed,
                     "eval_interval": eval_interval, "log_interval": 10, "save_interval": steps},
        "deployment": {"mode": "local_colocated"},
    }
    with open(path, "w") as fh:
        json.dump(cfg, fh, indent=1)
    return str(path)


# SpecForge's console line for each logged step: "step N: {...}" (training.assembly._logger: floats, and lists
# of floats such as eval/per_position_acc).
_STEP = re.compile(r"^step (\d+): (\{.*\})$", re.M)


def evaluations(log):
    """[(step, metrics)] of every evaluation SpecForge printed (the lines holding eval/avg_acc), in order."""
    out = []
    for step, body in _STEP.findall(log):
        m = ast.literal_eval(body)
        if "eval/avg_acc" in m:
            out.append((int(step), m))
    return out


def simulated_acc_len(per_position):
    """SpecForge's eval/simulated_acc_len from the per-position accuracies: a0 + a0*a1 + a0*a1*a2 + ..."""
    total, cum = 0.0, 1.0
    for a in per_position:
        cum *= a
        total += cum
    return total


def acceptance(metrics):
    """(eval/avg_acc, eval/simulated_acc_len) of one evaluation, checked to be the per-position figure: TTT_LENGTH
    positions, the length their accuracies give (not SpecForge's scalar fallback, which repeats avg_acc)."""
    pp = metrics.get("eval/per_position_acc")
    sal = metrics["eval/simulated_acc_len"]
    if not isinstance(pp, list) or len(pp) != TTT_LENGTH:
        raise AssertionError(f"eval/per_position_acc {pp!r}: want {TTT_LENGTH} positions (the per-position figure)")
    if abs(simulated_acc_len(pp) - sal) > 1e-6 * max(1.0, sal) or abs(pp[0] - metrics["eval/avg_acc"]) > 1e-9:
        raise AssertionError(f"eval/simulated_acc_len {sal} is not the chain of per-position accuracies {pp}")
    return metrics["eval/avg_acc"], sal


def train(python, config, overrides=(), timeout=1500):
    """specforge train (deploy/specforge/cpu_train.py) on config; returns (console log, [(step, metrics)])."""
    r = run([python, "deploy/specforge/cpu_train.py", "train", "-c", str(config), *overrides], timeout=timeout)
    log = r.stdout + r.stderr
    return log, evaluations(log)


def _online_config(work, *, target, draft, vocab_mapping, prompts):
    """docs/training.md's online disaggregated config (the yaml block with `mode: disaggregated`), written to
    work/online.yaml, and the overrides that point its paths at the caller's files (work a pathlib.Path)."""
    with open(os.path.join(REPO, "docs", "training.md")) as fh:
        blocks = re.findall(r"```yaml\n(.*?)```", fh.read(), re.S)
    online = [b for b in blocks if "mode: disaggregated" in b]
    if len(online) != 1:
        raise AssertionError(f"docs/training.md: want one yaml block with `mode: disaggregated`, found {len(online)}")
    path = work / "online.yaml"
    path.write_text(online[0])
    overrides = [f"model.target_model_path={target}", f"model.draft_model_config={draft}",
                 f"model.vocab_mapping_path={vocab_mapping}", f"data.prompts_path={prompts}",
                 f"data.cache_dir={work / 'online-cache'}", f"output_dir={work / 'online-out'}",
                 f"deployment.disaggregated.control_dir={work / 'online-control'}"]
    return path, overrides


def check_online_rows(python, work, *, target, draft, vocab_mapping, export, want, max_length=2048, plan=True):
    """Loads export (draftflow export --format specforge) through SpecForge's online data path with the docs'
    config (deploy/specforge/online_prompts.py) and checks every row SpecForge keeps against want, the shard
    rows in export order (dicts with input_ids and loss_mask): ids and masks equal, cut at max_length, rows
    without loss tokens left out. With plan, also runs `specforge train --plan` on the same config: a producer
    and a consumer over Mooncake. Returns the number of rows SpecForge kept."""
    cfg, overrides = _online_config(work, target=target, draft=draft, vocab_mapping=vocab_mapping, prompts=export)
    if max_length != 2048:
        overrides.append(f"data.max_length={max_length}")
    out = work / "online-prompts.jsonl"
    r = run([python, "deploy/specforge/online_prompts.py", "-c", str(cfg), "--out", str(out), *overrides], timeout=600)
    got = [json.loads(line) for line in open(out)]
    expect = []
    for w in want:
        ids, mask = [int(x) for x in w["input_ids"]][:max_length], [int(x) for x in w["loss_mask"]][:max_length]
        if sum(mask) >= 1:
            expect.append((ids, mask))
    if len(got) != len(expect):
        raise AssertionError(f"SpecForge's online loader kept {len(got)} rows, the shards {len(expect)}: {r.stdout}")
    for i, (g, (ids, mask)) in enumerate(zip(got, expect)):
        if g["input_ids"] != ids or g["loss_mask"] != mask:
            raise AssertionError(f"row {i}: SpecForge's online loader read other input_ids or loss_mask than the shards hold")
    if plan:
        text = run([python, "deploy/specforge/cpu_train.py", "train", "--plan", "-c", str(cfg), *overrides], timeout=300).stdout
        labels = re.findall(r'"label": "(producer|consumer)"', text)
        if not ("producer" in labels and "consumer" in labels and '"DISAGG_BACKEND": "mooncake"' in text):
            raise AssertionError(f"specforge train --plan: want a producer and a consumer over Mooncake:\n{text[-3000:]}")
    return len(got)
