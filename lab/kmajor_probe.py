"""Lab (issue 55): which rule the dense kernel's K-major As window breaks (session 37: every K-major
instantiation raised cudaErrorIllegalInstruction on the H100). One variant per process (a fault
loses the context): python lab/kmajor_probe.py VARIANT, VARIANT one of
  plain      the window as shipped (behind FP8GEMM_DENSE_K_MAJOR=1)
  l2none     the As map encoded with no L2 promotion
  mmajor     the same call on an M-major As (the control)
Session 38: a window whose inner coordinate (kb) is not a multiple of 4 floats (16 bytes) is the
illegal instruction; the kernel now starts it at kb & ~3.
Prints one line: variant, ok / the error, the relative error against the float64 reference."""
import os
import sys

os.environ["FP8GEMM_DENSE_K_MAJOR"] = "1"

import cupy  # noqa: E402

import fp8gemm  # noqa: E402
from fp8gemm import reference, tma  # noqa: E402
from fp8gemm.dispatch import Dense  # noqa: E402
from fp8gemm.testing import as_float64, random_case  # noqa: E402


def main(variant):
    case = random_case(200, 304, 2048, seed=5)
    sa = case.a_scale
    if variant == "l2none":
        tma.L2_PROMOTION_256B = 0
        tma._cache.clear()
    if variant == "mmajor":
        m, kb = sa.shape
        buf = cupy.zeros((kb, 200), dtype=cupy.float32)
        buf[:, :m] = sa.T
        sa = buf[:, :m].T
    try:
        out = fp8gemm.matmul(case.a, case.b, sa, case.b_scale, config=Dense(128, 128, 5, 1, 1, 8))
        cupy.cuda.Device().synchronize()
        err = reference.rel_fro_error(as_float64(out), case.reference(cupy))
        print(f"{variant:8s} ok  err {err:.2e}", flush=True)
    except Exception as exc:          # noqa: BLE001 - the probe reports any failure
        print(f"{variant:8s} {type(exc).__name__}: {str(exc)[:120]}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
