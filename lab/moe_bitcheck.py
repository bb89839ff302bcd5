"""Lab (issue 29): do the fused and unfused MoE layers differ only where the chain's L1 splits K?

`fp8gemm-bench --moe` found the default, fused and unfused layers differing bit for bit on four
rows (V4-Flash skewed at 16, 64 and 128 tokens, V4-Pro skewed at 8). A host simulation of the
tile space (the bench's routings, the L1's grouped tile and the kernel's TAIL_SPLIT rule) puts a
K split in the chain's L1 on each of them (its FP32 sums then added in another order than the
fused L1's, which never splits), but also on five rows that agree (1 token, both models and
routings; V4-Flash uniform at 256). This runs the bench's routings (same seed and order) with fresh
data and prints, per row, the simulated split and how many outputs differ; NOSPLIT=1 turns the
grouped tiles' K splits off in this process (dispatch.grouped), which must make every row equal
if the split is the whole cause.
Usage: [NOSPLIT=1] python lab/moe_bitcheck.py [MODEL ...]   (default: flash pro)"""
import os
import sys

import cupy
import numpy as np

import fp8gemm
from fp8gemm.bench import moe as bm
from fp8gemm.dispatch import general, grouped
from fp8gemm.grouped import rows_estimate

if os.environ.get("NOSPLIT") == "1":
    grouped.tail_split_pays = lambda *args: False
    grouped.split_count = lambda *args: 1


def simulated_split(counts, experts, hidden, inter, sms):
    """(tile label, the kernel's splits of the last wave) for the chain's L1 (N = 2I, K = H)."""
    pairs = int(counts.sum())
    per, active = rows_estimate(pairs, experts)
    c = grouped.candidate(2 * inter, hidden, "float32", experts, per, active, sms, False)
    if type(c) is general.SwapAB:
        tiles = int(np.ceil(counts / c.block_n).sum()) * (2 * inter // 128)
    else:
        tiles = int(np.ceil(counts / 128).sum()) * (2 * inter // c.block_n)
    if getattr(c, "splits", 1) != general.TAIL_SPLIT:
        return c.label(), getattr(c, "splits", 1)
    rest = tiles % sms
    return c.label(), 1 if rest == 0 else max(1, min(sms // rest, hidden // 128 // 8))


def main(models):
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    print(f"NOSPLIT={os.environ.get('NOSPLIT', '0')}  {'model':6} {'routing':8} {'T':>5} {'L1 tile':26} "
          f"{'split':>5} {'differ':>8} of")
    for name in models:
        experts, hidden, inter = bm.MODELS[name]
        rng = cupy.random.RandomState(1)
        w1 = bm.fp8_bytes((experts, 2 * inter, hidden), rng)
        w2 = bm.fp8_bytes((experts, hidden, inter), rng)
        # the bench's magnitudes: |out| ~ 1 with x ~ 1 per element at scale 1/64
        s1 = ((rng.random_sample((experts, 2 * inter // 128, hidden // 128), dtype=cupy.float32) + 0.5)
              * (2.0 / (64 * hidden ** 0.5)))
        s2 = ((rng.random_sample((experts, hidden // 128, inter // 128), dtype=cupy.float32) + 0.5)
              * (2.0 / (64 * inter ** 0.5)))
        for routing, t, ids, wts in bm.cases(bm.TOKENS[:6], experts, bm.ROUTINGS, 0):
            counts = np.bincount(ids.ravel(), minlength=experts)
            label, split = simulated_split(counts, experts, hidden, inter, sms)
            x = bm.fp8_bytes((t, hidden), rng)
            xs = cupy.full((t, hidden // 128), 1.0 / 64, dtype=cupy.float32)
            args = (x, cupy.asarray(ids), cupy.asarray(wts), w1, s1, w2, s2)
            fused = fp8gemm.moe(*args, x_scale=xs, fused=True)
            chain = fp8gemm.moe(*args, x_scale=xs, fused=False)
            differ = int((fused.view(cupy.uint16) != chain.view(cupy.uint16)).sum())
            errs = ""
            if differ and t <= 512:
                errs = "  rel err fused %.2e chain %.2e" % tuple(
                    bm.check_layer(x, xs, ids, wts, w1, s1, w2, s2, y) for y in (fused, chain))
            print(f"{'':10}{name:6} {routing:8} {t:5} {label:26} {split:5} {differ:8} {fused.size}{errs}")
        del w1, w2, s1, s2
        cupy.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main(sys.argv[1:] or ["flash", "pro"])
