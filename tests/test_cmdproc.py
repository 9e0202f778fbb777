"""Command processor + CSR block in Amaranth's simulator, with engines modelled in Python.

The engines here are deliberately naive: take a command, wait a fixed number of cycles, retire
(optionally with an error). The checks are on what the processor does: fetch from the ring,
dispatch, semaphore order, fences, errors, ring wrap-around."""

import pytest
from amaranth import Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from hw.cmdproc import ENGINES, CommandProcessor
from hw.config import NPUConfig
from hw.csr import CsrBlock
from hw.isa import (
    COMMAND_BYTES,
    CSR_ID_VALUE,
    Csr,
    ErrorCode,
    IrqBit,
    Opcode,
    decode,
    encode,
    queue_csr,
    sem_csr,
)
from tests.amaranth_axi import AxiMemory, axil_read, axil_write

RING = 0x1000
FENCE_ADDR = 0x800


class Harness(wiring.Component):
    def __init__(self, cfg):
        self.cfg = cfg
        self.csr = CsrBlock(cfg)
        self.cp = CommandProcessor(cfg)
        super().__init__({})

    def elaborate(self, platform):
        m = Module()
        m.submodules.csr = csr = self.csr
        m.submodules.cp = cp = self.cp
        m.d.comb += [
            cp.ring_base.eq(csr.ring_base), cp.ring_size.eq(csr.ring_size),
            cp.tail.eq(csr.tail), csr.head.eq(cp.head), csr.busy.eq(cp.busy),
            cp.error.eq(csr.error), cp.clear.eq(csr.clear),
            csr.err_set.eq(cp.err_set), csr.err_code.eq(cp.err_code),
            csr.err_opcode.eq(cp.err_opcode), csr.err_cmd.eq(cp.err_cmd),
            csr.err_addr.eq(cp.err_addr), csr.fence_irq.eq(cp.fence_irq),
            csr.sems.eq(cp.sems),
        ]
        return m


def cmd(opcode, *, wait=None, signal=None, irq=0, body=None):
    header = {"opcode": opcode, "flags": {"irq": irq}}
    if wait is not None:
        header["flags"]["wait"] = 1
        header["wait_sem"], header["wait_value"] = wait
    if signal is not None:
        header["flags"]["signal"] = 1
        header["signal_sem"] = signal
    return encode({"header": header, "body": body or {}})


def fence(value, irq=1, **kw):
    return cmd(Opcode.FENCE, irq=irq, body={"fence": {"addr": FENCE_ADDR, "value": value}}, **kw)


def engine_cmd(opcode, tag, **kw):
    """An engine command; ``tag`` goes into a body field so the fake engine can log it."""
    return cmd(opcode, body={"raw": tag}, **kw)


def run(cfg, program, *, latency=None, fail=None, stall=0.0, ring_size=8):
    """Run ``program(ctx, h, mem, log)`` with fake engines; returns the engine log.

    ``latency[engine]`` cycles per command; ``fail`` = (engine, tag, code, addr) makes that
    command retire with an error.
    """
    latency = latency or {}
    h = Harness(cfg)
    sim = Simulator(h)
    sim.add_clock(1e-8)
    mem = AxiMemory(h.cp.bus, 1 << 16, cfg.axi_data_bytes, stall=stall, seed=1)
    log = []
    sim.add_testbench(mem.run_reads, background=True)
    sim.add_testbench(mem.run_writes, background=True)

    for name in ENGINES:
        port = getattr(h.cp, name)

        async def engine(ctx, port=port, name=name):
            cycle = 0
            while True:
                ctx.set(port.cmd.ready, 1)
                ctx.set(port.done, 0)
                ctx.set(port.error, ErrorCode.NONE)
                _, _, valid, payload = await ctx.tick().sample(port.cmd.valid, port.cmd.payload)
                cycle += 1
                if not valid:
                    continue
                tag = payload.body.raw
                ctx.set(port.cmd.ready, 0)
                ctx.set(port.busy, 1)
                start = cycle
                for _ in range(latency.get(name, 3)):
                    await ctx.tick()
                    cycle += 1
                log.append((name, tag, start, cycle))
                ctx.set(port.done, 1)
                ctx.set(port.busy, 0)
                if fail and fail[0] == name and fail[1] == tag:
                    ctx.set(port.error, fail[2])
                    ctx.set(port.error_addr, fail[3])
                await ctx.tick()
                cycle += 1

        sim.add_testbench(engine, background=True)

    result = {}

    async def tb(ctx):
        bus = h.csr.bus
        await axil_write(ctx, bus, queue_csr(0, Csr.RING_BASE), RING)
        await axil_write(ctx, bus, queue_csr(0, Csr.RING_SIZE), ring_size)
        await axil_write(ctx, bus, Csr.IRQ_ENABLE, 3)
        await program(ctx, h, mem, result)
        result["done"] = True

    sim.add_testbench(tb)
    sim.run()   # ends when the testbench does; every wait in it is bounded
    assert result.get("done"), "testbench did not finish in time"

    return log, result


