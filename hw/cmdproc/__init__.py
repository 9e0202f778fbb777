"""Command processor: fetches commands from ``n_queues`` ring buffers in DRAM, decodes them and
dispatches them to per-queue engine FIFOs; runs the synchronization commands itself.

Structure (DESIGN.md, decoupled access/execute, several streams):

* **Fetch** arbitrates round-robin among the queues that have a command in their ring
  (``head != tail``), an empty *stage* register and no error latched. It reads one 32-byte
  command per AXI burst, checks it (ring alignment, DRAM range and the queue's window, opcode,
  semaphore ids) and puts it into the queue's stage; ``HEAD`` advances then.
* **Stage** (one command per queue): an engine command moves on into the queue's FIFO in front
  of its engine; a processor command (``NOP``, ``WAIT``, ``SIGNAL``, ``BARRIER``, ``FENCE``)
  executes from the stage. While a queue's stage is occupied that queue is not fetched, so a
  ``WAIT`` blocks only its own queue.
* **Engines**: every engine has one FIFO per queue (:class:`EngineQueue`); the engine takes
  the next command round-robin among the queues whose head command is ready (its semaphore
  wait satisfied, queue not stopped). A command waiting on a semaphore in queue A therefore
  never blocks queue B on the same engine (no head-of-line blocking); within a queue and an
  engine, order is kept.
* **Semaphores** are global (shared by all queues); every completion with ``signal`` set
  increments ``sem[signal_sem]`` and records (queue, command index) in ``sem_last``.
* ``BARRIER`` waits until every earlier command of its queue retired (and its own semaphore
  wait, if any); ``FENCE`` does the same and then writes ``value`` (or the cycle counter, with
  ``body.fence.timestamp``) to DRAM and optionally raises the fence interrupt. Fence writes
  share the bus with fetch; a ready fence goes first.

Errors (unknown opcode, bad semaphore id, bad ring or fence address, window violation, AXI
error, or an error an engine reports) are reported per queue on ``err_set``/``err_info`` to the
CSR block, which latches them; ``stop[q]`` then stops fetching and issuing for queue ``q``
only. ``qclear[q]`` resets queue ``q``: its FIFOs and stage are dropped, ``head := tail``, its
command index restarts at 0; a command of that queue already inside an engine runs to its end
but neither signals nor reports an error. ``sem_clear`` zeroes the semaphores.
"""

from amaranth import Cat, Const, Module, Mux, ResetInserter, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.bus import AXI_BURST_INCR, AXI_RESP_OKAY, AXI4Signature, EngineSignature
from hw.config import NPUConfig
from hw.isa import (
    COMMAND_BYTES,
    ENGINE_NAMES,
    OPCODE_ENGINE,
    Command,
    ErrorCode,
    Opcode,
    TraceEntry,
)

__all__ = ["CommandProcessor", "EngineQueue", "QueueEntry", "ErrorReport", "TraceEntry",
           "ENGINES"]


class QueueEntry(data.Struct):
    """A command on its way to an engine, with its index in the queue (for error reports)."""
    cmd: Command
    index: 32


class ErrorReport(data.Struct):
    """One error, as reported to the CSR block."""
    code: 8
    opcode: 8
    cmd: 32      #: command index in its queue
    addr: 32


def _round_robin(m: Module, last: Signal, ready: list, n: int) -> tuple[Signal, Signal]:
    """Pick the first ``q`` with ``ready[q]`` after ``last`` (cyclically). Returns
    ``(any, sel)``."""
    any_ = Signal()
    sel = Signal(range(max(n, 2)))
    m.d.comb += any_.eq(Cat(*ready).any())
    with m.Switch(last):
        for lst in range(n):
            with m.Case(lst):
                order = [(lst + 1 + k) % n for k in range(n)]
                for q in reversed(order):
                    with m.If(ready[q]):
                        m.d.comb += sel.eq(q)
    return any_, sel


