"""``hw.fifo.BlockRamFIFO`` against a cycle model of a first-word fall-through FIFO under
random writes and reads, in Amaranth's simulator: order, capacity, level and the cycle each
entry reaches the output."""

import gc
import sys
import warnings
from collections import deque

import numpy as np
import pytest
from amaranth.hdl import Module
from amaranth.sim import Simulator

from hw.fifo import BlockRamFIFO


@pytest.mark.parametrize("depth,p_write,p_read", [(2, 0.5, 0.5), (3, 0.7, 0.3), (4, 0.3, 0.8),
                                                  (7, 0.9, 0.6), (64, 0.8, 0.2),
                                                  (64, 0.5, 0.5), (5, 1.0, 0.9)])
def test_block_ram_fifo_cycle_model(depth, p_write, p_read):
    """The model: the FIFO takes a write while it holds fewer than ``depth`` entries; the
    oldest entry is on ``r_data`` (``r_rdy``) from cycle ``max(written + 2, previous entry
    read + 1)``."""
    width = 12
    m = Module()
    m.submodules.dut = dut = BlockRamFIFO(width, depth)
    rng = np.random.default_rng(depth * 1000 + int(p_write * 10) + int(p_read * 100))
    bad = []
    seen = {"full": 0, "read": 0}
    held: deque = deque()            # (data, cycle it may reach the output at the earliest)

    async def bench(ctx):
        last_read = -1
        for cycle in range(3000):
            w, r = bool(rng.random() < p_write), bool(rng.random() < p_read)
            data = int(rng.integers(0, 1 << width))
            ctx.set(dut.w_en, w)
            ctx.set(dut.w_data, data)
            ctx.set(dut.r_en, r)
            out = bool(held) and max(held[0][1], last_read + 1) <= cycle
            want = (int(len(held) < depth), int(out), len(held)) + ((held[0][0],) if out else ())
            got = (ctx.get(dut.w_rdy), ctx.get(dut.r_rdy), ctx.get(dut.level))
            got += (ctx.get(dut.r_data),) if got[1] else ()
            if got != want:
                bad.append((cycle, got, want))
            seen["full"] += len(held) == depth
            if r and out:
                held.popleft()
                last_read = cycle
                seen["read"] += 1
            if w and want[0]:
                held.append((data, cycle + 2))
            await ctx.tick()
    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert not bad, bad[:5]
    assert seen["full"] and seen["read"] > 100     # the run filled the FIFO and read from it


@pytest.mark.parametrize("width,depth", [(0, 4), (8, 1)])
def test_block_ram_fifo_refuses_bad_sizes(width, depth, monkeypatch):
    """A refused FIFO does not warn "created but never used" when it is collected (pytest
    turned that warning, raised while another test ran, into that test's failure)."""
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)

    def make() -> str:
        try:
            BlockRamFIFO(width, depth)
        except ValueError as e:
            return str(e)
        return ""

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert "width" in make() or "depth" in make()
        gc.collect()
    assert not unraisable
