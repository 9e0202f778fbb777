"""Timing of the DMA load channel (DMA_LOAD, :mod:`hw.dma.load`).

After the checks, read bursts are requested from ``t + 3``, one AR per cycle while fewer
than ``dma_outstanding`` are in flight; the DRAM answers in order (:class:`ReadChannel`); the
channel realigns the R beats into words and cuts them into local rows, one step per cycle (a
``G``-byte chunk, or the prime of a row at an address that is not a multiple of ``G``; the
steps of every burst are :class:`hw.isa.timing.Burst`'s), and a chunk that completes a local
row waits while a higher-priority writer has the memory's write port
(:func:`sw.perf.ports.walk`, a closed form per burst). ``done`` is 2 cycles after the last
step: the last beat, or the flush word after it. After the first beat with an error response
(a bus fault) the channel only drains: every later beat of the transfer is taken the cycle it
is shown, and no step or flush word follows (``hw/dma/load.py``, ``error``).
"""

from __future__ import annotations

from hw.config import NPUConfig
from hw.isa import ErrorCode, LocalMem
from sw.perf import timing as T
from sw.perf.dma.plan import BIG as _BIG
from sw.perf.dma.plan import Plan, PlanCache, present_burst, translated_vm
from sw.perf.ledger import Item, Ledger, measure, merge, subtract, union
from sw.perf.memory import DMA, ReadChannel, ServedBurst
from sw.perf.ports import BusyList, first_free, merged, walk

__all__ = ["LoadChannel"]


class _LoadJob(Item):
    """One DMA_LOAD being transferred."""

    def __init__(self, t: int, plan: Plan, lists: list[BusyList],
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
        self.plans = PlanCache(config)
        for lists in ports.values():
            for lst in lists:
                lst.listeners.append(lambda a, lst=lst: self._port_write(a, lst))

    def start(self, cmd, t: int, error: ErrorCode) -> None:
        mem = LocalMem.ACC if cmd.body.mem == LocalMem.ACC.value else LocalMem.SPAD
        vm = translated_vm(self, cmd)
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
        """Burst ``job.next`` is presented from ``start`` (:func:`present_burst`)."""
        job.presenting = True                 # until :meth:`_issue`
        present_burst(self, job, start, write=False)

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

