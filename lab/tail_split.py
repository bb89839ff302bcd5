"""TAIL_SPLIT against whole tiles on shapes whose last wave is partial (issue 29's one-token layer,
issue 27's 1.x-wave shapes): the MoE layer's grouped GEMMs at one token (V4-Flash: 6 experts x 32
weight tiles = 1.45 waves; V4-Pro L1: 288 tiles = 2.2 waves) with the decode tile forced unsplit and
tail-split, the whole layer at one token as it runs by default, and dense shapes of 150-200 tiles
forced both ways. CUPTI, L2 flushed, turns (bench/timing.py), median of 30.
Usage: python lab/tail_split.py"""
import cupy
import numpy as np

import fp8gemm
from fp8gemm.bench.moe import MODELS, cases, fp8_bytes
from fp8gemm.bench.timing import L2Flush, time_calls
from fp8gemm.dispatch import General, SwapAB
from fp8gemm.dispatch.general import TAIL_SPLIT
from fp8gemm.testing import random_case


def main():
    flush = L2Flush()
    fns = {}
    grng = cupy.random.RandomState(3)
    keep = []
    for name, (experts, hidden, inter) in MODELS.items():
        w1 = fp8_bytes((experts, 2 * inter, hidden), grng)
        w2 = fp8_bytes((experts, hidden, inter), grng)
        s1 = cupy.full((experts, 2 * inter // 128, hidden // 128), 1.0 / (32 * hidden ** 0.5), dtype=cupy.float32)
        s2 = cupy.full((experts, hidden // 128, inter // 128), 1.0 / (32 * inter ** 0.5), dtype=cupy.float32)
        (_, _, ids, wts), = cases([1], experts, ["uniform"], seed=7)
        counts = np.bincount(ids.reshape(-1), minlength=experts)
        offsets = cupy.asarray(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
        x = fp8_bytes((1, hidden), grng)
        xs = cupy.full((1, hidden // 128), 1.0 / 64, dtype=cupy.float32)
        ids_d, w_d = cupy.asarray(ids), cupy.asarray(wts)
        fns[f"{name} layer T=1 (default)"] = (lambda x=x, xs=xs, ids_d=ids_d, w_d=w_d, w1=w1, s1=s1, w2=w2, s2=s2:
                                              fp8gemm.moe(x, ids_d, w_d, w1, s1, w2, s2, x_scale=xs))
        for gname, (w, s, k, out_dtype, precise) in {"L1": (w1, s1, hidden, "float32", False),
                                                     "L2": (w2, s2, inter, "bfloat16", True)}.items():
            a = fp8_bytes((6, k), grng)
            sa = cupy.full((6, k // 128), 1.0 / 64, dtype=cupy.float32)
            keep += [a, sa]
            for splits in (1, TAIL_SPLIT):
                cfg = SwapAB(8, 6, 1, splits)
                fns[f"{name} {gname} T=1 {cfg.label()}"] = (
                    lambda a=a, w=w, sa=sa, s=s, o=offsets, od=out_dtype, p=precise, cfg=cfg:
                    fp8gemm.grouped_matmul_contiguous(a, w, sa, s, o, out_dtype=od, precise_fp32=p, config=cfg))
        keep += [w1, w2, s1, s2, offsets, x, xs, ids_d, w_d]
    for (m, n, k), block_n in (((768, 4096, 4096), 128), ((300, 6400, 2048), 128), ((384, 8192, 4096), 128),
                               ((6, 24576, 4096), None), ((130, 1920, 512), 64)):
        case = random_case(m, n, k, seed=m + n + k)
        keep.append(case)
        for splits in (1, TAIL_SPLIT):
            cfg = SwapAB(8, 6, 1, splits) if block_n is None else General(block_n, 4, 8, splits)
            fns[f"{m}x{n}x{k} {cfg.label()}"] = (lambda case=case, cfg=cfg: fp8gemm.matmul(
                case.a, case.b, case.a_scale, case.b_scale, config=cfg))
    for f in fns.values():
        f()
    cupy.cuda.Device().synchronize()
    us = time_calls(fns, flush, 30)
    for label, t in us.items():
        print(f"{label:60} {t:9.2f} us")


if __name__ == "__main__":
    main()
