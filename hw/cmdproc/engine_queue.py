"""Per-queue command FIFOs in front of one engine (:class:`EngineQueue`)."""

from amaranth import Cat, Const, Module, Mux, ResetInserter, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.bus import EngineSignature
from hw.cmdproc.common import (
    ErrorReport,
    QueueEntry,
    RunningCommand,
    engine_payload,
    round_robin,
    sem_increment,
    sem_wait,
)
from hw.config import NPUConfig
from hw.fifo import BlockRamFIFO
from hw.isa import PAGE_FAULTS, Command, DmaBody, ErrorCode, Opcode, TraceEntry

__all__ = ["EngineQueue"]


def _record(config: NPUConfig, opcodes: int) -> data.StructLayout:
    """What the queue keeps of a command in the engine, from its handshake until it retired
    and its semaphore increment was taken: ``queue``, ``index``, ``opcode`` (only for an engine
    of several opcodes), ``signal`` (it increments ``sem``; after retiring: it still has
    to), ``sem``, ``killed`` (its queue was reset since), ``start`` (the take cycle, for the
    trace)."""
    return data.StructLayout({**_record_flags(config).members,
                              **_record_detail(config, opcodes).members})


def _record_flags(config: NPUConfig) -> data.StructLayout:
    """The fields of a record kept in registers: every record's are read at once (a reset
    marks the records of its queue killed; a queue is idle with no record of its own)."""
    return data.StructLayout({"queue": range(max(config.n_queues, 2)), "signal": 1,
                              "killed": 1})


def _record_detail(config: NPUConfig, opcodes: int) -> data.StructLayout:
    """The fields of a record written once, at the handshake, and read only at the oldest and
    the first record: kept in a small memory (LUT RAM) with two read ports."""
    fields = {"index": 32, "sem": max(1, (config.n_sems - 1).bit_length()), "start": 32}
    if opcodes > 1:
        fields["opcode"] = Opcode
    return data.StructLayout(fields)


