"""The CSR map of the NPU (AXI4-Lite, 32-bit registers, byte offsets) and the layout of every
packed register and trace entry: one :class:`~amaranth.lib.data.Struct` each. The CSR block
builds register values from these layouts; the functional model packs and the runtime unpacks
them with :func:`hw.isa.pack_fields` / :func:`hw.isa.unpack_fields`. Nothing packs a field by
hand anywhere else."""

from amaranth.lib import data

from hw.isa.commands import ErrorCode

__all__ = ["Csr", "CSR_ID_VALUE", "CSR_VERSION_VALUE", "IrqBit", "queue_csr", "sem_csr",
           "sem_reached", "sem_last_csr", "trace_csr", "MAX_QUEUES",
           "MAX_RING_SIZE", "ring_is_bad",
           "VersionWord", "CfgArray", "CfgBus", "CfgFeatures", "StatusWord", "ErrorWord",
           "QueueErrorWord", "TraceInfo", "SemLast", "TraceEntry", "VmWord", "ResumeWord",
           "CfgVm", "REGISTER_STRUCTS", "WRITE_STRUCTS"]

CSR_ID_VALUE = 0x4E505530       # "NPU0"
#: 2.0 (:class:`VersionWord`): the PERF_* registers moved into the counter block
CSR_VERSION_VALUE = 0x00020000


