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
  ``cols`` channels (zero for padding channels); the ``3 G`` rows of a group of N blocks, or
  of ``p_steps`` consecutive groups (:attr:`LinearPlan.p_steps`), are one DMA of one DRAM row
  (so one long burst) into the accumulator.
* Output: shape ``(NB, M, spad_row_bytes)`` int8; ``[nb, i, :cols]`` = ``out[i, nb*cols : ...]``.

Double-buffered tiling (the default; :func:`plan_linear` with ``double_buffer=True``,
:func:`build_linear_commands_double_buffered`). A MATMUL streams ``Mt`` activation rows through
one ``rows x cols`` weight tile; back to back, MATMULs cost ``max(Mt, rows, cols)`` cycles each
(:func:`matmul_cycles`: the next weight tile loads while the current one streams; a MATMUL's
own latency, :func:`matmul_latency`, overlaps the next ones), so the plan makes ``Mt`` at least
``max(rows, cols)`` where it can and chunks K to fit the scratchpad:

* a *step* is one M tile of ``Mt`` rows and one group of ``n_group`` (G) N blocks, each with its
  own accumulator tile of ``Mt`` rows; the tiles of consecutive steps sit at opposite ends of
  the accumulator (after two sets of ``3 G p_steps`` parameter rows) and may overlap;
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
(:class:`~sw.kernels.linear_ops.Timer`: :func:`matmul_cycles`, :func:`requant_cycles`,
:func:`dma_cycles`, derived from :mod:`hw.isa.timing`; in-order engines, semaphore waits),
keeping the fastest; everything derives from the
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

Modules: :mod:`sw.kernels.linear_plan` (tiling), :mod:`sw.kernels.linear_schedule` (the
double-buffered schedule as a typed list of operations, over the tiles and buffers of
:mod:`sw.kernels.linear_layout`), :mod:`sw.kernels.linear_ops` (the
operations and the planner's timing model), :mod:`sw.kernels.linear_commands` (the encoded
command streams); this module checks and packs the operands and launches them. Every public
name is importable from here.

Numerics: the int32 accumulation is exact for ``K <= MAX_EXACT_K`` = 131071
(:func:`sw.quant.max_exact_k`); a larger K could wrap the accumulator, so the kernel rejects
it with :class:`sw.quant.AccumulatorOverflowError` before touching the device, as
:func:`sw.golden.linear_int` does (K is not split: two int32 partial sums cannot be added on
the device beyond 32 bits). Kernel, golden model and functional model agree bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hw.config import NPUConfig
from hw.isa import E8M0_NAN, MX_BLOCK, ActFormat, WeightFormat
from sw.kernels.device_args import check_device_args
from sw.kernels.linear_commands import build_linear_commands, build_linear_commands_double_buffered
from sw.kernels.linear_ops import (
    dma_cycles,
    matmul_cycles,
    matmul_latency,
    requant_cycles,
)
from sw.kernels.linear_pack import (
    INT8_FORMATS,
    Formats,
    pack_activations,
    pack_operands,
    pack_weights,
    weight_dram_bytes,
)
from sw.kernels.linear_plan import (
    LinearPlan,
    double_buffered_plan,
    linear_dram_bytes,
    plan_linear,
)
from sw.quant import (
    INT32_MAX,
    INT32_MIN,
    check_accumulation,
    check_int_values,
    check_multipliers,
    check_shifts,
)
from sw.runtime import Buffer, Device, LocalUse, Semaphore, Stream
from sw.runtime.vm import check_free, free_unwaited

__all__ = ["LinearPlan", "LinearStats", "LinearJob", "Formats", "INT8_FORMATS", "plan_linear",
           "linear", "linear_with_stats", "linear_launch", "pack_activations", "pack_weights",
           "weight_dram_bytes", "check_mx",
           "build_linear_commands",
           "build_linear_commands_double_buffered", "double_buffered_plan", "linear_dram_bytes",
           "matmul_cycles", "matmul_latency", "requant_cycles", "dma_cycles"]



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


