"""Kernel sources -> loaded CUDA functions: NVRTC through CuPy RawModule, cached on disk by CuPy.

``flatten(path)`` inlines our own ``#include "..."`` headers (each once, as #pragma once would), so
the source CuPy hashes for its disk cache covers every header: a header edit recompiles.
``get_kernel(device, variant, template_args)`` compiles one template instantiation per device.
Set CUPY_CACHE_DIR to move the cache, before cupy is imported (CuPy 14 fixes its cache directory at
import; ``kernel_cache_dir`` is the one this process reads); an unusable cache directory (read-only,
no space) degrades to compiling in memory with a warning.
"""
from __future__ import annotations

import os
import re
import threading
import warnings
from functools import lru_cache
from pathlib import Path

from .hw import ARCH, import_cupy, require_sm90

# NOTES: -default-device: NVRTC 12 takes the generic lambdas of the kernels (static_for, the
# per-split K loops) for host functions, which JIT mode refuses; NVRTC 13 infers them as device
# code either way.
NVRTC_OPTIONS = ("-std=c++17", f"-arch={ARCH}", "-default-device")
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$', re.M)


@lru_cache(maxsize=None)
def kernel_dir() -> Path:
    """The folder of the fp8gemm.kernels_cu package: fp8gemm/kernels_cu installed, the checkout's
    kernels_cu/ under an editable install."""
    from . import kernels_cu

    return Path(kernels_cu.__file__).resolve().parent


def _flatten(path: Path, seen: set) -> str:
    path = path.resolve()
    if path in seen:
        return ""
    seen.add(path)
    text = path.read_text()

    def include(match):
        return _flatten(path.parent / match.group(1), seen)

    text = _INCLUDE.sub(include, text)
    return text.replace("#pragma once", "")


@lru_cache(maxsize=None)
def flatten(variant: str) -> str:
    """The variant's .cu with every local header inlined."""
    return _flatten(kernel_dir() / f"{variant}.cu", set())


def kernel_name(variant: str, template_args: tuple) -> str:
    """The C++ name expression of one instantiation, e.g. fp8gemm::x_kernel<128, 6, 0, 8>."""
    return f"fp8gemm::{variant}_kernel<{', '.join(str(a) for a in template_args)}>"


_lock = threading.Lock()
_kernels = {}


def kernel_cache_dir() -> str:
    """The directory this process's CuPy reads and writes compiled kernels in. CuPy 14 makes its
    disk cache when cupy is imported, from CUPY_CACHE_DIR as it was then: a CUPY_CACHE_DIR set later
    moves child processes' cache but not this one's (fp8gemm.workers hands its workers this one, so
    that what fp8gemm.precompile compiles is where this process looks)."""
    try:
        import cupy.cuda.compiler as cc
        cache = getattr(getattr(cc, "_kernel_cache_backend", None), "_cache_dir", None)
    except ImportError:
        cache = None
    if isinstance(cache, str):
        return cache
    return os.environ.get("CUPY_CACHE_DIR", os.path.expanduser("~/.cupy/kernel_cache"))


def nvrtc_cubin(variant: str, template_args: tuple, prelude: str = "") -> bytes:
    """One instantiation compiled for ``ARCH`` by NVRTC alone (no GPU, no CUDA context, no
    cache): what an install can build. The doctor and the install test use it; launches go
    through get_kernel. ``prelude``: as get_kernel's."""
    from cupy.cuda import nvrtc

    name = kernel_name(variant, template_args)
    prog = nvrtc.createProgram(prelude + flatten(variant), f"{variant}.cu", [], [])
    try:
        nvrtc.addNameExpression(prog, name)
        try:
            nvrtc.compileProgram(prog, list(NVRTC_OPTIONS))
        except nvrtc.NVRTCError as exc:
            raise RuntimeError(f"NVRTC could not compile {name}: {nvrtc.getProgramLog(prog)[-2000:]}") from exc
        return nvrtc.getCUBIN(prog)
    finally:
        nvrtc.destroyProgram(prog)


def get_kernel(device: int, variant: str, template_args: tuple, smem_bytes: int, prelude: str = ""):
    """A CuPy RawKernel ready to launch on ``device`` with ``smem_bytes`` of dynamic smem.
    ``prelude``: source put before the variant's (a ``#define`` a kernel reads where a template
    argument cannot say it, e.g. whether it carries a cluster attribute); part of the key, and of
    the source CuPy's disk cache hashes."""
    key = (device, variant, template_args, prelude)
    kern = _kernels.get(key)
    if kern is not None:
        return kern
    cupy = import_cupy()
    with _lock:
        kern = _kernels.get(key)
        if kern is None:
            require_sm90(device)
            name = kernel_name(variant, template_args)
            with cupy.cuda.Device(device):
                try:
                    kern = _build(cupy, variant, name, smem_bytes, prelude=prelude)
                except OSError as exc:
                    # NOTES: CuPy's disk cache refuses (read-only or missing permissions, full
                    # disk): compile in memory instead of failing. A corrupt cache entry needs no
                    # handling here: CuPy checks each entry's hash and recompiles a bad one.
                    warnings.warn(f"fp8gemm: the kernel cache is not usable ({type(exc).__name__}: {exc}); "
                                  f"compiling in memory. Point CUPY_CACHE_DIR at a writable directory to "
                                  f"keep compiled kernels across runs.", RuntimeWarning, stacklevel=3)
                    kern = _build(cupy, variant, name, smem_bytes, in_memory=True, prelude=prelude)
            _kernels[key] = kern
    return kern


def _build(cupy, variant: str, name: str, smem_bytes: int, in_memory: bool = False, prelude: str = ""):
    previous = os.environ.get("CUPY_CACHE_IN_MEMORY")
    if in_memory:
        os.environ["CUPY_CACHE_IN_MEMORY"] = "1"
    try:
        module = cupy.RawModule(code=prelude + flatten(variant), options=NVRTC_OPTIONS, name_expressions=[name])
        kern = module.get_function(name)
        if smem_bytes > 48 * 1024:
            kern.max_dynamic_shared_size_bytes = smem_bytes
        kern.compile()  # force the load now, not inside the first launch
        return kern
    finally:
        if in_memory:
            if previous is None:
                os.environ.pop("CUPY_CACHE_IN_MEMORY", None)
            else:
                os.environ["CUPY_CACHE_IN_MEMORY"] = previous
