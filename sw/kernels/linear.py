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

Ordering: every command waits for ``sem[0] >= base + i`` (all earlier commands of the kernel
retired) and signals ``sem[0]``: a global sequence counter that serializes the engines. This is
simple and correct but leaves no DMA/compute overlap; double buffering with per-engine
semaphores is future work. ``base`` is the semaphore's value read after the queue is idle; if
the counter could wrap past 2**32 during the kernel the semaphores are reset first
(``CONTROL`` clear).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hw.config import NPUConfig
from hw.isa import LocalMem
from sw.runtime import Buffer, CommandList, Device

__all__ = ["LinearPlan", "LinearStats", "plan_linear", "linear", "linear_with_stats"]

_SEM = 0           #: the semaphore used as the kernel's sequence counter
_PARAM_ROW = 0     #: accumulator rows 0..2: bias, multiplier, shift
_ACC_ROW = 3       #: first accumulator row of the output tile
_MAX_ROW_BYTES = (1 << 16) - 1


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class LinearPlan:
    """Tiling of one linear layer on one configuration (all counts in rows or blocks)."""
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


def plan_linear(config: NPUConfig, m: int, k: int, n: int) -> LinearPlan:
    """Choose the tiling for an ``(m, k) @ (k, n)`` layer (see the module docstring).

    Raises
    ------
    ValueError
        If a dimension is < 1 or the scratchpad cannot hold even one weight block, one
        activation row and one output row.
    """
    if min(m, k, n) < 1:
        raise ValueError(f"dimensions must be >= 1, got M={m}, K={k}, N={n}")
    c = config
    kb, nb = _ceil_div(k, c.rows), _ceil_div(n, c.cols)
    # Mt limits besides the scratchpad: accumulator rows and the 16-bit DMA row_bytes field.
    m_cap = min(m, c.acc_rows - _ACC_ROW, _MAX_ROW_BYTES // c.spad_row_bytes, (1 << 16) - 1)
    # Whole K resident: kb*rows + kb*Mt + Mt <= spad_rows.
    mt = min(m_cap, (c.spad_rows - kb * c.rows) // (kb + 1))
    if mt >= 1:
        kbc = kb
    else:
        mt = min(m_cap, (c.spad_rows - c.rows) // 2)
        if mt < 1:
            raise ValueError(f"scratchpad of {c.spad_rows} rows is too small for a linear layer")
        kbc = min(kb, (c.spad_rows - mt) // (c.rows + mt))
    return LinearPlan(m=m, k=k, n=n, kb=kb, nb=nb, m_tile=mt, k_chunk=kbc,
                      w_base=0, a_base=kbc * c.rows, o_base=kbc * c.rows + kbc * mt)


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
                          p_buf: Buffer, o_buf: Buffer, relu: bool, sem_base: int
                          ) -> CommandList:
    """The command stream of one linear layer over buffers laid out as in the module docstring.

    Command ``i`` waits for ``sem[0] >= sem_base + i`` and signals ``sem[0]``.
    """
    c = config
    srb, rows = c.spad_row_bytes, c.rows
    cmds = CommandList()

    def seq() -> dict:
        i = len(cmds)
        return {"wait": (_SEM, sem_base + i), "signal": _SEM}

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
                                acc_row=_ACC_ROW, m=mt, accumulate=(kb0 + t) > 0, **seq())
            cmds.dma_load(mem=LocalMem.ACC, dram_addr=p_buf.addr + j * 3 * c.acc_row_bytes,
                          dram_stride=c.acc_row_bytes, row_bytes=c.acc_row_bytes, n_rows=3,
                          local_row=_PARAM_ROW, local_stride=1, **seq())
            cmds.requant(acc_row=_ACC_ROW, spad_row=plan.o_base, n_rows=mt,
                         param_row=_PARAM_ROW, relu=relu, **seq())
            cmds.dma_store(mem=LocalMem.SPAD, dram_addr=o_buf.addr + (j * m + i0) * srb,
                           dram_stride=0, row_bytes=mt * srb, n_rows=1, local_row=plan.o_base,
                           local_stride=0, **seq())
    return cmds


def linear_with_stats(device: Device, a: npt.ArrayLike, w: npt.ArrayLike, bias: npt.ArrayLike,
                      multiplier: npt.ArrayLike, shift: npt.ArrayLike, relu: bool = False,
                      timeout_cycles: int | None = None) -> tuple[np.ndarray, LinearStats]:
    """Run a quantized linear layer on ``device``; bit-exact with :func:`sw.golden.linear_int`.

    Parameters
    ----------
    device : Device
        The device (its queue must be idle or it is synchronized first).
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
        Budget for :meth:`Device.synchronize` (default: the runtime's default).

    Returns
    -------
    out : numpy.ndarray
        int8, shape ``(M, N)``.
    stats : LinearStats
        Cycles, commands, MACs, utilization and the tiling.

    Raises
    ------
    ValueError
        For bad shapes, dtypes or parameter ranges.
    DeviceError, DeviceTimeoutError, OutOfMemoryError
        From the runtime.
    """
    a_arr, w_arr = np.asarray(a), np.asarray(w)
    b_arr = np.asarray(bias, dtype=np.int64)
    m_arr = np.asarray(multiplier, dtype=np.int64)
    s_arr = np.asarray(shift, dtype=np.int64)
    _check_operands(a_arr, w_arr, b_arr, m_arr, s_arr)
    c = device.config
    m, k = a_arr.shape
    n = w_arr.shape[1]
    plan = plan_linear(c, m, k, n)
    a_dram, w_dram, p_dram = _pack(c, plan, a_arr, w_arr, b_arr, m_arr, s_arr)
    sync_kw = {} if timeout_cycles is None else {"timeout_cycles": timeout_cycles}

    bufs: list[Buffer] = []
    try:
        a_buf = device.upload(a_dram)
        bufs.append(a_buf)
        w_buf = device.upload(w_dram)
        bufs.append(w_buf)
        p_buf = device.upload(p_dram)
        bufs.append(p_buf)
        o_buf = device.alloc(plan.nb * m * c.spad_row_bytes)
        bufs.append(o_buf)

        device.synchronize(**sync_kw)  # queue idle: the semaphore baseline is stable
        base = device.semaphore(_SEM)
        # Upper bound of the command count, to avoid a wrap of the 32-bit counter.
        n_tiles = _ceil_div(m, plan.m_tile)
        bound = n_tiles * (1 + plan.nb * (3 + 2 * _ceil_div(plan.kb, plan.k_chunk) + plan.kb))
        if base + bound >= 1 << 32:
            device.reset()
            base = device.semaphore(_SEM)
        cmds = build_linear_commands(c, plan, a_buf, w_buf, p_buf, o_buf, relu, base)
        device.launch(cmds, **sync_kw)
        cycles = device.synchronize(**sync_kw)
        o_dram = device.download(o_buf, np.int8, (plan.nb, m, c.spad_row_bytes))
    finally:
        for b in bufs:
            b.free()
    out = o_dram[:, :, :c.cols].transpose(1, 0, 2).reshape(m, plan.nb * c.cols)[:, :n]
    macs = m * k * n
    util = macs / (cycles * c.n_pes) if cycles else None
    return np.ascontiguousarray(out), LinearStats(cycles=cycles, n_commands=len(cmds), macs=macs,
                                                  utilization=util, plan=plan)


def linear(device: Device, a: npt.ArrayLike, w: npt.ArrayLike, bias: npt.ArrayLike,
           multiplier: npt.ArrayLike, shift: npt.ArrayLike, relu: bool = False) -> np.ndarray:
    """Convenience form of :func:`linear_with_stats` that returns only the int8 ``(M, N)``
    output."""
    return linear_with_stats(device, a, w, bias, multiplier, shift, relu)[0]
