"""Does the GEMM's speed depend on the operand values? (session 7: the MoE bench's grouped GEMMs at
>= 1024 tokens ran 1.5x slower on random +-112 FP8 codes than lab/grouped_bench.py's on positive
codes.) Times fp8gemm.matmul at 8192 x 8192 x 4096 and the grouped L1 of V4-Flash at 4096 tokens on
three kinds of FP8 bytes: fp8gemm.testing's moderate table (|v| in [1/8, 7.5], both signs), random
codes 0x00..0x6E (positive, |v| <= 112), random codes of both signs |v| <= 112. CUPTI, L2 cold,
median of 10. Usage: python lab/data_power.py"""
import cupy
import numpy as np

import fp8gemm
from fp8gemm.bench.moe import fp8_bytes
from fp8gemm.bench.timing import L2Flush, time_calls
from fp8gemm.testing import MODERATE_BYTES


def kind_bytes(kind, shape, rs):
    if kind == "moderate":
        table = cupy.asarray(MODERATE_BYTES)
        out = cupy.empty(shape, dtype=cupy.uint8)
        for i in range(shape[0]):
            out[i] = table[rs.randint(0, len(table), size=shape[1:])]
        return out
    if kind == "positive":
        out = cupy.empty(shape, dtype=cupy.uint8)
        for i in range(shape[0]):
            out[i] = rs.randint(0, 0x6F, size=shape[1:], dtype=cupy.uint8)
        return out
    return fp8_bytes(shape, rs)


flush = L2Flush()
rs = cupy.random.RandomState(0)
kinds = ("moderate", "positive", "signed")
m = n = 8192
k = 4096
sa = cupy.full((m, k // 128), 1e-3, dtype=cupy.float32)
sb = cupy.full((n // 128, k // 128), 1e-3, dtype=cupy.float32)
fns = {}
for kind in kinds:
    a, b = kind_bytes(kind, (m, k), rs), kind_bytes(kind, (n, k), rs)
    fns[f"plain 8192x8192x4096 {kind}"] = lambda a=a, b=b: fp8gemm.matmul(a, b, sa, sb)
E, H, I, T = 256, 4096, 2048, 4096
w1 = {kind: kind_bytes(kind, (E, 2 * I, H), rs) for kind in ("moderate", "signed")}
s1 = cupy.full((E, 2 * I // 128, H // 128), 1e-3, dtype=cupy.float32)
ids = np.argsort(-np.random.default_rng(0).gumbel(size=(T, E)), axis=1)[:, :6]
counts = np.bincount(ids.ravel(), minlength=E)
offsets = cupy.asarray(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
p = int(counts.sum())
sa1 = cupy.full((p, H // 128), 1e-3, dtype=cupy.float32)
for kind in ("moderate", "signed"):
    a1 = kind_bytes(kind, (p, H), rs)
    for od in ("bfloat16", "float32"):
        fns[f"grouped L1 T=4096 {kind} {od}"] = (lambda a1=a1, w=w1[kind], od=od:
                                                 fp8gemm.grouped_matmul_contiguous(a1, w, sa1, s1, offsets, out_dtype=od))
for fn in fns.values():
    fn()
cupy.cuda.Device().synchronize()
t = time_calls(fns, flush, 10)
for name, us in t.items():
    print(f"{name:40} {us:9.1f} us")
