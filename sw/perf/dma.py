"""Timing of the DMA engine's two channels (:class:`hw.dma.DMA`), burst by burst.

Load: after the checks, read bursts are requested from ``t + 3``, one AR per cycle while fewer
than ``dma_outstanding`` are in flight; the DRAM answers in order (:class:`ReadChannel`); the
channel realigns the R beats into words and cuts them into local rows, one step per cycle (a
``G``-byte chunk, or the prime of a row at an address that is not a multiple of ``G``; the
steps of every burst are :class:`hw.isa.timing.Burst`'s), and a chunk that completes a local
row waits while a higher-priority writer has the memory's write port
(:func:`sw.perf.ports.walk`, a closed form per burst). ``done`` is 2 cycles after the last
step: the last beat, or the flush word after it. After the first beat with an error response
(a bus fault) the channel only drains: every later beat of the transfer is taken the cycle it
is shown, and no step or flush word follows (``hw/dma/load.py``, ``error``).

Store: one step per cycle (a local chunk read, or the flush slot of a row whose last beat
holds only bytes of the word before) while the 4-entry W buffer holds at most 2 beats (reads
are never denied); a beat is in the buffer 2 cycles after its last step; W beats go while the
write channels are granted (:class:`WriteChannel`); ``done`` is 2 cycles after the last B
response. The store is timed beat by beat (stores are short next to loads).

Each command is a ledger :class:`~sw.perf.ledger.Item` that counts its stall cycles by the
definitions of ``DMA.stall`` and its bytes at the handshakes.
"""

from __future__ import annotations

import contextlib
from bisect import bisect_right

from hw.config import NPUConfig
from hw.isa import ErrorCode, LocalMem, VmWord, unpack_fields
from sw.perf import timing as T
from sw.perf.ledger import Item, Ledger, measure, merge, subtract, union
from sw.perf.memory import DMA, ReadChannel, ServedBurst, WriteChannel, WriteGrant
from sw.perf.ports import BusyList, first_free, merged, walk
from sw.perf.timing import Burst

__all__ = ["LoadChannel", "StoreChannel"]

_BIG = 1 << 62


class _Geometry:
    """Which load steps of a burst complete a local row (``G = min(L, beat)``-byte chunks;
    the steps of a burst are in :class:`hw.isa.timing.Burst`, the row layout in
    :class:`hw.isa.timing.DmaRow`)."""

    def __init__(self, config: NPUConfig, body, mem: LocalMem) -> None:
        beat = config.axi_data_bytes
        local = config.acc_row_bytes if mem == LocalMem.ACC else config.spad_row_bytes
        self.g = min(local, beat)
        self.beat = beat
        self.body = body
        #: chunks per local row: every ``period``-th completes one (L >= beat: one chunk per
        #: beat; L < beat: every chunk)
        self.period = local // self.g

    def pattern(self, burst: Burst) -> dict:
        """``walk`` arguments for the burst's steps: ``phase`` (chunks of its local row before
        its first chunk, modulo ``period``), ``skip`` (its prime) and ``force`` (the step of
        the row's last chunk when it completes a partial local row)."""
        row = burst.layout
        skip = int(burst.prime)
        force = None
        if burst.row_last and row.chunks % self.period:
            force = row.chunks - 1 - burst.first_chunk + skip
        return {"phase": burst.first_chunk % self.period, "skip": skip, "force": force}

    def pattern_from(self, pattern: dict, before: int) -> dict:
        """``pattern`` (of a burst's steps) for the steps from step ``before`` on (a beat's,
        timed beat by beat, or the flush word's)."""
        phase, skip, force = pattern["phase"], pattern["skip"], pattern["force"]
        if before >= skip:
            phase, skip = (phase + before - skip) % self.period, 0
        else:
            skip -= before
        force = force - before if force is not None and force >= before else None
        return {"phase": phase, "skip": skip, "force": force}

    def needs_port(self, pattern: dict, i: int) -> bool:
        """Whether step ``i`` of ``pattern`` completes a local row (the rule of
        :func:`sw.perf.ports.walk`)."""
        skip, force = pattern["skip"], pattern["force"]
        return i == force or (i >= skip and (pattern["phase"] + i - skip) % self.period
                              == self.period - 1)


