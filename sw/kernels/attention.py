"""Quantized multi-head attention as NPU command streams: ``Q K^T`` and ``P V`` on the systolic
array, the integer softmax on the vector unit, deferred normalization in the requantization.

Per head ``h`` (``d`` = head size) and query tile ``i0 .. i0 + Mt - 1``, bit-exact with
:func:`sw.golden.attention_head_int`:

1. **scores**: ``S = Q K^T`` -- MATMUL with ``flags.transpose``: K rows stored one key per
   scratchpad row become the ``K^T`` weight tile, so K needs no transpose anywhere. One
   MATMUL per key block sums its d blocks (``k_blocks = DB``: the Q tile's d blocks ``Mt``
   rows apart, the key block's K tiles ``c`` rows apart) into ``acc[s_base + kb * Mt + i]``.
2. **softmax**: one SOFTMAX command over the tile's ``KB`` key blocks (key-padding and causal
   masks, ``1/sqrt(d)`` and the dequant scales folded into its ``mult``/``shift``); P (0..127)
   lands in the blocked activation layout ``spad[p_base + kb * Mt + i]``; the row reciprocals
   in ``acc[sc_base ..]``.
3. **context**: ``O = P V`` -- one MATMUL per value column block sums the key blocks
   (``k_blocks = KB``); REQUANT with ``flags.row_scale`` applies ``1 / rowsum`` and the per-channel
   ``s_v / s_out`` in one pass; one DMA stores the tile.

Needs a square array (``rows == cols``; the transposed weight load); raises ``ValueError``
otherwise. Any ``L >= 1`` (zero-padded to whole key blocks; padded keys are masked by
``kv_len``), any head size.

DRAM layouts (int8, rows of ``spad_row_bytes``; ``c = cols``, ``DB = ceil(d / c)``,
``KB = ceil(L / c)``, ``Lp = KB * c``): Q ``(H, DB, L, srb)`` and V ``(H, DB, Lp, srb)``
(``[h, b, j, :c] = X_h[j, b*c:(b+1)*c]``), K ``(H, KB, DB, c, srb)`` (``[h, kb, b, j, :c] =
K_h[kb*c + j, b*c:(b+1)*c]``: key block by key block, so that one MATMUL's K tiles are ``c``
rows apart), parameters ``(H, DB, 3, acc_row_elems)`` int32 (bias 0, multiplier, shift per
channel), output ``(H, DB, L, srb)``.

Each stage of each (head, tile) is one launch on the kernel's :class:`~sw.runtime.Stream`
(default: the device's default stream), so the device's cycle counter measures it
(``AttentionStats.stages``). Commands are ordered with one semaphore from the device's pool
(:meth:`~sw.runtime.Device.alloc_semaphore`, freed at the end): every command signals it, and
command ``i`` of a launch waits until it reached ``target + i`` (wrap-safe,
:func:`hw.isa.sem_reached`) where it runs on another engine than command ``i - 1``; commands on
one engine run in its order (see :func:`_run_stage`). The kernel touches nothing but its stream, its
semaphore, its buffers and its regions of the scratchpad and accumulator (``spad_region``,
``acc_region``), so work on other streams in other regions runs beside it undisturbed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from hw.config import NPUConfig
from hw.isa import DmaBody, LocalMem, SoftmaxBody, field_max
from sw.kernels.device_args import check_device_args
from sw.quant import INT32_MAX, check_int_values, check_multipliers, check_shifts
from sw.runtime import Buffer, CommandList, Device, LocalUse, Semaphore, Stream
from sw.runtime.local import region

__all__ = ["AttentionPlan", "AttentionStats", "plan_attention", "attention_with_stats",
           "attention_launch", "pack_attention_params",
           "STAGES"]

STAGES = ("scores", "softmax", "context")
#: a DMA row of a query tile must fit the command's ``row_bytes`` field
_ROW_BYTES_LIMIT = field_max(DmaBody, "row_bytes") + 1
#: SOFTMAX's ``mult`` field (unsigned)
SCORE_MULT_MAX = field_max(SoftmaxBody, "mult")


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class AttentionPlan:
    """Tiling of one attention call (absolute rows of the scratchpad / accumulator)."""
    seq: int        #: L
    head_dim: int   #: d
    db: int         #: d blocks
    kb: int         #: key blocks
    lp: int         #: padded keys
    m_tile: int     #: query rows per tile
    k_base: int
    v_base: int
    q_base: int
    p_base: int
    o_spad: int
    sc_base: int    #: accumulator: reciprocal rows
    s_base: int     #: accumulator: scores
    o_acc: int      #: accumulator: P V
    param_base: int  #: accumulator: 3 rows per d block


@dataclass
class AttentionStats:
    """Per-stage device cycles and useful MACs of one :func:`attention_with_stats` call.

    ``stages[name] = {"cycles", "macs", "launches"}`` for ``name`` in :data:`STAGES`.
    """
    stages: dict = field(default_factory=lambda: {s: {"cycles": 0, "macs": 0, "launches": 0}
                                                  for s in STAGES})
    n_commands: int = 0
    plan: AttentionPlan | None = None


def plan_attention(config: NPUConfig, seq: int, head_dim: int, *,
                   spad_region: tuple[int, int] | None = None,
                   acc_region: tuple[int, int] | None = None) -> AttentionPlan:
    """Choose the query tile ``Mt`` (as large as the memories allow, at most ``L``).

    Parameters
    ----------
    spad_region, acc_region : tuple of (int, int), optional
        ``(first row, rows)`` of the scratchpad / accumulator the kernel may use (default:
        all of it), so that kernels on other streams can use the rest.

    Raises
    ------
    ValueError
        For a non-square array, ``seq``/``head_dim`` < 1, a region outside its memory, or
        regions too small for one query row.
    """
    c = config
    if c.rows != c.cols:
        raise ValueError(f"attention needs a square array (transposed K load), got "
                         f"{c.rows}x{c.cols}")
    if seq < 1 or head_dim < 1:
        raise ValueError(f"seq and head_dim must be >= 1, got {seq}, {head_dim}")
    s0, s_rows = region(spad_region, c.spad_rows, "scratchpad")
    a0, a_rows = region(acc_region, c.acc_rows, "accumulator")
    n = c.cols
    db, kb = _ceil_div(head_dim, n), _ceil_div(seq, n)
    lp = kb * n
    kv_rows = 2 * db * lp
    best = 0
    for mt in range(1, min(seq, 4096) + 1):
        spad = kv_rows + db * mt + kb * mt + db * mt
        acc = 3 * db + _ceil_div(mt, n) + kb * mt + db * mt
        if spad <= s_rows and acc <= a_rows and mt * c.spad_row_bytes < _ROW_BYTES_LIMIT:
            best = mt
    if best == 0:
        where = c.name if spad_region is None and acc_region is None else \
            f"the regions {spad_region} / {acc_region} of {c.name}"
        raise ValueError(f"L={seq}, d={head_dim} does not fit the local memories of {where}")
    mt = best
    q_base = s0 + 2 * db * lp
    p_base = q_base + db * mt
    sc_base = a0 + 3 * db
    s_base = sc_base + _ceil_div(mt, n)
    return AttentionPlan(seq=seq, head_dim=head_dim, db=db, kb=kb, lp=lp, m_tile=mt,
                         k_base=s0, v_base=s0 + db * lp, q_base=q_base, p_base=p_base,
                         o_spad=p_base + kb * mt, sc_base=sc_base, s_base=s_base,
                         o_acc=s_base + kb * mt, param_base=a0)


def _blocked(x: np.ndarray, rows: int, n: int, srb: int, db: int) -> np.ndarray:
    """``(H, L, d)`` int8 -> ``(H, db, rows, srb)``, zero padded."""
    h, seq, d = x.shape
    out = np.zeros((h, db, rows, srb), np.int8)
    pad = np.zeros((h, seq, db * n), np.int8)
    pad[:, :, :d] = x
    out[:, :, :seq, :n] = pad.reshape(h, seq, db, n).transpose(0, 2, 1, 3)
    return out


def _check_heads(heads: int, hi: int = INT32_MAX) -> int:
    """``heads`` as an int in ``1..hi`` (ValueError; TypeError if not an integer)."""
    return int(check_int_values("heads", heads, 1, max(hi, 1), shape=()))


def _check_operands(q: np.ndarray, k: np.ndarray, v: np.ndarray, heads: int) -> int:
    """Typed errors for bad Q, K, V or ``heads``; returns ``heads`` as an int."""
    if any(a.dtype != np.int8 for a in (q, k, v)):
        raise ValueError("q, k, v must be int8")
    heads = _check_heads(heads, q.shape[1] if q.ndim == 2 and q.shape[1] else INT32_MAX)
    if q.shape != k.shape or q.shape != v.shape or q.ndim != 2 or q.shape[1] % heads:
        raise ValueError(f"q, k, v must share a shape (L, heads*d), got {q.shape}, {k.shape}, "
                         f"{v.shape} for {heads} heads")
    return heads


def _per(name: str, value: npt.ArrayLike, n: int, what: str) -> np.ndarray:
    """``value`` reshaped to ``(n,)`` (ValueError naming ``what`` if it has not ``n``
    values)."""
    arr = np.asarray(value)
    if arr.size != n:
        raise ValueError(f"{name} must have shape ({n},) ({what}), got shape {arr.shape}")
    return arr.reshape(n)


def _check_score_params(heads: int, score_mult: npt.ArrayLike,
                        score_shift: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """The SOFTMAX ``mult`` (``0..SCORE_MULT_MAX``) and ``shift`` (``0..63``) per head as
    checked int64 ``(heads,)`` arrays."""
    what = f"one per head, heads={heads}"
    return (check_int_values("score_mult", _per("score_mult", score_mult, heads, what), 0,
                             SCORE_MULT_MAX),
            check_shifts("score_shift", _per("score_shift", score_shift, heads, what)))


def _check_out_params(heads: int, d: int, out_mult: npt.ArrayLike,
                      out_shift: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """The context REQUANT multipliers (``0..2**31-1``) and shifts (``0..63``) per channel as
    checked int64 ``(heads, d)`` arrays."""
    what = f"one per context channel, heads * d = {heads} * {d}"
    om = check_multipliers("out_mult", _per("out_mult", out_mult, heads * d, what))
    osh = check_shifts("out_shift", _per("out_shift", out_shift, heads * d, what))
    return om.reshape(heads, d), osh.reshape(heads, d)


def _check_kv_len(kv_len: int | None, seq: int) -> int:
    """``kv_len`` (default ``seq``) as an int in ``0..seq``."""
    return seq if kv_len is None else int(check_int_values("kv_len", kv_len, 0, seq, shape=()))


def _param_shape(c: NPUConfig, heads: int, db: int) -> tuple[int, ...]:
    """The REQUANT parameters' DRAM layout (int32): ``(H, DB, 3, acc_row_elems)``."""
    return (heads, db, 3, c.acc_row_elems)


