"""CPU: the benchmark's argument handling, shape resolution, CSV / JSON writers, summary math and
roofline arithmetic (the GPU part of the benchmark runs on the H200 only)."""
import json
import math

import pytest

from fp8gemm.bench import cli, report


def parse(*argv):
    return cli.build_parser().parse_args(list(argv))


def test_default_is_the_whole_trace():
    shapes = cli.resolve_shapes(parse())
    assert len(shapes) == 264 and shapes[0] == (1, 512, 256)


def test_quick_subset():
    shapes = cli.resolve_shapes(parse("--quick"))
    assert len(shapes) == 20 and (4096, 8192, 256) in shapes


def test_unseen_list():
    """--unseen: the other models' list, none of its (N, K) in the trace, most of its M values
    outside the trace's, every K a multiple of 16, N and K tails among them; --m replaces its M
    values; combined with another shape source it exits."""
    import csv
    from fp8gemm.shapes import other_models_path, read_shapes, trace_path
    shapes = cli.resolve_shapes(parse("--unseen"))
    trace = read_shapes(trace_path())
    assert shapes == read_shapes(other_models_path()) and len(shapes) == 224
    nk = {(n, k) for _, n, k in shapes}
    assert len(nk) == 32 and not nk & {(n, k) for _, n, k in trace}
    assert len({m for m, _, _ in shapes} - {m for m, _, _ in trace}) >= 5
    assert all(k % 16 == 0 for _, _, k in shapes)
    assert any(n % 128 for n, _ in nk) and any(k % 128 for _, k in nk)
    with open(other_models_path()) as f:
        rows = list(csv.DictReader(f))
    assert all(r["model"] and r["layer"] for r in rows)
    assert {m for m, _, _ in cli.resolve_shapes(parse("--unseen", "--m", "5"))} == {5}
    for extra in (["--quick"], ["--n", "8", "--k", "128", "--m", "1"]):
        with pytest.raises(SystemExit, match="--unseen is a shape list of its own"):
            cli.resolve_shapes(parse("--unseen", *extra))


def test_m_n_k_product_and_m_alone():
    assert cli.resolve_shapes(parse("--m", "1,64", "--n", "4096", "--k", "4096,1024")) == [
        (1, 4096, 4096), (64, 4096, 4096), (1, 4096, 1024), (64, 4096, 1024)]
    shapes = cli.resolve_shapes(parse("--m", "7"))
    assert len(shapes) == 12 and all(m == 7 for m, _, _ in shapes)
    with pytest.raises(SystemExit, match="need --m"):
        cli.resolve_shapes(parse("--n", "4096", "--k", "4096"))


def test_bad_arguments_exit():
    for argv in (["--m", "x"], ["--peers", "cublas,nope"], ["--out-dtype", "int8"], ["--m", "-1"]):
        with pytest.raises(SystemExit):
            parse(*argv)
    with pytest.raises(SystemExit, match="multiple of 16"):
        cli.resolve_shapes(parse("--m", "1", "--n", "8", "--k", "100"))
    assert parse("--peers", "none").peers == []
    assert parse("--peers", "triton,cublaslt").peers == ["triton", "cublaslt"]


def test_timer_choice():
    assert parse().timer == "cupti" and parse("--timer", "graph").timer == "graph"
    with pytest.raises(SystemExit):
        parse("--timer", "events")
    with pytest.raises(SystemExit, match="GEMM trace only"):
        cli.main(["--moe", "--timer", "graph"])
    assert "graph replay" in cli.GRAPH_METHOD and str(cli.GRAPH_REPS) in cli.GRAPH_METHOD


def test_shapes_file(tmp_path):
    f = tmp_path / "s.csv"
    f.write_text("M,N,K\n3,576,192\n3,576,192\n9,7168,2048\n")
    assert cli.resolve_shapes(parse("--shapes", str(f))) == [(3, 576, 192), (9, 7168, 2048)]
    g = tmp_path / "bad.csv"
    g.write_text("M,N\n1,2\n")
    with pytest.raises(SystemExit, match="lacks column"):
        cli.resolve_shapes(parse("--shapes", str(g)))


def test_roofline_math():
    m, n, k = 128, 4096, 1024
    b = report.gemm_bytes(m, n, k, "bfloat16")
    assert b == m * k + n * k + 4 * (m * 8 + 32 * 8) + 2 * m * n
    r = report.roofline_us(m, n, k, "bfloat16", 4e12, 1.4e15)
    assert r == pytest.approx(max(b / 4e12, 2 * m * n * k / 1.4e15) * 1e6)
    row = report.fill_derived(report.Row(m, n, k, "bfloat16", ours_us=10.0), 4e12, 1.4e15)
    assert row.frac_roofline == pytest.approx((row.roofline_us + 2.0) / 10.0)
    assert row.tflops == pytest.approx(2 * m * n * k / 1e-5 / 1e12)


