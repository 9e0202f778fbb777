"""Control and status registers on an AXI4-Lite subordinate port.

The register map is :class:`hw.isa.Csr` (one definition for hardware, runtime and model).
Writes take effect when both AW and W have been accepted; one transaction is handled at a time.
Every access answers OKAY; a read of an unmapped offset returns 0 and a write to one is
ignored (so a probing host never hangs the bus).
"""

from amaranth import Cat, Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .bus import AXI4LiteSignature
from .config import NPUConfig
from .isa import CSR_ID_VALUE, CSR_VERSION_VALUE, Csr, ErrorCode, queue_csr, sem_csr

__all__ = ["CsrBlock", "CSR_ADDR_BITS"]

CSR_ADDR_BITS = 12


class CsrBlock(wiring.Component):
    """AXI4-Lite register file of the NPU (single command queue 0).

    Ports
    -----
    bus : ``In(AXI4LiteSignature(addr_width=12))``
        Host MMIO port.
    irq : ``Out(1)``
        ``IRQ_STATUS & IRQ_ENABLE != 0``.
    ring_base, ring_size, tail : ``Out(32)``
        Queue 0 ring registers written by the host.
    head : ``In(32)``
        Next ring slot the command processor fetches.
    busy : ``In(1)``
        The queue holds unretired commands.
    err_set : ``In(1)``
        One-cycle pulse reporting an error with ``err_code``, ``err_opcode``, ``err_cmd``
        (command index) and ``err_addr``. Only the first error is latched until cleared.
    error : ``Out(1)``
        An error is latched; the command processor stops its queue.
    fence_irq : ``In(1)``
        One-cycle pulse: a fence with ``flags.irq`` completed.
    clear : ``Out(1)``
        One-cycle pulse on a ``CONTROL`` write with bit 0 set: clear the error, flush the
        queue, zero the semaphores.
    sems : ``In(ArrayLayout(32, n_sems))``
        Semaphore values, readable at ``sem_csr(s)``.
    cycles : ``Out(64)``
        Free-running cycle counter (also readable at ``CYCLES_LO``/``CYCLES_HI``).
    """

    def __init__(self, config: NPUConfig):
        self.config = config
        super().__init__({
            "bus": In(AXI4LiteSignature(addr_width=CSR_ADDR_BITS)),
            "irq": Out(1),
            "ring_base": Out(32), "ring_size": Out(32), "tail": Out(32),
            "head": In(32), "busy": In(1),
            "err_set": In(1), "err_code": In(ErrorCode), "err_opcode": In(8),
            "err_cmd": In(32), "err_addr": In(32),
            "error": Out(1),
            "fence_irq": In(1),
            "clear": Out(1),
            "sems": In(data.ArrayLayout(32, config.n_sems)),
            "cycles": Out(64),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        bus = self.bus

        # -- state ----------------------------------------------------------------------------
        err_code = Signal(8)
        err_opcode = Signal(8)
        err_cmd = Signal(32)
        err_addr = Signal(32)
        irq_status = Signal(2)
        irq_enable = Signal(2)
        cycles_hi_latch = Signal(32)

        m.d.sync += self.cycles.eq(self.cycles + 1)
        m.d.comb += [
            self.irq.eq((irq_status & irq_enable).any()),
            self.error.eq(err_code != 0),
        ]

        with m.If(self.err_set & (err_code == 0)):
            m.d.sync += [
                err_code.eq(self.err_code), err_opcode.eq(self.err_opcode),
                err_cmd.eq(self.err_cmd), err_addr.eq(self.err_addr),
            ]
        irq_set = Signal(2)
        m.d.comb += irq_set.eq(Cat(self.fence_irq, self.err_set))

        # -- read mux -------------------------------------------------------------------------
        def read_value(addr):
            value = Signal(32)
            cfg_array = cfg.rows | cfg.cols << 8 | cfg.n_queues << 16 | (cfg.n_sems & 0xFF) << 24
            cfg_bus = (cfg.axi_data_bytes | cfg.dma_outstanding << 8
                       | cfg.spad_row_bytes << 16 | cfg.acc_row_elems << 24)
            regs = {
                Csr.ID: CSR_ID_VALUE, Csr.VERSION: CSR_VERSION_VALUE,
                Csr.CFG_ARRAY: cfg_array, Csr.CFG_SPAD: cfg.spad_rows, Csr.CFG_ACC: cfg.acc_rows,
                Csr.CFG_BUS: cfg_bus, Csr.CFG_DRAM: cfg.dram_bytes,
                Csr.STATUS: Cat(self.busy, self.error),
                Csr.ERR_CODE: Cat(err_code, Signal(8), err_opcode),
                Csr.ERR_CMD: err_cmd, Csr.ERR_ADDR: err_addr,
                Csr.IRQ_STATUS: irq_status, Csr.IRQ_ENABLE: irq_enable,
                Csr.CYCLES_LO: self.cycles[:32], Csr.CYCLES_HI: cycles_hi_latch,
                queue_csr(0, Csr.RING_BASE): self.ring_base,
                queue_csr(0, Csr.RING_SIZE): self.ring_size,
                queue_csr(0, Csr.HEAD): self.head,
                queue_csr(0, Csr.TAIL): self.tail,
            }
            for s in range(cfg.n_sems):
                regs[sem_csr(s)] = self.sems[s]
            with m.Switch(addr[2:]):
                for offset, reg in regs.items():
                    with m.Case(offset >> 2):
                        m.d.comb += value.eq(reg)
            return value

        # -- AXI4-Lite read: AR -> R ----------------------------------------------------------
        with m.FSM(name="read"):
            with m.State("IDLE"):
                m.d.comb += bus.arready.eq(1)
                with m.If(bus.arvalid):
                    m.d.sync += bus.rdata.eq(read_value(bus.araddr))
                    with m.If(bus.araddr[2:] == Csr.CYCLES_LO >> 2):
                        m.d.sync += cycles_hi_latch.eq(self.cycles[32:])
                    m.next = "RESPOND"
            with m.State("RESPOND"):
                m.d.comb += [bus.rvalid.eq(1), bus.rresp.eq(0)]
                with m.If(bus.rready):
                    m.next = "IDLE"

        # -- AXI4-Lite write: AW + W -> B ------------------------------------------------------
        aw_addr = Signal(CSR_ADDR_BITS)
        aw_have = Signal()
        w_data = Signal(32)
        w_have = Signal()
        irq_clear = Signal(2)
        with m.FSM(name="write"):
            with m.State("COLLECT"):
                m.d.comb += [bus.awready.eq(~aw_have), bus.wready.eq(~w_have)]
                with m.If(bus.awvalid & ~aw_have):
                    m.d.sync += [aw_addr.eq(bus.awaddr), aw_have.eq(1)]
                with m.If(bus.wvalid & ~w_have):
                    m.d.sync += [w_data.eq(bus.wdata), w_have.eq(1)]
                with m.If(aw_have & w_have):
                    m.d.sync += [aw_have.eq(0), w_have.eq(0)]
                    with m.Switch(aw_addr[2:]):
                        with m.Case(queue_csr(0, Csr.RING_BASE) >> 2):
                            m.d.sync += self.ring_base.eq(w_data)
                        with m.Case(queue_csr(0, Csr.RING_SIZE) >> 2):
                            m.d.sync += self.ring_size.eq(w_data)
                        with m.Case(queue_csr(0, Csr.TAIL) >> 2):
                            m.d.sync += self.tail.eq(w_data)
                        with m.Case(Csr.IRQ_ENABLE >> 2):
                            m.d.sync += irq_enable.eq(w_data)
                        with m.Case(Csr.IRQ_STATUS >> 2):
                            m.d.comb += irq_clear.eq(w_data)
                        with m.Case(Csr.CONTROL >> 2):
                            m.d.comb += self.clear.eq(w_data[0])
                    m.next = "RESPOND"
            with m.State("RESPOND"):
                m.d.comb += [bus.bvalid.eq(1), bus.bresp.eq(0)]
                with m.If(bus.bready):
                    m.next = "COLLECT"

        m.d.sync += irq_status.eq((irq_status & ~irq_clear) | irq_set)
        with m.If(self.clear):
            m.d.sync += err_code.eq(0)
            # the queue is flushed to the current tail by the command processor
        return m

