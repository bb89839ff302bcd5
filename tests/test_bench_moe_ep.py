"""CPU: the expert-parallel benchmark's command line and table (the runs need several GPUs)."""
import pytest

from fp8gemm.bench import moe_ep


def test_arguments_are_checked_before_any_gpu_work():
    a = moe_ep.parse(["--gpus", "2", "--tokens", "2048,8192", "--models", "flash,pro"])
    assert a.gpus == 2 and a.tokens == [2048, 8192] and a.models == ["flash", "pro"]
    for argv, what in ((["--tokens", "2049"], "must divide by the 2 ranks"),
                       (["--models", "v3"], "unknown model"), (["--routings", "hot"], "unknown routing"),
                       (["--gpus", "3", "--tokens", "3072"], "experts must divide by the 3 ranks")):
        with pytest.raises(SystemExit):
            moe_ep.parse(argv)


def test_table_has_one_line_per_rank_and_row():
    rows = [dict(world=2, model="flash", routing="uniform", tokens=2048, rank=r, dispatch_us=10.0, layer_us=100.0,
                 combine_us=5.0, total_us=115.0, one_gpu_us=200.0 if r == 0 else None,
                 ratio=0.575 if r == 0 else None, rel_err=2e-3 if r == 0 else None) for r in (0, 1)]
    text = moe_ep.format_rows(rows).splitlines()
    assert len(text) == 3 and "dispatch" in text[0]
    assert "0.575" in text[1] and "200.0" in text[1] and "0.575" not in text[2]
