"""CPU: the dense kernel's host descriptor (dispatch/dense.py): its validity rules, template
arguments, shared-memory sum and grid, and that the dispatcher never picks it by itself (forced
only until measured)."""
import pytest

from fp8gemm.dispatch import Dense, GemmDesc, is_valid, select
from fp8gemm.dispatch import dense
from fp8gemm.dispatch.selector import VARIANTS, from_entry


@pytest.mark.parametrize("block_n,ok", [(16, True), (48, True), (96, True), (128, True), (144, True),
                                        (160, True), (192, True), (256, True), (8, False), (12, False),
                                        (200, False), (264, False)])
def test_width_rule(block_n, ok):
    """Widths up to 128 reach at most two Bs rows; above 128 only where block_n - 128 divides 128."""
    assert dense.width_ok(block_n) is ok


@pytest.mark.parametrize("cfg,ok", [((256, 128), True), ((128, 160), True), ((128, 192), False),
                                    ((128, 256), False), ((256, 160), False), ((64, 256), False),
                                    ((64, 144), True), ((256, 96), True)])
def test_register_rule(cfg, ok):
    assert Dense(*cfg, stages=2).registers_ok() is ok


def test_two_accumulators_rule():
    """One-wave tiles inside one Bs row only; the second accumulator counts in the registers."""
    assert Dense(128, 128, two_accum=1).is_valid(GemmDesc(4096, 4096, 4096))
    assert not Dense(256, 128, 3, 2, 1, 8, 1).is_valid(GemmDesc(4096, 4096, 4096))
    assert not Dense(128, 96, two_accum=1).is_valid(GemmDesc(4096, 4096, 4096))
    assert not Dense(128, 160, 4, two_accum=1).registers_ok()
    assert Dense(128, 128, 5, 1, 1, 8, 1).template_args(4096, 4096, "bfloat16", True)[-1] == "true"
    assert len(Dense(128, 128).template_args(4096, 4096, "bfloat16", True)) == 10
    assert Dense(64, 64, 8, two_accum=1).label() == "dense 64x64 s8 g8 2acc"


def test_validity():
    d = GemmDesc(4096, 4096, 4096)
    assert is_valid(d, Dense()) and is_valid(d, Dense(256, 128, 3, 2, 1, 8))
    assert not is_valid(GemmDesc(4096, 4096, 4096, "float32"), Dense())          # fp32: general kernel
    assert not is_valid(d, Dense(96, 128))                                         # tile heights 64/128/256
    assert not is_valid(d, Dense(256, 128, 3, 2, 1, 7))                            # a pair inside one group
    assert not is_valid(d, Dense(256, 128, 6, 2, 1, 8))                            # over the shared memory
    assert not is_valid(GemmDesc(4096, 4096, 40), Dense())                         # K a multiple of 16


def test_template_and_smem():
    c = Dense(256, 128, 3, 2, 1, 16)
    assert c.template_args(7168, 2048, "float16", True) == (256, 128, 3, 7168, 2048, 1, "true", 2, "true", 16)
    # alignment slack, ring, staging of 4 (warpgroup, wave) pairs, As slots, two tiles' Bs rows, barriers
    kb = 32
    assert c.smem_bytes("bfloat16", 4096, True) == 1024 + 3 * 384 * 128 + 256 * 128 * 2 + 3 * 256 * 4 + 4 * kb * 4 + 48
    assert c.smem_bytes("bfloat16", 4096, False) == c.smem_bytes("bfloat16", 4096, True) - 256 * 128 * 2
    assert c.threads == 384 and Dense(64, 64).threads == 256
    assert c.label() == "dense 256x128 s3 c2A g16"


def test_forced_only():
    """In VARIANTS (a table entry or config= names it), never chosen by select."""
    assert VARIANTS["sm90_fp8_gemm_dense"] is Dense
    assert from_entry({"variant": "sm90_fp8_gemm_dense", "block_m": 256, "cluster": 2}) == Dense(256, cluster=2)
    for m, n, k in ((4096, 4096, 4096), (16384, 8192, 4096), (128, 4096, 8192), (1, 4096, 4096)):
        assert not isinstance(select(m, n, k), Dense)
    assert Dense.tuner_candidates(GemmDesc(4096, 4096, 4096)) == []
