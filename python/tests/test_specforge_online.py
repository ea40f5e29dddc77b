"""draftflow's export through SpecForge 0.2.0's online data path (``data.prompts_path``), quickly.

The fleet path (docs/training.md): SpecForge's disaggregated online training reads pre-tokenized rows through
``data.prompts_path`` in its producer, before any capture server or Mooncake is involved, so that reader runs
here: ``deploy/specforge/online_prompts.py`` makes SpecForge's own producer-side calls with docs/training.md's
online config, on ``draftflow export --format specforge`` of shards written by the real Go sink, and every row
SpecForge keeps is compared with the shards. Rows longer than the trainer's ``max_length`` are cut by SpecForge
itself or by ``export --max-length`` first, with the same result; rows the cut leaves without loss tokens are
left out by both.

Needs the trainer venv (``deploy/specforge/specforge.sh install``): ``make test-train`` runs it (DRAFTFLOW_TRAIN=1).
"""

import os
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "python"))
sys.path.insert(0, os.path.join(REPO, "deploy", "specforge"))
import harness  # noqa: E402

needs_train = pytest.mark.skipif(not os.environ.get("DRAFTFLOW_TRAIN"), reason="DRAFTFLOW_TRAIN=1 (make test-train) runs it")

# Shorter than a third of the sample run's 120 rows (33-479 tokens, median 278), so SpecForge cuts them, and
# some of those (25) have their whole reply past it.
MAX_LENGTH = 224


@needs_train
def test_export_loads_through_specforge_online_path(sample, draftflow_bin, tmp_path):
    import draftflow_data as dd

    venv_python = harness.trainer_python()
    # A Qwen3-shaped model of the live tier (cached): SpecForge's producer loads its tokenizer, the draft config
    # takes its shape.
    target = harness.run(["bash", "deploy/sglang/sglang.sh", "model", "--family", "qwen3"], timeout=900).stdout.strip().splitlines()[-1]
    out, _ = sample
    run = sorted(m.run_dir for m in dd.read_manifests(out))[0]
    name = os.path.basename(run)
    want = list(dd.iter_rows(run, columns=("id", "turn", "input_ids", "loss_mask")))
    cut = [w for w in want if len(w["input_ids"]) > MAX_LENGTH]
    gone = [w for w in cut if int(w["loss_mask"][:MAX_LENGTH].sum()) == 0]
    assert cut and gone and len(gone) < len(want), (len(want), len(cut), len(gone))  # the cases this test is for
    draft = harness.draft_config(target, str(tmp_path / "draft.json"))
    vocab = tmp_path / "vocab"
    harness.run([draftflow_bin, "vocab", out, "--run", name, "--draft-vocab-size", str(harness.DRAFT_VOCAB),
                 "--model", target, "--out", str(vocab)], timeout=300)
    harness.run([venv_python, "-m", "draftflow_data.vocab", str(vocab)], timeout=300)
    # Cut by SpecForge (the export whole, data.max_length MAX_LENGTH), then by the export (--max-length).
    for cut_by, extra in (("specforge", []), ("export", ["--max-length", str(MAX_LENGTH)])):
        export = tmp_path / f"export-{cut_by}.jsonl"
        harness.run([draftflow_bin, "export", "--format", "specforge", *extra, "--run", name, out, str(export)], timeout=300)
        work = tmp_path / cut_by
        work.mkdir()
        n = harness.check_online_rows(venv_python, work, target=target, draft=draft, vocab_mapping=vocab / "vocab_mapping.pt",
                                      export=export, want=want, max_length=MAX_LENGTH, plan=cut_by == "specforge")
        assert n == len(want) - len(gone), (cut_by, n, len(want), len(gone))
