"""Lab (issue 55): the dense kernel's last row tile with its A box past A's rows (TMA's slow
zero fill) against the box moved up (FP8GEMM_DENSE_A_BOX_SHIFT), forced tiles at M where the last
row tile is partly past M and at the M of whole tiles beside it; our dispatcher's pick and DeepGEMM
in the same process. L2 cold, CUPTI (bench/timing.py). Each result checked against DeepGEMM's.
Usage: python lab/a_box_shift_ab.py OUT.json [ITERS]"""
import json
import os
import sys

import fp8gemm
from fp8gemm.bench.timing import L2Flush, time_calls
from fp8gemm.dispatch import Dense, dense

sys.path.insert(0, os.path.dirname(__file__))
from dense_ab import check_against_first, contenders  # noqa: E402

# (M values, N, K, tiles): session 48's H100 tune state had these tiles at up to 1.9x their time at
# the next M of whole tiles
CASES = [((128, 158, 184, 214, 256), 8192, 4096, [(128, 64, 6, 1, 1, 8), (128, 128, 5, 1, 1, 8)]),
         ((128, 158, 214, 256), 4096, 4096, [(128, 64, 6, 1, 1, 8), (64, 64, 8, 1, 1, 8), (64, 96, 10, 1, 0, 16)]),
         ((158, 184, 214, 256), 1536, 4096, [(64, 48, 15, 1, 0, 8), (64, 64, 8, 1, 1, 8), (64, 64, 13, 1, 1, 8, 1)]),
         ((158, 214, 256), 8192, 1024, [(128, 64, 6, 1, 1, 8), (128, 128, 5, 1, 1, 8)]),
         ((214, 256), 512, 4096, [(64, 16, 15, 1, 0, 8, 1)]),
         ((4160, 4224), 8192, 4096, [(128, 128, 5, 1, 1, 8, 1), (256, 128, 3, 2, 1, 16)])]
if os.environ.get("ABS_QUICK"):
    CASES = CASES[:2]


def forced(a, b, sa, sb, cfg, on):
    def call():
        dense.A_BOX_SHIFT_SWITCH = on         # read at plan time; forced configs are planned per call
        try:
            return fp8gemm.matmul(a, b, sa, sb, config=cfg)
        finally:
            dense.A_BOX_SHIFT_SWITCH = False
    return call


def main(out_path, iters=15):
    import deep_gemm
    flush = L2Flush()
    rows = []
    for ms, n, k, cfgs in CASES:
        for m in ms:
            a, b, sa, sb, _, fns = contenders(deep_gemm, m, n, k)
            for cfg in cfgs:
                c = Dense(*cfg)
                for on in (False, True):
                    fns[f"{c.label()} {'moved' if on else 'past'}"] = forced(a, b, sa, sb, c, on)
            check_against_first(fns, (m, n, k))
            times = time_calls(fns, flush, iters)
            for name, us in times.items():
                rows.append({"m": m, "n": n, "k": k, "name": name, "us": us, "vs_dg": us / times["deepgemm"]})
                print(f"{m:6d} {n:5d} {k:5d} {name:34s} {us:9.2f} us  x{us / times['deepgemm']:.3f} DG", flush=True)
            json.dump(rows, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 15)
