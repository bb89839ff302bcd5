import os
"""CPU: the dense kernel's host descriptor (dispatch/dense.py): its validity rules, template
arguments, shared-memory sum and grid, the As layouts it reads (and the fallback for those it
cannot), and the tuner's candidates."""
from dataclasses import replace
from types import SimpleNamespace

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


@pytest.mark.parametrize("cfg,ok", [((256, 128), True), ((128, 160), True), ((128, 192), True),
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


def test_template_and_smem(monkeypatch):
    monkeypatch.setattr(dense, "SFA_WIDE_WINDOW_SWITCH", False)     # the windows of 8 (test_sfa_wide_window_switch: 32)
    c = Dense(256, 128, 3, 2, 1, 16)
    assert c.template_args(7168, 2048, "float16", True) == (256, 128, 3, 7168, 2048, 1, "true", 2, "true", 16)
    # alignment slack, ring, staging of 4 (warpgroup, wave) pairs, As slots, two tiles' Bs rows, barriers
    kb = 32
    mm = c.smem_bytes("bfloat16", 4096, True, sfa_k_major=False)
    assert mm == 1024 + 3 * 384 * 128 + 256 * 128 * 2 + 3 * 256 * 4 + 4 * kb * 4 + 48
    # K-major As: a ring of windows of 8 K blocks (K / 128 = 32), 1 + ceil((3 - 1) / 8) = 2 of them,
    # in place of a column per stage
    assert dense.sfa_window(4096) == 8 and dense.sfa_slots(3, 8, 4096) == 2
    assert c.smem_bytes("bfloat16", 4096, True) == mm - 3 * 256 * 4 + 2 * 8 * 256 * 4
    assert c.smem_bytes("bfloat16", 4096, False) == c.smem_bytes("bfloat16", 4096, True) - 256 * 128 * 2
    # K / 128 = 12: windows of 4; 5 stages need 1 + ceil(4 / 4) = 2 windows, 6 stages 3; K / 128 =
    # 11 or 1 (a padded As): a partial last window, a slot per stage
    assert dense.sfa_window(1536) == 4 and dense.sfa_window(1408) == 4 and dense.sfa_window(128) == 4
    assert [dense.sfa_slots(s, 4, 1536) for s in (2, 4, 5, 6, 9)] == [2, 2, 2, 3, 3]
    assert [dense.sfa_slots(s, 8, 4096) for s in (2, 8, 9, 10)] == [2, 2, 2, 3]
    assert dense.sfa_slots(5, 4, 1408) == 5 and dense.sfa_slots(3, 4, 128) == 3
    d = Dense(128, 128, 5, 1, 1, 8)
    assert d.smem_bytes("bfloat16", 1536, True) - d.smem_bytes("bfloat16", 1536, True, False) == 2 * 4 * 128 * 4 - 5 * 128 * 4
    # K-major names <kTwoAccum, kSfaKMajor, kGrouped, kSfaWindowK>
    assert c.template_args(7168, 1536, "float16", True, True)[-4:] == ("false", "true", "false", 4)
    assert Dense(128, 128, 5, 1, 1, 8, 1).template_args(4096, 4096, "bfloat16", True, True)[-4:] == ("true", "true", "false", 8)
    assert c.template_args(7168, 4096, "float32", True, True, True)[-4:] == ("false", "true", "true", 8)
    assert c.threads == 384 and Dense(64, 64).threads == 256
    assert c.label() == "dense 256x128 s3 c2A g16"


def test_table_entry_and_tuner_candidates(monkeypatch):
    """A table entry names it; with the K-major switch on the tuner offers it (up to M = 64 at
    DeepGEMM's tile alone) where a
    packed K-major As is TMA-readable (K / 128 a multiple of 4, or at most 8: flat), never for fp32 out; with it off,
    never."""
    assert Dense.tuner_candidates(GemmDesc(4096, 4096, 4096)) == [] or dense.K_MAJOR_SWITCH
    monkeypatch.setattr(dense, "K_MAJOR_SWITCH", True)
    assert VARIANTS["sm90_fp8_gemm_dense"] is Dense
    assert from_entry({"variant": "sm90_fp8_gemm_dense", "block_m": 256, "cluster": 2}) == Dense(256, cluster=2)
    big = Dense.tuner_candidates(GemmDesc(4096, 4096, 4096))
    assert Dense(256, 128, 3, 2, 1, 16) in big and all(is_valid(GemmDesc(4096, 4096, 4096), c) for c in big)
    small = Dense.tuner_candidates(GemmDesc(128, 4096, 8192))
    assert Dense(64, 64, 8) in small and not any(c.block_m == 256 for c in small)
    # 64 x 64 two accumulators, 13 stages, where DeepGEMM's tile is another (64 x 48 at 256 x 1536)
    mid = Dense.tuner_candidates(GemmDesc(256, 1536, 4096))
    assert Dense(64, 64, 13, 1, 1, 8, 1) in mid and dense.peer_tile(256, 1536, 4096)[:2] != (64, 64)
    assert all(is_valid(GemmDesc(256, 1536, k), c) for k in (1024, 4096, 7168) for c in Dense.tuner_candidates(
        GemmDesc(256, 1536, k)))
    assert len(mid) == len(set(mid))
    tiny = Dense.tuner_candidates(GemmDesc(64, 4096, 4096))   # DeepGEMM's own 64-row tile alone
    assert tiny and {(c.block_m, c.block_n) for c in tiny} == {dense.peer_tile(64, 4096, 4096)[:2]}
    assert len(tiny) == len(set(tiny)) == 2 and {c.two_accum for c in tiny} == {0, 1}
    assert Dense.tuner_candidates(GemmDesc(4096, 4096, 256))                # K / 128 = 2: flat
    assert Dense.tuner_candidates(GemmDesc(4096, 4096, 1152)) == []         # 9 blocks: 36-byte rows, not flat
    assert Dense.tuner_candidates(GemmDesc(4096, 4096, 4096, "float32")) == []


@pytest.mark.parametrize("shape,tile", [
    ((4096, 4096, 4096), (256, 128, 1, 2)),     # the milestone: 256 x 128 pairs sharing A
    ((16384, 8192, 4096), (256, 128, 1, 2)),
    ((128, 4096, 8192), (64, 64, 1, 1)),        # the milestone's small M
    ((4096, 1536, 4096), (128, 192, 2, 1)),     # a straddling width in pairs sharing B
    ((384, 4096, 4096), (128, 96, 1, 1)),
    ((4096, 512, 4096), (128, 128, 1, 1)),      # 128 tiles: one wave, no pair
])
def test_peer_tile(shape, tile):
    """DeepGEMM's model (peer_tile) as its 2.6.1 picks these shapes' tiles on 132 SMs."""
    assert dense.peer_tile(*shape) == tile


def test_peer_configs(monkeypatch):
    """The tuner measures our kernel at DeepGEMM's tile with the most stages that fit (two
    accumulators beside where the tile allows them), an unpaired one also along N (ours), none
    where the tile is past our registers."""
    monkeypatch.setattr(dense, "K_MAJOR_SWITCH", True)
    got = Dense.peer_configs(GemmDesc(512, 512, 4096))
    assert [c.label() for c in got] == ["dense 64x32 s16 gM8", "dense 64x32 s16 g8", "dense 64x32 s15 gM8 2acc",
                                        "dense 64x32 s15 g8 2acc"]
    assert all(c in Dense.tuner_candidates(GemmDesc(512, 512, 4096)) for c in got)
    # 128 x 96: the stages that leave room for its 64B staging (7 would store directly)
    assert Dense.peer_configs(GemmDesc(384, 4096, 4096)) == [Dense(128, 96, 6, 1, 0, 8),   # along M, as DeepGEMM
                                                            Dense(128, 96, 6, 1, 1, 8)]   # and along N
    assert Dense(128, 96, 7).smem_bytes("bfloat16", 4096, True, True) > dense.MAX_SMEM_PER_BLOCK
    assert Dense(128, 96, 6).smem_bytes("bfloat16", 4096, True, True) <= dense.MAX_SMEM_PER_BLOCK
    assert dense.peer_group(256, 128, True) == 16 and dense.peer_group(128, 96, False) == 8
    big = Dense(128, 96, 8, 1, 1, 8)
    assert big.smem_bytes("bfloat16", 4096, True, True) > dense.MAX_SMEM_PER_BLOCK
    pairs_b = Dense.peer_configs(GemmDesc(184, 8192, 4096))
    assert [(c.block_m, c.block_n, c.cluster, c.multicast_a, c.group) for c in pairs_b] == [(64, 96, 2, 0, 16)]
    assert Dense.peer_configs(GemmDesc(4096, 1536, 4096)) == [Dense(128, 192, 4, 2, 0, 16)]


def _problem(m, k, sa_stride_m, sa_stride_k, sa_ptr=1 << 20):
    return SimpleNamespace(m=m, k=k, sa_ptr=sa_ptr, sa_stride_m=sa_stride_m, sa_stride_k=sa_stride_k)


@pytest.mark.parametrize("m,k,sm,sk,mm,km", [
    (300, 4096, 32, 1, False, True),        # packed K-major, 32 blocks: the window
    (300, 4096, 1, 302, False, False),      # M-major, column stride 302 floats: not 16-byte aligned
    (300, 4096, 1, 304, True, False),       # M-major, TMA-aligned (DeepGEMM's layout)
    (300, 1536, 12, 1, False, True),        # 12 blocks: 48-byte rows
    (300, 256, 2, 1, False, True),          # 2 blocks: 8-byte rows, packed: flat
    (300, 256, 4, 1, False, True),          # 2 blocks in 16-byte rows: the window
    (300, 256, 3, 1, False, False),         # 2 blocks in 12-byte rows: neither
    (300, 1152, 9, 1, False, False),        # 9 blocks packed: 36-byte rows, past the flat limit
    (300, 896, 7, 1, False, True),          # 7 blocks packed: flat
    (300, 4096, 0, 1, False, False),        # a broadcast As row
    (1, 256, 0, 1, False, True),            # one row: no row stride to speak of (K-major)
])
def test_as_layouts(m, k, sm, sk, mm, km, monkeypatch):
    monkeypatch.setattr(dense, "K_MAJOR_SWITCH", True)
    p = _problem(m, k, sm, sk)
    assert dense.m_major_as_ok(p) is mm and dense.k_major_as_ok(p) is km
    assert dense.scales_ok(p) is (mm or km)
    assert not dense.k_major_as_ok(_problem(m, k, sm, sk, sa_ptr=(1 << 20) + 4))   # base not 16-byte aligned


def test_dispatcher_falls_back_where_as_is_unreadable(monkeypatch):
    """A table entry naming Dense on a problem whose As TMA cannot read gives the model's choice
    (never Dense), through the same plan_problem that matmul and the JAX handler use."""
    from fp8gemm import api
    monkeypatch.setattr(dense, "K_MAJOR_SWITCH", True)
    picked = []
    monkeypatch.setattr(api, "select", lambda *a, **kw: Dense(256, 128, 3, 2, 1, 16))
    monkeypatch.setattr(api, "gpu_key", lambda dev: "h100")
    monkeypatch.setattr(api, "sm_count", lambda dev: 132)

    class Stop(Exception):
        pass

    def fake_plan(self, p, ldc, aligned):
        picked.append(self)
        raise Stop
    for cls in set(VARIANTS.values()):
        monkeypatch.setattr(cls, "plan", fake_plan)
    prob = SimpleNamespace(m=4096, n=4096, k=4096, out_dtype="bfloat16", device=0, sa_ptr=1 << 20,
                           sa_stride_m=0, sa_stride_k=1)
    monkeypatch.setattr(api, "building", lambda dev: __import__("contextlib").nullcontext())
    with pytest.raises(Stop):
        api.plan_problem(prob, None, 4096, True)
    assert picked and not isinstance(picked[0], Dense)
    prob.sa_stride_m = 32
    with pytest.raises(Stop):
        api.plan_problem(prob, None, 4096, True)
    assert isinstance(picked[1], Dense)


def test_grouped_config_rules(monkeypatch):
    """A forced grouped Dense: refused without the K-major switch (its As window); pairs sharing A
    or B accepted (the kernel multicasts B only within a group); its template names kGrouped last
    and its shared memory counts the tile prefix."""
    from fp8gemm.dispatch import grouped
    monkeypatch.setattr(dense, "K_MAJOR_SWITCH", False)
    with pytest.raises(ValueError, match="FP8GEMM_DENSE_K_MAJOR=0"):
        grouped.check_grouped_config(Dense(128, 128, 5, 1, 1, 8))
    monkeypatch.setattr(dense, "K_MAJOR_SWITCH", True)
    grouped.check_grouped_config(Dense(128, 128, 5, 2, 0, 8))       # pairs sharing B: where one group's
    grouped.check_grouped_config(Dense(256, 128, 3, 2, 1, 8), "bfloat16", 256, True, GemmDesc(4096, 4096, 7168))
    c = Dense(128, 128, 5, 1, 1, 8)
    assert c.template_args(4096, 7168, "bfloat16", True, True, True)[-4:] == ("false", "true", "true", 8)
    assert c.grouped_smem_bytes("bfloat16", 256, 7168) == c.smem_bytes("bfloat16", 7168, True, True) + 1040
    with pytest.raises(ValueError, match="shared memory"):
        grouped.check_grouped_config(Dense(128, 128, 6, 1, 1, 8), "bfloat16", 8192, True, GemmDesc(4096, 4096, 7168))
    with pytest.raises(ValueError, match="precise_fp32=False"):
        grouped.check_grouped_config(c, "float32", 256, True, GemmDesc(4096, 4096, 7168, "float32"))
    grouped.check_grouped_config(c, "float32", 256, False, GemmDesc(4096, 4096, 7168, "float32"))


def test_grouped_dense_switch(monkeypatch):
    """FP8GEMM_GROUPED_DENSE=1 (lab): the grouped GEMMs' 128-row tiles become the dense kernel's
    pairs sharing an expert's weights, where the As window reads (dense_ok) and K / 128 is a
    multiple of 4; decode keeps swap-AB, precise fp32 and forced 192-row tiles keep theirs."""
    from fp8gemm.dispatch import grouped
    monkeypatch.setattr(dense, "K_MAJOR_SWITCH", True)
    monkeypatch.setattr(grouped, "GROUPED_DENSE", False)
    assert not isinstance(grouped.candidate(4096, 4096, "bfloat16", 256, 384.0, 256), Dense)
    monkeypatch.setattr(grouped, "GROUPED_DENSE", True)
    c = grouped.candidate(4096, 4096, "bfloat16", 256, 384.0, 256)
    assert (type(c), c.block_m, c.block_n, c.cluster, c.multicast_a, c.group) == (Dense, 128, 128, 2, 0, 2)
    assert c.grouped_smem_bytes("bfloat16", 256) <= dense.MAX_SMEM_PER_BLOCK and not c.grouped_ok()
    assert type(grouped.candidate(4096, 4096, "float32", 256, 384.0, 256, precise_fp32=False)) is Dense
    assert type(grouped.candidate(4096, 4096, "float32", 256, 384.0, 256)) is not Dense
    assert type(grouped.candidate(4096, 4096, "bfloat16", 256, 8.0, 6)) is not Dense          # decode: swap-AB
    assert type(grouped.candidate(4096, 4096, "bfloat16", 256, 384.0, 256, dense_ok=False)) is not Dense
    assert type(grouped.candidate(4096, 4096, "bfloat16", 256, 384.0, 256, wg3=True)) is not Dense
    assert type(grouped.candidate(4096, 2176, "bfloat16", 256, 384.0, 256)) is not Dense      # K / 128 = 17


def test_store_64b_switch(monkeypatch):
    """Rows of 64 * odd bytes (96 bf16 columns) store through the 64B-swizzled staging only with
    FP8GEMM_DENSE_STORE_64B=1; 128-byte rows keep the 128B swizzle either way."""
    from fp8gemm.launcher import tma_store_ok
    c96, c128 = Dense(128, 96, 6), Dense(128, 128, 5)
    monkeypatch.setattr(dense, "STORE_64B_SWITCH", False)
    assert not c96.store_ok("bfloat16") and c128.store_ok("bfloat16")
    monkeypatch.setattr(dense, "STORE_64B_SWITCH", True)
    assert c96.store_ok("bfloat16") and c96.store_swizzle("bfloat16") == 64 and c128.store_swizzle("bfloat16") == 128
    assert not Dense(128, 40, 6).store_ok("bfloat16")                       # 80-byte rows: direct stores
    assert c96.staging_bytes("bfloat16", True) == 128 * 96 * 2
    assert tma_store_ok(4096, 96, 2, 4096, True, chunk=64) and not tma_store_ok(4096, 96, 2, 4096, True)


def test_store_narrow_switch(monkeypatch):
    """Rows of 16 or 32 bytes (8 / 16 bf16 columns) store through one unswizzled box only with
    FP8GEMM_DENSE_STORE_NARROW=1: the C map's box is the tile's width (store_box), no swizzle."""
    from fp8gemm.launcher import tma_store_ok
    c16 = Dense(64, 16, 12, 2, 1, 8)
    monkeypatch.setattr(dense, "STORE_NARROW_SWITCH", False)
    assert not c16.store_ok("bfloat16") and c16.store_swizzle("bfloat16") == 0
    monkeypatch.setattr(dense, "STORE_NARROW_SWITCH", True)
    assert c16.store_ok("bfloat16") and c16.store_ok("float16")
    assert c16._store_map("bfloat16") == {"store_box": 16}
    assert Dense(128, 128, 5)._store_map("bfloat16") == {"store_swizzle": 128}
    assert Dense(128, 96, 6)._store_map("bfloat16") == {"store_swizzle": 64}
    assert not Dense(64, 48, 8).store_ok("bfloat16")                        # 96-byte rows: direct stores
    assert c16.staging_bytes("bfloat16", True) == 64 * 16 * 2
    assert tma_store_ok(4096, 16, 2, 4096, True, narrow=True) and not tma_store_ok(4096, 16, 2, 4096, True)


def test_fallback_model(monkeypatch):
    """Dense.model, the fallback's dense choice for shapes no table entry covers: None where it
    declines (M <= 64, fp32 out, K / 128 not a multiple of 4, the K-major switch off); elsewhere a
    valid tile of the model's widths that fits shared memory beside its staging, two accumulators
    only where the tile allows them, unpaired tiles below 1024 rows rastered along N; the fallback
    returns it (FP8GEMM_DENSE_MODEL=1), and never with dense=False or the switch off."""
    import csv
    from pathlib import Path

    import fp8gemm
    from fp8gemm.dispatch import selector
    from fp8gemm.dtypes import OUT_BYTES
    from fp8gemm.hw import MAX_SMEM_PER_BLOCK
    monkeypatch.setattr(dense, "K_MAJOR_SWITCH", True)
    monkeypatch.setattr(selector, "DENSE_MODEL", True)
    for desc in (GemmDesc(64, 4096, 4096), GemmDesc(4096, 4096, 4096, "float32"), GemmDesc(4096, 4096, 2880),
                 GemmDesc(512, 2048, 768)):
        assert Dense.model(desc) is None, desc
        assert not isinstance(selector.fallback(desc), Dense), desc
    rows = csv.DictReader(open(Path(fp8gemm.__file__).parent / "other_models.csv"))
    nk = {(int(r["N"]), int(r["K"])) for r in rows} | {(n, k) for n in (512, 1536, 4096, 8192) for k in (1024, 4096)}
    chosen = set()
    for n, k in sorted(nk):
        for m in (65, 100, 200, 384, 700, 1023, 1024, 3000, 8192, 16384):
            for dt in ("bfloat16", "float16"):
                desc = GemmDesc(m, n, k, dt)
                c = Dense.model(desc)
                if (k // 128) % 4:
                    assert c is None
                    continue
                assert c is not None and is_valid(desc, c), (desc, c)
                assert c.block_n in dense.MODEL_WIDTHS[c.block_m]
                staged = (c.block_n * OUT_BYTES[dt]) % 128 == 0
                assert c.smem_bytes(dt, k, staged, True) <= MAX_SMEM_PER_BLOCK
                if not c.two_accum:        # no two-accumulator form of this tile fits at any stage count
                    assert not any(replace(c, stages=s, two_accum=1).is_valid(desc) and replace(
                        c, stages=s, two_accum=1).smem_bytes(dt, k, staged, True) <= MAX_SMEM_PER_BLOCK
                        for s in range(2, 17))
                if c.cluster == 1 and m < 1024:
                    assert (c.multicast_a, c.group) == (1, 8)
                assert "model" in c.reason
                assert selector.fallback(desc) == c
                assert not isinstance(selector.fallback(desc, dense=False), Dense)
                chosen.add((c.block_m, c.block_n, c.cluster))
    assert {(256, 128, 2), (128, 128, 1), (64, 64, 1)} <= chosen       # large M pairs, mid and small tiles
    assert Dense.model(GemmDesc(4096, 4096, 4096)).key() == Dense(256, 128, 3, 2, 1, 16).key()
    monkeypatch.setattr(selector, "DENSE_MODEL", False)
    assert not isinstance(selector.fallback(GemmDesc(4096, 4096, 4096)), Dense)
    monkeypatch.setattr(dense, "K_MAJOR_SWITCH", False)
    assert Dense.model(GemmDesc(4096, 4096, 4096)) is None


def test_short_a_box_rows(monkeypatch):
    """FP8GEMM_DENSE_SHORT_A_BOX (on by default, =0 off): the A box is round_up(M, 8) rows below one
    row tile, block_m from one row tile up or with the switch off; the prelude names it only
    under the switch (the kernel's full barrier expects the box the plan encodes from it)."""
    if os.environ.get("FP8GEMM_DENSE_SHORT_A_BOX") is None:
        assert dense.SHORT_A_BOX_SWITCH
    monkeypatch.setattr(dense, "SHORT_A_BOX_SWITCH", False)
    assert [dense.a_box_rows(m, 64, True) for m in (1, 5, 8, 32, 33, 63, 64, 65, 1000)] == [8, 8, 8, 32, 40, 64, 64, 64, 64]
    assert [dense.a_box_rows(m, 256, True) for m in (100, 200, 255, 256)] == [104, 200, 256, 256]
    assert dense.a_box_rows(5, 64, False) == 64
    c = Dense(64, 16, 15, 1, 0, 8, 1)
    assert dense.SHORT_A_BOX_PRELUDE not in c.prelude()
    monkeypatch.setattr(dense, "SHORT_A_BOX_SWITCH", True)
    assert dense.SHORT_A_BOX_PRELUDE in c.prelude() and dense.SHORT_A_BOX_PRELUDE in Dense(256, 128, 3, 2, 1, 8).prelude()


def test_flat_wide_switch(monkeypatch):
    """FP8GEMM_DENSE_FLAT_WIDE (on by default, =0 off): a packed As of 4 or 8 K blocks is read flat
    (the kernel's kSfaFlatWide, named only then) under the switch; a padded As keeps its window,
    K / 128 above 8 is never flat, and the grouped mode keeps its windows either way."""
    if os.environ.get("FP8GEMM_DENSE_FLAT_WIDE") is None:
        assert dense.FLAT_WIDE_SWITCH
    monkeypatch.setattr(dense, "FLAT_WIDE_SWITCH", False)
    def problem(k, stride_m, m=100):
        return SimpleNamespace(m=m, k=k, sa_ptr=256, sa_stride_m=stride_m, sa_stride_k=1)
    c = Dense(64, 16, 15, 1, 0, 8, 1)
    assert not dense.FLAT_WIDE_SWITCH and not dense.sfa_flat(problem(1024, 8)) and dense.sfa_flat(problem(768, 6))
    assert len(c.template_args(1536, 1024, "bfloat16", True, True)) == 14
    monkeypatch.setattr(dense, "FLAT_WIDE_SWITCH", True)
    assert dense.sfa_flat(problem(1024, 8)) and dense.sfa_flat(problem(512, 4)) and dense.sfa_flat(problem(1000, 8))
    assert not dense.sfa_flat(problem(1024, 12)) and not dense.sfa_flat(problem(2048, 16))
    assert dense.grouped_as_ok(problem(1024, 8)) and dense.grouped_as_ok(problem(512, 4))
    wide = c.template_args(1536, 1024, "bfloat16", True, True, sfa_flat=True)
    # the window's arguments (a window of all 8 K blocks) and the flag after them
    assert wide[-2:] == (8, "true") and wide[:-1] == c.template_args(1536, 1024, "bfloat16", True, True)
    assert c.template_args(1536, 512, "bfloat16", True, True, sfa_flat=True)[-2:] == (4, "true")
    assert c.template_args(1536, 768, "bfloat16", True, True, sfa_flat=True)[-1] == 6      # flat already: no flag
    assert c.template_args(1536, 1024, "bfloat16", True, True)[-1] == 8                    # the window


@pytest.mark.parametrize("wide", [True, False])
@pytest.mark.parametrize("k", [512, 1024, 2048])
def test_as_map_matches_the_compiled_form(monkeypatch, wide, k):
    """The As map each dense plan builds is the form its kernel is compiled for: the plain mode's
    map is flat exactly where its template names the flat As (sfa_flat), the grouped mode's is always
    the window (its template never names flat). A flat map under a window kernel makes each stage's
    expected bytes wrong and the kernel hangs: session 48 found the grouped mode doing that at K / 128
    = 4 and 8 once the wide flat As was on by default."""
    from fp8gemm.validate import GemmProblem, GroupedProblem
    monkeypatch.setattr(dense, "FLAT_WIDE_SWITCH", wide)
    built, maps = [], []
    monkeypatch.setattr(dense.compiler, "get_kernel", lambda dev, variant, args, smem, *rest: built.append(args) or object())
    monkeypatch.setattr(dense.tma, "encode_2d_fp8", lambda *a: "fp8 map")
    monkeypatch.setattr(dense.tma, "encode_2d", lambda *a: maps.append(a) or "as map")
    monkeypatch.setattr(dense, "sm_count", lambda device: 132)
    monkeypatch.setattr(dense, "Plan", lambda p, kern, grid, threads, smem, ldc, args, **kw: args)
    m, n, kb = 512, 1536, k // 128
    p = GemmProblem(m=m, n=n, k=k, out_dtype="bfloat16", device=0, a_ptr=1 << 20, lda=k, b_ptr=1 << 24, ldb=k,
                    sa_ptr=1 << 28, sa_stride_m=kb, sa_stride_k=1, sb_ptr=1 << 30, sb_stride_n=kb, sb_stride_k=1,
                    out_shape=(m, n))
    cfg = Dense(128, 128, 5, 1, 0, 8, 0)
    flat_box_cols = dense.flat_box(cfg.block_m, kb)
    assert cfg.plan(p, n, True)[13] == ("desc", "as map") and len(maps) == 1
    plain_flat = dense.sfa_flat(p)
    assert plain_flat == (wide and kb <= dense.FLAT_MAX_KB)
    # a flat map is one row of M * K / 128 floats; a window's box has block_m rows
    assert (maps[-1][1] == 1 and maps[-1][5] == flat_box_cols) == plain_flat
    assert (len(built[-1]) == 15 and built[-1][-1] == "true") == plain_flat     # kSfaFlatWide named
    gp = GroupedProblem(gemm=p, num_groups=4, group_rows=0, groups_ptr=1 << 32, sb_stride_g=12 * kb)
    assert cfg.plan_grouped(gp, n, True)[13] == ("desc", "as map") and len(maps) == 2
    window = cfg.sfa_window_for(k, "bfloat16", True, 4)        # sfa_window(k), or the wide one under its switch
    assert maps[-1][1] == m and maps[-1][4] == cfg.block_m and maps[-1][5] == window
    assert built[-1][-1] == window and len(built[-1]) == 14


@pytest.mark.parametrize("k", [4096, 8192, 2048, 6144, 1536])
def test_sfa_wide_window_switch(monkeypatch, k):
    """FP8GEMM_DENSE_SFA_WIDE_WINDOW (on by default since session 51): the K-major As window is 32 K blocks where
    K / 128 is a multiple of 32, else 16 where a multiple of 16, where the tile has at most 128 rows
    and the layout fits with the staging; the template names it, the map's box is {window, rows},
    128B- / 64B-swizzled, the shared memory holds two wide slots; the grouped mode takes it where it
    fits beside its group count's tile prefix (without a count, the window of 8); a ring with no room
    for 32 takes 16, then 8; the M-major form keeps its column."""
    from fp8gemm.validate import GemmProblem, GroupedProblem
    if os.environ.get("FP8GEMM_DENSE_SFA_WIDE_WINDOW") is None:
        assert dense.SFA_WIDE_WINDOW_SWITCH
    kb = k // 128
    c = Dense(64, 64, 8, 1, 1, 8, 1)
    monkeypatch.setattr(dense, "SFA_WIDE_WINDOW_SWITCH", False)
    assert c.sfa_window_for(k) == dense.sfa_window(k)                  # off: the window of 8 (4)
    narrow = c.smem_bytes("bfloat16", k, True)
    monkeypatch.setattr(dense, "SFA_WIDE_WINDOW_SWITCH", True)
    wide = 32 if kb % 32 == 0 else 16 if kb % 16 == 0 else 0
    window = wide or dense.sfa_window(k)
    swizzle = {32: dense.tma.SWIZZLE_128B, 16: dense.tma.SWIZZLE_64B, 0: dense.tma.SWIZZLE_NONE}[wide]
    assert c.sfa_window_for(k) == window
    assert Dense(256, 128, 3, 2, 1, 8).sfa_window_for(k) == dense.sfa_window(k)     # 256 rows: never
    if wide:
        # two slots of 64 rows x wide floats where the window of 8 had 2 slots of 64 x 8 (8 stages)
        assert c.smem_bytes("bfloat16", k, True) - narrow == 2 * 64 * wide * 4 - 2 * 64 * 8 * 4
        assert c.template_args(4096, k, "bfloat16", True, True)[-1] == wide
        assert c.template_args(4096, k, "bfloat16", True, True, True)[-1] == dense.sfa_window(k)   # grouped
        assert c.smem_bytes("bfloat16", k, True, grouped=True) == narrow
        assert c.template_args(4096, k, "bfloat16", True, True, True, num_groups=4)[-1] == wide
        assert c.grouped_smem_bytes("bfloat16", 4, k) == c.smem_bytes("bfloat16", k, True) + dense.prefix_bytes(4)
    if kb % 32 == 0:
        # 128 x 128 two accumulators, 5 stages: 32 fits beside 64 groups' prefix; beside 1024's, 16
        big = Dense(128, 128, 5, 1, 1, 8, 1)
        assert big.sfa_window_for(k, "bfloat16", True, 64) == 32 and big.sfa_window_for(k, "bfloat16", True, 1024) == 16
        assert big.grouped_smem_bytes("bfloat16", 64, k) <= 232448 and big.grouped_smem_bytes("bfloat16", 1024, k) <= 232448
        # a ring that leaves no room for two 32-block slots takes 16 (h100.json's 64 x 96 s10 at
        # 158 x 4096 x 4096: 224,928 bytes with the window of 8); two stages fewer take 32
        tight = Dense(64, 96, 10, 1, 0, 16)
        assert tight._smem_bytes("bfloat16", k, True, 32) > 232448 >= tight._smem_bytes("bfloat16", k, True, 16)
        assert tight.sfa_window_for(k) == 16 and Dense(64, 96, 8, 1, 0, 16).sfa_window_for(k) == 32
    built, maps = [], []
    monkeypatch.setattr(dense.compiler, "get_kernel", lambda dev, variant, args, smem, *rest: built.append(args) or object())
    monkeypatch.setattr(dense.tma, "encode_2d_fp8", lambda *a: "fp8 map")
    monkeypatch.setattr(dense.tma, "encode_2d", lambda *a: maps.append(a) or "as map")
    monkeypatch.setattr(dense, "sm_count", lambda device: 132)
    monkeypatch.setattr(dense, "Plan", lambda p, kern, grid, threads, smem, ldc, args, **kw: (smem, args))
    m, n = 300, 1536
    p = GemmProblem(m=m, n=n, k=k, out_dtype="bfloat16", device=0, a_ptr=1 << 20, lda=k, b_ptr=1 << 24, ldb=k,
                    sa_ptr=1 << 28, sa_stride_m=kb, sa_stride_k=1, sb_ptr=1 << 30, sb_stride_n=kb, sb_stride_k=1,
                    out_shape=(m, n))
    smem, args = c.plan(p, n, True)
    assert built[-1][-1] == window and smem == c.smem_bytes("bfloat16", k, True)
    # encode_2d(ptr, rows, cols, row stride bytes, box rows, box cols, elem bytes, swizzle)
    assert maps[-1][4:] == (64, window, 4, swizzle)
    gp = GroupedProblem(gemm=p, num_groups=4, group_rows=0, groups_ptr=1 << 32, sb_stride_g=12 * kb)
    smem, _ = c.plan_grouped(gp, n, True)
    assert built[-1][-1] == window and smem == c.grouped_smem_bytes("bfloat16", 4, k)
    assert maps[-1][4:] == (64, window, 4, swizzle)
