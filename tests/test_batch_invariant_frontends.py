"""Batch-invariant mode through the frontends (issue 57: the plain GEMM, the grouped GEMMs and
the MoE layer): the torch operators, the JAX functions, fp8gemm.moe_ep and ``fp8gemm-bench
--batch-invariant``. CPU: the operators' schema holds the mode as a bool, the fake kernels take it,
the wrappers resolve None to the process-wide mode before the operator (a compiled graph holds it
as a constant), the JAX functions lower to the mode's own targets and the handlers' plan keys
differ by mode, the handlers hand the mode to the planner / the eager layer, both moe_ep forms hand
it to each rank's layer, the bench flag parses and reaches the GEMM and the MoE runs, and their
summaries compute what they print on fake rows. GPU (gpu-marked): rows bitwise the same at M = 1 and inside M = 300 through the torch
operator and the jitted JAX function."""
import sys
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


MODE_OPS = ("matmul", "matmul_out", "grouped_matmul_contiguous", "grouped_matmul_contiguous_out",
            "grouped_matmul_masked", "grouped_matmul_masked_out", "moe")


def _mode_index(torch, name):
    """Where ``batch_invariant`` sits among the operator's arguments (its last one)."""
    args = [a.name for a in getattr(torch.ops.fp8gemm, name).default._schema.arguments]
    assert args[-1] == "batch_invariant", (name, args)
    return len(args) - 1


def test_torch_schema_holds_the_mode_as_a_bool():
    """Every GEMM operator and the MoE layer take ``bool batch_invariant=False`` (a plain bool,
    not ``bool?``: the wrappers resolve None), as their last argument; the quantizer does not."""
    torch = _torch()
    import fp8gemm.torch_ops  # noqa: F401
    for name in MODE_OPS:
        schema = str(getattr(torch.ops.fp8gemm, name).default._schema)
        assert "bool batch_invariant=False" in schema and "bool? batch_invariant" not in schema, schema
        _mode_index(torch, name)
    assert "batch_invariant" not in str(torch.ops.fp8gemm.quantize_per_token_group.default._schema)


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


def _compiled(torch, fn, op="matmul"):
    """``fn`` under torch.compile(fullgraph=True), and the list that collects the batch_invariant
    argument of every fp8gemm::``op`` call in each graph it traces."""
    found, index = [], _mode_index(torch, op)

    def backend(gm, example_inputs):
        found.extend(node.args[index] for node in gm.graph.nodes
                     if node.op == "call_function" and str(node.target).split(".")[:2] == ["fp8gemm", op])
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

# ---- torch: the grouped GEMMs and the MoE layer -------------------------------------------------

G, N, K, P = 4, 256, 512, 96                 # groups, N, K, rows of the contiguous form
T, H, I, E, TOPK = 16, 1024, 256, 8, 2       # the MoE layer's tokens, hidden, intermediate, experts, k


