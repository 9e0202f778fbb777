"""The linear planner under DRAM timing: its per-command costs by hand, the plan it keeps for
ideal memory, and plans that run faster on the performance model under the timing they were
made for than the ideal-memory plan does."""

import numpy as np
import pytest

from hw.config import NPUConfig
from hw.isa import dma_estimate_cycles
from sw.dram import DramTiming
from sw.golden import linear_int
from sw.kernels.linear import linear_with_stats, plan_linear
from sw.kernels.linear_ops import (
    DmaOp,
    MatmulOp,
    Timer,
    dma_cycles,
    fetch_cycles,
    matmul_cycles,
)
from sw.model import ModelBackend
from sw.perf import PerfBackend
from sw.runtime import Device

DEFAULT = NPUConfig()
LAT100 = DramTiming.parse("lat100")


def test_dma_cycles_by_hand():
    # 512-byte rows on the 8-byte bus: one 64-beat burst per row. Under lat100 with 2 reads
    # in flight a burst costs max(64 + 1, (100 + 64 - 1) / 2) = 81.5 cycles (Little's law
    # binds); the first beat waits 100 - 3 cycles more than on the ideal model.
    two = NPUConfig(dma_outstanding=2)
    assert dma_cycles(two, 512, 4, dram=LAT100) == 12 + 97 + 326
    assert DEFAULT.dma_outstanding == 4      # the R channel binds: 65 per burst
    assert dma_cycles(DEFAULT, 512, 4, dram=LAT100) == 12 + 97 + 260
    # a store pays its write latency beyond the ideal's (1) once, and W backpressure per beat
    slow_w = DramTiming.parse("wlatency=41,w_stall=0.5")
    assert dma_cycles(DEFAULT, 512, 4, store=True, dram=slow_w) == 12 + 40 + 4 * 130
    # a DRAM bandwidth limit of 2 bytes/cycle: 256 cycles per 64-beat burst
    assert dma_cycles(DEFAULT, 512, 4, dram=DramTiming.parse("bw=2")) == 12 + 4 * 256
    # the ideal model (and None) is the address-free estimate the ideal planner always used
    for dram in (None, DramTiming.parse("ideal")):
        assert dma_cycles(DEFAULT, 512, 4, dram=dram) == dma_estimate_cycles(DEFAULT, 512, 4)


def test_fetch_cycles_by_hand():
    assert fetch_cycles(DEFAULT, None) == fetch_cycles(DEFAULT, DramTiming()) == 0
    assert fetch_cycles(DEFAULT, LAT100) == 97
    # a 32-byte command is 4 beats; at 50% R backpressure 8 cycles in expectation
    assert fetch_cycles(DEFAULT, DramTiming.parse("r_stall=0.5")) == 4


def test_timer_fetch_lane():
    """Under lat100 commands are fetched in bursts of ``fetch_depth`` (4), each burst 97 cycles
    after the previous one, in stream order, and a command is not fetched before its
    engine's FIFO (depth 2) has room."""
    ops = [MatmulOp(a_row=0, w_row=0, acc_row=0, m=8, accumulate=False) for _ in range(4)]
    ideal, lat = Timer(DEFAULT), Timer(DEFAULT, LAT100)
    ideal.run(ops)
    lat.run(ops)
    assert ideal.starts["matmul"] == []                  # no fetch lane under ideal memory
    m = matmul_cycles(DEFAULT, 8, 1)
    assert lat.starts["matmul"] == [97, 97 + m, 97 + 2 * m, 97 + 3 * m]   # one burst
    # a running load and two waiting fill the load engine's FIFO (depth 2): the fourth load
    # is fetched only once the second started, and the matmul behind it (the next burst)
    # is fetched 97 cycles after that
    load = DmaOp(store=False, tag="w", mem=0, dram_addr=0, dram_stride=0, row_bytes=4096,
                 n_rows=1, local_row=0, local_stride=1)
    d = dma_cycles(DEFAULT, 4096, 1, dram=LAT100)   # 12 + 97 + 2 bursts of 257
    assert d == 623
    t = Timer(DEFAULT, LAT100)
    t.run([load] * 4 + [ops[0]])
    assert t.starts["load"] == [97, 97 + d, 97 + 2 * d, 97 + 3 * d]
    assert t.starts["matmul"] == [97 + d + 97]


def test_ideal_plan_unchanged_by_ideal_timing():
    for shape in [(32, 384, 384), (64, 64, 64), (1, 384, 1536)]:
        assert (plan_linear(DEFAULT, *shape, double_buffer=True)
                == plan_linear(DEFAULT, *shape, double_buffer=True, dram=DramTiming()))


def _operands(rng, m, k, n):
    a = rng.integers(-128, 128, (m, k)).astype(np.int8)
    w = rng.integers(-128, 128, (k, n)).astype(np.int8)
    return a, w, rng.integers(-2**12, 2**12, n), np.full(n, 1 << 20), np.full(n, 28)


@pytest.mark.parametrize("dram,shape,gain", [
    # measured with the multi-command fetch (fetch_depth 4), 4 reads in flight, this round's
    # parameter loads (one DRAM row, up to 8 steps, the first before any matmul) and the
    # planner's model of the accumulator write port: the ideal-memory plans became
    # latency-tolerant (64x64x64 under lat100: 5,720 -> 5,643, 1.3%; 32x384x384: 79,820
    # either way), so the cases are those where the DRAM timing still changes the plan most
    ("lat100", (96, 96, 96), 0.05),      # 17,328 -> 15,591 cycles (10.0%)
    ("hbm", (128, 64, 64), 0.03),        # 10,221 -> 9,718 (4.9%)
    ("ddr", (32, 384, 384), 0.04),       # 84,313 -> 80,511 (4.5%)
])
def test_dram_aware_plan_is_faster(dram, shape, gain):
    """On the performance model (cycle-exact with the RTL), the plan made for the run's DRAM
    timing takes at least ``gain`` fewer cycles than the ideal-memory plan; the device plans
    for its backend's timing by itself; both are bit-exact."""
    rng = np.random.default_rng(7)
    args = _operands(rng, *shape)
    timing = DramTiming.parse(dram)
    gold = linear_int(*args)
    cycles = {}
    for name, plan in (("ideal", plan_linear(DEFAULT, *shape, double_buffer=True)),
                       ("aware", None)):
        device = Device(PerfBackend(DEFAULT, dram=timing))
        assert device.dram_timing == timing
        out, stats = linear_with_stats(device, *args, plan=plan)
        np.testing.assert_array_equal(out, gold)
        cycles[name] = stats.cycles
        if plan is None:
            assert stats.plan == plan_linear(DEFAULT, *shape, double_buffer=True, dram=timing)
            assert stats.plan != plan_linear(DEFAULT, *shape, double_buffer=True)
    assert cycles["aware"] <= (1 - gain) * cycles["ideal"]


def test_untimed_device_plans_for_ideal_memory():
    assert Device(ModelBackend(DEFAULT)).dram_timing is None
