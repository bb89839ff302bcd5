"""CPU: the dispatcher. Every shape of the trace and of a tail sweep gets a valid candidate that
fits shared memory; the table lookup takes the nearest M; forcing an unknown variant fails."""
import json

import numpy as np
import pytest

from generators import trace_shapes

from fp8gemm.dispatch import (Gemv, GemmDesc, General, ShortK, SwapAB, Wg3, explain, is_valid, select,
                              variants)
from fp8gemm.dispatch.selector import VARIANTS, from_entry, load_table
from fp8gemm.hw import MAX_SMEM_PER_BLOCK

NO_TABLE = "none"            # selector.NO_TABLE: every shape takes the shape-based fallback



@pytest.fixture
def older_model(monkeypatch):
    """The older kernels' model alone (FP8GEMM_DENSE_MODEL=0): the rules these tests pin down,
    which the fallback still uses where the dense model declines (M <= 64, fp32 out, K / 128 not a
    multiple of 4) or a caller's As is not TMA-readable."""
    from fp8gemm.dispatch import selector
    monkeypatch.setattr(selector, "DENSE_MODEL", False)
    select.cache_clear()
    yield
    select.cache_clear()

def test_every_variant_is_one_kernel_file():
    from pathlib import Path
    kernels = Path(__file__).resolve().parents[1] / "kernels_cu"
    for name, cls in VARIANTS.items():
        assert cls.variant == name and (kernels / f"{name}.cu").is_file(), name


def test_64_row_tiles():
    """General's block_m: 128 (two consumer warpgroups) or 64 (one); 64-row tiles name every
    template argument (kConsumers = 1) and fit up to 16 stages; the grouped mode keeps 128 rows
    (swap-AB's 64-row tiles: test_swap_ab_64_row_tiles)."""
    d = GemmDesc(64, 4096, 4096)
    assert is_valid(d, General(32, 16, 8, 1, 64)) and not is_valid(d, General(32, 16, 8, 1, 128))
    assert not is_valid(d, General(32, 4, 8, 1, 96)) and not is_valid(d, SwapAB(32, 4, 1, 1, 96))
    assert General(32, 16, 8, 1, 64).template_args("bfloat16", False, False, False) == (
        32, 16, 0, 8, "false", "false", "false", "false", 1)
    assert General(32, 6, 8).template_args("bfloat16", False, True, False) == (32, 6, 0, 8, "false", "true", "false")
    assert General(32, 16, 8, 1, 64).smem_bytes() < General(32, 6, 8).smem_bytes() + 6 * 1024 * 16
    with pytest.raises(ValueError, match="128-row tiles"):
        General(128, 4, 8, 1, 64).plan_grouped(None, 0, True)
    tuned = [c for c in __import__("fp8gemm.bench.tune", fromlist=["candidates"]).candidates(d, limit=64)
             if isinstance(c, General) and not isinstance(c, SwapAB)]
    assert {c.block_m for c in tuned} == {64, 128}


def test_swap_ab_64_row_tiles(monkeypatch):
    """SwapAB's block_m 64 (one consumer warpgroup, the kernel's kConsumers = 1): valid for every
    shape the 128-row tile takes (M, N and K tails, splits, the tail split) with up to 16 stages,
    never with the raw split or grouped; it names every template argument, the 128-row tile's stay
    as they were; its plan maps B in 64-row boxes over twice the weight tiles and launches 256
    threads; the fallback and the tuner never offer it."""
    from types import SimpleNamespace

    from fp8gemm import tma
    from fp8gemm.dispatch import general as g
    from fp8gemm.dispatch.grouped import check_grouped_config
    for m, n, k in ((1, 1, 16), (7, 1000, 1040), (65, 4096, 4096), (64, 100, 144), (300, 33, 272)):
        d = GemmDesc(m, n, k)
        for splits in (1, 3, g.TAIL_SPLIT):
            for bn in g.SWAP_BLOCK_NS:
                assert is_valid(d, SwapAB(bn, 4, 1, splits, 64)) == is_valid(d, SwapAB(bn, 4, 1, splits)), (m, n, k)
                assert is_valid(d, SwapAB(bn, 4, 1, splits, 64)), (m, n, k, bn, splits)
    d = GemmDesc(16, 4096, 4096)
    assert SwapAB.most_stages(8, "bfloat16", 64) == g.MAX_STAGES_64
    assert SwapAB.most_stages(8, "bfloat16") == g.MAX_STAGES
    for bn in g.SWAP_BLOCK_NS:
        most = SwapAB.most_stages(bn, "float32", 64)
        assert is_valid(d, SwapAB(bn, most, 1, 1, 64))
        assert most == g.MAX_STAGES_64 or not is_valid(d, SwapAB(bn, most + 1, 1, 1, 64))
        assert SwapAB(bn, most, 1, 1, 64).smem_bytes() == g.ring_smem_bytes(bn, most, 0, 64) <= MAX_SMEM_PER_BLOCK
    assert not is_valid(d, SwapAB(16, 4, 1, 4, 64, raw_split=1)) and is_valid(d, SwapAB(16, 4, 1, 4, raw_split=1))
    assert not is_valid(d, SwapAB(128, 4, 1, 1, 64))                  # token tiles up to 64
    assert SwapAB(16, 9, 1, 1, 64).label() == "swap 64x16 s9 g1 k1" and SwapAB(16, 6).label() == "swap 128x16 s6 g1 k1"
    assert SwapAB(16, 9, 1, 1, 64).key() != SwapAB(16, 9, 1, 1).key()
    targs = {c: c.template_args(dt, dt == "float32", False) for c, dt in (
        (SwapAB(16, 9, 1, 1, 64), "bfloat16"), (SwapAB(8, 6), "float32"), (SwapAB(8, 6, 1, 2, raw_split=1), "bfloat16"))}
    assert list(targs.values()) == [(16, 9, 0, 1, "false", "false", "false", 1),       # kConsumers = 1 named
                                    (8, 6, 2, 1, "true", "false"), (8, 6, 0, 1, "false", "false", "true")]
    with pytest.raises(ValueError, match="128-row tiles"):
        SwapAB(16, 4, 1, 1, 64).plan_grouped(SimpleNamespace(gemm=None), 0, True)
    with pytest.raises(ValueError, match="128-row tiles"):
        check_grouped_config(SwapAB(16, 4, 1, 1, 64))
    for m in (1, 16, 64, 100):
        desc = GemmDesc(m, 4096, 4096)
        assert all(c.block_m == 128 for c in General.tuner_candidates(desc) if isinstance(c, SwapAB))
        assert SwapAB.fallback(desc).block_m == 128
    # the plan, with the compiler and the tensor maps faked (no GPU)
    compiled, boxes = [], []
    monkeypatch.setattr(g.compiler, "get_kernel", lambda dev, variant, targs, smem, prelude="": compiled.append(
        (variant, targs, smem)) or SimpleNamespace(kernel=SimpleNamespace(ptr=1)))
    monkeypatch.setattr(g.tma, "encode_2d_fp8", lambda ptr, rows, cols, stride, box: boxes.append((rows, box))
                        or tma.ZERO_DESCRIPTOR)
    monkeypatch.setattr(g, "sm_count", lambda device: 132)
    p = SimpleNamespace(device=0, m=7, n=1000, k=1040, out_dtype="bfloat16", a_ptr=0, b_ptr=0, lda=1040, ldb=1040,
                        sa_ptr=0, sa_stride_m=9, sa_stride_k=1, sb_ptr=0, sb_stride_n=9, sb_stride_k=1)
    for c, tiles, threads in ((SwapAB(8, 10, 1, 1, 64), 16, 256), (SwapAB(8, 6, 1, 1), 8, 384)):
        compiled.clear()
        boxes.clear()
        plan = c.plan(p, 1000, True)
        assert compiled == [(c.variant, c.template_args("bfloat16", False, False), c.smem_bytes())]
        assert boxes == [(1000, c.block_m), (7, 8)]                    # B in block_m-row boxes, A in token tiles
        assert plan.num_tiles == tiles and plan.grid == tiles and plan.launch_prefix[4] == threads
    plan = SwapAB(16, 10, 1, 3, 64).plan(p, 1000, True)
    assert plan.num_tiles == 16 and plan.grid == 48 and plan.ws_floats == 48 * 64 * 16   # a 64 x 16 partial per unit


