"""The linear kernel's operand formats and DRAM layouts (:mod:`sw.kernels.linear` describes
the layouts): :class:`Formats`, and the packing of activations, weights and the per-channel
parameters that :func:`sw.kernels.linear.linear_launch` uploads. Everything here is importable
from :mod:`sw.kernels.linear` too."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hw.config import NPUConfig
from hw.isa import MX_BLOCK, ActFormat, WeightFormat
from sw.kernels.linear_layout import a_dram_offset, a_dram_rows, ceil_div
from sw.kernels.linear_plan import LinearPlan
from sw.quant_formats import pack_int4

__all__ = ["Formats", "INT8_FORMATS", "pack_activations", "pack_weights", "weight_dram_bytes",
           "pack_operands"]



@dataclass(frozen=True)
class Formats:
    """The number formats of a linear layer's operands (:mod:`hw.isa.formats`).

    Attributes
    ----------
    weights : WeightFormat
        ``INT8``; ``INT4`` (``W`` holds int4 values -8..7 in an int8 array, packed by the
        kernel, :func:`sw.quant_formats.pack_int4`); ``MXINT8`` (``W`` holds MXINT8 elements,
        ``w_exp`` their E8M0 block scales).
    activations : ActFormat
        ``INT8`` or ``MXINT8`` (``A`` holds MXINT8 elements, ``a_exp`` their scales).
    w_exp : numpy.ndarray or None
        uint8 ``(ceil(K / 32), N)``: the scale of weight block ``b`` of column ``n``.
    a_exp : numpy.ndarray or None
        uint8 ``(M, ceil(K / 32))``.
    x_base : int
        The MX alignment base (0..1023; :func:`sw.quant_formats.mx_alignment_base`), which the
        requantization multipliers must account for: the accumulator is worth ``2**(x_base -
        266)`` times the product of the element scales.
    """
    weights: WeightFormat = WeightFormat.INT8
    activations: ActFormat = ActFormat.INT8
    w_exp: np.ndarray | None = None
    a_exp: np.ndarray | None = None
    x_base: int = 0

    @property
    def mx(self) -> bool:
        return (self.weights == WeightFormat.MXINT8
                or self.activations == ActFormat.MXINT8)


INT8_FORMATS = Formats()


def pack_operands(config: NPUConfig, plan: LinearPlan, a: np.ndarray, w: np.ndarray,
                  bias: np.ndarray, multiplier: np.ndarray, shift: np.ndarray,
                  fmt: Formats | None = None, gelu: tuple[np.ndarray, np.ndarray] | None = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(A, W, parameters)`` in the kernel's DRAM layouts for ``plan`` (module docstring of
    :mod:`sw.kernels.linear`): activations ``(KB, rows of A per K block, spad_row_bytes)``
    int8, weights ``(NB, KB * weight tile rows, spad_row_bytes)`` int8 (int4 packed, MXINT8
    with its exponent rows), parameters ``(NB, p_rows, acc_row_elems)`` little-endian int32
    (bias, multiplier, shift; with ``gelu`` the GELU rows). Operands must already be checked."""
    c = config
    fmt = INT8_FORMATS if fmt is None else fmt
    m, k, n = plan.m, plan.k, plan.n
    srb, rows, cols = c.spad_row_bytes, c.rows, c.cols
    k_pad, n_pad = plan.kb * rows, plan.nb * cols
    a_pad = np.zeros((m, k_pad), dtype=np.int8)
    a_pad[:, :k] = a
    if plan.a_fmt == ActFormat.MXINT8:
        a_dram = _pack_mx_activations(c, plan, a_pad, fmt.a_exp)
    else:
        a_dram = np.zeros((plan.kb, m, srb), dtype=np.int8)
        a_dram[:, :, :rows] = a_pad.reshape(m, plan.kb, rows).transpose(1, 0, 2)
    w_pad = np.zeros((k_pad, n_pad), dtype=np.int8)
    w_pad[:k, :n] = w
    # (NB, KB, rows, cols): tile j of N block nb
    tiles = w_pad.reshape(plan.kb, rows, plan.nb, cols).transpose(2, 0, 1, 3)
    wt = plan.w_tile(c)
    w_dram = np.zeros((plan.nb, plan.kb, wt, srb), dtype=np.int8)
    if plan.w_fmt == WeightFormat.INT4:
        packed = pack_int4(tiles.transpose(2, 0, 1, 3).reshape(rows, -1))
        w_dram[:, :, :, :cols] = packed.view(np.int8).reshape(wt, plan.nb, plan.kb,
                                                              cols).transpose(1, 2, 0, 3)
    else:
        w_dram[:, :, :rows, :cols] = tiles
    if plan.w_fmt == WeightFormat.MXINT8:
        x = np.full((-(-k_pad // MX_BLOCK), n_pad), 127, np.uint8)
        x[:fmt.w_exp.shape[0], :n] = fmt.w_exp
        per_tile = x[np.arange(plan.kb) * rows // MX_BLOCK]          # (KB, n_pad)
        w_dram[:, :, rows, :cols] = per_tile.reshape(plan.kb, plan.nb, cols).transpose(
            1, 0, 2).view(np.int8)
    w_dram = w_dram.reshape(plan.nb, plan.kb * wt, srb)
    pr = plan.p_rows
    p = np.zeros((pr, n_pad), dtype=np.int64)
    p[0, :n], p[1, :n], p[2, :n] = bias, multiplier, shift
    if gelu is not None:                 # GELU: shifts s1 | s2 << 8, then m2
        p[2, :n] = shift | (np.asarray(gelu[1], np.int64) << 8)
        p[3, :n] = gelu[0]
    p_dram = np.zeros((plan.nb, pr, c.acc_row_elems), dtype="<i4")
    p_dram[:, :, :cols] = p.reshape(pr, plan.nb, cols).transpose(1, 0, 2)
    return a_dram, w_dram, p_dram


def _pack_mx_activations(c: NPUConfig, plan: LinearPlan, a_pad: np.ndarray,
                         a_exp: np.ndarray) -> np.ndarray:
    """MXINT8 activations in DRAM: ``(KB, a_dram_rows, spad_row_bytes)``; in each K block each
    M tile's rows in groups of ``spad_row_bytes``, every group after its exponent row
    (:mod:`hw.isa.formats`)."""
    m, rows, g = plan.m, c.rows, c.spad_row_bytes
    out = np.zeros((plan.kb, a_dram_rows(c, plan), g), dtype=np.int8)
    blocks = np.arange(plan.kb) * rows // MX_BLOCK
    exps = a_exp.astype(np.uint8).view(np.int8)[:, blocks]            # (M, KB)
    for i0 in range(0, m, plan.m_tile):
        mt = min(plan.m_tile, m - i0)
        row = a_dram_offset(c, plan, i0)
        for q in range(0, mt, g):
            n = min(g, mt - q)
            out[:, row, :n] = exps[i0 + q:i0 + q + n].T
            out[:, row + 1:row + 1 + n, :rows] = a_pad[i0 + q:i0 + q + n].reshape(
                n, plan.kb, rows).transpose(1, 0, 2)
            row += n + 1
    return out


def weight_dram_bytes(config: NPUConfig, plan: LinearPlan) -> int:
    """Bytes of the layer's weights in DRAM in the kernel's layout (padded rows; int4 packed,
    MXINT8 with its exponent rows): ``NB * KB * weight_tile_rows * spad_row_bytes``."""
    return plan.nb * plan.kb * plan.w_tile(config) * config.spad_row_bytes


def pack_activations(config: NPUConfig, a: np.ndarray) -> np.ndarray:
    """``A`` (M, K) int8 in the kernel's DRAM layout ``(KB, M, spad_row_bytes)``."""
    m, k = a.shape
    kb = ceil_div(k, config.rows)
    a_pad = np.zeros((m, kb * config.rows), dtype=np.int8)
    a_pad[:, :k] = a
    out = np.zeros((kb, m, config.spad_row_bytes), dtype=np.int8)
    out[:, :, :config.rows] = a_pad.reshape(m, kb, config.rows).transpose(1, 0, 2)
    return out


def pack_weights(config: NPUConfig, plan: LinearPlan, w: npt.ArrayLike) -> np.ndarray:
    """int8 weights ``W`` (K, N) in the kernel's DRAM layout for ``plan`` (int8 formats):
    ``(NB, KB * rows, spad_row_bytes)``, what :func:`linear_launch` takes as ``w_buf``."""
    w = np.asarray(w, np.int8)
    if w.shape != (plan.k, plan.n):
        raise ValueError(f"W must have shape ({plan.k}, {plan.n}), got {w.shape}")
    z = np.zeros(plan.n, np.int64)
    return pack_operands(config, plan, np.zeros((1, plan.k), np.int8), w, z, z, z)[1]
