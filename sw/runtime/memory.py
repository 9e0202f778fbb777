"""Device memory: a first-fit allocator over DRAM (or a stream's private arena) and the
buffers it hands out."""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from sw.runtime.errors import NPUError, OutOfMemoryError

if TYPE_CHECKING:
    from sw.runtime.device import Device
    from sw.runtime.streams import Stream

__all__ = ["AllocatorStats", "Allocator", "Buffer", "ArenaBuffer"]


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

    def reserve(self, addr: int, nbytes: int) -> None:
        """Allocate exactly ``[addr, addr + nbytes)`` (free it with :meth:`free`).

        Raises
        ------
        OutOfMemoryError
            If the range is not entirely free.
        """
        for start in self._starts:
            if start <= addr and addr + nbytes <= start + self._sizes[start]:
                self._take(start, addr, nbytes)
                self._live[addr] = nbytes
                return
        raise OutOfMemoryError(f"[{addr:#x}, {addr + nbytes:#x}) is not free")

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


class ArenaBuffer(Buffer):
    """A :class:`Buffer` inside a stream's private arena (:meth:`Stream.alloc` of a stream
    with a window). The window is freed when the stream is released after
    :meth:`Stream.destroy`: the buffer counts as freed then, and using or freeing it raises
    :class:`NPUError`."""

    def __init__(self, stream: Stream, addr: int, nbytes: int) -> None:
        super().__init__(stream.device, addr, nbytes)
        self._stream = stream

    @property
    def freed(self) -> bool:
        return self._freed or self._stream._region.freed

    def free(self) -> None:
        self._check_window()
        if self._freed:
            raise NPUError(f"buffer at {self.addr:#x} ({self.nbytes} bytes) freed twice")
        self._stream._arena.free(self.addr)
        self._freed = True

    def _check(self, offset: int, n: int) -> None:
        self._check_window()
        super()._check(offset, n)

    def _check_window(self) -> None:
        if self._stream._region.freed and not self._freed:
            raise NPUError(f"buffer at {self.addr:#x} lay in the window of the stream of "
                           f"queue {self._stream.queue}, which was destroyed: it was freed "
                           "with it")
