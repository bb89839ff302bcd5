"""A process for `ncu` to profile (issue 29): one fp8gemm.moe layer (bench/moe.py's shapes, weights
and routing), called three times, the third inside an NVTX range "prof" so that
  ncu --nvtx --nvtx-include "prof/" --metrics ... python3 lab/profile_moe.py MODEL TOKENS ROUTING [fused]
profiles only that call's kernels. Prints the layer's ideal DRAM bytes (every active expert's
weights once, the FP8 activations once, the bf16 output once) for lab/moe_ncu_table.py."""
import sys

import cupy
import numpy as np

import fp8gemm
from fp8gemm.bench.moe import MODELS, cases, fp8_bytes


def main(model="flash", tokens="8192", routing="uniform", fused=""):
    experts, hidden, inter = MODELS[model]
    t = int(tokens)
    grng = cupy.random.RandomState(1)
    w1 = fp8_bytes((experts, 2 * inter, hidden), grng)
    w2 = fp8_bytes((experts, hidden, inter), grng)
    s1 = cupy.full((experts, 2 * inter // 128, hidden // 128), 1.0 / (32 * hidden ** 0.5), dtype=cupy.float32)
    s2 = cupy.full((experts, hidden // 128, inter // 128), 1.0 / (32 * inter ** 0.5), dtype=cupy.float32)
    (_, _, ids, wts), = cases([t], experts, [routing], seed=7)
    x = fp8_bytes((t, hidden), grng)
    xs = cupy.full((t, hidden // 128), 1.0 / 64, dtype=cupy.float32)
    ids_d, w_d = cupy.asarray(ids), cupy.asarray(wts)
    for i in range(3):
        if i == 2:
            cupy.cuda.nvtx.RangePush("prof")
        fp8gemm.moe(x, ids_d, w_d, w1, s1, w2, s2, x_scale=xs, fused=fused == "fused")
        if i == 2:
            cupy.cuda.nvtx.RangePop()
        cupy.cuda.Device().synchronize()
    active = int((np.bincount(ids.reshape(-1), minlength=experts) > 0).sum())
    pairs = ids.size
    l1 = active * 2 * inter * hidden + pairs * hidden
    l2 = active * hidden * inter + pairs * inter
    print(f"IDEAL model={model} tokens={t} routing={routing} fused={fused == 'fused'} active={active} "
          f"pairs={pairs} l1_weights_and_a={l1} l2_weights_and_a={l2} layer_out={t * hidden * 2}")


if __name__ == "__main__":
    main(*sys.argv[1:])
