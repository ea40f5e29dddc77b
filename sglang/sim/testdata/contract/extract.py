#!/usr/bin/env python3
"""Static facts about the SGLang HTTP surface, read from the pinned wheel.

Usage: extract.py --cache DIR [--no-cache] [--wheel PATH]

Fetches sglang==PIN into DIR/sglang-PIN (and sglang==LEGACY into
DIR/sglang-LEGACY) with `pip download --no-deps` (once), opens each .whl as a
zip and reads its Python sources with the `ast` module: nothing is installed
or imported (importing sglang needs CUDA builds). Prints
one JSON object of facts on stdout and caches it beside the wheel, keyed by the
wheels' sha256 and this script's own sha256.

Every fact is found by its shape in the source. When a shape is not there (a
file moved, a symbol was renamed, a formula changed) the script exits 3 with a
message naming the file and the symbol, so drift in the wheel fails the Go
contract test instead of passing silently. Exit 2 means the wheel could not be
obtained (no pip, no network): the Go test skips on it, unless
DRAFTFLOW_REQUIRE_ASSETS is set.

To move the pin: change PIN here and contractPin in ../../contract_test.go,
run the test, and follow the failures.
"""

from __future__ import annotations

import argparse
import ast
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

PIN = "0.5.23"
# The older release the simulator can also imitate (Config.Release). Only the
# few facts that set it apart are read from its wheel (a 2.7 MB pure wheel).
LEGACY = "0.5.4"

# The wheel is platform-tagged; its Python sources are the same in all of
# them. Asking for one fixed tag gets the same file on every machine (and never
# an sdist, which pip would try to build).
PIP_TAGS = [
    "--only-binary=:all:",
    "--implementation", "cp",
    "--python-version", "3.11",
    "--abi", "cp311",
    "--platform", "manylinux_2_34_x86_64",
]

EXIT_UNAVAILABLE = 2
EXIT_DRIFT = 3


class Drift(Exception):
    def __init__(self, path: str, symbol: str, msg: str):
        super().__init__(f"{path}: {symbol}: {msg}")


class Unavailable(Exception):
    pass


# ---------------------------------------------------------------------------
# wheel
# ---------------------------------------------------------------------------


def find_wheel(wheel_dir: str, version: str) -> str | None:
    found = sorted(glob.glob(os.path.join(wheel_dir, f"sglang-{version}-*.whl")))
    return found[0] if found else None


def obtain_wheel(cache: str, version: str) -> str:
    wheel_dir = os.path.join(cache, f"sglang-{version}")
    wheel = find_wheel(wheel_dir, version)
    if wheel:
        return wheel
    os.makedirs(wheel_dir, exist_ok=True)
    # Download into a private directory and rename into place, so concurrent
    # runs never see a half-written wheel.
    tmp = tempfile.mkdtemp(prefix=".download-", dir=wheel_dir)
    try:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps",
               "--disable-pip-version-check", "--no-input", "--quiet",
               *PIP_TAGS, f"sglang=={version}", "-d", tmp]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise Unavailable(f"pip download sglang=={version}: {e}")
        if res.returncode != 0:
            tail = (res.stderr or res.stdout).strip().splitlines()[-5:]
            raise Unavailable(f"pip download sglang=={version} failed (exit {res.returncode}): " + " | ".join(tail))
        got = find_wheel(tmp, version)
        if not got:
            raise Unavailable(f"pip download sglang=={version} left no sglang-{version}-*.whl in {tmp}")
        dest = os.path.join(wheel_dir, os.path.basename(got))
        os.replace(got, dest)
        return dest
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class Sources:
    """Parsed modules of the wheel, by path inside it."""

    def __init__(self, wheel: str):
        self.zip = zipfile.ZipFile(wheel)
        self.names = set(self.zip.namelist())
        self.cache: dict[str, ast.Module] = {}

    def module(self, path: str) -> ast.Module:
        if path not in self.cache:
            if path not in self.names:
                raise Drift(path, "<module>", "file not in the wheel")
            self.cache[path] = ast.parse(self.zip.read(path).decode("utf-8"), filename=path)
        return self.cache[path]

    def glob(self, prefix: str, suffix: str = ".py") -> list[str]:
        return sorted(n for n in self.names if n.startswith(prefix) and n.endswith(suffix))


# ---------------------------------------------------------------------------
# ast helpers
# ---------------------------------------------------------------------------

FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


def find_class(mod: ast.Module, path: str, name: str) -> ast.ClassDef:
    for node in mod.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise Drift(path, name, "class not found at module level")


def find_func(body_owner, path: str, name: str):
    for node in body_owner.body:
        if isinstance(node, FUNCS) and node.name == name:
            return node
    owner = getattr(body_owner, "name", "<module>")
    raise Drift(path, f"{owner}.{name}" if owner != "<module>" else name, "function not found")


def module_assign(mod: ast.Module, path: str, name: str) -> ast.expr:
    for node in mod.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node.value
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name and node.value:
            return node.value
    raise Drift(path, name, "module-level assignment not found")


def class_fields(cls: ast.ClassDef) -> list[dict]:
    """Annotated class attributes in order (dataclass / msgspec.Struct fields)."""
    out = []
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            ann = ast.unparse(node.annotation)
            if ann.startswith("ClassVar"):
                continue
            out.append({
                "name": node.target.id,
                "annotation": ann,
                "default": None if node.value is None else ast.unparse(node.value),
            })
    return out


def frozenset_literal(expr: ast.expr, path: str, symbol: str) -> list[str]:
    if (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "frozenset"
            and len(expr.args) == 1 and isinstance(expr.args[0], (ast.Set, ast.List, ast.Tuple))):
        vals = [e.value for e in expr.args[0].elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        if len(vals) == len(expr.args[0].elts):
            return sorted(vals)
    raise Drift(path, symbol, f"expected frozenset({{'...'}}) of strings, found {ast.unparse(expr)}")


def str_tuple(expr: ast.expr, path: str, symbol: str) -> list[str]:
    if isinstance(expr, (ast.Tuple, ast.List)):
        vals = [e.value for e in expr.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        if len(vals) == len(expr.elts):
            return vals
    raise Drift(path, symbol, f"expected a tuple of strings, found {ast.unparse(expr)}")


def dict_const_keys(d: ast.Dict) -> tuple[list[str], list[str]]:
    """Constant string keys of a dict display, and the unparsed `**splat` parts."""
    keys, splats = [], []
    for k, v in zip(d.keys, d.values):
        if k is None:
            splats.append(ast.unparse(v))
        elif isinstance(k, ast.Constant) and isinstance(k.value, str):
            keys.append(k.value)
    return keys, splats


def returned_dict(func, path: str, symbol: str) -> ast.Dict:
    """The dict display a function returns (the last `return {...}`)."""
    found = None
    for node in ast.walk(func):
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Dict):
            found = node.value
    if found is None:
        raise Drift(path, symbol, "no `return {...}` dict display")
    return found


def subscript_assigns(stmts, var: str) -> list[str]:
    """Keys of `var["key"] = ...` statements directly in stmts (not nested)."""
    keys = []
    for node in stmts:
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if (isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == var
                        and isinstance(t.slice, ast.Constant) and isinstance(t.slice.value, str)):
                    keys.append(t.slice.value)
    return keys


def all_subscript_assigns(func, var: str) -> list[str]:
    keys = []
    for node in ast.walk(func):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if (isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == var
                        and isinstance(t.slice, ast.Constant) and isinstance(t.slice.value, str)):
                    keys.append(t.slice.value)
    return keys


def assigns_to(func, name: str) -> list[ast.Assign]:
    return [n for n in ast.walk(func) if isinstance(n, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)]


def top_assign(func, path: str, symbol: str, name: str) -> ast.expr:
    """The value of `name = ...` directly in the function body (not in a branch)."""
    for node in func.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node.value
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Tuple)
                and any(isinstance(e, ast.Name) and e.id == name for e in node.targets[0].elts)):
            return node.value
    raise Drift(path, f"{symbol}: {name}", "no unconditional assignment in the function body")


