"""A cycle-exact Python transcription of the co-simulation DRAM (``cosim/tb/dram.sv``) for block
tests in Amaranth's simulator, and the DMA's local memories behind ideal ports.

``dram.sv`` is the memory every RTL cycle figure is measured against (the ``ideal`` timing);
:class:`IdealDram` reproduces its AXI4 handshakes register for register, so that a block test of
:class:`hw.dma.DMA` sees exactly the cycles the full NPU sees on Verilator:

* reads: up to ``outstanding`` read bursts queued (``ARREADY`` low when full), answered in
  order, one beat per cycle; ``RVALID``/``RDATA``/``RLAST`` are registers that load the next
  beat when the current one is taken (or none is shown); a burst is moved from the queue to the
  beat generator only in a cycle in which the generator is idle, so consecutive bursts are
  separated by one idle cycle unless the last beat of the first one is held;
* writes: one burst at a time, ``AWREADY`` in the idle state, ``WREADY`` in the data state,
  then ``BVALID`` (a register) for one or more cycles until ``BREADY``.

Out-of-range bursts get DECERR as in ``dram.sv``; protocol violations (4 KiB crossing, WLAST
mismatch, non-INCR) raise ``AssertionError`` instead of counting.
"""

from collections import deque

from amaranth.sim import SimulatorContext

from hw.bus import AXI_BURST_INCR, AXI_RESP_DECERR, AXI_RESP_OKAY

__all__ = ["IdealDram", "IdealLocalMemories"]


