"""A process for `ncu` to profile: each given (shape, configuration) called twice through the
public API with that configuration forced. Arguments: MxNxK:variant[:knob=value,...], e.g.
  python3 lab/run_configs.py 64x4096x4096:sm90_fp8_gemm_general:block_n=32,stages=8,block_m=64 \\
      4096x4096x4096:sm90_fp8_gemm_general:block_n=128,stages=6
(a knob left out takes the variant's default; launch order: the arguments' order, two each)."""
import sys

import cupy

import fp8gemm
from fp8gemm.dispatch import GemmDesc, is_valid
from fp8gemm.dispatch import selector as sel
from fp8gemm.testing import random_case


def parse(arg):
    shape, variant, *rest = arg.split(":")
    m, n, k = (int(v) for v in shape.split("x"))
    entry = {"variant": variant}
    for kv in (rest[0].split(",") if rest and rest[0] else []):
        key, value = kv.split("=")
        entry[key] = int(value)
    return (m, n, k), sel.from_entry(entry)


def main():
    for arg in sys.argv[1:]:
        (m, n, k), c = parse(arg)
        if not is_valid(GemmDesc(m, n, k), c):
            raise SystemExit(f"{arg}: not a valid configuration for {m} x {n} x {k}")
        a, b, sa, sb = random_case(m, n, k, seed=1).as_torch()
        for _ in range(2):
            fp8gemm.matmul(a, b, sa, sb, config=c)
        cupy.cuda.Device().synchronize()
        print(f"{m}x{n}x{k} {c.label()}: ran twice")


if __name__ == "__main__":
    main()