def _grouped_operands(torch, masked, device="meta"):
    """a, b, a_scale, b_scale and offsets [G + 1] (contiguous, P rows) or counts [G] (masked, G x
    24 rows)."""
    lead = (G, P // G) if masked else (P,)
    groups = (torch.full((G,), P // G, dtype=torch.int32, device=device) if masked else
              torch.arange(0, P + 1, P // G, dtype=torch.int32, device=device))
    return (torch.empty(lead + (K,), dtype=torch.float8_e4m3fn, device=device),
            torch.empty(G, N, K, dtype=torch.float8_e4m3fn, device=device),
            torch.empty(lead + (K // 128,), dtype=torch.float32, device=device),
            torch.empty(G, N // 128, K // 128, dtype=torch.float32, device=device), groups)


def _moe_operands(torch, device="meta"):
    """x [T, H] bf16 (the layer quantizes it), topk_ids, topk_weights, w1, w1_scale, w2, w2_scale."""
    return (torch.empty(T, H, dtype=torch.bfloat16, device=device),
            torch.zeros(T, TOPK, dtype=torch.int32, device=device),
            torch.ones(T, TOPK, dtype=torch.float32, device=device),
            torch.empty(E, 2 * I, H, dtype=torch.float8_e4m3fn, device=device),
            torch.empty(E, 2 * I // 128, H // 128, dtype=torch.float32, device=device),
            torch.empty(E, H, I, dtype=torch.float8_e4m3fn, device=device),
            torch.empty(E, H // 128, I // 128, dtype=torch.float32, device=device))


def test_torch_grouped_and_moe_fake_kernels_take_the_mode():
    """The fake kernels take the mode as their last argument, their shapes and rules unchanged."""
    torch = _torch()
    import fp8gemm.torch_ops  # noqa: F401
    ops = torch.ops.fp8gemm
    for flag in (False, True):
        args = _grouped_operands(torch, False)
        c = ops.grouped_matmul_contiguous(*args, "float32", True, flag)
        assert c.shape == (P, N) and c.dtype == torch.float32 and c.device.type == "meta"
        ops.grouped_matmul_contiguous_out(*args, torch.empty(P, N, dtype=torch.bfloat16, device="meta"), True, flag)
        with pytest.raises(ValueError, match="out must have shape"):
            ops.grouped_matmul_contiguous_out(*args, torch.empty(P, 2 * N, dtype=torch.bfloat16, device="meta"),
                                              True, flag)
        args = _grouped_operands(torch, True)
        c = ops.grouped_matmul_masked(*args, "bfloat16", None, flag)
        assert c.shape == (G, P // G, N) and c.dtype == torch.bfloat16
        ops.grouped_matmul_masked_out(*args, torch.empty(G, P // G, N, dtype=torch.float16, device="meta"), 64, flag)
        y = ops.moe(*_moe_operands(torch), None, 10.0, None, flag)
        assert y.shape == (T, H) and y.dtype == torch.bfloat16 and y.device.type == "meta"


def _record(monkeypatch, module, name, seen, result):
    """``module.name`` replaced by a recorder of the ``batch_invariant`` it was given, returning
    ``result(args, kwargs)``."""
    def fn(*args, batch_invariant="missing", **kw):
        seen.append((name, batch_invariant))
        return result(args, kw)
    monkeypatch.setattr(module, name, fn)


def _record_grouped_and_moe(monkeypatch, torch):
    """The grouped GEMMs' and the MoE layer's eager functions replaced by recorders (the operators'
    real kernels import them at call time)."""
    from fp8gemm import grouped, moe_layer
    seen = []

    def gemm_result(args, kw):
        if kw.get("out") is not None:
            return kw["out"]
        a = args[0]
        return torch.zeros(a.shape[:-1] + (args[1].shape[1],), dtype=torch.bfloat16)
    for name in ("grouped_matmul_contiguous", "grouped_matmul_masked"):
        _record(monkeypatch, grouped, name, seen, gemm_result)
    _record(monkeypatch, moe_layer, "moe", seen, lambda args, kw: torch.zeros(args[0].shape, dtype=torch.bfloat16))
    return seen


@pytest.mark.parametrize("flag,call,want", [(False, None, False), (True, None, True), (True, False, False),
                                              (False, True, True)])
def test_torch_grouped_and_moe_wrappers_resolve_the_mode(monkeypatch, switch, flag, call, want):
    """The grouped GEMM and MoE wrappers (fresh and ``out=``) hand the eager functions the resolved
    bool; DeepGEMM's grouped forms, which keep DeepGEMM's arguments, the process-wide mode."""
    torch = _torch()
    import fp8gemm.torch_ops as ops
    seen = _record_grouped_and_moe(monkeypatch, torch)
    switch(flag)
    a, b, sa, sb, offsets = _grouped_operands(torch, False, device="cpu")
    ops.grouped_matmul_contiguous(a, b, sa, sb, offsets, batch_invariant=call)
    ops.grouped_matmul_contiguous(a, b, sa, sb, offsets, out=torch.empty(P, N, dtype=torch.bfloat16),
                                  batch_invariant=call)
    ma, mb, msa, msb, counts = _grouped_operands(torch, True, device="cpu")
    ops.grouped_matmul_masked(ma, mb, msa, msb, counts, batch_invariant=call)
    ops.grouped_matmul_masked(ma, mb, msa, msb, counts, out=torch.empty(G, P // G, N, dtype=torch.bfloat16),
                              batch_invariant=call)
    ops.moe(*_moe_operands(torch, device="cpu"), batch_invariant=call)
    assert seen == [("grouped_matmul_contiguous", want)] * 2 + [("grouped_matmul_masked", want)] * 2 + \
        [("moe", want)]
    assert all(type(mode) is bool for _, mode in seen)
    del seen[:]
    m_indices = torch.repeat_interleave(torch.arange(G, dtype=torch.int32), P // G)
    ops.m_grouped_fp8_gemm_nt_contiguous((a, sa), (b, sb), torch.empty(P, N, dtype=torch.bfloat16), m_indices)
    ops.m_grouped_fp8_gemm_nt_masked((ma, msa), (mb, msb), torch.empty(G, P // G, N, dtype=torch.bfloat16), counts,
                                     P // G)
    assert seen == [("grouped_matmul_contiguous", flag), ("grouped_matmul_masked", flag)]


@pytest.mark.parametrize("op", ["grouped_matmul_contiguous", "grouped_matmul_masked", "moe"])
def test_torch_compile_holds_the_grouped_and_moe_mode_as_a_constant(switch, op):
    """As for matmul: the compiled graph's grouped / MoE operator call carries the explicit bool,
    or the process-wide mode at trace time (a flip of the switch traces again)."""
    torch = _torch()
    import fp8gemm.torch_ops as ops
    torch._dynamo.reset()
    args = _moe_operands(torch) if op == "moe" else _grouped_operands(torch, op.endswith("masked"))
    wrapper = getattr(ops, op)
    switch(False)
    explicit, found = _compiled(torch, lambda *x: wrapper(*x, batch_invariant=True), op)
    explicit(*args)
    assert found == [True]
    follow, found = _compiled(torch, lambda *x: wrapper(*x), op)
    assert follow(*args).device.type == "meta"
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


def _buf(ptr, dtype, shape):
    return types.SimpleNamespace(ptr=ptr, dtype=dtype, shape=shape)


def _ffi_call(*args, ret=None):
    """A stand-in for xla_ffi.Call: the argument buffers, one result, device 0, stream 0."""
    return types.SimpleNamespace(args=list(args), rets=[ret], device=lambda: 0, stream=lambda: 0)


def _plans_by_mode(execute, tag):
    """``execute(flag)`` on the same buffers in both modes, twice each, through a planner stand-in
    that the caller hands out as ``planner``: each mode is planned once, the two plans sit under
    keys that differ by mode (``tag`` + the mode first), each mode's later calls reuse its own."""
    from fp8gemm import plans
    made, ran = [], []

    class Runner:
        def __init__(self, flag):
            self.flag = flag

        def run(self, ptr, stream):
            ran.append(self.flag)

    def planner(flag):
        made.append(flag)
        return Runner(flag)
    before = set(plans.PLANS)
    try:
        for flag in (False, True, False, True):
            execute(flag, planner)
        assert made == [False, True] and ran == [False, True, False, True]
        keys = set(plans.PLANS) - before
        n = len(tag) + 1
        assert len(keys) == 2 and {k[:n] for k in keys} == {tag + (False,), tag + (True,)}
    finally:
        for k in set(plans.PLANS) - before:
            del plans.PLANS[k]


def test_jax_plan_key_differs_by_mode(monkeypatch):
    """matmul's FFI handler: plan_problem gets each mode once, plans keyed by mode."""
    _jax()
    import fp8gemm.jax as fj
    monkeypatch.setattr(fj, "validate_gemm", lambda *args: types.SimpleNamespace(n=256))
    call = _ffi_call(_buf(0x1000, "float8_e4m3fn", (8, 512)), _buf(0x2000, "float8_e4m3fn", (256, 512)),
                     _buf(0x3000, "float32", (8, 4)), _buf(0x4000, "float32", (2, 4)),
                     ret=_buf(0x5000, "bfloat16", (8, 256)))

    def execute(flag, planner):
        monkeypatch.setattr(fj, "plan_problem", lambda problem, config, ldc, aligned, batch_invariant=False:
                            planner(batch_invariant))
        fj._execute(call, flag)
    _plans_by_mode(execute, ("jax",))


@pytest.mark.parametrize("masked", [False, True])
def test_jax_grouped_plan_key_differs_by_mode(monkeypatch, masked):
    """The grouped GEMMs' FFI handler: plan_grouped_problem gets each mode once (no config, so the
    mode's tile), plans keyed by layout and mode."""
    _jax()
    import fp8gemm.jax as fj
    from fp8gemm import grouped
    gp = types.SimpleNamespace(gemm=types.SimpleNamespace(m=96, n=N))
    monkeypatch.setattr(fj, "validate_grouped", lambda *args: gp)
    lead = (G, P // G) if masked else (P,)
    call = _ffi_call(_buf(0x1000, "float8_e4m3fn", lead + (K,)), _buf(0x2000, "float8_e4m3fn", (G, N, K)),
                     _buf(0x3000, "float32", lead + (K // 128,)), _buf(0x4000, "float32", (G, N // 128, K // 128)),
                     _buf(0x5000, "int32", (G if masked else G + 1,)), ret=_buf(0x6000, "bfloat16", lead + (N,)))

    def execute(flag, planner):
        def plan(gp_, expected_rows, precise_fp32, wg3, ldc, aligned, config=None, batch_invariant=False):
            assert gp_ is gp and config is None and wg3 is None and ldc == N
            return planner(batch_invariant)
        monkeypatch.setattr(grouped, "plan_grouped_problem", plan)
        fj._execute_grouped(call, masked, flag)
    _plans_by_mode(execute, ("jax-grouped", masked))


def test_jax_moe_handler_hands_the_mode_to_the_layer(monkeypatch):
    """The MoE target's handler runs the eager layer in its target's mode (CuPy stood in for)."""
    _jax()
    import contextlib

    import fp8gemm.jax as fj
    from fp8gemm import moe_layer
    seen = []
    fake = types.ModuleType("cupy")
    fake.cuda = types.SimpleNamespace(Device=lambda *a: contextlib.nullcontext(),
                                      ExternalStream=lambda *a: contextlib.nullcontext())
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(fj, "_cupy_view", lambda buf, device: buf)
    _record(monkeypatch, moe_layer, "moe", seen, lambda args, kw: seen.append(("limit", kw["limit"])))
    call = _ffi_call(*(_buf(0x1000 * i, "float32", (T, 1)) for i in range(1, 9)), ret=_buf(0x9000, "bfloat16", (T, H)))
    for flag in (False, True):
        fj._execute_moe(call, 7.0, flag)
    assert seen == [("moe", False), ("limit", 7.0), ("moe", True), ("limit", 7.0)]


def _jax_grouped_operands(masked):
    import jax
    import jax.numpy as jnp
    lead = (G, P // G) if masked else (P,)
    return (jax.ShapeDtypeStruct(lead + (K,), jnp.float8_e4m3fn), jax.ShapeDtypeStruct((G, N, K), jnp.float8_e4m3fn),
            jax.ShapeDtypeStruct(lead + (K // 128,), jnp.float32),
            jax.ShapeDtypeStruct((G, N // 128, K // 128), jnp.float32),
            jax.ShapeDtypeStruct((G if masked else G + 1,), jnp.int32))


def _jax_moe_operands():
    import jax
    import jax.numpy as jnp
    return (jax.ShapeDtypeStruct((T, H), jnp.float8_e4m3fn), jax.ShapeDtypeStruct((T, TOPK), jnp.int32),
            jax.ShapeDtypeStruct((T, TOPK), jnp.float32), jax.ShapeDtypeStruct((E, 2 * I, H), jnp.float8_e4m3fn),
            jax.ShapeDtypeStruct((E, 2 * I // 128, H // 128), jnp.float32),
            jax.ShapeDtypeStruct((E, H, I), jnp.float8_e4m3fn),
            jax.ShapeDtypeStruct((E, H // 128, I // 128), jnp.float32),
            jax.ShapeDtypeStruct((T, H // 128), jnp.float32))


def _targets(jax, f, args):
    """The FFI targets that ``f`` lowers to under jax.jit (on the CPU), in order. A fresh function
    each time: jax.jit keeps the trace of a function it has seen, and with it the mode it read."""
    import re
    with jax.default_device(jax.devices("cpu")[0]):
        text = jax.jit(lambda *x: f(*x)).lower(*args).as_text()
    return re.findall(r"custom_call @(fp8gemm_\w+)\(", text)


@pytest.mark.parametrize("masked", [False, True])
def test_jax_grouped_lowers_to_the_mode_target(switch, masked):
    """True, or None under the process-wide mode: the layout's ``_batch_invariant`` target; False,
    or None with the mode off: the plain one (as for matmul)."""
    jax = _jax()
    import fp8gemm.jax as fj
    f = fj.grouped_matmul_masked if masked else fj.grouped_matmul_contiguous
    plain, bi = fj.GROUPED_TARGETS[masked], fj.GROUPED_INVARIANT_TARGETS[masked]
    assert plain != bi and fj.grouped_target(masked, True) == bi and fj.grouped_target(masked) == plain
    args = _jax_grouped_operands(masked)
    switch(False)
    assert _targets(jax, lambda *x: f(*x, batch_invariant=True), args) == [bi]
    assert _targets(jax, f, args) == [plain]
    switch(True)
    assert _targets(jax, f, args) == [bi]
    assert _targets(jax, lambda *x: f(*x, batch_invariant=False), args) == [plain]
    assert jax.eval_shape(lambda *x: f(*x, out_dtype="float32", batch_invariant=True), *args).shape == \
        ((G, P // G, N) if masked else (P, N))


def test_jax_moe_lowers_to_the_mode_target(switch):
    """fp8gemm.jax.moe: its clamp's target with the mode's suffix (True, or None under the
    switch), the plain one otherwise; both registered on first use."""
    jax = _jax()
    import fp8gemm.jax as fj
    from fp8gemm import xla_ffi
    *args, xs = _jax_moe_operands()
    layer = lambda **kw: (lambda *x: fj.moe(*x[:7], x_scale=x[7], **kw))
    plain, bi = fj.moe_target(10.0), fj.moe_target(10.0, True)
    assert plain != bi and bi.endswith("_batch_invariant") and fj.moe_target(None, True) != bi
    switch(False)
    assert _targets(jax, layer(batch_invariant=True), (*args, xs)) == [bi]
    assert _targets(jax, layer(), (*args, xs)) == [plain]
    switch(True)
    assert _targets(jax, layer(), (*args, xs)) == [bi]
    assert _targets(jax, layer(batch_invariant=False, limit=None), (*args, xs)) == [fj.moe_target(None)]
    for target in (plain, bi):
        assert (target, "cuda") in xla_ffi._handlers


def _ep_mesh(jax):
    return jax.sharding.Mesh(np.array(jax.devices("cpu")[:1]), ("ep",))


def test_jax_moe_ep_passes_the_mode_to_each_layer(switch):
    """fp8gemm.jax.moe_ep: each device's layer lowers to the mode's MoE target (explicit, or the
    process-wide mode when traced); a local_layer is called as before, without the mode."""
    jax = _jax()
    import fp8gemm.jax as fj
    *args, xs = _jax_moe_operands()
    mesh = _ep_mesh(jax)
    ep = lambda **kw: (lambda *x: fj.moe_ep(*x[:7], mesh=mesh, axis="ep", x_scale=x[7], **kw))
    switch(False)
    assert _targets(jax, ep(batch_invariant=True), (*args, xs)) == [fj.moe_target(10.0, True)]
    assert _targets(jax, ep(), (*args, xs)) == [fj.moe_target(10.0)]
    switch(True)
    assert _targets(jax, ep(), (*args, xs)) == [fj.moe_target(10.0, True)]
    called = []

    def stand_in(rows, ids, wts, w1, w1s, w2, w2s, *, x_scale, limit):
        called.append(limit)
        return jax.numpy.zeros((rows.shape[0], H), jax.numpy.bfloat16)
    assert _targets(jax, ep(batch_invariant=True, local_layer=stand_in), (*args, xs)) == []
    assert called == [10.0]


# ---- fp8gemm.moe_ep (torch.distributed) ---------------------------------------------------------

def test_moe_ep_passes_the_mode_to_the_rank_layer(monkeypatch):
    """fp8gemm.moe_ep (one rank, its collectives stood in for) calls fp8gemm.moe with the
    ``batch_invariant`` it was given (None: the layer reads the process-wide mode); a local_layer
    is called as before, without it."""
    torch = _torch()
    import torch.distributed as dist
    from fp8gemm import moe_layer
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 1)
    monkeypatch.setattr(dist, "all_to_all_single", lambda out, inp, group=None: out.copy_(inp))
    seen = []
    _record(monkeypatch, moe_layer, "moe", seen,
            lambda args, kw: torch.zeros(args[0].shape[0], H, dtype=torch.bfloat16))
    x, ids, wts, w1, w1s, w2, w2s = _moe_operands(torch, device="cpu")
    xq, xs = torch.zeros(T, H, dtype=torch.uint8), torch.ones(T, H // 128)
    for flag in (None, True, False):
        out = fp8gemm.moe_ep(xq, ids, wts, w1, w1s, w2, w2s, x_scale=xs, batch_invariant=flag)
        assert out.shape == (T, H) and out.dtype == torch.bfloat16
    assert seen == [("moe", None), ("moe", True), ("moe", False)]
    stand_in = lambda rows, *a, x_scale, limit: torch.zeros(rows.shape[0], H, dtype=torch.bfloat16)
    fp8gemm.moe_ep(xq, ids, wts, w1, w1s, w2, w2s, x_scale=xs, batch_invariant=True, local_layer=stand_in)
    assert len(seen) == 3


# ---- fp8gemm-bench --batch-invariant ------------------------------------------------------------

def test_bench_flag_parses_and_reaches_the_moe_run(monkeypatch):
    assert cli.build_parser().parse_args(["--batch-invariant"]).batch_invariant is True
    assert cli.build_parser().parse_args([]).batch_invariant is False
    seen = []
    monkeypatch.setattr(cli, "require_gpu", lambda tool: None)
    monkeypatch.setattr(cli, "run_moe", lambda args, argv: seen.append((args.moe, args.batch_invariant)) or 0)
    assert cli.main(["--moe", "--batch-invariant"]) == 0 and cli.main(["--moe"]) == 0
    assert seen == [(True, True), (True, False)]
    assert "fp8gemm.moe(batch_invariant=True)" in " ".join(cli.build_parser().format_help().split())


# Fake MoE rows: (tokens, default layer us, unfused chain us, batch-invariant us).
MOE_TIMING = ((1, 10.0, 10.0, 12.0), (16, 20.0, 20.0, 30.0), (128, 40.0, 50.0, 44.0), (1024, 400.0, 500.0, 440.0),
              (8192, 1000.0, 1000.0, 1000.0), (4096, 900.0, 900.0, None))


def _moe_rows(invariant=True, model="flash"):
    from fp8gemm.bench import moe
    return [moe.MoeRow(model, "uniform", t, 6 * t, 6, 6, layer_us=lay, chain_us=ch, fused_us=lay, fused_gain=1.0,
                       gemms_us=lay / 2, glue_us=ch - lay / 2, bound_us=lay / 2, max_gain=2.0,
                       invariant_us=inv if invariant else None)
            for t, lay, ch, inv in MOE_TIMING]


def test_bench_moe_summary_of_the_mode():
    """Geomean of the batch-invariant layer's time / the default layer's and / the chain's, overall
    and per token range (<= 64, >= 1024), the most costly row; a row without the mode's time is
    left out; printed as the GEMM trace's summary prints it."""
    from fp8gemm.bench import moe
    s = moe.summarize(_moe_rows())["batch_invariant"]
    d = s["vs_default"]
    assert d["shapes"] == 5
    assert d["geomean"] == pytest.approx((1.2 * 1.5 * 1.1 * 1.1 * 1.0) ** (1 / 5))
    assert d["per_token_range"] == pytest.approx({"tokens<=64": (1.2 * 1.5) ** 0.5, "tokens>=1024": 1.1 ** 0.5})
    assert d["max"] == pytest.approx(1.5) and d["max_on"] == "flash uniform T=16"
    c = s["vs_chain"]
    assert c["geomean"] == pytest.approx((1.2 * 1.5 * 0.88 * 0.88 * 1.0) ** (1 / 5))
    assert c["per_token_range"]["tokens>=1024"] == pytest.approx((0.88 * 1.0) ** 0.5)
    text = moe.format_summary(moe.summarize(_moe_rows()))
    assert "batch-invariant layer (time ratio = its time / the other's; > 1 means the mode is slower)" in text
    assert (f"vs default   geomean {d['geomean']:.3f} over 5 rows (tokens<=64: {(1.2 * 1.5) ** 0.5:.3f}, "
            f"tokens>=1024: {1.1 ** 0.5:.3f}); most 1.500 at flash uniform T=16") in text
    assert "vs chain" in text
    plain = moe.summarize(_moe_rows(invariant=False))
    assert "batch_invariant" not in plain and "batch-invariant" not in moe.format_summary(plain)


def test_bench_moe_table_and_csv_carry_the_column(tmp_path):
    from fp8gemm.bench import moe
    rows = _moe_rows()
    table = moe.format_table(rows).splitlines()
    head = table[0].split()
    assert head[head.index("layer_us") + 1] == "invariant" and len(table) == 1 + len(rows)
    assert table[3].split()[6] == "44.0"                                   # T=128: after layer_us 40.0
    assert table[6].split()[6] == "900.0"                                  # T=4096, not timed: blank
    assert "invariant" not in moe.format_table(_moe_rows(invariant=False))
    moe.write_csv(rows, tmp_path / "m.csv")
    assert "invariant_us" in (tmp_path / "m.csv").read_text().splitlines()[0].split(",")
    assert [r.invariant_us for r in moe.read_csv(tmp_path / "m.csv")] == [r.invariant_us for r in rows]


def test_bench_moe_compares_the_mode_with_the_chain():
    """The batch-invariant layer must repeat bit for bit and stay within the layer bound of the
    unfused chain; last-bit differences from the chain give no note."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    from fp8gemm.bench import moe
    a = np.random.default_rng(0).standard_normal((8, 64)).astype(ml_dtypes.bfloat16)
    one_ulp = a.copy()
    one_ulp.view(np.uint16)[0, :3] += 1
    far = (a.astype(np.float32) * 1.5).astype(ml_dtypes.bfloat16)
    assert moe.compare_invariant(a, a.copy(), a) == [] and moe.compare_invariant(one_ulp, one_ulp, a) == []
    assert ["not reproducible" in n for n in moe.compare_invariant(a, one_ulp, a)] == [True]
    assert ["WRONG" in n and "from the unfused chain" in n for n in moe.compare_invariant(far, far, a)] == [True]


@pytest.mark.parametrize("flag", [True, False])
def test_bench_moe_run_times_the_mode_when_asked(monkeypatch, tmp_path, capsys, flag):
    """--moe --batch-invariant reaches run_model, and its table, summary, CSV and JSON carry the
    mode (GPU parts stood in for)."""
    cupy = pytest.importorskip("cupy")
    from fp8gemm.bench import moe, timing
    calls = []

    def run_model(name, e_h_i, tokens, routings, flush, bw, peak, iters, seed, progress=None, deepgemm=None,
                  crashed=None, batch_invariant=False):
        calls.append((name, batch_invariant))
        return _moe_rows(batch_invariant, name)

    monkeypatch.setattr(moe, "run_model", run_model)
    monkeypatch.setattr(cli, "require_gpu", lambda tool: None)
    monkeypatch.setattr(cli, "measure_ceilings",
                        lambda flush, iters: {"copy_bandwidth_bytes_per_s": 3e12, "fp8_dense_peak_flops": 1e15})
    monkeypatch.setattr(cli, "environment", lambda: {"gpu": "stand-in"})
    monkeypatch.setattr(cli, "provenance", lambda: {})
    monkeypatch.setattr(timing, "L2Flush", lambda: None)
    monkeypatch.setattr(cupy, "get_default_memory_pool", lambda: types.SimpleNamespace(free_all_blocks=lambda: None))
    path = tmp_path / "moe.csv"
    argv = ["--moe", "--peers", "none", "--moe-models", "pro", "--csv", str(path)] + (["--batch-invariant"] * flag)
    assert cli.main(argv) == 0
    assert calls == [("pro", flag)]
    out = capsys.readouterr().out
    assert ("invariant" in out.splitlines()[0]) is flag and ("batch-invariant layer" in out) is flag
    assert ("invariant_us" in path.read_text().splitlines()[0]) and \
        (moe.read_csv(path)[0].invariant_us == (12.0 if flag else None))
    import json
    doc = json.loads(path.with_suffix(".json").read_text())
    assert doc["batch_invariant"] is flag and ("batch_invariant" in doc["summary"]) is flag
    if flag:
        assert doc["summary"]["batch_invariant"]["vs_default"]["max_on"] == "pro uniform T=16"


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
