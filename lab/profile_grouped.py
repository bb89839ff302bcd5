"""A process for `ncu` to profile (issue 8, bench/NOTES.md session 12): the three-warpgroup
kernel dense and in its grouped mode on the same work (192 rows, one group of N = 65536, K = 4096,
fp16 out), each called twice (the first call compiles). Profile the second calls with
  ncu --kernel-name regex:wg3 --launch-skip 2 --launch-count 2 ... python3 lab/profile_grouped.py
(launch order: dense, grouped, dense, grouped)."""
import cupy

import fp8gemm
from fp8gemm.bench.moe import fp8_bytes
from fp8gemm.dispatch import Candidate, selector

N, K, ROWS = 65536, 4096, 192


def main():
    rng = cupy.random.RandomState(3)
    b = fp8_bytes((N, K), rng)
    sb = cupy.full((N // 128, K // 128), 1.0 / (64 * K ** 0.5), dtype=cupy.float32)
    a = fp8_bytes((ROWS, K), rng)
    sa = cupy.full((ROWS, K // 128), 1.0 / 64, dtype=cupy.float32)
    out = cupy.empty((ROWS, N), dtype=cupy.float16)
    offsets = cupy.asarray([0, ROWS], dtype=cupy.int32)
    dense = Candidate("sm90_fp8_gemm_wg3", 128, 4, 8, 1, False, 192)
    selector.GROUPED_WG3_ROWS = (0, 1 << 30)
    for _ in range(2):
        fp8gemm.matmul(a, b, sa, sb, out=out, config=dense)
        fp8gemm.grouped_matmul_contiguous(a, b.reshape(1, N, K), sa, sb.reshape(1, N // 128, K // 128), offsets, out=out)
    cupy.cuda.Device().synchronize()


if __name__ == "__main__":
    main()
