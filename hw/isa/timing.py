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

from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple

from hw.isa.commands import CommandView, ErrorCode, Opcode, decode
from hw.isa.dma_timing import *  # noqa: F403
from hw.isa.dma_timing import __all__ as _dma
from hw.isa.dma_timing import dma_busy_cycles
from hw.isa.formats import ActFormat, WeightFormat, act_row_offset, matmul_lead
from hw.isa.numerics import (
    ELTWISE_X_BITS,
    LN_MAX_ELEMS,
    LN_MEAN_FRAC_BITS,
    LN_RECIP_SHIFT,
    LN_VAR_BITS,
    SOFTMAX_RECIP_BITS,
)

if TYPE_CHECKING:
    from hw.config import NPUConfig

__all__ = [
    "ACCEPT_CYCLES", "matmul_busy_cycles", "matmul_issue_cycles", "matmul_in_flight",
    "engine_in_flight", "MatmulTimes", "MatmulTimeline", "matmul_retire_cycles",
    "command_retire_cycles", "retire_window_cycles", "requant_busy_cycles",
    "softmax_busy_cycles", "softmax_max_cycles", "softmax_max_folds", "softmax_row_cycles",
    "VECTOR_MUL_LATENCY", "REQUANT_LATENCY",
    "REQUANT_ROW_SCALE_LATENCY", "SOFTMAX_EXP_LATENCY", "command_busy_cycles", *_dma,
    "gelu_busy_cycles", "ADD_LATENCY", "ELTWISE_CHECK_CYCLES", "LN_NORM_LATENCY",
    "LN_MUL_NQ_CYCLES",
    "LN_MUL_SS_CYCLES", "LN_NORMALIZE_CYCLES", "LN_SQRT_CYCLES", "LN_DIV_R_CYCLES",
    "LN_DIV_MU_CYCLES", "LN_ROW_UNIT_CYCLES", "ln_stats_cycles", "ln_norm_cycles",
    "ln_row_cycles", "eltwise_busy_cycles",
]

#: Cycles from an engine's ``done`` to the handshake of a command that is already waiting (the
#: idle state, in which ``cmd.ready`` is high): back-to-back commands start every
#: ``busy + ACCEPT_CYCLES`` cycles.
ACCEPT_CYCLES = 1

#: Busy cycles of a vector command that retires without running: the check state, then the
#: retire state (``done``) (requant, softmax; the matrix engine's: ``_MATMUL_CHECK + 1``).
_CHECK_RETIRE = 2


# -- matrix engine --------------------------------------------------------------------------------

#: Cycles from a MATMUL's handshake to the first cycle it can leave the next-command register:
#: the register loads (1), then the checks of the command it holds are registered (1), so no
#: check (a 17x17 product, range compares) sits in front of the issue stage's start.
_MATMUL_CHECK = 2

#: Cycles from an activation row's scratchpad read to its entry into the array: the read port's
#: latency and the activation register (which puts the weight swap one cycle after the first
#: weight row is written, as :class:`hw.tile.SystolicArray` needs).
_MATMUL_TO_ARRAY = 2


def _matmul_first_write(config: NPUConfig, a: int) -> int:
    """Cycle of the first accumulator write of a MATMUL whose issue starts in cycle ``a``: its
    first activation row enters the array ``_MATMUL_TO_ARRAY`` cycles after its read, leaves
    it ``rows + cols - 1`` later (:attr:`hw.tile.SystolicArray.latency`), and is written in
    the cycle after (the old row is read meanwhile)."""
    return a + _MATMUL_TO_ARRAY + (config.rows + config.cols - 1) + 1


def _act_read_cycle(config: NPUConfig, i: int, w_fmt: int, a_fmt: int) -> int:
    """Issue cycle, within its K block, in which activation row ``i`` is read: ``i``; an MX
    command's activations start :func:`hw.isa.matmul_lead` (1) cycle later, and MXINT8
    activations have an exponent row before each group of ``spad_row_bytes`` rows
    (:func:`hw.isa.act_row_offset`)."""
    if a_fmt == ActFormat.MXINT8:
        return act_row_offset(config, i, a_fmt)
    return i + matmul_lead(w_fmt, a_fmt)


