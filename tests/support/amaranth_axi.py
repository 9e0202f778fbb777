"""Naive bus models for block tests in Amaranth's simulator: an AXI4-Lite manager and an AXI4
subordinate memory (a Python bytearray), each deliberately simple."""

import random

from amaranth.sim import SimulatorContext

from hw.bus import AXI_RESP_DECERR, AXI_RESP_OKAY, AXI_RESP_SLVERR


async def axil_write(ctx: SimulatorContext, bus, addr: int, value: int, timeout: int = 100):
    """One AXI4-Lite write from the manager side; raises TimeoutError if it does not finish."""
    ctx.set(bus.awaddr, addr)
    ctx.set(bus.awvalid, 1)
    ctx.set(bus.wdata, value)
    ctx.set(bus.wstrb, 0xF)
    ctx.set(bus.wvalid, 1)
    ctx.set(bus.bready, 1)
    aw = w = False
    for _ in range(timeout):
        _, _, awready, wready, bvalid = await ctx.tick().sample(
            bus.awready, bus.wready, bus.bvalid)
        if awready and not aw:
            aw = True
            ctx.set(bus.awvalid, 0)
        if wready and not w:
            w = True
            ctx.set(bus.wvalid, 0)
        if bvalid:
            ctx.set(bus.bready, 0)
            return
    raise TimeoutError(f"AXI4-Lite write to {addr:#x} did not complete")


async def axil_read(ctx: SimulatorContext, bus, addr: int, timeout: int = 100) -> int:
    """One AXI4-Lite read; returns the 32-bit value."""
    ctx.set(bus.araddr, addr)
    ctx.set(bus.arvalid, 1)
    ctx.set(bus.rready, 1)
    for _ in range(timeout):
        _, _, arready, rvalid, rdata = await ctx.tick().sample(bus.arready, bus.rvalid, bus.rdata)
        if arready:
            ctx.set(bus.arvalid, 0)
        if rvalid:
            ctx.set(bus.rready, 0)
            return rdata
    raise TimeoutError(f"AXI4-Lite read of {addr:#x} did not complete")


class AxiMemory:
    """AXI4 subordinate backed by a bytearray; optional random stalls on every channel.

    Reads are answered in order, one beat per cycle when not stalled. Out-of-range accesses
    get DECERR; with ``read_fault = (lo, hi)`` every beat of a read burst whose bytes meet
    ``[lo, hi)`` gets SLVERR (the rule of the co-simulation's DRAM model,
    :class:`sw.model.faults.BusFault`). ``log`` records every (kind, addr, len) request.
    """

    def __init__(self, bus, size: int, beat_bytes: int, stall: float = 0.0, seed: int = 0):
        self.bus = bus
        self.mem = bytearray(size)
        self.beat_bytes = beat_bytes
        self.stall = stall
        self.rng = random.Random(seed)
        self.log: list[tuple[str, int, int]] = []
        self.read_fault: tuple[int, int] | None = None

    def _go(self) -> bool:
        return self.rng.random() >= self.stall

    async def run_reads(self, ctx: SimulatorContext):
        bus = self.bus
        pending: list[tuple[int, int, int]] = []
        beat = 0
        while True:
            ctx.set(bus.arready, self._go())
            if pending:
                addr, length, rid = pending[0]
                a = addr + beat * self.beat_bytes
                ok = a + self.beat_bytes <= len(self.mem)
                data = int.from_bytes(self.mem[a:a + self.beat_bytes], "little") if ok else 0
                ctx.set(bus.rvalid, self._go())
                ctx.set(bus.rdata, data)
                ctx.set(bus.rid, rid)
                fault = self.read_fault is not None and addr < self.read_fault[1] \
                    and addr + (length + 1) * self.beat_bytes > self.read_fault[0]
                ctx.set(bus.rresp, AXI_RESP_SLVERR if fault
                        else AXI_RESP_OKAY if ok else AXI_RESP_DECERR)
                ctx.set(bus.rlast, beat == length)
            else:
                ctx.set(bus.rvalid, 0)
            _, _, arvalid, arready, araddr, arlen, arid, rvalid, rready = await ctx.tick().sample(
                bus.arvalid, bus.arready, bus.araddr, bus.arlen, bus.arid, bus.rvalid, bus.rready)
            if rvalid and rready:
                if beat == pending[0][1]:
                    pending.pop(0)
                    beat = 0
                else:
                    beat += 1
            if arvalid and arready:
                self.log.append(("read", araddr, arlen))
                pending.append((araddr & ~(self.beat_bytes - 1), arlen, arid))

    async def run_writes(self, ctx: SimulatorContext):
        bus = self.bus
        bursts: list[tuple[int, int, int]] = []
        beat = 0
        responses: list[tuple[int, int]] = []
        while True:
            ctx.set(bus.awready, self._go())
            ctx.set(bus.wready, self._go() and bool(bursts))
            if responses:
                ctx.set(bus.bvalid, 1)
                ctx.set(bus.bid, responses[0][0])
                ctx.set(bus.bresp, responses[0][1])
            else:
                ctx.set(bus.bvalid, 0)
            (_, _, awvalid, awready, awaddr, awlen, awid, wvalid, wready, wdata, wstrb,
             bvalid, bready) = await ctx.tick().sample(
                bus.awvalid, bus.awready, bus.awaddr, bus.awlen, bus.awid, bus.wvalid,
                bus.wready, bus.wdata, bus.wstrb, bus.bvalid, bus.bready)
            if bvalid and bready:
                responses.pop(0)
            if wvalid and wready:
                addr, length, wid = bursts[0]
                a = addr + beat * self.beat_bytes
                ok = a + self.beat_bytes <= len(self.mem)
                if ok:
                    for i in range(self.beat_bytes):
                        if wstrb >> i & 1:
                            self.mem[a + i] = wdata >> (8 * i) & 0xFF
                if beat == length:
                    bursts.pop(0)
                    beat = 0
                    responses.append((wid, AXI_RESP_OKAY if ok else AXI_RESP_DECERR))
                else:
                    beat += 1
            if awvalid and awready:
                self.log.append(("write", awaddr, awlen))
                bursts.append((awaddr & ~(self.beat_bytes - 1), awlen, awid))
