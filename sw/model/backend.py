"""The functional model as a :class:`sw.backend.Backend`: the CSR map, the command queues and
their rings, semaphores, error latches, interrupts, the command trace and the untimed
counters. The engines' execution is in :mod:`sw.model.engines`; what the model does and where
it differs from the RTL is in :mod:`sw.model`.

Every packed register is built with :func:`hw.isa.pack_fields` from its struct in
:mod:`hw.isa.registers`; the command header is read through :func:`hw.isa.decode`.
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth.lib import data

from hw.config import NPUConfig
from hw.isa import (
    COMMAND_BYTES,
    COUNTER_NAMES,
    CSR_ID_VALUE,
    CSR_VERSION_VALUE,
    ENGINE_NAMES,
    OPCODE_ENGINE,
    PAGE_FAULTS,
    TIMING_COUNTERS,
    CfgArray,
    CfgBus,
    CfgFeatures,
    CfgVm,
    CommandView,
    Csr,
    ErrorCode,
    ErrorWord,
    IrqBit,
    Opcode,
    QueueErrorWord,
    ResumeWord,
    SemLast,
    StatusWord,
    TraceInfo,
    counter_csr,
    decode,
    error_stage,
    pack_fields,
    ring_is_bad,
    sem_reached,
    unpack_fields,
)
from sw.backend import BackendError
from sw.model.engines import CommandError, Engines
from sw.model.faults import BusFault

__all__ = ["ModelBackend"]

_WORD = 1 << 32  #: CSRs are 32-bit; semaphores wrap modulo this


def _low_bits(layout, name: str, value: int) -> int:
    """``value`` cut to the width of field ``name`` of ``layout`` (a register that keeps the
    low bits of a wider count, e.g. a command index)."""
    return value % (1 << data.Layout.cast(layout)[name].width)


@dataclass(frozen=True)
class _Error:
    """A latched error: what ``ERR_*`` / ``Q_ERR_*`` report."""
    code: ErrorCode
    queue: int
    opcode: int     #: 0 for a fetch error before decode
    index: int      #: ``ERR_CMD``: commands the queue consumed since its last reset
    addr: int


@dataclass
class _Queue:
    ring_base: int = 0
    ring_size: int = 0
    head: int = 0
    tail: int = 0
    consumed: int = 0      #: commands consumed since the last reset (ERR_CMD)
    window_base: int = 0   #: DRAM window [window_base, window_limit); limit 0 = no limit
    window_limit: int = 0
    vm: int = 0            #: Q_VM: the queue's context (hw.isa.vm); 0 = physical addresses
    error: _Error | None = None   #: the latched error (Q_ERR_*); it stops the queue
    #: the command that took a page fault, run again (or skipped) on ``Q_RESUME``:
    #: (decoded command, slot address)
    replay: tuple | None = None
    skip: bool = False     #: ``Q_RESUME.skip``: retire ``replay`` without moving data
    fetch_fault: bool = False   #: the latched error is a page fault of the ring fetch

    def window(self) -> tuple[int, int]:
        return self.window_base, self.window_limit or _WORD

    @property
    def busy(self) -> bool:
        return self.head != self.tail


class ModelBackend:
    """Instant functional simulator of one NPU, seen through the :class:`sw.backend.Backend`
    interface.

    Parameters
    ----------
    config : NPUConfig
        The configuration to model; reported in the ``CFG_*`` CSRs.

    Raises
    ------
    TypeError
        If ``config`` is not an :class:`NPUConfig`.

    Attributes
    ----------
    name : str
        ``"model"``.
    dram : bytearray
        Device DRAM, ``config.dram_bytes`` bytes.
    spad : numpy.ndarray
        Scratchpad, int8, shape ``(spad_rows, spad_row_bytes)``.
    acc : numpy.ndarray
        Accumulator, int32, shape ``(acc_rows, acc_row_elems)``.
    sems : list of int
        Semaphore values (32-bit).
    commands_executed : int
        Total commands retired (for tests and statistics).
    """

    name = "model"
    timed = False  #: no cycle timing: the runtime's counters() has no timing counters

    def __init__(self, config: NPUConfig) -> None:
        if not isinstance(config, NPUConfig):
            raise TypeError(f"config must be an NPUConfig, got {config!r}")
        self.config = config
        #: live untimed performance counters and the last CNT_SNAPSHOT of them
        self.counters = {c: 0 for c in COUNTER_NAMES if c not in TIMING_COUNTERS}
        self.counter_snapshot = dict.fromkeys(self.counters, 0)
        self.engines = Engines(config, self.counters)
        self.dram, self.spad, self.acc = self.engines.dram, self.engines.spad, self.engines.acc
        self.sems = [0] * config.n_sems
        self.sem_last: list[tuple[int, int] | None] = [None] * config.n_sems  #: (queue, index)
        self.queues = [_Queue() for _ in range(config.n_queues)]
        self.first_error: _Error | None = None   #: ERR_* (the first error since cleared)
        self.irq_status = 0
        self.irq_enable = 0
        self.commands_executed = 0
        #: per engine, the trace FIFO: (queue, index, start, end) in logical time
        self.traces: list[list[tuple[int, int, int, int]]] = [[] for _ in ENGINE_NAMES]
        self.trace_overflow = [False] * len(ENGINE_NAMES)
        self.clock = 0  #: logical time of the trace: +1 per retired engine command
        self._cur = (0, 0)  #: (queue, command index) being executed

    # -- Backend interface ----------------------------------------------------------------------

    def csr_read(self, offset: int) -> int:
        """Read the 32-bit CSR at byte ``offset``; unmapped offsets read 0.

        Raises
        ------
        BackendError
            If ``offset`` is not 4-byte aligned or negative.
        """
        self._check_csr_offset(offset)
        fixed = self._global_csrs()
        if offset in fixed:
            return fixed[offset]
        if Csr.CNT_BASE <= offset < Csr.CNT_END:
            return self._counter_csrs.get(offset, 0)
        q, reg = self._queue_reg(offset)
        if q is not None:
            return self._queue_csrs(self.queues[q]).get(reg, 0)
        s = self._sem_index(offset, Csr.SEM_BASE)
        if s is not None:
            return self.sems[s]
        s = self._sem_index(offset, Csr.SEM_LAST_BASE)
        if s is not None:
            last = self.sem_last[s]
            if last is None:
                return 0
            return pack_fields(SemLast, {"queue": last[0], "valid": 1,
                                         "index": _low_bits(SemLast, "index", last[1])})
        rel = offset - Csr.TRACE_BASE
        if 0 <= rel < len(ENGINE_NAMES) * Csr.TRACE_STRIDE:
            return self._trace_csr(*divmod(rel, Csr.TRACE_STRIDE))
        return 0

    def csr_write(self, offset: int, value: int) -> None:
        """Write the 32-bit CSR at byte ``offset``. A ``TAIL`` write runs the queue; a write to
        a semaphore sets it to ``value`` (``SEM_LAST`` unchanged) and runs the queues it may
        release.

        Raises
        ------
        BackendError
            If ``offset`` is not 4-byte aligned or ``value`` is not a 32-bit value.
        """
        self._check_csr_offset(offset)
        if not 0 <= value < _WORD:
            raise BackendError(f"CSR value {value!r} is not a 32-bit unsigned value")
        if offset == Csr.IRQ_STATUS:
            self.irq_status &= ~value
        elif offset == Csr.IRQ_ENABLE:
            self.irq_enable = value & (IrqBit.FENCE | IrqBit.ERROR)
        elif offset == Csr.QUEUE_RESET:
            for q in range(self.config.n_queues):
                if value >> q & 1:
                    self._reset_queue(q)
            self._pump()
        elif Csr.TRACE_BASE <= offset < Csr.TRACE_BASE + len(ENGINE_NAMES) * Csr.TRACE_STRIDE:
            e, reg = divmod(offset - Csr.TRACE_BASE, Csr.TRACE_STRIDE)
            if reg == Csr.TRACE_POP and self.traces[e]:
                self.traces[e].pop(0)
        elif offset == Csr.CONTROL:
            if value & 1:
                self._clear()
        elif offset == Csr.CNT_SNAPSHOT:
            self.counter_snapshot = dict(self.counters)
        elif (s := self._sem_index(offset, Csr.SEM_BASE)) is not None:
            self.sems[s] = value
            self._pump()
        else:
            self._write_queue_csr(offset, value)

    def mem_write(self, addr: int, data: bytes) -> None:
        """Write ``data`` into DRAM at byte ``addr``.

        Raises
        ------
        BackendError
            If ``[addr, addr + len(data))`` is not inside the DRAM.
        """
        self._check_dram(addr, len(data))
        self.dram[addr:addr + len(data)] = data

    def mem_read(self, addr: int, size: int) -> bytes:
        """Read ``size`` bytes of DRAM at byte ``addr``.

        Raises
        ------
        BackendError
            If ``[addr, addr + size)`` is not inside the DRAM.
        """
        self._check_dram(addr, size)
        return bytes(self.dram[addr:addr + size])

    def wait_irq(self, max_cycles: int) -> bool:
        """Return the ``irq`` level at once (the model is untimed; ``max_cycles`` is ignored)."""
        return self.irq

    def set_bus_fault(self, fault: BusFault | None) -> None:
        """Answer the bursts that ``fault`` selects with an AXI error from now on (``None``:
        no fault), as the co-simulation's DRAM model does (:mod:`sw.model.faults`).

        Raises
        ------
        NotImplementedError
            For ``mode="nth"`` (the burst order across queues is timing; RTL only).
        """
        if fault is not None and fault.mode == "nth":
            raise NotImplementedError("an nth-burst fault depends on the bus order across "
                                      "queues; only the RTL's DRAM model applies it")
        self.engines.fault = None if fault is None or fault.mode == "off" else fault

    @property
    def irq(self) -> bool:
        """The interrupt line: ``IRQ_STATUS & IRQ_ENABLE != 0``."""
        return (self.irq_status & self.irq_enable) != 0

    # -- registers ------------------------------------------------------------------------------

    def _global_csrs(self) -> dict[int, int]:
        c, first = self.config, self.first_error
        return {
            Csr.ID: CSR_ID_VALUE,
            Csr.VERSION: CSR_VERSION_VALUE,
            Csr.CFG_ARRAY: pack_fields(CfgArray, {
                "rows": c.rows, "cols": c.cols, "n_queues": c.n_queues,
                "n_sems": _low_bits(CfgArray, "n_sems", c.n_sems)}),
            Csr.CFG_SPAD: c.spad_rows,
            Csr.CFG_ACC: c.acc_rows,
            Csr.CFG_BUS: pack_fields(CfgBus, {
                "axi_data_bytes": c.axi_data_bytes, "dma_outstanding": c.dma_outstanding,
                "spad_row_bytes": c.spad_row_bytes, "acc_row_elems": c.acc_row_elems}),
            Csr.CFG_DRAM: c.dram_bytes % _WORD,
            Csr.CFG_FEATURES: pack_fields(CfgFeatures, {"mx": c.mx}),
            Csr.STATUS: pack_fields(StatusWord, {
                "busy": any(q.busy for q in self.queues),
                "error": any(q.error is not None for q in self.queues)}),
            Csr.ERR_CODE: 0 if first is None else pack_fields(ErrorWord, {
                "code": first.code, "queue": first.queue, "opcode": first.opcode}),
            Csr.ERR_CMD: 0 if first is None else first.index,
            Csr.ERR_ADDR: 0 if first is None else first.addr,
            Csr.IRQ_STATUS: self.irq_status,
            Csr.IRQ_ENABLE: self.irq_enable,
            Csr.CYCLES_LO: 0,  # untimed model
            Csr.CYCLES_HI: 0,
            Csr.CONTROL: 0,
            Csr.QUEUE_ERRORS: sum(1 << q for q, x in enumerate(self.queues) if x.error),
            Csr.QUEUE_BUSY: sum(1 << q for q, x in enumerate(self.queues) if x.busy),
            Csr.CFG_VM: pack_fields(CfgVm, {"tlb_entries": c.tlb_entries}),
        }

    @staticmethod
    def _queue_csrs(queue: _Queue) -> dict[int, int]:
        err = queue.error
        return {
            Csr.WINDOW_BASE: queue.window_base, Csr.WINDOW_LIMIT: queue.window_limit,
            Csr.Q_STATUS: pack_fields(StatusWord, {"busy": queue.busy,
                                                   "error": err is not None}),
            Csr.Q_ERR_CODE: 0 if err is None else pack_fields(
                QueueErrorWord, {"code": err.code, "opcode": err.opcode}),
            Csr.Q_ERR_CMD: 0 if err is None else err.index,
            Csr.Q_ERR_ADDR: 0 if err is None else err.addr,
            Csr.Q_FETCHED: queue.consumed,
            Csr.Q_VM: queue.vm,
            Csr.RING_BASE: queue.ring_base, Csr.RING_SIZE: queue.ring_size,
            Csr.HEAD: queue.head, Csr.TAIL: queue.tail,
        }

    def _trace_csr(self, e: int, reg: int) -> int:
        entries = self.traces[e]
        q, index, start, end = entries[0] if entries else (0, 0, 0, 0)
        if reg == Csr.TRACE_INFO:
            return pack_fields(TraceInfo, {
                "index": _low_bits(TraceInfo, "index", index), "queue": q,
                "overflow": self.trace_overflow[e], "valid": bool(entries)})
        return {Csr.TRACE_START: start % _WORD, Csr.TRACE_END: end % _WORD}.get(reg, 0)

    def _write_queue_csr(self, offset: int, value: int) -> None:
        q, reg = self._queue_reg(offset)
        if q is None:
            return
        queue = self.queues[q]
        if reg == Csr.RING_BASE:
            queue.ring_base = value
        elif reg == Csr.WINDOW_BASE:
            queue.window_base = value
        elif reg == Csr.WINDOW_LIMIT:
            queue.window_limit = value
        elif reg == Csr.Q_VM:
            queue.vm = value if self.config.tlb_entries else 0
        elif reg == Csr.Q_RESUME:
            word = unpack_fields(ResumeWord, value)
            if (queue.error is not None and queue.error.code in PAGE_FAULTS
                    and (queue.replay is not None or queue.fetch_fault)
                    and (word.resume or word.skip)):
                queue.error = None          # (ERR_* keeps the first error)
                queue.skip = bool(word.skip) and queue.replay is not None
                queue.fetch_fault = False   # a ring slot is fetched again
                self._pump()
        elif reg == Csr.RING_SIZE:
            queue.ring_size = value
        elif reg == Csr.TAIL:
            queue.tail = value
            self._pump()

    def _check_csr_offset(self, offset: int) -> None:
        if offset < 0 or offset % 4:
            raise BackendError(f"CSR offset {offset:#x} is not a 4-byte aligned offset")

    def _check_dram(self, addr: int, size: int) -> None:
        if addr < 0 or size < 0 or addr + size > self.config.dram_bytes:
            raise BackendError(
                f"DRAM access [{addr:#x}, {addr + size:#x}) outside [0, "
                f"{self.config.dram_bytes:#x})")

    def _queue_reg(self, offset: int) -> tuple[int | None, int]:
        rel = offset - Csr.QUEUE_BASE
        if 0 <= rel < self.config.n_queues * Csr.QUEUE_STRIDE:
            return rel // Csr.QUEUE_STRIDE, rel % Csr.QUEUE_STRIDE
        return None, 0

    def _sem_index(self, offset: int, base: int) -> int | None:
        """The semaphore whose register at ``base + 4 * s`` is ``offset``, or None."""
        if base <= offset < base + 4 * self.config.n_sems:
            return (offset - base) // 4
        return None

    @property
    def _counter_csrs(self) -> dict[int, int]:
        """Offset -> value of the counter registers (the last snapshot; timing ones 0)."""
        return {counter_csr(k): v % _WORD for k, v in self.counter_snapshot.items()}

    # -- reset and errors -----------------------------------------------------------------------

    def _clear(self) -> None:
        for q in range(self.config.n_queues):
            self._reset_queue(q)
        self.first_error = None
        self.sems = [0] * self.config.n_sems
        self.sem_last = [None] * self.config.n_sems
        self.traces = [[] for _ in ENGINE_NAMES]
        self.trace_overflow = [False] * len(ENGINE_NAMES)

    def _reset_queue(self, q: int) -> None:
        """``QUEUE_RESET`` bit ``q``: drop the queue's pending commands, clear its error (and
        the global first-error registers if they name it); semaphores are not touched."""
        queue = self.queues[q]
        queue.head = queue.tail
        queue.consumed = 0
        queue.error = None
        queue.replay = None
        queue.fetch_fault = False
        if self.first_error is not None and self.first_error.queue == q:
            self.first_error = None

    def _raise_error(self, q: int, opcode: int, code: ErrorCode, addr: int) -> None:
        queue = self.queues[q]
        error = _Error(code, q, opcode, queue.consumed % _WORD, addr % _WORD)
        if queue.error is None:
            queue.error = error
        if self.first_error is None:  # the first error stays latched until CONTROL clears it
            self.first_error = error
        self.irq_status |= IrqBit.ERROR

    # -- execution ------------------------------------------------------------------------------

    def _pump(self) -> None:
        """Run every queue until all are empty, blocked or stopped."""
        progress = True
        while progress:
            progress = False
            for q in range(len(self.queues)):
                if self._run_queue(q):
                    progress = True

    def _fetch(self, q: int) -> tuple[int, bytes, int] | None:
        """The DRAM address (virtual for a translating queue), bytes and physical address of
        queue ``q``'s head command, or None after latching a ring error (ring size,
        alignment, DRAM, window, page fault)."""
        queue = self.queues[q]
        if ring_is_bad(queue.ring_size, queue.head, queue.tail):
            self._raise_error(q, 0, ErrorCode.BAD_SIZE, queue.ring_base)
            return None
        if queue.ring_base % COMMAND_BYTES:
            self._raise_error(q, 0, ErrorCode.MISALIGNED, queue.ring_base)
            return None
        slot_addr = queue.ring_base + queue.head * COMMAND_BYTES
        if self.engines.translates(queue.vm):        # a virtual ring (hw.isa.vm)
            if slot_addr + COMMAND_BYTES > _WORD:
                self._raise_error(q, 0, ErrorCode.BAD_DRAM_ADDR, slot_addr)
                return None
            try:
                pa = self.engines.translate_fetch(queue.vm, slot_addr, write=False)
            except CommandError as e:
                self._raise_error(q, 0, e.code, e.addr)
                queue.fetch_fault = True
                return None
            return slot_addr, bytes(self.dram[pa:pa + COMMAND_BYTES]), pa
        if slot_addr + COMMAND_BYTES > self.config.dram_bytes:
            self._raise_error(q, 0, ErrorCode.BAD_DRAM_ADDR, slot_addr)
            return None
        win_base, win_limit = queue.window()
        if slot_addr < win_base or slot_addr + COMMAND_BYTES > win_limit:
            self._raise_error(q, 0, ErrorCode.WINDOW, slot_addr)
            return None
        return slot_addr, bytes(self.dram[slot_addr:slot_addr + COMMAND_BYTES]), slot_addr

    def _run_queue(self, q: int) -> bool:
        """Execute queue ``q`` from HEAD towards TAIL; returns whether a command retired."""
        queue = self.queues[q]
        retired = False
        if queue.error is None and queue.replay is not None:
            if not self._replay(q):
                return False
            retired = True
        while queue.error is None and queue.busy:
            fetched = self._fetch(q)
            if fetched is None:
                break
            slot_addr, raw, slot_pa = fetched
            if self.engines.fetch_fails(slot_pa, COMMAND_BYTES):
                self.counters["bytes_read"] += COMMAND_BYTES     # the burst was read
                self._raise_error(q, 0, ErrorCode.AXI_ERROR, slot_addr)
                break
            cmd = decode(raw)
            op = cmd.header.opcode
            opcode = op.value if isinstance(op, Opcode) else op
            self._cur = (q, queue.consumed)
            try:
                done = self._execute(cmd, slot_addr)
            except CommandError as e:
                self.counters["bytes_read"] += COMMAND_BYTES     # it was fetched
                self._raise_error(q, opcode, e.code, e.addr)
                if error_stage(e.code.value, opcode) != "fetch":   # it was dispatched
                    queue.head = (queue.head + 1) % queue.ring_size
                if e.code in PAGE_FAULTS:
                    queue.replay = (cmd, slot_addr)
                break
            if not done:  # blocked on a semaphore
                break
            self.counters["bytes_read"] += COMMAND_BYTES
            self._trace(q, op)
            queue.head = (queue.head + 1) % queue.ring_size
            queue.consumed += 1
            self.commands_executed += 1
            retired = True
        return retired

    def _replay(self, q: int) -> bool:
        """Run (or skip) queue ``q``'s faulted command after ``Q_RESUME``; whether it retired
        (False: it faulted again)."""
        queue = self.queues[q]
        cmd, slot_addr = queue.replay
        op = cmd.header.opcode
        self._cur = (q, queue.consumed)
        try:
            self._execute(cmd, slot_addr, skip=queue.skip, wait=False)
        except CommandError as e:
            self._raise_error(q, op.value, e.code, e.addr)
            return False
        queue.replay = None
        queue.skip = False
        self._trace(q, op)
        queue.consumed += 1
        self.commands_executed += 1
        return True

    def _trace(self, q: int, op: Opcode) -> None:
        """The engine trace of a retired command, in logical time."""
        engine = OPCODE_ENGINE[op]
        if engine == "processor":
            return
        e = ENGINE_NAMES.index(engine)
        if len(self.traces[e]) < self.config.trace_depth:
            self.traces[e].append((q, self.queues[q].consumed, self.clock, self.clock + 1))
        else:
            self.trace_overflow[e] = True
        self.clock += 1

    def _execute(self, cmd: CommandView, slot_addr: int, skip: bool = False,
                 wait: bool = True) -> bool:
        """Execute one command; returns False if it must wait. Raises CommandError. With
        ``skip`` (a faulted DMA skipped by ``Q_RESUME``) the engine moves nothing; without
        ``wait`` (a faulted command run again) its semaphore wait is not checked again."""
        header = cmd.header
        op = header.opcode
        if not isinstance(op, Opcode):
            raise CommandError(ErrorCode.BAD_OPCODE, slot_addr)
        do_wait = bool(header.flags.wait) or op == Opcode.WAIT
        do_signal = bool(header.flags.signal) or op == Opcode.SIGNAL
        n_sems = self.config.n_sems
        if do_wait and header.wait_sem >= n_sems:
            raise CommandError(ErrorCode.BAD_SEM, header.wait_sem)
        if do_signal and header.signal_sem >= n_sems:
            raise CommandError(ErrorCode.BAD_SEM, header.signal_sem)
        if wait and do_wait and not sem_reached(self.sems[header.wait_sem], header.wait_value):
            return False
        engine = OPCODE_ENGINE[op]
        if engine != "processor":   # the engine takes it and retires it, error or not
            self.counters[f"retired.{engine}"] += 1
        # NOP, WAIT, SIGNAL, BARRIER (all earlier commands retired: execution is in order):
        # nothing beyond the header's wait/signal.
        queue = self.queues[self._cur[0]]
        try:
            if not skip:
                self.engines.execute(op, cmd, queue.window(), queue.vm)
        except CommandError:
            if engine != "processor":   # a failed engine command is traced as the RTL does
                self._trace(self._cur[0], op)
            raise
        if op == Opcode.FENCE and header.flags.irq and not skip:
            self.irq_status |= IrqBit.FENCE
        if do_signal:
            s = header.signal_sem
            self.sems[s] = (self.sems[s] + 1) % _WORD
            self.sem_last[s] = self._cur
        return True
