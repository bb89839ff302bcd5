"""fp8gemm-tune's CPU logic: the search space, the loop (resume, budget, correctness gate) and the
table it writes, with a fake timer and checker standing in for the GPU."""
import json

import pytest

from fp8gemm.bench import peers, tune
from fp8gemm.dispatch import Dense, Gemv, GemmDesc, General, ShortK, SwapAB, is_valid
from fp8gemm.dispatch import general
from fp8gemm.dispatch import selector as sel

SHAPES = [(1, 4096, 4096), (64, 7168, 2048), (300, 1536, 256), (4096, 8192, 4096), (2, 24, 272)]


@pytest.fixture
def k_major_on(monkeypatch):
    """The dense kernel's K-major switch on (the tuner offers the dense kernel only then)."""
    from fp8gemm.dispatch import dense
    monkeypatch.setattr(dense, "K_MAJOR_SWITCH", True)


@pytest.mark.parametrize("m,n,k", SHAPES)
def test_candidates_valid_unique_fallback_first(m, n, k, k_major_on):
    desc = GemmDesc(m, n, k)
    cands = tune.candidates(desc, limit=12)
    assert cands[0] == sel.fallback(desc)
    first = int(isinstance(cands[0], Dense))       # the dense model's choice, then the older kernels'
    if first:
        assert cands[1] == sel.fallback(desc, dense=False)
    older = [c for c in cands[first:] if type(c) not in sel.EXTRA_CANDIDATES]
    assert 1 < len(older) <= 12 and cands[first:first + len(older)] == older   # the dense kernel's come last
    assert len(cands) - first - len(older) == len([c for c in Dense.tuner_candidates(desc)
                                                   if is_valid(desc, c) and c.key() != cands[0].key()])
    assert len({c.key() for c in cands}) == len(cands)
    assert all(is_valid(desc, c) for c in cands)


def test_candidates_explore_orientation_and_splits_for_small_m(k_major_on):
    cands = tune.candidates(GemmDesc(16, 4096, 4096), limit=32)
    assert {type(c) for c in cands} >= {SwapAB, General}
    assert len({c.splits for c in cands if isinstance(c, General)}) > 1
    big = tune.candidates(GemmDesc(8192, 8192, 4096), limit=32)
    assert not any(isinstance(c, SwapAB) for c in big)
    assert {c.group_m for c in big if isinstance(c, General)} >= {1, 8, 16} and {c.stages for c in big} >= {4}
    assert Dense(256, 128, 3, 2, 1, 16) in big


def test_candidates_include_short_k_tiles_only_for_short_k():
    short = tune.candidates(GemmDesc(300, 1536, 256), limit=16)
    tiles = {(c.block_m, c.block_n) for c in short if c.variant == ShortK.variant}
    assert tiles >= {(64, 64), (128, 128), (128, 32)}
    assert any(c.variant == General.variant for c in short)          # the general kernel competes
    assert not any(c.variant == ShortK.variant for c in tune.candidates(GemmDesc(300, 1536, 272)))


def test_candidates_include_gemv_only_up_to_16_tokens():
    for m in (1, 8, 16):
        gemv = [c for c in tune.candidates(GemmDesc(m, 4096, 4096)) if c.variant == Gemv.variant]
        assert {(c.warps, c.unroll) for c in gemv} == {(8, 2), (8, 1), (4, 2), (4, 4)}
        assert all(c.token_tile >= m for c in gemv) and all(is_valid(GemmDesc(m, 4096, 4096), c) for c in gemv)
    assert not any(c.variant == Gemv.variant for c in tune.candidates(GemmDesc(17, 4096, 4096)))
    assert tune.label(Gemv(8, 8, 2)) == "gemv 16x8 w8 u2"


def fake_gpu(slow_fallback=1.5, wrong=()):
    """Time model as the 'GPU': the fallback 1.5x slower than its estimate, one key wrong."""
    calls = {"time": 0, "check": 0}

    def time_fn(desc, cands):
        calls["time"] += 1
        out = {}
        for i, c in enumerate(cands):
            rows, cols = (desc.n, desc.m) if isinstance(c, SwapAB) else (desc.m, desc.n)
            width = getattr(c, "block_n", getattr(c, "token_tile", 8))
            us = (general.cost_us(rows, cols, desc.k, width, getattr(c, "splits", 1), 132) + 2.0
                  + 0.01 * getattr(c, "stages", 2))
            out[c.key()] = us * (slow_fallback if i == 0 else 1.0)
        return out

    def check_fn(desc, c):
        calls["check"] += 1
        return 1.0 if c.key() in wrong else 1e-3

    return time_fn, check_fn, calls


