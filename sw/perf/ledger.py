"""Counting the hardware's performance counters from timed intervals, with exact snapshots.

Every counter of :data:`hw.isa.COUNTER_NAMES` counts, per cycle ``c``, an event or a
condition. The model records *when* things happen -- busy and stall intervals ``[a, b)``
(cycles ``a .. b - 1``), retirements and bytes at their handshake cycles -- as items of a
:class:`Ledger`. A snapshot in cycle ``s`` (the hardware's ``CNT_SNAPSHOT``) then holds, for
every counter, what happened in the cycles ``c < s``, exactly as the RTL counts it.

Items are folded into running totals at each snapshot; an item that is still in progress (a
DMA command whose later bursts are not scheduled yet) answers for the cycles that are already
past.
"""

from __future__ import annotations

from collections.abc import Iterable

from hw.isa import COUNTER_NAMES, ENGINE_NAMES

__all__ = ["merge", "measure", "union", "intersect", "subtract", "Ledger", "Item", "OpenInterval"]

Interval = tuple[int, int]


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint, non-adjacent union of ``intervals`` (empty ones dropped)."""
    out: list[list[int]] = []
    for a, b in sorted(i for i in intervals if i[1] > i[0]):
        if out and a <= out[-1][1]:
            if b > out[-1][1]:
                out[-1][1] = b
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def measure(intervals: Iterable[Interval], lo: int | None = None, hi: int | None = None) -> int:
    """Total length of disjoint ``intervals`` clipped to ``[lo, hi)``."""
    total = 0
    for a, b in intervals:
        if lo is not None and a < lo:
            a = lo
        if hi is not None and b > hi:
            b = hi
        if b > a:
            total += b - a
    return total


def union(*lists: Iterable[Interval]) -> list[Interval]:
    return merge(i for lst in lists for i in lst)


def intersect(x: list[Interval], y: list[Interval]) -> list[Interval]:
    """Intersection of two sorted disjoint interval lists."""
    out, i, j = [], 0, 0
    while i < len(x) and j < len(y):
        a, b = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        if a < b:
            out.append((a, b))
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(x: list[Interval], y: list[Interval]) -> list[Interval]:
    """``x`` minus ``y`` (both sorted and disjoint)."""
    out, j = [], 0
    for a, b in x:
        while j < len(y) and y[j][1] <= a:
            j += 1
        k = j
        while a < b and k < len(y) and y[k][0] < b:
            if y[k][0] > a:
                out.append((a, y[k][0]))
            a = max(a, y[k][1])
            k += 1
        if a < b:
            out.append((a, b))
    return out


class Item:
    """Something that adds to counters over time. Subclasses answer :meth:`count` for a
    window of cycles and give :attr:`end`, after which they add nothing."""

    end: int

    def count(self, lo: int, hi: int, out: dict[str, int]) -> None:
        """Add what happened in cycles ``lo <= c < hi`` to ``out``."""
        raise NotImplementedError


class _Interval(Item):
    __slots__ = ("name", "a", "end")

    def __init__(self, name: str, a: int, b: int) -> None:
        self.name, self.a, self.end = name, a, b

    def count(self, lo: int, hi: int, out: dict[str, int]) -> None:
        n = min(self.end, hi) - max(self.a, lo)
        if n > 0:
            out[self.name] += n


class _Point(Item):
    __slots__ = ("name", "end", "amount")

    def __init__(self, name: str, cycle: int, amount: int) -> None:
        self.name, self.end, self.amount = name, cycle + 1, amount

    def count(self, lo: int, hi: int, out: dict[str, int]) -> None:
        if lo < self.end <= hi:
            out[self.name] += self.amount


class OpenInterval(Item):
    """An interval whose end is not known yet (:meth:`close` it); counts up to the window's
    end meanwhile."""

    __slots__ = ("name", "a", "end", "rate")

    def __init__(self, name: str, a: int, rate: int = 1) -> None:
        self.name, self.a, self.end, self.rate = name, a, 1 << 62, rate

    def close(self, b: int) -> None:
        self.end = b

    def count(self, lo: int, hi: int, out: dict[str, int]) -> None:
        n = min(self.end, hi) - max(self.a, lo)
        if n > 0:
            out[self.name] += n * self.rate


class Ledger:
    """Running totals of every counter, plus the items not folded into them yet.

    Busy intervals of the engines are kept per engine (``dma_busy`` and ``overlap`` are
    their union and intersection); everything else is an :class:`Item`.
    """

    def __init__(self) -> None:
        self.totals = dict.fromkeys(COUNTER_NAMES, 0)
        self.cursor = 0          #: totals hold every cycle before this one
        self.items: list[Item] = []
        self.busy: dict[str, list[list]] = {e: [] for e in ENGINE_NAMES}  # [a, b or None]
        #: events counted as they are recorded, for counters whose events are recorded in
        #: time order before any snapshot that must see them (retirements, recorded in the
        #: cycle after their ``done``)
        self.counts = dict.fromkeys(COUNTER_NAMES, 0)

    # -- recording --------------------------------------------------------------------------

    def interval(self, name: str, a: int, b: int) -> None:
        if b > a:
            self.items.append(_Interval(name, a, b))

    def intervals(self, name: str, spans: Iterable[Interval]) -> None:
        for a, b in spans:
            self.interval(name, a, b)

    def open(self, name: str, a: int, rate: int = 1) -> OpenInterval:
        """An interval from ``a`` whose end comes later (``.close(b)``)."""
        it = OpenInterval(name, a, rate)
        self.items.append(it)
        return it

    def point(self, name: str, cycle: int, amount: int = 1) -> None:
        self.items.append(_Point(name, cycle, amount))

    def item(self, item: Item) -> None:
        self.items.append(item)

    def busy_start(self, engine: str, cycle: int) -> list:
        """Open a busy interval of ``engine`` from ``cycle``; close it with
        :meth:`busy_end`."""
        span = [cycle, None]
        self.busy[engine].append(span)
        return span

    @staticmethod
    def busy_end(span: list, cycle: int) -> None:
        span[1] = cycle

    # -- snapshots --------------------------------------------------------------------------

    def snapshot(self, s: int) -> dict[str, int]:
        """Fold everything before cycle ``s`` into the totals and return them (the counters
        as a ``CNT_SNAPSHOT`` in cycle ``s`` sees them, not wrapped)."""
        lo = self.cursor
        if s < lo:
            raise ValueError(f"snapshot at cycle {s} before the previous one at {lo}")
        out = self.totals
        keep = []
        for it in self.items:
            it.count(lo, s, out)
            if it.end > s:
                keep.append(it)
        self.items = keep
        self._fold_busy(lo, s)
        self.cursor = s
        snap = dict(out)
        for name, n in self.counts.items():
            snap[name] += n
        return snap

    def _fold_busy(self, lo: int, hi: int) -> None:
        spans = {}
        for e, lst in self.busy.items():
            clipped = []
            for a, b in lst:
                b = hi if b is None else min(b, hi)
                a = max(a, lo)
                if b > a:
                    clipped.append((a, b))
            # busy is high while the engine holds a command: the union of the commands'
            # spans (the matrix engine's overlap)
            spans[e] = clipped = merge(clipped)
            self.totals[f"busy.{e}"] += measure(clipped)
            self.busy[e] = [x for x in lst if x[1] is None or x[1] > hi]
        dma = union(spans["load"], spans["store"])
        self.totals["dma_busy"] += measure(dma)
        self.totals["overlap"] += measure(intersect(dma, spans["matrix"]))
