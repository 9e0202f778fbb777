"""hw.csr.CsrBlock alone: ``IRQ_STATUS`` write-one-to-clear against interrupts that arrive in
the same cycle (Amaranth simulator)."""

from amaranth.sim import Simulator

from hw.config import NPUConfig
from hw.csr import CsrBlock
from hw.isa import Csr, IrqBit


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
