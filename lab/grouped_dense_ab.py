"""Lab (issues 55, 29): the dense kernel's grouped mode (config=Dense, contiguous layout, As
K-major through the window) against our default grouped tile and DeepGEMM's
m_grouped_fp8_gemm_nt_contiguous, one process, L2 cold, CUPTI (bench/timing.py: the contenders
take turns). DeepSeek-V4 expert shapes at prefill sizes, top-6 routing: uniform, or with
GAB_ROUTING=skewed fp8gemm-bench --moe's skewed draw (bench/moe.py: route, Zipf weights 1/rank^1.5). Each result is
checked against the default tile's (relative Frobenius distance <= 1e-2 on our row order) before
it is timed. Prints microseconds, x DeepGEMM, TFLOP/s; writes JSON.
Needs FP8GEMM_DENSE_K_MAJOR=1 (the grouped dense mode reads As K-major).
Usage: python lab/grouped_dense_ab.py OUT.json [ITERS] [TOKENS,...]"""
import json
import os
import sys

import numpy as np
import torch

import fp8gemm
from fp8gemm.bench.timing import L2Flush, time_calls
from fp8gemm.dispatch import Dense

from fp8gemm.bench.peers import prepare_deepgemm_contiguous

LAYERS = [("flash_L1", 4096, 4096, 256), ("flash_L2", 4096, 2048, 256), ("pro_L1", 6144, 7168, 384),
          ("pro_L2", 7168, 3072, 384)]
ROUTING = os.environ.get("GAB_ROUTING", "uniform")
TOP_K = 6
CONFIGS = [Dense(128, 128, 5, 1, 1, 8), Dense(128, 128, 5, 1, 1, 8, 1), Dense(256, 128, 3, 2, 1, 8),
           Dense(128, 128, 5, 2, 1, 8), Dense(256, 128, 3, 1, 1, 8),
           # pairs of an expert's row tiles sharing its weights by multicast (session 40)
           Dense(128, 128, 5, 2, 0, 8), Dense(128, 128, 5, 2, 0, 8, 1), Dense(128, 128, 5, 2, 0, 2),
           # DeepGEMM's own tile at prefill sizes (its SM90 heuristic for the contiguous layout: 128 x 192,
           # a pair sharing B; session 45)
           Dense(128, 192, 4, 2, 0, 8), Dense(128, 192, 4, 2, 0, 2)]
# GAB_CONFIGS="0,2" / GAB_LAYERS="0,1": subsets (each configuration and shape costs an NVRTC compile)
if os.environ.get("GAB_CONFIGS"):
    CONFIGS = [CONFIGS[int(i)] for i in os.environ["GAB_CONFIGS"].split(",")]
if os.environ.get("GAB_LAYERS"):
    LAYERS = [LAYERS[int(i)] for i in os.environ["GAB_LAYERS"].split(",")]


def main(out_path, iters=10, tokens=(1024, 4096, 8192)):
    flush = L2Flush()
    rng = np.random.default_rng(0)
    rows = []
    for name, n, k, experts in LAYERS:
        kb, nb = k // 128, n // 128
        b = torch.randint(0, 0x70, (experts, n, k), dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn)
        sb = torch.rand((experts, nb, kb), device="cuda") * 1e-3 + 5e-4
        for t in tokens:
            if ROUTING == "uniform":
                ids = np.stack([rng.choice(experts, TOP_K, replace=False) for _ in range(t)])
            else:
                from fp8gemm.bench.moe import route
                ids = route(rng, t, experts, ROUTING)
            counts = np.bincount(ids.reshape(-1), minlength=experts)
            p = int(counts.sum())
            offsets = torch.from_numpy(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)).cuda()
            a = torch.randint(0, 0x70, (p, k), dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn)
            sa = torch.rand((p, kb), device="cuda") + 0.5
            dg_call, dg_rows = prepare_deepgemm_contiguous(a, sa, b, sb, counts)
            fns = {"ours": lambda: fp8gemm.grouped_matmul_contiguous(a, b, sa, sb, offsets), "deepgemm": dg_call}
            for c in CONFIGS:
                fns[c.label()] = (lambda c=c: fp8gemm.grouped_matmul_contiguous(a, b, sa, sb, offsets, config=c))
            ref = fns["ours"]().float()
            for cname, fn in fns.items():
                got = fn()
                got = dg_rows(got) if cname == "deepgemm" else got
                torch.cuda.synchronize()
                err = float((got.float() - ref).norm() / ref.norm())
                assert err <= 1e-2, f"{cname} {name} T={t}: {err:.3e} from the default tile's result"
            times = time_calls(fns, flush, iters)
            flops = 2.0 * p * n * k
            for cname, us in times.items():
                rows.append({"layer": name, "routing": ROUTING, "max_rows": int(counts.max()), "tokens": t, "rows": p, "n": n, "k": k, "name": cname, "us": us,
                             "vs_dg": us / times["deepgemm"], "tflops": flops / us / 1e6})
                print(f"{name:9s} {ROUTING[:4]} T={t:5d} rows={p:6d} {cname:26s} {us:9.1f} us  x{us / times['deepgemm']:.3f} DG  "
                      f"{flops / us / 1e6:7.1f} TFLOP/s", flush=True)
        del b, sb
        torch.cuda.empty_cache()
    json.dump(rows, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 10,
         tuple(int(x) for x in sys.argv[3].split(",")) if len(sys.argv) > 3 else (1024, 4096, 8192))