class EngineQueue(wiring.Component):
    """Per-queue in-order command FIFOs in front of one engine, with semaphore wait, signal,
    round-robin arbitration among the queues, and the engine's command trace.

    The head command of queue ``q`` is *ready* once ``sem[wait_sem] >= wait_value`` (if its
    ``flags.wait`` is set) and while ``stop[q]`` is low; the engine gets the next ready head
    after the queue served last (round-robin), one command at a time. When the engine retires
    it: an error is reported on ``err_*``, otherwise ``sem_inc`` pulses for ``sem_id`` if
    ``flags.signal`` was set. Each retirement pushes a :class:`TraceEntry`; when the trace
    FIFO is full the entry is dropped and ``trace_overflow`` set (until ``sem_clear``).

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
    sem_inc : ``Out(1)``, sem_id : ``Out(8)``, sem_queue : ``Out(8)``, sem_index : ``Out(32)``
    err_set : ``Out(1)``, err_queue : ``Out(8)``, err_info : ``Out(ErrorReport)``
    idle : ``Out(n_queues)``
        Per queue: no queued command and none in the engine.
    sem_stall : ``Out(1)``
        The engine is idle (``busy`` low) and cannot take a command because every queue that
        has one for it (and is neither stopped nor being reset) has a head command waiting on
        an unsatisfied semaphore; at least one such queue exists. (The ``sem`` stall reason of
        :data:`hw.isa.STALL_REASONS`.)
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
            "sem_inc": Out(1), "sem_id": Out(8), "sem_queue": Out(8), "sem_index": Out(32),
            "err_set": Out(1), "err_queue": Out(8), "err_info": Out(ErrorReport),
            "idle": Out(n), "sem_stall": Out(1),
            "trace": Out(TraceEntry), "trace_valid": Out(1), "trace_pop": In(1),
            "trace_overflow": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        n = cfg.n_queues
        width = QueueEntry.as_shape().size
        eng = self.engine

        # -- per-queue FIFOs ------------------------------------------------------------------
        fifos, heads, ready, blocked = [], [], [], []
        for q in range(n):
            f = ResetInserter(self.flush[q])(
                fifo.SyncFIFOBuffered(width=width, depth=cfg.cmd_fifo_depth))
            m.submodules[f"fifo{q}"] = f
            m.d.comb += [f.w_data.eq(self.i[q].payload), f.w_en.eq(self.i[q].valid),
                         self.i[q].ready.eq(f.w_rdy)]
            head = QueueEntry(f.r_data)
            hdr = head.cmd.header
            wait_ok = ~hdr.flags.wait | (self.sems[hdr.wait_sem] >= hdr.wait_value)
            r = Signal(name=f"ready{q}")
            m.d.comb += r.eq(f.r_rdy & wait_ok & ~self.stop[q] & ~self.flush[q])
            b = Signal(name=f"sem_blocked{q}")      # has a head that waits on a semaphore
            m.d.comb += b.eq(f.r_rdy & ~wait_ok & ~self.stop[q] & ~self.flush[q])
            fifos.append(f)
            heads.append(head)
            ready.append(r)
            blocked.append(b)

        # -- arbitration: round-robin among ready heads, one command in the engine ------------
        in_engine = Signal()
        cur_queue = Signal(8)
        cur_index = Signal(32)
        cur_opcode = Signal(8)
        cur_signal = Signal()
        cur_sem = Signal(8)
        cur_killed = Signal()       # its queue was reset while it ran
        cur_start = Signal(32)
        last = Signal(range(max(n, 2)))
        any_ready, sel = _round_robin(m, last, ready, n)
        m.d.comb += self.sem_stall.eq(~eng.busy & ~any_ready & Cat(*blocked).any())

        sel_head = QueueEntry(Signal(width))
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
            eng.cmd.valid.eq(any_ready & ~in_engine),
        ]
        take = eng.cmd.valid & eng.cmd.ready
        for q in range(n):
            m.d.comb += fifos[q].r_en.eq(take & (sel == q))
            m.d.comb += self.idle[q].eq((fifos[q].level == 0) & ~(in_engine & (cur_queue == q)))
        hdr = sel_head.cmd.header
        with m.If(take):
            m.d.sync += [
                in_engine.eq(1), cur_queue.eq(sel), cur_index.eq(sel_head.index),
                cur_opcode.eq(hdr.opcode), cur_signal.eq(hdr.flags.signal),
                cur_sem.eq(hdr.signal_sem), cur_killed.eq(0), cur_start.eq(self.cycles),
                last.eq(sel),
            ]
        with m.If(in_engine & self.flush.bit_select(cur_queue, 1)):
            m.d.sync += cur_killed.eq(1)

        # -- retirement: error or signal ------------------------------------------------------
        killed = cur_killed | self.flush.bit_select(cur_queue, 1)
        m.d.comb += [self.sem_queue.eq(cur_queue), self.sem_index.eq(cur_index),
                     self.err_queue.eq(cur_queue)]
        with m.If(in_engine & eng.done):
            m.d.sync += in_engine.eq(0)
            with m.If(~killed):
                with m.If(eng.error != ErrorCode.NONE):
                    m.d.comb += [
                        self.err_set.eq(1), self.err_info.code.eq(eng.error),
                        self.err_info.opcode.eq(cur_opcode), self.err_info.cmd.eq(cur_index),
                        self.err_info.addr.eq(eng.error_addr),
                    ]
                with m.Elif(cur_signal):
                    m.d.comb += [self.sem_inc.eq(1), self.sem_id.eq(cur_sem)]

        # -- trace ----------------------------------------------------------------------------
        m.submodules.trace = trace = ResetInserter(self.clear_all)(
            fifo.SyncFIFOBuffered(width=TraceEntry.as_shape().size, depth=cfg.trace_depth))
        entry = TraceEntry(Signal(TraceEntry.as_shape().size))
        m.d.comb += [
            entry.index.eq(cur_index), entry.queue.eq(cur_queue),
            entry.start.eq(cur_start), entry.end.eq(self.cycles),
            trace.w_data.eq(entry),
            trace.w_en.eq(in_engine & eng.done),
            self.trace.eq(trace.r_data), self.trace_valid.eq(trace.r_rdy),
            trace.r_en.eq(self.trace_pop),
        ]
        with m.If(self.clear_all):
            m.d.sync += self.trace_overflow.eq(0)
        with m.Elif(in_engine & eng.done & ~trace.w_rdy):
            m.d.sync += self.trace_overflow.eq(1)
        return m


#: engine port name -> the opcodes it runs (from hw.isa.OPCODE_ENGINE)
ENGINES = {name: tuple(op for op, engine in OPCODE_ENGINE.items() if engine == name)
           for name in ENGINE_NAMES}


class CommandProcessor(wiring.Component):
    """Fetch, decode and dispatch for ``n_queues`` command queues (see the module docstring).

    Ports
    -----
    bus : ``Out(AXI4Signature(...))``
        Ring fetch (one 32-byte INCR burst per command) and fence writes (one beat).
    ring_base, ring_size, tail : ``In(ArrayLayout(32, n_queues))``
        Ring registers (see :class:`hw.isa.Csr`); ``ring_size`` is a power of two.
    head, fetched : ``Out(ArrayLayout(32, n_queues))``
        Next slot fetched; commands fetched since the queue's last reset.
    window_base, window_limit : ``In(ArrayLayout(32, n_queues))``
        Per-queue DRAM windows (``window_limit == 0``: no limit).
    load, store, matrix, vector : ``Out(EngineSignature())``
        The engines.
    stop : ``In(n_queues)``
        Per queue: an error is latched in the CSR block; the queue stops.
    qclear : ``In(n_queues)``
        Per queue: reset pulse. ``sem_clear`` : ``In(1)``: zero the semaphores, their
        ``sem_last`` records and the traces.
    err_set : ``Out(n_queues)``, err_info : ``Out(ArrayLayout(ErrorReport, n_queues))``
        Per-queue error reports to the CSR block (one-cycle pulses).
    fence_irq : ``Out(1)``
        One-cycle pulse when a fence with ``flags.irq`` has written its value.
    sems, sem_last : ``Out(ArrayLayout(32, n_sems))``
        Semaphore values; what last incremented each (valid << 31 | queue << 24 | index).
    busy : ``Out(n_queues)``
        Per queue: holds commands not yet retired.
    cycles : ``In(32)``
        Cycle counter (fence timestamps and traces).
    sem_stall : ``Out(4)``
        Per engine (order of :data:`ENGINES`): the ``sem`` stall condition of its
        :class:`EngineQueue` (for the counters of :mod:`hw.counters`).
    trace, trace_valid, trace_overflow : per engine (``Out`` arrays of 4), trace_pop : ``In(4)``
        Read side of the engines' trace FIFOs.

    Latency: a command is fetched, decoded and staged in about ``32 / axi_data_bytes + 4``
    cycles plus the DRAM read latency; fetch runs ahead of execution up to the FIFO depth
    (``cmd_fifo_depth`` per queue and engine).
    """

    def __init__(self, config: NPUConfig):
        if COMMAND_BYTES % config.axi_data_bytes:
            raise ValueError(f"a {COMMAND_BYTES}-byte command is not a whole number of "
                             f"{config.axi_data_bytes}-byte beats")
        self.config = config
        n = config.n_queues
        q32 = data.ArrayLayout(32, n)
        n_eng = len(ENGINES)
        members = {
            "bus": Out(AXI4Signature(addr_width=config.axi_addr_bits,
                                     data_width=config.axi_data_bits,
                                     id_width=config.axi_id_bits)),
            "ring_base": In(q32), "ring_size": In(q32), "tail": In(q32),
            "window_base": In(q32), "window_limit": In(q32),
            "head": Out(q32), "fetched": Out(q32),
            "stop": In(n), "qclear": In(n), "sem_clear": In(1),
            "err_set": Out(n), "err_info": Out(data.ArrayLayout(ErrorReport, n)),
            "fence_irq": Out(1),
            "sems": Out(data.ArrayLayout(32, config.n_sems)),
            "sem_last": Out(data.ArrayLayout(32, config.n_sems)),
            "busy": Out(n),
            "cycles": In(32),
            "sem_stall": Out(n_eng),
            "trace": Out(data.ArrayLayout(TraceEntry, n_eng)),
            "trace_valid": Out(n_eng), "trace_overflow": Out(n_eng), "trace_pop": In(n_eng),
        }
        for name in ENGINES:
            members[name] = Out(EngineSignature())
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        n = cfg.n_queues
        bus = self.bus
        beat_bytes = cfg.axi_data_bytes
        n_beats = COMMAND_BYTES // beat_bytes

        # -- engine queues --------------------------------------------------------------------
        queues = {}
        for e, name in enumerate(ENGINES):
            eq = EngineQueue(cfg)
            m.submodules[f"{name}_queue"] = queues[name] = eq
            wiring.connect(m, eq.engine, wiring.flipped(getattr(self, name)))
            m.d.comb += [
                eq.sems.eq(self.sems), eq.stop.eq(self.stop), eq.flush.eq(self.qclear),
                eq.clear_all.eq(self.sem_clear), eq.cycles.eq(self.cycles),
                eq.windows_base.eq(self.window_base), eq.windows_limit.eq(self.window_limit),
                self.trace[e].eq(eq.trace), self.trace_valid[e].eq(eq.trace_valid),
                self.trace_overflow[e].eq(eq.trace_overflow), eq.trace_pop.eq(self.trace_pop[e]),
                self.sem_stall[e].eq(eq.sem_stall),
            ]
        all_idle = [Cat(eq.idle[q] for eq in queues.values()).all() for q in range(n)]

        # -- per-queue state: stage register (one command between fetch and its engine) -------
        stage_valid = Signal(n)
        stage = [Signal(Command, name=f"stage{q}") for q in range(n)]
        stage_index = [Signal(32, name=f"stage_index{q}") for q in range(n)]

        # -- fetch / fence FSM state ------------------------------------------------------------
        cur = Signal(range(max(n, 2)))      # queue being fetched or fenced
        cur_abort = Signal()                # that queue was reset meanwhile
        cmd = Signal(Command)
        hdr = cmd.header
        opcode = hdr.opcode
        fsm_err = Signal()
        fsm_code = Signal(ErrorCode)
        fsm_addr = Signal(32)
        fsm_cmd = Signal(32)
        fsm_opcode = Signal(8)
        fence_inc = Signal()
        fence_index = Signal(32)
        fence_sem = Signal(8)

        def cur_bit(vec):
            return vec.bit_select(cur, 1)

        def cur_word(arr):
            return arr[cur]

        # -- semaphores: increments from the engines, the stages and the fence -------------------
        incs = []   # (enable, sem id, queue, index)
        for eq in queues.values():
            incs.append((eq.sem_inc, eq.sem_id, eq.sem_queue, eq.sem_index))
        stage_done = Signal(n)      # the stage empties (dispatched or executed)
        proc_done = Signal(n)       # a processor command in the stage completed
        for q in range(n):
            h = stage[q].header
            sig = h.flags.signal | (h.opcode == Opcode.SIGNAL)
            incs.append((proc_done[q] & sig, h.signal_sem, Const(q, 8), stage_index[q]))
        incs.append((fence_inc, fence_sem, cur, fence_index))
        # Enables and per-semaphore hits are named signals: Amaranth's lowering copies a shared
        # expression at each use (2 * n_sems uses of each enable).
        widened = []
        for i, (inc, sid, q, index) in enumerate(incs):
            q7 = Signal(7)
            en = Signal(name=f"sem_inc_en{i}")
            m.d.comb += [q7.eq(q), en.eq(inc)]
            widened.append((en, sid, q7, index))
        incs = widened
        for s in range(cfg.n_sems):
            hits = []
            for i, (inc, sid, _, _) in enumerate(incs):
                hit = Signal(name=f"sem{s}_hit{i}")
                m.d.comb += hit.eq(inc & (sid == s))
                hits.append(hit)
            total = sum(hits)
            with m.If(self.sem_clear):
                m.d.sync += [self.sems[s].eq(0), self.sem_last[s].eq(0)]
            with m.Else():
                m.d.sync += self.sems[s].eq(self.sems[s] + total)
                for hit, (_, _, q, index) in zip(hits, incs, strict=True):
                    with m.If(hit):
                        m.d.sync += self.sem_last[s].eq(
                            Cat(index[:24], q, Const(1, 1)))

        # -- stage execution: dispatch engine commands, run NOP/WAIT/SIGNAL/BARRIER ------------
        engine_ops = [op.value for ops in ENGINES.values() for op in ops]
        fence_ready = Signal(n)
        for q in range(n):
            h = stage[q].header
            op = h.opcode
            waits = h.flags.wait | (op == Opcode.WAIT)
            wait_ok = ~waits | (self.sems[h.wait_sem] >= h.wait_value)
            live = stage_valid[q] & ~self.stop[q] & ~self.qclear[q]
            is_engine = op.as_value().matches(*engine_ops)
            for name, ops in ENGINES.items():
                port = queues[name].i[q]
                m.d.comb += [port.payload.cmd.eq(stage[q]), port.payload.index.eq(stage_index[q])]
                with m.If(op.as_value().matches(*(o.value for o in ops))):
                    m.d.comb += port.valid.eq(live)
                    with m.If(port.ready & live):
                        m.d.comb += stage_done[q].eq(1)
            with m.If(live & ~is_engine & wait_ok):
                with m.If(op.as_value().matches(Opcode.NOP, Opcode.WAIT, Opcode.SIGNAL)):
                    m.d.comb += [stage_done[q].eq(1), proc_done[q].eq(1)]
                with m.Elif((op == Opcode.BARRIER) & all_idle[q]):
                    m.d.comb += [stage_done[q].eq(1), proc_done[q].eq(1)]
                with m.Elif((op == Opcode.FENCE) & all_idle[q]):
                    m.d.comb += fence_ready[q].eq(1)

        # -- error reports: the FSM's own errors for queue `cur`, else an engine's -------------
        for q in range(n):
            for eq in reversed(list(queues.values())):
                with m.If(eq.err_set & (eq.err_queue == q)):
                    m.d.comb += [self.err_set[q].eq(1), self.err_info[q].eq(eq.err_info)]
            with m.If(fsm_err & (cur == q)):
                m.d.comb += [
                    self.err_set[q].eq(1), self.err_info[q].code.eq(fsm_code),
                    self.err_info[q].opcode.eq(fsm_opcode), self.err_info[q].cmd.eq(fsm_cmd),
                    self.err_info[q].addr.eq(fsm_addr),
                ]

        # -- fetch, decode, fence write -------------------------------------------------------
        ring_base = cur_word(self.ring_base)
        head = cur_word(self.head)
        win_base = cur_word(self.window_base)
        win_lim_raw = cur_word(self.window_limit)
        win_limit = Signal(33)
        m.d.comb += win_limit.eq(Mux(win_lim_raw == 0, 1 << 32, win_lim_raw))
        slot_addr = Signal(33)
        m.d.comb += slot_addr.eq(ring_base + head * COMMAND_BYTES)
        beat = Signal(range(n_beats + 1))
        resp_err = Signal()
        aw_done = Signal()
        w_done = Signal()
        signals = hdr.flags.signal | (opcode == Opcode.SIGNAL)
        waits = hdr.flags.wait | (opcode == Opcode.WAIT)
        fence = cmd.body.fence
        fence_lane = fence.addr[:(beat_bytes.bit_length() - 1)] if beat_bytes > 4 else 0
        fence_word = Signal(32)

        fetchable = [~stage_valid[q] & (self.head[q] != self.tail[q]) & ~self.stop[q]
                     & ~self.qclear[q] for q in range(n)]
        fetch_last = Signal(range(max(n, 2)))
        fence_last = Signal(range(max(n, 2)))
        any_fetch, fetch_sel = _round_robin(m, fetch_last, fetchable, n)
        any_fence, fence_sel = _round_robin(m, fence_last, list(fence_ready), n)

        with m.If(cur_bit(self.qclear)):
            m.d.sync += cur_abort.eq(1)

        def fail(code, addr, index, op):
            m.d.comb += [fsm_err.eq(~cur_abort & ~cur_bit(self.qclear)), fsm_code.eq(code),
                         fsm_addr.eq(addr), fsm_cmd.eq(index), fsm_opcode.eq(op)]
            m.next = "IDLE"

        with m.FSM(name="fetch") as fsm:
            with m.State("IDLE"):
                with m.If(any_fence):
                    m.d.sync += [cur.eq(fence_sel), fence_last.eq(fence_sel), cur_abort.eq(0)]
                    with m.Switch(fence_sel):
                        for q in range(n):
                            with m.Case(q):
                                m.d.sync += [cmd.eq(stage[q]), fence_index.eq(stage_index[q])]
                    m.next = "FENCE_CHECK"
                with m.Elif(any_fetch):
                    m.d.sync += [cur.eq(fetch_sel), fetch_last.eq(fetch_sel), cur_abort.eq(0)]
                    m.next = "FETCH_CHECK"
            with m.State("FETCH_CHECK"):
                index = cur_word(self.fetched)
                with m.If(cur_abort | cur_bit(self.qclear) | cur_bit(self.stop)):
                    m.next = "IDLE"
                with m.Elif(ring_base[:5] != 0):
                    fail(ErrorCode.MISALIGNED, ring_base, index, 0)
                with m.Elif(slot_addr + COMMAND_BYTES > cfg.dram_bytes):
                    fail(ErrorCode.BAD_DRAM_ADDR, slot_addr, index, 0)
                with m.Elif((slot_addr < win_base) | (slot_addr + COMMAND_BYTES > win_limit)):
                    fail(ErrorCode.WINDOW, slot_addr, index, 0)
                with m.Else():
                    m.next = "FETCH_ADDR"
            with m.State("FETCH_ADDR"):
                m.d.comb += [
                    bus.arvalid.eq(1), bus.araddr.eq(slot_addr), bus.arlen.eq(n_beats - 1),
                    bus.arsize.eq(beat_bytes.bit_length() - 1), bus.arburst.eq(AXI_BURST_INCR),
                ]
                m.d.sync += [beat.eq(0), resp_err.eq(0)]
                with m.If(bus.arready):
                    m.next = "FETCH_DATA"
            with m.State("FETCH_DATA"):
                m.d.comb += bus.rready.eq(1)
                with m.If(bus.rvalid):
                    m.d.sync += [
                        cmd.as_value().word_select(beat, cfg.axi_data_bits).eq(bus.rdata),
                        beat.eq(beat + 1),
                    ]
                    with m.If(bus.rresp != AXI_RESP_OKAY):
                        m.d.sync += resp_err.eq(1)
                    with m.If(bus.rlast):
                        m.next = "DECODE"
            with m.State("DECODE"):
                index = cur_word(self.fetched)
                with m.If(cur_abort | cur_bit(self.qclear) | cur_bit(self.stop)):
                    m.next = "IDLE"
                with m.Elif(resp_err):
                    fail(ErrorCode.AXI_ERROR, slot_addr, index, opcode)
                with m.Elif(~opcode.as_value().matches(*(op.value for op in Opcode))):
                    fail(ErrorCode.BAD_OPCODE, slot_addr, index, opcode)
                with m.Elif(waits & (hdr.wait_sem >= cfg.n_sems)):
                    fail(ErrorCode.BAD_SEM, hdr.wait_sem, index, opcode)
                with m.Elif(signals & (hdr.signal_sem >= cfg.n_sems)):
                    fail(ErrorCode.BAD_SEM, hdr.signal_sem, index, opcode)
                with m.Else():
                    with m.Switch(cur):
                        for q in range(n):
                            with m.Case(q):
                                m.d.sync += [
                                    stage[q].eq(cmd), stage_index[q].eq(index),
                                    self.head[q].eq((self.head[q] + 1)
                                                    & (self.ring_size[q] - 1)),
                                    self.fetched[q].eq(self.fetched[q] + 1),
                                ]
                    m.d.sync += stage_valid.bit_select(cur, 1).eq(1)
                    m.next = "IDLE"
            with m.State("FENCE_CHECK"):
                with m.If(cur_abort | cur_bit(self.qclear) | cur_bit(self.stop)):
                    m.next = "IDLE"
                with m.Elif(fence.addr[:2] != 0):
                    fail(ErrorCode.MISALIGNED, fence.addr, fence_index, opcode)
                with m.Elif(fence.addr + 4 > cfg.dram_bytes):
                    fail(ErrorCode.BAD_DRAM_ADDR, fence.addr, fence_index, opcode)
                with m.Elif((fence.addr < win_base) | (fence.addr + 4 > win_limit)):
                    fail(ErrorCode.WINDOW, fence.addr, fence_index, opcode)
                with m.Else():
                    m.d.sync += [aw_done.eq(0), w_done.eq(0),
                                 fence_word.eq(Mux(fence.timestamp, self.cycles, fence.value))]
                    m.next = "FENCE_WRITE"
            with m.State("FENCE_WRITE"):
                m.d.comb += [
                    bus.awvalid.eq(~aw_done), bus.awaddr.eq(fence.addr), bus.awlen.eq(0),
                    bus.awsize.eq(beat_bytes.bit_length() - 1), bus.awburst.eq(AXI_BURST_INCR),
                    bus.wvalid.eq(~w_done), bus.wlast.eq(1),
                    bus.wdata.eq(fence_word << (fence_lane * 8)),
                    bus.wstrb.eq(0xF << fence_lane),
                ]
                aw_now = aw_done | bus.awready
                w_now = w_done | bus.wready
                with m.If(aw_now & w_now):
                    m.next = "FENCE_RESPONSE"
                with m.Else():
                    m.d.sync += [aw_done.eq(aw_now), w_done.eq(w_now)]
            with m.State("FENCE_RESPONSE"):
                m.d.comb += bus.bready.eq(1)
                with m.If(bus.bvalid):
                    with m.If(bus.bresp != AXI_RESP_OKAY):
                        fail(ErrorCode.AXI_ERROR, fence.addr, fence_index, opcode)
                    with m.Elif(cur_abort | cur_bit(self.qclear)):
                        m.next = "IDLE"
                    with m.Else():
                        m.d.comb += [self.fence_irq.eq(hdr.flags.irq), fence_inc.eq(signals),
                                     fence_sem.eq(hdr.signal_sem)]
                        m.d.sync += stage_valid.bit_select(cur, 1).eq(0)
                        m.next = "IDLE"

        # -- stage bookkeeping and per-queue reset ----------------------------------------------
        for q in range(n):
            with m.If(stage_done[q]):
                m.d.sync += stage_valid[q].eq(0)
            with m.If(self.qclear[q]):
                m.d.sync += [stage_valid[q].eq(0), self.head[q].eq(self.tail[q]),
                             self.fetched[q].eq(0)]

        for q in range(n):
            active = ~fsm.ongoing("IDLE") & (cur == q)
            m.d.comb += self.busy[q].eq(active | stage_valid[q] | (self.head[q] != self.tail[q])
                                        | ~all_idle[q])
        return m
