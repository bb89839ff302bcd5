"""A process for `ncu` to profile (issue 4): fp8gemm.matmul (the dispatcher's pick) and cuBLASLt's
block-scaled kernel (F.scaled_mm, 1x128 / 128x128 scales) on the same shapes, each called twice.
Profile with e.g.
  ncu --kernel-name regex:'nvjet|sm90_fp8' --section SpeedOfLight ... python3 lab/profile_vs_cublaslt.py 512x4096x4096
(launch order per shape: ours, ours, cuBLASLt, cuBLASLt)."""
import sys

import torch
import torch.nn.functional as F

import fp8gemm
from fp8gemm.testing import random_case


def main():
    shapes = [tuple(int(v) for v in s.split("x")) for s in sys.argv[1:]] or [(512, 4096, 4096)]
    for m, n, k in shapes:
        a, b, sa, sb = random_case(m, n, k, seed=1).as_torch()
        kb = sa.shape[1]
        sb_store = torch.zeros((sb.shape[0], -(-kb // 4) * 4), dtype=torch.float32, device="cuda")
        sb_store[:, :kb] = sb
        sa_mmajor = sa.t().contiguous().t()
        for _ in range(2):
            fp8gemm.matmul(a, b, sa, sb)
        for _ in range(2):
            F.scaled_mm(a, b.t(), scale_a=sa_mmajor, scale_recipe_a=F.ScalingType.BlockWise1x128,
                        scale_b=sb_store[:, :kb].t(), scale_recipe_b=F.ScalingType.BlockWise128x128,
                        output_dtype=torch.bfloat16)
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
