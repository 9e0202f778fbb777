"""The per-queue stage of processor commands (:class:`Stage`)."""

from amaranth import Const, Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hw.cmdproc.common import SemIncrement, sem_reached
from hw.config import NPUConfig
from hw.isa import Command, Opcode

__all__ = ["Stage"]


class Stage(wiring.Component):
    """One processor command per queue (``NOP``, ``WAIT``, ``SIGNAL``, ``BARRIER``,
    ``FENCE``), executed here; engine commands go from the fetch unit straight into their
    engine's queue, and the fetch unit takes no command of a queue whose stage is occupied,
    so a processor command holds back the later commands of its queue only. A ``FENCE`` is
    announced on ``fence_ready`` and executed by the fetch unit, which empties the stage with
    ``fence_done``.

    A live stage (``valid[q]``, queue neither stopped nor being reset) first waits for its
    semaphore (``flags.wait``, or a ``WAIT``: ``(sem[wait_sem] - wait_value) mod 2**32 <
    2**31``, :func:`hw.isa.sem_reached`); then ``NOP``/``WAIT``/``SIGNAL`` complete in that
    cycle, ``BARRIER`` once ``idle[q]`` (every earlier command of the queue retired), and
    ``FENCE`` raises ``fence_ready[q]`` once ``idle[q]``. A completing command with
    ``flags.signal`` (or a ``SIGNAL``) increments its ``signal_sem`` (``inc[q]``).

    Ports
    -----
    queue : ``In(range(n_queues))``
        The queue the fetch unit works on (for ``fence_done``).
    push : ``In(1)``, push_queue : ``In(range(n_queues))``, push_cmd : ``In(Command)``,
    push_index : ``In(32)``
        Load the (empty) stage of ``push_queue`` with a checked command and its index.
    fence_done : ``In(1)``
        The fence in the stage of ``queue`` completed: the stage empties.
    stop, qclear : ``In(n_queues)``
        Per queue: stop (error latched); reset (the stage empties).
    sems : ``In(ArrayLayout(32, n_sems))``
    idle : ``In(n_queues)``
        Per queue: every engine queue is idle for it.
    stage : ``Out(ArrayLayout(Command, n_queues))``, index : ``Out(ArrayLayout(32, n_queues))``,
    valid : ``Out(n_queues)``
        The stage registers.
    fence_ready : ``Out(n_queues)``
    inc : ``Out(ArrayLayout(SemIncrement, n_queues))``
        Semaphore increments of completing processor commands.
    """

    def __init__(self, config: NPUConfig):
        self.config = config
        n = config.n_queues
        super().__init__({
            "queue": In(range(max(n, 2))), "push": In(1), "push_queue": In(range(max(n, 2))),
            "push_cmd": In(Command),
            "push_index": In(32), "fence_done": In(1),
            "stop": In(n), "qclear": In(n),
            "sems": In(data.ArrayLayout(32, config.n_sems)),
            "idle": In(n),
            "stage": Out(data.ArrayLayout(Command, n)), "index": Out(data.ArrayLayout(32, n)),
            "valid": Out(n), "fence_ready": Out(n),
            "inc": Out(data.ArrayLayout(SemIncrement, n)),
        })

    def elaborate(self, platform):
        m = Module()
        done = Signal(self.config.n_queues)     # the stage empties (executed)
        for q in range(self.config.n_queues):
            self._execute(m, q, done)
        self._bookkeeping(m, done)
        return m

    def _live(self, q: int):
        return self.valid[q] & ~self.stop[q] & ~self.qclear[q]

    def _execute(self, m: Module, q: int, done: Signal) -> None:
        """NOP, WAIT, SIGNAL and BARRIER complete here (after their semaphore wait); a FENCE
        is announced to the fetch unit."""
        h = self.stage[q].header
        op = h.opcode
        waits = h.flags.wait | (op == Opcode.WAIT)
        wait_ok = ~waits | sem_reached(self.sems[h.wait_sem], h.wait_value)
        completes = Signal(name=f"proc_done{q}")    # a processor command completed
        with m.If(self._live(q) & wait_ok):
            with m.If(op.as_value().matches(Opcode.NOP, Opcode.WAIT, Opcode.SIGNAL)):
                m.d.comb += [done[q].eq(1), completes.eq(1)]
            with m.Elif((op == Opcode.BARRIER) & self.idle[q]):
                m.d.comb += [done[q].eq(1), completes.eq(1)]
            with m.Elif((op == Opcode.FENCE) & self.idle[q]):
                m.d.comb += self.fence_ready[q].eq(1)
        signals = h.flags.signal | (op == Opcode.SIGNAL)
        m.d.comb += [self.inc[q].en.eq(completes & signals), self.inc[q].sem.eq(h.signal_sem),
                     self.inc[q].queue.eq(Const(q, 8)), self.inc[q].index.eq(self.index[q])]

    def _bookkeeping(self, m: Module, done: Signal) -> None:
        """Load from fetch; empty on completion, fence completion or queue reset."""
        with m.If(self.push):
            with m.Switch(self.push_queue):
                for q in range(self.config.n_queues):
                    with m.Case(q):
                        m.d.sync += [self.stage[q].eq(self.push_cmd),
                                     self.index[q].eq(self.push_index)]
            m.d.sync += self.valid.bit_select(self.push_queue, 1).eq(1)
        with m.If(self.fence_done):
            m.d.sync += self.valid.bit_select(self.queue, 1).eq(0)
        for q in range(self.config.n_queues):
            with m.If(done[q]):
                m.d.sync += self.valid[q].eq(0)
            with m.If(self.qclear[q]):
                m.d.sync += self.valid[q].eq(0)
