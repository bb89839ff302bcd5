"""Lab (issues 29 and 27): the 256-row tiles (dispatch/tall.py) against the 128-row General and
192-row Wg3 tiles, and DeepGEMM where it runs the same problem. CUPTI, L2 flushed, median of
ITERS rounds in turns (bench/timing.py); every contender of a mode in one process.

  moe OUT.json    the MoE layer's grouped GEMMs, contiguous layout: V4-Flash and V4-Pro L1 (fp32
                  out, coarse promotion, as fp8gemm.moe runs it) and L2 (bf16 out), 8192 tokens
                  with uniform and skewed routing, and every expert holding 160 / 192 / 256 rows;
                  DeepGEMM's m_grouped_fp8_gemm_nt_contiguous on the bf16 rows when importable
  dense OUT.json  the plain GEMM at large M (bf16 out, K-major As): the dispatcher's choice,
                  General 128 x 128, Wg3, Tall (scales by slots and by loads), DeepGEMM's fp8_gemm_nt
  run-moe         each MoE contender once after a warm-up, inside an NVTX range "prof" for ncu
                  (dram__bytes_read.sum against every active expert's weights read once);
                  MODEL_ONLY=flash keeps one model

Prints one line per case and contender and writes {label: us}.
Usage: python lab/tall_tiles.py MODE [OUT.json]"""
import json
import os
import sys

import cupy
import numpy as np

import fp8gemm
from fp8gemm.bench.moe import MODELS, fp8_bytes, route
from fp8gemm.bench.timing import L2Flush, time_calls
from fp8gemm.dispatch import General, Tall, Wg3, select
from fp8gemm.grouped import run_grouped

ITERS = int(os.environ.get("ITERS", "7"))
TOKENS = int(os.environ.get("TOKENS", "8192"))
TOP_K = 6


def deepgemm():
    try:
        import deep_gemm  # noqa: F401
        return True
    except Exception:          # not built in this process: the column stays empty
        return False


def moe_contenders():
    """{label: callable} for every grouped GEMM, routing and tile, plus the arrays kept alive."""
    grng = cupy.random.RandomState(5)
    rng = np.random.default_rng(7)
    fns, keep = {}, []
    has_dg = deepgemm()
    for model, (experts, hidden, inter) in MODELS.items():
        if os.environ.get("MODEL_ONLY", model) != model:
            continue
        for gemm, n, k, dt in (("L1", 2 * inter, hidden, "float32"), ("L2", hidden, inter, "bfloat16")):
            w = fp8_bytes((experts, n, k), grng)
            s = cupy.full((experts, n // 128, k // 128), 1.0 / (64 * k ** 0.5), dtype=cupy.float32)
            keep.append((w, s))
            cases = {r: np.bincount(route(rng, TOKENS, experts, r).reshape(-1), minlength=experts)
                     for r in ("uniform", "skewed")}
            cases.update({f"{r}each": np.full(experts, r) for r in (160, 192, 256)})
            for routing, counts in cases.items():
                rows = int(counts.sum())
                a = fp8_bytes((rows, k), grng)
                sa = cupy.full((rows, k // 128), 1.0 / 64, dtype=cupy.float32)
                offsets = cupy.asarray(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
                o = cupy.empty((rows, n), dtype=cupy.float32 if dt == "float32" else cupy.float16)
                keep.append((a, sa, offsets, o))
                tiles = {"general": General(128, 4 if dt == "float32" else 5, 8), "wg3": Wg3(128, 4, 8),
                         "tall": Tall(128, 4, 8)}
                for label, c in tiles.items():
                    if c.grouped_smem_bytes(dt, experts) > 232448:
                        c = type(c)(**{**c.knobs(), "stages": c.stages - 1})
                    fns[f"{model} {gemm} {routing} {label}"] = (
                        lambda a=a, sa=sa, off=offsets, o=o, w=w, s=s, c=c:
                        run_grouped(a, w, sa, s, off, "offsets", False, None, o, (128, 128), None, False,
                                    config=c))
                if has_dg and dt == "bfloat16":
                    import torch

                    from fp8gemm.bench.peers import prepare_deepgemm_contiguous
                    ta = torch.from_dlpack(a).view(torch.float8_e4m3fn)
                    tw = torch.from_dlpack(w).view(torch.float8_e4m3fn)
                    call, _ = prepare_deepgemm_contiguous(ta, torch.from_dlpack(sa), tw, torch.from_dlpack(s), counts)
                    fns[f"{model} {gemm} {routing} deepgemm"] = call
    return fns, keep


def dense_contenders():
    from fp8gemm.testing import random_case
    fns, keep = {}, []
    has_dg = deepgemm()
    for m, n, k in ((4096, 4096, 4096), (4096, 8192, 4096), (8192, 8192, 4096), (16384, 8192, 4096),
                    (8192, 4096, 1024), (8192, 7168, 2048), (2048, 8192, 4096)):
        case = random_case(m, n, k, seed=1)
        keep.append(case)
        cfgs = {"default": None, "general": General(128, 5, 8), "wg3": Wg3(128, 3, 8),
                "tall3": Tall(128, 3, 8), "tall3loads": Tall(128, 3, 8, 0), "tall3g1": Tall(128, 3, 1)}
        for label, c in cfgs.items():
            fns[f"{m}x{n}x{k} {label}"] = (lambda case=case, c=c:
                                            fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, config=c))
        print(f"{m}x{n}x{k} default: {select(m, n, k).label()}")
        if has_dg:
            from fp8gemm.bench.peers import Inputs, prepare_deepgemm
            fns[f"{m}x{n}x{k} deepgemm"] = prepare_deepgemm(Inputs(case, "bfloat16"))["fp8_gemm_nt"]
    return fns, keep


def main(mode, out=None):
    fns, keep = (dense_contenders if mode == "dense" else moe_contenders)()
    for f in fns.values():
        f()
    cupy.cuda.Device().synchronize()
    if mode == "run-moe":
        cupy.cuda.nvtx.RangePush("prof")
        for f in fns.values():
            f()
        cupy.cuda.Device().synchronize()
        cupy.cuda.nvtx.RangePop()
        print("ran", len(fns))
        return
    us = time_calls(fns, L2Flush(), ITERS)
    for label, v in us.items():
        print(f"{label:40} {v:10.1f}")
    if out:
        with open(out, "w") as fh:
            json.dump(us, fh, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
