"""Load data path of the DMA: AR bursts, R beats realigned into words and cut into local rows
(:class:`LoadMover`)."""

from amaranth import Cat, Const, Elaboratable, Module, Mux, Signal
from amaranth.lib.fifo import SyncFIFO

from hw.bus import AXI_BURST_INCR
from hw.config import NPUConfig
from hw.dma.align import Unpacker
from hw.dma.bursts import BurstGen, Walker
from hw.dma.common import LocalGeometry, log2
from hw.dma.control import Control
from hw.dma.translate import Translator
from hw.isa import LocalMem

__all__ = ["LoadMover"]


class LoadMover(Elaboratable):
    """Load data path: AR bursts from :class:`BurstGen`, R beats realigned into words
    (:class:`~hw.dma.align.Unpacker`) and cut into local rows.

    A chunk that completes a local row waits (its word, and the R beat in it, held) while its
    memory's ``ready`` is low. The bytes of a partial last local row beyond the DRAM row are
    written 0. ``stall_local[mem]`` and ``stall_dram`` are the :attr:`DMA.stall` bits.
    """

    def __init__(self, cfg: NPUConfig, control: Control, bus, write_ports: dict,
                 translator: Translator | None = None):
        self.cfg = cfg
        self.control = control
        self.bus = bus
        self.translator = translator
        self.write_ports = write_ports
        self.stall_local = {mem: Signal(name=f"stall_{mem.name.lower()}")
                            for mem in write_ports}
        self.stall_dram = Signal()

    def elaborate(self, platform):
        m = Module()
        cfg, ctl, bus = self.cfg, self.control, self.bus
        beat = cfg.axi_data_bytes

        m.submodules.bursts = bursts = BurstGen(ctl.body, beat_bytes=beat,
                                                 addr_width=cfg.axi_addr_bits,
                                                 max_burst=cfg.dma_max_burst_beats)
        m.submodules.walker = walker = Walker(ctl.body, ctl.is_acc, cfg=cfg)
        m.submodules.unpacker = unpacker = Unpacker(walker, beat_bytes=beat)
        # Start address of every read burst in flight (R returns in order for one ID).
        m.submodules.in_flight = in_flight = SyncFIFO(width=cfg.axi_addr_bits,
                                                      depth=cfg.dma_outstanding)
        m.d.comb += [bursts.start.eq(ctl.start), walker.start.eq(ctl.start)]

        # -- AR (through the translator: a burst goes once its page is translated) ----------
        tr = self.translator
        fault = Signal()
        ar_ok = Signal()
        araddr = Signal(32)
        if tr is None:
            m.d.comb += [ar_ok.eq(bursts.valid), araddr.eq(bursts.addr)]
        else:
            m.submodules.translator = tr
            m.d.comb += [
                tr.start.eq(ctl.start), tr.vm.eq(ctl.vm), tr.valid.eq(bursts.valid),
                tr.vaddr.eq(bursts.addr), tr.row_addr.eq(bursts.row_addr),
                tr.handshake.eq(bus.arvalid & bus.arready),
                ar_ok.eq(tr.ok), araddr.eq(tr.paddr), fault.eq(tr.fault),
                ctl.fault.eq(tr.fault), ctl.fault_code.eq(tr.fault_code),
                ctl.fault_addr.eq(tr.fault_addr),
            ]
        m.d.comb += [
            bursts.room.eq(in_flight.w_rdy),
            bus.arid.eq(0),
            bus.araddr.eq(araddr),
            bus.arlen.eq(bursts.len),
            bus.arsize.eq(log2(beat)),
            bus.arburst.eq(AXI_BURST_INCR),
            bus.arvalid.eq(ar_ok),
            bursts.ready.eq(bus.arready & ar_ok),
            in_flight.w_en.eq(ar_ok & bus.arready),
            in_flight.w_data.eq(bursts.addr),
        ]

        # -- R: realigned into words, one chunk per cycle; after an error just drain -----------
        error = Signal()
        error_addr = Signal(32)
        r_take = bus.rvalid & bus.rready
        want = Signal()         # the current chunk is wanted (its word may not be here yet)
        hold = Signal()         # ... and it completes a local row whose write port is taken
        chunk_go = Signal()
        write = Signal()
        word = unpacker.word
        m.d.comb += [
            unpacker.rvalid.eq(bus.rvalid),
            unpacker.rdata.eq(bus.rdata),
            unpacker.r_take.eq(r_take),
            unpacker.enable.eq(~error),
            unpacker.consume.eq(want & walker.beat_end & ~hold),
            want.eq(walker.valid & ~error),
            chunk_go.eq(unpacker.word_valid & want & ~hold),
            walker.step.eq(chunk_go),
            bus.rready.eq(error | unpacker.rready),
            in_flight.r_en.eq(r_take & bus.rlast),
            write.eq(unpacker.word_valid & want & ~(unpacker.uses_r & bus.rresp[1])),
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
                self.stall_local[mem].eq(unpacker.word_valid & mem_hold),
                port.addr.eq(walker.lrow),
                port.en.eq(write & selected & row_done),
                port.data.eq(self._row_data(m, local, walker, word, chunk_go & selected)
                             & self._row_keep(local, walker)),
            ]
            holds.append(mem_hold)
        m.d.comb += hold.eq(Cat(*holds).any())
        m.d.comb += self.stall_dram.eq(
            ((bus.arvalid & ~bus.arready) | (in_flight.r_rdy & ~bus.rvalid))
            & ~(unpacker.word_valid & hold))

        # after a page fault: once the bursts in flight arrived and their last word moved
        finished = Signal()
        m.d.comb += [
            finished.eq(~in_flight.r_rdy & Mux(fault, ~unpacker.word_valid,
                                               bursts.idle & ~want)),
            ctl.finished.eq(finished),
            bursts.stop.eq(ctl.transfer & finished & fault),
            walker.stop.eq(ctl.transfer & finished & fault),
            ctl.bus_error.eq(error),
            ctl.bus_error_addr.eq(error_addr),
        ]
        return m

    def _row_data(self, m, local: LocalGeometry, walker, word, take):
        """The local row that the current chunk completes, from the word (and, when ``L >
        beat``, the earlier beats of the row, held as they are taken)."""
        beat = self.cfg.axi_data_bytes
        if local.row_bytes == beat:
            return word
        if local.row_bytes < beat:
            return word.word_select(walker.off[local.log2_row:], local.row_bytes * 8)
        # Several words per local row: keep each as it goes; the row is written with the word
        # of the part ``sub`` that completes it (the last, or the DRAM row's last chunk).
        parts = local.chunks_per_row
        held = Signal((parts - 1) * beat * 8, name=f"held_{local.mem.name.lower()}")
        with m.If(take & ~walker.local_end):
            m.d.sync += held.word_select(walker.sub, beat * 8).eq(word)
        return Cat(*[Mux(walker.sub == i, word, held.word_select(i, beat * 8))
                     for i in range(parts - 1)], word)

    def _row_keep(self, local: LocalGeometry, walker):
        """Byte mask of the row written: all ones, except for the DRAM row's partial last
        local row, whose bytes beyond the DRAM row are zero-filled."""
        tail = self.control.body.row_bytes[:local.log2_row]     # bytes of a partial last row
        partial = walker.last_chunk & (tail != 0)
        # tail <= row_bytes - 1 always holds: left out (a constant compare to lint)
        keep = [~(partial & (tail <= j)) for j in range(local.row_bytes - 1)] + [~partial]
        return Cat(*[k.replicate(8) for k in keep])
