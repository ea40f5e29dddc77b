"""deploy/sglang/make_model.py --end-share: the random-weight target that ends replies, so that conversations in
make test-train reach their later turns. Its contract: a plain checkpoint of the family's architecture whose only
difference from the model without the flag is the end-of-turn token's row of lm_head, and that token wins the
argmax after about the share asked for of the vocabulary's tokens, never after the chat template's own tokens.

Runs wherever torch and transformers are importable (the Qwen3 tokenizer files come from the test cache).
"""

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SHARE = 0.02


def _tokenizer():
    r = subprocess.run(["bash", "internal/testassets/fetch.sh", "qwen3"], cwd=REPO, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        if os.environ.get("DRAFTFLOW_REQUIRE_ASSETS"):
            pytest.fail(f"fetch.sh qwen3: {r.stderr[-500:]}")
        pytest.skip("the Qwen3 tokenizer files cannot be fetched")
    return r.stdout.strip().splitlines()[-1]


def _make(tmp_path, name, *extra):
    out = str(tmp_path / name)
    subprocess.run([sys.executable, os.path.join(REPO, "deploy", "sglang", "make_model.py"), "--family", "qwen3",
                    "--layers", "1", "--head-std", "0.2", "--embed-std", "1.0", "--tokenizer-dir", _tokenizer(),
                    "--out", out, *extra], check=True, capture_output=True, timeout=600,
                   env=dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2")))
    return out


def test_end_share_changes_one_row_and_ends_replies(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    plain = _make(tmp_path, "plain")
    ended = _make(tmp_path, "ended", "--end-share", str(SHARE))
    with open(os.path.join(ended, "draftflow_model.json")) as fh:
        meta = json.load(fh)
    end = meta["end_token_id"]
    assert end == 151645 and meta["end_share"] == SHARE and meta["end_beta"] > 0, meta  # Qwen3's <|im_end|>

    a, b = load_file(os.path.join(plain, "model.safetensors")), load_file(os.path.join(ended, "model.safetensors"))
    assert sorted(a) == sorted(b)
    for name in a:
        if name != "lm_head.weight":
            assert torch.equal(a[name], b[name]), name
    differ = (a["lm_head.weight"] != b["lm_head.weight"]).any(dim=1).nonzero().flatten().tolist()
    assert differ == [end], differ

    model = AutoModelForCausalLM.from_pretrained(ended, dtype=torch.float32).eval()
    assert type(model).__name__ == "Qwen3ForCausalLM"
    # A sample of tokens the calibration did not draw (another generator), each alone: the end token wins after
    # about SHARE of them (binomial sd ~0.003 at 2,048 tokens).
    sample = torch.randperm(model.config.vocab_size, generator=torch.Generator().manual_seed(12345))[:2048]
    keep_out = [t for t in meta["end_keep_out"] if t != end]
    with torch.no_grad():
        top = model(input_ids=sample[:, None]).logits[:, -1].argmax(-1)
        kept_top = model(input_ids=torch.tensor(keep_out)[:, None]).logits[:, -1].argmax(-1)
    share = (top == end).float().mean().item()
    assert SHARE / 2 <= share <= SHARE * 1.75, share
    assert not (kept_top == end).any(), (keep_out, kept_top.tolist())
    # A reply of the chat template's own prompt does not end at once.
    with torch.no_grad():
        prompt = torch.tensor([[151644, 872, 198, 6023, 151645, 198, 151644, 77091, 198]])  # <|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n
        assert model(input_ids=prompt).logits[0, -1].argmax().item() != end
