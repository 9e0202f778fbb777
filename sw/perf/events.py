"""The discrete-event core of the performance model: a priority queue of timed callbacks.

Time is in clock cycles and jumps from event to event (no per-cycle loop). Within a cycle,
events run in *phase* order, which is how the model keeps the RTL's register semantics:

* :data:`UPDATE` (0): a register takes the value it has from this cycle on;
* :data:`DECIDE` (1): a block decides what it does in this cycle from the registers as they
  are in this cycle (take a command, leave an FSM state, request a bus);
* :data:`ARBITRATE` (2): a shared resource (the AXI read address channel, the write
  channels) picks among the requests of this cycle.

A decision only ever schedules updates of later cycles, so the order of events within a
phase does not matter. Ties within a phase run in scheduling order.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

__all__ = ["UPDATE", "DECIDE", "ARBITRATE", "EventQueue", "Waker"]

_push = heapq.heappush

UPDATE = 0
DECIDE = 1
ARBITRATE = 2


class EventQueue:
    """A heap of ``(cycle, phase, sequence, callback, args)``.

    Attributes
    ----------
    now : int
        Cycle of the event being run (or last run).
    phase : int
        Its phase.
    events_run : int
        Events run so far (for speed measurements).
    """

    __slots__ = ("_heap", "_seq", "now", "phase")

    def __init__(self) -> None:
        self._heap: list = []
        self._seq = 0
        self.now = 0
        self.phase = UPDATE

    @property
    def events_run(self) -> int:
        """Events run so far (scheduled less those still waiting)."""
        return self._seq - len(self._heap)

    def at(self, cycle: int, phase: int, callback: Callable, *args) -> None:
        """Run ``callback(*args)`` at ``(cycle, phase)``.

        Raises
        ------
        ValueError
            If ``(cycle, phase)`` is before the event being run (the past cannot change).
        """
        if cycle <= self.now and (cycle < self.now or phase < self.phase):
            raise ValueError(f"event at cycle {cycle} phase {phase} scheduled from cycle "
                             f"{self.now} phase {self.phase}")
        self._seq = seq = self._seq + 1
        _push(self._heap, (cycle, phase, seq, callback, args))

    def next_time(self) -> tuple[int, int] | None:
        """``(cycle, phase)`` of the next event, or None."""
        if not self._heap:
            return None
        e = self._heap[0]
        return e[0], e[1]

    def run_through(self, cycle: int, phase: int) -> None:
        """Run every event up to and including ``(cycle, phase)``."""
        heap = self._heap
        pop = heapq.heappop
        while heap:
            e = heap[0]
            if e[0] > cycle or (e[0] == cycle and e[1] > phase):
                break
            pop(heap)
            self.now = e[0]
            self.phase = e[1]
            e[3](*e[4])
        if (cycle, phase) > (self.now, self.phase):
            self.now, self.phase = cycle, phase

    def run_until(self, limit: int, stop: Callable[[], bool], flag: list) -> int | None:
        """Run events of cycles ``< limit`` until ``stop()`` holds at the end of a cycle's
        UPDATE phase; return that cycle (the cycle's later phases not run), or None once no
        event before ``limit`` is left. ``stop`` is only evaluated after an event set
        ``flag[0]`` (which this clears)."""
        heap = self._heap
        pop = heapq.heappop
        while heap:
            if heap[0][0] >= limit:
                return None
            e = pop(heap)
            c = self.now = e[0]
            ph = self.phase = e[1]
            e[3](*e[4])
            if flag[0] and ph == UPDATE and not (heap and heap[0][0] == c
                                                 and heap[0][1] == UPDATE):
                flag[0] = False
                if stop():
                    return c
        return None


class Waker:
    """Runs ``decide(c)`` at most once per cycle, in phase ``phase`` (default DECIDE)."""

    def __init__(self, eq, decide, phase: int = DECIDE) -> None:
        self._eq = eq
        self._decide = decide
        self._phase = phase
        self._at: set[int] = set()

    def __call__(self, c: int) -> None:
        at = self._at
        if c not in at:
            at.add(c)
            self._eq.at(c, self._phase, self._run, c)

    def _run(self, c: int) -> None:
        self._at.discard(c)
        self._decide(c)
