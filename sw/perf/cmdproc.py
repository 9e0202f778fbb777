"""Timing of the command processor (:class:`hw.cmdproc.CommandProcessor`): ring fetch, the
per-queue stage, the synchronization commands, the engine queues and the semaphores.

* **Fetch** (:class:`FetchUnit`): in IDLE it picks, round-robin, a queue with a ready fence
  first, else one with a command in its ring, an empty stage and no error; FETCH_CHECK; one
  read burst of a command (shared with the DMA on the read channel); DECODE; the command is in
  the queue's stage the cycle after.
* **Stage** (:class:`Stage`): an engine command moves on into its FIFO when there is room; NOP,
  WAIT and SIGNAL retire there once their wait holds; BARRIER and FENCE wait until every
  earlier command of the queue retired (``pending == 0``); a ready FENCE is written by the
  fetch FSM.
* **Engine queues** (:class:`EngineQueue`): one FIFO per queue in front of each engine; the
  engine takes the next ready head round-robin; it signals, reports its error and records its
  trace entry when it retires.
* **Semaphores** (:class:`Semaphores`): increments become visible the cycle after the retiring
  command's last cycle; several in one cycle add up.

Cycle rules are the RTL's (each is exercised against it by the validation): a decision in
cycle ``c`` changes registers from ``c + 1`` on.
"""

from __future__ import annotations

from collections import deque

from hw.isa import COMMAND_BYTES, ENGINE_NAMES, ErrorCode, Opcode, engine_in_flight, sem_reached
from sw.perf import timing as T
from sw.perf.decode import OPCODE_VALUES, Decoded, decode_command
from sw.perf.events import DECIDE, UPDATE
from sw.perf.fifo import CommandFifo
from sw.perf.functional import execute_engine
from sw.perf.ledger import Item
from sw.perf.memory import CP, ServedBurst, WriteGrant

__all__ = ["Semaphores", "Stage", "FetchUnit", "EngineQueue"]

_MASK32 = 0xFFFF_FFFF
_NOP, _WAIT, _SIGNAL = Opcode.NOP.value, Opcode.WAIT.value, Opcode.SIGNAL.value
_BARRIER, _FENCE = Opcode.BARRIER.value, Opcode.FENCE.value
_NONE = ErrorCode.NONE
_BIG = 1 << 62


class Semaphores:
    """The semaphores: values (shared with the functional model's ``sems`` list), what last
    incremented each, and who waits for a change.

    An increment is recorded with the cycle it becomes visible and an order key (the RTL's
    order of increment sources: engines load, store, matrix, vector, then the queues' stages,
    then the fence), which decides ``SEM_LAST`` when several hit one semaphore in one cycle.
    """

    def __init__(self, eq, values: list[int]) -> None:
        self.eq = eq
        self.values = values
        self.last: list[tuple[int, int] | None] = [None] * len(values)
        self._incs: dict[int, list] = {}
        self._clears: set[int] = set()
        self._writes: dict[int, dict[int, int]] = {}
        self._watch: dict[int, set] = {}

    def reached(self, sem: int, target: int) -> bool:
        return sem_reached(self.values[sem], target)

    def inc(self, cycle: int, sem: int, key: int, queue: int, index: int) -> None:
        """``sem`` += 1, visible from ``cycle``."""
        self._at(cycle, self._incs).append((key, sem, queue, index))

    def clear(self, cycle: int) -> None:
        """``CONTROL`` clear: every semaphore and its record is 0 from ``cycle`` (increments of
        that cycle are lost)."""
        self._clears.add(cycle)
        self._at(cycle, self._incs)

    def write(self, cycle: int, sem: int, value: int) -> None:
        """Host write (``sem_csr``): the value from ``cycle``; an increment then is lost."""
        self._writes.setdefault(cycle, {})[sem] = value
        self._at(cycle, self._incs)

    def _at(self, cycle: int, table: dict) -> list:
        lst = table.get(cycle)
        if lst is None:
            lst = table[cycle] = []
            self.eq.at(cycle, UPDATE, self._apply, cycle)
        return lst

    def _apply(self, cycle: int) -> None:
        incs = self._incs.pop(cycle, [])
        changed = set()
        if cycle in self._clears:
            self._clears.discard(cycle)
            for s in range(len(self.values)):
                self.values[s] = 0
                self.last[s] = None
            changed.update(self._watch)
            incs = []
        for s, v in self._writes.pop(cycle, {}).items():
            self.values[s] = v & _MASK32
            changed.add(s)
            incs = [i for i in incs if i[1] != s]
        for _, s, q, index in (sorted(incs, key=_first) if len(incs) > 1 else incs):
            self.values[s] = (self.values[s] + 1) & _MASK32
            self.last[s] = (q, index)
            changed.add(s)
        for s in changed:
            for cb in self._watch.pop(s, ()):
                cb(cycle)

    def watch(self, sem: int, callback) -> None:
        """Call ``callback(cycle)`` once, at the next change of ``sem``."""
        self._watch.setdefault(sem, set()).add(callback)


