"""Per-queue command FIFOs in front of one engine (:class:`EngineQueue`)."""

from amaranth import Cat, Module, Mux, ResetInserter, Signal
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
from hw.isa import PAGE_FAULTS, ErrorCode, TraceEntry

__all__ = ["EngineQueue"]


class _Record(data.Struct):
    """What the queue keeps of a command in the engine, from its handshake to its ``done``."""
    queue: 8
    index: 32
    opcode: 8
    signal: 1
    sem: 8
    killed: 1           #: its queue was reset while it ran
    start: 32


class _InEngine:
    """The records of the commands in the engine (taken, not retired), a ring of ``depth``
    (names as in the VCD): taken at ``tail``, retired at ``head`` (the oldest), in order."""

    def __init__(self, depth: int):
        self.depth = depth
        self.valid = Signal(depth, name="in_engine")
        self.recs = [Signal(_Record, name=f"cur{i}") for i in range(depth)]
        self.head = Signal(range(max(depth, 2)), name="cur_head")     # 0 when depth is 1
        self.tail = Signal(range(max(depth, 2)), name="cur_tail")
        self.oldest = Signal(_Record, name="cur")     # recs[head]

    def next(self, ptr: Signal):
        return Mux(ptr == self.depth - 1, 0, ptr + 1) if self.depth > 1 else ptr


