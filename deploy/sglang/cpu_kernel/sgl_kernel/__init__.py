"""A CPU stand-in for the `sgl_kernel` package, for sglang==0.5.23 on a machine without a GPU.

The PyPI `sglang-kernel` wheel is built for CUDA only: importing it fails on `libcuda.so.1`. With
SGLANG_USE_CPU_ENGINE=1, sglang imports two CPU functions from `sgl_kernel` on its core path (the KV pool
and the request-to-token table); upstream provides them from a CPU build of sgl-kernel for Xeons with AMX.
This package, placed first on PYTHONPATH by deploy/sglang/sglang.sh, implements those two in plain torch.

It registers no torch.ops.sgl_kernel operator, so sglang's cpu_has_amx_support() is false and every layer
takes its forward_native path. Every other name (and every submodule, e.g. sgl_kernel.kvcacheio) can be
imported, so sglang's module-level imports succeed, but calling one raises NotImplementedError naming it:
a code path this substitute does not cover fails loudly instead of computing something else.

Tied to sglang 0.5.23's internals (sglang/kernels/ops/kvcache/cache_move.py,
sglang/srt/mem_cache/allocation.py): the version is pinned by sglang.sh.
"""
import ctypes
import importlib.abc
import importlib.machinery
import sys
import types

import torch

__version__ = "0.0.0+draftflow.cpu"


def copy_all_layer_kv_cache_cpu(data_ptrs, strides, tgt_loc, src_loc):
    """Copies rows src_loc[j] to tgt_loc[j] in every KV buffer.

    data_ptrs[i] is the raw address of buffer i and strides[i] its row stride in bytes. All source rows are
    read before any target row is written, so overlapping ranges copy as a gather then a scatter.
    """
    n = int(tgt_loc.numel())
    if n == 0:
        return
    src = src_loc.to(torch.int64).cpu()
    tgt = tgt_loc.to(torch.int64).cpu()
    rows = int(max(int(src.max()), int(tgt.max()))) + 1
    for ptr, stride in zip(data_ptrs.tolist(), strides.tolist()):
        stride = int(stride)
        raw = (ctypes.c_uint8 * (rows * stride)).from_address(int(ptr))
        buf = torch.frombuffer(raw, dtype=torch.uint8).view(rows, stride)
        buf[tgt] = buf[src].clone()


def assign_req_to_token_pool_cpu(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, pool_len):
    """For each request i, writes the next end_offset[i]-start_offset[i] entries of out_cache_loc into
    req_to_token[req_pool_indices[i], start_offset[i]:end_offset[i]] (the entries of request i follow
    those of requests 0..i-1 in out_cache_loc)."""
    starts = start_offset.tolist()
    ends = end_offset.tolist()
    rows = req_pool_indices.tolist()
    pos = 0
    for row, s, e in zip(rows, starts, ends):
        n = int(e) - int(s)
        if n <= 0:
            continue
        if int(e) > int(pool_len):
            raise ValueError(f"assign_req_to_token_pool_cpu: end offset {e} beyond the pool row length {pool_len}")
        req_to_token[int(row), int(s):int(e)] = out_cache_loc[pos:pos + n].to(req_to_token.dtype)
        pos += n


class _Missing:
    """A name the substitute does not implement: importable, attribute access gives further stand-ins,
    and calling it raises NotImplementedError naming it."""

    def __init__(self, name):
        self._name = name

    def __call__(self, *args, **kwargs):
        raise NotImplementedError(
            f"{self._name} is not implemented by draftflow's CPU substitute for sgl_kernel "
            "(deploy/sglang/cpu_kernel): this server configuration needs a real sgl-kernel build")

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Missing(f"{self._name}.{attr}")

    def __repr__(self):
        return f"<missing {self._name}>"


def _module_getattr(modname):
    def __getattr__(attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Missing(f"{modname}.{attr}")
    return __getattr__


__getattr__ = _module_getattr(__name__)


class _SubmoduleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Makes every sgl_kernel.* submodule importable as a module of stand-ins."""

    def find_spec(self, fullname, path, target=None):
        if fullname.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = types.ModuleType(spec.name)
        mod.__path__ = []
        mod.__getattr__ = _module_getattr(spec.name)
        return mod

    def exec_module(self, module):
        pass


if not any(isinstance(f, _SubmoduleFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _SubmoduleFinder())
