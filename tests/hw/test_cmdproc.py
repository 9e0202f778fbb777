"""Command processor + CSR block + counter block in Amaranth's simulator, with engines
modelled in Python.

The engines here are deliberately naive: take a command, wait a fixed number of cycles, retire
(optionally with an error). The checks are on what the processor does: fetch from the ring,
dispatch, semaphore order, fences, errors, ring wrap-around, and on the performance counters
(against per-cycle models of their definitions)."""

import pytest
from amaranth import Module, Signal
from amaranth.lib import data, wiring
from amaranth.sim import Simulator

from hw.cmdproc import ENGINES, CommandProcessor
from hw.config import NPUConfig
from hw.counters import PerfCounters
from hw.csr import CsrBlock
from hw.dma.common import TlbEvents
from hw.isa import (
    COMMAND_BYTES,
    COUNTER_NAMES,
    CSR_ID_VALUE,
    ENGINE_NAMES,
    Csr,
    ErrorCode,
    IrqBit,
    Opcode,
    SemLast,
    counter_csr,
    decode,
    encode,
    matmul_in_flight,
    pack_fields,
    queue_csr,
    sem_csr,
    sem_last_csr,
    trace_csr,
)
from hw.top import connect_counters, connect_csr
from tests.support.amaranth_axi import AxiMemory, axil_read, axil_write

#: the layouts of ``DMA.stall`` and ``ComputeTile.stall`` (hw/dma.py, hw/tile.py)
DMA_STALL = data.StructLayout({"load_dram": 1, "load_spad": 1, "load_acc": 1, "store_dram": 1})
TILE_STALL = data.StructLayout({"vector_acc": 1})
TLB_EVENTS = TlbEvents

RING = 0x1000
QUEUE_RING_BYTES = 0x400   # queue q's ring at RING + q * QUEUE_RING_BYTES
FENCE_ADDR = 0x800


