"""Operations of the linear kernel's double-buffered program, and the timing model that the
planner replays programs on.

A program (:func:`sw.kernels.linear_schedule.build_program`) is a list of :data:`Op` in stream
order: :class:`DmaOp`, :class:`MatmulOp`, :class:`RequantOp`, each with its command fields and
its synchronization by semaphore *name* (``L`` retired loads, ``M`` finished phases, ``R``
requantizations, ``S`` stores): ``wait`` is ``(name, count)`` (start once the kernel has
signalled ``name`` ``count`` times), ``signal`` a name. :class:`Timer` replays it;
:func:`sw.kernels.linear.build_linear_commands_double_buffered` encodes it. The cost of each
command derives from :mod:`hw.isa.timing`.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, fields

from hw.config import NPUConfig
from hw.isa import (
    ACCEPT_CYCLES,
    COMMAND_BYTES,
    LocalMem,
    dma_bursts,
    dma_estimate_cycles,
    gelu_busy_cycles,
    matmul_busy_cycles,
    matmul_issue_cycles,
    requant_busy_cycles,
)
from sw.dram import MIN_READ_LATENCY, MIN_WRITE_LATENCY, DramTiming

__all__ = ["DmaOp", "MatmulOp", "RequantOp", "GeluOp", "Op", "Wait", "command_fields", "Timer",
           "matmul_cycles", "matmul_latency", "requant_cycles", "gelu_cycles", "dma_cycles",
           "fetch_cycles"]

Wait = tuple[str, int] | None   #: ``(semaphore name, count)``


# -- the planner's cost of each command ---------------------------------------------------------

def matmul_cycles(config: NPUConfig, m: int, k_blocks: int = 1, w_fmt: int = 0,
                  a_fmt: int = 0) -> int:
    """Cycles between the handshakes of back-to-back MATMULs of ``m >= 1`` rows and
    ``k_blocks`` K blocks in formats ``w_fmt``/``a_fmt`` on the matrix engine:
    :func:`hw.isa.matmul_issue_cycles` (``max(m, rows, cols)`` per block for int8 and int4
    weights), exact in the steady state of :class:`hw.isa.timing.MatmulTimeline` (the next
    MATMUL is taken while this one runs; its weights load meanwhile)."""
    return matmul_issue_cycles(config, m, k_blocks, w_fmt=w_fmt, a_fmt=a_fmt)


def matmul_latency(config: NPUConfig, m: int, k_blocks: int = 1, w_fmt: int = 0,
                   a_fmt: int = 0) -> int:
    """Cycles from a MATMUL's handshake to the first cycle its semaphore increment is seen:
    ``hw.isa.matmul_busy_cycles + ACCEPT_CYCLES`` (``m + rows + cols + 6`` for one int8
    block)."""
    return matmul_busy_cycles(config, m, k_blocks=k_blocks, w_fmt=w_fmt,
                              a_fmt=a_fmt) + ACCEPT_CYCLES


def requant_cycles(config: NPUConfig, n_rows: int) -> int:
    """Cycles between the handshakes of back-to-back REQUANTs of ``n_rows`` rows (no row
    scale): ``hw.isa.requant_busy_cycles + ACCEPT_CYCLES``, exact for ``n_rows >= 1``
    (``n_rows + 12``)."""
    return n_rows + requant_busy_cycles(config, 1) + ACCEPT_CYCLES - 1


def gelu_cycles(config: NPUConfig, n_rows: int) -> int:
    """Cycles between the handshakes of back-to-back GELUs of ``n_rows`` rows:
    ``hw.isa.gelu_busy_cycles + ACCEPT_CYCLES - 1`` (as :func:`requant_cycles`)."""
    return gelu_busy_cycles(config, n_rows) + ACCEPT_CYCLES - 1


def dma_cycles(config: NPUConfig, row_bytes: int, n_rows: int, *, store: bool = False,
               dram: DramTiming | None = None) -> int:
    """The planner's address-free estimate of a DMA command, cycles.

    Under ideal memory (``dram`` None or ideal) :func:`hw.isa.dma_estimate_cycles`: a beat
    per cycle, an idle cycle per burst, a fixed overhead that includes the next command's
    fetch. Under a DRAM timing each burst of ``b`` beats (the bursts of a page-aligned row,
    :func:`hw.isa.dma_bursts`) costs the largest of its R channel and Little's-law terms
    (:meth:`sw.dram.DramTiming.read_burst_terms` at ``config.dma_outstanding``) or its W
    channel term (:meth:`~sw.dram.DramTiming.write_burst_cycles`) and, with a bandwidth
    limit, ``b * axi_data_bytes / bytes_per_cycle``; a load adds the read latency beyond the
    ideal model's (:data:`sw.dram.MIN_READ_LATENCY`) once, for its first beat, and a store
    the write latency beyond the ideal's for its last response. Both reduce to the ideal
    estimate under ideal memory.
    """
    if dram is None or dram.is_ideal:
        return dma_estimate_cycles(config, row_bytes, n_rows)
    bus = config.axi_data_bytes
    per_row = 0.0
    for burst in dma_bursts(config, 0, 0, row_bytes, 1):
        b = burst.beats
        cost = (dram.write_burst_cycles(b) if store
                else max(dram.read_burst_terms(b, config.dma_outstanding)))
        if dram.bytes_per_cycle is not None:
            cost = max(cost, b * bus / dram.bytes_per_cycle)
        per_row += cost
    tail = (dram.write_latency - MIN_WRITE_LATENCY if store
            else dram.read_latency - MIN_READ_LATENCY)
    return dma_estimate_cycles(config, row_bytes, 0) + tail + math.ceil(n_rows * per_row)


def fetch_cycles(config: NPUConfig, dram: DramTiming | None) -> int:
    """Cycles a command fetch burst takes beyond what the ideal memory's fetch costs (which
    :func:`dma_cycles`'s overhead already holds): the command processor reads up to
    ``fetch_depth`` commands of :data:`hw.isa.COMMAND_BYTES` per burst through the DMA's read
    channel, so each burst pays the read latency beyond :data:`sw.dram.MIN_READ_LATENCY` and
    a command's beats' backpressure; 0 under ideal memory."""
    if dram is None or dram.is_ideal:
        return 0
    beats = COMMAND_BYTES // config.axi_data_bytes or 1
    channel, _ = dram.read_burst_terms(beats, 1, gap=0)
    return dram.read_latency - MIN_READ_LATENCY + math.ceil(channel - beats)


# -- operations ---------------------------------------------------------------------------------

@dataclass
class DmaOp:
    """A DMA_LOAD (``store`` False) or DMA_STORE; ``tag`` says what it moves: ``a``
    (activations), ``w`` (weights), ``p`` (parameters), ``out`` (output tile)."""
    store: bool
    tag: str
    mem: LocalMem
    dram_addr: int
    dram_stride: int
    row_bytes: int
    n_rows: int
    local_row: int
    local_stride: int
    wait: Wait = None
    signal: str | None = None

    @property
    def engine(self) -> str:
        return "store" if self.store else "load"

    @property
    def method(self) -> str:
        return "dma_store" if self.store else "dma_load"


@dataclass
class MatmulOp:
    """A MATMUL (:meth:`sw.runtime.CommandList.matmul`)."""
    a_row: int
    w_row: int
    acc_row: int
    m: int
    accumulate: bool
    k_blocks: int = 1
    w_fmt: int = 0
    a_fmt: int = 0
    x_base: int = 0
    wait: Wait = None
    signal: str | None = None
    engine = method = "matmul"


@dataclass
class RequantOp:
    """A REQUANT (:meth:`sw.runtime.CommandList.requant`)."""
    acc_row: int
    spad_row: int
    n_rows: int
    param_row: int
    relu: bool
    wait: Wait = None
    signal: str | None = None
    engine = method = "requant"


@dataclass
class GeluOp:
    """A GELU (:meth:`sw.runtime.CommandList.gelu`): the epilogue of a linear layer with
    ``gelu``; runs on the requantization engine."""
    acc_row: int
    spad_row: int
    n_rows: int
    param_row: int
    wait: Wait = None
    signal: str | None = None
    engine = "requant"
    method = "gelu"


Op = DmaOp | MatmulOp | RequantOp | GeluOp

_NOT_FIELDS = {"store", "tag", "wait", "signal"}


def command_fields(op: Op) -> dict:
    """The keyword arguments of ``op``'s :class:`~sw.runtime.CommandList` method, without
    ``wait``/``signal``."""
    return {f.name: getattr(op, f.name) for f in fields(op) if f.name not in _NOT_FIELDS}


# -- the timing model ---------------------------------------------------------------------------

#: Replays of :meth:`Timer.run` after the first, for the accumulator write port (at most).
_ACC_REPLAYS = 3


class Timer:
    """Replays a program on a timing model of the engines: each engine runs its commands in
    order, a command starts when its engine is free and its semaphore count is reached, and
    lasts :func:`dma_cycles` / :func:`requant_cycles`; a MATMUL frees the matrix engine after
    :func:`matmul_cycles` and signals after :func:`matmul_latency` (MATMULs overlap). ``bytes``
    counts the DRAM bytes per DMA tag.

    Under a DRAM timing ``dram`` (not ideal) the DMA costs follow it and the command fetch is
    a lane of its own: commands are fetched in stream order in bursts of ``fetch_depth``,
    each burst :func:`fetch_cycles` after the previous one (or after room, below), a command
    cannot start before it is fetched, and a command is not fetched before its engine's
    FIFO (``cmd_fifo_depth`` commands) has room, i.e. before the command ``cmd_fifo_depth``
    earlier on the same engine started (the fetch stalls behind the stage). Under ideal
    memory the fetch is not modelled (its cost is in the DMA overhead).

    The accumulator's write port serves the matrix engine first (:class:`hw.tile.ComputeTile`):
    a load into the accumulator writes its rows only in cycles in which no MATMUL writes it,
    and holds the load engine until its last row is written. The matrix engine writes on
    until it reaches a MATMUL that waits for this load or a later one (the load engine is in
    order), so the rows are written in the gaps of the write spans of the MATMULs before that
    one (each writes its ``m * k_blocks`` rows in the cycles before it signals), taken from
    the previous replay: the program is replayed again while that changes the end, at most
    :data:`_ACC_REPLAYS` times.
    """

    def __init__(self, config: NPUConfig, dram: DramTiming | None = None) -> None:
        self.c = config
        self.dram = None if dram is None or dram.is_ideal else dram
        self.fetch = fetch_cycles(config, self.dram)
        self._dma: dict[tuple[int, int, bool], int] = {}   # dma_cycles by command shape
        self._reset()

    def _reset(self) -> None:
        self.free = {"load": 0, "store": 0, "matmul": 0, "requant": 0}
        self.starts: dict[str, list[int]] = {e: [] for e in self.free}
        self.done: dict[str, list[int]] = {x: [] for x in "LMRS"}
        self.bytes = {"a": 0, "w": 0, "p": 0, "out": 0}
        self.acc_writes: list[tuple] = []   # per MATMUL in order: write span [a, b), wait

    def cycles(self, op: Op) -> int:
        c = self.c
        if isinstance(op, DmaOp):
            self.bytes[op.tag] += op.row_bytes * op.n_rows
            key = (op.row_bytes, op.n_rows, op.store)   # a program repeats a few shapes
            if key not in self._dma:
                self._dma[key] = dma_cycles(c, op.row_bytes, op.n_rows, store=op.store,
                                            dram=self.dram)
            return self._dma[key]
        if isinstance(op, MatmulOp):
            return matmul_cycles(c, op.m, op.k_blocks, op.w_fmt, op.a_fmt)
        if isinstance(op, GeluOp):
            return gelu_cycles(c, op.n_rows)
        return requant_cycles(c, op.n_rows)

    def run(self, ops: list[Op]) -> int:
        """Cycles until the last engine finishes."""
        end = self._replay(ops, None)
        if not any(isinstance(op, DmaOp) and op.mem == LocalMem.ACC for op in ops):
            return end
        for _ in range(_ACC_REPLAYS):
            writes = self.acc_writes
            self._reset()
            end, last = self._replay(ops, writes), end
            if end == last:
                break
        return end

    @staticmethod
    def _acc_free_after(busy: list[list[int]], ends: list[int], t: int, rows: int) -> int:
        """The cycle after the last of ``rows`` writes that start at ``t`` and skip the
        cycles of the ``busy`` spans (sorted, disjoint; ``ends`` their ends)."""
        for a, b in busy[bisect.bisect_right(ends, t):]:
            if t + rows <= a:
                break
            rows -= max(0, a - t)
            t = b
        return t + rows

    def _replay(self, ops: list[Op], writes: list[tuple] | None) -> int:
        end = 0
        fetched = 0
        depth = self.c.cmd_fifo_depth
        busy: list[list[int]] = []      # merged write spans of writes[:cut]
        ends: list[int] = []
        cut = 0
        for i, op in enumerate(ops):
            cycles = self.cycles(op)
            t = self.free[op.engine]
            if op.wait is not None:
                t = max(t, self.done[op.wait[0]][op.wait[1] - 1])
            if self.fetch:
                starts = self.starts[op.engine]
                room = starts[-depth] if len(starts) >= depth else 0
                burst = self.fetch if i % self.c.fetch_depth == 0 else 0
                fetched = max(fetched, room) + burst
                t = max(t, fetched)
                starts.append(t)
            finish = t + (matmul_latency(self.c, op.m, op.k_blocks, op.w_fmt, op.a_fmt)
                          if isinstance(op, MatmulOp) else cycles)
            self.free[op.engine] = t + cycles
            if isinstance(op, MatmulOp):
                self.acc_writes.append((finish - op.m * op.k_blocks, finish, op.wait))
            elif writes and isinstance(op, DmaOp) and op.mem == LocalMem.ACC and not op.store:
                rows = op.row_bytes * op.n_rows // self.c.acc_row_bytes
                n_load = len(self.done["L"]) + 1 if op.signal == "L" else None
                while cut < len(writes):        # the MATMULs before the first that waits
                    a, b, wait = writes[cut]    # (for this load or a later one)
                    if n_load is not None and wait is not None and wait[0] == "L" \
                            and wait[1] >= n_load:
                        break
                    if busy and a <= busy[-1][1]:
                        busy[-1][1] = ends[-1] = max(busy[-1][1], b)
                    else:
                        busy.append([a, b])
                        ends.append(b)
                    cut += 1
                finish = self.free[op.engine] = self._acc_free_after(busy, ends, finish - rows,
                                                                     rows)
            end = max(end, finish)
            if op.signal is not None:
                self.done[op.signal].append(finish)
        return max(end, *self.free.values())
