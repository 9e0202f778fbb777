"""Store data path of the DMA: local rows into words, realigned into W beats, AW bursts, B
responses (:class:`StoreMover`)."""

from amaranth import Const, Elaboratable, Module, Mux, ResetInserter, Signal
from amaranth.lib import data
from amaranth.lib.fifo import SyncFIFO

from hw.bus import AXI_BURST_INCR
from hw.config import NPUConfig
from hw.dma.align import Packer
from hw.dma.bursts import BurstGen, Walker
from hw.dma.common import W_BUFFER_DEPTH, LocalGeometry, log2
from hw.dma.control import Control
from hw.dma.translate import Translator
from hw.isa import LocalMem

__all__ = ["StoreMover"]


class StoreMover(Elaboratable):
    """Store data path: local rows read into words, realigned into W beats with WSTRB
    (:class:`~hw.dma.align.Packer`), AW bursts, B responses.

    Local reads (and the flush slots of :class:`Walker`) are issued only when the W beat
    buffer is sure to have room one cycle later, so the read data never has to wait. Only the
    bytes of the DRAM rows are strobed. ``stall_dram`` is :attr:`DMA.stall` ``.store_dram``.
    """

    def __init__(self, cfg: NPUConfig, control: Control, bus, read_ports: dict,
                 translator: Translator | None = None):
        self.cfg = cfg
        self.control = control
        self.bus = bus
        self.translator = translator
        self.read_ports = read_ports
        self.stall_dram = Signal()

    def elaborate(self, platform):
        m = Module()
        cfg, ctl, bus = self.cfg, self.control, self.bus
        beat = cfg.axi_data_bytes

        m.submodules.bursts = bursts = BurstGen(ctl.body, beat_bytes=beat,
                                                 addr_width=cfg.axi_addr_bits,
                                                 max_burst=cfg.dma_max_burst_beats)
        m.submodules.walker = walker = Walker(ctl.body, ctl.is_acc, cfg=cfg, store_slots=True)
        m.submodules.packer = packer = Packer(beat_bytes=beat,
                                              max_burst=cfg.dma_max_burst_beats)
        # Start address of every write burst waiting for its B response.
        m.submodules.in_flight = in_flight = SyncFIFO(width=cfg.axi_addr_bits,
                                                      depth=cfg.dma_outstanding)
        w_beat = data.StructLayout({"data": beat * 8, "strb": beat, "last": 1})
        # a command starts with an empty buffer (after a page fault, beats of bursts that
        # never went may be left in it; they are never sent)
        m.submodules.w_beats = w_beats = ResetInserter(ctl.start)(
            SyncFIFO(width=w_beat.size, depth=W_BUFFER_DEPTH))
        m.d.comb += [bursts.start.eq(ctl.start), walker.start.eq(ctl.start)]

        # -- AW (through the translator: a burst goes once its page is translated) ----------
        tr = self.translator
        fault = Signal()
        aw_ok = Signal()
        awaddr = Signal(32)
        if tr is None:
            m.d.comb += [aw_ok.eq(bursts.valid), awaddr.eq(bursts.addr)]
        else:
            m.submodules.translator = tr
            m.d.comb += [
                tr.start.eq(ctl.start), tr.vm.eq(ctl.vm), tr.valid.eq(bursts.valid),
                tr.vaddr.eq(bursts.addr), tr.row_addr.eq(bursts.row_addr),
                tr.handshake.eq(bus.awvalid & bus.awready),
                aw_ok.eq(tr.ok), awaddr.eq(tr.paddr), fault.eq(tr.fault),
                ctl.fault.eq(tr.fault), ctl.fault_code.eq(tr.fault_code),
                ctl.fault_addr.eq(tr.fault_addr),
            ]
        m.d.comb += [
            bursts.room.eq(in_flight.w_rdy),
            bus.awid.eq(0),
            bus.awaddr.eq(awaddr),
            bus.awlen.eq(bursts.len),
            bus.awsize.eq(log2(beat)),
            bus.awburst.eq(AXI_BURST_INCR),
            bus.awvalid.eq(aw_ok),
            bursts.ready.eq(bus.awready & aw_ok),
            in_flight.w_en.eq(aw_ok & bus.awready),
            in_flight.w_data.eq(bursts.addr),
        ]
        # W beats owed to bursts whose AW went (after a fault, only those are sent)
        owed = Signal(range(cfg.dma_outstanding * cfg.dma_max_burst_beats + 1))
        owed_next = owed + Mux(aw_ok & bus.awready, bursts.len + 1, 0) \
            - (bus.wvalid & bus.wready)
        m.d.sync += owed.eq(Mux(ctl.start, 0, owed_next))

        # -- Read local rows: one chunk (or flush slot) per cycle while the buffer has room ----
        read = Signal()
        m.d.comb += [
            read.eq(walker.valid & (w_beats.level <= W_BUFFER_DEPTH - 2)),
            walker.step.eq(read),
        ]
        for mem, port in self.read_ports.items():
            selected = ctl.is_acc if mem == LocalMem.ACC else ~ctl.is_acc
            m.d.comb += [port.addr.eq(walker.lrow),
                         port.en.eq(read & selected & ~walker.slot)]

        # -- Place the chunk (read data of the previous cycle) into its word -----------------
        s2 = {name: Signal.like(getattr(walker, name), name=f"s2_{name}")
              for name in ("off", "sub", "beat_end", "last_chunk", "slot", "shift",
                           "first_word", "store_flush")}
        s2_valid = Signal()
        s2_page_beat0 = Signal(12 - log2(beat))
        m.d.sync += [s2_valid.eq(read), s2_page_beat0.eq(walker.row_lo[log2(beat):]),
                     *[s2[name].eq(getattr(walker, name)) for name in s2]]
        asm_data = Signal(beat * 8)
        asm_strb = Signal(beat)
        word = Signal(beat * 8)
        word_strb = Signal(beat)
        m.d.comb += [word.eq(asm_data), word_strb.eq(asm_strb)]
        for mem, port in self.read_ports.items():
            local = LocalGeometry(cfg, mem)
            selected = ctl.is_acc if mem == LocalMem.ACC else ~ctl.is_acc
            chunk_strb = self._chunk_strobes(local, s2["last_chunk"])
            with m.If(selected):
                if local.row_bytes == beat:
                    m.d.comb += [word.eq(port.data), word_strb.eq(chunk_strb)]
                elif local.row_bytes < beat:
                    index = s2["off"][local.log2_row:]
                    m.d.comb += [
                        word.word_select(index, local.row_bytes * 8).eq(port.data),
                        word_strb.word_select(index, local.row_bytes).eq(chunk_strb),
                    ]
                else:
                    m.d.comb += [
                        word.eq(port.data.word_select(s2["sub"], beat * 8)),
                        word_strb.eq(chunk_strb),
                    ]
        word_end = s2_valid & s2["beat_end"] & ~s2["slot"]
        with m.If(ctl.start):
            m.d.sync += asm_strb.eq(0)
        with m.Elif(s2_valid & ~s2["slot"]):
            with m.If(s2["beat_end"]):
                m.d.sync += asm_strb.eq(0)
            with m.Else():
                m.d.sync += [asm_data.eq(word), asm_strb.eq(word_strb)]

        # -- Realign the word into a W beat ----------------------------------------------------
        m.d.comb += [
            packer.start.eq(ctl.start),
            packer.emit.eq(word_end | (s2_valid & s2["slot"])),
            packer.slot.eq(s2["slot"]),
            packer.word.eq(word),
            packer.strb.eq(word_strb),
            packer.shift.eq(s2["shift"]),
            packer.first_word.eq(s2["first_word"]),
            packer.row_last.eq(s2["slot"] | (s2["last_chunk"] & ~s2["store_flush"])),
            packer.page_beat0.eq(s2_page_beat0),
        ]
        w_in = data.View(w_beat, w_beats.w_data)
        m.d.comb += [
            w_beats.w_en.eq(packer.emit),
            w_in.data.eq(packer.beat),
            w_in.strb.eq(packer.beat_strb),
            w_in.last.eq(packer.last),
        ]

        # -- W (never waits for AW) ----------------------------------------------------------
        w_out = data.View(w_beat, w_beats.r_data)
        m.d.comb += [
            bus.wvalid.eq(w_beats.r_rdy & (~fault | (owed != 0))),
            bus.wdata.eq(w_out.data),
            bus.wstrb.eq(w_out.strb),
            bus.wlast.eq(w_out.last),
            w_beats.r_en.eq(bus.wready),
        ]

        # -- B -------------------------------------------------------------------------------
        error = Signal()
        error_addr = Signal(32)
        m.d.comb += [bus.bready.eq(1), in_flight.r_en.eq(bus.bvalid)]
        with m.If(ctl.start):
            m.d.sync += error.eq(0)
        with m.Elif(bus.bvalid & bus.bresp[1] & ~error):
            m.d.sync += [error.eq(1), error_addr.eq(in_flight.r_data)]

        all_sent = Mux(fault, owed == 0, ~walker.valid & ~s2_valid & ~w_beats.r_rdy)
        m.d.comb += self.stall_dram.eq((bus.awvalid & ~bus.awready) | (bus.wvalid & ~bus.wready)
                                       | (all_sent & in_flight.r_rdy & ~bus.bvalid))
        # after a page fault: once the issued bursts were answered (their W beats all went)
        finished = Signal()
        m.d.comb += [
            finished.eq(~in_flight.r_rdy & Mux(fault, owed == 0,
                                               bursts.idle & ~walker.valid & ~s2_valid
                                               & ~w_beats.r_rdy)),
            ctl.finished.eq(finished),
            bursts.stop.eq(ctl.transfer & finished & fault),
            walker.stop.eq(ctl.transfer & finished & fault),
            ctl.bus_error.eq(error),
            ctl.bus_error_addr.eq(error_addr),
        ]
        return m

    def _chunk_strobes(self, local: LocalGeometry, last_chunk):
        """Byte enables of a chunk: all ``G`` bytes, but only the bytes of the DRAM row in its
        last chunk."""
        tail = self.control.body.row_bytes[:local.log2_chunk]   # bytes of a partial last chunk
        partial = last_chunk & (tail != 0)
        return Mux(partial, (Const(1, local.chunk_bytes + 1) << tail) - 1,
                   (1 << local.chunk_bytes) - 1)