def _first(item: tuple):
    return item[0]


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
    """The one-command stage of queue ``q`` between fetch and the engine FIFOs."""

    def __init__(self, m, q: int) -> None:
        self.m = m
        self.q = q
        self.cmd: Decoded | None = None
        self.sent = False         # the staged engine command went into its FIFO
        self.waiting = None       # the FIFO it waits for room in
        self.wake = _Waker(m.eq, self.decide)

    def decide(self, c: int) -> None:
        m, q, cmd = self.m, self.q, self.cmd
        if cmd is None or self.sent or m.stop[q] or m.last_qclear[q] == c:
            return
        if cmd.engine is not None:
            fifo = m.engine_queues[cmd.engine].fifos[q]
            if fifo.w_rdy(c):
                self.waiting = None
                self.sent = True
                fifo.write(c, cmd)
                # the stage is empty and the command counts as pending from c + 1; nothing
                # in that cycle's DECIDE phase but the fetch FSM looks at either
                m.eq.at(c + 1, DECIDE, self._dispatched, cmd)
            else:
                self.waiting = fifo
                nxt = fifo.next_space(c)
                if nxt is not None:
                    self.wake(nxt)
            return
        if cmd.waits and not m.sems.reached(cmd.wait_sem, cmd.wait_value):
            m.sems.watch(cmd.wait_sem, self.wake)
            return
        op = cmd.opcode
        if op in (_NOP, _WAIT, _SIGNAL) or (op == _BARRIER and m.pending[q] == 0):
            m.eq.at(c + 1, UPDATE, self._proc_retired, cmd)
        elif op == _FENCE and m.pending[q] == 0:
            m.fetch.wake(c)

    def _dispatched(self, cmd: Decoded) -> None:
        if self.cmd is cmd:
            self.cmd = None
            self.sent = False
            self.m.pending[self.q] += 1
            self.m.fetch.decide(self.m.eq.now)

    def space(self, fifo, cycle: int) -> None:
        """``fifo`` takes a write again from ``cycle``: the waiting command goes in then --
        decided now if nothing pending can stop the queue or reset it by then."""
        if self.waiting is not fifo:
            return
        m = self.m
        if cycle > m.eq.now and m.stage_inputs_settled(self.q, cycle) and fifo.w_rdy(cycle):
            self.waiting = None
            self.sent = True
            fifo.write(cycle, self.cmd)
            m.eq.at(cycle + 1, DECIDE, self._dispatched, self.cmd)
        else:
            self.wake(cycle)

    def _proc_retired(self, cmd: Decoded) -> None:
        if self.cmd is not cmd:
            return
        self.cmd = None
        now = self.m.eq.now
        if cmd.signals:
            self.m.sems.inc(now, cmd.signal_sem, len(ENGINE_NAMES) + self.q, self.q, cmd.index)
        self.m.fetch.wake(now)

    def all_idle(self) -> None:
        """Every engine command of the queue retired (BARRIER and FENCE may go)."""
        if self.cmd is not None and self.cmd.opcode in (_BARRIER, _FENCE):
            self.wake(self.m.eq.now)

    def clear(self) -> None:
        """The stage is empty (queue reset, fence written)."""
        if self.cmd is not None and self.cmd.opcode == _FENCE:
            self.m.fences_staged -= 1
        self.cmd = None
        self.sent = False
        self.waiting = None


class _BurstBytes(Item):
    """``bytes_read`` of a command fetch burst: one beat per cycle from its first beat."""

    __slots__ = ("served", "beat")

    def __init__(self, served: ServedBurst, beat: int) -> None:
        self.served, self.beat = served, beat

    @property
    def end(self) -> int:
        return self.served.c_last + 1

    def count(self, lo: int, hi: int, out: dict[str, int]) -> None:
        n = self.served.taken_in(lo, hi)
        if n > 0:
            out["bytes_read"] += n * self.beat


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


