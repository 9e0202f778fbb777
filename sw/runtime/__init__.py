"""Device runtime: memory, command lists, launch and synchronize, typed errors.

In the idiom of CUDA and PyOpenCL, but Pythonic::

    dev = Device(ModelBackend(NPUConfig()))
    buf = dev.upload(np.arange(64, dtype=np.int8))
    cmds = CommandList()
    cmds.dma_load(mem=LocalMem.SPAD, dram_addr=buf.addr, dram_stride=8, row_bytes=8,
                  n_rows=8, local_row=0, local_stride=1)
    dev.launch(cmds)
    cycles = dev.synchronize()

The runtime only talks to a :class:`sw.backend.Backend` (CSR read/write, DRAM read/write,
wait for the interrupt); it never touches simulator handles, so the same code drives the
functional model and the RTL.

Streams and events, as in CUDA::

    s0, s1 = dev.default_stream, dev.create_stream()
    s0.launch(kernel_a)
    done_a = s0.record()          # an Event: completes when s0's work so far retired
    s1.wait_event(done_a)         # s1's later work starts after that
    s1.launch(kernel_b)
    s1.synchronize(timeout=10**6) # DeviceTimeoutError with a deadlock report on timeout
    cycles = done_a.elapsed_cycles(s1.record())

Conventions
-----------
* One :class:`Stream` per hardware queue; its ring lives in device DRAM (in its private window
  if it has one). The device's default stream (queue 0 by default) serves
  :meth:`Device.launch` / :meth:`Device.synchronize`.
* Streams are ordered against each other only through events (semaphores); within a stream,
  each launch starts after the previous launches retired (a ``BARRIER``).
* Every command written to a ring is recorded, so a device error can name the failing command
  by the index the device reports in ``Q_ERR_CMD`` (commands since the queue's last reset).
* After a device error the runtime resets the failing queue alone (``QUEUE_RESET``: its error
  cleared, its pending commands dropped) before raising :class:`DeviceError`; the other
  queues and the semaphores are untouched, so the device keeps working.
* Semaphore 0 is left to code that orders its commands by hand; events and kernels take
  semaphores from the device's pool (:meth:`Device.alloc_semaphore`).
"""

from __future__ import annotations

import contextlib
import math
from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, fields

import numpy as np
import numpy.typing as npt
from amaranth.lib import data

from hw.config import NPUConfig
from hw.isa import (
    COMMAND_BYTES,
    COUNTER_BITS,
    COUNTER_NAMES,
    CSR_ID_VALUE,
    CSR_VERSION_VALUE,
    ENGINE_NAMES,
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
    encode,
    queue_csr,
    sem_csr,
    sem_last_csr,
    trace_csr,
)
from sw.backend import Backend

__all__ = [
    "NPUError", "DeviceError", "OutOfMemoryError", "ConfigMismatchError", "DeviceTimeoutError",
    "AllocatorStats", "Allocator", "Buffer", "Command", "CommandList", "Device",
    "describe_command", "DEFAULT_TIMEOUT_CYCLES", "Stream", "Event", "Semaphore",
    "OutOfSemaphoresError", "TraceRecord", "Counters", "UntimedCounterError", "BlockedCommand",
]

_MASK32 = 0xFFFF_FFFF
_OPCODE_FIELD = data.Layout.cast(Header)["opcode"]
_MEM_FIELD = data.Layout.cast(DmaBody)["mem"]
DEFAULT_TIMEOUT_CYCLES = 50_000_000  #: default budget of :meth:`Device.synchronize` (cycles)
RING_POLL_CYCLES = 256  #: first interval at which a host waiting for ring space reads HEAD
RING_POLL_MAX_CYCLES = 65536  #: the interval doubles after each poll that found too little space


# -- errors ---------------------------------------------------------------------------------------

class NPUError(Exception):
    """Base class of every error the runtime raises."""


class DeviceError(NPUError):
    """The device reported an error (``STATUS.error``) while executing a command.

    Parameters
    ----------
    code : ErrorCode
        What went wrong (``ERR_CODE[7:0]``).
    queue : int
        The queue that failed (``ERR_CODE[15:8]``).
    command_index : int
        Index of the failing command since the queue's last reset (``ERR_CMD``).
    opcode : int
        Opcode of the failing command (``ERR_CODE[23:16]``).
    address : int
        The offending address (``ERR_ADDR``): DRAM byte address, local row, size or
        semaphore id, see :mod:`sw.model`.
    command_description : str
        Human-readable decoding of the failing command, from the runtime's record.
    """

    def __init__(self, code: ErrorCode | int, queue: int, command_index: int, opcode: int,
                 address: int, command_description: str) -> None:
        self.code = code
        self.queue = queue
        self.command_index = command_index
        self.opcode = opcode
        self.address = address
        self.command_description = command_description
        name = code.name if isinstance(code, ErrorCode) else f"error code {code}"
        super().__init__(
            f"queue {queue}: command #{command_index} ({command_description}) failed: "
            f"{name} at {address:#x}")


class OutOfMemoryError(NPUError):
    """Device DRAM has no free block large enough for an allocation."""


