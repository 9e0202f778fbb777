"""hw.counters.PerfCounters alone: what a snapshot holds, against a scalar running sum."""

import numpy as np
import pytest
from amaranth import ResetInserter, Signal
from amaranth.sim import Simulator

from hw.config import NPUConfig
from hw.counters import COUNTER_WIDTH, PerfCounters
from hw.isa import COUNTER_NAMES, SNAPSHOT_CYCLES


@pytest.mark.parametrize("cycles, snaps, seed, bus_bits, reset_at", [
    # 42 falls while the snapshot of 41 is written (ignored); the last one right after it
    (160, (3, 41, 42, 42 + SNAPSHOT_CYCLES), 5, 64, None),
    (400, (17, 250), 6, 64, None),                # the pending counts near their bound
    (400, (17, 250), 7, 256, None),               # 32 bytes a beat: wider pending counts
    (300, (17, 190), 8, 64, 120),                 # a reset between: counts start from 0
], ids=["back-to-back", "long-gaps", "256-bit-bus", "reset"])
def test_snapshot_holds_the_increments_of_the_cycles_before_it(cycles, snaps, seed, bus_bits,
                                                               reset_at):
    """A snapshot in cycle ``s`` holds, per counter, the sum of ``inc`` over cycles ``c < s`` (not
    its own cycle's increment) and ``cycles_snap = cycles(s)`` (once ``busy`` falls): ``busy`` is
    high for exactly ``SNAPSHOT_CYCLES`` cycles after it, and from then on every counter reads back
    its snapshot through the read port (one cycle after ``rd_en``) until the next snapshot. A
    snapshot pulse while ``busy`` is ignored. Increments are random up to a bus beat, with a stretch
    of three rounds at the bound, where a pending count too narrow would wrap. A reset (the memories
    keep their words) starts every count and the snapshot from 0."""
    cfg = NPUConfig(rows=2, cols=2, axi_data_bits=bus_bits)
    n = len(COUNTER_NAMES)
    rng = np.random.default_rng(seed)
    incs = rng.integers(0, cfg.axi_data_bytes + 1, size=(cycles, n))
    incs[100:100 + 3 * n] = cfg.axi_data_bytes       # a stretch at the bound
    dut = PerfCounters(cfg)
    reset = Signal()
    sim = Simulator(ResetInserter(reset)(dut))
    sim.add_clock(1e-6)

    async def tb(ctx):
        total = np.zeros(n, dtype=np.int64)
        want = ([0] * n, 0)
        busy_until = -1
        for c in range(cycles):
            if c == reset_at:
                ctx.set(reset, 1)
                await ctx.tick()
                ctx.set(reset, 0)
                total[:] = 0
                want, busy_until = ([0] * n, 0), -1
                continue
            for i in range(n):
                ctx.set(dut.inc[i], int(incs[c, i]))
            ctx.set(dut.cycles, 1000 + c)
            ctx.set(dut.snapshot, int(c in snaps))
            assert ctx.get(dut.busy) == (c <= busy_until), f"busy in cycle {c}"
            if not ctx.get(dut.busy):
                # read every counter back, one a cycle, while the counts go on
                i = c % n
                ctx.set(dut.rd_index, i)
                ctx.set(dut.rd_en, 1)
            else:
                ctx.set(dut.rd_en, 0)
            await ctx.tick()
            if c in snaps and c > busy_until:
                want = ([int(v) % (1 << COUNTER_WIDTH) for v in total], 1000 + c)
                busy_until = c + SNAPSHOT_CYCLES
            total += incs[c]
            if c >= busy_until:
                assert ctx.get(dut.cycles_snap) == want[1]
            if ctx.get(dut.rd_en) and c > busy_until:
                assert ctx.get(dut.rd_data) == want[0][c % n], \
                    f"{COUNTER_NAMES[c % n]} read in cycle {c}"

    sim.add_testbench(tb)
    sim.run()