def decorator_route(dec: ast.expr):
    """(('GET',...), path) of @app.get("/x") / @router.post / @app.api_route("/x", methods=[...])."""
    if not (isinstance(dec, ast.Call) and isinstance(dec.func, ast.Attribute)):
        return None
    verb = dec.func.attr
    if not dec.args or not isinstance(dec.args[0], ast.Constant) or not isinstance(dec.args[0].value, str):
        return None
    path = dec.args[0].value
    if verb in ("get", "post", "put", "delete", "patch"):
        return [verb.upper()], path
    if verb == "api_route":
        for kw in dec.keywords:
            if kw.arg == "methods":
                return str_tuple(kw.value, "<decorator>", path), path
        return ["GET"], path
    return None


def decorator_auth_level(dec: ast.expr):
    if (isinstance(dec, ast.Call) and isinstance(dec.func, ast.Name) and dec.func.id == "auth_level"
            and dec.args and isinstance(dec.args[0], ast.Attribute)):
        return dec.args[0].attr
    return None


def routes_of(mod: ast.Module, owner: str) -> dict:
    routes = {}
    for node in ast.walk(mod):
        if not isinstance(node, FUNCS):
            continue
        level = None
        found = []
        for dec in node.decorator_list:
            lv = decorator_auth_level(dec)
            if lv:
                level = lv
            r = decorator_route(dec)
            if r and isinstance(dec.func, ast.Attribute) and isinstance(dec.func.value, ast.Name) \
                    and dec.func.value.id == owner:
                found.append(r)
        for methods, path in found:
            entry = routes.setdefault(path, {"methods": [], "function": node.name, "auth_level": level or "NORMAL"})
            entry["methods"] = sorted(set(entry["methods"]) | set(methods))
    return routes


# ---------------------------------------------------------------------------
# extractions
# ---------------------------------------------------------------------------

LOAD_SNAPSHOT = "sglang/srt/managers/load_snapshot.py"
LOAD_INQUIRER = "sglang/srt/managers/scheduler_components/load_inquirer.py"
V1_LOADS = "sglang/srt/entrypoints/v1_loads.py"
HTTP_SERVER = "sglang/srt/entrypoints/http_server.py"
COMMON = "sglang/srt/utils/common.py"
SCHEDULER = "sglang/srt/managers/scheduler.py"
DP_CONTROLLER = "sglang/srt/managers/data_parallel_controller.py"
INTERNAL_STATE = "sglang/srt/managers/scheduler_components/internal_state.py"
MEMORY_USAGE = "sglang/srt/managers/scheduler_components/memory_usage.py"
GRAPH_USAGE = "sglang/srt/model_executor/graph_memory_usage.py"
STARTUP_TIME = "sglang/srt/observability/startup_time.py"
ENGINE = "sglang/srt/entrypoints/engine.py"
SERVER_ARGS = "sglang/srt/server_args.py"
FIELDS_DIR = "sglang/srt/arg_groups/fields/"
OVERRIDES = "sglang/srt/arg_groups/overrides.py"
AUTH = "sglang/srt/utils/auth.py"
IO_STRUCT = "sglang/srt/managers/io_struct.py"
API_TYPES = "sglang/api/v1/api_types.py"
TOKENIZER_MANAGER = "sglang/srt/managers/tokenizer_manager.py"
METRICS_COLLECTOR = "sglang/srt/observability/metrics_collector.py"
VERSION = "sglang/_version.py"
DETOKENIZER = "sglang/srt/managers/detokenizer_manager.py"
SAMPLING_PARAMS = "sglang/srt/sampling/sampling_params.py"


def extract_version(src: Sources) -> str:
    mod = src.module(VERSION)
    v = module_assign(mod, VERSION, "__version__")
    if not (isinstance(v, ast.Constant) and isinstance(v.value, str)):
        raise Drift(VERSION, "__version__", f"not a string constant: {ast.unparse(v)}")
    if v.value != PIN:
        raise Drift(VERSION, "__version__", f"wheel says {v.value!r}, pin is {PIN!r}")
    return v.value


def extract_load_snapshot(src: Sources) -> dict:
    p = LOAD_SNAPSHOT
    mod = src.module(p)
    snap = find_class(mod, p, "LoadSnapshot")
    fields = class_fields(snap)
    if not fields:
        raise Drift(p, "LoadSnapshot", "no annotated fields")
    sections = frozenset_literal(module_assign(mod, p, "_SECTION_FIELDS"), p, "_SECTION_FIELDS")
    valid = None
    for node in snap.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "VALID_SECTIONS" for t in node.targets):
            valid = frozenset_literal(node.value, p, "LoadSnapshot.VALID_SECTIONS")
    if valid is None:
        raise Drift(p, "LoadSnapshot.VALID_SECTIONS", "class attribute not found")
    names = [f["name"] for f in fields]
    missing = [s for s in sections if s not in names]
    if missing:
        raise Drift(p, "_SECTION_FIELDS", f"names {missing} are not LoadSnapshot fields")

    # _CORE_KEYS = tuple(f for f in LoadSnapshot.__struct_fields__ if f not in _SECTION_FIELDS)
    core_expr = ast.unparse(module_assign(mod, p, "_CORE_KEYS"))
    if "LoadSnapshot.__struct_fields__" not in core_expr or "not in _SECTION_FIELDS" not in core_expr:
        raise Drift(p, "_CORE_KEYS", f"no longer 'every struct field but the sections': {core_expr}")
    core = [f for f in fields if f["name"] not in sections]

    # to_dict: every core key always; a section only when not None.
    to_dict = find_func(snap, p, "to_dict")
    td = ast.unparse(to_dict)
    if "{key: getattr(self, key) for key in _CORE_KEYS}" not in td:
        raise Drift(p, "LoadSnapshot.to_dict", "core keys are no longer all copied unconditionally")
    if "section is None" not in td:
        raise Drift(p, "LoadSnapshot.to_dict", "sections are no longer skipped when None")
    section_include = {}
    for node in ast.walk(to_dict):
        if isinstance(node, ast.For) and isinstance(node.iter, ast.Tuple):
            for elt in node.iter.elts:
                if (isinstance(elt, ast.Tuple) and len(elt.elts) == 3
                        and all(isinstance(e, ast.Constant) for e in elt.elts[:2])):
                    section_include[elt.elts[0].value] = elt.elts[1].value
    if sorted(section_include) != sections:
        raise Drift(p, "LoadSnapshot.to_dict", f"section loop covers {sorted(section_include)}, sections are {sections}")

    struct_of = {}
    for f in fields:
        if f["name"] in sections:
            ann = f["annotation"]
            if not (ann.startswith("Optional[") and ann.endswith("]")):
                raise Drift(p, f"LoadSnapshot.{f['name']}", f"section annotation {ann} is not Optional[Struct]")
            struct_of[f["name"]] = ann[len("Optional["):-1]
    sub = {}
    for field, cls_name in struct_of.items():
        cls = find_class(mod, p, cls_name)
        # array_like=True is the msgpack wire format only; to_dict renders
        # sections with msgspec.structs.asdict, i.e. by field name.
        sub[field] = {"struct": cls_name, "fields": [f["name"] for f in class_fields(cls)]}
    if "msgspec.structs.asdict(section)" not in td:
        raise Drift(p, "LoadSnapshot.to_dict", "sections are no longer rendered with msgspec.structs.asdict")
    return {
        "fields": fields,
        "core_keys": [f["name"] for f in core],
        "section_fields": sections,
        "valid_sections": valid,
        "section_include_names": section_include,
        "sections": sub,
    }


