"""Per-queue command FIFOs in front of one engine (:class:`EngineQueue`)."""

from amaranth import Cat, Module, ResetInserter, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.bus import EngineSignature
from hw.cmdproc.common import (
    ErrorReport,
    QueueEntry,
    RunningCommand,
    SemIncrement,
    round_robin,
    sem_reached,
)
from hw.config import NPUConfig
from hw.isa import ErrorCode, TraceEntry

__all__ = ["EngineQueue"]


class _InEngine:
    """Registers of the command in the engine, set at the handshake (names as in the VCD)."""

    def __init__(self):
        self.valid = Signal(name="in_engine")
        self.queue = Signal(8, name="cur_queue")
        self.index = Signal(32, name="cur_index")
        self.opcode = Signal(8, name="cur_opcode")
        self.signal = Signal(name="cur_signal")
        self.sem = Signal(8, name="cur_sem")
        self.killed = Signal(name="cur_killed")     # its queue was reset while it ran
        self.start = Signal(32, name="cur_start")


class EngineQueue(wiring.Component):
    """Per-queue in-order command FIFOs in front of one engine, with semaphore wait, signal,
    round-robin arbitration among the queues, and the engine's command trace.

    The head command of queue ``q`` is *ready* once its semaphore wait is satisfied (if its
    ``flags.wait`` is set: ``(sem[wait_sem] - wait_value) mod 2**32 < 2**31``, see
    :func:`hw.isa.sem_reached`) and while ``stop[q]`` is low; the engine gets the next ready
    head after the queue served last (round-robin), one command at a time. When the engine
    retires it: an error is reported on ``err_*``, otherwise ``inc`` increments the command's
    ``signal_sem`` if ``flags.signal`` was set. Each retirement pushes a :class:`TraceEntry`;
    when the trace FIFO is full the entry is dropped and ``trace_overflow`` set (until
    ``clear_all``).

    Ports
    -----
    i : ``In(stream.Signature(QueueEntry)).array(n_queues)``
        Commands from each queue's stage.
    engine : ``Out(EngineSignature())``
    sems : ``In(ArrayLayout(32, n_sems))``
    windows_base, windows_limit : ``In(ArrayLayout(32, n_queues))``
        Per-queue DRAM windows, passed to the engine with the command.
    stop, flush : ``In(n_queues)``
        Per queue: stop issuing (error latched); drop every queued command.
    clear_all : ``In(1)``
        Clears the trace FIFO and its overflow flag.
    cycles : ``In(32)``
        Cycle counter, for the trace.
    inc : ``Out(SemIncrement)``
        The semaphore increment of a retiring command (``en`` is a one-cycle pulse).
    err_set : ``Out(1)``, err_queue : ``Out(8)``, err_info : ``Out(ErrorReport)``
    idle : ``Out(n_queues)``
        Per queue: no queued command and none in the engine.
    sem_stall : ``Out(1)``
        The engine is idle (``busy`` low) and cannot take a command because every queue that
        has one for it (and is neither stopped nor being reset) has a head command waiting on
        an unsatisfied semaphore; at least one such queue exists. (The ``sem`` stall reason of
        :data:`hw.isa.STALL_REASONS`.)
    running : ``Out(RunningCommand)``
        Queue, index and opcode of the command in the engine (registered at the handshake;
        valid while the engine is busy and in its ``done`` cycle).
    trace : ``Out(TraceEntry)``, trace_valid : ``Out(1)``, trace_pop : ``In(1)``,
    trace_overflow : ``Out(1)``
        Read side of the trace FIFO (first-word fall-through).
    """

    def __init__(self, config: NPUConfig):
        self.config = config
        n = config.n_queues
        super().__init__({
            "i": In(stream.Signature(QueueEntry)).array(n),
            "engine": Out(EngineSignature()),
            "sems": In(data.ArrayLayout(32, config.n_sems)),
            "windows_base": In(data.ArrayLayout(32, n)),
            "windows_limit": In(data.ArrayLayout(32, n)),
            "stop": In(n), "flush": In(n), "clear_all": In(1),
            "cycles": In(32),
            "inc": Out(SemIncrement),
            "err_set": Out(1), "err_queue": Out(8), "err_info": Out(ErrorReport),
            "idle": Out(n), "sem_stall": Out(1), "running": Out(RunningCommand),
            "trace": Out(TraceEntry), "trace_valid": Out(1), "trace_pop": In(1),
            "trace_overflow": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        fifos, heads, ready, blocked = self._fifos(m)
        cur = self._arbitrate(m, fifos, heads, ready, blocked)
        self._retire(m, cur)
        self._trace(m, cur)
        return m

    def _fifos(self, m: Module):
        """One FIFO per queue; per head: ready to issue, or blocked on its semaphore."""
        cfg = self.config
        width = QueueEntry.as_shape().size
        fifos, heads, ready, blocked = [], [], [], []
        for q in range(cfg.n_queues):
            f = ResetInserter(self.flush[q])(
                fifo.SyncFIFOBuffered(width=width, depth=cfg.cmd_fifo_depth))
            m.submodules[f"fifo{q}"] = f
            m.d.comb += [f.w_data.eq(self.i[q].payload), f.w_en.eq(self.i[q].valid),
                         self.i[q].ready.eq(f.w_rdy)]
            head = QueueEntry(f.r_data)
            hdr = head.cmd.header
            wait_ok = Signal(name=f"wait_ok{q}")    # no wait, or its semaphore reached
            m.d.comb += wait_ok.eq(~hdr.flags.wait
                                   | sem_reached(self.sems[hdr.wait_sem], hdr.wait_value))
            r = Signal(name=f"ready{q}")
            m.d.comb += r.eq(f.r_rdy & wait_ok & ~self.stop[q] & ~self.flush[q])
            b = Signal(name=f"sem_blocked{q}")      # has a head that waits on a semaphore
            m.d.comb += b.eq(f.r_rdy & ~wait_ok & ~self.stop[q] & ~self.flush[q])
            fifos.append(f)
            heads.append(head)
            ready.append(r)
            blocked.append(b)
        return fifos, heads, ready, blocked

    def _arbitrate(self, m: Module, fifos, heads, ready, blocked) -> _InEngine:
        """Round-robin among the ready heads, one command in the engine at a time; returns
        the registers of the command in the engine."""
        n = self.config.n_queues
        eng = self.engine
        cur = _InEngine()
        last = Signal(range(max(n, 2)))
        any_ready, sel = round_robin(m, last, ready, n)
        m.d.comb += self.sem_stall.eq(~eng.busy & ~any_ready & Cat(*blocked).any())

        sel_head = QueueEntry(Signal(QueueEntry.as_shape().size))
        with m.Switch(sel):
            for q in range(n):
                with m.Case(q):
                    m.d.comb += [
                        sel_head.eq(heads[q]),
                        eng.window_base.eq(self.windows_base[q]),
                        eng.window_limit.eq(self.windows_limit[q]),
                    ]
        m.d.comb += [
            eng.cmd.payload.eq(sel_head.cmd),
            eng.queue.eq(sel),
            eng.cmd.valid.eq(any_ready & ~cur.valid),
        ]
        take = eng.cmd.valid & eng.cmd.ready
        for q in range(n):
            m.d.comb += fifos[q].r_en.eq(take & (sel == q))
            m.d.comb += self.idle[q].eq((fifos[q].level == 0)
                                        & ~(cur.valid & (cur.queue == q)))
        hdr = sel_head.cmd.header
        with m.If(take):
            m.d.sync += [
                cur.valid.eq(1), cur.queue.eq(sel), cur.index.eq(sel_head.index),
                cur.opcode.eq(hdr.opcode), cur.signal.eq(hdr.flags.signal),
                cur.sem.eq(hdr.signal_sem), cur.killed.eq(0),
                cur.start.eq(self.cycles), last.eq(sel),
            ]
        with m.If(cur.valid & self.flush.bit_select(cur.queue, 1)):
            m.d.sync += cur.killed.eq(1)
        m.d.comb += [self.running.queue.eq(cur.queue), self.running.index.eq(cur.index),
                     self.running.opcode.eq(cur.opcode)]
        return cur

    def _retire(self, m: Module, cur: _InEngine) -> None:
        """At the engine's ``done``: report its error, or signal its semaphore."""
        eng = self.engine
        killed = cur.killed | self.flush.bit_select(cur.queue, 1)
        m.d.comb += [self.inc.queue.eq(cur.queue), self.inc.index.eq(cur.index),
                     self.err_queue.eq(cur.queue)]
        with m.If(cur.valid & eng.done):
            m.d.sync += cur.valid.eq(0)
            with m.If(~killed):
                with m.If(eng.error != ErrorCode.NONE):
                    m.d.comb += [
                        self.err_set.eq(1), self.err_info.code.eq(eng.error),
                        self.err_info.opcode.eq(cur.opcode),
                        self.err_info.cmd.eq(cur.index),
                        self.err_info.addr.eq(eng.error_addr),
                    ]
                with m.Elif(cur.signal):
                    m.d.comb += [self.inc.en.eq(1), self.inc.sem.eq(cur.sem)]

    def _trace(self, m: Module, cur: _InEngine) -> None:
        """One :class:`TraceEntry` per retired command, dropped (and ``trace_overflow`` set)
        when the FIFO is full."""
        eng = self.engine
        retire = cur.valid & eng.done
        size = TraceEntry.as_shape().size
        m.submodules.trace = trace = ResetInserter(self.clear_all)(
            fifo.SyncFIFOBuffered(width=size, depth=self.config.trace_depth))
        entry = TraceEntry(Signal(size))
        m.d.comb += [
            entry.index.eq(cur.index), entry.queue.eq(cur.queue),
            entry.start.eq(cur.start), entry.end.eq(self.cycles),
            trace.w_data.eq(entry),
            trace.w_en.eq(retire),
            self.trace.eq(trace.r_data), self.trace_valid.eq(trace.r_rdy),
            trace.r_en.eq(self.trace_pop),
        ]
        with m.If(self.clear_all):
            m.d.sync += self.trace_overflow.eq(0)
        with m.Elif(retire & ~trace.w_rdy):
            m.d.sync += self.trace_overflow.eq(1)
