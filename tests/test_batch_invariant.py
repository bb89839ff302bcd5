"""Batch-invariant mode of fp8gemm.matmul (issue 57, phase 1; dispatch/invariant.py says why the
rule holds). CPU: the mode's kernel is the same for every M above SMALL_M_MAX (for every M with
the small-M tiles off) and never splits K, the small-M tiles' rule, the switches, the environment
variables, explain, config= refused. GPU (gpu-marked, skipped without an SM90 GPU): rows compared
bitwise between a call and the same rows inside a larger call."""
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from generators import Case, random_case, to_cupy_f64, trace_shapes

import fp8gemm
from fp8gemm import api
from fp8gemm.dispatch import GemmDesc, General, SwapAB, is_valid, select
from fp8gemm.dispatch import general as gen
from fp8gemm.dispatch import invariant
from fp8gemm.dispatch.invariant import invariant_candidate, mode_candidate

ROOT = Path(__file__).resolve().parents[1]
DTYPES = ("bfloat16", "float16", "float32")
# test_random_m_pairs' cases per output dtype: 24 in the suite; issue 57's acceptance run sets 500
# (FP8GEMM_TEST_RANDOM_PAIRS=500 pytest tests/test_batch_invariant.py -k random_m_pairs).
RANDOM_PAIRS = int(os.environ.get("FP8GEMM_TEST_RANDOM_PAIRS", "24"))
# ... in test items of at most this many pairs each, so that xdist workers share a long run (each
# pair's (M1, M2, N, K) drawn from its own seed: the same pairs however they are split)
RANDOM_CHUNK = 50
NK = sorted({(n, k) for _, n, k in trace_shapes()}) + [(7, 4096), (16, 128), (100, 16), (2112, 7168), (24576, 1536)]
# 1 .. 65536: every power of two, its neighbours, and random sizes between
_rng = np.random.default_rng(57)
M_SWEEP = sorted({1, 2, 3} | {p + d for p in (2 ** e for e in range(2, 17)) for d in (-1, 0, 1)}
                 | {int(x) for x in _rng.integers(1, 65537, size=40)})


@pytest.fixture
def mode():
    """Restores the process-wide mode after the test."""
    saved = invariant.ENABLED
    yield
    invariant.set_batch_invariant(saved)


