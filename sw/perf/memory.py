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

The timing parameters are :class:`sw.dram.DramTiming`'s (the DRAM model's plusargs), all
modelled:

* read latency: a burst may be fetched ``read_latency - 2`` edges after its AR handshake (with
  the minimum 3, the schedule above); write latency: a B response is due ``write_latency``
  cycles after the last W beat;
* random backpressure (:class:`sw.perf.draws.StallDraws`, the model's own draws): ARREADY low
  holds the AR (the arbiter stays locked on it), AWREADY low the AW, BVALID low the B
  response (B responses go in order, one per cycle); RVALID and WREADY low hold beats;
* the bandwidth limit, a token bucket R and W share.

With neither R nor W backpressure nor a bandwidth limit a burst's beats follow in closed form
(``Reader.consume``, ``WriteChannel`` below); otherwise :class:`sw.perf.beats.BeatScheduler`
times them beat by beat (``Reader.r_take``), and, with a bandwidth limit, R and W together.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from hw.config import NPUConfig, next_pow2
from sw.dram import MIN_READ_LATENCY, MIN_WRITE_LATENCY, DramTiming
from sw.perf.beats import BeatScheduler
from sw.perf.draws import StallDraws
from sw.perf.events import ARBITRATE, DECIDE, UPDATE, EventQueue, Waker
from sw.perf.ledger import Item

__all__ = ["DRAM_READ_QUEUE", "DRAM_WRITE_QUEUE", "dram_read_queue", "DMA", "CP", "WALK_LOAD",
           "WALK_STORE", "ReadChannel",
           "ServedBurst", "Reader", "WriteChannel", "WriteGrant", "Writer", "BeatScheduler",
           "check_timing", "beat_timed"]

#: Read bursts the DRAM model queues at least (ARREADY falls when full; :func:`dram_read_queue`).
DRAM_READ_QUEUE = 16
#: Write bursts awaiting their B response the DRAM model holds at least (AWREADY falls when
#: full; the same ``OUTSTANDING`` as the read queue, :func:`dram_read_queue`).
DRAM_WRITE_QUEUE = DRAM_READ_QUEUE


def dram_read_queue(config: NPUConfig) -> int:
    """Read bursts (and write bursts awaiting B) that the co-simulation's DRAM model queues for
    ``config`` (``dram.sv``'s ``OUTSTANDING``, set by ``cosim.build``): :data:`DRAM_READ_QUEUE`,
    or the next power of two above ``dma_outstanding`` plus the command fetch when that is
    more, so that the queue never holds the DMA below its own limit."""
    return max(DRAM_READ_QUEUE, next_pow2(config.dma_outstanding + 1))
#: AXI manager indices (IDs) on the NPU's memory port: the DMA, the command processor and,
#: with translation hardware (``tlb_entries > 0``), the page walkers of the DMA's channels.
DMA, CP, WALK_LOAD, WALK_STORE = 0, 1, 2, 3

_NEG = -(1 << 60)


def check_timing(timing: DramTiming) -> DramTiming:
    """The DRAM timing the model runs: every parameter of :class:`DramTiming` is modelled (see
    the module docstring), so this returns ``timing``.

    Raises
    ------
    TypeError
        If ``timing`` is not a :class:`DramTiming`.
    """
    if not isinstance(timing, DramTiming):
        raise TypeError(f"expected a DramTiming, got {type(timing).__name__}")
    return timing


def beat_timed(timing: DramTiming, channel: str) -> bool:
    """Whether the beats of ``channel`` (``"r"`` or ``"w"``) are timed one by one: with
    backpressure on that channel or a bandwidth limit."""
    return timing.bytes_per_cycle is not None or timing.stall(channel) > 0


class Reader(Protocol):
    def consume(self, burst: ServedBurst) -> tuple[int, int]:
        """Closed-form timing (beats follow back to back): given ``burst.v0`` (its first beat
        visible), return ``(V, C)``: the cycle its last beat becomes visible and the cycle it
        is taken."""
        ...

    def r_take(self, burst: ServedBurst, i: int, visible: int) -> int:
        """Beat-by-beat timing: beat ``i`` of ``burst`` is visible (RVALID) from cycle
        ``visible``; return the cycle it is taken (RREADY). Beats ``>= i`` timed before are
        forgotten (they are being retimed)."""
        ...

    def r_plain(self, burst: ServedBurst, i: int, visible: int) -> tuple[int, int]:
        """Beat-by-beat timing, the fast path (optional: a reader without it has every beat
        timed by :meth:`r_take`): ``(j, h)`` such that, beat ``i`` visible from ``visible``,
        each of beats ``i .. j - 1`` visible from a cycle before ``h`` is taken in that very
        cycle -- what :meth:`r_take` would answer. ``j == i`` when beat ``i`` may not be.
        Changes nothing: the beats so timed are reported by :meth:`r_plain_taken`."""
        ...

    def r_plain_taken(self, burst: ServedBurst, i: int, j: int, last: int) -> None:
        """Beats ``i .. j - 1`` were taken as :meth:`r_plain` said, the last in ``last``:
        the state :meth:`r_take` keeps, as if it had taken them one by one."""
        ...

    def burst_done(self, burst: ServedBurst) -> None:
        """Called in the cycle after the last beat was taken (DECIDE phase)."""
        ...


class ServedBurst:
    """A read burst the DRAM accepted. ``v0``/``v_last``/``c_last`` are its schedule (may be
    recomputed while in the future, see :meth:`ReadChannel.reschedule`). Beat by beat (see
    :func:`beat_timed`), ``loads[i]`` is the edge at which beat ``i`` is loaded (visible from
    ``loads[i] + 1``) and ``takes[i]`` the cycle it is taken; otherwise both are None."""

    __slots__ = ("mgr", "beats", "owner", "tag", "accept", "load", "v0", "v_last", "c_last",
                 "version", "done", "loads", "takes")

    def __init__(self, mgr: int, beats: int, owner: Reader, tag, accept: int,
                 beatwise: bool = False) -> None:
        self.mgr, self.beats, self.owner, self.tag, self.accept = mgr, beats, owner, tag, accept
        self.load = self.v0 = self.v_last = self.c_last = 0
        self.version = 0
        self.done = False
        self.loads: list[int] | None = [] if beatwise else None
        self.takes: list[int] | None = [] if beatwise else None

    def taken_in(self, lo: int, hi: int) -> int:
        """Beats taken (R handshakes) in cycles ``lo <= c < hi``."""
        if self.takes is None:
            # back to back: beats are taken in cycles v0 .. c_last, one per cycle, only
            # for a receiver that takes one per cycle (the command processor)
            return max(0, min(self.c_last + 1, hi) - max(self.v0, lo))
        return bisect_left(self.takes, hi) - bisect_left(self.takes, lo)

    def rvalid_spans(self) -> list[tuple[int, int]]:
        """Cycles ``[a, b)`` with one of its beats visible (RVALID), in order."""
        if self.takes is None:
            return [(self.v0, self.c_last + 1)]
        out: list[list[int]] = []
        for e, c in zip(self.loads, self.takes, strict=True):
            if out and out[-1][1] == e + 1:
                out[-1][1] = c + 1
            else:
                out.append([e + 1, c + 1])
        return [(a, b) for a, b in out]


class _ReadRequest:
    __slots__ = ("mgr", "start", "beats", "owner", "tag", "on_grant")

    def __init__(self, mgr, start, beats, owner, tag, on_grant):
        self.mgr, self.start, self.beats, self.owner = mgr, start, beats, owner
        self.tag, self.on_grant = tag, on_grant


class ReadChannel:
    """AR arbitration, the DRAM's read queue (``queue`` bursts) and its R channel.

    Parameters
    ----------
    eq : EventQueue
    timing : DramTiming
    beats : BeatScheduler, optional
        Shared with the :class:`WriteChannel` when the beats are timed one by one (needed for
        a bandwidth limit); made here if not given.
    queue : int
        Read bursts the DRAM queues (:func:`dram_read_queue`).
    managers : int
        AXI managers of the arbiter (2, or 4 with the page walkers): its round-robin order.
    """

    def __init__(self, eq: EventQueue, timing: DramTiming,
                 beats: BeatScheduler | None = None, queue: int = DRAM_READ_QUEUE,
                 managers: int = 2) -> None:
        self.eq = eq
        self.queue = queue
        self.managers = managers
        self.timing = check_timing(timing)
        #: edges from the AR handshake to the first at which the burst may be fetched, less 1
        self.fetch_after = timing.read_latency - MIN_READ_LATENCY + 2
        self.ar_draws = StallDraws(timing, "ar")
        self._ar_stalls = self.ar_draws.active
        self.pending: dict[int, _ReadRequest] = {}
        self.ar_last = 0
        self.locked: int | None = None
        self.bursts: list[ServedBurst] = []    # accepted and not yet fully taken, DRAM order
        self._prev_v = _NEG                     # last burst's V and C (of the newest burst)
        self._prev_c = _NEG
        #: V and C of the last burst that left :attr:`bursts` (beat by beat)
        self.tail = (_NEG, _NEG)
        self._arbitrate_at = Waker(self.eq, self._arbitrate, ARBITRATE)
        self.beatwise = beat_timed(timing, "r")
        self.beats = None
        if self.beatwise:
            self.beats = beats if beats is not None else BeatScheduler(eq, timing, None)
            self.beats.reads = self

    # -- AR -------------------------------------------------------------------------------

    def request(self, mgr: int, start: int, beats: int, owner: Reader, tag, on_grant) -> None:
        """Manager ``mgr`` drives ARVALID from cycle ``start`` for a burst of ``beats``;
        ``on_grant(cycle, served)`` is called in the cycle of the AR handshake."""
        self.pending[mgr] = _ReadRequest(mgr, start, beats, owner, tag, on_grant)
        self._arbitrate_at(max(start, self.eq.now))

    def _arbitrate(self, c: int) -> None:
        pending = self.pending
        if len(pending) == 1:                   # the common case: one manager asks
            (pick, req), = pending.items()
            if req.start > c:
                return
            both = False
        else:
            ready = [m for m, r in pending.items() if r.start <= c]
            if not ready:
                return
            both = len(ready) > 1
            if not both:
                pick = ready[0]
            elif self.locked is not None and self.locked in ready:
                pick = self.locked
            else:
                n = self.managers
                pick = next(p for p in ((self.ar_last + k) % n for k in range(1, n + 1))
                            if p in ready)
            req = pending[pick]
        if len(self.bursts) >= self.queue and self._queue_full(c):
            self.locked = pick
            self._arbitrate_at(c + 1)
            return
        if self._ar_stalls:
            free = self.ar_draws.next_free(c)
            if free != c:                   # ARREADY withheld: the arbiter stays on it
                self.locked = pick
                self._arbitrate_at(free)
                return
        self.locked = None
        self.ar_last = pick
        del pending[pick]
        served = ServedBurst(pick, req.beats, req.owner, req.tag, c, self.beatwise)
        if self.beatwise:
            self.bursts.append(served)
            self.beats.reads_changed(self._first_load(served))
        else:
            self._serve(served)
            self.bursts.append(served)
        req.on_grant(c, served)
        if both:
            self._arbitrate_at(c + 1)

    def _first_load(self, b: ServedBurst) -> int:
        """The earliest edge at which the newest burst ``b``'s first beat can be loaded: the
        burst fetched, the previous one's last beat taken (beat by beat)."""
        if len(self.bursts) > 1:
            prev = self.bursts[-2]
            pv, pc = prev.loads[-1] + 1, prev.takes[-1]
        else:
            pv, pc = self.tail
        return max(b.accept + self.fetch_after, pv + 1, pc)

    def _queue_full(self, c: int) -> bool:
        queued = sum(1 for b in self.bursts if b.accept < c and b.load > c)
        return queued >= self.queue

    # -- R --------------------------------------------------------------------------------

    def _serve(self, b: ServedBurst) -> None:
        """Schedule burst ``b`` behind the newest one (back to back)."""
        b.load = max(b.accept + self.fetch_after, self._prev_v + 1)
        b.v0 = max(b.load + 1, self._prev_c + 1)
        b.v_last, b.c_last = b.owner.consume(b)
        self._prev_v, self._prev_c = b.v_last, b.c_last
        self.eq.at(b.c_last + 1, DECIDE, self._done, b, b.version)

    def _done(self, b: ServedBurst, version: int) -> None:
        if version != b.version or b.done:
            return
        b.done = True
        self.bursts.remove(b)
        self.tail = (b.v_last, b.c_last)
        b.owner.burst_done(b)

    def beats_timed(self, bursts: list[ServedBurst]) -> None:
        """:class:`BeatScheduler` (re)timed the beats of ``bursts``: update their schedule
        and completion events."""
        for b in bursts:
            b.v0, b.v_last = b.loads[0] + 1, b.loads[-1] + 1
            c_last = b.takes[-1]
            if c_last != b.c_last or not b.version:
                b.c_last = c_last
                b.version += 1
                self.eq.at(c_last + 1, DECIDE, self._done, b, b.version)

    def reschedule(self, first: ServedBurst, after: int | None = None) -> None:
        """Recompute the schedule of ``first`` and of every burst behind it: their receiver
        may take beats later from cycle ``after`` on (default: the next cycle; never before
        it)."""
        if self.beatwise:
            t = self.eq.now + 1 if after is None else max(after, self.eq.now + 1)
            self.beats.reads_changed(t, retake=True)
            return
        i = self.bursts.index(first)
        for k, b in enumerate(self.bursts[i:]):
            if k:   # ``first`` keeps its load edge and first beat: they depend on the past
                prev = self.bursts[i + k - 1]
                b.load = max(b.accept + self.fetch_after, prev.v_last + 1)
                b.v0 = max(b.load + 1, prev.c_last + 1)
            b.v_last, b.c_last = b.owner.consume(b)
            b.version += 1
            self.eq.at(b.c_last + 1, DECIDE, self._done, b, b.version)
        last = self.bursts[-1]
        self._prev_v, self._prev_c = last.v_last, last.c_last


@dataclass(eq=False)
class WriteGrant:
    """A write burst of ``beats`` granted the channels: AW handshake in ``aw``; the writer then
    gives its W beats (handshakes ``ws``), the last in ``w_last``; B in ``b``. Beat by beat
    these may change until they are past (``version`` counts the changes)."""
    mgr: int
    tag: object
    aw: int
    beats: int = 1
    writer: object = None
    w_last: int = 0
    b: int = 0
    ws: list = field(default_factory=list)
    version: int = 0


class Writer(Protocol):
    def w_begin(self, grant: WriteGrant) -> None:
        """The burst is granted (``grant.aw`` is its AW handshake)."""
        ...

    def w_valid(self, grant: WriteGrant, i: int) -> int:
        """The cycle from which beat ``i`` of the burst is valid (WVALID), given the W
        handshakes of beats ``< i`` (told by :meth:`w_taken`)."""
        ...

    def w_taken(self, grant: WriteGrant, i: int, cycle: int) -> None:
        """Beat ``i``'s W handshake is in ``cycle``."""
        ...

    def w_rewind(self, grant: WriteGrant, i: int, t: int) -> None:
        """Beats ``>= i`` are not taken after all (they were in cycle ``t`` or later): forget
        them and what followed from them (bandwidth limit only)."""
        ...

    def w_run(self, grant: WriteGrant, draws: StallDraws | None) -> None:
        """Optional, without a bandwidth limit: time every W beat of the burst at once, as
        the write channel would beat by beat (beat ``i`` at ``max(w_valid(i), previous + 1)``,
        the first after ``grant.aw``, then the first cycle ``draws`` does not withhold W;
        :meth:`w_taken` of each), appending the handshakes to ``grant.ws``."""
        ...

    def response(self, grant: WriteGrant) -> None:
        """Called in the cycle after the B handshake (``grant.b``)."""
        ...


class WriteChannel:
    """The write arbiter and the DRAM's write FSM and B queue.

    Parameters
    ----------
    eq : EventQueue
    timing : DramTiming
    beats : BeatScheduler, optional
        Shared with the :class:`ReadChannel` (needed for a bandwidth limit).
    queue : int
        Write bursts awaiting B the DRAM holds (:func:`dram_read_queue`).
    """

    def __init__(self, eq: EventQueue, timing: DramTiming,
                 beats: BeatScheduler | None = None, queue: int = DRAM_WRITE_QUEUE) -> None:
        self.eq = eq
        self.queue = queue
        check_timing(timing)
        self.b_after = timing.write_latency      #: last W beat to B (cycles)
        self.aw_draws = StallDraws(timing, "aw")
        self.w_draws = StallDraws(timing, "w")
        self.b_draws = StallDraws(timing, "b")
        self.pending: dict[int, tuple[int, Writer, object, int]] = {}
        self.last_owner = 0
        self.free_from = 0         # first cycle the arbiter can decide a grant
        self.idle_from = 0         # first cycle the DRAM is in W_IDLE
        self.current: WriteGrant | None = None    # the newest grant
        #: B handshakes of the grants before the newest (the B queue's occupancy)
        self._b_hist: deque[int] = deque(maxlen=queue)
        self._arbitrate_at = Waker(self.eq, self._arbitrate, ARBITRATE)
        self.beats = None
        if timing.bytes_per_cycle is not None:
            self.beats = beats if beats is not None else BeatScheduler(eq, timing, None)
            self.beats.writes = self

    def request(self, mgr: int, start: int, writer: Writer, tag, beats: int = 1) -> None:
        """Manager ``mgr`` drives AWVALID from cycle ``start`` for a burst of ``beats``."""
        self.pending[mgr] = (start, writer, tag, beats)
        self._arbitrate_at(max(start, self.free_from, self.eq.now))

    def _arbitrate(self, c: int) -> None:
        if c < self.free_from:
            self._arbitrate_at(self.free_from)
            return
        ready = [m for m, (start, _, _, _) in self.pending.items() if start <= c]
        if not ready:
            return
        pick = next(m for m in ((self.last_owner + 1) % 2, self.last_owner) if m in ready)
        _, writer, tag, beats = self.pending.pop(pick)
        if self.current is not None:
            self._b_hist.append(self.current.b)
        aw = max(c + 1, self.idle_from)
        if len(self._b_hist) == self.queue:      # B queue full until one leaves
            aw = max(aw, self._b_hist[0] + 1)
        grant = WriteGrant(pick, tag, aw=self.aw_draws.next_free(aw), beats=beats,
                           writer=writer)
        self.current = grant
        self.last_owner = pick
        writer.w_begin(grant)
        if self.beats is not None:
            self.beats.writes_changed(grant.aw + 1)
        else:
            draws = self.w_draws if self.w_draws.active else None
            run = getattr(writer, "w_run", None)
            if run is not None:
                run(grant, draws)
            else:
                w = grant.aw
                w_valid, w_taken, ws = writer.w_valid, writer.w_taken, grant.ws
                for i in range(beats):
                    w = max(w_valid(grant, i), w + 1)
                    if draws is not None:
                        w = draws.next_free(w)
                    w_taken(grant, i, w)
                    ws.append(w)
            self.beats_timed()

    def beats_timed(self) -> None:
        """The W beats of the newest grant are (re)timed: its B response, the next AW."""
        g = self.current
        if g is None or not g.ws:
            return
        w_last = g.ws[-1]
        if g.version and w_last == g.w_last:
            return
        g.w_last = w_last
        prev_b = self._b_hist[-1] if self._b_hist else _NEG
        g.b = self.b_draws.next_free(max(w_last + self.b_after, prev_b + 1))
        g.version += 1
        self.free_from = w_last + 1
        self.idle_from = w_last + 1 + MIN_WRITE_LATENCY     # one idle (turn) cycle
        self.eq.at(g.b + 1, UPDATE, self._respond, g, g.version)
        if self.pending:
            first = min(start for start, _, _, _ in self.pending.values())
            self._arbitrate_at(max(self.free_from, first))

    def _respond(self, g: WriteGrant, version: int) -> None:
        if version == g.version:
            g.writer.response(g)


class BurstBytes(Item):
    """``bytes_read`` of a served read burst (a command fetch burst, a walker's read): one
    beat of ``beat`` bytes per cycle in which the R channel takes one."""

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
