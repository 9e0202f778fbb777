"""Per-queue command FIFOs in front of one engine (:class:`EngineQueue`)."""

from amaranth import Cat, Const, Module, Mux, ResetInserter, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.bus import EngineSignature
from hw.cmdproc.common import (
    ErrorReport,
    QueueEntry,
    RunningCommand,
    SemIncrement,
    engine_payload,
    engine_wait,
    round_robin,
    sem_reached,
)
from hw.config import NPUConfig
from hw.isa import Command, ErrorCode, Opcode, TraceEntry

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


class _Store:
    """The command store of an engine queue (names as in the VCD): payloads and waits in two
    memories of ``n_queues x cmd_fifo_depth`` entries (queue ``q`` at ``q * depth``), per
    queue a count and read and write pointers."""

    def __init__(self, config: NPUConfig, payload, wait):
        n = config.n_queues
        self.depth = depth = config.cmd_fifo_depth
        self.mem = Memory(shape=payload, depth=n * depth, init=[])
        self.wait_mem = Memory(shape=wait, depth=n * depth, init=[])
        self.w = self.mem.write_port()
        self.r = self.mem.read_port(domain="comb")
        self.ww = self.wait_mem.write_port()
        self.wr = [self.wait_mem.read_port(domain="comb") for _ in range(n)]
        ptr = max(1, (depth - 1).bit_length())
        self.count = Signal(data.ArrayLayout(range(depth + 1), n), name="count")
        self.rp = Signal(data.ArrayLayout(ptr, n), name="rp")
        self.wp = Signal(data.ArrayLayout(ptr, n), name="wp")
        self.ready = Signal(n, name="head_ready")      # per queue: its head may go
        self.blocked = Signal(n, name="sem_blocked")   # per queue: its head waits
        self.w_queue = Signal(range(max(n, 2)), name="w_queue_sel")

    def next(self, ptr):
        return Mux(ptr == self.depth - 1, 0, ptr + 1) if self.depth > 1 else ptr


