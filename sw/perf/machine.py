"""The timed NPU: every block of the performance model wired as in :class:`hw.top.NPU`, plus
the registers the host sees (error latches, interrupt status, traces, counter snapshots).

:class:`Machine` holds the event queue and is driven by :class:`sw.perf.PerfBackend`, which
schedules the host's register writes at the cycles the RTL takes them and runs the machine up
to each cycle the host observes.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from hw.config import NPUConfig
from hw.isa import COUNTER_NAMES, ENGINE_NAMES, PAGE_FAULTS, ErrorCode, IrqBit, LocalMem
from sw.dram import DramTiming
from sw.perf.cmdproc import EngineQueue, Stage
from sw.perf.dma import LoadChannel, StoreChannel
from sw.perf.engines import MatrixEngine, VectorEngine
from sw.perf.events import DECIDE, UPDATE, EventQueue
from sw.perf.fetch import FetchUnit
from sw.perf.ledger import Ledger
from sw.perf.memory import (
    CP,
    WALK_LOAD,
    WALK_STORE,
    BeatScheduler,
    ReadChannel,
    WriteChannel,
    dram_read_queue,
)
from sw.perf.ports import BusyList
from sw.perf.semaphores import Semaphores
from sw.perf.translate import TimedTranslator

__all__ = ["Machine", "TraceEntry", "LatchedError"]

#: trace FIFO entry: (queue, index, start, end, readable from cycle)
TraceEntry = tuple[int, int, int, int, int]


@dataclass(frozen=True)
class LatchedError:
    """An error as the CSR block latches it (``ERR_*`` / ``Q_ERR_*``)."""
    code: ErrorCode
    queue: int
    opcode: int     #: 0 for a fetch error before decode
    index: int      #: command index in its queue (``ERR_CMD``)
    addr: int       #: ``ERR_ADDR``


class Machine:
    """The NPU's timed state on top of a functional model's state.

    Parameters
    ----------
    model : sw.model.ModelBackend
        Holds the DRAM image, the local memories, the ring and window registers and the error
        latches; the machine changes them at the cycles the hardware does.
    timing : DramTiming
    """

    irq_fence = IrqBit.FENCE
    irq_error = IrqBit.ERROR

    def __init__(self, model, timing: DramTiming) -> None:
        self.model = model
        cfg: NPUConfig = model.config
        self.config = cfg
        n = cfg.n_queues
        self.eq = eq = EventQueue()
        self.ledger = Ledger()
        self.sems = Semaphores(eq, model.sems)
        self.stop = [False] * n
        self.last_qclear = [-1] * n
        self.pending = [0] * n           # engine commands in a FIFO or an engine, per queue
        self.fetched = [0] * n           # Q_FETCHED (index of the next command staged)
        self.fences_staged = 0           # stages holding a FENCE
        self.failing = 0                 # engine commands in progress that retire with an error
        #: per queue, cycles in which a host register write or a reset pulse is pending
        self.reg_writes: list[set[int]] = [set() for _ in range(n)]
        self.stages = [Stage(self, q) for q in range(n)]
        #: beat-by-beat timing of R and W (used under backpressure or a bandwidth limit)
        self.beats = BeatScheduler(eq, timing, cfg.axi_data_bytes)
        queue = dram_read_queue(cfg)
        self.reads = ReadChannel(eq, timing, self.beats, queue,
                                 managers=4 if cfg.tlb_entries else 2)
        self.writes = WriteChannel(eq, timing, self.beats, queue)
        self.fetch = FetchUnit(self)

        now = self._now
        self.matrix_acc, self.vector_acc, self.vector_spad = (BusyList(now) for _ in range(3))
        ports = {LocalMem.SPAD: [self.vector_spad],
                 LocalMem.ACC: [self.matrix_acc, self.vector_acc]}
        #: the TLB_INVALIDATE pulses: (cycle, all, asid), in cycle order
        self.tlb_pulses: list[tuple[int, bool, int]] = []
        self.translators = ({"load": TimedTranslator(self, "load", WALK_LOAD),
                             "store": TimedTranslator(self, "store", WALK_STORE),
                             "fetch": TimedTranslator(self, "fetch", CP)}
                            if cfg.tlb_entries else {})
        engines = {
            "load": LoadChannel(cfg, eq, self.reads, self.ledger, ports, self.window,
                                self.vm, self.translators.get("load"),
                                lambda: model.engines.fault),
            "store": StoreChannel(cfg, eq, self.writes, self.ledger, self.window, self.vm,
                                  self.translators.get("store")),
            "matrix": MatrixEngine(cfg, self.matrix_acc),
            "vector": VectorEngine(cfg, self.vector_spad, self.vector_acc, self.matrix_acc,
                                   self.ledger, now),
        }
        self.engine_queues = {name: EngineQueue(self, i, engines[name])
                              for i, name in enumerate(ENGINE_NAMES)}

        self._errors: dict[int, list] = {}
        #: the latched errors: per queue (``Q_ERR_*``, it stops the queue) and the first of
        #: any queue since cleared (``ERR_*``)
        self.queue_error: list[LatchedError | None] = [None] * n
        self.first_error: LatchedError | None = None
        self._irq: dict[int, list[int]] = {}
        self.irq_changed = [False]       #: set by every change of IRQ_STATUS / IRQ_ENABLE
        self.traces: list[deque[TraceEntry]] = [deque() for _ in ENGINE_NAMES]
        self.trace_overflow = [False] * len(ENGINE_NAMES)
        self.snapshot = dict.fromkeys(COUNTER_NAMES, 0)
        self.snapshot_cycles = 0
        self.cycles_hi_latch = 0

    def _now(self) -> int:
        return self.eq.now

    # -- views -----------------------------------------------------------------------------

    def window(self, q: int) -> tuple[int, int]:
        """Queue ``q``'s DRAM window ``[base, limit)`` (limit 0 reads as 2**32)."""
        return self.model.queues[q].window()

    def vm(self, q: int) -> int:
        """Queue ``q``'s ``Q_VM``."""
        return self.model.queues[q].vm

    # -- virtual memory ------------------------------------------------------------------------

    def tlb_invalidate(self, c: int, all_: bool, asid: int) -> None:
        """A ``TLB_INVALIDATE`` completes in cycle ``c`` (decided now): the TLBs drop the
        entries from ``c + 1``; several in one cycle drop every entry (as the RTL merges
        them)."""
        if self.tlb_pulses and self.tlb_pulses[-1][0] == c:
            all_ = True
            self.tlb_pulses[-1] = (c, True, asid)
        else:
            self.tlb_pulses.append((c, all_, asid))
            self.eq.at(c + 1, UPDATE, self._apply_tlb_invalidate, c)

    def _apply_tlb_invalidate(self, c: int) -> None:
        _, all_, asid = next(p for p in self.tlb_pulses if p[0] == c)
        for t in self.translators.values():
            t.tlb.invalidate(all_, asid)
        for tlb in self.model.engines.tlbs.values():
            tlb.invalidate(all_, asid)

    def tlb_invalidated(self, a: int, b: int) -> bool:
        """Whether a TLB_INVALIDATE pulsed in a cycle ``a <= c <= b``."""
        for c, _, _ in reversed(self.tlb_pulses):
            if c < a:
                return False
            if c <= b:
                return True
        return False

    def queue_busy(self, q: int) -> bool:
        """``Q_STATUS.busy``: fetching or fencing for ``q``, a staged command, ring not empty,
        or an engine command of ``q`` not retired."""
        queue = self.model.queues[q]
        return ((self.fetch.active and self.fetch.cur == q) or self.stages[q].cmd is not None
                or queue.head != queue.tail or self.pending[q] > 0)

    # -- effects at given cycles -------------------------------------------------------------

    def dram_write(self, addr: int, data: bytes) -> None:
        self.model.dram[addr:addr + len(data)] = data

    def report_error(self, q: int, cycle: int, code: ErrorCode, opcode: int, index: int,
                     addr: int, source: int) -> None:
        """An error report (``err_set``) of queue ``q`` in ``cycle``, latched in the next one.
        ``source`` orders reports of one cycle: -1 for the fetch FSM, else the engine index
        (the FSM's report wins, then the lowest engine)."""
        lst = self._errors.get(cycle + 1)
        if lst is None:
            lst = self._errors[cycle + 1] = []
            self.eq.at(cycle + 1, UPDATE, self._latch_errors, cycle + 1)
        lst.append((source, q, code, opcode, index, addr))

    def _latch_errors(self, cycle: int) -> None:
        reports: dict[int, tuple] = {}
        for r in sorted(self._errors.pop(cycle), key=lambda r: r[0]):
            reports.setdefault(r[1], r)
        for q in sorted(reports):
            _, _, code, opcode, index, addr = reports[q]
            if self.last_qclear[q] == cycle - 1:
                continue
            error = LatchedError(code, q, opcode & 0xFF, index & 0xFFFF_FFFF, addr & 0xFFFF_FFFF)
            if self.queue_error[q] is None:
                self.queue_error[q] = error
                self.stop[q] = True
            if self.first_error is None:
                self.first_error = error
        self.irq_event(cycle, set_bits=IrqBit.ERROR)
        for eqn in self.engine_queues.values():
            eqn.wake(cycle)

    def irq_event(self, cycle: int, set_bits: int = 0, clear_bits: int = 0) -> None:
        """``IRQ_STATUS`` from ``cycle``: ``(status & ~clear_bits) | set_bits``."""
        ev = self._irq.get(cycle)
        if ev is None:
            ev = self._irq[cycle] = [0, 0]
            self.eq.at(cycle, UPDATE, self._apply_irq, cycle)
        ev[0] |= clear_bits
        ev[1] |= set_bits

    def _apply_irq(self, cycle: int) -> None:
        clear, set_bits = self._irq.pop(cycle)
        self.model.irq_status = (self.model.irq_status & ~clear) | set_bits
        self.irq_changed[0] = True

    def trace_push(self, e: int, q: int, index: int, start: int, end: int) -> None:
        """Engine ``e`` retired a command in cycle ``end`` (readable 2 cycles later)."""
        fifo = self.traces[e]
        if len(fifo) >= self.config.trace_depth:
            self.trace_overflow[e] = True
        else:
            fifo.append((q, index, start & 0xFFFF_FFFF, end & 0xFFFF_FFFF, end + 2))

    def trace_head(self, e: int, cycle: int) -> TraceEntry | None:
        fifo = self.traces[e]
        return fifo[0] if fifo and fifo[0][4] <= cycle else None

    def trace_pop(self, e: int, pulse: int) -> None:
        """``TRACE_POP`` write taking effect in cycle ``pulse``."""
        def pop() -> None:
            if self.trace_head(e, pulse) is not None:
                self.traces[e].popleft()
        self.eq.at(pulse + 1, UPDATE, pop)

    def queue_reset(self, mask: int, pulse: int, everything: bool = False) -> None:
        """``QUEUE_RESET`` (or ``CONTROL`` with ``everything``) pulse in cycle ``pulse``."""
        queues = [q for q in range(self.config.n_queues) if mask >> q & 1]

        def mark() -> None:
            for q in queues:
                self.last_qclear[q] = pulse
                self.reg_writes[q].discard(pulse)
            self._wake_all(pulse)

        def reset() -> None:
            model = self.model
            for q in queues:
                self.stages[q].clear()
                self.fetch.reset_queue(q)
                queue = model.queues[q]
                queue.head = queue.tail
                self.fetched[q] = 0
                for eqn in self.engine_queues.values():
                    self.pending[q] -= eqn.flush(q)
                if self.pending[q] == 0:
                    self.stages[q].all_idle()
                self.queue_error[q] = None
                self.stop[q] = False
                if self.first_error is not None and self.first_error.queue == q:
                    self.first_error = None
            if everything:
                self.first_error = None
                for e in range(len(ENGINE_NAMES)):
                    self.traces[e].clear()
                    self.trace_overflow[e] = False
            self._wake_all(pulse + 1)

        for q in queues:
            self.reg_writes[q].add(pulse)
        self.eq.at(pulse, UPDATE, mark)
        self.eq.at(pulse + 1, UPDATE, reset)
        if everything:
            self.sems.clear(pulse + 1)

    def resume(self, q: int, pulse: int, skip: bool) -> None:
        """``Q_RESUME`` of queue ``q`` taking effect in cycle ``pulse``: if its latched error is
        a page fault (and it reports no error in that cycle), the error is cleared from
        ``pulse + 1`` and the faulted command is taken again (or skipped)."""
        def apply() -> None:
            err = self.queue_error[q]
            if err is None or err.code not in PAGE_FAULTS:
                return
            if any(r[1] == q for r in self._errors.get(pulse + 1, ())):
                return
            self.queue_error[q] = None
            self.stop[q] = False
            if skip:
                for name in ("load", "store"):
                    if q in self.engine_queues[name].replay:
                        self.engine_queues[name].replay_skip.add(q)
            self.fetch.resumed(q, skip)
            self._wake_all(pulse + 1)
        self.eq.at(pulse + 1, UPDATE, apply)

    def _wake_all(self, cycle: int) -> None:
        self.fetch.wake(cycle)
        self.fetch.wake_loader(cycle)
        for st in self.stages:
            st.wake(cycle)
        for eqn in self.engine_queues.values():
            eqn.wake(cycle)

    def take_snapshot(self, pulse: int) -> None:
        """``CNT_SNAPSHOT`` taking effect in cycle ``pulse``."""
        def snap() -> None:
            self.snapshot = self.ledger.snapshot(pulse)
            self.snapshot_cycles = pulse
        # after every register update of the cycle (a retirement in ``pulse - 1`` is
        # recorded then); decisions of ``pulse`` only add to later cycles
        self.eq.at(pulse, DECIDE, snap)
