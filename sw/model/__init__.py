"""Functional (ISA-level) model of the NPU: the ``model`` backend of the runtime.

:class:`ModelBackend` implements :class:`sw.backend.Backend` with the register map of
:class:`hw.isa.Csr` and the command semantics documented in :mod:`hw.isa`, in plain Python and
numpy. It holds a device DRAM image, the scratchpad and the accumulator, and executes commands
the moment the host rings a doorbell. Arithmetic comes from :mod:`sw.golden` /
:mod:`sw.quant`, so the model is bit-exact with the golden reference by construction.

Model-specific behaviour (what is not cycle-accurate, and the choices where the ISA text leaves
room; the RTL must agree with these for the differential tests):

* **Untimed.** Commands run to completion inside the ``TAIL`` write. ``CYCLES_LO``/``CYCLES_HI``
  read 0; :meth:`ModelBackend.wait_irq` returns at once with the current ``irq`` level.
* **In-order execution per queue.** Engines do not overlap; each queue's commands execute in
  ring order. A command whose wait (``flags.wait`` or a ``WAIT`` opcode) is not satisfied when
  it is reached blocks its queue there: ``HEAD`` stays on it and ``STATUS.busy`` stays 1. The
  queue resumes on the next doorbell write or when another queue's command increments a
  semaphore. In a single in-order queue such a wait can only be satisfied by a later
  doorbell after work from another queue, so a program that waits for its own later signals
  deadlocks here exactly as it would on hardware with one engine; the runtime reports it as a
  timeout. (The hardware's engines are decoupled, so it also runs streams whose waits refer
  to later commands of the same queue; kernels meant for both backends only wait on earlier
  commands.) ``BARRIER`` is a no-op here (everything earlier has retired).
* **Several queues** (``n_queues``): each has its ring, ``WINDOW_BASE``/``WINDOW_LIMIT``
  (``0`` = no limit; ring fetch, fence and DMA addresses outside are ``WINDOW`` errors, checked
  after ``BAD_DRAM_ADDR``, ``ERR_ADDR`` the first offending row or slot) and its own error
  latch (``Q_ERR_*``); an error stops its queue only. ``QUEUE_RESET`` bit ``q`` resets queue
  ``q`` alone (``HEAD := TAIL``, index 0, error cleared; the global ``ERR_*`` too if they name
  it). ``Q_FETCHED`` reads the commands retired (the hardware counts fetched ones).
* **Trace and counters.** The engine trace FIFOs hold ``trace_depth`` entries each, with
  *logical* time: a global counter incremented per retired engine command (``start`` = its
  value, ``end`` = ``start + 1``), so order is exact and durations are not. ``CYCLES`` reads
  0; a ``FENCE`` with ``timestamp`` writes 0. ``SEM_LAST`` as the hardware.
* **Performance counters** (``Csr.CNT_*``, snapshot on a ``CNT_SNAPSHOT`` write as the
  hardware): the timing counters (:data:`hw.isa.TIMING_COUNTERS`: cycles, busy, stalls, DMA
  busy, overlap) read 0, and :meth:`sw.runtime.Device.counters` leaves them out
  (``timed = False``). The untimed ones count what the commands do at the ISA level:
  ``retired.<engine>`` +1 for every engine command that passed the fetch checks (opcode,
  semaphore ids) and reached its engine, whether the engine then reports an error or not;
  ``bytes_read`` +32 for every command read from a ring (counted when it executes or fails,
  not while it waits) and, per DMA load row, whole bus beats from the row's first byte
  aligned down to its last byte aligned up; ``bytes_written`` the bytes of every DMA store
  row and 4 per fence. These equal the hardware's counters once every submitted command has
  retired, in programs without errors and queue resets (the hardware fetches ahead, so it
  also reads commands that an error or a reset later drops).
* ``WAIT`` always waits on ``(wait_sem, wait_value)`` and ``SIGNAL`` always increments
  ``signal_sem``; setting ``flags.wait``/``flags.signal`` on them as well has no extra effect
  (the wait/increment happens once). Semaphores are 32-bit, wrap on increment and compare
  unsigned.
* **Command index.** ``ERR_CMD`` is the number of commands the queue consumed since its last
  reset, ``CONTROL`` bit 0 (``HEAD := TAIL``, index := 0; as ``hw/cmdproc.py``). Writing
  ``RING_BASE``/``RING_SIZE`` does not move ``HEAD``/``TAIL``. On an error ``HEAD`` stays on the
  failing command.
* **Error checks** happen before anything is written (no partial transfers); order and
  ``ERR_ADDR`` as the RTL engines (``hw/cmdproc.py``, ``hw/dma.py``, ``hw/tile.py``,
  ``hw/vector.py``): ``BAD_OPCODE`` (the command's DRAM address), ``BAD_SEM`` (the semaphore
  id; wait checked before signal), then per opcode. DMA: ``BAD_SIZE`` (``dram_addr``),
  ``MISALIGNED`` (``dram_addr``, or ``dram_addr + dram_stride`` for a bad stride),
  ``BAD_DRAM_ADDR`` (start of the first DRAM row that does not fit), ``BAD_LOCAL_ADDR`` (the
  first local row, in transfer order, outside the memory: ``max(row, depth)``). MATMUL:
  ``flags.transpose`` on a non-square array (``BAD_SIZE``, 0), A rows, W rows, then accumulator
  rows. SOFTMAX: score rows, P rows, scale rows (``max(start, depth)``). REQUANT: accumulator
  rows, scratchpad rows, the three parameter rows, then (``flags.row_scale``) the scale rows.
  FENCE: ``MISALIGNED`` then ``BAD_DRAM_ADDR`` (the fence address). A DMA with
  ``n_rows == 0`` or ``row_bytes == 0`` and a MATMUL/REQUANT with ``m``/``n_rows == 0`` do
  nothing, are not checked, and still complete. A DMA ``mem`` field other than ``ACC`` (the
  undefined encodings 2 and 3 included) addresses the scratchpad, as the RTL decodes it.
* **Ring checks** at fetch: ``RING_BASE`` not 32-byte aligned is ``MISALIGNED`` (opcode 0,
  ``ERR_ADDR`` = ring base); a slot outside DRAM is ``BAD_DRAM_ADDR``. The model also reports a
  doorbell on a ring whose ``RING_SIZE`` is not a power of two >= 2, or a ``TAIL`` outside the
  ring, as ``BAD_SIZE`` with opcode 0 (the RTL masks with ``RING_SIZE - 1`` instead).
* REQUANT parameters: the multiplier is the low 31 bits and the shift the low 6 bits of their
  accumulator words (the register widths of the vector unit).
* ``CONTROL`` bit 0 resets every queue, clears every error latch, zeroes the semaphores,
  ``SEM_LAST`` and the traces; ``IRQ_STATUS.ERROR`` is cleared separately
  (write 1). Unmapped CSRs read 0 and ignore writes; writes to read-only CSRs are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from amaranth.lib import data

from hw.config import NPUConfig
from hw.isa import (
    COMMAND_BYTES,
    COUNTER_NAMES,
    CSR_ID_VALUE,
    CSR_VERSION_VALUE,
    ENGINE_NAMES,
    OPCODE_ENGINE,
    TIMING_COUNTERS,
    Csr,
    DmaBody,
    ErrorCode,
    Header,
    IrqBit,
    LocalMem,
    Opcode,
    counter_csr,
    decode,
)
from sw.backend import BackendError
from sw.golden import requantize_rows, softmax_int
from sw.quant import requantize

__all__ = ["ModelBackend"]

_MASK32 = 0xFFFF_FFFF
_OPCODE_FIELD = data.Layout.cast(Header)["opcode"]
_OPCODE_VALUES = {op.value for op in Opcode}
_MEM_FIELD = data.Layout.cast(DmaBody)["mem"]


class _CommandError(Exception):
    """Internal: a command failed with ``code`` at ``addr``."""

    def __init__(self, code: ErrorCode, addr: int) -> None:
        super().__init__(code, addr)
        self.code = code
        self.addr = addr


@dataclass
class _Queue:
    ring_base: int = 0
    ring_size: int = 0
    head: int = 0
    tail: int = 0
    consumed: int = 0      #: commands consumed since the last reset (ERR_CMD)
    stopped: bool = False  #: an error stopped this queue
    window_base: int = 0   #: DRAM window [window_base, window_limit); limit 0 = dram_bytes
    window_limit: int = 0
    err_code: int = 0      #: Q_ERR_CODE (code | opcode << 16), Q_ERR_CMD, Q_ERR_ADDR
    err_cmd: int = 0
    err_addr: int = 0

    def window(self, dram_bytes: int) -> tuple[int, int]:
        return self.window_base, self.window_limit or (1 << 32)


class ModelBackend:
    """Instant functional simulator of one NPU, seen through the :class:`sw.backend.Backend`
    interface.

    Parameters
    ----------
    config : NPUConfig
        The configuration to model; reported in the ``CFG_*`` CSRs.

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
        self.dram = bytearray(config.dram_bytes)
        self.spad = np.zeros((config.spad_rows, config.spad_row_bytes), dtype=np.int8)
        self.acc = np.zeros((config.acc_rows, config.acc_row_elems), dtype=np.int32)
        self.sems = [0] * config.n_sems
        self.queues = [_Queue() for _ in range(config.n_queues)]
        self.err_code = 0
        self.err_cmd = 0
        self.err_addr = 0
        self.irq_status = 0
        self.irq_enable = 0
        self.commands_executed = 0
        self.sem_last = [0] * config.n_sems
        self.traces: list[list[tuple[int, int, int, int]]] = [[] for _ in ENGINE_NAMES]
        self.trace_overflow = [False] * len(ENGINE_NAMES)
        self.clock = 0  #: logical time of the trace: +1 per retired engine command
        self._cur = (0, 0)  #: (queue, command index) being executed
        #: live untimed performance counters and the last CNT_SNAPSHOT of them
        self.counters = {c: 0 for c in COUNTER_NAMES if c not in TIMING_COUNTERS}
        self.counter_snapshot = dict.fromkeys(self.counters, 0)

    # -- Backend interface ----------------------------------------------------------------------

    def csr_read(self, offset: int) -> int:
        """Read the 32-bit CSR at byte ``offset``; unmapped offsets read 0.

        Raises
        ------
        BackendError
            If ``offset`` is not 4-byte aligned or negative.
        """
        self._check_csr_offset(offset)
        c = self.config
        fixed = {
            Csr.ID: CSR_ID_VALUE,
            Csr.VERSION: CSR_VERSION_VALUE,
            Csr.CFG_ARRAY: c.rows | c.cols << 8 | c.n_queues << 16 | (c.n_sems & 0xFF) << 24,
            Csr.CFG_SPAD: c.spad_rows,
            Csr.CFG_ACC: c.acc_rows,
            Csr.CFG_BUS: (c.axi_data_bytes | c.dma_outstanding << 8 | c.spad_row_bytes << 16
                          | c.acc_row_elems << 24),
            Csr.CFG_DRAM: c.dram_bytes & _MASK32,
            Csr.STATUS: int(self._busy()) | int(any(q.err_code for q in self.queues)) << 1,
            Csr.ERR_CODE: self.err_code,
            Csr.ERR_CMD: self.err_cmd,
            Csr.ERR_ADDR: self.err_addr,
            Csr.IRQ_STATUS: self.irq_status,
            Csr.IRQ_ENABLE: self.irq_enable,
            Csr.CYCLES_LO: 0,  # untimed model
            Csr.CYCLES_HI: 0,
            Csr.CONTROL: 0,
            Csr.QUEUE_ERRORS: sum(1 << q for q, x in enumerate(self.queues) if x.err_code),
            Csr.QUEUE_BUSY: sum(1 << q for q, x in enumerate(self.queues) if x.head != x.tail),
        }
        if offset in fixed:
            return fixed[offset]
        if Csr.CNT_BASE <= offset < Csr.CNT_END:
            return self._counter_csrs.get(offset, 0)
        q, reg = self._queue_reg(offset)
        if q is not None:
            queue = self.queues[q]
            return {Csr.WINDOW_BASE: queue.window_base, Csr.WINDOW_LIMIT: queue.window_limit,
                    Csr.Q_STATUS: int(queue.head != queue.tail) | int(queue.err_code != 0) << 1,
                    Csr.Q_ERR_CODE: queue.err_code, Csr.Q_ERR_CMD: queue.err_cmd,
                    Csr.Q_ERR_ADDR: queue.err_addr, Csr.Q_FETCHED: queue.consumed,
                    Csr.RING_BASE: queue.ring_base, Csr.RING_SIZE: queue.ring_size,
                    Csr.HEAD: queue.head, Csr.TAIL: queue.tail}.get(reg, 0)
        if Csr.SEM_BASE <= offset < Csr.SEM_BASE + 4 * self.config.n_sems:
            return self.sems[(offset - Csr.SEM_BASE) // 4]
        if Csr.SEM_LAST_BASE <= offset < Csr.SEM_LAST_BASE + 4 * self.config.n_sems:
            return self.sem_last[(offset - Csr.SEM_LAST_BASE) // 4]
        rel = offset - Csr.TRACE_BASE
        if 0 <= rel < len(ENGINE_NAMES) * Csr.TRACE_STRIDE:
            e, reg = divmod(rel, Csr.TRACE_STRIDE)
            entries = self.traces[e]
            q, index, start, end = entries[0] if entries else (0, 0, 0, 0)
            return {Csr.TRACE_INFO: (index & 0xFF_FFFF) | (q & 0x3F) << 24
                    | int(self.trace_overflow[e]) << 30 | int(bool(entries)) << 31,
                    Csr.TRACE_START: start & _MASK32, Csr.TRACE_END: end & _MASK32}.get(reg, 0)
        return 0

    def csr_write(self, offset: int, value: int) -> None:
        """Write the 32-bit CSR at byte ``offset``. A ``TAIL`` write runs the queue.

        Raises
        ------
        BackendError
            If ``offset`` is not 4-byte aligned or ``value`` is not a 32-bit value.
        """
        self._check_csr_offset(offset)
        if not 0 <= value <= _MASK32:
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
        else:
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
            elif reg == Csr.RING_SIZE:
                queue.ring_size = value
            elif reg == Csr.TAIL:
                queue.tail = value
                self._pump()

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

    @property
    def irq(self) -> bool:
        """The interrupt line: ``IRQ_STATUS & IRQ_ENABLE != 0``."""
        return (self.irq_status & self.irq_enable) != 0

    # -- helpers ----------------------------------------------------------------------------------

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

    @property
    def _counter_csrs(self) -> dict[int, int]:
        """Offset -> value of the counter registers (the last snapshot; timing ones 0)."""
        return {counter_csr(k): v & _MASK32 for k, v in self.counter_snapshot.items()}

    def _busy(self) -> bool:
        return any(q.head != q.tail for q in self.queues)

    def _clear(self) -> None:
        for q in range(self.config.n_queues):
            self._reset_queue(q)
        self.err_code = self.err_cmd = self.err_addr = 0
        self.sems = [0] * self.config.n_sems
        self.sem_last = [0] * self.config.n_sems
        self.traces = [[] for _ in ENGINE_NAMES]
        self.trace_overflow = [False] * len(ENGINE_NAMES)

    def _reset_queue(self, q: int) -> None:
        """``QUEUE_RESET`` bit ``q``: drop the queue's pending commands, clear its error (and
        the global first-error registers if they name it); semaphores are not touched."""
        queue = self.queues[q]
        queue.head = queue.tail
        queue.consumed = 0
        queue.stopped = False
        queue.err_code = queue.err_cmd = queue.err_addr = 0
        if self.err_code and (self.err_code >> 8) & 0xFF == q:
            self.err_code = self.err_cmd = self.err_addr = 0

    def _raise_error(self, q: int, opcode: int, code: ErrorCode, addr: int) -> None:
        queue = self.queues[q]
        queue.stopped = True
        if queue.err_code == 0:
            queue.err_code = code.value | (opcode & 0xFF) << 16
            queue.err_cmd = queue.consumed & _MASK32
            queue.err_addr = addr & _MASK32
        if self.err_code == 0:  # the first error stays latched until CONTROL clears it
            self.err_code = code.value | q << 8 | (opcode & 0xFF) << 16
            self.err_cmd = queue.consumed & _MASK32
            self.err_addr = addr & _MASK32
        self.irq_status |= IrqBit.ERROR

    # -- execution --------------------------------------------------------------------------------

    def _pump(self) -> None:
        """Run every queue until all are empty, blocked or stopped."""
        progress = True
        while progress:
            progress = False
            for q in range(len(self.queues)):
                if self._run_queue(q):
                    progress = True

    def _run_queue(self, q: int) -> bool:
        """Execute queue ``q`` from HEAD towards TAIL; returns whether a command retired."""
        queue = self.queues[q]
        retired = False
        while not queue.stopped and queue.head != queue.tail:
            size = queue.ring_size
            if size < 2 or size & (size - 1) or queue.tail >= size:
                self._raise_error(q, 0, ErrorCode.BAD_SIZE,
                                  size if size < 2 or size & (size - 1) else queue.tail)
                break
            if queue.ring_base % COMMAND_BYTES:
                self._raise_error(q, 0, ErrorCode.MISALIGNED, queue.ring_base)
                break
            slot_addr = queue.ring_base + queue.head * COMMAND_BYTES
            if slot_addr + COMMAND_BYTES > self.config.dram_bytes:
                self._raise_error(q, 0, ErrorCode.BAD_DRAM_ADDR, slot_addr)
                break
            win_base, win_limit = queue.window(self.config.dram_bytes)
            if slot_addr < win_base or slot_addr + COMMAND_BYTES > win_limit:
                self._raise_error(q, 0, ErrorCode.WINDOW, slot_addr)
                break
            raw = bytes(self.dram[slot_addr:slot_addr + COMMAND_BYTES])
            cmd = decode(raw)
            opcode = (int.from_bytes(raw, "little") >> _OPCODE_FIELD.offset) & 0xFF
            self._cur = (q, queue.consumed)
            try:
                done = self._execute(cmd, opcode, slot_addr)
            except _CommandError as e:
                self.counters["bytes_read"] += COMMAND_BYTES     # it was fetched
                self._raise_error(q, opcode, e.code, e.addr)
                break
            if not done:  # blocked on a semaphore
                break
            self.counters["bytes_read"] += COMMAND_BYTES
            engine = OPCODE_ENGINE.get(Opcode(opcode), "processor")
            if engine != "processor":  # the engine trace, in logical time
                e = ENGINE_NAMES.index(engine)
                if len(self.traces[e]) < self.config.trace_depth:
                    self.traces[e].append((q, queue.consumed, self.clock, self.clock + 1))
                else:
                    self.trace_overflow[e] = True
                self.clock += 1
            queue.head = (queue.head + 1) % size
            queue.consumed += 1
            self.commands_executed += 1
            retired = True
        return retired

    def _execute(self, cmd: data.Const, opcode: int, slot_addr: int) -> bool:
        """Execute one command; returns False if it must wait. Raises _CommandError."""
        if opcode not in _OPCODE_VALUES:
            raise _CommandError(ErrorCode.BAD_OPCODE, slot_addr)
        op = Opcode(opcode)
        header = cmd.header
        flags = header.flags
        do_wait = bool(flags.wait) or op == Opcode.WAIT
        do_signal = bool(flags.signal) or op == Opcode.SIGNAL
        n_sems = self.config.n_sems
        if do_wait and header.wait_sem >= n_sems:
            raise _CommandError(ErrorCode.BAD_SEM, header.wait_sem)
        if do_signal and header.signal_sem >= n_sems:
            raise _CommandError(ErrorCode.BAD_SEM, header.signal_sem)
        if do_wait and self.sems[header.wait_sem] < header.wait_value:
            return False
        engine = OPCODE_ENGINE[op]
        if engine != "processor":   # the engine takes it and retires it, error or not
            self.counters[f"retired.{engine}"] += 1

        if op in (Opcode.DMA_LOAD, Opcode.DMA_STORE):
            mem_bits = (cmd.body.raw >> _MEM_FIELD.offset) & 0b11
            mem = LocalMem.ACC if mem_bits == LocalMem.ACC.value else LocalMem.SPAD
            self._dma(cmd.body.dma, mem, load=op == Opcode.DMA_LOAD)
        elif op == Opcode.MATMUL:
            self._matmul(cmd.body.matmul, accumulate=bool(flags.accumulate),
                         transpose=bool(flags.transpose))
        elif op == Opcode.REQUANT:
            self._requant(cmd.body.requant, relu=bool(flags.relu),
                          row_scale=bool(flags.row_scale))
        elif op == Opcode.SOFTMAX:
            self._softmax(cmd.body.softmax)
        elif op == Opcode.FENCE:
            self._fence(cmd.body.fence, irq=bool(flags.irq))
        # NOP, WAIT, SIGNAL, BARRIER (all earlier commands retired: execution is in order):
        # nothing beyond the header's wait/signal.

        if do_signal:
            s = header.signal_sem
            self.sems[s] = (self.sems[s] + 1) & _MASK32
            q, index = self._cur
            self.sem_last[s] = 1 << 31 | (q & 0x7F) << 24 | (index & 0xFF_FFFF)
        return True

    def _dma(self, body: data.Const, mem: LocalMem, load: bool) -> None:
        c = self.config
        n_rows, row_bytes = body.n_rows, body.row_bytes
        if n_rows == 0 or row_bytes == 0:
            return
        if mem == LocalMem.SPAD:
            local_row_bytes, depth = c.spad_row_bytes, c.spad_rows
        else:
            local_row_bytes, depth = c.acc_row_bytes, c.acc_rows
        addr, stride = body.dram_addr, body.dram_stride
        if row_bytes % local_row_bytes:
            raise _CommandError(ErrorCode.BAD_SIZE, addr)
        align = min(local_row_bytes, c.axi_data_bytes)
        if addr % align:
            raise _CommandError(ErrorCode.MISALIGNED, addr)
        if stride % align:  # the first misaligned row address is that of row 1
            raise _CommandError(ErrorCode.MISALIGNED, addr + stride)
        for r in range(n_rows):  # rows are in increasing address order: first bad one
            row_addr = addr + r * stride
            if row_addr + row_bytes > c.dram_bytes:
                raise _CommandError(ErrorCode.BAD_DRAM_ADDR, row_addr)
            if stride == 0:
                break
        win_base, win_limit = self.queues[self._cur[0]].window(c.dram_bytes)
        for r in range(n_rows):  # then the issuing queue's window (WINDOW, first bad row)
            row_addr = addr + r * stride
            if row_addr < win_base or row_addr + row_bytes > win_limit:
                raise _CommandError(ErrorCode.WINDOW, row_addr)
            if stride == 0:
                break
        lrows = row_bytes // local_row_bytes
        local_row, local_stride = body.local_row, body.local_stride
        for r in range(n_rows):
            first = local_row + r * local_stride
            if first + lrows > depth:
                raise _CommandError(ErrorCode.BAD_LOCAL_ADDR, max(first, depth))
            if local_stride == 0:
                break

        beat = c.axi_data_bytes
        if load:   # whole beats from the row start aligned down to its end aligned up
            for r in range(n_rows):
                row_addr = addr + r * stride
                beats = -(-(row_addr + row_bytes) // beat) - row_addr // beat
                self.counters["bytes_read"] += beat * beats
        else:
            self.counters["bytes_written"] += n_rows * row_bytes
        dram = np.frombuffer(self.dram, dtype=np.uint8)
        for r in range(n_rows):
            row_addr = addr + r * stride
            first = local_row + r * local_stride
            if mem == LocalMem.SPAD:
                local = self.spad[first:first + lrows].reshape(-1)
                if load:
                    local[:] = dram[row_addr:row_addr + row_bytes].view(np.int8)
                else:
                    dram[row_addr:row_addr + row_bytes] = local.view(np.uint8)
            else:
                local = self.acc[first:first + lrows].reshape(-1)
                if load:
                    local[:] = dram[row_addr:row_addr + row_bytes].view("<i4")
                else:
                    dram[row_addr:row_addr + row_bytes] = local.astype("<i4").view(np.uint8)

    def _matmul(self, body: data.Const, accumulate: bool, transpose: bool = False) -> None:
        c = self.config
        m = body.m
        if m == 0:
            return
        if transpose and c.rows != c.cols:
            raise _CommandError(ErrorCode.BAD_SIZE, 0)
        for row, n, depth in ((body.a_row, m, c.spad_rows), (body.w_row, c.rows, c.spad_rows)):
            if row + n > depth:
                raise _CommandError(ErrorCode.BAD_LOCAL_ADDR, max(row, depth))
        if body.acc_row + m > c.acc_rows:
            raise _CommandError(ErrorCode.BAD_LOCAL_ADDR, max(body.acc_row, c.acc_rows))
        a = self.spad[body.a_row:body.a_row + m, :c.rows].astype(np.int64)
        if transpose:  # array column n <- spad row w_row + n (rows == cols)
            w = self.spad[body.w_row:body.w_row + c.cols, :c.rows].astype(np.int64).T
        else:
            w = self.spad[body.w_row:body.w_row + c.rows, :c.cols].astype(np.int64)
        out = a @ w
        dst = self.acc[body.acc_row:body.acc_row + m]
        if accumulate:
            out = out + dst[:, :c.cols]
        dst[:, :c.cols] = out.astype(np.int32)  # wraps modulo 2**32
        dst[:, c.cols:] = 0

    def _requant(self, body: data.Const, relu: bool, row_scale: bool = False) -> None:
        c = self.config
        n = body.n_rows
        if n == 0:
            return
        if body.acc_row + n > c.acc_rows:
            raise _CommandError(ErrorCode.BAD_LOCAL_ADDR, max(body.acc_row, c.acc_rows))
        if body.spad_row + n > c.spad_rows:
            raise _CommandError(ErrorCode.BAD_LOCAL_ADDR, max(body.spad_row, c.spad_rows))
        if body.param_row + 3 > c.acc_rows:
            raise _CommandError(ErrorCode.BAD_LOCAL_ADDR, max(body.param_row, c.acc_rows))
        n_scale = (n - 1) // c.cols + 1
        if row_scale and body.scale_row + n_scale > c.acc_rows:
            raise _CommandError(ErrorCode.BAD_LOCAL_ADDR, max(body.scale_row, c.acc_rows))
        p = self.acc[body.param_row:body.param_row + 3, :c.cols].astype(np.int64)
        bias = p[0]
        mult = p[1] & 0x7FFF_FFFF
        shift = p[2] & 0x3F
        acc = self.acc[body.acc_row:body.acc_row + n, :c.cols]
        if row_scale:
            recip = self.acc[body.scale_row:body.scale_row + n_scale, :c.cols].astype(np.int64)
            recip = recip.reshape(-1)[:n] & 0x7FFF_FFFF
            out = requantize_rows(acc, recip, bias, mult, shift, relu=relu)
        else:
            out = requantize(acc, bias, mult, shift, relu=relu)
        dst = self.spad[body.spad_row:body.spad_row + n]
        dst[:, :c.cols] = out
        dst[:, c.cols:] = 0

    def _softmax(self, body: data.Const) -> None:
        c = self.config
        n, nb, stride = body.n_rows, body.n_blocks, body.stride
        if n == 0 or nb == 0:
            return
        span = (nb - 1) * stride + n
        for start, depth in ((body.acc_row, c.acc_rows), (body.spad_row, c.spad_rows)):
            if start + span > depth:
                raise _CommandError(ErrorCode.BAD_LOCAL_ADDR, max(start, depth))
        n_scale = (n - 1) // c.cols + 1
        if body.scale_row + n_scale > c.acc_rows:
            raise _CommandError(ErrorCode.BAD_LOCAL_ADDR, max(body.scale_row, c.acc_rows))
        blocks = [body.acc_row + b * stride for b in range(nb)]
        scores = np.concatenate([self.acc[r:r + n, :c.cols] for r in blocks], axis=1)
        p, _, recip = softmax_int(scores, mult=body.mult, shift=body.shift, kv_len=body.kv_len,
                                  causal=bool(body.causal), q_offset=body.q_offset)
        for b in range(nb):
            dst = self.spad[body.spad_row + b * stride:body.spad_row + b * stride + n]
            dst[:, :c.cols] = p[:, b * c.cols:(b + 1) * c.cols]
            dst[:, c.cols:] = 0
        rec = np.zeros(n_scale * c.cols, np.int64)
        rec[:n] = recip
        dst = self.acc[body.scale_row:body.scale_row + n_scale]
        dst[:, :c.cols] = rec.reshape(n_scale, c.cols).astype(np.int32)
        dst[:, c.cols:] = 0

    def _fence(self, body: data.Const, irq: bool) -> None:
        addr = body.addr
        if addr % 4:
            raise _CommandError(ErrorCode.MISALIGNED, addr)
        if addr + 4 > self.config.dram_bytes:
            raise _CommandError(ErrorCode.BAD_DRAM_ADDR, addr)
        win_base, win_limit = self.queues[self._cur[0]].window(self.config.dram_bytes)
        if addr < win_base or addr + 4 > win_limit:
            raise _CommandError(ErrorCode.WINDOW, addr)
        value = 0 if body.timestamp else body.value  # timestamp: CYCLES, 0 on the untimed model
        self.dram[addr:addr + 4] = (value & _MASK32).to_bytes(4, "little")
        self.counters["bytes_written"] += 4
        if irq:
            self.irq_status |= IrqBit.FENCE
