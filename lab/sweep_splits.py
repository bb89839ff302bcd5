"""Sweep (block_n, splits) of the general kernel on small-M shapes: device time per config,
L2-cold, CUPTI (the benchmark's timer). Prints one line per shape with the best config and the
dispatcher's current choice. Usage: python lab/sweep_splits.py"""
import itertools

import torch

import fp8gemm
from fp8gemm.bench.timing import L2Flush, time_calls
from fp8gemm.dispatch import GemmDesc, General, SwapAB, is_valid, select
from fp8gemm.testing import random_case

SHAPES = [(1, 512, 4096), (32, 512, 4096), (1, 1536, 4096), (64, 1536, 4096), (128, 1536, 4096),
          (1, 4096, 1024), (64, 4096, 1024), (16, 4096, 4096), (128, 4096, 4096), (64, 8192, 1024),
          (256, 512, 1024), (1, 8192, 4096)]
flush = L2Flush()
for m, n, k in SHAPES:
    case = random_case(m, n, k, seed=1)
    a, b, sa, sb = case.as_torch()
    fns = {}
    for swap, bn, splits in itertools.product((False, True), (8, 16, 32, 64, 128), (1, 2, 3, 4, 6, 8, 16)):
        cand = (SwapAB if swap else General)(bn, 5, 8, splits)
        rows, cols = (n, m) if swap else (m, n)
        units = -(-rows // 128) * -(-cols // bn) * splits
        if not is_valid(GemmDesc(m, n, k), cand) or units > 132 * 2 or splits > -(-k // 128):
            continue
        if swap and m > 64:
            continue
        fns[("S" if swap else "G", bn, splits)] = (lambda c=cand: fp8gemm.matmul(a, b, sa, sb, config=c))
    for fn in fns.values():
        fn()
    torch.cuda.synchronize()
    t = time_calls(fns, flush, 10)
    best = min(t, key=t.get)
    cur = select(m, n, k)
    swap = isinstance(cur, SwapAB)
    cur_t = t.get(("S" if swap else "G", getattr(cur, "block_n", 0), getattr(cur, "splits", 1)))
    top = sorted(t.items(), key=lambda kv: kv[1])[:4]
    print(f"M={m:4} N={n:5} K={k:5} best {best} {t[best]:6.2f} us | "
          f"chosen {cur.label()} "
          f"{cur_t if cur_t is None else round(cur_t, 2)} us | "
          f"top4 {[(c, round(v, 2)) for c, v in top]}", flush=True)
