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

from dataclasses import dataclass, fields

from hw.config import NPUConfig
from hw.isa import (
    ACCEPT_CYCLES,
    LocalMem,
    dma_estimate_cycles,
    matmul_busy_cycles,
    matmul_issue_cycles,
    requant_busy_cycles,
)

__all__ = ["DmaOp", "MatmulOp", "RequantOp", "Op", "Wait", "command_fields", "Timer",
           "matmul_cycles", "matmul_latency", "requant_cycles", "dma_cycles"]

Wait = tuple[str, int] | None   #: ``(semaphore name, count)``


# -- the planner's cost of each command ---------------------------------------------------------

def matmul_cycles(config: NPUConfig, m: int, k_blocks: int = 1) -> int:
    """Cycles between the handshakes of back-to-back MATMULs of ``m >= 1`` rows and
    ``k_blocks`` K blocks on the matrix engine: :func:`hw.isa.matmul_issue_cycles`,
    ``max(m, rows, cols)`` per block, exact in the steady state of
    :class:`hw.isa.timing.MatmulTimeline` (the next MATMUL is taken while this one runs; its
    weights load meanwhile)."""
    return matmul_issue_cycles(config, m, k_blocks)


def matmul_latency(config: NPUConfig, m: int, k_blocks: int = 1) -> int:
    """Cycles from a MATMUL's handshake to the first cycle its semaphore increment is seen:
    ``hw.isa.matmul_busy_cycles + ACCEPT_CYCLES`` (``m + rows + cols + 5`` for one block)."""
    return matmul_busy_cycles(config, m, k_blocks=k_blocks) + ACCEPT_CYCLES


def requant_cycles(config: NPUConfig, n_rows: int) -> int:
    """Cycles between the handshakes of back-to-back REQUANTs of ``n_rows`` rows (no row
    scale): ``hw.isa.requant_busy_cycles + ACCEPT_CYCLES``, exact for ``n_rows >= 1``
    (``n_rows + 12``)."""
    return n_rows + requant_busy_cycles(config, 1) + ACCEPT_CYCLES - 1


def dma_cycles(config: NPUConfig, row_bytes: int, n_rows: int) -> int:
    """The planner's address-free estimate of a DMA command (:func:`hw.isa.dma_estimate_cycles`:
    a beat per cycle, an idle cycle per burst, a fixed overhead that includes the next
    command's fetch)."""
    return dma_estimate_cycles(config, row_bytes, n_rows)


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


Op = DmaOp | MatmulOp | RequantOp

_NOT_FIELDS = {"store", "tag", "wait", "signal"}


def command_fields(op: Op) -> dict:
    """The keyword arguments of ``op``'s :class:`~sw.runtime.CommandList` method, without
    ``wait``/``signal``."""
    return {f.name: getattr(op, f.name) for f in fields(op) if f.name not in _NOT_FIELDS}


# -- the timing model ---------------------------------------------------------------------------

class Timer:
    """Replays a program on a timing model of the engines: each engine runs its commands in
    order, a command starts when its engine is free and its semaphore count is reached, and
    lasts :func:`dma_cycles` / :func:`requant_cycles`; a MATMUL frees the matrix engine after
    :func:`matmul_cycles` and signals after :func:`matmul_latency` (MATMULs overlap). Command
    fetch and dispatch are not modelled. ``bytes`` counts the DRAM bytes per DMA tag."""

    def __init__(self, config: NPUConfig) -> None:
        self.c = config
        self.free = {"load": 0, "store": 0, "matmul": 0, "requant": 0}
        self.done: dict[str, list[int]] = {x: [] for x in "LMRS"}
        self.bytes = {"a": 0, "w": 0, "p": 0, "out": 0}

    def cycles(self, op: Op) -> int:
        c = self.c
        if isinstance(op, DmaOp):
            self.bytes[op.tag] += op.row_bytes * op.n_rows
            return dma_cycles(c, op.row_bytes, op.n_rows)
        if isinstance(op, MatmulOp):
            return matmul_cycles(c, op.m, op.k_blocks)
        return requant_cycles(c, op.n_rows)

    def run(self, ops: list[Op]) -> int:
        """Cycles until the last engine finishes."""
        end = 0
        for op in ops:
            cycles = self.cycles(op)
            t = self.free[op.engine]
            if op.wait is not None:
                t = max(t, self.done[op.wait[0]][op.wait[1] - 1])
            finish = t + (matmul_latency(self.c, op.m, op.k_blocks) if isinstance(op, MatmulOp)
                          else cycles)
            self.free[op.engine] = t + cycles
            end = max(end, finish)
            if op.signal is not None:
                self.done[op.signal].append(finish)
        return max(end, *self.free.values())
