"""Timing of the DMA engine's two channels (:class:`hw.dma.DMA`), burst by burst.

Load: after the checks, read bursts are requested from ``t + 3``, one AR per cycle while fewer
than ``dma_outstanding`` are in flight; the DRAM answers in order (:class:`ReadChannel`); the
channel cuts the R beats into local rows, one ``G``-byte chunk per cycle, and a chunk that
completes a local row waits while a higher-priority writer has the memory's write port
(:func:`sw.perf.ports.walk`, a closed form per burst). ``done`` is 2 cycles after the last beat.

Store: local rows are read one chunk per cycle while the 4-entry W buffer holds at most 2 beats
(reads are never denied); a beat is in the buffer 2 cycles after the read of its last chunk; W
beats go while the write channels are granted (:class:`WriteChannel`); ``done`` is 2 cycles
after the last B response. The store is timed beat by beat (stores are short next to loads).

Each command is a ledger :class:`~sw.perf.ledger.Item` that counts its stall cycles by the
definitions of ``DMA.stall`` and its bytes at the handshakes.
"""

from __future__ import annotations

from bisect import bisect_right

from hw.config import NPUConfig
from hw.isa import ErrorCode, LocalMem
from sw.perf import timing as T
from sw.perf.ledger import Item, Ledger, measure, merge, subtract, union
from sw.perf.memory import DMA, ReadChannel, ServedBurst, WriteChannel, WriteGrant
from sw.perf.ports import BusyList, first_free, merged, walk
from sw.perf.timing import Burst

__all__ = ["LoadChannel", "StoreChannel"]

_BIG = 1 << 62


class _Geometry:
    """Where each burst of a transfer starts within the local rows (``G = min(L, beat)``-byte
    chunks; the chunk counts of a burst are in :class:`hw.isa.timing.Burst`)."""

    def __init__(self, config: NPUConfig, body, mem: LocalMem) -> None:
        beat = config.axi_data_bytes
        local = config.acc_row_bytes if mem == LocalMem.ACC else config.spad_row_bytes
        self.g = min(local, beat)
        self.beat = beat
        self.body = body
        #: L >= beat: one chunk per beat and every ``period``-th completes a local row;
        #: L < beat: every chunk completes one
        self.period = local // beat if local >= beat else 1

    def phase(self, burst: Burst) -> int:
        """Chunks of its local row before the burst's first chunk (modulo ``period``)."""
        if self.period == 1:
            return 0
        row = self.body.dram_addr + burst.row * self.body.dram_stride   # beat aligned here
        return (burst.addr - row) // self.beat % self.period


def _last_chunks(burst: Burst) -> int:
    return burst.first_chunks if burst.beats == 1 else burst.last_chunks


class _LoadJob(Item):
    """One DMA_LOAD being transferred."""

    def __init__(self, t: int, bursts, geo: _Geometry, lists: list[BusyList],
                 reason: str, beat: int) -> None:
        self.t = t
        self.bursts = bursts
        self.geo = geo
        self.lists = lists
        self.reason = reason          # stall.load.spad or stall.load.acc
        self.beat = beat
        self.next = 0                 # next burst to request
        self.granted: list[ServedBurst] = []
        self.requested: list[int] = []  # ARVALID from (per burst)
        self.holds: dict[int, list[tuple[int, int]]] = {}   # burst index -> hold spans
        #: beat by beat: burst index -> per beat, the index of its first hold in ``holds``
        self.hold_from: dict[int, list[int]] = {}
        self._phases: dict[int, int] = {}
        self._busy_stamp: tuple | None = None
        self._busy: list[tuple[int, int]] = []
        self.completed = 0
        self.end = _BIG
        self.done = None

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
        stall = union(waiting, subtract(merge(denied), holds))
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

    def phase(self, k: int) -> int:
        """:meth:`_Geometry.phase` of burst ``k`` (cached)."""
        p = self._phases.get(k)
        if p is None:
            p = self._phases[k] = self.geo.phase(self.bursts[k])
        return p

    def busy(self, now: int) -> list[tuple[int, int]]:
        """The merged busy spans of the write ports above the DMA that end after ``now``
        (cached while the ports do not change)."""
        stamp = tuple(lst.version for lst in self.lists)
        if stamp != self._busy_stamp:
            self._busy = merged(self.lists, now)
            self._busy_stamp = stamp
        return self._busy

    def beat_cycles(self, b: ServedBurst, k: int) -> list[int]:
        """Cycle of each R handshake of burst ``k`` (its beats' last chunks), replayed against
        its own holds (the only busy cycles that moved it)."""
        burst = self.bursts[k]
        ends, total = [], 0
        for n in burst.chunks_per_beat():
            total += n
            ends.append(total - 1)
        times, _ = walk(b.v0, total, self.geo.period, self.geo.phase(burst),
                        self.holds.get(k, []), tuple(ends))
        return times