class IdealDram:
    """``dram.sv`` on an AXI4 manager port ``bus`` (an ``AXI4Signature`` member of the DUT).

    Parameters
    ----------
    bus
        The DUT's AXI4 manager interface.
    size : int
        Bytes of memory (a ``bytearray``, :attr:`mem`).
    beat_bytes : int
        Bus width in bytes.
    outstanding : int
        Read bursts the queue holds (``dram.sv``'s ``OUTSTANDING``; the testbench uses 16).

    Attributes
    ----------
    ars, aws : list of (int, int)
        ``(address, AxLEN)`` of every read / write burst, in handshake order.
    cycles : int
        Clock edges seen.
    """

    def __init__(self, bus, size: int, beat_bytes: int, outstanding: int = 16):
        self.bus = bus
        self.mem = bytearray(size)
        self.beat_bytes = beat_bytes
        self.outstanding = outstanding
        self.ars: list[tuple[int, int]] = []
        self.aws: list[tuple[int, int]] = []
        self.cycles = 0

    def _bad(self, addr: int, length: int) -> bool:
        first = addr - addr % self.beat_bytes
        return first + (length + 1) * self.beat_bytes > len(self.mem)

    def _check(self, kind: str, addr: int, length: int, burst: int, size: int) -> None:
        a = self.beat_bytes
        assert burst == AXI_BURST_INCR and 1 << size == a, f"{kind}: burst {burst} size {size}"
        last = addr - addr % a + (length + 1) * a - 1
        assert addr >> 12 == last >> 12, f"{kind} {addr:#x} + {length + 1} beats crosses 4 KiB"

    def _beat(self, addr: int) -> int:
        a = addr - addr % self.beat_bytes
        return int.from_bytes(self.mem[a:a + self.beat_bytes], "little")

    async def run(self, ctx: SimulatorContext) -> None:
        """The DRAM's clocked process (run as a background testbench)."""
        bus, a = self.bus, self.beat_bytes
        # write channel
        wstate = "idle"
        w_addr = w_left = 0
        w_err = False
        bvalid, bresp = False, AXI_RESP_OKAY
        # read channel
        queue: deque = deque()          # (addr, len, err) of accepted, not yet started bursts
        r_busy, r_addr, r_left, r_err = False, 0, 0, False
        rvalid, rdata, rlast, rresp = False, 0, False, AXI_RESP_OKAY
        while True:
            arready = len(queue) != self.outstanding
            ctx.set(bus.awready, wstate == "idle")
            ctx.set(bus.wready, wstate == "data")
            ctx.set(bus.bvalid, bvalid)
            ctx.set(bus.bresp, bresp)
            ctx.set(bus.arready, arready)
            ctx.set(bus.rvalid, rvalid)
            ctx.set(bus.rdata, rdata)
            ctx.set(bus.rlast, rlast)
            ctx.set(bus.rresp, rresp)
            (_, _, awvalid, awaddr, awlen, awsize, awburst, wvalid, wdata, wstrb, wlast, bready,
             arvalid, araddr, arlen, arsize, arburst, rready) = await ctx.tick().sample(
                bus.awvalid, bus.awaddr, bus.awlen, bus.awsize, bus.awburst, bus.wvalid,
                bus.wdata, bus.wstrb, bus.wlast, bus.bready, bus.arvalid, bus.araddr,
                bus.arlen, bus.arsize, bus.arburst, bus.rready)
            self.cycles += 1

            # -- write channel: W_IDLE -> W_DATA -> W_RESP ---------------------------------------
            if wstate == "idle" and awvalid:
                self._check("AW", awaddr, awlen, awburst, awsize)
                self.aws.append((awaddr, awlen))
                w_addr, w_left, w_err = awaddr, awlen, self._bad(awaddr, awlen)
                wstate = "data"
            elif wstate == "data" and wvalid:
                assert bool(wlast) == (w_left == 0), f"WLAST={wlast} with {w_left} beats left"
                if not w_err:
                    base = w_addr - w_addr % a
                    for i in range(a):
                        if wstrb >> i & 1:
                            self.mem[base + i] = wdata >> (8 * i) & 0xFF
                w_addr = w_addr - w_addr % a + a
                if w_left == 0:
                    bvalid, bresp = True, AXI_RESP_DECERR if w_err else AXI_RESP_OKAY
                    wstate = "resp"
                w_left -= 1
            elif wstate == "resp" and bready:
                bvalid = False
                wstate = "idle"

            # -- read channel: queue, then one beat per cycle (non-blocking semantics) -----------
            waiting = bool(queue)                  # q_wp != q_rp before this edge
            busy_before = r_busy
            if arvalid and arready:
                self._check("AR", araddr, arlen, arburst, arsize)
                self.ars.append((araddr, arlen))
                queue.append((araddr, arlen, self._bad(araddr, arlen)))
            if not rvalid or rready:
                if busy_before:
                    rvalid, rlast = True, r_left == 0
                    rdata = 0 if r_err else self._beat(r_addr)
                    rresp = AXI_RESP_DECERR if r_err else AXI_RESP_OKAY
                    r_addr = r_addr - r_addr % a + a
                    if r_left == 0:
                        r_busy = False
                    r_left -= 1
                else:
                    rvalid = False
            if not busy_before and waiting:
                r_addr, r_left, r_err = queue.popleft()
                r_busy = True


class IdealLocalMemories:
    """The DMA's four local-memory ports as ideal memories: write ``ready`` always high, read
    data one cycle after ``en`` (the tile's synchronous read ports).

    ``rows[mem]`` is a list of row values (ints), one per local row.
    """

    def __init__(self, dut, depths: dict, init=None):
        from hw.isa import LocalMem
        self.ports_w = {LocalMem.SPAD: dut.spad_w, LocalMem.ACC: dut.acc_w}
        self.ports_r = {LocalMem.SPAD: dut.spad_r, LocalMem.ACC: dut.acc_r}
        self.rows = init or {mem: [0] * depths[mem] for mem in depths}

    async def run(self, ctx: SimulatorContext) -> None:
        mems = list(self.ports_w)
        watched = []
        for mem in mems:
            ctx.set(self.ports_w[mem].ready, 1)
            watched += [self.ports_w[mem].en, self.ports_w[mem].addr, self.ports_w[mem].data,
                        self.ports_r[mem].en, self.ports_r[mem].addr]
        while True:
            _, _, *v = await ctx.tick().sample(*watched)
            for i, mem in enumerate(mems):
                w_en, w_addr, w_data, r_en, r_addr = v[5 * i:5 * i + 5]
                if r_en:
                    ctx.set(self.ports_r[mem].data, self.rows[mem][r_addr])
                if w_en:
                    self.rows[mem][w_addr] = w_data
