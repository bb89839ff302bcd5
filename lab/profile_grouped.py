"""A process for `ncu` to profile (issue 8, bench/NOTES.md session 12): the three-warpgroup
kernel dense and in its grouped mode on the same work (192 rows, one group of N = 65536, K = 4096,
fp16 out), each called twice (the first call compiles). Profile the second calls with
  ncu --kernel-name regex:wg3 --launch-skip 2 --launch-count 2 ... python3 lab/profile_grouped.py
(launch order: dense, grouped, dense, grouped)."""
import cupy

import fp8gemm
from fp8gemm.bench.moe import fp8_bytes
from fp8gemm.dispatch import Wg3
from fp8gemm.grouped import run_grouped

N, K, ROWS = 65536, 4096, 192


def main():
    rng = cupy.random.RandomState(3)
    b = fp8_bytes((N, K), rng)
    sb = cupy.full((N // 128, K // 128), 1.0 / (64 * K ** 0.5), dtype=cupy.float32)
    a = fp8_bytes((ROWS, K), rng)
    sa = cupy.full((ROWS, K // 128), 1.0 / 64, dtype=cupy.float32)
    out = cupy.empty((ROWS, N), dtype=cupy.float16)
    offsets = cupy.asarray([0, ROWS], dtype=cupy.int32)
    dense = Wg3(128, 4, 8)
    for _ in range(2):
        fp8gemm.matmul(a, b, sa, sb, out=out, config=dense)
        run_grouped(a, b.reshape(1, N, K), sa, sb.reshape(1, N // 128, K // 128), offsets, "offsets", False, None, out,
                    (128, 128), None, True, True)       # the 192-row tiles, as fp8gemm.moe asks
    cupy.cuda.Device().synchronize()


if __name__ == "__main__":
    main()
