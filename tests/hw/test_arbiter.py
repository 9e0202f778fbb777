"""The AXI4 arbiter (:class:`hw.bus.arbiter.AXI4Arbiter`) alone in Amaranth's simulator: every
manager requests all the time, the shared port answers at random; grants on both the read and
the write channels must go round-robin, carry the manager's index as their ID and its address,
and W beats must follow the AW order."""

import random
from itertools import pairwise

import pytest
from amaranth.sim import Simulator

from hw.bus import AXI4Signature
from hw.bus.arbiter import AXI4Arbiter

SIG = AXI4Signature(addr_width=32, data_width=64, id_width=2)


@pytest.mark.parametrize("n", [2, 3])
def test_grants_go_round_robin_when_every_manager_requests(n):
    dut = AXI4Arbiter(SIG, n)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    rng = random.Random(n)
    got = {"ar": [], "aw": [], "w": []}

    async def tb(ctx):
        for i, mg in enumerate(dut.managers()):
            ctx.set(mg.araddr, 0x1000 * (i + 1))
            ctx.set(mg.awaddr, 0x2000 * (i + 1))
            ctx.set(mg.wdata, i)
            for sig in (mg.arvalid, mg.awvalid, mg.wvalid, mg.wlast):
                ctx.set(sig, 1)        # one-beat bursts, requested back to back
        bus = dut.bus
        for _ in range(200):
            ctx.set(bus.arready, int(rng.random() < 0.6))
            ctx.set(bus.awready, int(rng.random() < 0.6))
            ctx.set(bus.wready, int(rng.random() < 0.6))
            if ctx.get(bus.arvalid) and ctx.get(bus.arready):
                arid = ctx.get(bus.arid)
                assert ctx.get(bus.araddr) == 0x1000 * (arid + 1)
                got["ar"].append(arid)
            if ctx.get(bus.awvalid) and ctx.get(bus.awready):
                awid = ctx.get(bus.awid)
                assert ctx.get(bus.awaddr) == 0x2000 * (awid + 1)
                got["aw"].append(awid)
            if ctx.get(bus.wvalid) and ctx.get(bus.wready):
                assert ctx.get(bus.wlast)
                got["w"].append(ctx.get(bus.wdata))
            await ctx.tick()

    sim.add_testbench(tb)
    sim.run()
    for channel in ("ar", "aw"):
        seq = got[channel]
        assert len(seq) > 20, (channel, seq)
        assert all(b == (a + 1) % n for a, b in pairwise(seq)), (channel, seq)
    assert got["w"] == got["aw"][:len(got["w"])] and len(got["aw"]) - len(got["w"]) <= 1