def extract_load_inquirer(src: Sources, snapshot: dict) -> dict:
    p = LOAD_INQUIRER
    mod = src.module(p)
    cls = find_class(mod, p, "SchedulerLoadInquirer")
    fn = find_func(cls, p, "get_loads")
    sym = "SchedulerLoadInquirer.get_loads"

    total = top_assign(fn, p, sym, "num_total_tokens")
    formula = "num_total_tokens = " + ast.unparse(total)
    # num_used_tokens + sum(req.seqlen for queue in pending_token_queues for req in queue)
    ok = (isinstance(total, ast.BinOp) and isinstance(total.op, ast.Add)
          and isinstance(total.left, ast.Name) and total.left.id == "num_used_tokens"
          and isinstance(total.right, ast.Call) and isinstance(total.right.func, ast.Name)
          and total.right.func.id == "sum" and len(total.right.args) == 1
          and isinstance(total.right.args[0], ast.GeneratorExp))
    if not ok:
        raise Drift(p, f"{sym}: num_total_tokens", f"not num_used_tokens + sum(...): {formula}")
    gen = total.right.args[0]
    if not (isinstance(gen.elt, ast.Attribute) and gen.elt.attr == "seqlen"):
        raise Drift(p, f"{sym}: num_total_tokens", f"summand is not req.seqlen: {formula}")
    iter_names = [ast.unparse(g.iter) for g in gen.generators]
    if not iter_names:
        raise Drift(p, f"{sym}: num_total_tokens", "no generator")
    queues_var = iter_names[0]
    used_names = {n.id for n in ast.walk(total) if isinstance(n, ast.Name)}
    used_attrs = {n.attr for n in ast.walk(total) if isinstance(n, ast.Attribute)}
    if "max_total_num_tokens" in used_names | used_attrs:
        raise Drift(p, f"{sym}: num_total_tokens", "formula involves the pool size")
    # The queues summed outside disaggregation: the waiting queue only.
    queues_default = top_assign(fn, p, sym, queues_var)
    qd = ast.unparse(queues_default)
    if qd != "[self.get_waiting_queue()]":
        raise Drift(p, f"{sym}: {queues_var}", f"default pending queues are {qd}, not [self.get_waiting_queue()]")
    # any reassignment must sit under a disaggregation-mode branch
    branches = []
    for node in fn.body:
        if isinstance(node, ast.If) and "disaggregation_mode" in ast.unparse(node.test):
            branches.append(node)
    reassigned_outside = [a for a in assigns_to(fn, queues_var) if a.value is not queues_default
                          and not any(a in list(ast.walk(b)) for b in branches)]
    if reassigned_outside:
        raise Drift(p, f"{sym}: {queues_var}", "reassigned outside the disaggregation branches")

    used = top_assign(fn, p, sym, "num_used_tokens")
    waiting = top_assign(fn, p, sym, "num_waiting_reqs")
    waiting_default = top_assign(fn, p, sym, "waiting_queues")
    if ast.unparse(waiting_default) != "[self.get_waiting_queue()]":
        raise Drift(p, f"{sym}: waiting_queues", f"default is {ast.unparse(waiting_default)}")
    active = top_assign(fn, p, sym, "num_active_tokens")
    awaiting = top_assign(fn, p, sym, "awaiting_kv_tokens")
    if ast.unparse(active) != "max(0, num_total_tokens - awaiting_kv_tokens)" or ast.unparse(awaiting) != "0":
        raise Drift(p, f"{sym}: num_active_tokens", f"{ast.unparse(active)} with awaiting_kv_tokens = {ast.unparse(awaiting)}")

    # Which sections a plain (non-PD, no spec, no LoRA) server fills.
    section_vars = {"memory": "memory", "speculative": "speculative", "lora": "lora",
                    "disaggregation": "disaggregation", "queues": "queues"}
    presence = {}
    for field, var in section_vars.items():
        if field not in snapshot["section_fields"]:
            raise Drift(p, sym, f"section {field} is not a LoadSnapshot section any more")
        first = top_assign(fn, p, sym, var)
        if isinstance(first, ast.Constant) and first.value is None:
            setters = [a for a in assigns_to(fn, var) if a.value is not first]
            in_try = any(isinstance(t, ast.Try) and any(a in list(ast.walk(t)) for a in setters) for t in fn.body)
            presence[field] = "best_effort" if in_try else "conditional"
        else:
            presence[field] = "always"
    # the LoadSnapshot(...) call must fill every core key
    call = None
    for node in ast.walk(fn):
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Call) and ast.unparse(node.value.func) == "LoadSnapshot":
            call = node.value
    if call is None:
        raise Drift(p, sym, "does not return LoadSnapshot(...)")
    kws = {k.arg for k in call.keywords}
    unset = [k for k in snapshot["core_keys"] if k not in kws]
    # decode_moments is None until the first decode step.
    moments = top_assign(fn, p, sym, "decode_moments")
    return {
        "num_total_tokens_formula": formula,
        "pending_token_queues": f"{queues_var} = {qd}",
        "num_total_tokens_is_used_plus_waiting_seqlen": True,
        "num_used_tokens": "num_used_tokens, kv_token_usage = " + ast.unparse(used),
        "num_waiting_reqs": "num_waiting_reqs = " + ast.unparse(waiting),
        "num_active_tokens_equals_total_outside_pd": True,
        "section_presence": presence,
        "core_keys_not_set_by_get_loads": unset,
        "decode_moments": "decode_moments = " + ast.unparse(moments),
    }


