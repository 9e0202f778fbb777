"""Quantized linear layer (int8 GEMM + requantization) as an NPU command stream.

``out = requantize(A @ W + bias, multiplier, shift, relu)`` for int8 ``A`` (M, K), int8 ``W``
(K, N), int32 ``bias`` (N,) and per-channel fixed-point ``multiplier``/``shift`` (N,), bit-exact
with :func:`sw.golden.linear_int`, for any M, K, N.

DRAM layout (all zero-padded, every row ``spad_row_bytes`` wide, so every DMA address and stride
is a multiple of the row and the DMA alignment rule holds for any configuration):

* ``A``: shape ``(KB, M, spad_row_bytes)`` int8, ``KB = ceil(K / rows)``; ``[kb, i, :rows]`` =
  ``A[i, kb*rows : (kb+1)*rows]``. For one M tile and a range of K blocks this is one 2-D DMA
  (a DRAM row per K block, ``Mt * spad_row_bytes`` bytes, landing on ``Mt`` consecutive
  scratchpad rows).
* ``W``: shape ``(NB, K_pad, spad_row_bytes)`` int8, ``NB = ceil(N / cols)``,
  ``K_pad = KB * rows``; ``[nb, k, :cols]`` = ``W[k, nb*cols : (nb+1)*cols]``. A K range of a
  weight column block is contiguous (one DMA per group of N blocks, in DRAM rows short enough
  that a command fetch never waits long behind a burst: :func:`_w_row_blocks`).
* Parameters: shape ``(NB, 3, acc_row_elems)`` int32: bias, multiplier, shift of the block's
  ``cols`` channels (zero for padding channels); the ``3 G`` rows of a group of N blocks are one
  DMA into the accumulator.
* Output: shape ``(NB, M, spad_row_bytes)`` int8; ``[nb, i, :cols]`` = ``out[i, nb*cols : ...]``.

Double-buffered tiling (the default; :func:`plan_linear` with ``double_buffer=True``,
:func:`build_linear_commands_double_buffered`). A MATMUL streams ``Mt`` activation rows through
one ``rows x cols`` weight tile and costs ``Mt`` plus a fixed overhead (weight load, array fill
and drain: :func:`matmul_cycles`, 28 cycles on 8x8), so the plan makes ``Mt`` as large as the
accumulator allows and chunks K to fit the scratchpad:

* a *step* is one M tile of ``Mt`` rows and one group of ``n_group`` (G) N blocks, each with its
  own accumulator tile of ``Mt`` rows; the tiles of consecutive steps sit at opposite ends of
  the accumulator (after two sets of ``3 G`` parameter rows) and may overlap;
* a *phase* is one K chunk of ``KBc`` blocks of a step: an activation chunk (``KBc * Mt``
  scratchpad rows) and a weight chunk (``G * KBc * rows`` rows), two buffers each, and
  ``G * KBc`` MATMULs accumulating over K (``accumulate`` after the first K block of the step);
* with the whole K resident (``KBc = KB``) the activations load once per M tile and serve every
  N group; otherwise they stream per phase, and every other step runs its K chunks backwards
  (``snake``) so that the two chunks still resident are not reloaded;
* one or two output tiles (``G * Mt`` rows each).

:func:`plan_linear` enumerates the tilings that fit (G up to ``cmd_fifo_depth``; ``Mt`` as large
as the accumulator allows, or as the whole K resident allows; whole or chunked K; one or two
output tiles) and replays each candidate's command stream on a timing model of the engines
(:class:`_Timer`: :func:`matmul_cycles`, :func:`requant_cycles`, :func:`dma_cycles`, in-order
engines, semaphore waits), keeping the fastest; everything derives from the
:class:`~hw.config.NPUConfig` and the region sizes. Loads for the next phase stream in while the
array computes the current one; see :func:`build_linear_commands_double_buffered` for the
ordering. If no double-buffered tiling fits (tiny memories) or with ``double_buffer=False`` the
kernel uses the serialized plan: a weight chunk (``KBc * rows`` rows), an activation chunk
(``KBc * Mt``) and an output tile (``Mt``) with ``Mt`` as large as fits with the whole K
resident, else K in chunks; every command waits for ``sem >= base + i`` (all earlier commands
retired) and signals it; no overlap.

Semaphores come from the device's pool (:meth:`sw.runtime.Device.alloc_semaphore`), so kernels
on different streams, each in its own ``spad_region``/``acc_region``, can run concurrently
(:func:`linear_launch`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hw.config import NPUConfig
from hw.isa import LocalMem
from sw.runtime import Buffer, CommandList, Device, Semaphore, Stream

__all__ = ["LinearPlan", "LinearStats", "LinearJob", "plan_linear", "linear", "linear_with_stats",
           "linear_launch", "pack_activations", "build_linear_commands",
           "build_linear_commands_double_buffered", "double_buffered_plan", "linear_dram_bytes",
           "matmul_cycles",
           "requant_cycles", "dma_cycles"]

_SEM = 0           #: the semaphore used as the kernel's sequence counter
_PARAM_ROW = 0     #: accumulator rows 0..2: bias, multiplier, shift
_ACC_ROW = 3       #: first accumulator row of the output tile
_MAX_ROW_BYTES = (1 << 16) - 1


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


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
    param_rows: tuple[int, ...] = ()  #: parameter buffers (``3 * n_group`` accumulator rows)
    acc_span: tuple[int, int] = (0, 0)   #: accumulator rows of the tiles, [first, end)
    snake: bool = False   #: K chunks of odd steps run backwards (reuse resident chunks)
    est_cycles: int = 0   #: the planner's timing-model estimate (0: not estimated)
    param_row: int = _PARAM_ROW   #: accumulator rows of the parameters (bias, mult, shift)
    acc_row: int = _ACC_ROW       #: accumulator rows of the output tile (serialized plan)


@dataclass(frozen=True)
class LinearStats:
    """What one :func:`linear_with_stats` call did.

    Attributes
    ----------
    cycles : int
        Device cycles from launch to completion (0 on the untimed model).
    n_commands : int
        Commands in the kernel's stream (without the runtime's fence).
    macs : int
        Useful multiply-accumulates, ``M * K * N``.
    utilization : float or None
        ``macs / (cycles * rows * cols)``; ``None`` when ``cycles == 0``.
    plan : LinearPlan
        The tiling used.
    """
    cycles: int
    n_commands: int
    macs: int
    utilization: float | None
    plan: LinearPlan


def _region(region: tuple[int, int] | None, depth: int, what: str) -> tuple[int, int]:
    if region is None:
        return 0, depth
    base, rows = region
    if base < 0 or rows < 1 or base + rows > depth:
        raise ValueError(f"{what} region {region} is outside [0, {depth})")
    return base, rows


def plan_linear(config: NPUConfig, m: int, k: int, n: int, *, double_buffer: bool = False,
                spad_region: tuple[int, int] | None = None,
                acc_region: tuple[int, int] | None = None) -> LinearPlan:
    """Choose the tiling for an ``(m, k) @ (k, n)`` layer (see the module docstring).

    Parameters
    ----------
    double_buffer : bool
        Plan the double-buffered stream (:func:`_plan_double_buffered`); falls back to the
        serialized plan if no double-buffered tiling fits.
    spad_region, acc_region : tuple of (int, int), optional
        ``(first row, rows)`` of the scratchpad / accumulator the kernel may use (default:
        all), so that kernels on different streams can run concurrently.

    Raises
    ------
    ValueError
        If a dimension is < 1, a region is outside its memory, or the scratchpad cannot hold
        even one weight block, one activation row and one output row.
    """
    if min(m, k, n) < 1:
        raise ValueError(f"dimensions must be >= 1, got M={m}, K={k}, N={n}")
    c = config
    s0, s_rows = _region(spad_region, c.spad_rows, "scratchpad")
    a0, a_rows = _region(acc_region, c.acc_rows, "accumulator")
    kb, nb = _ceil_div(k, c.rows), _ceil_div(n, c.cols)
    # Mt limits besides the scratchpad: accumulator rows and the 16-bit DMA row_bytes field.
    m_lim = min(m, _MAX_ROW_BYTES // c.spad_row_bytes, (1 << 16) - 1)
    if double_buffer:
        plan = _plan_double_buffered(c, m, k, n, s0, s_rows, a0, a_rows, m_lim)
        if plan is not None:
            return plan
    m_cap = min(m_lim, a_rows - _ACC_ROW)
    # Whole K resident: kb*rows + kb*Mt + Mt <= spad_rows.
    mt = min(m_cap, (s_rows - kb * c.rows) // (kb + 1))
    if mt >= 1:
        kbc = kb
    else:
        mt = min(m_cap, (s_rows - c.rows) // 2)
        if mt < 1:
            raise ValueError(f"scratchpad of {s_rows} rows is too small for a linear layer")
        kbc = min(kb, (s_rows - mt) // (c.rows + mt))
    return LinearPlan(m=m, k=k, n=n, kb=kb, nb=nb, m_tile=mt, k_chunk=kbc,
                      w_base=s0, a_base=s0 + kbc * c.rows, o_base=s0 + kbc * c.rows + kbc * mt,
                      param_row=a0 + _PARAM_ROW, acc_row=a0 + _ACC_ROW)


def _plan_double_buffered(c: NPUConfig, m: int, k: int, n: int, s0: int, s_rows: int,
                          a0: int, a_rows: int, m_lim: int) -> LinearPlan | None:
    """The double-buffered tiling with the fewest estimated cycles, or None if none fits.

    Candidates: ``n_group`` G from 1 to ``cmd_fifo_depth`` (so that the requantizations and
    stores of a step never wait in a full engine FIFO, which would hold up the dispatch of
    the next matmuls); M tiles of nearly equal size as large as the accumulator allows
    (``G * Mt`` rows per step, two steps' tiles at opposite ends of what the 2 x 3G parameter
    rows leave, overlapping if need be) and the sizes at which the whole K fits in the
    scratchpad; for each, the whole K resident (activations loaded once per M tile, one or
    two buffers) or the largest K chunk with two activation and two weight buffers; one or
    two output tiles. Each candidate's program is replayed on the timing model
    (:class:`_Timer`, the matrix engine's per-command overhead ``matmul_cycles(config, 0)``
    included), most promising first (lower bound: its matmul cycles), and the fastest wins;
    ties go to less DRAM traffic.
    """
    kb, nb = _ceil_div(k, c.rows), _ceil_div(n, c.cols)
    kbc_lim = _MAX_ROW_BYTES // (c.rows * c.spad_row_bytes)     # weight chunk row_bytes
    overhead = matmul_cycles(c, 0)
    cands: set[tuple] = set()
    for g in range(1, min(nb, c.cmd_fifo_depth) + 1):
        avail = a_rows - 6 * g            # rows for the tiles of two consecutive steps
        mt_cap = min(m_lim, (avail - 1) // g)
        if mt_cap < 1:
            continue
        n_g = _ceil_div(nb, g)
        w_res = 1 if n_g == 1 else 2
        mts = set()
        # Full-size tiles (largest first), and the largest Mt at which the whole K fits.
        nt0 = _ceil_div(m, mt_cap)
        for nt in range(nt0, min(m, nt0 + 3) + 1):
            mts.add(_ceil_div(m, nt))
        for o_bufs in (1, 2):
            for a_bufs in (1, 2):
                fit = (s_rows - w_res * g * kb * c.rows) // (a_bufs * kb + o_bufs * g)
                if fit >= 1:
                    mt = min(fit, mt_cap)
                    mts.add(_ceil_div(m, _ceil_div(m, mt)))
        for mt in mts:
            n_mt = _ceil_div(m, mt)
            resident_done = chunk_best = 0
            for o_bufs in (2, 1):       # one output tile only if that fits more
                out_rows = o_bufs * g * mt
                if kb <= kbc_lim and not resident_done:      # whole K resident
                    for a_bufs in ((1,) if n_mt == 1 else (2, 1)):
                        if w_res * g * kb * c.rows + a_bufs * kb * mt + out_rows <= s_rows:
                            cands.add((g, mt, kb, o_bufs, a_bufs, w_res))
                            resident_done = 1
                            break
                kbc = min(kb - 1, kbc_lim, (s_rows - out_rows) // (2 * g * c.rows + 2 * mt))
                if kbc > chunk_best:
                    cands.add((g, mt, kbc, o_bufs, 2, 2))
                    chunk_best = kbc
    order = sorted(cands, key=lambda x: (nb * kb * (m + _ceil_div(m, x[1]) * overhead),
                                          -x[1], x))
    best: tuple | None = None
    replayed = 0
    for g, mt, kbc, o_bufs, a_bufs, w_bufs in order:
        bound = nb * kb * (m + _ceil_div(m, mt) * overhead)
        if best is not None and (bound > best[0][0] or replayed >= _REPLAY_BUDGET):
            break
        replayed += _ceil_div(m, mt) * nb * kb      # matmuls of this candidate
        plan = _make_plan(c, m, k, n, s0, a0, a_rows, mt, kbc, g, o_bufs, a_bufs, w_bufs,
                          kbc < kb)
        timer = _Timer(c)
        try:
            ops = _program(c, plan, 0, 0, 0, 0, False)
        except _Infeasible:
            continue
        cycles = timer.run(ops)
        score = (cycles, sum(timer.bytes.values()), len(ops))
        if best is None or score < best[0]:
            best = (score, plan)
    if best is None:
        return None
    return dataclasses.replace(best[1], est_cycles=best[0][0])


def _make_plan(c: NPUConfig, m: int, k: int, n: int, s0: int, a0: int, a_rows: int, mt: int,
               kbc: int, g: int, o_bufs: int, a_bufs: int, w_bufs: int,
               snake: bool) -> LinearPlan:
    """A double-buffered plan with the buffers laid out from ``s0`` (weights, activations,
    output tiles) and ``a0`` (two parameter sets of ``3 g`` rows, then the tiles)."""
    kb, nb = _ceil_div(k, c.rows), _ceil_div(n, c.cols)
    w_rows, a_rows_ = g * kbc * c.rows, kbc * mt
    w_bases = tuple(s0 + i * w_rows for i in range(w_bufs))
    a_start = s0 + w_bufs * w_rows
    a_bases = tuple(a_start + i * a_rows_ for i in range(a_bufs))
    o_start = a_start + a_bufs * a_rows_
    o_bases = tuple(o_start + i * g * mt for i in range(o_bufs))
    return LinearPlan(m=m, k=k, n=n, kb=kb, nb=nb, m_tile=mt, k_chunk=kbc,
                      w_base=w_bases[0], a_base=a_bases[0], o_base=o_bases[0],
                      double_buffer=True, n_group=g, w_bases=w_bases, a_bases=a_bases,
                      o_bases=o_bases, param_rows=(a0, a0 + 3 * g),
                      acc_span=(a0 + 6 * g, a0 + a_rows), snake=snake,
                      param_row=a0, acc_row=a0 + 6 * g)


def double_buffered_plan(config: NPUConfig, m: int, k: int, n: int, *, m_tile: int,
                         k_chunk: int, n_group: int = 1, out_buffers: int = 2,
                         a_buffers: int = 2, w_buffers: int = 2, snake: bool | None = None,
                         spad_region: tuple[int, int] | None = None,
                         acc_region: tuple[int, int] | None = None) -> LinearPlan:
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
    s0, s_rows = _region(spad_region, c.spad_rows, "scratchpad")
    a0, a_rows = _region(acc_region, c.acc_rows, "accumulator")
    kb, nb = _ceil_div(k, c.rows), _ceil_div(n, c.cols)
    m_lim = min(m, _MAX_ROW_BYTES // c.spad_row_bytes)
    kbc_lim = _MAX_ROW_BYTES // (c.rows * c.spad_row_bytes)
    checks = [(1 <= m_tile <= m_lim, f"m_tile must be in 1..{m_lim}"),
              (1 <= k_chunk <= min(kb, kbc_lim), f"k_chunk must be in 1..{min(kb, kbc_lim)}"),
              (1 <= n_group <= nb, f"n_group must be in 1..{nb}"),
              (all(x in (1, 2) for x in (out_buffers, a_buffers, w_buffers)),
               "buffer counts must be 1 or 2"),
              (w_buffers * n_group * k_chunk * c.rows + a_buffers * k_chunk * m_tile
               + out_buffers * n_group * m_tile <= s_rows, "the buffers do not fit the scratchpad"),
              (n_group * m_tile < a_rows - 6 * n_group, "the tiles do not fit the accumulator")]
    for ok, why in checks:
        if not ok:
            raise ValueError(why)
    return _make_plan(c, m, k, n, s0, a0, a_rows, m_tile, k_chunk, n_group, out_buffers,
                      a_buffers, w_buffers, k_chunk < kb if snake is None else snake)


def _check_operands(a: np.ndarray, w: np.ndarray, bias: np.ndarray, multiplier: np.ndarray,
                    shift: np.ndarray) -> None:
    if a.dtype != np.int8 or w.dtype != np.int8:
        raise ValueError(f"A and W must be int8, got {a.dtype} and {w.dtype}")
    if a.ndim != 2 or w.ndim != 2 or a.shape[1] != w.shape[0]:
        raise ValueError(f"shapes do not match: A {a.shape} @ W {w.shape}")
    n = w.shape[1]
    for name, v, lo, hi in (("bias", bias, -(1 << 31), (1 << 31) - 1),
                            ("multiplier", multiplier, 0, (1 << 31) - 1),
                            ("shift", shift, 0, 63)):
        if v.shape != (n,):
            raise ValueError(f"{name} must have shape ({n},), got {v.shape}")
        if v.size and (v.min() < lo or v.max() > hi):
            raise ValueError(f"{name} outside [{lo}, {hi}]")


def _pack(config: NPUConfig, plan: LinearPlan, a: np.ndarray, w: np.ndarray,
          bias: np.ndarray, multiplier: np.ndarray, shift: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    c = config
    m, k, n = plan.m, plan.k, plan.n
    srb, rows, cols = c.spad_row_bytes, c.rows, c.cols
    k_pad, n_pad = plan.kb * rows, plan.nb * cols
    a_pad = np.zeros((m, k_pad), dtype=np.int8)
    a_pad[:, :k] = a
    a_dram = np.zeros((plan.kb, m, srb), dtype=np.int8)
    a_dram[:, :, :rows] = a_pad.reshape(m, plan.kb, rows).transpose(1, 0, 2)
    w_pad = np.zeros((k_pad, n_pad), dtype=np.int8)
    w_pad[:k, :n] = w
    w_dram = np.zeros((plan.nb, k_pad, srb), dtype=np.int8)
    w_dram[:, :, :cols] = w_pad.reshape(k_pad, plan.nb, cols).transpose(1, 0, 2)
    p = np.zeros((3, n_pad), dtype=np.int64)
    p[0, :n], p[1, :n], p[2, :n] = bias, multiplier, shift
    p_dram = np.zeros((plan.nb, 3, c.acc_row_elems), dtype="<i4")
    p_dram[:, :, :cols] = p.reshape(3, plan.nb, cols).transpose(1, 0, 2)
    return a_dram, w_dram, p_dram


def build_linear_commands(config: NPUConfig, plan: LinearPlan, a_buf: Buffer, w_buf: Buffer,
                          p_buf: Buffer, o_buf: Buffer, relu: bool, sem_base: int,
                          sem: int = _SEM) -> CommandList:
    """The serialized command stream of one linear layer over buffers laid out as in the
    module docstring: command ``i`` waits for ``sem[sem] >= sem_base + i`` and signals
    ``sem``, so no two commands overlap."""
    c = config
    srb, rows = c.spad_row_bytes, c.rows
    cmds = CommandList()

    def seq() -> dict:
        i = len(cmds)
        return {"wait": (sem, (sem_base + i) & 0xFFFF_FFFF), "signal": sem}

    m, kb, nb, mt_max, kbc = plan.m, plan.kb, plan.nb, plan.m_tile, plan.k_chunk
    k_pad = kb * rows
    n_chunks = _ceil_div(kb, kbc)
    for i0 in range(0, m, mt_max):
        mt = min(mt_max, m - i0)

        def load_a(kb0: int, nk: int, i0: int = i0, mt: int = mt) -> None:
            cmds.dma_load(mem=LocalMem.SPAD, dram_addr=a_buf.addr + (kb0 * m + i0) * srb,
                          dram_stride=m * srb, row_bytes=mt * srb, n_rows=nk,
                          local_row=plan.a_base, local_stride=mt, **seq())

        if n_chunks == 1:
            load_a(0, kb)
        for j in range(nb):
            for ch in range(n_chunks):
                kb0 = ch * kbc
                nk = min(kbc, kb - kb0)
                cmds.dma_load(mem=LocalMem.SPAD,
                              dram_addr=w_buf.addr + (j * k_pad + kb0 * rows) * srb,
                              dram_stride=rows * srb, row_bytes=rows * srb, n_rows=nk,
                              local_row=plan.w_base, local_stride=rows, **seq())
                if n_chunks > 1:
                    load_a(kb0, nk)
                for t in range(nk):
                    cmds.matmul(a_row=plan.a_base + t * mt, w_row=plan.w_base + t * rows,
                                acc_row=plan.acc_row, m=mt, accumulate=(kb0 + t) > 0, **seq())
            cmds.dma_load(mem=LocalMem.ACC, dram_addr=p_buf.addr + j * 3 * c.acc_row_bytes,
                          dram_stride=c.acc_row_bytes, row_bytes=c.acc_row_bytes, n_rows=3,
                          local_row=plan.param_row, local_stride=1, **seq())
            cmds.requant(acc_row=plan.acc_row, spad_row=plan.o_base, n_rows=mt,
                         param_row=plan.param_row, relu=relu, **seq())
            cmds.dma_store(mem=LocalMem.SPAD, dram_addr=o_buf.addr + (j * m + i0) * srb,
                           dram_stride=0, row_bytes=mt * srb, n_rows=1, local_row=plan.o_base,
                           local_stride=0, **seq())
    return cmds


# -- timing model of the engines (used by the planner to choose among feasible tilings) ---------

#: DMA command overhead in cycles besides its beats: handshake, ``ARVALID`` 3 cycles later,
#: ``done`` 2 cycles after the last beat (see :class:`hw.dma.DMA`, "Throughput and latency"),
#: and about as many until the next command arrives (its fetch shares the read channel with
#: the previous transfer's bursts), as measured on the co-simulation.
_DMA_COMMAND_CYCLES = 12
_PAGE_BYTES = 4096       #: AXI bursts do not cross 4 KiB (ARM IHI 0022 A3.4.1)
_MAX_BURST_BEATS = 256   #: longest AXI4 INCR burst


def matmul_cycles(config: NPUConfig, m: int) -> int:
    """Cycles of one MATMUL of ``m > 0`` rows from accept to ``done`` on the matrix engine
    (weight load ``rows``, ``m`` streamed rows, array fill/drain ``rows + cols - 1``, 5 of
    sequencing; :meth:`hw.tile.MatrixEngine.command_cycles`). The engine takes the next
    command in the cycle after ``done``, so back-to-back commands cost ``m`` plus a fixed
    overhead of ``matmul_cycles(config, 0)`` each."""
    return config.rows + m + (config.rows + config.cols - 1) + 5


def requant_cycles(config: NPUConfig, n_rows: int) -> int:
    """Cycles of one REQUANT of ``n_rows`` rows (see :class:`hw.vector` ``RequantEngine``)."""
    return n_rows + 11


def dma_cycles(config: NPUConfig, row_bytes: int, n_rows: int) -> int:
    """Estimated cycles of a DMA of ``n_rows`` DRAM rows of ``row_bytes``: one bus beat per cycle,
    one idle cycle per burst (the co-simulation DRAM's gap between bursts) and the command
    overhead."""
    beats = -(-row_bytes // config.axi_data_bytes)
    bursts = max(-(-beats // _MAX_BURST_BEATS), -(-row_bytes // _PAGE_BYTES))
    return _DMA_COMMAND_CYCLES + n_rows * (beats + bursts)


# -- the double-buffered program ----------------------------------------------------------------

def _w_row_blocks(config: NPUConfig, m_tile: int, n_blocks: int) -> int:
    """K blocks per DRAM row of a weight load of ``n_blocks`` blocks in a step of ``m_tile``
    rows: the largest divisor of ``n_blocks`` whose row is at most half a matmul's cycles of
    bus beats (at least one block). The co-simulation DRAM answers reads in order, so a
    command fetch waits for the burst in progress; with short matmuls and long weight
    bursts the matrix engine would run out of commands."""
    c = config
    block_beats = -(-c.rows * c.spad_row_bytes // c.axi_data_bytes)
    most = max(1, matmul_cycles(c, m_tile) // 2 // block_beats)
    return max(d for d in range(1, min(most, n_blocks) + 1) if n_blocks % d == 0)


class _Infeasible(ValueError):
    """A tiling cannot be expressed as a command stream (the planner skips it)."""


def _balanced(total: int, most: int) -> list[int]:
    """``total`` split into ``ceil(total / most)`` parts of nearly equal size (each <= most)."""
    parts = _ceil_div(total, most)
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


def _program(config: NPUConfig, plan: LinearPlan, a_addr: int, w_addr: int, p_addr: int,
             o_addr: int, relu: bool) -> list[list]:
    """The double-buffered command stream of ``plan`` as abstract operations, in stream order.

    Each operation is ``[op, tag, wait, signal, fields]`` with ``op`` one of ``load``,
    ``store``, ``matmul``, ``requant``; ``tag`` says what a DMA moves (``a``, ``w``, ``p``,
    ``out``); ``wait`` is ``(name, count)`` (semaphore ``name`` of ``L``, ``M``, ``R``, ``S``
    has been signalled ``count`` times by this kernel) or None; ``signal`` a name or None;
    ``fields`` the command's keyword arguments. See
    :func:`build_linear_commands_double_buffered` for the schedule.

    Raises
    ------
    _Infeasible
        If the out-tile dependency cannot be placed (planner candidates only).
    """
    c, p = config, plan
    srb, rows, acc_rb = c.spad_row_bytes, c.rows, c.acc_row_bytes
    m, kb, nb = p.m, p.kb, p.nb
    k_pad = kb * rows
    depth = c.cmd_fifo_depth
    m_tiles = [(i0, min(p.m_tile, m - i0)) for i0 in range(0, m, p.m_tile)]
    n_groups = [(j0, min(p.n_group, nb - j0)) for j0 in range(0, nb, p.n_group)]
    chunks, kb0 = [], 0
    for nk in _balanced(kb, p.k_chunk):
        chunks.append((kb0, nk))
        kb0 += nk
    steps = [(ti, gi) for ti in range(len(m_tiles)) for gi in range(len(n_groups))]
    phases: list[tuple[int, int]] = []
    first: list[int] = []
    last: list[int] = []
    for s in range(len(steps)):
        order = range(len(chunks))
        if p.snake and s % 2:
            order = reversed(order)
        first.append(len(phases))
        phases.extend((s, ci) for ci in order)
        last.append(len(phases) - 1)
    n_ph = len(phases)

    # Buffers per phase (A: M tile and K chunk; W: N group and K chunk).
    a_bufs, w_bufs = _Buffers(len(p.a_bases)), _Buffers(len(p.w_bases))
    a_use = [a_bufs.use(ph, (steps[s][0], ci)) for ph, (s, ci) in enumerate(phases)]
    w_use = [w_bufs.use(ph, (steps[s][1], ci)) for ph, (s, ci) in enumerate(phases)]
    # Parameters of step s load with the loads of phase p_at[s]: late enough that the
    # requantization of step s - 2 (same buffer) has normally finished when it is dispatched.
    p_at: dict[int, list[int]] = {}
    for s in range(len(steps)):
        q = 0 if s == 0 else min(first[s - 1] + 2, first[s])
        p_at.setdefault(q, []).append(s)

    # Accumulator rows of step s: alternately at the low and the high end of the tile region,
    # so consecutive steps overlap only if two tiles do not fit side by side.
    lo_end, hi_end = p.acc_span

    def acc_rows_of(s: int) -> tuple[int, int]:
        ti, gi = steps[s]
        t = m_tiles[ti][1] * n_groups[gi][1]
        return (lo_end, lo_end + t) if s % 2 == 0 else (hi_end - t, hi_end)

    def overlap(s: int) -> tuple[int, int] | None:
        """Accumulator rows that step s overwrites while step s - 1 may still read them."""
        if s == 0 or s >= len(steps):
            return None
        a, b = acc_rows_of(s - 1), acc_rows_of(s)
        lo, hi = max(a[0], b[0]), min(a[1], b[1])
        return (lo, hi) if lo < hi else None

    ops: list[list] = []
    count = dict.fromkeys("LMRS", 0)

    def add(op: str, tag: str | None, wait, signal: str | None, **fields) -> list:
        if wait is not None and wait[1] <= 0:
            wait = None
        if signal is not None:
            count[signal] += 1
        o = [op, tag, wait, signal, fields]
        ops.append(o)
        return o

    p_op: dict[int, list] = {}
    r_after: dict[int, int] = {}     # R count once step s is requantized
    s_after: dict[int, int] = {}     # S count once step s is stored
    r_free: dict[int, int] = {}      # R count once the rows overlap(s) are free

    def emit_p(s: int) -> None:
        j0, g = n_groups[steps[s][1]]
        p_op[s] = add("load", "p", ("R", r_after[s - 2]) if s >= 2 else None, "L", mem=LocalMem.ACC,
                      dram_addr=p_addr + j0 * 3 * acc_rb, dram_stride=acc_rb, row_bytes=acc_rb,
                      n_rows=3 * g, local_row=p.param_rows[s % 2], local_stride=1)

    def emit_a(ph: int, off: int = 0, n: int | None = None) -> None:
        s, ci = phases[ph]
        i0, mt = m_tiles[steps[s][0]]
        kb0, nk = chunks[ci]
        b, _, q = a_use[ph]
        n = nk if n is None else n
        add("load", "a", ("M", q + 1), "L", mem=LocalMem.SPAD,
            dram_addr=a_addr + ((kb0 + off) * m + i0) * srb, dram_stride=m * srb,
            row_bytes=mt * srb, n_rows=n, local_row=p.a_bases[b] + off * mt, local_stride=mt)

    block_bytes = rows * srb              # one weight block (K block x N block) in DRAM

    def emit_w(ph: int, off: int = 0, n: int | None = None) -> None:
        """Weights of K blocks ``off .. off + n`` of phase ``ph``'s chunk for its N group. A
        DRAM row (so an AXI burst) stays shorter than half a matmul of the step: a command
        fetch queues behind the burst in progress, and the array must not run dry meanwhile
        (see :func:`_w_row_blocks`)."""
        s, ci = phases[ph]
        mt = m_tiles[steps[s][0]][1]
        j0, g = n_groups[steps[s][1]]
        kb0, nk = chunks[ci]
        b, _, q = w_use[ph]
        n = nk if n is None else n
        per_row = _w_row_blocks(c, mt, n)
        dram = w_addr + (j0 * k_pad + (kb0 + off) * rows) * srb
        local = p.w_bases[b] + off * rows
        if per_row == n:          # one DRAM row per N block
            add("load", "w", ("M", q + 1), "L", mem=LocalMem.SPAD, dram_addr=dram,
                dram_stride=k_pad * srb, row_bytes=n * block_bytes, n_rows=g,
                local_row=local, local_stride=nk * rows)
            return
        for gg in range(g):       # per N block, rows of per_row K blocks
            add("load", "w", ("M", q + 1), "L", mem=LocalMem.SPAD,
                dram_addr=dram + gg * k_pad * srb, dram_stride=per_row * block_bytes,
                row_bytes=per_row * block_bytes, n_rows=n // per_row,
                local_row=local + gg * nk * rows, local_stride=per_row * rows)

    def emit_loads(ph: int, late: bool) -> None:
        """The loads of phase ``ph`` into buffers the previous phase used (``late``: emitted
        after that phase's matmuls) or into the other buffer (prefetch: emitted before)."""
        if w_use[ph][1] and (w_use[ph][2] == ph - 1) == late:
            emit_w(ph)
        if a_use[ph][1] and (a_use[ph][2] == ph - 1) == late:
            emit_a(ph)
        if not late:
            for s in p_at.get(ph, []):
                emit_p(s)

    def emit_matmuls(ph: int, block_waits: dict[int, int],
                     before: dict[int, Callable[[int], None]],
                     after: dict[int, Callable[[], None]]) -> None:
        """The matmuls of phase ``ph``: for each K block, every N block of the group. The first
        matmul of K block ``i`` waits ``L >= block_waits[i]`` (if given); ``before[i](i)``
        runs before K block ``i``, ``after[i]()`` after its first matmul. The first K block of
        a step overwrites the accumulator; its rows that the previous step may still
        requantize (``overlap``) go last and wait for those requantizations. The last matmul
        signals ``M``."""
        s, ci = phases[ph]
        i0, mt = m_tiles[steps[s][0]]
        j0, g = n_groups[steps[s][1]]
        kb0, nk = chunks[ci]
        a_base = p.a_bases[a_use[ph][0]]
        w_base = p.w_bases[w_use[ph][0]]
        acc0 = acc_rows_of(s)[0]
        ov = overlap(s) if ph == first[s] else None
        emitted: list[list] = []
        for i in range(nk):
            if i in before:
                before[i](i)
            overwrite = ph == first[s] and i == 0
            wait = ("L", block_waits[i]) if i in block_waits else None
            deferred = []
            for gg in range(g):
                lo, hi = acc0 + gg * mt, acc0 + (gg + 1) * mt
                segs = [(lo, hi)]
                if overwrite and ov is not None and ov[0] < hi and lo < ov[1]:
                    a, b = max(lo, ov[0]), min(hi, ov[1])
                    segs = [sg for sg in ((lo, a), (b, hi)) if sg[0] < sg[1]]
                    deferred.append((gg, a, b))
                for sl, sh in segs:
                    o = ["matmul", None, wait, None,
                         {"a_row": a_base + i * mt + sl - lo,
                          "w_row": w_base + (gg * nk + i) * rows, "acc_row": sl, "m": sh - sl,
                          "accumulate": not overwrite}]
                    ops.append(o)
                    emitted.append(o)
                    wait = None
                    if i in after:
                        after.pop(i)()
            if deferred and wait is not None:
                raise _Infeasible("every row of the first K block overlaps the previous step")
            for gg, a, b in deferred:
                lo = acc0 + gg * mt
                emitted.append(add("matmul", None, ("R", r_free[s]), None,
                                   a_row=a_base + i * mt + a - lo,
                                   w_row=w_base + (gg * nk + i) * rows, acc_row=a, m=b - a,
                                   accumulate=False))
        emitted[-1][3] = "M"
        count["M"] += 1
        step_matmuls.setdefault(s, []).extend(emitted)

    def emit_end(s: int) -> None:
        """Requantize and store step ``s``; rows the next step overwrites first."""
        i0, mt = m_tiles[steps[s][0]]
        j0, g = n_groups[steps[s][1]]
        acc0 = acc_rows_of(s)[0]
        o0 = p.o_bases[s % len(p.o_bases)]
        tiles = [(gg, acc0 + gg * mt, acc0 + (gg + 1) * mt) for gg in range(g)]
        ov = overlap(s + 1)
        early: list = []
        rest: list = tiles
        if ov is not None:
            early, rest = [], []
            for gg, lo, hi in tiles:
                a, b = max(lo, ov[0]), min(hi, ov[1])
                if a < b:
                    early.append((gg, a, b))
                    rest.extend((gg, x, y) for x, y in ((lo, a), (b, hi)) if x < y)
                else:
                    rest.append((gg, lo, hi))
            if len(early) + len(rest) > depth:          # whole tiles, overlapped ones first
                hit = {gg for gg, _, _ in early}
                early = [t for t in tiles if t[0] in hit]
                rest = [t for t in tiles if t[0] not in hit]
        if s == len(steps) - 1:
            # The last step: nothing follows, so split each tile into pieces whose stores
            # overlap the next piece's requantization (the number that the timing model says
            # ends soonest).
            def tail(n: int) -> int:
                sizes = _balanced(mt, _ceil_div(mt, n))
                return (g * sum(requant_cycles(c, x) for x in sizes)
                        + dma_cycles(c, sizes[-1] * srb, 1))
            n = min(range(1, min(mt, _TAIL_PIECES) + 1), key=tail)
            rest = []
            for gg, lo, _ in tiles:
                for size in _balanced(mt, _ceil_div(mt, n)):
                    rest.append((gg, lo, lo + size))
                    lo += size
        wait = ("M", last[s] + 1)
        pieces: list[tuple[int, int, int, int]] = []
        for n_early, (gg, lo, hi) in enumerate(early + rest, start=1):
            add("requant", None, wait, "R", acc_row=lo, spad_row=o0 + lo - acc0,
                n_rows=hi - lo, param_row=p.param_rows[s % 2] + 3 * gg, relu=relu)
            wait = None
            pieces.append((gg, lo, hi, count["R"]))
            if n_early == len(early):
                r_free[s + 1] = count["R"]
        r_after[s] = count["R"]
        # One store per tile after its last piece, except for the last step's pieces.
        done_at = {gg: (gg, acc0 + gg * mt, acc0 + (gg + 1) * mt, r) for gg, _, _, r in pieces}
        stores = pieces if s == len(steps) - 1 else sorted(done_at.values(), key=lambda x: x[3])
        for gg, lo, hi, r in stores:
            add("store", "out", ("R", r), "S", mem=LocalMem.SPAD,
                dram_addr=o_addr + ((j0 + gg) * m + i0 + lo - acc0 - gg * mt) * srb,
                dram_stride=0, row_bytes=(hi - lo) * srb, n_rows=1, local_row=o0 + lo - acc0,
                local_stride=0)
        s_after[s] = count["S"]

    def first_pieces(nk: int, w_whole: bool) -> tuple[int, list[int]]:
        """Estimated end and sizes (K blocks) of the first phase's load pieces, each as large
        as the timing model says still arrives before the array reaches it (at least one
        block). ``w_whole``: the weights of the whole chunk load with the first piece, else
        each piece loads its own; the parameters of step 0 load before the second piece."""
        s0 = phases[0][0]
        mt, g = m_tiles[steps[s0][0]][1], n_groups[steps[s0][1]][1]
        per_block = g * matmul_cycles(c, mt)
        p_cycles = dma_cycles(c, acc_rb, 3 * g)

        def dma(n: int, first_piece: bool) -> int:
            w = 0
            if w_use[0][1] and (first_piece or not w_whole):
                w = dma_cycles(c, (nk if w_whole else n) * rows * srb, g)
            return w + (dma_cycles(c, mt * srb, n) if a_use[0][1] else 0) + \
                (p_cycles if len(pieces) == 1 and not first_piece else 0)
        pieces = [1]
        t_dma = t_start = dma(1, True)    # loads done; compute start of the piece's block
        pos = 1
        while pos < nk:
            reach = t_start + pieces[-1] * per_block
            n = 1
            while pos + n < nk and t_dma + dma(n + 1, False) <= reach:
                n += 1
            t_dma += dma(n, False)
            t_start = max(reach, t_dma)
            pieces.append(n)
            pos += n
        return t_start + pieces[-1] * per_block, pieces

    def emit_first_phase(after_last: Callable[[], None]) -> None:
        """The first phase loads in pieces of K blocks, each followed by its matmuls, so that
        the array starts after one piece instead of the whole first chunk (the weights with
        the first piece or with each, whichever the timing model finds faster).
        ``after_last()`` runs after the first matmul of the last piece."""
        nk = chunks[phases[0][1]][1]
        (_, pieces), w_whole = min((first_pieces(nk, w), w) for w in (False, True))
        starts = [sum(pieces[:i]) for i in range(len(pieces))]
        waits: dict[int, int] = {}

        def load_piece(i: int) -> None:
            j = starts.index(i)
            if j == min(1, len(pieces) - 1):
                for q in p_at.get(0, []):
                    emit_p(q)
            if w_use[0][1] and (j == 0 or not w_whole):
                emit_w(0, i, nk if w_whole else pieces[j])
            if a_use[0][1]:
                emit_a(0, i, pieces[j])
            waits[i] = count["L"]
        emit_matmuls(0, waits, dict.fromkeys(starts, load_piece), {starts[-1]: after_last})

    def end_of_step(s: int) -> None:
        """Out tile reuse: a matmul of step ``s`` that waits for nothing else waits until the
        step that used the same output tile before was stored."""
        prev = s - len(p.o_bases)
        if prev >= 0:
            free_mm = [o for o in step_matmuls[s] if o[2] is None]
            if free_mm:
                free_mm[-1][2] = ("S", s_after[prev])
            elif len(p.o_bases) == 2 and s in p_op:
                p_op[s][2] = ("S", s_after[prev])
            else:
                raise _Infeasible("no matmul can wait for the output tile")

    # Stream order of phase p >= 1: its late loads, its first matmul, the requantization and
    # stores of the step that ended with phase p - 1, the prefetch of phase p + 1, the rest of
    # its matmuls: the first matmul is fetched right behind the previous phase's matmuls.
    step_matmuls: dict[int, list] = {}
    for ph in range(n_ph):
        s = phases[ph][0]

        def after_first(ph: int = ph, s: int = s) -> None:
            if ph == first[s] and s > 0:
                emit_end(s - 1)
            if ph + 1 < n_ph:
                emit_loads(ph + 1, late=False)
        if ph == 0:
            emit_first_phase(after_first)
        else:
            emit_loads(ph, late=True)
            emit_matmuls(ph, {0: count["L"]}, {}, {0: after_first})
        if ph == last[s]:
            end_of_step(s)
    emit_end(len(steps) - 1)
    return ops


#: The planner stops replaying candidates on the timing model (best lower bound first) once it
#: has replayed this many matmuls and has a plan (bounds the planning time of huge layers).
_REPLAY_BUDGET = 100_000
#: The last step's requantization and store are split into at most this many pieces per tile.
_TAIL_PIECES = 8


class _Timer:
    """Replays a program on a timing model of the engines: each engine runs its commands in
    order, a command starts when its engine is free and its semaphore count is reached, and
    lasts :func:`dma_cycles` / :func:`matmul_cycles` / :func:`requant_cycles`. Command fetch
    and dispatch are not modelled."""

    def __init__(self, config: NPUConfig) -> None:
        self.c = config
        self.free = {"load": 0, "store": 0, "matmul": 0, "requant": 0}
        self.done: dict[str, list[int]] = {x: [] for x in "LMRS"}
        self.bytes = {"a": 0, "w": 0, "p": 0, "out": 0}

    def run(self, ops: list[list]) -> int:
        c = self.c
        for op, tag, wait, signal, f in ops:
            if op in ("load", "store"):
                cycles = dma_cycles(c, f["row_bytes"], f["n_rows"])
                self.bytes[tag] += f["row_bytes"] * f["n_rows"]
            elif op == "matmul":
                cycles = matmul_cycles(c, f["m"])
            else:
                cycles = requant_cycles(c, f["n_rows"])
            t = self.free[op]
            if wait is not None:
                t = max(t, self.done[wait[0]][wait[1] - 1])
            t += cycles
            self.free[op] = t
            if signal is not None:
                self.done[signal].append(t)
        return max(self.free.values())


def build_linear_commands_double_buffered(
        config: NPUConfig, plan: LinearPlan, a_buf: Buffer, w_buf: Buffer, p_buf: Buffer,
        o_buf: Buffer, relu: bool, sems: dict[str, Semaphore]) -> tuple[CommandList, dict]:
    """The double-buffered command stream of one linear layer (``plan.double_buffer``).

    A *step* is one (M tile, N group): ``n_group`` N blocks of ``m_tile`` rows, each with its
    own accumulator tile. A *phase* is one K chunk of a step: the activation chunk (M tile x
    K chunk), the weight chunk (K chunk x N group) and ``nk * n_group`` MATMULs, each
    streaming all ``m_tile`` rows. Phases run M tiles, then N groups, then K chunks; with
    ``plan.snake`` the K chunks of every other step run backwards, so the chunks still
    resident from the previous step are not reloaded. Four pool semaphores order the engines:
    ``L`` counts retired loads, ``M`` finished phases (the last MATMUL of a phase signals),
    ``R`` requantizations, ``S`` stores.

    * Loads of phase ``p + 1`` go to the buffers phase ``p`` does not use, waiting ``M`` for
      the phase that used the buffer before; they are issued during phase ``p`` (prefetch).
      A load into a buffer phase ``p`` itself used (a single activation buffer) is issued
      after phase ``p``'s matmuls. Content already in a buffer is not reloaded.
    * Parameters of step ``s`` (2 buffers) load with phase ``min(first(s - 1) + 2,
      first(s))`` and wait ``R`` for the requantizations of step ``s - 2``; the first matmul of
      every phase waits ``L`` for the phase's loads (so the accumulator and parameter buffers
      of step ``s - 2`` are free before step ``s`` overwrites them).
    * Accumulator tiles of consecutive steps sit at opposite ends of the accumulator region;
      if they overlap (two full tiles do not fit), step ``s`` requantizes the overlapped rows
      first and the overwriting matmuls of those rows in step ``s + 1`` run last in their K
      block, waiting ``R`` for them.
    * Output tiles (``len(plan.o_bases)`` buffers): the last matmul of step ``s`` that has no
      other wait waits ``S`` for the store of the step that used the output tile before (or,
      with two output tiles and no such matmul, the step's parameter load does).
    * Requantization of step ``s`` waits ``M`` for its last phase; each store waits ``R``.
    * Stream order of phase ``p >= 1``: its late loads, its first matmul, the
      requantizations and stores of the step that ended with phase ``p - 1``, the prefetch of
      phase ``p + 1``, the rest of its matmuls. The first matmul is thus fetched right behind
      the previous phase's (a command fetch shares the read channel with DMA bursts).
    * The first phase loads in pieces of K blocks (sized by the timing model), each followed by
      its matmuls, so the array starts after one K block; the last step's requantization and
      stores are split into pieces that overlap.

    Every wait is on a command earlier in the stream, so the stream cannot deadlock and the
    in-order functional model runs it too. Returns the commands and the number of signals
    issued per semaphore name.
    """
    ops = _program(config, plan, a_buf.addr, w_buf.addr, p_buf.addr, o_buf.addr, relu)
    cmds = CommandList()
    issued = dict.fromkeys("LMRS", 0)
    emit = {"load": cmds.dma_load, "store": cmds.dma_store, "matmul": cmds.matmul,
            "requant": cmds.requant}
    for op, _, wait, signal, fields in ops:
        w = None if wait is None else (sems[wait[0]].id, sems[wait[0]].target(wait[1]))
        s = None
        if signal is not None:
            s = sems[signal].id
            issued[signal] += 1
        emit[op](**fields, wait=w, signal=s)
    return cmds, issued


def linear_dram_bytes(config: NPUConfig, plan: LinearPlan) -> dict:
    """DRAM bytes the kernel's command stream moves for ``plan``: ``{"a", "w", "params",
    "out", "total"}`` (padded rows as stored; activations and weights as often as reloaded)."""
    c = config
    srb = c.spad_row_bytes
    if plan.double_buffer:
        t = _Timer(c)
        t.run(_program(c, plan, 0, 0, 0, 0, False))
        b = t.bytes
        a, w, p, out = b["a"], b["w"], b["p"], b["out"]
    else:
        m_tiles = _ceil_div(plan.m, plan.m_tile)
        n_chunks = _ceil_div(plan.kb, plan.k_chunk)
        a = plan.kb * plan.m * srb * (1 if n_chunks == 1 else plan.nb)
        w = m_tiles * plan.nb * plan.kb * c.rows * srb
        p = m_tiles * plan.nb * 3 * c.acc_row_bytes
        out = plan.nb * plan.m * srb
    return {"a": a, "w": w, "params": p, "out": out, "total": a + w + p + out}


class LinearJob:
    """A linear layer launched on a stream (:func:`linear_launch`); call :meth:`output` after
    the stream (or an event recorded after it) completed.

    Attributes
    ----------
    plan : LinearPlan
    commands : int
        Commands in the kernel's stream.
    out_buffer : Buffer
        The output in the packed layout ``(NB, M, spad_row_bytes)`` int8 (the activation
        layout of a following layer when ``rows == cols``).
    """

    def __init__(self, stream: Stream, plan: LinearPlan, buffers: list[Buffer],
                 out_buffer: Buffer, sems: list[Semaphore], commands: int) -> None:
        self.stream = stream
        self.plan = plan
        self._buffers = buffers
        self.out_buffer = out_buffer
        self._sems = sems
        self.commands = commands

    def output(self) -> np.ndarray:
        """The int8 ``(M, N)`` result (reads device memory; the work must have completed)."""
        c, p = self.stream.device.config, self.plan
        o = self.stream.device.download(self.out_buffer, np.int8, (p.nb, p.m, c.spad_row_bytes))
        out = o[:, :, :c.cols].transpose(1, 0, 2).reshape(p.m, p.nb * c.cols)[:, :p.n]
        return np.ascontiguousarray(out)

    def free(self) -> None:
        """Free the job's buffers and semaphores (after it completed)."""
        for b in self._buffers:
            if not b.freed:
                b.free()
        for s in self._sems:
            s.free()


def pack_activations(config: NPUConfig, a: np.ndarray) -> np.ndarray:
    """``A`` (M, K) int8 in the kernel's DRAM layout ``(KB, M, spad_row_bytes)``."""
    m, k = a.shape
    kb = _ceil_div(k, config.rows)
    a_pad = np.zeros((m, kb * config.rows), dtype=np.int8)
    a_pad[:, :k] = a
    out = np.zeros((kb, m, config.spad_row_bytes), dtype=np.int8)
    out[:, :, :config.rows] = a_pad.reshape(m, kb, config.rows).transpose(1, 0, 2)
    return out


def linear_launch(stream: Stream, a: npt.ArrayLike | Buffer, w: npt.ArrayLike,
                  bias: npt.ArrayLike, multiplier: npt.ArrayLike, shift: npt.ArrayLike,
                  relu: bool = False, *, shape_k: int | None = None, m: int | None = None,
                  double_buffer: bool = True, spad_region: tuple[int, int] | None = None,
                  acc_region: tuple[int, int] | None = None,
                  timeout_cycles: int | None = None, plan: LinearPlan | None = None) -> LinearJob:
    """Launch a quantized linear layer on ``stream`` without waiting for it.

    Parameters
    ----------
    stream : Stream
    a : array_like of int8 (M, K), or Buffer
        Activations; a :class:`Buffer` already in the packed layout of
        :func:`pack_activations` (e.g. the ``out_buffer`` of an earlier job when
        ``rows == cols``), in which case ``m`` gives M (K comes from ``w``).
    w, bias, multiplier, shift, relu
        As :func:`linear_with_stats`.
    double_buffer : bool
        Overlap weight loads with compute (default); False gives the fully serialized stream.
    spad_region, acc_region : tuple of (int, int), optional
        Rows of the local memories the kernel may use (see :func:`plan_linear`).
    plan : LinearPlan, optional
        Use this tiling (e.g. from :func:`double_buffered_plan`) instead of planning one;
        ``double_buffer`` and the regions are then ignored.

    Returns
    -------
    LinearJob

    Raises
    ------
    ValueError
        For bad shapes, dtypes or parameter ranges.
    OutOfMemoryError, OutOfSemaphoresError, DeviceError, DeviceTimeoutError
        From the runtime.
    """
    device = stream.device
    c = device.config
    w_arr = np.asarray(w)
    if isinstance(a, Buffer):
        if m is None:
            raise ValueError("m must be given with a packed activation buffer")
        a_arr = np.zeros((m, w_arr.shape[0]), dtype=np.int8)   # for the checks only
    else:
        a_arr = np.asarray(a)
    b_arr = np.asarray(bias, dtype=np.int64)
    m_arr = np.asarray(multiplier, dtype=np.int64)
    s_arr = np.asarray(shift, dtype=np.int64)
    _check_operands(a_arr, w_arr, b_arr, m_arr, s_arr)
    mm, k = a_arr.shape
    n = w_arr.shape[1]
    if plan is None:
        plan = plan_linear(c, mm, k, n, double_buffer=double_buffer, spad_region=spad_region,
                           acc_region=acc_region)
    elif (plan.m, plan.k, plan.n) != (mm, k, n):
        raise ValueError(f"the plan is for {plan.m}x{plan.k}x{plan.n}, not {mm}x{k}x{n}")
    a_dram, w_dram, p_dram = _pack(c, plan, a_arr, w_arr, b_arr, m_arr, s_arr)
    kw = {} if timeout_cycles is None else {"timeout_cycles": timeout_cycles}
    bufs: list[Buffer] = []
    sems: list[Semaphore] = []
    try:
        if isinstance(a, Buffer):
            a_buf = a
        else:
            a_buf = stream.upload(a_dram)
            bufs.append(a_buf)
        w_buf = stream.upload(w_dram)
        bufs.append(w_buf)
        p_buf = stream.upload(p_dram)
        bufs.append(p_buf)
        o_buf = stream.alloc(plan.nb * mm * c.spad_row_bytes)
        bufs.append(o_buf)
        if plan.double_buffer:
            named = {x: device.alloc_semaphore() for x in "LMRS"}
            sems.extend(named.values())
            cmds, issued = build_linear_commands_double_buffered(c, plan, a_buf, w_buf, p_buf,
                                                                  o_buf, relu, named)
            for x, count in issued.items():
                named[x].issued += count
        else:
            sem = device.alloc_semaphore()
            sems.append(sem)
            cmds = build_linear_commands(c, plan, a_buf, w_buf, p_buf, o_buf, relu,
                                         sem.target(), sem.id)
            sem.issued += len(cmds)
        stream.launch(cmds, **kw)
    except BaseException:
        for b in bufs:
            b.free()
        for s_ in sems:
            s_.free()
        raise
    return LinearJob(stream, plan, bufs, o_buf, sems, len(cmds))


def linear_with_stats(device: Device, a: npt.ArrayLike, w: npt.ArrayLike, bias: npt.ArrayLike,
                      multiplier: npt.ArrayLike, shift: npt.ArrayLike, relu: bool = False,
                      timeout_cycles: int | None = None, *, double_buffer: bool = True,
                      stream: Stream | None = None,
                      plan: LinearPlan | None = None) -> tuple[np.ndarray, LinearStats]:
    """Run a quantized linear layer on ``device``; bit-exact with :func:`sw.golden.linear_int`.

    Parameters
    ----------
    device : Device
        The device.
    a : array_like of int8
        Activations, shape ``(M, K)``.
    w : array_like of int8
        Weights, shape ``(K, N)``.
    bias : array_like of int32
        Shape ``(N,)``, accumulator units.
    multiplier : array_like of int
        Shape ``(N,)``, each in ``0..2**31-1`` (see :func:`sw.quant.quantize_multiplier`).
    shift : array_like of int
        Shape ``(N,)``, each in ``0..63``.
    relu : bool
        Clamp negative outputs to zero.
    timeout_cycles : int, optional
        Budget for :meth:`Stream.synchronize` (default: the runtime's default).
    double_buffer : bool
        Double-buffered stream (DMA overlaps compute; default) or the fully serialized one.
    stream : Stream, optional
        Where to run (default: the device's default stream); waits for it to complete.
    plan : LinearPlan, optional
        Use this tiling instead of planning one (see :func:`linear_launch`).

    Returns
    -------
    out : numpy.ndarray
        int8, shape ``(M, N)``.
    stats : LinearStats
        Cycles (launch to completion), commands, MACs, utilization and the tiling.

    Raises
    ------
    ValueError
        For bad shapes, dtypes or parameter ranges.
    DeviceError, DeviceTimeoutError, OutOfMemoryError, OutOfSemaphoresError
        From the runtime.
    """
    stream = device.default_stream if stream is None else stream
    sync_kw = {} if timeout_cycles is None else {"timeout_cycles": timeout_cycles}
    stream.synchronize(**sync_kw)   # the cycle count below covers this kernel only
    job = linear_launch(stream, a, w, bias, multiplier, shift, relu,
                        double_buffer=double_buffer, timeout_cycles=timeout_cycles, plan=plan)
    try:
        cycles = stream.synchronize(**sync_kw)
        out = job.output()
    finally:
        job.free()
    p = job.plan
    macs = p.m * p.k * p.n
    util = macs / (cycles * device.config.n_pes) if cycles else None
    return out, LinearStats(cycles=cycles, n_commands=job.commands, macs=macs,
                            utilization=util, plan=p)


def linear(device: Device, a: npt.ArrayLike, w: npt.ArrayLike, bias: npt.ArrayLike,
           multiplier: npt.ArrayLike, shift: npt.ArrayLike, relu: bool = False) -> np.ndarray:
    """Convenience form of :func:`linear_with_stats` that returns only the int8 ``(M, N)``
    output."""
    return linear_with_stats(device, a, w, bias, multiplier, shift, relu)[0]