def _planned(monkeypatch):
    """plan_problem without a GPU: the candidate it chose, in place of its launch plan."""
    monkeypatch.setattr(api, "building", lambda device: __import__("contextlib").nullcontext())
    for cls in fp8gemm.dispatch.VARIANTS.values():
        monkeypatch.setattr(cls, "plan", lambda self, p, ldc, aligned: self)
    monkeypatch.setattr(api, "gpu_key", lambda device: "none")
    monkeypatch.setattr(api, "sm_count", lambda device: 132)

    def plan(m, n, k, dtype, batch_invariant=True):
        # As as our quantizer packs it (K-major, rows of K / 128 floats): what the dense kernel's
        # TMA reads where K / 128 is a multiple of 4
        problem = types.SimpleNamespace(m=m, n=n, k=k, out_dtype=dtype, device=0, sa_ptr=0, sa_stride_k=1,
                                        sa_stride_m=-(-k // 128))
        return api.plan_problem(problem, None, n, True, batch_invariant)
    return plan


def _whole_k(c, m, n, k, dtype):
    """c is valid for the shape and every work unit of it runs all of K, whatever the grid."""
    assert c.splits == 1 and c.splits != gen.TAIL_SPLIT and c.block_m == gen.BLOCK_M, (m, n, k, dtype, c)
    assert is_valid(GemmDesc(m, n, k, dtype), c), (m, n, k, dtype, c)
    for sms in (132, 114, 78):
        assert gen.unit_blocks(c, m, n, k, sms) == {gen.cdiv(k, gen.BLOCK_K)}, (m, n, k, dtype, c)


@pytest.mark.parametrize("dtype", DTYPES)
def test_one_candidate_for_every_m(monkeypatch, dtype):
    """plan_problem in the mode, small-M tiles off (FP8GEMM_BATCH_INVARIANT_SMALL_M=0): the same
    general-kernel configuration for every M of the sweep, 128-row tiles, splits=1 (no split, no
    tail split: every unit runs all of K), valid and within shared memory. On (the default): that
    configuration for every M above SMALL_M_MAX, and below it unsplit tiles that run all of K too;
    with SWAP64 and RAW_CLUSTER (the defaults) also their forms below SMALL_M_MAX. The default mode
    switches kernels over the same sweep."""
    plan = _planned(monkeypatch)
    monkeypatch.setattr(invariant, "SMALL_M_TILES", False)
    monkeypatch.setattr(invariant, "DEFAULT_PICKS", False)
    monkeypatch.setattr(invariant, "SWAP64", False)
    monkeypatch.setattr(invariant, "RAW_CLUSTER", False)
    for n, k in NK:
        cands = {plan(m, n, k, dtype) for m in M_SWEEP}
        assert len(cands) == 1, (n, k, dtype, cands)
        c = cands.pop()
        assert c == invariant_candidate(n, k, dtype)
        assert type(c) is General and not isinstance(c, SwapAB)
        assert "batch-invariant" in c.reason
        for m in M_SWEEP:
            _whole_k(c, m, n, k, dtype)
    monkeypatch.setattr(invariant, "SMALL_M_TILES", True)
    for n, k in NK:
        large = {plan(m, n, k, dtype) for m in M_SWEEP if m > invariant.SMALL_M_MAX}
        assert large == {invariant_candidate(n, k, dtype)}, (n, k, dtype, large)
        for m in M_SWEEP:
            c = plan(m, n, k, dtype)
            assert "batch-invariant" in c.reason
            _whole_k(c, m, n, k, dtype)
    # SWAP64 and RAW_CLUSTER on (the defaults): above SMALL_M_MAX still the one tile; below it
    # also unsplit 64-row swap-AB tiles, or cluster raw splits (whose units run a share of K but
    # promote every K block's raw accumulator in order: the unsplit tile's bits)
    monkeypatch.setattr(invariant, "SWAP64", True)
    monkeypatch.setattr(invariant, "RAW_CLUSTER", True)
    forms = set()
    for n, k in NK:
        large = {plan(m, n, k, dtype) for m in M_SWEEP if m > invariant.SMALL_M_MAX}
        assert large == {invariant_candidate(n, k, dtype)}, (n, k, dtype, large)
        for m in M_SWEEP:
            c = plan(m, n, k, dtype)
            assert "batch-invariant" in c.reason and is_valid(GemmDesc(m, n, k, dtype), c), (m, n, k, c)
            if getattr(c, "raw_cluster", 0):
                assert isinstance(c, SwapAB) and 2 <= c.splits <= 8 and not c.raw_split, (m, n, k, c)
                forms.add("raw cluster")
            elif isinstance(c, SwapAB) and c.block_m == 64:
                assert c.splits == 1 and not c.raw_split, (m, n, k, c)
                forms.add("swap 64")
            else:
                _whole_k(c, m, n, k, dtype)
    assert forms, "neither form is ever picked: the switches' rule test says where they should be"
    n, k = 4096, 4096
    default = {plan(m, n, k, dtype, False).variant for m in M_SWEEP}
    assert len(default) > 1          # the default mode picks by M: the mode matters


def test_candidate_is_a_function_of_n_k_dtype():
    """Pure: no M, no SM count, no table; the knobs that decide the promotion are the dtype's."""
    for n, k in NK:
        for dtype in DTYPES:
            c = invariant_candidate(n, k, dtype)
            invariant_candidate.cache_clear()
            assert invariant_candidate(n, k, dtype) == c
            assert c.smem_bytes(dtype) <= fp8gemm.hw.MAX_SMEM_PER_BLOCK
            fine = dtype == "float32"
            assert c.template_args(dtype, fine, False, False)[4] == ("true" if fine else "false")


def test_small_m_tiles_rule(monkeypatch):
    """Small-M tiles on (the default): at M <= SMALL_M_MAX an unsplit general width or swap-AB
    token tile (the kinds measured to keep the mode's bits), never gemv, never a split, modelled
    no slower than the mode's tile and somewhere faster; above it the mode's one tile. Off
    (FP8GEMM_BATCH_INVARIANT_SMALL_M=0): the one tile for every M."""
    plan = _planned(monkeypatch)
    ms = (1, 5, 16, 64, 200, 256, 257, 4096)
    monkeypatch.setattr(invariant, "DEFAULT_PICKS", False)
    monkeypatch.setattr(invariant, "SWAP64", False)          # their own rules: test_swap64_rule, test_raw_cluster_rule
    monkeypatch.setattr(invariant, "RAW_CLUSTER", False)
    monkeypatch.setattr(invariant, "SMALL_M_TILES", False)
    for n, k in NK:
        for m in ms:
            assert plan(m, n, k, "bfloat16") == invariant_candidate(n, k, "bfloat16")
    monkeypatch.setattr(invariant, "SMALL_M_TILES", True)
    kinds, faster, sms = set(), 0, invariant.DEFAULT_NUM_SMS     # the time model's SM count, not the GPU's
    for n, k in NK:
        base = invariant_candidate(n, k, "bfloat16")
        for m in ms:
            c = plan(m, n, k, "bfloat16")
            if m > invariant.SMALL_M_MAX:
                assert c == base
                continue
            assert type(c) in (General, SwapAB) and c.splits == 1 and c.block_m == 128, (m, n, k, c)
            assert is_valid(GemmDesc(m, n, k), c)
            assert "small-M tiles" in c.reason
            t = (gen.cost_us(n, m, k, c.block_n, 1, sms) if isinstance(c, SwapAB)
                 else gen.cost_us(m, n, k, c.block_n, 1, sms))
            t_base = gen.cost_us(m, n, k, base.block_n, 1, sms)
            assert t <= t_base, (m, n, k, c, t, t_base)
            faster += t < t_base
            kinds.add(type(c))
    assert kinds == {General, SwapAB} and faster > 0


def test_raw_split_rule(monkeypatch):
    """FP8GEMM_BATCH_INVARIANT_RAW_SPLIT=1: at small M the mode may take swap-AB tiles split along
    K with raw per-block slots (SwapAB.raw_split: explicit splits >= 2, never grouped, never tail
    splits); off, no split at all. The descriptor: its own kernel flag, its own workspace (a slot
    per tile, K block and promotion group)."""
    from types import SimpleNamespace
    monkeypatch.setattr(invariant, "DEFAULT_PICKS", False)
    monkeypatch.setattr(invariant, "RAW_CLUSTER", False)       # the raw split alone (the cluster form: its own rule)
    monkeypatch.setattr(invariant, "SWAP64", False)
    monkeypatch.setattr(invariant, "RAW_SPLIT", False)
    assert mode_candidate(1, 512, 4096, "bfloat16").splits == 1
    monkeypatch.setattr(invariant, "RAW_SPLIT", True)
    c = mode_candidate(1, 512, 4096, "bfloat16")
    assert isinstance(c, SwapAB) and c.raw_split == 1 and c.splits >= 2 and "raw" in c.reason, c
    assert mode_candidate(4096, 512, 4096, "bfloat16") == invariant_candidate(512, 4096, "bfloat16")
    d = GemmDesc(16, 512, 4096)
    assert is_valid(d, SwapAB(16, 6, 1, 4, raw_split=1))
    for bad in (SwapAB(16, 6, 1, 1, raw_split=1), SwapAB(16, 6, 1, gen.TAIL_SPLIT, raw_split=1),
                SwapAB(16, 6, 1, 4, raw_split=2)):
        assert not is_valid(d, bad), bad
    raw, plain = SwapAB(16, 6, 1, 4, raw_split=1), SwapAB(16, 6, 1, 4)
    assert raw.template_args("bfloat16", False, False) == plain.template_args("bfloat16", False, False) + ("true",)
    assert raw.key() != plain.key() and "raw" in raw.label()
    p = SimpleNamespace(m=16, n=512, k=4000, out_dtype="bfloat16")
    assert raw.raw_ws_floats(p) == 4 * 1 * 32 * 128 * 16                     # 4 x 1 tiles, 32 K blocks
    assert raw.raw_ws_floats(SimpleNamespace(m=16, n=512, k=4000, out_dtype="float32")) == 4 * 32 * 4 * 128 * 16   # a slot per wgmma
    with pytest.raises(ValueError, match="grouped"):
        raw.plan_grouped(SimpleNamespace(gemm=p), 512, True)


def test_raw_cluster_rule(monkeypatch):
    """RAW_CLUSTER (on by default, FP8GEMM_BATCH_INVARIANT_RAW_CLUSTER=0 off): at small M the mode
    may take swap-AB tiles whose S <= 8 K splits run as one cluster (SwapAB.raw_cluster, on the ring cluster_tile gives it beside
    the raw slots), costed by raw_cluster_cost_us (an estimate: cost_us plus the exchange); off,
    never (SWAP64 as it is: the 64-row cluster tiles need it). Every pick is valid, above
    SMALL_M_MAX the mode's one tile."""
    monkeypatch.setattr(invariant, "DEFAULT_PICKS", False)
    monkeypatch.setattr(invariant, "RAW_SPLIT", False)
    monkeypatch.setattr(invariant, "RAW_CLUSTER", False)
    ms = (1, 5, 16, 32, 64, 256, 257, 4096)
    off = {(m, n, k, dt): mode_candidate(m, n, k, dt) for n, k in NK for m in ms for dt in DTYPES}
    assert not any(getattr(c, "raw_cluster", 0) for c in off.values())
    monkeypatch.setattr(invariant, "RAW_CLUSTER", True)
    took = set()
    for (m, n, k, dt), before in off.items():
        c = mode_candidate(m, n, k, dt)
        if not getattr(c, "raw_cluster", 0):
            assert c == before, (m, n, k, dt, c, before)
            continue
        assert m <= invariant.SMALL_M_MAX and 2 <= c.splits <= 8 and not c.raw_split, (m, n, k, dt, c)
        assert is_valid(GemmDesc(m, n, k, dt), c) and c == SwapAB.cluster_tile(c.block_n, c.splits, k, dt, c.block_m)
        assert "RAW_CLUSTER" in c.reason and "estimate" in c.reason and "raw-cluster" in c.reason
        # a K block's raw slots: fp32 out promotes after each of the block's 4 wgmma
        slot_bytes = c.block_m * c.block_n * 4 * (4 if dt == "float32" else 1)
        exchange = -(-k // gen.BLOCK_K) * slot_bytes / c.splits / invariant.RAW_CLUSTER_DSMEM_BYTES_PER_US
        assert invariant.raw_cluster_cost_us(m, n, k, c, dt) == pytest.approx(
            gen.cost_us(n, m, k, c.block_n, c.splits, invariant.DEFAULT_NUM_SMS, c.block_m)
            + invariant.RAW_CLUSTER_EXCHANGE_US + exchange), (m, n, k, dt, c)
        if (n, k) not in took:                  # explain: the launch's shared memory, raw slots included
            assert f"smem {c.smem_bytes(dt, k=k)} B" in invariant.explain(m, n, k, dt, batch_invariant=True)
        took.add((n, k))
    assert (512, 4096) in took and (1536, 4096) in took, took     # the decode shapes the default splits


def test_swap64_rule(monkeypatch):
    """SWAP64 (on by default, FP8GEMM_BATCH_INVARIANT_SWAP64=0 off): at M <= SMALL_M_MAX the small-M
    rule may also take unsplit
    64-row swap-AB tiles, costed as the general kernel's 64-row tiles (general.cost_us, block_m 64)
    on their ring (ring64_stages), where that is the least modelled time; every other pick and
    every M above SMALL_M_MAX as with the switch off, which never takes them (RAW_CLUSTER off here)."""
    monkeypatch.setattr(invariant, "DEFAULT_PICKS", False)
    monkeypatch.setattr(invariant, "RAW_CLUSTER", False)       # SWAP64 alone (with it, 64-row cluster tiles too)
    monkeypatch.setattr(invariant, "SWAP64", False)
    ms = (1, 7, 16, 32, 64, 65, 200, 256, 257, 4096)
    off = {(m, n, k, dt): mode_candidate(m, n, k, dt) for n, k in NK for m in ms for dt in DTYPES}
    assert all(c.block_m == gen.BLOCK_M for c in off.values())
    monkeypatch.setattr(invariant, "SWAP64", True)
    sms, took = invariant.DEFAULT_NUM_SMS, set()
    for (m, n, k, dt), before in off.items():
        c = mode_candidate(m, n, k, dt)
        if not (isinstance(c, SwapAB) and c.block_m == 64):
            assert c == before and c.reason == before.reason, (m, n, k, dt, c, before)
            continue
        assert m <= invariant.SMALL_M_MAX and c.splits == 1 and not c.raw_split, (m, n, k, dt, c)
        assert is_valid(GemmDesc(m, n, k, dt), c) and c.group_m == 1
        assert c == invariant.swap64_tile(c.block_n, dt)
        assert c.stages == gen.ring64_stages(c.block_n, SwapAB.most_stages(c.block_n, dt, 64))
        assert "SWAP64" in c.reason and "swap 64x" in c.reason
        t_before = (gen.cost_us(n, m, k, before.block_n, 1, sms) if isinstance(before, SwapAB)
                    else gen.cost_us(m, n, k, before.block_n, 1, sms))
        assert gen.cost_us(n, m, k, c.block_n, 1, sms, 64) <= t_before, (m, n, k, dt, c, before)
        took.add((n, k))
    assert (512, 4096) in took and (1536, 4096) in took, took     # the decode shapes the default splits
    keeps = invariant.default_pick_keeps_bits
    assert keeps(SwapAB(16, 9, 1, 1, 64), "bfloat16") and keeps(SwapAB(16, 6), "bfloat16")
    monkeypatch.setattr(invariant, "SWAP64", False)
    assert not keeps(SwapAB(16, 9, 1, 1, 64), "bfloat16") and keeps(SwapAB(16, 6), "bfloat16")


def test_default_picks_rule(monkeypatch):
    """The default's picks (DEFAULT_PICKS, on by default): at every M the default's own pick on
    the H100's table where it is a dense tile (bf16 / fp16 out), an unsplit general tile of a
    measured width or an unsplit swap-AB tile, else what the rule off gives; an As the dense kernel
    cannot read gets the mode's tile, never the default's fallback. The neighbour picks are off here
    (test_neighbour_picks_rule tests them on top of this rule)."""
    plan = _planned(monkeypatch)
    monkeypatch.setattr(invariant, "NEIGHBOUR_PICKS", False)
    monkeypatch.setattr(api, "gpu_key", lambda device: "h100")
    monkeypatch.setattr(api, "dense_scales_ok", lambda problem: True)
    ms = (1, 8, 64, 128, 256, 257, 512, 1024, 4096, 16384)
    off = {}
    monkeypatch.setattr(invariant, "DEFAULT_PICKS", False)
    for dtype in DTYPES:
        for _, n, k in trace_shapes():
            for m in ms:
                off[m, n, k, dtype] = plan(m, n, k, dtype)
    monkeypatch.setattr(invariant, "DEFAULT_PICKS", True)
    kinds, same = set(), 0
    for (m, n, k, dtype), before in off.items():
        c = plan(m, n, k, dtype)
        default = select(m, n, k, dtype, "h100", num_sms=132)
        if invariant.default_pick_keeps_bits(default, dtype):
            assert c == default and "the default's pick" in c.reason, (m, n, k, dtype, c, default)
            kinds.add(type(c).__name__)
        else:
            assert c == before, (m, n, k, dtype, c, before)
            same += 1
        if dtype == "float32":
            assert type(c).__name__ not in ("Dense", "Wg3"), (m, n, k, c)
        # unsplit, or the cluster raw split (each K block's raw accumulator promoted in order: the
        # unsplit tile's bits, test_raw_cluster_gives_the_same_bits)
        assert getattr(c, "splits", 1) == 1 or getattr(c, "raw_cluster", 0), (m, n, k, dtype, c)
    assert {"Dense", "SwapAB", "ShortK", "Wg3"} <= kinds and same > 0, kinds   # it matters, not everywhere
    dense = next((m, n, k) for (m, n, k, dtype) in off if dtype == "bfloat16"
                 and type(plan(m, n, k, dtype)).__name__ == "Dense")
    monkeypatch.setattr(api, "dense_scales_ok", lambda problem: False)
    assert plan(*dense, "bfloat16") == invariant_candidate(dense[1], dense[2], "bfloat16")


def test_neighbour_picks_rule(monkeypatch):
    """FP8GEMM_BATCH_INVARIANT_NEIGHBOUR_PICKS (on by default): where the default's pick does not keep
    the bits, the table's pick at the nearest larger tuned M <= SMALL_M_MAX that does and is valid at
    this M (both shipped tables, every trace (N, K), M = 1-256); off (=0), the rule without it; never above SMALL_M_MAX, and never where the default's own pick keeps the bits."""
    from fp8gemm.dispatch.selector import load_table
    monkeypatch.setattr(invariant, "DEFAULT_PICKS", True)
    ms = (1, 2, 4, 8, 16, 100, 256, 257, 4096)
    took = 0
    for gpu in ("h100", "h200"):
        table = load_table(gpu)
        for n, k in sorted({(n, k) for _, n, k in trace_shapes()}):
            for dt in ("bfloat16", "float32"):
                monkeypatch.setattr(invariant, "NEIGHBOUR_PICKS", False)
                off = {m: mode_candidate(m, n, k, dt, gpu=gpu) for m in ms}
                monkeypatch.setattr(invariant, "NEIGHBOUR_PICKS", True)
                for m in ms:
                    c = mode_candidate(m, n, k, dt, gpu=gpu)
                    default = select(m, n, k, dt, gpu)
                    want = next((cand for tm, cand in table.get((n, k), []) if m < tm <= invariant.SMALL_M_MAX
                                 and invariant.default_pick_keeps_bits(cand, dt)
                                 and cand.is_valid(GemmDesc(m, n, k, dt))), None)
                    if m > invariant.SMALL_M_MAX or invariant.default_pick_keeps_bits(default, dt) or want is None:
                        assert c == off[m] and c.reason == off[m].reason, (gpu, m, n, k, dt, c, off[m])
                        continue
                    assert c == want and "NEIGHBOUR_PICKS" in c.reason, (gpu, m, n, k, dt, c, want)
                    assert invariant.default_pick_keeps_bits(c, dt) and is_valid(GemmDesc(m, n, k, dt), c)
                    took += 1
    assert took > 0, "the switch never changes a pick: nothing for its A/B to measure"


def test_default_pick_keeps_bits():
    """Which default picks the mode takes (DEFAULT_PICKS): dense and wg3 at bf16 / fp16, unsplit
    general tiles of the measured widths, unsplit swap-AB tiles, short-K; never a split (tail split
    included) or gemv."""
    from fp8gemm.dispatch import Dense, Gemv, ShortK, Wg3
    keeps = invariant.default_pick_keeps_bits
    assert keeps(Dense(128, 128, 5), "bfloat16") and keeps(Dense(256, 128, 3, 2, 1, 8), "float16")
    assert not keeps(Dense(128, 128, 5), "float32")
    for b in (16, 32, 64, 128):
        assert keeps(General(b, 4), "float32") and keeps(General(b, 4, block_m=64), "bfloat16")
    assert not keeps(General(128, 4, splits=2), "bfloat16")
    assert not keeps(General(128, 4, splits=gen.TAIL_SPLIT), "bfloat16")
    assert not keeps(General(256, 3), "bfloat16")
    assert keeps(SwapAB(16, 8), "float32") and not keeps(SwapAB(16, 8, splits=4), "bfloat16")
    assert keeps(Wg3(), "bfloat16") and not keeps(Wg3(), "float32")
    assert keeps(ShortK(), "bfloat16") and keeps(ShortK(), "float32")
    assert not keeps(Gemv(8, 4, 2), "bfloat16")


@pytest.mark.parametrize("env_name,attr,value,want", [
    ("SMALL_M_ENV", "SMALL_M_TILES", None, True), ("SMALL_M_ENV", "SMALL_M_TILES", "1", True),
    ("SMALL_M_ENV", "SMALL_M_TILES", "0", False), ("SMALL_M_ENV", "SMALL_M_TILES", "off", False),
    ("DEFAULT_PICKS_ENV", "DEFAULT_PICKS", None, True), ("DEFAULT_PICKS_ENV", "DEFAULT_PICKS", "1", True),
    ("DEFAULT_PICKS_ENV", "DEFAULT_PICKS", "0", False), ("DEFAULT_PICKS_ENV", "DEFAULT_PICKS", "off", False),
    ("RAW_SPLIT_ENV", "RAW_SPLIT", None, False), ("RAW_SPLIT_ENV", "RAW_SPLIT", "1", True),
    ("RAW_SPLIT_ENV", "RAW_SPLIT", "0", False),
    ("SWAP64_ENV", "SWAP64", None, True), ("SWAP64_ENV", "SWAP64", "1", True), ("SWAP64_ENV", "SWAP64", "0", False),
    ("RAW_CLUSTER_ENV", "RAW_CLUSTER", None, True), ("RAW_CLUSTER_ENV", "RAW_CLUSTER", "1", True),
    ("RAW_CLUSTER_ENV", "RAW_CLUSTER", "0", False),
    ("NEIGHBOUR_PICKS_ENV", "NEIGHBOUR_PICKS", None, True), ("NEIGHBOUR_PICKS_ENV", "NEIGHBOUR_PICKS", "1", True),
    ("NEIGHBOUR_PICKS_ENV", "NEIGHBOUR_PICKS", "0", False)])
def test_rule_environment_variables(env_name, attr, value, want):
    """FP8GEMM_BATCH_INVARIANT_SMALL_M: the small-M tiles are on unless it turns them off;
    FP8GEMM_BATCH_INVARIANT_DEFAULT_PICKS: the default's picks are on unless it turns them off;
    FP8GEMM_BATCH_INVARIANT_SWAP64, _RAW_CLUSTER and _NEIGHBOUR_PICKS: on unless it is 0; _RAW_SPLIT:
    on only where it is 1."""
    name = getattr(invariant, env_name)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", name)}
    if value is not None:
        env[name] = value
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); from fp8gemm.dispatch import invariant; "
            f"print(invariant.{attr})")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.split()[-1] == str(want)


def test_switch(mode):
    invariant.set_batch_invariant(True)
    assert fp8gemm.batch_invariant() is True and invariant.resolve(None) and not invariant.resolve(False)
    fp8gemm.set_batch_invariant(False)
    assert fp8gemm.batch_invariant() is False and not invariant.resolve(None) and invariant.resolve(True)


def _fake_matmul(monkeypatch):
    """matmul's stages on the CPU: intake and validation pass the arrays through, plan_problem and
    the plan key record what they were given."""
    seen = {}
    monkeypatch.setattr(api, "framework_of", lambda a: api.TORCH)
    monkeypatch.setattr(api, "intake", lambda x, name, stream_for: types.SimpleNamespace(framework=api.TORCH))
    monkeypatch.setattr(api, "validate_gemm", lambda *args: types.SimpleNamespace(m=4, n=256, k=512))

    def plan_key(tag, *args):
        seen["tag"] = tag
        return None
    monkeypatch.setattr(api, "plan_key", plan_key)

    def plan_problem(problem, config, ldc, aligned, batch_invariant=False):
        seen["plan"] = (config, batch_invariant)
        return None
    monkeypatch.setattr(api, "plan_problem", plan_problem)
    monkeypatch.setattr(api, "execute", lambda *args: "result")
    a = np.zeros((4, 512), np.uint8)
    return seen, (a, np.zeros((256, 512), np.uint8), np.ones((4, 4), np.float32), np.ones((2, 4), np.float32))


def test_matmul_follows_the_switch(monkeypatch, mode):
    """None: the process-wide mode; True / False override it; the plan key's tag tells the modes
    apart (a plan of one mode is never reused by the other); a forced config overrides the
    process-wide mode."""
    seen, args = _fake_matmul(monkeypatch)
    cfg = General(128, 4)
    for flag, call, want in ((False, None, False), (True, None, True), (True, False, False), (False, True, True)):
        invariant.set_batch_invariant(flag)
        api.matmul(*args, batch_invariant=call)
        assert seen["plan"] == (None, want) and seen["tag"] == ("matmul_bi" if want else "matmul")
    invariant.set_batch_invariant(True)
    api.matmul(*args, config=cfg)
    assert seen["plan"] == (cfg, False)
    api.matmul(*args, config=cfg, batch_invariant=False)
    assert seen["plan"] == (cfg, False)


def test_config_with_batch_invariant_is_refused():
    a = np.zeros((4, 512), np.uint8)
    with pytest.raises(ValueError, match="batch_invariant=True chooses the kernel itself; it cannot take a "
                                         "forced config="):
        fp8gemm.matmul(a, a, a, a, config=General(128, 4), batch_invariant=True)


@pytest.mark.parametrize("value,want", [("1", True), ("0", False), (None, False)])
def test_environment_variable(value, want):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", invariant.ENV)}
    if value is not None:
        env[invariant.ENV] = value
    code = f"import sys; sys.path.insert(0, {str(ROOT)!r}); import fp8gemm; print(fp8gemm.batch_invariant())"
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.split()[-1] == str(want)


def test_explain_names_the_mode_kernel(monkeypatch, mode):
    """The mode's kernel and why; with the small-M tiles on (the default), M = 1's small-M tile;
    with the default's picks on (the default), the default's tile where it keeps the bits."""
    monkeypatch.setattr(invariant, "DEFAULT_PICKS", False)
    monkeypatch.setattr(invariant, "SMALL_M_TILES", True)
    tile = invariant.mode_candidate(1, 4096, 4096)
    assert tile != invariant_candidate(4096, 4096, "bfloat16")
    s = fp8gemm.explain(1, 4096, 4096, batch_invariant=True)
    assert "batch-invariant at M=1 (small-M tiles)" in s and tile.describe() in s and "splits=1" in s
    assert fp8gemm.explain(4096, 4096, 4096, batch_invariant=True).split(": ", 1)[1] != s.split(": ", 1)[1]
    monkeypatch.setattr(invariant, "SMALL_M_TILES", False)           # off: one tile, the same words
    invariant.set_batch_invariant(False)
    one = fp8gemm.explain(1, 4096, 4096, batch_invariant=True)
    big = fp8gemm.explain(4096, 4096, 4096, batch_invariant=True)
    kernel = invariant_candidate(4096, 4096, "bfloat16").describe()
    for s in (one, big):
        assert "batch-invariant" in s and kernel in s and "splits=1" in s and "block_m=128" in s
        assert "sm90_fp8_gemm_general" in s and "alone" in s
    assert one.split(": ", 1)[1] == big.split(": ", 1)[1]             # the same words for every M
    assert "batch-invariant" not in fp8gemm.explain(1, 4096, 4096)    # the default mode
    assert fp8gemm.explain(1, 4096, 4096) == fp8gemm.dispatch.explain(1, 4096, 4096)
    invariant.set_batch_invariant(True)
    assert fp8gemm.explain(1, 4096, 4096) == one                      # None: the process-wide mode
    monkeypatch.setattr(invariant, "DEFAULT_PICKS", True)
    default = select(4096, 4096, 4096)
    assert invariant.default_pick_keeps_bits(default, "bfloat16"), default
    s = fp8gemm.explain(4096, 4096, 4096, batch_invariant=True)
    assert "the default's pick" in s and default.describe() in s
    assert "batch-invariant" not in fp8gemm.explain(1, 4096, 4096, batch_invariant=False)
    assert "no kernel" in fp8gemm.explain(0, 4096, 4096)
    with pytest.raises(ValueError):                                   # matmul's rules, its messages
        fp8gemm.explain(16, 4096, 4001, batch_invariant=True)
    assert "float16" in fp8gemm.explain(16, 4096, 4096, out_dtype="fp16", batch_invariant=True)


def test_default_dispatch_unchanged():
    """The mode leaves the default choice alone (the table and fallback of select)."""
    assert select(1, 4096, 4096, gpu="none").variant != "sm90_fp8_gemm_general"


# ---- GPU: rows compared bitwise -------------------------------------------------------------------

def _bits(x):
    import cupy
    if type(x).__module__.startswith("torch"):          # a torch view (bf16 has no CuPy dtype)
        import torch
        x = cupy.from_dlpack(x.view({2: torch.int16, 4: torch.int32}[x.element_size()]))
    return cupy.asarray(x).view(f"u{x.dtype.itemsize}")


def _same_rows(small, large, rows, what):
    import cupy
    got, want = _bits(small), _bits(large[rows])
    bad = int((got != want).any(axis=1).sum())
    assert bad == 0, f"{what}: {bad} of {got.shape[0]} rows differ bitwise"
    assert bool(cupy.isfinite(to_cupy_f64(small)).all())


def _call(case, rows, dtype, **kw):
    return fp8gemm.matmul(case.a[rows], case.b, case.a_scale[rows], case.b_scale, out_dtype=dtype,
                          batch_invariant=True, **kw)


@pytest.mark.gpu
@pytest.mark.parametrize("first", range(0, max(RANDOM_PAIRS, 1), RANDOM_CHUNK), ids=lambda f: f"pairs{f}")
@pytest.mark.parametrize("dtype", DTYPES)
def test_random_m_pairs(dtype, first):
    """Random (M1, M2, N, K), RANDOM_PAIRS of them (this item: RANDOM_CHUNK from ``first``): the M1
    rows on top of a larger A give the same bits alone; the larger call also with an M-major As
    (another scale path in the kernel) and into a strided out=."""
    import cupy
    assert RANDOM_PAIRS >= 1, f"FP8GEMM_TEST_RANDOM_PAIRS must be >= 1; got {RANDOM_PAIRS}"
    for i in range(first, min(first + RANDOM_CHUNK, RANDOM_PAIRS)):
        rng = np.random.default_rng([{"bfloat16": 1, "float16": 2, "float32": 3}[dtype], i])
        n = int(rng.choice([16, 96, 512, 1536, 4096, 7168]))
        k = int(rng.choice([128, 256, 512, 1024, 2048, 4096, 7168]))
        m1, m2 = sorted(int(x) for x in rng.integers(1, 3000, size=2))
        m2 += 1
        case = random_case(m2, n, k, seed=1000 + i)
        large = _call(case, slice(None), dtype)
        small = _call(case, slice(0, m1), dtype)
        _same_rows(small, large, slice(0, m1), f"M1={m1} M2={m2} N={n} K={k} {dtype}")
        m_major = cupy.asfortranarray(case.a_scale)
        other = fp8gemm.matmul(case.a, case.b, m_major, case.b_scale, out_dtype=dtype, batch_invariant=True)
        _same_rows(other, large, slice(None), f"M-major As, M={m2} N={n} K={k} {dtype}")
        buf = cupy.ndarray((m2, n + 64), large.dtype)          # no fill: CuPy need not know bf16
        fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out=buf[:, 8:8 + n], batch_invariant=True)
        _same_rows(buf[:, 8:8 + n], large, slice(None), f"out= view, M={m2} N={n} K={k} {dtype}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_one_token_against_4096(dtype):
    """M = 1 against M = 4096: the first row, and rows from inside the batch (other positions in
    their tiles) called alone."""
    case = random_case(4096, 4096, 4096, seed=57)
    large = _call(case, slice(None), dtype)
    for r in (0, 1, 63, 64, 127, 128, 1000, 4095):
        _same_rows(_call(case, slice(r, r + 1), dtype), large, slice(r, r + 1), f"row {r} alone, {dtype}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,k", sorted({(n, k) for _, n, k in trace_shapes()}), ids=str)
def test_trace_pairs(n, k, dtype):
    """Every (N, K) of the trace: M = 1, 7, 64, 200 and the trace's largest M of the pair against
    one call of 4096 rows (or that M, if larger)."""
    ms = [m for m, n2, k2 in trace_shapes() if (n2, k2) == (n, k)]
    m2 = max(4096, max(ms))
    case = random_case(m2, n, k, seed=n + k)
    large = _call(case, slice(None), dtype)
    for m1 in sorted({1, 7, 64, 200, max(ms)}):
        _same_rows(_call(case, slice(0, m1), dtype), large, slice(0, m1), f"M={m1} of {m2}, N={n} K={k} {dtype}")
    r = m2 // 3
    _same_rows(_call(case, slice(r, r + 1), dtype), large, slice(r, r + 1), f"row {r} alone, N={n} K={k} {dtype}")


@pytest.mark.gpu
def test_process_wide_switch_on_the_gpu(mode):
    """The switch reaches matmul, the cached plans of both modes included (repeated calls)."""
    case = random_case(512, 1536, 1024, seed=3)
    large = _call(case, slice(None), "bfloat16")
    fp8gemm.set_batch_invariant(True)
    for _ in range(3):
        one = fp8gemm.matmul(case.a[:1], case.b, case.a_scale[:1], case.b_scale)
        _same_rows(one, large, slice(0, 1), "M=1 under the process-wide mode")


def _against_mode(m, n, k, dtype, seed, configs):
    """The evidence tests' check: each (label, config) forced on one random case gives every row
    the bits of the mode's tile (invariant_candidate)."""
    case = random_case(m, n, k, seed=seed)
    want = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out_dtype=dtype,
                          config=invariant_candidate(n, k, dtype))
    for label, config in configs:
        got = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out_dtype=dtype, config=config)
        _same_rows(got, want, slice(None), f"{label} against the mode's tile, N={n} K={k} {dtype}")