def rows():
    return [
        report.Row(1, 4096, 4096, "bfloat16", "v", ours_us=5.0, cublaslt_us=15.0, triton_us=10.0),
        report.Row(128, 4096, 4096, "bfloat16", "v", ours_us=10.0, cublaslt_us=20.0, triton_us=5.0),
        report.Row(4096, 4096, 4096, "bfloat16", "v", ours_us=100.0, cublaslt_us=110.0, triton_us=None),
    ]


def test_summary_math():
    s = report.summarize(rows())
    assert s["cublaslt"]["geomean_speedup"] == pytest.approx((3.0 * 2.0 * 1.1) ** (1 / 3))
    assert s["triton"]["geomean_speedup"] == pytest.approx(math.sqrt(2.0 * 0.5))
    assert s["triton"]["slower_on"] == ["128x4096x4096"]
    assert s["cublaslt"]["per_m_band"]["M<=64"] == pytest.approx(3.0)
    assert s["cublaslt"]["per_m_band"]["M>=1024"] == pytest.approx(1.1)
    assert s["best"]["geomean_speedup"] == pytest.approx((2.0 * 0.5 * 1.1) ** (1 / 3))
    assert "deepgemm" not in s
    text = report.format_summary(s)
    assert "vs cublaslt" in text and "slower on 1 shape" in text


def test_csv_and_json_round_trip(tmp_path):
    path = tmp_path / "r.csv"
    report.write_csv(rows(), path)
    header = path.read_text().splitlines()[0].split(",")
    for col in ("M", "N", "K", "out_dtype", "variant", "ours_us", "host_us", "cublaslt_us", "triton_us",
                "deepgemm_us", "roofline_us", "max_rel_err"):
        assert col in header
    back = report.read_csv(path)
    assert back[0].cublaslt_us == 15.0 and back[2].triton_us is None and back[1].M == 128
    report.write_json({"git_revision": "abc"}, back, tmp_path / "r.json")
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["git_revision"] == "abc" and "cublaslt" in doc["summary"]


def test_table_lists_every_row():
    text = report.format_table(rows())
    assert len(text.splitlines()) == 2 + 3 and "cuBLASLt" in text


def test_calls_take_turns():
    """Contenders alternate call by call, so that none is timed in a block after another's."""
    from fp8gemm.bench.timing import turns
    assert turns(["ours", "peer"], 3) == ["ours", "peer"] * 3
    assert turns(["x"], 2) == ["x", "x"]
    assert turns([], 4) == []


def test_split_at_flush():
    from fp8gemm.bench.timing import FLUSH_KERNEL, split_at_flush
    acts = [(0, 100_000, FLUSH_KERNEL), (1, 2_000, "gemm"), (2, 500, "reduce"),
            (3, 100_000, FLUSH_KERNEL), (4, 3_000, "gemm")]
    assert split_at_flush(acts) == [2.5, 3.0]
    assert split_at_flush([(0, 5, "warmup")] + acts) == [2.5, 3.0]    # before the first flush: ignored


def test_moe_arguments():
    from fp8gemm.bench import moe
    args = parse("--moe")
    assert args.moe and args.moe_models == ["flash", "pro"] and args.moe_tokens == list(moe.TOKENS)
    assert args.moe_routings == ["uniform", "skewed"]
    args = parse("--moe", "--moe-models", "pro", "--moe-tokens", "1,8", "--moe-routings", "skewed")
    assert (args.moe_models, args.moe_tokens, args.moe_routings) == (["pro"], [1, 8], ["skewed"])
    for argv in (["--moe-models", "flash,ultra"], ["--moe-routings", "zipf"], ["--moe-tokens", "a"]):
        with pytest.raises(SystemExit):
            parse("--moe", *argv)


def test_moe_routing_draws():
    """Distinct ids per token in range; skewed routing leaves experts idle that uniform would use
    and loads its busiest expert far above the uniform mean."""
    import numpy as np
    from fp8gemm.bench import moe
    rng = np.random.default_rng(0)
    uni = moe.route(rng, 512, 256, "uniform")
    skew = moe.route(rng, 512, 256, "skewed")
    for ids in (uni, skew):
        assert ids.shape == (512, moe.TOP_K) and ids.dtype == np.int32
        assert ids.min() >= 0 and ids.max() < 256
        assert all(len(set(r)) == moe.TOP_K for r in ids.tolist())
    cu, cs = np.bincount(uni.ravel(), minlength=256), np.bincount(skew.ravel(), minlength=256)
    assert (cs == 0).sum() > (cu == 0).sum() + 20
    assert cs.max() > 4 * cu.mean()


