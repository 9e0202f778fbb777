"""Timing of the command processor (:class:`hw.cmdproc.CommandProcessor`): ring fetch, the
per-queue stage, the synchronization commands, the engine queues and the semaphores.

* **Fetch** (:class:`FetchUnit`): in IDLE it picks, round-robin, a queue with a ready fence
  first, else one with commands in its ring beyond its prefetch buffer, room in the buffer and
  no error; FETCH_CHECK; one read burst of up to ``fetch_depth`` commands (shared with the DMA
  on the read channel), each command into the buffer with its last beat; IDLE again the cycle
  after the last beat. The *loader* moves one buffered command a cycle (round-robin among the
  queues whose stage is empty and whose oldest command has room) into its engine's store or
  the stage, or reports its fetch error.
* **Stage** (:class:`Stage`): processor commands only (the loader writes engine commands into
  their engine's store); NOP, WAIT and SIGNAL retire there once their wait holds; BARRIER and
  FENCE wait until every earlier command of the queue retired (``pending == 0``); a ready
  FENCE is written by the fetch FSM. A command that signals retires in the cycle the
  semaphore unit takes its increment.
* **Engine queues** (:class:`EngineQueue`): per engine a store of ``cmd_fifo_depth`` commands
  per queue (:class:`sw.perf.fifo.CommandFifo`); the engine takes the next ready head
  round-robin; it reports its error and records its trace entry when it retires, and its
  record stays (an in-flight place) until the semaphore unit took its increment.
* **Semaphores** (:class:`Semaphores`): one increment port: one increment a cycle, by fixed
  priority among the sources offering one (engines, stages, fence), none in a cycle with a
  host write or clear; visible the cycle after it is taken. A wait is tested against the
  current values (the RTL's registered ready bits equal that test in every cycle).

Cycle rules are the RTL's (each is exercised against it by the validation): a decision in
cycle ``c`` changes registers from ``c + 1`` on.
"""

from __future__ import annotations

import copy
from collections import deque

from hw.isa import (
    COMMAND_BYTES,
    ENGINE_NAMES,
    PAGE_FAULTS,
    ErrorCode,
    Opcode,
    VmWord,
    engine_in_flight,
    sem_reached,
    unpack_fields,
)
from sw.perf import timing as T
from sw.perf.decode import OPCODE_VALUES, Decoded, decode_command
from sw.perf.events import ARBITRATE, DECIDE, UPDATE
from sw.perf.fifo import CommandFifo
from sw.perf.functional import execute_engine
from sw.perf.ledger import Item
from sw.perf.memory import CP, BurstBytes, ServedBurst, WriteGrant

__all__ = ["Semaphores", "Stage", "FetchUnit", "EngineQueue"]

_MASK32 = 0xFFFF_FFFF
_NOP, _WAIT, _SIGNAL = Opcode.NOP.value, Opcode.WAIT.value, Opcode.SIGNAL.value
_BARRIER, _FENCE = Opcode.BARRIER.value, Opcode.FENCE.value
_TLB_INV = Opcode.TLB_INVALIDATE.value
_NONE = ErrorCode.NONE
_BIG = 1 << 62


class Semaphores:
    """The semaphore unit: values (shared with the functional model's ``sems`` list), what
    last incremented each, its one increment port, and who waits for a change.

    The port takes one increment a cycle (:class:`hw.cmdproc.SemaphoreUnit`): among the
    sources offering one in cycle ``c``, the first in the RTL's fixed order (engines load,
    store, matrix, vector, then the queues' stages, then the fence: the ``key`` of
    :meth:`request`), none in a cycle with a host write or a clear; the taken increment is
    visible (value and ``SEM_LAST``) from ``c + 1``. A source may withdraw its offer (a
    queue reset): ``live(c)`` is asked in every cycle the offer is open.
    """

    def __init__(self, eq, values: list[int]) -> None:
        self.eq = eq
        self.values = values
        self.last: list[tuple[int, int] | None] = [None] * len(values)
        self._watch: dict[int, set] = {}
        #: open offers by source key: [from cycle, sem, queue, index, answer, live]
        self._offers: dict[int, list] = {}
        self._blocked: set[int] = set()     # cycles the port takes nothing
        self._arb_at: set[int] = set()

    def reached(self, sem: int, target: int) -> bool:
        return sem_reached(self.values[sem], target)

    def request(self, key: int, cycle: int, sem: int, queue: int, index: int, answer,
                live=None) -> None:
        """Source ``key`` offers ``sem += 1`` (by command ``index`` of ``queue``) from
        ``cycle``; ``answer(c, taken)`` is called once: ``taken`` in the cycle ``c`` the port
        takes it, or not taken in the first cycle ``c`` in which ``live(c)`` is false."""
        self._offers[key] = [cycle, sem, queue, index, answer, live]
        self._arbitrate_at(max(cycle, self.eq.now))

    def _arbitrate_at(self, c: int) -> None:
        if c not in self._arb_at:
            self._arb_at.add(c)
            self.eq.at(c, ARBITRATE, self._arbitrate, c)

    def _arbitrate(self, c: int) -> None:
        self._arb_at.discard(c)
        offers = self._offers
        open_ = sorted(k for k, o in offers.items() if o[0] <= c)
        taken = None
        for k in open_:
            o = offers[k]
            if o[5] is not None and not o[5](c):
                del offers[k]
                o[4](c, False)
            elif taken is None and c not in self._blocked:
                taken = k
        if taken is not None:
            _, sem, q, index, answer, _ = offers.pop(taken)
            self.eq.at(c + 1, UPDATE, self._increment, sem, q, index)
            answer(c, True)
        if offers:
            self._arbitrate_at(max(c + 1, min(o[0] for o in offers.values())))

    def _increment(self, sem: int, q: int, index: int) -> None:
        self.values[sem] = (self.values[sem] + 1) & _MASK32
        self.last[sem] = (q, index)
        self._changed(sem)

    def _block(self, cycle: int) -> None:
        """The port takes no increment in ``cycle`` (a host write or clear then)."""
        self._blocked.add(cycle)

    def clear(self, cycle: int) -> None:
        """``CONTROL`` clear: every semaphore and its record is 0 from ``cycle`` (the port
        takes no increment in the cycle before)."""
        self._block(cycle - 1)
        self.eq.at(cycle, UPDATE, self._clear)

    def _clear(self) -> None:
        for s in range(len(self.values)):
            self.values[s] = 0
            self.last[s] = None
        for s in list(self._watch):
            self._changed(s)

    def write(self, cycle: int, sem: int, value: int) -> None:
        """Host write (``sem_csr``): the value from ``cycle`` (the port takes no increment in
        the cycle before)."""
        self._block(cycle - 1)
        self.eq.at(cycle, UPDATE, self._write, sem, value)

    def _write(self, sem: int, value: int) -> None:
        self.values[sem] = value & _MASK32
        self._changed(sem)

    def _changed(self, sem: int) -> None:
        now = self.eq.now
        for cb in self._watch.pop(sem, ()):
            cb(now)

    def watch(self, sem: int, callback) -> None:
        """Call ``callback(cycle)`` once, at the next change of ``sem``."""
        self._watch.setdefault(sem, set()).add(callback)