def matmul_busy_cycles(config: NPUConfig, m: int, *, k_blocks: int = 1,
                       error: bool = False, w_fmt: int = 0, a_fmt: int = 0) -> int:
    """Busy cycles of one MATMUL of ``m`` activation rows and ``k_blocks >= 1`` K blocks
    (``k_len + 1``, :class:`hw.isa.MatmulBody`) in formats ``w_fmt``/``a_fmt``
    (:mod:`hw.isa.formats`) on an idle matrix engine (:class:`hw.tile.MatrixEngine`): from the
    cycle after its handshake to its ``done``.

    Stages (``hw/tile/matrix_engine.py``): ``CHECK`` 2 (the command in the next-command
    register, its checks registered); the issue stage from the next cycle,
    :func:`matmul_issue_cycles` ``P`` per K block, which reads weight row ``k`` in its cycle
    ``k`` and activation row ``i`` in cycle ``i`` (int8; MX commands: see
    :func:`hw.isa.matmul_lead` and :func:`hw.isa.act_row_offset`); for the last block's last
    row, 2 cycles to the array (scratchpad read latency, the activation register), the array
    ``rows + cols - 1``, the accumulator write 1; ``done`` 1 cycle after the last write. Total
    ``(B - 1) * P + m + rows + cols + 5`` for ``B`` blocks of int8 or int4 weights and int8
    activations (an MX command adds 1, and ``(m - 1) // spad_row_bytes`` more for MXINT8
    activations); ``flags.accumulate`` and ``flags.transpose`` change nothing.

    ``m == 0`` and a failing command (``error``: ``BAD_OPCODE``, ``BAD_SIZE``,
    ``BAD_LOCAL_ADDR``) take ``CHECK`` and their retire cycle: 3.

    Back-to-back MATMULs overlap (:class:`MatmulTimeline`): this is the latency of one
    command, not the cycles between two.
    """
    if error or m == 0:
        return _MATMUL_CHECK + 1
    # CHECK, then the issue stage from t + 3: the last block's last write, then done
    last_block = _MATMUL_CHECK + 1 + (k_blocks - 1) * _matmul_period(config, m, w_fmt, a_fmt)
    return _matmul_first_write(config, last_block + _act_read_cycle(config, m - 1, w_fmt,
                                                                    a_fmt)) + 1


def _matmul_period(config: NPUConfig, m: int, w_fmt: int = 0, a_fmt: int = 0) -> int:
    """Issue cycles per K block (see :func:`matmul_issue_cycles`)."""
    lead = matmul_lead(w_fmt, a_fmt)
    act = _act_read_cycle(config, m - 1, w_fmt, a_fmt) + 1
    weights = config.rows + (1 if w_fmt == WeightFormat.MXINT8 else 0)
    return max(act, weights, config.cols + lead)


def matmul_issue_cycles(config: NPUConfig, m: int, k_blocks: int = 1, *, w_fmt: int = 0,
                        a_fmt: int = 0) -> int:
    """Cycles one MATMUL of ``m >= 1`` rows and ``k_blocks >= 1`` K blocks holds
    the matrix engine's issue stage: ``P = max(m, rows, cols)`` per block for int8 or int4
    weights and int8 activations. Back-to-back MATMULs
    (the next one taken in time, :class:`MatmulTimeline`) and the blocks of one enter the
    array every this many cycles, so that the steady state is one activation row per cycle
    for ``m >= max(rows, cols)``.

    The bounds: ``m`` activation reads and ``rows`` weight reads per block (one per cycle
    each, on two scratchpad read ports; int4 weights read each packed row twice, one nibble
    per cycle), and the shadow-weight rule of
    :class:`hw.tile.SystolicArray` (shadow row ``k`` may be rewritten only once the previous
    swap has passed all ``cols`` PEs of row ``k``; by columns, all ``rows`` PEs of the
    column). An MX command (:mod:`hw.isa.formats`) starts its activations a cycle later
    (:func:`hw.isa.matmul_lead`), which moves the swap and so the rule by one cycle, reads the
    weight exponent row after the ``rows`` weight rows (MXINT8 weights) and an exponent row
    before each group of ``spad_row_bytes`` activation rows (MXINT8 activations): ``P =
    max(lead + m + x_a, rows + x_w, cols + lead)`` with ``lead = 1``, ``x_w = 1`` for MXINT8
    weights and ``x_a = (m - 1) // spad_row_bytes`` for MXINT8 activations (0 otherwise).
    ``m == 0`` and failing commands do not use the issue stage: 0.
    """
    if m == 0:
        return 0
    return k_blocks * _matmul_period(config, m, w_fmt, a_fmt)


