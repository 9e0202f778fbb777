"""Address translation of one DMA channel or of the command fetch: a TLB and a page walker
(:class:`Translator`), as :mod:`hw.isa.vm` defines them."""

from amaranth import Cat, Const, Elaboratable, Module, Mux, Signal
from amaranth.lib import data
from amaranth.lib.memory import Memory

from hw.bus import AXI_BURST_INCR
from hw.config import NPUConfig
from hw.dma.common import log2
from hw.isa import (
    CONTIG_PAGES,
    PTE_BYTES,
    VM_PAGE_BYTES,
    VM_PAGE_SHIFT,
    VPN_BITS,
    ErrorCode,
    Pte,
    VmWord,
)

__all__ = ["Translator"]

_VPN = 32 - VM_PAGE_SHIFT            # 20 bits of virtual page number
_RUN = log2(CONTIG_PAGES)            # low page-number bits a contiguous entry ignores


class _Tag(data.Struct):
    """What a TLB entry matches on (flip-flops: every entry is compared at once)."""
    valid: 1
    asid: 8
    vpn: _VPN
    contig: 1


class _Data(data.Struct):
    """What a TLB entry gives (LUT RAM, read at the matching entry)."""
    ppn: _VPN
    read: 1
    write: 1
    contig: 1


class Translator(Elaboratable):
    """TLB and page walker in front of one DMA channel's address channel (AR or AW), or of
    the command fetch's (AR for ring reads, AW for fence writes).

    Parameters
    ----------
    cfg : NPUConfig
        ``tlb_entries`` (> 0) entries; ``dram_bytes`` bounds the tables and pages.
    write : bool or None
        The channel writes DRAM (stores need ``Pte.write``), else reads (``Pte.read``); None:
        each burst says which with ``need_write``.
    bus : AXI4 interface
        The walker's AXI manager (reads only: AR and R; AW and W are never valid; ARVALID only
        while walking, RREADY only while it waits for an entry).

    Signals (the channel's side)
    ----------------------------
    start : in
        The channel starts a command (clears the fault).
    need_write : in (with ``write=None``)
        The burst presented writes (needs ``Pte.write``), else reads.
    vm : in, :class:`hw.isa.VmWord`
        The command's context (latched by the channel with the command).
    valid, vaddr, row_addr : in
        The burst generator presents a burst at virtual ``vaddr`` (its row starts at
        ``row_addr``); ``handshake``: the address channel took it.
    ok, paddr : out
        The burst may go out now (``valid`` and translation off, or a TLB entry covers it
        with the permission), at physical ``paddr`` (``vaddr`` with translation off). Once
        ``valid & ok`` was shown and not taken, both stay until the handshake (AXI): a held
        translation is kept in a register whatever happens to the TLB meanwhile.
    fault, fault_code, fault_addr : out
        A translation of this command faulted (from the cycle after it was found until the
        next ``start``): no further burst goes out; :func:`hw.isa.fault_addr`.
    inv, inv_all, inv_asid : in
        ``TLB_INVALIDATE`` (one-cycle pulse): drop every entry, or those of ``inv_asid``.

    Counter events (one bit each per cycle): ``ev_hit``, ``ev_miss``, ``ev_walk``,
    ``ev_fault`` (:data:`hw.isa.COUNTER_NAMES` ``tlb.<client>.*``).

    Timing: a hit adds nothing (the lookup is combinational on the burst's address). A miss
    in cycle ``t`` (the burst presented, no entry, no walk) starts the walk: ARVALID of the
    level-1 entry from ``t + 1``; the cycle its R beat is taken decides (a fault, or the
    level-0 entry's ARVALID from the next cycle); the cycle the level-0 beat is taken fills
    the entry, and the burst's lookup hits from the next cycle. A walk during which a
    ``TLB_INVALIDATE`` came fills nothing: the burst's lookup in the next cycle misses again
    and walks again (a miss more; the burst would otherwise wait for ever).
    """

    def __init__(self, cfg: NPUConfig, *, write: bool, bus):
        self.cfg = cfg
        self.is_write = write
        self.bus = bus
        self.need_write = Signal()
        self.start = Signal()
        self.vm = Signal(VmWord)
        self.valid = Signal()
        self.vaddr = Signal(32)
        self.row_addr = Signal(32)
        self.handshake = Signal()
        self.ok = Signal()
        self.paddr = Signal(32)
        self.fault = Signal()
        self.fault_code = Signal(ErrorCode)
        self.fault_addr = Signal(32)
        self.inv = Signal()
        self.inv_all = Signal()
        self.inv_asid = Signal(8)
        self.ev_hit = Signal()
        self.ev_miss = Signal()
        self.ev_walk = Signal()
        self.ev_fault = Signal()

    def elaborate(self, platform):
        m = Module()
        cfg, bus = self.cfg, self.bus
        n = cfg.tlb_entries
        beat = cfg.axi_data_bytes
        lb = log2(beat)
        # entries: the tags in registers, the translations in a LUT-RAM memory of n words (one
        # write port for fills, one combinational read port at the matching entry)
        entries = [Signal(_Tag, name=f"tlb{i}") for i in range(n)]
        m.submodules.tlb_data = tlb_data = Memory(shape=_Data, depth=n, init=[])
        data_rd = tlb_data.read_port(domain="comb")
        data_wr = tlb_data.write_port()
        fill_ptr = Signal(range(max(n, 2)))

        vpn = Signal(_VPN)
        off = Signal(VM_PAGE_SHIFT)
        m.d.comb += [vpn.eq(self.vaddr[VM_PAGE_SHIFT:]), off.eq(self.vaddr[:VM_PAGE_SHIFT])]
        enable = self.vm.enable

        # -- lookup: the lowest matching entry ---------------------------------------------------
        hit = Signal()
        for i, e in reversed(list(enumerate(entries))):
            same = Mux(e.contig, e.vpn[_RUN:] == vpn[_RUN:], e.vpn == vpn)
            with m.If(e.valid & (e.asid == self.vm.asid) & same):
                m.d.comb += [hit.eq(1), data_rd.addr.eq(i)]
        sel = data_rd.data
        if self.is_write is None:
            allowed = Mux(self.need_write, sel.write, sel.read)
        else:
            allowed = sel.write if self.is_write else sel.read
        page = Mux(sel.contig, Cat(vpn[:_RUN], sel.ppn[_RUN:]), sel.ppn)

        # -- a burst shown and not taken keeps its translation (AXI) ------------------------------
        held = Signal()
        held_paddr = Signal(32)
        looked = Signal()           # this burst's first lookup happened (hit/miss counted)
        fault_now = Signal()
        fault_code_now = Signal(ErrorCode)
        walking = Signal()
        translated = Signal(32)
        m.d.comb += translated.eq(Cat(off, page))
        with m.If(~enable):
            m.d.comb += [self.ok.eq(self.valid), self.paddr.eq(self.vaddr)]
        with m.Elif(held):
            m.d.comb += [self.ok.eq(1), self.paddr.eq(held_paddr)]
        with m.Else():
            m.d.comb += [self.ok.eq(self.valid & hit & allowed & ~self.fault),
                         self.paddr.eq(translated)]
        with m.If(self.start | self.handshake):
            m.d.sync += [held.eq(0), looked.eq(0)]
        with m.Else():
            with m.If(enable & self.ok):
                m.d.sync += [held.eq(1), held_paddr.eq(self.paddr)]
            with m.If(enable & self.valid & ~self.fault):
                m.d.sync += looked.eq(1)
        # a lookup of the burst shown (not held, no fault): the first one counts a hit; any
        # one that misses starts a walk, also after a walk that did not fill (a TLB_INVALIDATE
        # came during it), which the performance model times the same way
        lookup = enable & self.valid & ~held & ~self.fault
        first = lookup & ~looked
        m.d.comb += self.ev_hit.eq(first & hit)
        with m.If(enable & self.valid & ~held & ~self.fault & hit & ~allowed & ~walking):
            m.d.comb += [fault_now.eq(1), fault_code_now.eq(ErrorCode.PAGE_PERMISSION)]

        # -- page walker: level-1 entry, then level-0 entry, one beat each -----------------------
        pte_addr = Signal(32)
        pte = Pte(Signal(32))
        m.d.comb += pte.as_value().eq(bus.rdata.word_select(pte_addr[2:lb], 32) if lb > 2
                                      else bus.rdata[:32])
        walk_vpn = Signal(_VPN)
        dropped = Signal()          # an invalidate came during the walk: do not fill
        root_table = Signal(33)
        m.d.comb += root_table.eq(self.vm.root << VM_PAGE_SHIFT)
        bad_root = root_table + VM_PAGE_BYTES > cfg.dram_bytes
        table_end = (pte.ppn << VM_PAGE_SHIFT) + VM_PAGE_BYTES
        page_end = Mux(pte.contig,
                       (Cat(Const(0, _RUN), pte.ppn[_RUN:]) << VM_PAGE_SHIFT)
                       + CONTIG_PAGES * VM_PAGE_BYTES, table_end)
        r_take = bus.rvalid & bus.rready
        m.d.comb += [
            bus.arid.eq(0), bus.araddr.eq(Cat(Const(0, lb), pte_addr[lb:])), bus.arlen.eq(0),
            bus.arsize.eq(lb), bus.arburst.eq(AXI_BURST_INCR),
            bus.awvalid.eq(0), bus.wvalid.eq(0), bus.bready.eq(1),
        ]
        fill = Signal()
        with m.FSM(name="walk") as fsm:
            with m.State("Idle"):
                with m.If(lookup & ~hit):
                    m.d.comb += self.ev_miss.eq(1)
                    m.d.sync += [walk_vpn.eq(vpn), dropped.eq(0),
                                 pte_addr.eq(root_table + PTE_BYTES * vpn[VPN_BITS:])]
                    m.next = "Level1"
            with m.State("Level1"):
                with m.If(bad_root):
                    m.d.comb += [fault_now.eq(1),
                                 fault_code_now.eq(ErrorCode.PAGE_NOT_MAPPED)]
                    m.next = "Idle"
                with m.Else():
                    m.d.comb += bus.arvalid.eq(1)
                    with m.If(bus.arready):
                        m.next = "Level1-data"
            with m.State("Level1-data"):
                m.d.comb += bus.rready.eq(1)
                with m.If(r_take):
                    with m.If(~pte.valid | bus.rresp[1] | (table_end > cfg.dram_bytes)):
                        m.d.comb += [fault_now.eq(1),
                                     fault_code_now.eq(ErrorCode.PAGE_NOT_MAPPED)]
                        m.next = "Idle"
                    with m.Else():
                        m.d.sync += pte_addr.eq((pte.ppn << VM_PAGE_SHIFT)
                                                + PTE_BYTES * walk_vpn[:VPN_BITS])
                        m.next = "Level0"
            with m.State("Level0"):
                m.d.comb += bus.arvalid.eq(1)
                with m.If(bus.arready):
                    m.next = "Level0-data"
            with m.State("Level0-data"):
                m.d.comb += bus.rready.eq(1)
                with m.If(r_take):
                    with m.If(~pte.valid | bus.rresp[1] | (page_end > cfg.dram_bytes)):
                        m.d.comb += [fault_now.eq(1),
                                     fault_code_now.eq(ErrorCode.PAGE_NOT_MAPPED)]
                    with m.Else():
                        m.d.comb += fill.eq(~dropped & ~self.inv)
                    m.next = "Idle"
        m.d.comb += [walking.eq(~fsm.ongoing("Idle")), self.ev_walk.eq(walking)]
        with m.If(self.inv):
            m.d.sync += dropped.eq(1)

        # -- entries: fill round-robin, invalidate -----------------------------------------------
        new = _Tag(Signal(_Tag))
        m.d.comb += [
            new.valid.eq(1), new.asid.eq(self.vm.asid), new.contig.eq(pte.contig),
            new.vpn.eq(Mux(pte.contig, Cat(Const(0, _RUN), walk_vpn[_RUN:]), walk_vpn)),
            data_wr.addr.eq(fill_ptr), data_wr.en.eq(fill),     # (no fill with an invalidate)
            data_wr.data.read.eq(pte.read), data_wr.data.write.eq(pte.write),
            data_wr.data.contig.eq(pte.contig),
            data_wr.data.ppn.eq(Mux(pte.contig, Cat(Const(0, _RUN), pte.ppn[_RUN:]), pte.ppn)),
        ]
        for i, e in enumerate(entries):
            with m.If(self.inv & (self.inv_all | (e.asid == self.inv_asid))):
                m.d.sync += e.valid.eq(0)
            with m.Elif(fill & (fill_ptr == i)):
                m.d.sync += e.eq(new)
        with m.If(fill):
            m.d.sync += fill_ptr.eq(Mux(fill_ptr == n - 1, 0, fill_ptr + 1))

        # -- fault: sticky until the next command ------------------------------------------------
        fault_row = Signal(32)
        m.d.comb += fault_row.eq(Mux(self.row_addr > self.vaddr, self.row_addr, self.vaddr))
        with m.If(self.start):
            m.d.sync += self.fault.eq(0)
        with m.Elif(fault_now):
            m.d.sync += [self.fault.eq(1), self.fault_code.eq(fault_code_now),
                         self.fault_addr.eq(fault_row)]
        m.d.comb += self.ev_fault.eq(fault_now & ~self.start)
        return m
