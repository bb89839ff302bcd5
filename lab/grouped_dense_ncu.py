"""Lab (issues 55, 29): one launch each of the dense grouped mode (128 x 128 and 256 x 128 pairs)
and our default grouped tile on V4-Flash L1 at 8192 tokens (uniform top-6), for ncu: DRAM bytes,
duration, SM throughput. Each call runs twice (the first compiles, outside the profiled range:
ncu --launch-skip). Needs FP8GEMM_DENSE_K_MAJOR=1."""
import numpy as np
import torch

import fp8gemm
from fp8gemm.dispatch import Dense

n, k, experts, t = 4096, 4096, 256, 8192
rng = np.random.default_rng(0)
ids = np.stack([rng.choice(experts, 6, replace=False) for _ in range(t)])
counts = np.bincount(ids.reshape(-1), minlength=experts)
p = int(counts.sum())
offsets = torch.from_numpy(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)).cuda()
b = torch.randint(0, 0x70, (experts, n, k), dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn)
sb = torch.rand((experts, n // 128, k // 128), device="cuda") * 1e-3 + 5e-4
a = torch.randint(0, 0x70, (p, k), dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn)
sa = torch.rand((p, k // 128), device="cuda") + 0.5
for c in (None, Dense(128, 128, 5, 1, 1, 8), Dense(256, 128, 3, 2, 1, 8)):
    for _ in range(2):
        fp8gemm.grouped_matmul_contiguous(a, b, sa, sb, offsets, config=c)
    torch.cuda.synchronize()
print("ideal bytes: weights", experts * n * k / 1e9, "GB, A", p * k / 1e9, "GB", flush=True)
