"""CPU: how the benchmark treats its peers: a peer that raises, is wrong or refuses a shape is
reported and never timed (peers.collect_calls); a peer call that crashes its process is caught in
the parallel warm-up and kept out of the bench's own process (warm.py); DeepGEMM's grouped layouts
and the MoE bench's warm-up jobs (moe.py) match what the timed run calls."""
import json
import sys
import textwrap

import numpy as np
import pytest

from fp8gemm.bench import moe, peers, warm


def test_collect_calls_reports_failing_peers_and_times_only_correct_ones():
    ran = []

    def ok():
        ran.append("ok")
        return "good"

    def boom():
        raise RuntimeError("kernel launch failed\nsecond line")

    def prepare_raises(x):
        raise ImportError("no such library")

    prepare = {"good": lambda x: {"fast": ok},
               "raises": prepare_raises,
               "callfails": lambda x: {"cfg": boom, "other": ok},
               "wrong": lambda x: {"w": lambda: "bad"},
               "refuses": lambda x: "bf16 output only",
               "layouts": lambda x: {"a/padded": lambda: "bad", "a/plain": ok}}
    syncs = []
    fns, choice, notes = peers.collect_calls(list(prepare), prepare, None,
                                             check=lambda r: None if r == "good" else "wrong (1.0e+00)",
                                             sync=lambda: syncs.append(1))
    assert set(fns) == {"good:fast", "callfails:other", "layouts:a/plain"}
    assert choice == {"good": ["fast"], "callfails": ["other"], "layouts": ["a/plain"]}
    text = "\n".join(notes)
    assert "raises: ImportError no such library" in text
    assert "callfails/cfg: RuntimeError kernel launch failed" in text and "second line" not in text
    assert "wrong/w: wrong (1.0e+00)" in text and "refuses: bf16 output only" in text
    assert "layouts/a/padded: wrong" in text
    assert len(syncs) == 5           # after every call that returned


def test_plain_layout_only_when_no_padded_one_is_right():
    prepare = {"p": lambda x: {"a/padded": lambda: "good", "a/plain": lambda: "good"}}
    fns, _, _ = peers.collect_calls(["p"], prepare, None, check=lambda r: None)
    assert set(fns) == {"p:a/padded"}


FAKE_WORKER = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from fp8gemm.bench import warm

    def record(job):
        with open(os.environ["WARM_TEST_LOG"], "a") as f:
            f.write(job["name"] + "\\n")

    def crash(job):
        record(job)
        os.kill(os.getpid(), signal.SIGSEGV)

    def raises(job):
        record(job)
        raise ValueError("shape refused")

    sys.exit(warm.worker(sys.argv[1], sys.argv[2], {"ok": record, "crash": crash, "raise": raises}))
