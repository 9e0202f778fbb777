"""An engine queue or the stages with the semaphore unit, wired as
:class:`hw.cmdproc.CommandProcessor` wires them, for block tests in Amaranth's simulator.

The harness forwards every attribute it does not have to the block under test (``dut.i``,
``dut.engine``, ``dut.push``...); the semaphore unit is ``dut.sems`` (host writes through
:func:`write_sem`, values through :func:`read_sem`).
"""

from amaranth import Elaboratable, Module, Signal
from amaranth.lib import stream, wiring

from hw.cmdproc import EngineQueue, SemaphoreUnit, Stage
from hw.cmdproc.common import command_wait, priority_merge, sem_increment
from hw.config import NPUConfig

__all__ = ["QueueWithSems", "StageWithSems", "write_sem", "read_sem"]


class QueueWithSems(Elaboratable):
    """An :class:`EngineQueue` whose heads' ready bits, lookups and increments go through a
    :class:`SemaphoreUnit` (lookup 0: the command written on ``i``; 1: the queue's own)."""

    def __init__(self, config: NPUConfig, **kwargs):
        self.block = EngineQueue(config, **kwargs)
        self.sems = SemaphoreUnit(config, n_waiters=config.n_queues, n_lookups=2)

    def __getattr__(self, name):
        return getattr(self.block, name)

    def elaborate(self, platform):
        m = Module()
        m.submodules.queue = eq = self.block
        m.submodules.sems = sems = self.sems
        n = eq.config.n_queues
        written = Signal(eq.i[0].payload.shape())
        for q in reversed(range(n)):
            with m.If(eq.i[q].valid):
                m.d.comb += written.eq(eq.i[q].payload)
        m.d.comb += [
            sems.look[0].eq(command_wait(m, eq.config, written.cmd, "i_wait")),
            eq.i_ok.eq(sems.look_ok[0]),
            sems.look[1].eq(eq.look), eq.look_ok.eq(sems.look_ok[1]),
        ]
        for q in range(n):
            m.d.comb += [sems.head[q].eq(eq.wait[q]), sems.load[q].eq(eq.load[q]),
                         sems.load_ok[q].eq(eq.load_ok[q]), eq.ready[q].eq(sems.ready[q])]
        wiring.connect(m, eq.inc, sems.inc)
        return m


class StageWithSems(Elaboratable):
    """The :class:`Stage` of every queue with a :class:`SemaphoreUnit` (lookup 0: the pushed
    command); the stages' increments go through one port in queue order."""

    def __init__(self, config: NPUConfig):
        self.block = Stage(config)
        self.sems = SemaphoreUnit(config, n_waiters=config.n_queues, n_lookups=1)

    def __getattr__(self, name):
        return getattr(self.block, name)

    def elaborate(self, platform):
        m = Module()
        m.submodules.stage = st = self.block
        m.submodules.sems = sems = self.sems
        cfg = st.config
        m.d.comb += [sems.look[0].eq(command_wait(m, cfg, st.push_cmd, "push_wait")),
                     st.push_ok.eq(sems.look_ok[0])]
        for q in range(cfg.n_queues):
            m.d.comb += [sems.head[q].eq(st.wait[q]), sems.load[q].eq(st.load[q]),
                         sems.load_ok[q].eq(st.load_ok[q]), st.ready[q].eq(sems.ready[q])]
        inc = stream.Signature(sem_increment(cfg)).create(path=("inc",))
        priority_merge(m, [st.inc[q] for q in range(cfg.n_queues)], inc)
        wiring.connect(m, inc, sems.inc)
        return m


async def write_sem(ctx, unit: SemaphoreUnit, sem: int, value: int) -> None:
    """Host write of ``sem``: ``set`` for one cycle (the value holds from the next)."""
    ctx.set(unit.set, 1)
    ctx.set(unit.set_sem, sem)
    ctx.set(unit.set_value, value)
    await ctx.tick()
    ctx.set(unit.set, 0)


def read_sem(ctx, unit: SemaphoreUnit, sem: int) -> int:
    """The value of ``sem`` (the read port, now)."""
    ctx.set(unit.rd_sem, sem)
    return ctx.get(unit.rd_value)