class _InEngine:
    """The records of the commands taken and not yet released, a ring of ``depth`` (names as
    in the VCD): taken at ``tail``; retired in order at ``ret`` (the oldest still in the
    engine); released in order at ``head`` (the oldest), once retired and its semaphore
    increment (if any) taken. The flags of every record are registers; the rest of a record
    (:func:`_record_detail`) is in ``details``, a memory read at ``ret`` and at ``head``."""

    def __init__(self, depth: int, config: NPUConfig, opcodes: int):
        self.depth = depth
        self.valid = Signal(depth, name="in_engine")
        self.fin = Signal(depth, name="retired")
        self.recs = [Signal(_record_flags(config), name=f"cur{i}", reset_less=True)
                     for i in range(depth)]
        self.details = Memory(shape=_record_detail(config, opcodes), depth=depth, init=[])
        record = _record(config, opcodes)
        ptr = range(max(depth, 2))                    # 0 when depth is 1
        self.head = Signal(ptr, name="cur_head")
        self.ret = Signal(ptr, name="cur_ret")
        self.tail = Signal(ptr, name="cur_tail")
        self.oldest = Signal(record, name="cur")      # recs[ret]
        self.first = Signal(record, name="cur_first")  # recs[head]

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
        self.wn = self.wait_mem.read_port(domain="comb")     # the entry behind a taken head
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
    narrower store of its own, :func:`~hw.cmdproc.common.sem_wait`, read for every queue's
    head), in two memories with one write port (a command a cycle: ``i[q].valid`` is high
    for one queue at most) that map to LUT RAM. A command written in cycle ``w`` is the
    queue's head from ``w + 1`` (once the one before it was taken); ``i[q].ready`` is high
    while the queue holds fewer than ``cmd_fifo_depth`` (a command taken in cycle ``t``
    frees its place from ``t + 1``). The engine's port gets the command back in the
    :class:`hw.isa.Command` layout (fields the engine does not read are 0).

    The engine holds up to ``in_flight`` commands at once (:func:`hw.isa.engine_in_flight`:
    the matrix engine takes the next MATMUL while earlier ones run; the others one at a
    time): the queue offers a command while it holds fewer than ``in_flight`` records
    (taken and not released), and keeps a record of each, which the engine retires in order
    with one ``done`` each.

    The head command of queue ``q`` is *ready* once its semaphore wait is satisfied (if its
    ``flags.wait`` is set: ``(sem[wait_sem] - wait_value) mod 2**32 < 2**31``, see
    :func:`hw.isa.sem_reached`; the semaphore unit's registered ready bit ``ready[q]``) and
    while ``stop[q]`` is low; the engine gets the next ready head after the queue served last
    (round-robin). The queue loads the ready bit of a new head: with ``i_ok`` (the semaphore
    unit's lookup of the command being written) when a command is written into an empty
    queue or behind a head taken in that cycle, with ``look_ok`` (its own lookup, of the
    entry behind the head it takes) otherwise.

    When the engine retires a command (``done``): an error is reported on ``err_*``;
    otherwise, if ``flags.signal`` was set, the command's increment of ``signal_sem`` is
    offered on ``inc`` (from that cycle) and its record is released in the cycle the
    semaphore unit takes it, so a command that waits for it keeps its place among the
    ``in_flight`` (a reset of its queue withdraws it). Records are released in order, one a
    cycle. Each retirement pushes a :class:`TraceEntry`; when the trace FIFO is full the
    entry is dropped and ``trace_overflow`` set (until ``clear_all``).

    Parameters
    ----------
    config : NPUConfig
    in_flight : int
        Commands the engine holds at once.
    engine : str, optional
        The engine's name in :data:`hw.cmdproc.ENGINES` (its opcodes decide the payload);
        None keeps every opcode's body.
    replay : bool
        Per-queue replay slots for page faults (the DMA channels' queues with
        ``tlb_entries > 0``; needs ``in_flight == 1``), see *Replay*.

    Ports
    -----
    i : ``In(stream.Signature(QueueEntry)).array(n_queues)``
        Commands of each queue (at most one ``valid`` a cycle; ``ready`` does not depend on
        ``valid``).
    i_ok : ``In(1)``
        The wait of the command on ``i`` is satisfied after this cycle's semaphore change.
    engine : ``Out(EngineSignature())``
    wait : ``Out(ArrayLayout(sem_wait(config), n_queues))``, load, load_ok : ``Out(n_queues)``,
    ready : ``In(n_queues)``
        The heads' waiter ports of the semaphore unit (:class:`~hw.cmdproc.SemaphoreUnit`).
    look : ``Out(sem_wait(config))``, look_ok : ``In(1)``
        A lookup port of the semaphore unit: the wait of the entry behind the head taken.
    windows_base, windows_limit, vms : ``In(ArrayLayout(32, n_queues))``
        Per-queue DRAM windows and contexts (``Q_VM``), passed to the engine with the
        command.
    resume, skip : ``In(n_queues)``
        ``Q_RESUME`` pulses of each queue (used with ``replay``, see *Replay*).
    stop, flush : ``In(n_queues)``
        Per queue: stop issuing (error latched); drop every queued command.
    clear_all : ``In(1)``
        Clears the trace FIFO and its overflow flag.
    cycles : ``In(32)``
        Cycle counter, for the trace.
    inc : ``Out(stream.Signature(sem_increment(config)))``
        The semaphore increment of a retired command.
    err_set : ``Out(1)``, err_queue : ``Out(8)``, err_info : ``Out(ErrorReport)``
    idle : ``Out(n_queues)``
        Per queue: no queued command and none taken and not released.
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
    With ``replay`` (:mod:`hw.isa.vm`, *Page faults*): every queue has a *replay slot*, an
    entry of a small memory of ``n_queues`` narrow payloads (LUT RAM; one write and one read
    port, no per-queue register or multiplexer). At its handshake a command's payload is
    written into its queue's entry (the engine runs one command at a time, so the entry still
    holds it when it retires). When it retires with a page fault (and its queue is not being
    reset) the slot becomes full and comes before the queue's part of the store: while full
    it is the queue's head, ready without a semaphore wait (its wait held when it was first
    taken), taken once the queue's error is cleared. A ``resume`` pulse leaves it there (the
    CSR block clears the error with the pulse); a ``skip`` pulse marks it skipped: it goes
    to the engine with ``n_rows`` 0, so the engine retires it without moving data. A reset
    (``flush``) empties the slot; a full slot keeps ``idle`` low.
    """

    def __init__(self, config: NPUConfig, in_flight: int = 1, engine: str | None = None,
                 replay: bool = False):
        if not isinstance(in_flight, int) or in_flight < 1:
            raise ValueError(f"in_flight must be a positive integer, not {in_flight!r}")
        if replay and in_flight != 1:
            raise ValueError(f"a replaying engine runs one command at a time, not {in_flight}")
        self.config = config
        self.in_flight = in_flight
        self.engine_name = engine
        self.replay = replay
        self.payload = engine_payload(config, engine)
        self.wait_layout = sem_wait(config)
        n = config.n_queues
        super().__init__({
            "i": In(stream.Signature(QueueEntry)).array(n),
            "i_ok": In(1),
            "engine": Out(EngineSignature()),
            "wait": Out(data.ArrayLayout(self.wait_layout, n)),
            "load": Out(n), "load_ok": Out(n), "ready": In(n),
            "look": Out(self.wait_layout), "look_ok": In(1),
            "windows_base": In(data.ArrayLayout(32, n)),
            "windows_limit": In(data.ArrayLayout(32, n)),
            "vms": In(data.ArrayLayout(32, n)),
            "resume": In(n), "skip": In(n),
            "stop": In(n), "flush": In(n), "clear_all": In(1),
            "cycles": In(32),
            "inc": Out(stream.Signature(sem_increment(config))),
            "err_set": Out(1), "err_queue": Out(8), "err_info": Out(ErrorReport),
            "idle": Out(n), "sem_stall": Out(1), "running": Out(RunningCommand),
            "trace": Out(TraceEntry), "trace_valid": Out(1), "trace_pop": In(1),
            "trace_overflow": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.config.n_queues
        #: per queue: its replay slot is full (a faulted command), and was skipped
        self._slot_valid = Signal(n, name="replay_valid")
        self._slot_skip = Signal(n, name="replay_skip")
        if not self.replay:
            m.d.comb += self._slot_valid.eq(0)
        store = self._store(m)
        cur = self._arbitrate(m, store)
        self._retire(m, cur)
        self._trace(m, cur)
        return m

    def _store(self, m: Module) -> _Store:
        """The command store: the payload memory, the wait memory, per queue its pointers and
        count; per head: ready to issue, or blocked on its semaphore."""
        cfg = self.config
        st = _Store(cfg, self.payload, self.wait_layout)
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
            st.ww.data.waits.eq(hdr.flags.wait), st.ww.data.sem.eq(hdr.wait_sem),
            st.ww.data.target.eq(hdr.wait_value),
        ]
        for q in range(n):
            m.d.comb += [self.i[q].ready.eq(st.count[q] != depth),
                         st.wr[q].addr.eq(q * depth + st.rp[q]),
                         self.wait[q].eq(st.wr[q].data)]
            has = st.count[q] != 0
            slot = self._slot_valid[q]             # a replayed command does not wait again
            ok = ~self.stop[q] & ~self.flush[q]
            m.d.comb += [st.ready[q].eq((slot | has & self.ready[q]) & ok),
                         st.blocked[q].eq(~slot & has & ~self.ready[q] & ok)]
        return st

    def _arbitrate(self, m: Module, st: _Store) -> _InEngine:
        """Round-robin among the ready heads while the engine has room; returns the records
        of the commands taken and not released."""
        cfg = self.config
        n, depth = cfg.n_queues, st.depth
        eng = self.engine
        cur = _InEngine(self.in_flight, cfg, len(self._opcodes()))
        m.submodules.records = cur.details
        last = Signal(range(max(n, 2)))
        any_ready, sel = round_robin(m, last, list(st.ready), n)
        m.d.comb += self.sem_stall.eq(~eng.busy & ~any_ready & st.blocked.any())

        head = Signal(self.payload, name="head")     # the replay slot's, or the store's
        m.d.comb += [st.r.addr.eq(sel * depth + st.rp[sel]), head.eq(st.r.data)]
        if self.replay:
            self._replay_head(m, sel, head)
        with m.Switch(sel):
            for q in range(n):
                with m.Case(q):
                    m.d.comb += [eng.window_base.eq(self.windows_base[q]),
                                 eng.window_limit.eq(self.windows_limit[q]),
                                 eng.vm.eq(self.vms[q])]
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
        # the wait of the entry behind the head taken (its ready bit is loaded with it)
        m.d.comb += [st.wn.addr.eq(sel * depth + st.next(st.rp[sel])),
                     self.look.eq(st.wn.data)]
        if depth == 1:
            m.d.comb += self.look.waits.eq(0)
        for q in range(n):
            took = take & (sel == q) & ~self._slot_valid[q]
            put = written & (wq == q)
            with m.If(self.flush[q]):
                m.d.sync += [st.count[q].eq(0), st.rp[q].eq(0), st.wp[q].eq(0)]
            with m.Else():
                m.d.sync += st.count[q].eq(st.count[q] + put - took)
                with m.If(put):
                    m.d.sync += st.wp[q].eq(st.next(st.wp[q]))
                with m.If(took):
                    m.d.sync += st.rp[q].eq(st.next(st.rp[q]))
            behind = took & (st.count[q] > 1)      # the new head is the entry behind
            m.d.comb += [self.load[q].eq(took | (put & (st.count[q] == 0))),
                         self.load_ok[q].eq(Mux(behind, self.look_ok, self.i_ok))]
            here = Cat(cur.valid[i] & (r.queue == q) for i, r in enumerate(cur.recs)).any()
            m.d.comb += self.idle[q].eq((st.count[q] == 0) & ~here & ~self._slot_valid[q])
        if self.replay:
            self._replay_slots(m, take, sel, head, cur)
        with m.If(take):
            m.d.sync += [cur.valid.bit_select(cur.tail, 1).eq(1),
                         cur.fin.bit_select(cur.tail, 1).eq(0),
                         cur.tail.eq(cur.next(cur.tail)), last.eq(sel)]
            with m.Switch(cur.tail):
                for i, r in enumerate(cur.recs):
                    with m.Case(i):
                        m.d.sync += [r.queue.eq(sel), r.signal.eq(head.flags.signal),
                                     r.killed.eq(0)]
        wr = cur.details.write_port()
        m.d.comb += [wr.addr.eq(cur.tail), wr.en.eq(take), wr.data.index.eq(head.index),
                     wr.data.sem.eq(head.signal_sem), wr.data.start.eq(self.cycles)]
        if "opcode" in wr.data.shape().members:
            m.d.comb += wr.data.opcode.eq(opcode)
        for i, r in enumerate(cur.recs):
            with m.If(cur.valid[i] & self.flush.bit_select(r.queue, 1)):
                m.d.sync += r.killed.eq(1)
        for ptr, out in ((cur.ret, cur.oldest), (cur.head, cur.first)):
            rd = cur.details.read_port(domain="comb")
            m.d.comb += rd.addr.eq(ptr)
            m.d.comb += [getattr(out, k).eq(getattr(rd.data, k)) for k in rd.data.shape().members]
            with m.Switch(ptr):
                for i, r in enumerate(cur.recs):
                    with m.Case(i):
                        m.d.comb += [getattr(out, k).eq(getattr(r, k))
                                     for k in r.shape().members]
        m.d.comb += [self.running.queue.eq(cur.oldest.queue),
                     self.running.index.eq(cur.oldest.index),
                     self.running.opcode.eq(self._record_opcode(cur.oldest))]
        return cur

    def _replay_head(self, m: Module, sel, head) -> None:
        """The head of queue ``sel`` is its replay slot while that is full (``n_rows`` 0 once
        skipped)."""
        m.submodules.replay = self._slots = Memory(shape=self.payload, depth=self.config.n_queues,
                                                   init=[])
        rd = self._slots.read_port(domain="comb")
        rows = data.Layout.cast(DmaBody)["n_rows"]
        m.d.comb += rd.addr.eq(sel)
        with m.If(self._slot_valid.bit_select(sel, 1)):
            m.d.comb += head.eq(rd.data)
            with m.If(self._slot_skip.bit_select(sel, 1)):
                m.d.comb += head.body[rows.offset:rows.offset + rows.width].eq(0)

    def _replay_slots(self, m: Module, take, sel, head, cur: _InEngine) -> None:
        """Every command taken is written into its queue's slot; a page fault at its
        retirement makes the slot full (see *Replay*); the slot empties when the engine takes
        it again, or on a reset."""
        wr = self._slots.write_port()
        m.d.comb += [wr.addr.eq(sel), wr.data.eq(head), wr.en.eq(take)]
        faulted = Signal(name="replay_fault")
        old = cur.oldest
        page_fault = self.engine.error.as_value().matches(*(c.value for c in PAGE_FAULTS))
        m.d.comb += faulted.eq(cur.valid.any() & self.engine.done & page_fault
                               & ~self.flush.bit_select(old.queue, 1) & ~old.killed)
        for q in range(self.config.n_queues):
            with m.If(self.flush[q]):
                m.d.sync += self._slot_valid[q].eq(0)
            with m.Elif(faulted & (old.queue == q)):
                m.d.sync += [self._slot_valid[q].eq(1), self._slot_skip[q].eq(0)]
            with m.Elif(take & (sel == q)):
                m.d.sync += self._slot_valid[q].eq(0)
            with m.If(self.skip[q] & self._slot_valid[q]):
                m.d.sync += self._slot_skip[q].eq(1)

    def _record_opcode(self, rec):
        ops = self._opcodes()
        return rec.opcode if len(ops) > 1 else Const(ops[0].value, 8)

    def _opcodes(self) -> tuple:
        from hw.cmdproc.common import ENGINES
        return ENGINES[self.engine_name] if self.engine_name else tuple(Opcode)

    def _retire(self, m: Module, cur: _InEngine) -> None:
        """At the engine's ``done``: report the oldest command's error, or keep its signal;
        then release the oldest record once its increment is taken (or it has none)."""
        eng = self.engine
        old = cur.oldest
        killed = old.killed | self.flush.bit_select(old.queue, 1)
        retire = Signal(name="retire")
        wants = Signal(name="retire_signals")     # the retiring command still signals
        m.d.comb += [retire.eq((cur.valid & ~cur.fin).any() & eng.done),
                     wants.eq(old.signal & ~killed & (eng.error == ErrorCode.NONE)),
                     self.err_queue.eq(old.queue)]
        with m.If(retire):
            m.d.sync += [cur.fin.bit_select(cur.ret, 1).eq(1), cur.ret.eq(cur.next(cur.ret))]
            with m.Switch(cur.ret):
                for i, r in enumerate(cur.recs):
                    with m.Case(i):
                        m.d.sync += r.signal.eq(wants)
            with m.If(~killed & (eng.error != ErrorCode.NONE)):
                m.d.comb += [
                    self.err_set.eq(1), self.err_info.code.eq(eng.error),
                    self.err_info.opcode.eq(self._record_opcode(old)),
                    self.err_info.cmd.eq(old.index),
                    self.err_info.addr.eq(eng.error_addr),
                ]
        # -- release the oldest record: retired (now or before), its increment taken
        first = cur.first
        now = retire & (cur.ret == cur.head)
        fin = cur.fin.bit_select(cur.head, 1) | now
        signals = Mux(now, wants, first.signal & ~first.killed
                      & ~self.flush.bit_select(first.queue, 1))
        held = cur.valid.bit_select(cur.head, 1) & fin
        m.d.comb += [
            self.inc.valid.eq(held & signals),
            self.inc.payload.sem.eq(first.sem), self.inc.payload.queue.eq(first.queue),
            self.inc.payload.index.eq(first.index),
        ]
        with m.If(held & (~signals | self.inc.ready)):
            m.d.sync += [cur.valid.bit_select(cur.head, 1).eq(0),
                         cur.fin.bit_select(cur.head, 1).eq(0),
                         cur.head.eq(cur.next(cur.head))]

    def _trace(self, m: Module, cur: _InEngine) -> None:
        """One :class:`TraceEntry` per retired command, dropped (and ``trace_overflow`` set)
        when the FIFO is full."""
        eng = self.engine
        retire = (cur.valid & ~cur.fin).any() & eng.done
        size = TraceEntry.as_shape().size
        m.submodules.trace = trace = ResetInserter(self.clear_all)(
            BlockRamFIFO(width=size, depth=self.config.trace_depth))
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
