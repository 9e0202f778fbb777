"""The per-queue stage of processor commands (:class:`Stage`)."""

from amaranth import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.cmdproc.common import command_wait, engine_payload, sem_increment, sem_wait
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
    2**31``, :func:`hw.isa.sem_reached`; the semaphore unit's registered ready bit
    ``ready[q]``, loaded with ``push_ok`` when the stage is loaded); then
    ``NOP``/``WAIT``/``SIGNAL`` complete in that cycle, ``BARRIER`` once ``idle[q]`` (every
    earlier command of the queue retired), and ``FENCE`` raises ``fence_ready[q]`` once
    ``idle[q]``. A command with ``flags.signal`` (or a ``SIGNAL``) that is ready to complete
    asks for its increment of ``signal_sem`` on ``inc[q]`` and completes in the cycle the
    semaphore unit takes it.

    Ports
    -----
    queue : ``In(range(n_queues))``
        The queue the fetch unit works on (for ``fence_done``).
    push : ``In(1)``, push_queue : ``In(range(n_queues))``, push_cmd : ``In(Command)``,
    push_index : ``In(32)``, push_ok : ``In(1)``
        Load the (empty) stage of ``push_queue`` with a checked command and its index;
        ``push_ok``: its wait is satisfied (the semaphore unit's lookup).
    fence_done : ``In(1)``
        The fence in the stage of ``queue`` completed: the stage empties.
    stop, qclear : ``In(n_queues)``
        Per queue: stop (error latched); reset (the stage empties).
    idle : ``In(n_queues)``
        Per queue: every engine queue is idle for it.
    stage : ``Out(ArrayLayout(engine_payload(config, "processor"), n_queues))``,
    valid : ``Out(n_queues)``
        The stage registers: each command decoded into the processor's narrow payload
        (opcode, flags, signal id, index, the used bits of the fence body).
    fence_ready : ``Out(n_queues)``
    inc : ``Out(stream.Signature(sem_increment(config))).array(n_queues)``
        Semaphore increments of completing processor commands.
    wait : ``Out(ArrayLayout(sem_wait(config), n_queues))``, load, load_ok : ``Out(n_queues)``,
    ready : ``In(n_queues)``
        The stages' waits (registers) and waiter ports of the semaphore unit
        (:class:`~hw.cmdproc.SemaphoreUnit`).
    """

    def __init__(self, config: NPUConfig):
        self.config = config
        n = config.n_queues
        super().__init__({
            "queue": In(range(max(n, 2))), "push": In(1), "push_queue": In(range(max(n, 2))),
            "push_cmd": In(Command),
            "push_index": In(32), "push_ok": In(1), "fence_done": In(1),
            "stop": In(n), "qclear": In(n),
            "idle": In(n),
            "stage": Out(data.ArrayLayout(engine_payload(config, "processor"), n)),
            "valid": Out(n), "fence_ready": Out(n),
            "inc": Out(stream.Signature(sem_increment(config))).array(n),
            "wait": Out(data.ArrayLayout(sem_wait(config), n)),
            "load": Out(n), "load_ok": Out(n), "ready": In(n),
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
        h = self.stage[q]
        op = h.opcode
        m.d.comb += [self.load[q].eq(self.push & (self.push_queue == q)),
                     self.load_ok[q].eq(self.push_ok)]
        can = Signal(name=f"proc_can{q}")    # a processor command may complete
        with m.If(self._live(q) & self.ready[q]):
            with m.If(op.as_value().matches(Opcode.NOP, Opcode.WAIT, Opcode.SIGNAL)):
                m.d.comb += can.eq(1)
            with m.Elif((op == Opcode.BARRIER) & self.idle[q]):
                m.d.comb += can.eq(1)
            with m.Elif((op == Opcode.FENCE) & self.idle[q]):
                m.d.comb += self.fence_ready[q].eq(1)
        signals = h.flags.signal | (op == Opcode.SIGNAL)
        inc = self.inc[q]
        m.d.comb += [inc.valid.eq(can & signals), inc.payload.sem.eq(h.signal_sem),
                     inc.payload.queue.eq(q), inc.payload.index.eq(h.index),
                     done[q].eq(can & (~signals | inc.ready))]

    def _bookkeeping(self, m: Module, done: Signal) -> None:
        """Load from fetch; empty on completion, fence completion or queue reset."""
        hdr = self.push_cmd.header
        payload = Signal(engine_payload(self.config, "processor"), name="push_payload")
        m.d.comb += [payload.opcode.eq(hdr.opcode), payload.flags.eq(hdr.flags),
                     payload.signal_sem.eq(hdr.signal_sem), payload.index.eq(self.push_index),
                     payload.body.eq(self.push_cmd.body.as_value())]
        wait = command_wait(m, self.config, self.push_cmd, "push_wait")
        for q in range(self.config.n_queues):
            # data registers: no reset (``valid`` says whether they hold a command)
            cmd = Signal.like(self.stage[q], name=f"stage{q}", reset_less=True)
            w = Signal.like(self.wait[q], name=f"stage{q}_wait", reset_less=True)
            m.d.comb += [self.stage[q].eq(cmd), self.wait[q].eq(w)]
            with m.If(self.push & (self.push_queue == q)):
                m.d.sync += [cmd.eq(payload), w.eq(wait), self.valid[q].eq(1)]
        with m.If(self.fence_done):
            m.d.sync += self.valid.bit_select(self.queue, 1).eq(0)
        for q in range(self.config.n_queues):
            with m.If(done[q]):
                m.d.sync += self.valid[q].eq(0)
            with m.If(self.qclear[q]):
                m.d.sync += self.valid[q].eq(0)
