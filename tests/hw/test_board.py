# amaranth: UnusedElaboratable=no
"""Tests of the board wrapper :mod:`hw.board` in Amaranth's simulator.

* :class:`AXI4RAM` driven by a Python AXI4 manager: INCR bursts with partial write strobes,
  read bursts (IDs, RLAST, a stalled RREADY), address wrap-around;
* :class:`UartTx` / :class:`UartRx`: the exact 8N1 waveform on the line, decoding of a
  Python-driven line, and a loopback of every byte value;
* the whole :class:`NPUBoard` at a small configuration through its UART pins, speaking the
  host protocol of :class:`UartCsrBridge` (reads of read-only CSRs, a write and read-back,
  junk bytes before a command).

The whole board simulates in a few seconds at divisor 8, so no register-file stub is needed.
"""

import pytest
from amaranth import Module
from amaranth.sim import Simulator
from amaranth.utils import exact_log2

from hw.board import AXI4RAM, NPUBoard, UartRx, UartTx
from hw.bus import AXI_BURST_INCR, AXI_RESP_OKAY
from hw.config import NPUConfig
from hw.isa import CSR_ID_VALUE, CSR_VERSION_VALUE, Csr, queue_csr
from hw.top import NPU

SMALL = NPUConfig.parse("2x2,spad_rows=16,acc_rows=16,dram_bytes=4096,n_queues=1,n_sems=1,"
                        "trace_depth=2")


def run(dut, *testbenches, background=()):
    """Simulate ``dut`` with a clock until every testbench in ``testbenches`` has returned.

    Each testbench is ``async def tb(ctx)``; those in ``background`` may run forever.
    """
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    for tb in background:
        sim.add_testbench(tb, background=True)
    for tb in testbenches:
        sim.add_testbench(tb)
    sim.run()


async def handshake(ctx, valid, ready, *, limit=100):
    """Raise ``valid`` until a clock edge at which ``ready`` is high, then lower it."""
    ctx.set(valid, 1)
    for _ in range(limit):
        _, _, r = await ctx.tick().sample(ready)
        if r:
            ctx.set(valid, 0)
            return
    raise AssertionError(f"no {ready.name} within {limit} cycles")


# -- AXI4RAM ----------------------------------------------------------------------------------

async def axi_write(ctx, bus, addr, beats, *, id=0):
    """Write an INCR burst: ``beats`` is a list of ``(data, wstrb)``; returns ``(bid, bresp)``."""
    beat_bytes = len(bus.wstrb)
    ctx.set(bus.awid, id)
    ctx.set(bus.awaddr, addr)
    ctx.set(bus.awlen, len(beats) - 1)
    ctx.set(bus.awsize, exact_log2(beat_bytes))
    ctx.set(bus.awburst, AXI_BURST_INCR)
    await handshake(ctx, bus.awvalid, bus.awready)
    for i, (data, strobe) in enumerate(beats):
        ctx.set(bus.wdata, data)
        ctx.set(bus.wstrb, strobe)
        ctx.set(bus.wlast, i == len(beats) - 1)
        await handshake(ctx, bus.wvalid, bus.wready)
    ctx.set(bus.bready, 1)
    for _ in range(100):
        _, _, valid, bid, bresp = await ctx.tick().sample(bus.bvalid, bus.bid, bus.bresp)
        if valid:
            ctx.set(bus.bready, 0)
            return bid, bresp
    raise AssertionError("no write response")


