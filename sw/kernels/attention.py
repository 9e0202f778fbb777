"""Quantized multi-head attention as NPU command streams: ``Q K^T`` and ``P V`` on the systolic
array, the integer softmax on the vector unit, deferred normalization in the requantization.

Per head ``h`` (``d`` = head size) and query tile ``i0 .. i0 + Mt - 1``, bit-exact with
:func:`sw.golden.attention_head_int`:

1. **scores**: ``S = Q K^T`` -- MATMUL with ``flags.transpose``: K rows stored one key per
   scratchpad row become the ``K^T`` weight tile, so K needs no transpose anywhere. One
   MATMUL per (key block, d block), accumulated over the d blocks into ``acc[s_base + kb * Mt +
   i]``.
2. **softmax**: one SOFTMAX command over the tile's ``KB`` key blocks (key-padding and causal
   masks, ``1/sqrt(d)`` and the dequant scales folded into its ``mult``/``shift``); P (0..127)
   lands in the blocked activation layout ``spad[p_base + kb * Mt + i]``; the row reciprocals
   in ``acc[sc_base ..]``.
3. **context**: ``O = P V`` -- one MATMUL per (value column block, key block), accumulated over
   key blocks; REQUANT with ``flags.row_scale`` applies ``1 / rowsum`` and the per-channel
   ``s_v / s_out`` in one pass; one DMA stores the tile.

Needs a square array (``rows == cols``; the transposed weight load); raises ``ValueError``
otherwise. Any ``L >= 1`` (zero-padded to whole key blocks; padded keys are masked by
``kv_len``), any head size.

DRAM layouts (int8, rows of ``spad_row_bytes``; ``c = cols``, ``DB = ceil(d / c)``,
``KB = ceil(L / c)``, ``Lp = KB * c``): Q ``(H, DB, L, srb)``, K ``(H, DB, Lp, srb)``,
V ``(H, DB, Lp, srb)`` (``[h, b, j, :c] = X_h[j, b*c:(b+1)*c]``), parameters ``(H, DB, 3,
acc_row_elems)`` int32 (bias 0, multiplier, shift per channel), output ``(H, DB, L, srb)``.

Each stage of each (head, tile) is one launch, so the device's cycle counter measures it
(``AttentionStats.stages``); commands are serialized with a sequence semaphore, as in
:mod:`sw.kernels.linear`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from hw.config import NPUConfig
from hw.isa import LocalMem
from sw.runtime import Buffer, CommandList, Device

__all__ = ["AttentionPlan", "AttentionStats", "plan_attention", "attention_with_stats",
           "STAGES"]

_SEM = 0
STAGES = ("scores", "softmax", "context")


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class AttentionPlan:
    """Tiling of one attention call (rows of the scratchpad / accumulator)."""
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


def plan_attention(config: NPUConfig, seq: int, head_dim: int) -> AttentionPlan:
    """Choose the query tile ``Mt`` (as large as the memories allow, at most ``L``).

    Raises
    ------
    ValueError
        For a non-square array, ``seq``/``head_dim`` < 1, or memories too small for one row.
    """
    c = config
    if c.rows != c.cols:
        raise ValueError(f"attention needs a square array (transposed K load), got "
                         f"{c.rows}x{c.cols}")
    if seq < 1 or head_dim < 1:
        raise ValueError(f"seq and head_dim must be >= 1, got {seq}, {head_dim}")
    n = c.cols
    db, kb = _ceil_div(head_dim, n), _ceil_div(seq, n)
    lp = kb * n
    kv_rows = 2 * db * lp
    best = 0
    for mt in range(1, min(seq, 4096) + 1):
        spad = kv_rows + db * mt + kb * mt + db * mt
        acc = 3 * db + _ceil_div(mt, n) + kb * mt + db * mt
        if spad <= c.spad_rows and acc <= c.acc_rows and mt * c.spad_row_bytes < 1 << 16:
            best = mt
    if best == 0:
        raise ValueError(f"L={seq}, d={head_dim} does not fit the local memories of "
                         f"{c.name}")
    mt = best
    k_base, v_base = 0, db * lp
    q_base = 2 * db * lp
    p_base = q_base + db * mt
    o_spad = p_base + kb * mt
    param_base = 0
    sc_base = 3 * db
    s_base = sc_base + _ceil_div(mt, n)
    o_acc = s_base + kb * mt
    return AttentionPlan(seq=seq, head_dim=head_dim, db=db, kb=kb, lp=lp, m_tile=mt,
                         k_base=k_base, v_base=v_base, q_base=q_base, p_base=p_base,
                         o_spad=o_spad, sc_base=sc_base, s_base=s_base, o_acc=o_acc,
                         param_base=param_base)


def _blocked(x: np.ndarray, rows: int, n: int, srb: int, db: int) -> np.ndarray:
    """``(H, L, d)`` int8 -> ``(H, db, rows, srb)``, zero padded."""
    h, seq, d = x.shape
    out = np.zeros((h, db, rows, srb), np.int8)
    pad = np.zeros((h, seq, db * n), np.int8)
    pad[:, :, :d] = x
    out[:, :, :seq, :n] = pad.reshape(h, seq, db, n).transpose(0, 2, 1, 3)
    return out


def attention_with_stats(device: Device, q: npt.ArrayLike, k: npt.ArrayLike, v: npt.ArrayLike,
                         *, heads: int, score_mult: npt.ArrayLike, score_shift: npt.ArrayLike,
                         out_mult: npt.ArrayLike, out_shift: npt.ArrayLike,
                         kv_len: int | None = None, causal: bool = False,
                         timeout_cycles: int | None = None
                         ) -> tuple[np.ndarray, AttentionStats]:
    """Multi-head attention on ``device``; bit-exact with :func:`sw.golden.attention_head_int`
    per head.

    Parameters
    ----------
    q, k, v : array_like of int8
        Shape ``(L, heads * d)``, head ``h`` = columns ``h*d .. h*d + d - 1``.
    heads : int
    score_mult, score_shift : array_like of int
        Shape ``(heads,)``: SOFTMAX ``mult`` (0..65535) and ``shift`` (0..63) per head.
    out_mult, out_shift : array_like of int
        Shape ``(heads * d,)``: row-scaled REQUANT multiplier/shift per context channel.
    kv_len : int, optional
        Valid keys (key-padding mask), default ``L``.
    causal : bool
        Query ``i`` sees keys ``<= i``.

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
        Bad shapes/dtypes, or see :func:`plan_attention`.
    """
    q, k, v = (np.asarray(a) for a in (q, k, v))
    if any(a.dtype != np.int8 for a in (q, k, v)):
        raise ValueError("q, k, v must be int8")
    if q.shape != k.shape or q.shape != v.shape or q.ndim != 2 or q.shape[1] % heads:
        raise ValueError(f"q, k, v must share a shape (L, heads*d), got {q.shape}, {k.shape}, "
                         f"{v.shape} for {heads} heads")
    c = device.config
    seq, width = q.shape
    d = width // heads
    kv = seq if kv_len is None else int(kv_len)
    if not 0 <= kv <= seq:
        raise ValueError(f"kv_len must be in 0..{seq}, got {kv}")
    plan = plan_attention(c, seq, d)
    n, srb, arb = c.cols, c.spad_row_bytes, c.acc_row_bytes
    db, kb, lp, mt_max = plan.db, plan.kb, plan.lp, plan.m_tile
    split = lambda a: a.reshape(seq, heads, d).transpose(1, 0, 2)  # noqa: E731
    q_dram = _blocked(split(q), seq, n, srb, db)
    k_dram = _blocked(split(k), lp, n, srb, db)
    v_dram = _blocked(split(v), lp, n, srb, db)
    om = np.zeros((heads, db * n), np.int64)
    osh = np.zeros((heads, db * n), np.int64)
    om[:, :d] = np.asarray(out_mult, np.int64).reshape(heads, d)
    osh[:, :d] = np.asarray(out_shift, np.int64).reshape(heads, d)
    p_dram = np.zeros((heads, db, 3, c.acc_row_elems), "<i4")
    p_dram[:, :, 1, :n] = om.reshape(heads, db, n)
    p_dram[:, :, 2, :n] = osh.reshape(heads, db, n)
    smult = np.asarray(score_mult, np.int64).reshape(heads)
    sshift = np.asarray(score_shift, np.int64).reshape(heads)
    sync_kw = {} if timeout_cycles is None else {"timeout_cycles": timeout_cycles}
    stats = AttentionStats(plan=plan)

    def run(stage: str, build, macs: int) -> None:
        device.synchronize(**sync_kw)
        base = device.semaphore(_SEM)
        if base > (1 << 31):
            device.reset()
            base = device.semaphore(_SEM)
        cmds = CommandList()

        def seq_kw() -> dict:
            return {"wait": (_SEM, base + len(cmds)), "signal": _SEM}

        build(cmds, seq_kw)
        with device.region(stage):
            device.launch(cmds, **sync_kw)
            cycles = device.synchronize(**sync_kw)
        st = stats.stages[stage]
        st["cycles"] += cycles
        st["macs"] += macs
        st["launches"] += 1
        stats.n_commands += len(cmds)

    bufs: list[Buffer] = []
    try:
        for arr in (q_dram, k_dram, v_dram, p_dram):
            bufs.append(device.upload(arr))
        q_buf, k_buf, v_buf, p_buf = bufs
        o_buf = device.alloc(heads * db * seq * srb)
        bufs.append(o_buf)
        for h in range(heads):
            for i0 in range(0, seq, mt_max):
                mt = min(mt_max, seq - i0)
                first = i0 == 0

                def scores(cmds: CommandList, kw, h=h, i0=i0, mt=mt, first=first) -> None:
                    if first:
                        cmds.dma_load(mem=LocalMem.SPAD, dram_addr=k_buf.addr + h * db * lp * srb,
                                      dram_stride=lp * srb, row_bytes=lp * srb, n_rows=db,
                                      local_row=plan.k_base, local_stride=lp, **kw())
                    cmds.dma_load(mem=LocalMem.SPAD,
                                  dram_addr=q_buf.addr + (h * db * seq + i0) * srb,
                                  dram_stride=seq * srb, row_bytes=mt * srb, n_rows=db,
                                  local_row=plan.q_base, local_stride=mt, **kw())
                    for b in range(kb):
                        for e in range(db):
                            cmds.matmul(a_row=plan.q_base + e * mt,
                                        w_row=plan.k_base + e * lp + b * n,
                                        acc_row=plan.s_base + b * mt, m=mt, accumulate=e > 0,
                                        transpose=True, **kw())

                def softmax(cmds: CommandList, kw, h=h, i0=i0, mt=mt) -> None:
                    cmds.softmax(acc_row=plan.s_base, spad_row=plan.p_base, n_rows=mt,
                                 n_blocks=kb, stride=mt, scale_row=plan.sc_base, kv_len=kv,
                                 mult=int(smult[h]), shift=int(sshift[h]), causal=causal,
                                 q_offset=i0, **kw())

                def context(cmds: CommandList, kw, h=h, i0=i0, mt=mt, first=first) -> None:
                    if first:
                        cmds.dma_load(mem=LocalMem.SPAD, dram_addr=v_buf.addr + h * db * lp * srb,
                                      dram_stride=lp * srb, row_bytes=lp * srb, n_rows=db,
                                      local_row=plan.v_base, local_stride=lp, **kw())
                        cmds.dma_load(mem=LocalMem.ACC, dram_addr=p_buf.addr + h * db * 3 * arb,
                                      dram_stride=arb, row_bytes=arb, n_rows=3 * db,
                                      local_row=plan.param_base, local_stride=1, **kw())
                    for e in range(db):
                        for b in range(kb):
                            cmds.matmul(a_row=plan.p_base + b * mt,
                                        w_row=plan.v_base + e * lp + b * n,
                                        acc_row=plan.o_acc + e * mt, m=mt, accumulate=b > 0,
                                        **kw())
                    for e in range(db):
                        cmds.requant(acc_row=plan.o_acc + e * mt, spad_row=plan.o_spad + e * mt,
                                     n_rows=mt, param_row=plan.param_base + 3 * e,
                                     scale_row=plan.sc_base, **kw())
                    cmds.dma_store(mem=LocalMem.SPAD,
                                   dram_addr=o_buf.addr + (h * db * seq + i0) * srb,
                                   dram_stride=seq * srb, row_bytes=mt * srb, n_rows=db,
                                   local_row=plan.o_spad, local_stride=mt, **kw())

                run("scores", scores, mt * seq * d)
                run("softmax", softmax, 0)
                run("context", context, mt * seq * d)
        o_dram = device.download(o_buf, np.int8, (heads, db, seq, srb))
    finally:
        for b in bufs:
            b.free()
    ctx = o_dram[:, :, :, :n].transpose(2, 0, 1, 3).reshape(seq, heads, db * n)[:, :, :d]
    return np.ascontiguousarray(ctx.reshape(seq, heads * d)), stats