class _Waker:
    """Runs ``decide(c)`` at most once per cycle, in the DECIDE phase."""

    def __init__(self, eq, decide) -> None:
        self._eq = eq
        self._decide = decide
        self._at: set[int] = set()

    def __call__(self, c: int) -> None:
        at = self._at
        if c not in at:
            at.add(c)
            self._eq.at(c, DECIDE, self._run, c)

    def _run(self, c: int) -> None:
        self._at.discard(c)
        self._decide(c)


class Stage:
    """The stage of queue ``q``: one processor command (engine commands go from the loader
    straight into their engine's store). A command that signals completes in the cycle the
    semaphore unit's port takes its increment."""

    def __init__(self, m, q: int) -> None:
        self.m = m
        self.q = q
        self.cmd: Decoded | None = None
        self.offering = False
        self.inv_at = None        # (command, cycle) of a TLB_INVALIDATE's pulse
        self.wake = _Waker(m.eq, self.decide)

    def _can(self, c: int) -> bool:
        """NOP, WAIT, SIGNAL, BARRIER or TLB_INVALIDATE may complete in cycle ``c`` (live,
        wait reached)."""
        m, q, cmd = self.m, self.q, self.cmd
        if cmd is None or m.stop[q] or m.last_qclear[q] == c:
            return False
        if cmd.waits and not m.sems.reached(cmd.wait_sem, cmd.wait_value):
            return False
        op = cmd.opcode
        return op in (_NOP, _WAIT, _SIGNAL) or (op in (_BARRIER, _TLB_INV)
                                                 and m.pending[q] == 0)

    def decide(self, c: int) -> None:
        m, q, cmd = self.m, self.q, self.cmd
        if cmd is None or m.stop[q] or m.last_qclear[q] == c or self.offering:
            return
        if cmd.waits and not m.sems.reached(cmd.wait_sem, cmd.wait_value):
            m.sems.watch(cmd.wait_sem, self.wake)
            return
        op = cmd.opcode
        if op in (_NOP, _WAIT, _SIGNAL) or (op in (_BARRIER, _TLB_INV) and m.pending[q] == 0):
            if cmd.signals:
                self.offering = True
                m.sems.request(len(ENGINE_NAMES) + q, c, cmd.signal_sem, q, cmd.index,
                               lambda g, taken: self._answer(cmd, g, taken),
                               lambda cc: self.cmd is cmd and self._can(cc))
            else:
                self._completes(cmd, c)
        elif op == _FENCE and m.pending[q] == 0:
            m.fetch.wake(c)

    def _answer(self, cmd: Decoded, c: int, taken: bool) -> None:
        self.offering = False
        if taken:
            self._completes(cmd, c)
        else:
            self.wake(c + 1)

    def _completes(self, cmd: Decoded, c: int) -> None:
        """``cmd`` completes in cycle ``c`` (a TLB_INVALIDATE pulses then, once)."""
        if cmd.opcode == _TLB_INV:
            if self.inv_at == (cmd, c):
                return
            self.inv_at = (cmd, c)
            self.m.tlb_invalidate(c, bool(cmd.body.all), cmd.body.asid)
        self.m.eq.at(c + 1, UPDATE, self._proc_retired, cmd)

    def _proc_retired(self, cmd: Decoded) -> None:
        if self.cmd is not cmd:
            return
        self.cmd = None
        self.m.fetch.wake_loader(self.m.eq.now)

    def all_idle(self) -> None:
        """Every engine command of the queue retired (BARRIER and FENCE may go)."""
        if self.cmd is not None and self.cmd.opcode in (_BARRIER, _FENCE, _TLB_INV):
            self.wake(self.m.eq.now)

    def clear(self) -> None:
        """The stage is empty (queue reset, fence written)."""
        if self.cmd is not None and self.cmd.opcode == _FENCE:
            self.m.fences_staged -= 1
        self.cmd = None