class UntimedCounterError(NPUError, KeyError):
    """A timing counter (cycles, busy, stall, DMA busy, overlap) was asked of a snapshot
    taken on an untimed backend (the functional model), which has none."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class ConfigMismatchError(NPUError):
    """The device is not an NPU, or its configuration differs from the one expected."""


class DeviceTimeoutError(NPUError):
    """The device did not finish within the cycle budget (e.g. blocked on a semaphore).

    Attributes
    ----------
    blocked : list of BlockedCommand
        The deadlock report: per stream, the first command whose semaphore wait is not
        satisfied, the semaphore's value and what last signalled it.
    """

    def __init__(self, message: str, blocked: Iterable[BlockedCommand] = ()) -> None:
        super().__init__(message)
        self.blocked = list(blocked)


# -- allocator ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class AllocatorStats:
    """Snapshot of an :class:`Allocator` (all sizes in bytes)."""
    total_bytes: int
    used_bytes: int         #: bytes in live allocations (including alignment padding kept)
    free_bytes: int
    largest_free_block: int
    n_allocations: int
    n_free_blocks: int


class Allocator:
    """First-fit allocator over an address range with aligned allocation and coalescing free.

    The free list is a sorted list of disjoint ``(start, size)`` blocks; adjacent free blocks
    are always merged, so ``n_free_blocks`` counts maximal holes. Alignment padding in front of
    an allocation stays in the free list.

    Parameters
    ----------
    base : int
        First byte address managed.
    size : int
        Number of bytes managed.
    """

    def __init__(self, base: int, size: int) -> None:
        if base < 0 or size <= 0:
            raise ValueError(f"bad allocator range base={base}, size={size}")
        self.base = base
        self.size = size
        self._starts: list[int] = [base]      # sorted starts of free blocks
        self._sizes: dict[int, int] = {base: size}
        self._live: dict[int, int] = {}       # addr -> size of live allocations

    def alloc(self, nbytes: int, align: int = 64) -> int:
        """Allocate ``nbytes`` bytes at an address that is a multiple of ``align``.

        Parameters
        ----------
        nbytes : int
            Size in bytes, >= 1.
        align : int
            Alignment in bytes, a power of two.

        Returns
        -------
        int
            The byte address.

        Raises
        ------
        ValueError
            If ``nbytes < 1`` or ``align`` is not a power of two.
        OutOfMemoryError
            If no free block can hold the aligned allocation.
        """
        if not isinstance(nbytes, (int, np.integer)) or nbytes < 1:
            raise ValueError(f"allocation size must be a positive integer, got {nbytes!r}")
        if align < 1 or align & (align - 1):
            raise ValueError(f"alignment must be a power of two, got {align!r}")
        nbytes = int(nbytes)
        for start in self._starts:
            size = self._sizes[start]
            addr = (start + align - 1) & ~(align - 1)
            if addr + nbytes > start + size:
                continue
            self._take(start, addr, nbytes)
            self._live[addr] = nbytes
            return addr
        s = self.stats()
        raise OutOfMemoryError(
            f"cannot allocate {nbytes} bytes aligned to {align}: {s.free_bytes} bytes free, "
            f"largest free block {s.largest_free_block} bytes, {s.n_allocations} live "
            f"allocations")

    def free(self, addr: int) -> None:
        """Return the allocation at ``addr`` and merge it with adjacent free blocks.

        Raises
        ------
        ValueError
            If ``addr`` is not a live allocation (double free, foreign address).
        """
        size = self._live.pop(addr, None)
        if size is None:
            raise ValueError(f"{addr:#x} is not a live allocation (double free?)")
        start, end = addr, addr + size
        i = bisect_left(self._starts, start)
        if i < len(self._starts) and self._starts[i] == end:  # merge with the next block
            end += self._sizes.pop(end)
            del self._starts[i]
        if i > 0:
            prev = self._starts[i - 1]
            if prev + self._sizes[prev] == start:  # merge with the previous block
                self._sizes[prev] = end - prev
                return
        self._starts.insert(i, start)
        self._sizes[start] = end - start

    def _take(self, start: int, addr: int, nbytes: int) -> None:
        size = self._sizes.pop(start)
        self._starts.remove(start)
        if addr > start:
            insort(self._starts, start)
            self._sizes[start] = addr - start
        end = addr + nbytes
        if end < start + size:
            insort(self._starts, end)
            self._sizes[end] = start + size - end

    def size_of(self, addr: int) -> int:
        """Size in bytes of the live allocation at ``addr`` (``KeyError`` if none)."""
        return self._live[addr]

    def free_blocks(self) -> list[tuple[int, int]]:
        """Sorted ``(start, size)`` of the free blocks."""
        return [(s, self._sizes[s]) for s in self._starts]

    def stats(self) -> AllocatorStats:
        free = sum(self._sizes.values())
        return AllocatorStats(
            total_bytes=self.size, used_bytes=sum(self._live.values()), free_bytes=free,
            largest_free_block=max(self._sizes.values(), default=0),
            n_allocations=len(self._live), n_free_blocks=len(self._starts))


# -- buffers --------------------------------------------------------------------------------------

class Buffer:
    """A block of device DRAM owned by a :class:`Device`.

    Attributes
    ----------
    addr : int
        Byte address in device DRAM.
    nbytes : int
        Size in bytes.
    """

    def __init__(self, device: Device, addr: int, nbytes: int) -> None:
        self.device = device
        self.addr = addr
        self.nbytes = nbytes
        self._freed = False

    @property
    def freed(self) -> bool:
        return self._freed

    def free(self) -> None:
        """Return the memory to the device allocator.

        Raises
        ------
        NPUError
            If the buffer was already freed.
        """
        if self._freed:
            raise NPUError(f"buffer at {self.addr:#x} ({self.nbytes} bytes) freed twice")
        self.device.allocator.free(self.addr)
        self._freed = True

    def write(self, data: bytes | npt.NDArray, offset: int = 0) -> None:
        """Copy ``data`` (bytes or a numpy array's raw bytes) into the buffer at ``offset``.

        Raises
        ------
        ValueError
            If the data does not fit in the buffer.
        """
        raw = data.tobytes() if isinstance(data, np.ndarray) else bytes(data)
        self._check(offset, len(raw))
        self.device.backend.mem_write(self.addr + offset, raw)

    def read(self, nbytes: int | None = None, offset: int = 0) -> bytes:
        """Read ``nbytes`` bytes (default: to the end) from the buffer at ``offset``."""
        n = self.nbytes - offset if nbytes is None else nbytes
        self._check(offset, n)
        return self.device.backend.mem_read(self.addr + offset, n)

    def _check(self, offset: int, n: int) -> None:
        if self._freed:
            raise NPUError(f"buffer at {self.addr:#x} was freed")
        if offset < 0 or n < 0 or offset + n > self.nbytes:
            raise ValueError(f"[{offset}, {offset + n}) is outside the buffer of "
                             f"{self.nbytes} bytes")

    def __repr__(self) -> str:
        state = " freed" if self._freed else ""
        return f"<Buffer {self.addr:#x} {self.nbytes} bytes{state}>"


# -- commands -------------------------------------------------------------------------------------

def _field(name: str, value: int, bits: int) -> int:
    v = int(value)
    if not 0 <= v < (1 << bits):
        raise ValueError(f"{name}={value!r} does not fit in {bits} unsigned bits")
    return v


def describe_command(raw: bytes) -> str:
    """One-line human-readable decoding of an encoded command, e.g.
    ``"MATMUL a_row=0 w_row=8 acc_row=0 m=4 [wait sem0>=3, signal sem0, accumulate]"``."""
    cmd = decode(raw)
    opcode = (int.from_bytes(raw, "little") >> _OPCODE_FIELD.offset) & 0xFF
    if opcode not in {op.value for op in Opcode}:
        return f"opcode {opcode:#04x} (unknown), raw {raw.hex()}"
    op = Opcode(opcode)
    h = cmd.header
    parts = [op.name]
    if op in (Opcode.DMA_LOAD, Opcode.DMA_STORE):
        b = cmd.body.dma
        mem_bits = (cmd.body.raw >> _MEM_FIELD.offset) & 3
        mem = LocalMem(mem_bits).name if mem_bits in (0, 1) else f"?{mem_bits}"
        parts.append(f"dram_addr={b.dram_addr:#x} dram_stride={b.dram_stride} "
                     f"row_bytes={b.row_bytes} n_rows={b.n_rows} local_row={b.local_row} "
                     f"local_stride={b.local_stride} mem={mem}")
    elif op == Opcode.MATMUL:
        b = cmd.body.matmul
        parts.append(f"a_row={b.a_row} w_row={b.w_row} acc_row={b.acc_row} m={b.m}")
    elif op == Opcode.REQUANT:
        b = cmd.body.requant
        parts.append(f"acc_row={b.acc_row} spad_row={b.spad_row} n_rows={b.n_rows} "
                     f"param_row={b.param_row}")
    elif op == Opcode.FENCE:
        b = cmd.body.fence
        parts.append(f"addr={b.addr:#x} " + ("timestamp" if b.timestamp else f"value={b.value}"))
    notes = []
    if h.flags.wait or op == Opcode.WAIT:
        notes.append(f"wait sem{h.wait_sem}>={h.wait_value}")
    if h.flags.signal or op == Opcode.SIGNAL:
        notes.append(f"signal sem{h.signal_sem}")
    for flag in ("irq", "accumulate", "relu", "transpose", "row_scale"):
        if getattr(h.flags, flag):
            notes.append(flag)
    if notes:
        parts.append("[" + ", ".join(notes) + "]")
    return " ".join(parts)


@dataclass(frozen=True)
class Command:
    """One encoded command: the :data:`hw.isa.COMMAND_BYTES` bytes and their description."""
    raw: bytes

    @property
    def description(self) -> str:
        return describe_command(self.raw)


Wait = tuple[int, int] | None  #: ``(semaphore, value)``: start once ``sem >= value``


class CommandList:
    """Builder of a command stream, encoded with :func:`hw.isa.encode`.

    Every method takes the header's synchronization arguments:

    wait : tuple of (int, int), optional
        ``(sem, value)``: the command starts once ``sem[sem] >= value``.
    signal : int, optional
        Semaphore incremented by one when the command retires.

    Field values are checked against their widths (``ValueError`` names the field); a
    semaphore id is not checked against ``n_sems`` here (the device reports ``BAD_SEM``).
    """

    def __init__(self) -> None:
        self._commands: list[Command] = []

    def __len__(self) -> int:
        return len(self._commands)

    def __iter__(self) -> Iterator[Command]:
        return iter(self._commands)

    def __getitem__(self, i: int) -> Command:
        return self._commands[i]

    def extend(self, other: Iterable[Command]) -> None:
        """Append the commands of another list."""
        self._commands.extend(other)

    def append_raw(self, raw: bytes) -> None:
        """Append an already encoded command (for tests of malformed commands)."""
        if len(raw) != COMMAND_BYTES:
            raise ValueError(f"a command is {COMMAND_BYTES} bytes, got {len(raw)}")
        self._commands.append(Command(bytes(raw)))

    def _add(self, opcode: Opcode, body: dict | None, wait: Wait, signal: int | None,
             **flags: int) -> None:
        header: dict = {"opcode": opcode, "flags": dict(flags)}
        if wait is not None:
            sem, value = wait
            header["flags"]["wait"] = 1
            header["wait_sem"] = _field("wait sem", sem, 8)
            header["wait_value"] = _field("wait value", value, 32)
        if signal is not None:
            header["flags"]["signal"] = 1
            header["signal_sem"] = _field("signal sem", signal, 8)
        fields_ = {"header": header}
        if body is not None:
            fields_["body"] = body
        self._commands.append(Command(encode(fields_)))

    def _dma(self, opcode: Opcode, mem: LocalMem, dram_addr: int, dram_stride: int,
             row_bytes: int, n_rows: int, local_row: int, local_stride: int, wait: Wait,
             signal: int | None) -> None:
        body = {"dma": {
            "dram_addr": _field("dram_addr", dram_addr, 32),
            "dram_stride": _field("dram_stride", dram_stride, 32),
            "row_bytes": _field("row_bytes", row_bytes, 16),
            "n_rows": _field("n_rows", n_rows, 16),
            "local_row": _field("local_row", local_row, 16),
            "local_stride": _field("local_stride", local_stride, 16),
            "mem": LocalMem(mem),
        }}
        self._add(opcode, body, wait, signal)

    def dma_load(self, *, mem: LocalMem, dram_addr: int, dram_stride: int, row_bytes: int,
                 n_rows: int, local_row: int, local_stride: int, wait: Wait = None,
                 signal: int | None = None) -> None:
        """DRAM -> local memory, 2-D strided (see :class:`hw.isa.DmaBody`).

        Parameters
        ----------
        mem : LocalMem
            Scratchpad (rows of ``spad_row_bytes``) or accumulator (rows of ``acc_row_bytes``).
        dram_addr, dram_stride : int
            First DRAM row's byte address and the bytes between consecutive DRAM rows.
        row_bytes : int
            Bytes per DRAM row, a multiple of the local row size.
        n_rows : int
            Number of DRAM rows.
        local_row, local_stride : int
            First local row and the local rows between consecutive DRAM rows.
        """
        self._dma(Opcode.DMA_LOAD, mem, dram_addr, dram_stride, row_bytes, n_rows, local_row,
                  local_stride, wait, signal)

    def dma_store(self, *, mem: LocalMem, dram_addr: int, dram_stride: int, row_bytes: int,
                  n_rows: int, local_row: int, local_stride: int, wait: Wait = None,
                  signal: int | None = None) -> None:
        """Local memory -> DRAM, 2-D strided; parameters as :meth:`dma_load`."""
        self._dma(Opcode.DMA_STORE, mem, dram_addr, dram_stride, row_bytes, n_rows, local_row,
                  local_stride, wait, signal)

    def matmul(self, *, a_row: int, w_row: int, acc_row: int, m: int, accumulate: bool = False,
               transpose: bool = False, wait: Wait = None, signal: int | None = None) -> None:
        """``acc[acc_row+i] (+)= A[a_row+i] @ W[w_row:w_row+rows]`` for ``i < m`` (rows);
        ``transpose``: ``W[k, n] = spad[w_row + n][k]`` (see :class:`hw.isa.MatmulBody`)."""
        body = {"matmul": {"a_row": _field("a_row", a_row, 16), "w_row": _field("w_row", w_row, 16),
                           "acc_row": _field("acc_row", acc_row, 16), "m": _field("m", m, 16)}}
        self._add(Opcode.MATMUL, body, wait, signal, accumulate=int(bool(accumulate)),
                  transpose=int(bool(transpose)))

    def requant(self, *, acc_row: int, spad_row: int, n_rows: int, param_row: int,
                relu: bool = False, scale_row: int | None = None, wait: Wait = None,
                signal: int | None = None) -> None:
        """``spad[spad_row+i] = requant(acc[acc_row+i])`` with parameters at ``param_row``;
        with ``scale_row``, each row is first scaled by its SOFTMAX reciprocal
        (``flags.row_scale``, see :class:`hw.isa.RequantBody`)."""
        body = {"requant": {"acc_row": _field("acc_row", acc_row, 16),
                            "spad_row": _field("spad_row", spad_row, 16),
                            "n_rows": _field("n_rows", n_rows, 16),
                            "param_row": _field("param_row", param_row, 16),
                            "scale_row": _field("scale_row", scale_row or 0, 16)}}
        self._add(Opcode.REQUANT, body, wait, signal, relu=int(bool(relu)),
                  row_scale=int(scale_row is not None))

    def softmax(self, *, acc_row: int, spad_row: int, n_rows: int, n_blocks: int, stride: int,
                scale_row: int, kv_len: int, mult: int, shift: int, causal: bool = False,
                q_offset: int = 0, wait: Wait = None, signal: int | None = None) -> None:
        """Integer softmax of ``n_rows`` score rows of ``n_blocks`` blocks (see
        :class:`hw.isa.SoftmaxBody`): P to ``spad_row``, reciprocals to ``scale_row``."""
        fields = {"acc_row": acc_row, "spad_row": spad_row, "n_rows": n_rows,
                  "n_blocks": n_blocks, "stride": stride, "scale_row": scale_row,
                  "kv_len": kv_len, "q_offset": q_offset, "mult": mult}
        body = {"softmax": {k: _field(k, v, 16) for k, v in fields.items()}
                | {"shift": _field("shift", shift, 6), "causal": int(bool(causal))}}
        self._add(Opcode.SOFTMAX, body, wait, signal)

    def fence(self, *, addr: int, value: int = 0, irq: bool = False, timestamp: bool = False,
              wait: Wait = None, signal: int | None = None) -> None:
        """After all earlier commands of the queue retired: ``DRAM[addr] = value`` (32-bit;
        with ``timestamp`` the low 32 bits of the cycle counter instead), then irq."""
        body = {"fence": {"addr": _field("addr", addr, 32), "value": _field("value", value, 32),
                          "timestamp": int(bool(timestamp))}}
        self._add(Opcode.FENCE, body, wait, signal, irq=int(bool(irq)))

    def barrier(self, *, wait: Wait = None, signal: int | None = None) -> None:
        """Block the queue until all its earlier commands retired (a fence without the
        write); with ``signal``, increment that semaphore then."""
        self._add(Opcode.BARRIER, None, wait, signal)

    def wait(self, sem: int, value: int, *, signal: int | None = None) -> None:
        """Block the queue until ``sem[sem] >= value``."""
        self._add(Opcode.WAIT, None, (sem, value), signal)

    def signal(self, sem: int, *, wait: Wait = None) -> None:
        """Increment ``sem[sem]`` by one."""
        self._add(Opcode.SIGNAL, None, wait, sem)

    def nop(self, *, wait: Wait = None, signal: int | None = None) -> None:
        """Do nothing (still honours wait/signal)."""
        self._add(Opcode.NOP, None, wait, signal)


# -- device ---------------------------------------------------------------------------------------

_REPORTED_FIELDS = ("rows", "cols", "n_queues", "n_sems", "spad_rows", "acc_rows",
                    "axi_data_bits", "dma_outstanding", "dram_bytes")
_ERROR_CODES = {c.value for c in ErrorCode}
_WAIT_FIELD = data.Layout.cast(Header)["wait_sem"]


@dataclass(frozen=True)
class TraceRecord:
    """One engine command from the hardware's command trace (``Csr.TRACE_*``).

    ``start``/``end`` are the low 32 bits of ``CYCLES`` when the engine took the command and
    when it retired it (logical time on the untimed model); ``index`` is the low 24 bits of
    the command's index in its queue.
    """
    engine: str
    queue: int
    index: int
    start: int
    end: int


class Counters(dict[str, int]):
    """One snapshot of the performance counters, by stable dotted name (see
    :data:`hw.isa.COUNTER_NAMES` for the exact definitions):

    ==========================  ========  ==================================================
    name                        unit      what
    ==========================  ========  ==================================================
    ``cycles``                  cycles    ``CYCLES`` at the snapshot (64-bit)
    ``busy.<engine>``           cycles    the engine holds a command (take to ``done``)
    ``retired.<engine>``        commands  commands the engine finished (with or without error)
    ``stall.<engine>.<reason>`` cycles    stalls, reasons of :data:`hw.isa.STALL_REASONS`,
                                          pairs of :data:`hw.isa.ENGINE_STALLS`
    ``dma_busy``                cycles    the load or the store DMA channel is busy
    ``overlap``                 cycles    a DMA channel and the matrix engine both busy
    ``bytes_read``              bytes     read on the DRAM port (R beats x bus bytes)
    ``bytes_written``           bytes     written on the DRAM port (strobed bytes)
    ==========================  ========  ==================================================

    ``<engine>`` is one of ``load``, ``store``, ``matrix``, ``vector``. Values are absolute
    (free-running since reset, 32-bit, ``cycles`` 64-bit); subtract two snapshots for the
    events in between: ``after - before`` gives a :class:`Counters` of differences modulo
    each counter's width (exact for intervals shorter than 2**32 cycles or bytes). All values
    of one snapshot are taken at the same clock edge (``Csr.CNT_SNAPSHOT``); the difference of
    snapshots taken at cycles ``s1 < s2`` counts the cycles ``s1 <= c < s2``.

    On an untimed backend (``timed`` False: the functional model) only ``retired.*`` and
    ``bytes_*`` are present; asking for a timing counter raises :class:`UntimedCounterError`
    (``get`` returns its default, ``in`` is False).
    """

    def __init__(self, values: dict[str, int], *, timed: bool = True) -> None:
        super().__init__(values)
        self.timed = timed

    def __missing__(self, key: str) -> int:
        if not self.timed and key in TIMING_COUNTERS:
            raise UntimedCounterError(f"{key!r} is a timing counter; this backend is untimed "
                                      "(the functional model has no cycles)")
        raise KeyError(key)

    def __sub__(self, other: Counters) -> Counters:
        if not isinstance(other, Counters):
            return NotImplemented
        return Counters({k: (v - other[k]) % (1 << COUNTER_BITS[k]) for k, v in self.items()},
                        timed=self.timed)

    def __reduce__(self):
        return (type(self), (dict(self),), {"timed": self.timed})


@dataclass(frozen=True)
class BlockedCommand:
    """Diagnosis of a queue that does not progress: its first submitted command whose
    semaphore wait is not satisfied.

    Attributes
    ----------
    queue, command_index : int
        Where the command is.
    description : str
        :func:`describe_command` of it.
    sem, value, current : int
        It waits for ``sem[sem] >= value``; the semaphore holds ``current``.
    last_signal : tuple of (int, int) or None
        ``(queue, command index)`` of the command that last incremented the semaphore
        (``SEM_LAST``), or None if nothing did since the last ``CONTROL`` clear.
    """
    queue: int
    command_index: int
    description: str
    sem: int
    value: int
    current: int
    last_signal: tuple[int, int] | None

    def __str__(self) -> str:
        last = ("never signalled" if self.last_signal is None else
                f"last signalled by queue {self.last_signal[0]} command #{self.last_signal[1]}")
        return (f"queue {self.queue} waits at command #{self.command_index} "
                f"({self.description}) on semaphore {self.sem} >= {self.value}: it holds "
                f"{self.current}, {last}")


class OutOfSemaphoresError(NPUError):
    """Every semaphore of the runtime's pool is in use."""


class Semaphore:
    """A device semaphore taken from the runtime's pool (:meth:`Device.alloc_semaphore`).

    Attributes
    ----------
    id : int
        The semaphore index.
    base : int
        Its value when it was allocated (nothing else signals it while it is owned).
    issued : int
        Signals enqueued by the owner since allocation; ``base + issued`` is the value once
        all of them executed.
    """

    def __init__(self, device: Device, sem_id: int) -> None:
        self.device = device
        self.id = sem_id
        self.base = device.semaphore(sem_id)
        self.issued = 0
        self._freed = False

    def target(self, n: int = 0) -> int:
        """The value after the first ``issued + n`` signals (32-bit)."""
        return (self.base + self.issued + n) & _MASK32

    def value(self) -> int:
        """The semaphore's current value (CSR read)."""
        return self.device.semaphore(self.id)

    def free(self) -> None:
        """Return the semaphore to the pool (its owner must not signal it any more)."""
        if not self._freed:
            self._freed = True
            self.device._sem_pool.append(self.id)
            self.device._sems_live.pop(self.id, None)

    def __repr__(self) -> str:
        return f"<Semaphore {self.id} base={self.base} issued={self.issued}>"


class Event:
    """A point in a stream's work, in the idiom of CUDA events, backed by one semaphore.

    :meth:`record` on a stream appends a ``FENCE`` that, once every earlier command of the
    stream retired, writes the cycle counter to a DRAM word (the event's timestamp) and
    increments the event's semaphore. :meth:`Stream.wait_event` appends a ``WAIT`` for that
    value. Unlike CUDA, waiting on an event that was never recorded waits for its *first*
    recording (a never-recorded event is a bug the watchdog then reports, not a no-op).

    Raises
    ------
    OutOfSemaphoresError
        If no semaphore is free.
    """

    def __init__(self, device: Device) -> None:
        self.device = device
        self.sem = device.alloc_semaphore()
        self._words: dict[int, Buffer] = {}   # stream queue -> timestamp word
        self._last_word: Buffer | None = None
        self.recorded_on: Stream | None = None

    @property
    def target(self) -> int:
        """Semaphore value that marks the latest recording (or the first, if never
        recorded)."""
        return self.sem.target(0 if self.sem.issued else 1)

    def record(self, stream: Stream) -> Event:
        """Record the event at the current end of ``stream`` (see the class docstring)."""
        return stream.record(self)

    def query(self) -> bool:
        """True once the latest recording has completed (False if never recorded)."""
        if not self.sem.issued:
            return False
        if self.recorded_on is not None:
            self.recorded_on._check_error()
        return _sem_reached(self.sem.value(), self.target)

    def synchronize(self, timeout_cycles: int = DEFAULT_TIMEOUT_CYCLES) -> None:
        """Wait until the event completed.

        Raises
        ------
        DeviceTimeoutError
            With a deadlock report (:class:`BlockedCommand` list in ``blocked``).
        DeviceError
            If the recording stream failed.
        """
        streams = [self.recorded_on] if self.recorded_on is not None else []
        self.device._wait_until(lambda: _sem_reached(self.sem.value(), self.target),
                                timeout_cycles, f"event on semaphore {self.sem.id}", streams)

    def timestamp(self) -> int:
        """Low 32 bits of ``CYCLES`` when the latest recording completed (0 on the model).

        Raises
        ------
        NPUError
            If the event has not completed.
        """
        if not self.query() or self._last_word is None:
            raise NPUError(f"event on semaphore {self.sem.id} has not completed")
        return int.from_bytes(self._last_word.read(4), "little")

    def elapsed_cycles(self, end: Event) -> int:
        """Cycles from this event's completion to ``end``'s (both must have completed; 32-bit
        wrapping difference, so intervals up to 2**32 cycles)."""
        return (end.timestamp() - self.timestamp()) & _MASK32

    def free(self) -> None:
        """Release the semaphore and the timestamp words."""
        for word in self._words.values():
            if not word.freed:
                word.free()
        self._words.clear()
        self.sem.free()

    def _word_for(self, stream: Stream) -> Buffer:
        if stream.queue not in self._words:
            self._words[stream.queue] = stream.alloc(4)
        return self._words[stream.queue]


def _sem_reached(value: int, target: int) -> bool:
    return value >= target


class Stream:
    """A hardware command queue seen as a stream of work, in the idiom of CUDA streams.

    Commands launched on one stream run in launch order as far as their semaphores say;
    every :meth:`launch` after the first starts with a ``BARRIER``, so a kernel starts only
    after the stream's previous kernels retired (within a kernel, DMA and compute overlap as
    its semaphores allow). Different streams run concurrently and are ordered against each
    other only through events (:meth:`record`, :meth:`wait_event`).

    Create streams with :meth:`Device.create_stream`; a device's default stream is
    :attr:`Device.default_stream`.

    Parameters
    ----------
    device : Device
    queue : int
        The hardware queue.
    ring_commands : int
        Ring size in commands (power of two >= 2; holds one less).
    window_bytes : int, optional
        If given, the stream gets a private DRAM window: one contiguous block holding its
        ring, its fence word and an arena of ``window_bytes`` bytes (:meth:`alloc`), and the
        hardware refuses (``WINDOW`` error) every ring fetch, fence or DMA of this queue
        outside it. Otherwise the window is the whole DRAM.
    """

    def __init__(self, device: Device, queue: int, ring_commands: int,
                 window_bytes: int | None = None) -> None:
        self.device = device
        self.queue = queue
        self.ring_size = ring_commands
        ring_bytes = ring_commands * COMMAND_BYTES
        self._arena: Allocator | None = None
        if window_bytes is None:
            self._region = None
            self.ring = device.alloc(ring_bytes, align=64)
            self._fence_word = device.alloc(4, align=64)
            self.window = (0, device.config.dram_bytes)
        else:
            total = ring_bytes + 64 + int(window_bytes)
            self._region = device.alloc(total, align=4096)
            self.ring = Buffer(device, self._region.addr, ring_bytes)
            self._fence_word = Buffer(device, self._region.addr + ring_bytes, 4)
            self._arena = Allocator(self._region.addr + ring_bytes + 64, int(window_bytes))
            self.window = (self._region.addr, self._region.addr + total)
        self._fence_word.write(bytes(4))
        self._fence_seq = 0
        self._record: list[bytes] = []
        self._window_start: int | None = None
        self._need_barrier = False
        self.commands_submitted = 0
        self._setup()

    # -- set-up -----------------------------------------------------------------------------

    def _setup(self) -> None:
        wr, q = self.device.backend.csr_write, self.queue
        wr(Csr.QUEUE_RESET, 1 << q)
        base, limit = self.window
        wr(queue_csr(q, Csr.WINDOW_BASE), base)
        wr(queue_csr(q, Csr.WINDOW_LIMIT), 0 if self._region is None else limit)
        wr(queue_csr(q, Csr.RING_BASE), self.ring.addr)
        wr(queue_csr(q, Csr.RING_SIZE), self.ring_size)
        self._head = self.device.backend.csr_read(queue_csr(q, Csr.HEAD))
        self._tail = self._head
        wr(queue_csr(q, Csr.TAIL), self._tail)
        self._forget()

    def _forget(self) -> None:
        self._record.clear()
        self._window_start = None
        self._need_barrier = False

    def alloc(self, nbytes: int, align: int = 64) -> Buffer:
        """Allocate device memory this stream may touch: from its private arena if it has a
        window, else from the device.

        Raises
        ------
        OutOfMemoryError
            If the arena (or DRAM) has no block large enough.
        """
        if self._arena is None:
            return self.device.alloc(nbytes, align)
        return _ArenaBuffer(self.device, self._arena, self._arena.alloc(nbytes, align),
                            int(nbytes))

    def upload(self, array: npt.ArrayLike, align: int = 64) -> Buffer:
        """:meth:`alloc` a buffer and copy ``array``'s raw bytes into it."""
        a = np.ascontiguousarray(array)
        buf = self.alloc(max(a.nbytes, 1), align)
        buf.write(a.tobytes())
        return buf

    # -- submission -------------------------------------------------------------------------

    def launch(self, commands: Iterable[Command | bytes], *,
               timeout_cycles: int = DEFAULT_TIMEOUT_CYCLES, ordered: bool = True) -> None:
        """Append ``commands`` to the stream and ring the doorbell.

        With ``ordered`` (default), a ``BARRIER`` goes first if the stream has unsynchronized
        work, so these commands start after everything launched before on this stream.
        Handles ring wrap-around; when the ring is full, rings the doorbell for what is
        written and polls ``HEAD`` until a quarter of the ring (or all that is left to write)
        is free, at an interval that starts at ``RING_POLL_CYCLES`` and doubles after each poll
        (each poll is an MMIO round trip, and under co-simulation a Python one; the quarter
        refilled is at most a third of what is still queued, so the device is not starved).

        Raises
        ------
        DeviceError
            If this stream's queue reports an error while the runtime waits for ring space.
        DeviceTimeoutError
            If the ring stays full for ``timeout_cycles`` cycles (with a deadlock report).
        """
        raws = [c.raw if isinstance(c, Command) else bytes(c) for c in commands]
        if ordered and self._need_barrier and raws:
            barrier = CommandList()
            barrier.barrier()
            raws.insert(0, barrier[0].raw)
        if raws:
            self._need_barrier = True
        self._write(raws, timeout_cycles)

    def _write(self, raws: list[bytes], timeout_cycles: int) -> None:
        dev = self.device
        if self._window_start is None:
            self._window_start = dev.cycles()
        i = 0
        batch = max(1, self.ring_size // 4)
        while i < len(raws):
            free = self._ring_free()
            if free == 0:
                # no interrupt announces ring space: poll HEAD, backing off, until a batch fits
                want = min(batch, len(raws) - i)
                dev._wait_until(lambda want=want: self._refresh_head() >= want,
                                timeout_cycles, f"ring space of queue {self.queue}", [self],
                                poll_cycles=RING_POLL_CYCLES,
                                max_poll_cycles=RING_POLL_MAX_CYCLES)
                continue
            n = min(free, len(raws) - i, self.ring_size - self._tail)
            chunk = raws[i:i + n]
            dev.backend.mem_write(self.ring.addr + self._tail * COMMAND_BYTES, b"".join(chunk))
            self._record.extend(chunk)
            self._tail = (self._tail + n) % self.ring_size
            dev.backend.csr_write(queue_csr(self.queue, Csr.TAIL), self._tail)
            self.commands_submitted += n
            i += n

    def _ring_free(self) -> int:
        free = self.ring_size - 1 - (self._tail - self._head) % self.ring_size
        return free if free else self._refresh_head()

    def _refresh_head(self) -> int:
        self._head = self.device.backend.csr_read(queue_csr(self.queue, Csr.HEAD))
        return self.ring_size - 1 - (self._tail - self._head) % self.ring_size

    # -- events -------------------------------------------------------------------------------

    def record(self, event: Event | None = None) -> Event:
        """Record ``event`` (a new one if None) here: it completes once every command launched
        on this stream so far retired; its timestamp is the cycle counter then.

        Raises
        ------
        OutOfSemaphoresError
            If a new event is needed and no semaphore is free.
        """
        ev = Event(self.device) if event is None else event
        word = ev._word_for(self)
        cmds = CommandList()
        cmds.fence(addr=word.addr, timestamp=True, signal=ev.sem.id)
        self._write([cmds[0].raw], DEFAULT_TIMEOUT_CYCLES)
        ev.sem.issued += 1
        ev._last_word = word
        ev.recorded_on = self
        return ev

    def wait_event(self, event: Event) -> None:
        """Make every command launched on this stream from now on wait until ``event``
        completed (its latest recording, or its first if it was never recorded)."""
        cmds = CommandList()
        cmds.wait(event.sem.id, event.target)
        self._write([cmds[0].raw], DEFAULT_TIMEOUT_CYCLES)

    def query(self) -> bool:
        """True if every command launched on this stream retired (``Q_STATUS.busy`` low).

        Raises
        ------
        DeviceError
            If the stream's queue has an error latched.
        """
        self._check_error()
        return not self.device.backend.csr_read(queue_csr(self.queue, Csr.Q_STATUS)) & 1

    def synchronize(self, timeout_cycles: int = DEFAULT_TIMEOUT_CYCLES, *,
                    timeout: int | None = None) -> int:
        """Wait until every command launched on this stream retired.

        Appends a ``FENCE`` (with ``irq``) that writes a new sequence number to the stream's
        fence word and waits with :meth:`Backend.wait_irq` until the word holds it.

        Parameters
        ----------
        timeout_cycles, timeout : int
            Budget in device clock cycles (``timeout`` is an alias).

        Returns
        -------
        int
            Cycles from the first launch since the previous synchronize to the completion
            (``CYCLES`` after minus before); 0 on the untimed model.

        Raises
        ------
        DeviceError
            If this stream's queue reported an error; that queue is reset first (its pending
            commands are dropped, the other queues go on).
        DeviceTimeoutError
            If the fence did not complete in time; the message and ``blocked`` say which
            queue waits on which semaphore and what last signalled it.
        """
        if timeout is not None:
            timeout_cycles = timeout
        seq = (self._fence_seq + 1) & _MASK32 or 1
        self._fence_seq = seq
        fence = CommandList()
        fence.fence(addr=self._fence_word.addr, value=seq, irq=True)
        self._write([fence[0].raw], timeout_cycles)
        word = self._fence_word
        self.device._wait_until(lambda: int.from_bytes(word.read(4), "little") == seq,
                                timeout_cycles, f"synchronize of queue {self.queue}", [self])
        self.device.backend.csr_write(Csr.IRQ_STATUS, IrqBit.FENCE)
        start = self._window_start or 0
        self._window_start = None
        self._need_barrier = False
        return self.device.cycles() - start

    def reset(self) -> None:
        """Reset this stream's queue alone (``QUEUE_RESET``): pending commands are dropped,
        its error is cleared; semaphores and other streams are not touched."""
        dev = self.device
        dev.backend.csr_write(Csr.QUEUE_RESET, 1 << self.queue)
        self._head = self._tail = dev.backend.csr_read(queue_csr(self.queue, Csr.HEAD))
        self._forget()
        dev._rearm_error_irq()

    def _check_error(self) -> None:
        self.device._check_errors([self])

    @property
    def next_index(self) -> int:
        """Index (in the queue's command count since its last reset, as in ``Q_ERR_CMD`` and
        the trace) that the next command launched on this stream will have."""
        return len(self._record)

    def __repr__(self) -> str:
        return f"<Stream queue={self.queue} window=[{self.window[0]:#x}, {self.window[1]:#x})>"


class _ArenaBuffer(Buffer):
    """A :class:`Buffer` inside a stream's private arena."""

    def __init__(self, device: Device, arena: Allocator, addr: int, nbytes: int) -> None:
        super().__init__(device, addr, nbytes)
        self._arena = arena

    def free(self) -> None:
        if self._freed:
            raise NPUError(f"buffer at {self.addr:#x} ({self.nbytes} bytes) freed twice")
        self._arena.free(self.addr)
        self._freed = True


class Device:
    """An NPU seen through a backend: configuration, memory, streams, semaphores, events.

    Parameters
    ----------
    backend : Backend
        The transport (:class:`sw.model.ModelBackend` or the RTL backend).
    expected_config : NPUConfig, optional
        If given, the configuration the caller built for; a difference on any field the
        ``CFG_*`` CSRs report raises :class:`ConfigMismatchError`. Fields the CSRs do not
        report (``axi_addr_bits``, ``axi_id_bits``, ``cmd_fifo_depth``, ``trace_depth``) are
        taken from it (else from the :class:`NPUConfig` defaults).
    queue : int
        The hardware queue of the default stream (:meth:`launch`, :meth:`synchronize`).
    ring_commands : int, optional
        Ring size of each stream in commands, a power of two >= 2 (holds one less).
        Default: 4096 (128 KiB), or 1/16 of DRAM if that is smaller.

    Raises
    ------
    ConfigMismatchError
        If ``ID`` is not the NPU's, the version major differs, the CSRs are inconsistent or
        differ from ``expected_config``.
    OutOfMemoryError
        If the ring does not fit in DRAM.

    Attributes
    ----------
    config : NPUConfig
        The configuration discovered from the CSRs.
    allocator : Allocator
        The DRAM allocator.
    default_stream : Stream
        The stream of :meth:`launch` / :meth:`synchronize`.

    Notes
    -----
    Creating a :class:`Device` resets the NPU (``CONTROL``): every queue, error and semaphore.
    Semaphore 0 is left to callers that manage semaphores by hand; the others form the pool of
    :meth:`alloc_semaphore` (events, kernels).
    """

    def __init__(self, backend: Backend, expected_config: NPUConfig | None = None, *,
                 queue: int = 0, ring_commands: int | None = None) -> None:
        self.backend = backend
        self.config = self._discover(expected_config)
        if ring_commands is None:
            fit = self.config.dram_bytes // 16 // COMMAND_BYTES
            ring_commands = min(4096, 1 << (fit.bit_length() - 1))
        if not 0 <= queue < self.config.n_queues:
            raise ValueError(f"queue {queue} does not exist (n_queues={self.config.n_queues})")
        if ring_commands < 2 or ring_commands & (ring_commands - 1):
            raise ValueError(f"ring_commands must be a power of two >= 2, got {ring_commands}")
        self.ring_commands = ring_commands
        self.allocator = Allocator(0, self.config.dram_bytes)
        self._sem_pool = list(range(self.config.n_sems - 1, 0, -1))
        self._sems_live: dict[int, Semaphore] = {}
        self._barrier_sem: Semaphore | None = None
        self.streams: dict[int, Stream] = {}
        backend.csr_write(Csr.CONTROL, 1)
        backend.csr_write(Csr.IRQ_STATUS, IrqBit.FENCE | IrqBit.ERROR)
        backend.csr_write(Csr.IRQ_ENABLE, IrqBit.FENCE | IrqBit.ERROR)
        self.default_stream = self.create_stream(queue)

    # -- configuration ----------------------------------------------------------------------------

    def _discover(self, expected: NPUConfig | None) -> NPUConfig:
        rd = self.backend.csr_read
        ident = rd(Csr.ID)
        if ident != CSR_ID_VALUE:
            raise ConfigMismatchError(f"not an NPU: ID CSR reads {ident:#010x}, "
                                      f"expected {CSR_ID_VALUE:#010x}")
        version = rd(Csr.VERSION)
        if version >> 16 != CSR_VERSION_VALUE >> 16:
            raise ConfigMismatchError(f"device version {version:#010x} is not compatible with "
                                      f"the runtime's {CSR_VERSION_VALUE:#010x}")
        arr, bus = rd(Csr.CFG_ARRAY), rd(Csr.CFG_BUS)
        reported = {
            "rows": arr & 0xFF, "cols": (arr >> 8) & 0xFF, "n_queues": (arr >> 16) & 0xFF,
            "n_sems": ((arr >> 24) & 0xFF) or 256,  # 8-bit field: 0 means 256
            "spad_rows": rd(Csr.CFG_SPAD), "acc_rows": rd(Csr.CFG_ACC),
            "axi_data_bits": 8 * (bus & 0xFF), "dma_outstanding": (bus >> 8) & 0xFF,
            "dram_bytes": rd(Csr.CFG_DRAM),
        }
        base = expected if expected is not None else NPUConfig()
        rest = {f.name: getattr(base, f.name) for f in fields(NPUConfig)
                if f.name not in reported}
        try:
            config = NPUConfig(**reported, **rest)
        except ValueError as e:
            raise ConfigMismatchError(f"the device reports an invalid configuration: {e}") from e
        derived = {"spad_row_bytes": (bus >> 16) & 0xFF, "acc_row_elems": (bus >> 24) & 0xFF}
        for name, value in derived.items():
            if getattr(config, name) != value:
                raise ConfigMismatchError(f"CFG_BUS reports {name}={value} but the "
                                          f"configuration implies {getattr(config, name)}")
        if expected is not None:
            diffs = [f"{n}: device {getattr(config, n)}, expected {getattr(expected, n)}"
                     for n in _REPORTED_FIELDS if getattr(config, n) != getattr(expected, n)]
            if diffs:
                raise ConfigMismatchError("device configuration differs: " + "; ".join(diffs))
        return config

    # -- streams, semaphores, events ---------------------------------------------------------

    def create_stream(self, queue: int | None = None, *, window_bytes: int | None = None,
                      ring_commands: int | None = None) -> Stream:
        """Create a :class:`Stream` on hardware queue ``queue`` (the lowest free one if None).

        Raises
        ------
        ValueError
            If the queue does not exist or already has a stream, or none is free.
        OutOfMemoryError
            If the ring (or the window) does not fit in DRAM.
        """
        if queue is None:
            free = [q for q in range(self.config.n_queues) if q not in self.streams]
            if not free:
                raise ValueError(f"all {self.config.n_queues} hardware queues have a stream")
            queue = free[0]
        if not 0 <= queue < self.config.n_queues:
            raise ValueError(f"queue {queue} does not exist (n_queues={self.config.n_queues})")
        if queue in self.streams:
            raise ValueError(f"queue {queue} already has a stream")
        stream = Stream(self, queue, ring_commands or self.ring_commands, window_bytes)
        self.streams[queue] = stream
        return stream

    def alloc_semaphore(self) -> Semaphore:
        """Take a semaphore from the pool (ids ``n_sems - 1`` down to 1).

        Raises
        ------
        OutOfSemaphoresError
            If all are in use.
        """
        if not self._sem_pool:
            raise OutOfSemaphoresError(f"all {self.config.n_sems - 1} pool semaphores in use")
        sem = Semaphore(self, self._sem_pool.pop())
        self._sems_live[sem.id] = sem
        return sem

    def event(self) -> Event:
        """A new, unrecorded :class:`Event`."""
        return Event(self)

    def barrier(self, streams: Iterable[Stream]) -> None:
        """Cross-stream barrier: work launched afterwards on any of ``streams`` starts only
        after all work launched before on all of them retired.

        Each stream appends a ``BARRIER`` that signals the device's barrier semaphore once
        the stream's earlier work retired, then a ``WAIT`` until the semaphore counts every
        such signal issued so far. The count is cumulative over all barriers, so a barrier
        also waits for the streams of earlier barriers to reach them (conservative, never
        deadlocks by itself). One pool semaphore is taken at the first barrier and kept.
        """
        streams = list(streams)
        if self._barrier_sem is None:
            self._barrier_sem = self.alloc_semaphore()
        sem = self._barrier_sem
        target = sem.target(len(streams))
        for s in streams:
            c = CommandList()
            c.barrier(signal=sem.id)
            c.wait(sem.id, target)
            s._write([x.raw for x in c], DEFAULT_TIMEOUT_CYCLES)
        sem.issued += len(streams)

    # -- memory -----------------------------------------------------------------------------------

    def alloc(self, nbytes: int, align: int = 64) -> Buffer:
        """Allocate ``nbytes`` bytes of device DRAM aligned to ``align`` bytes.

        Raises
        ------
        OutOfMemoryError
            If no free block is large enough.
        ValueError
            If ``nbytes < 1`` or ``align`` is not a power of two.
        """
        return Buffer(self, self.allocator.alloc(nbytes, align), int(nbytes))

    def upload(self, array: npt.ArrayLike, align: int = 64) -> Buffer:
        """Allocate a buffer and copy the C-ordered raw bytes of ``array`` into it."""
        a = np.ascontiguousarray(array)
        buf = self.alloc(max(a.nbytes, 1), align)
        buf.write(a.tobytes())
        return buf

    def download(self, buffer: Buffer, dtype: npt.DTypeLike, shape: tuple[int, ...] | int,
                 offset: int = 0) -> np.ndarray:
        """Read an array of ``dtype`` and ``shape`` from ``buffer`` at byte ``offset``.

        Raises
        ------
        ValueError
            If the array does not fit in the buffer.
        """
        dt = np.dtype(dtype)
        shape_t = (shape,) if isinstance(shape, int) else tuple(shape)
        n = math.prod(shape_t) * dt.itemsize
        return np.frombuffer(buffer.read(n, offset), dtype=dt).reshape(shape_t).copy()

    def memory_stats(self) -> AllocatorStats:
        """Allocator statistics (bytes)."""
        return self.allocator.stats()

    # -- CSR helpers ------------------------------------------------------------------------------

    def cycles(self) -> int:
        """The device's 64-bit cycle counter (reading ``CYCLES_LO`` latches ``CYCLES_HI``);
        always 0 on the untimed model."""
        lo = self.backend.csr_read(Csr.CYCLES_LO)
        hi = self.backend.csr_read(Csr.CYCLES_HI)
        return hi << 32 | lo

    def semaphore(self, sem: int) -> int:
        """Current value of semaphore ``sem`` (read-only CSR)."""
        if not 0 <= sem < self.config.n_sems:
            raise ValueError(f"semaphore {sem} does not exist (n_sems={self.config.n_sems})")
        return self.backend.csr_read(sem_csr(sem))

    def last_signal(self, sem: int) -> tuple[int, int] | None:
        """``(queue, command index)`` of what last incremented ``sem`` (``SEM_LAST``), or None
        if nothing did since the last ``CONTROL`` clear."""
        word = self.backend.csr_read(sem_last_csr(sem))
        return ((word >> 24) & 0x7F, word & 0xFF_FFFF) if word >> 31 else None

    def counters(self) -> Counters:
        """Snapshot of the performance counters (see :class:`Counters` for names and units).

        Writes ``CNT_SNAPSHOT`` (every counter is copied at that one clock edge), then reads
        the snapshot registers, so the values are consistent with each other however long
        the reads take. On an untimed backend (``backend.timed`` False, the functional
        model) the timing counters are left out.
        """
        rd = self.backend.csr_read
        timed = bool(getattr(self.backend, "timed", True))
        self.backend.csr_write(Csr.CNT_SNAPSHOT, 1)
        values = {}
        if timed:
            lo = rd(Csr.CNT_CYCLES_LO)
            values["cycles"] = rd(Csr.CNT_CYCLES_HI) << 32 | lo
        for name in COUNTER_NAMES:
            if timed or name not in TIMING_COUNTERS:
                values[name] = rd(counter_csr(name))
        return Counters(values, timed=timed)

    def read_trace(self) -> list[TraceRecord]:
        """Drain the engines' command trace FIFOs, oldest first per engine, sorted by start.

        Raises
        ------
        NPUError
            If a trace FIFO overflowed (entries were lost; it is cleared by ``CONTROL``).
        """
        rd, wr = self.backend.csr_read, self.backend.csr_write
        out = []
        for e, name in enumerate(ENGINE_NAMES):
            while True:
                info = rd(trace_csr(e, Csr.TRACE_INFO))
                if info >> 30 & 1:
                    raise NPUError(f"the {name} engine's command trace overflowed "
                                   f"({self.config.trace_depth} entries); drain it sooner")
                if not info >> 31:
                    break
                out.append(TraceRecord(name, (info >> 24) & 0x3F, info & 0xFF_FFFF,
                                       rd(trace_csr(e, Csr.TRACE_START)),
                                       rd(trace_csr(e, Csr.TRACE_END))))
                wr(trace_csr(e, Csr.TRACE_POP), 1)
        return sorted(out, key=lambda r: (r.start, r.end))

    def status(self) -> dict[str, int]:
        """Debug snapshot: STATUS, the default stream's HEAD and TAIL, IRQ_STATUS, every
        stream's Q_STATUS/HEAD/TAIL and every semaphore."""
        rd = self.backend.csr_read
        q0 = self.default_stream.queue
        snap = {"STATUS": rd(Csr.STATUS), "HEAD": rd(queue_csr(q0, Csr.HEAD)),
                "TAIL": rd(queue_csr(q0, Csr.TAIL)), "IRQ_STATUS": rd(Csr.IRQ_STATUS)}
        for q in sorted(self.streams):
            if q != q0:
                snap[f"q{q}.STATUS"] = rd(queue_csr(q, Csr.Q_STATUS))
                snap[f"q{q}.HEAD"] = rd(queue_csr(q, Csr.HEAD))
                snap[f"q{q}.TAIL"] = rd(queue_csr(q, Csr.TAIL))
        for s in range(self.config.n_sems):
            snap[f"sem{s}"] = rd(sem_csr(s))
        return snap

    def diagnose(self) -> list[BlockedCommand]:
        """Deadlock report: for each stream, its first submitted command (since its last
        reset) whose semaphore wait is not satisfied, with the semaphore's value and what
        last signalled it. Semaphores only grow, so such a command has not started; it blocks
        its stream (a ``WAIT`` or fence) or its engine's FIFO for that stream."""
        sems = [self.semaphore(s) for s in range(self.config.n_sems)]
        blocked = []
        for q, stream in sorted(self.streams.items()):
            for i, raw in enumerate(stream._record):
                word = int.from_bytes(raw[:8], "little")
                op = word & 0xFF
                waits = (word >> 8) & 1 or op == Opcode.WAIT.value
                if not waits:
                    continue
                sem = (word >> _WAIT_FIELD.offset) & 0xFF
                value = word >> 32
                if sem < len(sems) and sems[sem] < value:
                    blocked.append(BlockedCommand(q, i, describe_command(raw), sem, value,
                                                  sems[sem], self.last_signal(sem)))
                    break
        return blocked

    # -- errors and waiting -----------------------------------------------------------------

    def reset(self) -> None:
        """Reset the whole NPU (``CONTROL`` bit 0): every queue, error and semaphore.

        Commands not yet executed are dropped; command indices restart at 0; pool semaphores
        in use restart from 0.
        """
        self.backend.csr_write(Csr.CONTROL, 1)
        self.backend.csr_write(Csr.IRQ_STATUS, IrqBit.FENCE | IrqBit.ERROR)
        self.backend.csr_write(Csr.IRQ_ENABLE, IrqBit.FENCE | IrqBit.ERROR)
        for stream in self.streams.values():
            stream._head = stream._tail = self.backend.csr_read(
                queue_csr(stream.queue, Csr.HEAD))
            stream._forget()
        for sem in self._sems_live.values():   # the semaphores restart from 0
            sem.base = sem.issued = 0

    def _rearm_error_irq(self) -> None:
        if not self.backend.csr_read(Csr.QUEUE_ERRORS):
            self.backend.csr_write(Csr.IRQ_STATUS, IrqBit.ERROR)
            self.backend.csr_write(Csr.IRQ_ENABLE, IrqBit.FENCE | IrqBit.ERROR)

    def _check_errors(self, streams: Iterable[Stream] | None = None) -> None:
        """Raise :class:`DeviceError` for the first of ``streams`` (default: all) whose queue
        has an error latched, after resetting that queue alone."""
        rd = self.backend.csr_read
        bits = rd(Csr.QUEUE_ERRORS)
        if not bits:
            return
        check = self.streams.values() if streams is None else streams
        for stream in check:
            q = stream.queue
            if not bits >> q & 1:
                continue
            word = rd(queue_csr(q, Csr.Q_ERR_CODE))
            index, addr = rd(queue_csr(q, Csr.Q_ERR_CMD)), rd(queue_csr(q, Csr.Q_ERR_ADDR))
            raw_code, opcode = word & 0xFF, (word >> 16) & 0xFF
            code: ErrorCode | int = ErrorCode(raw_code) if raw_code in _ERROR_CODES else raw_code
            if index < len(stream._record):
                desc = describe_command(stream._record[index])
            else:
                desc = f"opcode {opcode:#04x}, not in this runtime's record"
            stream.reset()
            raise DeviceError(code, q, index, opcode, addr, desc)
        # an error on a queue nobody waits for here: stop it from waking wait_irq
        self.backend.csr_write(Csr.IRQ_ENABLE, IrqBit.FENCE)

    def _wait_until(self, done: Callable[[], bool], timeout_cycles: int, what: str,
                    streams: list[Stream], poll_cycles: int | None = None,
                    max_poll_cycles: int | None = None) -> None:
        """Wait for ``done()``, waking on interrupts or every ``poll_cycles`` (doubling up to
        ``max_poll_cycles`` after each wake-up if given); raise after ``timeout_cycles``."""
        start = self.cycles()
        spent = 0  # lower bound of cycles waited, for backends whose counter does not move
        while True:
            if done():
                return
            self._check_errors(streams)
            elapsed = max(self.cycles() - start, spent)
            remaining = timeout_cycles - elapsed
            if remaining <= 0:
                blocked = self.diagnose()
                report = "; ".join(str(b) for b in blocked) or "no unsatisfied semaphore wait"
                raise DeviceTimeoutError(
                    f"{what}: no completion after {timeout_cycles} cycles; deadlock report: "
                    f"{report}; " + ", ".join(f"{k}={v:#x}" for k, v in self.status().items()),
                    blocked)
            step = remaining if poll_cycles is None else min(remaining, poll_cycles)
            if poll_cycles is not None and max_poll_cycles is not None:
                poll_cycles = min(2 * poll_cycles, max_poll_cycles)
            if self.backend.wait_irq(step):
                # A fence interrupt: fences are detected through their DRAM word, so clear it
                # to let wait_irq wait again. An error is picked up by _check_errors.
                self.backend.csr_write(Csr.IRQ_STATUS, IrqBit.FENCE)
                spent += 1
            else:
                spent += step

    def region(self, name: str) -> contextlib.AbstractContextManager:
        """Context manager marking a named stretch of work (a kernel, e.g. ``"query"``).

        The runtime itself does nothing with it; a backend with a ``region(name)`` context
        manager gets the call (the RTL backend uses it to choose the waveform window by
        kernel, ``npu run --waves-kernel NAME``); on other backends it does nothing.
        """
        hook = getattr(self.backend, "region", None)
        return hook(name) if hook is not None else contextlib.nullcontext()

    # -- default stream -----------------------------------------------------------------------

    @property
    def queue(self) -> int:
        """The default stream's hardware queue."""
        return self.default_stream.queue

    @property
    def commands_submitted(self) -> int:
        return self.default_stream.commands_submitted

    def launch(self, commands: Iterable[Command | bytes], *,
               timeout_cycles: int = DEFAULT_TIMEOUT_CYCLES) -> None:
        """:meth:`Stream.launch` on the default stream, unordered (as the single-queue runtime:
        the caller's semaphores order the work)."""
        self.default_stream.launch(commands, timeout_cycles=timeout_cycles, ordered=False)

    def synchronize(self, timeout_cycles: int = DEFAULT_TIMEOUT_CYCLES, *,
                    timeout: int | None = None) -> int:
        """:meth:`Stream.synchronize` of the default stream; returns the cycles elapsed."""
        return self.default_stream.synchronize(timeout_cycles, timeout=timeout)

    def run(self, commands: Iterable[Command | bytes],
            timeout_cycles: int = DEFAULT_TIMEOUT_CYCLES) -> int:
        """:meth:`launch` then :meth:`synchronize`; returns the cycles elapsed."""
        self.launch(commands, timeout_cycles=timeout_cycles)
        return self.synchronize(timeout_cycles)
