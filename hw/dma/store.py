"""Store data path of the DMA: local rows into W beats, AW bursts, B responses
(:class:`StoreMover`)."""

from amaranth import Elaboratable, Module, Signal
from amaranth.lib import data
from amaranth.lib.fifo import SyncFIFO

from hw.bus import AXI_BURST_INCR
from hw.config import NPUConfig
from hw.dma.bursts import BurstGen, Walker
from hw.dma.common import W_BUFFER_DEPTH, LocalGeometry, log2
from hw.dma.control import Control
from hw.isa import LocalMem

__all__ = ["StoreMover"]


class StoreMover(Elaboratable):
    """Store data path: local rows read into W beats (with WSTRB), AW bursts, B responses.

    Local reads are issued only when the W beat buffer is sure to have room one cycle later,
    so the read data never has to wait. ``stall_dram`` is :attr:`DMA.stall` ``.store_dram``.
    """

    def __init__(self, cfg: NPUConfig, control: Control, bus, read_ports: dict):
        self.cfg = cfg
        self.control = control
        self.bus = bus
        self.read_ports = read_ports
        self.stall_dram = Signal()

    def elaborate(self, platform):
        m = Module()
        cfg, ctl, bus = self.cfg, self.control, self.bus
        beat = cfg.axi_data_bytes

        m.submodules.bursts = bursts = BurstGen(ctl.body, beat_bytes=beat,
                                                 addr_width=cfg.axi_addr_bits)
        m.submodules.walker = walker = Walker(ctl.body, ctl.is_acc, cfg=cfg)
        # Start address of every write burst waiting for its B response.
        m.submodules.in_flight = in_flight = SyncFIFO(width=cfg.axi_addr_bits,
                                                      depth=cfg.dma_outstanding)
        w_beat = data.StructLayout({"data": beat * 8, "strb": beat, "last": 1})
        m.submodules.w_beats = w_beats = SyncFIFO(width=w_beat.size, depth=W_BUFFER_DEPTH)
        m.d.comb += [bursts.start.eq(ctl.start), walker.start.eq(ctl.start)]

        # -- AW ------------------------------------------------------------------------------
        m.d.comb += [
            bursts.room.eq(in_flight.w_rdy),
            bus.awid.eq(0),
            bus.awaddr.eq(bursts.addr),
            bus.awlen.eq(bursts.len),
            bus.awsize.eq(log2(beat)),
            bus.awburst.eq(AXI_BURST_INCR),
            bus.awvalid.eq(bursts.valid),
            bursts.ready.eq(bus.awready),
            in_flight.w_en.eq(bursts.valid & bus.awready),
            in_flight.w_data.eq(bursts.addr),
        ]

        # -- Read local rows: one chunk per cycle while the beat buffer has room -------------
        read = Signal()
        m.d.comb += [
            read.eq(walker.valid & (w_beats.level <= W_BUFFER_DEPTH - 2)),
            walker.step.eq(read),
        ]
        for mem, port in self.read_ports.items():
            selected = ctl.is_acc if mem == LocalMem.ACC else ~ctl.is_acc
            m.d.comb += [port.addr.eq(walker.lrow), port.en.eq(read & selected)]

        # -- Place the chunk (read data of the previous cycle) into the W beat ---------------
        s2_valid = Signal()
        s2_off = Signal.like(walker.off)
        s2_sub = Signal.like(walker.sub)
        s2_beat_end = Signal()
        s2_burst_last = Signal()
        m.d.sync += [
            s2_valid.eq(read),
            s2_off.eq(walker.off),
            s2_sub.eq(walker.sub),
            s2_beat_end.eq(walker.beat_end),
            s2_burst_last.eq(walker.burst_last),
        ]
        asm_data = Signal(beat * 8)
        asm_strb = Signal(beat)
        beat_data = Signal(beat * 8)
        beat_strb = Signal(beat)
        m.d.comb += [beat_data.eq(asm_data), beat_strb.eq(asm_strb)]
        for mem, port in self.read_ports.items():
            local = LocalGeometry(cfg, mem)
            selected = ctl.is_acc if mem == LocalMem.ACC else ~ctl.is_acc
            with m.If(selected):
                if local.row_bytes == beat:
                    m.d.comb += [beat_data.eq(port.data), beat_strb.eq((1 << beat) - 1)]
                elif local.row_bytes < beat:
                    index = s2_off[local.log2_row:]
                    all_bytes = (1 << local.row_bytes) - 1
                    m.d.comb += [
                        beat_data.word_select(index, local.row_bytes * 8).eq(port.data),
                        beat_strb.word_select(index, local.row_bytes).eq(all_bytes),
                    ]
                else:
                    m.d.comb += [
                        beat_data.eq(port.data.word_select(s2_sub, beat * 8)),
                        beat_strb.eq((1 << beat) - 1),
                    ]
        with m.If(ctl.start):
            m.d.sync += asm_strb.eq(0)
        with m.Elif(s2_valid):
            with m.If(s2_beat_end):
                m.d.sync += asm_strb.eq(0)
            with m.Else():
                m.d.sync += [asm_data.eq(beat_data), asm_strb.eq(beat_strb)]
        w_in = data.View(w_beat, w_beats.w_data)
        m.d.comb += [
            w_beats.w_en.eq(s2_valid & s2_beat_end),
            w_in.data.eq(beat_data),
            w_in.strb.eq(beat_strb),
            w_in.last.eq(s2_burst_last),
        ]

        # -- W (never waits for AW) ----------------------------------------------------------
        w_out = data.View(w_beat, w_beats.r_data)
        m.d.comb += [
            bus.wvalid.eq(w_beats.r_rdy),
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

        all_sent = ~walker.valid & ~s2_valid & ~w_beats.r_rdy
        m.d.comb += self.stall_dram.eq((bus.awvalid & ~bus.awready) | (bus.wvalid & ~bus.wready)
                                       | (all_sent & in_flight.r_rdy & ~bus.bvalid))
        m.d.comb += [
            ctl.finished.eq(bursts.idle & ~in_flight.r_rdy & ~walker.valid & ~s2_valid
                            & ~w_beats.r_rdy),
            ctl.bus_error.eq(error),
            ctl.bus_error_addr.eq(error_addr),
        ]
        return m
