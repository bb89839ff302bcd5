"""CPU: the sanitizer runner (tools/sanitize_all.py) reads compute-sanitizer's summaries and exit
codes right and fails on anything but a clean run; tools/sanitize.py's case list selects and
shards as documented, every forced configuration takes its shape, every kernel variant has a case,
and the general kernel's cases reach every mode its plan can pick (template arguments from the
real plan, its GPU calls stubbed)."""
import importlib.util
import os
import stat
import sys
import types
from pathlib import Path

import pytest

from fp8gemm.dispatch import GemmDesc, General, grouped, selector
from fp8gemm.dispatch import general as g
from fp8gemm.dtypes import OUT_BYTES

TOOLS = Path(__file__).resolve().parent.parent / "tools"


def _load(name):
    spec = importlib.util.spec_from_file_location(f"tools_{name}", TOOLS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod         # dataclasses look their module up while the class is made
    spec.loader.exec_module(mod)
    return mod


sanitize = _load("sanitize")
runner = _load("sanitize_all")

MEMCHECK_CLEAN = """========= COMPUTE-SANITIZER
ok   M=200 N=300 K=1040 bfloat16 As k-major  two accumulators  err 1.2e-03
sanitize.py: 1 ok, 0 bad
========= ERROR SUMMARY: 0 errors
"""
MEMCHECK_ERROR = """========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 4 bytes
=========     at void fp8gemm::sm90_fp8_gemm_general_kernel<16, 3, 1, 1, false, true, false, false, 2, 16, 0>(...)+0x1a0
ok   M=3 N=1000 K=2064 float16
========= ERROR SUMMARY: 1 error
"""
# issue 58's report, as racecheck printed it
RACECHECK_HAZARD = """========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at void fp8gemm::sm90_fp8_gemm_general_kernel<16, 3, 1, 1, false, true, false, false, 2, 16, 0>(...)+0x25f0
=========     and Read access at void fp8gemm::sm90_fp8_gemm_general_kernel<16, 3, 1, 1, false, true, false, false, 2, 16, 0>(...)+0x2660 [172 hazards]
ok   M=3 N=1000 K=2064 float16
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""
RACECHECK_WARNING = """========= Warning: Race reported between Read access at f+0x10
=========     and Write access at f+0x20 [3 hazards]
========= RACECHECK SUMMARY: 1 hazard displayed (0 errors, 1 warning)
"""
RACECHECK_CLEAN = "ok   x\nok   y\n========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n"
KILLED = "========= COMPUTE-SANITIZER\nok   x\n"


def test_parse_error_summaries():
    s = runner.parse_log(MEMCHECK_CLEAN)
    assert (s.errors, s.hazards, s.ok_cases, s.bad_cases) == (0, None, 1, 0)
    s = runner.parse_log(MEMCHECK_ERROR)
    assert (s.errors, s.ok_cases) == (1, 1)
    assert s.first_report.startswith("Invalid __global__ read")
    assert runner.parse_log("========= ERROR SUMMARY: 12 errors\n").errors == 12
    assert runner.parse_log(KILLED).errors is None


def test_parse_racecheck_summaries():
    s = runner.parse_log(RACECHECK_HAZARD)
    assert (s.hazards, s.errors, s.warnings) == (1, 1, 0)
    assert s.first_report.startswith("Error: Race reported between Write access")
    s = runner.parse_log(RACECHECK_WARNING)
    assert (s.hazards, s.errors, s.warnings) == (1, 0, 1)
    s = runner.parse_log(RACECHECK_CLEAN)
    assert (s.hazards, s.errors, s.warnings, s.ok_cases) == (0, 0, 0, 2)
    # a version that also prints an ERROR SUMMARY: that count is the errors
    s = runner.parse_log(RACECHECK_HAZARD + "========= ERROR SUMMARY: 1 error\n")
    assert (s.hazards, s.errors) == (1, 1)


def _result(text, rc, name="t.0.log"):
    return runner.ProcResult(name, rc, 1.0, runner.parse_log(text))


@pytest.mark.parametrize("tool,text,rc,passed", [
    ("memcheck", MEMCHECK_CLEAN, 0, True),
    ("memcheck", MEMCHECK_ERROR, runner.ERROR_EXIT, False),
    ("racecheck", RACECHECK_CLEAN, 0, True),
    ("racecheck", RACECHECK_HAZARD, runner.ERROR_EXIT, False),
    ("racecheck", RACECHECK_WARNING, 0, False),             # a warning is a hazard too
    ("memcheck", KILLED, -9, False),                        # died before its summary
    ("memcheck", MEMCHECK_CLEAN, None, False),              # timed out
    ("memcheck", MEMCHECK_CLEAN, -11, False),               # a crash after the summary
    ("memcheck", MEMCHECK_CLEAN, 1, False),                 # an exception outside the cases
    ("memcheck", MEMCHECK_CLEAN.replace("ok   M=200", "BAD  M=200"), 1, False),   # a wrong output
    ("plain", "ok   x\n", 0, True),
    ("plain", "BAD  x\n", 1, False),
])
def test_verdict(tool, text, rc, passed):
    ok, line = runner.verdict(tool, [_result(text, rc)])
    assert ok is passed
    assert line.startswith(tool) and ("PASS" if passed else "FAIL") in line


def test_verdict_adds_shards_and_names_the_report():
    ok, line = runner.verdict("racecheck", [_result(RACECHECK_CLEAN, 0, "racecheck.0.log"),
                                            _result(RACECHECK_HAZARD, runner.ERROR_EXIT, "racecheck.1.log")])
    assert not ok
    assert "1 hazards (1 errors, 0 warnings), 3 cases ok, 0 bad, 2 processes" in line
    assert "racecheck.1.log: Error: Race reported" in line


def test_commands_shard_every_tool():
    args = runner.parse_args(["/tmp/logs", "--only", "split,gemv", "--shards", "3", "--racecheck-shards", "5",
                              "--jobs", "4", "--racecheck-report", "all"])
    cmds = runner.commands(args)
    counts = {t: sum(c[0] == t for c in cmds) for t in ("plain",) + runner.TOOLS}
    assert counts == {"plain": 4, "memcheck": 3, "racecheck": 5, "synccheck": 3, "initcheck": 3}
    race = [c[2] for c in cmds if c[0] == "racecheck"]
    assert all(c[:3] == ["compute-sanitizer", "--tool", "racecheck"] and "--racecheck-report" in c for c in race)
    assert [c[c.index("--shard") + 1] for c in race] == [f"{i}/5" for i in range(5)]
    assert all(c[c.index("--only") + 1] == "split,gemv" for _, _, c in cmds)
    assert runner.commands(runner.parse_args(["/tmp/logs", "--no-plain", "--tools", "initcheck"]))[0][0] == "initcheck"
    with pytest.raises(SystemExit):
        runner.parse_args(["/tmp/logs", "--tools", "leakcheck"])


def test_main_with_a_stand_in_sanitizer(tmp_path, capsys):
    """The whole runner with a stand-in for compute-sanitizer that prints a canned log per tool
    (racecheck's with issue 58's hazard): one line per tool, the logs and summary in LOGDIR, exit 1."""
    fake = tmp_path / "fake-sanitizer"
    fake.write_text(f"#!{sys.executable}\nimport sys\n"
                    f"tool = sys.argv[sys.argv.index('--tool') + 1]\n"
                    f"print({RACECHECK_HAZARD!r} if tool == 'racecheck' else {MEMCHECK_CLEAN!r})\n"
                    f"sys.exit({runner.ERROR_EXIT} if tool == 'racecheck' else 0)\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    logs = tmp_path / "logs"
    rc = runner.main([str(logs), "--no-plain", "--sanitizer", str(fake), "--shards", "2", "--racecheck-shards", "2"])
    out = capsys.readouterr().out.splitlines()
    assert rc == 1
    assert [line.split()[:2] for line in out[:4]] == [["memcheck", "PASS"], ["racecheck", "FAIL"],
                                                      ["synccheck", "PASS"], ["initcheck", "PASS"]]
    assert out[-1].startswith("sanitize_all: FAIL")
    assert sorted(os.listdir(logs)) == sorted([f"{t}.{i}.log" for t in runner.TOOLS for i in range(2)]
                                              + ["summary.txt"])
    rc = runner.main([str(logs), "--no-plain", "--sanitizer", str(fake), "--tools", "memcheck,initcheck"])
    assert rc == 0


# ---- the case list -----------------------------------------------------------------------------

def test_selection_and_shards():
    every = sanitize.select([])
    assert len({it.label for it in every}) == len(every), "two cases with one label"
    assert {t for it in every for t in it.tags} <= set(sanitize.TAGS)
    split = sanitize.select(["--only", "split"])
    assert split and all("split" in it.tags for it in split)
    assert any("issue 58" in it.label for it in split)
    shards = [sanitize.select(["--shard", f"{i}/3"]) for i in range(3)]
    assert sorted(it.label for s in shards for it in s) == sorted(it.label for it in every)
    assert {it.label for it in sanitize.select(["--gemv-only"])} == \
        {it.label for it in every if "gemv" in it.tags}
    with pytest.raises(SystemExit):
        sanitize.select(["--only", "nonsense"])
    with pytest.raises(SystemExit):
        sanitize.select(["--shard", "3/3"])


def test_list_needs_no_gpu(capsys):
    assert sanitize.main(["--list", "--only", "quantizer"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(sanitize.QUANTIZER_ACT) + len(sanitize.QUANTIZER_WEIGHT)


def test_every_forced_config_takes_its_shape():
    for c in sanitize.GEMMS:
        if c.config is not None:
            desc = GemmDesc(c.m, c.n, c.k, c.dt)
            assert c.config.is_valid(desc), c.label()
    for layout, sizes, max_rows, n, k, dt, config, what in sanitize.GROUPED:
        if config not in (None, True):
            rows = sum(sizes) if layout == "contiguous" else len(sizes) * max_rows
            grouped.check_grouped_config(config, dt, len(sizes), True, GemmDesc(max(rows, 1), n, k, dt))


def test_every_variant_has_cases():
    """A variant that lands in the dispatcher's table of variants needs sanitizer cases."""
    forced = {type(c.config) for c in sanitize.GEMMS if c.config is not None}
    forced |= {type(c[6]) for c in sanitize.GROUPED if c[6] not in (None, True)}
    missing = [name for name, cls in selector.VARIANTS.items() if cls not in forced]
    assert not missing, f"no tools/sanitize.py case forces {missing}"
    assert any(c[6] is True for c in sanitize.GROUPED), "no grouped wg3 case (192-row tiles)"
    assert any(type(c[6]) is General for c in sanitize.GROUPED), "no forced grouped General case"
    assert {m[3] for m in sanitize.MOE} == {False, True}


class _Reached(Exception):
    """Raised by the stubbed compiler with the template arguments the plan asked for."""


def _general_template_args(case, monkeypatch):
    """The template arguments General.plan asks the compiler for on this case's problem (pointers
    16-byte aligned, As row-major or M-major as the case passes it), on 132 SMs."""
    from fp8gemm import compiler, tma
    kb = -(-case.k // 128)
    ld = max(4, -(-case.m // 4) * 4)
    sa_m, sa_k = (1, ld) if case.as_layout == "m" else (kb, 1)
    p = types.SimpleNamespace(m=case.m, n=case.n, k=case.k, out_dtype=case.dt, device=0, a_ptr=1 << 20,
                              lda=case.k, b_ptr=2 << 20, ldb=case.k, sa_ptr=3 << 20, sa_stride_m=sa_m,
                              sa_stride_k=sa_k, sb_ptr=4 << 20, sb_stride_n=kb, sb_stride_k=1)
    monkeypatch.setattr(g, "sm_count", lambda device: 132)
    monkeypatch.setattr(tma, "encode_2d", lambda *a, **k: tma.ZERO_DESCRIPTOR)
    monkeypatch.setattr(tma, "encode_2d_fp8", lambda *a, **k: tma.ZERO_DESCRIPTOR)

    def get_kernel(device, variant, targs, smem, prelude=""):
        raise _Reached(targs)
    monkeypatch.setattr(compiler, "get_kernel", get_kernel)
    with pytest.raises(_Reached) as reached:
        case.config.plan(p, case.n, True)
    return reached.value.args[0]


def test_general_cases_reach_every_mode(monkeypatch):
    """Every scale source the plan picks (loads, As slots, windows, loads in block), both chunk
    lengths, both tile heights, fine and coarse promotion, each store path (swizzled TMA, narrow
    TMA for every output dtype, direct), split-K with several units per CTA on both tile heights,
    the tail split, and issue 58's instantiation itself."""
    seen, narrow, stores, multi_unit = set(), set(), set(), set()
    for case in (c for c in sanitize.GENERAL if c.config is not None):
        t = _general_template_args(case, monkeypatch)
        block_n, out, fine, store = t[0], case.dt, t[4], t[5]
        consumers = t[8] if len(t) > 8 else 2
        scale = t[9] if len(t) > 9 else 0
        chunk = t[10] if len(t) > 10 else 0
        seen.add(t)
        row = block_n * OUT_BYTES[out]
        kind = "direct" if store == "false" else "narrow" if row in (16, 32, 64) else "swizzled"
        stores.add(kind)
        if kind == "narrow":
            narrow.add(out)
        c = case.config
        if c.splits not in (1, g.TAIL_SPLIT):
            units = -(-case.m // c.block_m) * -(-case.n // c.block_n) * min(c.splits, -(-case.k // 128))
            if units > 132:
                multi_unit.add(c.block_m)
        seen.add(("scale", scale, chunk, consumers, fine))
    scales = {s[1] for s in seen if s[0] == "scale"}
    chunks = {s[2] for s in seen if s[0] == "scale"}
    assert {g.SCALE_LOADS, g.SCALE_SLOTS_A, g.SCALE_WINDOW, g.SCALE_LOADS_IN_BLOCK} <= scales
    assert set(g.CHUNKS) <= chunks
    assert {s[3] for s in seen if s[0] == "scale"} == {1, 2}
    assert {s[4] for s in seen if s[0] == "scale"} == {"true", "false"}
    assert stores == {"direct", "narrow", "swizzled"}
    assert narrow == {"bfloat16", "float16", "float32"}
    assert multi_unit == {64, 128}
    assert any(c.config is not None and c.config.splits == g.TAIL_SPLIT for c in sanitize.GENERAL)
    assert (16, 3, 1, 1, "false", "true", "false", "false", 2, 16) in seen


def test_moe_cases_take_both_routes():
    """One MoE case routes at 100-225 rows per expert, where the route kernel picks each expert's
    grouped kernel on the device (dispatch/grouped.py: device_choice); the others do not."""
    from fp8gemm.dispatch.grouped import device_choice, rows_estimate
    choices = [device_choice(rows_estimate(t * k, e)[0], fused) for t, e, k, fused, *_ in sanitize.MOE]
    assert sorted(choices) == [False, False, True]