def matmul_in_flight(config: NPUConfig) -> int:
    """Most MATMULs the matrix engine holds at once (taken, not yet retired), the depth of its
    retire FIFO and of the command processor's in-flight records for it:
    ``3 + (rows + cols + 2) // max(3, rows, cols)`` (5 on 8x8, 5 on 2x2).

    Enough that the limit never delays a handshake of back-to-back MATMULs that pass their checks,
    and one fewer would (:class:`MatmulTimeline`; failing or empty commands retire in order behind
    running ones and can fill the places meanwhile): command ``i`` is taken when command ``i - 1``
    enters the issue stage, ``(D - 1) * Q`` cycles after command ``i - D`` did, which retires ``m +
    rows + cols + 2 <= Q + rows + cols + 2`` cycles after that (``Q = max(3, P)`` apart: ``P =
    matmul_issue_cycles >= max(m, rows, cols)``, and 3 is a command's least time in the next-command
    register and its handshake).
    """
    least = _MATMUL_CHECK + 1
    return 3 + (config.rows + config.cols + 2) // max(least, config.rows, config.cols)


def engine_in_flight(config: NPUConfig, engine: str) -> int:
    """Most commands engine ``engine`` (a name of :data:`hw.isa.ENGINE_NAMES`) holds at once:
    :func:`matmul_in_flight` for ``matrix``, 1 for the others (they take a command only when
    idle)."""
    return matmul_in_flight(config) if engine == "matrix" else 1


class MatmulTimes(NamedTuple):
    """When one MATMUL happens (absolute cycles, :meth:`MatmulTimeline.take`); immutable.

    Attributes
    ----------
    take : int
        Its handshake.
    done : int
        Its ``done`` pulse.
    accept_from : int
        First cycle the engine can take the next command (its ``cmd.ready`` and the in-flight
        limit :func:`matmul_in_flight`).
    first_write : int
        Cycle of its first accumulator write (K block 0, row 0); 0 when it writes nothing.
    rows, blocks, period : int
        Its ``m`` (rows written per K block), K blocks that write (0: none) and cycles from one
        block's writes to the next's (:func:`matmul_issue_cycles` per block).
    groups : tuple of (int, int)
        MXINT8 activations only (empty otherwise: one run of ``m`` rows per K block): the runs
        of rows a K block writes in consecutive cycles, one per group of ``spad_row_bytes``
        rows, as ``(cycles after the block's first write, rows)``.
    """
    take: int
    done: int
    accept_from: int
    first_write: int = 0
    rows: int = 0
    blocks: int = 0
    period: int = 0
    groups: tuple[tuple[int, int], ...] = ()

    @property
    def writes(self) -> tuple[tuple[int, int], ...]:
        """Accumulator write cycles, one span ``[first, end)`` per K block and run of rows
        (empty: none): block ``j``'s from ``first_write + j * period``."""
        f, p = self.first_write, self.period
        runs = self.groups or ((0, self.rows),)
        return tuple((f + j * p + o, f + j * p + o + n) for j in range(self.blocks)
                     for o, n in runs)

    @property
    def write_runs(self) -> tuple[tuple[int, int], ...]:
        """:attr:`writes` with adjacent spans joined: one run ``[first_write, last write +
        1)`` when the blocks write back to back (one run of rows per block and ``period ==
        m``: ``m >= max(rows, cols)``), else the spans (gaps between them)."""
        if self.blocks and not self.groups and self.period == self.rows:
            f = self.first_write
            return ((f, f + self.blocks * self.rows),)
        return self.writes