def _targets(burst: Burst) -> tuple[int, ...]:
    """Step indices of the burst's first R handshake, its last, and its last step (the tail)."""
    total, last = burst.steps, burst.last_steps
    out = (total - 1,) if burst.beats == 1 else (total - last - 1, total - 1)
    return out + ((total + burst.tail - 1,) if burst.tail else ())


class _Shape:
    """What the load channel's timing needs of one burst, computed once (a transfer's plan is
    cached per command, :class:`_Plan`): its beats, load ``steps`` (to its last R handshake)
    and ``tail`` (flush word), :meth:`_Geometry.pattern`, :func:`_targets`, the load steps of
    each beat and the steps before each beat, and (:attr:`plain_ends`) the runs of beats that
    are one step each with no flush word behind."""

    __slots__ = ("beats", "steps", "tail", "pattern", "targets", "per_beat", "before",
                 "_plain")

    def __init__(self, burst: Burst, geo: _Geometry) -> None:
        self.beats, self.steps, self.tail = burst.beats, burst.steps, burst.tail
        self.pattern = geo.pattern(burst)
        self.targets = _targets(burst)
        self.per_beat = per_beat = burst.steps_per_beat()
        before, total = [], 0
        for n in per_beat:
            before.append(total)
            total += n
        self.before = before
        self._plain: list[int] | None = None

    @property
    def plain_ends(self) -> list[int]:
        """Per beat ``i``, the end of the run of beats from ``i`` that are one load step each
        and leave no flush word behind: such a beat is taken in the cycle its step goes."""
        ends = self._plain
        if ends is None:
            n, per_beat = self.beats, self.per_beat
            ends = [0] * n
            j = n - 1 if self.tail else n
            for i in range(n - 1, -1, -1):
                if per_beat[i] != 1 or i >= j:
                    j = i
                ends[i] = j
            self._plain = ends
        return ends


class _Plan:
    """The bursts of one DMA command (:func:`hw.isa.timing.dma_bursts`), its geometry and
    (loads) each burst's :class:`_Shape`, made on first use; kept per command shape by the
    channels (a kernel issues the same transfers again and again)."""

    __slots__ = ("bursts", "geo", "shapes", "_store")

    def __init__(self, bursts: list[Burst], geo: _Geometry) -> None:
        self.bursts, self.geo = bursts, geo
        self.shapes: list[_Shape | None] = [None] * len(bursts)
        self._store: tuple | None = None

    def store_beats(self) -> tuple[list[tuple[int, int]], list[int]]:
        """A store's beats in transfer order, ``(steps: local reads or the flush slot, strobed
        bytes)``, and the index of each burst's first beat."""
        if self._store is None:
            beats: list[tuple[int, int]] = []
            first: list[int] = []
            for burst in self.bursts:
                first.append(len(beats))
                beats.extend(zip(burst.store_steps_per_beat(), burst.strobes_per_beat(),
                                 strict=True))
            self._store = (beats, first)
        return self._store

    def shape(self, k: int) -> _Shape:
        s = self.shapes[k]
        if s is None:
            burst = self.bursts[k]
            row = burst.layout
            # everything in a shape follows from the row's layout (its address only through
            # the lane a) and the burst's place in the row: shared by equal bursts
            key = (row.a, row.row_bytes, row.beat, row.local, burst.k0, burst.beats)
            s = _SHAPES.get(key)
            if s is None:
                if len(_SHAPES) >= _PlanCache.LIMIT:
                    _SHAPES.clear()
                s = _SHAPES[key] = _Shape(burst, self.geo)
            self.shapes[k] = s
        return s


#: :class:`_Shape` per burst shape (bounded)
_SHAPES: dict[tuple, _Shape] = {}


class _PlanCache:
    """:class:`_Plan` per ``(dram_addr, dram_stride, row_bytes, n_rows, mem)`` of a DMA
    command (bounded: emptied when it holds :attr:`LIMIT` plans)."""

    LIMIT = 4096

    def __init__(self, config: NPUConfig) -> None:
        self.config = config
        self.plans: dict[tuple, _Plan] = {}

    def get(self, body, mem: LocalMem) -> _Plan:
        key = (body.dram_addr, body.dram_stride, body.row_bytes, body.n_rows, mem)
        plan = self.plans.get(key)
        if plan is None:
            if len(self.plans) >= self.LIMIT:
                self.plans.clear()
            bursts = T.dma_bursts(self.config, body.dram_addr, body.dram_stride,
                                  body.row_bytes, body.n_rows, mem)
            plan = self.plans[key] = _Plan(bursts, _Geometry(self.config, body, mem))
        return plan