def _check_launch_args(stream: Stream, plan: AttentionPlan, heads: int,
                       bufs: dict[str, Buffer], sem: Semaphore) -> None:
    """:func:`~sw.kernels.device_args.check_device_args` for :func:`attention_launch`:
    ``q_buf``, ``k_buf``, ``v_buf``, ``o_buf`` ``(heads * DB, L, spad_row_bytes)`` int8,
    ``p_buf`` :func:`pack_attention_params`' ``(heads, DB, 3, acc_row_elems)`` int32, ``sem``
    (ValueError, TypeError, NPUError)."""
    c = stream.device.config
    act = (heads * plan.db, plan.seq, c.spad_row_bytes)
    layouts = {"q_buf": (act, 1), "k_buf": (act, 1), "v_buf": (act, 1),
               "p_buf": (_param_shape(c, heads, plan.db), 4), "o_buf": (act, 1)}
    need = {name: (buf, int(np.prod(layouts[name][0])) * layouts[name][1],
                   f"layout {layouts[name][0]} {'int8' if layouts[name][1] == 1 else 'int32'}")
            for name, buf in bufs.items()}
    check_device_args(stream, f"seq={plan.seq}, heads={heads}, head_dim={plan.head_dim}", need,
                      {"sem": sem})


def _pack(c: NPUConfig, plan: AttentionPlan, q: np.ndarray, k: np.ndarray, v: np.ndarray,
          heads: int, out_mult: npt.ArrayLike, out_shift: npt.ArrayLike) -> list[np.ndarray]:
    """Q, K, V and the REQUANT parameters in the DRAM layouts of the module docstring."""
    seq, n, srb, db, d = plan.seq, c.cols, c.spad_row_bytes, plan.db, plan.head_dim
    split = lambda a: a.reshape(seq, heads, d).transpose(1, 0, 2)  # noqa: E731
    om = np.zeros((heads, db * n), np.int64)
    osh = np.zeros((heads, db * n), np.int64)
    om[:, :d], osh[:, :d] = _check_out_params(heads, d, out_mult, out_shift)
    p_dram = np.zeros(_param_shape(c, heads, db), "<i4")
    p_dram[:, :, 1, :n] = om.reshape(heads, db, n)
    p_dram[:, :, 2, :n] = osh.reshape(heads, db, n)
    # K key block by key block: [h, b, e] is the (d block e, key block b) weight tile
    k_dram = _blocked(split(k), plan.lp, n, srb, db).reshape(heads, db, plan.kb, n, srb)
    return [_blocked(split(q), seq, n, srb, db),
            np.ascontiguousarray(k_dram.transpose(0, 2, 1, 3, 4)),
            _blocked(split(v), plan.lp, n, srb, db), p_dram]


