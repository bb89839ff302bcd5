"""Lab (issue 55): the dense kernel at DeepGEMM's own tile (dispatch/dense.py: peer_tile, its SM90
model restated) against DeepGEMM and our dispatcher's pick, one process, L2 cold, CUPTI (bench/timing.py).
As: our quantizer's default K-major for ours and the dense configs, DeepGEMM's TMA-aligned M-major
for DeepGEMM; "mm" rows run the same dense config on M-major As. The configs: Dense.peer_configs
(DeepGEMM's tile and raster, the most stages that fit, at most 16). Each result is checked against DeepGEMM's first.
Usage: python lab/dense_dgtile.py OUT.json [ITERS]; DGTILE_SHAPES="M,N,K;M,N,K" overrides."""
import json
import os
import sys
from dataclasses import replace

import torch

import fp8gemm
from fp8gemm.bench.timing import L2Flush, time_calls
from fp8gemm.dispatch import Dense, GemmDesc
from fp8gemm.dispatch.dense import _peer_stages, peer_tile

sys.path.insert(0, os.path.dirname(__file__))
from dense_ab import contenders  # noqa: E402

SHAPES = [(128, 512, 4096), (512, 512, 4096), (4096, 512, 4096), (128, 1536, 4096), (512, 1536, 4096),
          (4096, 1536, 4096), (2048, 1536, 4096), (128, 4096, 1024), (512, 4096, 1024), (184, 8192, 4096),
          (384, 4096, 4096), (256, 8192, 4096), (1024, 1536, 1024), (256, 4096, 4096), (1024, 8192, 4096)]
if os.environ.get("DGTILE_SHAPES"):
    SHAPES = [tuple(int(x) for x in s.split(",")) for s in os.environ["DGTILE_SHAPES"].split(";")]


def main(out_path, iters=15):
    import deep_gemm
    flush = L2Flush()
    rows = []
    for m, n, k in SHAPES:
        bm, bn, cm, cn = peer_tile(m, n, k)
        st = _peer_stages(bm, bn, k)
        a, b, sa, sb, sa_mm, fns = contenders(deep_gemm, m, n, k)
        gpu = "h200" if "H200" in torch.cuda.get_device_name() else "h100"
        pick = fp8gemm.explain(m, n, k, gpu=gpu).split(":", 1)[-1][:70]
        peers = Dense.peer_configs(GemmDesc(m, n, k))
        for c in peers:
            fns[c.label()] = (lambda c=c: fp8gemm.matmul(a, b, sa, sb, config=c))
        for c in peers[:1]:
            if c.cluster == 1:             # the raster along N (our default) against DeepGEMM's along M
                alt = replace(c, multicast_a=1, group=8)
                fns[alt.label()] = (lambda c=alt: fp8gemm.matmul(a, b, sa, sb, config=c))
            fns[c.label() + " mm"] = (lambda c=c: fp8gemm.matmul(a, b, sa_mm, sb, config=c))
        ref, bad = None, []
        for name in list(fns):
            try:
                got = fns[name]()
                torch.cuda.synchronize()
            except Exception as e:                      # a config our kernel refuses: say why, go on
                print(f"  {name}: {type(e).__name__}: {str(e)[:160]}", flush=True)
                bad.append(name)
                continue
            if ref is None:
                ref = got.float().clone()
            err = float((got.float() - ref).norm() / ref.norm())
            assert err <= 1e-2, f"{name} at {(m, n, k)}: {err:.3e} from DeepGEMM's result"
        for name in bad:
            del fns[name]
        times = time_calls(fns, flush, iters)
        flops = 2.0 * m * n * k
        print(f"{m}x{n}x{k}: DeepGEMM's tile {bm}x{bn} cluster {cm}x{cn} s{st}; ours = {pick}", flush=True)
        for name, us in times.items():
            rows.append({"m": m, "n": n, "k": k, "name": name, "us": us, "vs_dg": us / times["deepgemm"],
                         "tflops": flops / us / 1e6, "dg_tile": [bm, bn, cm, cn, st]})
            print(f"{m:6d} {n:5d} {k:5d} {name:32s} {us:9.2f} us  x{us / times['deepgemm']:.3f} DG  "
                  f"{flops / us / 1e6:7.1f} TFLOP/s", flush=True)
        json.dump(rows, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 15)
