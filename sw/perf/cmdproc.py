"""Timing of the command processor (:class:`hw.cmdproc.CommandProcessor`): the per-queue
stage, the synchronization commands and the engine queues; the ring fetch is in
:mod:`sw.perf.fetch`, the semaphores in :mod:`sw.perf.semaphores`.

* **Stage** (:class:`Stage`): processor commands only (the loader writes engine commands into
  their engine's store); NOP, WAIT and SIGNAL retire there once their wait holds; BARRIER and
  FENCE wait until every earlier command of the queue retired (``pending == 0``); a ready
  FENCE is written by the fetch FSM. A command that signals retires in the cycle the
  semaphore unit takes its increment.
* **Engine queues** (:class:`EngineQueue`): per engine a store of ``cmd_fifo_depth`` commands
  per queue (:class:`sw.perf.fifo.CommandFifo`); the engine takes the next ready head
  round-robin; it reports its error and records its trace entry when it retires, and its
  record stays (an in-flight place) until the semaphore unit took its increment.

Cycle rules are the RTL's (each is exercised against it by the validation): a decision in
cycle ``c`` changes registers from ``c + 1`` on.
"""

from __future__ import annotations

import copy
from collections import deque

from hw.isa import (
    ENGINE_NAMES,
    PAGE_FAULTS,
    ErrorCode,
    Opcode,
    engine_in_flight,
    sem_reached,
)
from sw.perf.decode import Decoded
from sw.perf.events import DECIDE, UPDATE, Waker
from sw.perf.fifo import CommandFifo
from sw.perf.functional import execute_engine

__all__ = ["Stage", "EngineQueue"]

_NOP, _WAIT, _SIGNAL = Opcode.NOP.value, Opcode.WAIT.value, Opcode.SIGNAL.value
_BARRIER, _FENCE = Opcode.BARRIER.value, Opcode.FENCE.value
_TLB_INV = Opcode.TLB_INVALIDATE.value
_NONE = ErrorCode.NONE
_BIG = 1 << 62


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
        self.wake = Waker(m.eq, self.decide)

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
        self.wake = Waker(m.eq, self._decide)
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
