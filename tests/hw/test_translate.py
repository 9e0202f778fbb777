"""The TLB and page walker (:class:`hw.dma.translate.Translator`) alone, on a simulated AXI
memory: which entry a lookup uses when two cover the same page."""

import struct

import pytest
from amaranth import Elaboratable, Module
from amaranth.sim import Simulator

from hw.bus import AXI4Signature
from hw.config import NPUConfig
from hw.dma.translate import Translator
from hw.isa import CONTIG_PAGES, VM_PAGE_SHIFT, VPN_BITS, ErrorCode
from tests.support.amaranth_axi import AxiMemory

CFG = NPUConfig()
ROOT, L0 = 1, 2                 # page numbers of the level-1 and level-0 tables


class _Harness(Elaboratable):
    def __init__(self):
        self.bus = AXI4Signature(addr_width=CFG.axi_addr_bits, data_width=CFG.axi_data_bits,
                                 id_width=CFG.axi_id_bits).create()
        self.tr = Translator(CFG, write=False, bus=self.bus)

    def elaborate(self, platform):
        m = Module()
        m.submodules.tr = self.tr
        return m


def _pte(ppn: int, contig: bool = False, read: bool = True) -> bytes:
    # Pte: valid, read, write, contig, 8 bits of padding, ppn (hw.isa.Pte)
    return struct.pack("<I", 1 | (read << 1) | 4 | (contig << 3) | (ppn << 12))


@pytest.mark.parametrize("readable", [True, False], ids=["readable", "unreadable"])
def test_two_entries_covering_a_page_the_lowest_one_decides(readable):
    """Page 0x20 is walked with a single-page entry (-> frame 0x100, TLB entry 0); its
    level-0 entry is then rewritten as part of a contiguous run without a TLB_INVALIDATE (a
    software error the hardware still defines: hw.isa.vm) and page 0x21 is walked: a contig
    entry for pages 0x20..0x2F (-> frames 0x200.., entry 1, readable). Page 0x20 now matches
    both entries; the lowest, entry 0, translates it and decides its permission (as the
    performance model's TLB does): with ``readable`` False its read faults (PAGE_PERMISSION)
    while page 0x21 (entry 1 alone) reads."""
    h = _Harness()
    mem = AxiMemory(h.bus, 1 << 22, CFG.axi_data_bytes, seed=0)
    vpn0 = 0x20
    level1 = (ROOT << VM_PAGE_SHIFT) + 4 * (vpn0 >> VPN_BITS)
    mem.mem[level1:level1 + 4] = _pte(L0)
    level0 = (L0 << VM_PAGE_SHIFT) + 4 * (vpn0 & ((1 << VPN_BITS) - 1))
    mem.mem[level0:level0 + 4] = _pte(0x100, read=readable)
    seen = {}

    async def start(ctx):
        ctx.set(h.tr.start, 1)
        await ctx.tick()
        ctx.set(h.tr.start, 0)

    async def lookup(ctx, vaddr):
        """The physical address of a read of ``vaddr``, or its fault's ErrorCode."""
        ctx.set(h.tr.valid, 1)
        ctx.set(h.tr.vaddr, vaddr)
        ctx.set(h.tr.row_addr, vaddr)
        for _ in range(200):
            if ctx.get(h.tr.ok) or ctx.get(h.tr.fault):
                break
            await ctx.tick()
        if ctx.get(h.tr.ok):
            result = ctx.get(h.tr.paddr)
            ctx.set(h.tr.handshake, 1)
        else:
            result = ErrorCode(ctx.get(h.tr.fault_code))
        await ctx.tick()
        ctx.set(h.tr.handshake, 0)
        ctx.set(h.tr.valid, 0)
        await ctx.tick()
        await start(ctx)            # the next command: a fault is cleared
        return result

    async def tb(ctx):
        ctx.set(h.tr.vm, {"enable": 1, "asid": 3, "root": ROOT})
        await start(ctx)
        seen["single"] = await lookup(ctx, (vpn0 << VM_PAGE_SHIFT) + 0x40)   # fills entry 0
        for i in range(CONTIG_PAGES):           # the run 0x20..0x2F -> 0x200.., contiguous
            mem.mem[level0 + 4 * i:level0 + 4 * i + 4] = _pte(0x200 + i, contig=True)
        seen["run"] = await lookup(ctx, ((vpn0 + 1) << VM_PAGE_SHIFT) + 0x40)  # entry 1
        seen["both"] = await lookup(ctx, (vpn0 << VM_PAGE_SHIFT) + 0x80)

    sim = Simulator(h)
    sim.add_clock(1e-8)
    sim.add_testbench(mem.run_reads, background=True)
    sim.add_testbench(tb)
    sim.run()
    no_read = ErrorCode.PAGE_PERMISSION
    assert seen == {"single": (0x100 << VM_PAGE_SHIFT) + 0x40 if readable else no_read,
                    "run": (0x201 << VM_PAGE_SHIFT) + 0x40,
                    "both": (0x100 << VM_PAGE_SHIFT) + 0x80 if readable else no_read}