class Csr:
    """Byte offsets of the 32-bit CSRs on the AXI4-Lite ``csr`` port (12-bit address space).

    Packed registers have one layout each, below (:data:`REGISTER_STRUCTS`).

    Read-only identity and configuration: ``ID`` (:data:`CSR_ID_VALUE`), ``VERSION``
    (:class:`VersionWord`), ``CFG_ARRAY`` (:class:`CfgArray`), ``CFG_SPAD`` = spad_rows,
    ``CFG_ACC`` = acc_rows, ``CFG_BUS`` (:class:`CfgBus`), ``CFG_DRAM`` = dram_bytes,
    ``CFG_FEATURES`` (:class:`CfgFeatures`).

    Global status and control (``0x020..0x04C``):

    * ``STATUS`` (:class:`StatusWord`): busy (some queue holds unretired commands), error (some
      queue has an error latched).
    * ``ERR_CODE`` / ``ERR_CMD`` / ``ERR_ADDR``: the *first* error since it was last cleared
      (compatibility view of the per-queue registers): :class:`ErrorWord` (code, queue,
      opcode); index of the failing command (commands fetched from that queue since its
      last reset, from 0); the offending address (DRAM byte address, local row, semaphore id).
      Cleared by ``CONTROL`` or by a ``QUEUE_RESET`` of the queue it names.
    * ``IRQ_STATUS`` (write 1 to clear) and ``IRQ_ENABLE``: bits of :class:`IrqBit`; ``irq`` is
      high while ``IRQ_STATUS & IRQ_ENABLE`` is non-zero.
    * ``CYCLES_LO``/``CYCLES_HI``: free-running 64-bit cycle counter; reading ``CYCLES_LO``
      latches ``CYCLES_HI``.
    * ``CONTROL``: write bit 0 to reset every queue (as ``QUEUE_RESET`` with all bits), clear
      every error and zero the semaphores and their ``SEM_LAST`` records.
    * ``QUEUE_RESET`` (write-only): bit ``q`` resets queue ``q`` alone: its engine FIFOs and
      staged command are dropped (a command already inside an engine finishes but neither
      signals nor reports an error), ``HEAD := TAIL``, its command index restarts at 0 and
      its error latch is cleared. Semaphores and the other queues are not touched.
    * ``QUEUE_ERRORS`` / ``QUEUE_BUSY`` (read-only): bit ``q`` = queue ``q`` has an error
      latched / holds unretired commands.

    ``CFG_VM`` (``0x050``, :class:`CfgVm`, read-only): the TLB size (0: no virtual memory).
    ``0x054..0x07F`` are free (the 1.x ``PERF_*`` registers moved into the counter block).

    Command trace (``0x080..0x0BF``): one FIFO of ``trace_depth`` entries per engine, filled
    when the engine retires a command; engine ``e`` at ``TRACE_BASE + TRACE_STRIDE * e``:
    ``TRACE_INFO`` (:class:`TraceInfo`): valid, overflow, queue and command index of the oldest
    entry (valid = the FIFO is not empty; while it is empty, index and queue read 0;
    overflow = entries were dropped because the FIFO was full, sticky until ``CONTROL``);
    ``TRACE_START`` /
    ``TRACE_END``: low 32 bits of ``CYCLES`` when the engine took the command / pulsed
    ``done``; writing ``TRACE_POP`` drops the oldest entry.

    Per queue ``q`` at :func:`queue_csr` (``QUEUE_BASE + QUEUE_STRIDE * q``): ``RING_BASE``
    (32-byte aligned DRAM address), ``RING_SIZE`` (commands, a power of two from 2 to
    :data:`MAX_RING_SIZE`; a queue with another size, or with ``HEAD`` or ``TAIL`` outside
    its ring, fails its next fetch with ``BAD_SIZE``, :func:`ring_is_bad`; change
    ``RING_BASE``/``RING_SIZE`` only while the queue is idle: up to ``fetch_depth`` of its
    commands may have been read already), ``HEAD``
    (read-only, the next slot the command processor takes in: the slots from ``HEAD`` to
    ``TAIL`` are the device's, and it may have read up to ``fetch_depth`` of them ahead),
    ``TAIL`` (doorbell: the host writes the slot after its last command; it only moves forward
    around the ring: moved back over slots already handed over, the hardware, which may have
    read them ahead, can still run them, while the functional model, which reads nothing
    ahead, does not; take commands back with ``QUEUE_RESET``). The ring is empty when
    head == tail and holds at most ``RING_SIZE - 1`` commands. ``WINDOW_BASE`` /
    ``WINDOW_LIMIT``: the DRAM window ``[base, limit)`` the queue may touch (ring fetch, fence
    writes, DMA); ``WINDOW_LIMIT == 0`` means ``dram_bytes`` (the reset state: the whole DRAM).
    An access outside is a ``WINDOW`` error and nothing is written. ``Q_STATUS``
    (:class:`StatusWord`): busy, error latched. ``Q_ERR_CODE`` (:class:`QueueErrorWord`),
    ``Q_ERR_CMD``, ``Q_ERR_ADDR``: the queue's latched error. ``Q_FETCHED``: commands taken in
    (``HEAD`` advanced) since the queue's last reset.
    ``Q_VM`` (:class:`VmWord`): the queue's context (address space) for its DMA commands, see
    :mod:`hw.isa.vm` (0, the reset state and after ``CONTROL``: physical addresses; not
    changed by ``QUEUE_RESET``). ``Q_RESUME`` (:class:`ResumeWord`, write-only): resume or
    skip the queue's command that took a page fault (:mod:`hw.isa.vm`, *Page faults*).

    Performance counters (``CNT_BASE`` = ``0x500`` .. ``0x5CF``, just above the registers of
    :data:`MAX_QUEUES` queues): see :data:`COUNTER_NAMES` for the definitions. Every counter
    is free-running from reset (never cleared by ``CONTROL``), 32 bits wide and wraps modulo
    2**32, except the 64-bit cycle count; the difference of two snapshots taken less than
    2**32 cycles (bytes) apart is exact modulo 2**32.

    * ``CNT_SNAPSHOT`` (write-only, any value): copies every counter and ``CYCLES`` into the
      snapshot in one clock edge, so one snapshot is one instant of the device. Its write
      response comes :data:`hw.isa.SNAPSHOT_CYCLES` cycles later than another register's:
      the counter block writes the snapshot into its memory one counter a cycle, and a read
      issued meanwhile is not accepted until it is done.
      The write takes effect in the cycle ``s`` in which the CSR block accepts it (the cycle
      after both AW and W were taken); ``CNT_CYCLES`` then reads ``s`` (the value of
      ``CYCLES`` in that cycle) and every other counter holds what happened in the cycles
      ``c < s`` since reset (cycles, commands or bytes). The difference of snapshots at
      ``s1 < s2`` therefore covers exactly the cycles ``s1 <= c < s2``: those in which
      ``CYCLES`` reads ``s1`` .. ``s2 - 1`` (the edges a VCD tool counts, see
      :mod:`cosim.waves`), and ``CNT_CYCLES`` differs by ``s2 - s1``.
    * ``CNT_CYCLES_LO`` / ``CNT_CYCLES_HI``: ``CYCLES`` at the last snapshot (64-bit).
    * ``CNT_BYTES_READ``, ``CNT_BYTES_WRITTEN``, ``CNT_DMA_BUSY``, ``CNT_OVERLAP`` and, per
      engine ``e`` (index in :data:`ENGINE_NAMES`) at :func:`engine_counter_csr`
      (``CNT_ENGINE_BASE + CNT_ENGINE_STRIDE * e``): ``CNT_BUSY``, ``CNT_RETIRED`` and the
      stall counters at ``CNT_STALL + 4 * r`` for ``r`` the index in :data:`STALL_REASONS`.
      All read the last snapshot (0 before the first). A stall register of a pair that is not
      in :data:`ENGINE_STALLS` (e.g. ``matrix``/``dram_read``) always reads 0.

    Per TLB client ``t`` (index in :data:`hw.isa.vm.TLB_CLIENTS`: load, store, fetch) at
    ``CNT_TLB_BASE + CNT_TLB_STRIDE * t``: ``+0x0`` hits, ``+0x4`` misses, ``+0x8`` walk
    cycles, ``+0xC`` faults (the ``tlb.<client>.*`` counters).

    Layout: ``0x500`` SNAPSHOT, ``0x504``/``0x508`` CYCLES_LO/HI, ``0x50C`` reserved,
    ``0x510`` BYTES_READ, ``0x514`` BYTES_WRITTEN, ``0x518`` DMA_BUSY, ``0x51C`` OVERLAP; engine
    ``e`` (load, store, matrix, vector) at ``0x520 + 0x20 * e``: ``+0x00`` BUSY, ``+0x04``
    RETIRED, ``+0x08`` stall sem, ``+0x0C`` dram_read, ``+0x10`` dram_write, ``+0x14`` spad,
    ``+0x18`` acc, ``+0x1C`` reserved. :func:`counter_csr` maps a counter name to its
    register.

    Semaphore ``s`` reads at :func:`sem_csr`; a host write there sets it to the value written
    (initialisation, and tests that drive a semaphore across its 2**32 wrap); the semaphore
    unit applies no increment in the write's cycle (one taken before waits in its register and
    is applied in the next cycle, after the write). ``CONTROL``'s clear drops an increment
    taken and not yet applied (the queues' reset withdraws the others): the semaphores are 0
    after it.
    ``SEM_LAST_BASE + 4 * s`` (:class:`SemLast`): what last incremented it (read-only; zeroed
    by ``CONTROL``, not changed by a host write).

    Semaphores are 32-bit counters that wrap modulo 2**32. A wait for ``sem[s] >= target`` is a
    serial-number comparison (RFC 1982): it is satisfied when ``(sem[s] - target) mod 2**32 <
    2**31`` (:func:`hw.isa.sem_reached`), so it keeps working across the wrap as long as no
    waiter is more than 2**31 increments ahead of the semaphore.
    """
    ID = 0x000
    VERSION = 0x004
    CFG_ARRAY = 0x008
    CFG_SPAD = 0x00C
    CFG_ACC = 0x010
    CFG_BUS = 0x014
    CFG_DRAM = 0x018
    CFG_FEATURES = 0x01C
    STATUS = 0x020
    ERR_CODE = 0x024
    ERR_CMD = 0x028
    ERR_ADDR = 0x02C
    IRQ_STATUS = 0x030
    IRQ_ENABLE = 0x034
    CYCLES_LO = 0x038
    CYCLES_HI = 0x03C
    CONTROL = 0x040
    QUEUE_RESET = 0x044
    QUEUE_ERRORS = 0x048
    QUEUE_BUSY = 0x04C
    CFG_VM = 0x050

    TRACE_BASE = 0x080
    TRACE_STRIDE = 0x10
    TRACE_INFO = 0x0
    TRACE_START = 0x4
    TRACE_END = 0x8
    TRACE_POP = 0xC

    QUEUE_BASE = 0x100
    QUEUE_STRIDE = 0x40
    RING_BASE = 0x00
    RING_SIZE = 0x04
    HEAD = 0x08
    TAIL = 0x0C
    WINDOW_BASE = 0x10
    WINDOW_LIMIT = 0x14
    Q_STATUS = 0x18
    Q_ERR_CODE = 0x1C
    Q_ERR_CMD = 0x20
    Q_ERR_ADDR = 0x24
    Q_FETCHED = 0x28
    Q_VM = 0x2C
    Q_RESUME = 0x30

    CNT_BASE = 0x500
    CNT_SNAPSHOT = 0x500        #: write: snapshot every counter (reads 0)
    CNT_CYCLES_LO = 0x504
    CNT_CYCLES_HI = 0x508
    CNT_BYTES_READ = 0x510
    CNT_BYTES_WRITTEN = 0x514
    CNT_DMA_BUSY = 0x518
    CNT_OVERLAP = 0x51C
    CNT_ENGINE_BASE = 0x520
    CNT_ENGINE_STRIDE = 0x20
    CNT_BUSY = 0x00
    CNT_RETIRED = 0x04
    CNT_STALL = 0x08            #: + 4 * index in STALL_REASONS
    CNT_TLB_BASE = 0x5A0        #: per client of TLB_CLIENTS (hw.isa.vm), CNT_TLB_STRIDE apart
    CNT_TLB_STRIDE = 0x10
    CNT_TLB_HITS = 0x0
    CNT_TLB_MISSES = 0x4
    CNT_TLB_WALK_CYCLES = 0x8
    CNT_TLB_FAULTS = 0xC
    CNT_END = 0x5D0             #: first offset after the counter block

    SEM_BASE = 0x800
    SEM_LAST_BASE = 0xC00