@pytest.mark.gpu
@pytest.mark.xfail(strict=False, reason="phase 2 evidence, not the guarantee: whether 64-row tiles give a "
                                        "row the same bits as the mode's 128-row tiles (dispatch/invariant.py)")
@pytest.mark.parametrize("dtype", DTYPES)
def test_64_row_tiles_give_the_same_bits(dtype):
    for n, k in ((4096, 4096), (1536, 1024), (512, 7168)):
        c = invariant_candidate(n, k, dtype)
        c64 = General(c.block_n, gen.ring64_stages(c.block_n, General.most_stages(c.block_n, dtype, 64)),
                      c.group_m, 1, 64)
        _against_mode(300, n, k, dtype, 64, [("64-row tiles", c64)])


@pytest.mark.gpu
@pytest.mark.xfail(strict=False, reason="evidence for the small-M cost, not the guarantee: whether swap-AB "
                                        "(tokens on wgmma's N side, unsplit) gives a row the mode's bits")
@pytest.mark.parametrize("dtype", DTYPES)
def test_swap_ab_gives_the_same_bits(dtype):
    """If it does, the mode could take swap-AB tiles at decode sizes (its own K order is the same:
    blocks in order, one promotion per block or per wgmma)."""
    for n, k in ((4096, 4096), (1536, 1024), (512, 7168)):
        _against_mode(40, n, k, dtype, 65, [(f"swap-AB {b}", SwapAB(b, 4, 1, 1)) for b in (8, 16, 32, 64)])