def test_swap_ab_raw_cluster(monkeypatch):
    """SwapAB(raw_cluster=1): S = splits CTAs per tile in one cluster (2 <= S <= 8, S <= the K
    blocks), 64- or 128-row tiles, never with raw_split; shared memory is the ring plus a slot per
    K block of a split (ceil(nkb / S)) and promotion group, and is_valid refuses what exceeds the
    SM90 limit; its own kernel flag after kConsumers; the plan launches tiles x S CTAs (no
    persistence) in clusters of S, with no workspace, on a kernel compiled for the most shared
    memory (one instantiation for every K)."""
    from dataclasses import replace
    from types import SimpleNamespace

    from fp8gemm import tma
    from fp8gemm.dispatch import general as g
    d = GemmDesc(32, 1536, 4096)
    c = SwapAB(16, 6, 1, 4, raw_cluster=1)
    assert is_valid(d, c) and c.label() == "swap 128x16 s6 g1 k4 raw-cluster"
    assert c.smem_bytes("bfloat16", k=4096) == g.ring_smem_bytes(16, 6, 0) + 8 * 128 * 16 * 4   # 8 blocks a split
    assert c.smem_bytes("float32", k=4096) == g.ring_smem_bytes(16, 6, 0) + 8 * 4 * 128 * 16 * 4
    assert c.smem_bytes("bfloat16") == g.ring_smem_bytes(16, 6, 0)
    with pytest.raises(TypeError):
        c.smem_bytes("bfloat16", 4096)                # General's second argument is a scale-slot mask
    assert SwapAB(16, 6, 1, 3, raw_cluster=1).raw_slot_bytes(1040, "bfloat16") == 3 * 128 * 16 * 4   # 9 blocks / 3
    for bad in (SwapAB(16, 6, 1, 1, raw_cluster=1), SwapAB(16, 6, 1, 9, raw_cluster=1),        # S in 2..8
                SwapAB(16, 6, 1, 4, raw_split=1, raw_cluster=1), SwapAB(16, 6, 1, 4, raw_cluster=2),
                SwapAB(128, 6, 1, 4, raw_cluster=1), SwapAB(16, 6, 1, 4, 32, raw_cluster=1),
                SwapAB(64, 6, 1, 2, raw_cluster=1)):                                             # 6 stages + 256 KiB
        assert not is_valid(d, bad), bad
    assert not is_valid(GemmDesc(32, 1536, 256), SwapAB(8, 6, 1, 4, raw_cluster=1))           # S > 2 K blocks
    assert is_valid(GemmDesc(32, 1536, 256), SwapAB(8, 6, 1, 2, raw_cluster=1))
    assert not is_valid(GemmDesc(32, 1536, 4096, "float32"), SwapAB(32, 2, 1, 4, raw_cluster=1))   # slots alone too big
    for dt in ("bfloat16", "float16", "float32"):
        for bn in g.SWAP_BLOCK_NS:
            for s in (2, 4, 8):
                for block_m in (64, 128):
                    for k in (1024, 1040, 4096):
                        t = SwapAB.cluster_tile(bn, s, k, dt, block_m)
                        assert t.raw_cluster == 1 and t.splits == s and t.block_m == block_m and t.stages >= 2
                        ok = t.smem_bytes(dt, k=k) <= MAX_SMEM_PER_BLOCK
                        assert is_valid(GemmDesc(16, 4096, k, dt), t) == ok, t
                        assert not ok or t.stages == SwapAB.most_stages(bn, dt, block_m) or \
                            replace(t, stages=t.stages + 1).smem_bytes(dt, k=k) > MAX_SMEM_PER_BLOCK, t
    assert SwapAB.cluster_tile(16, 4, 4096, "bfloat16").stages == g.MAX_STAGES
    targs = {(cc, dt): cc.template_args(dt, dt == "float32", False) for cc, dt in (
        (c, "bfloat16"), (SwapAB(8, 9, 1, 2, 64, raw_cluster=1), "float32"))}
    assert list(targs.values()) == [(16, 6, 0, 1, "false", "false", "false", 2, "true"),
                                    (8, 9, 2, 1, "true", "false", "false", 1, "true")]
    assert c.key() != SwapAB(16, 6, 1, 4).key() != SwapAB(16, 6, 1, 4, raw_split=1).key()
    with pytest.raises(ValueError, match="grouped"):
        c.plan_grouped(SimpleNamespace(gemm=None), 0, True)
    compiled = []
    monkeypatch.setattr(g.compiler, "get_kernel", lambda dev, variant, targs, smem, prelude="": compiled.append(
        (variant, targs, smem)) or SimpleNamespace(kernel=SimpleNamespace(ptr=1)))
    monkeypatch.setattr(g.tma, "encode_2d_fp8", lambda ptr, rows, cols, stride, box: tma.ZERO_DESCRIPTOR)
    monkeypatch.setattr(g, "sm_count", lambda device: 132)
    p = SimpleNamespace(device=0, m=20, n=1000, k=1040, out_dtype="bfloat16", a_ptr=0, b_ptr=0, lda=1040, ldb=1040,
                        sa_ptr=0, sa_stride_m=9, sa_stride_k=1, sb_ptr=0, sb_stride_n=9, sb_stride_k=1)
    for cc, tiles, threads in ((SwapAB(16, 6, 1, 4, raw_cluster=1), 8 * 2, 384),
                               (SwapAB(8, 6, 1, 8, 64, raw_cluster=1), 16 * 3, 256)):
        compiled.clear()
        plan = cc.plan(p, 1000, True)
        assert compiled == [(cc.variant, cc.template_args("bfloat16", False, False), MAX_SMEM_PER_BLOCK)]
        assert plan.grid == tiles * cc.splits and plan.cluster == cc.splits and plan.splits == 1    # no workspace
        assert plan.launch_prefix[4] == threads and plan.smem_bytes == cc.smem_bytes("bfloat16", k=1040)
    with pytest.raises(ValueError, match="not valid"):
        SwapAB(64, 6, 1, 2, raw_cluster=1).plan(SimpleNamespace(**{**vars(p), "k": 4096}), 1000, True)


