"""The per-queue command FIFO in front of an engine (Amaranth's ``SyncFIFOBuffered``), timed.

For ``depth >= 2`` the FIFO is a memory of ``depth - 1`` entries plus an output register: an
entry written in cycle ``w`` moves to the output register in cycle ``max(w + 1, t)``, where
``t`` is the cycle the previous entry was taken (read), and is readable from the cycle after
the move. ``w_rdy`` is high while the memory holds fewer than ``depth - 1`` entries (an entry
counts from the cycle after its write to its move, inclusive). For ``depth == 1`` the FIFO is
one register: readable the cycle after the write, writable again the cycle after the read.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

__all__ = ["Entry", "CommandFifo"]


class Entry:
    """A command in a FIFO: written in cycle ``write``, readable from ``avail`` (None until
    known), taken in cycle ``take``."""

    __slots__ = ("cmd", "write", "move", "avail", "take")

    def __init__(self, cmd, write: int) -> None:
        self.cmd = cmd
        self.write = write
        self.move: int | None = None
        self.avail: int | None = None
        self.take: int | None = None


class CommandFifo:
    """Timed model of one command FIFO.

    Parameters
    ----------
    depth : int
        ``cmd_fifo_depth``.
    on_head : callable(cycle)
        Called when a new head becomes readable from ``cycle`` (the engine queue re-arbitrates
        then).
    on_space : callable(cycle)
        Called when the FIFO becomes writable again from ``cycle`` (the stage retries).
    """

    def __init__(self, depth: int, on_head: Callable[[int], None],
                 on_space: Callable[[int], None]) -> None:
        self.depth = depth
        self.entries: deque[Entry] = deque()   # written, not taken
        self.last_take = -1
        self.on_head = on_head
        self.on_space = on_space

    def w_rdy(self, c: int) -> bool:
        """Whether a write in cycle ``c`` is accepted."""
        if self.depth == 1:     # the register is full in the cycle its entry is taken
            return self.last_take != c and not any(e.write < c for e in self.entries)
        inner = 0
        for e in self.entries:
            if e.write < c and (e.move is None or e.move >= c):
                inner += 1
        return inner < self.depth - 1

    def next_space(self, c: int) -> int | None:
        """First cycle ``>= c`` in which a write would be accepted, as far as known now (None:
        only after a take that has not happened)."""
        if self.w_rdy(c):
            return c
        if self.depth == 1:
            return c + 1 if self.last_take == c and not self.entries else None
        for e in self.entries:           # oldest entry still in the memory
            if e.write < c and (e.move is None or e.move >= c):
                return None if e.move is None else e.move + 1
        return None

    def write(self, c: int, cmd) -> Entry:
        """Write ``cmd`` in cycle ``c`` (the caller checked :meth:`w_rdy`)."""
        e = Entry(cmd, c)
        prev = self.entries[-1] if self.entries else None
        self.entries.append(e)
        if self.depth == 1:
            e.move, e.avail = c, c + 1
            self.on_head(e.avail)
        elif prev is None:
            self._moved(e, max(c + 1, self.last_take))
        # else: it moves once the previous entry is taken (see take)
        return e

    def _moved(self, e: Entry, move: int) -> None:
        e.move = move
        e.avail = move + 1
        self.on_head(e.avail)
        if self.depth > 1:
            self.on_space(move + 1)

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
        if self.depth == 1:
            self.on_space(c + 1)
        elif self.entries:
            nxt = self.entries[0]
            if nxt.move is None:
                self._moved(nxt, max(nxt.write + 1, c))
        return e

    def flush(self) -> list[Entry]:
        """Drop every entry (queue reset); returns them."""
        dropped = list(self.entries)
        self.entries.clear()
        return dropped
