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

Conventions
-----------
* One hardware queue per :class:`Device` (queue 0 by default); its ring lives in device DRAM
  and is allocated by the device's own allocator.
* Every command written to the ring is recorded, so a device error can name the failing command
  by the index the device reports in ``ERR_CMD`` (commands since the queue's last reset: ring
  set-up or ``CONTROL`` clear).
* After a device error the runtime clears it (``CONTROL`` bit 0: error latch cleared, queues
  flushed, semaphores zeroed) before raising :class:`DeviceError`, so the device keeps working.
"""

from __future__ import annotations

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
    CSR_ID_VALUE,
    CSR_VERSION_VALUE,
    Csr,
    DmaBody,
    ErrorCode,
    Header,
    IrqBit,
    LocalMem,
    Opcode,
    decode,
    encode,
    queue_csr,
    sem_csr,
)
from sw.backend import Backend

__all__ = [
    "NPUError", "DeviceError", "OutOfMemoryError", "ConfigMismatchError", "DeviceTimeoutError",
    "AllocatorStats", "Allocator", "Buffer", "Command", "CommandList", "Device",
    "describe_command", "DEFAULT_TIMEOUT_CYCLES",
]

_MASK32 = 0xFFFF_FFFF
_OPCODE_FIELD = data.Layout.cast(Header)["opcode"]
_MEM_FIELD = data.Layout.cast(DmaBody)["mem"]
DEFAULT_TIMEOUT_CYCLES = 50_000_000  #: default budget of :meth:`Device.synchronize` (cycles)
RING_POLL_CYCLES = 256  #: how often a host waiting for ring space reads HEAD (cycles)


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


class ConfigMismatchError(NPUError):
    """The device is not an NPU, or its configuration differs from the one expected."""


class DeviceTimeoutError(NPUError):
    """The device did not finish within the cycle budget (e.g. blocked on a semaphore)."""


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
        parts.append(f"addr={b.addr:#x} value={b.value}")
    notes = []
    if h.flags.wait or op == Opcode.WAIT:
        notes.append(f"wait sem{h.wait_sem}>={h.wait_value}")
    if h.flags.signal or op == Opcode.SIGNAL:
        notes.append(f"signal sem{h.signal_sem}")
    for flag in ("irq", "accumulate", "relu"):
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
               wait: Wait = None, signal: int | None = None) -> None:
        """``acc[acc_row+i] (+)= A[a_row+i] @ W[w_row:w_row+rows]`` for ``i < m`` (rows)."""
        body = {"matmul": {"a_row": _field("a_row", a_row, 16), "w_row": _field("w_row", w_row, 16),
                           "acc_row": _field("acc_row", acc_row, 16), "m": _field("m", m, 16)}}
        self._add(Opcode.MATMUL, body, wait, signal, accumulate=int(bool(accumulate)))

    def requant(self, *, acc_row: int, spad_row: int, n_rows: int, param_row: int,
                relu: bool = False, wait: Wait = None, signal: int | None = None) -> None:
        """``spad[spad_row+i] = requant(acc[acc_row+i])`` with parameters at ``param_row``."""
        body = {"requant": {"acc_row": _field("acc_row", acc_row, 16),
                            "spad_row": _field("spad_row", spad_row, 16),
                            "n_rows": _field("n_rows", n_rows, 16),
                            "param_row": _field("param_row", param_row, 16)}}
        self._add(Opcode.REQUANT, body, wait, signal, relu=int(bool(relu)))

    def fence(self, *, addr: int, value: int, irq: bool = False, wait: Wait = None,
              signal: int | None = None) -> None:
        """After all earlier commands retired: ``DRAM[addr] = value`` (32-bit), then irq."""
        body = {"fence": {"addr": _field("addr", addr, 32), "value": _field("value", value, 32)}}
        self._add(Opcode.FENCE, body, wait, signal, irq=int(bool(irq)))

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


class Device:
    """An NPU seen through a backend: configuration, memory, one command queue.

    Parameters
    ----------
    backend : Backend
        The transport (:class:`sw.model.ModelBackend` or the RTL backend).
    expected_config : NPUConfig, optional
        If given, the configuration the caller built for; a difference on any field the
        ``CFG_*`` CSRs report raises :class:`ConfigMismatchError`. Fields the CSRs do not
        report (``axi_addr_bits``, ``axi_id_bits``, ``cmd_fifo_depth``) are taken from it
        (else from the :class:`NPUConfig` defaults).
    queue : int
        The hardware queue this device object drives.
    ring_commands : int, optional
        Ring size in commands, a power of two >= 2 (holds ``ring_commands - 1`` commands).
        Default: 4096 (128 KiB), or 1/16 of DRAM if that is smaller. A ring that holds a whole
        kernel lets the host write it at once; a smaller one makes the host poll ``HEAD``
        every :data:`RING_POLL_CYCLES` cycles for space, which can idle the device.

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
        self.queue = queue
        self.allocator = Allocator(0, self.config.dram_bytes)
        self.ring = self.alloc(ring_commands * COMMAND_BYTES, align=64)
        self.ring_size = ring_commands
        self._fence_word = self.alloc(4, align=64)
        self._fence_word.write(bytes(4))
        self._fence_seq = 0
        self._record: list[bytes] = []   # commands since the queue's last reset
        self._window_start: int | None = None  # CYCLES at the first launch since a sync
        self.commands_submitted = 0
        self._setup_queue()

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

    def _setup_queue(self) -> None:
        wr = self.backend.csr_write
        wr(Csr.CONTROL, 1)
        wr(queue_csr(self.queue, Csr.RING_BASE), self.ring.addr)
        wr(queue_csr(self.queue, Csr.RING_SIZE), self.ring_size)
        self._head = self.backend.csr_read(queue_csr(self.queue, Csr.HEAD))
        self._tail = self._head
        wr(queue_csr(self.queue, Csr.TAIL), self._tail)
        wr(Csr.IRQ_STATUS, IrqBit.FENCE | IrqBit.ERROR)
        wr(Csr.IRQ_ENABLE, IrqBit.FENCE | IrqBit.ERROR)
        self._record.clear()

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

    def status(self) -> dict[str, int]:
        """Debug snapshot: STATUS, HEAD, TAIL, IRQ_STATUS and every semaphore."""
        rd = self.backend.csr_read
        snap = {"STATUS": rd(Csr.STATUS), "HEAD": rd(queue_csr(self.queue, Csr.HEAD)),
                "TAIL": rd(queue_csr(self.queue, Csr.TAIL)), "IRQ_STATUS": rd(Csr.IRQ_STATUS)}
        for s in range(self.config.n_sems):
            snap[f"sem{s}"] = rd(sem_csr(s))
        return snap

    def reset(self) -> None:
        """Clear errors, flush the queues and zero the semaphores (``CONTROL`` bit 0).

        Commands not yet executed are dropped; command indices restart at 0.
        """
        self.backend.csr_write(Csr.CONTROL, 1)
        self.backend.csr_write(Csr.IRQ_STATUS, IrqBit.FENCE | IrqBit.ERROR)
        self._head = self._tail = self.backend.csr_read(queue_csr(self.queue, Csr.HEAD))
        self._record.clear()
        self._window_start = None

    # -- submission -------------------------------------------------------------------------------

    def launch(self, commands: Iterable[Command | bytes], *,
               timeout_cycles: int = DEFAULT_TIMEOUT_CYCLES) -> None:
        """Write ``commands`` into the ring and ring the doorbell.

        Handles wrap-around; when the ring is full, rings the doorbell for what is written and
        waits for the device to advance ``HEAD``.

        Raises
        ------
        DeviceError
            If the device reports an error while the runtime waits for ring space.
        DeviceTimeoutError
            If the ring stays full for ``timeout_cycles`` cycles.
        """
        raws = [c.raw if isinstance(c, Command) else bytes(c) for c in commands]
        if self._window_start is None:
            self._window_start = self.cycles()
        i = 0
        while i < len(raws):
            free = self._ring_free()
            if free == 0:
                # no interrupt announces ring space: poll HEAD every RING_POLL_CYCLES
                self._wait_until(lambda: self._refresh_head() > 0, timeout_cycles,
                                 "ring space", poll_cycles=RING_POLL_CYCLES)
                continue
            n = min(free, len(raws) - i, self.ring_size - self._tail)
            chunk = raws[i:i + n]
            self.backend.mem_write(self.ring.addr + self._tail * COMMAND_BYTES, b"".join(chunk))
            self._record.extend(chunk)
            self._tail = (self._tail + n) % self.ring_size
            self.backend.csr_write(queue_csr(self.queue, Csr.TAIL), self._tail)
            self.commands_submitted += n
            i += n

    def _ring_free(self) -> int:
        free = self.ring_size - 1 - (self._tail - self._head) % self.ring_size
        return free if free else self._refresh_head()

    def _refresh_head(self) -> int:
        self._head = self.backend.csr_read(queue_csr(self.queue, Csr.HEAD))
        return self.ring_size - 1 - (self._tail - self._head) % self.ring_size

    def synchronize(self, timeout_cycles: int = DEFAULT_TIMEOUT_CYCLES) -> int:
        """Wait until every launched command has retired.

        Appends a ``FENCE`` (with ``irq``) that writes a new sequence number to a fence word in
        DRAM and waits with :meth:`Backend.wait_irq` until the word holds it.

        Parameters
        ----------
        timeout_cycles : int
            Budget in device clock cycles.

        Returns
        -------
        int
            Cycles elapsed from the first :meth:`launch` since the previous synchronize to the
            completion (``CYCLES`` after minus before); 0 on the untimed model.

        Raises
        ------
        DeviceError
            If the device reported an error; the error is cleared first (the device keeps
            working, pending commands are dropped).
        DeviceTimeoutError
            If the fence did not complete in ``timeout_cycles``; the message has STATUS, HEAD,
            TAIL and the semaphores.
        """
        seq = (self._fence_seq + 1) & _MASK32 or 1
        self._fence_seq = seq
        fence = CommandList()
        fence.fence(addr=self._fence_word.addr, value=seq, irq=True)
        self.launch(fence, timeout_cycles=timeout_cycles)
        word = self._fence_word
        self._wait_until(lambda: int.from_bytes(word.read(4), "little") == seq,
                         timeout_cycles, "synchronize")
        self.backend.csr_write(Csr.IRQ_STATUS, IrqBit.FENCE)
        start = self._window_start or 0
        self._window_start = None
        return self.cycles() - start

    def _wait_until(self, done: Callable[[], bool], timeout_cycles: int, what: str,
                    poll_cycles: int | None = None) -> None:
        start = self.cycles()
        spent = 0  # lower bound of cycles waited, for backends whose counter does not move
        while True:
            if done():
                return
            self._check_error()
            elapsed = max(self.cycles() - start, spent)
            remaining = timeout_cycles - elapsed
            if remaining <= 0:
                raise DeviceTimeoutError(
                    f"{what}: no completion after {timeout_cycles} cycles; "
                    + ", ".join(f"{k}={v:#x}" for k, v in self.status().items()))
            step = remaining if poll_cycles is None else min(remaining, poll_cycles)
            if self.backend.wait_irq(step):
                # A fence interrupt: fences are detected through their DRAM word, so clear it
                # to let wait_irq wait again. An error is picked up by _check_error.
                self.backend.csr_write(Csr.IRQ_STATUS, IrqBit.FENCE)
                spent += 1
            else:
                spent += step

    def _check_error(self) -> None:
        rd = self.backend.csr_read
        if not rd(Csr.STATUS) & 2:
            return
        word, index, addr = rd(Csr.ERR_CODE), rd(Csr.ERR_CMD), rd(Csr.ERR_ADDR)
        raw_code, queue, opcode = word & 0xFF, (word >> 8) & 0xFF, (word >> 16) & 0xFF
        code: ErrorCode | int = (ErrorCode(raw_code) if raw_code in {c.value for c in ErrorCode}
                                 else raw_code)
        if queue == self.queue and index < len(self._record):
            desc = describe_command(self._record[index])
        else:
            desc = f"opcode {opcode:#04x}, not in this runtime's record"
        self.reset()
        raise DeviceError(code, queue, index, opcode, addr, desc)

    def run(self, commands: Iterable[Command | bytes],
            timeout_cycles: int = DEFAULT_TIMEOUT_CYCLES) -> int:
        """:meth:`launch` then :meth:`synchronize`; returns the cycles elapsed."""
        self.launch(commands, timeout_cycles=timeout_cycles)
        return self.synchronize(timeout_cycles)
