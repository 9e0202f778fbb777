"""Engine timing, in cycles, as functions of a command and the :class:`~hw.config.NPUConfig`:
the one definition that the planner, the tests and the performance model use.

Pure Python (integer arithmetic only, no Amaranth at call time); every formula is derived
from the engine's FSM, named state by state, and checked for exact equality against the RTL
block in Amaranth's simulator over ranges of sizes on several array sizes
(``tests/hw/test_timing.py``; the DMA on a register-exact transcription of the co-simulation
DRAM, ``tests/hw/test_dma_timing.py``) and, one command of each kind, against the
``busy.<engine>`` counters of the Verilator NPU with ``cosim/tb/dram.sv`` on 8x8 and 4x4
(``tests/cosim/test_npu_rtl.py::test_engine_timing_on_rtl``).

What is counted
---------------
Every ``*_busy_cycles`` function returns the cycles an engine's ``busy`` is high for one
command: **from the cycle after the command handshake (``cmd.valid & cmd.ready``) to its
``done`` pulse, inclusive** -- exactly what the ``busy.<engine>`` counter adds
(:data:`hw.isa.COUNTER_NAMES`). An engine takes a command only in its idle state, which it
enters in the cycle after ``done``; so a command that is waiting when the previous one
finishes is accepted :data:`ACCEPT_CYCLES` cycle later, and back-to-back commands start every
``busy + ACCEPT_CYCLES`` cycles. ``done`` comes one cycle after the command's last write
(engines) or two cycles after its last bus beat (DMA). Every formula covers three cases:

* a successful command;
* a command of size zero (``m``, ``n_rows``, ``n_blocks`` or ``row_bytes`` 0): it checks nothing
  else and retires without error;
* a failing command (``error`` given): it retires without moving data.

DMA timing is given under the *ideal* DRAM of the co-simulation (``cosim/tb/dram.sv``): read
bursts queued (16, or more when ``dma_outstanding`` needs them) and answered in order, the first
beat 3 cycles after the AR handshake, then one beat per cycle, one idle cycle between bursts
unless the last beat of a burst is held; writes one burst at a time (AW accepted in the idle
state, then the W beats, then B for one cycle). On the NPU the DMA reaches that DRAM through
:class:`hw.bus.arbiter.AXI4Arbiter`, which adds no cycle on an idle port (its write grant
overlaps the DRAM's response state); but it shares the port with the command fetch, and an
interleaved fetch burst delays the DMA, which these functions do not model; neither do they
model a local write denied by a higher-priority writer (``stall.load_spad`` /
``stall.load_acc``, one cycle each). The DMA's formulas live in :mod:`hw.isa.dma_timing` and
are re-exported here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hw.isa.commands import CommandView, ErrorCode, Opcode, decode
from hw.isa.dma_timing import *  # noqa: F403
from hw.isa.dma_timing import __all__ as _dma
from hw.isa.dma_timing import dma_busy_cycles
from hw.isa.numerics import SOFTMAX_RECIP_BITS

if TYPE_CHECKING:
    from hw.config import NPUConfig

__all__ = [
    "ACCEPT_CYCLES", "matmul_busy_cycles", "requant_busy_cycles", "softmax_busy_cycles",
    "softmax_row_cycles", "VECTOR_MUL_LATENCY", "REQUANT_LATENCY", "REQUANT_ROW_SCALE_LATENCY",
    "SOFTMAX_EXP_LATENCY", "command_busy_cycles", *_dma,
]

#: Cycles from an engine's ``done`` to the handshake of a command that is already waiting (the
#: idle state, in which ``cmd.ready`` is high): back-to-back commands start every
#: ``busy + ACCEPT_CYCLES`` cycles.
ACCEPT_CYCLES = 1

#: Busy cycles of a compute command that retires without running: the check state, then the
#: retire state (``done``), in every engine (matrix, requant, softmax).
_CHECK_RETIRE = 2


# -- matrix engine --------------------------------------------------------------------------------

def matmul_busy_cycles(config: NPUConfig, m: int, *, error: bool = False) -> int:
    """Busy cycles of one MATMUL of ``m`` activation rows (:class:`hw.tile.MatrixEngine`).

    FSM states (``hw/tile/matrix_engine.py``): ``CHECK`` 1; ``LOAD_WEIGHTS`` ``rows`` (one
    weight row read per cycle); ``STREAM_ROWS`` ``m`` (one activation row per cycle);
    ``DRAIN`` ``1 + (rows + cols - 1) + 1`` (scratchpad read latency, the array's latency from
    the first row in to the last column out, the accumulator write of the last row);
    ``RETIRE`` 1 (``done``). Total ``m + 2 * rows + cols + 3``; ``flags.accumulate`` and
    ``flags.transpose`` change nothing.

    ``m == 0`` and a failing command (``error``: ``BAD_OPCODE``, ``BAD_SIZE``,
    ``BAD_LOCAL_ADDR``) take ``CHECK`` and ``RETIRE``: 2.
    """
    if error or m == 0:
        return _CHECK_RETIRE
    rows, cols = config.rows, config.cols
    drain = 1 + (rows + cols - 1) + 1
    return 1 + rows + m + drain + 1


# -- vector unit ----------------------------------------------------------------------------------

#: Cycles from a request to the vector unit's shared multiplier to its result
#: (:class:`hw.vector.RoundingMultiplier`: operand registers, partial products, their sum, the
#: rounding shift; one register each).
VECTOR_MUL_LATENCY = 4
#: REQUANT: cycles from a data row's accumulator read to its scratchpad write: read latency 1,
#: the multiplier (the bias add goes into its operand registers), clamp and ReLU 1.
REQUANT_LATENCY = 1 + VECTOR_MUL_LATENCY + 1
#: REQUANT with ``flags.row_scale``: read latency 1, the row-scale pass through the multiplier
#: and its 33-bit clamp, the second pass and the int8 clamp and ReLU.
REQUANT_ROW_SCALE_LATENCY = 1 + 2 * (VECTOR_MUL_LATENCY + 1)
#: SOFTMAX: cycles from a score block's read in the exponent pass to its P write: read latency 1,
#: the multiplier (its operand registers take ``max - s``), table/shift and mask 1.
SOFTMAX_EXP_LATENCY = 1 + VECTOR_MUL_LATENCY + 1


def requant_busy_cycles(config: NPUConfig, n_rows: int, *, row_scale: bool = False,
                        error: bool = False) -> int:
    """Busy cycles of one REQUANT of ``n_rows`` rows (:class:`hw.vector.RequantEngine`).

    FSM states (``hw/vector/requant_engine.py``): ``CHECK`` 1; ``READ_PARAMS`` 3 (bias,
    multiplier, shift rows); ``READ_ROWS`` ``n_rows`` (one row read per cycle), with
    ``flags.row_scale`` ``2 * n_rows`` (each row passes through the shared multiplier twice,
    so a row is read every other cycle; the scale-row read before each group of ``cols`` rows
    takes one of the cycles in between); ``DRAIN`` :data:`REQUANT_LATENCY` = 6
    (:data:`REQUANT_ROW_SCALE_LATENCY` = 11 with ``flags.row_scale``); ``RETIRE`` 1. Total
    ``n_rows + 11``, with ``flags.row_scale`` ``2 * n_rows + 16``.

    ``n_rows == 0`` and a failing command (``error``) take ``CHECK`` and ``RETIRE``: 2.
    """
    if error or n_rows == 0:
        return _CHECK_RETIRE
    if row_scale:
        return 1 + 3 + 2 * n_rows + REQUANT_ROW_SCALE_LATENCY + 1
    return 1 + 3 + n_rows + REQUANT_LATENCY + 1


def softmax_row_cycles(config: NPUConfig, n_blocks: int) -> int:
    """Cycles of one score row of a SOFTMAX of ``n_blocks`` blocks when its reciprocal write
    does not wait: ``2 * n_blocks + 45``.

    FSM states (``hw/vector/softmax_engine.py``): ``ROW_START`` 1; ``MAX_READ``
    ``n_blocks + 2`` (a read per cycle, the last block's data, then the max register);
    ``EXP_READ`` ``n_blocks + 6`` (a read per cycle and the exponent pipeline,
    :data:`SOFTMAX_EXP_LATENCY` = 6 cycles from the last read to the last P write, which is in
    the state's last cycle); ``DIV_START`` 1; ``DIVIDE`` ``SOFTMAX_RECIP_BITS + 2`` (one
    quotient bit per cycle of the ``SOFTMAX_RECIP_BITS + 1``-bit restoring divider, then the
    reciprocal latch); ``ROW_END`` 1 (plus one per cycle its reciprocal-row write waits for
    the accumulator port).
    """
    return 1 + (n_blocks + 2) + (n_blocks + SOFTMAX_EXP_LATENCY) + 1 + (SOFTMAX_RECIP_BITS + 2) + 1


def softmax_busy_cycles(config: NPUConfig, n_rows: int, n_blocks: int, *, error: bool = False,
                        acc_write_waits: int = 0) -> int:
    """Busy cycles of one SOFTMAX of ``n_rows`` score rows of ``n_blocks`` blocks
    (:class:`hw.vector.SoftmaxEngine`): ``CHECK`` 1, :func:`softmax_row_cycles` per row,
    ``RETIRE`` 1, so ``2 + n_rows * (2 * n_blocks + 45)``.

    ``acc_write_waits`` is the number of cycles the reciprocal-row writes (one after every
    ``cols`` rows and after the last) wait in ``ROW_END`` because the matrix engine writes the
    accumulator in the same cycle (``stall.vector.acc``; 0 when no MATMUL runs alongside).
    ``n_rows == 0``, ``n_blocks == 0`` and a failing command (``error``) take 2.
    """
    if error or n_rows == 0 or n_blocks == 0:
        return _CHECK_RETIRE
    return 1 + n_rows * softmax_row_cycles(config, n_blocks) + acc_write_waits + 1


def command_busy_cycles(config: NPUConfig, command: bytes | CommandView,
                        error: ErrorCode = ErrorCode.NONE, *, window: tuple[int, int] = (0, 0),
                        acc_write_waits: int = 0) -> int:
    """Busy cycles of one encoded command (``bytes`` or a decoded :class:`hw.isa.CommandView`)
    on its engine, given the error it retires with: MATMUL, REQUANT, SOFTMAX, DMA_LOAD,
    DMA_STORE (see the per-engine functions).

    Raises
    ------
    ValueError
        For an opcode that no engine runs (NOP, FENCE, WAIT, SIGNAL, BARRIER: the command
        processor's own) or an unknown opcode.
    """
    view = decode(command) if isinstance(command, bytes | bytearray) else command
    op, flags, failed = view.header.opcode, view.header.flags, ErrorCode(error) != ErrorCode.NONE
    if op == Opcode.MATMUL:
        return matmul_busy_cycles(config, view.body.matmul.m, error=failed)
    if op == Opcode.REQUANT:
        return requant_busy_cycles(config, view.body.requant.n_rows,
                                   row_scale=bool(flags.row_scale), error=failed)
    if op == Opcode.SOFTMAX:
        b = view.body.softmax
        return softmax_busy_cycles(config, b.n_rows, b.n_blocks, error=failed,
                                   acc_write_waits=acc_write_waits)
    if op in (Opcode.DMA_LOAD, Opcode.DMA_STORE):
        return dma_busy_cycles(config, op, view.body.dma, error, window=window)
    raise ValueError(f"opcode {op!r} does not run on an engine")
