"""The ``perf`` backend: the functional model's results at the RTL's timing.

:class:`PerfBackend` implements :class:`sw.backend.Backend` with the register map of
:class:`hw.isa.Csr`. It is a :class:`sw.model.ModelBackend` -- same DRAM image, local memories,
checks and arithmetic, so the same bytes -- whose commands run through the timed
:class:`~sw.perf.machine.Machine` instead of in ring order at the doorbell: engines run
concurrently, ordered by semaphores, as on the hardware. Host accesses take the cycles they
take on the co-simulated RTL (:mod:`sw.perf.host`), so counter deltas, ``CYCLES``, fence
timestamps and trace cycles compare with the RTL's directly.

Differences from the RTL (by design or not yet modelled):

* Each engine command reads and writes the functional state at once in the cycle its engine
  takes it; programs ordered by semaphores (every kernel of this kit) give the same bytes, a
  racy program may not. Host DRAM accesses during a transfer see all or nothing of it.
* DRAM timing (:class:`sw.dram.DramTiming`): every parameter is timed as ``dram.sv`` has it
  -- read and write latency, the bandwidth limit (one token bucket for R and W) and the seeded
  random backpressure of each channel (the same draws, cycle by cycle from reset; see
  :mod:`sw.perf.memory`). AXI error responses come only from a bus fault
  (:meth:`set_bus_fault`, :mod:`sw.model.faults`, range rule): as on the RTL they do not change
  the DRAM's timing; the fetch, the fence or the DMA command reports ``AXI_ERROR``, and a load
  drains the rest of its transfer from the first error beat (:mod:`sw.perf.dma`).
* Semaphore waits use :func:`hw.isa.sem_reached` and a host write to a semaphore sets it
  (the ISA contract of ``hw.isa``).
"""

from __future__ import annotations

import time

from hw.config import NPUConfig
from hw.isa import (
    COUNTER_NAMES,
    ENGINE_NAMES,
    SNAPSHOT_CYCLES,
    Csr,
    ErrorWord,
    QueueErrorWord,
    ResumeWord,
    SemLast,
    StatusWord,
    TraceInfo,
    counter_csr,
    pack_fields,
    unpack_fields,
)
from sw.backend import BackendError
from sw.dram import DramTiming
from sw.model import ModelBackend
from sw.perf.events import ARBITRATE, UPDATE
from sw.perf.host import HostClock, mem_write_accesses
from sw.perf.machine import Machine

__all__ = ["PerfBackend"]

_MASK32 = 0xFFFF_FFFF
_COUNTER_OFFSETS = {counter_csr(n): n for n in COUNTER_NAMES}
_TRACE_END = Csr.TRACE_BASE + len(ENGINE_NAMES) * Csr.TRACE_STRIDE
#: global registers the timed machine holds (the others are the functional model's)
_GLOBAL_TIMED = frozenset((Csr.CYCLES_LO, Csr.CYCLES_HI, Csr.STATUS, Csr.QUEUE_ERRORS,
                           Csr.QUEUE_BUSY, Csr.ERR_CODE, Csr.ERR_CMD, Csr.ERR_ADDR))
#: per-queue registers the timed machine holds
_QUEUE_TIMED = frozenset((Csr.Q_STATUS, Csr.Q_FETCHED, Csr.HEAD, Csr.Q_ERR_CODE, Csr.Q_ERR_CMD,
                          Csr.Q_ERR_ADDR))


