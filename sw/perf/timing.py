"""The cycle schedules of the performance model, on top of :mod:`hw.isa.timing`.

:mod:`hw.isa.timing` is the one home of engine timing: the busy cycles of MATMUL, REQUANT,
SOFTMAX and DMA commands and the AXI burst split, each derived from the engine's FSM and checked
against the RTL. Everything it defines is taken from it here. What the performance model needs
beyond busy cycles -- *when* inside a command an engine writes a local memory or requests the
bus, and the command processor's own sequences -- is stated below, from the same FSMs, with
the busy cycles as the anchor; nothing else in :mod:`sw.perf` holds a cycle formula.

Conventions: cycle ``t`` is the cycle in which an engine *takes* a command (its command
handshake); it is ``busy`` from ``t + 1`` to its ``done`` pulse inclusive, so ``done = t +
busy cycles``. Sources: :class:`hw.tile.MatrixEngine`, :class:`hw.vector.RequantEngine`,
:class:`hw.vector.SoftmaxEngine`, :class:`hw.dma.DMA`, :class:`hw.cmdproc.CommandProcessor`,
Amaranth's ``SyncFIFOBuffered``; each is checked cycle by cycle against the RTL
(``tests/sw/test_perf_engines.py`` in Amaranth's simulator, the engine traces in
``tests/cosim/test_perf_validation.py``).
"""

from __future__ import annotations

from hw.config import NPUConfig
from hw.isa import COMMAND_BYTES, ErrorCode, LocalMem, Opcode
from hw.isa.timing import (
    ADD_LATENCY,
    ELTWISE_CHECK_CYCLES,
    LN_NORM_LATENCY,
    LN_ROW_UNIT_CYCLES,
    MAX_BURST_BEATS,
    PAGE_BYTES,
    SOFTMAX_EXP_LATENCY,
    Burst,
    MatmulTimeline,
    dma_bursts,
    dma_error_busy_cycles,
    eltwise_busy_cycles,
    gelu_busy_cycles,
    ln_row_cycles,
    ln_stats_cycles,
    requant_busy_cycles,
    softmax_max_cycles,
    softmax_row_cycles,
)

__all__ = [
    "PAGE_BYTES", "MAX_BURST_BEATS", "Burst", "dma_bursts", "QUICK_RETIRE", "MatmulTimeline",
    "requant_done", "requant_write_cycles", "gelu_done", "eltwise_done", "eltwise_writes",
    "SOFTMAX_START", "softmax_row_cycles",
    "softmax_p_writes", "softmax_row_end", "DMA_FIRST_REQUEST", "DMA_DONE_AFTER_LAST",
    "dma_quiet_done", "fetch_beats", "fetch_burst_commands", "FETCH_ADDR_AFTER_IDLE",
    "BUFFER_AFTER_LAST_BEAT",
    "FENCE_CHECK_AFTER_IDLE", "FENCE_WRITE_AFTER_IDLE", "FENCE_SIGNAL_AFTER_B",
    "fifo_write_to_head",
]

#: ``done - t`` of a vector command that retires from its CHECK state (size zero or an
#: error): CHECK and RETIRE.
QUICK_RETIRE = requant_busy_cycles(NPUConfig(), 0)


# -- matrix engine --------------------------------------------------------------------------------
# The matrix engine's schedule (handshakes, done pulses, accumulator writes of overlapping
# MATMULs) is :class:`hw.isa.timing.MatmulTimeline` itself.


# -- vector unit: requantization ---------------------------------------------------------------

def requant_done(config: NPUConfig, n_rows: int, row_scale: bool) -> int:
    """``done - t`` of a REQUANT of ``n_rows > 0`` rows
    (:func:`hw.isa.timing.requant_busy_cycles`)."""
    return requant_busy_cycles(config, n_rows, row_scale=row_scale)


