#!/usr/bin/env python3
"""The rows SpecForge 0.2.0's online producer would train on, from a run config, by SpecForge's own code.

Usage (in the venv of ``specforge.sh install``):

    online_prompts.py -c CONFIG.yaml [dotted.override=value ...] --out PROMPTS.jsonl

An online run (``data.prompts_path``, ``deployment.mode: disaggregated``) reads its rows in the producer process
before it contacts any capture server or Mooncake: ``specforge train`` resolves the config and its algorithm
(``specforge.application.resolve_run``), derives the producer's config (``specforge.cli._config_for_role``), then
``training.disaggregated._build_online`` loads the input tools (the target's tokenizer) and the draft config and
calls ``training.assembly._prepare_prompts``, which reads ``data.prompts_path`` through
``data.prompt_builder.prepare_prompt_tasks`` with the algorithm's minimum loss tokens and mask filter. This script
makes the same calls in the same order, with the same arguments, and stops there: it writes each prepared row's
``input_ids`` and ``loss_mask`` as a JSON line, in SpecForge's order, and prints how many.
"""
import argparse
import json
import sys


def prepare(config, overrides):
    from specforge.application import resolve_run
    from specforge.cli import _config_for_role
    from specforge.config import load_config
    from specforge.training.assembly import _load_input_tools, _prepare_prompts
    from specforge.training.model_loading import resolve_draft_config

    resolved = resolve_run(load_config(config, list(overrides)))
    algorithm = resolved.algorithm
    cfg = _config_for_role(resolved.config, "producer")
    if cfg.mode != "online" or cfg.deployment.mode != "disaggregated":
        raise SystemExit(f"online_prompts.py: {config} is not an online disaggregated run (mode {cfg.mode}, "
                         f"deployment {cfg.deployment.mode})")
    streaming = algorithm.providers.server_streaming_for(cfg.model.input_modality)
    input_adapter = streaming.create_input_adapter(cfg)
    tools = _load_input_tools(cfg, algorithm, input_adapter=input_adapter)
    draft_config = resolve_draft_config(cfg, provider=algorithm.providers.model.draft_config)
    if input_adapter is None:
        return _prepare_prompts(cfg, tools, algorithm=algorithm, draft_config=draft_config)
    return input_adapter.prepare_prompts(cfg, tools, draft_config=draft_config)


def main(argv):
    ap = argparse.ArgumentParser(prog="online_prompts.py")
    ap.add_argument("-c", "--config", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("overrides", nargs="*")
    a = ap.parse_args(argv)
    prompts = prepare(a.config, a.overrides)
    n = 0
    with open(a.out, "w") as fh:
        for p in prompts:
            payload = p["payload"]
            fh.write(json.dumps({"input_ids": [int(x) for x in payload["input_ids"]],
                                 "loss_mask": [int(x) for x in payload["loss_mask"]]}) + "\n")
            n += 1
    print(f"prompts {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