async def axi_read(ctx, bus, addr, n_beats, *, id=0, stall_beat=None):
    """Read an INCR burst; returns a list of ``(rdata, rid, rresp, rlast)``, one per beat.

    With ``stall_beat`` the manager holds RREADY low for a few cycles once that beat is
    offered and checks that the beat stays valid and unchanged meanwhile.
    """
    ctx.set(bus.arid, id)
    ctx.set(bus.araddr, addr)
    ctx.set(bus.arlen, n_beats - 1)
    ctx.set(bus.arsize, exact_log2(len(bus.wstrb)))
    ctx.set(bus.arburst, AXI_BURST_INCR)
    await handshake(ctx, bus.arvalid, bus.arready)
    beats = []
    ctx.set(bus.rready, 1)
    for _ in range(100 * n_beats):
        if len(beats) == stall_beat:
            ctx.set(bus.rready, 0)
            await ctx.tick().until(bus.rvalid)
            held = ctx.get(bus.rdata)
            for _ in range(3):
                _, _, valid, data = await ctx.tick().sample(bus.rvalid, bus.rdata)
                assert valid and data == held, "R beat changed while RREADY was low"
            ctx.set(bus.rready, 1)
            stall_beat = None
        _, _, valid, *beat = await ctx.tick().sample(bus.rvalid, bus.rdata, bus.rid,
                                                     bus.rresp, bus.rlast)
        if valid:
            beats.append(tuple(beat))
            if len(beats) == n_beats:
                ctx.set(bus.rready, 0)
                return beats
    raise AssertionError(f"read burst incomplete: {len(beats)} of {n_beats} beats")


def merge(old: int, new: int, strobe: int, n_bytes: int) -> int:
    """``old`` with the bytes of ``new`` whose ``strobe`` bit is set."""
    mask = sum(0xFF << (8 * i) for i in range(n_bytes) if strobe >> i & 1)
    return (old & ~mask) | (new & mask)


def test_axi4ram_bursts():
    sig = NPU(SMALL).mem_signature
    n = sig.data_width // 8
    size = 256
    dut = AXI4RAM(sig, size)
    base = 0x40
    fill = [int.from_bytes(bytes([0x10 + i] * n), "little") for i in range(4)]
    new = [int.from_bytes(bytes(range(0xA0 + 8 * i, 0xA0 + 8 * i + n)), "little")
           for i in range(4)]
    strobes = [(1 << n) - 1, 0x0F, 0x81, 0x00]

    async def tb(ctx):
        bus = dut.bus
        assert await axi_write(ctx, bus, base, [(w, (1 << n) - 1) for w in fill],
                               id=3) == (3, AXI_RESP_OKAY)
        assert await axi_write(ctx, bus, base, list(zip(new, strobes, strict=True)),
                               id=5) == (5, AXI_RESP_OKAY)
        expected = [merge(f, w, s, n) for f, w, s in zip(fill, new, strobes, strict=True)]
        beats = await axi_read(ctx, bus, base, 4, id=9, stall_beat=1)
        assert [b[0] for b in beats] == expected
        assert [b[1:] for b in beats] == [(9, AXI_RESP_OKAY, 0)] * 3 + [(9, AXI_RESP_OKAY, 1)]
        # a single-beat burst is its own last beat; addresses wrap modulo size
        assert await axi_read(ctx, bus, base + n + size, 1, id=1) == [
            (expected[1], 1, AXI_RESP_OKAY, 1)]
        assert await axi_write(ctx, bus, size, [(0x1234, 0x3)]) == (0, AXI_RESP_OKAY)
        [(word, *_)] = await axi_read(ctx, bus, 0, 1)
        assert word & 0xFFFF == 0x1234

    run(dut, tb)


@pytest.mark.parametrize("size", [0, 4, 96, 1000])
def test_axi4ram_bad_size(size):
    sig = NPU(SMALL).mem_signature     # 64-bit data: at least 8 bytes, a power of two
    with pytest.raises(ValueError, match="power of two"):
        AXI4RAM(sig, size)


# -- UART -------------------------------------------------------------------------------------

def byte_monitor(rx, got: list):
    """A background testbench appending every byte ``rx`` (a :class:`UartRx`) delivers."""
    async def monitor(ctx):
        async for _, _, valid, data in ctx.tick().sample(rx.valid, rx.data):
            if valid:
                got.append(data)
    return monitor