@dataclass(frozen=True)
class _Tile:
    """One (head, query tile) of the kernel and what its stages need."""
    c: NPUConfig
    plan: AttentionPlan
    bufs: dict[str, Buffer]   #: "q", "k", "v", "p", "o"
    h: int
    i0: int
    mt: int

    @property
    def first(self) -> bool:
        return self.i0 == 0

    def scores(self, cmds: CommandList, kw: Callable[[str], dict]) -> None:
        """``S = Q K^T`` (K loaded with the head's first tile)."""
        c, p, mt, srb = self.c, self.plan, self.mt, self.c.spad_row_bytes
        db, lp, seq = p.db, p.lp, p.seq
        tile_rows = db * c.cols          # the d blocks of one key block, one after the other
        if self.first:
            cmds.dma_load(mem=LocalMem.SPAD, dram_addr=self.bufs["k"].addr + self.h * db * lp * srb,
                          dram_stride=tile_rows * srb, row_bytes=tile_rows * srb, n_rows=p.kb,
                          local_row=p.k_base, local_stride=tile_rows, **kw("load"))
        cmds.dma_load(mem=LocalMem.SPAD,
                      dram_addr=self.bufs["q"].addr + (self.h * db * seq + self.i0) * srb,
                      dram_stride=seq * srb, row_bytes=mt * srb, n_rows=db,
                      local_row=p.q_base, local_stride=mt, **kw("load"))
        for b in range(p.kb):   # the d blocks summed in one MATMUL (Q tiles Mt rows apart)
            cmds.matmul(a_row=p.q_base, w_row=p.k_base + b * tile_rows, acc_row=p.s_base + b * mt,
                        m=mt, transpose=True, k_blocks=db, **kw("matrix"))

    def softmax(self, cmds: CommandList, kw: Callable[[str], dict], *, kv_len: int, mult: int,
                shift: int, causal: bool) -> None:
        """P (unnormalized) and the row reciprocals of the tile's score rows."""
        p = self.plan
        cmds.softmax(acc_row=p.s_base, spad_row=p.p_base, n_rows=self.mt, n_blocks=p.kb,
                     stride=self.mt, scale_row=p.sc_base, kv_len=kv_len, mult=mult,
                     shift=shift, causal=causal, q_offset=self.i0, **kw("vector"))

    def context(self, cmds: CommandList, kw: Callable[[str], dict]) -> None:
        """``O = P V``, the row-scaled requantization and the store (V and the parameters
        loaded with the head's first tile)."""
        c, p, mt, srb = self.c, self.plan, self.mt, self.c.spad_row_bytes
        db, lp, arb = p.db, p.lp, c.acc_row_bytes
        if self.first:
            cmds.dma_load(mem=LocalMem.SPAD, dram_addr=self.bufs["v"].addr + self.h * db * lp * srb,
                          dram_stride=lp * srb, row_bytes=lp * srb, n_rows=db,
                          local_row=p.v_base, local_stride=lp, **kw("load"))
            cmds.dma_load(mem=LocalMem.ACC, dram_addr=self.bufs["p"].addr + self.h * db * 3 * arb,
                          dram_stride=arb, row_bytes=arb, n_rows=3 * db,
                          local_row=p.param_base, local_stride=1, **kw("load"))
        for e in range(db):     # the key blocks summed in one MATMUL (P tiles Mt rows apart)
            cmds.matmul(a_row=p.p_base, w_row=p.v_base + e * lp, acc_row=p.o_acc + e * mt, m=mt,
                        k_blocks=p.kb, **kw("matrix"))
        for e in range(db):
            cmds.requant(acc_row=p.o_acc + e * mt, spad_row=p.o_spad + e * mt, n_rows=mt,
                         param_row=p.param_base + 3 * e, scale_row=p.sc_base, **kw("vector"))
        cmds.dma_store(mem=LocalMem.SPAD,
                       dram_addr=self.bufs["o"].addr + (self.h * db * p.seq + self.i0) * srb,
                       dram_stride=p.seq * srb, row_bytes=mt * srb, n_rows=db,
                       local_row=p.o_spad, local_stride=mt, **kw("store"))