def extract_v1_loads(src: Sources) -> dict:
    p = V1_LOADS
    mod = src.module(p)
    fn = find_func(mod, p, "get_loads")
    routes = routes_of(mod, "router")
    if routes.get("/v1/loads", {}).get("function") != "get_loads":
        raise Drift(p, "get_loads", "not decorated @router.get('/v1/loads')")
    d = returned_dict(fn, p, "get_loads")
    keys, splats = dict_const_keys(d)
    if splats:
        raise Drift(p, "get_loads", f"return dict has splats {splats}")
    params = [a.arg for a in fn.args.args + fn.args.kwonlyargs if a.arg != "tokenizer_manager"]
    loads_expr = None
    for k, v in zip(d.keys, d.values):
        if isinstance(k, ast.Constant) and k.value == "loads":
            loads_expr = ast.unparse(v)
    body = ast.unparse(fn)
    if "load.to_dict(include_set)" not in body:
        raise Drift(p, "get_loads", "entries are no longer LoadSnapshot.to_dict(include_set)")
    # the tokenizer manager answers an out-of-range ?dp_rank= with no entries
    tcm = "sglang/srt/managers/tokenizer_control_mixin.py"
    gl = None
    for node in ast.walk(src.module(tcm)):
        if isinstance(node, FUNCS) and node.name == "get_loads":
            gl = node
    if gl is None:
        raise Drift(tcm, "TokenizerControlMixin.get_loads", "function not found")
    empty = any(isinstance(n, ast.If) and "dp_rank < 0 or dp_rank >=" in ast.unparse(n.test)
                and any(isinstance(b, ast.Return) and ast.unparse(b.value) == "[]" for b in n.body)
                for n in ast.walk(gl))
    if not empty:
        raise Drift(tcm, "TokenizerControlMixin.get_loads", "an out-of-range dp_rank no longer returns []")
    return {"route": "/v1/loads", "methods": routes["/v1/loads"]["methods"], "top_level_keys": keys,
            "query_params": params, "loads": loads_expr, "out_of_range_dp_rank": "[]"}


def extract_http_server(src: Sources) -> dict:
    p = HTTP_SERVER
    mod = src.module(p)
    routes = routes_of(mod, "app")
    fn = find_func(mod, p, "server_info")
    info_dict = None
    for node in ast.walk(fn):
        if isinstance(node, ast.Dict) and any(k is None for k in node.keys):
            info_dict = node
    if info_dict is None:
        raise Drift(p, "server_info", "no {**build_server_info(...), ...} dict")
    keys, splats = dict_const_keys(info_dict)
    if not any(s.startswith("build_server_info(") for s in splats):
        raise Drift(p, "server_info", f"dict no longer spreads build_server_info(...): {splats}")
    values = {k.value: ast.unparse(v) for k, v in zip(info_dict.keys, info_dict.values) if isinstance(k, ast.Constant)}
    alias = find_func(mod, p, "get_server_info")
    if "await server_info()" not in ast.unparse(alias):
        raise Drift(p, "get_server_info", "is no longer an alias of server_info")
    # v1_loads router included
    included = [ast.unparse(n) for n in ast.walk(mod) if isinstance(n, ast.Call)
                and ast.unparse(n.func) == "app.include_router"]
    if "app.include_router(v1_loads_router)" not in included:
        raise Drift(p, "app.include_router(v1_loads_router)", "the /v1/loads router is not included")
    # /metrics: mounted by add_prometheus_middleware when metrics are enabled
    metrics_guard = None
    for node in ast.walk(mod):
        if isinstance(node, ast.If) and any(isinstance(s, ast.Expr) and ast.unparse(s.value) == "add_prometheus_middleware(app)" for s in node.body):
            metrics_guard = ast.unparse(node.test)
    if metrics_guard is None:
        raise Drift(p, "add_prometheus_middleware(app)", "call not found under an if")
    # generate: non-stream ValueError -> _create_error_response -> 400 {"error": {"message": str(e)}}
    err = find_func(mod, p, "_create_error_response")
    err_src = ast.unparse(err)
    if "{'error': {'message': str(e)}}" not in err_src or "HTTPStatus.BAD_REQUEST" not in err_src:
        raise Drift(p, "_create_error_response", f"error body changed: {err_src}")
    return {"routes": routes, "server_info_keys": keys, "server_info_values": values,
            "server_info_spreads": splats, "get_server_info_alias": True, "metrics_mount_guard": metrics_guard,
            "value_error_body": {"error": {"message": "<str(e)>"}}, "value_error_status": 400}


def extract_build_server_info(src: Sources) -> dict:
    p = COMMON
    mod = src.module(p)
    fn = find_func(mod, p, "build_server_info")
    base = top_assign(fn, p, "build_server_info", "result")
    if ast.unparse(base) != "server_args.resolved_dict()":
        raise Drift(p, "build_server_info", f"result starts from {ast.unparse(base)}, not server_args.resolved_dict()")
    src_text = ast.unparse(fn)
    if "result.update(scheduler_info)" not in src_text:
        raise Drift(p, "build_server_info", "no longer merges scheduler_info")
    keys = subscript_assigns(fn.body, "result")
    # /metrics mount
    mw = find_func(mod, p, "add_prometheus_middleware")
    mount = None
    regex = None
    registry = None
    for node in ast.walk(mw):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "Mount" and node.args and isinstance(node.args[0], ast.Constant):
            mount = node.args[0].value
            if len(node.args) > 1:
                registry = ast.unparse(node.args[1])
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "metrics_route.path_regex":
            for c in ast.walk(node.value):
                if isinstance(c, ast.Constant) and isinstance(c.value, str):
                    regex = c.value
    if mount != "/metrics":
        raise Drift(p, "add_prometheus_middleware", f"Mount path is {mount!r}, not '/metrics'")
    multiprocess = "multiprocess.MultiProcessCollector(registry)" in ast.unparse(mw)
    return {"base": "server_args.resolved_dict()", "added_keys": keys, "merges": "scheduler_info",
            "metrics_mount": {"path": mount, "path_regex": regex, "app": registry, "multiprocess": multiprocess}}


def init_info_keys(src: Sources, p: str, cls_name: str) -> dict:
    mod = src.module(p)
    cls = find_class(mod, p, cls_name)
    fn = find_func(cls, p, "get_init_info")
    d = None
    var = None
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict) and isinstance(node.targets[0], ast.Name):
            d, var = node.value, node.targets[0].id
            break
    if d is None:
        raise Drift(p, f"{cls_name}.get_init_info", "no `x = {...}` dict")
    keys, _ = dict_const_keys(d)
    always = list(keys) + subscript_assigns(fn.body, var)
    # assignments inside a `with` block are unconditional too
    for node in fn.body:
        if isinstance(node, ast.With):
            always += subscript_assigns(node.body, var)
    sometimes = [k for k in all_subscript_assigns(fn, var) if k not in always]
    return {"always": always, "conditional": sometimes}


