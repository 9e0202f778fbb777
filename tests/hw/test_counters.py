"""hw.counters.PerfCounters alone: what a snapshot holds, against a scalar running sum."""

import numpy as np
from amaranth.sim import Simulator

from hw.config import NPUConfig
from hw.counters import COUNTER_WIDTH, PerfCounters
from hw.isa import COUNTER_NAMES


def test_snapshot_holds_the_increments_of_the_cycles_before_it():
    """A snapshot in cycle ``s`` holds, per counter, the sum of ``inc`` over cycles ``c < s``
    (not its own cycle's increment) and ``cycles_snap = cycles(s)``; the values hold until the
    next snapshot. Every snapshot here falls in a cycle with non-zero increments."""
    cfg = NPUConfig(rows=2, cols=2)
    n = len(COUNTER_NAMES)
    rng = np.random.default_rng(5)
    incs = rng.integers(1, cfg.axi_data_bytes + 1, size=(40, n))
    snaps = {3, 4, 17, 39}
    dut = PerfCounters(cfg)
    sim = Simulator(dut)
    sim.add_clock(1e-6)

    async def tb(ctx):
        total = np.zeros(n, dtype=np.int64)
        want = ([0] * n, 0)
        for c in range(len(incs)):
            for i in range(n):
                ctx.set(dut.inc[i], int(incs[c, i]))
            ctx.set(dut.cycles, 1000 + c)
            ctx.set(dut.snapshot, int(c in snaps))
            await ctx.tick()
            if c in snaps:
                want = ([int(v) % (1 << COUNTER_WIDTH) for v in total], 1000 + c)
            total += incs[c]
            got = [ctx.get(dut.values[i]) for i in range(n)]
            assert (got, ctx.get(dut.cycles_snap)) == want, f"after cycle {c}"

    sim.add_testbench(tb)
    sim.run()
