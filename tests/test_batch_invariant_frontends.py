"""Batch-invariant mode through the frontends (issue 57, phase 2: the plain GEMM): the torch
operators, the JAX functions and ``fp8gemm-bench --batch-invariant``. CPU: the operators' schema
holds the mode as a bool, the fake kernels take it, the wrappers resolve None to the process-wide
mode before the operator (a compiled graph holds it as a constant), the JAX function lowers to the
mode's own target and its plan key differs by mode, the bench flag parses and its summary computes
what it prints on fake rows. GPU (gpu-marked): rows bitwise the same at M = 1 and inside M = 300
through the torch operator and the jitted JAX function."""
import types

import numpy as np
import pytest

from generators import random_case

import fp8gemm
from fp8gemm.bench import cli, report
from fp8gemm.dispatch import invariant

DTYPES = ("bfloat16", "float16", "float32")
M_LARGE = 300


@pytest.fixture
def switch():
    """Restores the process-wide mode after the test."""
    saved = invariant.batch_invariant()
    yield invariant.set_batch_invariant
    invariant.set_batch_invariant(saved)


# ---- torch operators ----------------------------------------------------------------------------

def _torch():
    return pytest.importorskip("torch", reason="torch is not installed: the torch operators are not tested")


def _operands(torch, m=64, n=512, k=1024, device="meta"):
    kb, nb = -(-k // 128), -(-n // 128)
    return (torch.empty(m, k, dtype=torch.float8_e4m3fn, device=device),
            torch.empty(n, k, dtype=torch.float8_e4m3fn, device=device),
            torch.empty(m, kb, dtype=torch.float32, device=device),
            torch.empty(nb, kb, dtype=torch.float32, device=device))


def test_torch_schema_holds_the_mode_as_a_bool():
    """matmul and matmul_out take ``bool batch_invariant=False``; the grouped GEMMs and the MoE
    layer do not (their mode is phase 2)."""
    torch = _torch()
    import fp8gemm.torch_ops  # noqa: F401
    for name in ("matmul", "matmul_out"):
        schema = str(getattr(torch.ops.fp8gemm, name).default._schema)
        assert "bool batch_invariant=False" in schema, schema
    for name in ("grouped_matmul_contiguous", "grouped_matmul_contiguous_out", "grouped_matmul_masked",
                 "grouped_matmul_masked_out", "moe"):
        assert "batch_invariant" not in str(getattr(torch.ops.fp8gemm, name).default._schema)


def test_torch_fake_kernels_take_the_mode():
    torch = _torch()
    import fp8gemm.torch_ops  # noqa: F401
    a, b, sa, sb = _operands(torch)
    for flag in (False, True):
        c = torch.ops.fp8gemm.matmul(a, b, sa, sb, "float32", flag)
        assert c.shape == (64, 512) and c.dtype == torch.float32 and c.device.type == "meta"
        torch.ops.fp8gemm.matmul_out(a, b, sa, sb, torch.empty(64, 512, dtype=torch.bfloat16, device="meta"), flag)
    with pytest.raises(ValueError, match="out must have shape"):
        torch.ops.fp8gemm.matmul_out(a, b, sa, sb, torch.empty(64, 256, dtype=torch.bfloat16, device="meta"), True)


def _record_eager(monkeypatch, torch):
    """The operators' real kernels on CPU tensors, fp8gemm.matmul replaced by a recorder of the
    mode it was given."""
    from fp8gemm import api
    seen = []

    def matmul(a, b, a_scale, b_scale, *, out_dtype=None, out=None, batch_invariant=None, **kw):
        seen.append(batch_invariant)
        if out is not None:
            return out
        return torch.zeros(a.shape[0], b.shape[0], dtype={"float32": torch.float32}.get(out_dtype, torch.bfloat16))
    monkeypatch.setattr(api, "matmul", matmul)
    return seen


@pytest.mark.parametrize("flag,call,want", [(False, None, False), (True, None, True), (True, False, False),
                                              (False, True, True)])
def test_torch_wrappers_resolve_the_mode_before_the_operator(monkeypatch, switch, flag, call, want):
    """None: the process-wide mode; True / False override it; every plain-GEMM form (matmul,
    out=, the vLLM and DeepGEMM forms, DeepGEMM's accumulate form) hands the kernel a bool."""
    torch = _torch()
    import fp8gemm.torch_ops as ops
    seen = _record_eager(monkeypatch, torch)
    switch(flag)
    a, b, sa, sb = _operands(torch, device="cpu")
    d = torch.empty(64, 512, dtype=torch.bfloat16)
    ops.matmul(a, b, sa, sb, batch_invariant=call)
    ops.matmul(a, b, sa, sb, out=d, batch_invariant=call)
    ops.w8a8_block_fp8_matmul(a, b, sa, sb, [128, 128], batch_invariant=call)
    ops.fp8_gemm_nt((a, sa), (b, sb), d, batch_invariant=call)
    ops.fp8_gemm_nt((a, sa), (b, sb), d, torch.zeros(64, 512), batch_invariant=call)
    assert seen == [want] * 5 and all(type(s) is bool for s in seen)


def _compiled(torch, fn):
    """``fn`` under torch.compile(fullgraph=True), and the list that collects the batch_invariant
    argument of every fp8gemm::matmul call in each graph it traces."""
    found = []

    def backend(gm, example_inputs):
        found.extend(node.args[5] for node in gm.graph.nodes
                     if node.op == "call_function" and "fp8gemm.matmul" in str(node.target))
        return gm.forward
    return torch.compile(fn, fullgraph=True, backend=backend), found


def test_torch_compile_holds_the_mode_as_a_constant(switch):
    """The graph's operator call carries the resolved bool: the explicit argument, or the
    process-wide mode at trace time (a flip of the switch makes torch.compile trace again)."""
    torch = _torch()
    import fp8gemm.torch_ops as ops
    torch._dynamo.reset()
    args = _operands(torch)
    switch(False)
    explicit, found = _compiled(torch, lambda a, b, sa, sb: ops.matmul(a, b, sa, sb, batch_invariant=True))
    assert explicit(*args).shape == (64, 512) and found == [True]
    follow, found = _compiled(torch, lambda a, b, sa, sb: ops.matmul(a, b, sa, sb))
    follow(*args)
    switch(True)
    follow(*args)
    assert found == [False, True]


# ---- JAX ----------------------------------------------------------------------------------------

def _jax():
    return pytest.importorskip("jax", reason="jax not installed: the JAX functions are not tested")


def _jax_operands(m=8, n=256, k=512):
    import jax.numpy as jnp
    return (jnp.zeros((m, k), jnp.float8_e4m3fn), jnp.zeros((n, k), jnp.float8_e4m3fn),
            jnp.ones((m, k // 128), jnp.float32), jnp.ones((n // 128, k // 128), jnp.float32))


def test_jax_matmul_lowers_to_the_mode_target(switch):
    """True, or None under the process-wide mode: the mode's FFI target; False or the default:
    the plain one. vmap over the activations keeps the mode."""
    jax = _jax()
    import fp8gemm.jax as fj
    args = _jax_operands()
    bi = fj.MATMUL_TARGETS[True]

    def lowered(**kw):
        with jax.default_device(jax.devices("cpu")[0]):
            return jax.jit(lambda *x: fj.matmul(*x, **kw)).lower(*args).as_text()
    switch(False)
    assert bi in lowered(batch_invariant=True) and bi not in lowered() and fj.TARGET in lowered()
    switch(True)
    assert bi in lowered() and bi not in lowered(batch_invariant=False)
    a, b, sa, sb = args
    vm = jax.jit(jax.vmap(lambda a_, sa_: fj.matmul(a_, b, sa_, sb, batch_invariant=True)))
    assert bi in vm.lower(a[None].repeat(3, 0), sa[None].repeat(3, 0)).as_text()
    mesh = jax.sharding.Mesh(np.array(jax.devices("cpu")[:1]), ("t",))
    text = jax.jit(lambda *x: fj.sharded_matmul(*x, mesh=mesh, tokens="t", batch_invariant=True)).lower(*args).as_text()
    assert bi in text


def test_jax_mode_target_is_registered_and_refused_on_the_cpu():
    jax = _jax()
    import fp8gemm.jax as fj
    fj.register()
    from fp8gemm import xla_ffi
    for platform in ("cuda", "cpu"):
        assert (fj.MATMUL_TARGETS[True], platform) in xla_ffi._handlers
    with jax.default_device(jax.devices("cpu")[0]):
        with pytest.raises(Exception, match=f"{fj.MATMUL_TARGETS[True]} runs fp8gemm's kernels on an NVIDIA SM90"):
            jax.block_until_ready(jax.jit(lambda *x: fj.matmul(*x, batch_invariant=True))(*_jax_operands()))


def test_jax_plan_key_differs_by_mode(monkeypatch):
    """The FFI handler on the same buffers in both modes: plan_problem gets each mode once, the
    two plans sit under different keys, each mode's later calls reuse its own plan."""
    _jax()
    import fp8gemm.jax as fj
    from fp8gemm import plans
    made, ran = [], []

    class Runner:
        def __init__(self, flag):
            self.flag = flag

        def run(self, ptr, stream):
            ran.append(self.flag)

    def plan_problem(problem, config, ldc, aligned, batch_invariant=False):
        made.append(batch_invariant)
        return Runner(batch_invariant)
    monkeypatch.setattr(fj, "plan_problem", plan_problem)
    monkeypatch.setattr(fj, "validate_gemm", lambda *args: types.SimpleNamespace(n=256))
    buf = lambda ptr, dt, shape: types.SimpleNamespace(ptr=ptr, dtype=dt, shape=shape)
    call = types.SimpleNamespace(
        args=[buf(0x1000, "float8_e4m3fn", (8, 512)), buf(0x2000, "float8_e4m3fn", (256, 512)),
              buf(0x3000, "float32", (8, 4)), buf(0x4000, "float32", (2, 4))],
        rets=[buf(0x5000, "bfloat16", (8, 256))], device=lambda: 0, stream=lambda: 0)
    before = set(plans.PLANS)
    try:
        for flag in (False, True, False, True):
            fj._execute(call, flag)
        assert made == [False, True] and ran == [False, True, False, True]
        keys = set(plans.PLANS) - before
        assert len(keys) == 2 and {k[:2] for k in keys} == {("jax", False), ("jax", True)}
    finally:
        for k in set(plans.PLANS) - before:
            del plans.PLANS[k]


# ---- fp8gemm-bench --batch-invariant ------------------------------------------------------------

def test_bench_flag_parses_and_refuses_moe():
    assert cli.build_parser().parse_args(["--batch-invariant"]).batch_invariant is True
    assert cli.build_parser().parse_args([]).batch_invariant is False
    with pytest.raises(SystemExit, match="MoE layer has no batch-invariant mode"):
        cli.main(["--moe", "--batch-invariant"])


def _rows(deepgemm=True):
    """Fake timings: (M, default us, invariant us, DeepGEMM us)."""
    timing = ((1, 5.0, 6.0, 4.0), (16, 5.0, 7.5, 5.0), (128, 10.0, 11.0, 11.0), (4096, 100.0, 102.0, 98.0),
              (8192, 200.0, 200.0, 190.0))
    return [report.Row(m, 4096, 4096, "bfloat16", "v", ours_us=o, invariant_us=i,
                       deepgemm_us=d if deepgemm else None) for m, o, i, d in timing]


def test_bench_summary_of_the_mode():
    """Geomean of invariant / default and invariant / DeepGEMM, overall and per M band (the
    summary's bands), the most costly shape; printed under the peers' summary."""
    s = report.summarize(_rows())["batch_invariant"]
    d = s["vs_default"]
    assert d["shapes"] == 5
    assert d["geomean"] == pytest.approx((1.2 * 1.5 * 1.1 * 1.02 * 1.0) ** (1 / 5))
    assert d["per_m_band"] == pytest.approx({"M<=64": (1.2 * 1.5) ** 0.5, "64<M<=256": 1.1,
                                             "M>=1024": (1.02 * 1.0) ** 0.5})
    assert d["max"] == pytest.approx(1.5) and d["max_on"] == "16x4096x4096"
    g = s["vs_deepgemm"]
    assert g["geomean"] == pytest.approx((1.5 * 1.5 * 1.0 * (102 / 98) * (200 / 190)) ** (1 / 5))
    assert g["per_m_band"]["M<=64"] == pytest.approx(1.5)
    text = report.format_summary(report.summarize(_rows()))
    assert "batch-invariant mode" in text and "vs default" in text and "vs deepgemm" in text
    assert f"geomean {d['geomean']:.3f} over 5 shapes" in text and "most 1.500 at 16x4096x4096" in text
    assert "vs batch_invariant" not in text                         # not listed as a peer


def test_bench_summary_without_deepgemm_or_the_mode():
    s = report.summarize(_rows(deepgemm=False))
    assert list(s["batch_invariant"]) == ["vs_default"]
    assert "vs deepgemm" not in report.format_summary(s)
    plain = [report.Row(1, 4096, 4096, "bfloat16", "v", ours_us=5.0, cublaslt_us=6.0)]
    assert "batch_invariant" not in report.summarize(plain)
    assert "batch-invariant" not in report.format_summary(report.summarize(plain))
    assert "invariant" not in report.format_table(plain)


def test_bench_table_and_csv_carry_the_column(tmp_path):
    rows = _rows()
    table = report.format_table(rows)
    assert "invariant" in table.splitlines()[0] and len(table.splitlines()) == 2 + len(rows)
    assert " 102.0 " in table
    path = tmp_path / "r.csv"
    report.write_csv(rows, path)
    assert "invariant_us" in path.read_text().splitlines()[0].split(",")
    assert [r.invariant_us for r in report.read_csv(path)] == [r.invariant_us for r in rows]


# ---- GPU: rows compared bitwise through the frontends ---------------------------------------------

def _same_bits(small, large, rows, what):
    """numpy arrays of the same dtype: the rows of ``small`` are bitwise ``large[rows]``."""
    small, large = np.asarray(small), np.asarray(large)
    u = f"u{small.dtype.itemsize}"
    got, want = small.view(u), large[rows].view(u)
    bad = int((got != want).any(axis=1).sum())
    assert bad == 0, f"{what}: {bad} of {got.shape[0]} rows differ bitwise"
    assert np.isfinite(small.astype(np.float32)).all() if small.dtype.kind == "f" else True


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_torch_operator_rows_at_m1_and_m300(switch, dtype):
    """The torch wrapper (batch_invariant=True, then None under the process-wide mode) and the
    compiled operator: row r alone, and the first rows, bitwise those of the M = 300 call; the
    same bits as eager fp8gemm.matmul's mode."""
    torch = _torch()
    import fp8gemm.torch_ops as ops
    case = random_case(M_LARGE, 4096, 4096, seed=300)
    a, b, sa, sb = (x.clone() for x in case.as_torch())
    host = lambda t: t.view({2: torch.int16, 4: torch.int32}[t.element_size()]).cpu().numpy()
    large = ops.matmul(a, b, sa, sb, out_dtype=dtype, batch_invariant=True)
    eager = fp8gemm.matmul(a, b, sa, sb, out_dtype=dtype, batch_invariant=True)
    _same_bits(host(large), host(eager), slice(None), f"torch op against eager, {dtype}")
    assert bool(torch.isfinite(large).all())
    switch(True)
    compiled = torch.compile(lambda *x: ops.matmul(*x, out_dtype=dtype), fullgraph=True, backend="aot_eager")
    for r in (0, 1, 127, 128, 299):
        rows = slice(r, r + 1)
        one = ops.matmul(a[rows], b, sa[rows], sb, out_dtype=dtype)                  # None: the switch
        _same_bits(host(one), host(large), rows, f"torch op, row {r} alone, {dtype}")
        _same_bits(host(compiled(a[rows], b, sa[rows], sb)), host(large), rows, f"compiled, row {r}, {dtype}")
    d = torch.empty(64, 4096, dtype=large.dtype, device="cuda")
    ops.matmul(a[:64], b, sa[:64], sb, out=d, batch_invariant=True)
    _same_bits(host(d), host(large), slice(0, 64), f"matmul_out, M=64 of {M_LARGE}, {dtype}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_jax_function_rows_at_m1_and_m300(dtype):
    """fp8gemm.jax.matmul under jax.jit with batch_invariant=True: row r alone bitwise row r of the
    M = 300 call; vmap over the activations too; the same bits as eager fp8gemm.matmul's mode."""
    jax = _jax()
    import jax.numpy as jnp
    import fp8gemm.jax as fj
    case = random_case(M_LARGE, 1536, 7168, seed=301)
    a = jnp.asarray(case.a.get().view(np.uint8)).view(jnp.float8_e4m3fn)
    b = jnp.asarray(case.b.get().view(np.uint8)).view(jnp.float8_e4m3fn)
    sa, sb = jnp.asarray(case.a_scale.get()), jnp.asarray(case.b_scale.get())
    f = jax.jit(lambda *x: fj.matmul(*x, out_dtype=dtype, batch_invariant=True))
    large = np.asarray(f(a, b, sa, sb))
    eager = fp8gemm.matmul(a, b, sa, sb, out_dtype=dtype, batch_invariant=True)       # DLPack, no jit
    _same_bits(large, np.asarray(eager), slice(None), f"jax against eager, {dtype}")
    for r in (0, 1, 127, 128, 299):
        rows = slice(r, r + 1)
        _same_bits(np.asarray(f(a[rows], b, sa[rows], sb)), large, rows, f"jax, row {r} alone, {dtype}")
    stacked = jax.jit(jax.vmap(lambda a_, sa_: fj.matmul(a_, b, sa_, sb, out_dtype=dtype, batch_invariant=True)))
    out = np.asarray(stacked(a[:4].reshape(4, 1, -1), sa[:4].reshape(4, 1, -1))).reshape(4, -1)
    _same_bits(out, large, slice(0, 4), f"jax vmap of single rows, {dtype}")
