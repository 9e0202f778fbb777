"""Beat-by-beat timing of the DRAM's R and W data channels, for DRAM timings where a closed form
per burst does not hold: random backpressure on R or W, or a bandwidth limit.

``cosim/tb/dram.sv`` loads an R beat (RVALID from the next cycle) at an edge where the beat
generator has a burst, the previous beat was taken or RVALID is low, R is not withheld
(``stall[CH_R]``) and the token bucket holds a beat (``tok_ok``); it takes a W beat at an edge
with WVALID, W_DATA, W not withheld and ``tok_ok``. R and W share the bucket, so with a
bandwidth limit the two channels' beats depend on each other, cycle by cycle.

:class:`BeatScheduler` times every beat of the read bursts the DRAM has accepted and of the
write burst it is taking, as events do not: in cycle order, each beat at the first edge its
conditions hold (:class:`sw.perf.draws.StallDraws` for the withheld cycles, :class:`TokenBucket`
for the tokens), jumping from beat to beat. Its schedules are of the future and change when
something new arrives -- a read burst accepted, a write burst granted, a receiver that will
hold a beat longer (a local-memory port write) -- always at or after a cycle ``t`` later
than the current one. Then it *rewinds* both channels to ``t`` (keeps every beat before ``t``,
which cannot change) and times the rest again; the receivers and the writer rewind their own
per-beat state with it. Without a bandwidth limit the channels are independent and only the
changed one is retimed.

Most R beats are *plain*: their receiver takes them the cycle they become visible
(:meth:`sw.perf.memory.Reader.r_plain`: the command fetch always, the DMA load while its
beats are one step each and the local memory's write port is free). Up to the next W beat
that could compete for the tokens, a run of plain beats is timed in one loop
(:meth:`_ReadCursor.run`), and in closed form when only the bucket spaces them
(:func:`_bucket_run`): the same edges as beat after beat.
"""

from __future__ import annotations

from bisect import bisect_left

from sw.dram import DramTiming
from sw.perf.draws import BLOCK, LOG_BLOCK, StallDraws

__all__ = ["TokenBucket", "BeatScheduler"]

_NEVER = 1 << 62