class _LoadJob(Item):
    """One DMA_LOAD being transferred."""

    def __init__(self, t: int, plan: _Plan, lists: list[BusyList],
                 reason: str, beat: int) -> None:
        self.t = t
        self.plan = plan
        self.bursts = plan.bursts
        self.geo = plan.geo
        self.shape = plan.shape
        self.lists = lists
        self.reason = reason          # stall.load.spad or stall.load.acc
        self.beat = beat
        self.next = 0                 # next burst to request
        self.granted: list[ServedBurst] = []
        self.drained = 0              # granted bursts fully taken by the last grant (a prefix)
        self.requested: list[int] = []  # ARVALID from (per burst)
        self.holds: dict[int, list[tuple[int, int]]] = {}   # burst index -> hold spans
        self.x0: dict[int, int] = {}          # burst index -> cycle of its first step
        self.last_step: dict[int, int] = {}   # burst index -> cycle of its last step
        #: beat by beat: burst index -> per beat, the index of its first hold in ``holds``
        self.hold_from: dict[int, list[int]] = {}
        self._busy_stamp = -1
        self._busy: list[tuple[int, int]] = []
        self.completed = 0
        self.end = _BIG
        self.done = None
        self.vm = 0                   # Q_VM when translated (else 0)
        self.presenting = False       # a burst is being translated (looked up or walked)
        self.fault: int | None = None  # the cycle a page fault was found
        #: the first burst the DRAM answers with an error (a bus fault), if any
        self.error_burst: int | None = None
        #: burst index -> cycle of each R handshake, for the bursts from ``error_burst`` on
        self.drain_takes: dict[int, list[int]] = {}

    def drains(self, k: int, i: int) -> bool:
        """Whether beat ``i`` of burst ``k`` comes after the transfer's first error beat (the
        first beat of :attr:`error_burst`): the channel takes it the cycle it is shown."""
        e = self.error_burst
        return e is not None and (k > e or (k == e and i > 0))

    def count(self, lo: int, hi: int, out: dict[str, int]) -> None:
        inflight, rvalid, denied, holds = [], [], [], []
        for k, b in enumerate(self.granted):
            inflight.append((b.accept + 1, b.c_last + 1))
            rvalid.extend(b.rvalid_spans())
            denied.append((self.requested[k], b.accept))
            holds.extend(self.holds.get(k, ()))
            self._bytes(b, k, lo, hi, out)
        if len(self.requested) > len(self.granted):
            denied.append((self.requested[-1], hi))
        holds = merge(holds)
        waiting = subtract(union(inflight), union(rvalid))
        stall = subtract(union(waiting, merge(denied)), holds)
        out["stall.load.dram_read"] += measure(stall, lo, hi)
        out[self.reason] += measure(holds, lo, hi)

    def _bytes(self, b: ServedBurst, k: int, lo: int, hi: int, out: dict[str, int]) -> None:
        if b.v0 >= lo and b.c_last < hi:
            out["bytes_read"] += b.beats * self.beat
        elif b.takes is not None:
            out["bytes_read"] += b.taken_in(lo, hi) * self.beat
        elif b.c_last >= lo and b.v0 < hi:
            out["bytes_read"] += sum(1 for c in self.beat_cycles(b, k) if lo <= c < hi) \
                * self.beat

    def busy(self, now: int) -> list[tuple[int, int]]:
        """The merged busy spans of the write ports above the DMA that end after ``now``
        (cached while the ports do not change)."""
        stamp = 0                 # the versions only grow: their sum changes with any of them
        for lst in self.lists:
            stamp += lst.version
        if stamp != self._busy_stamp:
            self._busy = merged(self.lists, now)
            self._busy_stamp = stamp
        return self._busy

    def beat_cycles(self, b: ServedBurst, k: int) -> list[int]:
        """Cycle of each R handshake of burst ``k`` (its beats' last steps), replayed against
        its own holds (the only busy cycles that moved it)."""
        if k in self.drain_takes:
            return self.drain_takes[k]
        sh = self.shape(k)
        ends = tuple(b + n - 1 for b, n in zip(sh.before, sh.per_beat, strict=True))
        times, _ = walk(self.x0[k], sh.before[-1] + sh.per_beat[-1] + sh.tail, self.geo.period,
                        busy=self.holds.get(k, []), targets=ends, **sh.pattern)
        return times


