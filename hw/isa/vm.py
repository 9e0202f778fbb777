"""Device virtual memory: the page-table format, the queue's context register, the TLB's
behaviour and the page walk, defined once for the hardware (:mod:`hw.dma.translate`), the
functional model, the performance model and the runtime (:mod:`sw.runtime.vm`).

Address spaces
--------------
A *context* is one address space: a page table in device DRAM and an 8-bit address-space id
(``asid``, the TLB's tag). A queue is bound to a context by its ``Q_VM`` register
(:class:`hw.isa.VmWord`: ``enable``, ``asid`` and the physical page of the table's root); with
``enable`` clear (the reset state) the queue's DMA addresses are physical, as before virtual
memory existed, and nothing of this module applies to it (same cycles, same checks).

With ``enable`` set, every DRAM address of the queue is a 32-bit *virtual* address: the
``dram_addr`` of its DMA_LOAD / DMA_STORE commands, its ring (``RING_BASE``) and its fences'
``addr``. They are checked only for not wrapping past ``2**32`` (``BAD_DRAM_ADDR``; a ring
must still be 32-byte aligned, a fence word 4-byte aligned), the queue's window does not
apply to them (the page tables are the protection), and every burst is translated on its
way to the bus: DMA bursts (:func:`hw.isa.dma_bursts`, which never cross a 4 KiB page) by
their channel's TLB, ring bursts (which never cross a page either) and fence writes by the
command fetch's TLB. A ring page needs ``read``, a fence word's page ``write``.

Page-table format (two levels, 4 KiB pages, after RISC-V Sv32, *The RISC-V Instruction Set
Manual, Volume II: Privileged Architecture*, section 4.3, with 32-bit entries and no
A/D/X/U/G bits)::

    virtual address   31 ........ 22 | 21 ........ 12 | 11 ........ 0
                          vpn1 (10)      vpn0 (10)       offset (12)

* the root table (level 1) is one 4 KiB page of 1024 :class:`Pte` (4 bytes each,
  little-endian) at physical address ``VmWord.root << 12``; entry ``vpn1`` at ``root << 12 +
  4 * vpn1``. A valid level-1 entry points to a level-0 table (``ppn << 12``); its ``read``,
  ``write`` and ``contig`` bits are reserved (ignored);
* a level-0 table is one 4 KiB page of 1024 entries; entry ``vpn0`` maps the virtual page to
  the physical page ``ppn`` with the permissions ``read`` (DMA_LOAD may read it) and
  ``write`` (DMA_STORE may write it);
* contiguous runs (the large-page option, as the Intel NPU driver's 64 KiB hint or Arm's
  contiguous bit): ``contig`` set in a level-0 entry says that the :data:`CONTIG_PAGES`
  aligned virtual pages of its run map the :data:`CONTIG_PAGES` aligned physical pages of
  ``ppn``'s run, in order, with the same permissions; one TLB entry then covers the whole
  64 KiB run. The runtime sets it only where this holds; where it does not, which of the
  run's entries a translation follows depends on the TLB's contents (as for a page table
  changed without an invalidate).

A walk reads the level-1 entry, then the level-0 entry (one 4-byte entry per read, one
beat), through the walker's own AXI manager. It *faults* with

* ``PAGE_NOT_MAPPED``: the level-1 or the level-0 entry has ``valid`` clear, or a table or
  the mapped page lies outside ``[0, dram_bytes)`` (the walker never reads outside DRAM);
* ``PAGE_PERMISSION``: the page is mapped without the permission the access needs (a load
  needs ``read``, a store ``write``).

TLB
---
Each DMA channel (load, store) and the command fetch (``fetch``: ring reads and fence
writes) has its own fully associative TLB of :attr:`~hw.config.NPUConfig.tlb_entries`
entries and its own walker (the fetch's walker reads on the command processor's AXI manager,
while the fetch waits for it). An entry holds one
translation (``asid``, virtual page or contiguous run, physical page or run, ``read``,
``write``); a successful walk fills the next entry in round-robin order (:class:`TlbModel`,
the one definition of which entry a fill replaces); a failed walk fills nothing. A lookup
matches ``asid`` and the page (or the run, for a ``contig`` entry); permissions are checked on
every lookup, so a store to a read-only page that the TLB holds faults without a walk. A
TLB hit adds no cycle to the burst; a miss holds the burst (ARVALID / AWVALID low) until the
walk filled the entry (timing: the ``WALK_*`` rules and :func:`walk_cycles` below).

The TLBs are not coherent with the page tables: after the host changes an entry that a TLB
may hold (unmap, a permission change, a remap) it must run ``TLB_INVALIDATE``
(:class:`hw.isa.TlbInvalidateBody`) before relying on the change; until then a translation may use
either the old or the new entry. ``TLB_INVALIDATE`` is a processor command: like a
``BARRIER`` it waits until every earlier command of its queue retired, then invalidates every
entry (``all``) or the entries of ``asid`` in both TLBs in one cycle; a walk in progress at
that moment still completes its reads but does not fill its TLB: the burst that missed is
looked up again in the cycle after the walk's last entry arrived, misses and walks again.

Page faults
-----------
A translation that faults ends the command: no further burst is issued, the bursts already
issued complete on the bus, and the command retires with the fault's code and ``ERR_ADDR`` =
the virtual address of the first byte the faulting burst would have moved (the row's start
for its first burst, else the burst's address). What it did before (the same rule as an
``AXI_ERROR``, :class:`hw.isa.ErrorCode`): a DMA_LOAD has written the local rows whose last
byte came with a burst before the faulting one and no other; a DMA_STORE has written every
burst before the faulting one and nothing else. The queue stops (its error latched); the
other queues go on.

The host then writes the queue's ``Q_RESUME`` (:class:`hw.isa.ResumeWord`): ``resume`` runs the
faulted command again from its start, before any later command of its queue on its engine
and without waiting on its semaphore again (its wait held when it first ran), and the queue
goes on; ``skip`` retires it without moving data (as a DMA of zero rows: its
semaphore is signalled, it counts as retired and is traced). Both clear the queue's error.
A DMA command can always resume because it is idempotent as long as nothing else writes its
source or destination meanwhile (which a race-free program guarantees: every command that
could was ordered after it by a semaphore and has not started): a load re-reads the same
DRAM bytes into the same rows (the rows it wrote before the fault get the same bytes again),
a store writes the same bytes to the same DRAM addresses. Commands of other engines in the
same queue that were not ordered after it may have run meanwhile, exactly as they may run
while it runs; the commands behind it on its engine never started. ``Q_RESUME`` of a queue
whose latched error is not a page fault does nothing. ``QUEUE_RESET`` drops the faulted
command with the others.

Faults of the command fetch (a queue with a context). A ring burst that faults is reported
like a ring check's error: when the commands fetched before it have been taken in, with
the command index ``Q_FETCHED`` (the first command of the burst), opcode 0, and ``ERR_ADDR``
= the slot's virtual address; ``HEAD`` stays on it. ``resume`` and ``skip`` both fetch it
again (nothing was read: there is no command to skip). A fence whose write faults is
reported with its index, opcode ``FENCE`` and its virtual address, and nothing is written;
``resume`` runs it again, ``skip`` retires it without writing (its semaphore is signalled,
no fence interrupt).

The fetch reads ahead (up to ``fetch_depth`` commands beyond the stage and the engine
stores), so it may read ring slots through a translation that a later ``TLB_INVALIDATE`` of
the same queue drops: the host must not change the mapping of a ring page while the queue
can fetch from it (the runtime maps a stream's ring once, for its lifetime).
"""


