"""The memory side of the NPU, timed per burst: the AXI arbiter (``hw.bus.arbiter``) and the
DRAM model of the co-simulation (``cosim/tb/dram.sv``).

Read path. The arbiter passes one AR request per cycle, round-robin between the DMA
(manager 0) and the command processor (manager 1) starting after the last one granted; a
request that the DRAM does not accept stays selected (``ar_locked``). The DRAM queues up to
:data:`DRAM_READ_QUEUE` bursts and answers them strictly in order, one beat per cycle while
the receiver takes them. For burst ``b`` accepted in cycle ``a`` (ideal timing):

* it is loaded into the DRAM's beat generator at the edge ``L = max(a + 2, V + 1)``, ``V``
  the cycle in which the previous burst's last beat became visible;
* its first beat is visible (RVALID) from ``max(L + 1, C + 1)``, ``C`` the cycle in which the
  previous burst's last beat was taken; each further beat the cycle after the previous one
  was taken (so a burst taken at full rate leaves one idle cycle before the next, and a
  last beat that waits hides that cycle).

The receiver decides when each beat is taken (:meth:`Reader.consume`): the command processor
takes one per cycle; the DMA may hold beats while a local memory's write port is busy.

Write path. The arbiter grants the write channels to one manager from its AW request to its
WLAST (registered: the grant decided in cycle ``g`` takes effect in ``g + 1``). The DRAM takes
one burst at a time: AW while idle, W beats, then B, then idle again.

The timing parameters are :class:`sw.dram.DramTiming`'s (the DRAM model's plusargs): read
latency (a burst may be fetched ``read_latency - 2`` edges after its AR handshake: with the
minimum 3, the schedule above) and write latency (a B response is due ``write_latency``
cycles after the last W beat) are modelled; the bandwidth limit and random backpressure plug
into :meth:`ReadChannel._serve` and :meth:`WriteChannel._arbitrate` (see
:func:`check_timing`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from hw.config import NPUConfig, next_pow2
from sw.dram import CHANNELS, MIN_READ_LATENCY, MIN_WRITE_LATENCY, DramTiming
from sw.perf.events import ARBITRATE, DECIDE, UPDATE, EventQueue

__all__ = ["DRAM_READ_QUEUE", "dram_read_queue", "DMA", "CP", "ReadChannel", "ServedBurst",
           "Reader", "WriteChannel", "WriteGrant", "Writer", "check_timing"]

#: Read bursts the DRAM model queues at least (ARREADY falls when full; :func:`dram_read_queue`).
DRAM_READ_QUEUE = 16


def dram_read_queue(config: NPUConfig) -> int:
    """Read bursts (and write bursts awaiting B) that the co-simulation's DRAM model queues for
    ``config`` (``dram.sv``'s ``OUTSTANDING``, set by ``cosim.build``): :data:`DRAM_READ_QUEUE`,
    or the next power of two above ``dma_outstanding`` plus the command fetch when that is
    more, so that the queue never holds the DMA below its own limit."""
    return max(DRAM_READ_QUEUE, next_pow2(config.dma_outstanding + 1))
#: AXI manager indices (IDs) on the NPU's memory port: the DMA and the command processor.
DMA, CP = 0, 1


def check_timing(timing: DramTiming) -> DramTiming:
    """The DRAM timing the model runs: read and write latency are modelled (closed forms of
    ``cosim/tb/dram.sv``: a burst may be fetched ``read_latency - 2`` edges after its AR, a B
    response is due ``write_latency`` cycles after the last W beat); a bandwidth limit and
    random backpressure are not yet.

    Raises
    ------
    NotImplementedError
        For ``bytes_per_cycle`` or a stall probability.
    """
    stalls = [ch for ch in CHANNELS if getattr(timing, f"{ch}_stall")]
    if timing.bytes_per_cycle is not None or stalls:
        raise NotImplementedError(
            f"DRAM timing {timing.name!r}: the performance model times read and write latency "
            f"only, not a bandwidth limit or random backpressure ({', '.join(stalls) or 'bw'})")
    return timing


class Reader(Protocol):
    def consume(self, burst: ServedBurst) -> tuple[int, int]:
        """Given ``burst.v0`` (its first beat visible), return ``(V, C)``: the cycle its last
        beat becomes visible and the cycle it is taken."""
        ...

    def burst_done(self, burst: ServedBurst) -> None:
        """Called in the cycle after the last beat was taken (DECIDE phase)."""
        ...


class ServedBurst:
    """A read burst the DRAM accepted. ``v0``/``v_last``/``c_last`` are its schedule (may be
    recomputed while in the future, see :meth:`ReadChannel.reschedule`)."""

    __slots__ = ("mgr", "beats", "owner", "tag", "accept", "load", "v0", "v_last", "c_last",
                 "version", "done")

    def __init__(self, mgr: int, beats: int, owner: Reader, tag, accept: int) -> None:
        self.mgr, self.beats, self.owner, self.tag, self.accept = mgr, beats, owner, tag, accept
        self.load = self.v0 = self.v_last = self.c_last = 0
        self.version = 0
        self.done = False


class _ReadRequest:
    __slots__ = ("mgr", "start", "beats", "owner", "tag", "on_grant")

    def __init__(self, mgr, start, beats, owner, tag, on_grant):
        self.mgr, self.start, self.beats, self.owner = mgr, start, beats, owner
        self.tag, self.on_grant = tag, on_grant


class ReadChannel:
    """AR arbitration, the DRAM's read queue (``queue`` bursts) and its R channel."""

    def __init__(self, eq: EventQueue, timing: DramTiming, queue: int = DRAM_READ_QUEUE) -> None:
        self.eq = eq
        self.queue = queue
        self.timing = check_timing(timing)
        #: edges from the AR handshake to the first at which the burst may be fetched, less 1
        self._fetch_after = timing.read_latency - MIN_READ_LATENCY + 2
        self.pending: dict[int, _ReadRequest] = {}
        self.ar_last = 0
        self.locked: int | None = None
        self.bursts: list[ServedBurst] = []    # accepted and not yet fully taken, DRAM order
        self._prev_v = -(1 << 60)               # last burst's V and C (of the newest burst)
        self._prev_c = -(1 << 60)
        self._arb_at: set[int] = set()

    # -- AR -------------------------------------------------------------------------------

    def request(self, mgr: int, start: int, beats: int, owner: Reader, tag, on_grant) -> None:
        """Manager ``mgr`` drives ARVALID from cycle ``start`` for a burst of ``beats``;
        ``on_grant(cycle, served)`` is called in the cycle of the AR handshake."""
        self.pending[mgr] = _ReadRequest(mgr, start, beats, owner, tag, on_grant)
        self._arbitrate_at(max(start, self.eq.now))

    def _arbitrate_at(self, c: int) -> None:
        if c not in self._arb_at:
            self._arb_at.add(c)
            self.eq.at(c, ARBITRATE, self._arbitrate, c)

    def _arbitrate(self, c: int) -> None:
        self._arb_at.discard(c)
        ready = [m for m, r in self.pending.items() if r.start <= c]
        if not ready:
            return
        if len(ready) == 1:
            pick = ready[0]
        elif self.locked is not None and self.locked in ready:
            pick = self.locked
        else:
            pick = (self.ar_last + 1) % 2
        if self._queue_full(c):
            self.locked = pick
            self._arbitrate_at(c + 1)
            return
        self.locked = None
        self.ar_last = pick
        req = self.pending.pop(pick)
        served = ServedBurst(pick, req.beats, req.owner, req.tag, c)
        self._serve(served)
        self.bursts.append(served)
        req.on_grant(c, served)
        if len(ready) > 1:
            self._arbitrate_at(c + 1)

    def _queue_full(self, c: int) -> bool:
        if len(self.bursts) < self.queue:
            return False
        queued = sum(1 for b in self.bursts if b.accept < c and b.load > c)
        return queued >= self.queue

    # -- R --------------------------------------------------------------------------------

    def _serve(self, b: ServedBurst) -> None:
        """Schedule burst ``b`` behind the newest one."""
        b.load = max(b.accept + self._fetch_after, self._prev_v + 1)
        b.v0 = max(b.load + 1, self._prev_c + 1)
        b.v_last, b.c_last = b.owner.consume(b)
        self._prev_v, self._prev_c = b.v_last, b.c_last
        self.eq.at(b.c_last + 1, DECIDE, self._done, b, b.version)

    def _done(self, b: ServedBurst, version: int) -> None:
        if version != b.version or b.done:
            return
        b.done = True
        self.bursts.remove(b)
        b.owner.burst_done(b)

    def reschedule(self, first: ServedBurst) -> None:
        """Recompute the schedule of ``first`` and of every burst behind it (their receiver's
        timing changed in the future)."""
        i = self.bursts.index(first)
        for k, b in enumerate(self.bursts[i:]):
            if k:   # ``first`` keeps its load edge and first beat: they depend on the past
                prev = self.bursts[i + k - 1]
                b.load = max(b.accept + self._fetch_after, prev.v_last + 1)
                b.v0 = max(b.load + 1, prev.c_last + 1)
            b.v_last, b.c_last = b.owner.consume(b)
            b.version += 1
            self.eq.at(b.c_last + 1, DECIDE, self._done, b, b.version)
        last = self.bursts[-1]
        self._prev_v, self._prev_c = last.v_last, last.c_last


@dataclass
class WriteGrant:
    """A write burst granted the channels: AW handshake in ``aw``; the writer then gives its W
    beats, the last in ``w_last``; B in ``b``."""
    mgr: int
    tag: object
    aw: int
    w_last: int = 0
    b: int = 0


class Writer(Protocol):
    def write_beats(self, grant: WriteGrant) -> int:
        """W beats of the granted burst from ``grant.aw + 1`` on; return the cycle of the
        last (WLAST) handshake."""
        ...

    def response(self, grant: WriteGrant) -> None:
        """Called in the cycle after the B handshake (``grant.b``)."""
        ...


class WriteChannel:
    """The write arbiter and the DRAM's write FSM."""

    def __init__(self, eq: EventQueue, timing: DramTiming) -> None:
        self.eq = eq
        check_timing(timing)
        self.b_after = timing.write_latency      #: last W beat to B (cycles)
        self.pending: dict[int, tuple[int, Writer, object]] = {}
        self.last_owner = 0
        self.free_from = 0         # first cycle the arbiter can decide a grant
        self.idle_from = 0         # first cycle the DRAM is in W_IDLE
        self._arb_at: set[int] = set()

    def request(self, mgr: int, start: int, writer: Writer, tag) -> None:
        """Manager ``mgr`` drives AWVALID from cycle ``start``."""
        self.pending[mgr] = (start, writer, tag)
        self._arbitrate_at(max(start, self.free_from, self.eq.now))

    def _arbitrate_at(self, c: int) -> None:
        if c not in self._arb_at:
            self._arb_at.add(c)
            self.eq.at(c, ARBITRATE, self._arbitrate, c)

    def _arbitrate(self, c: int) -> None:
        self._arb_at.discard(c)
        if c < self.free_from:
            self._arbitrate_at(self.free_from)
            return
        ready = [m for m, (start, _, _) in self.pending.items() if start <= c]
        if not ready:
            return
        pick = next(m for m in ((self.last_owner + 1) % 2, self.last_owner) if m in ready)
        _, writer, tag = self.pending.pop(pick)
        grant = WriteGrant(pick, tag, aw=max(c + 1, self.idle_from))
        grant.w_last = writer.write_beats(grant)
        grant.b = grant.w_last + self.b_after
        self.free_from = grant.w_last + 1
        self.idle_from = grant.w_last + 1 + MIN_WRITE_LATENCY     # one idle (turn) cycle
        self.last_owner = pick
        self.eq.at(grant.b + 1, UPDATE, writer.response, grant)
        if self.pending:
            self._arbitrate_at(self.free_from)