@pytest.mark.gpu
@pytest.mark.xfail(strict=False, reason="evidence for the small-M cost, not the guarantee: whether the gemv "
                                        "kernel (mma.sync, warp-turn sums) gives a row the mode's bits")
@pytest.mark.parametrize("dtype", ("bfloat16", "float32"))
def test_gemv_gives_the_same_bits(dtype):
    from fp8gemm.dispatch import Gemv
    for n, k in ((4096, 4096), (512, 7168)):
        _against_mode(8, n, k, dtype, 66, [("gemv", Gemv(8, 4, 2))])


@pytest.mark.gpu
@pytest.mark.xfail(strict=False, reason="evidence for the small-M cost, not the guarantee: whether the general "
                                        "kernel's block_n (the wgmma's N) changes a row's bits")
@pytest.mark.parametrize("dtype", DTYPES)
def test_block_n_gives_the_same_bits(dtype):
    """If no width changes the bits, the mode could narrow its tiles at small M (more CTAs over N
    without a K split)."""
    for n, k in ((4096, 4096), (1536, 7168)):
        group_m = invariant_candidate(n, k, dtype).group_m
        _against_mode(100, n, k, dtype, 67, [(f"block_n {b}", General(b, General.most_stages(b, dtype), group_m, 1, 128))
                                             for b in (16, 32, 64, 128)])