class MatmulTimeline:
    """Cycle-exact schedule of the MATMULs of one matrix engine (:class:`hw.tile.MatrixEngine`),
    command by command in the order it takes them; the one definition of its back-to-back
    timing (the performance model, the planner and the tests use it).

    Rules (cycle ``t`` the handshake of a command):

    * the next-command register holds it from ``t + 1`` (``cmd.ready`` is low meanwhile), its
      checks are registered from ``t + 2``; it leaves in cycle ``x``: a failing or empty
      command at once (``x = t + 2``), any other once the issue stage is free or in the last
      cycle of the previous command's issue (``x = max(t + 2, a' + P' - 1)``); the engine
      takes the next command from ``x + 1``;
    * a command that runs enters the issue stage at ``a = x + 1`` for
      :func:`matmul_issue_cycles` cycles, ``P = max(m, rows, cols)`` per K block (other
      formats: see there), and K block ``j`` writes accumulator row ``i`` in cycle ``a + j *
      P + rows + cols + 2 + c_i`` where ``c_i = i`` is the issue cycle of row ``i`` in its
      block (``i + 1`` in MX commands, ``i + i // spad_row_bytes + 1`` for MXINT8
      activations);
    * commands retire in order, one ``done`` per cycle: ``done = max(r, done' + 1)`` with
      ``r = x + 1`` (failing or empty) or the cycle after its last write;
    * at most :func:`matmul_in_flight` commands are taken and not retired; a retirement in
      cycle ``d`` frees a place from ``d + 1``.

    Alone, a command takes :func:`matmul_busy_cycles`; back to back, commands enter the
    array every ``P`` cycles.
    """

    def __init__(self, config: NPUConfig) -> None:
        self.config = config
        self._issue_last: int | None = None     # last issue cycle of the latest command run
        self._ready = 0                         # cmd.ready from this cycle
        self._done: list[int] = []              # done of the commands taken, newest last
        self._limit = matmul_in_flight(config)

    def accept_from(self) -> int:
        """First cycle in which the engine can take the next command."""
        slot = self._done[-self._limit] + 1 if len(self._done) >= self._limit else 0
        return max(self._ready, slot)

    def take(self, t: int, m: int, *, k_blocks: int = 1, error: bool = False, w_fmt: int = 0,
             a_fmt: int = 0) -> MatmulTimes:
        """The command of ``m`` rows and ``k_blocks >= 1`` K blocks in formats ``w_fmt`` /
        ``a_fmt`` (``error``: it fails its checks) taken in cycle ``t``.

        Raises
        ------
        ValueError
            If ``t`` is before :meth:`accept_from`.
        """
        if t < self.accept_from():
            raise ValueError(f"MATMUL taken in cycle {t}, the engine takes one from "
                             f"{self.accept_from()}")
        c = self.config
        prev_done = self._done[-1] if self._done else -1
        x = t + _MATMUL_CHECK
        first = period = blocks = 0
        groups: tuple[tuple[int, int], ...] = ()
        if error or m == 0:
            ready = x + 1
        else:
            if self._issue_last is not None:
                x = max(x, self._issue_last)
            a = x + 1
            period = _matmul_period(c, m, w_fmt, a_fmt)
            self._issue_last = a + k_blocks * period - 1
            blocks = k_blocks
            # K block j's run of rows read from issue cycle r0 is written from
            # _matmul_first_write(a + j * period + r0) on
            runs = _write_runs(c, m, w_fmt, a_fmt)
            r_first = runs[0][0]
            first = _matmul_first_write(c, a + r_first)
            if len(runs) > 1:
                groups = tuple((r0 - r_first, n) for r0, n in runs)
            r_last, n_last = runs[-1]
            ready = first + (k_blocks - 1) * period + r_last - r_first + n_last
        done = max(ready, prev_done + 1)
        self._ready = x + 1
        self._done = [*self._done[1 - self._limit:], done]
        return MatmulTimes(take=t, done=done, accept_from=self.accept_from(), first_write=first,
                           rows=m if blocks else 0, blocks=blocks, period=period,
                           groups=groups)