def test_cluster_launch_config_layout(monkeypatch):
    """driver.launch_cluster_prebuilt's ctypes structs match cuda.h (CUlaunchAttribute: 72 bytes, the
    value at 8; CUlaunchConfig: 56 bytes, hStream at 32, attrs at 40, numAttrs at 48 on x86-64 /
    aarch64), and launcher.launch takes the cluster path only for clusters of more than one CTA."""
    import ctypes

    from fp8gemm import driver, launcher
    assert ctypes.sizeof(driver._LaunchAttribute) == 72 and driver._LaunchAttribute.value.offset == 8
    assert ctypes.sizeof(driver._LaunchConfig) == 56
    assert (driver._LaunchConfig.hStream.offset, driver._LaunchConfig.attrs.offset,
            driver._LaunchConfig.numAttrs.offset) == (32, 40, 48)
    calls = []
    monkeypatch.setattr(driver, "launch_prebuilt", lambda prefix, stream, params: calls.append(("plain", prefix)) or 0)
    monkeypatch.setattr(driver, "launch_cluster_prebuilt",
                        lambda prefix, cluster, stream, params: calls.append(("cluster", cluster)) or 0)
    monkeypatch.setattr(launcher, "_get_device_fn", lambda: 0)
    launcher.launch(0, (1, 8, 1, 1, 384, 1, 1, 0), 0, 0)
    launcher.launch(0, (1, 8, 1, 1, 384, 1, 1, 0), 0, 0, 4)
    assert calls == [("plain", (1, 8, 1, 1, 384, 1, 1, 0)), ("cluster", 4)]


def test_knobs_are_typed_per_variant():
    """Each descriptor has its own knobs: no field means one thing for one kernel and another for
    the next, and a knob a kernel does not have cannot be passed."""
    assert Gemv(8, 4, 2).knobs() == {"token_tile": 8, "warps": 4, "unroll": 2}
    assert ShortK(64, 32).knobs() == {"block_m": 64, "block_n": 32}
    assert Wg3(128, 3, 8).knobs() == {"block_n": 128, "stages": 3, "group_m": 8}
    assert SwapAB(16, 4, 1, 2).knobs() == {**General(16, 4, 1, 2).knobs(), "raw_split": 0,   # its own: the raw
                                           "raw_cluster": 0}                                 # splits
    with pytest.raises(TypeError):
        General(raw_split=1)
    assert SwapAB(16, 4, 1, 2).key() != General(16, 4, 1, 2).key()
    for cls, bad in ((ShortK, "splits"), (Gemv, "group_m"), (Wg3, "splits"), (General, "swap_ab")):
        with pytest.raises(TypeError):
            cls(**{bad: 1})
    entry = {"n": 1, "k": 16, "m": 1, "variant": "sm90_fp8_gemm_gemv", "token_tile": 16, "warps": 8,
             "unroll": 1, "us": 2.0}
    assert from_entry(entry) == Gemv(16, 8, 1)
    with pytest.raises(ValueError, match="unknown variant"):
        from_entry({"variant": "nope"})


SHAPES = trace_shapes() + [(m, n, k) for m in (1, 7, 129, 4097) for n in (1, 8, 100, 576, 7168)
                           for k in (16, 192, 4096 + 16)]


@pytest.mark.parametrize("m,n,k", SHAPES)
def test_every_shape_gets_a_valid_candidate(m, n, k):
    c = select(m, n, k)
    assert c.variant in variants()
    assert is_valid(GemmDesc(m, n, k), c)
    assert c.smem_bytes() <= MAX_SMEM_PER_BLOCK
    width = c.token_tile if isinstance(c, Gemv) else c.block_n
    assert width <= max(16, 2 * (m if isinstance(c, (SwapAB, Gemv)) else n)) or width == 16