class _FenceBytes(Item):
    """``bytes_written`` of a fence write: 4 bytes at its W handshake."""

    __slots__ = ("grant",)

    def __init__(self, grant: WriteGrant) -> None:
        self.grant = grant

    @property
    def end(self) -> int:
        return self.grant.w_last + 1

    def count(self, lo: int, hi: int, out: dict[str, int]) -> None:
        if lo <= self.grant.w_last < hi:
            out["bytes_written"] += 4


class _Buffered:
    """A command in a queue's prefetch buffer: decoded (its index is set when it is loaded),
    whether its burst failed on the bus, whether that burst carried several commands, and
    where the loader sends it (``kind``: its engine, or None for the stage or an error
    report)."""

    __slots__ = ("cmd", "bus_err", "multi", "kind")

    def __init__(self, cmd: Decoded, bus_err: bool, multi: bool, n_sems: int) -> None:
        self.cmd, self.bus_err, self.multi = cmd, bus_err, multi
        bad = bus_err or (cmd.waits and cmd.wait_sem >= n_sems) or (
            cmd.signals and cmd.signal_sem >= n_sems)
        self.kind = None if bad else cmd.engine


class FetchUnit:
    """The fetch / fence FSM of the command processor (one burst or fence at a time), the
    per-queue prefetch buffers and the loader that moves buffered commands into the stages."""

    def __init__(self, m) -> None:
        self.m = m
        n = m.config.n_queues
        self.depth = m.config.fetch_depth
        self.active = False
        self.cur = 0
        self.start = 0
        self.fetch_last = 0
        self.fence_last = 0
        self.load_last = 0
        self.bpc = T.fetch_beats(m.config)          # beats per command
        self.wake = _Waker(m.eq, self.decide)
        self.wake_loader = _Waker(m.eq, self._load)
        self._loaded_at = -1                        # the loader's last cycle
        self.buffers: list[deque[_Buffered]] = [deque() for _ in range(n)]
        self.ring_err: list[ErrorCode | None] = [None] * n
        self.single = [0] * n                        # one-command fetches left
        self.last_flush = [-1] * n                   # the loader dropped the buffer then
        self.vm = 0                                  # Q_VM of the queue worked on, if it translates
        self.fence_faulted = [False] * n             # its staged fence took a page fault
        self.fence_skip = [False] * n                # ... and Q_RESUME.skip came
        # the burst in flight: first slot, commands, bus error; per command its event
        # token and whether it was delivered
        self.slot = 0
        self.k = 0
        self.bus_err = False
        self.tokens: list[int] = []
        self.delivered: list[bool] = []

    def fhead(self, q: int) -> int:
        """The next slot to fetch for queue ``q``: ``HEAD`` plus the buffered commands."""
        queue = self.m.model.queues[q]
        return (queue.head + len(self.buffers[q])) & (queue.ring_size - 1) & _MASK32

    def reset_queue(self, q: int) -> None:
        """Queue reset: the buffer, the ring error, the one-command fetches and a fence's page
        fault are gone."""
        self.buffers[q].clear()
        self.ring_err[q] = None
        self.single[q] = 0
        self.fence_faulted[q] = self.fence_skip[q] = False

    # -- IDLE ---------------------------------------------------------------------------------

    def decide(self, c: int) -> None:
        """IDLE in cycle ``c``: a ready fence first, else a fetch, round-robin each."""
        if self.active:
            return
        m = self.m
        n = len(m.stages)
        if m.fences_staged:
            for k in range(1, n + 1):
                q = (self.fence_last + k) % n
                if self._fence_ready(q, c):
                    self._begin(q, c)
                    self.fence_last = q
                    m.eq.at(c + T.FENCE_CHECK_AFTER_IDLE, DECIDE, self._fence_check)
                    return
        queues, stop, qclear, buffers = m.model.queues, m.stop, m.last_qclear, self.buffers
        for k in range(1, n + 1):
            q = (self.fetch_last + k) % n
            if (len(buffers[q]) < self.depth and self.ring_err[q] is None and not stop[q]
                    and qclear[q] != c and self.fhead(q) != queues[q].tail):
                self._begin(q, c)
                self.fetch_last = q
                m.eq.at(c + 1, DECIDE, self._fetch_check)
                return

    def _fence_ready(self, q: int, c: int) -> bool:
        m = self.m
        cmd = m.stages[q].cmd
        return (cmd is not None and cmd.opcode == _FENCE and not m.stop[q]
                and m.last_qclear[q] != c and m.pending[q] == 0
                and (not cmd.waits or m.sems.reached(cmd.wait_sem, cmd.wait_value)))

    def _begin(self, q: int, c: int) -> None:
        self.active, self.cur, self.start = True, q, c
        self.vm = self._translating(q)

    def _translating(self, q: int) -> int:
        """Queue ``q``'s ``Q_VM`` if its addresses are virtual (:mod:`hw.isa.vm`), else 0."""
        m = self.m
        if not m.translators:
            return 0
        vm = m.model.queues[q].vm
        return vm if unpack_fields(VmWord, vm).enable else 0

    def resumed(self, q: int, skip: bool) -> None:
        """``Q_RESUME`` of queue ``q`` took effect (this cycle, UPDATE): a ring error that is a
        page fault is cleared (the slot is fetched again); a fence that faulted runs again
        (``resume``) or retires unwritten (``skip``)."""
        if self.ring_err[q] in PAGE_FAULTS:
            self.ring_err[q] = None
        if skip:
            self.fence_skip[q] = self.fence_faulted[q]
        else:
            self.fence_faulted[q] = self.fence_skip[q] = False

    def _aborted(self, c: int, stop: bool = True) -> bool:
        q = self.cur
        return (stop and self.m.stop[q]) or self.start < self.m.last_qclear[q] <= c

    def _idle_at(self, cycle: int) -> None:
        self.m.eq.at(cycle, UPDATE, self._go_idle)

    def _go_idle(self) -> None:
        self.active = False
        self.wake(self.m.eq.now)

    # -- command fetch ---------------------------------------------------------------------------

    def _fetch_check(self) -> None:
        """FETCH_CHECK: stop on a reset or an error, check the first slot (a failure is
        recorded for the loader), then request a burst of as many commands as allowed from
        the next cycle."""
        m, q, c = self.m, self.cur, self.m.eq.now
        queue = m.model.queues[q]
        fhead = self.fhead(q)
        if self._aborted(c) or fhead == queue.tail:
            self._idle_at(c + 1)
            return
        slot = queue.ring_base + fhead * COMMAND_BYTES
        base, limit = m.window(q)
        code = _NONE
        vm = self.vm
        if queue.ring_base % COMMAND_BYTES:
            code = ErrorCode.MISALIGNED
        elif slot + COMMAND_BYTES > (1 << 32 if vm else m.config.dram_bytes):
            code = ErrorCode.BAD_DRAM_ADDR
        elif not vm and (slot < base or slot + COMMAND_BYTES > limit):
            code = ErrorCode.WINDOW
        if code is not _NONE:
            m.eq.at(c + 1, UPDATE, self._ring_error, q, code, c)
            self._idle_at(c + 1)
            return
        k = T.fetch_burst_commands(
            self.depth, len(self.buffers[q]), fhead, queue.tail, queue.ring_size, slot,
            limit, m.config.dram_bytes, self.single[q] > 0, translate=bool(vm))
        if self.single[q]:
            m.eq.at(c + 1, UPDATE, self._single_fetched, q, c)
        self.slot, self.k = slot, k
        self.tokens = [0] * k
        self.delivered = [False] * k
        if vm:          # FETCH_ADDR waits for the page's translation (hw.cmdproc.FetchUnit)
            m.translators["fetch"].present(vm, slot, slot, False, c + 1, self._fetch_go,
                                           self._fetch_fault)
        else:
            self._fetch_go(c + 1, slot)

    def _fetch_go(self, c: int, pa: int) -> None:
        """The burst's ARVALID from cycle ``c``, at physical ``pa``."""
        m = self.m
        self.slot_pa = pa
        self.bus_err = m.model.engines.fetch_fails(pa, self.k * COMMAND_BYTES)
        m.reads.request(CP, c, self.k * self.bpc, self, self.cur, self._granted)

    def _fetch_fault(self, f: int, code: ErrorCode, addr: int) -> None:
        """The burst's page faulted in cycle ``f``: FETCH_ADDR sees it in ``f + 1``, records
        the ring error (unless the queue was reset or its buffer dropped meanwhile) and is in
        IDLE from ``f + 2``."""
        self.m.eq.at(f + 2, UPDATE, self._fetch_faulted, self.cur, code, f + 1)
        self._idle_at(f + 2)

    def _fetch_faulted(self, q: int, code: ErrorCode, c: int) -> None:
        if not (self.start < self.m.last_qclear[q] <= c or self.start < self.last_flush[q] <= c):
            self.ring_err[q] = code
            self.wake_loader(self.m.eq.now)

    def _ring_error(self, q: int, code: ErrorCode, c: int) -> None:
        if self.last_flush[q] != c:          # a buffer dropped in the same cycle wins
            self.ring_err[q] = code
            self.wake_loader(self.m.eq.now)

    def _single_fetched(self, q: int, c: int) -> None:
        if self.last_flush[q] != c:
            self.single[q] -= 1

    def _granted(self, c: int, served: ServedBurst) -> None:
        self.m.ledger.item(BurstBytes(served, self.m.config.axi_data_bytes))

    # Reader of the burst: RREADY is high in FETCH_DATA, so each beat is taken when visible;
    # command j is written into the buffer with its last beat (cycle r), readable from r + 1

    def consume(self, served: ServedBurst) -> tuple[int, int]:
        bpc = self.bpc
        for j in range(self.k):
            self._schedule(j, served.v0 + (j + 1) * bpc - 1)
        last = served.v0 + served.beats - 1
        return last, last

    def r_take(self, served: ServedBurst, i: int, visible: int) -> int:
        if (i + 1) % self.bpc == 0:
            self._schedule(i // self.bpc, visible)
        return visible

    def r_plain(self, served: ServedBurst, i: int, visible: int) -> tuple[int, int]:
        return served.beats, _BIG  # every beat taken as it is shown

    def r_plain_taken(self, served: ServedBurst, i: int, j: int, last: int) -> None:
        bpc, takes = self.bpc, served.takes
        for b in range(i, j):     # what r_take does beat by beat
            if (b + 1) % bpc == 0:
                self._schedule(b // bpc, takes[b])

    def burst_done(self, served: ServedBurst) -> None:
        pass                      # the last command's delivery made the FSM idle

    def _schedule(self, j: int, r: int) -> None:
        """Command ``j``'s last beat is taken in cycle ``r`` (as far as known now)."""
        if self.delivered[j]:
            return
        self.tokens[j] += 1
        self.m.eq.at(r + 1, UPDATE, self._deliver, j, self.tokens[j], r)

    def _deliver(self, j: int, token: int, r: int) -> None:
        """Command ``j`` of the burst went into the buffer at the edge after cycle ``r``,
        unless its queue was reset or its buffer dropped since the burst began; after the
        last one the FSM is in IDLE."""
        if token != self.tokens[j]:
            return
        self.delivered[j] = True
        m, q = self.m, self.cur
        now = m.eq.now
        if not (self.start < m.last_qclear[q] <= r or self.start < self.last_flush[q] <= r):
            slot = self.slot + j * COMMAND_BYTES
            pa = self.slot_pa + j * COMMAND_BYTES
            raw = bytes(m.model.dram[pa:pa + COMMAND_BYTES])
            cmd = decode_command(raw, q, 0, slot)
            self.buffers[q].append(_Buffered(cmd, self.bus_err, self.k > 1, m.config.n_sems))
            self.wake_loader(now)
        if j == self.k - 1:
            self.active = False
            self.wake(now)

    # -- loader ----------------------------------------------------------------------------------

    def _load(self, c: int) -> None:
        """The loader in cycle ``c``: round-robin, a queue whose stage is empty and whose buffer
        holds a command (or, empty, a ring error): load the oldest command into the stage, or
        report its error, or drop the buffer after a failed burst of several commands."""
        if c == self._loaded_at:
            return                # one pick a cycle (its inputs are all registers)
        m = self.m
        n = len(m.stages)
        stages, stop, qclear, buffers = m.stages, m.stop, m.last_qclear, self.buffers
        queues = m.engine_queues
        for k in range(1, n + 1):
            q = (self.load_last + k) % n
            if stop[q] or qclear[q] == c or stages[q].cmd is not None:
                continue
            if buffers[q]:
                kind = buffers[q][0].kind
                if kind is not None and not queues[kind].fifos[q].w_rdy(c):
                    continue    # its engine's store has no room for the queue
            elif self.ring_err[q] is None:
                continue
            self._loaded_at = c
            self.load_last = q
            self.wake_loader(c + 1)
            queue = m.model.queues[q]
            slot = queue.ring_base + queue.head * COMMAND_BYTES
            index = m.fetched[q]
            if not buffers[q]:
                code = self.ring_err[q]
                addr = queue.ring_base if code is ErrorCode.MISALIGNED else slot
                m.report_error(q, c, code, 0, index, addr, source=-1)
                return
            e = buffers[q][0]
            cmd, n_sems = e.cmd, m.config.n_sems
            code, addr, op = _NONE, slot, cmd.opcode
            if e.bus_err and e.multi:
                self.last_flush[q] = c
                m.eq.at(c + 1, UPDATE, self._flushed, q)
                return
            if e.bus_err:
                code, op = ErrorCode.AXI_ERROR, 0       # never decoded: opcode 0
            elif op not in OPCODE_VALUES:
                code = ErrorCode.BAD_OPCODE
            elif cmd.waits and cmd.wait_sem >= n_sems:
                code, addr = ErrorCode.BAD_SEM, cmd.wait_sem
            elif cmd.signals and cmd.signal_sem >= n_sems:
                code, addr = ErrorCode.BAD_SEM, cmd.signal_sem
            if code is not _NONE:
                m.report_error(q, c, code, op, index, addr, source=-1)
                return
            cmd.index = index
            if e.kind is not None:
                queues[e.kind].fifos[q].write(c, cmd)
            m.eq.at(c + 1, UPDATE, self._loaded, q, cmd)
            return

    def _flushed(self, q: int) -> None:
        self.buffers[q].clear()
        self.single[q] = self.depth
        self.wake(self.m.eq.now)

    def _loaded(self, q: int, cmd: Decoded) -> None:
        """The command is in its engine's store (pending) or its stage, ``HEAD`` and
        ``Q_FETCHED`` advanced."""
        m = self.m
        queue = m.model.queues[q]
        self.buffers[q].popleft()
        now = m.eq.now
        if cmd.engine is not None:
            m.pending[q] += 1
        else:
            m.stages[q].cmd = cmd
            if cmd.opcode == _FENCE:
                m.fences_staged += 1
            m.stages[q].wake(now)
        queue.head = (queue.head + 1) & (queue.ring_size - 1) & _MASK32
        m.fetched[q] += 1
        self.wake(now)

    # -- fence -----------------------------------------------------------------------------------

    def _fence_check(self) -> None:
        m, q, c = self.m, self.cur, self.m.eq.now
        if self._aborted(c):
            self._idle_at(c + 1)
            return
        cmd = m.stages[q].cmd
        if self.fence_skip[q]:          # Q_RESUME.skip after its page fault: not written
            if cmd.signals:             # FENCE_SIGNAL from the next cycle
                self._signal(cmd, c + 1, irq=False)
            else:
                m.eq.at(c + 1, UPDATE, self._skipped, cmd)
            return
        addr = cmd.body.addr
        base, limit = m.window(q)
        code = _NONE
        vm = self.vm
        if addr % 4:
            code = ErrorCode.MISALIGNED
        elif not vm and addr + 4 > m.config.dram_bytes:
            code = ErrorCode.BAD_DRAM_ADDR
        elif not vm and (addr < base or addr + 4 > limit):
            code = ErrorCode.WINDOW
        if code is not _NONE:
            m.report_error(q, c, code, cmd.opcode, cmd.index, addr, source=-1)
            self._idle_at(c + 1)
            return
        word = (c & _MASK32) if cmd.body.timestamp else cmd.body.value
        if vm:          # AWVALID and WVALID wait for the page's translation
            m.translators["fetch"].present(
                vm, addr, addr, True, c + 1,
                lambda c2, pa: m.writes.request(CP, c2, self, (q, cmd, word, pa)),
                self._fence_fault)
        else:
            m.writes.request(CP, c + 1, self, (q, cmd, word, addr))

    def _fence_fault(self, f: int, code: ErrorCode, addr: int) -> None:
        """The fence's page faulted in cycle ``f``: FENCE_WRITE reports it in ``f + 1``
        (unless the queue was reset meanwhile) and is in IDLE from ``f + 2``."""
        m, q = self.m, self.cur
        cmd = m.stages[q].cmd
        if not self._aborted(f, stop=False):     # (a reset in f + 1 drops the report)
            m.report_error(q, f + 1, code, cmd.opcode, cmd.index, cmd.body.addr, source=-1)
            m.eq.at(f + 2, UPDATE, self._fence_faulted, q)
        self._idle_at(f + 2)

    def _fence_faulted(self, q: int) -> None:
        if self.m.last_qclear[q] != self.m.eq.now - 1:
            self.fence_faulted[q] = True

    # Writer of one beat: WVALID with AWVALID, taken once the DRAM is in W_DATA
    def w_begin(self, grant: WriteGrant) -> None:
        self.m.ledger.item(_FenceBytes(grant))

    def w_valid(self, grant: WriteGrant, i: int) -> int:
        return grant.aw + 1

    def w_taken(self, grant: WriteGrant, i: int, cycle: int) -> None:
        self.m.eq.at(cycle + 1, UPDATE, self._written, grant, cycle)

    def w_rewind(self, grant: WriteGrant, i: int, t: int) -> None:
        pass                      # _written and _FenceBytes read the final handshake

    def _written(self, grant: WriteGrant, cycle: int) -> None:
        _, cmd, word, pa = grant.tag
        if grant.ws and grant.ws[0] == cycle and not self._fence_fails(pa):
            self.m.dram_write(pa, word.to_bytes(4, "little"))

    def _fence_fails(self, pa: int) -> bool:
        """The DRAM answers the fence's write burst (to physical ``pa``) with an error (the
        model's bus fault)."""
        return self.m.model.engines.fence_fails(pa)

    def response(self, grant: WriteGrant) -> None:
        """FENCE_RESPONSE: the B handshake was in ``grant.b`` (this is the cycle after). An
        error response is reported in ``grant.b``; a fence that signals offers its increment
        from this cycle (FENCE_SIGNAL) and completes when it is taken."""
        m = self.m
        q, cmd, _, pa = grant.tag
        now = m.eq.now
        if self._aborted(grant.b, stop=False):
            pass
        elif self._fence_fails(pa):        # FENCE_RESPONSE with an error response
            m.report_error(q, grant.b, ErrorCode.AXI_ERROR, cmd.opcode, cmd.index,
                           cmd.body.addr, source=-1)
        elif cmd.signals:
            self._signal(cmd, grant.b + T.FENCE_SIGNAL_AFTER_B)
            return
        else:
            self._complete(cmd, now)
        self.active = False
        self.wake(now)

    def _signal(self, cmd: Decoded, start: int, irq: bool = True) -> None:
        """FENCE_SIGNAL from cycle ``start``: the fence offers its increment (``irq``: and
        pulses ``fence_irq`` with ``fence_done`` when it is taken)."""
        m = self.m
        m.sems.request(len(ENGINE_NAMES) + m.config.n_queues, start, cmd.signal_sem, cmd.queue,
                       cmd.index, lambda c, taken: self._signalled(cmd, c, taken, irq),
                       lambda c: not self._aborted(c, stop=False))

    def _complete(self, cmd: Decoded, cycle: int, irq: bool = True) -> None:
        """The fence's ``fence_done`` (and, with ``irq``, ``fence_irq``) pulse was in
        ``cycle - 1``: the stage empties, its page fault is forgotten."""
        m = self.m
        if irq and cmd.flags.irq:
            m.irq_event(cycle, set_bits=m.irq_fence)
        m.stages[cmd.queue].clear()
        self.fence_faulted[cmd.queue] = self.fence_skip[cmd.queue] = False
        self.wake_loader(cycle)

    def _signalled(self, cmd: Decoded, c: int, taken: bool, irq: bool = True) -> None:
        """FENCE_SIGNAL in cycle ``c``: the increment taken (the fence completes) or
        withdrawn (a reset of its queue); IDLE from ``c + 1``."""
        def finish() -> None:
            if taken:
                self._complete(cmd, c + 1, irq)
            self.active = False
            self.wake(c + 1)
        self.m.eq.at(c + 1, UPDATE, finish)

    def _skipped(self, cmd: Decoded) -> None:
        """A skipped fence's ``fence_done`` was in the last cycle (no interrupt); IDLE."""
        now = self.m.eq.now
        self._complete(cmd, now, irq=False)
        self.active = False
        self.wake(now)


class _InEngine:
    """A command taken by the engine, as the RTL queue's record keeps it: until it retired
    (``done``) and its semaphore increment, if any, was taken (released in cycle ``free``)."""

    __slots__ = ("cmd", "t", "error", "addr", "span", "done", "version", "retired", "fin",
                 "free", "replay")

    def __init__(self, cmd: Decoded, t: int, error: ErrorCode, addr: int, span: list) -> None:
        self.cmd, self.t, self.error, self.addr, self.span = cmd, t, error, addr, span
        self.done = _BIG
        self.version = 0
        self.retired = False         # its done pulse is past (busy low)
        self.fin: bool | None = None  # at its done pulse: whether it still signals
        self.free: int | None = None  # the cycle its record is released
        self.replay = False           # it page-faulted: still pending, in its replay slot


class EngineQueue:
    """The per-queue FIFOs in front of one engine, its round-robin arbitration, the sem-stall
    counter, retirement (signal, error, trace) and the engine itself.

    ``engine.start(cmd, t, error)`` is called when the engine takes a command in cycle ``t``
    (after the functional model executed it); the engine answers with :meth:`set_done`. Up to
    :func:`hw.isa.engine_in_flight` records are held at once (:attr:`in_flight`, oldest
    first): a command's from its handshake until it retired and the semaphore unit took its
    increment (the record at the head offers it from the later of its done cycle and the
    cycle it became the head); records are released in order, one a cycle.
    """

    def __init__(self, m, index: int, engine) -> None:
        self.m = m
        self.index = index
        self.engine = engine
        self.name = ENGINE_NAMES[index]
        engine.queue = self
        depth = m.config.cmd_fifo_depth
        self.wake = _Waker(m.eq, self._decide)
        self.fifos = []
        for _ in range(m.config.n_queues):
            self.fifos.append(CommandFifo(depth, self._head, m.fetch.wake_loader))
        self.limit = engine_in_flight(m.config, self.name)
        self.in_flight: deque[_InEngine] = deque()
        self.head_from = 0                     # in_flight[0] is the head record from then
        self.offered = None                    # the head record whose release is under way
        self.engine_free = 0                   # the engine's own cmd.ready from this cycle
        self.last = 0
        self.stall = None                      # open stall.<engine>.sem interval
        self.retired_name = f"retired.{self.name}"
        self._engine_retired = getattr(engine, "retired", None)
        #: per queue, the command that took a page fault (hw.cmdproc.EngineQueue's replay
        #: slot, before the FIFO) and whether Q_RESUME asked to skip it
        self.replay: dict[int, Decoded] = {}
        self.replay_skip: set[int] = set()
        n = len(self.fifos)
        #: the round-robin order after each queue: ``(last + k) % n`` for k = 1 .. n
        self._order = [[(last + k) % n for k in range(1, n + 1)] for last in range(n)]

    @property
    def free_from(self) -> int:
        """First cycle a command can be taken: the engine is ready and has room."""
        if len(self.in_flight) >= self.limit:
            free = self.in_flight[0].free
            return _BIG if free is None else max(self.engine_free, free + 1)
        return self.engine_free

    def _head(self, c: int) -> None:
        """A head is readable from ``c``; a busy engine looks when it is free again."""
        if c >= self.free_from:
            self.wake(c)

    def _decide(self, c: int) -> None:
        can = c >= self.free_from
        in_engine = any(not e.retired for e in self.in_flight)
        if not can and (in_engine or not self.in_flight):
            return
        m = self.m
        fifos = self.fifos
        stop, qclear, sems = m.stop, m.last_qclear, m.sems
        blocked = False
        for q in self._order[self.last]:
            cmd = self.replay.get(q)
            replayed = cmd is not None        # a replayed command does not wait again
            if not replayed:
                entries = fifos[q].entries
                if not entries:
                    continue
                e = entries[0]
                if e.avail is None or e.avail > c:
                    continue
                cmd = e.cmd
            if stop[q] or qclear[q] == c:
                continue
            if replayed or not cmd.waits or sem_reached(sems.values[cmd.wait_sem],
                                                        cmd.wait_value):
                if self.stall is not None:
                    self._set_stall(c, False)
                if can:
                    self._take(q, c)
                return
            blocked = True
            sems.watch(cmd.wait_sem, self.wake)
        # stall.<engine>.sem counts only while the engine holds no command (busy low); a
        # retirement wakes the queue again
        blocked = blocked and not in_engine
        if blocked or self.stall is not None:
            self._set_stall(c, blocked)

    def _set_stall(self, c: int, on: bool) -> None:
        if on and self.stall is None:
            self.stall = self.m.ledger.open(f"stall.{self.name}.sem", c)
        elif not on and self.stall is not None:
            self.stall.close(c)
            self.stall = None

    def _take(self, q: int, c: int) -> None:
        m = self.m
        if q in self.replay:
            cmd = self.replay.pop(q)
            if q in self.replay_skip:           # Q_RESUME.skip: a DMA of zero rows
                self.replay_skip.discard(q)
                cmd = copy.copy(cmd)
                cmd.body = cmd.body._replace(n_rows=0)
        else:
            cmd = self.fifos[q].take(c).cmd
        self.last = q
        self.engine_free = _BIG
        error, addr = execute_engine(m.model, cmd)
        if error is not _NONE:
            m.failing += 1
        span = m.ledger.busy_start(self.name, c + 1)
        if not self.in_flight:
            self.head_from = c + 1
        self.in_flight.append(_InEngine(cmd, c, error, addr, span))
        self.engine.start(cmd, c, error)

    def set_done(self, done: int, free_from: int | None = None) -> None:
        """The ``done`` pulse of the command taken last is in cycle ``done`` (replaces an
        earlier answer); the engine takes the next command from ``free_from`` (default
        ``done + 1``: an engine that takes a command only when idle)."""
        e = self.in_flight[-1]
        e.version += 1
        e.done = done
        self.engine_free = done + 1 if free_from is None else free_from
        eq = self.m.eq
        eq.at(done, DECIDE, self._finish, e, e.version)
        eq.at(done + 1, UPDATE, self._retire, e, e.version, done)
        if free_from is not None and self.free_from < _BIG:
            self.wake(max(self.free_from, eq.now))

    def _finish(self, e: _InEngine, version: int) -> None:
        """The done pulse of ``e`` (DECIDE phase of its cycle): whether it still signals (no
        error, its queue not reset since it was taken); then its release may begin."""
        if version != e.version:
            return
        m, cmd = self.m, e.cmd
        killed = e.t < m.last_qclear[cmd.queue] <= e.done
        e.fin = bool(cmd.signals and e.error is _NONE and not killed)
        self._release(e.done)

    def _release(self, c: int) -> None:
        """From cycle ``c`` (DECIDE phase): release the head record, at once if it retired
        without an increment to make, else once the semaphore unit takes its increment (or
        its queue is reset)."""
        if not self.in_flight:
            return
        h = self.in_flight[0]
        if h.fin is None or self.offered is h or max(h.done, self.head_from) > c:
            return
        self.offered = h
        if not h.fin:
            self._free(h, c)
            return
        cmd = h.cmd
        q = cmd.queue
        self.m.sems.request(self.index, c, cmd.signal_sem, q, cmd.index,
                            lambda g, taken: self._free(h, g),
                            lambda cc: not (h.t < self.m.last_qclear[q] <= cc))

    def _free(self, h: _InEngine, c: int) -> None:
        """``h``'s record is released in cycle ``c`` (held until then)."""
        h.free = c
        self.m.eq.at(c + 1, UPDATE, self._freed, h)

    def _freed(self, h: _InEngine) -> None:
        m = self.m
        now = m.eq.now
        assert self.in_flight[0] is h
        self.in_flight.popleft()
        self.head_from = now
        self.offered = None
        q = h.cmd.queue
        if not h.replay:
            m.pending[q] -= 1
            if m.pending[q] == 0:
                m.stages[q].all_idle()
        if self.in_flight:
            h2 = self.in_flight[0]
            if h2.fin is not None:
                m.eq.at(max(now, h2.done), DECIDE, self._release, max(now, h2.done))
        free = self.free_from
        self.wake(max(now, free) if free < _BIG else now)

    def _retire(self, e: _InEngine, version: int, done: int) -> None:
        if version != e.version or e.retired:
            return
        m = self.m
        e.retired = True
        cmd, t, error, addr = e.cmd, e.t, e.error, e.addr
        if error is not _NONE:
            m.failing -= 1
        m.ledger.busy_end(e.span, done + 1)
        m.ledger.counts[self.retired_name] += 1
        m.trace_push(self.index, cmd.queue, cmd.index, t, done)
        q = cmd.queue
        if not (t < m.last_qclear[q] <= done) and error is not _NONE:
            m.report_error(q, done, error, cmd.opcode, cmd.index, addr, source=self.index)
            if error in PAGE_FAULTS:    # the command stays pending, in its replay slot
                self.replay[q] = cmd
                e.replay = True
        if self._engine_retired is not None:
            self._engine_retired()
        self.wake(done + 1)

    def flush(self, q: int) -> int:
        """Queue reset: drop queue ``q``'s commands (its replay slot too); returns how many."""
        self.replay_skip.discard(q)
        return len(self.fifos[q].flush()) + (self.replay.pop(q, None) is not None)