def test_tune_picks_fastest_correct_and_records_fallback_time():
    time_fn, check_fn, _ = fake_gpu()
    state = {"version": tune.STATE_VERSION, "gpu": "x", "results": {}}
    tune.tune(SHAPES[:2], "bfloat16", time_fn, check_fn, state)
    for m, n, k in SHAPES[:2]:
        r = state["results"][tune.shape_key(m, n, k, "bfloat16")]
        assert r["us"] < r["fallback_us"]
        assert r["rel_err"] == 1e-3


def test_state_records_every_candidate_time():
    time_fn, check_fn, _ = fake_gpu()
    state = {"version": tune.STATE_VERSION, "gpu": "x", "results": {}}
    tune.tune([SHAPES[2]], "bfloat16", time_fn, check_fn, state)
    r = state["results"][tune.shape_key(*SHAPES[2], "bfloat16")]
    assert len(r["times"]) == r["tried"] and min(r["times"].values()) == pytest.approx(r["us"], abs=1e-3)
    assert any(name.startswith("short_k ") for name in r["times"])


def test_update_keeps_the_entries_of_shapes_not_retuned():
    time_fn, check_fn, _ = fake_gpu()
    state = {"version": tune.STATE_VERSION, "gpu": "x", "results": {}}
    tune.tune([SHAPES[2]], "bfloat16", time_fn, check_fn, state)
    old = [{"n": 4096, "k": 4096, "m": 1, "variant": SwapAB.variant, "block_n": 16, "stages": 6, "group_m": 1,
            "splits": 4, "us": 8.0, "fallback_us": 9.0},
           {"n": 1536, "k": 256, "m": 300, "variant": General.variant, "block_n": 64, "stages": 6, "group_m": 8,
            "splits": 1, "us": 3.5, "fallback_us": 3.5}]
    entries = tune.table_from_state(state, {}, keep=old)["entries"]
    assert old[0] in entries                                  # not retuned: kept as it was
    retuned = [e for e in entries if (e["n"], e["k"], e["m"]) == (1536, 256, 300)]
    assert len(retuned) == 1 and retuned[0] != old[1]         # retuned: replaced
    assert tune.build_parser().parse_args(["--update"]).update


def test_wrong_winner_is_skipped_and_all_wrong_is_failed():
    time_fn, _, _ = fake_gpu()
    desc = GemmDesc(*SHAPES[3])
    times = time_fn(desc, tune.candidates(desc))
    best = min(times, key=times.get)
    _, check_fn, _ = fake_gpu(wrong={best})
    state = {"version": tune.STATE_VERSION, "gpu": "x", "results": {}}
    tune.tune([SHAPES[3]], "bfloat16", time_fn, check_fn, state)
    r = state["results"][tune.shape_key(*SHAPES[3], "bfloat16")]
    assert "failed" not in r and sel.from_entry(r).key() != best
    state2 = {"version": tune.STATE_VERSION, "gpu": "x", "results": {}}
    tune.tune([SHAPES[3]], "bfloat16", time_fn, lambda d, c: 1.0, state2)
    assert "failed" in state2["results"][tune.shape_key(*SHAPES[3], "bfloat16")]
    assert tune.table_from_state(state2, {})["entries"] == []


def test_warm_jobs_compile_every_candidate_once():
    shapes = [(64, 4096, 4096), (100, 4096, 4096), (512, 1536, 256)]
    done = {tune.shape_key(*shapes[2], "bfloat16"): {}}
    jobs = tune.warm_jobs(shapes, "bfloat16", done=done)
    got = [(sel.from_entry(j["config"]).key(), j["n"]) for j in jobs]
    want = {(c.key(), n) for m, n, k in shapes[:2] for c in tune.candidates(GemmDesc(m, n, k))}
    assert len(got) == len(set(got)) and set(got) == want          # the tuned shape is not warmed
    assert all(j["kind"] in tune.WARM_BUILDERS for j in jobs)
    json.dumps(jobs)                                                 # what warm() writes for its workers


