"""Timing of the command processor's semaphore unit (:class:`hw.cmdproc.SemaphoreUnit`).

* **Semaphores** (:class:`Semaphores`): one increment port: one increment a cycle, by fixed
  priority among the sources offering one (engines, stages, fence), into the unit's
  increment register, which applies it in the next cycle without a host write (a clear
  drops it); visible from the cycle after it is applied. A wait is tested against the current values
  (the RTL's registered ready bits equal that test in every cycle).

Cycle rules are the RTL's (each is exercised against it by the validation): a decision in
cycle ``c`` changes registers from ``c + 1`` on.
"""

from __future__ import annotations

from hw.isa import sem_reached
from sw.perf.events import ARBITRATE, UPDATE, Waker

__all__ = ["Semaphores"]

_MASK32 = 0xFFFF_FFFF


class Semaphores:
    """The semaphore unit: values (shared with the functional model's ``sems`` list), what
    last incremented each, its one increment port, and who waits for a change.

    The port takes one increment a cycle (:class:`hw.cmdproc.SemaphoreUnit`): among the
    sources offering one in cycle ``c``, the first in the RTL's fixed order (engines load,
    store, matrix, vector, then the queues' stages, then the fence: the ``key`` of
    :meth:`request`), when the increment register is empty or is applied in ``c``, and not
    in a clear's cycle. The register's increment is applied in the first cycle from ``c + 1``
    without a host write, and visible (value and ``SEM_LAST``) from the cycle after that; a
    clear drops it. A source may
    withdraw its offer (a queue reset): ``live(c)`` is asked in every cycle the offer is
    open.
    """

    def __init__(self, eq, values: list[int]) -> None:
        self.eq = eq
        self.values = values
        self.last: list[tuple[int, int] | None] = [None] * len(values)
        self._watch: dict[int, set] = {}
        #: open offers by source key: [from cycle, sem, queue, index, answer, live]
        self._offers: dict[int, list] = {}
        self._blocked: set[int] = set()     # cycles of a host write: nothing is applied
        self._clearing: set[int] = set()    # cycles of a clear: the register is dropped
        self._pending: tuple[int, int, int] | None = None   # the increment register
        self._arbitrate_at = Waker(self.eq, self._arbitrate, ARBITRATE)

    def reached(self, sem: int, target: int) -> bool:
        return sem_reached(self.values[sem], target)

    def request(self, key: int, cycle: int, sem: int, queue: int, index: int, answer,
                live=None) -> None:
        """Source ``key`` offers ``sem += 1`` (by command ``index`` of ``queue``) from
        ``cycle``; ``answer(c, taken)`` is called once: ``taken`` in the cycle ``c`` the port
        takes it, or not taken in the first cycle ``c`` in which ``live(c)`` is false."""
        self._offers[key] = [cycle, sem, queue, index, answer, live]
        self._arbitrate_at(max(cycle, self.eq.now))

    def _arbitrate(self, c: int) -> None:
        clearing = c in self._clearing
        if clearing:
            self._pending = None
        elif self._pending is not None and c not in self._blocked:
            self.eq.at(c + 1, UPDATE, self._increment, *self._pending)
            self._pending = None
        offers = self._offers
        open_ = sorted(k for k, o in offers.items() if o[0] <= c)
        taken = None
        for k in open_:
            o = offers[k]
            if o[5] is not None and not o[5](c):
                del offers[k]
                o[4](c, False)
            elif taken is None and self._pending is None and not clearing:
                taken = k
        if taken is not None:
            _, sem, q, index, answer, _ = offers.pop(taken)
            self._pending = (sem, q, index)
            answer(c, True)
        if self._pending is not None:
            self._arbitrate_at(c + 1)
        elif offers:
            self._arbitrate_at(max(c + 1, min(o[0] for o in offers.values())))

    def _increment(self, sem: int, q: int, index: int) -> None:
        self.values[sem] = (self.values[sem] + 1) & _MASK32
        self.last[sem] = (q, index)
        self._changed(sem)

    def clear(self, cycle: int) -> None:
        """``CONTROL`` clear: every semaphore and its record is 0 from ``cycle`` (in the cycle
        before, the port takes no increment and the register's is dropped)."""
        self._clearing.add(cycle - 1)
        self.eq.at(cycle, UPDATE, self._clear)

    def _clear(self) -> None:
        for s in range(len(self.values)):
            self.values[s] = 0
            self.last[s] = None
        for s in list(self._watch):
            self._changed(s)

    def write(self, cycle: int, sem: int, value: int) -> None:
        """Host write (``sem_csr``): the value from ``cycle`` (the register's increment is not
        applied in the cycle before: it is applied after the write)."""
        self._blocked.add(cycle - 1)
        self.eq.at(cycle, UPDATE, self._write, sem, value)

    def _write(self, sem: int, value: int) -> None:
        self.values[sem] = value & _MASK32
        self._changed(sem)

    def _changed(self, sem: int) -> None:
        now = self.eq.now
        for cb in self._watch.pop(sem, ()):
            cb(now)

    def watch(self, sem: int, callback) -> None:
        """Call ``callback(cycle)`` once, at the next change of ``sem``."""
        self._watch.setdefault(sem, set()).add(callback)
