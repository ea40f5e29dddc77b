#!/usr/bin/env python3
"""Bytes per token of EAGLE-3 features on disk at a real target's width, through draftflow's own writers.

Usage (in the venv of ``specforge.sh install``, from the repository root, with go on PATH):

    disk_table.py --out DIR [--captured RUN_DIR] [--width 7168] [--lines 24] [--seed 1]

For each kind of values, the features of the same rows are written three ways and measured:

- draftflow's feature files (``.dff``): ``draftflow run`` (the embedded broker, the simulator generating) with
  ``--capture-aux``/``--capture-final`` pointed at two stand-in capture servers in this process, which answer
  ``/generate`` as SGLang 0.5.23 does with ``return_hidden_states`` (one prefill chunk ``[positions][width]``;
  the aux server 3 x width a position, the final server width), so the files come from draftflow's real capture
  stage: its JSON parser, bf16 rounding and zstd byte planes;
- SpecForge 0.2.0's offline "v1" files: ``python -m draftflow_data.offline specforge`` of that run (bf16);
- speculators 0.9's offline layout: ``python -m draftflow_data.offline speculators`` of that run (bf16; every
  file of the output, the ``datasets`` folder included; ``--target`` a directory holding only a final norm of
  ones, so its ``final / w`` leaves the values as they are).

The values, bf16 like a GPU server's, drawn per row with a seed from the row's ids:

- ``normal``: independent N(0, 1);
- ``captured`` (with ``--captured``, a ``make test-train`` capture kept with DRAFTFLOW_TRAIN_KEEP, e.g.
  ``DIR/out-train/RUN``): each layer's values drawn independently from that layer's values in the CPU target's
  captured feature files, so each layer keeps the real capture's magnitudes and bf16 exponent spread. (Tiling
  the 256-wide states to the width would repeat them every 512 bytes, which zstd would find and compress away.)

Prints a table (bytes per token of each) and writes DIR/disk_table.json.
"""
import argparse
import glob
import http.server
import json
import os
import shutil
import socketserver
import subprocess
import sys
import threading
import zlib

import numpy as np

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
AUX_LAYERS = 3


def bf16(x):
    """float32 values rounded to bf16 (round to nearest even), as float32."""
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
    return b.view(np.float32)


class Values:
    """Per-layer value sources: draw(layer, n, rng) -> n float32 values."""

    def __init__(self, pools=None):
        self.pools = pools

    def draw(self, layer, n, rng):
        if self.pools is None:
            return rng.standard_normal(n, dtype=np.float32)
        pool = self.pools[layer]
        return pool[rng.integers(0, len(pool), n)]


def captured_pools(run_dir):
    """The values of each of the 4 planes (aux, aux, aux, final) of every row in run_dir's feature files."""
    sys.path.insert(0, os.path.join(REPO, "python"))
    from draftflow_data.features import FeatureFile

    planes = [[] for _ in range(AUX_LAYERS + 1)]
    files = sorted(glob.glob(os.path.join(run_dir, "*.dff")))
    if not files:
        raise SystemExit(f"disk_table.py: no .dff files in {run_dir}")
    for path in files:
        ff = FeatureFile(path)
        for i in range(len(ff)):
            a = ff.read(i).reshape(ff.rows[i]["tokens"], AUX_LAYERS + 1, -1)
            for p in range(AUX_LAYERS + 1):
                planes[p].append(a[:, p].ravel())
    return [np.concatenate(p) for p in planes]


