"""Device virtual memory on the host side: contexts (address spaces) with their page tables
in device DRAM, virtual buffers, map / unmap / share / free, and TLB invalidation.

The page-table format, the TLBs and what a page fault does are :mod:`hw.isa.vm`'s. The host
keeps the page tables (the device never writes them) and a copy of every mapping, so it can
translate for its own reads and writes (:meth:`VirtualBuffer.read`) without reading DRAM.

Physical memory comes from the device's allocator (:attr:`sw.runtime.Device.allocator`), the
same one that places rings and physical buffers, page by page: a virtual buffer is contiguous
in its context's address space whatever the physical fragmentation. Where a whole aligned
64 KiB run of a buffer gets an aligned 64 KiB physical block, its entries carry the
``contig`` hint (:data:`hw.isa.CONTIG_PAGES`), so one TLB entry covers the run.

Windows: a stream in a context has no private window: its DMA, its ring and its fence word
are virtual (the ring and the fence word are allocated in the context when the stream is
created or bound, and stay mapped until the stream is destroyed and its work retired: the
command fetch reads ahead, see :mod:`hw.isa.vm`), and the context's pages are its protection.

Ownership: a context owns the physical blocks it allocated (:meth:`Context.alloc`) and frees
them when their last page is unmapped or the context is destroyed. Other contexts may map
them (:meth:`Context.share`, or :meth:`Context.map` of the physical pages of its buffer) but
never free them; the owner does not free, unmap or destroy pages still mapped elsewhere
(:class:`~sw.runtime.ContextInUseError`). Pages mapped without ``blocks`` (a physical
buffer's, say) are nobody's: no context frees them. ``WINDOW_BASE`` /
``WINDOW_LIMIT`` keep working for streams without a context (:meth:`Device.create_stream`'s
``window_bytes``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from hw.isa import (
    CONTIG_PAGES,
    PT_ENTRIES,
    PTE_BYTES,
    VM_PAGE_BYTES,
    VM_PAGE_SHIFT,
    VPN_BITS,
    Pte,
    VmWord,
    pack_fields,
)
from sw.runtime.commands import CommandList
from sw.runtime.errors import ContextInUseError, NPUError, OutOfMemoryError
from sw.runtime.memory import Allocator, Buffer

if TYPE_CHECKING:
    from sw.runtime.device import Device
    from sw.runtime.streams import Stream

__all__ = ["Context", "VirtualBuffer", "Mapping", "VA_BASE", "VA_LIMIT"]

#: The virtual range contexts allocate from: the first 64 KiB stay unmapped (a null pointer
#: faults), the top of the 32-bit space too.
VA_BASE = 1 << 16
VA_LIMIT = 1 << 31
_RUN_BYTES = CONTIG_PAGES * VM_PAGE_BYTES


@dataclass(frozen=True)
class Mapping:
    """One mapped virtual page, as the host keeps it."""
    pa: int             #: physical page address
    read: bool
    write: bool
    contig: bool        #: its entry carries the contiguous-run hint
    block: int | None   #: the owned physical block it belongs to (freed on unmap), or None


class Context:
    """An address space of the device: a page table in device DRAM and an address-space id.

    Create with :meth:`sw.runtime.Device.create_context`; streams bound to it
    (:meth:`sw.runtime.Device.create_stream` with ``context=``) address DRAM through it.
    :meth:`destroy` frees it (once its streams are destroyed and no other context maps its
    pages); a destroyed context refuses every use with an :class:`~sw.runtime.NPUError`.

    Parameters
    ----------
    device : Device
    asid : int
        Address-space id (the TLB tag), 0..255, unique among the device's live contexts.
    contiguous : bool
        Allocate 64 KiB physical runs where possible and mark them with the ``contig`` hint
        (default); False maps every buffer page by page (one TLB entry per 4 KiB page).

    Raises
    ------
    OutOfMemoryError
        If the root table does not fit in DRAM.
    """

    def __init__(self, device: Device, asid: int, *, contiguous: bool = True) -> None:
        self.device = device
        self.asid = asid
        self.contiguous = contiguous
        self._root = self._table()
        self._tables: dict[int, Buffer] = {}          # vpn1 -> level-0 table
        self.pages: dict[int, Mapping] = {}           # vpn -> mapping (the host's copy)
        self.va = Allocator(VA_BASE, VA_LIMIT - VA_BASE)
        self._buffers: dict[int, VirtualBuffer] = {}
        self._block_pages: dict[int, int] = {}   # owned physical block -> its mapped pages
        #: a free's TLB invalidate went out unwaited (free(wait=False)): a TLB may still
        #: hold pages of the context that are no longer mapped
        self._stale = False
        self.destroyed = False

    # -- the hardware's view ----------------------------------------------------------------------

    @property
    def vm_word(self) -> int:
        """The ``Q_VM`` value of a queue bound to this context (:class:`hw.isa.VmWord`)."""
        return pack_fields(VmWord, {"enable": 1, "asid": self.asid,
                                    "root": self._root.addr >> VM_PAGE_SHIFT})

    def _table(self) -> Buffer:
        t = self.device.alloc(VM_PAGE_BYTES, align=VM_PAGE_BYTES)
        t.write(bytes(VM_PAGE_BYTES))
        return t

    def _write_pte(self, vpn: int, entry: int) -> None:
        vpn1, vpn0 = vpn >> VPN_BITS, vpn & (PT_ENTRIES - 1)
        table = self._tables.get(vpn1)
        if table is None:
            table = self._tables[vpn1] = self._table()
            self._root.write(pack_fields(Pte, {"valid": 1, "ppn": table.addr >> VM_PAGE_SHIFT})
                             .to_bytes(PTE_BYTES, "little"), PTE_BYTES * vpn1)
        table.write(entry.to_bytes(PTE_BYTES, "little"), PTE_BYTES * vpn0)

    # -- mapping ----------------------------------------------------------------------------------

    def map(self, va: int, pas: list[int], *, read: bool = True, write: bool = True,
            blocks: list[int | None] | None = None) -> None:
        """Map the virtual pages from ``va`` to the physical pages ``pas`` (page addresses),
        one each, with the given permissions. Runs of :data:`hw.isa.CONTIG_PAGES` aligned
        virtual pages that map an aligned contiguous physical run get the ``contig`` hint.

        ``blocks`` (for :meth:`alloc`, and to map again what :meth:`unmap` kept): per page,
        the physical block the context owns and frees once none of its pages is mapped;
        default: the pages are not the context's (it never frees them).

        Raises
        ------
        ValueError
            If ``va`` or a physical page is not page-aligned, a page is outside DRAM or the
            virtual range, a virtual page is already mapped, or a block of ``blocks`` is
            owned by another context (a block has one owner: both would free it).
        NPUError
            If the context was destroyed.
        """
        self._check_live()
        if va % VM_PAGE_BYTES or any(p % VM_PAGE_BYTES for p in pas):
            raise ValueError(f"map needs page-aligned addresses (va {va:#x})")
        if any(not 0 <= p < self.device.config.dram_bytes for p in pas):
            raise ValueError("a physical page lies outside DRAM")
        first = va >> VM_PAGE_SHIFT
        if va < VA_BASE or va + len(pas) * VM_PAGE_BYTES > VA_LIMIT:
            raise ValueError(f"[{va:#x}, +{len(pas)} pages) is outside the virtual range "
                             f"[{VA_BASE:#x}, {VA_LIMIT:#x})")
        for i in range(len(pas)):
            if first + i in self.pages:
                raise ValueError(f"virtual page {(first + i) << VM_PAGE_SHIFT:#x} is mapped")
        for b in dict.fromkeys(blocks or ()):
            owner = next((c for c in self.device.contexts.values()
                          if c is not self and b in c._block_pages), None)
            if owner is not None:
                raise ValueError(f"physical block {b:#x} is owned by context {owner.asid}: "
                                 "map its pages without blocks (the owner frees them)")
        contig = [False] * len(pas)
        for i in range(len(pas) if self.contiguous else 0):
            vpn = first + i
            if vpn % CONTIG_PAGES == 0 and i + CONTIG_PAGES <= len(pas) \
                    and pas[i] % _RUN_BYTES == 0 \
                    and all(pas[i + j] == pas[i] + j * VM_PAGE_BYTES for j in range(CONTIG_PAGES)):
                contig[i:i + CONTIG_PAGES] = [True] * CONTIG_PAGES
        blocks = [None] * len(pas) if blocks is None else blocks
        for i, pa in enumerate(pas):
            m = Mapping(pa, read, write, contig[i], blocks[i])
            if m.block is not None:
                self._block_pages[m.block] = self._block_pages.get(m.block, 0) + 1
            self.pages[first + i] = m
            self._write_pte(first + i, pack_fields(Pte, {
                "valid": 1, "read": int(read), "write": int(write), "contig": int(m.contig),
                "ppn": pa >> VM_PAGE_SHIFT}))

    def unmap(self, va: int, nbytes: int, *, stream: Stream | None = None,
              release: bool = True) -> list[Mapping]:
        """Unmap the pages of ``[va, va + nbytes)``, invalidate this context's TLB entries
        (a ``TLB_INVALIDATE`` on ``stream``, default the device's default stream, waited
        for), then free the physical pages the context owned: they can be reused only once no
        TLB can hold them. With ``release=False`` the context keeps them: the returned
        mappings (one per page) can be mapped again (:meth:`map` with ``blocks``).

        The caller must make sure no command of the context still uses the range (the host
        orders unmap after the work, e.g. after a synchronize).

        Raises
        ------
        ValueError
            If a page of the range is not mapped.
        ContextInUseError
            If ``release`` and a physical block this frees (the context's, none of its pages
            left mapped here) is mapped by another context (:meth:`share`; ``shared`` as
            :meth:`destroy`'s); nothing is unmapped then.
        NPUError
            If the context was destroyed, or ``stream`` was
            (:class:`~sw.runtime.StreamDestroyedError`); nothing is unmapped then.
        """
        self._check_live()
        if stream is not None:
            stream._check_live()
        removed, freed = self._clear_ptes(va, nbytes, release)
        self.device.invalidate_tlb(self, stream=stream)
        self._stale = False
        self._free_physical(freed, release)
        return removed

    def _clear_ptes(self, va: int, nbytes: int, release: bool
                    ) -> tuple[list[Mapping], list[int]]:
        """Unmap the pages of ``[va, va + nbytes)`` in the page tables (no TLB invalidate):
        the mappings removed and the owned blocks of their pages. ``release``: the blocks
        left without a mapped page will be freed, so none may be mapped elsewhere
        (:meth:`_check_unshared`, before anything is changed)."""
        first, n = va >> VM_PAGE_SHIFT, -(-(va % VM_PAGE_BYTES + nbytes) // VM_PAGE_BYTES)
        vpns = range(first, first + n)
        missing = [v for v in vpns if v not in self.pages]
        if missing:
            raise ValueError(f"virtual page {missing[0] << VM_PAGE_SHIFT:#x} is not mapped")
        if release:
            self._check_unshared(self._released(vpns), "unmapping them here")
        freed, removed = [], []
        for v in vpns:
            m = self.pages.pop(v)
            removed.append(m)
            self._write_pte(v, 0)
            if m.block is not None:
                freed.append(m.block)
        # a run whose pages are now only partly mapped must lose its contiguous hint
        for run in {v // CONTIG_PAGES for v in vpns}:
            for v in range(run * CONTIG_PAGES, (run + 1) * CONTIG_PAGES):
                m = self.pages.get(v)
                if m is not None and m.contig:
                    self.pages[v] = Mapping(m.pa, m.read, m.write, False, m.block)
                    self._write_pte(v, pack_fields(Pte, {
                        "valid": 1, "read": int(m.read), "write": int(m.write),
                        "ppn": m.pa >> VM_PAGE_SHIFT}))
        return removed, freed

    def _released(self, vpns: range) -> list[int]:
        """The owned blocks that unmapping the (mapped) virtual pages ``vpns`` leaves without
        a mapped page (and frees)."""
        unmapped = Counter(self.pages[v].block for v in vpns if self.pages[v].block is not None)
        return [b for b, n in unmapped.items() if self._block_pages[b] == n]

    def _free_physical(self, blocks: list[int], release: bool = True) -> None:
        """One page of each of ``blocks`` (owned physical blocks) is unmapped: free a block
        once none of its pages is mapped (unless not ``release``: the context keeps it)."""
        for base in blocks:
            self._block_pages[base] -= 1
            if release and not self._block_pages[base]:
                del self._block_pages[base]
                self.device.allocator.free(base)

    # -- buffers ----------------------------------------------------------------------------------

    def alloc(self, nbytes: int, align: int = 64, *, read: bool = True,
              write: bool = True) -> VirtualBuffer:
        """Allocate ``nbytes`` of virtual memory backed by physical pages from the device's
        allocator, mapped with the given permissions. The virtual range starts on a page (or a
        64 KiB run for buffers of 64 KiB or more, so their runs can carry the contiguous
        hint); ``align`` (a power of two up to 4096) is then always met.

        Raises
        ------
        OutOfMemoryError
            If the virtual range or the physical pages run out (nothing is left allocated).
        ValueError
            If ``nbytes < 1`` or ``align`` is not a power of two of at most 4096.
        NPUError
            If the context was destroyed.
        """
        self._check_live()
        if align < 1 or align & (align - 1) or align > VM_PAGE_BYTES:
            raise ValueError(f"alignment must be a power of two <= 4096, got {align!r}")
        n_pages = -(-int(nbytes) // VM_PAGE_BYTES)
        va = self.va.alloc(n_pages * VM_PAGE_BYTES,
                           _RUN_BYTES if n_pages >= CONTIG_PAGES else VM_PAGE_BYTES)
        pas: list[int] = []
        blocks: list[int] = []          # the physical block of each page
        try:
            i = 0
            while i < n_pages:
                if self.contiguous and n_pages - i >= CONTIG_PAGES \
                        and (va >> VM_PAGE_SHIFT) + i \
                        == ((va >> VM_PAGE_SHIFT) + i) // CONTIG_PAGES * CONTIG_PAGES:
                    try:
                        base = self.device.allocator.alloc(_RUN_BYTES, _RUN_BYTES)
                    except OutOfMemoryError:
                        base = None
                    if base is not None:
                        blocks += [base] * CONTIG_PAGES
                        pas += [base + j * VM_PAGE_BYTES for j in range(CONTIG_PAGES)]
                        i += CONTIG_PAGES
                        continue
                base = self.device.allocator.alloc(VM_PAGE_BYTES, VM_PAGE_BYTES)
                blocks.append(base)
                pas.append(base)
                i += 1
        except OutOfMemoryError:
            for b in dict.fromkeys(blocks):
                self.device.allocator.free(b)
            self.va.free(va)
            raise
        self.map(va, pas, read=read, write=write, blocks=blocks)
        buf = VirtualBuffer(self, va, int(nbytes))
        self._buffers[va] = buf
        return buf

    def upload(self, array: npt.ArrayLike, align: int = 64) -> VirtualBuffer:
        """:meth:`alloc` a buffer and copy ``array``'s C-ordered raw bytes into it."""
        a = np.ascontiguousarray(array)
        buf = self.alloc(max(a.nbytes, 1), align)
        buf.write(a.tobytes())
        return buf

    def share(self, buf: VirtualBuffer, other: Context, *, write: bool = False
              ) -> VirtualBuffer:
        """Map ``buf``'s physical pages into ``other`` (read-only unless ``write``): a new
        :class:`VirtualBuffer` of ``other`` that sees the same bytes. The owner keeps the
        pages: free the shared buffer (or unmap it) before the owner frees its own (the owner's
        :meth:`free`, :meth:`unmap` and :meth:`destroy` refuse until then,
        :class:`~sw.runtime.ContextInUseError`).

        Raises
        ------
        ValueError
            If ``buf`` is not a live buffer of this context.
        NPUError
            If this context or ``other`` was destroyed.
        """
        self._check_live()
        other._check_live()
        if buf.context is not self or buf.freed:
            raise ValueError(f"{buf!r} is not a live buffer of this context")
        n_pages = -(-buf.nbytes // VM_PAGE_BYTES)
        first = buf.addr >> VM_PAGE_SHIFT
        pas = [self.pages[first + i].pa for i in range(n_pages)]
        va = other.va.alloc(n_pages * VM_PAGE_BYTES,
                            _RUN_BYTES if n_pages >= CONTIG_PAGES else VM_PAGE_BYTES)
        other.map(va, pas, read=True, write=write)
        shared = VirtualBuffer(other, va, buf.nbytes)
        other._buffers[va] = shared
        return shared

    def free(self, buf: VirtualBuffer, *, stream: Stream | None = None,
             wait: bool = True) -> None:
        """Unmap ``buf`` (with the TLB invalidate of :meth:`unmap`), free its physical pages
        if this context owns them, and its virtual range. With ``wait=False`` the
        ``TLB_INVALIDATE`` goes on ``stream`` unwaited, and the pages and the range are freed
        once the host has seen it retire (the runtime's deferred releases, which must not
        block).

        Raises
        ------
        ContextInUseError
            If another context still maps pages this frees (:meth:`unmap`'s; with
            ``wait=False`` too); nothing is freed.
        NPUError
            If ``buf`` is not a live buffer of this context (freed already, or another
            context's), or the context was destroyed, or ``stream`` was
            (:class:`~sw.runtime.StreamDestroyedError`).
        """
        self._free(buf, stream, wait, keep_shared=False)

    def _free(self, buf: VirtualBuffer, stream: Stream | None, wait: bool,
              keep_shared: bool) -> None:
        """:meth:`free`; ``keep_shared``: where another context maps pages it would free,
        keep them instead of refusing (as ``unmap(release=False)``: :meth:`destroy` frees
        them, once nobody else maps them)."""
        self._check_live()
        if stream is not None:
            stream._check_live()
        if buf.context is not self or self._buffers.get(buf.addr) is not buf:
            raise NPUError(f"{buf!r} is not a live buffer of this context (double free?)")
        free_pages = not (keep_shared and self._mapped_elsewhere(self._released(_vpns(buf))))
        if wait:
            self.unmap(buf.addr, buf.nbytes, stream=stream, release=free_pages)
            del self._buffers[buf.addr]
            self.va.free(buf.addr)
            buf._freed = True
            return
        _, freed = self._clear_ptes(buf.addr, buf.nbytes, free_pages)
        del self._buffers[buf.addr]
        buf._freed = True
        s = self.device.default_stream if stream is None else stream
        cmds = CommandList()
        cmds.tlb_invalidate(asid=self.asid)
        s.launch(cmds, ordered=False)
        self._stale = True

        def release(now: bool) -> None:
            if not self.destroyed:      # (destroy freed the pages and the whole range)
                self._free_physical(freed, free_pages)
                self.va.free(buf.addr)
        self.device.deferred.add(release, [(s, s.commands_submitted)])

    def destroy(self, *, stream: Stream | None = None) -> None:
        """Unmap whatever is still mapped (one ``TLB_INVALIDATE`` of this context on
        ``stream``, default the device's default stream, waited for), free the physical
        blocks the context owns (its buffers' pages, and pages it kept with
        ``unmap(release=False)``), the page tables and the address-space id, which a new
        context can then reuse. The context's buffers count as freed; the context can no
        longer be used.

        Streams bound to it must be destroyed first (:meth:`Stream.destroy`): destroy waits
        until their work retired (which releases them), and pages other contexts map
        (:meth:`share`, or :meth:`map` of its physical pages) must be unmapped there first
        (the owner's blocks are freed here, the others' mappings would outlive them).

        Raises
        ------
        ContextInUseError
            If streams that are not destroyed are bound to the context (their queues
            translate through its page tables; ``streams``), or other live contexts map its
            physical pages (``shared``: context, virtual address, pages); nothing is
            changed.
        NPUError
            If the context was already destroyed, or ``stream`` was
            (:class:`~sw.runtime.StreamDestroyedError`).
        DeviceError
            If the work of a destroyed stream bound to it fails (its queue is reset) or
            ``stream``'s queue reports an error during the invalidation; nothing is freed
            then.
        DeviceTimeoutError
            If the work of a destroyed stream bound to it does not retire within
            :attr:`~sw.runtime.Device.default_timeout_cycles`; nothing is freed.
        """
        if self.destroyed:
            raise NPUError(f"context {self.asid} already destroyed")
        if stream is not None:
            stream._check_live()
        bound = [s for s in self.device.streams.values() if s.context is self]
        live = [s for s in bound if not s.destroyed]
        if live:
            queues = ", ".join(str(s.queue) for s in live)
            raise ContextInUseError(
                f"context {self.asid} still has {len(live)} stream(s) bound (queue(s) "
                f"{queues}): destroying it would leave their Q_VM pointing at freed page "
                f"tables; destroy them first (Stream.destroy)", live)
        self._check_unshared(self._block_pages, "destroying it")
        for s in bound:     # destroyed, work not seen retired: its release unbinds it
            s._wait_retired()
        if self.pages or self._stale:   # no TLB may hold a page once freed or the ASID reused
            self.device.invalidate_tlb(self, stream=stream)
        for base in self._block_pages:
            self.device.allocator.free(base)
        for t in self._tables.values():
            t.free()
        self._root.free()
        for buf in self._buffers.values():
            buf._freed = True
        self.pages.clear()
        self._tables.clear()
        self._buffers.clear()
        self._block_pages.clear()
        self.destroyed = True
        self.device._release_context(self)

    def _check_unshared(self, blocks: Iterable[int], action: str) -> None:
        """Raise :class:`~sw.runtime.ContextInUseError` (``shared``) if another context maps
        a page of ``blocks`` (physical blocks this context owns, which ``action`` frees)."""
        shared = self._mapped_elsewhere(blocks)
        if shared:
            runs: dict[Context, list[str]] = {}
            for c, va, n in shared:
                runs.setdefault(c, []).append(f"[{va:#x}, +{n} pages)")
            where = "; ".join(f"in context {c.asid} at {', '.join(r)}" for c, r in runs.items())
            raise ContextInUseError(
                f"context {self.asid}'s physical pages are mapped {where}: unmap them there "
                f"first (free the buffers share made); {action} would free them under "
                f"those mappings; nothing was changed", shared=shared)

    def _mapped_elsewhere(self, blocks: Iterable[int]) -> list[tuple[Context, int, int]]:
        """The runs of pages of the device's other contexts that map a physical page of
        ``blocks`` (blocks this context owns): ``(context, first virtual address, pages)``."""
        owned = set()
        for base in blocks:
            size = self.device.allocator.size_of(base)
            owned.update(range(base, base + size, VM_PAGE_BYTES))
        runs: list[tuple[Context, int, int]] = []
        for other in self.device.contexts.values():
            if other is self:
                continue
            for vpn in sorted(other.pages):
                if other.pages[vpn].pa not in owned:
                    continue
                va = vpn << VM_PAGE_SHIFT
                if runs and runs[-1][0] is other \
                        and runs[-1][1] + runs[-1][2] * VM_PAGE_BYTES == va:
                    runs[-1] = (other, runs[-1][1], runs[-1][2] + 1)
                else:
                    runs.append((other, va, 1))
        return runs

    # -- host access ------------------------------------------------------------------------------

    def translate(self, va: int, *, write: bool = False) -> int:
        """The physical address of ``va`` from the host's copy of the page table.

        Raises
        ------
        ValueError
            If the page is not mapped, or lacks the permission.
        NPUError
            If the context was destroyed.
        """
        self._check_live()
        m = self.pages.get(va >> VM_PAGE_SHIFT)
        if m is None or not (m.write if write else m.read):
            raise ValueError(f"virtual address {va:#x} is not mapped "
                             f"{'writable' if write else 'readable'} in context {self.asid}")
        return m.pa + va % VM_PAGE_BYTES

    def read(self, va: int, nbytes: int) -> bytes:
        """Host read of ``nbytes`` at virtual address ``va`` (page by page, any permission
        the host's copy holds: the host reads a read-protected page too)."""
        out = bytearray()
        while nbytes > 0:
            m = self._mapping(va)
            n = min(nbytes, VM_PAGE_BYTES - va % VM_PAGE_BYTES)
            out += self.device.backend.mem_read(m.pa + va % VM_PAGE_BYTES, n)
            va, nbytes = va + n, nbytes - n
        return bytes(out)

    def write(self, va: int, data: bytes) -> None:
        """Host write of ``data`` at virtual address ``va`` (page by page)."""
        off = 0
        while off < len(data):
            m = self._mapping(va + off)
            n = min(len(data) - off, VM_PAGE_BYTES - (va + off) % VM_PAGE_BYTES)
            self.device.backend.mem_write(m.pa + (va + off) % VM_PAGE_BYTES, data[off:off + n])
            off += n

    def _mapping(self, va: int) -> Mapping:
        self._check_live()
        m = self.pages.get(va >> VM_PAGE_SHIFT)
        if m is None:
            raise ValueError(f"virtual address {va:#x} is not mapped in context {self.asid}")
        return m

    def _check_live(self) -> None:
        if self.destroyed:
            raise NPUError(f"context {self.asid} was destroyed (create a new one with "
                           f"Device.create_context)")

    def __repr__(self) -> str:
        return f"<Context asid={self.asid} pages={len(self.pages)}>"


class VirtualBuffer(Buffer):
    """A buffer in a :class:`Context`'s address space: ``addr`` is a virtual address, which
    commands of the context's streams use as their DRAM address."""

    def __init__(self, context: Context, addr: int, nbytes: int) -> None:
        super().__init__(context.device, addr, nbytes)
        self.context = context

    def free(self) -> None:
        """Unmap and free (:meth:`Context.free`)."""
        if self._freed:
            raise NPUError(f"buffer at {self.addr:#x} ({self.nbytes} bytes) freed twice")
        self.context.free(self)

    def write(self, data: bytes | npt.NDArray, offset: int = 0) -> None:
        raw = data.tobytes() if isinstance(data, np.ndarray) else bytes(data)
        self._check(offset, len(raw))
        self.context.write(self.addr + offset, raw)

    def read(self, nbytes: int | None = None, offset: int = 0) -> bytes:
        n = self.nbytes - offset if nbytes is None else nbytes
        self._check(offset, n)
        return self.context.read(self.addr + offset, n)

    def __repr__(self) -> str:
        state = " freed" if self._freed else ""
        return (f"<VirtualBuffer ctx={self.context.asid} va={self.addr:#x} {self.nbytes} "
                f"bytes{state}>")


def check_free(buf: Buffer) -> None:
    """Raise now what freeing ``buf`` later (:func:`free_unwaited`, from a deferred release)
    would: :class:`~sw.runtime.ContextInUseError` if it is a :class:`VirtualBuffer` whose
    pages another context still maps (:meth:`Context.free`)."""
    if isinstance(buf, VirtualBuffer) and not buf.freed:
        buf.context._check_unshared(buf.context._released(_vpns(buf)), "freeing it")


def _vpns(buf: VirtualBuffer) -> range:
    """The virtual page numbers of ``buf``."""
    first = buf.addr >> VM_PAGE_SHIFT
    return range(first, first - (-buf.nbytes // VM_PAGE_BYTES))


def free_unwaited(buf, stream: Stream, wait: bool) -> None:
    """Free ``buf``; without ``wait`` a :class:`VirtualBuffer` goes through
    :meth:`Context.free` with ``wait=False`` (its ``TLB_INVALIDATE`` on ``stream``, on the
    default stream if ``stream`` was destroyed, unwaited): for the runtime's deferred
    releases, which run inside host calls that must not block (``Stream.query``,
    ``Event.query``). Such a release cannot refuse: pages of ``buf`` that another context
    maps (the runtime's own buffers, a ring say, mapped there by hand) stay the owner's until
    :meth:`Context.destroy`, which refuses while they are mapped."""
    if isinstance(buf, VirtualBuffer):
        buf.context._free(buf, None if wait or stream.destroyed else stream, wait,
                          keep_shared=True)
    else:
        buf.free()