def _write_runs(config: NPUConfig, m: int, w_fmt: int, a_fmt: int) -> list[tuple[int, int]]:
    """``(read cycle of its first row, rows)`` of each run of activation rows read in
    consecutive cycles of a K block: one run, or one per group of ``spad_row_bytes`` rows for
    MXINT8 activations (an exponent row between groups)."""
    if a_fmt != ActFormat.MXINT8:
        return [(_act_read_cycle(config, 0, w_fmt, a_fmt), m)]
    g = config.spad_row_bytes
    return [(_act_read_cycle(config, i, w_fmt, a_fmt), min(g, m - i)) for i in range(0, m, g)]


def matmul_retire_cycles(config: NPUConfig, m: int, *, k_blocks: int = 1,
                         error: bool = False, w_fmt: int = 0, a_fmt: int = 0) -> int:
    """Least cycles one MATMUL adds to a run of the matrix engine's retirements (the input
    of :func:`retire_window_cycles`): its back-to-back period :func:`matmul_issue_cycles`,
    ``k_blocks * max(m, rows, cols)``; 0 for ``m == 0`` or a failing command (``error``),
    which skips the issue stage and may retire in the cycle after the previous ``done``.

    Not the cycles between two ``done`` pulses: MATMULs retire in order, one per cycle at
    most, and after a long command a short one may retire one cycle later (8x8: ``m = 8``,
    then ``m = 1``). What holds is the sum over a window (:class:`MatmulTimeline`'s rules):
    a MATMUL taken in cycle ``t`` enters the issue stage at ``a >= t + 3``, after the issue
    of the previous one, holds it ``P = matmul_issue_cycles`` cycles, and retires after its
    last write, ``a + (k_blocks - 1) * max(m, rows, cols) + rows + cols + 2 + m > a + P``.
    So the MATMULs taken after a cycle ``T0`` and retired by ``T1`` have issue stages one
    after another inside ``T0 + 1 .. T1``: ``T1 - T0 >`` the sum of their periods.
    """
    return 0 if error else matmul_issue_cycles(config, m, k_blocks, w_fmt=w_fmt, a_fmt=a_fmt)


def retire_window_cycles(config: NPUConfig, engine: str, retire_cycles: Iterable[int]) -> int:
    """A lower bound of ``T1 - T0`` for any cycles ``T0 < T1`` such that commands of engine
    ``engine`` (a name of :data:`hw.isa.ENGINE_NAMES`) whose :func:`command_retire_cycles`
    are ``retire_cycles`` all retire (pulse ``done``) in ``T0 + 1 .. T1``: the sum of
    ``retire_cycles`` less its :func:`engine_in_flight` largest, in cycles.

    Those it leaves out stand for the commands the engine may already hold in ``T0`` (taken
    before, so their time may lie before the window; at most ``engine_in_flight``). Each of
    the others is taken after ``T0``: on the matrix engine its issue stage lies inside the
    window (:func:`matmul_retire_cycles`); on an engine that runs one command at a time
    (:func:`engine_in_flight` 1) it is taken at least :data:`ACCEPT_CYCLES` (1) after the
    previous ``done`` and after ``T0``, and its ``busy`` ends with its ``done``, inside the
    window. The bound holds for every DRAM timing if ``retire_cycles`` are those of the
    ideal DRAM (:func:`command_busy_cycles`). Checked against :class:`MatmulTimeline`
    (``tests/hw/test_timing.py``) and on the profiles of the performance model and the RTL
    (``tests/support/profile_jobs.py``).
    """
    cycles = sorted(retire_cycles)
    return sum(cycles[:max(0, len(cycles) - engine_in_flight(config, engine))])


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


