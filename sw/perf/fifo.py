"""The per-queue command store in front of an engine (:class:`hw.cmdproc.EngineQueue`), timed.

Each queue holds up to ``depth`` (``cmd_fifo_depth``) commands in the engine's store. A command
written in cycle ``w`` is the head from ``w + 1`` once the one before it was taken (the command
behind a head taken in cycle ``t`` is the head from ``t + 1``). The store takes a write in
cycle ``c`` while it holds fewer than ``depth`` commands in ``c``: one written before ``c`` and
not taken before ``c`` counts (its count register changes at the clock edge).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from sw.perf.timing import fifo_write_to_head

__all__ = ["Entry", "CommandFifo"]


class Entry:
    """A command in a queue's store: written in cycle ``write``, the head (readable) from
    ``avail`` (None until known), taken in cycle ``take``."""

    __slots__ = ("cmd", "write", "avail", "take")

    def __init__(self, cmd, write: int) -> None:
        self.cmd = cmd
        self.write = write
        self.avail: int | None = None
        self.take: int | None = None


class CommandFifo:
    """Timed model of one queue's commands in an engine's store.

    Parameters
    ----------
    depth : int
        ``cmd_fifo_depth``.
    on_head : callable(cycle)
        Called when a new head becomes readable from ``cycle`` (the engine queue re-arbitrates
        then).
    on_space : callable(cycle)
        Called when the store has room for the queue again from ``cycle`` (the fetch unit's
        loader looks again).
    """

    def __init__(self, depth: int, on_head: Callable[[int], None],
                 on_space: Callable[[int], None]) -> None:
        self.depth = depth
        self.latency = fifo_write_to_head(depth)
        self.entries: deque[Entry] = deque()   # written, not taken
        self.last_take = -1
        self.on_head = on_head
        self.on_space = on_space

    def w_rdy(self, c: int) -> bool:
        """Whether a write in cycle ``c`` is accepted (an entry taken in ``c`` still counts)."""
        held = (self.last_take == c) + sum(1 for e in self.entries if e.write < c)
        return held < self.depth

    def write(self, c: int, cmd) -> Entry:
        """Write ``cmd`` in cycle ``c`` (the caller checked :meth:`w_rdy`)."""
        e = Entry(cmd, c)
        self.entries.append(e)
        if len(self.entries) == 1:
            e.avail = max(c, self.last_take) + self.latency
            self.on_head(e.avail)
        return e

    def head(self, c: int) -> Entry | None:
        """The readable head entry in cycle ``c``, if any."""
        if self.entries:
            e = self.entries[0]
            if e.avail is not None and e.avail <= c:
                return e
        return None

    def has_head(self) -> bool:
        return bool(self.entries)

    def take(self, c: int) -> Entry:
        """The engine reads the head in cycle ``c``."""
        e = self.entries.popleft()
        e.take = c
        self.last_take = c
        if self.entries:
            nxt = self.entries[0]
            nxt.avail = max(nxt.write, c) + 1
            self.on_head(nxt.avail)
        self.on_space(c + 1)
        return e

    def flush(self) -> list[Entry]:
        """Drop every entry (queue reset); returns them."""
        dropped = list(self.entries)
        self.entries.clear()
        return dropped