def extract_internal_state(src: Sources) -> dict:
    p = INTERNAL_STATE
    mod = src.module(p)
    cls = find_class(mod, p, "SchedulerInternalStateController")
    fn = find_func(cls, p, "get_internal_state")
    base = top_assign(fn, p, "get_internal_state", "state")
    base_src = ast.unparse(base)
    if "resolved_server_args_dict()" not in base_src:
        raise Drift(p, "get_internal_state", f"state starts from {base_src}, not the resolved server args")
    contributors = []
    for node in ast.walk(fn):
        if isinstance(node, ast.For) and isinstance(node.iter, ast.Tuple):
            contributors = [ast.unparse(e).removeprefix("self.") for e in node.iter.elts]
    if not contributors:
        raise Drift(p, "get_internal_state", "no `for contribute in (...)` loop")
    unconditional, guarded, conditional = [], [], []
    for name in contributors:
        m = find_func(cls, p, name)
        early_return = False
        for stmt in m.body:
            if isinstance(stmt, ast.If) and any(isinstance(s, ast.Return) for s in stmt.body):
                early_return = True
                continue
            for k in subscript_assigns([stmt], "state"):
                (guarded if early_return else unconditional).append(k)
        for k in all_subscript_assigns(m, "state"):
            if k not in unconditional and k not in guarded:
                conditional.append(k)
    popped = [ast.unparse(n.args[0]) for n in ast.walk(fn) if isinstance(n, ast.Call)
              and ast.unparse(n.func) == "state.pop" and n.args]
    topo = find_func(cls, p, "_add_topology")
    topo_src = {k: None for k in subscript_assigns(topo.body, "state")}
    for stmt in topo.body:
        if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Subscript):
            topo_src[ast.unparse(stmt.targets[0].slice).strip("'")] = ast.unparse(stmt.value)
    mem = find_func(cls, p, "_add_memory_usage")
    if "build_memory_usage(" not in ast.unparse(mem):
        raise Drift(p, "_add_memory_usage", "memory_usage is no longer build_memory_usage(...)")
    return {"base": base_src, "contributors": contributors, "unconditional_keys": unconditional,
            "guarded_keys": guarded, "conditional_keys": conditional, "popped": popped,
            "topology_values": topo_src}


def extract_memory_usage(src: Sources) -> dict:
    p = MEMORY_USAGE
    mod = src.module(p)
    fn = find_func(mod, p, "build_memory_usage")
    keys, splats = dict_const_keys(returned_dict(fn, p, "build_memory_usage"))
    if splats:
        raise Drift(p, "build_memory_usage", f"splats {splats}")
    return {"keys": keys}


def extract_graph_keys(src: Sources) -> list[str]:
    p = GRAPH_USAGE
    mod = src.module(p)
    keys = str_tuple(module_assign(mod, p, "GRAPH_MEMORY_USAGE_KEYS"), p, "GRAPH_MEMORY_USAGE_KEYS")
    fn = find_func(mod, p, "empty_graph_memory_usage")
    if "dict.fromkeys(GRAPH_MEMORY_USAGE_KEYS, 0.0)" not in ast.unparse(fn):
        raise Drift(p, "empty_graph_memory_usage", "no longer dict.fromkeys(GRAPH_MEMORY_USAGE_KEYS, 0.0)")
    return keys


def extract_startup_time(src: Sources) -> dict:
    p = STARTUP_TIME
    mod = src.module(p)
    sched = find_func(mod, p, "build_scheduler_startup_time")
    sched_keys, _ = dict_const_keys(returned_dict(sched, p, "build_scheduler_startup_time"))
    agg = find_func(mod, p, "aggregate_scheduler_startup_times")
    agg_base = top_assign(agg, p, "aggregate_scheduler_startup_times", "result")
    if not isinstance(agg_base, ast.Dict):
        raise Drift(p, "aggregate_scheduler_startup_times", "result is not a dict display")
    agg_keys, _ = dict_const_keys(agg_base)
    # every duration is the max over the ranks (the critical path)
    agg_src = ast.unparse(agg)
    for k in agg_keys:
        pat = f"result['{k}'] = max(result['{k}']" if k != "cuda_graph" else "result['cuda_graph'][phase] = max("
        if pat not in agg_src:
            raise Drift(p, f"aggregate_scheduler_startup_times: {k}", "no longer the max over scheduler ranks")
    eng = find_func(mod, p, "build_engine_startup_time")
    eng_extra = subscript_assigns(eng.body, "result")
    if "aggregate_scheduler_startup_times(" not in ast.unparse(eng):
        raise Drift(p, "build_engine_startup_time", "no longer built on aggregate_scheduler_startup_times")
    # the engine sets the tokenizer manager's startup_time with build_engine_startup_time
    emod = src.module(ENGINE)
    if "tokenizer_manager.set_startup_time(startup_time)" not in ast.unparse(emod) or \
            "build_engine_startup_time(" not in ast.unparse(emod):
        raise Drift(ENGINE, "Engine._set_startup_time", "no longer sets build_engine_startup_time(...) on the tokenizer manager")
    return {"scheduler_keys": sched_keys, "engine_keys": agg_keys + eng_extra,
            "engine_aggregates_ranks_by": "max"}


def extract_server_args(src: Sources, names: list[str]) -> dict:
    """Where each server arg is declared (arg_groups/fields/*), its default and
    whether /server_info reports it raw (None when unset)."""
    sa = src.module(SERVER_ARGS)
    sa_src = ast.unparse(sa)
    # resolved_dict -> resolution_result (last declaration, raw input, then fallback)
    sa_cls = find_class(sa, SERVER_ARGS, "ServerArgs")
    rd = find_func(sa_cls, SERVER_ARGS, "resolved_dict")
    if "resolution_result(self, field.name)" not in ast.unparse(rd):
        raise Drift(SERVER_ARGS, "ServerArgs.resolved_dict", "no longer reads resolution_result(self, field.name)")
    found: dict[str, list[dict]] = {n: [] for n in names}
    for path in src.glob(FIELDS_DIR):
        mod = src.module(path)
        for cls in mod.body:
            if not isinstance(cls, ast.ClassDef):
                continue
            for node in cls.body:
                if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id in found):
                    continue
                ann = node.annotation
                resolvable = False
                fallback = None
                typ = None
                if isinstance(ann, ast.Subscript) and isinstance(ann.slice, ast.Tuple):
                    typ = ast.unparse(ann.slice.elts[0])
                    for part in ann.slice.elts[1:]:
                        if isinstance(part, ast.Call) and ast.unparse(part.func) == "Arg":
                            for kw in part.keywords:
                                if kw.arg == "resolvable":
                                    resolvable = isinstance(kw.value, ast.Constant) and kw.value.value is True
                                if kw.arg == "fallback":
                                    fallback = ast.unparse(kw.value)
                default = None if node.value is None else ast.literal_eval(node.value) \
                    if isinstance(node.value, ast.Constant) else ast.unparse(node.value)
                found[node.target.id].append({
                    "module": path, "record": cls.name, "type": typ, "default": default,
                    "resolvable": resolvable, "fallback": fallback,
                })
    out = {}
    for name, decls in found.items():
        if len(decls) != 1:
            raise Drift(FIELDS_DIR + "*.py", name, f"declared {len(decls)} times (want exactly one)")
        d = decls[0]
        mod_name = d["module"].removesuffix(".py").replace("/", ".")
        if f"from {mod_name} import" not in sa_src and d["record"] not in sa_src:
            raise Drift(SERVER_ARGS, d["record"], f"record holding {name} is not assembled into ServerArgs")
        d["null_when_unset"] = d["default"] is None and not d["resolvable"] and d["fallback"] is None
        out[name] = d
    return out