def requant_write_cycles(config: NPUConfig, n_rows: int, row_scale: bool) -> list[tuple[int, int]]:
    """Scratchpad write cycles of a REQUANT as ``[start, end)`` offsets from ``t``: row ``i`` is
    written :data:`hw.isa.timing.REQUANT_LATENCY` cycles after its accumulator read, and the
    reads run one per cycle, so the writes are the last ``n_rows`` cycles before ``done``. With
    ``flags.row_scale`` a row is read every other cycle (its two passes through the shared
    multiplier; the scale-row reads take cycles in between) and written
    :data:`hw.isa.timing.REQUANT_ROW_SCALE_LATENCY` cycles later: every other cycle, the last
    in the cycle before ``done``."""
    done = requant_done(config, n_rows, row_scale)
    if not row_scale:
        return [(done - n_rows, done)]
    return [(w, w + 1) for w in range(done - 2 * n_rows + 1, done, 2)]


def gelu_done(config: NPUConfig, n_rows: int) -> int:
    """``done - t`` of a GELU of ``n_rows > 0`` rows (:func:`hw.isa.timing.gelu_busy_cycles`);
    its scratchpad writes are those of a row-scaled REQUANT ending at this ``done``: every
    other cycle, the last in the cycle before ``done``."""
    return gelu_busy_cycles(config, n_rows)


# -- vector unit: ADD and LAYERNORM ----------------------------------------------------------

#: Offset from ``t`` of the first cycle of the element-wise engine's first phase (after its
#: checks).
_ELTWISE_START = 1 + ELTWISE_CHECK_CYCLES


def eltwise_done(config: NPUConfig, opcode: int, n_rows: int, n_blocks: int, *,
                 error: bool = False) -> int:
    """``done - t`` of an ADD or LAYERNORM (:func:`hw.isa.timing.eltwise_busy_cycles`): one
    that runs, fails (``error``) or is of size zero."""
    return eltwise_busy_cycles(config, opcode, n_rows, n_blocks, error=error)


def eltwise_writes(config: NPUConfig, opcode: int, n_rows: int, n_blocks: int) -> list[int]:
    """Offsets from ``t`` of the scratchpad writes of an ADD or LAYERNORM that runs, one row
    each (:class:`hw.vector.EltwiseEngine`): ADD writes element block ``e`` (row-major)
    :data:`hw.isa.timing.ADD_LATENCY` cycles after its first read, which is in cycle ``2e`` of
    the ADD phase; LAYERNORM writes block ``b`` of row ``r``
    :data:`hw.isa.timing.LN_NORM_LATENCY` cycles after its first read in cycle ``4b`` of the
    row's normalisation phase, which follows the statistics phase and the row unit."""
    if opcode == Opcode.LAYERNORM.value:
        out = []
        row = ln_row_cycles(n_blocks)
        norm = ln_stats_cycles(n_blocks) + LN_ROW_UNIT_CYCLES
        for r in range(n_rows):
            first = _ELTWISE_START + r * row + norm + LN_NORM_LATENCY
            out.extend(first + 4 * b for b in range(n_blocks))
        return out
    first = _ELTWISE_START + ADD_LATENCY
    return [first + 2 * e for e in range(n_rows * n_blocks)]


# -- vector unit: softmax ---------------------------------------------------------------------

#: Offset from ``t`` of the first row's ROW_START state (after CHECK).
SOFTMAX_START = 2


def softmax_p_writes(config: NPUConfig, n_blocks: int) -> tuple[int, int]:
    """Scratchpad (P block) write cycles of one row as ``[start, end)`` offsets from the row's
    ROW_START cycle: ROW_START 1 and MAX_READ (:func:`hw.isa.timing.softmax_max_cycles`), then
    EXP_READ reads a block per cycle and writes block ``b``
    :data:`hw.isa.timing.SOFTMAX_EXP_LATENCY` cycles after its read."""
    first_read = 1 + softmax_max_cycles(config, n_blocks)
    return first_read + SOFTMAX_EXP_LATENCY, first_read + n_blocks + SOFTMAX_EXP_LATENCY


def softmax_row_end(config: NPUConfig, n_blocks: int) -> int:
    """Offset of the ROW_END cycle from ROW_START (the row's last cycle when it does not
    wait); a row that completes a reciprocal row (every ``cols``-th row and the last) writes
    the accumulator there and waits for its write port while the matrix engine writes."""
    return softmax_row_cycles(config, n_blocks) - 1


# -- DMA -----------------------------------------------------------------------------------------