# The kinds of tile DEFAULT_PICKS runs beside the mode's own (dispatch/invariant.py:
# default_pick_keeps_bits), each forced on one case: (rows, [(N, K)], config factory, dtypes).
# Evidence tests until session 41 (H200: all gave the mode's bits); the mode's guarantee rests on
# them since, so they are plain tests.
def _wg3(n, k, dtype):
    from fp8gemm.dispatch import Wg3
    return Wg3.fallback(GemmDesc(1100, n, k, dtype), 132)


def _dense(**kw):
    from fp8gemm.dispatch import Dense
    return lambda n, k, dtype: Dense(**kw)


def _short_k(bm, bn):
    from fp8gemm.dispatch import ShortK
    return lambda n, k, dtype: ShortK(block_m=bm, block_n=bn)


LARGE_NK = ((4096, 4096), (1536, 1024), (512, 7168))
SHORT_NK = ((8192, 256), (1536, 256), (4096, 128))
KEEPING_KINDS = {
    "dense 64x64": (1100, LARGE_NK, _dense(block_m=64, block_n=64, stages=8), DTYPES[:2]),
    "dense 128x128": (1100, LARGE_NK, _dense(stages=5), DTYPES[:2]),
    "dense 128x128 2acc": (1100, LARGE_NK, _dense(stages=5, two_accum=1), DTYPES[:2]),
    "dense 128x96": (1100, LARGE_NK, _dense(block_n=96, stages=6), DTYPES[:2]),
    "dense 256x128 c2A": (1100, LARGE_NK, _dense(block_m=256, stages=3, cluster=2, multicast_a=1, group=8), DTYPES[:2]),
    "dense 128x128 c2B": (1100, LARGE_NK, _dense(stages=5, cluster=2, multicast_a=0, group=8), DTYPES[:2]),
    "short-K 64x64": (300, SHORT_NK, _short_k(64, 64), DTYPES),
    "short-K 128x128": (300, SHORT_NK, _short_k(128, 128), DTYPES),
    "short-K 64x128": (300, SHORT_NK, _short_k(64, 128), DTYPES),
    "wg3": (1100, ((4096, 4096), (8192, 256), (1536, 1024)), _wg3, DTYPES[:2]),
}


