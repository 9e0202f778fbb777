"""A small stand-in for ``hw.top.NPU`` with the same ports, for testing the co-simulation layer.

It has a few CSRs (``Csr.ID`` reads :data:`hw.isa.CSR_ID_VALUE`) and a copy engine: writing
``GO`` copies ``BEATS`` bus words from ``SRC`` to ``DST`` with AXI4 INCR bursts of ``BURST``
beats, keeping up to ``MAX_OUT`` read bursts in flight (IDs 0, 1, 2, ... in issue order), writing
every beat with the byte mask ``WSTRB``, and raises ``IrqBit.FENCE`` in ``IRQ_STATUS`` when done.
``STATUS`` latches what the engine saw on the bus (see :class:`StandInCsr`).
"""

from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from hw.bus import AXI_BURST_INCR, AXI4LiteSignature, AXI4Signature
from hw.config import NPUConfig
from hw.isa import CSR_ID_VALUE, Csr

__all__ = ["StandIn", "StandInCsr"]


class StandInCsr:
    """CSR offsets of the stand-in copy engine (bytes)."""
    SRC = 0x200        #: source byte address
    DST = 0x204        #: destination byte address
    BEATS = 0x208      #: number of bus words to copy
    BURST = 0x20C      #: beats per burst, 1..256
    WSTRB = 0x210      #: byte mask written with every beat
    GO = 0x214         #: write anything: start (clears STATUS error bits)
    STATUS = 0x218     #: bit 0 busy, 1 RRESP error, 2 BRESP error, 3 RID out of order
    MAX_OUT = 0x21C    #: read bursts allowed in flight, 1..15
    MAX_SEEN = 0x220   #: most read bursts seen in flight since GO
    HANG = 0xFFC       #: a read here is never answered


