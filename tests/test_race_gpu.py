"""GPU stress of the paths where one CTA's threads hand data to each other through shared memory
and barriers across many work units: split-K's last-split decision (the general kernel's barrier
reduction, the swap-AB kernel's flag), the narrow and swizzled TMA-store staging reused tile after
tile, on tiles of 8-32 columns, 16 K splits, every output dtype, N tails, one or two consumer
warpgroups (and one of them idle past M). Every case has several units per CTA (more than the 132
SMs of an H100 / H200) and runs REPEATS times: each result bitwise equal to the first (the split-K
sum is in split order whoever finishes last) and the first within tolerance of the float64
reference. A race shows as a tile that differs between runs or from the reference.
tools/sanitize_all.py runs racecheck over the same paths."""
import pytest

from generators import random_case, to_cupy_f64

import fp8gemm
from fp8gemm import reference
from fp8gemm.dispatch import GemmDesc, General, SwapAB

pytestmark = pytest.mark.gpu

TOL = {"bfloat16": 4e-3, "float16": 1e-3, "float32": 1e-4}
REPEATS = 20
OUT_DTYPES = ("bfloat16", "float16", "float32")
K = 2064                   # 17 K blocks over 16 splits: units of one or two blocks
# (M, block_m): one warpgroup storing and one idle past M, both storing, one consumer warpgroup.
ROWS = [(3, 128), (100, 128), (40, 64)]
# N per tile width: a tail inside the last tile, 16-byte rows (TMA store where the tile's rows
# allow it); and N = 999, whose rows are not 16-byte aligned (direct stores).
WIDTHS = [(8, 1004), (16, 1000), (32, 1000), (16, 999)]


def _bits(out):
    import cupy
    out = cupy.asarray(out)
    return out.view(cupy.uint32 if out.dtype.itemsize == 4 else cupy.uint16)


def _repeat(case, out_dtype, cfg):
    """REPEATS runs of one call: every one bitwise the first, the first within tolerance."""
    import cupy
    first = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out_dtype=out_dtype, config=cfg)
    want = _bits(first).copy()
    for i in range(1, REPEATS):
        again = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out_dtype=out_dtype, config=cfg)
        diff = _bits(again) != want
        assert not bool(diff.any()), f"run {i} differs from run 0 in {int(diff.sum())} elements " \
                                     f"(first at {[int(v[0]) for v in cupy.nonzero(diff)]})"
    err = reference.rel_fro_error(to_cupy_f64(first), case.reference(cupy))
    assert err <= TOL[out_dtype], f"relative Frobenius error {err:.3e} > {TOL[out_dtype]}"
    assert float(cupy.abs(to_cupy_f64(first)).max()) > 0


@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
@pytest.mark.parametrize("block_n,n", WIDTHS, ids=lambda v: str(v))
@pytest.mark.parametrize("m,block_m", ROWS, ids=lambda v: str(v))
def test_general_split_k_narrow_tiles_repeat(m, block_m, block_n, n, out_dtype):
    """The general kernel: 16 splits of narrow tiles, ~1000 units over the grid."""
    cfg = General(block_n, 4, 8, 16, block_m)
    assert cfg.is_valid(GemmDesc(m, n, K, out_dtype))
    _repeat(random_case(m, n, K, seed=m + n + block_n), out_dtype, cfg)


@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
@pytest.mark.parametrize("block_n", [8, 16, 32])
@pytest.mark.parametrize("m", [1, 13, 32])
def test_swap_ab_split_k_repeat(m, block_n, out_dtype):
    """The swap-AB kernel: token tiles of 8-32 (M tails inside them), 16 splits, 33 weight tiles
    (an N tail): 528 units over the grid."""
    if m > block_n:
        pytest.skip(f"{m} tokens do not fit a {block_n}-token tile")
    n = 4096 + 72
    cfg = SwapAB(block_n, 4, 8, splits=16)
    assert cfg.is_valid(GemmDesc(m, n, K, out_dtype))
    _repeat(random_case(m, n, K, seed=m + block_n), out_dtype, cfg)


@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
def test_staging_reuse_without_split_repeat(out_dtype):
    """No split, 16-column tiles, 2000 tiles: each CTA's staging buffer rewritten for ~15 tiles
    in turn, each time after its previous bulk store has read it."""
    m, n, k = 200, 16000, 256
    _repeat(random_case(m, n, k, seed=5), out_dtype, General(16, 4, 8))
