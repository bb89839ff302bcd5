"""CPU: the grouped GEMM's rules (fp8gemm.grouped_matmul_contiguous / _masked) raise the right
exception naming the argument; good inputs give the problem the kernel's grouped mode expects; the
dispatcher's grouped tile fits shared memory beside the tile prefix."""
import pytest

from test_validate import T

from fp8gemm.dispatch import General, SwapAB, Wg3
from fp8gemm.dispatch import grouped as tiles
from fp8gemm.dispatch.grouped import candidate as grouped_candidate
from fp8gemm.hw import MAX_GROUPS, MAX_SMEM_PER_BLOCK
from fp8gemm.validate import validate_grouped


def contiguous(p=300, g=4, n=256, k=512, **over):
    kb, nb = -(-k // 128), -(-n // 128)
    args = dict(a=T("a", "float8_e4m3fn", (p, k)), b=T("b", "float8_e4m3fn", (g, n, k)),
                sa=T("a_scale", "float32", (p, kb)), sb=T("b_scale", "float32", (g, nb, kb)),
                groups=T("offsets", "int32", (g + 1,)), out=None, out_dtype=None, masked=False)
    args.update(over)
    return args


def masked(g=4, rows=64, n=256, k=512, **over):
    kb, nb = -(-k // 128), -(-n // 128)
    args = dict(a=T("a", "uint8", (g, rows, k)), b=T("b", "uint8", (g, n, k)),
                sa=T("a_scale", "float32", (g, rows, kb)), sb=T("b_scale", "float32", (g, nb, kb)),
                groups=T("counts", "int32", (g,)), out=None, out_dtype=None, masked=True)
    args.update(over)
    return args


def run(kw):
    return validate_grouped(kw["a"], kw["b"], kw["sa"], kw["sb"], kw["groups"], kw["out"], kw["out_dtype"],
                            kw["masked"])


def test_contiguous_problem():
    kw = contiguous()
    gp = run(kw)
    p = gp.gemm
    assert (p.m, p.n, p.k, p.out_shape, p.b_ptr, p.ldb) == (300, 256, 512, (300, 256), kw["b"].ptr, 512)
    assert (gp.num_groups, gp.group_rows, gp.groups_ptr, gp.sb_stride_g) == (4, 0, kw["groups"].ptr, 8)


def test_masked_problem_rows_of_all_groups():
    kw = masked(sb=T("b_scale", "float32", (4, 2, 4), strides=(1, 4, 8)))   # any scale strides
    gp = run(kw)
    assert (gp.gemm.m, gp.gemm.out_shape, gp.group_rows, gp.sb_stride_g) == (256, (4, 64, 256), 64, 1)
    assert (gp.gemm.sb_stride_n, gp.gemm.sb_stride_k, gp.gemm.lda, gp.gemm.sa_stride_m) == (4, 8, 512, 4)


BAD = [
    (contiguous(b=T("b", "uint8", (256, 512))), ValueError, r"b must have shape \[G, N, K\]"),
    (contiguous(b=T("b", "uint8", (4, 256, 512), strides=(256 * 512 + 16, 512, 1))), ValueError,
     "b's groups must follow each other without gaps"),
    (contiguous(sb=T("b_scale", "float32", (2, 4))), ValueError, r"b_scale must have shape \(G, ceil"),
    (contiguous(groups=T("offsets", "int64", (5,))), TypeError, "offsets must be int32"),
    (contiguous(groups=T("offsets", "int32", (4,))), ValueError, r"offsets must have shape \(5,\)"),
    (contiguous(groups=T("offsets", "int32", (5,), strides=(2,))), ValueError, "offsets must be contiguous"),
    (contiguous(groups=T("offsets", "int32", (5,), device=None)), ValueError, "offsets is on the CPU"),
    (contiguous(a=T("a", "uint8", (2, 150, 512))), ValueError, r"a must have shape \[P, K\]"),
    (masked(a=T("a", "uint8", (3, 64, 512))), ValueError, r"a must have shape \[G, max_rows, K\] with G = 4"),
    (masked(groups=T("counts", "int32", (5,))), ValueError, r"counts must have shape \(4,\)"),
    (masked(a=T("a", "uint8", (4, 64, 512), strides=(64 * 512 + 16, 512, 1))), ValueError,
     "a's leading dimensions cannot be flattened"),
    (masked(b=T("b", "float16", (4, 256, 512))), TypeError, "b must be FP8"),
    (masked(k=520), ValueError, "K must be a positive multiple of 16"),
    (masked(out=T("out", "float32", (4, 64, 200))), ValueError, r"out must have shape \(4, 64, 256\)"),
    (contiguous(g=MAX_GROUPS + 1), ValueError, "b must hold 1..8192 groups"),
]


@pytest.mark.parametrize("kw,exc,msg", BAD, ids=lambda v: v if isinstance(v, str) else "")
def test_bad_input(kw, exc, msg):
    with pytest.raises(exc, match=msg):
        run(kw)


def test_out_overlapping_a_later_group_of_b():
    b = T("b", "uint8", (4, 256, 512))
    out = T("out", "bfloat16", (300, 256), ptr=b.ptr + 3 * 256 * 512)   # inside group 3's weights
    with pytest.raises(ValueError, match="out overlaps b"):
        run(contiguous(b=b, out=out))


@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("n,groups", [(4096, 1), (4096, 256), (7168, 384), (40, 8), (300, MAX_GROUPS)])
def test_grouped_tile_fits_beside_the_prefix(n, groups, out_dtype):
    c = grouped_candidate(n, 4096, out_dtype, groups)
    assert c.grouped_smem_bytes(out_dtype, groups) <= MAX_SMEM_PER_BLOCK
    assert type(c) is General and c.block_n == (64 if n <= 64 else 128) and 2 <= c.stages <= 6
    if groups <= 384 and out_dtype == "bfloat16":
        assert c.stages == 6          # DeepSeek-V4's expert counts keep the full ring


def test_grouped_limits_agree():
    with pytest.raises(ValueError, match="1..8192 groups"):
        grouped_candidate(256, 512, "bfloat16", 0)


def test_decode_takes_swap_ab_and_splits_only_when_sms_would_idle():
    """One row per group: swap-AB on 8-wide token tiles. 6 experts x 32 weight tiles are 1.45
    waves: only the last wave's tiles split (TAIL_SPLIT); 3 experts x 16 tiles leave most idle: K
    splits. Many rows per group (prefill) or none known keep 128-row token tiles."""
    from fp8gemm.dispatch.general import TAIL_SPLIT
    c = grouped_candidate(4096, 4096, "bfloat16", 256, rows_per_group=1, active_groups=6, num_sms=132)
    assert c == SwapAB(8, 6, 1, TAIL_SPLIT)
    c = grouped_candidate(4096, 4096, "bfloat16", 256, rows_per_group=1, active_groups=8, num_sms=132)
    assert c == SwapAB(8, 6, 1, 1)             # 256 tiles: a last wave nearly full, nothing to even out
    c = grouped_candidate(2048, 4096, "bfloat16", 256, rows_per_group=1, active_groups=3, num_sms=132)
    assert (type(c), c.block_n, c.splits) == (SwapAB, 8, 2)
    assert grouped_candidate(4096, 4096, "bfloat16", 256, rows_per_group=12, active_groups=255).block_n == 16
    for per_group in (48, None):
        c = grouped_candidate(4096, 4096, "bfloat16", 256, rows_per_group=per_group, active_groups=256)
        assert (type(c), c.block_n, c.splits) == (General, 128, 1)
    c = grouped_candidate(2048, 256, "bfloat16", 8, rows_per_group=1, active_groups=1, num_sms=132)
    assert c.splits == 1                       # K = 256: two K blocks, nothing to split


# ---- the MoE layer's own rules (fp8gemm.moe; the grouped GEMMs check the weights' layouts) ----

def layer_args(t=5, h=256, i=128, e=8, k=2, **over):
    args = dict(tx=T("x", "float8_e4m3fn", (t, h)), txs=T("x_scale", "float32", (t, -(-h // 128))),
                ids=T("topk_ids", "int32", (t, k)), wts=T("topk_weights", "float32", (t, k)),
                tw1=T("w1", "float8_e4m3fn", (e, 2 * i, h)), tw2=T("w2", "float8_e4m3fn", (e, h, i)))
    args.update(over)
    return args


def test_layer_rules_accept_and_measure():
    from fp8gemm.moe_layer import _check
    assert _check(**layer_args()) == (5, 256, 2, 8, 128)


LAYER_BAD = [
    (dict(tx=T("x", "float16", (5, 256))), TypeError, "x must be FP8 E4M3"),
    (dict(tx=T("x", "uint8", (5, 200)), txs=T("x_scale", "float32", (5, 2))), ValueError, "multiple of 16"),
    (dict(txs=T("x_scale", "float32", (5, 3))), ValueError, r"x_scale must be float32 \[T, ceil\(H/128\)\]"),
    (dict(ids=T("topk_ids", "int32", (4, 2))), ValueError, r"topk_ids must be \[T, k\] with T = 5"),
    (dict(wts=T("topk_weights", "float32", (5, 3))), ValueError, "topk_weights must have topk_ids' shape"),
    (dict(tw1=T("w1", "uint8", (8, 200, 256)), tw2=T("w2", "uint8", (8, 256, 100))), ValueError,
     "I .* must be a positive multiple of 128"),
    (dict(tw2=T("w2", "uint8", (8, 128, 128))), ValueError, r"w2 must be \[E, H, I\] = \(8, 256, 128\)"),
    (dict(ids=T("topk_ids", "int32", (5, 2), strides=(4, 1))), ValueError, "topk_ids must be contiguous"),
    (dict(wts=T("topk_weights", "float32", (5, 2), device=None)), ValueError, "topk_weights must be on the GPU of x"),
]


@pytest.mark.parametrize("over,exc,msg", LAYER_BAD, ids=lambda v: v if isinstance(v, str) else "")
def test_layer_rules_reject(over, exc, msg):
    from fp8gemm.moe_layer import _check
    with pytest.raises(exc, match=msg):
        _check(**layer_args(**over))


def test_grouped_three_warpgroup_window(monkeypatch):
    """192-row tiles where the rows estimate (twice the mean) lies in WG3_ROWS (a mean of 120-165
    rows: lab/exp_moe_prefill.py --wg3); fp32 only when not precise."""
    lo, hi = tiles.WG3_ROWS
    assert grouped_candidate(6144, 7168, "bfloat16", 384, rows_per_group=256.0, active_groups=384).variant == Wg3.variant
    for rows in (lo, hi + 1, 100.0, 400.0):
        assert grouped_candidate(6144, 7168, "bfloat16", 384, rows_per_group=rows).variant == General.variant, rows
    assert grouped_candidate(4096, 4096, "float32", 256, rows_per_group=256.0).variant == General.variant
    c = grouped_candidate(4096, 4096, "float32", 256, rows_per_group=256.0, precise_fp32=False)
    assert type(c) is Wg3 and c.block_m == 192
    assert c.grouped_smem_bytes("float32", 256) <= MAX_SMEM_PER_BLOCK
    big = grouped_candidate(4096, 4096, "bfloat16", 8192, rows_per_group=256.0)
    assert type(big) is Wg3 and big.grouped_smem_bytes("bfloat16", 8192) <= MAX_SMEM_PER_BLOCK
    monkeypatch.setattr(tiles, "WG3_ROWS", None)          # off
    assert type(grouped_candidate(6144, 7168, "bfloat16", 384, rows_per_group=256.0)) is General


def test_grouped_three_warpgroup_override():
    """wg3=True / False (fp8gemm.moe's device-side choice) overrides the window either way, but
    never gives precise fp32 output to the three-warpgroup kernel."""
    assert grouped_candidate(6144, 7168, "bfloat16", 384, rows_per_group=400.0, wg3=True).variant == Wg3.variant
    assert grouped_candidate(6144, 7168, "bfloat16", 384, rows_per_group=256.0, wg3=False).variant == General.variant
    assert grouped_candidate(4096, 4096, "float32", 256, rows_per_group=256.0, wg3=True).variant == General.variant
    c = grouped_candidate(4096, 4096, "float32", 256, None, wg3=True, precise_fp32=False)
    assert c.variant == Wg3.variant and "rows per group" in c.reason
    lo, hi = tiles.MOE_CHOICE_ROWS
    assert lo < hi and lo <= tiles.WG3_ROWS[0] and tiles.WG3_ROWS[1] <= hi


def test_forced_grouped_config_rules():
    """grouped_matmul_*(config=): General with 128-row tiles and no K split, SwapAB, Wg3, or Dense
    (only with its K-major switch: tests/test_dense_dispatch.py); Wg3 with fp32 output only when not precise, at
    stage counts its plain mode's staging would not leave room for; the tile's shared memory
    beside the prefix."""
    from fp8gemm.dispatch import Dense, General, ShortK, SwapAB, Wg3
    from fp8gemm.dispatch import grouped as g
    for ok in (General(128, 5), SwapAB(16, 6, 1, 2), Wg3(128, 3, 8), Wg3(128, 4, 8), Wg3(128, 5, 8)):
        g.check_grouped_config(ok)
        g.check_grouped_config(ok, "bfloat16", 256, True, g.GemmDesc(1000, 4096, 4096, "bfloat16"))
    from fp8gemm.dispatch import dense
    if dense.K_MAJOR_SWITCH:            # pairs sharing A or B (B multicast within a group only)
        g.check_grouped_config(Dense(cluster=2, multicast_a=0))
    else:
        with pytest.raises(ValueError, match="FP8GEMM_DENSE_K_MAJOR=0"):
            g.check_grouped_config(Dense())
    for bad, msg in ((ShortK(64, 64), "General, SwapAB, Wg3 or Dense"),
                     (General(64, 6, 8, 1, 64), "128-row tiles"),
                     (General(128, 5, 8, 2), "no K split")):
        with pytest.raises(ValueError, match=msg):
            g.check_grouped_config(bad)
    with pytest.raises(ValueError, match="precise_fp32=False"):
        g.check_grouped_config(Wg3(128, 3, 8), "float32", 8, True)
    g.check_grouped_config(Wg3(128, 3, 8), "float32", 8, False)
    g.check_grouped_config(Wg3(128, 3, 8), "float32", 8, False, g.GemmDesc(1000, 4096, 4096, "float32"))
    with pytest.raises(ValueError, match="precise_fp32=False"):
        g.check_grouped_config(Wg3(128, 3, 8), "float32", 8, True, g.GemmDesc(1000, 4096, 4096, "float32"))
    with pytest.raises(ValueError, match="shared memory"):
        g.check_grouped_config(General(128, 6), "bfloat16", 8192)
    assert not Wg3(128, 5, 8).is_valid(g.GemmDesc(1000, 4096, 4096))     # its plain mode's staging
    g.check_grouped_config(Wg3(128, 4, 8), "float32", 256, False, g.GemmDesc(1000, 4096, 2048, "float32"))
    for bad, msg in ((Wg3(96, 4, 8), "not valid"), (Wg3(128, 6, 8), "shared memory")):
        with pytest.raises(ValueError, match=msg):
            g.check_grouped_config(bad, "bfloat16", 8, True, g.GemmDesc(1000, 4096, 4096))
