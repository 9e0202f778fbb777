"""The layout of the linear kernel's double-buffered schedule
(:mod:`sw.kernels.linear_schedule`): where an M tile's activation rows sit in DRAM, and the
tiles, K chunks, steps and phases of a :class:`~sw.kernels.linear_plan.LinearPlan` with the
scratchpad buffer, parameter batch and accumulator rows each one uses (:class:`Layout`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hw.config import NPUConfig
from hw.isa import act_tile_rows

if TYPE_CHECKING:
    from sw.kernels.linear_plan import LinearPlan

__all__ = ["Infeasible", "Layout", "a_tile_rows", "a_dram_rows", "a_dram_offset", "balanced",
           "ceil_div"]


def a_tile_rows(config: NPUConfig, plan: LinearPlan, mt: int) -> int:
    """Rows of one K block of an M tile of ``mt`` activation rows (:func:`hw.isa.act_tile_rows`:
    ``mt``, plus the exponent rows of MXINT8), in the scratchpad and in DRAM."""
    return act_tile_rows(config, mt, plan.a_fmt)


def a_dram_rows(config: NPUConfig, plan: LinearPlan) -> int:
    """DRAM rows of one K block of the activations: ``M``, or for MXINT8 the sum over the M
    tiles of :func:`a_tile_rows` (each tile its own groups of exponent rows)."""
    full, rest = divmod(plan.m, plan.m_tile)
    return full * a_tile_rows(config, plan, plan.m_tile) + (
        a_tile_rows(config, plan, rest) if rest else 0)


def a_dram_offset(config: NPUConfig, plan: LinearPlan, i0: int) -> int:
    """Row of the M tile starting at activation row ``i0`` (a multiple of ``m_tile``) within a
    K block of the activations in DRAM."""
    return (i0 // plan.m_tile) * a_tile_rows(config, plan, plan.m_tile)

def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class Infeasible(ValueError):
    """A tiling cannot be expressed as a command stream (the planner skips it)."""


def balanced(total: int, most: int) -> list[int]:
    """``total`` split into ``ceil(total / most)`` parts of nearly equal size (each <= most)."""
    parts = ceil_div(total, most)
    base, extra = divmod(total, parts)
    return [base + (i < extra) for i in range(parts)]


class _Buffers:
    """Which content each of ``n`` alternating buffers holds; decides the loads of a phase."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.content: list = [None] * n
        self.last = [-1] * n      # last phase that used the buffer
        self.prev: int | None = None

    def use(self, phase: int, key) -> tuple[int, bool, int]:
        """Buffer for ``key`` in ``phase``: ``(buffer, load needed, last phase that used the
        buffer before, or -1)``. A load goes to the buffer the previous phase did not use."""
        if key in self.content:
            b, load, q = self.content.index(key), False, -1
        else:
            b = 0 if self.n == 1 or self.prev is None else 1 - self.prev
            load, q = True, self.last[b]
            self.content[b] = key
        self.last[b] = phase
        self.prev = b
        return b, load, q