class LoadChannel:
    """The DMA load channel (DMA_LOAD), a :class:`~sw.perf.memory.Reader` of the read
    channel."""

    name = "load"

    def __init__(self, config: NPUConfig, eq, reads: ReadChannel, ledger: Ledger,
                 ports: dict[LocalMem, list[BusyList]], window_of, vm_of=None,
                 translator=None, fault_of=lambda: None) -> None:
        self.config = config
        self.eq = eq
        self.reads = reads
        self.fault_of = fault_of      #: the bus fault now (:class:`sw.model.faults.BusFault`)
        self.ledger = ledger
        self.ports = ports
        self.window_of = window_of
        self.vm_of = vm_of
        self.translator = translator
        self.queue = None
        self.job: _LoadJob | None = None
        self.plans = _PlanCache(config)
        for lists in ports.values():
            for lst in lists:
                lst.listeners.append(lambda a, lst=lst: self._port_write(a, lst))

    def start(self, cmd, t: int, error: ErrorCode) -> None:
        mem = LocalMem.ACC if cmd.body.mem == LocalMem.ACC.value else LocalMem.SPAD
        vm = _translated_vm(self, cmd)
        quiet = T.dma_quiet_done(self.config, cmd.body, mem, error, self.window_of(cmd.queue),
                                 translate=bool(vm))
        if quiet is not None:
            self.queue.set_done(t + quiet)
            return
        reason = "stall.load.acc" if mem == LocalMem.ACC else "stall.load.spad"
        self.job = job = _LoadJob(t, self.plans.get(cmd.body, mem), self.ports[mem], reason,
                                  self.config.axi_data_bytes)
        job.vm = vm
        if error == ErrorCode.AXI_ERROR:      # physical only (the model refuses bus faults
            fault, beat = self.fault_of(), self.config.axi_data_bytes   # on translated DMA)
            job.error_burst = next(k for k, b in enumerate(job.bursts)
                                   if fault.hits(False, b.addr, b.beats, beat))
        self.ledger.item(job)
        self._request(job, t + T.DMA_FIRST_REQUEST)

    def _request(self, job: _LoadJob, start: int) -> None:
        """Burst ``job.next`` is presented from ``start``: translated first (if the queue
        translates), then requested."""
        if not job.vm:
            self._issue(job, start)
            return
        k = job.next
        burst, body = job.bursts[k], job.geo.body
        job.presenting = True
        self.translator.present(job.vm, burst.addr, body.dram_addr + burst.row * body.dram_stride,
                                False, start, lambda c, _pa: self._issue(job, c),
                                lambda f, code, addr: self._fault(job, f))

    def _issue(self, job: _LoadJob, start: int) -> None:
        k = job.next
        job.presenting = False
        job.requested.append(start)
        self.reads.request(DMA, start, job.bursts[k].beats, self, (job, k), self._granted)

    def _fault(self, job: _LoadJob, f: int) -> None:
        """A page fault found in cycle ``f``: no further burst; done once the issued ones are
        over (:mod:`hw.isa.vm`)."""
        job.presenting = False
        job.fault = f
        job.bursts = job.bursts[:job.next]
        if job.completed == len(job.bursts):
            self._finish(job)

    def _granted(self, c: int, served: ServedBurst) -> None:
        job, k = served.tag
        granted = job.granted
        granted.append(served)
        job.next = k + 1
        if job.next < len(job.bursts):
            # bursts whose last beat was taken by cycle c: a prefix (the DRAM answers in
            # order), final once past
            n = job.drained
            while n < len(granted) and granted[n].c_last <= c:
                n += 1
            job.drained = n
            if len(granted) - n < self.config.dma_outstanding:
                self._request(job, c + 1)

    # -- Reader ---------------------------------------------------------------------------

    def consume(self, served: ServedBurst) -> tuple[int, int]:
        job, k = served.tag
        sh = job.shape(k)
        # the data path takes its first step once the beat is shown and the previous burst's
        # steps (a flush word after its last beat, see DmaRow) are over
        x = served.v0 if k == 0 else max(served.v0, job.last_step[k - 1] + 1)
        if job.error_burst is not None and k >= job.error_burst:
            return self._consume_drained(job, k, served, x)
        busy = merged(job.lists, x)
        if k in job.holds:
            # re-timed while in progress: the holds so far are final even where the port's
            # spans that caused them have been dropped since
            now = self.eq.now
            busy = merge(busy + [h for h in job.holds[k] if h[0] < now])
        if busy:
            times, holds = walk(x, sh.steps + sh.tail, job.geo.period, busy=busy,
                                targets=sh.targets, **sh.pattern)
        else:                             # nothing to wait for: one step per cycle (walk's)
            times, holds = [x + t for t in sh.targets], []
        job.holds[k] = holds
        job.x0[k] = x
        job.last_step[k] = times[-1]
        if sh.beats == 1:
            return served.v0, times[0]
        return times[0] + 1, times[1]

    def _consume_drained(self, job: _LoadJob, k: int, served: ServedBurst,
                         x: int) -> tuple[int, int]:
        """:meth:`consume` of a burst from the transfer's first error response on: beats
        taken as they are shown (the first error beat after its own steps, which may wait
        for the port; no flush word)."""
        sh = job.shape(k)
        if k == job.error_burst:
            n = sh.per_beat[0]
            times, holds = walk(x, n, job.geo.period, busy=merged(job.lists, x),
                                targets=(n - 1,), **sh.pattern)
            first = times[0]
        else:
            first, holds = served.v0, []
        job.holds[k], job.x0[k] = holds, x
        takes = job.drain_takes[k] = [first + i for i in range(sh.beats)]
        job.last_step[k] = takes[-1]
        return (served.v0 if sh.beats == 1 else takes[-2] + 1), takes[-1]

    def r_take(self, served: ServedBurst, i: int, visible: int) -> int:
        """Beat ``i`` visible from ``visible``: its steps go one per cycle from then (beat 0
        of a burst after the previous burst's flush word), a chunk that completes a local row
        held while the port is busy; taken with its last step. The last beat's steps go on
        with the row's flush word (:attr:`Burst.tail`), which sets the burst's last step."""
        job, k = served.tag
        sh = job.shape(k)
        holds = job.holds.get(k)
        if holds is None:
            holds = job.holds[k] = []
            job.hold_from[k] = []
        starts = job.hold_from[k]
        busy = job.busy(self.eq.now)
        if i < len(starts):               # retimed: the holds before now are final
            now = self.eq.now
            past = [h for h in holds[starts[i]:] if h[0] < now]
            del holds[starts[i]:]
            del starts[i:]
            if past:
                busy = merge(busy + past)
        starts.append(len(holds))
        last_beat = i == sh.beats - 1
        if job.drains(k, i):
            if last_beat:
                job.last_step[k] = visible
            return visible
        geo = job.geo
        pat = geo.pattern_from(sh.pattern, sh.before[i])
        n = sh.per_beat[i]
        tail = sh.tail if last_beat and k != job.error_burst else 0
        x = visible if i or not k else max(visible, job.last_step[k - 1] + 1)
        if n == 1 and not tail:           # one step: held only if it completes a local row
            take = x
            if geo.needs_port(pat, 0):
                take = first_free(busy, x)
                if take > x:
                    holds.append((x, take))
            last = take
        else:
            targets = (n - 1, n + tail - 1) if tail else (n - 1,)
            times, new = walk(x, n + tail, geo.period, busy=busy, targets=targets, **pat)
            holds.extend(new)
            take, last = times[0], times[-1]
        if last_beat:
            job.last_step[k] = last
        return take

    def r_plain(self, served: ServedBurst, i: int, visible: int) -> tuple[int, int]:
        """The run of beats from ``i`` that :meth:`r_take` takes the cycle they are visible:
        one step each, no flush word, ``visible`` after the previous burst's last step, no
        hold of a retimed beat still to count, and visible before the next busy span of the
        ports (a beat that does not complete a local row would not wait for it either; the
        run stops there all the same)."""
        job, k = served.tag
        if job.drains(k, i):
            return job.shape(k).beats, _BIG
        starts = job.hold_from.get(k)
        if starts is not None and i < len(starts):
            now = self.eq.now
            for h in job.holds[k][starts[i]:]:
                if h[0] < now:
                    return i, 0
        if i == 0 and k and visible <= job.last_step[k - 1]:
            return i, 0
        j = job.shape(k).plain_ends[i]
        if j == i:
            return i, 0
        for a, b in job.busy(self.eq.now):
            if b > visible:
                return (i, 0) if a <= visible else (j, a)
        return j, _BIG

    def r_plain_taken(self, served: ServedBurst, i: int, j: int, last: int) -> None:
        job, k = served.tag
        holds = job.holds.get(k)
        if holds is None:
            holds = job.holds[k] = []
            starts = job.hold_from[k] = []
        else:
            starts = job.hold_from[k]
            if i < len(starts):
                del holds[starts[i]:]
                del starts[i:]
        starts.extend([len(holds)] * (j - i))
        if j == job.shape(k).beats:
            job.last_step[k] = last

    def burst_done(self, served: ServedBurst) -> None:
        job, k = served.tag
        job.completed += 1
        c = self.eq.now                       # the cycle after its last beat
        if job.next < len(job.bursts):
            if len(job.requested) == len(job.granted) and not job.presenting:
                self._request(job, c)                      # it waited for room
        elif job.completed == len(job.bursts) and (job.fault is not None or not job.presenting):
            self._finish(job)

    def _finish(self, job: _LoadJob) -> None:
        """``done`` 2 cycles after the last step (the last R handshake or the flush word), or
        after a page fault 2 cycles after it was found if that is later."""
        last = job.last_step[len(job.bursts) - 1] if job.bursts else -_BIG
        if job.fault is not None:
            last = max(last, job.fault)
        job.done = last + T.DMA_DONE_AFTER_LAST
        job.end = job.done + 1
        self.queue.set_done(job.done)

    def _port_write(self, a: int, port: BusyList) -> None:
        """A higher-priority write of ``port`` was planned from cycle ``a``: re-time the
        bursts it may hold (if the transfer writes that memory)."""
        job = self.job
        if job is None or port not in job.lists or (job.done is not None and job.done < a):
            return
        for k, served in enumerate(job.granted):
            if job.shape(k).tail and served.c_last < a <= job.last_step.get(k, -1):
                # its beats are taken, its flush word still to move: re-time that
                self._retime_tail(job, k)
        for served in job.granted:
            if not served.done and served.c_last >= a:
                self.reads.reschedule(served, a)
                return

    def _retime_tail(self, job: _LoadJob, k: int) -> None:
        """Re-time the flush word of burst ``k``, after its last R handshake (final: the
        port write that moves it comes later)."""
        sh, geo = job.shape(k), job.geo
        c_last = job.granted[k].c_last
        now = self.eq.now
        holds = job.holds[k]
        keep = [h for h in holds if h[0] <= c_last]
        past = [h for h in holds if c_last < h[0] < now]
        busy = merge(merged(job.lists, c_last + 1) + past)
        times, new = walk(c_last + 1, sh.tail, geo.period, busy=busy,
                          targets=(sh.tail - 1,), **geo.pattern_from(sh.pattern, sh.steps))
        job.holds[k] = keep + new
        job.last_step[k] = times[-1]
        if k == len(job.bursts) - 1 and job.completed == len(job.bursts):
            self._finish(job)


