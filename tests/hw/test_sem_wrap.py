"""Wrap-safe semaphores in the command processor, in Amaranth's simulator: the serial-number
compare (``(value - target) mod 2**32 < 2**31``, :func:`hw.isa.sem_reached`) at its boundary
in every place the hardware compares a semaphore with a wait value (the engine queues' heads
and the stage's processor commands, through the semaphore unit's ready bits), and the
semaphore unit's increment port, host write, wrap and clear."""

import random

import pytest
from amaranth import Elaboratable, Module, Signal
from amaranth.sim import Simulator

from hw.cmdproc import SemaphoreUnit
from hw.cmdproc.common import sem_reached as hw_sem_reached
from hw.config import NPUConfig
from hw.isa import Opcode, encode, sem_reached
from tests.support.sem_harness import QueueWithSems, StageWithSems, read_sem, write_sem

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
    dut = QueueWithSems(cfg)
    seen = []

    async def tb(ctx):
        ctx.set(dut.engine.cmd.ready, 0)       # never take: valid shows the head is ready
        await write_sem(ctx, dut.sems, 2, value)
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
    dut = QueueWithSems(cfg)
    trace = []

    async def tb(ctx):
        ctx.set(dut.engine.cmd.ready, 0)
        await write_sem(ctx, dut.sems, 0, MOD - 2)
        ctx.set(dut.i[0].payload.as_value(), command_bits(wait_header(Opcode.MATMUL, 0, 2)))
        ctx.set(dut.i[0].valid, 1)
        await ctx.tick()
        ctx.set(dut.i[0].valid, 0)
        await ctx.tick()
        for value in (MOD - 2, MOD - 1, 0, 1, 2, 3):
            await write_sem(ctx, dut.sems, 0, value)
            trace.append((value, ctx.get(dut.engine.cmd.valid)))

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
    dut = StageWithSems(cfg)
    seen = []

    async def tb(ctx):
        await write_sem(ctx, dut.sems, 1, value)
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
            seen.append((ctx.get(dut.valid), ctx.get(inc.valid & inc.ready),
                         ctx.get(dut.fence_ready)))
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


def test_semaphore_unit_host_write_wrap_and_clear():
    """An increment taken on the port goes into the increment register and is applied in the
    next cycle (visible two cycles after its handshake), wrapping modulo 2**32; ``sem_last``
    names the increment applied last; a host write replaces the value, leaves ``sem_last``
    and holds the register for its cycle (the port then takes nothing); ``clear`` zeroes
    values and records, drops the register's increment and takes none (a ``CONTROL`` reset
    leaves every semaphore 0)."""
    cfg = NPUConfig(n_sems=4)
    dut = SemaphoreUnit(cfg, n_waiters=1, n_lookups=0)
    out = {}

    def inc(ctx, sem, queue=0, index=0, valid=1):
        ctx.set(dut.inc.valid, valid)
        ctx.set(dut.inc.payload.sem, sem)
        ctx.set(dut.inc.payload.queue, queue)
        ctx.set(dut.inc.payload.index, index)

    def last(ctx, sem):
        ctx.set(dut.rd_sem, sem)
        rec = dut.rd_last
        return ctx.get(rec.queue), ctx.get(rec.index), ctx.get(rec.valid)

    async def tb(ctx):
        ctx.set(dut.set, 1)                        # cycle 0: a write and an increment
        ctx.set(dut.set_sem, 2)
        ctx.set(dut.set_value, MOD - 2)
        inc(ctx, 2, queue=3, index=9)
        out["empty_takes"] = ctx.get(dut.inc.ready)
        await ctx.tick()                           # 1: the write shows, the increment waits
        ctx.set(dut.set, 0)
        inc(ctx, 2, valid=0)
        out["set"] = (read_sem(ctx, dut, 2), last(ctx, 2))
        await ctx.tick()                           # 2: applied
        out["applied"] = (read_sem(ctx, dut, 2), last(ctx, 2))
        inc(ctx, 2, queue=1, index=0x34567)
        await ctx.tick()                           # 3: in the register
        inc(ctx, 2, valid=0)
        out["pending"] = read_sem(ctx, dut, 2)
        await ctx.tick()                           # 4: wrapped to 0
        out["wrap"] = (read_sem(ctx, dut, 2), last(ctx, 2))
        inc(ctx, 1, queue=2, index=6)
        await ctx.tick()                           # 5: a write holds the register
        ctx.set(dut.set, 1)
        ctx.set(dut.set_value, 77)
        inc(ctx, 3, queue=0, index=5)
        out["held"] = ctx.get(dut.inc.ready)
        await ctx.tick()                           # 6
        ctx.set(dut.set, 0)
        out["rewrite"] = (read_sem(ctx, dut, 2), last(ctx, 2), read_sem(ctx, dut, 1))
        out["taken_as_applied"] = ctx.get(dut.inc.ready)
        await ctx.tick()                           # 7: a clear drops the register's
        inc(ctx, 2, queue=1, index=4)              # ... and takes no new one
        out["one"] = (read_sem(ctx, dut, 1), last(ctx, 1))
        ctx.set(dut.clear, 1)
        out["clear_holds"] = ctx.get(dut.inc.ready)
        await ctx.tick()                           # 8
        ctx.set(dut.clear, 0)
        inc(ctx, 2, valid=0)
        out["clear"] = [(read_sem(ctx, dut, s), last(ctx, s)) for s in range(4)]
        await ctx.tick()                           # 9
        out["after_clear"] = [(read_sem(ctx, dut, s), last(ctx, s)) for s in range(4)]
        out["empty_after_clear"] = ctx.get(dut.inc.ready)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    assert out["empty_takes"] == 1
    assert out["set"] == (MOD - 2, (0, 0, 0))
    assert out["applied"] == (MOD - 1, (3, 9, 1))
    assert out["pending"] == MOD - 1
    assert out["wrap"] == (0, (1, 0x34567, 1))
    assert out["held"] == 0
    assert out["rewrite"] == (77, (1, 0x34567, 1), 0)
    assert out["taken_as_applied"] == 1
    assert out["one"] == (1, (2, 6, 1))
    assert out["clear_holds"] == 0
    assert out["clear"] == [(0, (0, 0, 0))] * 4
    assert out["after_clear"] == [(0, (0, 0, 0))] * 4
    assert out["empty_after_clear"] == 1


