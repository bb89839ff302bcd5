"""A CuPy pipeline on a non-blocking stream: quantize activations on the GPU, two chained FP8 GEMMs
writing into preallocated outputs (out=), no host synchronization until the end. Checks both
GEMMs against fp8gemm's float64 reference.

    python examples/cupy_pipeline.py      # prints "ok", exits 1 on a mismatch
"""
import sys

import cupy
import numpy as np

import fp8gemm
from fp8gemm.hw import require_gpu
from fp8gemm import reference


def device_weight(rng, n, k):
    q, s = fp8gemm.quantize_per_block(rng.standard_normal((n, k)).astype(np.float32) / np.sqrt(k))
    return cupy.asarray(q.view(np.uint8)), cupy.asarray(s)       # CuPy has no FP8 dtype: bytes


def main():
    require_gpu("examples/cupy_pipeline.py")  # says what is missing, without a traceback
    rng = np.random.default_rng(0)
    t, h, i = 200, 2048, 3072
    w1, s1 = device_weight(rng, i, h)
    w2, s2 = device_weight(rng, h, i)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        x = cupy.asarray(rng.standard_normal((t, h)).astype(np.float32))
        hidden = cupy.empty((t, i), dtype=cupy.float32)
        y = cupy.empty((t, h), dtype=cupy.float16)
        a, sa = fp8gemm.quantize_per_token_group(x)                   # uint8 codes, fp32 scales
        fp8gemm.matmul(a, w1, sa, s1, out=hidden)                      # fp32 from out='s dtype
        act = hidden * (1 / (1 + cupy.exp(-hidden)))                   # SiLU, on the stream
        b, sb = fp8gemm.quantize_per_token_group(act)
        fp8gemm.matmul(b, w2, sb, s2, out=y)                           # fp16
    stream.synchronize()
    err1 = reference.rel_fro_error(hidden.astype(cupy.float64), reference.matmul(a, w1, sa, s1, xp=cupy))
    err2 = reference.rel_fro_error(y.astype(cupy.float64), reference.matmul(b, w2, sb, s2, xp=cupy))
    ok = err1 <= 1e-4 and err2 <= 1e-3 and float(cupy.abs(y).max()) > 0
    print(f"{'ok' if ok else 'MISMATCH'}: CuPy pipeline on a side stream, GEMM 1 (fp32 out) error "
          f"{err1:.2e}, GEMM 2 (fp16 out) error {err2:.2e}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