class Layout:
    """The tiles, chunks, steps and phases of a plan, and which buffer each phase uses."""

    def __init__(self, config: NPUConfig, plan: LinearPlan) -> None:
        p = plan
        m, kb, nb = p.m, p.kb, p.nb
        self.m_tiles = [(i0, min(p.m_tile, m - i0)) for i0 in range(0, m, p.m_tile)]
        self.n_groups = [(j0, min(p.n_group, nb - j0)) for j0 in range(0, nb, p.n_group)]
        self.chunks: list[tuple[int, int]] = []      # (first K block, K blocks)
        kb0 = 0
        for nk in balanced(kb, p.k_chunk):
            self.chunks.append((kb0, nk))
            kb0 += nk
        self.steps = [(ti, gi) for ti in range(len(self.m_tiles))
                      for gi in range(len(self.n_groups))]
        self.phases: list[tuple[int, int]] = []      # (step, chunk)
        self.first: list[int] = []                   # first and last phase of each step
        self.last: list[int] = []
        for s in range(len(self.steps)):
            order = range(len(self.chunks))
            if p.snake and s % 2:
                order = reversed(order)
            self.first.append(len(self.phases))
            self.phases.extend((s, ci) for ci in order)
            self.last.append(len(self.phases) - 1)
        # Buffers per phase (A: M tile and K chunk; W: N group and K chunk).
        a_bufs, w_bufs = _Buffers(len(p.a_bases)), _Buffers(len(p.w_bases))
        self.a_use = [a_bufs.use(ph, (self.steps[s][0], ci))
                      for ph, (s, ci) in enumerate(self.phases)]
        self.w_use = [w_bufs.use(ph, (self.steps[s][1], ci))
                      for ph, (s, ci) in enumerate(self.phases)]
        # Parameter batches: up to p_steps consecutive steps of one M tile, one load each
        # (their N blocks are consecutive in DRAM), alternately into the two buffers.
        self.batch: list[int] = []                   # first step of each step's batch
        for s, (ti, gi) in enumerate(self.steps):
            new = gi % p.p_steps == 0 or s == 0 or self.steps[s - 1][0] != ti
            self.batch.append(s if new else self.batch[-1])
        firsts = list(dict.fromkeys(self.batch))     # the first step of each batch
        self.p_buf = {b: i % 2 for i, b in enumerate(firsts)}       # batch -> buffer
        # the last step of the batch before the previous one (it used the same buffer)
        self.p_reuse = {b: firsts[i - 1] - 1 for i, b in enumerate(firsts) if i >= 2}
        self.p_blocks = dict.fromkeys(firsts, 0)     # N blocks whose parameters it loads
        for s, b in enumerate(self.batch):
            self.p_blocks[b] += self.tile(s)[3]
        # The parameters of a batch load with the loads of phase p_at[first step]: late
        # enough that the requantizations of the batch before the previous one (same buffer)
        # have normally finished when dispatched.
        self.p_at: dict[int, list[int]] = {}
        for s in self.p_buf:
            q = 0 if s == 0 else min(self.first[s - 1] + 2, self.first[s])
            self.p_at.setdefault(q, []).append(s)
        self.acc_span = p.acc_span
        # Accumulator tiles: with one parameter load per step, alternately at the two ends of
        # the region (step s overwrites the tile of step s - 2, and its parameter load waits
        # for that step's requantizations). A batched load does not, so the tiles rotate
        # through one slot more than there are output tiles: step s overwrites the tile of
        # step s - O - 1, stored (so requantized) before the out-tile wait of step s - 1
        # (``_Program.wait_for_out_tile`` of :mod:`sw.kernels.linear_schedule`) lets the matrix
        # engine go on.
        self.acc_slots = 0
        if p.p_steps > 1:
            self.acc_slots = len(p.o_bases) + 1
            if self.acc_slots * p.m_tile * p.n_group > self.acc_span[1] - self.acc_span[0]:
                raise Infeasible(f"{self.acc_slots} accumulator tiles of "
                                 f"{p.m_tile * p.n_group} rows do not fit beside the batched "
                                 "parameters")

    def tile(self, s: int) -> tuple[int, int, int, int]:
        """``(first row, rows, first N block, N blocks)`` of step ``s``."""
        ti, gi = self.steps[s]
        return (*self.m_tiles[ti], *self.n_groups[gi])

    def acc_rows_of(self, s: int) -> tuple[int, int]:
        """Accumulator rows of step s: alternately at the low and the high end of the tile
        region, so consecutive steps overlap only if two tiles do not fit side by side; with
        batched parameters in ``acc_slots`` slots in turn from the low end."""
        lo_end, hi_end = self.acc_span
        _, mt, _, g = self.tile(s)
        t = mt * g
        if self.acc_slots:
            lo = lo_end + s % self.acc_slots * self.p.m_tile * self.p.n_group
            return lo, lo + t
        return (lo_end, lo_end + t) if s % 2 == 0 else (hi_end - t, hi_end)

    def overlap(self, s: int) -> tuple[int, int] | None:
        """Accumulator rows that step s overwrites while step s - 1 may still read them."""
        if s == 0 or s >= len(self.steps):
            return None
        a, b = self.acc_rows_of(s - 1), self.acc_rows_of(s)
        lo, hi = max(a[0], b[0]), min(a[1], b[1])
        return (lo, hi) if lo < hi else None