class LoadChannel:
    """The DMA load channel (DMA_LOAD), a :class:`~sw.perf.memory.Reader` of the read
    channel."""

    name = "load"

    def __init__(self, config: NPUConfig, eq, reads: ReadChannel, ledger: Ledger,
                 ports: dict[LocalMem, list[BusyList]], window_of) -> None:
        self.config = config
        self.eq = eq
        self.reads = reads
        self.ledger = ledger
        self.ports = ports
        self.window_of = window_of
        self.queue = None
        self.job: _LoadJob | None = None
        for lists in ports.values():
            for lst in lists:
                lst.listeners.append(lambda a, lst=lst: self._port_write(a, lst))

    def start(self, cmd, t: int, error: ErrorCode) -> None:
        mem = LocalMem.ACC if cmd.body.mem == LocalMem.ACC.value else LocalMem.SPAD
        quiet = T.dma_quiet_done(self.config, cmd.body, mem, error, self.window_of(cmd.queue))
        if quiet is not None:
            self.queue.set_done(t + quiet)
            return
        b = cmd.body
        bursts = T.dma_bursts(self.config, b.dram_addr, b.dram_stride, b.row_bytes, b.n_rows,
                              mem)
        reason = "stall.load.acc" if mem == LocalMem.ACC else "stall.load.spad"
        self.job = job = _LoadJob(t, bursts, _Geometry(self.config, b, mem), self.ports[mem],
                                  reason, self.config.axi_data_bytes)
        self.ledger.item(job)
        self._request(job, t + T.DMA_FIRST_REQUEST)

    def _request(self, job: _LoadJob, start: int) -> None:
        k = job.next
        job.requested.append(start)
        self.reads.request(DMA, start, job.bursts[k].beats, self, (job, k), self._granted)

    def _granted(self, c: int, served: ServedBurst) -> None:
        job, k = served.tag
        job.granted.append(served)
        job.next = k + 1
        if job.next < len(job.bursts):
            level = len(job.granted) - sum(1 for b in job.granted if b.c_last <= c)
            if level < self.config.dma_outstanding:
                self._request(job, c + 1)

    # -- Reader ---------------------------------------------------------------------------

    def consume(self, served: ServedBurst) -> tuple[int, int]:
        job, k = served.tag
        burst = job.bursts[k]
        geo = job.geo
        total, last = burst.chunks, _last_chunks(burst)
        targets = (total - 1,) if burst.beats == 1 else (total - last - 1, total - 1)
        busy = merged(job.lists, served.v0)
        if k in job.holds:
            # re-timed while in progress: the holds so far are final even where the port's
            # spans that caused them have been dropped since
            now = self.eq.now
            busy = merge(busy + [h for h in job.holds[k] if h[0] < now])
        times, holds = walk(served.v0, total, geo.period, geo.phase(burst), busy, targets)
        job.holds[k] = holds
        if burst.beats == 1:
            return served.v0, times[0]
        return times[0] + 1, times[1]

    def r_take(self, served: ServedBurst, i: int, visible: int) -> int:
        """Beat ``i`` visible from ``visible``: its chunks go one per cycle from then, the one
        that completes a local row held while the port is busy; taken with its last chunk."""
        job, k = served.tag
        burst = job.bursts[k]
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
        geo = job.geo
        if i == 0:
            n, before = burst.first_chunks, 0
        else:
            n = burst.last_chunks if i == burst.beats - 1 else burst.beat_chunks
            before = burst.first_chunks + (i - 1) * burst.beat_chunks
        phase = (job.phase(k) + before) % geo.period
        if n == 1:                        # one chunk: held only if it completes a local row
            if phase != geo.period - 1:
                return visible
            take = first_free(busy, visible)
            if take > visible:
                holds.append((visible, take))
            return take
        times, new = walk(visible, n, geo.period, phase, busy, (n - 1,))
        holds.extend(new)
        return times[0]

    def burst_done(self, served: ServedBurst) -> None:
        job, k = served.tag
        job.completed += 1
        c = self.eq.now                       # the cycle after its last beat
        if job.next < len(job.bursts):
            if len(job.requested) == len(job.granted):     # it waited for room
                self._request(job, c)
        elif job.completed == len(job.bursts):
            job.done = c + 1
            job.end = job.done + 1
            self.job = None
            self.queue.set_done(job.done)

    def _port_write(self, a: int, port: BusyList) -> None:
        """A higher-priority write of ``port`` was planned from cycle ``a``: re-time the
        bursts it may hold (if the transfer writes that memory)."""
        job = self.job
        if job is None or port not in job.lists:
            return
        for served in job.granted:
            if not served.done and served.c_last >= a:
                self.reads.reschedule(served, a)
                return


