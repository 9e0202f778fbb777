"""Where a fuzz scenario lives in device DRAM and local memory (:class:`Layout`).

DRAM, from :data:`ARENA_BASE` (every address a stream mentions lies in ``[0, end)``, except
deliberately bad ones beyond ``dram_bytes``):

* one *queue region* of :data:`QUEUE_REGION` bytes per hardware queue: its ring (at the
  start, up to :data:`MAX_RING` commands), then private data;
* the *shared area* of :data:`SHARED_BYTES`: single-assignment slots that one queue stores
  and other queues load after a semaphore wait (the cross-queue handoffs);
* the *poison area* of :data:`POISON_BYTES` per queue: never touched by a valid command; a
  data bus fault covers it, and the commands meant to fail on it touch it;
* the *dump area*: per queue, its local partitions' initial pattern (loaded by the
  prologue) and their final contents (stored by the epilogue): the scratchpad partition,
  then the accumulator partition;
* the *VM area* (page-aligned, :data:`VM_QUEUE_BYTES` per queue): for a queue translated
  by a context (:mod:`hw.isa.vm`), its *fault page* (touched only by the command planted to
  page-fault), its root table and two level-0 tables;
* the *control ring* of the prologue and epilogue.

Local memory: each hardware queue owns a partition of :data:`SPAD_ROWS` scratchpad rows and
:data:`ACC_ROWS` accumulator rows (at ``q * depth / n_queues``), so that queues never race
on local rows; rows outside the partitions stay untouched (a campaign compares the whole
memories at the end of every batch).
"""

from __future__ import annotations

from dataclasses import dataclass

from hw.config import NPUConfig
from hw.isa import COMMAND_BYTES

__all__ = ["Layout", "ARENA_BASE", "QUEUE_REGION", "SHARED_BYTES", "POISON_BYTES", "MAX_RING",
           "VM_QUEUE_BYTES"]

ARENA_BASE = 0x1_0000
QUEUE_REGION = 0x8000       #: bytes per queue: ring + private data
MAX_RING = 64               #: commands
SHARED_BYTES = 0x8000
POISON_BYTES = 0x400        #: per queue
CONTROL_RING = 16           #: commands of the prologue/epilogue ring
SPAD_ROWS = 256             #: scratchpad rows per queue partition
ACC_ROWS = 128              #: accumulator rows per queue partition
VM_QUEUE_BYTES = 0x4000     #: per queue: fault page, root table, two level-0 tables


@dataclass(frozen=True)
class Layout:
    """Addresses of the fuzz arena for one configuration (see the module docstring)."""
    config: NPUConfig

    @property
    def n_queues(self) -> int:
        return self.config.n_queues

    def region(self, q: int) -> int:
        """First byte of queue ``q``'s region (its ring)."""
        return ARENA_BASE + q * QUEUE_REGION

    def private(self, q: int) -> tuple[int, int]:
        """Queue ``q``'s private data ``[lo, hi)``."""
        lo = self.region(q) + MAX_RING * COMMAND_BYTES
        return lo, self.region(q) + QUEUE_REGION

    @property
    def shared(self) -> tuple[int, int]:
        lo = ARENA_BASE + self.n_queues * QUEUE_REGION
        return lo, lo + SHARED_BYTES

    def poison(self, q: int) -> tuple[int, int]:
        lo = self.shared[1] + q * POISON_BYTES
        return lo, lo + POISON_BYTES

    @property
    def poison_all(self) -> tuple[int, int]:
        return self.poison(0)[0], self.poison(self.n_queues - 1)[1]

    @property
    def part_bytes(self) -> tuple[int, int]:
        """Bytes of one queue's scratchpad and accumulator partitions."""
        return (self.spad_part(0)[1] * self.config.spad_row_bytes,
                self.acc_part(0)[1] * self.config.acc_row_bytes)

    @property
    def dump(self) -> int:
        """Queue 0's partition images; queue ``q``'s start at :meth:`dump_of`."""
        return self.poison_all[1]

    def dump_of(self, q: int) -> tuple[int, int]:
        """DRAM addresses of queue ``q``'s scratchpad and accumulator partition images."""
        spad, acc = self.part_bytes
        base = self.dump + q * (spad + acc)
        return base, base + spad

    @property
    def vm_base(self) -> int:
        """First byte of the VM area (4 KiB-aligned)."""
        end = self.dump + self.n_queues * sum(self.part_bytes)
        return (end + 0xFFF) // 0x1000 * 0x1000

    def vm_of(self, q: int) -> tuple[int, int, tuple[int, int]]:
        """Queue ``q``'s fault page, root table and level-0 tables (physical pages)."""
        base = self.vm_base + q * VM_QUEUE_BYTES
        return base, base + 0x1000, (base + 0x2000, base + 0x3000)

    @property
    def control_ring(self) -> int:
        return self.vm_base + self.n_queues * VM_QUEUE_BYTES

    @property
    def end(self) -> int:
        """First byte after the arena (everything compared lies in ``[0, end)``)."""
        return self.control_ring + CONTROL_RING * COMMAND_BYTES

    def spad_part(self, q: int) -> tuple[int, int]:
        """Queue ``q``'s scratchpad rows ``[lo, hi)``."""
        lo = q * (self.config.spad_rows // self.n_queues)
        return lo, lo + min(SPAD_ROWS, self.config.spad_rows // self.n_queues)

    def acc_part(self, q: int) -> tuple[int, int]:
        lo = q * (self.config.acc_rows // self.n_queues)
        return lo, lo + min(ACC_ROWS, self.config.acc_rows // self.n_queues)

    def check(self) -> None:
        """Raise ``ValueError`` if the arena does not fit the configuration."""
        if self.end > self.config.dram_bytes:
            raise ValueError(f"the fuzz arena ends at {self.end:#x}, beyond the DRAM "
                             f"({self.config.dram_bytes:#x})")
        acc, spad = self.config.acc_rows, self.config.spad_rows
        if acc // self.n_queues < 96 or spad // self.n_queues < 128:
            raise ValueError("local memories too small for a partition per queue")