from collections.abc import Callable
from dataclasses import dataclass

from amaranth.lib import data

from hw.isa.commands import ErrorCode, unpack_fields
from hw.isa.registers import VmWord

__all__ = ["VM_PAGE_SHIFT", "VM_PAGE_BYTES", "PTE_BYTES", "VPN_BITS", "PT_ENTRIES",
           "CONTIG_PAGES", "ASID_BITS", "Pte", "PAGE_FAULTS", "Translation", "Fault", "walk",
           "TlbModel", "TLB_CLIENTS", "fault_addr", "WALK_AR_AFTER_MISS", "WALK_AR_AFTER_ENTRY",
           "WALK_GO_AFTER_FILL", "WALK_ROOT_FAULT_AFTER_MISS", "walk_cycles", "walk_delay"]

VM_PAGE_SHIFT = 12
VM_PAGE_BYTES = 1 << VM_PAGE_SHIFT      #: 4 KiB pages (the AXI 4 KiB rule's page)
PTE_BYTES = 4
VPN_BITS = 10                           #: index bits per level (two levels, 32-bit VA)
PT_ENTRIES = 1 << VPN_BITS              #: entries of one table (one 4 KiB page)
CONTIG_PAGES = 16                       #: pages of a contiguous run (64 KiB)
ASID_BITS = 8
#: The translating clients, each with its own TLB and walker (the counters ``tlb.<client>.*``)
TLB_CLIENTS = ("load", "store", "fetch")
#: The error codes of page faults
PAGE_FAULTS = (ErrorCode.PAGE_NOT_MAPPED, ErrorCode.PAGE_PERMISSION)