class _StoreJob(Item):
    """One DMA_STORE being transferred, beat by beat."""

    def __init__(self, t: int, bursts, geo: _Geometry, beat_bytes: int) -> None:
        self.t = t
        self.bursts = bursts
        self.geo = geo
        self.beat_bytes = beat_bytes
        # beats in transfer order: (chunks, strobed bytes)
        self.beats: list[tuple[int, int]] = []
        self.first_beat: list[int] = []      # per burst: index of its first beat
        for burst in bursts:
            self.first_beat.append(len(self.beats))
            self.beats.extend((n, n * geo.g) for n in burst.chunks_per_beat())
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

    def produce(self, k: int) -> None:
        """Local reads up to the last chunk of beat ``k``: one per cycle, each only while the
        W buffer holds at most 2 beats (``V <= x`` in, ``W < x`` out)."""
        while len(self.V) <= k:
            chunks, _ = self.beats[len(self.V)]
            for _ in range(chunks):
                self.read = self._level_ok(self.read + 1)
            self.V.append(self.read + 2)

    def _level_ok(self, x: int) -> int:
        V, W = self.V, self.W
        while True:
            nv = bisect_right(V, x)
            nw = self._consumed_before(x)
            if nv - nw <= 2:
                return x
            x = W[nw] + 1

    def _consumed_before(self, x: int) -> int:
        W = self.W
        n = self.nw
        while n < len(W) and W[n] < x:
            n += 1
        while n > 0 and W[n - 1] >= x:
            n -= 1
        self.nw = n
        return n

    def count(self, lo: int, hi: int, out: dict[str, int]) -> None:
        aw_wait = [(f, a) for f, a in zip(self.aw_from, self.aw, strict=False)]
        if len(self.aw_from) > len(self.aw):
            aw_wait.append((self.aw_from[-1], hi))
        n = len(self.W)
        visible = merge((self.V[k], self.W[k]) for k in range(n))
        if len(self.V) > n:                   # beats in the buffer, burst not granted yet
            visible = union(visible, [(self.V[n], hi)])
        w_wait = subtract(visible, merge((w, w + 1) for w in self.W))
        spans = [aw_wait, w_wait]
        if self.done is not None and len(self.b):
            # every beat sent, B responses outstanding, none in this cycle (BVALID low)
            tail0 = max(self.read + 2, self.W[-1] + 1)
            spans.append(subtract([(tail0, self.b[-1])], merge((b, b + 1) for b in self.b)))
        out["stall.store.dram_write"] += measure(union(*spans), lo, hi)
        out["bytes_written"] += sum(self.beats[k][1] for k in range(n) if lo <= self.W[k] < hi)


class StoreChannel:
    """The DMA store channel (DMA_STORE), a :class:`~sw.perf.memory.Writer` of the write
    channel."""

    name = "store"

    def __init__(self, config: NPUConfig, eq, writes: WriteChannel, ledger: Ledger,
                 window_of) -> None:
        self.config = config
        self.eq = eq
        self.writes = writes
        self.ledger = ledger
        self.window_of = window_of
        self.queue = None

    def start(self, cmd, t: int, error: ErrorCode) -> None:
        mem = LocalMem.ACC if cmd.body.mem == LocalMem.ACC.value else LocalMem.SPAD
        quiet = T.dma_quiet_done(self.config, cmd.body, mem, error, self.window_of(cmd.queue))
        if quiet is not None:
            self.queue.set_done(t + quiet)
            return
        b = cmd.body
        bursts = T.dma_bursts(self.config, b.dram_addr, b.dram_stride, b.row_bytes, b.n_rows,
                              mem)
        job = _StoreJob(t, bursts, _Geometry(self.config, b, mem), self.config.axi_data_bytes)
        self.ledger.item(job)
        self._request(job, t + T.DMA_FIRST_REQUEST)

    def _request(self, job: _StoreJob, start: int) -> None:
        job.aw_from.append(start)
        self.writes.request(DMA, start, self, (job, job.next), job.bursts[job.next].beats)

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
        if len(job.b) == len(job.bursts):
            job.done = grant.b + T.DMA_DONE_AFTER_LAST
            job.end = job.done + 1
            self.queue.set_done(job.done)
