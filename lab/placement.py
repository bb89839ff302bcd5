"""Lab: does a kernel's time depend on where its operands or its code sit in device memory?

Each forced configuration is timed (L2 cold, CUPTI, bench/timing.py) on D copies of its operands,
allocated with spacers of different sizes between them (other virtual and physical pages), and
with C copies of its kernel, each in a module of its own whose code is shifted by a padding kernel
of a different size compiled in front of it. The same (data, code) grid is timed twice, in
opposite orders. Run it in several processes to compare the spread between processes with the
spread within one. Writes {label: us} as JSON. Usage: python lab/placement.py OUT.json [D C]"""
import json
import sys
from concurrent.futures import ThreadPoolExecutor

import cupy
import torch

import fp8gemm
from fp8gemm import compiler
from fp8gemm.bench.timing import L2Flush, time_calls
from fp8gemm.dispatch import selector as sel
from fp8gemm.testing import random_case

G, S, W = "sm90_fp8_gemm_general", "sm90_fp8_gemm_swap_ab", "sm90_fp8_gemm_wg3"
CASES = [
    ((8192, 8192, 4096), {"variant": W, "block_n": 128, "stages": 3, "group_m": 8}),
    ((4096, 4096, 4096), {"variant": G, "block_n": 128, "stages": 5, "group_m": 8}),
    ((160, 24576, 7168), {"variant": G, "block_n": 128, "stages": 6, "group_m": 8}),
    ((64, 4096, 4096), {"variant": G, "block_n": 32, "stages": 8, "group_m": 8, "block_m": 64}),
    ((16, 4096, 4096), {"variant": S, "block_n": 16, "stages": 6, "group_m": 1, "splits": 2}),
]
SPACER_MB = (0, 6, 22, 50, 3, 14)


def pad_source(i: int) -> str:
    """A kernel of about 1.3 KiB x i of code, never launched, placed before the real one."""
    body = "".join(f"  p[{j}] = p[{j + 1}] * {j + 3}.0f + p[{j + 2}];\n" for j in range(24 * i))
    return f'extern "C" __global__ void fp8gemm_lab_pad_{i}(float* p) {{\n{body}}}\n'


def code_copies(key, kern, copies):
    """C kernels for the _kernels key: the original and C - 1 shifted ones."""
    variant, args = key[1], key[2]
    name = compiler.kernel_name(variant, args)
    smem = kern.max_dynamic_shared_size_bytes

    def build(i):
        mod = cupy.RawModule(code=pad_source(i) + compiler.flatten(variant), options=compiler.NVRTC_OPTIONS,
                             name_expressions=[name])
        k = mod.get_function(name)
        if smem > 48 * 1024:
            k.max_dynamic_shared_size_bytes = smem
        k.compile()
        return k

    with ThreadPoolExecutor(8) as ex:
        return [kern] + list(ex.map(build, range(1, copies)))


def main(out, n_data=3, n_code=3):
    flush = L2Flush()
    keep = []
    fns = {}
    jobs = []
    for (m, n, k), entry in CASES:
        c = sel.from_entry(entry)
        base = random_case(m, n, k, seed=1).as_torch()
        before = set(compiler._kernels)
        fp8gemm.matmul(*base, config=c)
        keys = [key for key in compiler._kernels if key not in before]
        jobs.append(((m, n, k), c, base, keys))
    # all padded modules compile in parallel before anything is timed
    with ThreadPoolExecutor(4) as ex:
        alts = list(ex.map(lambda j: {key: code_copies(key, compiler._kernels[key], n_code) for key in j[3]}, jobs))
    for ((m, n, k), c, base, keys), alt in zip(jobs, alts):
        for d in range(n_data):
            keep.append(torch.empty(SPACER_MB[d % len(SPACER_MB)] << 20 or 1, dtype=torch.uint8, device="cuda"))
            ops = [t.clone() for t in base]
            o = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
            keep += ops + [o]
            for ci in range(n_code):
                def f(ops=ops, o=o, ci=ci, alt=alt, c=c):
                    for key, ks in alt.items():
                        compiler._kernels[key] = ks[ci]
                    fp8gemm.matmul(*ops, out=o, config=c)
                f()
                fns[f"{m}x{n}x{k} {c.label()} d{d} c{ci}"] = f
    cupy.cuda.Device().synchronize()
    t1 = time_calls(fns, flush, 20)
    t2 = time_calls(dict(reversed(list(fns.items()))), flush, 20)
    res = {name: [t1[name], t2[name]] for name in fns}
    with open(out, "w") as fh:
        json.dump(res, fh, indent=1)
    print(f"{len(res)} timed -> {out}")


if __name__ == "__main__":
    main(sys.argv[1], *(int(v) for v in sys.argv[2:4]))
