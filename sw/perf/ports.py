"""The write ports of the local memories, and how a low-priority writer waits for them.

Each local memory has one write port shared with a fixed priority (:func:`hw.tile.write_arbiter`):
the scratchpad's by the vector unit, then the DMA load channel; the accumulator's by the matrix
engine, then the vector unit (SOFTMAX reciprocal rows), then the DMA. High-priority writes are
pipelined and known in advance (an engine's write cycles follow from the cycle it took its
command), so each is a :class:`BusyList` of cycles; a lower-priority writer consults the union
of the lists above it.

:func:`walk` is the closed form of the DMA load channel against a port: a run of steps, one per
cycle, where every ``period``-th chunk completes a local row and must find the port free; a
chunk that finds it busy is held (its word and R beat with it, ``stall.load.spad`` / ``acc``)
until the port is free again, and everything behind it waits.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["BusyList", "walk", "first_free"]


class BusyList:
    """Cycles ``[a, b)`` in which writers of one priority level write a port, tagged by owner.

    Parameters
    ----------
    now : callable() -> int
        The current cycle; intervals that ended before it are dropped as new ones come.
    """

    def __init__(self, now: Callable[[], int]) -> None:
        self.now = now
        self.spans: list[tuple[int, int, object]] = []
        #: an upper bound of the spans' ends (no span ends after it)
        self.last_end = 0
        self.listeners: list[Callable[[int], None]] = []
        self.version = 0        #: changes with every add or remove (for caches of the spans)
        self._prune_at = 16     # prune ended spans when there are more than this many

    def add(self, a: int, b: int, owner: object = None) -> None:
        if b <= a:
            return
        if len(self.spans) > self._prune_at:
            t = self.now()
            self.spans = [s for s in self.spans if s[1] > t]
            self._prune_at = max(16, 2 * len(self.spans))
        self.spans.append((a, b, owner))
        if b > self.last_end:
            self.last_end = b
        self.version += 1
        for f in self.listeners:
            f(a)

    def remove(self, owner: object, after: int) -> None:
        """Drop ``owner``'s spans that start at or after ``after``; the listeners hear of it
        from the first dropped span's start (a lower-priority writer held by one must move
        back: a re-planned writer removes its spans, then adds them later)."""
        keep, first = [], None
        for s in self.spans:
            if s[2] is owner and s[0] >= after:
                first = s[0] if first is None else min(first, s[0])
            else:
                keep.append(s)
        self.spans = keep
        self.version += 1
        if first is not None:
            for f in self.listeners:
                f(first)


def merged(lists: list[BusyList], x: int) -> list[tuple[int, int]]:
    """Union of the spans of ``lists`` that end after cycle ``x``, sorted, adjacent ones
    joined."""
    spans = [(a, b) for lst in lists if lst.last_end > x for a, b, _ in lst.spans if b > x]
    if len(spans) < 2:
        return spans
    spans.sort()
    out = [spans[0]]
    for a, b in spans[1:]:
        pa, pb = out[-1]
        if a <= pb:
            if b > pb:
                out[-1] = (pa, b)
        else:
            out.append((a, b))
    return out


def first_free(busy: list[tuple[int, int]], x: int) -> int:
    """First cycle ``>= x`` that is in none of the merged spans ``busy``."""
    for a, b in busy:
        if b <= x:
            continue
        if a > x:
            return x
        x = b
    return x


def walk(x: int, n: int, period: int, phase: int, busy: list[tuple[int, int]],
         targets: tuple[int, ...], skip: int = 0,
         force: int | None = None) -> tuple[list[int], list[tuple[int, int]]]:
    """Time ``n`` steps that start at cycle ``x``, one per cycle, against a port.

    Step ``i`` needs the port iff ``i >= skip`` and ``(phase + i - skip) % period == period -
    1``, or ``i == force`` (the first ``skip`` steps move no chunk: the DMA's prime; ``force``:
    a chunk that completes a partial last local row); it is held while the port is busy
    (``busy``: merged spans, sorted). Returns the cycles at which the steps ``targets``
    (indices, ascending) go, and the hold intervals ``[a, b)`` (cycles a step waited, one step
    at a time).
    """
    out: list[int] = []
    holds: list[tuple[int, int]] = []
    ti = 0
    i = 0
    k = 0
    while ti < len(targets):
        while k < len(busy) and busy[k][1] <= x:
            k += 1
        if k == len(busy):
            a = b = None
        else:
            a, b = busy[k]
            if a < x:
                a = x
        # chunks i, i+1, ... go at x, x+1, ... until cycle a
        if a is None or i + (a - x) >= n:
            while ti < len(targets):
                out.append(x + targets[ti] - i)
                ti += 1
            break
        j = i + (a - x)                          # the step at cycle a
        jj = max(j, skip)
        p = jj + (period - 1 - (phase + jj - skip)) % period   # first step from j needing it
        if force is not None and j <= force < p:
            p = force
        tp = a + (p - j)
        if p < n and tp < b:                     # held from tp to b
            while ti < len(targets) and targets[ti] < p:
                out.append(x + targets[ti] - i)
                ti += 1
            holds.append((tp, b))
            i, x = p, b
        else:                                    # the busy span passes without a hold
            m = j + (b - a)
            while ti < len(targets) and targets[ti] < m:
                out.append(x + targets[ti] - i)
                ti += 1
            i, x = m, b
        k += 1
    return out, holds
