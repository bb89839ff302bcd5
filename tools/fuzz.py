"""Random-case fuzzing of fp8gemm.matmul on the GPU against the float64 reference.

    python tools/fuzz.py --cases 2000 --seed 1 [--budget-seconds 600] [--max-elements 6e7]

Each case draws M in 0..20000 (small M more often), N in 1..32768, K a multiple of 16 up to 16384,
an output dtype, row-major or M-major A scales, out= (fp16 / fp32) or not, and scales rescaled by
2^U(-40, 40) per operand (2^U(-4, 4) for fp16 output, whose range is narrow): the tolerance is
relative, so any magnitude must pass. Each case runs through the dispatcher and through every
variant forced with a random tile: the general kernel and swap-AB, each without and with split-K
(a random split count of 2..min(16, K blocks)), the short-K kernel where K <= 256 and the decode
kernel (gemv) where M <= 16, and the three-warpgroup kernel (wg3) for bf16 / fp16 out. Every failure
prints a one-line reproducer; the summary counts
runs per variant; the exit status is the number of failures (at most 255).
Most cases are capped at --max-elements ((M+N)K + MN); one in 20 at 8x that, for big shapes.
"""
from __future__ import annotations

import argparse
import sys
import time

import cupy
import numpy as np

import fp8gemm
from fp8gemm import reference
from fp8gemm.dispatch import GemmDesc, Gemv, General, ShortK, SwapAB, Wg3, is_valid
from fp8gemm.testing import as_float64, random_case

TOL = {"bfloat16": 4e-3, "float16": 1e-3, "float32": 1e-4}
CALC_DIFF_TOL = 1e-5


def draw(rng, max_elements: float):
    while True:
        m = int(rng.choice([0, 1, 2, 7, 31, 64, 65, 100, 257, 1000, 4097, 20000])) if rng.random() < 0.5 \
            else int(rng.integers(1, 20001))
        n = int(rng.integers(1, 32769)) if rng.random() < 0.5 else int(rng.choice([16, 24, 128, 300, 4096, 7168]))
        k = 16 * int(rng.integers(1, 1025)) if rng.random() < 0.5 else int(rng.choice([16, 128, 240, 256, 272, 4096, 7168]))
        if (m + n) * k + m * n <= max_elements:
            return m, n, k


VARIANT_NAMES = ("dispatcher", "general", "general_split_k", "swap_ab", "swap_ab_split_k", "short_k", "gemv", "wg3")
GEMV_CONFIGS = ((8, 2), (8, 1), (4, 2), (4, 4))     # (warps, K blocks in flight): the tuner's four


def configs(rng, desc):
    """(name, candidate) for the dispatcher (None) and every variant forced, where valid. Stages
    are fixed (other tests cover them) and the raster group is 1 or 8 (the fallback's two
    choices) to bound the number of compilations."""
    out = [("dispatcher", None)]
    k_blocks = -(-desc.k // 128)
    for swap in (False, True):
        block_n = int(rng.choice([8, 16, 32, 64] if swap else [16, 32, 64, 128]))
        for split in (False, True):
            if split and k_blocks < 2:
                continue                      # one K block: nothing to split
            splits = int(rng.integers(2, min(16, k_blocks) + 1)) if split else 1
            c = (SwapAB if swap else General)(block_n, 4, int(rng.choice([1, 8])), splits)
            name = ("swap_ab" if swap else "general") + ("_split_k" if split else "")
            if is_valid(desc, c):
                out.append((name, c))
    block_n = int(rng.choice([16, 32, 64, 128]))
    c = ShortK(int(rng.choice([64, 128])), block_n)
    if is_valid(desc, c):                     # K <= 256
        out.append(("short_k", c))
    warps, unroll = GEMV_CONFIGS[int(rng.integers(len(GEMV_CONFIGS)))]
    c = Gemv(8 if desc.m <= 8 else 16, warps, unroll)
    if is_valid(desc, c):                     # 1 <= M <= 16
        out.append(("gemv", c))
    c = Wg3(int(rng.choice([64, 128])), 3, int(rng.choice([1, 8])))
    if is_valid(desc, c):                     # bf16 / fp16 out
        out.append(("wg3", c))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--budget-seconds", type=float, default=None)
    p.add_argument("--max-elements", type=float, default=6e7, help="cap on (M+N)K + MN per case")
    args = p.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    print(f"fuzz: seed {args.seed}, {args.cases} cases", flush=True)
    failures, runs, done, t0 = 0, {}, 0, time.monotonic()
    for i in range(args.cases):
        if args.budget_seconds is not None and time.monotonic() - t0 > args.budget_seconds:
            print(f"fuzz: budget spent after {i} cases", flush=True)
            break
        m, n, k = draw(rng, args.max_elements * (8 if rng.random() < 0.05 else 1))
        dt = str(rng.choice(["bfloat16", "float16", "float32"]))
        case = random_case(m, n, k, seed=int(rng.integers(2**31)))
        # fp16 holds |C| only up to 65504 (and loses precision below 2^-14): keep its C near 1
        span = 4 if dt == "float16" else 40
        ea, eb = float(2.0 ** rng.uniform(-span, span)), float(2.0 ** rng.uniform(-span, span))
        sa = (case.a_scale * ea).astype(cupy.float32)
        sb = (case.b_scale * eb).astype(cupy.float32)
        if rng.random() < 0.5:                     # M-major A scales, read in place
            sa = cupy.asfortranarray(sa)
        use_out = rng.random() < 0.3
        ref = reference.matmul(case.a, case.b, sa, sb, xp=cupy) if m else None
        for name, cfg in configs(rng, GemmDesc(max(m, 1), n, k, dt)):
            repro = (f"M={m} N={n} K={k} out={dt} cfg={cfg} scale_exp=({ea:.3g},{eb:.3g}) "
                     f"m_major={not sa.flags.c_contiguous} out_param={use_out}")
            try:
                out = cupy.empty((m, n), dtype=np.dtype(dt)) if use_out and dt != "bfloat16" else None
                res = fp8gemm.matmul(case.a, case.b, sa, sb, out_dtype=dt, out=out, config=cfg)
                cupy.cuda.Device().synchronize()
                if m == 0:
                    ok, err = res.shape == (0, n), 0.0
                else:
                    got = as_float64(res)
                    err = reference.rel_fro_error(got, ref)
                    diff = reference.calc_diff(got, ref)
                    ok = err <= TOL[dt] and diff <= CALC_DIFF_TOL
                    err = f"{err:.3e} (calc_diff {diff:.2e})"
            except Exception as exc:          # any exception on a valid case is a failure
                ok, err = False, f"{type(exc).__name__}: {exc}"
            runs[name] = runs.get(name, 0) + 1
            if not ok:
                failures += 1
                print(f"FAIL {name}: err {err} -- reproduce: {repro}", flush=True)
        del case, ref
        done += 1
    per_variant = ", ".join(f"{v} {runs.get(v, 0)}" for v in VARIANT_NAMES)
    print(f"fuzz: seed {args.seed}, {done} cases, {sum(runs.values())} runs "
          f"({per_variant}), {failures} failures, {time.monotonic() - t0:.0f} s", flush=True)
    return min(failures, 255)


if __name__ == "__main__":
    sys.exit(main())
