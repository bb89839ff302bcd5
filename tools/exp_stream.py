"""Is MoE prefill slow because of the grouped mode, or because every weight byte streams from
DRAM once? (issue 8). Times dense GEMMs whose B is far larger than L2 and is read by one row of
tiles only (M = 128 / 192 / 256, N = 65536, K = 4096: B = 256 MiB), on the two-warpgroup kernel
(128-row tiles) and the three-warpgroup one (192-row tiles) at several stage counts, beside the
grouped GEMM with the same bytes and FLOPs (16 experts of N = 4096, the same rows each).
CUPTI device time, L2 flushed before each call, median of 5; prints µs, µs per 128-deep K block of
one tile wave, and B's stream rate (B bytes / time).
With --wg3: 192 rows only, the three-warpgroup kernel dense with TMA-store and with direct stores
(C's row pitch padded off 16 bytes) beside its grouped mode; --unroll2 also compiles the grouped
mode's K loop unrolled by 2 (a source patch for this process; spills 40 bytes).
--experts E splits the same weights into E groups (default 16; 1: the grouped machinery alone), and
--group-m G sets the grouped tiles' raster group (default: the selector's, 8).
Usage: PYTHONPATH=. python tools/exp_stream.py [--wg3] [--unroll2] [--experts E] [--group-m G] [--noscale]
(--noscale: an ablation with wrong results, the wg3 K loop's scale loads replaced by registers)"""
import sys

import cupy
import numpy as np

import fp8gemm
from fp8gemm.bench.moe import fp8_bytes
from fp8gemm.bench.timing import L2Flush, time_calls
from fp8gemm.dispatch import Candidate, selector

GEN, WG3 = "sm90_fp8_gemm_general", "sm90_fp8_gemm_wg3"
N, K = 65536, 4096


def arg(name, default):
    return int(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


EXPERTS = arg("--experts", 16)


def main():
    wg3_only = "--wg3" in sys.argv
    if "--group-m" in sys.argv:
        import dataclasses

        from fp8gemm import grouped
        pick = grouped.grouped_candidate
        grouped.grouped_candidate = lambda *a, **kw: dataclasses.replace(pick(*a, **kw), group_m=arg("--group-m", 8))
    if "--unroll2" in sys.argv:
        from fp8gemm import compiler
        plain = compiler.flatten

        def patched(variant):
            src = plain(variant)
            return src.replace("#pragma unroll (kGrouped ? 1 : 2)", "#pragma unroll 2") if variant == WG3 else src
        compiler.flatten = patched
    if "--noscale" in sys.argv:      # ablation (wrong results): no scale loads in the wg3 K loop
        from fp8gemm import compiler
        plain2 = compiler.flatten

        def patched2(variant):
            src = plain2(variant)
            old = "const float na0 = *pa0, na1 = *pa1, nb0 = *pb;"
            assert variant != WG3 or old in src
            return src.replace(old, "const float na0 = a0 * 1.0001f, na1 = a1, nb0 = b0;") if variant == WG3 else src
        compiler.flatten = patched2
    flush = L2Flush()
    rng = cupy.random.RandomState(3)
    b = fp8_bytes((N, K), rng)
    sb = cupy.full((N // 128, K // 128), 1.0 / (64 * K ** 0.5), dtype=cupy.float32)
    bg = b.reshape(EXPERTS, N // EXPERTS, K)
    sbg = sb.reshape(EXPERTS, N // EXPERTS // 128, K // 128)
    rows_list = (192,) if wg3_only else (128, 192, 256)
    fns, meta = {}, {}
    for rows in rows_list:
        a = fp8_bytes((rows, K), rng)
        sa = cupy.full((rows, K // 128), 1.0 / 64, dtype=cupy.float32)
        cands = {"gen s6 g8": Candidate(GEN, 128, 6, 8, 1, False, 128),
                 "gen s4 g8": Candidate(GEN, 128, 4, 8, 1, False, 128),
                 "gen s6 g1": Candidate(GEN, 128, 6, 1, 1, False, 128),
                 "wg3 s4 g8": Candidate(WG3, 128, 4, 8, 1, False, 192),
                 "wg3 s3 g8": Candidate(WG3, 128, 3, 8, 1, False, 192),
                 "wg3 s4 g1": Candidate(WG3, 128, 4, 1, 1, False, 192)}
        if wg3_only:
            cands = {"wg3 s4 g8": cands["wg3 s4 g8"], "wg3 s4 g8 direct": cands["wg3 s4 g8"]}
        for name, c in cands.items():
            out = cupy.empty((rows, N + (1 if name.endswith("direct") else 0)), dtype=cupy.float16)[:, :N]
            fns[f"{rows} dense {name}"] = (lambda a=a, sa=sa, c=c, out=out:
                                           fp8gemm.matmul(a, b, sa, sb, out=out, config=c))
            meta[f"{rows} dense {name}"] = (rows, 128 if c.variant == GEN else 192)
        ag = fp8_bytes((rows * EXPERTS, K), rng)
        sag = cupy.full((rows * EXPERTS, K // 128), 1.0 / 64, dtype=cupy.float32)
        offs = cupy.arange(0, rows * EXPERTS + 1, rows, dtype=cupy.int32)
        kinds = (("grouped gen", None), ("grouped wg3", (0, 1 << 30)))
        for kind, window in kinds[1:] if wg3_only else kinds:
            out = cupy.empty((rows * EXPERTS, N // EXPERTS), dtype=cupy.float16)

            def call(ag=ag, sag=sag, offs=offs, out=out, window=window):
                selector.GROUPED_WG3_ROWS = window
                try:
                    return fp8gemm.grouped_matmul_contiguous(ag, bg, sag, sbg, offs, out=out)
                finally:
                    selector.GROUPED_WG3_ROWS = None
            fns[f"{rows} {kind}"] = call
            meta[f"{rows} {kind}"] = (rows, 128 if window is None else 192)
    for fn in fns.values():
        fn()
    cupy.cuda.Device().synchronize()
    us = time_calls(fns, flush, 5)
    print(f"{'case':28s} {'us':>8s} {'us/kblock/wave':>15s} {'B TB/s':>7s} {'TFLOP/s':>8s}")
    for key, t in us.items():
        rows, bm = meta[key]
        tiles = -(-rows // bm) * (N // 128)
        waves = tiles / 132
        print(f"{key:28s} {t:8.1f} {t / waves / (K // 128):15.3f} {N * K / t / 1e6:7.2f} "
              f"{2 * rows * N * K / t / 1e6:8.0f}", flush=True)


if __name__ == "__main__":
    main()