def serve(mode, width, values, seed):
    """A stand-in SGLang capture server (mode aux or final) on a free local port; returns (server, url)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            self.send_response(200)
            self.end_headers()

        def do_POST(self):
            req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            ids = np.asarray(req["input_ids"], dtype=np.uint32)
            rng = np.random.default_rng([seed, zlib.crc32(ids.tobytes())])
            layers = range(AUX_LAYERS) if mode == "aux" else [AUX_LAYERS]
            t = len(ids)
            states = np.concatenate([values.draw(l, t * width, rng).reshape(t, width) for l in layers], axis=1)
            body = json.dumps({"text": "", "output_ids": [int(ids[-1])], "meta_info": {
                "id": req.get("rid", ""), "finish_reason": {"type": "length", "length": 1}, "prompt_tokens": t,
                "completion_tokens": 1, "cached_tokens": 0, "hidden_states": [bf16(states).tolist()]}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
        daemon_threads = True

    srv = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"


def run(argv, timeout=1800):
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    r = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise SystemExit(f"disk_table.py: {' '.join(map(str, argv[:4]))} exited {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
    return r


def size(paths):
    return sum(os.path.getsize(p) for p in paths if os.path.isfile(p))


def measure(name, values, a, draftflow, tokenizer, conv, norm_dir):
    out = os.path.join(a.out, name)
    servers = [serve(mode, a.width, values, a.seed) for mode in ("aux", "final")]
    try:
        run([draftflow, "run", "--input", conv, "--model", tokenizer, "--max-new-tokens", "32",
             "--capture-aux", servers[0][1], "--capture-final", servers[1][1], "--capture-aux-layers", "1,2,3",
             "--capture-concurrency", "2", "--out", os.path.join(out, "run"), "--timeout", "20m"])
    finally:
        for srv, _ in servers:
            srv.shutdown()
    sys.path.insert(0, os.path.join(REPO, "python"))
    import draftflow_data as dd

    (manifest,) = dd.read_manifests(os.path.join(out, "run"))
    rundir = manifest.run_dir
    tokens = sum(len(r["input_ids"]) for r in dd.iter_rows(rundir, columns=("input_ids",)))
    rows = sum(1 for _ in dd.iter_rows(rundir, columns=("id",)))
    run([sys.executable, "-m", "draftflow_data.offline", "specforge", "--rows", rundir, "--features", rundir,
         "--out", os.path.join(out, "v1")])
    run([sys.executable, "-m", "draftflow_data.offline", "speculators", "--rows", rundir, "--features", rundir,
         "--out", os.path.join(out, "speculators"), "--target", norm_dir])
    spec_files = [p for p in glob.glob(os.path.join(out, "speculators", "**"), recursive=True)]
    return {
        "values": name, "rows": rows, "tokens": tokens, "width": a.width,
        "draftflow .dff": size(glob.glob(os.path.join(rundir, "*.dff"))) / tokens,
        "SpecForge v1 .ckpt": size(glob.glob(os.path.join(out, "v1", "*.ckpt"))) / tokens,
        "speculators (hidden_states + datasets)": size(spec_files) / tokens,
        "speculators hidden_states only": size(glob.glob(os.path.join(out, "speculators", "hidden_states", "*"))) / tokens,
        "shards (parquet, for reference)": size(glob.glob(os.path.join(rundir, "*.parquet"))) / tokens,
    }


def main(argv):
    ap = argparse.ArgumentParser(prog="disk_table.py")
    ap.add_argument("--out", required=True)
    ap.add_argument("--captured", default="", help="a make test-train run directory with feature files (.dff)")
    ap.add_argument("--width", type=int, default=7168)
    ap.add_argument("--lines", type=int, default=24, help="the bundled sample's first N lines (the rows)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    import torch
    from safetensors.torch import save_file

    shutil.rmtree(a.out, ignore_errors=True)
    os.makedirs(a.out)
    draftflow = os.path.join(a.out, "draftflow")
    run(["go", "build", "-o", draftflow, "./cmd/draftflow"])
    tokenizer = run(["bash", "internal/testassets/fetch.sh", "qwen3"]).stdout.strip().splitlines()[-1]
    conv = os.path.join(a.out, "conversations.jsonl")
    with open(os.path.join(REPO, "testdata", "sample", "conversations.jsonl"), "rb") as src, open(conv, "wb") as dst:
        dst.write(b"".join(src.readlines()[:a.lines]))
    norm_dir = os.path.join(a.out, "norm-ones")
    os.makedirs(norm_dir)
    save_file({"model.norm.weight": torch.ones(a.width, dtype=torch.bfloat16)}, os.path.join(norm_dir, "model.safetensors"))

    variants = [("normal", Values())]
    if a.captured:
        variants.append(("captured", Values(captured_pools(a.captured))))
    results = [measure(name, values, a, draftflow, tokenizer, conv, norm_dir) for name, values in variants]
    raw = 2 * (AUX_LAYERS + 1) * a.width
    keys = [k for k in results[0] if k not in ("values", "rows", "tokens", "width")]
    print(f"bytes per token at width {a.width} (3 aux layers + final, bf16; raw {raw:,}); "
          + "; ".join(f"{r['values']}: {r['rows']} rows, {r['tokens']:,} tokens" for r in results))
    print("| | " + " | ".join(r["values"] for r in results) + " |")
    print("|---|" + "---|" * len(results))
    for k in keys:
        print(f"| {k} | " + " | ".join(f"{r[k]:,.0f} ({r[k] / raw:.0%})" for r in results) + " |")
    with open(os.path.join(a.out, "disk_table.json"), "w") as fh:
        json.dump({"raw_bf16": raw, "results": results}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