def uart_waveform(byte: int, divisor: int) -> list[int]:
    """The 8N1 line level in each clock cycle of one frame: start, 8 data bits LSB first,
    stop."""
    bits = [0] + [byte >> i & 1 for i in range(8)] + [1]
    return [b for b in bits for _ in range(divisor)]


async def uart_send(ctx, line, byte: int, divisor: int):
    """Drive ``line`` with one 8N1 frame of ``byte``, ``divisor`` cycles per bit."""
    for level in uart_waveform(byte, divisor):
        ctx.set(line, level)
        await ctx.tick()


async def uart_recv(ctx, line, divisor: int, *, limit: int | None = 20000) -> int:
    """Wait for a start bit on ``line`` and decode one 8N1 frame, sampling mid-bit.

    Fails on a start bit that is not low in its middle, a stop bit that is not high, or no
    start bit within ``limit`` cycles (``None``: wait forever).
    """
    waited = 0
    while (await ctx.tick().sample(line))[2]:
        waited += 1
        if limit is not None and waited >= limit:
            raise AssertionError(f"no start bit within {limit} cycles")
    await ctx.tick().repeat(divisor // 2)
    assert not ctx.get(line), "start bit not low in its middle"
    byte = 0
    for i in range(8):
        await ctx.tick().repeat(divisor)
        byte |= ctx.get(line) << i
    await ctx.tick().repeat(divisor)
    assert ctx.get(line), "stop bit not high"
    return byte


BYTES = [0x00, 0xFF, 0xA5, 0x5A, 0x01, 0x80, 0x57]


@pytest.mark.parametrize("divisor", [4, 7])
def test_uart_tx_waveform(divisor):
    dut = UartTx(divisor)

    async def tb(ctx):
        assert ctx.get(dut.tx) == 1 and ctx.get(dut.ready) == 1
        line = []
        for byte in BYTES:
            ctx.set(dut.data, byte)
            await handshake(ctx, dut.valid, dut.ready)
            ctx.set(dut.data, 0)      # the frame must not depend on data after the handshake
            for _ in range(10 * divisor):
                line.append(ctx.get(dut.tx))
                await ctx.tick()
            assert ctx.get(dut.ready), "not ready after the stop bit"
        assert line == [v for byte in BYTES for v in uart_waveform(byte, divisor)]

    run(dut, tb)


@pytest.mark.parametrize("divisor", [4, 7])
def test_uart_rx_decodes(divisor):
    dut = UartRx(divisor)
    got = []

    async def tb(ctx):
        await ctx.tick().repeat(5)
        for byte in BYTES:                       # back to back
            await uart_send(ctx, dut.rx, byte, divisor)
        await ctx.tick().repeat(3 * divisor)
        await uart_send(ctx, dut.rx, 0x3C, divisor)
        await ctx.tick().repeat(3 * divisor)

    run(dut, tb, background=[byte_monitor(dut, got)])
    assert got == [*BYTES, 0x3C]


def test_uart_rx_drops_framing_error():
    divisor = 4
    dut = UartRx(divisor)
    got = []

    async def tb(ctx):
        for level in uart_waveform(0x42, divisor)[:-divisor] + [0] * divisor:   # stop bit low
            ctx.set(dut.rx, level)
            await ctx.tick()
        ctx.set(dut.rx, 1)
        await ctx.tick().repeat(12 * divisor)    # idle line: the receiver resynchronizes
        await uart_send(ctx, dut.rx, 0x24, divisor)
        await ctx.tick().repeat(3 * divisor)

    run(dut, tb, background=[byte_monitor(dut, got)])
    # 0x42 is dropped; the low stop bit itself may then be taken for a start bit (0xFF)
    assert 0x42 not in got and got[-1] == 0x24


def test_uart_rx_bad_divisor():
    with pytest.raises(ValueError, match="divisor"):
        UartRx(3)


def test_uart_loopback_all_bytes():
    divisor = 4
    m = Module()
    m.submodules.tx = tx = UartTx(divisor)
    m.submodules.rx = rx = UartRx(divisor)
    m.d.comb += rx.rx.eq(tx.tx)
    got = []

    async def tb(ctx):
        for byte in range(256):
            ctx.set(tx.data, byte)
            await handshake(ctx, tx.valid, tx.ready, limit=20 * divisor)
        await ctx.tick().repeat(20 * divisor)

    run(m, tb, background=[byte_monitor(rx, got)])
    assert got == list(range(256))


# -- the whole board over its UART ------------------------------------------------------------

DIVISOR = 8
BAUD = 115200


class Host:
    """The host side of the UART protocol of :class:`UartCsrBridge` on the board's pins.

    :meth:`listen` must run as a background testbench: it decodes every frame on ``tx``.
    """

    def __init__(self, board: NPUBoard):
        self.board = board
        self.received = []

    async def listen(self, ctx):
        """Decode the board's ``tx`` line forever into :attr:`received`."""
        while True:
            byte = await uart_recv(ctx, self.board.tx, DIVISOR, limit=None)
            self.received.append(byte)

    async def send(self, ctx, *data: int):
        """Send raw bytes to the board."""
        for byte in data:
            await uart_send(ctx, self.board.rx, byte, DIVISOR)

    async def recv(self, ctx, n: int, *, limit=100 * DIVISOR) -> bytes:
        """Wait for ``n`` bytes from the board (and nothing more) and take them."""
        for _ in range(limit):
            if len(self.received) >= n:
                break
            await ctx.tick()
        assert len(self.received) == n, f"expected {n} bytes, got {self.received}"
        data = bytes(self.received)
        self.received.clear()
        return data

    async def read(self, ctx, addr: int) -> int:
        """CSR read: 'R' addr16 -> data32 (big-endian)."""
        await self.send(ctx, ord("R"), *addr.to_bytes(2, "big"))
        return int.from_bytes(await self.recv(ctx, 4), "big")

    async def write(self, ctx, addr: int, value: int):
        """CSR write: 'W' addr16 data32 -> 'K'."""
        await self.send(ctx, ord("W"), *addr.to_bytes(2, "big"), *value.to_bytes(4, "big"))
        assert await self.recv(ctx, 1) == b"K"


def test_board_csr_over_uart():
    board = NPUBoard(SMALL, clock_hz=DIVISOR * BAUD, baud=BAUD)
    assert board.divisor == DIVISOR
    window = queue_csr(0, Csr.WINDOW_BASE)      # read/write, above 0xFF: both address bytes
    results = {}

    host = Host(board)

    async def tb(ctx):
        await ctx.tick().repeat(10)
        results["id"] = await host.read(ctx, Csr.ID)
        results["version"] = await host.read(ctx, Csr.VERSION)
        results["dram"] = await host.read(ctx, Csr.CFG_DRAM)
        results["window0"] = await host.read(ctx, window)
        await host.write(ctx, window, 0x1234_5678)
        results["window1"] = await host.read(ctx, window)
        await host.send(ctx, 0x00, 0xFF, ord("X"), ord("K"))   # not commands: ignored
        await ctx.tick().repeat(20 * DIVISOR)
        assert host.received == [], "the bridge answered junk bytes"
        results["window2"] = await host.read(ctx, window)
        await host.write(ctx, window, 0xCAFE_0000)
        results["window3"] = await host.read(ctx, window)

    run(board, tb, background=[host.listen])
    assert results == {
        "id": CSR_ID_VALUE, "version": CSR_VERSION_VALUE, "dram": SMALL.dram_bytes,
        "window0": 0, "window1": 0x1234_5678, "window2": 0x1234_5678, "window3": 0xCAFE_0000,
    }


def test_board_rejects_large_dram():
    with pytest.raises(ValueError, match="at most 1 MiB"):
        NPUBoard(NPUConfig.parse("2x2,dram_bytes=0x200000"))
