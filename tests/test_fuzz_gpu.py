"""GPU, slow: a short run of the fuzzer (tools/fuzz.py) -- random shapes, dtypes, scale magnitudes
and layouts through the dispatcher and every variant forced -- must find no failure. The long runs
(2,000+ cases per variant) are made on the device with the script itself (bench/NOTES.md gives
their commands and counts)."""
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))


def test_fuzz_finds_no_failure(capsys):
    import fuzz
    failures = fuzz.main(["--cases", "40", "--seed", "2024", "--max-elements", "2e7"])
    log = capsys.readouterr().out
    assert "40 cases" in log and "general_split_k" in log, log[-2000:]
    assert failures == 0, log[-4000:]