class IrqBit:
    FENCE = 1 << 0
    ERROR = 1 << 1


def queue_csr(queue: int, reg: int) -> int:
    """Byte offset of register ``reg`` (e.g. :attr:`Csr.TAIL`) of command queue ``queue``."""
    return Csr.QUEUE_BASE + queue * Csr.QUEUE_STRIDE + reg


def sem_csr(sem: int) -> int:
    """Byte offset of the read-only value of semaphore ``sem``."""
    return Csr.SEM_BASE + 4 * sem


def sem_reached(value: int, target: int) -> bool:
    """Whether a semaphore holding ``value`` satisfies a wait for ``target``: ``(value - target)
    mod 2**32 < 2**31`` (serial-number arithmetic, RFC 1982 section 3.2), the one rule of the
    hardware, the functional model and the runtime."""
    return (value - target) % (1 << 32) < (1 << 31)


def sem_last_csr(sem: int) -> int:
    """Byte offset of the read-only record of what last incremented semaphore ``sem``."""
    return Csr.SEM_LAST_BASE + 4 * sem


def trace_csr(engine: int, reg: int) -> int:
    """Byte offset of trace register ``reg`` (e.g. :attr:`Csr.TRACE_INFO`) of engine
    ``engine`` (index in :data:`ENGINE_NAMES`)."""
    return Csr.TRACE_BASE + engine * Csr.TRACE_STRIDE + reg


