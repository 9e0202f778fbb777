"""Timing of the command processor's ring fetch (:class:`hw.cmdproc.FetchUnit`).

* **Fetch** (:class:`FetchUnit`): in IDLE it picks, round-robin, a queue with a ready fence
  first, else one with commands in its ring beyond its prefetch buffer, room in the buffer and
  no error; FETCH_CHECK; one read burst of up to ``fetch_depth`` commands (shared with the DMA
  on the read channel), each command into the buffer with its last beat; IDLE again the cycle
  after the last beat. The *loader* moves one buffered command a cycle (round-robin among the
  queues whose stage is empty and whose oldest command has room) into its engine's store or
  the stage, or reports its fetch error.

Cycle rules are the RTL's (each is exercised against it by the validation): a decision in
cycle ``c`` changes registers from ``c + 1`` on.
"""

from __future__ import annotations

from collections import deque

from hw.isa import (
    COMMAND_BYTES,
    ENGINE_NAMES,
    PAGE_FAULTS,
    ErrorCode,
    Opcode,
    VmWord,
    ring_is_bad,
    unpack_fields,
)
from sw.perf import timing as T
from sw.perf.decode import OPCODE_VALUES, Decoded, decode_command
from sw.perf.events import DECIDE, UPDATE, Waker
from sw.perf.ledger import Item
from sw.perf.memory import CP, BurstBytes, ServedBurst, WriteGrant

__all__ = ["FetchUnit"]

_MASK32 = 0xFFFF_FFFF
_FENCE = Opcode.FENCE.value
_NONE = ErrorCode.NONE
#: ring errors reported at RING_BASE (the others at the slot)
_WHOLE_RING = (ErrorCode.MISALIGNED, ErrorCode.BAD_SIZE)
_BIG = 1 << 62


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
        self.wake = Waker(m.eq, self.decide)
        self.wake_loader = Waker(m.eq, self._load)
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

    def bad(self, q: int) -> bool:
        """Queue ``q``'s ring is in a state no ring can be (:func:`hw.isa.ring_is_bad`)."""
        queue = self.m.model.queues[q]
        return ring_is_bad(queue.ring_size, queue.head, queue.tail)

    def more(self, q: int, bad: bool | None = None) -> bool:
        """Queue ``q`` has a command to fetch beyond its buffer (``ring_more``): for a ring in
        a state no ring can be (``bad``, :meth:`bad` if None), ``HEAD != TAIL`` (its fetch
        then fails); else the next slot to fetch is not ``TAIL``."""
        queue = self.m.model.queues[q]
        if self.bad(q) if bad is None else bad:
            return queue.head != queue.tail
        return self.fhead(q) != queue.tail

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
        stop, qclear, buffers = m.stop, m.last_qclear, self.buffers
        for k in range(1, n + 1):
            q = (self.fetch_last + k) % n
            if (len(buffers[q]) < self.depth and self.ring_err[q] is None and not stop[q]
                    and qclear[q] != c and self.more(q)):
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
        fhead, bad = self.fhead(q), self.bad(q)
        if self._aborted(c) or not self.more(q, bad):
            self._idle_at(c + 1)
            return
        slot = queue.ring_base + fhead * COMMAND_BYTES
        base, limit = m.window(q)
        code = _NONE
        vm = self.vm
        if bad:
            code = ErrorCode.BAD_SIZE
        elif queue.ring_base % COMMAND_BYTES:
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
                addr = queue.ring_base if code in _WHOLE_RING else slot
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
            # HEAD's next value uses this cycle's RING_SIZE (head_next in hw.cmdproc.FetchUnit)
            m.eq.at(c + 1, UPDATE, self._loaded, q, cmd, queue.ring_size)
            return

    def _flushed(self, q: int) -> None:
        self.buffers[q].clear()
        self.single[q] = self.depth
        self.wake(self.m.eq.now)

    def _loaded(self, q: int, cmd: Decoded, ring_size: int) -> None:
        """The command is in its engine's store (pending) or its stage, ``HEAD`` (within the
        ``RING_SIZE`` of the cycle the loader took it) and ``Q_FETCHED`` advanced."""
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
        queue.head = (queue.head + 1) & (ring_size - 1) & _MASK32
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