# -- walk timing (hw.dma.translate.Translator; the performance model times walks with these) --
#: A burst looked up in cycle ``t`` that misses: the level-1 entry's ARVALID from ``t + 1``
#: (the walker FSM leaves ``Idle`` at that edge).
WALK_AR_AFTER_MISS = 1
#: The level-1 entry's R beat taken in cycle ``r`` (the walker decides then): the level-0
#: entry's ARVALID from ``r + 1``.
WALK_AR_AFTER_ENTRY = 1
#: The level-0 entry's R beat taken in cycle ``r`` fills the TLB at that edge: the burst's
#: lookup hits and its ARVALID / AWVALID rise in ``r + 1``. A fault is found in ``r`` itself.
WALK_GO_AFTER_FILL = 1
#: A root table outside DRAM: the walker faults in ``t + 1`` without reading.
WALK_ROOT_FAULT_AFTER_MISS = 1


def walk_cycles(reads: list[int]) -> int:
    """``tlb.<client>.walk_cycles`` of one walk (from the cycle after the miss to the cycle
    its last entry's beat is taken, inclusive) whose entry reads take ``reads[i]`` cycles each
    from their ARVALID to their R beat (on an idle bus: the DRAM read latency; the arbiter adds
    none, :mod:`hw.bus.arbiter`). ``reads`` is empty when the root table lies outside DRAM
    (one cycle). The walk's outcome is decided ``walk_cycles`` cycles after the miss."""
    if not reads:
        return WALK_ROOT_FAULT_AFTER_MISS
    return WALK_AR_AFTER_MISS + sum(reads) + WALK_AR_AFTER_ENTRY * (len(reads) - 1)


def walk_delay(reads: list[int]) -> int:
    """Cycles a burst that misses the TLB waits for a successful walk (both entries read,
    ``reads`` as in :func:`walk_cycles`) before it goes out, against a hit."""
    return walk_cycles(reads) + WALK_GO_AFTER_FILL


class Pte(data.Struct):
    """A page-table entry (4 bytes, little-endian in DRAM)."""
    valid: 1
    read: 1      #: level 0: loads may read the page
    write: 1     #: level 0: stores may write the page
    contig: 1    #: level 0: part of an aligned run of CONTIG_PAGES contiguous pages
    _pad: 8
    ppn: 20      #: physical page number (address >> 12): the page, or the level-0 table


@dataclass(frozen=True)
class Translation:
    """A successful walk: what the TLB keeps."""
    asid: int
    vpn: int          #: virtual page (the run's first page if ``contig``)
    ppn: int          #: physical page (the run's first page if ``contig``)
    read: bool
    write: bool
    contig: bool

    def covers(self, asid: int, vpn: int) -> bool:
        if asid != self.asid:
            return False
        if self.contig:
            return vpn // CONTIG_PAGES == self.vpn // CONTIG_PAGES
        return vpn == self.vpn

    def physical(self, va: int) -> int:
        """The physical address of virtual address ``va`` (which it covers)."""
        vpn = va >> VM_PAGE_SHIFT
        page = self.ppn + (vpn - self.vpn) if self.contig else self.ppn
        return page << VM_PAGE_SHIFT | (va & (VM_PAGE_BYTES - 1))

    def allows(self, write: bool) -> bool:
        return self.write if write else self.read


