"""What the host's accesses cost in device cycles on the co-simulated RTL.

The counters a runtime reads include the cycles its own CSR and DRAM accesses take, so the
performance model charges them exactly as :class:`cosim.tb.rtl_backend.RtlBackend` spends
them. That backend drives the AXI4-Lite port from falling clock edges and samples in the
ReadOnly phase before each rising edge (measured on the RTL, ``cosim/bench/validate.py``
``host_costs``):

* **CSR read**: presented at the next falling edge, in cycle ``f``; the value is the
  register's in cycle ``f``; returns at the falling edge of ``f + 2``.
* **CSR write**: presented in cycle ``f``; takes effect in cycle ``f + 1`` (registers change
  from ``f + 2``; a ``CNT_SNAPSHOT`` snapshots in ``f + 1``); returns at the falling edge of
  ``f + 3``, a ``CNT_SNAPSHOT`` :data:`hw.isa.SNAPSHOT_CYCLES` later (the counter block
  writes its snapshot memory meanwhile).
* **DRAM backdoor** (one ``$readmemh`` / ``$writememh``): presented in cycle ``f``, done at
  the rising edge that starts ``f + 1``; returns at the falling edge of ``f + 1``. A write with
  a partial word at either end reads those words first (one more backdoor access each; one
  for both if they are the same word). Setting a bus fault (the DRAM model's fault pins)
  costs the same.
* **wait for irq**: returns at once if ``irq`` is high; else at the rising edge that raises
  it, or after ``max_cycles`` (a timer: it ends *before* the clock edge of its instant).
* The job starts right before the falling edge of cycle 0 (the first cycle after reset, when
  ``CYCLES`` reads 0).

The position of the host is kept in half cycles ``h`` (``h = 2c`` is the rising edge that
starts cycle ``c``, ``2c + 1`` its falling edge) and whether it is just before or after the
events of that instant.
"""

from __future__ import annotations

__all__ = ["HostClock", "mem_write_accesses"]


class HostClock:
    """Where the host is in simulated time."""

    def __init__(self) -> None:
        self.h = 1            # the falling edge of cycle 0
        self.after = False    # just before it (the reset timer ended there)

    def falling(self) -> int:
        """Move to the next falling edge (this one if just before it); return its cycle."""
        if self.h % 2 == 0:
            self.h += 1
        elif self.after:
            self.h += 2
        self.after = True
        return (self.h - 1) // 2

    def at_falling(self, cycle: int) -> None:
        """Just after the falling edge of ``cycle``."""
        self.h, self.after = 2 * cycle + 1, True

    def cycle(self) -> int:
        """The cycle whose register values the host sees now."""
        if self.h % 2:
            return (self.h - 1) // 2
        return self.h // 2 if self.after else self.h // 2 - 1

    def timer(self, cycles: int) -> None:
        self.h += 2 * cycles
        self.after = False

    def timer_end(self, cycles: int) -> int:
        """Half-cycle position where a timer of ``cycles`` started now would end."""
        return self.h + 2 * cycles

    def rising(self, cycle: int) -> None:
        """Woken by a signal that rose at the edge starting ``cycle``."""
        self.h, self.after = 2 * cycle, True

    # -- the accesses ---------------------------------------------------------------------

    def csr_read(self) -> int:
        """Returns the cycle the read samples in; the host is then 2 cycles later."""
        f = self.falling()
        self.at_falling(f + 2)
        return f

    def csr_write(self, held: int = 0) -> int:
        """Returns the cycle ``f`` of the write's AW/W handshake (effect in ``f + 1``); the
        response comes ``held`` cycles late (``SNAPSHOT_CYCLES`` for ``CNT_SNAPSHOT``)."""
        f = self.falling()
        self.at_falling(f + 3 + held)
        return f

    def backdoor(self) -> int:
        """One DRAM backdoor access, or a bus fault set; returns ``f`` (memory changed /
        dumped, the fault latched, at the edge that starts ``f + 1``)."""
        f = self.falling()
        self.at_falling(f + 1)
        return f


def mem_write_accesses(addr: int, size: int, word: int) -> int:
    """Backdoor accesses of a host DRAM write of ``size`` bytes at ``addr`` with ``word``-byte
    memory words: the words cut at either end are read first, then all are written."""
    if size == 0:
        return 0
    first, last = addr // word, (addr + size - 1) // word
    head = addr % word != 0
    tail = (addr + size) % word != 0
    if head and tail and first == last:
        return 2
    return 1 + head + tail
