"""``python -m fp8gemm``: what a bug report needs, and what is missing.

Prints one line per item (the GPU and its compute capability, the driver and the CUDA runtime
CuPy sees, NVRTC, CuPy, numba, torch and JAX when present, the kernel cache, the dispatch table in
use) and then, plainly, each requirement that is not met. Exit status 0 when fp8gemm can run
its kernels here, 1 otherwise. Nothing here needs a GPU to run.
"""
from __future__ import annotations

import importlib
import os
import platform
import sys


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}"


def _line(exc) -> str:
    """An exception's message on one line, without CuPy's repeats."""
    parts = []
    for part in str(exc).replace("\n", ", ").split(", "):
        if part.strip() and part.strip() not in parts:
            parts.append(part.strip())
    return ", ".join(parts)


def gather() -> tuple[list, list]:
    """([(item, value)], [problem]) for this machine."""
    from . import __version__
    from .hw import ARCH, CUPY_MISSING, MIN_DRIVER, install_command

    items = [("fp8gemm", f"{__version__} ({os.path.dirname(os.path.abspath(__file__))})"),
             ("python", f"{platform.python_version()} on {platform.platform()}"),
             ("kernels built for", ARCH)]
    problems = []
    try:
        import cupy

        items.append(("cupy", cupy.__version__))
        rt = cupy.cuda.runtime
        cuda_major = None
        try:
            runtime = rt.runtimeGetVersion()
            cuda_major = runtime // 1000
            items.append(("CUDA runtime (CuPy's)", _cuda_version(runtime)))
        except Exception as exc:          # noqa: BLE001 - each probe reports its own failure
            problems.append(f"the CUDA runtime does not load: {_line(exc)}")
        try:
            driver = rt.driverGetVersion()
            items.append(("NVIDIA driver (CUDA version)", _cuda_version(driver) if driver else "none"))
            need = MIN_DRIVER.get(cuda_major, "a recent")
            if not driver:
                problems.append(f"no NVIDIA driver: CuPy's CUDA {cuda_major} needs driver {need} or newer")
            elif cuda_major is not None and driver // 1000 < cuda_major:
                other = (f"install CuPy for CUDA {driver // 1000}: {install_command(driver // 1000)}"
                         if driver // 1000 in MIN_DRIVER else "update the driver")
                problems.append(f"the driver supports CUDA {_cuda_version(driver)}, older than CuPy's CUDA "
                                f"{cuda_major} (driver {need} or newer): {other}")
        except Exception as exc:          # noqa: BLE001
            problems.append(f"no NVIDIA driver answers: {_line(exc)}")
        try:
            from cupy.cuda import nvrtc

            major, minor = nvrtc.getVersion()
            items.append(("NVRTC", f"{major}.{minor}"))
            if cuda_major is not None and major != cuda_major:
                how = f": {install_command(cuda_major)}" if cuda_major in MIN_DRIVER else ""
                problems.append(f"NVRTC {major}.{minor} is not CuPy's CUDA {cuda_major}: install the NVRTC of "
                                f"the same major version{how}")
            import time

            from .compiler import nvrtc_cubin
            start = time.perf_counter()
            nvrtc_cubin("quantize_per_token_group", (0, 4))
            items.append((f"NVRTC builds {ARCH}", f"yes (the quantizer kernel in {time.perf_counter() - start:.1f} s)"))
        except Exception as exc:          # noqa: BLE001
            problems.append(f"NVRTC (the run-time compiler of the kernels) does not load: {_line(exc)}")
        try:
            count = rt.getDeviceCount()
        except Exception as exc:          # noqa: BLE001
            count = 0
            problems.append(f"CUDA sees no GPU: {_line(exc)}")
        sm90 = 0
        for d in range(count):
            p = rt.getDeviceProperties(d)
            name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
            cc = f"{p['major']}.{p['minor']}"
            items.append((f"GPU {d}", f"{name}, compute capability {cc}, {p['multiProcessorCount']} SMs, "
                                      f"{p['totalGlobalMem'] / 2**30:.0f} GiB"))
            sm90 += (p["major"], p["minor"]) == (9, 0)
        if count and not sm90:
            problems.append("no SM90 GPU (compute capability 9.0: H100, H200, H800, H20, GH200): "
                            "fp8gemm's kernels run on nothing else")
        from .compiler import kernel_cache_dir
        cache = kernel_cache_dir()          # the one this process uses (CuPy 14 fixes it at import)
        writable = os.access(cache if os.path.isdir(cache) else os.path.dirname(cache) or ".", os.W_OK)
        items.append(("kernel cache", f"{cache} ({'writable' if writable else 'NOT writable: kernels compile in memory, every process'})"))
    except ImportError as exc:
        problems.append(f"{CUPY_MISSING} ({_line(exc)})")
    from .dispatch import selector

    table = selector.TABLE_DIR / "h200.json"
    items.append(("dispatch table", f"{table} ({len(selector.load_table('h200'))} (N, K) pairs)"
                  if table.exists() else f"{table} missing: the fallback model picks every kernel"))
    for mod in ("numba", "torch", "jax"):
        try:
            items.append((mod, importlib.import_module(mod).__version__))
        except ImportError:
            items.append((mod, "not installed" + ("" if mod != "numba" else ": the host quantizers run in NumPy")))
    return items, problems


def main() -> int:
    items, problems = gather()
    width = max(len(k) for k, _ in items)
    for k, v in items:
        print(f"{k:<{width}}  {v}")
    if problems:
        print("\nMissing for fp8gemm to run its kernels here:")
        for p in problems:
            print(f"  - {p}")
        return 1
    print("\nEverything fp8gemm needs is here.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
