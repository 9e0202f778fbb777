"""Wrap-safe semaphores in the command processor, in Amaranth's simulator: the serial-number
compare (``(value - target) mod 2**32 < 2**31``, :func:`hw.isa.sem_reached`) at its boundary
in every place the hardware compares a semaphore with a wait value (the engine queues' heads
and the stage's processor commands), and the semaphore file's host write, wrap and clear."""

import random

import pytest
from amaranth import Elaboratable, Module, Signal
from amaranth.sim import Simulator

from hw.cmdproc import EngineQueue, SemaphoreFile, Stage
from hw.cmdproc.common import sem_reached as hw_sem_reached
from hw.config import NPUConfig
from hw.isa import Opcode, encode, sem_reached

MOD = 1 << 32
#: value - target (mod 2**32) -> reached: both sides of the 2**31 boundary and of the wrap
BOUNDARY = [(0, True), (1, True), ((1 << 31) - 1, True), (1 << 31, False),
            ((1 << 31) + 1, False), (MOD - 1, False)]
#: semaphore values around 0, 2**31 and 2**32
VALUES = [0, 3, (1 << 31) - 2, 1 << 31, MOD - 2, MOD - 1]


def wait_header(opcode, sem, target, *, signal=None):
    header = {"opcode": opcode, "flags": {"wait": 1}, "wait_sem": sem, "wait_value": target}
    if signal is not None:
        header["flags"]["signal"] = 1
        header["signal_sem"] = signal
    return header


def command_bits(header, body=None) -> int:
    return int.from_bytes(encode({"header": header, "body": body or {}}), "little")


def test_compare_circuit_matches_the_contract():
    """The hardware compare equals :func:`hw.isa.sem_reached` at the boundaries and on random
    pairs (one subtractor, the sign bit of the 32-bit difference)."""

    class Compare(Elaboratable):
        def __init__(self):
            self.value, self.target, self.reached = Signal(32), Signal(32), Signal()

        def elaborate(self, platform):
            m = Module()
            m.d.comb += self.reached.eq(hw_sem_reached(self.value, self.target))
            return m

    dut = Compare()
    rng = random.Random(11)
    pairs = [(v, (v - d) % MOD) for v in VALUES for d, _ in BOUNDARY]
    pairs += [(rng.randrange(MOD), rng.randrange(MOD)) for _ in range(300)]

    async def tb(ctx):
        for value, target in pairs:
            ctx.set(dut.value, value)
            ctx.set(dut.target, target)
            assert ctx.get(dut.reached) == sem_reached(value, target), (hex(value), hex(target))

    sim = Simulator(dut)
    sim.add_testbench(tb)
    sim.run()
    for value in VALUES:       # the contract itself at the boundary
        for diff, reached in BOUNDARY:
            assert sem_reached(value, (value - diff) % MOD) == reached


@pytest.mark.parametrize("value", VALUES, ids=hex)
def test_engine_queue_head_waits_at_the_boundary(value):
    """A head command waiting for ``target`` is offered to the engine exactly when
    ``value - target`` is below 2**31 (otherwise the engine reports a ``sem`` stall)."""
    cfg = NPUConfig(n_queues=2, n_sems=4)
    dut = EngineQueue(cfg)
    seen = []

    async def tb(ctx):
        ctx.set(dut.engine.cmd.ready, 0)       # never take: valid shows the head is ready
        ctx.set(dut.sems[2], value)
        for diff, _ in BOUNDARY:
            target = (value - diff) % MOD
            ctx.set(dut.i[1].payload.as_value(),
                    command_bits(wait_header(Opcode.MATMUL, 2, target)) | 7 << 256)
            ctx.set(dut.i[1].valid, 1)
            await ctx.tick()
            ctx.set(dut.i[1].valid, 0)
            await ctx.tick()                    # the store shows its head a cycle later
            seen.append((diff, ctx.get(dut.engine.cmd.valid), ctx.get(dut.sem_stall),
                         ctx.get(dut.engine.queue)))
            ctx.set(dut.flush, 0b10)             # drop it before the next case
            await ctx.tick()
            ctx.set(dut.flush, 0)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    for (diff, reached), (d, valid, stall, queue) in zip(BOUNDARY, seen, strict=True):
        assert d == diff
        assert (valid, stall) == (reached, not reached), f"value {value:#x} - target = {diff:#x}"
        assert queue == 1 or not valid


def test_engine_queue_wait_released_by_the_increment_across_the_wrap():
    """Target 2 while the semaphore counts up from 2**32 - 2: not released at 2**32 - 1, 0 or
    1 (which a plain ``>=`` would release at once), released at 2."""
    cfg = NPUConfig(n_queues=1, n_sems=4)
    dut = EngineQueue(cfg)
    trace = []

    async def tb(ctx):
        ctx.set(dut.engine.cmd.ready, 0)
        ctx.set(dut.sems[0], MOD - 2)
        ctx.set(dut.i[0].payload.as_value(), command_bits(wait_header(Opcode.MATMUL, 0, 2)))
        ctx.set(dut.i[0].valid, 1)
        await ctx.tick()
        ctx.set(dut.i[0].valid, 0)
        await ctx.tick()
        for value in (MOD - 2, MOD - 1, 0, 1, 2, 3):
            ctx.set(dut.sems[0], value)
            trace.append((value, ctx.get(dut.engine.cmd.valid)))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    assert trace == [(MOD - 2, 0), (MOD - 1, 0), (0, 0), (1, 0), (2, 1), (3, 1)]