def _run_stage(stream: Stream, sem: Semaphore, stats: AttentionStats, stage: str,
               build: Callable[[CommandList, Callable[[str], dict]], None], macs: int,
               sync_kw: dict, use: LocalUse) -> None:
    """One launch: every command signals ``sem``; command ``i`` waits until ``sem`` reached
    ``target + i`` (every earlier command of the launch retired) if it is the first or runs
    on another engine than command ``i - 1`` (``build`` passes the engine to its ``kw``);
    commands on the engine of the one before follow it in the engine's order without a
    wait, so loads overlap and MATMULs run back to back. The stage's cycles are those of
    :meth:`Stream.synchronize` after it."""
    stream.synchronize(**sync_kw)
    cmds = CommandList()
    last: str | None = None

    def seq_kw(engine: str) -> dict:
        nonlocal last
        kw: dict = {"signal": sem.id}
        if engine != last:
            kw["wait"] = (sem.id, sem.target(len(cmds)))
        last = engine
        return kw

    build(cmds, seq_kw)
    sem.issued += len(cmds)
    with stream.device.region(stage):
        stream.launch(cmds, **sync_kw, local=use)
        cycles = stream.synchronize(**sync_kw)
    st = stats.stages[stage]
    st["cycles"] += cycles
    st["macs"] += macs
    st["launches"] += 1
    stats.n_commands += len(cmds)