def test_candidates_that_crashed_the_warm_up_are_not_timed():
    time_fn, check_fn, _ = fake_gpu()
    desc = GemmDesc(*SHAPES[3])
    cands = tune.candidates(desc)
    crashed = [{"kind": "fp8gemm_candidate", "m": desc.m, "n": desc.n, "k": desc.k, "out_dtype": "bfloat16",
                "config": {"variant": c.variant, **c.knobs()}} for c in (cands[0], cands[1])]
    skip = tune.warm_skips({"crashed": {json.dumps(j, sort_keys=True): "rc=-11" for j in crashed}})
    assert skip == {(cands[0].key(), desc.n), (cands[1].key(), desc.n)}
    state = {"version": tune.STATE_VERSION, "gpu": "x", "results": {}}
    tune.tune([SHAPES[3]], "bfloat16", time_fn, check_fn, state, skip=skip)
    r = state["results"][tune.shape_key(*SHAPES[3], "bfloat16")]
    assert tune.label(cands[0]) not in r["times"] and tune.label(cands[1]) not in r["times"]
    assert len(r["times"]) == len(cands) - 2 and r["fallback_us"] is None and "us" in r


def test_resume_and_budget(tmp_path):
    path = tmp_path / "state.json"
    time_fn, check_fn, calls = fake_gpu()
    clock = iter(range(0, 1000, 10))       # each clock() call advances 10 s
    state = tune.load_state(path, "h200")
    tune.tune(SHAPES, "bfloat16", time_fn, check_fn, state, budget_s=25, clock=lambda: next(clock),
              save=lambda s: tune.save_json(path, s))
    done = len(state["results"])
    assert 0 < done < len(SHAPES) and "budget" in state["stopped"]
    resumed = tune.load_state(path, "h200")
    assert len(resumed["results"]) == done
    before = calls["time"]
    tune.tune(SHAPES, "bfloat16", time_fn, check_fn, resumed)
    assert calls["time"] - before == len(SHAPES) - done        # finished shapes are not redone
    assert len(resumed["results"]) == len(SHAPES) and "stopped" not in resumed
    assert tune.load_state(path, "other-gpu")["results"] == {}   # another GPU's state is not reused
    path.write_text("{not json")
    assert tune.load_state(path, "h200")["results"] == {}


def test_table_round_trips_through_the_selector(tmp_path, monkeypatch):
    time_fn, check_fn, _ = fake_gpu()
    state = {"version": tune.STATE_VERSION, "gpu": "tuned", "results": {}}
    tune.tune(SHAPES, "bfloat16", time_fn, check_fn, state)
    table = tune.table_from_state(state, {"date": "now"})
    tune.save_json(tmp_path / "tuned.json", table)
    assert json.loads((tmp_path / "tuned.json").read_text())["generated"] == {"date": "now"}
    monkeypatch.setattr(sel, "TABLE_DIR", tmp_path)
    sel.load_table.cache_clear()
    sel.select.cache_clear()
    try:
        for e in table["entries"]:
            c = sel.select(e["m"], e["n"], e["k"], gpu="tuned")
            assert (c.variant, c.knobs()) == (e["variant"], {f: e[f] for f in c.knobs()})
            assert set(e) == {"n", "k", "m", "variant", "us", "fallback_us", *c.knobs()}
            assert "tuned at M=" in c.reason
    finally:
        sel.load_table.cache_clear()
        sel.select.cache_clear()


def test_cli_shape_resolution():
    args = tune.build_parser().parse_args(["--m", "1,2", "--n", "512", "--k", "256"])
    assert tune.resolve(args) == [(1, 512, 256), (2, 512, 256)]
    with pytest.raises(SystemExit):
        tune.resolve(tune.build_parser().parse_args(["--m", "1", "--n", "512", "--k", "100"]))
    trace = tune.resolve(tune.build_parser().parse_args([]))
    assert len(trace) == 264


def test_tune_without_a_gpu_exits_with_one_line(tmp_path):
    """No traceback: one line naming the tool and the requirement (skipped where a GPU is seen)."""
    import cupy
    try:
        if cupy.cuda.runtime.getDeviceCount() > 0:
            pytest.skip("a GPU is visible here")
    except Exception:
        pass
    from fp8gemm.bench import tune
    with pytest.raises(SystemExit) as exc:
        tune.main(["--m", "64", "--n", "512", "--k", "1024", "--out", str(tmp_path / "t.json")])
    assert str(exc.value).startswith("fp8gemm-tune needs an SM90 GPU: ")
    assert not (tmp_path / "t.state.json").exists()