def gelu_busy_cycles(config: NPUConfig, n_rows: int, *, error: bool = False) -> int:
    """Busy cycles of one GELU of ``n_rows`` rows (:class:`hw.vector.RequantEngine`'s GELU
    form): as a REQUANT with ``flags.row_scale`` (two passes per row, a row read every other
    cycle) with a fourth parameter row: ``CHECK`` 1, ``READ_PARAMS`` 4, ``READ_ROWS``
    ``2 * n_rows``, ``DRAIN`` :data:`REQUANT_ROW_SCALE_LATENCY`, ``RETIRE`` 1: ``2 * n_rows +
    17``; 2 for ``n_rows == 0`` or an error."""
    if error or n_rows == 0:
        return _CHECK_RETIRE
    return 1 + 4 + 2 * n_rows + REQUANT_ROW_SCALE_LATENCY + 1


#: ADD: cycles from an element block's first read (``a``) to its output write: the ``b`` read,
#: then ``B`` (requested two cycles after the first read) through the multiplier
#: (:data:`VECTOR_MUL_LATENCY`), the output register.
ADD_LATENCY = 2 + VECTOR_MUL_LATENCY + 1
#: LAYERNORM normalisation: cycles from a block's first read to its output write: ``B`` as in
#: ADD and its ``c`` register (7), the ``R`` pass and its ``t`` register (5), the ``gamma``
#: pass and the output register (5).
LN_NORM_LATENCY = ADD_LATENCY + 2 * (VECTOR_MUL_LATENCY + 1)

