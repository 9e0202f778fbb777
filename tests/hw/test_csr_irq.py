"""hw.csr.CsrBlock alone: ``IRQ_STATUS`` write-one-to-clear against interrupts that arrive in
the same cycle (Amaranth simulator)."""

import numpy as np
import pytest
from amaranth import ResetInserter, Signal
from amaranth.sim import Simulator

from hw.config import NPUConfig
from hw.csr import CsrBlock
from hw.isa import Csr, IrqBit, queue_csr


async def _write(ctx, bus, addr: int, value: int) -> None:
    """One AXI4-Lite write, AW and W together; returns in the cycle after the handshake, the
    cycle in which the CSR block acts on it (before that cycle's edge)."""
    ctx.set(bus.awaddr, addr)
    ctx.set(bus.wdata, value)
    ctx.set(bus.wstrb, 0xF)
    ctx.set(bus.awvalid, 1)
    ctx.set(bus.wvalid, 1)
    ctx.set(bus.bready, 1)
    assert ctx.get(bus.awready) and ctx.get(bus.wready)
    await ctx.tick()
    ctx.set(bus.awvalid, 0)
    ctx.set(bus.wvalid, 0)


async def _finish(ctx, bus, source=None) -> None:
    """Let the write act (with ``source`` pulsing in that cycle, if given) and answer B."""
    if source is not None:
        ctx.set(source, 1)
    await ctx.tick()                   # the write acts at this edge
    if source is not None:
        ctx.set(source, 0)
    assert ctx.get(bus.bvalid)
    await ctx.tick()                   # B handshake
    assert not ctx.get(bus.bvalid)


def test_irq_set_in_the_cycle_of_its_clear_stays_pending():
    """An interrupt source pulsing in the cycle a host write clears the same ``IRQ_STATUS`` bit
    is a new interrupt: it stays pending (the old one is cleared, the new one set), so a fence
    completing while the host acknowledges the previous one is not lost. A write of 0 clears
    nothing; a clear without a new pulse clears."""
    dut = CsrBlock(NPUConfig(rows=2, cols=2))
    bus = dut.bus
    sim = Simulator(dut)
    sim.add_clock(1e-6)

    async def pulse(ctx, sig) -> None:
        ctx.set(sig, 1)
        await ctx.tick()
        ctx.set(sig, 0)

    async def tb(ctx):
        await _write(ctx, bus, Csr.IRQ_ENABLE, IrqBit.FENCE | IrqBit.ERROR)
        await _finish(ctx, bus)
        assert not ctx.get(dut.irq)
        for bit, source in ((IrqBit.FENCE, dut.fence_irq), (IrqBit.ERROR, dut.err_set)):
            await pulse(ctx, source)
            assert ctx.get(dut.irq)
            await _write(ctx, bus, Csr.IRQ_STATUS, 0)            # clears nothing
            await _finish(ctx, bus)
            assert ctx.get(dut.irq)
            await _write(ctx, bus, Csr.IRQ_STATUS, bit)          # clear alone
            await _finish(ctx, bus)
            assert not ctx.get(dut.irq), bit
            await pulse(ctx, source)
            await _write(ctx, bus, Csr.IRQ_STATUS, bit)          # clear and a new pulse
            await _finish(ctx, bus, source)
            assert ctx.get(dut.irq), f"{bit!r} set in the cycle of its clear was lost"
            await _write(ctx, bus, Csr.IRQ_STATUS, bit)
            await _finish(ctx, bus)
            assert not ctx.get(dut.irq)

    sim.add_testbench(tb)
    sim.run()


async def _read(ctx, bus, addr: int) -> int:
    """One AXI4-Lite read; returns the value (the block answers in the cycle after AR)."""
    ctx.set(bus.araddr, addr)
    ctx.set(bus.arvalid, 1)
    ctx.set(bus.rready, 1)
    assert ctx.get(bus.arready)
    await ctx.tick()
    ctx.set(bus.arvalid, 0)
    assert ctx.get(bus.rvalid)
    value = ctx.get(bus.rdata)
    await ctx.tick()
    return value


@pytest.mark.parametrize("config", [NPUConfig(rows=2, cols=2),
                                    NPUConfig(rows=2, cols=2, n_queues=3, tlb_entries=0)],
                         ids=["4-queues-tlb", "3-queues-no-tlb"])
