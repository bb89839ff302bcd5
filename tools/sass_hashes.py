"""SASS fingerprints of every compile-test instantiation (tests/test_kernels_compile.py), one line
each: variant, template arguments, SHA-1 of the instruction lines of `cuobjdump -sass`. Run it
before and after a refactor of kernels_cu/ and diff the two files: no difference means the
change leaves every instantiation's machine code as it was (no GPU needed to trust it).
Needs nvcc and cuobjdump (no GPU).
Usage: python tools/sass_hashes.py OUT [--variants general,wg3,...]"""
import hashlib
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

import test_kernels_compile as tkc  # noqa: E402

from fp8gemm import compiler  # noqa: E402


def fingerprint(item) -> str:
    variant, targs = item
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "k.cu")
        with open(src, "w") as f:
            f.write(compiler.flatten(variant) + "\n" +
                    f"template __global__ void {compiler.kernel_name(variant, targs)}({tkc.PARAMS[variant]});\n")
        subprocess.run([tkc.NVCC, "-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-std=c++17", "-o",
                        os.path.join(d, "k.cubin"), src], check=True, capture_output=True)
        sass = subprocess.run(["cuobjdump", "-sass", os.path.join(d, "k.cubin")], capture_output=True, text=True,
                              check=True).stdout
    code = "\n".join(line for line in sass.splitlines() if "/*" in line)      # instructions only
    return f"{variant} {targs} {hashlib.sha1(code.encode()).hexdigest()}"


def main():
    out = sys.argv[1]
    items = tkc._instantiations() + [("sm90_fp8_gemm_general", tkc._swiglu_instantiation())]
    if "--variants" in sys.argv:
        keep = {"sm90_fp8_gemm_" + v if not v.startswith(("moe", "quant")) else v
                for v in sys.argv[sys.argv.index("--variants") + 1].split(",")}
        items = [x for x in items if x[0] in keep]
    with ThreadPoolExecutor(os.cpu_count() or 2) as ex:
        lines = list(ex.map(fingerprint, items))
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{len(lines)} instantiations -> {out}")


if __name__ == "__main__":
    main()
