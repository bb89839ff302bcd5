"""Raw wgmma throughput (lab/wgmma_rate.cu): TFLOP/s of each instantiation, 132 CTAs, one per SM,
timed with CUDA events around a launch of a few ms (throughput, not latency). Build the cubin with
  nvcc -cubin -gencode=arch=compute_90a,code=sm_90a -std=c++17 -o tools/_wgmma_rate.cubin lab/wgmma_rate.cu
Usage: python lab/wgmma_rate.py [cubin]"""
import re
import sys

import cupy as cp


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "tools/_wgmma_rate.cubin"
    inst = re.findall(r"^INST\((\d+), (\d+), (\d+), (\d+), (\w+), (\w+)\)", open("lab/wgmma_rate.cu").read(), re.M)
    b = {"false": 0, "true": 1}
    mod = cp.RawModule(path=path)
    out = cp.zeros(132 * 384, dtype=cp.float32)
    print(f"{'N':>4} {'WGs':>3} {'depth':>5} {'accs':>4} {'RS':>3} {'prom':>4} {'ms':>8} {'TFLOP/s':>8}")
    for n, wgs, depth, accs, rs, prom in inst:
        name = f"_Z10wgmma_rateILi{n}ELi{wgs}ELi{depth}ELi{accs}ELb{b[rs]}ELi{prom}EEvPfif"
        n, wgs, depth, accs = int(n), int(wgs), int(depth), int(accs)
        fn = mod.get_function(name)
        smem = (64 * wgs + 256) * 128 + 1024
        fn.max_dynamic_shared_size_bytes = smem
        iters = 20000 // accs
        args = (out, cp.int32(iters), cp.float32(0.5))
        fn((132,), (128 * wgs,), args, shared_mem=smem)
        cp.cuda.Device().synchronize()
        best = 1e9
        for _ in range(5):
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            e0.record()
            fn((132,), (128 * wgs,), args, shared_mem=smem)
            e1.record()
            e1.synchronize()
            best = min(best, cp.cuda.get_elapsed_time(e0, e1))
        flop = 132 * wgs * iters * accs * 4 * 2 * 64 * n * 32
        print(f"{n:4} {wgs:3} {depth:5} {accs:4} {b[rs]:3} {prom:>4} {best:8.3f} {flop / best / 1e9:8.1f}", flush=True)


if __name__ == "__main__":
    main()