class Harness(wiring.Component):
    """The processor's ``bus`` stands for the NPU's ``mem`` port; ``dma_stall`` and
    ``tile_stall`` (the layouts of ``DMA.stall`` and ``ComputeTile.stall``) are driven by the
    testbench."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.csr = CsrBlock(cfg)
        self.cp = CommandProcessor(cfg)
        self.counters = PerfCounters(cfg)
        self.dma_stall = Signal(DMA_STALL, name="dma_stall")
        self.tile_stall = Signal(TILE_STALL, name="tile_stall")
        self.dma_tlb = Signal(TLB_EVENTS, name="dma_tlb")
        super().__init__({})

    def elaborate(self, platform):
        m = Module()
        m.submodules.csr = csr = self.csr
        m.submodules.cp = cp = self.cp
        m.submodules.counters = counters = self.counters
        connect_csr(m, csr, cp)
        connect_counters(m, counters, csr, cp, cp.bus, self.dma_stall, self.tile_stall,
                         self.dma_tlb)
        return m


async def snapshot(ctx, bus) -> dict:
    """``CNT_SNAPSHOT`` then every counter, as ``Device.counters`` does."""
    await axil_write(ctx, bus, Csr.CNT_SNAPSHOT, 1)
    out = {"cycles": await axil_read(ctx, bus, Csr.CNT_CYCLES_LO)
           | await axil_read(ctx, bus, Csr.CNT_CYCLES_HI) << 32}
    for name in COUNTER_NAMES:
        out[name] = await axil_read(ctx, bus, counter_csr(name))
    return out


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


async def pipelined_engine(ctx, port, name, latency, fail, log):
    """A fake engine that takes a command in every cycle the queue offers one (it holds as
    many as the queue lets it) and retires each ``latency`` cycles after its handshake, in
    order, one ``done`` per cycle; ``busy`` while it holds one."""
    held = []           # [tag, take cycle]
    cycle = last_done = 0
    while True:
        due = bool(held) and cycle >= max(held[0][1] + latency, last_done + 1)
        ctx.set(port.cmd.ready, 1)
        ctx.set(port.busy, bool(held))
        ctx.set(port.done, due)
        failing = due and fail and fail[0] == name and fail[1] == held[0][0]
        ctx.set(port.error, fail[2] if failing else ErrorCode.NONE)
        ctx.set(port.error_addr, fail[3] if failing else 0)
        _, _, valid, payload = await ctx.tick().sample(port.cmd.valid, port.cmd.payload)
        if due:
            tag, start = held.pop(0)
            log.append((name, tag, start, cycle))
            last_done = cycle
        if valid:
            held.append([payload.body.raw, cycle])
        cycle += 1


def run(cfg, program, *, latency=None, fail=None, stall=0.0, ring_size=8, background=(),
        pipelined=()):
    """Run ``program(ctx, h, mem, log)`` with fake engines; returns the engine log.

    ``latency[engine]`` cycles per command; ``fail`` = (engine, tag, code, addr) makes that
    command retire with an error; ``background`` holds functions ``f(h)`` returning more
    background testbenches (monitors, drivers); the engines named in ``pipelined`` take the
    next command while earlier ones run (:func:`pipelined_engine`; log entries are then
    ``(name, tag, take cycle, done cycle)``).
    """
    latency = latency or {}
    h = Harness(cfg)
    sim = Simulator(h)
    sim.add_clock(1e-8)
    mem = AxiMemory(h.cp.bus, 1 << 16, cfg.axi_data_bytes, stall=stall, seed=1)
    log = []
    sim.add_testbench(mem.run_reads, background=True)
    sim.add_testbench(mem.run_writes, background=True)
    for make in background:
        sim.add_testbench(make(h), background=True)

    for name in ENGINES:
        port = getattr(h.cp, name)
        if name in pipelined:
            async def engine(ctx, port=port, name=name):
                await pipelined_engine(ctx, port, name, latency.get(name, 3), fail, log)
            sim.add_testbench(engine, background=True)
            continue

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
        for q in range(cfg.n_queues):
            await axil_write(ctx, bus, queue_csr(q, Csr.RING_BASE), RING + q * QUEUE_RING_BYTES)
            await axil_write(ctx, bus, queue_csr(q, Csr.RING_SIZE), ring_size)
        await axil_write(ctx, bus, Csr.IRQ_ENABLE, 3)
        await program(ctx, h, mem, result)
        result["done"] = True

    sim.add_testbench(tb)
    sim.run()   # ends when the testbench does; every wait in it is bounded
    assert result.get("done"), "testbench did not finish in time"

    return log, result


async def submit(ctx, h, mem, cmds, tail_start=0, ring_size=8, queue=0):
    tail = tail_start
    ring = RING + queue * QUEUE_RING_BYTES
    for c in cmds:
        mem.mem[ring + tail * COMMAND_BYTES:ring + (tail + 1) * COMMAND_BYTES] = c
        tail = (tail + 1) % ring_size
    await axil_write(ctx, h.csr.bus, queue_csr(queue, Csr.TAIL), tail)
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
    assert out["array"] == cfg.rows | cfg.cols << 8 | cfg.n_queues << 16 | cfg.n_sems << 24
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


def test_rings_of_different_sizes_wrap_each_at_its_own_size():
    """Queue 0 runs 15 commands through a 4-slot ring while queue 1 runs 40 through a
    16-slot ring at the same time: each queue's HEAD wraps at its own ring size (HEAD and
    Q_FETCHED advance through one shared incrementer), every command runs once, in order."""
    cfg = NPUConfig()
    sizes = {0: 4, 1: 16}

    async def program(ctx, h, mem, out):
        bus = h.csr.bus
        for q, size in sizes.items():
            await axil_write(ctx, bus, queue_csr(q, Csr.RING_SIZE), size)
        tails = dict.fromkeys(sizes, 0)
        for chunk in range(5):
            for q, size in sizes.items():
                n = 3 if q == 0 else 8
                cmds = [engine_cmd(Opcode.MATMUL if q == 0 else Opcode.DMA_LOAD,
                                   100 * (q + 1) + n * chunk + i) for i in range(n)]
                tails[q] = await submit(ctx, h, mem, cmds, tail_start=tails[q], ring_size=size,
                                        queue=q)
            for _ in range(600):
                if not await axil_read(ctx, bus, Csr.STATUS) & 1:
                    break
        for q in sizes:
            out[q] = (await axil_read(ctx, bus, queue_csr(q, Csr.HEAD)),
                      await axil_read(ctx, bus, queue_csr(q, Csr.Q_FETCHED)), tails[q])

    log, out = run(cfg, program)
    assert [t for e, t, _, _ in log if e == "matrix"] == [100 + i for i in range(15)]
    assert [t for e, t, _, _ in log if e == "load"] == [200 + i for i in range(40)]
    assert out[0] == (15 % 4, 15, 15 % 4) and out[1] == (40 % 16, 40, 40 % 16)


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


# -- several queues ---------------------------------------------------------------------------

async def wait_idle(ctx, h, limit=400, queues=0xF):
    """Poll ``QUEUE_BUSY`` until the queues in the mask are idle (a queue stopped by an
    error stays busy)."""
    for _ in range(limit):
        if not await axil_read(ctx, h.csr.bus, Csr.QUEUE_BUSY) & queues:
            return True
    return False


def test_no_head_of_line_blocking_between_queues():
    """Queue 0's matmul waits on a semaphore; queue 1's matmuls use the same engine meanwhile;
    queue 1 then signals the semaphore and queue 0 proceeds."""
    cfg = NPUConfig()

    async def program(ctx, h, mem, out):
        await submit(ctx, h, mem, [engine_cmd(Opcode.MATMUL, 1, wait=(5, 1)),
                                   engine_cmd(Opcode.MATMUL, 2)], queue=0)
        await submit(ctx, h, mem, [engine_cmd(Opcode.MATMUL, 3), engine_cmd(Opcode.MATMUL, 4),
                                   cmd(Opcode.SIGNAL, signal=5)], queue=1)
        out["idle"] = await wait_idle(ctx, h)
        out["last5"] = await axil_read(ctx, h.csr.bus, sem_last_csr(5))

    log, out = run(cfg, program)
    assert out["idle"]
    assert [tag for _, tag, _, _ in log] == [3, 4, 1, 2]
    assert out["last5"] == 1 << 31 | 1 << 24 | 2      # queue 1, command #2


def test_round_robin_between_queues():
    cfg = NPUConfig()

    async def program(ctx, h, mem, out):
        for q in range(3):
            await submit(ctx, h, mem, [engine_cmd(Opcode.MATMUL, 10 * q + i) for i in range(4)],
                         queue=q)
        out["idle"] = await wait_idle(ctx, h)

    log, out = run(cfg, program, latency={"matrix": 20})
    tags = [tag for _, tag, _, _ in log]
    assert out["idle"] and sorted(tags) == sorted(10 * q + i for q in range(3) for i in range(4))
    # every queue keeps its order, and no queue runs twice before the others had a turn
    for q in range(3):
        assert [t for t in tags if t // 10 == q] == [10 * q + i for i in range(4)]
    for i in range(0, 9, 3):
        assert len({t // 10 for t in tags[i:i + 3]}) == 3, tags


def test_wait_in_one_queue_is_released_by_another():
    cfg = NPUConfig()

    async def program(ctx, h, mem, out):
        await submit(ctx, h, mem, [cmd(Opcode.WAIT, wait=(7, 1)), fence(0x55)], queue=2)
        for _ in range(50):
            await ctx.tick()
        out["blocked"] = not ctx.get(h.csr.irq)
        await submit(ctx, h, mem, [cmd(Opcode.SIGNAL, signal=7)], queue=3)
        out["irq"] = await wait_irq(ctx, h)
        out["fence"] = int.from_bytes(mem.mem[FENCE_ADDR:FENCE_ADDR + 4], "little")

    _, out = run(cfg, program)
    assert out["blocked"] and out["irq"] and out["fence"] == 0x55


def test_error_stops_only_its_queue_and_queue_reset_recovers():
    cfg = NPUConfig()

    async def program(ctx, h, mem, out):
        bus = h.csr.bus
        await submit(ctx, h, mem, [engine_cmd(Opcode.DMA_LOAD, 1),
                                   engine_cmd(Opcode.DMA_LOAD, 2, wait=(0, 1))], queue=0)
        await submit(ctx, h, mem, [engine_cmd(Opcode.DMA_LOAD, 3, signal=1),
                                   engine_cmd(Opcode.DMA_LOAD, 4, wait=(1, 1))], queue=1)
        out["irq"] = await wait_irq(ctx, h)
        out["idle"] = await wait_idle(ctx, h, queues=0b10)   # queue 0 stopped, 1 finished
        out["busy"] = await axil_read(ctx, bus, Csr.QUEUE_BUSY)
        out["errors"] = await axil_read(ctx, bus, Csr.QUEUE_ERRORS)
        out["q0"] = [await axil_read(ctx, bus, queue_csr(0, r))
                     for r in (Csr.Q_ERR_CODE, Csr.Q_ERR_CMD, Csr.Q_ERR_ADDR, Csr.Q_STATUS)]
        out["q1"] = await axil_read(ctx, bus, queue_csr(1, Csr.Q_ERR_CODE))
        out["global"] = await axil_read(ctx, bus, Csr.ERR_CODE)
        await axil_write(ctx, bus, Csr.QUEUE_RESET, 1)
        out["errors_after"] = await axil_read(ctx, bus, Csr.QUEUE_ERRORS)
        out["global_after"] = await axil_read(ctx, bus, Csr.ERR_CODE)
        await submit(ctx, h, mem, [engine_cmd(Opcode.DMA_LOAD, 5)], tail_start=2, queue=0)
        out["idle2"] = await wait_idle(ctx, h)
        out["sem1"] = await axil_read(ctx, bus, sem_csr(1))

    log, out = run(cfg, program, fail=("load", 1, ErrorCode.BAD_DRAM_ADDR, 0x4321),
                   latency={"load": 10})
    tags = [tag for _, tag, _, _ in log]
    assert out["irq"] and out["idle"] and out["idle2"]
    assert tags == [1, 3, 4, 5], tags                # 2 never ran; queue 1 unaffected
    assert out["errors"] == 1 and out["q1"] == 0 and out["busy"] == 0b01
    assert out["q0"] == [ErrorCode.BAD_DRAM_ADDR.value | Opcode.DMA_LOAD.value << 16, 0,
                         0x4321, 0b11]
    assert out["global"] == ErrorCode.BAD_DRAM_ADDR.value | Opcode.DMA_LOAD.value << 16
    assert out["errors_after"] == 0 and out["global_after"] == 0
    assert out["sem1"] == 1                          # semaphores untouched by the reset


def test_ring_fetch_outside_window():
    cfg = NPUConfig()

    async def program(ctx, h, mem, out):
        bus = h.csr.bus
        await axil_write(ctx, bus, queue_csr(1, Csr.WINDOW_BASE), 0x8000)
        await axil_write(ctx, bus, queue_csr(1, Csr.WINDOW_LIMIT), 0x9000)
        await submit(ctx, h, mem, [engine_cmd(Opcode.MATMUL, 1)], queue=1)
        await submit(ctx, h, mem, [engine_cmd(Opcode.MATMUL, 2)], queue=0)
        out["irq"] = await wait_irq(ctx, h)
        out["idle"] = await wait_idle(ctx, h, queues=0b01)
        out["code"] = await axil_read(ctx, bus, queue_csr(1, Csr.Q_ERR_CODE))
        out["addr"] = await axil_read(ctx, bus, queue_csr(1, Csr.Q_ERR_ADDR))

    log, out = run(cfg, program)
    assert out["irq"] and out["idle"]
    assert out["code"] == ErrorCode.WINDOW.value and out["addr"] == RING + QUEUE_RING_BYTES
    assert [tag for _, tag, _, _ in log] == [2]


# -- multi-command fetch ----------------------------------------------------------------------

def _fetch_bursts(mem, cfg):
    """``(address, commands)`` of every read burst the processor issued."""
    return [(addr, (length + 1) * cfg.axi_data_bytes // COMMAND_BYTES)
            for kind, addr, length in mem.log if kind == "read"]


async def _ring_at(ctx, h, mem, base, cmds, ring_size=16, queue=0):
    """Queue ``queue``'s ring at ``base``, ``cmds`` in its first slots, then ``TAIL``."""
    bus = h.csr.bus
    await axil_write(ctx, bus, queue_csr(queue, Csr.RING_BASE), base)
    await axil_write(ctx, bus, queue_csr(queue, Csr.RING_SIZE), ring_size)
    for i, c in enumerate(cmds):
        mem.mem[base + i * COMMAND_BYTES:base + (i + 1) * COMMAND_BYTES] = c
    await axil_write(ctx, bus, queue_csr(queue, Csr.TAIL), len(cmds))


