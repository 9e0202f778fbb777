"""A semaphore driven across 2**32 on the full NPU (Verilator): every wait is released exactly
when the serial-number rule (:func:`hw.isa.sem_reached`) says, in the engine queues (DMA
commands) and in the stage (WAIT commands), and the host write of a semaphore sets it without
touching ``SEM_LAST`` (job: :func:`tests.support.sem_jobs.sem_wrap`)."""

import pytest

from cosim.tb.harness import run_job
from hw.config import NPUConfig
from hw.isa import sem_reached
from tests.support import sem_jobs

START = sem_jobs.START
#: step -> (SEM, FLAG, fence words): FLAG counts the released DMA waits; the words are the
#: fences behind WAIT 2, WAIT 0x8000_0003 and WAIT 0x8000_0002
EXPECTED = {
    "set": (START, 0, [0, 0, 0]),
    "queued": (START, 1, [0, 0, 0]),            # the DMA 2**31 - 1 behind runs at once
    "signal1": (0xFFFF_FFFF, 1, [0, 0, 0]),
    "signal2": (0, 1, [0, 0, 0]),               # a plain >= would release every wait here
    "signal3": (1, 2, [0, 0, 0]),               # the DMA waiting for 1
    "signal4": (2, 2, [0xA2, 0, 0]),            # the WAIT for 2
    "behind": (2, 3, [0xA2, 0xB3, 0]),          # 0xFFFF_FFF0 and 0x8000_0003 are behind;
                                                # 0x8000_0002 is exactly 2**31 ahead
    "set_ahead": (0x8000_0002, 3, [0xA2, 0xB3, 0xC2]),
}


def test_expected_table_follows_the_rule():
    """The table above is the rule applied to the job's targets (no hand-waving)."""
    targets = {"wait2": 2, "dma1": 1, "behind": 0x7FFF_FFFF}
    assert sem_reached(START, targets["behind"])     # queued at START: 2**31 - 1 behind
    for step in ("queued", "signal1", "signal2", "signal3", "signal4"):
        sem, flag, words = EXPECTED[step]
        assert flag == 1 + sem_reached(sem, targets["dma1"])
        assert (words[0] == 0xA2) == sem_reached(sem, targets["wait2"])
    assert sem_reached(2, 0xFFFF_FFF0) and sem_reached(2, 0x8000_0003)
    assert not sem_reached(2, 0x8000_0002) and sem_reached(0x8000_0002, 0x8000_0002)


@pytest.fixture(scope="module")
def result():
    return run_job(NPUConfig(), "tests.support.sem_jobs:sem_wrap", name="sem_wrap_8x8").result


def test_waits_released_exactly_at_their_target_across_the_wrap(result):
    got = {s["step"]: (s["sem"], s["flag"], s["words"]) for s in result["steps"]}
    assert list(got) == list(EXPECTED)
    for step, want in EXPECTED.items():
        assert got[step] == want, f"after {step}: got {got[step]}, want {want}"


def test_host_write_leaves_sem_last(result):
    steps = {s["step"]: s for s in result["steps"]}
    q = result["default_queue"]
    assert steps["set"]["sem_last"] == 0 and steps["queued"]["sem_last"] == 0
    for k in range(1, 5):
        s = steps[f"signal{k}"]
        assert s["last_signal"] == [q, s["signal_index"]]
    last = steps["signal4"]["sem_last"]
    assert steps["behind"]["sem_last"] == last and steps["set_ahead"]["sem_last"] == last