def test_semaphore_unit_ready_bits_and_lookups_match_a_naive_model():
    """Random increments, host writes, clears, head loads and lookups against a naive model
    that keeps the values and the increment register and evaluates every wait from them each
    cycle: each registered ready bit equals :func:`hw.isa.sem_reached` of its head with the
    current values, each lookup the test with the values after the cycle's change (targets
    near the semaphores' values and across the wrap)."""
    cfg = NPUConfig(n_sems=4)
    n_w, n_l = 5, 2
    dut = SemaphoreUnit(cfg, n_waiters=n_w, n_lookups=n_l)
    rng = random.Random(5)
    stats = {"ready": 0, "waits": 0, "cycles": 0}

    def near(values):
        s = rng.randrange(4)
        return s, (values[s] + rng.randrange(-3, 4)) % MOD

    async def tb(ctx):
        values = [0] * 4
        heads = [(0, 0, 0)] * n_w                  # (waits, sem, target)
        pending = None                             # the increment register's semaphore
        for cycle in range(2000):
            # -- this cycle's inputs
            clear = rng.random() < 0.01
            setting = not clear and rng.random() < 0.05
            set_sem, set_value = rng.randrange(4), rng.choice(
                [rng.randrange(MOD), MOD - 1, (1 << 31) - 1, 1 << 31, 0])
            want_inc = rng.random() < 0.5
            inc_sem = rng.randrange(4)
            ctx.set(dut.clear, clear)
            ctx.set(dut.set, setting)
            ctx.set(dut.set_sem, set_sem)
            ctx.set(dut.set_value, set_value)
            ctx.set(dut.inc.valid, want_inc)
            ctx.set(dut.inc.payload.sem, inc_sem)
            new = list(values)
            applies = pending is not None and not clear and not setting
            if clear:
                new = [0] * 4
            elif setting:
                new[set_sem] = set_value
            elif applies:
                new[pending] = (new[pending] + 1) % MOD
            taking = (pending is None or applies) and not clear
            assert ctx.get(dut.inc.ready) == taking, cycle
            for i in range(n_l):
                waits = rng.random() < 0.8
                s, t = near(new)
                look = dut.look[i]
                ctx.set(look.waits, waits)
                ctx.set(look.sem, s)
                ctx.set(look.target, t)
                assert ctx.get(dut.look_ok[i]) == (not waits or sem_reached(new[s], t)), cycle
            loads = {}
            for w in range(n_w):
                waits, s, t = heads[w]
                if cycle:       # every head is loaded in cycle 0
                    assert ctx.get(dut.ready[w]) == (not waits or sem_reached(values[s], t)), \
                        (cycle, w)
                stats["ready"] += ctx.get(dut.ready[w]) and waits
                stats["waits"] += waits
                ctx.set(dut.head[w].waits, waits)
                ctx.set(dut.head[w].sem, s)
                ctx.set(dut.head[w].target, t)
                load = cycle == 0 or rng.random() < 0.2
                ctx.set(dut.load[w], load)
                if load:
                    nw = rng.random() < 0.8
                    ns, nt = near(new)
                    loads[w] = (int(nw), ns, nt)
                    ctx.set(dut.load_ok[w], not nw or sem_reached(new[ns], nt))
            await ctx.tick()
            values = new
            if clear:
                pending = None
            elif taking:
                pending = inc_sem if want_inc else None
            heads = [loads.get(w, heads[w]) for w in range(n_w)]
            stats["cycles"] += 1

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    assert 1000 < stats["ready"] < stats["waits"], stats
