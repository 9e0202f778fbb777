"""Timing of the compute engines: the matrix engine (MATMUL) and the vector unit (REQUANT,
SOFTMAX), and the local-memory writes they make (which the DMA load channel yields to).

An engine gets a command with the cycle ``t`` it took it and the functional model's verdict
(error or not); it tells its :class:`~sw.perf.cmdproc.EngineQueue` the cycle of its ``done``
pulse through ``queue.set_done`` (again, if a later event changes it). Formulas come from
:mod:`sw.perf.timing`.
"""

from __future__ import annotations

from hw.config import NPUConfig
from hw.isa import ErrorCode, Opcode
from sw.perf import timing as T
from sw.perf.ledger import Item, Ledger
from sw.perf.ports import BusyList, first_free, merged

__all__ = ["MatrixEngine", "VectorEngine"]

_REQUANT = Opcode.REQUANT.value
_GELU = Opcode.GELU.value
_ELTWISE = (Opcode.ADD.value, Opcode.LAYERNORM.value)
_NONE = ErrorCode.NONE


class MatrixEngine:
    """MATMUL: the pipelined schedule of :class:`hw.isa.timing.MatmulTimeline` (the next
    command taken while earlier ones run, in-order retirement); each command writes one
    accumulator row per cycle (``acc_busy``, the highest priority on the accumulator's write
    port)."""

    name = "matrix"

    def __init__(self, config: NPUConfig, acc_busy: BusyList) -> None:
        self.config = config
        self.acc_busy = acc_busy
        self.queue = None
        self.timeline = T.MatmulTimeline(config)

    def start(self, cmd, t: int, error: ErrorCode) -> None:
        b = cmd.body
        times = self.timeline.take(t, b.m, k_blocks=b.k_len + 1, error=error is not _NONE,
                                   w_fmt=b.w_fmt, a_fmt=b.a_fmt)
        # the K blocks' write runs, adjacent ones joined (one span on the port for a command
        # of m >= rows, cols: its blocks write back to back)
        for first, end in times.write_runs:
            self.acc_busy.add(first, end, self)
        self.queue.set_done(times.done, free_from=times.accept_from)


class _Softmax(Item):
    """One SOFTMAX in progress: row schedule, waits of its reciprocal-row writes for the
    accumulator's port (``stall.vector.acc``)."""

    def __init__(self, t: int, n_rows: int, n_blocks: int) -> None:
        self.t, self.n_rows, self.n_blocks = t, n_rows, n_blocks
        self.stalls: list[tuple[int, int]] = []
        self.p_writes: list[tuple[int, int]] = []
        self.recip: list[int] = []
        self.done = 0
        self.end = 1 << 62

    def count(self, lo: int, hi: int, out: dict[str, int]) -> None:
        for a, b in self.stalls:
            n = min(b, hi) - max(a, lo)
            if n > 0:
                out["stall.vector.acc"] += n


class VectorEngine:
    """REQUANT (fixed latency, one scratchpad row per cycle, every other cycle with
    ``flags.row_scale``), GELU (as a row-scaled REQUANT with a fourth parameter row), ADD and
    LAYERNORM (fixed schedules, :func:`sw.perf.timing.eltwise_writes`) and SOFTMAX (row by row; the
    reciprocal row written every ``cols`` rows waits while the matrix engine writes the
    accumulator). Its scratchpad writes (``spad_busy``) and reciprocal writes (``acc_busy``)
    come before the DMA's on the ports."""

    name = "vector"

    def __init__(self, config: NPUConfig, spad_busy: BusyList, acc_busy: BusyList,
                 matrix_busy: BusyList, ledger: Ledger, now) -> None:
        self.config = config
        self.spad_busy, self.acc_busy, self.matrix_busy = spad_busy, acc_busy, matrix_busy
        self.ledger = ledger
        self.now = now
        self.queue = None
        self.sm: _Softmax | None = None
        matrix_busy.listeners.append(self._matrix_write)

    def start(self, cmd, t: int, error: ErrorCode) -> None:
        b = cmd.body
        if cmd.opcode == _REQUANT:
            if error is not _NONE or b.n_rows == 0:
                self.queue.set_done(t + T.QUICK_RETIRE)
                return
            row_scale = bool(cmd.flags.row_scale)
            for x, y in T.requant_write_cycles(self.config, b.n_rows, row_scale):
                self.spad_busy.add(t + x, t + y, self)
            self.queue.set_done(t + T.requant_done(self.config, b.n_rows, row_scale))
            return
        if cmd.opcode == _GELU:
            if error is not _NONE or b.n_rows == 0:
                self.queue.set_done(t + T.QUICK_RETIRE)
                return
            done = T.gelu_done(self.config, b.n_rows)
            for w in range(done - 2 * b.n_rows + 1, done, 2):
                self.spad_busy.add(t + w, t + w + 1, self)
            self.queue.set_done(t + done)
            return
        if cmd.opcode in _ELTWISE:
            if error is not _NONE or b.n_rows == 0 or b.n_blocks == 0:
                self.queue.set_done(t + T.eltwise_done(self.config, cmd.opcode, b.n_rows,
                                                       b.n_blocks, error=error is not _NONE))
                return
            for w in T.eltwise_writes(self.config, cmd.opcode, b.n_rows, b.n_blocks):
                self.spad_busy.add(t + w, t + w + 1, self)
            self.queue.set_done(t + T.eltwise_done(self.config, cmd.opcode, b.n_rows,
                                                   b.n_blocks))
            return
        if error is not _NONE or b.n_rows == 0 or b.n_blocks == 0:
            self.queue.set_done(t + T.QUICK_RETIRE)
            return
        self.sm = sm = _Softmax(t, b.n_rows, b.n_blocks)
        self.ledger.item(sm)
        self._plan(sm, after=t)

    def _plan(self, sm: _Softmax, after: int) -> None:
        """(Re)compute the row schedule of ``sm``; spans starting after cycle ``after`` are
        (re)registered on the ports."""
        cols, nb = self.config.cols, sm.n_blocks
        busy = merged([self.matrix_busy], sm.t)
        p0, p1 = T.softmax_p_writes(self.config, nb)
        rs = sm.t + T.SOFTMAX_START
        sm.stalls, sm.p_writes, sm.recip = [], [], []
        for i in range(sm.n_rows):
            sm.p_writes.append((rs + p0, rs + p1))
            end = rs + T.softmax_row_end(self.config, nb)
            if i % cols == cols - 1 or i == sm.n_rows - 1:
                w = first_free(busy, end)
                if w > end:
                    sm.stalls.append((end, w))
                sm.recip.append(w)
                end = w
            rs = end + 1
        sm.done = rs
        sm.end = rs + 1
        self.spad_busy.remove(sm, after + 1)
        self.acc_busy.remove(sm, after + 1)
        for a, b in sm.p_writes:
            if a > after:
                self.spad_busy.add(a, b, sm)
        for w in sm.recip:
            if w > after:
                self.acc_busy.add(w, w + 1, sm)
        self.queue.set_done(sm.done)

    def _matrix_write(self, a: int) -> None:
        sm = self.sm
        if sm is not None and sm.recip and a <= sm.recip[-1] and sm.done > self.now():
            self._plan(sm, after=self.now())

    def retired(self) -> None:
        self.sm = None
