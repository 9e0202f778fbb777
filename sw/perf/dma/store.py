"""Timing of the DMA store channel (DMA_STORE, :mod:`hw.dma.store`).

One step per cycle (a local chunk read, or the flush slot of a row whose last beat holds
only bytes of the word before) while the 4-entry W buffer holds at most 2 beats (reads are
never denied); a beat is in the buffer 2 cycles after its last step; W beats go while the
write channels are granted (:class:`WriteChannel`); ``done`` is 2 cycles after the last B
response. The store is timed beat by beat (stores are short next to loads).
"""

from __future__ import annotations

import contextlib
from bisect import bisect_right

from hw.config import NPUConfig
from hw.isa import ErrorCode, LocalMem
from sw.perf import timing as T
from sw.perf.dma.plan import BIG as _BIG
from sw.perf.dma.plan import Plan, PlanCache, present_burst, translated_vm
from sw.perf.ledger import Item, Ledger, measure, merge, subtract, union
from sw.perf.memory import DMA, WriteChannel, WriteGrant

__all__ = ["StoreChannel"]


class _StoreJob(Item):
    """One DMA_STORE being transferred, beat by beat."""

    def __init__(self, t: int, plan: Plan, beat_bytes: int) -> None:
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
        self.plans = PlanCache(config)

    def start(self, cmd, t: int, error: ErrorCode) -> None:
        mem = LocalMem.ACC if cmd.body.mem == LocalMem.ACC.value else LocalMem.SPAD
        vm = translated_vm(self, cmd)
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
        """Burst ``job.next`` is presented from ``start`` (:func:`present_burst`)."""
        present_burst(self, job, start, write=True)

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