async def submit(ctx, h, mem, cmds, tail_start=0, ring_size=8):
    tail = tail_start
    for c in cmds:
        mem.mem[RING + tail * COMMAND_BYTES:RING + (tail + 1) * COMMAND_BYTES] = c
        tail = (tail + 1) % ring_size
    await axil_write(ctx, h.csr.bus, queue_csr(0, Csr.TAIL), tail)
    return tail


async def wait_irq(ctx, h, limit=2000):
    for _ in range(limit):
        if ctx.get(h.csr.irq):
            return True
        await ctx.tick()
    return False


CONFIGS = [NPUConfig(), NPUConfig(rows=4, cols=4, axi_data_bits=32),
           NPUConfig(axi_data_bits=256)]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"{c.name}_bus{c.axi_data_bits}")
def test_identity_and_fence(cfg):
    async def program(ctx, h, mem, out):
        bus = h.csr.bus
        out["id"] = await axil_read(ctx, bus, Csr.ID)
        out["array"] = await axil_read(ctx, bus, Csr.CFG_ARRAY)
        out["bus"] = await axil_read(ctx, bus, Csr.CFG_BUS)
        await submit(ctx, h, mem, [fence(0xC0FFEE)])
        out["irq"] = await wait_irq(ctx, h)
        out["irq_status"] = await axil_read(ctx, bus, Csr.IRQ_STATUS)
        await axil_write(ctx, bus, Csr.IRQ_STATUS, IrqBit.FENCE)
        out["irq_after"] = ctx.get(h.csr.irq)
        out["head"] = await axil_read(ctx, bus, queue_csr(0, Csr.HEAD))
        out["status"] = await axil_read(ctx, bus, Csr.STATUS)

    _, out = run(cfg, program, stall=0.3)
    assert out["id"] == CSR_ID_VALUE
    assert out["array"] == cfg.rows | cfg.cols << 8 | 1 << 16 | cfg.n_sems << 24
    assert out["bus"] & 0xFF == cfg.axi_data_bytes
    assert out["irq"] and out["irq_status"] == IrqBit.FENCE and not out["irq_after"]
    assert out["head"] == 1 and out["status"] == 0


def test_semaphores_order_engines_and_fence_waits_for_all():
    cfg = NPUConfig()
    prog = [
        engine_cmd(Opcode.DMA_LOAD, 1, signal=1),
        engine_cmd(Opcode.DMA_LOAD, 2, signal=1),
        engine_cmd(Opcode.MATMUL, 3, wait=(1, 2), signal=2),   # after both loads
        engine_cmd(Opcode.DMA_STORE, 4),                       # free to run at once
        engine_cmd(Opcode.REQUANT, 5, wait=(2, 1), signal=3),
        fence(7),
    ]

    async def program(ctx, h, mem, out):
        await submit(ctx, h, mem, prog)
        out["irq"] = await wait_irq(ctx, h)
        out["sems"] = [await axil_read(ctx, h.csr.bus, sem_csr(s)) for s in range(4)]

    log, out = run(cfg, program, latency={"load": 40, "matrix": 30})
    by_tag = {tag: (name, start, end) for name, tag, start, end in log}
    assert out["irq"]
    assert by_tag[3][1] >= by_tag[2][2]          # matmul starts after the second load ends
    assert by_tag[4][1] < by_tag[2][2]           # the store overlaps the loads
    assert by_tag[5][1] >= by_tag[3][2]          # requant waits for the matmul
    assert out["sems"] == [0, 2, 1, 1]


def test_fence_value_written_after_all_work():
    cfg = NPUConfig()

    async def program(ctx, h, mem, out):
        await submit(ctx, h, mem, [engine_cmd(Opcode.MATMUL, 1), fence(0x1234)])
        for _ in range(20):
            await ctx.tick()
        out["early"] = int.from_bytes(mem.mem[FENCE_ADDR:FENCE_ADDR + 4], "little")
        out["irq"] = await wait_irq(ctx, h)
        out["late"] = int.from_bytes(mem.mem[FENCE_ADDR:FENCE_ADDR + 4], "little")

    _, out = run(cfg, program, latency={"matrix": 200})
    assert out["early"] == 0 and out["irq"] and out["late"] == 0x1234


