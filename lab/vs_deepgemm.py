"""Lab: our general kernel against DeepGEMM's fp8_gemm_nt on the same shapes, with the tile and
ring DeepGEMM picks there forced on ours, As in both layouts (K-major as our quantizer writes it,
M-major as DeepGEMM's callers pass it). Two modes:
  time OUT.json   every contender of every shape in turns (bench/timing.py), L2 cold, CUPTI;
                  prints one line per shape and contender and writes {label: us}
  run             each contender called once, nothing else, for ncu to profile
                  (e.g. ncu --kernel-name regex:sm90_fp8 ... python3 lab/vs_deepgemm.py run)
Needs deep_gemm importable (source .peers/deepgemm/build.sh first)."""
import json
import sys

import torch

import fp8gemm
from fp8gemm.bench.peers import Inputs, prepare_deepgemm
from fp8gemm.bench.timing import L2Flush, time_calls
from fp8gemm.dispatch import GemmDesc, is_valid
from fp8gemm.dispatch import selector as sel
from fp8gemm.testing import random_case

G, W = "sm90_fp8_gemm_general", "sm90_fp8_gemm_wg3"


def gen(bn, st, bm=128):
    return {"variant": G, "block_n": bn, "stages": st, "group_m": 8, "splits": 1, "block_m": bm}


# (shape, [our configurations]); DeepGEMM's pick at each is in bench/results/deepgemm_configs_h200.csv
CASES = {
    "time": [
        ((64, 4096, 4096), [gen(32, 16, 64), gen(32, 8, 64)]),           # DG 64 x 32 s16
        ((128, 4096, 4096), [gen(64, 13, 64), gen(64, 6, 64)]),          # DG 64 x 64 s13
        ((256, 1536, 4096), [gen(64, 6, 64), gen(32, 16, 64)]),          # DG 64 x 48 s15
        ((256, 4096, 4096), [gen(128, 8, 64), gen(64, 6)]),              # DG 64 x 128 s8
        ((512, 4096, 4096), [gen(128, 5), gen(128, 4)]),                 # DG 128 x 128 s5
        ((4096, 4096, 4096), [gen(128, 5)]),
        ((8192, 8192, 4096), [{"variant": W, "block_n": 128, "stages": 3, "group_m": 8}]),
    ],
    "run": [
        ((64, 4096, 4096), [gen(32, 16, 64)]),
        ((128, 4096, 4096), [gen(64, 13, 64)]),
    ],
}


def contenders(mode):
    fns = {}
    for (m, n, k), cfgs in CASES[mode]:
        case = random_case(m, n, k, seed=1)
        a, b, sa, sb = case.as_torch()
        layouts = {"K": sa, "M": sa.t().contiguous().t()}
        for e in cfgs:
            c = sel.from_entry(e)
            if not is_valid(GemmDesc(m, n, k), c):
                continue
            for lay, s in layouts.items():
                f = (lambda a=a, b=b, s=s, sb=sb, c=c: fp8gemm.matmul(a, b, s, sb, config=c))
                fns[f"{m}x{n}x{k} ours {c.label()} As {lay}-major"] = f
        dg = prepare_deepgemm(Inputs(case, "bfloat16"))
        if isinstance(dg, dict):
            fns[f"{m}x{n}x{k} deepgemm"] = dg["fp8_gemm_nt"]
    return fns


def main(mode, out=None):
    fns = contenders(mode)
    for f in fns.values():
        f()
    torch.cuda.synchronize()
    if mode == "run":
        print(f"{len(fns)} contenders ran")
        return
    t = time_calls(fns, L2Flush(), 30)
    with open(out, "w") as fh:
        json.dump(t, fh, indent=1)
    for name, us in t.items():
        print(f"{name:64} {us:9.2f}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
