"""Batch-invariant mode of the grouped GEMMs and the MoE layer (issue 57; dispatch/invariant.py
says why the rule holds). CPU: the mode's grouped tile is a function of (N, K, out dtype, G) alone
and is the plain mode's tile; config= with the mode refused. GPU (gpu-marked): a group's rows and
a token's MoE output compared bitwise between a small call and the same rows inside a large one
with other groups and routings."""
import numpy as np
import pytest

from generators import random_case

import fp8gemm
from fp8gemm import grouped as grouped_api
from fp8gemm.dispatch import General, GemmDesc, is_valid
from fp8gemm.dispatch import grouped as tiles
from fp8gemm.dispatch import invariant
from fp8gemm.dispatch.invariant import invariant_candidate, invariant_grouped_candidate
from fp8gemm.hw import MAX_SMEM_PER_BLOCK

DTYPES = ("bfloat16", "float16", "float32")
NK = [(4096, 7168), (7168, 2048), (2048, 7168), (300, 400), (16, 1024), (24576, 1536)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("groups", [1, 8, 256, 8192])
def test_grouped_tile_is_the_plain_tile(dtype, groups):
    """The grouped tile: the plain mode's general-kernel tile (same block_n, 128 rows, no split),
    stages within shared memory beside the tile prefix, valid as a forced grouped config."""
    for n, k in NK:
        c = invariant_grouped_candidate(n, k, dtype, groups)
        plain = invariant_candidate(n, k, dtype)
        assert type(c) is General and c.block_m == 128 and c.splits == 1
        assert (c.block_n, c.group_m) == (plain.block_n, plain.group_m) and c.stages <= plain.stages
        assert c.grouped_smem_bytes(dtype, groups) <= MAX_SMEM_PER_BLOCK
        assert is_valid(GemmDesc(4096, n, k, dtype), c)
        tiles.check_grouped_config(c, dtype, groups, True, GemmDesc(4096, n, k, dtype))


def test_grouped_choice_ignores_the_rows(monkeypatch):
    """plan_grouped_problem in the mode: one tile whatever the rows per group and the expected_rows
    hint (the default mode picks swap-AB, 192-row tiles or 128-row tiles over the same sizes)."""
    from types import SimpleNamespace
    monkeypatch.setattr(grouped_api, "building", lambda device: __import__("contextlib").nullcontext())
    monkeypatch.setattr(grouped_api, "sm_count", lambda device: 132)
    for cls in tiles.GROUPED_TILES:
        monkeypatch.setattr(cls, "plan_grouped", lambda self, gp, ldc, aligned, precise=True: self)
    seen, default = set(), set()
    for rows in (1, 7, 64, 300, 2000, 20000, 200000):
        for masked in (False, True):
            p = SimpleNamespace(m=rows, n=4096, k=7168, out_dtype="bfloat16", device=0)
            gp = SimpleNamespace(gemm=p, num_groups=256, group_rows=max(1, rows // 256) if masked else 0)
            for hint in (None, rows):
                seen.add(grouped_api.plan_grouped_problem(gp, hint, True, None, 4096, True, None, True))
                default.add(type(grouped_api.plan_grouped_problem(gp, hint, True, None, 4096, True, None, False)))
    assert len(seen) == 1 and seen.pop() == invariant_grouped_candidate(4096, 7168, "bfloat16", 256)
    assert len(default) > 1


def test_config_with_the_mode_is_refused():
    with pytest.raises(ValueError, match="batch_invariant=True chooses the tile"):
        fp8gemm.grouped_matmul_contiguous(None, None, None, None, None, config=General(128, 4),
                                          batch_invariant=True)


# ---- GPU: rows compared bitwise -------------------------------------------------------------------

def _bits(x):
    import cupy
    return cupy.asarray(x).view(f"u{x.dtype.itemsize}")


def _weights(groups, n, k, seed):
    import cupy
    cases = [random_case(1, n, k, seed=seed + 101 * g) for g in range(groups)]
    return cupy.stack([c.b for c in cases]), cupy.stack([c.b_scale for c in cases])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_grouped_rows_alone_and_in_a_batch(dtype):
    """Random group sizes (1 to 3000 rows, empty groups, decode sizes where the default picks
    swap-AB, 129-192 where it picks wg3): group g's rows called alone (one group, the rest empty)
    give the bits they get inside the full batch, and the bits of the plain batch-invariant matmul
    against b[g]; the masked layout gives the same."""
    import cupy
    rng = np.random.default_rng({"bfloat16": 5, "float16": 6, "float32": 7}[dtype])
    for i, (n, k) in enumerate([(512, 1024), (1536, 7168), (300, 400), (4096, 2048)]):
        g = 6
        sizes = [int(x) for x in rng.choice([0, 1, 5, 33, 150, 700, 3000], size=g)]
        sizes[i % g] = max(sizes[i % g], 1)
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
        act = random_case(max(int(offsets[-1]), 1), 8, k, seed=70 + i)
        a, sa = act.a[:offsets[-1]], act.a_scale[:offsets[-1]]
        b, sb = _weights(g, n, k, seed=80 + i)
        full = fp8gemm.grouped_matmul_contiguous(a, b, sa, sb, cupy.asarray(offsets), out_dtype=dtype,
                                                 batch_invariant=True)
        for e in range(g):
            lo, hi = int(offsets[e]), int(offsets[e + 1])
            if lo == hi:
                continue
            alone_offsets = np.zeros(g + 1, np.int32)
            alone_offsets[e + 1:] = hi - lo
            alone = fp8gemm.grouped_matmul_contiguous(a[lo:hi], b, sa[lo:hi], sb, cupy.asarray(alone_offsets),
                                                      out_dtype=dtype, batch_invariant=True)
            what = f"group {e} ({hi - lo} rows) N={n} K={k} {dtype}"
            assert bool((_bits(alone) == _bits(full[lo:hi])).all()), f"{what}: alone differs from the batch"
            plain = fp8gemm.matmul(a[lo:hi], b[e], sa[lo:hi], sb[e], out_dtype=dtype, batch_invariant=True)
            assert bool((_bits(plain) == _bits(full[lo:hi])).all()), f"{what}: the plain matmul differs"
            one = fp8gemm.grouped_matmul_contiguous(a[lo:lo + 1], b, sa[lo:lo + 1], sb,
                                                    cupy.asarray(np.minimum(alone_offsets, 1)), out_dtype=dtype,
                                                    batch_invariant=True)
            assert bool((_bits(one) == _bits(full[lo:lo + 1])).all()), f"{what}: its first row alone differs"
        rows = max(max(sizes), 1)
        am = cupy.zeros((g, rows, k), dtype=a.dtype)
        sam = cupy.ones((g, rows, sa.shape[1]), dtype=sa.dtype)
        for e in range(g):
            am[e, :sizes[e]], sam[e, :sizes[e]] = a[offsets[e]:offsets[e + 1]], sa[offsets[e]:offsets[e + 1]]
        outm = fp8gemm.grouped_matmul_masked(am, b, sam, sb, cupy.asarray(np.array(sizes, np.int32)),
                                             out_dtype=dtype, expected_rows=int(offsets[-1]), batch_invariant=True)
        for e in range(g):
            got, want = outm[e, :sizes[e]], full[offsets[e]:offsets[e + 1]]
            assert bool((_bits(got) == _bits(want)).all()), f"masked group {e}, N={n} K={k} {dtype}"


@pytest.mark.gpu
@pytest.mark.parametrize("fused", [None, True])
def test_moe_token_alone_and_in_4096(fused):
    """fp8gemm.moe(batch_invariant=True): tokens called alone, in a batch of 4096 routed uniformly,
    and in a batch of 4096 where every other token goes to the same experts (skewed: hundreds of
    rows per expert), give the same bits; the default mode takes other kernels over these sizes."""
    import cupy
    from test_moe_gpu import layer, routing
    experts, hidden, inter, top_k, t = 16, 512, 256, 4, 4096
    q1, s1, q2, s2 = (cupy.asarray(w if w.dtype == np.float32 else w.view(np.uint8))
                      for w in layer(experts, hidden, inter, seed=57))
    x = cupy.asarray(np.random.default_rng(57).standard_normal((t, hidden)).astype(np.float32)).astype(cupy.float16)
    ids_u, w_u = routing(t, experts, top_k, False, seed=57)
    ids_s, w_s = routing(t, experts, top_k, True, seed=58)
    ids_s[:8], w_s[:8] = ids_u[:8], w_u[:8]                     # the tokens compared keep their routing

    def run(rows, ids, w):
        return fp8gemm.moe(x[rows], cupy.asarray(ids[rows]), cupy.asarray(w[rows]), q1, s1, q2, s2,
                           fused=fused, batch_invariant=True)
    uniform, skewed = run(slice(None), ids_u, w_u), run(slice(None), ids_s, w_s)
    assert bool(cupy.isfinite(uniform.astype(cupy.float32)).all())
    for r in range(8):
        alone = run(slice(r, r + 1), ids_u, w_u)
        assert bool((_bits(alone) == _bits(uniform[r:r + 1])).all()), f"token {r}: alone differs from 4096 uniform"
        assert bool((_bits(alone) == _bits(skewed[r:r + 1])).all()), f"token {r}: alone differs from 4096 skewed"
    eight = run(slice(0, 8), ids_u, w_u)
    assert bool((_bits(eight) == _bits(uniform[:8])).all()), "8 tokens differ from the same 8 in 4096"


@pytest.mark.parametrize("switch,flag,want", [(True, None, True), (False, None, False), (False, True, True),
                                               (True, False, False)])
def test_process_wide_mode_reaches_the_grouped_choice(monkeypatch, switch, flag, want):
    """run_grouped hands plan_grouped_problem the call's flag, or the process-wide mode where the
    flag is None (no GPU: intake and validation faked, the plan stops the call)."""
    from types import SimpleNamespace
    seen = []

    class Stop(Exception):
        pass

    def plan(gp, hint, precise, wg3, ldc, aligned, config, inv):
        seen.append(inv)
        raise Stop
    monkeypatch.setattr(invariant, "ENABLED", switch)
    monkeypatch.setattr(grouped_api, "plan_grouped_problem", plan)
    monkeypatch.setattr(grouped_api, "framework_of", lambda a: "numpy")
    monkeypatch.setattr(grouped_api, "intake", lambda *a, **kw: SimpleNamespace(ptr=0))
    gemm = SimpleNamespace(m=10, n=256, k=512, out_dtype="bfloat16", device=0)
    monkeypatch.setattr(grouped_api, "validate_grouped", lambda *a: SimpleNamespace(gemm=gemm, num_groups=2))
    with pytest.raises(Stop):
        fp8gemm.grouped_matmul_contiguous(object(), object(), object(), object(), object(), batch_invariant=flag)
    assert seen == [want]
