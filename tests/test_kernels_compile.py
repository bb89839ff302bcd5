"""CPU: every kernels_cu/ variant compiles for sm_90a exactly as NVRTC will see it (the flattened
source and the dispatcher's template arguments), with no register spills; the generated wgmma
header is current. Uses nvcc 13 (on the developer and CI machines); skips with a reason without it.
The exhaustive sweep (test_compiles_without_spills, every instantiation) runs with
``pytest --compile-sweep`` (.ci/run), the rest on every run."""
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

from fp8gemm import compiler
from fp8gemm.dispatch import Dense, GemmDesc, Gemv, General, ShortK, SwapAB, Wg3, grouped, select
from fp8gemm.dispatch import general as general_rules
from fp8gemm.dispatch import dense
from fp8gemm.dispatch.invariant import swap64_tile
from fp8gemm.dtypes import KERNEL_TYPE_IDS as OUT_TYPE_IDS
from fp8gemm.dtypes import OUT_BYTES

NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH: cannot compile sm_90a here")
# On PATH, else Triton's bundled copy in this interpreter's site-packages: CI's only one, off PATH.
_TRITON_CUOBJDUMP = Path(sysconfig.get_paths()["purelib"]) / "triton/backends/nvidia/bin/cuobjdump"
CUOBJDUMP = shutil.which("cuobjdump") or (str(_TRITON_CUOBJDUMP) if _TRITON_CUOBJDUMP.is_file() else None)
needs_sass = pytest.mark.skipif(NVCC is None or CUOBJDUMP is None,
                                reason="nvcc not on PATH, or cuobjdump neither on PATH nor in Triton's bundled "
                                       "bin: SASS check skipped")

# The general kernel's signature, for explicit instantiation under nvcc.
GENERAL_PARAMS = ("const __grid_constant__ fp8gemm::TmaDescriptor, const __grid_constant__ "
                  "fp8gemm::TmaDescriptor, const __grid_constant__ fp8gemm::TmaDescriptor, const float*, long long, long long, const float*, long long, "
                  "long long, void*, long long, unsigned, unsigned, unsigned, unsigned, float*, unsigned*, "
                  "const int*, unsigned, unsigned, long long, float*, float")
# The short-K kernel's: the general kernel's up to N.
SHORT_K_PARAMS = GENERAL_PARAMS.split(", unsigned, unsigned, float*")[0]
MOE_GLUE_PARAMS = ("const int*, const float*, unsigned, unsigned, unsigned, int*, int*, int*, int*, const void*, "
                   "const float*, void*, float*, unsigned, unsigned, float")
QUANT_PARAMS = "const void*, long long, unsigned char*, float*, unsigned, unsigned, float, unsigned"
BLOCK_QUANT_PARAMS = "const void*, long long, long long, unsigned char*, float*, unsigned, unsigned, float"
# The gemv kernel's: the general kernel's up to N, then A, lda, B, ldb, K.
GEMV_PARAMS = SHORT_K_PARAMS + ", const unsigned char*, long long, const unsigned char*, long long, unsigned"
# The wg3 kernel's: the general kernel's up to K, the groups, then the As tensor map (kSlotsA).
WG3_PARAMS = (GENERAL_PARAMS.split(", unsigned, float*")[0] + ", const int*, unsigned, unsigned, long long"
              ", const __grid_constant__ fp8gemm::TmaDescriptor")
# The general kernel's own: the family's, then the As and Bs tensor maps (kScaleTma).
GENERAL_OWN_PARAMS = GENERAL_PARAMS + ", const __grid_constant__ fp8gemm::TmaDescriptor" * 2
# The dense kernel's: the family's up to N, the As tensor map, then the groups (kGrouped).
DENSE_PARAMS = SHORT_K_PARAMS + ", const __grid_constant__ fp8gemm::TmaDescriptor, const int*, unsigned, unsigned, long long"
PARAMS = {"sm90_fp8_gemm_general": GENERAL_OWN_PARAMS, "sm90_fp8_gemm_dense": DENSE_PARAMS,
          "sm90_fp8_gemm_swap_ab": GENERAL_PARAMS,
          "sm90_fp8_gemm_short_k": SHORT_K_PARAMS,
          "sm90_fp8_gemm_gemv": GEMV_PARAMS, "sm90_fp8_gemm_wg3": WG3_PARAMS,
          "moe_glue": MOE_GLUE_PARAMS, "quantize_per_token_group": QUANT_PARAMS,
          "quantize_per_block": BLOCK_QUANT_PARAMS}