@dataclass(frozen=True)
class Fault:
    """A walk that failed, or a permission the translation lacks."""
    code: ErrorCode   #: PAGE_NOT_MAPPED or PAGE_PERMISSION


def walk(read_word: Callable[[int], int], vm: int, va: int, dram_bytes: int
         ) -> tuple[Translation | Fault, list[int]]:
    """The page walk of virtual address ``va`` for the context of ``vm`` (a :class:`VmWord`
    value), the one definition of what the hardware walker reads and decides.

    Parameters
    ----------
    read_word : callable
        ``read_word(pa)`` returns the 32-bit little-endian word at physical byte address
        ``pa`` (4-byte aligned, inside DRAM).
    vm : int
        The queue's ``Q_VM`` value.
    va : int
        Virtual byte address (32-bit).
    dram_bytes : int

    Returns
    -------
    (Translation or Fault, list of int)
        The result (a permission is not checked here: :meth:`Translation.allows`) and the
        physical addresses of the entries read, in order (1 or 2; 0 when the root table lies
        outside DRAM).
    """
    ctx = unpack_fields(VmWord, vm)
    vpn = (va >> VM_PAGE_SHIFT) & ((1 << 2 * VPN_BITS) - 1)
    vpn1, vpn0 = vpn >> VPN_BITS, vpn & (PT_ENTRIES - 1)
    reads: list[int] = []
    table = ctx.root << VM_PAGE_SHIFT
    if table + VM_PAGE_BYTES > dram_bytes:
        return Fault(ErrorCode.PAGE_NOT_MAPPED), reads
    pa1 = table + PTE_BYTES * vpn1
    reads.append(pa1)
    e1 = unpack_fields(Pte, read_word(pa1))
    table = e1.ppn << VM_PAGE_SHIFT
    if not e1.valid or table + VM_PAGE_BYTES > dram_bytes:
        return Fault(ErrorCode.PAGE_NOT_MAPPED), reads
    pa0 = table + PTE_BYTES * vpn0
    reads.append(pa0)
    e0 = unpack_fields(Pte, read_word(pa0))
    ppn, contig = e0.ppn, bool(e0.contig)
    if contig:
        ppn &= ~(CONTIG_PAGES - 1)
        vpn &= ~(CONTIG_PAGES - 1)
    last = (ppn + (CONTIG_PAGES if contig else 1)) << VM_PAGE_SHIFT
    if not e0.valid or last > dram_bytes:
        return Fault(ErrorCode.PAGE_NOT_MAPPED), reads
    return Translation(ctx.asid, vpn, ppn, bool(e0.read), bool(e0.write), contig), reads


def fault_addr(row_addr: int, burst_addr: int) -> int:
    """``ERR_ADDR`` of a faulting burst: the first byte of its row that it moves (the row's
    start for the row's first burst, whose address is the start aligned down to the beat)."""
    return max(row_addr, burst_addr)


class TlbModel:
    """One TLB as the hardware keeps it: ``n`` entries, filled in round-robin order.

    Parameters
    ----------
    n : int
        Entries (:attr:`hw.config.NPUConfig.tlb_entries`), >= 1.
    """

    def __init__(self, n: int) -> None:
        if n < 1:
            raise ValueError(f"a TLB needs at least one entry, not {n}")
        self.entries: list[Translation | None] = [None] * n
        self.next = 0   #: the entry the next fill replaces

    def lookup(self, asid: int, vpn: int) -> Translation | None:
        """The entry that covers ``(asid, vpn)`` (the lowest-numbered one if several)."""
        for t in self.entries:
            if t is not None and t.covers(asid, vpn):
                return t
        return None

    def fill(self, t: Translation) -> None:
        self.entries[self.next] = t
        self.next = (self.next + 1) % len(self.entries)

    def invalidate(self, all_: bool, asid: int) -> None:
        """TLB_INVALIDATE: drop every entry, or those of ``asid``. The fill pointer stays."""
        self.entries = [None if t is None or all_ or t.asid == asid else t
                        for t in self.entries]