@pytest.mark.parametrize("opcode", [Opcode.WAIT, Opcode.NOP, Opcode.BARRIER, Opcode.FENCE],
                         ids=lambda o: o.name)
@pytest.mark.parametrize("value", [0, MOD - 2], ids=hex)
def test_stage_processor_command_waits_at_the_boundary(opcode, value):
    """A processor command in the stage completes (NOP, WAIT, BARRIER: the stage empties and
    its signal increments) or announces itself to the fetch unit (FENCE) exactly when its
    wait is reached."""
    cfg = NPUConfig(n_queues=2, n_sems=4)
    dut = Stage(cfg)
    seen = []

    async def tb(ctx):
        ctx.set(dut.sems[1], value)
        ctx.set(dut.idle, 0b11)
        for diff, _ in BOUNDARY:
            target = (value - diff) % MOD
            ctx.set(dut.push_queue, 1)
            ctx.set(dut.push, 1)
            ctx.set(dut.push_index, 40 + diff % 7)
            ctx.set(dut.push_cmd.as_value(),
                    command_bits(wait_header(opcode, 1, target, signal=3)))
            await ctx.tick()
            ctx.set(dut.push, 0)
            inc = dut.inc[1]
            seen.append((ctx.get(dut.valid), ctx.get(inc.en), ctx.get(dut.fence_ready)))
            await ctx.tick()
            seen[-1] += (ctx.get(dut.valid),)
            ctx.set(dut.qclear, 0b10)            # empty the stage for the next case
            await ctx.tick()
            ctx.set(dut.qclear, 0)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    for (diff, reached), (valid, inc, fence_ready, valid_after) in zip(BOUNDARY, seen,
                                                                       strict=True):
        assert valid == 0b10, "the push loads the stage of queue 1"
        if opcode == Opcode.FENCE:
            assert (fence_ready, inc, valid_after) == (0b10 if reached else 0, 0, 0b10), diff
        else:
            assert (inc, valid_after) == ((1, 0) if reached else (0, 0b10)), \
                f"{opcode.name}: value {value:#x} - target = {diff:#x}"


def test_semaphore_file_host_write_wrap_and_clear():
    """Increments from several sources in one cycle add up and wrap modulo 2**32; ``sem_last``
    names the last source in order; a host write replaces the value, loses the increments of
    its cycle and leaves ``sem_last``; ``clear`` wins over everything."""
    cfg = NPUConfig(n_sems=4)
    dut = SemaphoreFile(cfg, 3)
    out = {}

    def inc(ctx, i, sem, queue=0, index=0, en=1):
        p = dut.inc[i]
        ctx.set(p.en, en)
        ctx.set(p.sem, sem)
        ctx.set(p.queue, queue)
        ctx.set(p.index, index)

    async def tb(ctx):
        ctx.set(dut.set, 0b0100)
        ctx.set(dut.set_value, MOD - 2)
        inc(ctx, 0, 2, queue=5, index=9)          # lost to the write
        await ctx.tick()
        ctx.set(dut.set, 0)
        out["set"] = (ctx.get(dut.sems[2]), ctx.get(dut.sem_last[2].as_value()))
        inc(ctx, 0, 2, queue=1, index=0x1234567)  # index keeps its low 24 bits
        inc(ctx, 1, 2, queue=3, index=7)
        inc(ctx, 2, 2, queue=2, index=8)          # three at once: -2 + 3 = 1
        await ctx.tick()
        last = dut.sem_last[2]
        out["wrap"] = (ctx.get(dut.sems[2]), ctx.get(last.queue), ctx.get(last.index),
                       ctx.get(last.valid))
        inc(ctx, 1, 0, en=0)
        inc(ctx, 2, 0, en=0)
        inc(ctx, 0, 2, queue=4, index=4)
        ctx.set(dut.set, 0b0100)
        ctx.set(dut.set_value, 77)
        await ctx.tick()
        ctx.set(dut.set, 0)
        inc(ctx, 0, 2, en=0)
        out["rewrite"] = (ctx.get(dut.sems[2]), ctx.get(last.queue), ctx.get(last.index))
        inc(ctx, 0, 2, queue=6, index=6)
        ctx.set(dut.set, 0b0100)
        ctx.set(dut.clear, 1)
        await ctx.tick()
        out["clear"] = (ctx.get(dut.sems[2]), ctx.get(last.as_value()))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    assert out["set"] == (MOD - 2, 0)
    assert out["wrap"] == (1, 2, 8, 1)
    assert out["rewrite"] == (77, 2, 8)
    assert out["clear"] == (0, 0)