@pytest.mark.gpu
@pytest.mark.parametrize("kind,dtype", [(kind, dt) for kind, spec in KEEPING_KINDS.items() for dt in spec[3]])
def test_default_pick_kinds_give_the_same_bits(kind, dtype):
    """Each kind of tile the mode takes from the default gives every row the mode's tile's bits."""
    m, nks, make, _ = KEEPING_KINDS[kind]
    for n, k in nks:
        _against_mode(m, n, k, dtype, 68, [(kind, make(n, k, dtype))])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_default_picks_keep_the_bits(monkeypatch, dtype):
    """With the default's picks on (DEFAULT_PICKS, set here): on trace (N, K) where the picks over
    M are of more than one kind, the first rows at M1 (each pick) against the same rows at M2 =
    4096, bitwise; the picks are named in the message. Run before the rule goes on."""
    monkeypatch.setattr(invariant, "DEFAULT_PICKS", True)
    monkeypatch.setattr(invariant, "SMALL_M_TILES", True)
    gpu, sms = fp8gemm.launcher.gpu_key(0), fp8gemm.launcher.sm_count(0)
    ms = (1, 8, 33, 100, 256, 300, 512, 1024, 2048, 4096)
    cases = []
    for n, k in sorted({(n, k) for _, n, k in trace_shapes()}):
        picks = {m: invariant.mode_candidate(m, n, k, dtype, gpu=gpu, device_sms=sms) for m in ms}
        if len({(type(c).__name__, c.label()) for c in picks.values()}) > 1:
            cases.append((n, k, picks))
    assert cases, f"no trace (N, K) gets two kinds of tile over M on {gpu}: nothing to compare"
    for i, (n, k, picks) in enumerate(cases):
        case = random_case(4096, n, k, seed=3000 + i)
        full = _call(case, slice(None), dtype)
        for m in ms[:-1]:
            _same_rows(_call(case, slice(0, m), dtype), full, slice(0, m),
                       f"M1={m} M2=4096 N={n} K={k} {dtype}: {picks[m].label()} against {picks[4096].label()}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_neighbour_picks_keep_the_bits(monkeypatch, dtype):
    """FP8GEMM_BATCH_INVARIANT_NEIGHBOUR_PICKS (on by default), set here: on the trace (N, K) where it changes
    the pick on this GPU, the first M1 = 1, 2, 4, 8 rows against the same rows of 4096, bitwise;
    the plan cache emptied before and after (no plan made under the other setting is reused)."""
    monkeypatch.setattr(invariant, "DEFAULT_PICKS", True)
    gpu, sms = fp8gemm.launcher.gpu_key(0), fp8gemm.launcher.sm_count(0)
    cases = []
    for n, k in sorted({(n, k) for _, n, k in trace_shapes()}):
        monkeypatch.setattr(invariant, "NEIGHBOUR_PICKS", False)
        before = {m: invariant.mode_candidate(m, n, k, dtype, gpu=gpu, device_sms=sms) for m in (1, 2, 4, 8)}
        monkeypatch.setattr(invariant, "NEIGHBOUR_PICKS", True)
        after = {m: invariant.mode_candidate(m, n, k, dtype, gpu=gpu, device_sms=sms) for m in (1, 2, 4, 8)}
        if after != before:
            cases.append((n, k, after))
    assert cases, f"the switch changes no pick on {gpu}: nothing to compare"
    fp8gemm.plans.PLANS.clear()
    try:
        for i, (n, k, picks) in enumerate(cases[:12]):
            case = random_case(4096, n, k, seed=4000 + i)
            full = _call(case, slice(None), dtype)
            for m, c in picks.items():
                _same_rows(_call(case, slice(0, m), dtype), full, slice(0, m), f"M1={m} M2=4096 N={n} K={k} {dtype}: {c.label()}")
    finally:
        fp8gemm.plans.PLANS.clear()


@pytest.mark.gpu
@pytest.mark.parametrize("swap64", [False, True], ids=["", "swap64"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_small_m_tiles_keep_the_bits(monkeypatch, dtype, swap64):
    """With the small-M tiles on (the default, set here whatever FP8GEMM_BATCH_INVARIANT_SMALL_M
    says): M1 <= 256 rows (swap-AB or a narrow general tile) against the same rows in M2 > 256
    (the mode's tile), bitwise. ``swap64``: with SWAP64 on as well (its 64-row swap-AB tiles,
    which some of the calls must take); the plan cache is emptied before and after, so that no
    call reuses a plan made under the other setting."""
    monkeypatch.setattr(invariant, "SMALL_M_TILES", True)
    monkeypatch.setattr(invariant, "SWAP64", swap64)
    gpu, sms = fp8gemm.launcher.gpu_key(0), fp8gemm.launcher.sm_count(0)
    rng = np.random.default_rng({"bfloat16": 11, "float16": 12, "float32": 13}[dtype])
    took = 0
    fp8gemm.plans.PLANS.clear()
    try:
        for i in range(10):
            n = int(rng.choice([16, 512, 1536, 4096, 7168, 24576]))
            k = int(rng.choice([256, 1024, 1536, 4096, 7168]))
            m2 = int(rng.integers(300, 3000))
            case = random_case(m2, n, k, seed=2000 + i)
            large = _call(case, slice(None), dtype)
            for m1 in (1, 7, 33, 100, 256):
                c = invariant.mode_candidate(m1, n, k, dtype, gpu=gpu, device_sms=sms)
                took += isinstance(c, SwapAB) and c.block_m == 64
                _same_rows(_call(case, slice(0, m1), dtype), large, slice(0, m1),
                           f"M1={m1} M2={m2} N={n} K={k} {dtype}: {c.label()}")
    finally:
        fp8gemm.plans.PLANS.clear()
    assert (took > 0) == swap64, f"{took} calls took a 64-row swap-AB tile"


# swap-AB's 64-row tiles (SWAP64), forced at decode sizes: token counts below, at and past one
# token tile, N with and without a tail, K with a tail (1040: 8 blocks and 16).
SWAP64_MS = (1, 7, 32, 64, 65)
SWAP64_NK = ((1000, 1024), (4096, 4096), (1000, 1040), (4096, 1040))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,k", SWAP64_NK, ids=str)
def test_swap64_gives_the_same_bits(n, k, dtype):
    """SwapAB(block_m=64), every token tile on the ring the mode would give it: inside NaN-filled
    buffers (every input, poisoned right past the call's M rows, and the output) within the
    reference bound with no write outside the output (test_matmul_general.check_poisoned), and
    every row bitwise the mode's (the same rows inside an M = 300 call in the mode) and the
    unsplit 128-row swap-AB tile's. The evidence FP8GEMM_BATCH_INVARIANT_SWAP64 waits for."""
    from test_matmul_general import check_poisoned
    case = random_case(300, n, k, seed=n + k + 64)
    mode_rows = _call(case, slice(None), dtype)
    for m in SWAP64_MS:
        rows = Case(case.a[:m], case.b, case.a_scale[:m], case.b_scale)
        for bn in gen.SWAP_BLOCK_NS:
            cfg = invariant.swap64_tile(bn, dtype)
            what = f"{cfg.label()} M={m} N={n} K={k} {dtype}"
            check_poisoned(rows, 24, dtype, cfg)
            view = fp8gemm.matmul(rows.a, rows.b, rows.a_scale, rows.b_scale, out_dtype=dtype, config=cfg)
            _same_rows(view, mode_rows, slice(0, m), f"{what} against the mode's rows at M=300")
            swap128 = fp8gemm.matmul(rows.a, rows.b, rows.a_scale, rows.b_scale, out_dtype=dtype,
                                     config=SwapAB(bn, gen.MAX_STAGES, 1, 1))
            _same_rows(view, swap128, slice(None), f"{what} against swap 128x{bn} unsplit")


RAW_CLUSTER_MS = (1, 5, 32, 64)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,k", [(1000, 1024), (4096, 4096), (1000, 1040), (4096, 1040)])
def test_raw_cluster_gives_the_same_bits(dtype, n, k):
    """SwapAB(raw_cluster=1): S in {2, 4, 8} (and 3: slices of unequal length; S = 8 at K = 1040
    leaves splits 5-7 empty), 128- and 64-row tiles, token tiles 8 / 16 / 32, forced at M in
    RAW_CLUSTER_MS with N tails, inside NaN-filled buffers (every input, poisoned right past the
    call's M rows, and the output: test_matmul_general.check_poisoned): within the reference
    bound, no write outside the output, and every row bitwise the unsplit swap-AB tile's (of its
    height and token tile) and the raw split's. The evidence FP8GEMM_BATCH_INVARIANT_RAW_CLUSTER
    waits for."""
    from test_matmul_general import check_poisoned
    case = random_case(max(RAW_CLUSTER_MS), n, k, seed=n + k + 57)
    ran = 0
    for m in RAW_CLUSTER_MS:
        rows = Case(case.a[:m], case.b, case.a_scale[:m], case.b_scale)
        for bn in (8, 16, 32):
            for block_m in (128, 64):
                unsplit = fp8gemm.matmul(rows.a, rows.b, rows.a_scale, rows.b_scale, out_dtype=dtype,
                                         config=SwapAB(bn, 4, 1, 1, block_m))
                for s in (2, 3, 4, 8):
                    cfg = SwapAB.cluster_tile(bn, s, k, dtype, block_m)
                    if not is_valid(GemmDesc(m, n, k, dtype), cfg):
                        continue                              # the raw slots do not fit (fp32, long splits)
                    what = f"{cfg.label()} M={m} N={n} K={k} {dtype}"
                    check_poisoned(rows, 24, dtype, cfg)
                    view = fp8gemm.matmul(rows.a, rows.b, rows.a_scale, rows.b_scale, out_dtype=dtype, config=cfg)
                    _same_rows(view, unsplit, slice(None), f"{what} against swap {block_m}x{bn} unsplit")
                    ran += 1
                if block_m == 128:
                    raw = fp8gemm.matmul(rows.a, rows.b, rows.a_scale, rows.b_scale, out_dtype=dtype,
                                         config=SwapAB(bn, 4, 1, 4, raw_split=1))
                    _same_rows(raw, unsplit, slice(None), f"raw split 128x{bn} x 4 M={m} N={n} K={k} {dtype}")
    assert ran > 0


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_raw_split_gives_the_same_bits(dtype):
    """SwapAB(raw_split=1): K split, each block's raw accumulator kept and the tile's last split
    promoting them in order; every row must get the mode's bits (the unsplit tile's) for any split
    count, N and K tails included. The evidence FP8GEMM_BATCH_INVARIANT_RAW_SPLIT waits for."""
    for m, n, k in ((1, 512, 4096), (40, 1536, 4096), (13, 1000, 4000), (64, 4096, 1024)):
        configs = [(f"raw split {b} x {s}", SwapAB(b, 4, 1, s, raw_split=1)) for b in (8, 64) for s in (2, 5, 16)]
        _against_mode(m, n, k, dtype, 66 + m, configs)