def extract_auth(src: Sources, http: dict) -> dict:
    p = AUTH
    mod = src.module(p)
    fn = find_func(mod, p, "decide_request_auth")
    prefixes = None
    for node in ast.walk(fn):
        if isinstance(node, ast.If) and isinstance(node.test, ast.BoolOp) and isinstance(node.test.op, ast.Or):
            vals = []
            for v in node.test.values:
                if (isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr == "startswith"
                        and ast.unparse(v.func.value) == "path" and v.args and isinstance(v.args[0], ast.Constant)):
                    vals.append(v.args[0].value)
            if vals and len(vals) == len(node.test.values) and \
                    any("allowed=True" in ast.unparse(s) for s in node.body if isinstance(s, ast.Return)):
                prefixes = vals
    if prefixes is None:
        raise Drift(p, "decide_request_auth", "no `if path.startswith(...) or ...: return AuthDecision(allowed=True)`")
    fsrc = ast.unparse(fn)
    options = "if method == 'OPTIONS':" in fsrc
    scheme_ci = "parts[0].lower() != 'bearer'" in fsrc
    if "authorization_header.split(' ', 1)" not in fsrc:
        raise Drift(p, "decide_request_auth._check_bearer_token", "header is no longer split(' ', 1)")
    # which levels accept api_key when only api_key is configured
    levels_needing_api_key = []
    for node in ast.walk(fn):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and ast.unparse(node.test.left) == "auth_level":
            lv = ast.unparse(node.test.comparators[0]).split(".")[-1]
            if "_check_bearer_token(authorization_header, api_key)" in ast.unparse(node):
                levels_needing_api_key.append(lv)
    tail = [s for s in fn.body if isinstance(s, ast.If) and ast.unparse(s.test) == "api_key"]
    if tail and "_check_bearer_token(authorization_header, api_key)" in ast.unparse(tail[-1]):
        levels_needing_api_key.append("NORMAL")
    # AuthDecision default status
    dec = find_class(mod, p, "AuthDecision")
    default_status = None
    for f in class_fields(dec):
        if f["name"] == "error_status_code":
            default_status = int(f["default"])
    # add_api_key_middleware's body
    mw = find_func(mod, p, "add_api_key_middleware")
    body = None
    for node in ast.walk(mw):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "ORJSONResponse":
            for kw in node.keywords:
                if kw.arg == "content" and isinstance(kw.value, ast.Dict):
                    body = kw.value
    if body is None:
        raise Drift(p, "add_api_key_middleware", "no ORJSONResponse(content={...})")
    bodies = {}
    for k, v in zip(body.keys, body.values):
        if not (isinstance(k, ast.Constant) and isinstance(v, ast.IfExp)):
            raise Drift(p, "add_api_key_middleware", f"error body is not {{key: A if status == 401 else B}}: {ast.unparse(body)}")
        test = ast.unparse(v.test)
        if not test.endswith("== 401"):
            raise Drift(p, "add_api_key_middleware", f"error body test {test} is not `== 401`")
        bodies["401"] = {k.value: ast.literal_eval(v.body)}
        bodies["403"] = {k.value: ast.literal_eval(v.orelse)}
    levels = {path: r["auth_level"] for path, r in http["routes"].items()}
    return {"always_allowed_prefixes": prefixes, "options_always_allowed": options,
            "bearer_scheme_case_insensitive": scheme_ci, "default_error_status": default_status,
            "error_bodies": bodies, "levels_requiring_api_key": sorted(set(levels_needing_api_key)),
            "abort_request_auth_level": levels.get("/abort_request")}


def extract_generate_req(src: Sources) -> dict:
    p = IO_STRUCT
    mod = src.module(p)
    cls = find_class(mod, p, "GenerateReqInput")
    names = [f["name"] for f in class_fields(cls)]
    for need in ("routed_dp_rank", "data_parallel_rank", "rid", "input_ids", "sampling_params", "stream"):
        if need not in names:
            raise Drift(p, f"GenerateReqInput.{need}", "field not found")
    csrc = ast.unparse(cls)
    deprecated = ("'data_parallel_rank' is deprecated, use 'routed_dp_rank' instead." in csrc
                  and "self.routed_dp_rank = self.data_parallel_rank" in csrc)
    if not deprecated:
        raise Drift(p, "GenerateReqInput.normalize_batch_and_arguments", "data_parallel_rank is no longer a deprecated alias of routed_dp_rank")
    # the JSON contract gate (unknown keys ignored)
    am = src.module(API_TYPES)
    gr = find_class(am, API_TYPES, "GenerateRequest")
    contract = [f["name"] for f in class_fields(gr)]
    doc = ast.get_docstring(gr) or ""
    # routed_dp_rank range check in the tokenizer manager
    tm = src.module(TOKENIZER_MANAGER)
    msg = None
    ignored_when = None
    for node in ast.walk(tm):
        if isinstance(node, ast.If) and "obj.routed_dp_rank" in ast.unparse(node.test):
            for sub in ast.walk(node):
                if isinstance(sub, ast.Raise) and isinstance(sub.exc, ast.Call) and ast.unparse(sub.exc.func) == "ValueError" \
                        and sub.exc.args and isinstance(sub.exc.args[0], ast.JoinedStr):
                    parts = []
                    for v in sub.exc.args[0].values:
                        if isinstance(v, ast.Constant):
                            parts.append(v.value)
                        else:
                            parts.append("{" + ast.unparse(v.value).removeprefix("obj.") + "}")
                    msg = "".join(parts)
                if isinstance(sub, ast.If) and "num_dp_ranks <= 1" in ast.unparse(sub.test):
                    ignored_when = ast.unparse(sub.test)
    if msg is None:
        raise Drift(TOKENIZER_MANAGER, "routed_dp_rank range check", "no raise ValueError(f'routed_dp_rank=... out of range ...')")
    # duplicate rids: within one call (GenerateReqInput._validate_rid_uniqueness,
    # run by normalize_batch_and_arguments) and against the requests in flight
    # (TokenizerManager._init_req_state, before tokenization)
    in_batch = fstring_raise(find_func(cls, p, "_validate_rid_uniqueness"), p, "GenerateReqInput._validate_rid_uniqueness")
    if "self._validate_rid_uniqueness()" not in ast.unparse(find_func(cls, p, "normalize_batch_and_arguments")):
        raise Drift(p, "GenerateReqInput.normalize_batch_and_arguments", "no longer calls _validate_rid_uniqueness")
    tmc = find_class(tm, TOKENIZER_MANAGER, "TokenizerManager")
    init_state = find_func(tmc, TOKENIZER_MANAGER, "_init_req_state")
    in_flight = fstring_raise(init_state, TOKENIZER_MANAGER, "TokenizerManager._init_req_state")
    if "self.rid_to_state" not in ast.unparse(init_state):
        raise Drift(TOKENIZER_MANAGER, "TokenizerManager._init_req_state", "the duplicate check no longer looks at rid_to_state")
    gen = ast.unparse(find_func(tmc, TOKENIZER_MANAGER, "generate_request"))
    if not (gen.index("normalize_batch_and_arguments") < gen.index("routed_dp_rank") < gen.index("_init_req_state")):
        raise Drift(TOKENIZER_MANAGER, "TokenizerManager.generate_request", "normalize, routed_dp_rank check, _init_req_state no longer run in this order")
    return {"fields": names, "routed_dp_rank": True, "data_parallel_rank_deprecated_alias": True,
            "contract_fields": contract, "contract_ignores_unknown_keys": "unknown keys ignored" in doc,
            "routed_dp_rank_out_of_range_error": msg, "routed_dp_rank_ignored_when": ignored_when,
            "duplicate_rid_in_request_error": in_batch, "duplicate_rid_in_flight_error": in_flight}