def check_mx(config: NPUConfig) -> None:
    """Refuse, before any work, a configuration the linear kernel cannot run MXINT8 on: no
    MX exponent stage (``mx=0``), or K tiles (``rows`` deep) that straddle the
    :data:`hw.isa.MX_BLOCK`-element blocks sharing a scale (``rows`` must divide it).

    Raises
    ------
    ValueError
        Saying which, with ``config``'s value.
    """
    if not config.mx:
        raise ValueError(f"MXINT8 needs the MX exponent stage: configuration {config.spec} "
                         f"has mx=0 ({config.spec},mx=1 has it)")
    if MX_BLOCK % config.rows:
        raise ValueError(f"MXINT8 needs K tiles inside the {MX_BLOCK}-element MX blocks: "
                         f"rows must divide {MX_BLOCK}, {config.spec} has rows={config.rows}")


def _check_formats(config: NPUConfig, fmt: Formats, m: int, k: int, n: int,
                   w: np.ndarray) -> None:
    """Typed errors for formats the configuration or the operands cannot do."""
    if fmt.weights == WeightFormat.INT4 and w.size and (w.min() < -8 or w.max() > 7):
        raise ValueError(f"int4 weights must be in -8..7, got {w.min()}..{w.max()}")
    if not fmt.mx:
        return
    check_mx(config)
    if not 0 <= fmt.x_base < 1024:
        raise ValueError(f"x_base must be in 0..1023, got {fmt.x_base}")
    nb = -(-k // MX_BLOCK)
    for name, x, shape, on in (("w_exp", fmt.w_exp, (nb, n), fmt.weights == WeightFormat.MXINT8),
                               ("a_exp", fmt.a_exp, (m, nb),
                                fmt.activations == ActFormat.MXINT8)):
        if not on:
            continue
        if x is None or np.shape(x) != shape:
            raise ValueError(f"{name} must have shape {shape}, got "
                             f"{None if x is None else np.shape(x)}")
        if np.any(np.asarray(x) == E8M0_NAN):
            raise ValueError(f"{name} holds the NaN scale (0xFF): the hardware has no NaN")


def _check_operands(a: np.ndarray, w: np.ndarray, bias: npt.ArrayLike,
                    multiplier: npt.ArrayLike, shift: npt.ArrayLike
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Typed errors for bad operands; ``bias``, ``multiplier``, ``shift`` as checked int64
    arrays (:func:`sw.quant.check_int_values`: no float is truncated)."""
    if a.dtype != np.int8 or w.dtype != np.int8:
        raise ValueError(f"A and W must be int8, got {a.dtype} and {w.dtype}")
    if a.ndim != 2 or w.ndim != 2 or a.shape[1] != w.shape[0]:
        raise ValueError(f"shapes do not match: A {a.shape} @ W {w.shape}")
    check_accumulation(a.shape[1])
    n = (w.shape[1],)
    return (check_int_values("bias", bias, INT32_MIN, INT32_MAX, shape=n),
            check_multipliers("multiplier", multiplier, shape=n),
            check_shifts("shift", shift, shape=n))


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
        self._end = stream.commands_submitted      # the stream's count after the kernel

    def output(self) -> np.ndarray:
        """The int8 ``(M, N)`` result (reads device memory; the work must have completed)."""
        c, p = self.stream.device.config, self.plan
        o = self.stream.device.download(self.out_buffer, np.int8, (p.nb, p.m, c.spad_row_bytes))
        out = o[:, :, :c.cols].transpose(1, 0, 2).reshape(p.m, p.nb * c.cols)[:, :p.n]
        return np.ascontiguousarray(out)

    def free(self) -> None:
        """Free the job's buffers and semaphores: now if the host has seen the kernel
        complete (its stream synchronized, or an event recorded after it), else once it has
        (until then its DMA could still write the buffers and signal the semaphores).

        Raises
        ------
        ContextInUseError
            If another context maps pages of a buffer of the job (:meth:`Context.share`,
            :meth:`Context.free`); nothing is freed.
        """
        bufs, sems = [b for b in self._buffers if not b.freed], self._sems
        for b in bufs:      # (a deferred release must not fail: refuse now)
            check_free(b)
        self._buffers, self._sems = [], []

        def release(now: bool) -> None:
            for b in bufs:
                if not b.freed:
                    free_unwaited(b, self.stream, now)
            for s in sems:
                s.free()
        self.stream.device.deferred.add(release, [(self.stream, self._end)])


def _check_gelu(gelu, relu: bool, shape: tuple) -> tuple[np.ndarray, np.ndarray] | None:
    """``linear_launch``'s ``gelu`` as int64 arrays, checked (ValueError, TypeError)."""
    if gelu is None:
        return None
    if relu:
        raise ValueError("relu and gelu exclude each other")
    return (check_multipliers("gelu m2", gelu[0], shape=shape),
            check_shifts("gelu s2", gelu[1], shape=shape))


def _prepare(device: Device, a: npt.ArrayLike | Buffer, w: npt.ArrayLike, bias: npt.ArrayLike,
             multiplier: npt.ArrayLike, shift: npt.ArrayLike, relu: bool, *, m: int | None,
             double_buffer: bool, spad_region: tuple[int, int] | None,
             acc_region: tuple[int, int] | None, plan: LinearPlan | None, formats: Formats,
             gelu: tuple[npt.ArrayLike, npt.ArrayLike] | None, w_buf: Buffer | None
             ) -> tuple[LinearPlan, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`linear_launch`'s checks, plan and packed DRAM images (touches no device
    state: every argument error is raised here, before anything is allocated or launched)."""
    c = device.config
    w_arr = np.asarray(w)
    if isinstance(a, Buffer):
        if m is None:
            raise ValueError("m must be given with a packed activation buffer")
        if formats.activations != ActFormat.INT8:
            raise ValueError("a packed activation buffer holds int8 activations")
        a_arr = np.zeros((m, w_arr.shape[0]), dtype=np.int8)   # for the checks only
    else:
        a_arr = np.asarray(a)
    b_arr, m_arr, s_arr = _check_operands(a_arr, w_arr, bias, multiplier, shift)
    g_arr = _check_gelu(gelu, relu, b_arr.shape)
    if w_buf is not None and plan is None:
        raise ValueError("w_buf needs the plan it was packed for")
    mm, k = a_arr.shape
    n = w_arr.shape[1]
    _check_formats(c, formats, mm, k, n, w_arr)
    fmt_fields = {"w_fmt": int(formats.weights), "a_fmt": int(formats.activations),
                  "x_base": int(formats.x_base) if formats.mx else 0}
    if plan is None:
        plan = plan_linear(c, mm, k, n, double_buffer=double_buffer, spad_region=spad_region,
                           acc_region=acc_region, dram=device.dram_timing,
                           gelu=gelu is not None, **fmt_fields)
    elif plan.gelu != (gelu is not None):
        raise ValueError(f"the plan is for a {'GELU' if plan.gelu else 'REQUANT'} epilogue")
    elif (plan.m, plan.k, plan.n) != (mm, k, n):
        raise ValueError(f"the plan is for {plan.m}x{plan.k}x{plan.n}, not {mm}x{k}x{n}")
    elif (plan.w_fmt, plan.a_fmt, plan.x_base) != tuple(fmt_fields.values()):
        raise ValueError(f"the plan is for formats {plan.w_fmt}, {plan.a_fmt}, x_base "
                         f"{plan.x_base}, not {tuple(fmt_fields.values())}")
    a_dram, w_dram, p_dram = pack_operands(c, plan, a_arr, w_arr, b_arr, m_arr, s_arr, formats,
                                   g_arr)
    return plan, a_dram, w_dram, p_dram


def _local_use(c: NPUConfig, plan: LinearPlan, regions: tuple) -> LocalUse:
    """The scratchpad and accumulator rows ``plan`` uses: a double-buffered plan's layout
    (:func:`~sw.kernels.linear_plan.double_buffered_plan`: weight, activation and output
    buffers from ``w_bases[0]`` on; the two parameter sets, then the tiles, from
    ``param_rows[0]`` to ``acc_span[1]``), else ``regions`` (None: the whole memory)."""
    what = f"the linear kernel {plan.m}x{plan.k}x{plan.n}"
    if plan.double_buffer:
        return LocalUse(what, (plan.w_bases[0], plan.o_bases[-1] + plan.n_group * plan.m_tile),
                        (plan.param_rows[0], plan.acc_span[1]))
    return LocalUse.regions(c, what, *regions)


def _check_launch_args(stream: Stream, prepared: tuple, a: npt.ArrayLike | Buffer,
                       w_buf: Buffer | None, sems: dict[str, Semaphore] | None) -> None:
    """:func:`~sw.kernels.device_args.check_device_args` for :func:`linear_launch`: a packed
    activation buffer ``a`` of :func:`pack_activations`' size, ``w_buf`` of
    :func:`pack_weights`' (as :func:`_prepare` packed them for the plan) and the ``sems``."""
    plan, a_dram, w_dram, _ = prepared
    bufs = {}
    if isinstance(a, Buffer):
        bufs["a"] = (a, a_dram.nbytes, f"layout {a_dram.shape} int8 of pack_activations")
    if w_buf is not None:
        bufs["w_buf"] = (w_buf, w_dram.nbytes, f"layout {w_dram.shape} int8 of pack_weights")
    check_device_args(stream, f"M={plan.m}, K={plan.k}, N={plan.n}", bufs,
                      None if sems is None else {f"sems[{x!r}]": s for x, s in sems.items()})


def _launch(stream: Stream, prepared: tuple, a: npt.ArrayLike | Buffer, relu: bool, *,
            sems: dict[str, Semaphore] | None, w_buf: Buffer | None,
            timeout_cycles: int | None, use: LocalUse) -> LinearJob:
    """Upload what :func:`_prepare` packed, build the command stream and launch it with its
    local-memory ``use`` (:func:`_local_use`)."""
    plan, a_dram, w_dram, p_dram = prepared
    device = stream.device
    c = device.config
    mm = plan.m
    kw = {} if timeout_cycles is None else {"timeout_cycles": timeout_cycles}
    bufs: list[Buffer] = []
    own_sems: list[Semaphore] = []
    try:
        if isinstance(a, Buffer):
            a_buf = a
        else:
            a_buf = stream.upload(a_dram)
            bufs.append(a_buf)
        if w_buf is None:
            w_buf = stream.upload(w_dram)
            bufs.append(w_buf)
        p_buf = stream.upload(p_dram)
        bufs.append(p_buf)
        o_buf = stream.alloc(plan.nb * mm * c.spad_row_bytes)
        bufs.append(o_buf)
        if plan.double_buffer:
            if sems is None:
                named = {x: device.alloc_semaphore() for x in "LMRS"}
                own_sems.extend(named.values())
            else:
                named = sems
            cmds, issued = build_linear_commands_double_buffered(c, plan, a_buf, w_buf, p_buf,
                                                                  o_buf, relu, named)
            for x, count in issued.items():
                named[x].issued += count
        else:
            sem = device.alloc_semaphore()
            own_sems.append(sem)
            cmds = build_linear_commands(c, plan, a_buf, w_buf, p_buf, o_buf, relu,
                                         sem.target(), sem.id)
            sem.issued += len(cmds)
        stream.launch(cmds, **kw, local=use)
    except BaseException:
        for b in bufs:
            b.free()
        for s_ in own_sems:
            s_.free()
        raise
    return LinearJob(stream, plan, bufs, o_buf, own_sems, len(cmds))


def linear_launch(stream: Stream, a: npt.ArrayLike | Buffer, w: npt.ArrayLike,
                  bias: npt.ArrayLike, multiplier: npt.ArrayLike, shift: npt.ArrayLike,
                  relu: bool = False, *, shape_k: int | None = None, m: int | None = None,
                  double_buffer: bool = True, spad_region: tuple[int, int] | None = None,
                  acc_region: tuple[int, int] | None = None,
                  timeout_cycles: int | None = None, plan: LinearPlan | None = None,
                  formats: Formats = INT8_FORMATS,
                  gelu: tuple[npt.ArrayLike, npt.ArrayLike] | None = None,
                  sems: dict[str, Semaphore] | None = None, w_buf: Buffer | None = None
                  ) -> LinearJob:
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
    formats : Formats
        Operand formats (default int8 x int8): int4 or MXINT8 weights, MXINT8 activations
        (not with a packed activation buffer), their scales and the MX alignment base.
    gelu : tuple of (array_like, array_like), optional
        ``(m2, s2)``, each ``(N,)``: the epilogue is GELU instead of REQUANT (bit-exact with
        :func:`sw.golden.gelu_int` of the accumulator, ``multiplier``/``shift`` being its
        ``m1``/``s1``; ``relu`` must be False); ``m2`` in ``0..2**31-1``, ``s2`` in ``0..63``.
    sems : dict of str to Semaphore, optional
        The four semaphores ``"L"``, ``"M"``, ``"R"``, ``"S"`` of the double-buffered stream,
        owned by the caller (kernels launched one after another on one stream can share them:
        16 semaphores would not last a whole encoder layer otherwise); the job does not free
        them. Default: allocated from the pool and freed by :meth:`LinearJob.free`.
    w_buf : Buffer, optional
        The weights already in device DRAM in the kernel's layout (uploaded earlier, e.g. while
        the previous layer computed: :func:`pack_weights`); not freed by the job. Needs
        ``plan``.

    Returns
    -------
    LinearJob

    Raises
    ------
    ValueError
        For bad shapes, dtypes or parameter ranges (``bias`` int32, ``multiplier`` and gelu
        ``m2`` ``0..2**31-1``, ``shift`` and gelu ``s2`` ``0..63``; the message names the
        argument, the range and the first bad value), int4 values outside -8..7, MXINT8 on a
        configuration without ``mx`` or whose ``rows`` does not divide 32, scales of the
        wrong shape or with the NaN scale; a packed activation buffer ``a`` or a ``w_buf``
        smaller than its layout (:func:`pack_activations`' ``KB * M * spad_row_bytes``
        bytes, :func:`pack_weights`'), or one of them or a semaphore of ``sems`` of another
        device than the stream's.
    TypeError
        A ``bias``, ``multiplier``, ``shift`` or gelu value that is not an integer (e.g. a
        real scale passed as the multiplier: convert it with
        :func:`sw.quant.quantize_multipliers`; float arrays of integral values such as
        ``3.0`` are accepted, as are all integer dtypes; bools are refused); a ``sems``
        value that is not a :class:`Semaphore`. This and the ValueErrors come before
        anything is allocated, uploaded or launched.
    NPUError
        A freed ``a``, ``w_buf`` or semaphore of ``sems``, before anything is allocated.
    AccumulatorOverflowError
        If ``K > MAX_EXACT_K`` (131071): the int32 accumulation could wrap (K is not split).
    LocalMemoryConflictError
        If a kernel of another stream that may run at the same time uses overlapping
        scratchpad or accumulator rows (:mod:`sw.runtime.local`), before anything is
        allocated, uploaded or counted.
    OutOfMemoryError, OutOfSemaphoresError, DeviceError, DeviceTimeoutError
        From the runtime.
    """
    prepared = _prepare(stream.device, a, w, bias, multiplier, shift, relu, m=m,
                        double_buffer=double_buffer, spad_region=spad_region,
                        acc_region=acc_region, plan=plan, formats=formats, gelu=gelu,
                        w_buf=w_buf)
    _check_launch_args(stream, prepared, a, w_buf, sems)
    # a given serialized plan's rows are not confined to the regions (they guided the planner)
    use = _local_use(stream.device.config, prepared[0],
                     (spad_region, acc_region) if plan is None else (None, None))
    stream.check_local(use)         # before anything is uploaded or counted
    return _launch(stream, prepared, a, relu, sems=sems, w_buf=w_buf,
                   timeout_cycles=timeout_cycles, use=use)


def linear_with_stats(device: Device, a: npt.ArrayLike, w: npt.ArrayLike, bias: npt.ArrayLike,
                      multiplier: npt.ArrayLike, shift: npt.ArrayLike, relu: bool = False,
                      timeout_cycles: int | None = None, *, double_buffer: bool = True,
                      stream: Stream | None = None, plan: LinearPlan | None = None,
                      formats: Formats = INT8_FORMATS,
                      spad_region: tuple[int, int] | None = None,
                      acc_region: tuple[int, int] | None = None
                      ) -> tuple[np.ndarray, LinearStats]:
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
        Shape ``(N,)``, accumulator units (integers, ``-2**31..2**31-1``).
    multiplier : array_like of int
        Shape ``(N,)``, each an integer in ``0..2**31-1`` (the fixed-point multiplier of
        :func:`sw.quant.quantize_multipliers`, not the real scale).
    shift : array_like of int
        Shape ``(N,)``, each an integer in ``0..63``.
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
    formats : Formats
        Operand formats (see :func:`linear_launch`); bit-exact with
        :func:`sw.golden.linear_formats`.
    spad_region, acc_region : tuple of (int, int), optional
        Rows of the local memories the kernel may use, so that it can run beside kernels of
        other streams (see :func:`linear_launch`).

    Returns
    -------
    out : numpy.ndarray
        int8, shape ``(M, N)``.
    stats : LinearStats
        Cycles (launch to completion), commands, MACs, utilization and the tiling.

    Raises
    ------
    ValueError
        For bad shapes, dtypes or parameter ranges (see :func:`linear_launch`), before
        anything is launched.
    TypeError
        A ``bias``, ``multiplier`` or ``shift`` value that is not an integer (a real scale
        instead of :func:`sw.quant.quantize_multipliers`' output; integral floats such as
        ``3.0`` are accepted).
    AccumulatorOverflowError
        If ``K > MAX_EXACT_K`` (131071): the int32 accumulation could wrap (K is not split).
    LocalMemoryConflictError
        As :func:`linear_launch`, before the stream is synchronized.
    DeviceError, DeviceTimeoutError, OutOfMemoryError, OutOfSemaphoresError
        From the runtime.
    """
    stream = device.default_stream if stream is None else stream
    sync_kw = {} if timeout_cycles is None else {"timeout_cycles": timeout_cycles}
    prepared = _prepare(device, a, w, bias, multiplier, shift, relu, m=None,
                        double_buffer=double_buffer, spad_region=spad_region,
                        acc_region=acc_region, plan=plan, formats=formats, gelu=None,
                        w_buf=None)   # checks first
    use = _local_use(device.config, prepared[0],
                     (spad_region, acc_region) if plan is None else (None, None))
    stream.check_local(use)
    stream.synchronize(**sync_kw)   # the cycle count below covers this kernel only
    job = _launch(stream, prepared, a, relu, sems=None, w_buf=None,
                  timeout_cycles=timeout_cycles, use=use)
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
