"""The fence states of the command processor's fetch FSM (:class:`~hw.cmdproc.fetch.FetchUnit`:
its docstring's **Fence** paragraph is the contract): check the fence address, write the word
in one beat, wait for the B response, then signal."""

from __future__ import annotations

from typing import TYPE_CHECKING

from amaranth import Module, Mux

from hw.arith import past_end
from hw.bus import AXI_BURST_INCR, AXI_RESP_OKAY
from hw.cmdproc.common import fence_body
from hw.isa import ErrorCode

if TYPE_CHECKING:
    from hw.cmdproc.fetch import FetchUnit, _FetchState

__all__ = ["fence_states"]


def _fail(unit: FetchUnit, m: Module, f: _FetchState, code, addr) -> None:
    """Report ``code`` at ``addr`` as the fence's error (unless its queue was reset)."""
    m.d.comb += [f.fence_err.eq(~f.abort & ~f.bit(unit.qclear)),
                 f.fence_info.code.eq(code), f.fence_info.addr.eq(addr),
                 f.fence_info.cmd.eq(f.cmd.index),
                 f.fence_info.opcode.eq(f.cmd.opcode)]
    m.next = "IDLE"


def fence_states(unit: FetchUnit, m: Module, f: _FetchState) -> None:
    """``FENCE_CHECK``, ``FENCE_WRITE``, ``FENCE_RESPONSE`` and ``FENCE_SIGNAL``, inside the
    fetch FSM (``with m.FSM()`` of :meth:`FetchUnit.elaborate`)."""
    cfg, bus = unit.config, unit.bus
    beat_bytes = cfg.axi_data_bytes
    hdr = f.cmd
    fence = fence_body(f.cmd)
    lane = fence.addr[:(beat_bytes.bit_length() - 1)] if beat_bytes > 4 else 0
    with m.State("FENCE_CHECK"):
        with m.If(f.gone()):
            m.next = "IDLE"
        with m.Elif(f.bit(f.fence_skip)):     # Q_RESUME.skip after its page fault
            with m.If(f.signals):             # its increment, then done (no interrupt)
                m.next = "FENCE_SIGNAL"
            with m.Else():
                m.d.comb += unit.fence_done.eq(1)
                m.next = "IDLE"
        with m.Elif(fence.addr[:2] != 0):
            _fail(unit, m, f, ErrorCode.MISALIGNED, fence.addr)
        with m.Elif(~f.translate & past_end(fence.addr, 4, cfg.dram_bytes)):
            _fail(unit, m, f, ErrorCode.BAD_DRAM_ADDR, fence.addr)
        with m.Elif(~f.translate & ((fence.addr < f.win_base)
                                    | (fence.addr + 4 > f.win_limit))):
            _fail(unit, m, f, ErrorCode.WINDOW, fence.addr)
        with m.Else():
            m.d.sync += [f.aw_done.eq(0), f.w_done.eq(0), f.addr.eq(fence.addr),
                         f.word.eq(Mux(fence.timestamp, unit.cycles, fence.value))]
            m.next = "FENCE_WRITE"
    with m.State("FENCE_WRITE"):
        # a translated fence's AW and W wait for its page (no W beat goes out before the
        # write is known to go); a page fault is the fence's error
        go, paddr = f.present(m, 1, ~f.aw_done)
        go = go | f.aw_done
        m.d.comb += [
            bus.awvalid.eq(~f.aw_done & go), bus.awaddr.eq(paddr), bus.awlen.eq(0),
            bus.awsize.eq(beat_bytes.bit_length() - 1), bus.awburst.eq(AXI_BURST_INCR),
            bus.wvalid.eq(~f.w_done & go), bus.wlast.eq(1),
            bus.wdata.eq(f.word << (lane * 8)),
            bus.wstrb.eq(0xF << lane),
        ]
        if cfg.tlb_entries:
            m.d.comb += f.tr.handshake.eq(bus.awvalid & bus.awready)
        aw_now = f.aw_done | (go & bus.awready)
        w_now = f.w_done | (go & bus.wready)
        with m.If(aw_now & w_now):
            m.next = "FENCE_RESPONSE"
        with m.Else():
            m.d.sync += [f.aw_done.eq(aw_now), f.w_done.eq(w_now)]
        if cfg.tlb_entries:
            # the fault is a register (sticky from the lookup or walk that found it) and
            # holds ``ok`` low, so no AW or W goes out with it: the error report does not
            # wait for this cycle's TLB compare
            with m.If(f.tr.fault):
                _fail(unit, m, f, f.tr.fault_code, fence.addr)
                m.d.comb += f.fence_fault.eq(f.fence_err)
    with m.State("FENCE_RESPONSE"):
        m.d.comb += bus.bready.eq(1)
        with m.If(bus.bvalid):
            with m.If(bus.bresp != AXI_RESP_OKAY):
                _fail(unit, m, f, ErrorCode.AXI_ERROR, fence.addr)
            with m.Elif(f.abort | f.bit(unit.qclear)):
                m.next = "IDLE"
            with m.Elif(f.signals):
                m.next = "FENCE_SIGNAL"
            with m.Else():
                m.d.comb += [unit.fence_irq.eq(hdr.flags.irq), unit.fence_done.eq(1)]
                m.next = "IDLE"
    with m.State("FENCE_SIGNAL"):
        with m.If(f.abort | f.bit(unit.qclear)):
            m.next = "IDLE"
        with m.Else():
            m.d.comb += unit.fence_inc.valid.eq(1)
            with m.If(unit.fence_inc.ready):     # (a skipped fence: no interrupt)
                m.d.comb += [unit.fence_irq.eq(hdr.flags.irq & ~f.bit(f.fence_skip)),
                             unit.fence_done.eq(1)]
                m.next = "IDLE"
