"""Timing of one DMA channel's address translation (:class:`hw.dma.translate.Translator`): its
TLB (:class:`hw.isa.TlbModel`) and its page walker, whose entry reads share the read channel
with the DMA and the command fetch as the walker's AXI manager does.

A burst presented in cycle ``s`` (ARVALID / AWVALID would rise) is looked up in ``s``: a hit
with the permission lets it go from ``s``; a hit without it faults in ``s``; a miss starts a
walk, timed by the rules of :mod:`hw.isa.vm` (``WALK_*``): the level-1 entry's AR from ``s +
WALK_AR_AFTER_MISS``, the cycle its beat is taken decides (a fault, or the level-0 entry's AR
``WALK_AR_AFTER_ENTRY`` later), and the cycle the level-0 beat is taken fills the entry
(unless a ``TLB_INVALIDATE`` pulsed since the walk began) and faults, or lets the burst be
looked up again ``WALK_GO_AFTER_FILL`` later. Counters: ``tlb.<client>.hits`` / ``.misses`` at
the first lookup of a burst, ``.walk_cycles`` from the cycle after the miss to the last
beat's, ``.faults`` in the cycle the fault is found.
"""

from __future__ import annotations

from collections.abc import Callable

from hw.isa import (
    VM_PAGE_SHIFT,
    WALK_AR_AFTER_ENTRY,
    WALK_AR_AFTER_MISS,
    WALK_GO_AFTER_FILL,
    WALK_ROOT_FAULT_AFTER_MISS,
    ErrorCode,
    Fault,
    TlbModel,
    VmWord,
    unpack_fields,
    walk,
)
from hw.isa import fault_addr as _fault_addr
from sw.perf.events import DECIDE
from sw.perf.memory import BurstBytes, ReadChannel, ServedBurst

__all__ = ["TimedTranslator"]



class _Walk:
    __slots__ = ("vm", "va", "row_addr", "write", "go", "fault", "begin", "result", "reads",
                 "level", "span")


class TimedTranslator:
    """The TLB and walker of ``client`` (``"load"`` or ``"store"``: a DMA channel;
    ``"fetch"``: the command fetch's ring reads and fence writes).

    Parameters
    ----------
    machine : sw.perf.machine.Machine
        Its event queue, ledger, read channel, configuration and DRAM image.
    client : str
    mgr : int
        The walker's AXI manager (:data:`sw.perf.memory.WALK_LOAD` / ``WALK_STORE``; the
        command fetch's walker reads on the command processor's, ``CP``).
    """

    def __init__(self, machine, client: str, mgr: int) -> None:
        self.m = machine
        self.client = client
        self.mgr = mgr
        self.tlb = TlbModel(machine.config.tlb_entries)
        self.reads: ReadChannel = machine.reads
        self._names = {k: f"tlb.{client}.{k}" for k in ("hits", "misses", "walk_cycles",
                                                        "faults")}

    def present(self, vm: int, va: int, row_addr: int, write: bool, s: int,
                go: Callable[[int, int], None],
                fault: Callable[[int, ErrorCode, int], None]) -> None:
        """A burst at virtual ``va`` (its row at ``row_addr``) is presented from cycle ``s``:
        ``go(c, pa)`` once it may go out (from ``c``, at physical ``pa``), or ``fault(f,
        code, addr)`` (found in cycle ``f``)."""
        w = _Walk()
        w.vm, w.va, w.row_addr, w.write, w.go, w.fault = vm, va, row_addr, write, go, fault
        self.m.eq.at(s, DECIDE, self._lookup, w, True)

    def _lookup(self, w: _Walk, first: bool) -> None:
        m, c = self.m, self.m.eq.now
        asid = unpack_fields(VmWord, w.vm).asid
        t = self.tlb.lookup(asid, w.va >> VM_PAGE_SHIFT)
        if t is not None:
            if first:
                m.ledger.point(self._names["hits"], c)
            if t.allows(w.write):
                w.go(c, t.physical(w.va))
            else:
                self._fault(w, c, ErrorCode.PAGE_PERMISSION)
            return
        m.ledger.point(self._names["misses"], c)
        w.begin = c
        w.span = m.ledger.open(self._names["walk_cycles"], c + 1)
        w.result, w.reads = walk(self._read_word, w.vm, w.va, m.config.dram_bytes)
        if not w.reads:                         # the root table lies outside DRAM
            f = c + WALK_ROOT_FAULT_AFTER_MISS
            w.span.close(f + 1)
            self._fault(w, f, ErrorCode.PAGE_NOT_MAPPED)
            return
        w.level = 0
        self._read(w, c + WALK_AR_AFTER_MISS)

    def _read(self, w: _Walk, start: int) -> None:
        self.reads.request(self.mgr, start, 1, self, w, self._granted)

    def _granted(self, c: int, served: ServedBurst) -> None:
        self.m.ledger.item(BurstBytes(served, self.m.config.axi_data_bytes))

    # -- Reader: the walker takes its beat as soon as it shows (RREADY high) -------------------

    def consume(self, served: ServedBurst) -> tuple[int, int]:
        return served.v0, served.v0

    def r_take(self, served: ServedBurst, i: int, visible: int) -> int:
        return visible

    def burst_done(self, served: ServedBurst) -> None:
        w: _Walk = served.tag
        r = served.c_last                      # the cycle the entry arrived (and is decided)
        w.level += 1
        if w.level < len(w.reads):             # level 1 valid: the level-0 read next
            self._read(w, r + WALK_AR_AFTER_ENTRY)
            return
        w.span.close(r + 1)
        if isinstance(w.result, Fault):
            self._fault(w, r, w.result.code)
            return
        if not self.m.tlb_invalidated(w.begin, r):
            self.tlb.fill(w.result)
        self.m.eq.at(r + WALK_GO_AFTER_FILL, DECIDE, self._lookup, w, False)

    def _fault(self, w: _Walk, f: int, code: ErrorCode) -> None:
        self.m.ledger.point(self._names["faults"], f)
        w.fault(f, code, _fault_addr(w.row_addr, w.va))

    def _read_word(self, pa: int) -> int:
        return int.from_bytes(self.m.model.dram[pa:pa + 4], "little")
