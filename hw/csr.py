"""Control and status registers on an AXI4-Lite subordinate port.

The register map is :class:`hw.isa.Csr` (one definition for hardware, runtime and model);
every packed register is built from its layout in :mod:`hw.isa.registers`.
Writes take effect when both AW and W have been accepted; one transaction is handled at a time.
Every access answers OKAY; a read of an unmapped offset returns 0 and a write to one is
ignored (so a probing host never hangs the bus).
"""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.bus import AXI4LiteSignature
from hw.cmdproc import ENGINES, ErrorReport
from hw.config import NPUConfig
from hw.counters import cycle_counter
from hw.isa import (
    COUNTER_NAMES,
    CSR_ID_VALUE,
    CSR_VERSION_VALUE,
    PAGE_FAULTS,
    CfgArray,
    CfgBus,
    CfgFeatures,
    CfgVm,
    Csr,
    ErrorWord,
    IrqBit,
    QueueErrorWord,
    ResumeWord,
    SemLast,
    StatusWord,
    TraceEntry,
    TraceInfo,
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
    ring_base, ring_size, tail, window_base, window_limit, vm : ``Out(ArrayLayout(32, n_queues))``
        Per-queue registers written by the host (``vm``: ``Q_VM``).
    resume, skip : ``Out(n_queues)``
        ``Q_RESUME`` of a queue whose latched error is a page fault: a one-cycle pulse in the
        cycle the write takes effect, and the queue's error is cleared at its end (unless the
        queue reports another error in that cycle: then nothing happens).
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
    sem_set : ``Out(1)``, sem_set_sem : ``Out(range(n_sems))``, sem_set_value : ``Out(32)``
        Host write of a semaphore: ``sem_set`` pulses for one cycle in the cycle a write to
        :func:`hw.isa.sem_csr` ``(sem_set_sem)`` takes effect, with the value written.
    sem_rd : ``Out(range(n_sems))``, sem_value : ``In(32)``, sem_last : ``In(SemLast)``
        The semaphore read port: the semaphore a read address names (:func:`hw.isa.sem_csr`
        or :func:`hw.isa.sem_last_csr`), its value and last-signaller record.
    cycles : ``Out(64)``
        Free-running cycle counter (also readable at ``CYCLES_LO``/``CYCLES_HI``).
    counter_index : ``Out(range(len(COUNTER_NAMES)))``, counter_rd : ``Out(1)``,
    counter_value : ``In(32)``, counters_cycles : ``In(64)``
        The snapshot of the counter block (:class:`hw.counters.PerfCounters`), read at
        ``Csr.CNT_*``: a read of a counter register presents its index (in
        ``COUNTER_NAMES``) with ``counter_rd`` in the AR cycle and answers the value that
        ``counter_value`` holds in the next cycle.
    snapshot : ``Out(1)``, snapshot_busy : ``In(1)``
        One-cycle pulse in the cycle a ``CNT_SNAPSHOT`` write takes effect; the write's
        response, and any read (AR), waits while the counter block reports
        ``snapshot_busy``, so no read sees a snapshot half written.
    trace, trace_valid, trace_overflow : ``In``; trace_pop : ``Out(4)``
        The engines' trace FIFOs; ``trace_pop[e]`` pulses on a ``TRACE_POP`` write.
        ``TRACE_INFO`` of an empty FIFO reads ``index`` and ``queue`` 0 (as the functional
        model does), not the FIFO's stale output.
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
            "window_base": Out(q32), "window_limit": Out(q32), "vm": Out(q32),
            "resume": Out(n), "skip": Out(n),
            "head": In(q32), "fetched": In(q32), "busy": In(n),
            "err_set": In(n), "err_info": In(data.ArrayLayout(ErrorReport, n)),
            "stop": Out(n),
            "fence_irq": In(1),
            "qclear": Out(n), "sem_clear": Out(1),
            "sem_set": Out(1), "sem_set_sem": Out(range(max(config.n_sems, 2))),
            "sem_set_value": Out(32),
            "sem_rd": Out(range(max(config.n_sems, 2))), "sem_value": In(32),
            "sem_last": In(SemLast),
            "cycles": Out(64),
            "counter_index": Out(range(len(COUNTER_NAMES))), "counter_rd": Out(1),
            "counter_value": In(32), "counters_cycles": In(64),
            "snapshot": Out(1), "snapshot_busy": In(1),
            "trace": In(data.ArrayLayout(TraceEntry, n_eng)),
            "trace_valid": In(n_eng), "trace_overflow": In(n_eng), "trace_pop": Out(n_eng),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.config.n_queues
        st = _State(n)
        m.submodules.host_regs = st.host_regs

        m.d.comb += self.cycles.eq(cycle_counter(m, 64, "cycle_count"))
        m.d.comb += self.irq.eq((st.irq_status & st.irq_enable).any())
        for q in range(n):
            m.d.comb += self.stop[q].eq(st.q_err[q].code != 0)

        # -- error latches --------------------------------------------------------------------
        self._error_latches(m, st)

        # -- AXI4-Lite read: AR -> R ----------------------------------------------------------
        self._read(m, st, self._registers(m, st))

        # -- AXI4-Lite write: AW + W -> B ------------------------------------------------------
        irq_clear = Signal(2)
        self._write(m, st, irq_clear)

        irq_set = Signal(2)
        m.d.comb += irq_set.eq(Mux(self.fence_irq, IrqBit.FENCE, 0)
                               | Mux(self.err_set.any(), IrqBit.ERROR, 0))
        m.d.sync += st.irq_status.eq((st.irq_status & ~irq_clear) | irq_set)
        with m.If(self.sem_clear):
            m.d.sync += [st.first.eq(0), st.first_queue.eq(0)]
        return m

    def _error_latches(self, m: Module, st: _State) -> None:
        """Each queue latches its first error until it is reset; ``first`` the first error of
        any queue (lowest queue first in one cycle) until its queue is reset."""
        n = self.config.n_queues
        for q in range(n):
            with m.If(self.qclear[q]):
                m.d.sync += st.q_err[q].eq(0)
            with m.Elif(self.resume[q] | self.skip[q]):
                m.d.sync += st.q_err[q].eq(0)
            with m.Elif(self.err_set[q] & (st.q_err[q].code == 0)):
                m.d.sync += st.q_err[q].eq(self.err_info[q])
        with m.If(st.first.code == 0):
            for q in reversed(range(n)):
                with m.If(self.err_set[q] & ~self.qclear[q]):
                    m.d.sync += [st.first.eq(self.err_info[q]), st.first_queue.eq(q)]
        with m.Elif(self.qclear.bit_select(st.first_queue[:max(1, (n - 1).bit_length())], 1)):
            m.d.sync += [st.first.eq(0), st.first_queue.eq(0)]

    def _packed(self, m: Module, st: _State) -> dict:
        """The packed registers, each built from its layout in :mod:`hw.isa.registers`."""
        cfg = self.config
        regs = {
            Csr.CFG_ARRAY: CfgArray.const({"rows": cfg.rows, "cols": cfg.cols,
                                           "n_queues": cfg.n_queues,
                                           "n_sems": cfg.n_sems & 0xFF}),  # 256 reads 0
            Csr.CFG_BUS: CfgBus.const({"axi_data_bytes": cfg.axi_data_bytes,
                                       "dma_outstanding": cfg.dma_outstanding,
                                       "spad_row_bytes": cfg.spad_row_bytes,
                                       "acc_row_elems": cfg.acc_row_elems}),
            Csr.CFG_VM: CfgVm.const({"tlb_entries": cfg.tlb_entries}),
            Csr.CFG_FEATURES: CfgFeatures.const({"mx": cfg.mx}),
        }
        status = Signal(StatusWord, name="status")
        err_code = Signal(ErrorWord, name="err_code")
        m.d.comb += [
            status.busy.eq(self.busy.any()), status.error.eq(Cat(self.stop).any()),
            err_code.code.eq(st.first.code), err_code.queue.eq(st.first_queue),
            err_code.opcode.eq(st.first.opcode),
        ]
        regs[Csr.STATUS] = status
        regs[Csr.ERR_CODE] = err_code
        for e in range(len(ENGINES)):
            info = Signal(TraceInfo, name=f"trace_info{e}")
            t = self.trace[e]
            m.d.comb += [info.overflow.eq(self.trace_overflow[e]),
                         info.valid.eq(self.trace_valid[e])]
            with m.If(self.trace_valid[e]):     # an empty FIFO reads index and queue 0
                m.d.comb += [info.index.eq(t.index), info.queue.eq(t.queue)]
            regs[trace_csr(e, Csr.TRACE_INFO)] = info
        for q in range(cfg.n_queues):
            q_status = Signal(StatusWord, name=f"q_status{q}")
            q_code = Signal(QueueErrorWord, name=f"q_err_code{q}")
            m.d.comb += [q_status.busy.eq(self.busy[q]), q_status.error.eq(self.stop[q]),
                         q_code.code.eq(st.q_err[q].code), q_code.opcode.eq(st.q_err[q].opcode)]
            regs[queue_csr(q, Csr.Q_STATUS)] = q_status
            regs[queue_csr(q, Csr.Q_ERR_CODE)] = q_code
        return regs

    def _registers(self, m: Module, st: _State) -> dict:
        """Every readable register: byte offset -> value."""
        cfg = self.config
        regs = {
            Csr.ID: CSR_ID_VALUE, Csr.VERSION: CSR_VERSION_VALUE,
            Csr.CFG_SPAD: cfg.spad_rows, Csr.CFG_ACC: cfg.acc_rows, Csr.CFG_DRAM: cfg.dram_bytes,
            Csr.ERR_CMD: st.first.cmd, Csr.ERR_ADDR: st.first.addr,
            Csr.IRQ_STATUS: st.irq_status, Csr.IRQ_ENABLE: st.irq_enable,
            Csr.CYCLES_LO: self.cycles[:32], Csr.CYCLES_HI: st.cycles_hi_latch,
            Csr.QUEUE_ERRORS: self.stop, Csr.QUEUE_BUSY: self.busy,
            Csr.CNT_CYCLES_LO: self.counters_cycles[:32],
            Csr.CNT_CYCLES_HI: self.counters_cycles[32:],
        }
        for e in range(len(ENGINES)):
            regs[trace_csr(e, Csr.TRACE_START)] = self.trace[e].start
            regs[trace_csr(e, Csr.TRACE_END)] = self.trace[e].end
        for q in range(cfg.n_queues):      # the host-written ones read their copy (_read)
            regs.update({
                queue_csr(q, Csr.HEAD): self.head[q],
                queue_csr(q, Csr.Q_ERR_CMD): st.q_err[q].cmd,
                queue_csr(q, Csr.Q_ERR_ADDR): st.q_err[q].addr,
                queue_csr(q, Csr.Q_FETCHED): self.fetched[q],
            })
        regs.update(self._packed(m, st))
        return regs

    def _read(self, m: Module, st: _State, regs: dict) -> None:
        """One read at a time; the value is taken in the AR cycle (reading ``CYCLES_LO``
        latches ``CYCLES_HI``; a counter's comes from the counter block's snapshot memory,
        which answers in the next cycle); unmapped offsets read 0."""
        bus = self.bus
        value = Signal(32)
        # the read's value: from the multiplexer below (0), the counter block's snapshot
        # memory (1, it answers in the next cycle), the semaphore unit's read port (2, value;
        # 3, record) or the host-written queue registers' copy (4), each registered apart
        # and off the multiplexer
        source, source_q = Signal(range(5)), Signal(range(5), name="read_source")
        value_q = Signal(32, name="read_value", reset_less=True)
        sem_q = Signal(32, name="read_sem_value", reset_less=True)
        sem_last_q = Signal(32, name="read_sem_last", reset_less=True)
        copy_q = Signal(32, name="read_host_reg", reset_less=True)
        # both semaphore regions are 4 * 256 bytes: the word address's low bits name it
        m.d.comb += self.sem_rd.eq(bus.araddr[2:10])
        copy = st.host_regs.read_port(domain="comb")
        m.d.comb += copy.addr.eq(self._host_reg_slot(m, bus.araddr))
        with m.Switch(bus.araddr[2:]):
            with m.Case(*(queue_csr(q, reg) >> 2 for q in range(self.config.n_queues)
                          for reg, _ in self._host_regs())):
                m.d.comb += source.eq(4)
            for offset, reg in regs.items():
                with m.Case(offset >> 2):
                    m.d.comb += value.eq(reg)
            n = self.config.n_sems
            with m.Case(*(sem_csr(s) >> 2 for s in range(n))):
                m.d.comb += source.eq(2)
            with m.Case(*(sem_last_csr(s) >> 2 for s in range(n))):
                m.d.comb += source.eq(3)
            for i, name in enumerate(COUNTER_NAMES):
                with m.Case(counter_csr(name) >> 2):
                    m.d.comb += [self.counter_index.eq(i), source.eq(1),
                                 self.counter_rd.eq(bus.arvalid & bus.arready)]
        with m.FSM(name="read"):
            with m.State("IDLE"):       # no read while the counter block writes a snapshot
                m.d.comb += bus.arready.eq(~self.snapshot_busy)
                with m.If(bus.arvalid & bus.arready):
                    m.d.sync += [value_q.eq(value), source_q.eq(source),
                                 sem_q.eq(self.sem_value), sem_last_q.eq(self.sem_last),
                                 copy_q.eq(Mux(st.host_written.bit_select(copy.addr, 1),
                                               copy.data, 0))]
                    with m.If(bus.araddr[2:] == Csr.CYCLES_LO >> 2):
                        m.d.sync += st.cycles_hi_latch.eq(self.cycles[32:])
                    m.next = "RESPOND"
            with m.State("RESPOND"):
                m.d.comb += [bus.rvalid.eq(1), bus.rresp.eq(0)]
                with m.Switch(source_q):
                    for i, v in enumerate((value_q, self.counter_value, sem_q, sem_last_q,
                                           copy_q)):
                        with m.Case(i):
                            m.d.comb += bus.rdata.eq(v)
                with m.If(bus.rready):
                    m.next = "IDLE"

    def _write(self, m: Module, st: _State, irq_clear: Signal) -> None:
        """Collect AW and W (in either order), act in the cycle after both were taken, then
        answer B; writes to read-only or unmapped offsets are ignored."""
        bus = self.bus
        aw_addr = Signal(CSR_ADDR_BITS)
        aw_have = Signal()
        w_data = Signal(32)
        w_have = Signal()
        m.d.comb += self.sem_set_value.eq(w_data)
        st.host_copy = copy = st.host_regs.write_port()
        m.d.comb += [copy.addr.eq(self._host_reg_slot(m, aw_addr)), copy.data.eq(w_data)]
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
                        self._write_cases(m, st, w_data, irq_clear)
                    m.next = "RESPOND"
            with m.State("RESPOND"):        # held while the counter block writes a snapshot
                m.d.comb += [bus.bvalid.eq(~self.snapshot_busy), bus.bresp.eq(0)]
                with m.If(bus.bready & ~self.snapshot_busy):
                    m.next = "COLLECT"

    def _host_regs(self) -> list:
        """The queue registers only the host writes, (offset in the queue's block, register):
        each also has a copy in ``_State.host_regs`` that host reads read, so that they are
        not inputs of the read multiplexer. ``Q_VM`` is writable only with a TLB."""
        regs = [(Csr.RING_BASE, self.ring_base), (Csr.RING_SIZE, self.ring_size),
                (Csr.TAIL, self.tail), (Csr.WINDOW_BASE, self.window_base),
                (Csr.WINDOW_LIMIT, self.window_limit)]
        return regs + ([(Csr.Q_VM, self.vm)] if self.config.tlb_entries else [])

    def _host_reg_slot(self, m: Module, addr) -> Signal:
        """The slot in ``_State.host_regs`` of a queue register's byte address ``addr``:
        ``8 * queue`` plus the register's index in :meth:`_host_regs` (any other offset maps
        to some slot; only the offsets of :meth:`_host_regs` read or write it)."""
        qb = _queue_bits(self.config.n_queues)
        slot = Signal(3 + qb)
        queue = addr[6:] - Csr.QUEUE_BASE // Csr.QUEUE_STRIDE
        m.d.comb += slot[3:].eq(queue[:qb])
        with m.Switch(addr[2:6]):
            for i, (reg, _) in enumerate(self._host_regs()):
                with m.Case(reg >> 2):
                    m.d.comb += slot[:3].eq(i)
        return slot

    def _write_cases(self, m: Module, st: _State, w_data: Signal, irq_clear: Signal) -> None:
        """The effect of a write, per register (inside the switch on the word address)."""
        n = self.config.n_queues
        copy = st.host_copy
        for q in range(n):
            for reg, target in self._host_regs():
                with m.Case(queue_csr(q, reg) >> 2):
                    m.d.sync += [target[q].eq(w_data),
                                 st.host_written.bit_select(copy.addr, 1).eq(1)]
                    m.d.comb += copy.en.eq(1)
            if self.config.tlb_entries:
                with m.Case(queue_csr(q, Csr.Q_RESUME) >> 2):
                    word = ResumeWord(w_data)
                    faulted = st.q_err[q].code.matches(*(c.value for c in PAGE_FAULTS))
                    go = faulted & ~self.err_set[q]
                    m.d.comb += [self.resume[q].eq(go & word.resume & ~word.skip),
                                 self.skip[q].eq(go & word.skip)]
        for e in range(len(ENGINES)):
            with m.Case(trace_csr(e, Csr.TRACE_POP) >> 2):
                m.d.comb += self.trace_pop[e].eq(self.trace_valid[e])
        for s in range(self.config.n_sems):
            with m.Case(sem_csr(s) >> 2):
                m.d.comb += [self.sem_set.eq(1), self.sem_set_sem.eq(s)]
        with m.Case(Csr.IRQ_ENABLE >> 2):
            m.d.sync += st.irq_enable.eq(w_data)
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


def _queue_bits(n_queues: int) -> int:
    return max(1, (n_queues - 1).bit_length())


class _State:
    """Registers of the CSR block (names as in the VCD)."""

    def __init__(self, n_queues: int):
        # the host-written queue registers' copy (LUT RAM: its read port is its multiplexer),
        # 8 slots per queue, and which slots were written since reset (the registers reset
        # to 0, the memory does not)
        depth = 8 << _queue_bits(n_queues)
        self.host_regs = Memory(shape=32, depth=depth, init=[])
        self.host_written = Signal(depth, name="host_written")
        self.host_copy = None       # its write port (CsrBlock._write)
        self.q_err = [Signal(ErrorReport, name=f"q_err{q}") for q in range(n_queues)]
        self.first = Signal(ErrorReport, name="first")      # first error of any queue
        self.first_queue = Signal(8, name="first_queue")
        self.irq_status = Signal(2, name="irq_status")
        self.irq_enable = Signal(2, name="irq_enable")
        self.cycles_hi_latch = Signal(32, name="cycles_hi_latch")