def _translated_vm(channel, cmd) -> int:
    """The ``Q_VM`` of a command's queue if it translates (latched with the command), else 0."""
    if channel.translator is None or channel.vm_of is None:
        return 0
    vm = channel.vm_of(cmd.queue)
    return vm if unpack_fields(VmWord, vm).enable else 0


class _StoreJob(Item):
    """One DMA_STORE being transferred, beat by beat."""

    def __init__(self, t: int, plan: _Plan, beat_bytes: int) -> None:
        self.t = t
        self.bursts = plan.bursts
        self.geo = plan.geo
        self.beat_bytes = beat_bytes
        # beats in transfer order: (steps: local reads or the flush slot, strobed bytes);
        # per burst, the index of its first beat (shared with the plan: read only)
        self.beats, self.first_beat = plan.store_beats()
        self.V: list[int] = []                # beat in the W buffer (WVALID) from
        self.W: list[int] = []                # W handshake
        self.read0 = t + T.DMA_FIRST_REQUEST - 1
        self.read = self.read0                # last local read (none yet)
        self.nw = 0                           # consumed-before pointer for the level
        self.nv = 0
        self.aw_from: list[int] = []
        self.aw: list[int] = []
        self.b: list[int] = []
        self.grants: list[WriteGrant] = []    # per granted burst
        self.next = 0
        self.end = _BIG
        self.done = None
        self.vm = 0
        self.fault: int | None = None          # the cycle a page fault was found

    def produce(self, k: int) -> None:
        """Store steps up to the last one of beat ``k``: one per cycle, each only while the
        W buffer holds at most 2 beats (``V <= x`` in, ``W < x`` out)."""
        V, W, beats = self.V, self.W, self.beats
        if len(V) > k:
            return
        read, nw = self.read, self.nw
        while len(V) <= k:
            for _ in range(beats[len(V)][0]):
                # the step goes in the first cycle x after the previous one in which the
                # buffer holds at most 2 beats: landed (V <= x) less consumed (W < x, a
                # pointer that moves both ways)
                x = read + 1
                while True:
                    while nw < len(W) and W[nw] < x:
                        nw += 1
                    while nw > 0 and W[nw - 1] >= x:
                        nw -= 1
                    if bisect_right(V, x) - nw <= 2:
                        break
                    x = W[nw] + 1
                read = x
            V.append(read + 2)
        self.read, self.nw = read, nw

    def count(self, lo: int, hi: int, out: dict[str, int]) -> None:
        aw_wait = [(f, a) for f, a in zip(self.aw_from, self.aw, strict=False)]
        if len(self.aw_from) > len(self.aw):
            aw_wait.append((self.aw_from[-1], hi))
        n = len(self.W)
        if self.vm and len(self.V) <= n < len(self.beats):
            # a translated burst may wait for its walk (AWVALID low) while its first beat
            # waits in the W buffer (WVALID high): that beat's arrival counts
            with contextlib.suppress(IndexError):   # an earlier beat's W is not timed yet
                self.produce(n)
        visible = merge((self.V[k], self.W[k]) for k in range(n))
        if len(self.V) > n:                   # beats in the buffer, burst not granted yet
            # (after a page fault WVALID shows only the beats of the bursts that went)
            visible = union(visible, [(self.V[n], hi if self.fault is None
                                       else min(hi, self.fault + 1))])
        w_wait = subtract(visible, merge((w, w + 1) for w in self.W))
        spans = [aw_wait, w_wait]
        if self.done is not None and len(self.b):
            # every beat sent, B responses outstanding, none in this cycle (BVALID low)
            tail0 = max(self.read + 2, self.W[-1] + 1) if self.fault is None \
                else max(self.fault + 1, self.W[-1] + 1)
            spans.append(subtract([(tail0, self.b[-1])], merge((b, b + 1) for b in self.b)))
        out["stall.store.dram_write"] += measure(union(*spans), lo, hi)
        out["bytes_written"] += sum(self.beats[k][1] for k in range(n) if lo <= self.W[k] < hi)