def fstring_raise(func, path: str, symbol: str) -> str:
    """The message of the one `raise ValueError(f"...")` in func, with each
    placeholder written as {expr}."""
    found = []
    for sub in ast.walk(func):
        if isinstance(sub, ast.Raise) and isinstance(sub.exc, ast.Call) and ast.unparse(sub.exc.func) == "ValueError" \
                and sub.exc.args and isinstance(sub.exc.args[0], ast.JoinedStr):
            parts = []
            for v in sub.exc.args[0].values:
                parts.append(v.value if isinstance(v, ast.Constant) else "{" + ast.unparse(v.value) + "}")
            found.append("".join(parts))
    if len(found) != 1:
        raise Drift(path, symbol, f"want one raise ValueError(f'...'), found {len(found)}")
    return found[0]


def extract_retraction(src: Sources) -> dict:
    p = METRICS_COLLECTOR
    mod = src.module(p)
    counters = {}
    for node in ast.walk(mod):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("Counter", "Gauge", "Histogram")):
            continue
        name = None
        labelled = False
        for kw in node.keywords:
            if kw.arg == "name" and isinstance(kw.value, ast.Constant):
                name = kw.value.value
            if kw.arg == "labelnames":
                labelled = True
        if name and "retract" in name:
            counters[name] = {"kind": node.func.id, "labelled": labelled}
    c = counters.get("sglang:num_retracted_requests_total")
    if c is None:
        raise Drift(p, "sglang:num_retracted_requests_total", "metric not declared")
    if c["kind"] != "Counter":
        raise Drift(p, "sglang:num_retracted_requests_total", f"is a {c['kind']}, not a Counter")
    if not c["labelled"]:
        raise Drift(p, "sglang:num_retracted_requests_total", "no labelnames: it would be exported as 0 from the start")
    inc = find_func(find_class(mod, p, "SchedulerMetricsCollector"), p, "increment_retracted_reqs")
    if "self.num_retracted_reqs_total.labels(**self.labels).inc(num_retracted_reqs)" not in ast.unparse(inc):
        raise Drift(p, "SchedulerMetricsCollector.increment_retracted_reqs", "does not .labels(...).inc() the counter")
    # meta_info key for per-request retractions
    tm = src.module(TOKENIZER_MANAGER)
    meta_key = None
    meta_keys = None
    for node in ast.walk(tm):
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "meta_info" and isinstance(node.value, ast.Dict):
            keys, _ = dict_const_keys(node.value)
            for k, v in zip(node.value.keys, node.value.values):
                if isinstance(k, ast.Constant) and "retraction_counts" in ast.unparse(v):
                    meta_key = k.value
                    meta_keys = keys
    if meta_key is None:
        raise Drift(TOKENIZER_MANAGER, "meta_info", "no meta_info key fed from recv_obj.retraction_counts")
    return {"counter": "sglang:num_retracted_requests_total", "kind": c["kind"], "labelled": c["labelled"],
            "retract_metrics": counters, "meta_info_key": meta_key, "meta_info_base_keys": meta_keys}


def extract_stop_trim(src: Sources) -> dict:
    """Whether `text` includes a matched stop token: DetokenizerManager.trim_matched_stop
    drops the last id (the matched token) unless no_stop_trim, and both the
    streamed ids and the finished text go through it."""
    p = DETOKENIZER
    cls = find_class(src.module(p), p, "DetokenizerManager")
    trim = find_func(cls, p, "trim_matched_stop")
    args = [a.arg for a in trim.args.args]
    if args[:4] != ["self", "output", "finished_reason", "no_stop_trim"]:
        raise Drift(p, "DetokenizerManager.trim_matched_stop", f"arguments {args}")
    int_branch = None
    for node in ast.walk(trim):
        if isinstance(node, ast.If) and "isinstance(matched, int)" in ast.unparse(node.test):
            int_branch = node
    if int_branch is None:
        raise Drift(p, "DetokenizerManager.trim_matched_stop", "no isinstance(matched, int) branch (stop token)")
    body = "\n".join(ast.unparse(n) for n in int_branch.body)
    drops_last = "return output[:-1]" in body
    keeps_if_no_trim = "if no_stop_trim:\n    return output" in body
    if not drops_last or not keeps_if_no_trim:
        raise Drift(p, "DetokenizerManager.trim_matched_stop", "stop-token branch no longer returns output[:-1] unless no_stop_trim")
    dec = ast.unparse(find_func(cls, p, "_decode_batch_token_id_output"))
    calls = dec.count("self.trim_matched_stop(")
    if calls < 2 or "s.decode_ids[s.surr_offset:]" not in dec:
        raise Drift(p, "DetokenizerManager._decode_batch_token_id_output", f"trim_matched_stop applied {calls} times, want ids and finished text")
    sp = find_class(src.module(SAMPLING_PARAMS), SAMPLING_PARAMS, "SamplingParams")
    default = None
    for f in class_fields(sp):
        if f["name"] == "no_stop_trim":
            default = f["default"]
    if default is None:
        raise Drift(SAMPLING_PARAMS, "SamplingParams.no_stop_trim", "no field with a default")
    return {"text_drops_matched_stop_token": drops_last, "no_stop_trim_keeps": keeps_if_no_trim,
            "keeps_tool_close_tokens": "self.tool_close_token_ids" in body,
            "trim_calls_in_decode": calls, "no_stop_trim_default": default}