class PerfBackend(ModelBackend):
    """Event-driven performance model of one NPU behind the :class:`sw.backend.Backend`
    interface.

    Parameters
    ----------
    config : NPUConfig
    dram : DramTiming or str, optional
        Timing of device DRAM (a :class:`sw.dram.DramTiming` or its preset / ``key=value``
        text, as :func:`cosim.tb.harness.run_job` takes); the ideal model by default.

    Raises
    ------
    sw.dram.DramTimingError
        For a DRAM timing text that does not parse.

    Attributes
    ----------
    machine : Machine
        The timed NPU (event queue, blocks, counters).
    sim_seconds, sim_cpu_seconds : float
        Wall time and CPU time (of this process) spent inside the backend's calls: host
        accesses, the simulation and the functional execution of the commands.
    """

    name = "perf"
    timed = True  #: every performance counter is modelled

    def __init__(self, config: NPUConfig, *, dram: DramTiming | str | None = None) -> None:
        super().__init__(config)
        self.dram_timing = DramTiming.parse(dram)
        self.machine = Machine(self, self.dram_timing)
        self.host = HostClock()
        self.sim_seconds = 0.0
        self.sim_cpu_seconds = 0.0

    # -- Backend interface -----------------------------------------------------------------

    def csr_read(self, offset: int) -> int:
        """Read the 32-bit CSR at byte ``offset`` as the RTL returns it.

        Raises
        ------
        BackendError
            If ``offset`` is not 4-byte aligned or negative.
        """
        self._check_csr_offset(offset)
        t0, c0 = time.perf_counter(), time.process_time()
        f = self.host.csr_read()
        self.machine.eq.run_through(f, UPDATE)
        value = self._read(offset, f)
        self._spent(t0, c0)
        return value

    def csr_write(self, offset: int, value: int) -> None:
        """Write the 32-bit CSR at byte ``offset``; it takes effect as on the RTL.

        Raises
        ------
        BackendError
            If ``offset`` is not 4-byte aligned or ``value`` is not a 32-bit value.
        """
        self._check_csr_offset(offset)
        if not 0 <= value <= _MASK32:
            raise BackendError(f"CSR value {value!r} is not a 32-bit unsigned value")
        t0, c0 = time.perf_counter(), time.process_time()
        f = self.host.csr_write(SNAPSHOT_CYCLES if offset == Csr.CNT_SNAPSHOT else 0)
        self._write(offset, value, f + 1)
        self._spent(t0, c0)

    def mem_write(self, addr: int, data: bytes) -> None:
        """Write ``data`` into DRAM at byte ``addr`` through the backdoor.

        Raises
        ------
        BackendError
            If ``[addr, addr + len(data))`` is not inside the DRAM.
        """
        self._check_dram(addr, len(data))
        t0, c0 = time.perf_counter(), time.process_time()
        f = None
        for _ in range(mem_write_accesses(addr, len(data), self.config.axi_data_bytes)):
            f = self.host.backdoor()
        if f is not None:
            self.machine.eq.run_through(f, ARBITRATE)
            self.dram[addr:addr + len(data)] = data
        self._spent(t0, c0)

    def mem_read(self, addr: int, size: int) -> bytes:
        """Read ``size`` bytes of DRAM at byte ``addr`` through the backdoor.

        Raises
        ------
        BackendError
            If ``[addr, addr + size)`` is not inside the DRAM.
        """
        self._check_dram(addr, size)
        if size == 0:
            return b""
        t0, c0 = time.perf_counter(), time.process_time()
        f = self.host.backdoor()
        self.machine.eq.run_through(f, ARBITRATE)
        out = bytes(self.dram[addr:addr + size])
        self._spent(t0, c0)
        return out

    def set_bus_fault(self, fault) -> None:
        """Answer the bursts ``fault`` (a :class:`sw.model.faults.BusFault` or None) selects
        with an AXI error, from the cycle after the one the host is in; takes that cycle, as
        on the RTL (``cosim.tb.rtl_backend.RtlBackend.set_bus_fault`` drives the DRAM model's
        fault pins at a falling edge, they latch at the next rising edge). Under random DRAM
        backpressure, whose draws follow the cycle from reset, a host that spent no cycle here
        would run the rest of its program a cycle early against the same draws.

        Raises
        ------
        NotImplementedError
            For ``mode="nth"`` (as :meth:`sw.model.ModelBackend.set_bus_fault`).
        """
        t0, c0 = time.perf_counter(), time.process_time()
        f = self.host.backdoor()
        self.machine.eq.run_through(f, ARBITRATE)
        super().set_bus_fault(fault)
        self._spent(t0, c0)

    def wait_irq(self, max_cycles: int) -> bool:
        """Run until ``irq`` is high or ``max_cycles`` cycles passed, as the RTL backend does.

        Returns
        -------
        bool
            ``True`` if ``irq`` is high on return.

        Raises
        ------
        ValueError
            If ``max_cycles`` is negative.
        """
        if max_cycles < 0:
            raise ValueError(f"max_cycles must be >= 0, got {max_cycles}")
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            return self._wait_irq(max_cycles)
        finally:
            self._spent(t0, c0)

    def run_cycles(self, n: int) -> None:
        """Let ``n`` cycles pass (a timer, as the RTL backend's ``run_cycles``)."""
        if n > 0:
            self.host.timer(n)

    @property
    def cycle(self) -> int:
        """The cycle the host is in (``CYCLES`` then)."""
        return self.host.cycle()

    # -- helpers ---------------------------------------------------------------------------

    def _spent(self, t0: float, c0: float) -> None:
        self.sim_seconds += time.perf_counter() - t0
        self.sim_cpu_seconds += time.process_time() - c0

    def _wait_irq(self, max_cycles: int) -> bool:
        eq = self.machine.eq
        c0 = self.host.cycle()
        eq.run_through(c0, UPDATE)
        if self.irq or max_cycles == 0:
            return self.irq
        h_end = self.host.timer_end(max_cycles)
        deadline = (h_end - 1) // 2 + 1       # a rising edge at 2e < h_end wakes the host
        e = eq.run_until(deadline, lambda: self.irq, self.machine.irq_changed)
        if e is not None:
            self.host.rising(e)
            return True
        self.host.timer(max_cycles)
        eq.run_through(self.host.cycle(), UPDATE)
        return self.irq

    def _read(self, offset: int, f: int) -> int:
        """The CSR at ``offset`` as it reads in cycle ``f``: the registers the timed machine
        holds, the static ones from the functional model's register map."""
        m = self.machine
        if offset in _GLOBAL_TIMED:
            return self._read_global(offset, f)
        if Csr.CNT_BASE <= offset < Csr.CNT_END:
            if offset in (Csr.CNT_CYCLES_LO, Csr.CNT_CYCLES_HI):
                return (m.snapshot_cycles >> (32 * (offset == Csr.CNT_CYCLES_HI))) & _MASK32
            name = _COUNTER_OFFSETS.get(offset)
            return 0 if name is None else m.snapshot[name] & _MASK32
        if Csr.TRACE_BASE <= offset < _TRACE_END:
            return self._read_trace(*divmod(offset - Csr.TRACE_BASE, Csr.TRACE_STRIDE), f)
        if Csr.SEM_LAST_BASE <= offset < Csr.SEM_LAST_BASE + 4 * self.config.n_sems:
            last = m.sems.last[(offset - Csr.SEM_LAST_BASE) // 4]
            if last is None:
                return 0
            return pack_fields(SemLast, {"index": last[1] & 0xFF_FFFF, "queue": last[0] & 0x7F,
                                         "valid": 1})
        q, reg = self._queue_reg(offset)
        if q is not None and reg in _QUEUE_TIMED:
            return self._read_queue(q, reg, f)
        return super().csr_read(offset)

    def _read_global(self, offset: int, f: int) -> int:
        m = self.machine
        queues = range(self.config.n_queues)
        first = m.first_error
        if offset == Csr.CYCLES_LO:
            m.cycles_hi_latch = f >> 32
            return f & _MASK32
        return {
            Csr.CYCLES_HI: lambda: m.cycles_hi_latch,
            Csr.STATUS: lambda: pack_fields(StatusWord, {
                "busy": any(m.queue_busy(q) for q in queues), "error": any(m.stop)}),
            Csr.QUEUE_ERRORS: lambda: sum(1 << q for q in queues if m.stop[q]),
            Csr.QUEUE_BUSY: lambda: sum(1 << q for q in queues if m.queue_busy(q)),
            Csr.ERR_CODE: lambda: 0 if first is None else pack_fields(ErrorWord, {
                "code": first.code, "queue": first.queue, "opcode": first.opcode}),
            Csr.ERR_CMD: lambda: 0 if first is None else first.index,
            Csr.ERR_ADDR: lambda: 0 if first is None else first.addr,
        }[offset]()

    def _read_queue(self, q: int, reg: int, f: int) -> int:
        m = self.machine
        err = m.queue_error[q]
        queue = self.queues[q]
        if reg == Csr.Q_STATUS:
            return pack_fields(StatusWord, {"busy": m.queue_busy(q), "error": m.stop[q]})
        if reg == Csr.Q_FETCHED:
            return m.fetched[q] & _MASK32
        if reg == Csr.HEAD:
            return queue.head & _MASK32
        if err is None:
            return 0
        return {Csr.Q_ERR_CODE: lambda: pack_fields(QueueErrorWord, {"code": err.code,
                                                                     "opcode": err.opcode}),
                Csr.Q_ERR_CMD: lambda: err.index, Csr.Q_ERR_ADDR: lambda: err.addr}[reg]()

    def _read_trace(self, e: int, reg: int, f: int) -> int:
        head = self.machine.trace_head(e, f)
        if reg == Csr.TRACE_INFO:
            q, index = (head[0], head[1]) if head else (0, 0)
            return pack_fields(TraceInfo, {"index": index & 0xFF_FFFF, "queue": q & 0x3F,
                                           "overflow": int(self.machine.trace_overflow[e]),
                                           "valid": int(head is not None)})
        if head is None:
            return 0
        return {Csr.TRACE_START: head[2], Csr.TRACE_END: head[3]}.get(reg, 0)

    def _write(self, offset: int, value: int, pulse: int) -> None:
        """The effect of a CSR write whose pulse is in cycle ``pulse`` (registers change from
        ``pulse + 1``)."""
        m = self.machine
        eq = m.eq
        if offset == Csr.IRQ_STATUS:
            m.irq_event(pulse + 1, clear_bits=value)
        elif offset == Csr.IRQ_ENABLE:
            eq.at(pulse + 1, UPDATE, self._set_irq_enable, value & 0b11)
        elif offset == Csr.CONTROL:
            if value & 1:
                m.queue_reset((1 << self.config.n_queues) - 1, pulse, everything=True)
        elif offset == Csr.QUEUE_RESET:
            m.queue_reset(value, pulse)
        elif offset == Csr.CNT_SNAPSHOT:
            m.take_snapshot(pulse)
        elif Csr.TRACE_BASE <= offset < _TRACE_END:
            e, reg = divmod(offset - Csr.TRACE_BASE, Csr.TRACE_STRIDE)
            if reg == Csr.TRACE_POP:
                m.trace_pop(e, pulse)
        elif Csr.SEM_BASE <= offset < Csr.SEM_BASE + 4 * self.config.n_sems:
            m.sems.write(pulse + 1, (offset - Csr.SEM_BASE) // 4, value)
        else:
            q, reg = self._queue_reg(offset)
            if q is None:
                return
            if self.config.tlb_entries and reg == Csr.Q_RESUME:
                word = unpack_fields(ResumeWord, value)
                if word.resume or word.skip:
                    m.resume(q, pulse, skip=bool(word.skip))
                return
            field = {Csr.RING_BASE: "ring_base", Csr.RING_SIZE: "ring_size", Csr.TAIL: "tail",
                     Csr.WINDOW_BASE: "window_base", Csr.WINDOW_LIMIT: "window_limit",
                     **({Csr.Q_VM: "vm"} if self.config.tlb_entries else {})}.get(reg)
            if field is not None:
                m.reg_writes[q].add(pulse + 1)
                eq.at(pulse + 1, UPDATE, self._set_queue_reg, q, field, value)

    def _set_irq_enable(self, value: int) -> None:
        self.irq_enable = value
        self.machine.irq_changed[0] = True

    def _set_queue_reg(self, q: int, field: str, value: int) -> None:
        setattr(self.queues[q], field, value)
        self.machine.reg_writes[q].discard(self.machine.eq.now)
        if field in ("tail", "ring_size"):     # ring_more may change (hw.isa.ring_is_bad)
            self.machine.fetch.wake(self.machine.eq.now)