#: Largest legal ``RING_SIZE`` (commands): a ring of 2**27 slots of 32 bytes spans the 32-bit
#: address space, so a slot's offset in its ring stays below 2**32 and ``RING_BASE`` plus it
#: below 2**33 (a slot past 2**32 is ``BAD_DRAM_ADDR``, its address reported mod 2**32).
MAX_RING_SIZE = 1 << 27


def ring_is_bad(ring_size: int, head: int, tail: int) -> bool:
    """Whether a queue with these ``RING_SIZE``, ``HEAD`` and ``TAIL`` registers is in a state
    no ring can be: ``RING_SIZE`` is not a power of two in ``[2, MAX_RING_SIZE]``, or ``HEAD``
    or ``TAIL`` lies outside the ring (``>= RING_SIZE``; ``HEAD`` can after ``RING_SIZE``
    shrank, or after a reset, which sets ``HEAD := TAIL``). Such a queue fails its next fetch
    with the ring error ``BAD_SIZE`` (opcode 0, ``ERR_ADDR`` = ``RING_BASE``; checked before
    the other ring checks) once ``HEAD != TAIL``; with ``HEAD == TAIL`` it is idle, whatever
    its ring registers, so a reset clears such an error for good. The one rule of the
    hardware (:class:`hw.cmdproc.FetchUnit`) and both models."""
    return (ring_size < 2 or ring_size > MAX_RING_SIZE or bool(ring_size & (ring_size - 1))
            or head >= ring_size or tail >= ring_size)


