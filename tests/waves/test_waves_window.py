"""Run-time waveform windows (by cycle range, by kernel) on the traced Verilator build.

Runs on the small stand-in design (same tb_top, same traced main loop as the NPU), so the
traced build is quick; the job marks regions with :meth:`RtlBackend.region`.
"""

from fractions import Fraction

import pytest

from cosim.tb.harness import CosimError, check_waves_window, run_job
from cosim.tb.rtl_backend import CLOCK_PERIOD_NS
from cosim.waves.vcd import read_header
from hw.config import NPUConfig

DESIGN = "tests.support.cosim_standin:StandIn"
NAMES = ["first", "second", "third"]


def run(name: str, window: dict | None):
    return run_job(NPUConfig(), "tests.support.cosim_jobs:regions", {"names": NAMES}, name=name,
                   design=DESIGN, waves=True, waves_window=window)


def dumped_cycles(path) -> tuple[float, float, int]:
    """(first, last) dumped time in clock cycles, and the number of time steps."""
    header = read_header(path)
    period = Fraction(CLOCK_PERIOD_NS, 10**9) / header.timescale_s
    times = []
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                times.append(int(line[1:]))
    return times[0] / period, times[-1] / period, len(times)


def test_whole_run_without_window():
    r = run("test_window_none", None)
    first, last, _ = dumped_cycles(r.waves)
    assert first == 0
    assert last >= r.result["second"][1][1]


def test_window_by_kernel_holds_exactly_that_kernel():
    r = run("test_window_kernel", {"kernel": "second", "occurrence": 2})
    start, end = r.result["second"][1]
    first, last, steps = dumped_cycles(r.waves)
    # trace_on rises when the region is entered and falls when it is left: every step in
    # between is dumped (two steps per cycle: both clock edges), nothing outside it
    assert start <= first <= start + 1
    assert end - 1 <= last <= end
    assert steps >= 2 * (end - start) - 4
    assert r.waves.stat().st_size < 200_000  # 40 cycles of the stand-in, header included


def test_window_by_cycles():
    r = run("test_window_cycles", {"from": 30, "to": 70})
    first, last, _ = dumped_cycles(r.waves)
    assert first == 30
    assert 69 <= last <= 70


def test_window_kernel_that_never_ran_is_a_clear_error():
    """...and loses nothing: the waveform of the previous run of the same name stays."""
    first = run("test_window_missing", {"kernel": "second", "occurrence": 1})
    before = first.waves.read_bytes()
    with pytest.raises(CosimError, match=r"'fourth' ran 0 times.*first x1, second x2, third x1"
                                         r".*left as it was"):
        run("test_window_missing", {"kernel": "fourth"})
    with pytest.raises(CosimError, match=r"'second' ran 2 times, occurrence 3"):
        run("test_window_missing", {"kernel": "second", "occurrence": 3})
    assert first.waves.read_bytes() == before
    assert not list(first.waves.parent.glob("test_window_missing.partial.*"))


@pytest.mark.parametrize("window, message", [
    ({"from": 10, "to": 5}, "0 <= from < to"),
    ({"from": 5, "to": 5}, "0 <= from < to"),       # empty
    ({"from": -1}, "0 <= from < to"),
    ({"kernel": "x", "from": 3}, "not both"),
    ({"kernel": "x", "occurrence": 0}, "bad kernel window"),
    ({"cycles": 3}, "unknown keys"),
])
def test_bad_windows(window, message):
    with pytest.raises(ValueError, match=message):
        check_waves_window(window)