class TokenBucket:
    """The DRAM model's bandwidth limit, in ``1 / den`` bytes (``dram.sv``: ``tokens``).

    ``tokens`` is ``cap = beat + num`` at reset; each cycle ``tokens <- min(cap, tokens + num -
    k * beat)`` with ``k`` the beats (R and W) taken at that edge; a beat may go at an edge
    with ``tokens >= beat``. ``num / den`` is :attr:`DramTiming.bw_fraction` (bytes per cycle),
    ``beat`` the bus width in bytes times ``den``.

    The takes are kept as ``(cycle, tokens left after its takes)``, in cycle order; between
    takes the level is closed-form.
    """

    def __init__(self, timing: DramTiming, beat_bytes: int) -> None:
        num, den = timing.bw_fraction
        self.num = num
        self.beat = beat_bytes * den
        self.cap = self.beat + num
        self.cycles = [-1]                  # a virtual take before cycle 0: tokens_0 = cap
        self.left = [self.cap - num]

    def level(self, c: int) -> int:
        """Tokens in cycle ``c`` (after the last recorded take, which must be before ``c``)."""
        return min(self.cap, self.left[-1] + (c - self.cycles[-1]) * self.num)

    def first_ok(self, x: int) -> int:
        """The first cycle ``>= x`` with a beat of tokens, if nothing is taken before it
        (``x`` after the last recorded take)."""
        need = self.beat - self.left[-1]
        if need <= 0:
            return x
        return max(x, self.cycles[-1] + -(-need // self.num))

    def take(self, c: int, beats: int) -> None:
        """``beats`` (1 or 2) beats go at the edge of cycle ``c`` (after every recorded take)."""
        level = self.level(c)
        self.cycles.append(c)
        self.left.append(level - beats * self.beat)

    def rewind(self, t: int) -> None:
        """Forget the takes of cycles ``>= t``."""
        i = max(1, bisect_left(self.cycles, t))
        del self.cycles[i:]
        del self.left[i:]


class BeatScheduler:
    """Times the R beats of :attr:`reads` (a :class:`sw.perf.memory.ReadChannel`, if it is
    beat-timed) and the W beats of :attr:`writes` (a :class:`sw.perf.memory.WriteChannel`) beat
    by beat, against the DRAM's backpressure and bandwidth limit.

    Parameters
    ----------
    eq : EventQueue
    timing : DramTiming
    beat_bytes : int
        Bus width (bytes per beat); needed for a bandwidth limit.
    """

    def __init__(self, eq, timing: DramTiming, beat_bytes: int | None) -> None:
        self.eq = eq
        self.r_draws = StallDraws(timing, "r")
        self.w_draws = StallDraws(timing, "w")
        self.bucket = None
        if timing.bytes_per_cycle is not None:
            if beat_bytes is None:
                raise ValueError("a DRAM bandwidth limit needs the bus width (beat_bytes)")
            self.bucket = TokenBucket(timing, beat_bytes)
        self.reads = None       #: the ReadChannel (set by it when it times beat by beat)
        self.writes = None      #: the WriteChannel (set by it when it times beat by beat)
        self.retimes = 0        #: retimings so far (validate reports them with the speed)

    @property
    def coupled(self) -> bool:
        """Whether R and W share a bandwidth limit (then a change of one retimes both)."""
        return self.bucket is not None

    # -- changes ------------------------------------------------------------------------------

    def reads_changed(self, t: int, retake: bool = False) -> None:
        """The read side changed from cycle ``t`` on (a burst accepted, or with ``retake`` a
        receiver that may take its beats later from ``t``): retime."""
        self._retime(t, True, self.coupled, retake)

    def writes_changed(self, t: int) -> None:
        """A write burst was granted; its first W beat is at ``t`` or later: retime."""
        self._retime(t, self.coupled, True, False)

    # -- the merged walk ----------------------------------------------------------------------

    def _retime(self, t: int, do_r: bool, do_w: bool, retake: bool) -> None:
        reads = self.reads if do_r else None
        writes = self.writes if do_w else None
        if reads is None and writes is None:
            return
        self.retimes += 1
        bucket = self.bucket
        if bucket is not None:
            bucket.rewind(t)
        r = _ReadCursor(reads, t, retake) if reads is not None else None
        w = _WriteCursor(writes, t) if writes is not None else None
        r_draws, w_draws = self.r_draws, self.w_draws
        # nothing before t changes, so no beat still to time goes before t
        xr = max(t, r.candidate()) if r is not None else _NEVER
        xw = max(t, w.candidate()) if w is not None else _NEVER
        while xr < _NEVER or xw < _NEVER:
            if xw == _NEVER or xr < xw:
                # no W beat can go before xw: the R beats before it go alone, in a run
                cr = bucket.first_ok(xr) if bucket is not None else xr
                cr = r_draws.next_free(cr)
                if cr < xw:
                    xr = r.run(cr, xw, bucket, r_draws)
                    continue
            if bucket is not None:
                cr = r_draws.next_free(bucket.first_ok(xr)) if xr < _NEVER else _NEVER
                cw = w_draws.next_free(bucket.first_ok(xw)) if xw < _NEVER else _NEVER
            else:
                cr = r_draws.next_free(xr) if xr < _NEVER else _NEVER
                cw = w_draws.next_free(xw) if xw < _NEVER else _NEVER
            c = min(cr, cw)
            if bucket is not None:
                bucket.take(c, (cr == c) + (cw == c))
            if cr == c:
                xr = r.load(c)
            elif xr < _NEVER:
                xr = max(xr, c + 1)     # not loadable up to c; the tokens after c changed
            if cw == c:
                xw = w.take(c)
            elif xw < _NEVER:
                xw = max(xw, c + 1)
        if r is not None:
            reads.beats_timed(r.touched)
        if w is not None:
            writes.beats_timed()


class _ReadCursor:
    """Walks the R beats of a beat-timed ReadChannel's accepted bursts in DRAM order."""

    def __init__(self, reads, t: int, retake: bool) -> None:
        self.reads = reads
        self.bursts = bursts = reads.bursts
        self.touched: list = []
        bi, n = len(bursts), 0
        for k, b in enumerate(bursts):
            j = bisect_left(b.loads, t)
            if j < b.beats:
                bi, n = k, j
                break
        self.bi, self.i = bi, n
        if bi < len(bursts):
            for k, b in enumerate(bursts[bi:]):
                keep = n if k == 0 else 0
                del b.loads[keep:]
                del b.takes[keep:]
                self.touched.append(b)
        if retake:
            self._retake(t)

    def _retake(self, t: int) -> None:
        """The beat before the cursor was loaded before ``t``; if it is taken at ``t`` or
        later, its receiver times it again."""
        bi, i = self.bi, self.i
        if i == 0:
            if bi == 0:
                return
            bi -= 1
            i = self.bursts[bi].beats
        b = self.bursts[bi]
        j = i - 1
        if b.takes[j] >= t:
            b.takes[j] = b.owner.r_take(b, j, b.loads[j] + 1)
            if b not in self.touched:
                self.touched.insert(0, b)

    def candidate(self) -> int:
        """The first edge at which the next beat could be loaded (beat generator and
        receiver), or never."""
        if self.bi >= len(self.bursts):
            return _NEVER
        b = self.bursts[self.bi]
        if self.i:
            return b.takes[self.i - 1]
        if self.bi:
            prev = self.bursts[self.bi - 1]
            pv, pc = prev.loads[-1] + 1, prev.takes[-1]
        else:
            pv, pc = self.reads.tail
        b.load = max(b.accept + self.reads.fetch_after, pv + 1)
        return max(b.load, pc)

    def run(self, c: int, limit: int, bucket: TokenBucket | None, draws: StallDraws) -> int:
        """Load the next beat at edge ``c`` and, while its receiver takes them the cycle they
        are visible (:meth:`sw.perf.memory.Reader.r_plain`), the beats after it of its burst
        at the first edge each may be loaded (the beat before taken, a token, R not withheld),
        as long as that edge is before ``limit`` (no W beat goes before it, so the R beats
        alone take the tokens). Returns the next candidate.

        The same as :meth:`load` beat after beat (with ``bucket.take(c, 1)`` before each), in
        one loop."""
        b = self.bursts[self.bi]
        i = self.i
        plain = getattr(b.owner, "r_plain", None)
        j, h = plain(b, i, c + 1) if plain is not None else (i, 0)
        if j == i or c + 1 >= h:
            if bucket is not None:
                bucket.take(c, 1)
            return self.load(c)
        if h <= limit:
            limit = h - 1                       # beats visible before h: loaded before h - 1
        i0 = i
        if bucket is None:
            i = _plain_beats(b.loads, b.takes, c, i, j, limit, draws)
        else:
            i = _plain_beats_bucket(b.loads, b.takes, c, i, j, limit, draws, bucket)
        b.owner.r_plain_taken(b, i0, i, b.takes[-1])
        if i == b.beats:
            self.bi += 1
            self.i = 0
        else:
            self.i = i
        return self.candidate()

    def load(self, c: int) -> int:
        """Load the next beat at edge ``c`` (visible from ``c + 1``); its receiver says when it
        takes it. Returns the next candidate."""
        b = self.bursts[self.bi]
        b.loads.append(c)
        b.takes.append(b.owner.r_take(b, self.i, c + 1))
        self.i += 1
        if self.i == b.beats:
            self.bi += 1
            self.i = 0
        return self.candidate()


class _WriteCursor:
    """Walks the W beats of the write burst a beat-timed WriteChannel is taking."""

    def __init__(self, writes, t: int) -> None:
        self.g = g = writes.current
        self.x = _NEVER
        if g is None:
            return
        n = bisect_left(g.ws, t)
        if n < len(g.ws):
            del g.ws[n:]
            g.writer.w_rewind(g, n, t)
        if n < g.beats:
            self.x = self._next()

    def _next(self) -> int:
        g = self.g
        n = len(g.ws)
        x = g.writer.w_valid(g, n)
        return max(x, g.aw + 1, g.ws[-1] + 1 if n else 0)

    def candidate(self) -> int:
        return self.x

    def take(self, c: int) -> int:
        g = self.g
        g.writer.w_taken(g, len(g.ws), c)
        g.ws.append(c)
        self.x = self._next() if len(g.ws) < g.beats else _NEVER
        return self.x


def _plain_beats(loads: list[int], takes: list[int], c: int, i: int, j: int, limit: int,
                 draws: StallDraws) -> int:
    """:meth:`_ReadCursor.run` without a bandwidth limit: beat ``i`` loaded at edge ``c``
    and taken when visible, each next one at the first edge R is not withheld after that,
    up to beat ``j`` or an edge at ``limit``; returns the beat after the last one loaded."""
    stalls = draws.active
    cur, base, end = b"", 0, -1                 # the block of draws at hand: [base, end)
    while True:
        loads.append(c)
        c += 1
        takes.append(c)
        i += 1
        if i == j:
            return i
        # draws.next_free(c), looked up in the block at hand
        if stalls and (c >= end or cur[c - base]):
            k = cur.find(0, c - base) if c < end else -1
            if k >= 0:
                c = base + k
            else:
                c = draws.next_free(c)
                base = c >> LOG_BLOCK << LOG_BLOCK
                cur, end = draws.blocks[c >> LOG_BLOCK], base + BLOCK
        if c >= limit:
            return i


def _plain_beats_bucket(loads: list[int], takes: list[int], c: int, i: int, j: int,
                        limit: int, draws: StallDraws, bucket: TokenBucket) -> int:
    """:func:`_plain_beats` with the token bucket: each beat takes a beat of tokens
    (:meth:`TokenBucket.take`) and the next goes no earlier than the bucket holds one again
    (:meth:`TokenBucket.first_ok`)."""
    stalls = draws.active
    cur, base, end = b"", 0, -1                 # the block of draws at hand: [base, end)
    num, beat, cap = bucket.num, bucket.beat, bucket.cap
    cycles, left = bucket.cycles, bucket.left
    lc, ll = cycles[-1], left[-1]
    if not stalls and num < beat:
        return _bucket_run(loads, takes, c, i, j, limit, bucket)
    while True:
        level = ll + (c - lc) * num             # TokenBucket.take(c, 1)
        if level > cap:
            level = cap
        lc, ll = c, level - beat
        cycles.append(c)
        left.append(ll)
        loads.append(c)
        c += 1                                  # taken when visible: the next beat's edge
        takes.append(c)
        i += 1
        if i == j:
            return i
        need = beat - ll                        # TokenBucket.first_ok(c)
        if need > 0:
            ok = lc + -(-need // num)
            if ok > c:
                c = ok
        # draws.next_free(c), looked up in the block at hand
        if stalls and (c >= end or cur[c - base]):
            k = cur.find(0, c - base) if c < end else -1
            if k >= 0:
                c = base + k
            else:
                c = draws.next_free(c)
                base = c >> LOG_BLOCK << LOG_BLOCK
                cur, end = draws.blocks[c >> LOG_BLOCK], base + BLOCK
        if c >= limit:
            return i


def _bucket_run(loads: list[int], takes: list[int], c: int, i: int, j: int, limit: int,
                bucket: TokenBucket) -> int:
    """:func:`_plain_beats_bucket` without R backpressure and with a bucket that fills more
    slowly than a beat per cycle (``num < beat``), in closed form.

    With ``A`` the tokens at edge ``c`` (capped), the ``k``-th beat after the one at ``c``
    goes at ``c_k = c + ceil(((k + 1) * beat - A) / num)``: the first edge with a beat of
    tokens left after the ``k`` takes before it. That is the loop's ``max(c_{k-1} + 1,
    first_ok)``: these edges are more than a cycle apart (``beat / num > 1``) and ``c_1 >= c
    + 1`` (``A <= cap = beat + num < 2 * beat``); and the bucket is below its cap at each of
    them (a cycle earlier it held less than a beat), so the tokens left are ``A + (c_k - c)
    * num - (k + 1) * beat``. Beats up to ``j`` whose edge is before ``limit``."""
    num, beat = bucket.num, bucket.beat
    a = bucket.cycles[-1]
    level = bucket.left[-1] + (c - a) * num
    if level > bucket.cap:
        level = bucket.cap
    n = j - i
    if limit < _NEVER:        # c_k < limit  <=>  (k + 1) * beat <= (limit - c - 1) * num + A
        n = min(n, max(1, ((limit - c - 1) * num + level) // beat))
    edges = [c]
    edges += [c + -(-((k + 1) * beat - level) // num) for k in range(1, n)]
    loads += edges
    takes += [e + 1 for e in edges]
    bucket.cycles += edges
    bucket.left += [level + (e - c) * num - (k + 1) * beat for k, e in enumerate(edges)]
    return i + n