""")


@pytest.mark.parametrize("workers", [1, 2])
def test_warm_survives_a_crashing_call(tmp_path, monkeypatch, workers):
    (tmp_path / "fake_warm_worker.py").write_text(FAKE_WORKER)
    log = tmp_path / "ran.txt"
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}")
    monkeypatch.setenv("WARM_TEST_LOG", str(log))
    jobs = [{"kind": "ok", "name": "a"}, {"kind": "crash", "name": "b"}, {"kind": "ok", "name": "c"},
            {"kind": "raise", "name": "d"}, {"kind": "ok", "name": "e"}, {"kind": "crash", "name": "f"}]
    res = warm.warm(jobs, workers=workers, python=sys.executable, worker_module="fake_warm_worker")
    assert set(res["crashed"]) == {warm.job_key(jobs[1]), warm.job_key(jobs[5])}
    assert "rc=-11" in res["crashed"][warm.job_key(jobs[1])]
    assert res["raised"] == {warm.job_key(jobs[3]): "ValueError: shape refused"}
    assert sorted(log.read_text().split()) == ["a", "b", "c", "d", "e", "f"]   # every job ran once
    assert res["jobs"] == 6 and res["workers"] == workers


def test_warm_worker_that_cannot_start(tmp_path):
    res = warm.warm([{"kind": "ok"}], workers=1, python=sys.executable, worker_module="no_such_module_here")
    assert list(res["crashed"].values())[0].startswith("warm-up worker failed to start (rc=1")


def test_deepgemm_contiguous_layout():
    total, pos, m_indices = peers.deepgemm_contiguous_layout([3, 0, 130, 128], align=128)
    assert total == 128 + 256 + 128
    assert pos.tolist() == [0, 1, 2] + list(range(128, 258)) + list(range(384, 512))
    want = np.full(total, -1)
    want[0:3], want[128:258], want[384:512] = 0, 2, 3
    assert m_indices.tolist() == want.tolist() and m_indices.dtype == np.int32
    total, pos, m_indices = peers.deepgemm_contiguous_layout([0, 0], align=128)
    assert total == 0 and pos.size == 0 and m_indices.size == 0


def test_moe_warm_jobs_are_the_calls_the_run_makes():
    tokens, routings = [1, 64], ["uniform", "skewed"]
    jobs = moe.warm_jobs(["flash"], tokens, routings, seed=3)
    keys = {warm.job_key(j) for j in jobs}
    experts, hidden, inter = moe.MODELS["flash"]
    seen = 0
    for routing, t, ids, wts in moe.cases(tokens, experts, routings, seed=3):
        counts = np.bincount(ids.reshape(-1), minlength=experts)
        assert np.allclose(wts.sum(axis=1), 1.0, atol=1e-6)
        for n, k in ((2 * inter, hidden), (hidden, inter)):
            for layout in ("contiguous", "masked"):
                assert warm.job_key(moe._job(layout, n, k, counts, int(counts.sum()), experts)) in keys
                seen += 1
    assert seen == len(jobs) == len(keys) == 2 * 2 * 2 * 2
    json.dumps(jobs)                 # the workers get them as JSON
    masked = [j for j in jobs if j["kind"] == "deepgemm_masked"]
    assert all(j["max_m"] % moe.MASK_ALIGN == 0 and j["max_m"] >= max(j["counts"]) for j in masked)
    assert moe.expected_m(6, 256) == 1 and moe.expected_m(49152, 256) == 192


def test_moe_layer_comparison_notes():
    """The bench's check of the default, fused and unfused layers: a last-bit difference between
    fused and unfused is reported with its size, a larger one, a default that does not repeat or
    that equals neither path is WRONG; equal outputs give no note."""
    import ml_dtypes
    rng = np.random.default_rng(0)
    a = rng.standard_normal((8, 64)).astype(ml_dtypes.bfloat16)
    one_ulp = a.copy()
    one_ulp.view(np.uint16)[0, :3] += 1
    far = (a.astype(np.float32) * 1.5).astype(ml_dtypes.bfloat16)
    assert moe.compare_layers(a, a.copy(), a, a.copy()) == []
    notes = moe.compare_layers(a, a, a, one_ulp)
    assert len(notes) == 1 and "differ in 3 of 512" in notes[0] and "WRONG" not in notes[0]
    assert "WRONG" in moe.compare_layers(a, a, a, far)[0]
    assert "not reproducible" in moe.compare_layers(a, one_ulp, a, a)[0]
    assert "equals neither" in moe.compare_layers(far, far, a, one_ulp)[0]


def test_moe_table_and_summary_with_deepgemm():
    rows = [moe.MoeRow("flash", "uniform", t, 6 * t, 6, 1, layer_us=10.0, fused_us=10.0, fused_gain=1.0,
                       gemms_us=9.0, glue_us=1.0, bound_us=8.0, max_gain=1.25, l1_us=4.0, l1_frac=0.9, l2_us=3.0,
                       l2_frac=0.9, l1_masked_us=5.0, l2_masked_us=3.0, dg_l1_us=dg, dg_l2_us=None,
                       dg_l1_masked_us=6.0, dg_l2_masked_us=2.4)
            for t, dg in ((1, 8.0), (8192, 2.0))]
    s = moe.summarize(rows)
    assert s["all"]["vs_deepgemm"]["l1"] == pytest.approx(1.0)          # sqrt(2.0 * 0.5)
    assert s["all"]["vs_deepgemm"]["l2"] is None                          # never measured: no claim
    assert s["all"]["vs_deepgemm"]["l2_masked"] == pytest.approx(0.8)
    assert "flash uniform T=8192 l1" in s["all"]["slower_than_deepgemm"]
    text = moe.format_summary(s) + "\n" + moe.format_table(rows)
    assert "vs DeepGEMM" in text and "  0.50" in text and "  2.00" in text


def test_moe_csv_round_trip(tmp_path):
    row = moe.MoeRow("pro", "skewed", 8192, 49152, 384, 7972, layer_us=13267.6, chain_us=13267.6, fused_us=14232.0,
                     fused_gain=0.93,
                     gemms_us=15157.5, glue_us=-1889.9, bound_us=5951.4, max_gain=2.23, l1_us=9624.4, l1_frac=0.43,
                     l2_us=5000.0, l2_frac=0.48, dg_l1_us=8329.1, dg_l2_us=4400.0, grouped_err=1.67e-3,
                     notes="masked layout not timed: 384 x 8064 rows for 49152 pairs")
    moe.write_csv([row], tmp_path / "m.csv")
    back = moe.read_csv(tmp_path / "m.csv")
    assert back[0] == row
    assert moe.summarize(back)["all"]["deepgemm_pairs"] == 2
