"""The local-memory rows a kernel uses, so that kernels on different streams that nothing
orders do not race on the scratchpad or the accumulator.

Each kernel launch names the rows it may touch (:class:`LocalUse`; by default a kernel plans
over the whole scratchpad and accumulator). :meth:`Stream.launch` refuses, with
:class:`~sw.runtime.errors.LocalMemoryConflictError` and before writing anything, a launch
whose rows overlap those of a launch on another stream that may still run at the same time:
one the host has not seen complete (:meth:`Stream.synchronize`, :meth:`Stream.query`,
:meth:`Event.synchronize` or :meth:`Event.query` of an event recorded after it) and that the
launching stream is not ordered after (:meth:`Stream.wait_event` of such an event,
:meth:`Device.barrier`, directly or through other streams: each stream keeps, per other
queue, the number of that queue's commands it is known to run after, as a vector clock).
A wait for an event not recorded yet orders the waiting stream's launches only from its
first recording on (until then the runtime cannot know what it will follow). Raw commands
launched without a :class:`LocalUse` are not checked.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

__all__ = ["LocalUse", "merge_clock", "region"]


def region(value: tuple[int, int] | None, depth: int, what: str) -> tuple[int, int]:
    """A kernel's ``(first row, rows)`` region of a local memory of ``depth`` rows, checked
    (None: the whole memory, ``(0, depth)``).

    Raises
    ------
    TypeError
        If it is not a pair of integers.
    ValueError
        If it is empty or not inside ``[0, depth)``.
    """
    if value is None:
        return 0, depth
    try:
        base, rows = (operator.index(x) for x in value)
    except (TypeError, ValueError):
        raise TypeError(f"{what} region {value!r}: expected (first row, rows), two integers"
                        ) from None
    if base < 0 or rows < 1 or base + rows > depth:
        raise ValueError(f"{what} region {value} is outside [0, {depth})")
    return base, rows


@dataclass(frozen=True)
class LocalUse:
    """Rows ``[first, end)`` of the scratchpad (``spad``) and of the accumulator (``acc``) a
    kernel may read or write while it runs (None: none); ``what`` names the kernel in
    errors."""
    what: str
    spad: tuple[int, int] | None = None
    acc: tuple[int, int] | None = None

    @classmethod
    def regions(cls, config, what: str, spad_region: tuple[int, int] | None,
                acc_region: tuple[int, int] | None) -> LocalUse:
        """The use of a kernel planned over ``(first row, rows)`` regions, as the kernels take
        them (None: the whole memory of ``config``, :class:`hw.config.NPUConfig`; checked
        by :func:`region`)."""
        def span(value, depth, name):
            base, rows = region(value, depth, name)
            return base, base + rows
        return cls(what, span(spad_region, config.spad_rows, "scratchpad"),
                   span(acc_region, config.acc_rows, "accumulator"))

    def same_rows(self, other: LocalUse) -> bool:
        return (self.spad, self.acc) == (other.spad, other.acc)

    def overlap(self, other: LocalUse) -> str | None:
        """The first local memory both use overlapping rows of, with the rows (``"scratchpad
        rows [0, 4096) and [0, 4096)"``), or None."""
        for name, a, b in (("scratchpad", self.spad, other.spad),
                           ("accumulator", self.acc, other.acc)):
            if a is not None and b is not None and a[0] < b[1] and b[0] < a[1]:
                return f"{name} rows [{a[0]}, {a[1]}) and [{b[0]}, {b[1]})"
        return None


def merge_clock(into: dict[int, int], other: dict[int, int]) -> None:
    """``into[q] = max(into[q], other[q])`` for every queue ``q`` of ``other``."""
    for q, pos in other.items():
        if pos > into.get(q, 0):
            into[q] = pos
