"""Control and status registers on an AXI4-Lite subordinate port.

The register map is :class:`hw.isa.Csr` (one definition for hardware, runtime and model).
Writes take effect when both AW and W have been accepted; one transaction is handled at a time.
Every access answers OKAY; a read of an unmapped offset returns 0 and a write to one is
ignored (so a probing host never hangs the bus).
"""

from amaranth import Cat, Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hw.bus import AXI4LiteSignature
from hw.cmdproc import ENGINES, ErrorReport
from hw.config import NPUConfig
from hw.isa import (
    COUNTER_NAMES,
    CSR_ID_VALUE,
    CSR_VERSION_VALUE,
    Csr,
    TraceEntry,
    counter_csr,
    queue_csr,
    sem_csr,
    sem_last_csr,
    trace_csr,
)

__all__ = ["CsrBlock", "CSR_ADDR_BITS"]

CSR_ADDR_BITS = 12


class CsrBlock(wiring.Component):
    """AXI4-Lite register file of the NPU (``n_queues`` command queues).

    Ports
    -----
    bus : ``In(AXI4LiteSignature(addr_width=12))``
        Host MMIO port.
    irq : ``Out(1)``
        ``IRQ_STATUS & IRQ_ENABLE != 0``.
    ring_base, ring_size, tail, window_base, window_limit : ``Out(ArrayLayout(32, n_queues))``
        Per-queue registers written by the host.
    head, fetched : ``In(ArrayLayout(32, n_queues))``
        Next ring slot the command processor fetches; commands fetched since reset.
    busy : ``In(n_queues)``
        Per queue: holds unretired commands.
    err_set : ``In(n_queues)``, err_info : ``In(ArrayLayout(ErrorReport, n_queues))``
        Per-queue error reports (one-cycle pulses). Each queue latches its first error until
        it is reset; the global ``ERR_*`` registers latch the first error of any queue.
    stop : ``Out(n_queues)``
        Per queue: an error is latched; the command processor stops that queue.
    fence_irq : ``In(1)``
        One-cycle pulse: a fence with ``flags.irq`` completed.
    qclear : ``Out(n_queues)``
        Per-queue reset pulse (``QUEUE_RESET`` bits, or all on ``CONTROL`` bit 0).
    sem_clear : ``Out(1)``
        One-cycle pulse on ``CONTROL`` bit 0: zero semaphores, ``SEM_LAST`` and traces.
    sems, sem_last : ``In(ArrayLayout(32, n_sems))``
        Semaphore values and last-signaller records.
    cycles : ``Out(64)``
        Free-running cycle counter (also readable at ``CYCLES_LO``/``CYCLES_HI``).
    counters : ``In(ArrayLayout(32, len(COUNTER_NAMES)))``, counters_cycles : ``In(64)``
        The last snapshot of the counter block (:class:`hw.counters.PerfCounters`), read at
        ``Csr.CNT_*``.
    snapshot : ``Out(1)``
        One-cycle pulse in the cycle a ``CNT_SNAPSHOT`` write takes effect.
    trace, trace_valid, trace_overflow : ``In``; trace_pop : ``Out(4)``
        The engines' trace FIFOs; ``trace_pop[e]`` pulses on a ``TRACE_POP`` write.
    """

    def __init__(self, config: NPUConfig):
        self.config = config
        n = config.n_queues
        q32 = data.ArrayLayout(32, n)
        n_eng = len(ENGINES)
        super().__init__({
            "bus": In(AXI4LiteSignature(addr_width=CSR_ADDR_BITS)),
            "irq": Out(1),
            "ring_base": Out(q32), "ring_size": Out(q32), "tail": Out(q32),
            "window_base": Out(q32), "window_limit": Out(q32),
            "head": In(q32), "fetched": In(q32), "busy": In(n),
            "err_set": In(n), "err_info": In(data.ArrayLayout(ErrorReport, n)),
            "stop": Out(n),
            "fence_irq": In(1),
            "qclear": Out(n), "sem_clear": Out(1),
            "sems": In(data.ArrayLayout(32, config.n_sems)),
            "sem_last": In(data.ArrayLayout(32, config.n_sems)),
            "cycles": Out(64),
            "counters": In(data.ArrayLayout(32, len(COUNTER_NAMES))),
            "counters_cycles": In(64), "snapshot": Out(1),
            "trace": In(data.ArrayLayout(TraceEntry, n_eng)),
            "trace_valid": In(n_eng), "trace_overflow": In(n_eng), "trace_pop": Out(n_eng),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        n = cfg.n_queues
        bus = self.bus

        # -- state ----------------------------------------------------------------------------
        q_err = [Signal(ErrorReport, name=f"q_err{q}") for q in range(n)]
        first = Signal(ErrorReport)     # first error of any queue (global ERR_* view)
        first_queue = Signal(8)
        irq_status = Signal(2)
        irq_enable = Signal(2)
        cycles_hi_latch = Signal(32)

        m.d.sync += self.cycles.eq(self.cycles + 1)
        m.d.comb += self.irq.eq((irq_status & irq_enable).any())
        for q in range(n):
            m.d.comb += self.stop[q].eq(q_err[q].code != 0)

        # -- error latches --------------------------------------------------------------------
        for q in range(n):
            with m.If(self.qclear[q]):
                m.d.sync += q_err[q].eq(0)
            with m.Elif(self.err_set[q] & (q_err[q].code == 0)):
                m.d.sync += q_err[q].eq(self.err_info[q])
        with m.If(first.code == 0):
            for q in reversed(range(n)):
                with m.If(self.err_set[q] & ~self.qclear[q]):
                    m.d.sync += [first.eq(self.err_info[q]), first_queue.eq(q)]
        with m.Elif(self.qclear.bit_select(first_queue[:max(1, (n - 1).bit_length())], 1)):
            m.d.sync += [first.eq(0), first_queue.eq(0)]
        irq_set = Signal(2)
        m.d.comb += irq_set.eq(Cat(self.fence_irq, self.err_set.any()))

        # -- read mux -------------------------------------------------------------------------
        def read_value(addr):
            value = Signal(32)
            cfg_array = cfg.rows | cfg.cols << 8 | cfg.n_queues << 16 | (cfg.n_sems & 0xFF) << 24
            cfg_bus = (cfg.axi_data_bytes | cfg.dma_outstanding << 8
                       | cfg.spad_row_bytes << 16 | cfg.acc_row_elems << 24)
            any_err = Cat(self.stop).any()
            regs = {
                Csr.ID: CSR_ID_VALUE, Csr.VERSION: CSR_VERSION_VALUE,
                Csr.CFG_ARRAY: cfg_array, Csr.CFG_SPAD: cfg.spad_rows, Csr.CFG_ACC: cfg.acc_rows,
                Csr.CFG_BUS: cfg_bus, Csr.CFG_DRAM: cfg.dram_bytes,
                Csr.STATUS: Cat(self.busy.any(), any_err),
                Csr.ERR_CODE: Cat(first.code, first_queue, first.opcode),
                Csr.ERR_CMD: first.cmd, Csr.ERR_ADDR: first.addr,
                Csr.IRQ_STATUS: irq_status, Csr.IRQ_ENABLE: irq_enable,
                Csr.CYCLES_LO: self.cycles[:32], Csr.CYCLES_HI: cycles_hi_latch,
                Csr.QUEUE_ERRORS: self.stop, Csr.QUEUE_BUSY: self.busy,
                Csr.CNT_CYCLES_LO: self.counters_cycles[:32],
                Csr.CNT_CYCLES_HI: self.counters_cycles[32:],
            }
            for i, name in enumerate(COUNTER_NAMES):
                regs[counter_csr(name)] = self.counters[i]
            for e in range(len(ENGINES)):
                t = self.trace[e]
                regs[trace_csr(e, Csr.TRACE_INFO)] = Cat(
                    t.index, t.queue[:6], self.trace_overflow[e], self.trace_valid[e])
                regs[trace_csr(e, Csr.TRACE_START)] = t.start
                regs[trace_csr(e, Csr.TRACE_END)] = t.end
            for q in range(n):
                regs.update({
                    queue_csr(q, Csr.RING_BASE): self.ring_base[q],
                    queue_csr(q, Csr.RING_SIZE): self.ring_size[q],
                    queue_csr(q, Csr.HEAD): self.head[q],
                    queue_csr(q, Csr.TAIL): self.tail[q],
                    queue_csr(q, Csr.WINDOW_BASE): self.window_base[q],
                    queue_csr(q, Csr.WINDOW_LIMIT): self.window_limit[q],
                    queue_csr(q, Csr.Q_STATUS): Cat(self.busy[q], self.stop[q]),
                    queue_csr(q, Csr.Q_ERR_CODE): Cat(q_err[q].code, Signal(8), q_err[q].opcode),
                    queue_csr(q, Csr.Q_ERR_CMD): q_err[q].cmd,
                    queue_csr(q, Csr.Q_ERR_ADDR): q_err[q].addr,
                    queue_csr(q, Csr.Q_FETCHED): self.fetched[q],
                })
            for s in range(cfg.n_sems):
                regs[sem_csr(s)] = self.sems[s]
                regs[sem_last_csr(s)] = self.sem_last[s]
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
                        for q in range(n):
                            for reg, target in ((Csr.RING_BASE, self.ring_base),
                                                (Csr.RING_SIZE, self.ring_size),
                                                (Csr.TAIL, self.tail),
                                                (Csr.WINDOW_BASE, self.window_base),
                                                (Csr.WINDOW_LIMIT, self.window_limit)):
                                with m.Case(queue_csr(q, reg) >> 2):
                                    m.d.sync += target[q].eq(w_data)
                        for e in range(len(ENGINES)):
                            with m.Case(trace_csr(e, Csr.TRACE_POP) >> 2):
                                m.d.comb += self.trace_pop[e].eq(self.trace_valid[e])
                        with m.Case(Csr.IRQ_ENABLE >> 2):
                            m.d.sync += irq_enable.eq(w_data)
                        with m.Case(Csr.IRQ_STATUS >> 2):
                            m.d.comb += irq_clear.eq(w_data)
                        with m.Case(Csr.CONTROL >> 2):
                            m.d.comb += self.sem_clear.eq(w_data[0])
                            with m.If(w_data[0]):
                                m.d.comb += self.qclear.eq(-1)
                        with m.Case(Csr.QUEUE_RESET >> 2):
                            m.d.comb += self.qclear.eq(w_data[:n])
                        with m.Case(Csr.CNT_SNAPSHOT >> 2):
                            m.d.comb += self.snapshot.eq(1)
                    m.next = "RESPOND"
            with m.State("RESPOND"):
                m.d.comb += [bus.bvalid.eq(1), bus.bresp.eq(0)]
                with m.If(bus.bready):
                    m.next = "COLLECT"

        m.d.sync += irq_status.eq((irq_status & ~irq_clear) | irq_set)
        with m.If(self.sem_clear):
            m.d.sync += [first.eq(0), first_queue.eq(0)]
        return m