def test_moe_bound_and_summary():
    from fp8gemm.bench import moe
    e_h_i = moe.MODELS["flash"]
    # one token, six experts: weight bytes dominate
    bw, peak = 4e12, 1.5e15
    b = moe.bound_us(6, 6, 1, e_h_i, bw, peak)
    want = (6 * (2 * 2048 * 4096 + 4096 * 2048) + 4096 * 3) / bw * 1e6
    assert math.isclose(b, want, rel_tol=1e-12)
    # 8192 tokens: FLOPs dominate
    b = moe.bound_us(256, 8192 * 6, 8192, e_h_i, bw, peak)
    assert math.isclose(b, 2.0 * 8192 * 6 * (3 * 2048 * 4096) / peak * 1e6, rel_tol=1e-12)
    rows = [moe.MoeRow("flash", "uniform", t, 6 * t, 6, 1, layer_us=lay, fused_us=fu, fused_gain=lay / fu,
                       gemms_us=g, glue_us=lay - g, bound_us=bd, max_gain=lay / bd)
            for t, lay, fu, g, bd in ((1, 60.0, 60.0, 50.0, 30.0), (4096, 2600.0, 2600.0 / 1.1, 2400.0, 2000.0))]
    rows[1].notes = "layer WRONG (3.0e-01)"
    s = moe.summarize(rows)
    assert s["tokens<=128"]["shapes"] == 1 and math.isclose(s["tokens<=128"]["max_gain_geomean"], 2.0)
    assert math.isclose(s["all"]["bound_fraction_geomean"], math.sqrt(0.5 * 2000 / 2600))
    assert math.isclose(s["tokens>=1024"]["fused_gain_geomean"], 1.1)
    assert math.isclose(s["tokens<=128"]["glue_fraction_geomean"], 10.0 / 60.0)
    # glue below zero everywhere (GEMMs timed slower than the chain): no geomean, printed as n/a
    neg = [moe.MoeRow("flash", "uniform", 1, 6, 6, 1, layer_us=5.0, fused_us=5.0, fused_gain=1.0, gemms_us=6.0,
                      glue_us=-1.0, bound_us=4.0, max_gain=1.25)]
    assert "glue n/a" in moe.format_summary(moe.summarize(neg))
    assert s["wrong"] == ["flash uniform T=4096"]
    # one grouped GEMM's roofline: weights of the active groups + FP8 rows in + bf16 rows out
    g = moe.gemm_roofline_us(6, 6, 4096, 4096, bw, peak)
    assert math.isclose(g, (6 * 4096 * 4096 + 6 * 4096 + 2 * 6 * 4096) / bw * 1e6, rel_tol=1e-12)
    assert math.isclose(moe.gemm_roofline_us(256, 49152, 4096, 4096, bw, 1e15),     # FLOPs dominate
                        2.0 * 49152 * 4096 * 4096 / 1e15 * 1e6, rel_tol=1e-12)
    assert "grouped GEMMs alone" not in moe.format_summary(s)       # not measured: no claim
    rows[0].l1_frac, rows[0].l2_frac = 0.95, 0.78
    s = moe.summarize(rows)
    assert "1 of 2 at >= 0.8 of roofline + 2 us (lowest 0.78)" in moe.format_summary(s)
    text = moe.format_summary(s) + "\n" + moe.format_table(rows)
    assert "flash uniform T=4096" in text and "2600.0" in text


def test_warm_workers_must_not_be_negative():
    with pytest.raises(SystemExit, match="--warm-workers"):
        cli.main(["--warm-workers", "-1", "--quick"])
    assert parse("--warm-workers", "0").warm_workers == 0 and parse().warm_workers is None


def test_a_scale_layout_option():
    """--a-scale m-major hands fp8gemm the quantizer's M-major layout (the same values, columns
    16-byte aligned), made outside the timing; k-major (the default) the row-major scales."""
    torch = pytest.importorskip("torch")
    assert parse().a_scale == "k-major" and parse("--a-scale", "m-major").a_scale == "m-major"
    with pytest.raises(SystemExit):
        parse("--a-scale", "n-major")
    sa = torch.arange(5 * 3, dtype=torch.float32).reshape(5, 3)
    mm = cli.m_major_copy(sa)
    assert mm.shape == sa.shape and bool((mm == sa).all())
    assert mm.stride() == (1, 8) and mm.data_ptr() % 16 == 0


def test_plot_with_moe_is_refused_up_front():
    from fp8gemm.bench import cli
    with pytest.raises(SystemExit, match="--moe writes no plot"):
        cli.main(["--moe", "--plot", "moe.png"])


def test_missing_matplotlib_is_found_before_the_run(monkeypatch):
    import sys
    from fp8gemm.bench import cli
    monkeypatch.setitem(sys.modules, "matplotlib", None)             # import matplotlib fails
    with pytest.raises(SystemExit, match="--plot needs matplotlib"):
        cli.main(["--quick", "--plot", "trace.png"])


def test_plot_title_names_the_gpu_and_timer():
    from fp8gemm.bench import report
    assert "NVIDIA H100 80GB HBM3" in report.plot_title("NVIDIA H100 80GB HBM3")
    assert "H200" not in report.plot_title("NVIDIA H100 80GB HBM3", "graph")
    assert "CUDA-graph replay" in report.plot_title("NVIDIA H200", "graph")