class EngineQueue(wiring.Component):
    """Per-queue in-order command FIFOs in front of one engine, with semaphore wait, signal,
    round-robin arbitration among the queues, and the engine's command trace.

    The engine holds up to ``in_flight`` commands at once (:func:`hw.isa.engine_in_flight`:
    the matrix engine takes the next MATMUL while earlier ones run; the others one at a
    time): the queue offers a command while fewer are in the engine (taken and not retired;
    a retirement in cycle ``d`` frees a place from ``d + 1``), and keeps a record of each,
    which the engine retires in order with one ``done`` each.

    The head command of queue ``q`` is *ready* once its semaphore wait is satisfied (if its
    ``flags.wait`` is set: ``(sem[wait_sem] - wait_value) mod 2**32 < 2**31``, see
    :func:`hw.isa.sem_reached`) and while ``stop[q]`` is low; the engine gets the next ready
    head after the queue served last (round-robin). When the engine retires one: an error is
    reported on ``err_*``, otherwise ``inc`` increments the command's ``signal_sem`` if
    ``flags.signal`` was set. Each retirement pushes a :class:`TraceEntry`;
    when the trace FIFO is full the entry is dropped and ``trace_overflow`` set (until
    ``clear_all``).

    Ports
    -----
    i : ``In(stream.Signature(QueueEntry)).array(n_queues)``
        Commands from each queue's stage.
    engine : ``Out(EngineSignature())``
    sems : ``In(ArrayLayout(32, n_sems))``
    windows_base, windows_limit, vms : ``In(ArrayLayout(32, n_queues))``
        Per-queue DRAM windows and contexts (``Q_VM``), passed to the engine with the
        command.
    resume, skip : ``In(n_queues)`` (with ``replay``)
        ``Q_RESUME`` pulses of each queue (see *Replay*).
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
        Queue, index and opcode of the oldest command in the engine, the one that retires next
        (registered at the handshake; valid while the engine is busy and in its ``done``
        cycle).
    trace : ``Out(TraceEntry)``, trace_valid : ``Out(1)``, trace_pop : ``In(1)``,
    trace_overflow : ``Out(1)``
        Read side of the trace FIFO (first-word fall-through).

    Replay
    ------
    With ``replay`` (the DMA channels' queues, :mod:`hw.isa.vm`): the command in the engine is
    kept with its record; when it retires with a page fault (and its queue is not being
    reset) it goes into its queue's *replay slot*, which comes before the queue's FIFO. A
    ``resume`` pulse leaves it there: once the queue's error is cleared (the CSR block clears
    it with the pulse) the engine takes it again as the queue's head. A ``skip`` pulse sets
    its ``n_rows`` to 0 first, so the engine retires it without moving data. A reset
    (``flush``) empties the slot.
    """

    def __init__(self, config: NPUConfig, in_flight: int = 1, replay: bool = False):
        if not isinstance(in_flight, int) or in_flight < 1:
            raise ValueError(f"in_flight must be a positive integer, not {in_flight!r}")
        if replay and in_flight != 1:
            raise ValueError("a replaying engine runs one command at a time")
        self.config = config
        self.in_flight = in_flight
        self.replay = replay
        n = config.n_queues
        super().__init__({
            "i": In(stream.Signature(QueueEntry)).array(n),
            "engine": Out(EngineSignature()),
            "sems": In(data.ArrayLayout(32, config.n_sems)),
            "windows_base": In(data.ArrayLayout(32, n)),
            "windows_limit": In(data.ArrayLayout(32, n)),
            "vms": In(data.ArrayLayout(32, n)),
            "resume": In(n), "skip": In(n),
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
        n = self.config.n_queues
        #: per queue: the replay slot and whether it holds the faulted command
        self._slot = [Signal(QueueEntry, name=f"replay{q}") for q in range(n)]
        self._slot_valid = Signal(n, name="replay_valid")
        self._running = Signal(QueueEntry, name="replay_running")   # the command in the engine
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
            has = Signal(name=f"has{q}")          # a head command: replay slot or FIFO
            head = QueueEntry(Signal(QueueEntry.as_shape().size, name=f"head{q}"))
            if self.replay:
                slot_valid = self._slot_valid[q]
                m.d.comb += [has.eq(slot_valid | f.r_rdy),
                             head.eq(Mux(slot_valid, self._slot[q], f.r_data))]
            else:
                m.d.comb += [has.eq(f.r_rdy), head.eq(f.r_data)]
            hdr = head.cmd.header
            wait_ok = Signal(name=f"wait_ok{q}")    # no wait, or its semaphore reached
            m.d.comb += wait_ok.eq(~hdr.flags.wait
                                   | sem_reached(self.sems[hdr.wait_sem], hdr.wait_value))
            r = Signal(name=f"ready{q}")
            m.d.comb += r.eq(has & wait_ok & ~self.stop[q] & ~self.flush[q])
            b = Signal(name=f"sem_blocked{q}")      # has a head that waits on a semaphore
            m.d.comb += b.eq(has & ~wait_ok & ~self.stop[q] & ~self.flush[q])
            fifos.append(f)
            heads.append(head)
            ready.append(r)
            blocked.append(b)
        return fifos, heads, ready, blocked

    def _arbitrate(self, m: Module, fifos, heads, ready, blocked) -> _InEngine:
        """Round-robin among the ready heads while the engine has room; returns the records
        of the commands in the engine."""
        n = self.config.n_queues
        eng = self.engine
        cur = _InEngine(self.in_flight)
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
                        eng.vm.eq(self.vms[q]),
                    ]
        m.d.comb += [
            eng.cmd.payload.eq(sel_head.cmd),
            eng.queue.eq(sel),
            eng.cmd.valid.eq(any_ready & ~cur.valid.bit_select(cur.tail, 1)),
        ]
        take = eng.cmd.valid & eng.cmd.ready
        for q in range(n):
            here = Cat(cur.valid[i] & (r.queue == q) for i, r in enumerate(cur.recs)).any()
            if self.replay:
                from_slot = self._slot_valid[q]
                m.d.comb += [fifos[q].r_en.eq(take & (sel == q) & ~from_slot),
                             self.idle[q].eq((fifos[q].level == 0) & ~here & ~from_slot)]
            else:
                m.d.comb += [fifos[q].r_en.eq(take & (sel == q)),
                             self.idle[q].eq((fifos[q].level == 0) & ~here)]
        if self.replay:
            self._replay_slots(m, take, sel, sel_head, cur)
        hdr = sel_head.cmd.header
        with m.If(take):
            m.d.sync += [cur.valid.bit_select(cur.tail, 1).eq(1), cur.tail.eq(cur.next(cur.tail)),
                         last.eq(sel)]
            with m.Switch(cur.tail):
                for i, r in enumerate(cur.recs):
                    with m.Case(i):
                        m.d.sync += [
                            r.queue.eq(sel), r.index.eq(sel_head.index), r.opcode.eq(hdr.opcode),
                            r.signal.eq(hdr.flags.signal), r.sem.eq(hdr.signal_sem),
                            r.killed.eq(0), r.start.eq(self.cycles),
                        ]
        for i, r in enumerate(cur.recs):
            with m.If(cur.valid[i] & self.flush.bit_select(r.queue, 1)):
                m.d.sync += r.killed.eq(1)
        with m.Switch(cur.head):
            for i, r in enumerate(cur.recs):
                with m.Case(i):
                    m.d.comb += cur.oldest.eq(r)
        m.d.comb += [self.running.queue.eq(cur.oldest.queue),
                     self.running.index.eq(cur.oldest.index),
                     self.running.opcode.eq(cur.oldest.opcode)]
        return cur

    def _replay_slots(self, m: Module, take, sel, sel_head, cur: _InEngine) -> None:
        """The command in the engine is kept; a page fault moves it into its queue's slot
        (see *Replay*); the slot empties when the engine takes it again, or on a reset."""
        n = self.config.n_queues
        with m.If(take):
            m.d.sync += self._running.eq(sel_head)
        eng = self.engine
        faulted = Signal()
        old = cur.oldest
        m.d.comb += faulted.eq(cur.valid.any() & eng.done
                               & eng.error.as_value().matches(*(c.value for c in PAGE_FAULTS))
                               & ~self.flush.bit_select(old.queue, 1) & ~old.killed)
        for q in range(n):
            slot = self._slot[q]
            with m.If(self.flush[q]):
                m.d.sync += self._slot_valid[q].eq(0)
            with m.Elif(faulted & (old.queue == q)):
                m.d.sync += [self._slot_valid[q].eq(1), slot.eq(self._running)]
            with m.Elif(take & (sel == q)):
                m.d.sync += self._slot_valid[q].eq(0)
            with m.If(self.skip[q] & self._slot_valid[q]):
                m.d.sync += slot.cmd.body.dma.n_rows.eq(0)

    def _retire(self, m: Module, cur: _InEngine) -> None:
        """At the engine's ``done``: report the oldest command's error, or signal its
        semaphore."""
        eng = self.engine
        old = cur.oldest
        killed = old.killed | self.flush.bit_select(old.queue, 1)
        m.d.comb += [self.inc.queue.eq(old.queue), self.inc.index.eq(old.index),
                     self.err_queue.eq(old.queue)]
        with m.If(cur.valid.any() & eng.done):
            m.d.sync += [cur.valid.bit_select(cur.head, 1).eq(0), cur.head.eq(cur.next(cur.head))]
            with m.If(~killed):
                with m.If(eng.error != ErrorCode.NONE):
                    m.d.comb += [
                        self.err_set.eq(1), self.err_info.code.eq(eng.error),
                        self.err_info.opcode.eq(old.opcode),
                        self.err_info.cmd.eq(old.index),
                        self.err_info.addr.eq(eng.error_addr),
                    ]
                with m.Elif(old.signal):
                    m.d.comb += [self.inc.en.eq(1), self.inc.sem.eq(old.sem)]

    def _trace(self, m: Module, cur: _InEngine) -> None:
        """One :class:`TraceEntry` per retired command, dropped (and ``trace_overflow`` set)
        when the FIFO is full."""
        eng = self.engine
        retire = cur.valid.any() & eng.done
        size = TraceEntry.as_shape().size
        m.submodules.trace = trace = ResetInserter(self.clear_all)(
            fifo.SyncFIFOBuffered(width=size, depth=self.config.trace_depth))
        entry = TraceEntry(Signal(size))
        m.d.comb += [
            entry.index.eq(cur.oldest.index), entry.queue.eq(cur.oldest.queue),
            entry.start.eq(cur.oldest.start), entry.end.eq(self.cycles),
            trace.w_data.eq(entry),
            trace.w_en.eq(retire),
            self.trace.eq(trace.r_data), self.trace_valid.eq(trace.r_rdy),
            trace.r_en.eq(self.trace_pop),
        ]
        with m.If(self.clear_all):
            m.d.sync += self.trace_overflow.eq(0)
        with m.Elif(retire & ~trace.w_rdy):
            m.d.sync += self.trace_overflow.eq(1)