class FetchUnit:
    """The fetch / fence FSM of the command processor (one command or fence at a time)."""

    def __init__(self, m) -> None:
        self.m = m
        self.active = False
        self.cur = 0
        self.start = 0
        self.fetch_last = 0
        self.fence_last = 0
        self.beats = T.fetch_beats(m.config)
        self.wake = _Waker(m.eq, self.decide)
        #: ``(cycle, queue)`` of a decoded command that enters its stage in ``cycle`` (its
        #: HEAD and Q_FETCHED read as advanced from then, see :meth:`_staged`)
        self.staging: tuple[int, int] | None = None

    # -- IDLE ---------------------------------------------------------------------------------

    def decide(self, c: int) -> None:
        """IDLE in cycle ``c``: a ready fence first, else a fetch, round-robin each."""
        if self.active:
            return
        m = self.m
        n = len(m.stages)
        stages = m.stages
        if m.fences_staged:
            for k in range(1, n + 1):
                q = (self.fence_last + k) % n
                if self._fence_ready(q, c):
                    self._begin(q, c)
                    self.fence_last = q
                    m.eq.at(c + T.FENCE_CHECK_AFTER_IDLE, DECIDE, self._fence_check)
                    return
        queues, stop, qclear = m.model.queues, m.stop, m.last_qclear
        for k in range(1, n + 1):
            q = (self.fetch_last + k) % n
            queue = queues[q]
            if (stages[q].cmd is None and queue.head != queue.tail and not stop[q]
                    and qclear[q] != c):
                self._begin(q, c)
                self.fetch_last = q
                if m.fetch_inputs_settled(q, c + 1):
                    self._check_fetch(c + 1)        # FETCH_CHECK's inputs are known now
                else:
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
        self._check_fetch(self.m.eq.now)

    def _check_fetch(self, c: int) -> None:
        """FETCH_CHECK in cycle ``c``: stop on a reset or an error, check the ring slot, then
        request its burst from ``c + 1``."""
        m, q = self.m, self.cur
        if self._aborted(c):
            self._idle_at(c + 1)
            return
        queue = m.model.queues[q]
        slot = queue.ring_base + queue.head * COMMAND_BYTES
        base, limit = m.window(q)
        code, addr = _NONE, 0
        if queue.ring_base % COMMAND_BYTES:
            code, addr = ErrorCode.MISALIGNED, queue.ring_base
        elif slot + COMMAND_BYTES > m.config.dram_bytes:
            code, addr = ErrorCode.BAD_DRAM_ADDR, slot
        elif slot < base or slot + COMMAND_BYTES > limit:
            code, addr = ErrorCode.WINDOW, slot
        if code is not _NONE:
            m.report_error(q, c, code, 0, m.fetched[q], addr, source=-1)
            self._idle_at(c + 1)
            return
        self.slot = slot
        m.reads.request(CP, c + 1, self.beats, self, q, self._granted)

    def _granted(self, c: int, served: ServedBurst) -> None:
        self.m.ledger.item(_BurstBytes(served, self.m.config.axi_data_bytes))

    def consume(self, served: ServedBurst) -> tuple[int, int]:
        last = served.v0 + served.beats - 1
        return last, last

    def r_take(self, served: ServedBurst, i: int, visible: int) -> int:
        return visible            # RREADY is high in FETCH_DATA

    def r_plain(self, served: ServedBurst, i: int, visible: int) -> tuple[int, int]:
        return served.beats, _BIG  # every beat taken as it is shown

    def r_plain_taken(self, served: ServedBurst, i: int, j: int, last: int) -> None:
        pass

    def burst_done(self, served: ServedBurst) -> None:
        self._decode()            # DECODE is the cycle after the last beat (DECIDE phase)

    def _decode(self) -> None:
        m, q, d = self.m, self.cur, self.m.eq.now
        if self._aborted(d):
            self._idle_at(d + 1)
            return
        raw = bytes(m.model.dram[self.slot:self.slot + COMMAND_BYTES])
        cmd = decode_command(raw, q, m.fetched[q], self.slot)
        n_sems = m.config.n_sems
        code, addr = _NONE, 0
        if m.model.engines.fetch_fails(self.slot, COMMAND_BYTES):
            # an error response on the fetch burst: reported before decode, opcode 0
            m.report_error(q, d, ErrorCode.AXI_ERROR, 0, cmd.index, self.slot, source=-1)
            self._idle_at(d + 1)
            return
        if cmd.opcode not in OPCODE_VALUES:
            code, addr = ErrorCode.BAD_OPCODE, self.slot
        elif cmd.waits and cmd.wait_sem >= n_sems:
            code, addr = ErrorCode.BAD_SEM, cmd.wait_sem
        elif cmd.signals and cmd.signal_sem >= n_sems:
            code, addr = ErrorCode.BAD_SEM, cmd.signal_sem
        if code is not _NONE:
            m.report_error(q, d, code, cmd.opcode, cmd.index, addr, source=-1)
            self._idle_at(d + 1)
            return
        self.staging = (d + 1, q)
        m.eq.at(d + 1, DECIDE, self._staged, q, cmd)

    def _staged(self, q: int, cmd: Decoded) -> None:
        """The command is in its stage, HEAD and Q_FETCHED advanced, the FSM in IDLE, from
        this cycle. Run in the DECIDE phase (then the stage and IDLE decide at once): nothing
        decided in this phase reads the stage of a queue the FSM is fetching for, and a CSR
        read in this cycle sees HEAD and Q_FETCHED through :attr:`staging`."""
        m = self.m
        queue = m.model.queues[q]
        m.stages[q].cmd = cmd
        if cmd.opcode == _FENCE:
            m.fences_staged += 1
        queue.head = (queue.head + 1) & (queue.ring_size - 1) & _MASK32
        m.fetched[q] += 1
        self.active = False
        self.staging = None
        now = m.eq.now
        m.stages[q].decide(now)
        self.decide(now)

    # -- fence -----------------------------------------------------------------------------------

    def _fence_check(self) -> None:
        m, q, c = self.m, self.cur, self.m.eq.now
        if self._aborted(c):
            self._idle_at(c + 1)
            return
        cmd = m.stages[q].cmd
        addr = cmd.body.addr
        base, limit = m.window(q)
        code = _NONE
        if addr % 4:
            code = ErrorCode.MISALIGNED
        elif addr + 4 > m.config.dram_bytes:
            code = ErrorCode.BAD_DRAM_ADDR
        elif addr < base or addr + 4 > limit:
            code = ErrorCode.WINDOW
        if code is not _NONE:
            m.report_error(q, c, code, cmd.opcode, cmd.index, addr, source=-1)
            self._idle_at(c + 1)
            return
        word = (c & _MASK32) if cmd.body.timestamp else cmd.body.value
        m.writes.request(CP, c + 1, self, (q, cmd, word))

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
        _, cmd, word = grant.tag
        if grant.ws and grant.ws[0] == cycle and not self._fence_fails(cmd):
            self.m.dram_write(cmd.body.addr, word.to_bytes(4, "little"))

    def _fence_fails(self, cmd: Decoded) -> bool:
        """The DRAM answers the fence's write burst with an error (the model's bus fault)."""
        return self.m.model.engines.fence_fails(cmd.body.addr)

    def response(self, grant: WriteGrant) -> None:
        m = self.m
        q, cmd, _ = grant.tag
        now = m.eq.now
        if self._aborted(grant.b, stop=False):
            pass
        elif self._fence_fails(cmd):        # FENCE_RESPONSE with an error response
            m.report_error(q, now, ErrorCode.AXI_ERROR, cmd.opcode, cmd.index, cmd.body.addr,
                           source=-1)
        else:
            if cmd.flags.irq:
                m.irq_event(now, set_bits=m.irq_fence)
            if cmd.signals:
                m.sems.inc(now, cmd.signal_sem, len(ENGINE_NAMES) + m.config.n_queues, q,
                           cmd.index)
            m.stages[q].clear()
        self.active = False
        self.wake(now)


