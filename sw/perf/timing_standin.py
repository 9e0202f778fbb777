"""Engine timing of the NPU, in clock cycles, as functions of a command and the configuration.

This is the one place of the performance model where the cycle formulas of the engines live
(the MATMUL, REQUANT, SOFTMAX and DMA sequencers, the command processor's fetch and fence
sequences, the command FIFOs, the AXI burst split). It is a stand-in for ``hw.isa.timing``
(being written on another branch) and is meant to be swapped for it: nothing else in
:mod:`sw.perf` holds an engine formula.

Conventions: cycle ``t`` is the cycle in which an engine *takes* a command (its command
handshake); an engine is ``busy`` from ``t + 1`` to its ``done`` pulse, inclusive (see
:data:`hw.isa.COUNTER_NAMES`). Offsets below are ``done - t``.

Sources (the RTL is the specification): :class:`hw.tile.MatrixEngine` (``command_cycles``),
:class:`hw.vector.RequantEngine`, :class:`hw.vector.SoftmaxEngine`, :class:`hw.dma.DMA`
("Throughput and latency" and its control FSM), :class:`hw.cmdproc.CommandProcessor` (fetch
FSM) and Amaranth's ``SyncFIFOBuffered``; every figure is checked cycle by cycle against the
RTL's command trace in ``tests/cosim/test_perf_validation.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from hw.config import NPUConfig
from hw.isa import COMMAND_BYTES

__all__ = [
    "PAGE_BYTES", "MAX_BURST_BEATS", "QUICK_RETIRE", "matmul_done", "matmul_write_start",
    "requant_done", "requant_write_cycles", "SOFTMAX_START", "softmax_row_cycles",
    "softmax_p_writes", "softmax_row_end", "DMA_FIRST_REQUEST", "DMA_DONE_AFTER_LAST",
    "dma_search_done", "Burst", "dma_bursts", "fetch_beats", "FETCH_ADDR_AFTER_IDLE",
    "DECODE_AFTER_LAST_BEAT", "FENCE_CHECK_AFTER_IDLE", "FENCE_WRITE_AFTER_IDLE",
    "fifo_write_to_head",
]

#: An AXI4 burst must not cross a 4 KiB boundary (ARM IHI 0022, A3.4.1).
PAGE_BYTES = 4096
#: Longest AXI4 INCR burst (AxLEN is 8 bits).
MAX_BURST_BEATS = 256

#: ``done - t`` of a command that retires from its CHECK state: a MATMUL/REQUANT with zero
#: rows or a local-row error, a SOFTMAX with zero rows or blocks or an error, a DMA with zero
#: length or a ``BAD_SIZE``/``MISALIGNED`` error (accept, check, retire).
QUICK_RETIRE = 2


# -- matrix engine --------------------------------------------------------------------------------

def matmul_done(config: NPUConfig, m: int) -> int:
    """``done - t`` of a MATMUL of ``m > 0`` rows: ``MatrixEngine.command_cycles - 1``
    (check 1, weight reads ``rows``, activation reads ``m``, read latency 1, array
    ``rows + cols - 1``, write-back 1, retire 1)."""
    return 2 * config.rows + config.cols + m + 3


def matmul_write_start(config: NPUConfig, m: int) -> int:
    """Offset from ``t`` of the first accumulator write of a MATMUL; it writes one row per
    cycle for ``m`` cycles and retires in the cycle after the last write."""
    return matmul_done(config, m) - m


# -- vector unit: requantization ---------------------------------------------------------------

def requant_done(config: NPUConfig, n_rows: int, row_scale: bool) -> int:
    """``done - t`` of a REQUANT of ``n_rows > 0`` rows: ``n_rows + 10``, plus one scale-row
    read per ``cols`` rows with ``flags.row_scale`` (accept 1, check 1, parameter reads 3,
    row reads, pipeline 5, retire 1)."""
    groups = -(-n_rows // config.cols) if row_scale else 0
    return n_rows + groups + 10


def requant_write_cycles(config: NPUConfig, n_rows: int, row_scale: bool) -> list[tuple[int, int]]:
    """Scratchpad write cycles of a REQUANT as ``[start, end)`` offsets from ``t``: row ``i`` is
    read 5 cycles after the parameters and written 5 cycles after its read; with
    ``flags.row_scale`` a scale-row read precedes every group of ``cols`` rows."""
    first_read = 5
    if not row_scale:
        return [(first_read + 5, first_read + 5 + n_rows)]
    out, read = [], first_read
    for g0 in range(0, n_rows, config.cols):
        n = min(config.cols, n_rows - g0)
        read += 1                                  # the group's scale row
        out.append((read + 5, read + 5 + n))
        read += n
    return out


# -- vector unit: softmax ---------------------------------------------------------------------

#: Offset from ``t`` of the first row's ROW_START state (accept, check).
SOFTMAX_START = 2


def softmax_row_cycles(n_blocks: int) -> int:
    """Cycles of one score row without waiting: ROW_START 1, MAX_READ ``n_blocks + 2``,
    EXP_READ ``n_blocks + 4``, DIV_START 1, DIVIDE 34, ROW_END 1."""
    return 2 * n_blocks + 43


def softmax_p_writes(n_blocks: int) -> tuple[int, int]:
    """Scratchpad (P block) write cycles of one row as ``[start, end)`` offsets from the row's
    ROW_START cycle: the exponent pipeline writes block ``b`` 4 cycles after its read."""
    return n_blocks + 7, 2 * n_blocks + 7


def softmax_row_end(n_blocks: int) -> int:
    """Offset of the ROW_END cycle from ROW_START; a row that completes a reciprocal row
    (every ``cols``-th row and the last) writes the accumulator there and waits for its write
    port, one cycle per cycle the matrix engine writes."""
    return softmax_row_cycles(n_blocks) - 1


# -- DMA -----------------------------------------------------------------------------------------

#: Offset from ``t`` of the first cycle with ARVALID/AWVALID (check-shape, check-range, start).
DMA_FIRST_REQUEST = 3
#: ``done`` comes this many cycles after the last R beat (load) or the last B response (store).
DMA_DONE_AFTER_LAST = 2


def dma_search_done(first_bad_row: int) -> int:
    """``done - t`` of a DMA with a range error whose first bad row is ``first_bad_row``: the
    error path searches one row per cycle (check-shape, check-range, search, done)."""
    return 4 + first_bad_row


@dataclass(frozen=True)
class Burst:
    """One AXI INCR burst of a DMA transfer.

    Attributes
    ----------
    row : int
        DRAM row of the transfer it belongs to.
    first_beat : int
        Index of its first beat within the row's beats.
    beats : int
        Beats (AxLEN + 1).
    row_beats : int
        Beats of the whole row (the row's bytes from its first byte aligned down to its last
        byte aligned up).
    """
    row: int
    first_beat: int
    beats: int
    row_beats: int


def dma_bursts(config: NPUConfig, dram_addr: int, dram_stride: int, row_bytes: int,
               n_rows: int) -> list[Burst]:
    """The AXI bursts of a checked DMA transfer, in issue order (``hw.dma._BurstGen``): each
    DRAM row from its first byte aligned down to a beat, split so that a burst has at most
    :data:`MAX_BURST_BEATS` beats and never crosses a :data:`PAGE_BYTES` boundary; rows are
    never merged."""
    beat = config.axi_data_bytes
    page_beats = PAGE_BYTES // beat
    out = []
    for r in range(n_rows):
        addr = dram_addr + r * dram_stride
        total = (addr % beat + row_bytes + beat - 1) // beat
        beat_index = (addr // beat) % page_beats
        done = 0
        while done < total:
            n = min(total - done, MAX_BURST_BEATS, page_beats - beat_index)
            out.append(Burst(r, done, n, total))
            done += n
            beat_index = (beat_index + n) % page_beats
    return out


# -- command processor -----------------------------------------------------------------------

def fetch_beats(config: NPUConfig) -> int:
    """Beats of one command fetch (one INCR burst of :data:`hw.isa.COMMAND_BYTES`)."""
    return COMMAND_BYTES // config.axi_data_bytes


#: The fetch FSM leaves IDLE in cycle ``c``: FETCH_CHECK in ``c + 1``, ARVALID from ``c + 2``.
FETCH_ADDR_AFTER_IDLE = 2
#: DECODE is the cycle after the last R beat; the command is in its stage the cycle after.
DECODE_AFTER_LAST_BEAT = 1
#: A fence picked in IDLE in cycle ``c``: FENCE_CHECK in ``c + 1`` (the timestamp is ``CYCLES``
#: then), AWVALID/WVALID from ``c + 2``.
FENCE_CHECK_AFTER_IDLE = 1
FENCE_WRITE_AFTER_IDLE = 2


def fifo_write_to_head(depth: int) -> int:
    """Cycles from writing an entry into an empty per-queue command FIFO to its being readable
    (``r_rdy``): Amaranth's ``SyncFIFOBuffered`` adds an output register behind its memory
    (2), except for depth 1, which is one register (1)."""
    return 1 if depth == 1 else 2
