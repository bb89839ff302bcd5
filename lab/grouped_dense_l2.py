"""Lab (issues 55, 29): why the dense grouped mode reads an expert's weights from DRAM ~2.5 times
(session 38). One launch each, for ncu (profiled range: torch.cuda.profiler start/stop around the
timed calls; every kernel compiles before it): V4-Flash L1 (N = K = 4096), 256 experts with exactly
R rows each (R = 128: one row tile per expert, each weight tile needed once; 192: two, one partial;
256: two whole), the dense 128 x 128 and 256 x 128 pairs against our default grouped tile; then
the plain dense 256 x 128 pair at 16384 x 8192 x 4096 (its working set exceeds L2) on M-major As.
Ideal DRAM read per grouped launch: weights 4.29 GB + A (R x 256 x 4096 bytes).
Usage: python lab/grouped_dense_l2.py [R,R,...]"""
import sys

import torch

import fp8gemm
from fp8gemm.dispatch import Dense

n, k, experts = 4096, 4096, 256
rows = [int(r) for r in (sys.argv[1] if len(sys.argv) > 1 else "128,192,256").split(",")]
b = torch.randint(0, 0x70, (experts, n, k), dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn)
sb = torch.rand((experts, n // 128, k // 128), device="cuda") * 1e-3 + 5e-4
configs = [None, Dense(128, 128, 5, 1, 1, 8), Dense(256, 128, 3, 2, 1, 8), Dense(128, 128, 5, 2, 0, 8)]
calls = []
for r in rows:
    p = r * experts
    offsets = torch.arange(0, p + 1, r, dtype=torch.int32, device="cuda")
    a = torch.randint(0, 0x70, (p, k), dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn)
    sa = torch.rand((p, k // 128), device="cuda") + 0.5
    for c in configs:
        calls.append((f"grouped R={r} {c.label() if c else 'default'}",
                      lambda a=a, sa=sa, offsets=offsets, c=c: fp8gemm.grouped_matmul_contiguous(a, b, sa, sb, offsets, config=c)))

pm, pn, pk = 16384, 8192, 4096
a2 = torch.randint(0, 0x70, (pm, pk), dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn)
b2 = torch.randint(0, 0x70, (pn, pk), dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn)
sa2 = (torch.rand((pk // 128, pm), device="cuda") + 0.5).t()          # M-major
sb2 = torch.rand((pn // 128, pk // 128), device="cuda") * 1e-3 + 5e-4
calls.append(("plain 16384x8192x4096 dense 256x128 c2A g16",
              lambda: fp8gemm.matmul(a2, b2, sa2, sb2, config=Dense(256, 128, 3, 2, 1, 16))))
for name, f in calls:      # compile and warm outside the profiled range
    f()
torch.cuda.synchronize()
torch.cuda.profiler.start()
for name, f in calls:
    print("launch:", name, flush=True)
    f()
torch.cuda.synchronize()
torch.cuda.profiler.stop()