@pytest.mark.parametrize("cfg", [NPUConfig(), NPUConfig(axi_data_bits=32, fetch_depth=8)],
                         ids=["depth4_bus64", "depth8_bus32"])
def test_fetch_reads_several_commands_per_burst_never_across_4k(cfg):
    """Ten commands from a ring that crosses a 4 KiB boundary after three slots: the first
    burst reads the three (the page ends there), no burst crosses the boundary or reads more
    than ``fetch_depth`` commands, a later one reads at least 4, every slot is read once, in
    order, and the commands run in order; HEAD ends at TAIL."""
    base = 0x2000 - 3 * COMMAND_BYTES

    async def program(ctx, h, mem, out):
        await _ring_at(ctx, h, mem, base, [engine_cmd(Opcode.MATMUL, i) for i in range(10)])
        out["idle"] = await wait_idle(ctx, h)
        out["head"] = await axil_read(ctx, h.csr.bus, queue_csr(0, Csr.HEAD))
        out["fetched"] = await axil_read(ctx, h.csr.bus, queue_csr(0, Csr.Q_FETCHED))
        out["bursts"] = _fetch_bursts(mem, cfg)

    log, out = run(cfg, program, latency={"matrix": 2})
    bursts = out["bursts"]
    assert out["idle"] and out["head"] == 10 and out["fetched"] == 10
    assert [tag for _, tag, _, _ in log] == list(range(10))
    assert bursts[0] == (base, 3)
    assert all(1 <= k <= cfg.fetch_depth for _, k in bursts), bursts
    assert all(a // 4096 == (a + k * COMMAND_BYTES - 1) // 4096 for a, k in bursts), bursts
    slots = [a + j * COMMAND_BYTES for a, k in bursts for j in range(k)]
    assert slots == [base + i * COMMAND_BYTES for i in range(10)], bursts
    assert max(k for _, k in bursts) >= 4, bursts      # the later bursts are longer


def test_fetch_burst_stops_at_the_window_limit():
    """The window ends after slot 4 of 8: the bursts read slots 0..4 only, the commands
    there run (four loads, then a BARRIER), and slot 5 is a WINDOW error reported in order,
    with HEAD on it."""
    cfg = NPUConfig()
    base = 0x3000

    async def program(ctx, h, mem, out):
        bus = h.csr.bus
        await axil_write(ctx, bus, queue_csr(0, Csr.WINDOW_LIMIT), base + 5 * COMMAND_BYTES)
        cmds = [engine_cmd(Opcode.DMA_LOAD, i) for i in range(8)]
        cmds[4] = cmd(Opcode.BARRIER)
        await _ring_at(ctx, h, mem, base, cmds)
        out["irq"] = await wait_irq(ctx, h)
        out["regs"] = [await axil_read(ctx, bus, queue_csr(0, r))
                       for r in (Csr.Q_ERR_CODE, Csr.Q_ERR_CMD, Csr.Q_ERR_ADDR, Csr.HEAD)]
        out["bursts"] = _fetch_bursts(mem, cfg)

    log, out = run(cfg, program, latency={"load": 4})
    bursts = out["bursts"]
    assert out["irq"]
    assert out["regs"] == [ErrorCode.WINDOW.value, 5, base + 5 * COMMAND_BYTES, 5]
    assert [tag for _, tag, _, _ in log] == list(range(4))
    assert sum(k for _, k in bursts) == 5 and bursts[0] == (base, 4), bursts


def test_bus_fault_in_a_burst_of_several_commands_names_the_faulty_one():
    """The DRAM fails every burst that reads slot 2: the first burst (slots 0..3) fails, its
    commands are dropped and read again one per burst; commands 0 and 1 run, command 2 is
    the AXI_ERROR (opcode 0, its slot address), HEAD stays on it."""
    cfg = NPUConfig()
    base = 0x3000
    slot2 = base + 2 * COMMAND_BYTES

    async def program(ctx, h, mem, out):
        bus = h.csr.bus
        mem.read_fault = (slot2, slot2 + COMMAND_BYTES)
        await _ring_at(ctx, h, mem, base, [engine_cmd(Opcode.MATMUL, i) for i in range(4)])
        out["irq"] = await wait_irq(ctx, h)
        out["regs"] = [await axil_read(ctx, bus, queue_csr(0, r))
                       for r in (Csr.Q_ERR_CODE, Csr.Q_ERR_CMD, Csr.Q_ERR_ADDR, Csr.HEAD)]
        out["bursts"] = _fetch_bursts(mem, cfg)

    log, out = run(cfg, program, latency={"matrix": 3})
    bursts = out["bursts"]
    assert out["irq"]
    assert out["regs"] == [ErrorCode.AXI_ERROR.value, 2, slot2, 2]
    assert [tag for _, tag, _, _ in log] == [0, 1]
    assert bursts == [(base, 4), (base, 1), (base + COMMAND_BYTES, 1), (slot2, 1)], bursts


def test_queue_reset_during_a_fetch_burst_drops_its_commands():
    """A queue reset while a burst of four commands is still on the (slow) bus: the burst
    completes on the bus, its commands are dropped (none runs), HEAD is TAIL, and a command
    submitted after the reset runs alone."""
    cfg = NPUConfig()

    async def program(ctx, h, mem, out):
        bus = h.csr.bus
        await submit(ctx, h, mem, [engine_cmd(Opcode.MATMUL, t) for t in (1, 2, 3, 4)])
        while not mem.log:                       # the burst's AR went out
            await ctx.tick()
        await axil_write(ctx, bus, Csr.QUEUE_RESET, 1)
        out["head"] = await axil_read(ctx, bus, queue_csr(0, Csr.HEAD))
        for _ in range(600):                     # the burst's beats trickle in meanwhile
            await ctx.tick()
        await submit(ctx, h, mem, [engine_cmd(Opcode.MATMUL, 9)], tail_start=4)
        out["idle"] = await wait_idle(ctx, h)
        out["bursts"] = _fetch_bursts(mem, cfg)

    log, out = run(cfg, program, stall=0.95)
    assert out["bursts"][0] == (RING, 4), out["bursts"]
    assert out["head"] == 4 and out["idle"]
    assert [tag for _, tag, _, _ in log] == [9]


@pytest.mark.parametrize("engine", list(ENGINES))
def test_engine_port_gets_every_field_of_its_commands_back(engine):
    """Each engine queue stores its engine's narrow payload (``engine_payload``, from the ISA
    layouts) and hands the engine the command back: opcode, flags, signal id and every body
    field of each of the engine's opcodes equal what was written (random values)."""
    import random

    from amaranth.lib import data as adata

    from hw.isa import OPCODE_BODY, Body
    from tests.support.sem_harness import QueueWithSems

    cfg = NPUConfig(n_queues=2)
    dut = QueueWithSems(cfg, engine=engine)
    rng = random.Random(len(engine))
    cases = []
    for op in ENGINES[engine]:
        member = OPCODE_BODY[op]
        layout = adata.Layout.cast(adata.Layout.cast(Body)[member].shape)
        for _ in range(8):
            fields = {name: rng.getrandbits(f.width) for name, f in layout
                      if not name.startswith("_")}
            flags = {"signal": rng.getrandbits(1), "irq": rng.getrandbits(1),
                     "accumulate": rng.getrandbits(1), "relu": rng.getrandbits(1),
                     "transpose": rng.getrandbits(1), "row_scale": rng.getrandbits(1)}
            header = {"opcode": op, "flags": flags, "signal_sem": rng.randrange(cfg.n_sems)}
            cases.append(encode({"header": header, "body": {member: fields}}))
    seen = []

    async def tb(ctx):
        ctx.set(dut.engine.done, 1)
        for i, raw in enumerate(cases):
            ctx.set(dut.i[i % 2].payload.as_value(), int.from_bytes(raw, "little") | i << 256)
            ctx.set(dut.i[i % 2].valid, 1)
            await ctx.tick()
            ctx.set(dut.i[i % 2].valid, 0)
            assert ctx.get(dut.engine.cmd.valid)
            seen.append(ctx.get(dut.engine.cmd.payload.as_value()))
            ctx.set(dut.engine.cmd.ready, 1)
            await ctx.tick()
            ctx.set(dut.engine.cmd.ready, 0)
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    for raw, got in zip(cases, seen, strict=True):
        want = decode(raw)
        view = decode(got.to_bytes(COMMAND_BYTES, "little"))
        assert view.header.opcode == want.header.opcode
        assert view.header.flags.as_bits() == want.header.flags.as_bits()
        assert view.header.signal_sem == want.header.signal_sem
        member = OPCODE_BODY[want.header.opcode]
        assert getattr(view.body, member).as_bits() == getattr(want.body, member).as_bits()


def test_trace_and_busy_counters():
    cfg = NPUConfig()

    async def program(ctx, h, mem, out):
        bus = h.csr.bus
        await submit(ctx, h, mem, [engine_cmd(Opcode.MATMUL, 1), engine_cmd(Opcode.DMA_LOAD, 2),
                                   engine_cmd(Opcode.MATMUL, 3)], queue=2)
        out["idle"] = await wait_idle(ctx, h)
        e = ENGINE_NAMES.index("matrix")
        entries = []
        while (info := await axil_read(ctx, bus, trace_csr(e, Csr.TRACE_INFO))) >> 31:
            entries.append((info >> 24 & 0x3F, info & 0xFFFFFF,
                            await axil_read(ctx, bus, trace_csr(e, Csr.TRACE_START)),
                            await axil_read(ctx, bus, trace_csr(e, Csr.TRACE_END))))
            await axil_write(ctx, bus, trace_csr(e, Csr.TRACE_POP), 1)
        out["trace"] = entries
        snap = await snapshot(ctx, bus)
        out["busy"] = [snap[f"busy.{e}"] for e in ENGINE_NAMES]
        out["dma"] = snap["dma_busy"]
        out["overlap"] = snap["overlap"]
        out["retired"] = [snap[f"retired.{e}"] for e in ENGINE_NAMES]

    log, out = run(cfg, program, latency={"matrix": 30, "load": 30})
    assert out["idle"]
    assert [(q, i) for q, i, _, _ in out["trace"]] == [(2, 0), (2, 2)]
    for (_, _, start, end), (_, _, s, e) in zip(out["trace"],
                                                [x for x in log if x[0] == "matrix"],
                                                strict=True):
        assert end - start == e - s + 1      # handshake cycle to done cycle
    assert out["busy"][ENGINE_NAMES.index("matrix")] == 2 * 30   # the fake engine's busy
    assert out["dma"] == 30 and 0 < out["overlap"] <= 30
    assert out["retired"] == [1, 0, 2, 0]


def test_engine_queue_keeps_several_commands_in_flight():
    """The matrix engine's queue offers the next MATMUL while earlier ones run, at most
    ``matmul_in_flight`` taken and not retired; each retirement signals, traces (its own take
    and done cycles) and reports its error for the right command, in order; a queue reset
    while commands are in the engine kills exactly those of the reset queue."""
    cfg = NPUConfig()
    limit, latency = matmul_in_flight(cfg), 150
    n0, n1 = 12, 4

    async def program(ctx, h, mem, out):
        bus = h.csr.bus
        await submit(ctx, h, mem, [engine_cmd(Opcode.MATMUL, t, signal=0) for t in range(n0)],
                     ring_size=16, queue=0)
        out["idle"] = await wait_idle(ctx, h)
        out["sem0"] = await axil_read(ctx, bus, sem_csr(0))
        e = ENGINE_NAMES.index("matrix")
        entries = []
        while (info := await axil_read(ctx, bus, trace_csr(e, Csr.TRACE_INFO))) >> 31:
            entries.append((info & 0xFFFFFF,
                            await axil_read(ctx, bus, trace_csr(e, Csr.TRACE_START)),
                            await axil_read(ctx, bus, trace_csr(e, Csr.TRACE_END))))
            await axil_write(ctx, bus, trace_csr(e, Csr.TRACE_POP), 1)
        out["trace"] = entries
        # queue 1's MATMULs are in the engine (behind queue 2's) when queue 1 is reset
        await submit(ctx, h, mem, [engine_cmd(Opcode.MATMUL, 100 + t, signal=2)
                                   for t in range(n1)], ring_size=16, queue=2)
        await submit(ctx, h, mem, [engine_cmd(Opcode.MATMUL, 200 + t, signal=1)
                                   for t in range(n1)], ring_size=16, queue=1)
        for _ in range(120):
            await ctx.tick()
        await axil_write(ctx, bus, Csr.QUEUE_RESET, 0b10)
        out["idle2"] = await wait_idle(ctx, h)
        out["sems"] = [await axil_read(ctx, bus, sem_csr(s)) for s in (1, 2)]

    log, out = run(cfg, program, latency={"matrix": latency}, pipelined=("matrix",),
                   ring_size=16)
    assert out["idle"] and out["idle2"]
    first = [x for x in log if x[1] < n0]
    assert [tag for _, tag, _, _ in first] == list(range(n0))
    takes = [s for _, _, s, _ in first]
    dones = [d for _, _, _, d in first]
    # several in the engine at once, never more than the limit
    held = max(sum(s <= c <= d for s, d in zip(takes, dones, strict=True))
               for c in range(takes[0], dones[-1]))
    assert held == limit
    assert out["sem0"] == n0
    assert [(i, end - start) for i, start, end in out["trace"]] == \
        [(i, d - s) for i, (s, d) in enumerate(zip(takes, dones, strict=True))]
    killed = [x for x in log if x[1] >= 200]
    assert killed, "queue 1's MATMULs reached the engine before the reset"
    assert out["sems"] == [0, n1]         # the reset queue's retirements do not signal


def test_delayed_increments_of_retired_matmuls_go_to_their_own_semaphores():
    """MATMULs retire one a cycle and alternate between semaphores 1 and 2 while loads and
    stores (which come first at the semaphore unit's one increment port) signal semaphore 3:
    a retired MATMUL whose increment waits keeps its record (the oldest, ``head``) while later
    ones retire (``ret`` moves on); each increment still goes to its own command's semaphore.
    A 256-bit bus fetches a command a cycle, so MATMULs retire in runs of consecutive cycles."""
    cfg = NPUConfig(axi_data_bits=256)
    n = 16

    async def program(ctx, h, mem, out):
        bus = h.csr.bus
        await submit(ctx, h, mem, [engine_cmd(Opcode.DMA_LOAD, 300 + t, signal=3)
                                   for t in range(n)], ring_size=32, queue=1)
        await submit(ctx, h, mem, [engine_cmd(Opcode.DMA_STORE, 400 + t, signal=3)
                                   for t in range(n)], ring_size=32, queue=2)
        await submit(ctx, h, mem, [engine_cmd(Opcode.MATMUL, t, signal=1 + t % 2)
                                   for t in range(n)], ring_size=32, queue=0)
        out["idle"] = await wait_idle(ctx, h, limit=2000)
        out["sems"] = [await axil_read(ctx, bus, sem_csr(s)) for s in (1, 2, 3)]

    log, out = run(cfg, program, latency={"matrix": 12, "load": 1, "store": 1},
                   pipelined=("matrix",), ring_size=32)
    assert out["idle"]
    assert [t for e, t, _, _ in log if e == "matrix"] == list(range(n))
    assert out["sems"] == [n // 2, n // 2, 2 * n]


# -- performance counters ------------------------------------------------------------------------

class _FifoModel:
    """Naive model of one queue's commands in front of an engine (``EngineQueue``'s store):
    an entry pushed in cycle ``w`` is readable from cycle ``w + 1``; the entry behind a head
    popped in cycle ``t`` is readable from ``t + 1``; ``depth`` entries at most (a popped
    entry's place is free from the next cycle)."""

    def __init__(self, depth):
        self.depth = depth
        self.entries = []       # [header dict, push cycle]
        self.last_pop = -10

    def head(self, cycle):
        if self.entries and cycle >= max(self.entries[0][1] + 1, self.last_pop + 1):
            return self.entries[0][0]
        return None

    def room(self):
        return len(self.entries) < self.depth


def test_sem_stall_of_engine_queue_matches_naive_model():
    """``EngineQueue.sem_stall`` against a per-cycle model of its definition
    (:data:`hw.isa.STALL_REASONS`): the engine idle, no queue's head ready, and some queue
    that is neither stopped nor being reset has a head waiting on a semaphore. Random
    pushes (one queue a cycle at most, as the fetch unit writes), waits, semaphore values,
    stops, resets and engine latencies; the store's room against the model's."""
    import random

    from tests.support.sem_harness import QueueWithSems

    cfg = NPUConfig(cmd_fifo_depth=3)
    n = cfg.n_queues
    dut = QueueWithSems(cfg)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    rng = random.Random(3)
    out = {"stall": 0, "cycles": 0, "takes": 0, "blocked_any": 0}

    async def tb(ctx):
        fifos = [_FifoModel(cfg.cmd_fifo_depth) for _ in range(n)]
        sems = [0] * 4
        stop = [0] * n
        busy_left = 0          # cycles of busy left (busy includes the done cycle)
        for cycle in range(3000):
            # -- inputs of this cycle ----------------------------------------------------------
            flush = [int(rng.random() < 0.01) for _ in range(n)]
            if rng.random() < 0.02:
                stop[rng.randrange(n)] ^= 1
            bump = rng.randrange(4) if rng.random() < 0.05 else None   # host write
            ctx.set(dut.sems.set, bump is not None)
            if bump is not None:
                ctx.set(dut.sems.set_sem, bump)
                ctx.set(dut.sems.set_value, sems[bump] + 1)
            ctx.set(dut.stop, sum(b << q for q, b in enumerate(stop)))
            ctx.set(dut.flush, sum(b << q for q, b in enumerate(flush)))
            pushes = []
            push_q = rng.randrange(n) if rng.random() < 0.5 else None
            for q in range(n):
                port = dut.i[q]
                assert ctx.get(port.ready) == fifos[q].room(), f"cycle {cycle}: room of {q}"
                if q == push_q:
                    wait = rng.random() < 0.6
                    header = {"opcode": Opcode.MATMUL, "flags": {"wait": int(wait)},
                              "wait_sem": rng.randrange(4),
                              "wait_value": rng.randrange(1, 6) if wait else 0}
                    bits = int.from_bytes(encode({"header": header}), "little")
                    ctx.set(port.payload.as_value(), bits | cycle << 256)
                    ctx.set(port.valid, 1)
                    pushes.append((q, header))
                else:
                    ctx.set(port.valid, 0)
            busy = busy_left > 0
            ctx.set(dut.engine.busy, int(busy))
            ctx.set(dut.engine.done, int(busy_left == 1))
            ctx.set(dut.engine.cmd.ready, int(not busy))

            # -- the model's view of this cycle --------------------------------------------
            ready, blocked = [], []
            for q in range(n):
                h = fifos[q].head(cycle)
                live = h is not None and not stop[q] and not flush[q]
                ok = h is not None and (not h["flags"]["wait"]
                                        or sems[h["wait_sem"]] >= h["wait_value"])
                ready.append(live and ok)
                blocked.append(live and not ok)
            expect = (not busy) and not any(ready) and any(blocked)
            got = ctx.get(dut.sem_stall)
            assert got == expect, f"cycle {cycle}: sem_stall {got}, model {expect}"
            valid = ctx.get(dut.engine.cmd.valid)
            assert valid == (any(ready) and not busy), f"cycle {cycle}: valid {valid}"
            out["stall"] += got
            out["blocked_any"] += any(blocked)
            out["cycles"] += 1

            # -- state updates at the clock edge -----------------------------------------------
            if valid and not busy:
                q = ctx.get(dut.engine.queue)
                assert ready[q]
                fifos[q].entries.pop(0)
                fifos[q].last_pop = cycle
                busy_left = rng.randint(1, 6)
                out["takes"] += 1
            elif busy_left:
                busy_left -= 1
            for q, header in pushes:
                if ctx.get(dut.i[q].ready) and not flush[q]:
                    fifos[q].entries.append([header, cycle])
            for q in range(n):
                if flush[q]:
                    fifos[q].entries.clear()
                    fifos[q].last_pop = -10
            if bump is not None:
                sems[bump] += 1
            await ctx.tick()

    sim.add_testbench(tb)
    sim.run()
    # the random stream exercised the interesting cases
    assert out["takes"] > 100 and 100 < out["stall"] < out["blocked_any"] < out["cycles"], out


@pytest.mark.parametrize("flush_at", [None, "busy", "done"])
@pytest.mark.parametrize("error", [ErrorCode.NONE, ErrorCode.BAD_LOCAL_ADDR])
def test_engine_queue_drops_the_retirement_of_a_command_whose_queue_is_reset(flush_at, error):
    """A queue reset (``flush``) while the command is in the engine, also in the engine's
    ``done`` cycle itself, drops the command's semaphore signal and its error report (it still
    leaves its trace entry); without a reset the command signals (or reports) exactly once."""
    from tests.support.sem_harness import QueueWithSems

    cfg = NPUConfig()
    dut = QueueWithSems(cfg)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    seen = {"inc": [], "err": [], "trace": 0}

    async def tb(ctx):
        header = {"opcode": Opcode.MATMUL, "flags": {"signal": 1}, "signal_sem": 2}
        bits = int.from_bytes(encode({"header": header}), "little")
        ctx.set(dut.i[1].payload.as_value(), bits | 7 << 256)
        ctx.set(dut.i[1].valid, 1)
        await ctx.tick()
        ctx.set(dut.i[1].valid, 0)
        ctx.set(dut.engine.cmd.ready, 1)
        phase, left = "wait", 0
        for _ in range(40):
            if phase == "wait" and ctx.get(dut.engine.cmd.valid):
                phase, left = "take", 4
            busy = phase in ("busy", "done")
            done = phase == "done"
            flush = int(phase == flush_at)
            ctx.set(dut.engine.busy, int(busy))
            ctx.set(dut.engine.done, int(done))
            ctx.set(dut.engine.error, error if done else ErrorCode.NONE)
            ctx.set(dut.flush, flush << 1)
            ctx.set(dut.engine.cmd.ready, int(phase in ("wait", "take")))
            if ctx.get(dut.inc.valid & dut.inc.ready):
                p = dut.inc.payload
                seen["inc"].append((ctx.get(p.sem), ctx.get(p.queue), ctx.get(p.index)))
            if ctx.get(dut.err_set):
                seen["err"].append((ctx.get(dut.err_info.code), ctx.get(dut.err_info.cmd)))
            await ctx.tick()
            if phase == "take":
                phase = "busy"
            elif phase == "busy":
                left -= 1
                phase = "done" if left == 1 else "busy"
            elif phase == "done":
                phase = "over"
        ctx.set(dut.flush, 0)
        seen["trace"] = ctx.get(dut.trace_valid)

    sim.add_testbench(tb)
    sim.run()
    assert seen["trace"] == 1
    if flush_at is not None:
        assert seen["inc"] == [] and seen["err"] == [], seen
    elif error == ErrorCode.NONE:
        assert seen["inc"] == [(2, 1, 7)] and seen["err"] == [], seen
    else:
        assert seen["inc"] == [] and seen["err"] == [(error.value, 7)], seen

@pytest.mark.parametrize("cfg", [NPUConfig(), NPUConfig(rows=4, cols=4, axi_data_bits=32)],
                         ids=lambda c: f"bus{c.axi_data_bits}")
def test_counters_equal_per_cycle_count_of_their_definitions(cfg):
    """Every counter, read through ``CNT_SNAPSHOT`` and the CSRs, equals a per-cycle count of
    its definition at the block's ports (engine busy/done, the bus R and W handshakes and
    ``wstrb``, random resource-stall inputs, the processor's ``sem_stall``) over the cycles
    before the snapshot, and ``CNT_CYCLES`` is ``CYCLES`` in the snapshot cycle. A
    load -> matmul -> requant -> store chain ordered by semaphores makes the later engines
    wait (``sem`` stalls) while the earlier ones run; the bus stalls randomly."""
    import random

    rng = random.Random(9)
    bus_bytes = cfg.axi_data_bytes
    seen = {"snapshots": []}

    async def program(ctx, h, mem, out):
        bus = h.csr.bus
        out["a"] = await snapshot(ctx, bus)
        chain = [engine_cmd(Opcode.DMA_LOAD, 1, signal=1),
                 engine_cmd(Opcode.MATMUL, 2, wait=(1, 1), signal=2),
                 engine_cmd(Opcode.REQUANT, 3, wait=(2, 1), signal=3),
                 engine_cmd(Opcode.DMA_STORE, 4, wait=(3, 1)),
                 fence(0x77, irq=0)]
        await submit(ctx, h, mem, chain, queue=0)
        await submit(ctx, h, mem, [engine_cmd(Opcode.MATMUL, 5), engine_cmd(Opcode.DMA_LOAD, 6),
                                   engine_cmd(Opcode.REQUANT, 7, wait=(3, 1))], queue=1)
        out["idle"] = await wait_idle(ctx, h)
        out["b"] = await snapshot(ctx, bus)

    def monitor(h):
        sigs = [h.csr.snapshot, h.csr.cycles, h.cp.sem_stall, h.dma_stall.as_value(),
                h.tile_stall.as_value(), h.cp.bus.rvalid, h.cp.bus.rready, h.cp.bus.wvalid,
                h.cp.bus.wready, h.cp.bus.wstrb]
        for e in ENGINE_NAMES:
            sigs += [getattr(h.cp, e).busy, getattr(h.cp, e).done]

        async def run(ctx):
            count = dict.fromkeys(COUNTER_NAMES, 0)
            async for _, _, snap, cycles, sem, dstall, tstall, rv, rr, wv, wr, strb, *eng \
                    in ctx.tick().sample(*sigs):
                if snap:     # the snapshot holds the counts of the cycles before this one
                    seen["snapshots"].append(dict(count, cycles=cycles))
                busy = {e: eng[2 * i] for i, e in enumerate(ENGINE_NAMES)}
                reasons = {"load": {"dram_read": dstall & 1, "spad": dstall >> 1 & 1,
                                    "acc": dstall >> 2 & 1},
                           "store": {"dram_write": dstall >> 3 & 1}, "matrix": {},
                           "vector": {"acc": tstall & 1}}
                count["bytes_read"] += bus_bytes * (rv & rr)
                count["bytes_written"] += bin(strb).count("1") * (wv & wr)
                count["dma_busy"] += busy["load"] | busy["store"]
                count["overlap"] += (busy["load"] | busy["store"]) & busy["matrix"]
                for i, e in enumerate(ENGINE_NAMES):
                    count[f"busy.{e}"] += busy[e]
                    count[f"retired.{e}"] += eng[2 * i + 1]
                    count[f"stall.{e}.sem"] += sem >> i & 1
                    for r, bit in reasons[e].items():
                        count[f"stall.{e}.{r}"] += busy[e] & bit
        return run

    def stall_driver(h):
        async def run(ctx):
            while True:
                ctx.set(h.dma_stall.as_value(), rng.randrange(16))
                ctx.set(h.tile_stall.as_value(), rng.randrange(2))
                await ctx.tick()
        return run

    log, out = run(cfg, program, latency={"load": 60, "matrix": 20, "vector": 10, "store": 15},
                   stall=0.3, background=[monitor, stall_driver])
    assert out["idle"]
    a, b = out["a"], out["b"]
    assert seen["snapshots"] == [a, b]                  # absolute values, both snapshots
    d = {k: b[k] - a[k] for k in a}
    assert [d[f"retired.{e}"] for e in ENGINE_NAMES] == [2, 1, 2, 2]
    assert d["bytes_read"] == 8 * COMMAND_BYTES       # the ring fetches (fake engines)
    assert d["bytes_written"] == 4                     # the fence
    assert d["busy.load"] == 120 and d["busy.matrix"] == 40
    # the chain's later engines waited on the semaphores while the earlier ones ran: the
    # matrix engine, from the first snapshot until the first load retired, except while it
    # ran its queue-1 command (the fake engines drop busy in their done cycle, so that cycle
    # is idle too; the log counts cycles from the first clock edge)
    load_end = next(end for e, tag, _, end in log if tag == 1)
    matrix_ran = sum(end - start for e, _, start, end in log
                     if e == "matrix" and end < load_end)
    assert 0 < d["stall.matrix.sem"] <= load_end - a["cycles"] - matrix_ran + 2
    # two-sided: a semaphore stall is a cycle the engine waits, so never a busy cycle
    for e in ("store", "vector", "matrix"):
        assert 0 < d[f"stall.{e}.sem"] <= d["cycles"] - d[f"busy.{e}"], (e, d)
    for name in ("stall.load.dram_read", "stall.store.dram_write", "stall.vector.acc"):
        assert 0 < d[name] < d[f"busy.{name.split('.')[1]}"]


def test_host_write_of_a_semaphore_and_wait_across_the_wrap():
    """A CSR write sets a semaphore (``SEM_LAST`` unchanged); a matmul waiting for 1 while it
    holds 2**32 - 1 does not run (a plain ``>=`` would run it), and runs after two SIGNALs
    wrap it to 1."""
    cfg = NPUConfig()

    async def program(ctx, h, mem, out):
        bus = h.csr.bus
        await submit(ctx, h, mem, [cmd(Opcode.SIGNAL, signal=2)], queue=1)
        out["idle0"] = await wait_idle(ctx, h)
        out["last_before"] = await axil_read(ctx, bus, sem_last_csr(2))
        await axil_write(ctx, bus, sem_csr(2), 0xFFFF_FFFF)
        out["set"] = await axil_read(ctx, bus, sem_csr(2))
        out["last_after"] = await axil_read(ctx, bus, sem_last_csr(2))
        await submit(ctx, h, mem, [engine_cmd(Opcode.MATMUL, 1, wait=(2, 1))], queue=0)
        out["waiting"] = not await wait_idle(ctx, h, limit=50, queues=0b01)   # not run
        await submit(ctx, h, mem, [cmd(Opcode.SIGNAL, signal=2), cmd(Opcode.SIGNAL, signal=2)],
                     tail_start=1, queue=1)
        out["idle"] = await wait_idle(ctx, h)
        out["sem"] = await axil_read(ctx, bus, sem_csr(2))

    log, out = run(cfg, program)
    assert out["idle0"] and out["set"] == 0xFFFF_FFFF
    assert out["last_after"] == out["last_before"] == pack_fields(
        SemLast, {"valid": 1, "queue": 1, "index": 0})
    assert out["waiting"]
    assert out["idle"] and out["sem"] == 1 and [t for _, t, _, _ in log] == [1]