#: Most command queues the register map has room for: the queue registers
#: (``QUEUE_BASE + QUEUE_STRIDE * q``) end where the counter block starts. ``NPUConfig``
#: checks ``n_queues`` against this.
MAX_QUEUES = (Csr.CNT_BASE - Csr.QUEUE_BASE) // Csr.QUEUE_STRIDE



# -- packed registers: one layout each ------------------------------------------------------------

class VersionWord(data.Struct):
    """``VERSION`` (read-only): a runtime accepts a device of the same ``major``."""
    minor: 16
    major: 16


class CfgArray(data.Struct):
    """``CFG_ARRAY`` (read-only): array size, queues and semaphores. ``n_sems`` is the low 8 bits
    of :attr:`~hw.config.NPUConfig.n_sems` (256 reads 0)."""
    rows: 8
    cols: 8
    n_queues: 8
    n_sems: 8


class CfgBus(data.Struct):
    """``CFG_BUS`` (read-only): bus and row geometry."""
    axi_data_bytes: 8
    dma_outstanding: 8
    spad_row_bytes: 8
    acc_row_elems: 8


class CfgFeatures(data.Struct):
    """``CFG_FEATURES`` (read-only): optional hardware (:class:`~hw.config.NPUConfig`)."""
    mx: 1       #: the MX exponent stage (MX MATMULs, :mod:`hw.isa.formats`)
    _pad: 31


class StatusWord(data.Struct):
    """``STATUS`` (whole device) and ``Q_STATUS`` (one queue)."""
    busy: 1     #: holds commands not yet retired
    error: 1    #: an error is latched
    _pad: 30


class ErrorWord(data.Struct):
    """``ERR_CODE``: the first error since it was cleared, and the queue it came from."""
    code: ErrorCode
    queue: 8
    opcode: 8   #: opcode of the failing command (0 for a fetch error before decode)
    _pad: 8


class QueueErrorWord(data.Struct):
    """``Q_ERR_CODE``: the queue's latched error."""
    code: ErrorCode
    _pad0: 8
    opcode: 8
    _pad1: 8


class TraceInfo(data.Struct):
    """``TRACE_INFO``: the oldest entry of an engine's trace FIFO."""
    index: 24     #: command index in its queue, low 24 bits
    queue: 6
    overflow: 1   #: entries were dropped because the FIFO was full (sticky until ``CONTROL``)
    valid: 1      #: the FIFO is not empty


class SemLast(data.Struct):
    """``SEM_LAST_BASE + 4 * s``: what last incremented semaphore ``s``."""
    index: 24     #: command index in its queue, low 24 bits
    queue: 7
    valid: 1


class TraceEntry(data.Struct):
    """One retired engine command in an engine's trace FIFO (cycles are ``CYCLES[31:0]``);
    read through ``TRACE_INFO`` / ``TRACE_START`` / ``TRACE_END``."""
    index: 24
    queue: 8
    start: 32     #: cycle in which the engine took the command
    end: 32       #: cycle of the engine's ``done`` pulse


class VmWord(data.Struct):
    """``Q_VM``: the queue's context. ``enable`` clear: physical addresses (reset state)."""
    enable: 1
    _pad: 3
    asid: 8      #: address-space id: the TLB's tag
    root: 20     #: physical page number of the root (level-1) table


class ResumeWord(data.Struct):
    """``Q_RESUME`` (write-only): what to do with the queue's faulted command."""
    resume: 1    #: run it again from its start
    skip: 1      #: retire it without moving data (as a DMA of zero rows)
    _pad: 30


class CfgVm(data.Struct):
    """``CFG_VM`` (read-only): the translation hardware."""
    tlb_entries: 8   #: entries of each DMA channel's TLB (0: no virtual memory)
    _pad: 24


#: Every packed 32-bit register, by the :class:`Csr` name(s) it is read at.
REGISTER_STRUCTS = {
    "VERSION": VersionWord, "CFG_ARRAY": CfgArray, "CFG_BUS": CfgBus,
    "CFG_FEATURES": CfgFeatures, "STATUS": StatusWord,
    "Q_STATUS": StatusWord,
    "ERR_CODE": ErrorWord, "Q_ERR_CODE": QueueErrorWord, "TRACE_INFO": TraceInfo,
    "SEM_LAST": SemLast, "Q_VM": VmWord, "CFG_VM": CfgVm,
}
#: Packed write-only registers: ``Q_RESUME``.
WRITE_STRUCTS = {"Q_RESUME": ResumeWord}
