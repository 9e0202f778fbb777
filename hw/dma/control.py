"""Command handling of one DMA channel: take, check, start the mover, retire
(:class:`Control`)."""

from amaranth import Elaboratable, Module, Mux, Signal

from hw.config import NPUConfig
from hw.dma.common import LocalGeometry, by_mem
from hw.isa import DmaBody, ErrorCode, LocalMem, VmWord

__all__ = ["Control"]


class Control(Elaboratable):
    """One channel's command handling: take, check, start the mover, retire.

    ``body`` holds the taken command for the whole transfer; the mover reads it. The mover
    sees ``start`` for one cycle and raises ``finished`` once its bus traffic is over.
    """

    def __init__(self, cfg: NPUConfig, port):
        self.cfg = cfg
        self.port = port
        self.spad = LocalGeometry(cfg, LocalMem.SPAD)
        self.acc = LocalGeometry(cfg, LocalMem.ACC)
        self.body = Signal(DmaBody)
        self.is_acc = Signal()
        self.start = Signal()
        self.finished = Signal()           # from the mover
        self.bus_error = Signal()          # from the mover, valid with finished
        self.bus_error_addr = Signal(32)   # from the mover, valid with finished
        #: the command's context (``Q_VM``), latched with it; ``translate``: its DRAM addresses
        #: are virtual (:mod:`hw.isa.vm`)
        self.vm = Signal(VmWord)
        self.translate = Signal()
        self.fault = Signal()              # from the mover's translator, valid with finished
        self.fault_code = Signal(ErrorCode)
        self.fault_addr = Signal(32)
        self.transfer = Signal()           # in the Transfer state (the mover's finish counts)

    def elaborate(self, platform):
        m = Module()
        cfg, port, body = self.cfg, self.port, self.body
        spad, acc = self.spad, self.acc
        is_acc = self.is_acc
        m.d.comb += is_acc.eq(body.mem == LocalMem.ACC)

        error = Signal(ErrorCode)
        error_addr = Signal(32)
        m.d.comb += [port.error.eq(error), port.error_addr.eq(error_addr)]

        # Command-derived quantities (the body register is stable after the handshake).
        local_rows = Signal(17)     # local rows per DRAM row: ceil(row_bytes / L)
        m.d.comb += local_rows.eq(by_mem(is_acc, (body.row_bytes + spad.row_bytes - 1)
                                          >> spad.log2_row,
                                          (body.row_bytes + acc.row_bytes - 1) >> acc.log2_row))
        depth = by_mem(is_acc, spad.depth, acc.depth)
        zero = (body.n_rows == 0) | (body.row_bytes == 0)

        last_row = Signal(16)
        m.d.comb += last_row.eq(body.n_rows - 1)
        dram_span = Signal(48)      # (n_rows - 1) * dram_stride
        local_span = Signal(32)     # (n_rows - 1) * local_stride
        row_dram = Signal(34)       # search for the first bad row
        row_local = Signal(34)
        win_base = Signal(32)       # the issuing queue's DRAM window, latched with the command
        win_limit = Signal(33)
        # translated: virtual addresses, checked only for wrapping past 2**32, no window
        m.d.comb += self.translate.eq(self.vm.enable if cfg.tlb_entries else 0)
        dram_limit = Mux(self.translate, 1 << 32, cfg.dram_bytes)

        with m.FSM(name="control") as fsm:
            with m.State("Idle"):
                m.d.comb += port.cmd.ready.eq(1)
                with m.If(port.cmd.valid):
                    m.d.sync += [
                        body.eq(port.cmd.payload.body.dma),
                        win_base.eq(port.window_base),
                        win_limit.eq(Mux(port.window_limit == 0, 1 << 32, port.window_limit)),
                        self.vm.eq(port.vm),
                    ]
                    m.next = "Check-shape"

            with m.State("Check-shape"):
                m.d.sync += [
                    dram_span.eq(last_row * body.dram_stride),
                    local_span.eq(last_row * body.local_stride),
                ]
                with m.If(zero):
                    m.d.sync += [error.eq(ErrorCode.NONE), error_addr.eq(0)]
                    m.next = "Done"
                with m.Else():
                    m.next = "Check-range"

            with m.State("Check-range"):
                dram_end = body.dram_addr + dram_span + body.row_bytes     # exclusive, no wrap
                local_end = body.local_row + local_span + local_rows       # exclusive, no wrap
                m.d.sync += [row_dram.eq(body.dram_addr), row_local.eq(body.local_row)]
                with m.If(dram_end > dram_limit):
                    m.d.sync += error.eq(ErrorCode.BAD_DRAM_ADDR)
                    m.next = "Find-bad-row"
                with m.Elif(~self.translate
                            & ((body.dram_addr < win_base) | (dram_end > win_limit))):
                    m.d.sync += error.eq(ErrorCode.WINDOW)
                    m.next = "Find-bad-row"
                with m.Elif(local_end > depth):
                    m.d.sync += error.eq(ErrorCode.BAD_LOCAL_ADDR)
                    m.next = "Find-bad-row"
                with m.Else():
                    m.d.comb += self.start.eq(1)
                    m.next = "Transfer"

            with m.State("Find-bad-row"):
                # Error path only: walk the rows until the first one that is out of range.
                with m.If(error == ErrorCode.BAD_DRAM_ADDR):
                    with m.If(row_dram + body.row_bytes > dram_limit):
                        m.d.sync += error_addr.eq(row_dram)
                        m.next = "Done"
                    with m.Else():
                        m.d.sync += row_dram.eq(row_dram + body.dram_stride)
                with m.Elif(error == ErrorCode.WINDOW):
                    with m.If((row_dram < win_base) | (row_dram + body.row_bytes > win_limit)):
                        m.d.sync += error_addr.eq(row_dram)
                        m.next = "Done"
                    with m.Else():
                        m.d.sync += row_dram.eq(row_dram + body.dram_stride)
                with m.Else():
                    with m.If(row_local + local_rows > depth):
                        m.d.sync += error_addr.eq(Mux(row_local > depth, row_local, depth))
                        m.next = "Done"
                    with m.Else():
                        m.d.sync += row_local.eq(row_local + body.local_stride)

            with m.State("Transfer"), m.If(self.finished):
                with m.If(self.fault):
                    m.d.sync += [error.eq(self.fault_code), error_addr.eq(self.fault_addr)]
                with m.Else():
                    m.d.sync += [
                        error.eq(Mux(self.bus_error, ErrorCode.AXI_ERROR, ErrorCode.NONE)),
                        error_addr.eq(Mux(self.bus_error, self.bus_error_addr, 0)),
                    ]
                m.next = "Done"

            with m.State("Done"):
                m.d.comb += port.done.eq(1)
                m.next = "Idle"

        m.d.comb += [port.busy.eq(~fsm.ongoing("Idle")),
                     self.transfer.eq(fsm.ongoing("Transfer"))]
        return m