def extract_legacy(src: Sources) -> dict:
    """What sets LEGACY apart from PIN, each fact anchored on a shape that is
    there (so a wrong path fails instead of reading as 'absent')."""
    ver_path = "sglang/version.py"
    v = module_assign(src.module(ver_path), ver_path, "__version__")
    if not (isinstance(v, ast.Constant) and v.value == LEGACY):
        raise Drift(ver_path, "__version__", f"{ast.unparse(v)}, want {LEGACY!r}")
    http = src.module(HTTP_SERVER)
    routes = routes_of(http, "app")
    for need in ("/generate", "/health", "/get_server_info", "/abort_request"):
        if need not in routes:
            raise Drift(HTTP_SERVER, need, f"route not found in {LEGACY}")
    # /v1/loads: no route constant anywhere in the entrypoints
    v1_loads = [n for n in src.glob("sglang/srt/entrypoints/")
                if any(isinstance(c, ast.Constant) and c.value == "/v1/loads" for c in ast.walk(src.module(n)))]
    # metrics: the collector declares the retraction gauge but not the counter
    coll = "sglang/srt/metrics/collector.py"
    names = [kw.value.value for node in ast.walk(src.module(coll)) if isinstance(node, ast.Call)
             for kw in node.keywords if kw.arg == "name" and isinstance(kw.value, ast.Constant)
             and isinstance(kw.value.value, str)]
    if "sglang:num_retracted_reqs" not in names:
        raise Drift(coll, "sglang:num_retracted_reqs", "retraction gauge not found")
    # meta_info keys
    meta = None
    for node in ast.walk(src.module(TOKENIZER_MANAGER)):
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "meta_info" and isinstance(node.value, ast.Dict):
            keys, _ = dict_const_keys(node.value)
            if "id" in keys:
                meta = keys
    if meta is None:
        raise Drift(TOKENIZER_MANAGER, "meta_info", "no meta_info = {'id': ...} dict")
    # api key middleware (utils/common.py in LEGACY)
    mw = find_func(src.module(COMMON), COMMON, "add_api_key_middleware")
    msrc = ast.unparse(mw)
    prefixes = [c.args[0].value for c in ast.walk(mw) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
                and c.func.attr == "startswith" and c.args and isinstance(c.args[0], ast.Constant)]
    if not prefixes or "{'error': 'Unauthorized'}" not in msrc:
        raise Drift(COMMON, "add_api_key_middleware", "no startswith exemptions or no {'error': 'Unauthorized'} body")
    exact = "request.headers.get('Authorization') != 'Bearer ' + api_key" in msrc
    # duplicate rids: GenerateReqInput and TokenizerManager._init_req_state are there, the checks are not
    io = src.module(IO_STRUCT)
    gri = find_class(io, IO_STRUCT, "GenerateReqInput")
    tmc = find_class(src.module(TOKENIZER_MANAGER), TOKENIZER_MANAGER, "TokenizerManager")
    dup_checks = "Duplicate request ID" in ast.unparse(gri) or "Duplicate request ID" in ast.unparse(tmc)
    return {"version": LEGACY, "checks_duplicate_rids": dup_checks, "routes": sorted(routes), "has_v1_loads": bool(v1_loads),
            "has_server_info": "/server_info" in routes, "metric_names": sorted(n for n in names if "retract" in n),
            "has_retraction_counter": "sglang:num_retracted_requests_total" in names,
            "meta_info_base_keys": meta, "always_allowed_prefixes": prefixes,
            "bearer_scheme_case_insensitive": not exact}


def extract(src: Sources) -> dict:
    facts: dict = {"sglang_version": extract_version(src)}
    snap = extract_load_snapshot(src)
    facts["load_snapshot"] = snap
    facts["load_inquirer"] = extract_load_inquirer(src, snap)
    facts["v1_loads"] = extract_v1_loads(src)
    http = extract_http_server(src)
    facts["http_server"] = http
    facts["build_server_info"] = extract_build_server_info(src)
    facts["init_info"] = {
        "scheduler": init_info_keys(src, SCHEDULER, "Scheduler"),
        "data_parallel_controller": init_info_keys(src, DP_CONTROLLER, "DataParallelController"),
    }
    facts["internal_state"] = extract_internal_state(src)
    facts["memory_usage"] = extract_memory_usage(src)
    facts["graph_phase_keys"] = extract_graph_keys(src)
    facts["startup_time"] = extract_startup_time(src)
    facts["server_args"] = extract_server_args(src, [
        "max_running_requests", "context_length", "dp_size", "max_queued_requests",
        "max_total_tokens", "chunked_prefill_size", "api_key", "admin_api_key"])
    facts["auth"] = extract_auth(src, http)
    facts["generate_req_input"] = extract_generate_req(src)
    facts["retraction"] = extract_retraction(src)
    facts["stop_trim"] = extract_stop_trim(src)
    need = ["/generate", "/health", "/server_info", "/get_server_info", "/abort_request"]
    missing = [r for r in need if r not in http["routes"]]
    if missing:
        raise Drift(HTTP_SERVER, "routes", f"missing {missing}")
    facts["routes"] = {r: http["routes"][r] for r in need}
    facts["routes"]["/v1/loads"] = {"methods": facts["v1_loads"]["methods"], "function": "get_loads",
                                    "auth_level": "NORMAL", "module": V1_LOADS}
    facts["routes"]["/metrics"] = {"mount": facts["build_server_info"]["metrics_mount"],
                                   "when": http["metrics_mount_guard"]}
    return facts


def main() -> int:
    if sys.version_info < (3, 9):  # ast.unparse
        print(f"extract.py: UNAVAILABLE: needs Python 3.9+, this is {sys.version.split()[0]}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", required=True, help="cache dir (the wheel goes to CACHE/sglang-PIN)")
    ap.add_argument("--wheel", help="use this wheel instead of downloading")
    ap.add_argument("--no-cache", action="store_true", help="re-extract even when cached facts exist")
    args = ap.parse_args()
    try:
        wheel = args.wheel or obtain_wheel(args.cache, PIN)
        legacy_wheel = obtain_wheel(args.cache, LEGACY)
    except Unavailable as e:
        print(f"extract.py: UNAVAILABLE: {e}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    wheel_sha = sha256_file(wheel)
    legacy_sha = sha256_file(legacy_wheel)
    self_sha = sha256_file(os.path.abspath(__file__))
    key = hashlib.sha256(f"{wheel_sha} {legacy_sha} {self_sha}".encode()).hexdigest()
    out_path = os.path.join(os.path.dirname(wheel), f"facts-{key[:24]}.json")
    if not args.no_cache and os.path.exists(out_path):
        with open(out_path) as f:
            sys.stdout.write(f.read())
        return 0
    try:
        facts = extract(Sources(wheel))
    except Drift as e:
        print(f"extract.py: DRIFT in sglang {PIN} ({os.path.basename(wheel)}): {e}", file=sys.stderr)
        return EXIT_DRIFT
    except zipfile.BadZipFile as e:
        print(f"extract.py: UNAVAILABLE: {wheel} is not a wheel ({e}); delete it to re-download", file=sys.stderr)
        return EXIT_UNAVAILABLE
    try:
        facts["legacy"] = extract_legacy(Sources(legacy_wheel))
    except Drift as e:
        print(f"extract.py: DRIFT in sglang {LEGACY} ({os.path.basename(legacy_wheel)}): {e}", file=sys.stderr)
        return EXIT_DRIFT
    except zipfile.BadZipFile as e:
        print(f"extract.py: UNAVAILABLE: {legacy_wheel} is not a wheel ({e}); delete it to re-download", file=sys.stderr)
        return EXIT_UNAVAILABLE
    facts["provenance"] = {"pin": PIN, "wheel": os.path.basename(wheel), "wheel_sha256": wheel_sha,
                           "legacy": LEGACY, "legacy_wheel": os.path.basename(legacy_wheel),
                           "legacy_wheel_sha256": legacy_sha, "extractor_sha256": self_sha}
    text = json.dumps(facts, indent=1, sort_keys=True) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=".facts-", dir=os.path.dirname(wheel))
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, out_path)
    for stale in glob.glob(os.path.join(os.path.dirname(wheel), "facts-*.json")):
        if stale != out_path:
            try:
                os.remove(stale)
            except OSError:
                pass
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