class StoreChannel:
    """The DMA store channel (DMA_STORE), a :class:`~sw.perf.memory.Writer` of the write
    channel."""

    name = "store"

    def __init__(self, config: NPUConfig, eq, writes: WriteChannel, ledger: Ledger,
                 window_of, vm_of=None, translator=None) -> None:
        self.config = config
        self.eq = eq
        self.writes = writes
        self.ledger = ledger
        self.window_of = window_of
        self.vm_of = vm_of
        self.translator = translator
        self.queue = None
        self.plans = _PlanCache(config)

    def start(self, cmd, t: int, error: ErrorCode) -> None:
        mem = LocalMem.ACC if cmd.body.mem == LocalMem.ACC.value else LocalMem.SPAD
        vm = _translated_vm(self, cmd)
        quiet = T.dma_quiet_done(self.config, cmd.body, mem, error, self.window_of(cmd.queue),
                                 translate=bool(vm))
        if quiet is not None:
            self.queue.set_done(t + quiet)
            return
        job = _StoreJob(t, self.plans.get(cmd.body, mem), self.config.axi_data_bytes)
        job.vm = vm
        self.ledger.item(job)
        self._request(job, t + T.DMA_FIRST_REQUEST)

    def _request(self, job: _StoreJob, start: int) -> None:
        """Burst ``job.next`` is presented from ``start``: translated first (if the queue
        translates), then requested."""
        if not job.vm:
            self._issue(job, start)
            return
        k = job.next
        burst, body = job.bursts[k], job.geo.body
        self.translator.present(job.vm, burst.addr, body.dram_addr + burst.row * body.dram_stride,
                                True, start, lambda c, _pa: self._issue(job, c),
                                lambda f, code, addr: self._fault(job, f))

    def _issue(self, job: _StoreJob, start: int) -> None:
        job.aw_from.append(start)
        self.writes.request(DMA, start, self, (job, job.next), job.bursts[job.next].beats)

    def _fault(self, job: _StoreJob, f: int) -> None:
        """A page fault found in cycle ``f``: no further burst; done 2 cycles after the last B
        response of the bursts that went, or after ``f`` if that is later."""
        job.fault = f
        job.bursts = job.bursts[:job.next]
        if len(job.b) == len(job.bursts):
            self._done(job, max([f, *job.b[-1:]]))

    # -- Writer ---------------------------------------------------------------------------

    def w_begin(self, grant: WriteGrant) -> None:
        job, k = grant.tag
        job.aw.append(grant.aw)
        job.grants.append(grant)
        job.next = k + 1
        if job.next < len(job.bursts):
            # AWVALID again from the cycle after the handshake, once fewer than
            # dma_outstanding bursts await their B response (an earlier burst's: final)
            start = grant.aw + 1
            waiting = job.next - self.config.dma_outstanding
            if waiting >= 0:
                start = max(start, job.grants[waiting].b + 1)
            self._request(job, start)

    def w_valid(self, grant: WriteGrant, i: int) -> int:
        job, k = grant.tag
        n = job.first_beat[k] + i
        job.produce(n)
        return job.V[n]

    def w_taken(self, grant: WriteGrant, i: int, cycle: int) -> None:
        grant.tag[0].W.append(cycle)

    def w_run(self, grant: WriteGrant, draws) -> None:
        """Every W beat of the burst in one loop: :meth:`_StoreJob.produce` (inline) and the
        write channel's beat loop (:meth:`sw.perf.memory.Writer.w_run`)."""
        job, k = grant.tag
        V, W, beats, ws = job.V, job.W, job.beats, grant.ws
        read, nw = job.read, job.nw
        n = job.first_beat[k]
        w = grant.aw
        for _ in range(grant.beats):
            while len(V) <= n:                  # produce(n), as there
                for _ in range(beats[len(V)][0]):
                    x = read + 1
                    while True:
                        while nw < len(W) and W[nw] < x:
                            nw += 1
                        while nw > 0 and W[nw - 1] >= x:
                            nw -= 1
                        if bisect_right(V, x) - nw <= 2:
                            break
                        x = W[nw] + 1
                    read = x
                V.append(read + 2)
            v = V[n]
            w = v if v > w else w + 1           # max(valid, previous W + 1)
            if draws is not None:
                w = draws.next_free(w)
            W.append(w)
            ws.append(w)
            n += 1
        job.read, job.nw = read, nw

    def w_rewind(self, grant: WriteGrant, i: int, t: int) -> None:
        job, k = grant.tag
        del job.W[job.first_beat[k] + i:]
        # local reads up to t saw only W handshakes before t: the beats they completed stay
        keep = bisect_right(job.V, t + 2)
        del job.V[keep:]
        job.read = job.V[-1] - 2 if job.V else job.read0
        job.nw = min(job.nw, len(job.W))

    def response(self, grant: WriteGrant) -> None:
        job, k = grant.tag
        job.b.append(grant.b)
        if len(job.b) == len(job.bursts) and (job.fault is not None
                                              or job.next == len(job.bursts)):
            self._done(job, grant.b if job.fault is None else max(grant.b, job.fault))

    def _done(self, job: _StoreJob, last: int) -> None:
        job.done = last + T.DMA_DONE_AFTER_LAST
        job.end = job.done + 1
        self.queue.set_done(job.done)