def attention_with_stats(device: Device, q: npt.ArrayLike, k: npt.ArrayLike, v: npt.ArrayLike,
                         *, heads: int, score_mult: npt.ArrayLike, score_shift: npt.ArrayLike,
                         out_mult: npt.ArrayLike, out_shift: npt.ArrayLike,
                         kv_len: int | None = None, causal: bool = False,
                         timeout_cycles: int | None = None, stream: Stream | None = None,
                         spad_region: tuple[int, int] | None = None,
                         acc_region: tuple[int, int] | None = None,
                         ) -> tuple[np.ndarray, AttentionStats]:
    """Multi-head attention on ``device``; bit-exact with :func:`sw.golden.attention_head_int`
    per head.

    Parameters
    ----------
    q, k, v : array_like of int8
        Shape ``(L, heads * d)``, head ``h`` = columns ``h*d .. h*d + d - 1``.
    heads : int
        At least 1, dividing the width of ``q``.
    score_mult, score_shift : array_like of int
        Shape ``(heads,)``: SOFTMAX ``mult`` (0..65535) and ``shift`` (0..63) per head.
    out_mult, out_shift : array_like of int
        Shape ``(heads * d,)``: row-scaled REQUANT multiplier (0..2**31-1) / shift (0..63)
        per context channel (fixed point, as :func:`sw.quant.quantize_multipliers` makes
        them).
    kv_len : int, optional
        Valid keys (key-padding mask) in ``0..L``, default ``L``.
    causal : bool
        Query ``i`` sees keys ``<= i``.
    timeout_cycles : int, optional
        Budget of each :meth:`Stream.synchronize` (default: the runtime's default).
    stream : Stream, optional
        Where to run (default: the device's default stream); the kernel waits for the work
        launched on it before, and returns once its own work completed.
    spad_region, acc_region : tuple of (int, int), optional
        ``(first row, rows)`` of the local memories the kernel may use (see
        :func:`plan_attention`).

    Each launch runs inside :meth:`sw.runtime.Device.region` named after its stage
    (``"scores"``, ``"softmax"``, ``"context"``), in order head by head, query tile by tile.

    Returns
    -------
    context : numpy.ndarray
        int8, shape ``(L, heads * d)``.
    stats : AttentionStats

    Raises
    ------
    ValueError
        Bad shapes/dtypes of ``q``, ``k``, ``v``; ``heads`` < 1 or not dividing their width;
        ``score_mult``/``score_shift`` without ``heads`` values or ``out_mult``/``out_shift``
        without ``heads * d``; a value outside its range (``score_mult`` 0..65535,
        ``out_mult`` 0..2**31-1, the shifts 0..63, ``kv_len`` 0..L: the message names the
        argument, the range and the first bad value); or see :func:`plan_attention`.
    TypeError
        A non-integer ``heads``, ``kv_len`` or parameter value (floats are refused unless
        integral, e.g. ``3.0``; bools are refused). This and the ValueErrors come before
        anything is allocated, uploaded or launched.
    OutOfMemoryError, OutOfSemaphoresError, DeviceError, DeviceTimeoutError
        From the runtime.
    """
    q, k, v = (np.asarray(a) for a in (q, k, v))
    heads = _check_operands(q, k, v, heads)
    c = device.config
    stream = device.default_stream if stream is None else stream
    seq, width = q.shape
    d = width // heads
    kv = _check_kv_len(kv_len, seq)
    smult, sshift = _check_score_params(heads, score_mult, score_shift)
    _check_out_params(heads, d, out_mult, out_shift)
    plan = plan_attention(c, seq, d, spad_region=spad_region, acc_region=acc_region)
    packed = _pack(c, plan, q, k, v, heads, out_mult, out_shift)
    sync_kw = {} if timeout_cycles is None else {"timeout_cycles": timeout_cycles}
    use = LocalUse.regions(c, "the attention kernel", spad_region, acc_region)
    stream.check_local(use)         # before anything is uploaded
    stats = AttentionStats(plan=plan)
    bufs: dict[str, Buffer] = {}
    sem = device.alloc_semaphore()
    try:
        for name, arr in zip("qkvp", packed, strict=True):
            bufs[name] = stream.upload(arr)
        bufs["o"] = stream.alloc(heads * plan.db * seq * c.spad_row_bytes)
        for h in range(heads):
            sm = {"kv_len": kv, "mult": int(smult[h]), "shift": int(sshift[h]), "causal": causal}
            for i0 in range(0, seq, plan.m_tile):
                tile = _Tile(c, plan, bufs, h, i0, min(plan.m_tile, seq - i0))
                macs = tile.mt * seq * d
                _run_stage(stream, sem, stats, "scores", tile.scores, macs, sync_kw, use)
                _run_stage(stream, sem, stats, "softmax",
                           lambda cmds, kw, tile=tile, sm=sm: tile.softmax(cmds, kw, **sm), 0,
                           sync_kw, use)
                _run_stage(stream, sem, stats, "context", tile.context, macs, sync_kw, use)
        o_dram = device.download(bufs["o"], np.int8, (heads, plan.db, seq, c.spad_row_bytes))
    finally:
        for b in bufs.values():
            b.free()
        sem.free()
    ctx = o_dram[:, :, :, :c.cols].transpose(2, 0, 1, 3).reshape(seq, heads, plan.db * c.cols)
    return np.ascontiguousarray(ctx[:, :, :d].reshape(seq, heads * d)), stats


