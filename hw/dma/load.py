"""Load data path of the DMA: AR bursts, R beats cut into local rows (:class:`LoadMover`)."""

from amaranth import Cat, Const, Elaboratable, Module, Signal
from amaranth.lib.fifo import SyncFIFO

from hw.bus import AXI_BURST_INCR
from hw.config import NPUConfig
from hw.dma.bursts import BurstGen, Walker
from hw.dma.common import LocalGeometry, log2
from hw.dma.control import Control
from hw.isa import LocalMem

__all__ = ["LoadMover"]


class LoadMover(Elaboratable):
    """Load data path: AR bursts from :class:`BurstGen`, R beats cut into local rows.

    A chunk that completes a local row waits (R beat held) while its memory's ``ready`` is
    low. ``stall_local[mem]`` and ``stall_dram`` are the :attr:`DMA.stall` bits.
    """

    def __init__(self, cfg: NPUConfig, control: Control, bus, write_ports: dict):
        self.cfg = cfg
        self.control = control
        self.bus = bus
        self.write_ports = write_ports
        self.stall_local = {mem: Signal(name=f"stall_{mem.name.lower()}")
                            for mem in write_ports}
        self.stall_dram = Signal()

    def elaborate(self, platform):
        m = Module()
        cfg, ctl, bus = self.cfg, self.control, self.bus
        beat = cfg.axi_data_bytes

        m.submodules.bursts = bursts = BurstGen(ctl.body, beat_bytes=beat,
                                                 addr_width=cfg.axi_addr_bits)
        m.submodules.walker = walker = Walker(ctl.body, ctl.is_acc, cfg=cfg)
        # Start address of every read burst in flight (R returns in order for one ID).
        m.submodules.in_flight = in_flight = SyncFIFO(width=cfg.axi_addr_bits,
                                                      depth=cfg.dma_outstanding)
        m.d.comb += [bursts.start.eq(ctl.start), walker.start.eq(ctl.start)]

        # -- AR ------------------------------------------------------------------------------
        m.d.comb += [
            bursts.room.eq(in_flight.w_rdy),
            bus.arid.eq(0),
            bus.araddr.eq(bursts.addr),
            bus.arlen.eq(bursts.len),
            bus.arsize.eq(log2(beat)),
            bus.arburst.eq(AXI_BURST_INCR),
            bus.arvalid.eq(bursts.valid),
            bursts.ready.eq(bus.arready),
            in_flight.w_en.eq(bursts.valid & bus.arready),
            in_flight.w_data.eq(bursts.addr),
        ]

        # -- R: one chunk per cycle; after an error just drain ---------------------------------
        error = Signal()
        error_addr = Signal(32)
        r_take = bus.rvalid & bus.rready
        want = Signal()         # the current chunk is wanted (its beat may not be here yet)
        hold = Signal()         # ... and it completes a local row whose write port is taken
        chunk_go = Signal()
        write = Signal()
        m.d.comb += [
            want.eq(walker.valid & ~error),
            chunk_go.eq(bus.rvalid & want & ~hold),
            walker.step.eq(chunk_go),
            bus.rready.eq(error | (walker.valid & walker.beat_end & ~hold)),
            in_flight.r_en.eq(r_take & bus.rlast),
            write.eq(bus.rvalid & want & ~bus.rresp[1]),
        ]
        with m.If(ctl.start):
            m.d.sync += error.eq(0)
        with m.Elif(r_take & bus.rresp[1] & ~error):
            m.d.sync += [error.eq(1), error_addr.eq(in_flight.r_data)]

        holds = []
        for mem, port in self.write_ports.items():
            local = LocalGeometry(cfg, mem)
            selected = ctl.is_acc if mem == LocalMem.ACC else ~ctl.is_acc
            # this chunk writes a local row (only the last chunk of a row when L > beat)
            row_done = walker.local_end if local.row_bytes > beat else Const(1)
            mem_hold = Signal(name=f"hold_{mem.name.lower()}")
            m.d.comb += [
                mem_hold.eq(want & selected & row_done & ~port.ready),
                self.stall_local[mem].eq(bus.rvalid & mem_hold),
                port.addr.eq(walker.lrow),
                port.en.eq(write & selected & row_done),
            ]
            holds.append(mem_hold)
            if local.row_bytes == beat:
                m.d.comb += port.data.eq(bus.rdata)
            elif local.row_bytes < beat:
                m.d.comb += port.data.eq(bus.rdata.word_select(walker.off[local.log2_row:],
                                                               local.row_bytes * 8))
            else:
                # Several beats per local row: keep all but the last, write with the last.
                held = Signal((local.row_bytes - beat) * 8, name=f"held_{mem.name.lower()}")
                with m.If(chunk_go & selected & ~walker.local_end):
                    m.d.sync += held.word_select(walker.sub, beat * 8).eq(bus.rdata)
                m.d.comb += port.data.eq(Cat(held, bus.rdata))
        m.d.comb += hold.eq(Cat(*holds).any())
        m.d.comb += self.stall_dram.eq(
            ((bus.arvalid & ~bus.arready) | (in_flight.r_rdy & ~bus.rvalid))
            & ~(bus.rvalid & hold))

        m.d.comb += [
            ctl.finished.eq(bursts.idle & ~in_flight.r_rdy),
            ctl.bus_error.eq(error),
            ctl.bus_error_addr.eq(error_addr),
        ]
        return m
