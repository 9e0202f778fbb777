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
  ``K_pad = KB * rows``; ``[nb, k, :cols]`` = ``W[k, nb*cols : (nb+1)*cols]``. A weight column
  block (or a K range of it) is one contiguous DMA.
* Parameters: shape ``(NB, 3, acc_row_elems)`` int32: bias, multiplier, shift of the block's
  ``cols`` channels (zero for padding channels), loaded with one DMA into accumulator rows 0..2.
* Output: shape ``(NB, M, spad_row_bytes)`` int8; ``[nb, i, :cols]`` = ``out[i, nb*cols : ...]``.

Tiling: the scratchpad holds a weight chunk (``KBc * rows`` rows), an activation chunk
(``KBc * Mt`` rows) and an output tile (``Mt`` rows); the accumulator holds the parameters
(rows 0..2) and the ``Mt`` accumulator rows (from row 3). ``Mt`` is chosen as large as fits with
the whole K resident (``KBc = KB``); if even ``Mt = 1`` does not fit, K is split into chunks of
``KBc`` blocks and ``Mt`` is the largest that allows ``KBc >= 1``. Loops: M tiles, then N
blocks, then K chunks, then K blocks (one MATMUL each, ``accumulate`` after the first).

Ordering (double buffering, the default; :func:`build_linear_commands_double_buffered`): two
weight buffers, two parameter buffers, two accumulator tiles and two output tiles alternate
between consecutive (M tile, N block) steps, and four pool semaphores (loads, matrix steps,
requantizations, stores) order the engines, so the weight block of step ``t + 1`` streams in
while the array computes step ``t``. If two buffers do not fit (or ``double_buffer=False``)
the kernel falls back to the serialized stream: every command waits for ``sem >= base + i``
(all earlier commands retired) and signals it; no overlap. Semaphores come from the device's
pool (:meth:`sw.runtime.Device.alloc_semaphore`), so kernels on different streams, each in its
own ``spad_region``/``acc_region``, can run concurrently (:func:`linear_launch`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hw.config import NPUConfig
from hw.isa import LocalMem
from sw.runtime import Buffer, CommandList, Device, Semaphore, Stream

__all__ = ["LinearPlan", "LinearStats", "LinearJob", "plan_linear", "linear", "linear_with_stats",
           "linear_launch", "pack_activations", "build_linear_commands",
           "build_linear_commands_double_buffered"]

_SEM = 0           #: the semaphore used as the kernel's sequence counter
_PARAM_ROW = 0     #: accumulator rows 0..2: bias, multiplier, shift
_ACC_ROW = 3       #: first accumulator row of the output tile
_MAX_ROW_BYTES = (1 << 16) - 1


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class LinearPlan:
    """Tiling of one linear layer on one configuration (all counts in rows or blocks).

    Row numbers are absolute (they include the region offsets). With ``double_buffer`` the
    weight block, the parameters, the accumulator tile and the output tile each have two
    buffers (index 0 and 1) used by alternate (M tile, N block) steps.
    """
    m: int
    k: int
    n: int
    kb: int        #: K blocks of ``rows``
    nb: int        #: N blocks of ``cols``
    m_tile: int    #: activation rows per M tile (``Mt``)
    k_chunk: int   #: K blocks resident in the scratchpad at once (``KBc``)
    w_base: int    #: scratchpad row of the weight chunk
    a_base: int    #: scratchpad row of the activation chunk
    o_base: int    #: scratchpad row of the output tile
    double_buffer: bool = False
    w_base1: int = 0       #: second weight buffer (double buffering)
    o_base1: int = 0       #: second output tile
    param_row: int = _PARAM_ROW   #: accumulator rows of the parameters (bias, mult, shift)
    param_row1: int = 0
    acc_row: int = _ACC_ROW       #: accumulator rows of the output tile
    acc_row1: int = 0


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
        Plan two buffers for weights, parameters, accumulator and output tiles with the whole
        K resident; falls back to the serialized plan if that does not fit.
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
        # 2 weight blocks + activations + 2 output tiles; 2 x 3 parameter rows + 2 tiles
        mt = min(m_lim, (s_rows - 2 * kb * c.rows) // (kb + 2), (a_rows - 6) // 2)
        if mt >= 1:
            w0 = s0
            a_base = s0 + 2 * kb * c.rows
            o0 = a_base + kb * mt
            return LinearPlan(m=m, k=k, n=n, kb=kb, nb=nb, m_tile=mt, k_chunk=kb,
                              w_base=w0, a_base=a_base, o_base=o0, double_buffer=True,
                              w_base1=w0 + kb * c.rows, o_base1=o0 + mt,
                              param_row=a0, param_row1=a0 + 3, acc_row=a0 + 6,
                              acc_row1=a0 + 6 + mt)
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


def build_linear_commands_double_buffered(
        config: NPUConfig, plan: LinearPlan, a_buf: Buffer, w_buf: Buffer, p_buf: Buffer,
        o_buf: Buffer, relu: bool, sems: dict[str, Semaphore]) -> tuple[CommandList, dict]:
    """The double-buffered command stream of one linear layer (``plan.double_buffer``).

    Steps ``t`` run over (M tile, N block). Four semaphores: ``L`` counts retired loads, ``M``
    retired steps of the matrix engine, ``R`` requantizations, ``S`` stores. Buffers
    alternate with ``t % 2``. The loads of step ``t + 1`` are issued before the matmuls of
    step ``t`` (prefetch) and wait in the load engine's FIFO, so the DMA fetches the next
    weight block while the array computes:

    * activations of a new M tile (one buffer, not prefetched): issued after the matmuls of
      step ``t - 1`` and waiting ``M >= t`` (every earlier step's matmuls done);
    * weights ``W_t`` into buffer ``t % 2``: wait ``M >= t - 1`` (step ``t - 2`` done with it);
    * parameters ``P_t`` into buffer ``t % 2``: wait ``S >= t - 1`` (store ``t - 2`` done,
      which implies requant ``t - 2`` done: parameters, accumulator and output tile free);
    * the first matmul of step ``t``: wait ``L`` >= the loads up to ``P_t``; the last one
      signals ``M``;
    * requant ``t``: wait ``M >= t + 1``; signals ``R``. Store ``t``: wait ``R >= t + 1``;
      signals ``S``.

    Every wait is on a command earlier in the stream, so the stream cannot deadlock and the
    in-order functional model runs it too. Returns the commands and the number of signals
    issued per semaphore name.
    """
    c = config
    srb, rows = c.spad_row_bytes, c.rows
    m, kb, nb, mt_max = plan.m, plan.kb, plan.nb, plan.m_tile
    k_pad = kb * rows
    cmds = CommandList()
    steps = [(i0, j) for i0 in range(0, m, mt_max) for j in range(nb)]
    L, M, R, S = (sems[x] for x in "LMRS")
    n_loads = 0
    loads_through: dict[int, int] = {}

    def wait(sem: Semaphore, count: int) -> tuple[int, int] | None:
        return (sem.id, sem.target(count)) if count > 0 else None

    def emit_a(t: int) -> None:
        nonlocal n_loads
        i0 = steps[t][0]
        mt = min(mt_max, m - i0)
        cmds.dma_load(mem=LocalMem.SPAD, dram_addr=a_buf.addr + i0 * srb,
                      dram_stride=m * srb, row_bytes=mt * srb, n_rows=kb,
                      local_row=plan.a_base, local_stride=mt, wait=wait(M, t), signal=L.id)
        n_loads += 1
        loads_through[t] = n_loads

    def emit_loads(t: int) -> None:
        nonlocal n_loads
        j = steps[t][1]
        w_base = (plan.w_base, plan.w_base1)[t % 2]
        p_row = (plan.param_row, plan.param_row1)[t % 2]
        cmds.dma_load(mem=LocalMem.SPAD, dram_addr=w_buf.addr + j * k_pad * srb,
                      dram_stride=rows * srb, row_bytes=rows * srb, n_rows=kb,
                      local_row=w_base, local_stride=rows, wait=wait(M, t - 1), signal=L.id)
        cmds.dma_load(mem=LocalMem.ACC, dram_addr=p_buf.addr + j * 3 * c.acc_row_bytes,
                      dram_stride=c.acc_row_bytes, row_bytes=c.acc_row_bytes, n_rows=3,
                      local_row=p_row, local_stride=1, wait=wait(S, t - 1), signal=L.id)
        n_loads += 2
        loads_through[t] = max(loads_through.get(t, 0), n_loads)

    emit_a(0)
    emit_loads(0)
    for t, (i0, j) in enumerate(steps):
        if t + 1 < len(steps):
            emit_loads(t + 1)
        if t > 0 and j == 0:
            emit_a(t)
        mt = min(mt_max, m - i0)
        w_base = (plan.w_base, plan.w_base1)[t % 2]
        acc_row = (plan.acc_row, plan.acc_row1)[t % 2]
        o_base = (plan.o_base, plan.o_base1)[t % 2]
        p_row = (plan.param_row, plan.param_row1)[t % 2]
        for kk in range(kb):
            cmds.matmul(a_row=plan.a_base + kk * mt, w_row=w_base + kk * rows, acc_row=acc_row,
                        m=mt, accumulate=kk > 0,
                        wait=wait(L, loads_through[t]) if kk == 0 else None,
                        signal=M.id if kk == kb - 1 else None)
        cmds.requant(acc_row=acc_row, spad_row=o_base, n_rows=mt, param_row=p_row, relu=relu,
                     wait=wait(M, t + 1), signal=R.id)
        cmds.dma_store(mem=LocalMem.SPAD, dram_addr=o_buf.addr + (j * m + i0) * srb,
                       dram_stride=0, row_bytes=mt * srb, n_rows=1, local_row=o_base,
                       local_stride=0, wait=wait(R, t + 1), signal=S.id)
    n = len(steps)
    return cmds, {"L": n_loads, "M": n, "R": n, "S": n}


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
                  timeout_cycles: int | None = None) -> LinearJob:
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
    plan = plan_linear(c, mm, k, n, double_buffer=double_buffer, spad_region=spad_region,
                       acc_region=acc_region)
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
                      stream: Stream | None = None) -> tuple[np.ndarray, LinearStats]:
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
                        double_buffer=double_buffer, timeout_cycles=timeout_cycles)
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