#: Offset from ``t`` of the first cycle with ARVALID/AWVALID (Check-shape, Check-range).
DMA_FIRST_REQUEST = 3
#: ``done`` comes this many cycles after the last R beat (load) or the last B response (store).
DMA_DONE_AFTER_LAST = 2


def dma_quiet_done(config: NPUConfig, body, mem: LocalMem, error: ErrorCode,
                   window: tuple[int, int], translate: bool = False) -> int | None:
    """``done - t`` of a DMA that moves nothing -- size zero or an error found by its checks
    (:func:`hw.isa.timing.dma_error_busy_cycles`) -- or None if it transfers (also with
    ``AXI_ERROR`` and with a page fault, both found during the transfer)."""
    if error in _TRANSFERS and body.n_rows and body.row_bytes:
        return None
    return dma_error_busy_cycles(config, error, body.dram_addr, body.dram_stride,
                                 body.row_bytes, body.n_rows, body.local_row,
                                 body.local_stride, mem, window=window, translate=translate)


_TRANSFERS = (ErrorCode.NONE, ErrorCode.AXI_ERROR, ErrorCode.PAGE_NOT_MAPPED,
              ErrorCode.PAGE_PERMISSION)


# -- command processor -----------------------------------------------------------------------

def fetch_beats(config: NPUConfig) -> int:
    """Beats of one command in a fetch burst (:data:`hw.isa.COMMAND_BYTES` per command)."""
    return COMMAND_BYTES // config.axi_data_bytes


def fetch_burst_commands(depth: int, buffered: int, fhead: int, tail: int, ring_size: int,
                         slot: int, window_limit: int, dram_bytes: int, single: bool,
                         translate: bool = False) -> int:
    """Commands one fetch burst reads (:class:`hw.cmdproc.FetchUnit`'s FETCH_CHECK, after
    the first slot passed its checks): the least of the free buffer entries (``depth -
    buffered``), the commands before ``TAIL`` (``(tail - fhead) mod ring_size``), the slots
    before the end of the ring, those before the window's limit and the end of the DRAM
    (``(limit - slot) // 32``), those before the next 4 KiB boundary (AXI4, ARM IHI 0022,
    A3.4.1), and 1 while ``single`` (after a failed burst of several commands).

    ``fhead`` is the first slot (``HEAD`` plus the buffered commands), ``slot`` its address,
    ``window_limit`` the window's limit as a byte address (``2**32`` for none). A
    ``translate``-ing queue's ring is virtual (:mod:`hw.isa.vm`): neither the window nor the
    DRAM's end limits it."""
    if single:
        return 1
    if translate:
        window_limit = dram_bytes = slot + depth * COMMAND_BYTES
    return min(depth - buffered, (tail - fhead) & (ring_size - 1), ring_size - fhead,
               (window_limit - slot) // COMMAND_BYTES, (dram_bytes - slot) // COMMAND_BYTES,
               (PAGE_BYTES - slot % PAGE_BYTES) // COMMAND_BYTES)


#: The fetch FSM leaves IDLE in cycle ``c``: FETCH_CHECK in ``c + 1``, ARVALID from ``c + 2``.
FETCH_ADDR_AFTER_IDLE = 2
#: A command is in its queue's prefetch buffer the cycle after its last R beat (the FSM is in
#: IDLE the cycle after the burst's last beat); the loader may move it into the stage then,
#: and it is in the stage the cycle after.
BUFFER_AFTER_LAST_BEAT = 1
#: A fence picked in IDLE in cycle ``c``: FENCE_CHECK in ``c + 1`` (the timestamp is ``CYCLES``
#: then), AWVALID/WVALID from ``c + 2``.
FENCE_CHECK_AFTER_IDLE = 1
FENCE_WRITE_AFTER_IDLE = 2
#: A fence that signals offers its semaphore increment from this many cycles after its B
#: handshake (FENCE_SIGNAL) and completes (``fence_done``, ``fence_irq``) in the cycle the
#: semaphore unit's port takes it; one without a signal completes in the B handshake's cycle.
FENCE_SIGNAL_AFTER_B = 1


def fifo_write_to_head(depth: int) -> int:
    """Cycles from writing a command into an empty queue of an engine's store to its being
    the head (:class:`hw.cmdproc.EngineQueue`: the count register, then an asynchronous read
    of the store), for every ``depth``."""
    return 1
