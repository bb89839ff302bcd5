"""Lab: device time of the MoE layer (fp8gemm.moe, the default path) at prefill sizes on both
DeepSeek-V4 models, uniform and skewed routing (bench/moe.py's shapes, weights and routing), to
compare two trees: run once per tree (PYTHONPATH=<tree>), in alternating processes. CUPTI, L2
flushed, median of ITERS rounds in turns (bench/timing.py). Writes {label: us}.
Usage: python lab/moe_layer_ab.py OUT.json [tokens ...]"""
import json
import os
import sys

import cupy

import fp8gemm
from fp8gemm.bench.moe import MODELS, cases, fp8_bytes
from fp8gemm.bench.timing import L2Flush, time_calls


def main(out, tokens=(4096, 8192)):
    fns, keep = {}, []
    grng = cupy.random.RandomState(1)
    for model, (experts, hidden, inter) in MODELS.items():
        w1 = fp8_bytes((experts, 2 * inter, hidden), grng)
        w2 = fp8_bytes((experts, hidden, inter), grng)
        s1 = cupy.full((experts, 2 * inter // 128, hidden // 128), 1.0 / (32 * hidden ** 0.5), dtype=cupy.float32)
        s2 = cupy.full((experts, hidden // 128, inter // 128), 1.0 / (32 * inter ** 0.5), dtype=cupy.float32)
        for routing, t, ids, wts in cases(list(tokens), experts, ["uniform", "skewed"], seed=7):
            x = fp8_bytes((t, hidden), grng)
            xs = cupy.full((t, hidden // 128), 1.0 / 64, dtype=cupy.float32)
            ids_d, w_d = cupy.asarray(ids), cupy.asarray(wts)
            keep.append((x, xs, ids_d, w_d))
            fns[f"{model} {t} {routing}"] = (lambda x=x, ids=ids_d, w=w_d, w1=w1, s1=s1, w2=w2, s2=s2, xs=xs:
                                              fp8gemm.moe(x, ids, w, w1, s1, w2, s2, x_scale=xs))
        keep.append((w1, w2, s1, s2))
    for f in fns.values():
        f()
    cupy.cuda.Device().synchronize()
    us = time_calls(fns, L2Flush(), int(os.environ.get("ITERS", "7")))
    with open(out, "w") as fh:
        json.dump(us, fh, indent=1)
    for k, v in us.items():
        print(f"{k:28} {v:9.1f} us")


if __name__ == "__main__":
    main(sys.argv[1], tuple(int(v) for v in sys.argv[2:]) or (4096, 8192))