def test_queue_registers_read_back_what_the_host_wrote(config):
    """The host-written queue registers (``RING_BASE``, ``RING_SIZE``, ``TAIL``,
    ``WINDOW_BASE``, ``WINDOW_LIMIT`` and, with a TLB, ``Q_VM``) read through a memory copy:
    after random writes in random order every register of every queue reads what was last
    written to it, 0 if nothing was, and drives the same value on its output port; ``Q_VM``
    reads 0 and ignores writes without a TLB. A reset in the middle zeroes them all, although
    it does not clear the memory."""
    dut = CsrBlock(config)
    bus = dut.bus
    reset = Signal()
    ports = {Csr.RING_BASE: dut.ring_base, Csr.RING_SIZE: dut.ring_size, Csr.TAIL: dut.tail,
             Csr.WINDOW_BASE: dut.window_base, Csr.WINDOW_LIMIT: dut.window_limit,
             Csr.Q_VM: dut.vm}
    rng = np.random.default_rng(3)
    sim = Simulator(ResetInserter(reset)(dut))
    sim.add_clock(1e-6)

    async def tb(ctx):
        want = {(q, r): 0 for q in range(config.n_queues) for r in ports}
        for step in range(40):
            if step == 20:
                ctx.set(reset, 1)
                await ctx.tick()
                ctx.set(reset, 0)
                want = dict.fromkeys(want, 0)
            q, r = list(want)[rng.integers(len(want))]
            value = int(rng.integers(0, 1 << 32))
            await _write(ctx, bus, queue_csr(q, r), value)
            await _finish(ctx, bus)
            if r != Csr.Q_VM or config.tlb_entries:
                want[q, r] = value
            if step % 8 == 7 or step in (20, 39):
                for (qq, rr), v in want.items():
                    assert await _read(ctx, bus, queue_csr(qq, rr)) == v, (step, qq, hex(rr))
                    assert ctx.get(ports[rr][qq]) == v

    sim.add_testbench(tb)
    sim.run()


def test_a_read_issued_during_a_snapshot_waits_for_it():
    """A host that reads a counter before the ``CNT_SNAPSHOT`` write's response (AXI4-Lite
    allows it) must not see the snapshot half written: AR is not accepted while the counter
    block writes it (``SNAPSHOT_CYCLES``), then the read returns the new snapshot. Every
    counter adds 1 a cycle, so each reads the snapshot's cycle, as ``CNT_CYCLES_LO`` does."""
    from amaranth import Module

    from hw.counters import PerfCounters
    from hw.isa import COUNTER_NAMES, SNAPSHOT_CYCLES, counter_csr
    cfg = NPUConfig(rows=2, cols=2)
    m = Module()
    m.submodules.csr = csr = CsrBlock(cfg)
    m.submodules.counters = cnt = PerfCounters(cfg)
    m.d.comb += [cnt.cycles.eq(csr.cycles), cnt.snapshot.eq(csr.snapshot),
                 csr.snapshot_busy.eq(cnt.busy), cnt.rd_index.eq(csr.counter_index),
                 cnt.rd_en.eq(csr.counter_rd), csr.counter_value.eq(cnt.rd_data),
                 csr.counters_cycles.eq(cnt.cycles_snap)]
    m.d.comb += [cnt.inc[i].eq(1) for i in range(len(COUNTER_NAMES))]
    bus = csr.bus
    sim = Simulator(m)
    sim.add_clock(1e-6)

    async def tb(ctx):
        for _ in range(5):
            await ctx.tick()
        await _write(ctx, bus, Csr.CNT_SNAPSHOT, 1)     # acts in the next cycle
        ctx.set(bus.bready, 0)
        ctx.set(bus.araddr, counter_csr(COUNTER_NAMES[-1]))
        ctx.set(bus.arvalid, 1)
        ctx.set(bus.rready, 1)
        await ctx.tick()                                # the snapshot's edge
        held = 0
        while not ctx.get(bus.arready):
            assert not ctx.get(bus.bvalid)
            held += 1
            await ctx.tick()
        assert held == SNAPSHOT_CYCLES and ctx.get(bus.bvalid)
        await ctx.tick()
        ctx.set(bus.arvalid, 0)
        assert ctx.get(bus.rvalid)
        value = ctx.get(bus.rdata)
        await ctx.tick()
        ctx.set(bus.bready, 1)
        await ctx.tick()
        assert value == await _read(ctx, bus, Csr.CNT_CYCLES_LO) > 0

    sim.add_testbench(tb)
    sim.run()
