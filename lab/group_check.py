"""Does the fallback's raster-group rule (dispatch/general.py: plain_group_m) hold on (N, K) pairs the
tuner never saw? Per shape: the fallback's candidate with its group and with the other choice
(1 <-> 8), device time (CUPTI, L2 cold, median of 20), correctness of both checked.

    python lab/group_check.py"""
from dataclasses import replace

import cupy

import fp8gemm
from fp8gemm import reference
from fp8gemm.bench.timing import L2Flush, time_calls
from fp8gemm.dispatch import GemmDesc, General, SwapAB
from fp8gemm.dispatch.general import SWAP_MAX_M
from fp8gemm.testing import as_float64, random_case

# DeepSeek-V3 / other tensor-parallel splits: (N, K) pairs absent from the built-in trace.
PAIRS = [(7168, 2048), (2112, 7168), (24576, 1536), (4608, 7168), (3072, 1536)]
MS = [8, 16, 32, 64, 2048, 8192]


def main():
    flush = L2Flush()
    rows = []
    for n, k in PAIRS:
        for m in MS:
            desc = GemmDesc(m, n, k, "bfloat16")
            ours = (SwapAB if m <= SWAP_MAX_M else General).fallback(desc)
            other = replace(ours, group_m=8 if ours.group_m == 1 else 1)
            case = random_case(m, n, k, seed=m + n + k)
            args = (case.a, case.b, case.a_scale, case.b_scale)
            ref = case.reference(cupy)
            for c in (ours, other):
                err = reference.rel_fro_error(as_float64(fp8gemm.matmul(*args, config=c)), ref)
                assert err <= 4e-3, (m, n, k, c, err)
            t = time_calls({"ours": lambda: fp8gemm.matmul(*args, config=ours),
                            "other": lambda: fp8gemm.matmul(*args, config=other)}, flush, 20)
            swap = isinstance(ours, SwapAB)
            rows.append((m, n, k, swap, ours.group_m, t["ours"], t["other"]))
            print(f"M={m:5} N={n:5} K={k:5} swap={int(swap)} group {ours.group_m}: "
                  f"{t['ours']:8.2f} us, group {other.group_m}: {t['other']:8.2f} us, "
                  f"other/ours {t['other'] / t['ours']:.3f}", flush=True)
    import math
    r = [o / u for *_, u, o in rows]
    print(f"geomean other/ours {math.exp(sum(map(math.log, r)) / len(r)):.3f} over {len(r)} shapes, "
          f"min {min(r):.3f}, max {max(r):.3f}")


if __name__ == "__main__":
    main()