def units(m, n, c):
    """Work units of a candidate in its tile space (C, or C^T under swap-AB)."""
    rows, cols = (n, m) if isinstance(c, SwapAB) else (m, n)
    return -(-rows // 128) * -(-cols // c.block_n) * getattr(c, "splits", 1)


def test_small_n_gets_a_narrow_tile():
    assert select(256, 8, 256, gpu=NO_TABLE).block_n == 16
    assert select(256, 40, 256, gpu=NO_TABLE).block_n <= 64
    assert select(4096, 4096, 256, gpu=NO_TABLE).block_n == 128


def test_short_k_fallback_rule():
    """K <= 256 takes the short-K kernel up to 8 64x64 tiles per SM, M <= 64 included, with
    64 x 64 tiles narrowed while fewer than 24; more tiles or K > 256 keep the persistent
    kernels (general, or wg3 at large M);
    forcing short-K on long K fails."""
    c = select(300, 1536, 256, gpu=NO_TABLE)
    assert c.variant == ShortK.variant and (c.block_m, c.block_n) == (64, 64)
    assert select(1, 4096, 256, gpu=NO_TABLE).variant == ShortK.variant          # not swap-AB
    assert (select(1, 512, 256, gpu=NO_TABLE).block_n, select(100, 512, 256, gpu=NO_TABLE).block_n) == (16, 32)
    assert select(100, 8, 128, gpu=NO_TABLE).variant == ShortK.variant
    assert select(1024, 4096, 256, gpu=NO_TABLE).variant == ShortK.variant       # 1024 tiles <= 8 x 132
    assert select(1024, 8192, 256, gpu=NO_TABLE).variant in (General.variant, Wg3.variant)   # 2048 tiles
    assert select(1024, 8192, 256, gpu=NO_TABLE, num_sms=264).variant == ShortK.variant
    assert select(300, 1536, 272, gpu=NO_TABLE).variant == General.variant
    assert select(300, 1536, 256, gpu=NO_TABLE, force_variant=General.variant).variant == General.variant
    assert select(8192, 1536, 256, gpu=NO_TABLE, force_variant=ShortK.variant).variant == ShortK.variant
    with pytest.raises(ValueError, match="K <= 256"):
        select(300, 1536, 512, gpu=NO_TABLE, force_variant=ShortK.variant)
    d = GemmDesc(300, 1536, 256)
    assert is_valid(d, ShortK(128, 128)) and is_valid(d, ShortK(64, 16))
    assert not is_valid(d, ShortK(256, 128))                                  # one or two warpgroups
    assert not is_valid(d, ShortK(64, 8))
    assert not is_valid(GemmDesc(300, 1536, 272), ShortK(128, 128))


def test_gemv_rules():
    """The decode kernel: M <= its token tile (8 or 16), 16 weight rows, 4 or 8 warps, no split,
    no swap; forced, it takes the narrowest tile holding M and refuses M > 16."""
    g = Gemv.variant
    ok = Gemv(8, 8, 2)
    assert is_valid(GemmDesc(8, 4096, 4096), ok) and is_valid(GemmDesc(1, 1, 16), ok)
    assert not is_valid(GemmDesc(9, 4096, 4096), ok)                              # M past the tile
    assert is_valid(GemmDesc(16, 4096, 4096), Gemv(16, 8, 2))
    assert not is_valid(GemmDesc(8, 4096, 4100), ok)                              # K % 16
    for bad in (Gemv(32, 8, 2), Gemv(8, 8, 3), Gemv(8, 2, 2)):
        assert not is_valid(GemmDesc(4, 512, 1024), bad), bad
    assert ok.smem_bytes() == 0
    c = select(3, 512, 4096, gpu=NO_TABLE, force_variant=g)
    assert c == Gemv(8, 8, 1) and c.block_m == 16          # K > 2048: 8 warps, 1 block each
    assert select(12, 512, 4096, gpu=NO_TABLE, force_variant=g).token_tile == 16
    with pytest.raises(ValueError, match="M <= 16"):
        select(17, 512, 4096, gpu=NO_TABLE, force_variant=g)


def test_gemv_fallback_rule():
    """K > 256, M <= 8, N <= 4096 and M * N <= 16384 (lab/exp_gemv.py)."""
    for m, n, k in ((1, 512, 1024), (1, 4096, 4096), (4, 4096, 1024), (8, 2048, 7168), (8, 1, 16 * 17)):
        assert select(m, n, k, gpu=NO_TABLE).variant == Gemv.variant, (m, n, k)
    for m, n, k in ((1, 8192, 4096), (8, 4096, 4096), (9, 512, 1024), (1, 4096, 256), (16, 512, 1024)):
        assert select(m, n, k, gpu=NO_TABLE).variant != Gemv.variant, (m, n, k)
    assert select(1, 4096, 4096, gpu=NO_TABLE, force_variant=General.variant).variant == General.variant


def test_wg3_rules(older_model):
    """The three-warpgroup kernel: 192-row tiles, block_n 64 or 128, no split, no swap, bf16 /
    fp16 out; the fallback takes it from M = 1024 where its estimate beats the general kernel's
    (wave quantization decides: 8192 x 8192 x 4096 yes, 4096^3 no, lab/exp_wg3.py)."""
    w = Wg3.variant
    ok = Wg3(128, 3, 8)
    assert is_valid(GemmDesc(8192, 8192, 4096), ok) and is_valid(GemmDesc(1, 1, 16, "float16"), ok)
    assert not is_valid(GemmDesc(8192, 8192, 4096, "float32"), ok)
    for bad in (Wg3(32, 3, 8), Wg3(128, 1, 8), Wg3(128, 9, 8), Wg3(128, 3, 0)):
        assert not is_valid(GemmDesc(8192, 8192, 4096), bad), bad
    for m, n, k in ((8192, 8192, 4096), (16384, 8192, 4096), (8192, 1536, 4096), (4096, 576, 7168)):
        assert select(m, n, k, gpu=NO_TABLE).variant == w, (m, n, k)
    for m, n, k in ((4096, 4096, 4096), (1024, 8192, 4096), (512, 8192, 4096), (2000, 1000, 1536)):
        assert select(m, n, k, gpu=NO_TABLE).variant == General.variant, (m, n, k)
    assert select(8192, 8192, 4096, "float32", gpu=NO_TABLE).variant == General.variant
    assert select(8192, 8192, 4096, gpu=NO_TABLE, force_variant=General.variant).variant == General.variant
    assert select(64, 64, 256, gpu=NO_TABLE, force_variant=w).block_m == 192
    with pytest.raises(ValueError, match="bf16 or fp16"):
        select(64, 64, 256, "float32", gpu=NO_TABLE, force_variant=w)


def test_split_k_never_exceeds_one_wave():
    for m, n, k in [(1, 512, 4096), (16, 4096, 256), (64, 1536, 1024), (128, 8192, 4096), (300, 512, 7168)]:
        c = select(m, n, k)
        splits = getattr(c, "splits", 1)           # the variants without K splits have no knob
        assert splits == 1 or units(m, n, c) <= 132, (m, n, k, c)
        assert splits <= -(-k // 128)


def test_table_nearest_m(tmp_path, monkeypatch, older_model):
    from fp8gemm.dispatch import selector as sel
    table = {"entries": [
        {"n": 1536, "k": 4096, "m": 64, "variant": "sm90_fp8_gemm_general", "block_n": 64, "stages": 5},
        {"n": 1536, "k": 4096, "m": 1024, "variant": "sm90_fp8_gemm_general", "block_n": 128, "stages": 4},
    ]}
    (tmp_path / "testgpu.json").write_text(json.dumps(table))
    monkeypatch.setattr(sel, "TABLE_DIR", tmp_path)
    sel.load_table.cache_clear()
    sel.select.cache_clear()
    try:
        assert sel.select(50, 1536, 4096, gpu="testgpu").block_n == 64
        assert sel.select(600, 1536, 4096, gpu="testgpu").stages == 4
        assert sel.select(600, 1536, 4096, gpu="testgpu").reason.startswith("table")
        assert sel.select(600, 1536, 1024, gpu="testgpu").reason.startswith("fallback")
        # only within a factor of 2 of a tuned M: far from every tuned M the fallback decides
        assert sel.select(2048, 1536, 4096, gpu="testgpu").reason.startswith("table")
        assert sel.select(2049, 1536, 4096, gpu="testgpu").reason.startswith("fallback")
        assert sel.select(32, 1536, 4096, gpu="testgpu").reason.startswith("table")
        assert sel.select(31, 1536, 4096, gpu="testgpu").reason.startswith("fallback")
        assert "tuned at M=1024" in sel.select(600, 1536, 4096, gpu="testgpu").reason
    finally:
        sel.load_table.cache_clear()
        sel.select.cache_clear()


def test_shipped_table_entries_are_valid():
    for (n, k), rows in load_table("h200").items():
        for m, cand in rows:
            assert is_valid(GemmDesc(m, n, k), cand), (m, n, k, cand)


def test_invalid_candidates_rejected():
    d = GemmDesc(64, 256, 512)
    assert not is_valid(d, General(block_n=96))                 # does not divide 128
    assert not is_valid(d, General(block_n=128, stages=7 + 10))  # does not fit shared memory
    assert not is_valid(d, SwapAB(block_n=128))                  # token tiles up to 64
    assert not is_valid(d, General(splits=17))
    with pytest.raises(ValueError, match="unknown variant"):
        select(64, 256, 512, force_variant="nope")


def test_explain_names_the_choice():
    # the shipped table's pick (it changes with each retune): its kernel and tile, shared memory, why
    for m, n, k in ((4096, 4096, 4096), (1, 8192, 4096)):
        s, c = explain(m, n, k), select(m, n, k)
        assert c.describe() in s and f"smem {c.smem_bytes('bfloat16')} B" in s and c.reason in s, (s, c)
        assert s.startswith(f"M={m} N={n} K={k} bfloat16: sm90_fp8_gemm_"), s
    assert "swap-AB" in explain(1, 8192, 4096, gpu=NO_TABLE)        # the fallback says why
    assert "gemv (M=1 <= 8" in explain(1, 4096, 4096, gpu=NO_TABLE)


def test_split_k_for_small_m_long_k(older_model):
    c = select(16, 4096, 4096, gpu=NO_TABLE)
    assert c.splits > 1 and units(16, 4096, c) <= 132
    assert not hasattr(select(16, 4096, 256, gpu=NO_TABLE), "splits")     # short-K: no K splits
    assert select(4096, 4096, 4096, gpu=NO_TABLE).splits == 1       # the tiles fill the GPU
    assert select(16, 4096, 4096, num_sms=66, gpu=NO_TABLE).splits <= 2


def test_swap_ab_for_few_tokens(older_model):
    """The fallback's rule (no table): swap-AB up to 32 tokens (but where the gemv kernel takes
    the shape), and up to 64 where 64-row tiles are not estimated faster; the plain orientation
    above."""
    for m in (1, 8, 9, 32):
        c = select(m, 8192, 4096, gpu=NO_TABLE)
        assert isinstance(c, SwapAB) and c.block_n in (8, 16, 32, 64)
    for m in (9, 32):
        assert isinstance(select(m, 4096, 4096, gpu=NO_TABLE), SwapAB)
    assert type(select(65, 4096, 4096, gpu=NO_TABLE)) is General
    assert type(select(8, 4096, 4096, gpu=NO_TABLE, force_variant=General.variant)) is General


def test_fallback_64_row_tiles(older_model):
    """From 33 to 512 tokens the fallback takes 64-row tiles where the time model says so, with a
    ring of about 96 KiB; never for FP32 out, never past 512 tokens. The shapes: those where the
    tuner measured 64-row tiles fastest by the most (bench/NOTES.md)."""
    from fp8gemm.dispatch import general

    for m, n, k in ((64, 4096, 4096), (64, 8192, 4096), (100, 4096, 4096), (256, 1536, 4096)):
        c = select(m, n, k, gpu=NO_TABLE)
        assert type(c) is General and c.block_m == 64, (m, n, k, c)
        assert c.stages * (64 + c.block_n) * 128 <= general.RING64_BYTES or c.stages == 4
        assert is_valid(GemmDesc(m, n, k), c)
        assert getattr(select(m, n, k, "float32", gpu=NO_TABLE), "block_m", 128) != 64
    for m in (1, 16, 32, 513, 1024, 4096):
        assert getattr(select(m, 4096, 4096, gpu=NO_TABLE), "block_m", 128) != 64


def test_fallback_raster_group_rule(older_model):
    """Group 1 for swap-AB and for large M at N <= 4096 or K = 256, group 8 otherwise (the
    trace-wide tuner run, bench/NOTES.md; checked on unseen (N, K) by
    lab/group_check.py)."""
    assert select(16, 4096, 4096, gpu=NO_TABLE).group_m == 1          # swap-AB
    assert select(4096, 4096, 4096, gpu=NO_TABLE).group_m == 1
    assert select(8192, 8192, 256, gpu=NO_TABLE).group_m == 1
    assert select(8192, 8192, 4096, gpu=NO_TABLE).group_m == 8
    assert select(256, 4096, 4096, gpu=NO_TABLE).group_m == 8


def test_scale_source_follows_the_layout(monkeypatch):
    """As goes by TMA into the stage slots only where a TMA map can describe it per stage (M-major,
    16-byte aligned base and stride, at least a tile of rows) and its slots fit beside the stages;
    never for FP32 out. A K-major As and Bs with 16-byte aligned rows come in windows of 32 K
    blocks (SCALE_WINDOW) on 128-row and 64 x 128 tiles where the windows fit; else Bs is a load
    (one address per warpgroup), as is a K-major As, each block's in its own half of the loop
    (SCALE_LOADS_IN_BLOCK) on units of at most 8 K blocks but 64-row tiles of 64+ columns: the
    copied slots (SCALE_COPIED) run only when forced."""
    import types

    from fp8gemm import tma
    from fp8gemm.dispatch import general as g
    maps = []
    monkeypatch.setattr(tma, "encode_2d", lambda *args: maps.append(args) or "map")
    A, C, L, IB = g.SCALE_SLOTS_A, g.SCALE_COPIED, g.SCALE_LOADS, g.SCALE_LOADS_IN_BLOCK
    assert C == 7 and IB == 16

    def source(m=256, n=1024, k=4096, sm=1, sk=256, sbn=32, sbk=1, ptr=1 << 20, dt="bfloat16",
               cand=g.General(128, 5)):
        p = types.SimpleNamespace(out_dtype=dt, sa_ptr=ptr, sb_ptr=1 << 21, k=k, m=m, n=n, sa_stride_m=sm,
                                  sa_stride_k=sk, sb_stride_n=sbn, sb_stride_k=sbk)
        return g.scale_source(p, cand)[0]

    W = g.SCALE_WINDOW
    assert source() == A
    assert maps[-1] == (1 << 20, 32, 256, 1024, 1, 128, 4, tma.SWIZZLE_NONE)     # As: {128 rows, 1 K block}
    assert source(sm=32, sk=1) == W                                               # K-major As: windows
    assert maps[-2:] == [(1 << 20, 256, 32, 128, 128, 32, 4),                   # As {128 rows, 32 blocks}
                         (1 << 21, 8, 32, 128, 1, 32, 4, tma.SWIZZLE_NONE)]     # Bs {1 row, 32 blocks}
    assert source(sm=32, sk=1, cand=g.General(128, 8, 8, 1, 64)) == W             # 64 x 128 tiles
    assert source(sm=32, sk=1, k=1024) == IB                                      # 8 K blocks a unit: loads in block
    assert source(sm=32, sk=1, k=1040) == L                                       # 9 blocks: loads a block ahead
    assert source(sm=32, sk=1, k=4096, cand=g.General(128, 5, 8, 4)) == IB        # 4 splits of 8 blocks
    assert source(sm=32, sk=1, k=1024, cand=g.General(32, 16, 8, 1, 64)) == IB    # 64 x 32
    assert source(sm=32, sk=1, k=1024, cand=g.General(64, 6, 8, 1, 64)) == L      # 64 x 64: loads
    assert source(sm=32, sk=1, k=1024, dt="float32") == L                         # fine promotion
    assert source(k=1024) == A                                                    # M-major As: slots first
    assert source(sm=64, sk=1, sbn=64, k=8192, cand=g.General(128, 5, 8, 2)) == W  # 2 splits of 32 blocks
    assert source(sm=32, sk=1, k=4096, cand=g.General(128, 5, 8, 2)) == L         # 2 splits of 16 blocks
    assert source(sm=32, sk=1, cand=g.General(64, 12, 8, 1, 64)) == L             # 64 x 64: loads
    assert source(sm=32, sk=1, cand=g.General(128, 6)) == L                       # no room beside s6
    assert source(sm=32, sk=1, sbn=1, sbk=8) == L                                 # an M-major Bs: loads
    assert source(sm=32, sk=1, sbn=34) == L                                       # Bs rows 136 bytes apart
    assert source(sm=33, sk=1) == L                                               # As rows 132 bytes apart
    assert source(sm=32, sk=1, ptr=(1 << 20) + 4) == L                            # As base at 4 bytes
    assert source(sm=32, sk=1, dt="float32") == L                                 # fine promotion
    assert source(sm=0, sk=1) == L                                                # a broadcast As: loads
    assert source(sm=32, sk=1, sbn=0) == L                                        # a broadcast Bs row: loads
    assert source(sm=28, sk=1) == L                                               # As rows overlapping
    assert source(sk=0) == L and source(m=300, sk=256) == L                       # M-major: the same rules
    assert source(sbn=1, sbk=8) == A                                              # any Bs layout: loads
    assert source(dt="float32") == L                                              # fine promotion
    assert source(ptr=(1 << 20) + 4) == L                                         # As base not 16-byte aligned
    assert source(m=100, sk=100) == L                                             # As stride 400 bytes
    assert source(m=100, sk=104) == L                                             # fewer rows than a tile
    assert source(m=100, sk=104, cand=g.General(32, 8, 8, 1, 64)) == A            # a 64-row tile
    assert source(cand=g.General(128, 6)) == L                                    # As slots leave no room
    assert C not in {source(sm=sm, sk=sk, ptr=ptr) for sm, sk, ptr in ((32, 1, 1 << 20), (1, 256, 4))}
    c5, c6 = g.General(128, 5), g.General(128, 6)
    assert c5.smem_bytes("bfloat16", C) <= g.MAX_SMEM_PER_BLOCK < c6.smem_bytes("bfloat16", A)
    assert c5.smem_bytes("bfloat16", C) - c5.smem_bytes("bfloat16") == 5 * (128 * 4 + g.B_SLOT_BYTES)
    assert c5.smem_bytes("bfloat16", W) - c5.smem_bytes("bfloat16") == g.window_bytes(128) == 2 * 128 * 128 + 512


def test_chunked_k_loop_rule():
    """chunk_blocks (kChunk): the longest of CHUNKS that every work unit's K blocks are a whole
    number of and that the ring's stages divide or are divided by; K-major scales with a unit K
    stride, not FP32 out; split K, empty splits and the tail split counted as the kernel's
    scheduler cuts them; the plan asks for the loads with it."""
    import types

    from fp8gemm.dispatch import general as g

    def chunk(k=4096, cand=g.General(128, 4), m=512, n=4096, dt="bfloat16", sk=1, sbk=1, sms=132):
        return g.chunk_blocks(types.SimpleNamespace(out_dtype=dt, k=k, m=m, n=n, sa_stride_k=sk, sb_stride_k=sbk),
                              cand, sms)

    assert g.CHUNKS == (8, 4)
    assert chunk(k=1024) == 8 and chunk(k=512) == 4 and chunk(k=256) == 0   # 128-row tiles: units of one chunk
    assert chunk() == 0 and chunk(k=2048) == 0                            # 128 rows, 32 or 16 blocks: rolled
    assert chunk(cand=g.General(128, 4, 8, 4)) == 8                       # 4 splits of 8 blocks
    assert chunk(k=1024, cand=g.General(128, 6)) == 0                     # s6: no fixed ring position
    assert chunk(cand=g.General(32, 16, 8, 1, 64)) == 8                   # 64 rows: 4 chunks, s16: at 0 and 8
    assert chunk(cand=g.General(32, 8, 8, 4, 64)) == 8                    # 4 splits of 8 blocks
    assert chunk(cand=g.General(32, 8, 8, 8, 64)) == 4                    # 8 splits of 4
    assert chunk(cand=g.General(32, 8, 8, 3, 64)) == 0                    # 11, 11, 10 blocks
    assert chunk(k=1024, cand=g.General(32, 8, 8, 3, 64)) == 0            # 3, 3, 2
    assert chunk(k=512, cand=g.General(32, 8, 8, 16, 64)) == 0            # splits past K: empty ones
    assert chunk(k=1040) == 0 and chunk(k=1024 - 16) == 8                 # a K tail is a whole block
    assert chunk(k=1024, dt="float32") == 0 and chunk(k=1024, dt="float16") == 8
    assert chunk(cand=g.General(128, 8, 8, 1, 64)) == 0                   # 64 x 128: 192 accumulators
    assert chunk(cand=g.General(32, 8, 8, 1, 64)) == 8 and chunk(cand=g.General(32, 6, 8, 1, 64)) == 0
    for sk, sbk in ((4, 1), (1, 2), (0, 1)):                              # scales not at unit K stride
        assert chunk(k=1024, sk=sk, sbk=sbk) == 0
    assert g.unit_blocks(g.General(128, 4, 8, 0), 1200, 2048, 3072, 132) == {24, 8}   # 160 tiles: 28 split 3 ways
    assert chunk(k=3072, cand=g.General(32, 8, 8, 0, 64), m=1200, n=512) == 8         # 64 rows: 24 and 8
    assert chunk(k=3072, cand=g.General(128, 4, 8, 0), m=1200, n=2048) == 0           # 128 rows: 24 is 3 chunks
    assert g.unit_blocks(g.General(128, 4, 8, 0), 512, 2048, 3072, 132) == {12}       # 64 tiles: 2 ways
    assert g.unit_blocks(g.General(128, 4, 8, 3), 512, 2048, 1024, 132) == {3, 2}
    c = g.General(128, 4)
    assert c.template_args("bfloat16", False, True, False, scale_tma=g.SCALE_LOADS, chunk=8)[-3:] == (2, 0, 8)
    assert c.template_args("bfloat16", False, True, False, scale_tma=g.SCALE_WINDOW) == \
        c.template_args("bfloat16", False, True, False, scale_tma=g.SCALE_WINDOW, chunk=0)


def test_tuner_tries_a_chunk_fitting_ring(older_model):
    """The tuner's candidates hold, next to a tiling whose ring takes no chunk, the same tiling on
    the deepest ring that does (chunk_ring: 16, 8 or 4 stages, at most the most that fit), and
    nothing more where the ring takes one already, the units cannot (128 rows, four chunks) or the
    output is FP32 (its own loop)."""
    from fp8gemm.bench import tune
    from fp8gemm.dispatch import general as g

    def ring(cand, m, n, k, dt="bfloat16", most=13):
        return g.chunk_ring(cand, most, GemmDesc(m=m, n=n, k=k, out_dtype=dt), 132)

    assert ring(g.General(64, 6, 8, 1, 64), 184, 1536, 1024) == g.General(64, 8, 8, 1, 64)
    assert ring(g.General(64, 6, 8, 1, 64), 184, 1536, 1024, most=7) == g.General(64, 4, 8, 1, 64)
    assert ring(g.General(32, 16, 8, 1, 64), 64, 4096, 4096, most=16) is None     # s16 takes one
    assert ring(g.General(64, 6, 8, 1, 64), 184, 1536, 1024, dt="float32") is None
    assert ring(g.General(128, 6), 256, 8192, 1024, most=6) == g.General(128, 4)  # one chunk a unit
    assert ring(g.General(128, 6), 512, 8192, 4096, most=6) is None              # four: rolled
    assert ring(g.General(64, 6, 8, 3, 64), 128, 4096, 1024) is None              # 3, 3, 2 blocks
    cands = tune.candidates(GemmDesc(m=184, n=1536, k=1024, out_dtype="bfloat16"))
    assert cands[0] == g.General(64, 6, 8, 1, 64) and g.General(64, 8, 8, 1, 64) in cands


def test_wg3_as_slots_follow_the_layout():
    """The wg3 kernel's plain mode reads As from stage slots under the general kernel's rule: an
    M-major As, 16-byte aligned base and column stride, at least a tile (192 rows), slots that fit."""
    import types

    from fp8gemm.dispatch import wg3

    def slots(m=4096, sm=1, sk=4096, ptr=1 << 20, cand=Wg3(128, 3, 8)):
        return cand.as_slots(types.SimpleNamespace(out_dtype="bfloat16", sa_ptr=ptr, m=m, sa_stride_m=sm,
                                                   sa_stride_k=sk))

    assert slots()
    assert not slots(sm=32, sk=1)                   # K-major As
    assert not slots(ptr=(1 << 20) + 4)             # base not 16-byte aligned
    assert not slots(m=4095, sk=4095)               # column stride not a multiple of 16 bytes
    assert not slots(m=100, sk=100)                 # fewer rows than a tile
    assert Wg3(128, 3).smem_bytes("bfloat16", True) == Wg3(128, 3).smem_bytes("bfloat16") + 3 * wg3.BLOCK_M * 4
    big = next(s for s in range(3, 8) if Wg3(128, s).smem_bytes("bfloat16", True) > 232448)
    assert not slots(cand=Wg3(128, big, 8))         # no room beside the stages
    assert Wg3(128, 3, 8).template_args("bfloat16", True, False, True) == (128, 3, 0, 8, "true", "false", "true")
    assert Wg3(128, 3, 8).template_args("bfloat16", True, False) == (128, 3, 0, 8, "true")


def test_non_sm90_gpus_get_a_clear_error():
    from fp8gemm.hw import check_arch
    check_arch(0, "NVIDIA H200", 9, 0)
    for name, major, minor in (("NVIDIA A100-SXM4-80GB", 8, 0), ("NVIDIA B200", 10, 0), ("NVIDIA L40S", 8, 9)):
        with pytest.raises(RuntimeError, match=rf"needs an SM90 GPU .* GPU 1 is {name} \(compute capability "
                                               rf"{major}\.{minor}\)"):
            check_arch(1, name, major, minor)


def test_tables_follow_the_gpu_the_user_and_the_environment(tmp_path, monkeypatch):
    """A GPU's table: $FP8GEMM_TABLE, else the user's <gpu>.json (fp8gemm-tune's), else the
    shipped one, else the shipped H200 table with one warning."""
    import warnings

    from fp8gemm.dispatch import selector as sel
    assert sel.gpu_key("NVIDIA H200") == "h200" and sel.gpu_key("NVIDIA H100 80GB HBM3") == "h100"
    assert sel.gpu_key("NVIDIA GH200 480GB") == "gh200" and sel.gpu_key("NVIDIA H20") == "h20"
    shipped = sel.TABLE_DIR / "h200.json"
    assert sel.table_path("h200") == shipped and sel.table_path(sel.NO_TABLE) is None
    monkeypatch.setattr(sel, "_warned", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert sel.table_path("h20") == shipped                     # no table of its own
        assert sel.table_path("h20") == shipped
    assert len(caught) == 1 and "no dispatch table for this GPU (h20)" in str(caught[0].message)
    assert sel.table_path("h100") == sel.TABLE_DIR / "h100.json"        # shipped, tuned on an H100
    assert sel.load_table("h100") and sel.load_table("h100") != sel.load_table("h200")
    user = tmp_path / "tables"
    user.mkdir()
    (user / "h100.json").write_text(json.dumps({"entries": [
        {"n": 1536, "k": 4096, "m": 64, "variant": "sm90_fp8_gemm_general", "block_n": 32, "stages": 5}]}))
    monkeypatch.setenv("FP8GEMM_TABLE_DIR", str(user))
    assert sel.table_path("h100") == user / "h100.json"
    assert sel.load_table("h100")[(1536, 4096)][0][1].block_n == 32
    monkeypatch.setenv("FP8GEMM_TABLE", str(user / "h100.json"))
    assert sel.table_path("h200") == user / "h100.json"             # the override serves every GPU
    monkeypatch.setenv("FP8GEMM_TABLE", str(tmp_path / "missing.json"))
    with pytest.raises(FileNotFoundError, match="FP8GEMM_TABLE=.*missing.json is not a file"):
        sel.table_path("h200")


def test_explain_moe_names_each_gemms_kernel():
    """fp8gemm.explain_moe: the host's rows estimate, then per GEMM the tile dispatch/grouped.py
    gives that estimate (swap-AB at decode, 128-row tiles at prefill, both with the routing
    kernel's pick inside MOE_CHOICE_ROWS, the fused L1's own tile)."""
    import fp8gemm
    from fp8gemm.dispatch import grouped
    one = fp8gemm.explain_moe(1)
    assert "6 pairs over 256 experts" in one and one.count("sm90_fp8_gemm_swap_ab") == 2
    mid = fp8gemm.explain_moe(2048)
    assert "96 rows per non-empty expert" in mid and "routing kernel gives each expert" not in mid
    big = fp8gemm.explain_moe(8192)
    assert grouped.device_choice(384.0, False) and big.count("routing kernel gives each expert") == 2
    assert "sm90_fp8_gemm_wg3" in big
    fused = fp8gemm.explain_moe(8192, fused=True)
    assert "L1 + SwiGLU (fused)" in fused and not grouped.device_choice(384.0, True)
    pro = fp8gemm.explain_moe(8192, 384, 7168, 3072)
    assert "L1 [6144 x 7168]" in pro and "L2 [7168 x 3072]" in pro


def test_moe_fuses_by_default_where_it_measured_faster():
    """fused=None (the default): the fused SwiGLU L1 where the rows estimate lies in FUSED_ROWS
    (8-32 rows per expert: V4-Flash at 256-512 tokens, V4-Pro at 256-1024), the chain at decode and
    prefill; explain_moe says which, and forced choices stay forced."""
    import fp8gemm
    from fp8gemm.dispatch import grouped
    from fp8gemm.grouped import rows_estimate
    assert grouped.FUSED_ROWS == (8.0, 32.0)
    flash = {t: grouped.fused_default(rows_estimate(6 * t, 256)[0]) for t in (1, 16, 128, 256, 512, 1024, 8192)}
    assert flash == {1: False, 16: False, 128: False, 256: True, 512: True, 1024: False, 8192: False}
    pro = {t: grouped.fused_default(rows_estimate(6 * t, 384)[0]) for t in (128, 256, 1024, 2048)}
    assert pro == {128: False, 256: True, 1024: True, 2048: False}
    assert "L1 + SwiGLU (fused)" in fp8gemm.explain_moe(512) and "the default: fused" in fp8gemm.explain_moe(512)
    assert "L1 + SwiGLU (fused)" not in fp8gemm.explain_moe(2048)
    assert "L1 + SwiGLU (fused)" not in fp8gemm.explain_moe(512, fused=False)
    assert "L1 + SwiGLU (fused)" in fp8gemm.explain_moe(2048, fused=True)


def test_scheduler_float_division_is_exact_below_its_limit():
    """scheduler.cuh's div_by_runtime: trunc(fma(a, rcp(d), rcp(d) / 2)) in float32 equals a / d
    for every a below kExactDivLimit, with rcp.approx 1 ulp off either way (its PTX bound); plans
    over more units are refused."""
    import re
    from pathlib import Path
    src = (Path(__file__).resolve().parents[1] / "kernels_cu" / "scheduler.cuh").read_text()
    limit = 1 << int(re.search(r"kExactDivLimit = 1u << (\d+);", src).group(1))
    a = np.arange(limit, dtype=np.float64)
    for d in list(range(1, 40)) + [127, 131, 1000, 8191, 65521, limit - 1]:
        r0 = np.float32(1.0) / np.float32(d)
        for r in (np.nextafter(r0, np.float32(0)), r0, np.nextafter(r0, np.float32(1))):
            r = np.float64(r)
            # a * r + r / 2 is exact in float64 (a < 2^21, r of 24 bits): one rounding to float32, as the FFMA
            q = np.trunc((a * r + 0.5 * r).astype(np.float32).astype(np.float64))
            wrong = np.flatnonzero(q != np.floor(a / d))
            assert wrong.size == 0, f"d={d} a={int(wrong[0])}"
    # the host keeps every plan of the scheduled kernels under that limit
    from fp8gemm import launcher
    assert launcher.MAX_SCHEDULED_UNITS == limit - 1
    launcher.check_units(limit - 1, "M = 1, N = 1")
    with pytest.raises(ValueError, match=r"M = 8, N = 9 needs 2097152 work units .* at most 2097151"):
        launcher.check_units(limit, "M = 8, N = 9")


def test_tail_split_rules():
    """The host's view of TAIL_SPLIT matches the kernel's partition rule: whole waves unsplit, the
    rest split min(SMs / rest, K blocks / 8) ways; it pays only with a last wave at most half full."""
    from fp8gemm.dispatch import general as g
    from fp8gemm.dispatch import grouped
    assert g.tail_split_count(192, 32, 132) == 2 and g.tail_split_count(150, 16, 132) == 2
    assert g.tail_split_count(288, 56, 132) == 5 and g.tail_split_count(264, 32, 132) == 1
    assert g.tail_split_count(200, 64, 132) == 1 and g.tail_split_count(60, 4, 132) == 1   # K blocks / 8 caps it
    assert g.tail_split_pays(192, 132) and not g.tail_split_pays(200, 132) and not g.tail_split_pays(100, 132)
    assert General(128, 4, 8, 0).is_valid(GemmDesc(768, 4096, 4096, "bfloat16"))
    assert "ktail" in General(128, 4, 8, 0).label() and "ktail" in SwapAB(8, 6, 1, 0).label()
    # one token of V4-Flash: 6 experts x 32 weight tiles, 1.45 waves -> the grouped decode tile splits the last wave
    c = grouped.candidate(4096, 4096, "float32", 256, 2.0, 6, 132, False)
    assert type(c) is SwapAB and c.splits == g.TAIL_SPLIT
    assert grouped.candidate(4096, 4096, "float32", 256, 2.0, 12, 132, False).splits == 1     # 384 tiles
