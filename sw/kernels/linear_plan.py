"""Tiling of the linear kernel: :func:`plan_linear` chooses a :class:`LinearPlan` for an
``(M, K) @ (K, N)`` layer on a configuration (the serialized plan, or the fastest
double-buffered tiling on the timing model of :mod:`sw.kernels.linear_ops`);
:func:`double_buffered_plan` builds one by hand. The layout and the schedule are described in
:mod:`sw.kernels.linear`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from hw.config import NPUConfig
from hw.isa import DmaBody, MatmulBody, field_max, weight_tile_rows
from sw.dram import DramTiming
from sw.kernels.linear_layout import Infeasible, a_dram_offset, a_dram_rows, a_tile_rows, ceil_div
from sw.kernels.linear_ops import Timer, matmul_cycles
from sw.kernels.linear_schedule import build_program
from sw.runtime.local import region

__all__ = ["LinearPlan", "plan_linear", "double_buffered_plan", "linear_dram_bytes",
           "a_tile_rows", "a_dram_rows", "a_dram_offset"]

_PARAM_ROW = 0     #: accumulator rows 0..2: bias, multiplier, shift
_ACC_ROW = 3       #: first accumulator row of the output tile (``p_rows`` with GELU)
_MAX_ROW_BYTES = field_max(DmaBody, "row_bytes")   #: a DMA row must fit its field
_MAX_M = field_max(MatmulBody, "m")                  #: rows of one MATMUL
#: The planner stops replaying candidates on the timing model (best lower bound first) once it
#: has replayed this many matmuls and has a plan (bounds the planning time of huge layers).
_REPLAY_BUDGET = 100_000
#: Steps per parameter load the planner tries besides one (:attr:`LinearPlan.p_steps`).
_P_STEPS = 8



@dataclass(frozen=True)
class LinearPlan:
    """Tiling of one linear layer on one configuration (all counts in rows or blocks).

    Row numbers are absolute (they include the region offsets). The serialized plan uses
    ``w_base``, ``a_base``, ``o_base``, ``param_row`` and ``acc_row``; the double-buffered
    plan the tuples of buffers (see :func:`build_linear_commands_double_buffered`).
    """
    m: int
    k: int
    n: int
    kb: int        #: K blocks of ``rows``
    nb: int        #: N blocks of ``cols``
    m_tile: int    #: activation rows per M tile (``Mt``): rows streamed by each MATMUL
    k_chunk: int   #: K blocks resident in the scratchpad at once (``KBc``)
    w_base: int    #: scratchpad row of the (first) weight chunk
    a_base: int    #: scratchpad row of the (first) activation chunk
    o_base: int    #: scratchpad row of the (first) output tile
    double_buffer: bool = False
    n_group: int = 1      #: N blocks per step, each with its own accumulator tile
    w_bases: tuple[int, ...] = ()    #: weight chunk buffers (``n_group * k_chunk * rows``)
    a_bases: tuple[int, ...] = ()    #: activation chunk buffers (``k_chunk * m_tile``)
    o_bases: tuple[int, ...] = ()    #: output tile buffers (``n_group * m_tile``)
    param_rows: tuple[int, ...] = ()  #: parameter buffers (``p_rows * n_group * p_steps``)
    acc_span: tuple[int, int] = (0, 0)   #: accumulator rows of the tiles, [first, end)
    snake: bool = False   #: K chunks of odd steps run backwards (reuse resident chunks)
    est_cycles: int = 0   #: the planner's timing-model estimate (0: not estimated)
    param_row: int = _PARAM_ROW   #: accumulator rows of the parameters (bias, mult, shift)
    acc_row: int = _ACC_ROW       #: accumulator rows of the output tile (serialized plan)
    w_fmt: int = 0        #: weight format (:class:`hw.isa.WeightFormat`)
    a_fmt: int = 0        #: activation format (:class:`hw.isa.ActFormat`)
    x_base: int = 0       #: MX alignment base of the MATMULs (:mod:`hw.isa.formats`)
    gelu: bool = False    #: the epilogue is GELU (4 parameter rows per N block), not REQUANT
    #: consecutive steps of one M tile whose parameters one DMA loads (each of the two
    #: parameter buffers holds ``p_steps * n_group * p_rows`` rows): fewer, longer loads, so
    #: the read latency is paid once per batch (:mod:`sw.kernels.linear_schedule`)
    p_steps: int = 1

    @property
    def p_rows(self) -> int:
        """Accumulator parameter rows per N block: 3 (bias, multiplier, shift) for REQUANT,
        4 for GELU (bias, m1, ``s1 | s2 << 8``, m2; :class:`hw.isa.RequantBody`)."""
        return 4 if self.gelu else 3

    def w_tile(self, config: NPUConfig) -> int:
        """Scratchpad (and DRAM) rows of one weight K block (:func:`hw.isa.weight_tile_rows`)."""
        return weight_tile_rows(config, self.w_fmt)


def plan_linear(config: NPUConfig, m: int, k: int, n: int, *, double_buffer: bool = False,
                spad_region: tuple[int, int] | None = None,
                acc_region: tuple[int, int] | None = None,
                dram: DramTiming | None = None, w_fmt: int = 0, a_fmt: int = 0,
                x_base: int = 0, gelu: bool = False) -> LinearPlan:
    """Choose the tiling for an ``(m, k) @ (k, n)`` layer (see the module docstring).

    Parameters
    ----------
    double_buffer : bool
        Plan the double-buffered stream (:func:`_plan_double_buffered`); falls back to the
        serialized plan if no double-buffered tiling fits.
    spad_region, acc_region : tuple of (int, int), optional
        ``(first row, rows)`` of the scratchpad / accumulator the kernel may use (default:
        all), so that kernels on different streams can run concurrently.
    dram : DramTiming, optional
        The DRAM timing the layer will run under: the double-buffered candidates are ranked
        on the timing model under it (:class:`~sw.kernels.linear_ops.Timer`); None: ideal.
    w_fmt, a_fmt, x_base : int
        Operand formats (:mod:`hw.isa.formats`): the tiles' rows in the scratchpad and in
        DRAM (int4 weights are half the bytes, so the planner sees half the weight traffic),
        the MATMULs' issue cycles; ``x_base`` goes into every MATMUL.
    gelu : bool
        GELU epilogue instead of REQUANT (four parameter rows per N block).

    Raises
    ------
    ValueError
        If a dimension is < 1, a region is outside its memory, or the scratchpad cannot hold
        even one weight block, one activation row and one output row.
    """
    if min(m, k, n) < 1:
        raise ValueError(f"dimensions must be >= 1, got M={m}, K={k}, N={n}")
    c = config
    s0, s_rows = region(spad_region, c.spad_rows, "scratchpad")
    a0, a_rows = region(acc_region, c.acc_rows, "accumulator")
    kb, nb = ceil_div(k, c.rows), ceil_div(n, c.cols)
    fmt = LinearPlan(m=m, k=k, n=n, kb=kb, nb=nb, m_tile=1, k_chunk=1, w_base=0, a_base=0,
                     o_base=0, w_fmt=w_fmt, a_fmt=a_fmt, x_base=x_base, gelu=gelu)
    # Mt limits besides the scratchpad: accumulator rows and the 16-bit DMA row_bytes field
    # (an activation tile's rows, exponent rows included).
    m_lim = min(m, _MAX_M, _MAX_ROW_BYTES // c.spad_row_bytes)
    while m_lim > 1 and a_tile_rows(c, fmt, m_lim) * c.spad_row_bytes > _MAX_ROW_BYTES:
        m_lim -= 1
    if double_buffer:
        plan = _plan_double_buffered(c, fmt, s0, s_rows, a0, a_rows, m_lim, dram)
        if plan is not None:
            return plan
    acc_row = fmt.p_rows               # the output tile after the parameter rows
    m_cap = min(m_lim, a_rows - acc_row)
    wt = fmt.w_tile(c)

    def at(mt: int) -> int:
        return a_tile_rows(c, fmt, mt)
    # Whole K resident: kb*wt + kb*at(Mt) + Mt <= spad_rows.
    mt = m_cap
    while mt >= 1 and kb * wt + kb * at(mt) + mt > s_rows:
        mt -= 1
    if mt >= 1:
        kbc = kb
    else:
        mt = m_cap
        while mt >= 1 and wt + at(mt) + mt > s_rows:
            mt -= 1
        if mt < 1:
            raise ValueError(f"scratchpad of {s_rows} rows is too small for a linear layer")
        kbc = min(kb, (s_rows - mt) // (wt + at(mt)))
    return dataclasses.replace(fmt, m_tile=mt, k_chunk=kbc, w_base=s0, a_base=s0 + kbc * wt,
                               o_base=s0 + kbc * wt + kbc * at(mt),
                               param_row=a0 + _PARAM_ROW, acc_row=a0 + acc_row)


def _plan_double_buffered(c: NPUConfig, fmt: LinearPlan, s0: int, s_rows: int,
                          a0: int, a_rows: int, m_lim: int,
                          dram: DramTiming | None = None) -> LinearPlan | None:
    """The double-buffered tiling with the fewest estimated cycles, or None if none fits.

    Candidates: ``n_group`` G from 1 to ``cmd_fifo_depth`` (so that the requantizations and
    stores of a step never wait in a full engine FIFO, which would hold up the dispatch of
    the next matmuls); parameters of one step or of up to ``_P_STEPS`` steps per load
    (``p_steps``); M tiles of nearly equal size as large as the accumulator allows
    (``G * Mt`` rows per step, two steps' tiles at opposite ends of what the two parameter
    buffers of ``3 G p_steps`` rows leave, overlapping if need be) and the sizes at which the
    whole K fits in the scratchpad; for each, the whole K resident (activations loaded once
    per M tile, one or two buffers) or the largest K chunk with two activation and two
    weight buffers; one or two output tiles. Each candidate's program is replayed on the
    timing model
    (:class:`~sw.kernels.linear_ops.Timer`, under ``dram``), most promising first (lower
    bound: its matmul cycles, :func:`_matmul_bound`), and the fastest wins; ties go to less
    DRAM traffic.
    """
    m, k, n = fmt.m, fmt.k, fmt.n
    kb, nb = ceil_div(k, c.rows), ceil_div(n, c.cols)
    wt = fmt.w_tile(c)
    kbc_lim = _MAX_ROW_BYTES // (wt * c.spad_row_bytes)        # weight chunk row_bytes

    def at(mt: int) -> int:
        return a_tile_rows(c, fmt, mt)
    cands: set[tuple] = set()
    groups = range(1, min(nb, c.cmd_fifo_depth) + 1)
    for g, ps in [(x, p) for x in groups for p in sorted({1, min(_P_STEPS, ceil_div(nb, x))})]:
        avail = a_rows - 2 * fmt.p_rows * g * ps   # rows for the tiles of two steps
        mt_cap = min(m_lim, (avail - 1) // g)
        if mt_cap < 1:
            continue
        n_g = ceil_div(nb, g)
        w_res = 1 if n_g == 1 else 2
        mts = set()
        # Full-size tiles (largest first), and the largest Mt at which the whole K fits.
        nt0 = ceil_div(m, mt_cap)
        for nt in range(nt0, min(m, nt0 + 3) + 1):
            mts.add(ceil_div(m, nt))
        for o_bufs in (1, 2):
            for a_bufs in (1, 2):
                fit = (s_rows - w_res * g * kb * wt) // (a_bufs * kb + o_bufs * g)
                while fit >= 1 and (w_res * g * kb * wt + a_bufs * kb * at(fit) + o_bufs * g * fit
                                    > s_rows):
                    fit -= 1
                if fit >= 1:
                    mt = min(fit, mt_cap)
                    mts.add(ceil_div(m, ceil_div(m, mt)))
        for mt in mts:
            n_mt = ceil_div(m, mt)
            resident_done = chunk_best = 0
            for o_bufs in (2, 1):       # one output tile only if that fits more
                out_rows = o_bufs * g * mt
                if kb <= kbc_lim and not resident_done:      # whole K resident
                    for a_bufs in ((1,) if n_mt == 1 else (2, 1)):
                        if w_res * g * kb * wt + a_bufs * kb * at(mt) + out_rows <= s_rows:
                            cands.add((g, mt, kb, o_bufs, a_bufs, w_res, ps))
                            resident_done = 1
                            break
                kbc = min(kb - 1, kbc_lim, (s_rows - out_rows) // (2 * g * wt + 2 * at(mt)))
                if kbc > chunk_best:
                    cands.add((g, mt, kbc, o_bufs, 2, 2, ps))
                    chunk_best = kbc
    order = sorted(cands, key=lambda x: (_matmul_bound(c, fmt, x[1], nb, kb), -x[1], x))
    best: tuple | None = None
    replayed = 0
    for g, mt, kbc, o_bufs, a_bufs, w_bufs, ps in order:
        bound = _matmul_bound(c, fmt, mt, nb, kb)
        if best is not None and (bound > best[0][0] or replayed >= _REPLAY_BUDGET):
            break
        replayed += ceil_div(m, mt) * nb * kb      # matmuls of this candidate
        plan = _make_plan(c, fmt, s0, a0, a_rows, mt, kbc, g, o_bufs, a_bufs, w_bufs,
                          kbc < kb, ps)
        timer = Timer(c, dram)
        try:
            ops = build_program(c, plan, 0, 0, 0, 0, False)
        except Infeasible:
            continue
        cycles = timer.run(ops)
        score = (cycles, sum(timer.bytes.values()), len(ops))
        if best is None or score < best[0]:
            best = (score, plan)
    if best is None:
        return None
    return dataclasses.replace(best[1], est_cycles=best[0][0])


def _matmul_bound(c: NPUConfig, fmt: LinearPlan, mt: int, nb: int, kb: int) -> int:
    """Cycles the matrix engine needs for a plan with M tiles of ``mt`` rows (the last one
    smaller): ``nb * kb`` back-to-back MATMULs per tile, each :func:`matmul_cycles`."""
    full, rest = divmod(fmt.m, mt)
    f = (fmt.w_fmt, fmt.a_fmt)
    per_block = full * matmul_cycles(c, mt, 1, *f) + (matmul_cycles(c, rest, 1, *f)
                                                        if rest else 0)
    return nb * kb * per_block


def _make_plan(c: NPUConfig, fmt: LinearPlan, s0: int, a0: int, a_rows: int, mt: int,
               kbc: int, g: int, o_bufs: int, a_bufs: int, w_bufs: int,
               snake: bool, p_steps: int = 1) -> LinearPlan:
    """A double-buffered plan with the buffers laid out from ``s0`` (weights, activations,
    output tiles) and ``a0`` (two parameter sets of ``p_rows * g * p_steps`` rows, then the
    tiles)."""
    m, k, n = fmt.m, fmt.k, fmt.n
    kb, nb = ceil_div(k, c.rows), ceil_div(n, c.cols)
    w_rows, a_rows_ = g * kbc * fmt.w_tile(c), kbc * a_tile_rows(c, fmt, mt)
    w_bases = tuple(s0 + i * w_rows for i in range(w_bufs))
    a_start = s0 + w_bufs * w_rows
    a_bases = tuple(a_start + i * a_rows_ for i in range(a_bufs))
    o_start = a_start + a_bufs * a_rows_
    o_bases = tuple(o_start + i * g * mt for i in range(o_bufs))
    p_set = fmt.p_rows * g * p_steps
    return dataclasses.replace(
        fmt, m=m, k=k, n=n, kb=kb, nb=nb, m_tile=mt, k_chunk=kbc,
        w_base=w_bases[0], a_base=a_bases[0], o_base=o_bases[0],
        double_buffer=True, n_group=g, w_bases=w_bases, a_bases=a_bases,
        o_bases=o_bases, param_rows=(a0, a0 + p_set), p_steps=p_steps,
        acc_span=(a0 + 2 * p_set, a0 + a_rows), snake=snake,
        param_row=a0, acc_row=a0 + 2 * p_set)


def double_buffered_plan(config: NPUConfig, m: int, k: int, n: int, *, m_tile: int,
                         k_chunk: int, n_group: int = 1, out_buffers: int = 2,
                         a_buffers: int = 2, w_buffers: int = 2, snake: bool | None = None,
                         spad_region: tuple[int, int] | None = None,
                         acc_region: tuple[int, int] | None = None, w_fmt: int = 0,
                         a_fmt: int = 0, x_base: int = 0, gelu: bool = False,
                         p_steps: int = 1) -> LinearPlan:
    """A double-buffered tiling chosen by hand (for experiments and tests; :func:`plan_linear`
    chooses one). ``snake`` defaults to ``k_chunk < KB``; one-buffer variants are correct
    but serialize the loads that reuse the buffer.

    Raises
    ------
    ValueError
        If a count is out of range or the buffers do not fit the regions (the tiles of one
        step must leave at least one accumulator row to the other step's).
    """
    c = config
    s0, s_rows = region(spad_region, c.spad_rows, "scratchpad")
    a0, a_rows = region(acc_region, c.acc_rows, "accumulator")
    kb, nb = ceil_div(k, c.rows), ceil_div(n, c.cols)
    fmt = LinearPlan(m=m, k=k, n=n, kb=kb, nb=nb, m_tile=1, k_chunk=1, w_base=0, a_base=0,
                     o_base=0, w_fmt=w_fmt, a_fmt=a_fmt, x_base=x_base, gelu=gelu)
    wt, at = fmt.w_tile(c), a_tile_rows(c, fmt, m_tile)
    m_lim = min(m, _MAX_ROW_BYTES // c.spad_row_bytes)
    kbc_lim = _MAX_ROW_BYTES // (wt * c.spad_row_bytes)
    checks = [(1 <= m_tile <= m_lim, f"m_tile must be in 1..{m_lim}"),
              (1 <= k_chunk <= min(kb, kbc_lim), f"k_chunk must be in 1..{min(kb, kbc_lim)}"),
              (1 <= n_group <= nb, f"n_group must be in 1..{nb}"),
              (all(x in (1, 2) for x in (out_buffers, a_buffers, w_buffers)),
               "buffer counts must be 1 or 2"),
              (w_buffers * n_group * k_chunk * wt + a_buffers * k_chunk * at
               + out_buffers * n_group * m_tile <= s_rows, "the buffers do not fit the scratchpad"),
              (p_steps >= 1, "p_steps must be >= 1"),
              (n_group * m_tile < a_rows - 2 * fmt.p_rows * n_group * p_steps,
               "the tiles do not fit the accumulator"),
              (p_steps == 1 or (out_buffers + 1) * n_group * m_tile
               <= a_rows - 2 * fmt.p_rows * n_group * p_steps,
               "with p_steps > 1 the accumulator must hold out_buffers + 1 tiles beside the "
               "parameters")]
    for ok, why in checks:
        if not ok:
            raise ValueError(why)
    return _make_plan(c, fmt, s0, a0, a_rows, m_tile, k_chunk, n_group, out_buffers,
                      a_buffers, w_buffers, k_chunk < kb if snake is None else snake, p_steps)



def linear_dram_bytes(config: NPUConfig, plan: LinearPlan) -> dict:
    """DRAM bytes the kernel's command stream moves for ``plan``: ``{"a", "w", "params",
    "out", "total"}`` (padded rows as stored; activations and weights as often as reloaded)."""
    c = config
    srb = c.spad_row_bytes
    if plan.double_buffer:
        t = Timer(c)
        t.run(build_program(c, plan, 0, 0, 0, 0, False))
        b = t.bytes
        a, w, p, out = b["a"], b["w"], b["p"], b["out"]
    else:
        m_tiles = ceil_div(plan.m, plan.m_tile)
        n_chunks = ceil_div(plan.kb, plan.k_chunk)
        a = plan.kb * a_dram_rows(c, plan) * srb * (1 if n_chunks == 1 else plan.nb)
        w = m_tiles * plan.nb * plan.kb * plan.w_tile(c) * srb
        p = m_tiles * plan.nb * plan.p_rows * c.acc_row_bytes
        out = plan.nb * plan.m * srb
    return {"a": a, "w": w, "params": p, "out": out, "total": a + w + p + out}