# The row unit of LAYERNORM (hw.vector.EltwiseEngine): one step per cycle, fixed counts
# derived from the largest row (LN_MAX_ELEMS elements of 16 bits).
_N_MAX = LN_MAX_ELEMS
_S_MAX = _N_MAX << (ELTWISE_X_BITS - 1)                 # |S| <= N * 2**15
_D_MAX = _N_MAX * _N_MAX << (2 * (ELTWISE_X_BITS - 1))  # D <= N * Q <= N**2 * 2**30
#: ``d += Q << i`` for each bit ``i`` of ``N``.
LN_MUL_NQ_CYCLES = _N_MAX.bit_length()
#: ``d -= |S| << i`` for each bit ``i`` of ``|S|``.
LN_MUL_SS_CYCLES = _S_MAX.bit_length()
#: Shifts of two bits that bring any ``0 < D <= _D_MAX`` into ``[2**28, 2**30)``.
LN_NORMALIZE_CYCLES = max((_D_MAX.bit_length() - (LN_VAR_BITS - 1) + 1) // 2,
                          (LN_VAR_BITS - 1 - 1 + 1) // 2)
#: Digit-by-digit square root of ``D' < 2**30``: one result bit per cycle.
LN_SQRT_CYCLES = LN_VAR_BITS // 2
#: ``R = floor(N * 2**32 / s)`` with ``N < s``: one quotient bit per cycle.
LN_DIV_R_CYCLES = LN_RECIP_SHIFT
#: ``mu = floor((S * 2**8 + N // 2) / N)``: one bit of the dividend's magnitude per cycle.
LN_DIV_MU_CYCLES = ((_S_MAX << LN_MEAN_FRAC_BITS) + _N_MAX).bit_length()
#: Cycles of the row unit per row: ``ROW_START`` 1, the steps above, ``ROW_CONST`` 1.
LN_ROW_UNIT_CYCLES = (1 + LN_MUL_NQ_CYCLES + LN_MUL_SS_CYCLES + LN_NORMALIZE_CYCLES
                      + LN_SQRT_CYCLES + LN_DIV_R_CYCLES + LN_DIV_MU_CYCLES + 1)


#: ADD and LAYERNORM that are not of size zero: ``CHECK`` (the span's product sent to the
#: shared multiplier), ``SPAN`` (its latency), ``CHECK_RANGES`` (every check), before the
#: first phase or ``RETIRE``.
ELTWISE_CHECK_CYCLES = 1 + VECTOR_MUL_LATENCY + 1


def ln_stats_cycles(n_blocks: int) -> int:
    """LAYERNORM's statistics phase of one row: a block every 3 cycles; the last block's ``B``
    (requested 2 cycles after its first read) returns, ``x`` is registered, its square enters
    the multiplier in the next free slot (2 cycles later) and returns: ``3 * n_blocks + 11``
    cycles up to and including that return."""
    return 3 * (n_blocks - 1) + 2 + VECTOR_MUL_LATENCY + 1 + 2 + VECTOR_MUL_LATENCY + 1


def ln_norm_cycles(n_blocks: int) -> int:
    """LAYERNORM's normalisation phase of one row: a block every 4 cycles, the last one's
    output written :data:`LN_NORM_LATENCY` cycles after its first read: ``4 * n_blocks +
    14``."""
    return 4 * (n_blocks - 1) + LN_NORM_LATENCY + 1


def ln_row_cycles(n_blocks: int) -> int:
    """Cycles of one LAYERNORM row: statistics, row unit, normalisation (``7 * n_blocks +
    165``)."""
    return ln_stats_cycles(n_blocks) + LN_ROW_UNIT_CYCLES + ln_norm_cycles(n_blocks)


def eltwise_busy_cycles(config: NPUConfig, opcode, n_rows: int, n_blocks: int, *,
                        error: bool = False) -> int:
    """Busy cycles of one ADD or LAYERNORM (:class:`hw.vector.EltwiseEngine`): the checks
    (:data:`ELTWISE_CHECK_CYCLES` = 6), then ADD ``2 * n_rows * n_blocks + 6`` (an element
    block every 2 cycles, the last written :data:`ADD_LATENCY` cycles after its first read),
    LAYERNORM ``n_rows *`` :func:`ln_row_cycles`, then ``RETIRE`` 1. A failing command
    (``error``) takes the checks and ``RETIRE`` (7); one of size zero ``CHECK`` and ``RETIRE``
    (2). ``opcode``: an :class:`~hw.isa.Opcode` or its value."""
    if n_rows == 0 or n_blocks == 0:
        return _CHECK_RETIRE
    if error:
        return ELTWISE_CHECK_CYCLES + 1
    op = opcode.value if isinstance(opcode, Opcode) else int(opcode)
    if op == Opcode.LAYERNORM.value:
        return ELTWISE_CHECK_CYCLES + n_rows * ln_row_cycles(n_blocks) + 1
    return ELTWISE_CHECK_CYCLES + 2 * (n_rows * n_blocks - 1) + ADD_LATENCY + 1 + 1


def softmax_max_folds(config: NPUConfig) -> int:
    """Fold steps of the SOFTMAX row max: ``ceil(log2(cols))``.

    The max pass keeps a running max per lane (one 32-bit compare per lane per block, so the
    accumulator's read data meets one compare, not a tree over the lanes; the tree was the
    routed critical path of the 4x4, 34.9 ns). After the pass, each fold step halves the
    lanes, ``max[j] = max(max[2j], max[2j + 1])``, one register level per step, until lane 0
    holds the row max.
    """
    return (config.cols - 1).bit_length()


def softmax_max_cycles(config: NPUConfig, n_blocks: int) -> int:
    """Cycles of the ``MAX_READ`` state of one score row: ``n_blocks + 1 + max(1, folds)``.

    A read per cycle (``n_blocks``), the last block's data into the per-lane maxima (1), then
    the :func:`softmax_max_folds` fold steps; the last fold's cycle is the state's last (at
    least one cycle after the last data, to see that no block is in flight).
    """
    return n_blocks + 1 + max(1, softmax_max_folds(config))


def softmax_row_cycles(config: NPUConfig, n_blocks: int) -> int:
    """Cycles of one score row of a SOFTMAX of ``n_blocks`` blocks when its reciprocal write
    does not wait: ``2 * n_blocks + 44 + max(1, softmax_max_folds(config))``.

    FSM states (``hw/vector/softmax_engine.py``): ``ROW_START`` 1; ``MAX_READ``
    :func:`softmax_max_cycles`; ``EXP_READ`` ``n_blocks + 6`` (a read per cycle and the
    exponent pipeline, :data:`SOFTMAX_EXP_LATENCY` = 6 cycles from the last read to the last
    P write, which is in the state's last cycle); ``DIV_START`` 1; ``DIVIDE``
    ``SOFTMAX_RECIP_BITS + 2`` (one quotient bit per cycle of the ``SOFTMAX_RECIP_BITS +
    1``-bit restoring divider, then the reciprocal latch); ``ROW_END`` 1 (plus one per cycle
    its reciprocal-row write waits for the accumulator port).
    """
    return (1 + softmax_max_cycles(config, n_blocks) + (n_blocks + SOFTMAX_EXP_LATENCY) + 1
            + (SOFTMAX_RECIP_BITS + 2) + 1)


def softmax_busy_cycles(config: NPUConfig, n_rows: int, n_blocks: int, *, error: bool = False,
                        acc_write_waits: int = 0) -> int:
    """Busy cycles of one SOFTMAX of ``n_rows`` score rows of ``n_blocks`` blocks
    (:class:`hw.vector.SoftmaxEngine`): ``CHECK`` 1, :func:`softmax_row_cycles` per row,
    ``RETIRE`` 1.

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
        b = view.body.matmul
        return matmul_busy_cycles(config, b.m, k_blocks=b.k_len + 1, error=failed,
                                  w_fmt=b.w_fmt, a_fmt=b.a_fmt)
    if op == Opcode.REQUANT:
        return requant_busy_cycles(config, view.body.requant.n_rows,
                                   row_scale=bool(flags.row_scale), error=failed)
    if op == Opcode.SOFTMAX:
        b = view.body.softmax
        return softmax_busy_cycles(config, b.n_rows, b.n_blocks, error=failed,
                                   acc_write_waits=acc_write_waits)
    if op == Opcode.GELU:
        return gelu_busy_cycles(config, view.body.requant.n_rows, error=failed)
    if op in (Opcode.ADD, Opcode.LAYERNORM):
        b = view.body.eltwise
        return eltwise_busy_cycles(config, op, b.n_rows, b.n_blocks, error=failed)
    if op in (Opcode.DMA_LOAD, Opcode.DMA_STORE):
        return dma_busy_cycles(config, op, view.body.dma, error, window=window)
    raise ValueError(f"opcode {op!r} does not run on an engine")


def command_retire_cycles(config: NPUConfig, command: bytes | CommandView,
                          error: ErrorCode = ErrorCode.NONE) -> int:
    """Least cycles one encoded engine command adds to a run of its engine's retirements
    (the input of :func:`retire_window_cycles`): :func:`matmul_retire_cycles` for a MATMUL
    (the matrix engine holds several), ``command_busy_cycles + ACCEPT_CYCLES`` for the
    others (their engine takes a command only when idle), given the error it retires with.

    Raises
    ------
    ValueError
        For an opcode that no engine runs (see :func:`command_busy_cycles`).
    """
    view = decode(command) if isinstance(command, bytes | bytearray) else command
    if view.header.opcode == Opcode.MATMUL:
        b = view.body.matmul
        return matmul_retire_cycles(config, b.m, k_blocks=b.k_len + 1,
                                    error=ErrorCode(error) != ErrorCode.NONE, w_fmt=b.w_fmt,
                                    a_fmt=b.a_fmt)
    return command_busy_cycles(config, view, error) + ACCEPT_CYCLES