def test_unknown_opcode_stops_queue_reports_and_recovers():
    cfg = NPUConfig()
    bad = bytearray(cmd(Opcode.NOP))
    bad[0] = 0x3F

    async def program(ctx, h, mem, out):
        bus = h.csr.bus
        await submit(ctx, h, mem, [engine_cmd(Opcode.DMA_LOAD, 1), bytes(bad),
                                   engine_cmd(Opcode.DMA_LOAD, 2), fence(1)])
        out["irq"] = await wait_irq(ctx, h)
        out["status"] = await axil_read(ctx, bus, Csr.STATUS)
        out["code"] = await axil_read(ctx, bus, Csr.ERR_CODE)
        out["index"] = await axil_read(ctx, bus, Csr.ERR_CMD)
        out["head"] = await axil_read(ctx, bus, queue_csr(0, Csr.HEAD))
        await axil_write(ctx, bus, Csr.CONTROL, 1)
        await axil_write(ctx, bus, Csr.IRQ_STATUS, 3)
        out["status_after"] = await axil_read(ctx, bus, Csr.STATUS)
        await submit(ctx, h, mem, [fence(2)], tail_start=4)
        out["irq2"] = await wait_irq(ctx, h)
        out["fence"] = int.from_bytes(mem.mem[FENCE_ADDR:FENCE_ADDR + 4], "little")

    log, out = run(cfg, program)
    assert out["irq"]
    assert out["status"] & 2
    assert out["code"] & 0xFF == ErrorCode.BAD_OPCODE.value and out["code"] >> 16 == 0x3F
    assert out["index"] == 1 and out["head"] == 1
    assert [tag for _, tag, _, _ in log] == [1]   # nothing after the bad command ran
    assert out["status_after"] == 0
    assert out["irq2"] and out["fence"] == 2


def test_engine_error_names_command_and_address():
    cfg = NPUConfig()

    async def program(ctx, h, mem, out):
        bus = h.csr.bus
        await submit(ctx, h, mem, [engine_cmd(Opcode.MATMUL, 1), engine_cmd(Opcode.MATMUL, 2),
                                   engine_cmd(Opcode.MATMUL, 3), fence(1)])
        out["irq"] = await wait_irq(ctx, h)
        out["code"] = await axil_read(ctx, bus, Csr.ERR_CODE)
        out["index"] = await axil_read(ctx, bus, Csr.ERR_CMD)
        out["addr"] = await axil_read(ctx, bus, Csr.ERR_ADDR)

    log, out = run(cfg, program, fail=("matrix", 2, ErrorCode.BAD_LOCAL_ADDR, 0x777))
    assert out["irq"]
    assert out["code"] == ErrorCode.BAD_LOCAL_ADDR.value | Opcode.MATMUL.value << 16
    assert out["index"] == 1 and out["addr"] == 0x777
    assert [tag for _, tag, _, _ in log] == [1, 2]


def test_bad_semaphore_id():
    cfg = NPUConfig(n_sems=4)

    async def program(ctx, h, mem, out):
        await submit(ctx, h, mem, [cmd(Opcode.SIGNAL, signal=9)])
        out["irq"] = await wait_irq(ctx, h)
        out["code"] = await axil_read(ctx, h.csr.bus, Csr.ERR_CODE)

    _, out = run(cfg, program)
    assert out["irq"] and out["code"] & 0xFF == ErrorCode.BAD_SEM.value


def test_ring_wraps_and_runs_in_order():
    cfg = NPUConfig()
    ring_size = 4

    async def program(ctx, h, mem, out):
        bus = h.csr.bus
        tail = 0
        for chunk in range(5):   # 5 x 3 commands through a 4-slot ring (3 usable)
            cmds = [engine_cmd(Opcode.MATMUL, 10 * chunk + i, wait=(0, 3 * chunk + i), signal=0)
                    for i in range(3)]
            tail = await submit(ctx, h, mem, cmds, tail_start=tail, ring_size=ring_size)
            for _ in range(400):
                if not await axil_read(ctx, bus, Csr.STATUS) & 1:
                    break
        out["sem"] = await axil_read(ctx, bus, sem_csr(0))

    log, out = run(cfg, program, ring_size=ring_size)
    assert [tag for _, tag, _, _ in log] == [10 * c + i for c in range(5) for i in range(3)]
    assert out["sem"] == 15


def test_wait_and_signal_commands():
    cfg = NPUConfig()

    async def program(ctx, h, mem, out):
        await submit(ctx, h, mem, [cmd(Opcode.WAIT, wait=(5, 1)), fence(9)])
        for _ in range(100):
            await ctx.tick()
        out["blocked"] = not ctx.get(h.csr.irq)
        out["status"] = await axil_read(ctx, h.csr.bus, Csr.STATUS)
        await submit(ctx, h, mem, [cmd(Opcode.SIGNAL, signal=5)], tail_start=2)
        out["irq"] = await wait_irq(ctx, h)

    _, out = run(cfg, program)
    # the WAIT blocks the queue, so the SIGNAL behind it can never run: still blocked
    assert out["blocked"] and out["status"] & 1
    assert not out["irq"]


def test_decode_roundtrip():
    raw = fence(0xABCD)
    c = decode(raw)
    assert c.header.opcode == Opcode.FENCE and c.body.fence.value == 0xABCD