class _InEngine:
    """A command in the engine (taken, not retired), as the RTL queue's record keeps it."""

    __slots__ = ("cmd", "t", "error", "addr", "span", "done", "version")

    def __init__(self, cmd: Decoded, t: int, error: ErrorCode, addr: int, span: list) -> None:
        self.cmd, self.t, self.error, self.addr, self.span = cmd, t, error, addr, span
        self.done = _BIG
        self.version = 0


class EngineQueue:
    """The per-queue FIFOs in front of one engine, its round-robin arbitration, the sem-stall
    counter, retirement (signal, error, trace) and the engine itself.

    ``engine.start(cmd, t, error)`` is called when the engine takes a command in cycle ``t``
    (after the functional model executed it); the engine answers with :meth:`set_done`. Up to
    :func:`hw.isa.engine_in_flight` commands are in the engine at once (:attr:`in_flight`,
    oldest first); they retire in order.
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
        for q in range(m.config.n_queues):
            stage = m.stages[q]
            self.fifos.append(CommandFifo(depth, self._head,
                                          lambda c, st=stage, i=q: st.space(self.fifos[i], c)))
        self.limit = engine_in_flight(m.config, self.name)
        self.in_flight: deque[_InEngine] = deque()
        self.engine_free = 0                   # the engine's own cmd.ready from this cycle
        self.last = 0
        self.stall = None                      # open stall.<engine>.sem interval
        self.retired_name = f"retired.{self.name}"
        self._engine_retired = getattr(engine, "retired", None)
        n = len(self.fifos)
        #: the round-robin order after each queue: ``(last + k) % n`` for k = 1 .. n
        self._order = [[(last + k) % n for k in range(1, n + 1)] for last in range(n)]

    @property
    def free_from(self) -> int:
        """First cycle a command can be taken: the engine is ready and has room."""
        if len(self.in_flight) >= self.limit:
            return max(self.engine_free, self.in_flight[0].done + 1)
        return self.engine_free

    def _head(self, c: int) -> None:
        """A head is readable from ``c``; a busy engine looks when it is free again."""
        if c >= self.free_from:
            self.wake(c)

    def _decide(self, c: int) -> None:
        if c < self.engine_free or (len(self.in_flight) >= self.limit
                                    and c <= self.in_flight[0].done):     # c < free_from
            return
        m = self.m
        fifos = self.fifos
        stop, qclear, sems = m.stop, m.last_qclear, m.sems
        blocked = False
        for q in self._order[self.last]:
            entries = fifos[q].entries
            if not entries:
                continue
            e = entries[0]
            if e.avail is None or e.avail > c or stop[q] or qclear[q] == c:
                continue
            cmd = e.cmd
            if not cmd.waits or sem_reached(sems.values[cmd.wait_sem], cmd.wait_value):
                if self.stall is not None:
                    self._set_stall(c, False)
                self._take(q, c)
                return
            blocked = True
            sems.watch(cmd.wait_sem, self.wake)
        # stall.<engine>.sem counts only while the engine holds no command (busy low); a
        # retirement wakes the queue again
        blocked = blocked and not self.in_flight
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
        cmd = self.fifos[q].take(c).cmd
        self.last = q
        self.engine_free = _BIG
        error, addr = execute_engine(m.model, cmd)
        if error is not _NONE:
            m.failing += 1
        span = m.ledger.busy_start(self.name, c + 1)
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
        self.m.eq.at(done + 1, UPDATE, self._retire, e, e.version, done)
        if free_from is not None:
            self.wake(max(self.free_from, self.m.eq.now))

    def _retire(self, e: _InEngine, version: int, done: int) -> None:
        if version != e.version or not self.in_flight or self.in_flight[0] is not e:
            return
        m = self.m
        self.in_flight.popleft()
        cmd, t, error, addr = e.cmd, e.t, e.error, e.addr
        if error is not _NONE:
            m.failing -= 1
        m.ledger.busy_end(e.span, done + 1)
        m.ledger.counts[self.retired_name] += 1
        m.trace_push(self.index, cmd.queue, cmd.index, t, done)
        q = cmd.queue
        if not (t < m.last_qclear[q] <= done):          # not killed by a queue reset
            if error is not _NONE:
                m.report_error(q, done, error, cmd.opcode, cmd.index, addr, source=self.index)
            elif cmd.signals:
                m.sems.inc(done + 1, cmd.signal_sem, self.index, q, cmd.index)
        m.pending[q] -= 1
        if m.pending[q] == 0:
            m.stages[q].all_idle()
        if self._engine_retired is not None:
            self._engine_retired()
        self.wake(done + 1)

    def flush(self, q: int) -> int:
        """Queue reset: drop queue ``q``'s commands; returns how many."""
        return len(self.fifos[q].flush())