def pack_attention_params(config: NPUConfig, heads: int, head_dim: int, out_mult: npt.ArrayLike,
                          out_shift: npt.ArrayLike) -> np.ndarray:
    """The context REQUANT parameters in DRAM layout ``(H, DB, 3, acc_row_elems)`` int32.

    ``out_mult``, ``out_shift``: shape ``(heads * head_dim,)``, as in
    :func:`attention_with_stats`.

    Raises
    ------
    ValueError
        ``heads`` or ``head_dim`` < 1, ``out_mult``/``out_shift`` without ``heads *
        head_dim`` values or outside ``0..2**31-1`` / ``0..63``.
    TypeError
        A non-integer ``heads``, ``head_dim`` or parameter value (as
        :func:`attention_with_stats`).
    """
    heads = _check_heads(heads)
    head_dim = int(check_int_values("head_dim", head_dim, 1, INT32_MAX, shape=()))
    plan = AttentionPlan(seq=1, head_dim=head_dim, db=_ceil_div(head_dim, config.cols), kb=1,
                         lp=config.cols, m_tile=1, k_base=0, v_base=0, q_base=0, p_base=0,
                         o_spad=0, sc_base=0, s_base=0, o_acc=0, param_base=0)
    z = np.zeros((1, heads * head_dim), np.int8)
    return _pack(config, plan, z, z, z, heads, out_mult, out_shift)[3]