class EngineQueue(wiring.Component):
    """Per-queue in-order command queues in front of one engine, in one store, with semaphore
    wait, signal, round-robin arbitration among the queues, and the engine's command trace.

    The store holds ``cmd_fifo_depth`` commands per queue, decoded once on the way in into
    the narrow payload of this engine (:func:`hw.cmdproc.common.engine_payload`: the fields
    of the engine's opcodes' bodies, flags, signal and command index; the semaphore wait in a
    narrower store of its own, :func:`~hw.cmdproc.common.engine_wait`, read for every
    queue's head), in two memories with one write port (a command a cycle: ``i[q].valid`` is
    high for one queue at most) that map to LUT RAM. A command written in cycle ``w`` is the
    queue's head from ``w + 1`` (once the one before it was taken); ``i[q].ready`` is high
    while the queue holds fewer than ``cmd_fifo_depth`` (a command taken in cycle ``t``
    frees its place from ``t + 1``). The engine's port gets the command back in the
    :class:`hw.isa.Command` layout (fields the engine does not read are 0).

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

    Parameters
    ----------
    config : NPUConfig
    in_flight : int
        Commands the engine holds at once.
    engine : str, optional
        The engine's name in :data:`hw.cmdproc.ENGINES` (its opcodes decide the payload);
        None keeps every opcode's body.

    Ports
    -----
    i : ``In(stream.Signature(QueueEntry)).array(n_queues)``
        Commands of each queue (at most one ``valid`` a cycle; ``ready`` does not depend on
        ``valid``).
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
        Queue, index and opcode of the oldest command in the engine, the one that retires next
        (registered at the handshake; valid while the engine is busy and in its ``done``
        cycle).
    trace : ``Out(TraceEntry)``, trace_valid : ``Out(1)``, trace_pop : ``In(1)``,
    trace_overflow : ``Out(1)``
        Read side of the trace FIFO (first-word fall-through).
    """

    def __init__(self, config: NPUConfig, in_flight: int = 1, engine: str | None = None):
        if not isinstance(in_flight, int) or in_flight < 1:
            raise ValueError(f"in_flight must be a positive integer, not {in_flight!r}")
        self.config = config
        self.in_flight = in_flight
        self.engine_name = engine
        self.payload = engine_payload(config, engine)
        self.wait = engine_wait(config)
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
        store = self._store(m)
        cur = self._arbitrate(m, store)
        self._retire(m, cur)
        self._trace(m, cur)
        return m

    def _store(self, m: Module) -> _Store:
        """The command store: the payload memory, the wait memory, per queue its pointers and
        count; per head: ready to issue, or blocked on its semaphore."""
        cfg = self.config
        st = _Store(cfg, self.payload, self.wait)
        m.submodules.payloads = st.mem
        m.submodules.waits = st.wait_mem
        depth, n = st.depth, cfg.n_queues
        # -- write: one command a cycle, decoded into the narrow payload
        valid = Cat(self.i[q].valid for q in range(n))
        wq = st.w_queue
        for q in reversed(range(n)):
            with m.If(self.i[q].valid):
                m.d.comb += wq.eq(q)
        entry = QueueEntry(Signal(QueueEntry.as_shape().size, name="w_entry"))
        with m.Switch(wq):
            for q in range(n):
                with m.Case(q):
                    m.d.comb += entry.eq(self.i[q].payload)
        hdr = entry.cmd.header
        w_payload = Signal(self.payload, name="w_payload")
        m.d.comb += [w_payload.flags.eq(hdr.flags), w_payload.signal_sem.eq(hdr.signal_sem),
                     w_payload.index.eq(entry.index)]
        if "opcode" in self.payload.members:
            m.d.comb += w_payload.opcode.eq(hdr.opcode)
        if self.payload.size and "body" in self.payload.members:
            m.d.comb += w_payload.body.eq(entry.cmd.body.raw)
        write = Signal(name="w_en")
        m.d.comb += [
            write.eq((valid & Cat(self.i[q].ready for q in range(n))).any()),
            st.w.addr.eq(wq * depth + st.wp[wq]), st.w.data.eq(w_payload), st.w.en.eq(write),
            st.ww.addr.eq(st.w.addr), st.ww.en.eq(write),
            st.ww.data.waits.eq(hdr.flags.wait), st.ww.data.wait_sem.eq(hdr.wait_sem),
            st.ww.data.wait_value.eq(hdr.wait_value),
        ]
        for q in range(n):
            m.d.comb += [self.i[q].ready.eq(st.count[q] != depth),
                         st.wr[q].addr.eq(q * depth + st.rp[q])]
            head = st.wr[q].data
            wait_ok = Signal(name=f"wait_ok{q}")    # no wait, or its semaphore reached
            m.d.comb += wait_ok.eq(~head.waits
                                   | sem_reached(self.sems[head.wait_sem], head.wait_value))
            has = st.count[q] != 0
            m.d.comb += [
                st.ready[q].eq(has & wait_ok & ~self.stop[q] & ~self.flush[q]),
                st.blocked[q].eq(has & ~wait_ok & ~self.stop[q] & ~self.flush[q]),
            ]
        return st

    def _arbitrate(self, m: Module, st: _Store) -> _InEngine:
        """Round-robin among the ready heads while the engine has room; returns the records
        of the commands in the engine."""
        cfg = self.config
        n, depth = cfg.n_queues, st.depth
        eng = self.engine
        cur = _InEngine(self.in_flight)
        last = Signal(range(max(n, 2)))
        any_ready, sel = round_robin(m, last, list(st.ready), n)
        m.d.comb += self.sem_stall.eq(~eng.busy & ~any_ready & st.blocked.any())

        head = st.r.data
        m.d.comb += st.r.addr.eq(sel * depth + st.rp[sel])
        with m.Switch(sel):
            for q in range(n):
                with m.Case(q):
                    m.d.comb += [eng.window_base.eq(self.windows_base[q]),
                                 eng.window_limit.eq(self.windows_limit[q])]
        # the engine's port takes the command back in the ISA's layout
        cmd = Signal(Command, name="head_cmd")
        opcode = head.opcode if "opcode" in self.payload.members else Const(
            self._opcodes()[0].value, 8)
        m.d.comb += [cmd.header.opcode.eq(opcode), cmd.header.flags.eq(head.flags),
                     cmd.header.signal_sem.eq(head.signal_sem)]
        if "body" in self.payload.members:
            m.d.comb += cmd.body.raw.eq(head.body)
        m.d.comb += [
            eng.cmd.payload.eq(cmd),
            eng.queue.eq(sel),
            eng.cmd.valid.eq(any_ready & ~cur.valid.bit_select(cur.tail, 1)),
        ]
        take = eng.cmd.valid & eng.cmd.ready
        written = st.w.en
        wq = st.w_queue
        for q in range(n):
            took = take & (sel == q)
            put = written & (wq == q)
            with m.If(self.flush[q]):
                m.d.sync += [st.count[q].eq(0), st.rp[q].eq(0), st.wp[q].eq(0)]
            with m.Else():
                m.d.sync += st.count[q].eq(st.count[q] + put - took)
                with m.If(put):
                    m.d.sync += st.wp[q].eq(st.next(st.wp[q]))
                with m.If(took):
                    m.d.sync += st.rp[q].eq(st.next(st.rp[q]))
            here = Cat(cur.valid[i] & (r.queue == q) for i, r in enumerate(cur.recs)).any()
            m.d.comb += self.idle[q].eq((st.count[q] == 0) & ~here)
        with m.If(take):
            m.d.sync += [cur.valid.bit_select(cur.tail, 1).eq(1), cur.tail.eq(cur.next(cur.tail)),
                         last.eq(sel)]
            with m.Switch(cur.tail):
                for i, r in enumerate(cur.recs):
                    with m.Case(i):
                        m.d.sync += [
                            r.queue.eq(sel), r.index.eq(head.index), r.opcode.eq(opcode),
                            r.signal.eq(head.flags.signal), r.sem.eq(head.signal_sem),
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

    def _opcodes(self) -> tuple:
        from hw.cmdproc.common import ENGINES
        return ENGINES[self.engine_name] if self.engine_name else tuple(Opcode)

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
