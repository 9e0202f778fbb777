"""The runtime's typed errors (every one an :class:`NPUError`) and its default time budget."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from hw.isa import ErrorCode

if TYPE_CHECKING:
    from sw.runtime.streams import Stream
    from sw.runtime.sync import BlockedCommand
    from sw.runtime.vm import Context

__all__ = ["NPUError", "DeviceError", "OutOfMemoryError", "UntimedCounterError",
           "ConfigMismatchError", "DeviceTimeoutError", "OutOfSemaphoresError",
           "CommandFieldError", "PageFaultError", "LocalMemoryConflictError",
           "ContextInUseError", "StreamDestroyedError", "DEFAULT_TIMEOUT_CYCLES"]

DEFAULT_TIMEOUT_CYCLES = 50_000_000  #: default budget of :meth:`Device.synchronize` (cycles)


class NPUError(Exception):
    """Base class of every error the runtime raises."""


class DeviceError(NPUError):
    """The device reported an error (``STATUS.error``) while executing a command.

    Parameters
    ----------
    code : ErrorCode
        What went wrong (``Q_ERR_CODE.code``, :class:`hw.isa.QueueErrorWord`); the plain
        ``int`` for a code :class:`ErrorCode` does not define.
    queue : int
        The queue that failed.
    command_index : int
        Index of the failing command since the queue's last reset (``Q_ERR_CMD``).
    opcode : int
        Opcode of the failing command (``Q_ERR_CODE.opcode``).
    address : int
        The offending address (``Q_ERR_ADDR``): DRAM byte address, local row, size or
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
        value = code.value if isinstance(code, ErrorCode) else code
        # opcode 0 and not BAD_SEM (a NOP's only error): the ring fetch failed (the ring's
        # registers, its slot's address or the bus), before the command was decoded
        what = ("could not be fetched from the ring" if opcode == 0
                and value != ErrorCode.BAD_SEM.value else "failed")
        super().__init__(
            f"queue {queue}: command #{command_index} ({command_description}) {what}: "
            f"{name} at {address:#x}")


class PageFaultError(DeviceError):
    """A DMA command of a stream in a :class:`~sw.runtime.vm.Context`, its ring fetch or its
    fence touched a virtual page that is not mapped, or lacks the permission
    (:mod:`hw.isa.vm`).

    Unlike other device errors the stream is *not* reset: its queue stays stopped on the
    faulted command until :meth:`Stream.resume` (after mapping the page: the command runs
    again from its start), :meth:`Stream.skip` (it retires without moving data) or
    :meth:`Stream.reset`. The other streams keep running.

    Attributes
    ----------
    kind : str
        ``"not_mapped"`` or ``"permission"``.
    virtual_address : int
        The first virtual byte the faulting burst would have moved (``Q_ERR_ADDR``).
    stream : Stream
        The faulted stream.
    """

    def __init__(self, code: ErrorCode, queue: int, command_index: int, opcode: int,
                 address: int, command_description: str, stream) -> None:
        super().__init__(code, queue, command_index, opcode, address, command_description)
        self.kind = "not_mapped" if code == ErrorCode.PAGE_NOT_MAPPED else "permission"
        self.virtual_address = address
        self.stream = stream


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


class OutOfSemaphoresError(NPUError):
    """Every semaphore of the runtime's pool is in use."""


class LocalMemoryConflictError(NPUError, ValueError):
    """A kernel launch would use scratchpad or accumulator rows that a kernel on another
    stream may be using at the same time (nothing orders the two): see
    :mod:`sw.runtime.local`. Nothing of the launch was written."""


class ContextInUseError(NPUError):
    """A virtual-memory context cannot be destroyed (:meth:`~sw.runtime.vm.Context.destroy`)
    while streams that are not destroyed are bound to it (their queues would translate
    through freed page tables), or while other contexts map physical pages it owns (they
    would keep reaching them after they were handed out again). Nothing was changed.

    Attributes
    ----------
    streams : list of Stream
        The live streams still bound to the context.
    shared : list of tuple of (Context, int, int)
        The runs of pages of other contexts that map the context's physical pages: the other
        context, the run's first virtual address there and its number of pages.
    """

    def __init__(self, message: str, streams: Iterable[Stream] = (),
                 shared: Iterable[tuple[Context, int, int]] = ()) -> None:
        super().__init__(message)
        self.streams = list(streams)
        self.shared = list(shared)


class StreamDestroyedError(NPUError):
    """A stream was used after :meth:`~sw.runtime.Stream.destroy` (its queue may serve
    another stream by now)."""


class CommandFieldError(NPUError, ValueError):
    """A command argument does not fit its field of the command layout (:mod:`hw.isa`).

    Raised by :class:`~sw.runtime.CommandList` from :func:`hw.isa.encode`'s check; a
    :class:`ValueError` too. The message names the command, the argument, the value and the
    field's range.
    """