def _instance(c, dt, store=False, fine=None, grouped=False, k=256, n=None, k_major=True):
    """(kernel, template arguments) as a descriptor's plan asks for them; ``fine`` defaults to the
    plain rule (fp32 out promotes after every wgmma). The dense kernel compiles N and K in (``n``)
    and reads As K-major (our quantizer's) or M-major (``k_major``)."""
    fine = dt == "float32" if fine is None else fine
    if isinstance(c, Dense):
        flat = k_major and dense.flat_kb_ok(-(-k // 128))          # our quantizer's packed As
        return c.variant, c.template_args(n, k, dt, store and c.smem_bytes(dt, k, True, k_major, flat) <= 232448,
                                          k_major, sfa_flat=flat)
    if isinstance(c, SwapAB):
        return c.variant, c.template_args(dt, fine, grouped)
    if isinstance(c, General):
        return c.variant, c.template_args(dt, fine, store, grouped)
    if isinstance(c, ShortK):
        return c.variant, c.template_args(dt, k, store)
    if isinstance(c, Gemv):
        return c.variant, c.template_args(dt)
    return c.variant, c.template_args(dt, store, grouped)           # Wg3


def _tma_ok(c, dt) -> bool:
    """Whether a configuration's tiles can store through TMA: rows of whole 128-byte chunks, and
    for the general kernel (not swap-AB) also rows of 16-64 bytes (its unswizzled staging)."""
    from fp8gemm.launcher import NARROW_ROW_BYTES
    row = getattr(c, "block_n", 8) * OUT_BYTES[dt]
    if isinstance(c, (SwapAB, Gemv)):
        return False
    if isinstance(c, Dense):
        return c.store_ok(dt)
    return row % 128 == 0 or (type(c) is General and row in NARROW_ROW_BYTES)


def _instantiations():
    """Every distinct instantiation the dispatcher picks on the trace (tuned and fallback), per out
    dtype and store path, those the GPU tests and the tuner force, and the grouped modes."""
    from generators import trace_shapes
    seen = set()
    for m, n, k in trace_shapes() + [(64, 8, 256), (64, 40, 256), (64, 100, 256)]:
        for dt in OUT_TYPE_IDS:
            model = Dense.model(GemmDesc(m, n, k, dt))            # FP8GEMM_DENSE_MODEL=1's choice
            for c in {select(m, n, k, dt), select(m, n, k, dt, gpu="h100"), select(m, n, k, dt, gpu="none")} | (
                    {model} if model else set()):
                for store in {_tma_ok(c, dt), False}:
                    for k_major in (True, False) if isinstance(c, Dense) else (True,):
                        seen.add(_instance(c, dt, store, k=k, n=n, k_major=k_major))
    for block_n in (16, 32, 64, 128):      # the configurations the GPU tests force
        seen.add(_instance(General(block_n, 4, 8), "bfloat16"))
        for block_m in (64, 128):
            for k in (128, 256):
                seen.add(_instance(ShortK(block_m, block_n), "float32", k=k))
    seen.add(_instance(General(128, 4, 8), "bfloat16", store=True))
    # 64-row tiles (one consumer warpgroup): the tuner's most stages per width and the GPU tests'.
    from fp8gemm.dispatch.general import General as G
    for block_n in (16, 32, 64, 128):
        for dt in OUT_TYPE_IDS:
            stages = G.most_stages(block_n, dt, 64)
            c = General(block_n, stages, 8, 1, 64)
            for store in {_tma_ok(c, dt), False}:
                seen.add(_instance(c, dt, store))
    for c, dt in ((General(32, 2, 8, 1, 64), "bfloat16"), (General(64, 6, 8, 3, 64), "float32"),
                  (General(64, 12, 8, 1, 64), "float32"), (General(32, 16, 1, 1, 64), "bfloat16")):
        seen.add(_instance(c, dt, False))
        seen.add(_instance(c, dt, _tma_ok(c, dt)))
    # Scales in stage slots (by TMA, or copied by the producer warp: 7), in windows of 32 K blocks
    # (8) or loaded in block (16): every plain tile above with each mask whose slots or windows fit.
    for variant, targs in list(seen):
        if variant == G.variant and len(targs) >= 7 and targs[6] == "false" and targs[4] == "false" \
                and (len(targs) < 8 or targs[7] == "false"):
            block_n, stages, block_m = targs[0], targs[1], 64 * (targs[8] if len(targs) > 8 else 2)
            dt = next(d for d, t in OUT_TYPE_IDS.items() if t == targs[2])
            c = General(block_n, stages, targs[3], 1, block_m)
            for mask in (1, 2, 3, 7, 8, 16):
                if dt != "float32" and c.smem_bytes(dt, mask) <= 232448:
                    seen.add((variant, c.template_args(dt, False, targs[5] == "true", False, scale_tma=mask)))
            # the chunked K loop (kChunk) with every chunk the ring's stages allow
            for chunk in general_rules.CHUNKS if dt != "float32" else ():
                if general_rules.chunk_fits(c, chunk):
                    seen.add((variant, c.template_args(dt, False, targs[5] == "true", False, chunk=chunk)))
    # Grouped mode (MoE), as grouped.py instantiates it: DeepSeek-V4 widths, a narrow N, fp32.
    for n, dt, groups, per_group in ((4096, "bfloat16", 384, None), (40, "bfloat16", 8, None),
                                     (4096, "float32", 256, None), (4096, "bfloat16", 256, 1),
                                     (4096, "float32", 256, 12), (7168, "bfloat16", 384, 30)):
        c = grouped.candidate(n, 4096, dt, groups, per_group, 6)
        for store in (False,) if isinstance(c, SwapAB) else (True, False):
            for fine in {dt == "float32", False}:                     # precise_fp32 (MoE: False)
                seen.add(_instance(c, dt, store, fine, grouped=True))
    for dt, groups in (("bfloat16", 384), ("float32", 256), ("float16", 8192)):   # grouped wg3, as grouped.py
        seen.add(_instance(grouped.candidate(4096, 4096, dt, groups, 256.0, 6, precise_fp32=False), dt, grouped=True))
    for tile in (8, 16):                   # the gemv kernel: every (warps, unroll) the tuner tries
        for warps, unroll in ((8, 2), (8, 1), (4, 2), (4, 4)):
            for dt in OUT_TYPE_IDS:
                seen.add(_instance(Gemv(tile, warps, unroll), dt))
    for block_n, stages in ((128, 4), (128, 3), (64, 6)):     # the wg3 kernel: tuner and test configs
        for dt in ("bfloat16", "float16"):
            for group_m in (1, 8):
                for store in (True, False):
                    seen.add(_instance(Wg3(block_n, stages, group_m), dt, store))
                    c = Wg3(block_n, stages, group_m)              # As by TMA into stage slots
                    if c.smem_bytes(dt, True) <= 232448:
                        seen.add((c.variant, c.template_args(dt, store, False, slots_a=True)))
                    if not store and block_n == 128:               # grouped (direct stores)
                        seen.add(_instance(Wg3(block_n, stages, group_m), dt, grouped=True))
    seen.update(_dense_instantiations())
    # swap-AB's raw split (the batch-invariant mode's, FP8GEMM_BATCH_INVARIANT_RAW_SPLIT=1): as its
    # GPU test forces it and as the mode's small-M rule would pick it (the most stages)
    from fp8gemm.dispatch.general import MAX_STAGES, SWAP_BLOCK_NS
    for dt in OUT_TYPE_IDS:
        for c in [SwapAB(b, 4, 1, 2, raw_split=1) for b in (8, 64)] + [
                SwapAB(b, MAX_STAGES, 1, 2, raw_split=1) for b in SWAP_BLOCK_NS]:
            if c.is_valid(GemmDesc(64, 4096, 4096, dt)):
                seen.add(_instance(c, dt))
    # swap-AB's cluster raw split (FP8GEMM_BATCH_INVARIANT_RAW_CLUSTER=1): every tile its GPU test forces
    seen.update(_raw_cluster_instantiations())
    # swap-AB's 64-row tiles: every token tile on the ring the batch-invariant mode gives it
    # (FP8GEMM_BATCH_INVARIANT_SWAP64=1) and as tests/test_matmul_general.py forces them
    from test_matmul_general import SWAP64
    for dt in OUT_TYPE_IDS:
        for c in [swap64_tile(b, dt) for b in SWAP_BLOCK_NS] + SWAP64:
            seen.add(_instance(c, dt))
    for op in range(4):                    # fp8gemm/moe_layer.py: route, scatter, SwiGLU, combine
        seen.add(("moe_glue", (op,)))
    for in_type in range(3):               # fp8gemm/quantize.py: element path, vector paths
        for loads in (0, 1, 2):
            seen.add(("quantize_per_token_group", (in_type, loads)))
        for vec in ("false", "true"):                      # the weight quantizer's two paths
            seen.add(("quantize_per_block", (in_type, vec)))
    return sorted(seen, key=str)


def _raw_cluster_instantiations(dts=tuple(OUT_TYPE_IDS)):
    """SwapAB(raw_cluster=1) as tests/test_batch_invariant.py forces it (cluster_tile: the ring
    beside the raw slots), token tiles 8 / 16 / 32, S in {2, 3, 4, 8}, 128 and 64 rows, K = 1024,
    1040, 4096. S is no template argument (the launch's cluster), the stages are."""
    seen = set()
    for dt in dts:
        for bn in (8, 16, 32):
            for s in (2, 3, 4, 8):
                for block_m in (128, 64):
                    for k in (1024, 1040, 4096):
                        c = SwapAB.cluster_tile(bn, s, k, dt, block_m)
                        if c.is_valid(GemmDesc(32, 4096, k, dt)):
                            seen.add(_instance(c, dt))
    return seen


def _dense_instantiations():
    """The dense kernel as its GPU tests force it (tests/test_matmul_dense.py: every tile height,
    straddling widths, pairs sharing A or B) and at the milestone shapes, each with the store its
    plan takes and the direct store."""
    from test_matmul_dense import CONFIGS, FLAT_CONFIGS, FLAT_SHAPES
    seen = set()
    for i, cfg in enumerate(CONFIGS):
        c = Dense(*cfg)
        for n, k in ((1000, 1536), (4096, 4096))[:2 if i < 3 else 1]:
            for dt in ("bfloat16", "float16"):
                # the 64B-swizzled staging too (rows of 64 * odd bytes; FP8GEMM_DENSE_STORE_64B=1)
                # and the narrow box (rows of 16 / 32 bytes; FP8GEMM_DENSE_STORE_NARROW=1)
                row = c.block_n * OUT_BYTES[dt]
                for store in {c.store_ok(dt), row % 64 == 0 or row in (16, 32), False}:
                    for km in (False, True):           # As M-major, K-major (the window)
                        if c.smem_bytes(dt, k, store, km) <= 232448:
                            seen.add((c.variant, c.template_args(n, k, dt, store, km)))
    for c, n, k in ((Dense(256, 128, 3, 2, 1, 8), 4096, 4096), (Dense(64, 64, 8), 4096, 8192),
                    (Dense(256, 128, 3, 2, 1, 16), 8192, 4096)):
        seen.add((c.variant, c.template_args(n, k, "bfloat16", True)))
    # the grouped mode as tests/test_grouped_gpu.py forces it (As K-major; fp32 out coarse)
    for c in (Dense(128, 128, 5, 1, 1, 8), Dense(128, 128, 5, 1, 1, 8, 1), Dense(64, 64, 8, 1, 1, 8),
              Dense(256, 128, 3, 2, 1, 8), Dense(128, 96, 6, 1, 1, 8), Dense(128, 128, 5, 2, 1, 8),
              Dense(128, 128, 5, 2, 0, 8), Dense(64, 96, 8, 2, 0, 8), Dense(128, 128, 5, 2, 0, 2)):
        for n, dt in ((300, "bfloat16"), (256, "float16"), (4096, "bfloat16")):
            for store in {c.store_ok(dt) and n % 8 == 0 and c.grouped_smem_bytes(dt, 16, 1024) <= 232448, False}:
                seen.add((c.variant, c.template_args(n, 1024, dt, store, True, True)))
    for c in (Dense(128, 128, 4, 1, 1, 8), Dense(256, 128, 3, 2, 1, 8), Dense(128, 128, 4, 2, 0, 2)):
        seen.add((c.variant, c.template_args(512, 2048, "float32", False, True, True)))
    # tests/test_batch_invariant.py's dense evidence test (As K-major: its cases are packed)
    for c in (Dense(64, 64, 8), Dense(128, 128, 5), Dense(128, 128, 5, two_accum=1), Dense(128, 96, 6),
              Dense(256, 128, 3, 2, 1, 8), Dense(128, 128, 5, 2, 0, 8)):
        for n, k in ((4096, 4096), (1536, 1024), (512, 7168)):
            for dt in ("bfloat16", "float16"):
                store = c.store_ok(dt) and c.smem_bytes(dt, k, True, True) <= 232448
                seen.add((c.variant, c.template_args(n, k, dt, store, True)))
    # FP8GEMM_GROUPED_DENSE=1's tiles as grouped.candidate picks them (tests/test_dense_dispatch.py)
    for c, dt in ((Dense(128, 128, 5, 2, 0, 2), "bfloat16"), (Dense(128, 128, 4, 2, 0, 2), "float32")):
        seen.add((c.variant, c.template_args(4096, 4096, dt, True, True, True)))
    # the fallback's dense model at tests/test_matmul_dense.py's untuned shapes (K-major As)
    for m, n, k in ((4100, 576, 7168), (3000, 1000, 1536), (200, 2880, 4096), (700, 1000, 2048)):
        c = Dense.model(GemmDesc(m, n, k))
        seen.add(_instance(c, "bfloat16", c.store_ok("bfloat16"), k=k, n=n))
    # tests/test_matmul_dense.py's flat As (packed rows of 2 and 7 K blocks), the store its plan takes
    for cfg in FLAT_CONFIGS:
        c = Dense(*cfg)
        for _, n, k in FLAT_SHAPES:
            seen.add(_instance(c, "bfloat16", c.store_ok("bfloat16") and n % 8 == 0, k=k, n=n))
    # the tuner's candidates on our quantizer's layout at the trace's (N, K) (what a table picks)
    for n in (512, 1536, 4096, 8192):
        for k in (256, 1024, 4096):
            for c in sum((Dense.tuner_candidates(GemmDesc(m, n, k)) for m in (4096, 128, 48)), []):
                store = c.store_ok("bfloat16") and c.smem_bytes("bfloat16", k, True, True) <= 232448
                seen.add((c.variant, c.template_args(n, k, "bfloat16", store, True)))
    return seen


DEFAULT_PRELUDE = {General.variant: general_rules.producer_prelude(), SwapAB.variant: general_rules.producer_prelude()}


def default_prelude(variant, targs) -> str:
    """The source prelude the launcher compiles an instantiation with: the dense kernel's depends
    on its cluster (targs[7]: unpaired tiles without the cluster attribute by default)."""
    if variant == Dense.variant:
        return Dense(64, 64, 8, targs[7]).prelude()
    return DEFAULT_PRELUDE.get(variant, "")


def _compile(tmp_path, variant, targs, prelude=""):
    src = tmp_path / f"{variant}.cu"
    inst = f"template __global__ void {compiler.kernel_name(variant, targs)}({PARAMS[variant]});\n"
    src.write_text(prelude + compiler.flatten(variant) + "\n" + inst)
    res = subprocess.run([NVCC, "-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-std=c++17",
                          "--resource-usage", "-o", str(tmp_path / "k.cubin"), str(src)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-4000:]
    return res.stderr + res.stdout


def _swiglu_instantiation():
    """fp8gemm.moe's fused L1 as grouped.swiglu_l1 instantiates it (DeepSeek-V4 Flash: 256 experts)."""
    return grouped.SwiGLU.fallback(256).template_args()


@pytest.mark.compile_sweep
@needs_nvcc
@pytest.mark.parametrize("variant,targs", _instantiations(), ids=lambda v: str(v))
def test_compiles_without_spills(tmp_path, variant, targs):
    # as the launcher compiles it: the dense kernel with its default prelude (the elected producer)
    log = _compile(tmp_path, variant, targs, default_prelude(variant, targs))
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert spills, f"no resource usage in nvcc output:\n{log}"
    assert all(s == ("0", "0") for s in spills), f"register spills:\n{log}"
    assert "0 bytes stack frame" in log, f"local memory used:\n{log}"


@needs_sass
def test_fused_swiglu_k_loop_free_of_local_memory(tmp_path):
    """The fused SwiGLU L1 (kSwiGLU) holds 3 x 64 accumulators across its K loop plus a second
    sub-tile's bookkeeping, and ptxas keeps a few scheduler values in local memory (32 bytes,
    touched once per sub-tile). The rule it must keep: no local load or store inside the K loop
    (from the back edge's target to the back edge), and QGMMA present."""
    log = _compile(tmp_path, "sm90_fp8_gemm_general", _swiglu_instantiation())
    spills = re.findall(r"(\d+) bytes spill stores", log)
    assert spills and int(spills[0]) <= 64, f"more spills than the 32 bytes measured:\n{log}"
    sass = subprocess.run([CUOBJDUMP, "-sass", str(tmp_path / "k.cubin")], capture_output=True,
                          text=True).stdout
    ops = re.findall(r"/\*([0-9a-f]{4,6})\*/\s+([^;]*);", sass)
    addr = [int(a, 16) for a, _ in ops]
    waits = [i for i, (_, op) in enumerate(ops) if "WARPGROUP.DEPBAR" in op]
    assert waits and any("QGMMA" in op for _, op in ops), "no wgmma in the fused kernel"
    # The K loop: the first backward branch after the last wgmma wait, back to its target.
    back = next(i for i in range(waits[-1], len(ops))
                if re.search(r"\bBRA\b", ops[i][1]) and int(ops[i][1].split()[-1], 16) < addr[i])
    top = addr.index(int(ops[back][1].split()[-1], 16))
    assert top < waits[-1], "the back edge does not enclose a wgmma wait"
    local = [op for _, op in ops[top:back + 1] if re.search(r"\b(LDL|STL)\b", op)]
    assert not local, f"local memory inside the K loop: {local}"


@needs_sass
def test_sass_uses_fp8_wgmma(tmp_path):
    _compile(tmp_path, "sm90_fp8_gemm_general", (128, 6, 0, 8, "false", "true", "false"))
    sass = subprocess.run([CUOBJDUMP, "-sass", str(tmp_path / "k.cubin")], capture_output=True,
                          text=True).stdout
    assert "QGMMA" in sass and "UTMALDG" in sass and "UTMASTG" in sass


@needs_sass
@pytest.mark.parametrize("variant,targs,bound", [
    ("sm90_fp8_gemm_general", (128, 6, 0, 8, "false", "true", "false"), 32),   # plain, TMA store
    ("sm90_fp8_gemm_swap_ab", (8, 6, 0, 1, "false", "false"), 24),             # swap-AB (split-K)
    ("sm90_fp8_gemm_wg3", (128, 3, 0, 1, "true"), 16),
], ids=["general", "general-swap-ab", "wg3"])
def test_tma_producer_stays_on_uniform_datapath(tmp_path, variant, targs, bound):
    """The TMA producer's loop keeps its coordinates and barrier addresses in uniform registers.
    Values that ptxas cannot prove warp-uniform (e.g. merged out of a one-thread branch) push the
    loop into vector registers with R2UR moves before every TMA issue: 90 R2UR in the general
    kernel and 89 in wg3 (bench/NOTES.md), against 18-24 and 6-10 when uniform."""
    _compile(tmp_path, variant, targs)
    sass = subprocess.run([CUOBJDUMP, "-sass", str(tmp_path / "k.cubin")], capture_output=True,
                          text=True).stdout
    assert "UTMALDG" in sass, "no TMA load in the kernel"
    count = len(re.findall(r"\bR2UR\b", sass))
    assert count <= bound, f"{count} R2UR (at most {bound} expected): the producer left the uniform datapath"


@needs_sass
def test_short_k_promotes_block0_under_block1_wgmma(tmp_path):
    """The short-K kernel waits twice (DEPBAR 1, then 0) with block 0's promotion between them:
    the overlap its design rests on (ptxas once sank the promotion below the second wait)."""
    _compile(tmp_path, "sm90_fp8_gemm_short_k", (128, 128, 2, 0, "false", "true"))
    sass = subprocess.run([CUOBJDUMP, "-sass", str(tmp_path / "k.cubin")], capture_output=True,
                          text=True).stdout
    ops = [line.split()[1] for line in sass.splitlines()
           if re.search(r"/\*[0-9a-f]{4}\*/", line) and len(line.split()) > 1]
    waits = [i for i, op in enumerate(ops) if op == "WARPGROUP.DEPBAR.LE"]
    assert len(waits) == 2, f"expected 2 wgmma waits, found {len(waits)}"
    between = ops[waits[0] + 1:waits[1]]
    assert sum(op in ("FMUL", "FFMA") for op in between) >= 64, "block 0 is not promoted between the waits"
    assert "STS" in " ".join(ops) or any(op.startswith("STS") for op in ops), "epilogue staging not in STS"


@needs_sass
@pytest.mark.parametrize("block_n,fine", [(16, False), (64, False), (16, True)])
def test_raw_split_sum_loads_ahead(tmp_path, block_n, fine):
    """swap-AB's raw split: the last split's ordered sum issues 16 float4 slot loads in one
    branch-free run (kRawDepth K blocks, one L2 round trip for all), and sums with FFMA only, as
    the unsplit loop does (an FMUL + FADD pair would change a row's bits). With a runtime trip
    count the slot loads had sat one K block at a time behind the loop's exit test (a round
    trip per block: ~32 at K = 4096), and with selects in the sum the FFMA had split."""
    from fp8gemm.dispatch import SwapAB
    variant, targs = _instance(SwapAB(block_n, 4, 1, 2, raw_split=1), "float32" if fine else "bfloat16")
    _compile(tmp_path, variant, targs)
    sass = subprocess.run([CUOBJDUMP, "-sass", str(tmp_path / "k.cubin")], capture_output=True,
                          text=True).stdout
    ops = [line.split(";")[0] for line in sass.splitlines() if re.search(r"/\*[0-9a-f]{4}\*/\s+\S", line)]
    run = longest = 0
    for op in ops:
        if re.search(r"\bBRA\b", op):
            run = 0
        elif "LDG.E.128" in op:
            run += 1
            longest = max(longest, run)
    assert longest >= 16, f"the raw slots' loads: at most {longest} between branches"
    assert not any(re.search(r"\bFADD\b", op) for op in ops), "the ordered sum is not all FFMA"


@needs_nvcc
def test_dense_implicit_cluster_prelude(tmp_path, monkeypatch):
    """FP8GEMM_DENSE_IMPLICIT_CLUSTER: only unpaired tiles take the prelude (a pair refuses it at
    compile time); with it the cubin carries no cluster attribute and the same registers and no
    spills (where cuobjdump is at hand: the same instructions)."""
    from fp8gemm.dispatch import dense
    monkeypatch.setattr(dense, "ELECT_PRODUCER_SWITCH", False)     # this prelude alone
    monkeypatch.setattr(dense, "SHORT_A_BOX_SWITCH", False)
    monkeypatch.setattr(dense, "A_BOX_SHIFT_SWITCH", False)
    monkeypatch.setattr(dense, "IMPLICIT_CLUSTER_SWITCH", False)
    assert Dense(128, 128, 5).prelude() == ""
    monkeypatch.setattr(dense, "IMPLICIT_CLUSTER_SWITCH", True)
    assert Dense(128, 128, 5).prelude() == dense.IMPLICIT_CLUSTER_PRELUDE
    assert Dense(256, 128, 3, 2, 1, 8).prelude() == ""
    c = Dense(128, 128, 5, 1, 1, 8)
    targs = c.template_args(512, 4096, "bfloat16", True, True)
    logs, sass = [], []
    for prelude in ("", dense.IMPLICIT_CLUSTER_PRELUDE):
        logs.append(re.search(r"Used (\d+) registers", _compile(tmp_path, c.variant, targs, prelude)).group(1))
        if CUOBJDUMP:
            elf = subprocess.run([CUOBJDUMP, "-elf", str(tmp_path / "k.cubin")], capture_output=True, text=True).stdout
            assert ("EXPLICIT_CLUSTER" in elf) == (prelude == ""), prelude
            sass.append(re.sub(r"/\*[0-9a-fx]+\*/", "", subprocess.run(
                [CUOBJDUMP, "-sass", str(tmp_path / "k.cubin")], capture_output=True, text=True).stdout))
    assert logs[0] == logs[1]
    if sass:
        assert sass[0] == sass[1]
    pair = Dense(256, 128, 3, 2, 1, 8)
    src = tmp_path / "pair.cu"
    src.write_text(dense.IMPLICIT_CLUSTER_PRELUDE + compiler.flatten(pair.variant) + "\ntemplate __global__ void "
                   f"{compiler.kernel_name(pair.variant, pair.template_args(4096, 4096, 'bfloat16', True, True))}"
                   f"({PARAMS[pair.variant]});\n")
    res = subprocess.run([NVCC, "-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-std=c++17", "-o",
                          str(tmp_path / "pair.cubin"), str(src)], capture_output=True, text=True, timeout=300)
    assert res.returncode != 0 and "unpaired tiles only" in res.stderr


@needs_nvcc
@pytest.mark.parametrize("cfg,n,k,grouped", [((64, 32, 16, 1, 0, 8), 512, 4096, False),
                                             ((128, 128, 5, 1, 0, 8), 512, 4096, False),
                                             ((256, 128, 3, 2, 1, 8), 4096, 4096, False),
                                             ((128, 128, 5, 2, 0, 2), 1536, 4096, True)], ids=str)
def test_dense_elect_producer_prelude(tmp_path, monkeypatch, cfg, n, k, grouped):
    """FP8GEMM_DENSE_ELECT_PRODUCER: the prelude under the switch only; with it the kernel compiles
    without spills for plain and paired tiles and the grouped mode (the producer unrolled by 8)."""
    from fp8gemm.dispatch import dense
    c = Dense(*cfg)
    monkeypatch.setattr(dense, "ELECT_PRODUCER_SWITCH", False)
    assert dense.ELECT_PRODUCER_PRELUDE not in c.prelude()
    monkeypatch.setattr(dense, "ELECT_PRODUCER_SWITCH", True)
    assert dense.ELECT_PRODUCER_PRELUDE in c.prelude()
    targs = c.template_args(n, k, "bfloat16", True, True, grouped)
    log = _compile(tmp_path, c.variant, targs, c.prelude())
    assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", log), log[-2000:]


@needs_nvcc
@pytest.mark.parametrize("cfg,n", [((64, 16, 15, 1, 0, 8, 1), 1536), ((256, 128, 3, 2, 1, 8), 4096),
                                   ((128, 96, 5, 1, 1, 8), 1000)], ids=str)
def test_dense_short_a_box_prelude(tmp_path, monkeypatch, cfg, n):
    """FP8GEMM_DENSE_SHORT_A_BOX (lab): with the prelude the kernel compiles without spills, the
    unpaired, paired (A multicast) and straddling tiles that tests/test_matmul_dense.py forces."""
    from fp8gemm.dispatch import dense
    monkeypatch.setattr(dense, "SHORT_A_BOX_SWITCH", True)
    c = Dense(*cfg)
    targs = c.template_args(n, 1024, "bfloat16", c.store_ok("bfloat16") and n % 8 == 0, True)
    log = _compile(tmp_path, c.variant, targs, c.prelude())
    assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", log), log[-2000:]
    assert "0 bytes stack frame" in log, log[-2000:]


@needs_nvcc
@pytest.mark.parametrize("cfg,n,grouped", [((64, 16, 15, 1, 0, 8, 1), 1536, False), ((256, 128, 3, 2, 1, 8), 4096, False),
                                           ((128, 96, 5, 1, 1, 8), 1000, False), ((128, 128, 5, 2, 0, 2), 4096, True)],
                         ids=str)
def test_dense_sfb_ahead_prelude(tmp_path, monkeypatch, cfg, n, grouped):
    """FP8GEMM_DENSE_SFB_AHEAD (lab): the prelude under the switch only; with it the kernel compiles
    without spills or stack for an unpaired two-accumulator, a paired, a straddling and a grouped tile."""
    from fp8gemm.dispatch import dense
    c = Dense(*cfg)
    assert not dense.SFB_AHEAD_SWITCH and dense.SFB_AHEAD_PRELUDE not in c.prelude()
    monkeypatch.setattr(dense, "SFB_AHEAD_SWITCH", True)
    assert dense.SFB_AHEAD_PRELUDE in c.prelude()
    targs = c.template_args(n, 1024, "bfloat16", c.store_ok("bfloat16") and n % 8 == 0, True, grouped)
    log = _compile(tmp_path, c.variant, targs, c.prelude())
    assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", log), log[-2000:]
    assert "0 bytes stack frame" in log, log[-2000:]


@needs_nvcc
@pytest.mark.parametrize("cfg,n,k,grouped", [((128, 128, 5, 2, 0, 2), 4096, 4096, True),
                                             ((128, 192, 4, 2, 0, 8), 4096, 2048, True),
                                             ((128, 128, 5, 1, 1, 8, 1), 4096, 4096, False),
                                             ((256, 128, 3, 2, 1, 8), 4096, 1024, False),
                                             ((64, 64, 8, 1, 1, 8), 1000, 1024, False)], ids=str)
def test_dense_skip_idle_wg_prelude(tmp_path, monkeypatch, cfg, n, k, grouped):
    """FP8GEMM_DENSE_SKIP_IDLE_WG (lab): the prelude under the switch only; with it the kernel
    compiles without spills or stack for grouped pairs sharing B (128 x 128, DeepGEMM's 128 x 192),
    a two-accumulator tile, 256-row pairs sharing A and a 64-row tile, and its wgmma count is the
    plain kernel's (the idle path adds none: one K loop's worth per wgmma site)."""
    from fp8gemm.dispatch import dense
    c = Dense(*cfg)
    assert not dense.SKIP_IDLE_WG_SWITCH and dense.SKIP_IDLE_WG_PRELUDE not in c.prelude()
    targs = c.template_args(n, k, "bfloat16", c.store_ok("bfloat16") and n % 8 == 0, True, grouped)
    counts = []
    for on in (False, True):
        monkeypatch.setattr(dense, "SKIP_IDLE_WG_SWITCH", on)
        assert (dense.SKIP_IDLE_WG_PRELUDE in c.prelude()) == on
        log = _compile(tmp_path, c.variant, targs, c.prelude())
        assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", log), log[-2000:]
        assert "0 bytes stack frame" in log, log[-2000:]
        if CUOBJDUMP:
            sass = subprocess.run([CUOBJDUMP, "-sass", str(tmp_path / "k.cubin")], capture_output=True, text=True).stdout
            counts.append(len(re.findall(r"\bHGMMA\.|\bQGMMA\.", sass)))
    if counts:
        assert counts[0] == counts[1] > 0, counts


@needs_nvcc
@pytest.mark.parametrize("cfg,n,k,grouped", [((128, 128, 5, 1, 1, 8, 1), 8192, 4096, False),
                                             ((64, 48, 15, 1, 0, 8), 1536, 4096, False),
                                             ((256, 128, 3, 2, 1, 8), 4096, 1024, False),
                                             ((128, 128, 5, 2, 0, 2), 4096, 4096, True)], ids=str)
@pytest.mark.parametrize("switch,prelude", [("A_BOX_SHIFT_SWITCH", "A_BOX_SHIFT_PRELUDE"),
                                            ("SHORT_SFA_BOX_SWITCH", "SHORT_SFA_BOX_PRELUDE")], ids=str)
def test_dense_a_box_shift_prelude(tmp_path, monkeypatch, cfg, n, k, grouped, switch, prelude):
    """FP8GEMM_DENSE_A_BOX_SHIFT (on by default) and FP8GEMM_DENSE_SHORT_SFA_BOX (lab): each prelude under its switch
    only; with it the kernel compiles without spills or stack (two accumulators, a straddling width,
    256-row pairs (whose code the moved box leaves as it is), the grouped mode), with the plain
    kernel's wgmma count and registers, and at most
    32 SASS instructions more (once per tile or launch: none in the unrolled K loop; session 48:
    +16-24 for the moved box)."""
    from fp8gemm.dispatch import dense
    c = Dense(*cfg)
    prelude = getattr(dense, prelude)
    monkeypatch.setattr(dense, switch, False)
    assert prelude not in c.prelude()
    targs = c.template_args(n, k, "bfloat16", c.store_ok("bfloat16") and n % 8 == 0, True, grouped,
                            sfa_flat=not grouped and dense.flat_kb_ok(k // 128))
    counts, regs = [], []
    for on in (False, True):
        monkeypatch.setattr(dense, switch, on)
        assert (prelude in c.prelude()) == on
        log = _compile(tmp_path, c.variant, targs, c.prelude())
        assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", log), log[-2000:]
        assert "0 bytes stack frame" in log, log[-2000:]
        regs.append(re.findall(r"Used (\d+) registers", log))
        if CUOBJDUMP:
            sass = subprocess.run([CUOBJDUMP, "-sass", str(tmp_path / "k.cubin")], capture_output=True, text=True).stdout
            code = re.findall(r"^\s+/\*[0-9a-f]{4,}\*/\s+(?!NOP)(.*?);", sass, re.M)
            counts.append((len(re.findall(r"\bHGMMA\.|\bQGMMA\.", sass)), len(code), code))
    assert regs[0] == regs[1], regs
    if counts:
        assert counts[0][0] == counts[1][0] > 0, counts[0][:2] + counts[1][:2]
        # the short window: not in the grouped mode nor with a flat As (K <= 1024); the moved box: not
        # on 256-row tiles (the kernel's a_box_shift: it spilled there); the same code where not
        applies = (c.block_m <= 128 if switch == "A_BOX_SHIFT_SWITCH"
                   else not (grouped or dense.flat_kb_ok(k // 128)))
        assert (counts[1][2] != counts[0][2]) == applies, "the prelude changed nothing" if applies else "it changed code"
        assert 0 <= counts[1][1] - counts[0][1] <= 32, counts[0][:2] + counts[1][:2]


@needs_nvcc
@pytest.mark.parametrize("cfg,n,k,grouped", [((64, 64, 8, 1, 1, 8, 1), 4096, 4096, False),
                                             ((128, 128, 5, 1, 1, 8, 1), 8192, 4096, False),
                                             ((64, 48, 12, 1, 0, 8), 1536, 8192, False),
                                             ((128, 96, 5, 2, 0, 8), 4096, 4096, False),
                                             ((128, 128, 5, 2, 0, 8), 4096, 4096, True),
                                             ((64, 64, 8, 1, 1, 8, 1), 4096, 2048, False),
                                             ((128, 128, 5, 2, 0, 8), 4096, 2048, True)], ids=str)
def test_dense_sfa_wide_window_compiles(tmp_path, monkeypatch, cfg, n, k, grouped):
    """FP8GEMM_DENSE_SFA_WIDE_WINDOW (on by default): the 32- and 16-block swizzled As windows compile without spills or
    stack (two accumulators at 64 and 128 rows, a straddling width over two windows a tile, pairs
    sharing B, the grouped mode's pairs sharing B), with the window of 8's wgmma count and at most 4%
    more SASS instructions (the
    swizzled column, 1.5-3.5 per unrolled K block: session 49, 64 x 64 two accumulators 2848 against
    2800, 128 x 96 pairs (four K loops, one per `former`) 3520 against 3408)."""
    from fp8gemm.dispatch import dense
    c = Dense(*cfg)
    counts = []
    for on in (False, True):
        monkeypatch.setattr(dense, "SFA_WIDE_WINDOW_SWITCH", on)
        targs = c.template_args(n, k, "bfloat16", c.store_ok("bfloat16") and n % 8 == 0, True, grouped,
                                num_groups=8 if grouped else None)
        assert targs[-1] == ((32 if k % 4096 == 0 else 16) if on else 8)
        log = _compile(tmp_path, c.variant, targs, c.prelude())
        assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", log), log[-2000:]
        assert "0 bytes stack frame" in log, log[-2000:]
        if CUOBJDUMP:
            sass = subprocess.run([CUOBJDUMP, "-sass", str(tmp_path / "k.cubin")], capture_output=True, text=True).stdout
            counts.append((len(re.findall(r"\bQGMMA\.", sass)), len(re.findall(r"^\s+/\*[0-9a-f]{4,}\*/\s+(?!NOP)", sass, re.M))))
    if counts:
        assert counts[0][0] == counts[1][0] > 0 and 0 <= counts[1][1] - counts[0][1] <= 0.04 * counts[0][1], counts


@needs_nvcc
@pytest.mark.parametrize("cfg,n,k", [((64, 16, 15, 1, 0, 8, 1), 1536, 1024), ((256, 128, 3, 2, 1, 8), 4096, 512),
                                     ((128, 96, 5, 1, 1, 8), 1000, 1024)], ids=str)
def test_dense_flat_wide_compiles(tmp_path, cfg, n, k):
    """FP8GEMM_DENSE_FLAT_WIDE (on by default): the wide flat As (kSfaFlatWide) compiles without spills or
    stack for a two-accumulator 64-row tile, 256-row pairs sharing A and a straddling width."""
    c = Dense(*cfg)
    targs = c.template_args(n, k, "bfloat16", c.store_ok("bfloat16") and n % 8 == 0, True, sfa_flat=True)
    assert targs[-1] == "true"
    log = _compile(tmp_path, c.variant, targs, c.prelude())
    assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", log), log[-2000:]
    assert "0 bytes stack frame" in log, log[-2000:]


def _no_spills(log, targs):
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert spills and all(sp == ("0", "0") for sp in spills), (targs, log[-2000:])
    assert "0 bytes stack frame" in log, (targs, log[-2000:])


def _sass(tmp_path, variant, targs) -> str:
    """The instantiation compiled as the launcher builds it (its default prelude), disassembled."""
    _compile(tmp_path, variant, targs, default_prelude(variant, targs))
    return subprocess.run([CUOBJDUMP, "-sass", str(tmp_path / "k.cubin")], capture_output=True, text=True,
                          check=True).stdout


@needs_nvcc
@pytest.mark.parametrize("dt", list(OUT_TYPE_IDS))
def test_swap_ab_64_rows_compile_without_spills(tmp_path, dt):
    """swap-AB's 64-row tiles (one consumer warpgroup, kConsumers = 1), the narrowest and the
    widest token tile on the mode's ring: no spills and no stack (the 256-thread CTA's consumers
    keep kConsumerRegs)."""
    for block_n in (8, 64):
        variant, targs = _instance(swap64_tile(block_n, dt), dt)
        assert targs[-1] == 1, targs                                   # kConsumers named
        _no_spills(_compile(tmp_path, variant, targs, default_prelude(variant, targs)), targs)


@needs_sass
@pytest.mark.parametrize("dt", list(OUT_TYPE_IDS))
def test_swap_ab_64_rows_sass_matches_128_rows(tmp_path, dt):
    """swap-AB's 64-row tiles at the narrowest and the widest token tile: FP8 wgmma and TMA loads,
    and the float arithmetic (wgmma, scale products, promotion, split sums, output conversion) the
    128-row tile's, opcode for opcode in the same order: the SASS side of the batch-invariant
    mode's m64 argument (dispatch/invariant.py: SWAP64), which a change to one tile height alone
    would break."""
    def arithmetic(variant, targs):
        sass = _sass(tmp_path, variant, targs)
        assert "QGMMA" in sass and "UTMALDG" in sass, targs
        return re.findall(r"\b(QGMMA\S*|FFMA|FMUL|FADD|F2FP\S*)\b", sass)

    for block_n in (8, 64):
        ops64 = arithmetic(*_instance(swap64_tile(block_n, dt), dt))
        ops128 = arithmetic(*_instance(SwapAB(block_n, 6, 1, 1), dt))
        assert ops64 == ops128, (block_n, len(ops64), len(ops128))


@needs_nvcc
@pytest.mark.parametrize("dt", list(OUT_TYPE_IDS))
def test_swap_ab_raw_cluster_compile_without_spills(tmp_path, dt):
    """swap-AB's cluster raw split (kRawCluster) at every tile its GPU test forces: no spills and
    no stack."""
    targs_all = sorted(_raw_cluster_instantiations((dt,)), key=str)
    assert targs_all and all(t[-1] == "true" for _, t in targs_all)
    for variant, targs in targs_all:
        _no_spills(_compile(tmp_path, variant, targs, default_prelude(variant, targs)), targs)


@needs_sass
@pytest.mark.parametrize("dt", list(OUT_TYPE_IDS))
def test_swap_ab_raw_cluster_sass(tmp_path, dt):
    """swap-AB's cluster raw split at every tile its GPU test forces: FP8 wgmma, the cluster
    barrier and loads from a cluster peer's shared memory (the exchange), and no global atomics
    (no split-K counters: no workspace)."""
    for variant, targs in sorted(_raw_cluster_instantiations((dt,)), key=str):
        sass = _sass(tmp_path, variant, targs)
        assert "QGMMA" in sass and "UCGABAR_ARV" in sass and "UCGABAR_WAIT" in sass, targs
        assert "LD.E.128" in sass, targs                        # ld.shared::cluster: a generic 16-byte load
        assert "RED." not in sass and "ATOM" not in sass, targs                      # no split-K counters


@needs_nvcc
def test_general_elect_producer_prelude(tmp_path, monkeypatch):
    """FP8GEMM_GENERAL_ELECT_PRODUCER: the general-family prelude under the switch only; with it a
    general, a 64-row and a swap-AB instantiation compile without spills."""
    from fp8gemm.dispatch import general as gen
    monkeypatch.setattr(gen, "ELECT_PRODUCER_SWITCH", False)
    assert gen.producer_prelude() == ""
    monkeypatch.setattr(gen, "ELECT_PRODUCER_SWITCH", True)
    assert gen.producer_prelude() == gen.ELECT_PRODUCER_PRELUDE
    cases = [(General(128, 4), General(128, 4).template_args("bfloat16", False, True, False)),
             (General(32, 8, block_m=64), General(32, 8, block_m=64).template_args("bfloat16", False, False, False)),
             (SwapAB(16, 6), SwapAB(16, 6).template_args("float32", True, False))]
    for c, targs in cases:
        log = _compile(tmp_path, c.variant, targs, gen.producer_prelude())
        assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", log), (c, log[-2000:])


def test_generated_wgmma_header_is_current():
    import importlib.util
    path = compiler.kernel_dir() / "ptx" / "gen_wgmma_fp8.py"
    spec = importlib.util.spec_from_file_location("gen_wgmma_fp8", path)
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert (compiler.kernel_dir() / "ptx" / "wgmma_fp8.cuh").read_text() == gen.render()


def test_flatten_inlines_each_header_once():
    src = compiler.flatten("sm90_fp8_gemm_general")
    assert '#include "' not in src
    assert src.count("struct alignas(64) TmaDescriptor") == 1
    assert "sm90_fp8_gemm_general_kernel" in src


def _smem_cases():
    """(C++ expression of a kernel's shared-memory layout size, the host's size) for every tile,
    stage count and output type a descriptor of the general family or wg3 can ask for."""
    from fp8gemm.dispatch import general, wg3
    cases = []
    for dt, tid in OUT_TYPE_IDS.items():
        staging = "fp8gemm::SwizzledStaging<fp8gemm::OutType({tid}), {bn}>"
        general_staging = "fp8gemm::StoreStaging<fp8gemm::OutType({tid}), {bn}>"   # the general kernel's
        for stages in range(2, general.MAX_STAGES + 1):
            for bn in general.BLOCK_NS:
                st = general_staging.format(tid=tid, bn=bn)
                expr = f"fp8gemm::general::Smem<{bn}, {stages}, ({st}::kSupported ? {st}::kBytes : 0)>::kBytes"
                c = General(bn, stages)
                cases.append((expr, c.smem_bytes(dt)))
                cases.append((f"{expr} + 16", c.grouped_smem_bytes(dt, 3)))        # prefix of 4 words
                for mask in ((1, 2, 3) if dt != "float32" else ()):                 # scales by TMA: slots
                    hold = f"{stages} * fp8gemm::general::scale_slot_floats<{mask}, 128>() * 4 / 2"
                    slots = (f"fp8gemm::general::Smem<{bn}, {stages}, ({st}::kSupported ? {st}::kBytes : 0), "
                             f"{hold}, 2>::kBytes")
                    cases.append((slots, c.smem_bytes(dt, mask)))
        for stages in range(2, general.MAX_STAGES_64 + 1):
            for bn in general.SWAP_BLOCK_NS:                                       # swap-AB's 64-row tiles
                expr = f"fp8gemm::general::Smem<{bn}, {stages}, 0, 0, 1>::kBytes"
                cases.append((expr, SwapAB(bn, stages, 1, 1, 64).smem_bytes(dt)))
            for bn in general.BLOCK_NS:
                st = general_staging.format(tid=tid, bn=bn)
                for mask in ((0, 1, 2, 3) if dt != "float32" else (0,)):
                    hold = f"{stages} * fp8gemm::general::scale_slot_floats<{mask}, 64>() * 4"
                    expr = (f"fp8gemm::general::Smem<{bn}, {stages}, ({st}::kSupported ? {st}::kBytes : 0), "
                            f"{hold}, 1>::kBytes")
                    cases.append((expr, General(bn, stages, 8, 1, 64).smem_bytes(dt, mask)))
        for stages in range(2, general.MAX_STAGES + 1):
            for bn in general.SWAP_BLOCK_NS:
                c = SwapAB(bn, stages)
                cases.append((f"fp8gemm::general::Smem<{bn}, {stages}, 0>::kBytes", c.smem_bytes(dt)))
                cases.append((f"fp8gemm::general::Smem<{bn}, {stages}, 0>::kBytes + 16", c.grouped_smem_bytes(dt, 3)))
            for bn in wg3.BLOCK_NS:
                st = staging.format(tid=tid, bn=bn)
                ring = "fp8gemm::RingSmem<192 * 128, {bn} * 128, {stages}, {staging}>::kBytes"
                c = Wg3(bn, stages)
                cases.append((ring.format(bn=bn, stages=stages, staging=f"3 * {st}::kBytes"), c.smem_bytes(dt)))
                cases.append((ring.format(bn=bn, stages=stages, staging="0") + " + 16", c.grouped_smem_bytes(dt, 3)))
                slots = f"fp8gemm::RingSmem<192 * 128, {bn} * 128, {stages}, 3 * {st}::kBytes, {stages} * 192 * 4>::kBytes"
                cases.append((slots, c.smem_bytes(dt, True)))
    for stages in range(2, general.MAX_STAGES + 1):
        hold = "(fp8gemm::WgmmaFp8<128>::kNumAccum / 2 + 2) * 128 * 4"
        cases.append((f"fp8gemm::general::Smem<128, {stages}, 0, {hold}>::kBytes + 16",
                       grouped.SwiGLU(stages).smem_bytes("float32", 3)))
    return [c for c in cases if c[1] <= 232448]


@needs_nvcc
def test_host_smem_sizes_match_kernel_layouts(tmp_path):
    """The descriptors' shared-memory sizes (dispatch/) equal the kernels' own layouts (RingSmem in
    common/pipeline.cuh, general::Smem in general_tiles.cuh), checked by static_assert in nvcc."""
    kdir = compiler.kernel_dir()
    lines = [f'#include "{kdir}/general_tiles.cuh"', f'#include "{kdir}/epilogue.cuh"',
             f'#include "{kdir}/ptx/wgmma.cuh"']
    cases = _smem_cases()
    assert len(cases) > 100
    lines += [f'static_assert({expr} == {host}u, "host size {host} != {expr}");' for expr, host in cases]
    src = tmp_path / "smem.cu"
    src.write_text("\n".join(lines) + "\n")
    res = subprocess.run([NVCC, "-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-std=c++17", "-o",
                          str(tmp_path / "smem.cubin"), str(src)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-4000:]