def attention_launch(stream: Stream, q_buf: Buffer, k_buf: Buffer, v_buf: Buffer,
                     p_buf: Buffer, o_buf: Buffer, *, seq: int, heads: int, head_dim: int,
                     score_mult: npt.ArrayLike, score_shift: npt.ArrayLike, sem: Semaphore,
                     kv_len: int | None = None, causal: bool = False,
                     spad_region: tuple[int, int] | None = None,
                     acc_region: tuple[int, int] | None = None,
                     timeout_cycles: int | None = None) -> int:
    """Multi-head attention on device-resident tensors, launched without waiting (one launch,
    ordered after the stream's earlier work); bit-exact with :func:`attention_with_stats`.

    Q, K, V and the output are in the linear kernel's activation layout
    (:func:`sw.kernels.linear.pack_activations`): ``(heads * DB, L, spad_row_bytes)`` int8,
    i.e. the ``out_buffer`` of a Q/K/V projection (``rows == cols``), and the output is the
    next projection's input. Q, V and the output are then exactly the layouts of the module
    docstring (``L`` a multiple of ``cols``, so ``Lp = L``); K is loaded with one DMA per d
    block (key block ``kb`` of d block ``b`` is ``cols`` contiguous rows at ``(h DB + b) L +
    kb cols``) instead of one per head. ``p_buf`` holds :func:`pack_attention_params`.

    Ordering: one semaphore ``sem`` (owned by the caller); every command signals it and a
    command waits for all earlier commands of the launch where it runs on another engine
    than the command before (as :func:`attention_with_stats` within a stage, here across the
    stages and heads too), so no stage drains the device: the next launch on the stream
    follows through the stream's barrier.

    Returns
    -------
    int
        Commands launched.

    Raises
    ------
    ValueError
        ``L`` not a multiple of ``cols``, ``kv_len`` outside ``0..L``, ``heads`` < 1,
        ``score_mult``/``score_shift`` without ``heads`` values or outside 0..65535 / 0..63,
        a buffer smaller than its layout (``q_buf``, ``k_buf``, ``v_buf``, ``o_buf``: ``heads
        * DB * L * spad_row_bytes`` bytes; ``p_buf``: ``heads * DB * 3 * acc_row_bytes``), a
        buffer or ``sem`` of another device than the stream's, or see
        :func:`plan_attention`; before anything is launched.
    TypeError
        A non-integer ``kv_len``, ``heads`` or ``score_mult``/``score_shift`` value (as
        :func:`attention_with_stats`); a buffer that is not a :class:`Buffer` or a ``sem``
        that is not a :class:`Semaphore`.
    NPUError
        A freed buffer or ``sem``, before anything is launched.
    LocalMemoryConflictError
        If a kernel of another stream that may run at the same time uses overlapping rows
        (:mod:`sw.runtime.local`), before ``sem`` is counted.
    """
    c = stream.device.config
    if seq % c.cols:
        raise ValueError(f"device-resident attention needs L a multiple of cols={c.cols}, "
                         f"got {seq}")
    kv = _check_kv_len(kv_len, seq)
    heads = _check_heads(heads)
    smult, sshift = _check_score_params(heads, score_mult, score_shift)
    plan = plan_attention(c, seq, head_dim, spad_region=spad_region, acc_region=acc_region)
    _check_launch_args(stream, plan, heads, {"q_buf": q_buf, "k_buf": k_buf, "v_buf": v_buf,
                                             "p_buf": p_buf, "o_buf": o_buf}, sem)
    use = LocalUse.regions(c, "the attention kernel", spad_region, acc_region)
    stream.check_local(use)         # before the caller's semaphore is counted
    bufs = {"q": q_buf, "k": k_buf, "v": v_buf, "p": p_buf, "o": o_buf}
    cmds = CommandList()
    last: str | None = None

    def seq_kw(engine: str) -> dict:
        nonlocal last
        kw: dict = {"signal": sem.id}
        if engine != last:
            kw["wait"] = (sem.id, sem.target(len(cmds)))
        last = engine
        return kw

    srb, n, db = c.spad_row_bytes, c.cols, plan.db
    for h in range(heads):
        sm = {"kv_len": kv, "mult": int(smult[h]), "shift": int(sshift[h]), "causal": causal}
        for i0 in range(0, seq, plan.m_tile):
            tile = _Tile(c, plan, bufs, h, i0, min(plan.m_tile, seq - i0))
            if tile.first:       # K of the head, d block by d block, from the linear layout
                for b in range(db):
                    cmds.dma_load(mem=LocalMem.SPAD,
                                  dram_addr=k_buf.addr + (h * db + b) * seq * srb,
                                  dram_stride=n * srb, row_bytes=n * srb, n_rows=plan.kb,
                                  local_row=plan.k_base + b * n, local_stride=db * n,
                                  **seq_kw("load"))
            cmds.dma_load(mem=LocalMem.SPAD,
                          dram_addr=q_buf.addr + (h * db * seq + tile.i0) * srb,
                          dram_stride=seq * srb, row_bytes=tile.mt * srb, n_rows=db,
                          local_row=plan.q_base, local_stride=tile.mt, **seq_kw("load"))
            for b in range(plan.kb):
                cmds.matmul(a_row=plan.q_base, w_row=plan.k_base + b * db * n,
                            acc_row=plan.s_base + b * tile.mt, m=tile.mt, transpose=True,
                            k_blocks=db, **seq_kw("matrix"))
            tile.softmax(cmds, seq_kw, **sm)
            tile.context(cmds, seq_kw)
    sem.issued += len(cmds)
    kw = {} if timeout_cycles is None else {"timeout_cycles": timeout_cycles}
    stream.launch(cmds, **kw, local=use)
    return len(cmds)