class StandIn(wiring.Component):
    """Stand-in NPU: AXI4-Lite CSRs, an AXI4 copy engine and ``irq``.

    Parameters
    ----------
    config : NPUConfig
        Bus widths come from ``axi_addr_bits``, ``axi_data_bits`` and ``axi_id_bits``.
    """

    def __init__(self, config: NPUConfig):
        if not isinstance(config, NPUConfig):
            raise TypeError(f"config must be an NPUConfig, not {config!r}")
        self.config = config
        super().__init__({
            "csr": In(AXI4LiteSignature(addr_width=12)),
            "mem": Out(AXI4Signature(addr_width=config.axi_addr_bits,
                                     data_width=config.axi_data_bits,
                                     id_width=config.axi_id_bits)),
            "irq": Out(1),
        })

    def elaborate(self, platform):
        cfg = self.config
        db = cfg.axi_data_bytes
        m = Module()
        m.submodules.fifo = fifo = SyncFIFOBuffered(width=cfg.axi_data_bits, depth=512)
        csr, mem = self.csr, self.mem

        src = Signal(32)
        dst = Signal(32)
        beats = Signal(32)
        burst = Signal(9, init=16)
        wstrb = Signal(db, init=(1 << db) - 1)
        max_out = Signal(4, init=4)
        max_seen = Signal(4)
        busy = Signal()
        errors = Signal(3)
        irq_status = Signal()
        irq_enable = Signal()
        cycles = Signal(32)
        m.d.sync += cycles.eq(cycles + 1)
        m.d.comb += self.irq.eq(irq_status & irq_enable)

        # -- read engine: up to max_out bursts in flight ---------------------------------------
        rd_addr = Signal(32)
        rd_left = Signal(32)
        outstanding = Signal(4)
        ar_count = Signal(cfg.axi_id_bits)
        r_count = Signal(cfg.axi_id_bits)
        ar_beats = Signal(9)
        with m.If(rd_left < burst):
            m.d.comb += ar_beats.eq(rd_left)
        with m.Else():
            m.d.comb += ar_beats.eq(burst)
        ar_fire = mem.arvalid & mem.arready
        r_fire = mem.rvalid & mem.rready
        m.d.comb += [
            mem.arvalid.eq(busy & (rd_left != 0) & (outstanding < max_out)),
            mem.araddr.eq(rd_addr),
            mem.arlen.eq(ar_beats - 1),
            mem.arsize.eq(db.bit_length() - 1),
            mem.arburst.eq(AXI_BURST_INCR),
            mem.arid.eq(ar_count),
            mem.rready.eq(fifo.w_rdy),
            fifo.w_en.eq(mem.rvalid),
            fifo.w_data.eq(mem.rdata),
        ]
        with m.If(ar_fire):
            m.d.sync += [
                rd_addr.eq(rd_addr + ar_beats * db),
                rd_left.eq(rd_left - ar_beats),
                ar_count.eq(ar_count + 1),
            ]
        with m.If(r_fire & mem.rlast):
            m.d.sync += r_count.eq(r_count + 1)
        m.d.sync += outstanding.eq(outstanding + ar_fire - (r_fire & mem.rlast))
        with m.If(outstanding > max_seen):
            m.d.sync += max_seen.eq(outstanding)
        with m.If(r_fire & (mem.rresp != 0)):
            m.d.sync += errors[0].eq(1)
        with m.If(r_fire & (mem.rid != r_count)):
            m.d.sync += errors[2].eq(1)

        # -- write engine: one burst at a time -------------------------------------------------
        wr_addr = Signal(32)
        wr_left = Signal(32)
        w_beats = Signal(9)
        w_left = Signal(8)
        with m.FSM(name="writer"):
            with m.State("IDLE"):
                with m.If(busy & (wr_left == 0)):
                    m.d.sync += [busy.eq(0), irq_status.eq(1)]
                with m.Elif(busy):
                    m.next = "ADDRESS"
            with m.State("ADDRESS"):
                n = Signal(9)
                with m.If(wr_left < burst):
                    m.d.comb += n.eq(wr_left)
                with m.Else():
                    m.d.comb += n.eq(burst)
                m.d.comb += [
                    mem.awvalid.eq(1),
                    mem.awaddr.eq(wr_addr),
                    mem.awlen.eq(n - 1),
                    mem.awsize.eq(db.bit_length() - 1),
                    mem.awburst.eq(AXI_BURST_INCR),
                    mem.awid.eq(0),
                ]
                with m.If(mem.awready):
                    m.d.sync += [w_beats.eq(n), w_left.eq(n - 1)]
                    m.next = "DATA"
            with m.State("DATA"):
                m.d.comb += [
                    mem.wvalid.eq(fifo.r_rdy),
                    mem.wdata.eq(fifo.r_data),
                    mem.wstrb.eq(wstrb),
                    mem.wlast.eq(w_left == 0),
                    fifo.r_en.eq(mem.wready),
                ]
                with m.If(mem.wvalid & mem.wready):
                    m.d.sync += w_left.eq(w_left - 1)
                    with m.If(w_left == 0):
                        m.next = "RESPONSE"
            with m.State("RESPONSE"):
                m.d.comb += mem.bready.eq(1)
                with m.If(mem.bvalid):
                    with m.If(mem.bresp != 0):
                        m.d.sync += errors[1].eq(1)
                    m.d.sync += [
                        wr_addr.eq(wr_addr + w_beats * db),
                        wr_left.eq(wr_left - w_beats),
                    ]
                    m.next = "IDLE"

        # -- CSR port (AXI4-Lite subordinate) --------------------------------------------------
        with m.If(csr.awvalid & csr.wvalid & ~csr.bvalid):
            m.d.comb += [csr.awready.eq(1), csr.wready.eq(1)]
            m.d.sync += [csr.bvalid.eq(1), csr.bresp.eq(0)]
            with m.Switch(csr.awaddr):
                with m.Case(StandInCsr.SRC):
                    m.d.sync += src.eq(csr.wdata)
                with m.Case(StandInCsr.DST):
                    m.d.sync += dst.eq(csr.wdata)
                with m.Case(StandInCsr.BEATS):
                    m.d.sync += beats.eq(csr.wdata)
                with m.Case(StandInCsr.BURST):
                    m.d.sync += burst.eq(csr.wdata)
                with m.Case(StandInCsr.WSTRB):
                    m.d.sync += wstrb.eq(csr.wdata)
                with m.Case(StandInCsr.MAX_OUT):
                    m.d.sync += max_out.eq(csr.wdata)
                with m.Case(StandInCsr.GO):
                    m.d.sync += [
                        busy.eq(1), errors.eq(0), max_seen.eq(0),
                        rd_addr.eq(src), rd_left.eq(beats), wr_addr.eq(dst), wr_left.eq(beats),
                    ]
                with m.Case(Csr.IRQ_STATUS):
                    m.d.sync += irq_status.eq(irq_status & ~csr.wdata[0])
                with m.Case(Csr.IRQ_ENABLE):
                    m.d.sync += irq_enable.eq(csr.wdata[0])
        with m.If(csr.bvalid & csr.bready):
            m.d.sync += csr.bvalid.eq(0)

        # A read of HANG is never accepted (to test the host's timeout).
        m.d.comb += csr.arready.eq(~csr.rvalid & (csr.araddr != StandInCsr.HANG))
        with m.If(csr.arvalid & csr.arready):
            m.d.sync += [csr.rvalid.eq(1), csr.rresp.eq(0), csr.rdata.eq(0)]
            with m.Switch(csr.araddr):
                with m.Case(Csr.ID):
                    m.d.sync += csr.rdata.eq(CSR_ID_VALUE)
                with m.Case(Csr.IRQ_STATUS):
                    m.d.sync += csr.rdata.eq(irq_status)
                with m.Case(Csr.IRQ_ENABLE):
                    m.d.sync += csr.rdata.eq(irq_enable)
                with m.Case(Csr.CYCLES_LO):
                    m.d.sync += csr.rdata.eq(cycles)
                with m.Case(StandInCsr.SRC):
                    m.d.sync += csr.rdata.eq(src)
                with m.Case(StandInCsr.DST):
                    m.d.sync += csr.rdata.eq(dst)
                with m.Case(StandInCsr.BEATS):
                    m.d.sync += csr.rdata.eq(beats)
                with m.Case(StandInCsr.STATUS):
                    m.d.sync += csr.rdata.eq(busy | (errors << 1))
                with m.Case(StandInCsr.MAX_SEEN):
                    m.d.sync += csr.rdata.eq(max_seen)
        with m.If(csr.rvalid & csr.rready):
            m.d.sync += csr.rvalid.eq(0)
        return m
