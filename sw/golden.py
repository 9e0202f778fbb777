"""Golden integer reference: what the hardware computes, bit for bit, in plain numpy.

Used by the functional model (:mod:`sw.model`) and by tests that compare the model and the RTL
against it. Every function states the exact integer semantics (widths, wrap, rounding).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from hw.isa import (
    E8M0_BIAS,
    E8M0_NAN,
    ELTWISE_OUT_FRAC_BITS,
    ELTWISE_X_BITS,
    GELU_FRAC_BITS,
    GELU_TABLE_ENTRIES,
    GELU_TABLE_STEP_BITS,
    GELU_X_BITS,
    LN_MAX_ELEMS,
    LN_MEAN_FRAC_BITS,
    LN_RECIP_SHIFT,
    LN_VAR_BITS,
    MX_BLOCK,
    ROW_SCALE_SHIFT,
    SOFTMAX_EXP_FRAC_BITS,
    SOFTMAX_EXP_GUARD_BITS,
    SOFTMAX_EXP_MAX_SHIFT,
    SOFTMAX_RECIP_BITS,
    ActFormat,
    WeightFormat,
    gelu_table,
    ln_norm_shift,
    softmax_exp_table,
)
from sw.quant import check_accumulation, requantize

__all__ = ["matmul_int", "linear_int", "exp2_int", "softmax_int", "row_reciprocal",
           "requantize_rows", "attention_head_int", "mx_align", "matmul_formats",
           "mx_in_exact_range", "linear_formats", "round_shift", "eltwise_input", "add_int",
           "layernorm_row_constants", "layernorm_int", "gelu_fixed", "gelu_int"]


def matmul_int(a: npt.ArrayLike, w: npt.ArrayLike) -> np.ndarray:
    """int8 x int8 matrix product with int32 accumulation, exact.

    The systolic array accumulates in 32-bit two's complement and wraps on overflow (modulo
    2**32; since wrapping addition is associative, the result does not depend on the order of
    the K reduction or on how it is split into K passes, ``flags.accumulate``). For
    ``K <= MAX_EXACT_K`` (131071, :func:`sw.quant.max_exact_k`) no input can make the sum
    leave the int32 range, so the result is the exact product; a longer K is rejected rather
    than wrapped (:func:`sw.quant.check_accumulation`), as the linear kernel does.

    Parameters
    ----------
    a : array_like of int8
        Activations, shape ``(M, K)``.
    w : array_like of int8
        Weights, shape ``(K, N)``.

    Returns
    -------
    numpy.ndarray
        int32, shape ``(M, N)``: ``a @ w``.

    Raises
    ------
    ValueError
        If the shapes do not match or the dtypes are not int8.
    AccumulatorOverflowError
        If ``K > MAX_EXACT_K``: the int32 accumulator could wrap.
    """
    a = np.asarray(a)
    w = np.asarray(w)
    if a.dtype != np.int8 or w.dtype != np.int8:
        raise ValueError(f"operands must be int8, got {a.dtype} and {w.dtype}")
    if a.ndim != 2 or w.ndim != 2 or a.shape[1] != w.shape[0]:
        raise ValueError(f"shapes do not match for a matmul: {a.shape} @ {w.shape}")
    check_accumulation(a.shape[1])
    # Exact in int64, and in int32 range for K <= MAX_EXACT_K.
    return (a.astype(np.int64) @ w.astype(np.int64)).astype(np.int32)


def linear_int(a: npt.ArrayLike, w: npt.ArrayLike, bias: npt.ArrayLike,
               multiplier: npt.ArrayLike, shift: npt.ArrayLike,
               relu: bool = False) -> np.ndarray:
    """Quantized linear layer: :func:`matmul_int` then the vector unit's requantization.

    ``out = requantize(a @ w (int32, exact), bias, multiplier, shift, relu)`` with the exact
    rounding of :func:`sw.quant.requantize` (bias added in 33 bits without wrap; round to
    nearest, ties toward +infinity; saturation to int8; optional ReLU).

    Parameters
    ----------
    a : array_like of int8
        Shape ``(M, K)``.
    w : array_like of int8
        Shape ``(K, N)``.
    bias : array_like of int32
        Shape ``(N,)``, in accumulator units (``scale_a * scale_w``).
    multiplier : array_like of int
        Shape ``(N,)``, each in ``0..2**31-1``.
    shift : array_like of int
        Shape ``(N,)``, each in ``0..63``.
    relu : bool
        Clamp negative outputs to zero.

    Returns
    -------
    numpy.ndarray
        int8, shape ``(M, N)``.

    Raises
    ------
    ValueError
        For mismatched shapes or dtypes.
    AccumulatorOverflowError
        If ``K > MAX_EXACT_K`` (:func:`matmul_int`).
    """
    acc = matmul_int(a, w)
    n = acc.shape[1]
    for name, v in (("bias", bias), ("multiplier", multiplier), ("shift", shift)):
        if np.shape(v) != (n,):
            raise ValueError(f"{name} must have shape ({n},), got {np.shape(v)}")
    return requantize(acc, bias, multiplier, shift, relu=relu)


def exp2_int(n: npt.ArrayLike, frac_bits: int = SOFTMAX_EXP_FRAC_BITS,
             guard_bits: int = SOFTMAX_EXP_GUARD_BITS,
             max_shift: int = SOFTMAX_EXP_MAX_SHIFT) -> np.ndarray:
    """The SOFTMAX exponent: ``round(127 * 2**(-n / 2**frac_bits))`` from a table and a shift.

    ``n = q * 2**F + f``; ``p = (T[f] + 2**(q + G - 1)) >> (q + G)`` for ``q < max_shift``,
    else 0 (an exponent beyond the table's range gives 0, never a clamped last entry). ``T`` is
    :func:`hw.isa.softmax_exp_table`. Base-2 exponent with a fractional-bit table and a shift
    for the integer part: the "base-2 exp" of Softermax (Stevens et al., DAC 2021) and of
    I-BERT's range reduction (Kim et al., ICML 2021, eq. 9), with a table in place of I-BERT's
    second-order polynomial.

    Parameters
    ----------
    n : array_like of int
        Non-negative exponents in units of ``2**-frac_bits``.

    Returns
    -------
    numpy.ndarray
        int64, same shape, values 0..127.
    """
    n = np.asarray(n, dtype=np.int64)
    if n.size and n.min() < 0:
        raise ValueError("exponent indices must be >= 0")
    table = np.asarray(softmax_exp_table(frac_bits, guard_bits), dtype=np.int64)
    q = n >> frac_bits
    f = n & ((1 << frac_bits) - 1)
    qs = np.minimum(q, max_shift - 1) + guard_bits
    p = (table[f] + (np.int64(1) << (qs - 1))) >> qs
    return np.where(q < max_shift, p, 0)


def row_reciprocal(sums: npt.ArrayLike) -> np.ndarray:
    """SOFTMAX's per-row reciprocal ``floor((2**32 + s // 2) / s)``, 0 for ``s == 0``
    (round half up of ``2**32 / s``); int64."""
    s = np.asarray(sums, dtype=np.int64)
    safe = np.maximum(s, 1)
    r = ((np.int64(1) << SOFTMAX_RECIP_BITS) + safe // 2) // safe
    return np.where(s > 0, r, 0)


def softmax_int(scores: npt.ArrayLike, *, mult: int, shift: int, kv_len: int | None = None,
                causal: bool = False, q_offset: int = 0,
                exp=exp2_int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What one SOFTMAX command computes (see :class:`hw.isa.SoftmaxBody`), bit for bit.

    Parameters
    ----------
    scores : array_like of int32
        Shape ``(R, K)``: row ``i`` = scores of query ``i`` against keys ``0..K-1``.
    mult, shift : int
        Score units -> base-2 exponent units in ``2**-F``: ``mult`` in 0..65535, ``shift`` 0..63.
    kv_len : int, optional
        Keys ``>= kv_len`` are masked (default ``K``).
    causal : bool
        Mask key ``k`` of row ``i`` if ``k > q_offset + i``.
    q_offset : int
        Position of query row 0 (for the causal mask).
    exp : callable
        The exponent (default :func:`exp2_int`, the hardware's); others for design sweeps.

    Returns
    -------
    p : numpy.ndarray
        int8, shape ``(R, K)``, unnormalized probabilities 0..127 (row max -> 127).
    sums : numpy.ndarray
        int64, shape ``(R,)``, exact row sums of ``p``.
    recip : numpy.ndarray
        int64, shape ``(R,)``, :func:`row_reciprocal` of ``sums``.
    """
    s = np.asarray(scores, dtype=np.int64)
    r, k = s.shape
    kv = k if kv_len is None else kv_len
    key = np.arange(k)[None, :]
    valid = np.broadcast_to(key < kv, (r, k))
    if causal:
        valid = valid & (key <= q_offset + np.arange(r)[:, None])
    m = np.where(valid, s, np.iinfo(np.int64).min).max(axis=1, initial=np.iinfo(np.int64).min)
    d = np.where(valid, m[:, None] - s, 0)
    rnd = (1 << shift) >> 1
    n = (d * int(mult) + rnd) >> shift
    p = np.where(valid, exp(n), 0)
    sums = p.sum(axis=1)
    return p.astype(np.int8), sums, row_reciprocal(sums)


def requantize_rows(acc: npt.ArrayLike, recip: npt.ArrayLike, bias: npt.ArrayLike,
                    multiplier: npt.ArrayLike, shift: npt.ArrayLike,
                    relu: bool = False) -> np.ndarray:
    """REQUANT with ``flags.row_scale`` (see :class:`hw.isa.RequantBody`).

    ``x = acc + bias``; ``x = clamp((x * recip[i] + 2**15) >> 16, -2**32, 2**32 - 1)``; then the
    per-channel ``(x * multiplier + rnd) >> shift``, clamp to int8, optional ReLU (as
    :func:`sw.quant.requantize`).

    Parameters
    ----------
    acc : array_like of int32
        Shape ``(R, N)``.
    recip : array_like of int
        Shape ``(R,)``, each in 0..2**31-1.
    bias, multiplier, shift : array_like of int
        Shape ``(N,)`` (ranges as :func:`sw.quant.requantize`).

    Returns
    -------
    numpy.ndarray
        int8, shape ``(R, N)``.
    """
    a = np.asarray(acc, dtype=np.int64)
    r = np.asarray(recip, dtype=np.int64)
    b = np.asarray(bias, dtype=np.int64)
    m = np.asarray(multiplier, dtype=np.int64)
    sh = np.asarray(shift, dtype=np.int64)
    if a.size and r.size and _rows_fit_int64(a, r, b, m, sh):
        # the same arithmetic in int64: every intermediate provably in range (>> floors)
        x = (a + b) * r[:, None] + (1 << (ROW_SCALE_SHIFT - 1)) >> ROW_SCALE_SHIFT
        x = np.minimum(np.maximum(x, -(1 << 32)), (1 << 32) - 1)
        rnd = np.where(sh > 0, np.left_shift(np.int64(1), np.maximum(sh - 1, 0)), 0)
        y = np.minimum(np.maximum((x * m + rnd) >> sh, -128), 127)
        if relu:
            y = np.maximum(y, 0)
        return y.astype(np.int8)
    return _requantize_rows_object(a, r, b, m, sh, relu)


def _int_range(v: np.ndarray) -> tuple[int, int]:
    return int(v.min()), int(v.max())


def _product_range(x: tuple[int, int], y: tuple[int, int]) -> tuple[int, int]:
    p = [i * j for i in x for j in y]
    return min(p), max(p)


def _rows_fit_int64(a, r, b, m, sh) -> bool:
    """Whether :func:`requantize_rows`' arithmetic stays inside int64 for these (non-empty)
    operands, from their exact extremes (Python integers): ``acc + bias``, its product with
    ``recip`` plus the rounding constant, then (after the 33-bit clamp, a monotone map of
    that product) the product with ``multiplier`` plus ``2**(shift - 1)``; and ``0 <= shift
    <= 62``."""
    lo, hi = -(1 << 63), (1 << 63) - 1
    if m.size == 0 or sh.size == 0:
        return False
    s_lo, s_hi = _int_range(sh)
    if s_lo < 0 or s_hi > 62:
        return False
    half = 1 << (ROW_SCALE_SHIFT - 1)
    ab, bb = _int_range(a), _int_range(b)
    x = (ab[0] + bb[0], ab[1] + bb[1])
    xr = _product_range(x, _int_range(r))
    x2 = tuple(min(max((v + half) >> ROW_SCALE_SHIFT, -(1 << 32)), (1 << 32) - 1) for v in xr)
    xm = _product_range(x2, _int_range(m))
    return (lo <= x[0] and x[1] <= hi and lo <= xr[0] and xr[1] + half <= hi
            and lo <= xm[0] and xm[1] + ((1 << s_hi) >> 1) <= hi)


def _requantize_rows_object(a, r, b, m, sh, relu: bool) -> np.ndarray:
    """:func:`requantize_rows` in Python integers (numpy ``dtype=object``): exact for any
    int64 operands."""
    a = a.astype(object)
    r = r.astype(object)[:, None]
    x = a + b.astype(object)
    x = (x * r + (1 << (ROW_SCALE_SHIFT - 1))) >> ROW_SCALE_SHIFT
    lo, hi = -(1 << 32), (1 << 32) - 1
    x = np.vectorize(lambda v: min(max(v, lo), hi), otypes=[object])(x) if x.size else x
    m = m.astype(object)
    rnd = np.array([(1 << int(v)) >> 1 for v in np.broadcast_to(sh, a.shape[1:])], dtype=object)
    y = (x * m + rnd) >> sh.astype(object)
    y = np.clip(np.asarray(y, dtype=object).astype(np.int64), -128, 127) if y.size else \
        np.zeros(a.shape, np.int64)
    if relu:
        y = np.maximum(y, 0)
    return y.astype(np.int8)


def attention_head_int(q: npt.ArrayLike, k: npt.ArrayLike, v: npt.ArrayLike, *,
                       score_mult: int, score_shift: int, out_mult: npt.ArrayLike,
                       out_shift: npt.ArrayLike, kv_len: int | None = None,
                       causal: bool = False, exp=exp2_int) -> np.ndarray:
    """One attention head as the NPU computes it, bit for bit.

    ``S = Q @ K^T`` (int32), ``P~, r = softmax_int(S)`` (deferred normalization),
    ``O = P~ @ V`` (int32), ``out = requantize_rows(O, r, 0, out_mult, out_shift)``.

    Parameters
    ----------
    q, k, v : array_like of int8
        Shapes ``(L, d)``, ``(L, d)``, ``(L, dv)``.
    score_mult, score_shift : int
        SOFTMAX ``mult``/``shift`` (score units -> ``2**-F`` base-2 exponent units).
    out_mult, out_shift : array_like of int
        Per output channel ``(dv,)``: real ``2**-16 * s_v[j] / s_out[j]``.
    kv_len : int, optional
        Valid keys (default ``L``).
    causal : bool
        Causal mask (query ``i`` sees keys ``<= i``).

    Returns
    -------
    numpy.ndarray
        int8, shape ``(L, dv)``.
    """
    s = matmul_int(q, np.ascontiguousarray(np.asarray(k).T))
    p, _, recip = softmax_int(s, mult=score_mult, shift=score_shift, kv_len=kv_len,
                              causal=causal, exp=exp)
    o = matmul_int(p, v)
    dv = o.shape[1]
    return requantize_rows(o, recip, np.zeros(dv, np.int64), out_mult, out_shift)


# -- number formats: int4 weights, MX block scaling ----------------------------------------------

def mx_align(p: npt.ArrayLike, d: npt.ArrayLike) -> np.ndarray:
    """The MX exponent stage of the systolic array (:class:`hw.tile.SystolicArray`): one K
    tile's exact sum ``p`` aligned by the exponent difference ``d``, bit for bit.

    ``d >= 0``: ``p * 2**d`` wrapped to int32 (modulo 2**32, as the accumulator wraps; 0 for
    ``d >= 32``). ``d < 0``: ``p / 2**-d`` rounded to nearest, ties toward +infinity (the
    project's one rounding rule): ``(p + 2**(r - 1)) >> r`` with ``r = -d`` (arithmetic shift).
    Exact (no rounding) for ``d >= 0``, i.e. inside the exact range of :func:`matmul_formats`.

    Parameters
    ----------
    p : array_like of int
        Tile sums, ``|p| < 2**21`` (``rows * 128 * 128`` for ``rows <= 32``).
    d : array_like of int
        Exponent differences, broadcastable to ``p``.

    Returns
    -------
    numpy.ndarray
        int64 holding int32 values, the broadcast shape.
    """
    p = np.asarray(p, dtype=np.int64)
    d = np.asarray(d, dtype=np.int64)
    left = (p << np.clip(d, 0, 32)) & 0xFFFF_FFFF
    left = np.where(left >= 1 << 31, left - (1 << 32), left)
    r = np.clip(-d, 1, 40)
    right = (p + (np.int64(1) << (r - 1))) >> r
    return np.where(d >= 0, left, right)


def _tile_exponents(x: np.ndarray | None, n_tiles: int, tile_k: int, axis: int,
                    other: int) -> np.ndarray:
    """Per-K-tile E8M0 bytes from per-block ones (``axis`` = the block axis), 127 (``2**0``)
    when ``x`` is None (an int8 or int4 operand in an MX product)."""
    if x is None:
        shape = [other, n_tiles] if axis == 1 else [n_tiles, other]
        return np.full(shape, E8M0_BIAS, np.int64)
    x = np.asarray(x, dtype=np.int64)
    if np.any(x == E8M0_NAN):
        raise ValueError("an MX operand has the NaN scale (0xFF): the integer hardware has no "
                         "NaN; refusing it")
    t = np.repeat(x, MX_BLOCK // tile_k, axis=axis)
    return np.take(t, np.arange(n_tiles), axis=axis)


def matmul_formats(a: npt.ArrayLike, w: npt.ArrayLike, *, tile_k: int,
                   xa: npt.ArrayLike | None = None, xw: npt.ArrayLike | None = None,
                   x_base: int = 0) -> np.ndarray:
    """What the matrix engine accumulates for an MX product (OCP MX v1.0 §6.1 ``Dot`` per block,
    §6.2 ``DotGeneral`` over blocks), bit for bit; int4 weights are plain integers here
    (:func:`sw.quant_formats.unpack_int4`) and int8 x int8 without exponents is :func:`matmul_int`.

    K is cut into tiles of ``tile_k`` (the array's ``rows``, a divisor of
    :data:`hw.isa.MX_BLOCK`) zero-padded at the end; tile ``j`` lies in block ``b = j * tile_k
    // 32``. Its exact sum ``P_j = A[:, tile] @ W[tile, :]`` is aligned by
    ``d = xa[i, b] + xw[b, n] - x_base`` (:func:`mx_align`) and the aligned tiles are summed
    modulo 2**32 (int32). The spec leaves the dot product's internal precision and order to
    the implementation (§6.1); here it is exact as long as every tile with a non-zero sum has
    ``d >= 0`` (the *exact range*: then ``acc * 2**(x_base - 2 * (127 + 6))`` is exactly the
    real dot product of the dequantized operands), and a tile below it is rounded (to
    ``2**(x_base - 266)``, half up). The kernels pick ``x_base`` with
    :func:`mx_alignment_base` so that the sum never wraps.

    Parameters
    ----------
    a : array_like of int8
        ``(M, K)`` elements (MXINT8 elements, or int8).
    w : array_like of int8
        ``(K, N)`` elements (MXINT8, int8, or unpacked int4).
    tile_k : int
        Rows of the array (K per tile), dividing 32.
    xa : array_like of uint8, optional
        ``(M, ceil(K / 32))`` E8M0 scales of ``a``'s blocks; None: ``a`` is int8 (127).
    xw : array_like of uint8, optional
        ``(ceil(K / 32), N)`` E8M0 scales of ``w``'s blocks; None: 127.
    x_base : int
        The alignment base, 0..1023 (:class:`hw.isa.MatmulBody`'s ``x_base``).

    Returns
    -------
    numpy.ndarray
        int32, ``(M, N)``.

    Raises
    ------
    ValueError
        For mismatched shapes, ``tile_k`` not dividing 32, or a NaN scale.
    """
    a = np.asarray(a)
    w = np.asarray(w)
    if a.ndim != 2 or w.ndim != 2 or a.shape[1] != w.shape[0]:
        raise ValueError(f"shapes do not match for a matmul: {a.shape} @ {w.shape}")
    if tile_k < 1 or MX_BLOCK % tile_k:
        raise ValueError(f"tile_k={tile_k} must divide the MX block ({MX_BLOCK})")
    m, k = a.shape
    n = w.shape[1]
    nt = -(-k // tile_k)
    ap = np.zeros((m, nt * tile_k), np.int64)
    ap[:, :k] = a
    wp = np.zeros((nt * tile_k, n), np.int64)
    wp[:k] = w
    p = np.einsum("mtk,tkn->tmn", ap.reshape(m, nt, tile_k), wp.reshape(nt, tile_k, n))
    ea = _tile_exponents(xa, nt, tile_k, 1, m)            # (M, T)
    ew = _tile_exponents(xw, nt, tile_k, 0, n)            # (T, N)
    d = ea.T[:, :, None] + ew[:, None, :] - int(x_base)   # (T, M, N)
    total = mx_align(p, d).sum(axis=0) & 0xFFFF_FFFF
    return np.where(total >= 1 << 31, total - (1 << 32), total).astype(np.int32)


def mx_in_exact_range(a: npt.ArrayLike, w: npt.ArrayLike, *, tile_k: int,
                      xa: npt.ArrayLike | None = None, xw: npt.ArrayLike | None = None,
                      x_base: int = 0) -> bool:
    """Whether every K tile with a non-zero sum has ``d >= 0`` in :func:`matmul_formats` (so
    the result is the exact dot product, no tile rounded)."""
    a = np.asarray(a, np.int64)
    w = np.asarray(w, np.int64)
    m, k = a.shape
    n = w.shape[1]
    nt = -(-k // tile_k)
    ap = np.zeros((m, nt * tile_k), np.int64)
    ap[:, :k] = a
    wp = np.zeros((nt * tile_k, n), np.int64)
    wp[:k] = w
    p = np.einsum("mtk,tkn->tmn", ap.reshape(m, nt, tile_k), wp.reshape(nt, tile_k, n))
    d = (_tile_exponents(xa, nt, tile_k, 1, m).T[:, :, None]
         + _tile_exponents(xw, nt, tile_k, 0, n)[:, None, :] - int(x_base))
    return bool(np.all((p == 0) | (d >= 0)))


def linear_formats(a: npt.ArrayLike, w: npt.ArrayLike, bias: npt.ArrayLike,
                   multiplier: npt.ArrayLike, shift: npt.ArrayLike, relu: bool = False, *,
                   tile_k: int, weights: int = 0, activations: int = 0,
                   w_exp: npt.ArrayLike | None = None, a_exp: npt.ArrayLike | None = None,
                   x_base: int = 0) -> np.ndarray:
    """:func:`linear_int` for every operand format (:mod:`hw.isa.formats`): the accumulator of
    :func:`matmul_int` (int8 or int4 weights, int8 activations) or of :func:`matmul_formats`
    (an MX product: MXINT8 weights with ``w_exp`` and/or MXINT8 activations with ``a_exp``,
    the other operand at scale ``2**0``), then the vector unit's requantization. ``tile_k`` is
    the array's ``rows`` (MX alignment is per K tile).

    Returns
    -------
    numpy.ndarray
        int8, ``(M, N)``.
    """
    w_mx, a_mx = weights == WeightFormat.MXINT8, activations == ActFormat.MXINT8
    if w_mx or a_mx:
        acc = matmul_formats(a, w, tile_k=tile_k, xa=a_exp if a_mx else None,
                             xw=w_exp if w_mx else None, x_base=x_base)
    else:
        acc = matmul_int(a, w)
    n = acc.shape[1]
    for name, v in (("bias", bias), ("multiplier", multiplier), ("shift", shift)):
        if np.shape(v) != (n,):
            raise ValueError(f"{name} must have shape ({n},), got {np.shape(v)}")
    return requantize(acc, bias, multiplier, shift, relu=relu)


# -- element-wise ADD and LAYERNORM ----------------------------------------------------------------

def round_shift(p: npt.ArrayLike, shift: npt.ArrayLike) -> np.ndarray:
    """The vector unit's rounding shift ``(p + 2**(shift - 1)) >> shift`` (``p`` for ``shift ==
    0``): round to nearest, ties toward +infinity (:class:`hw.vector.RoundingMultiplier`).

    Parameters
    ----------
    p : array_like of int
        int64 values with ``|p| < 2**62``.
    shift : array_like of int
        0..62, broadcastable to ``p``.

    Returns
    -------
    numpy.ndarray
        int64.
    """
    p = np.asarray(p, dtype=np.int64)
    s = np.asarray(shift, dtype=np.int64)
    rnd = np.where(s > 0, np.left_shift(np.int64(1), np.maximum(s - 1, 0)), 0)
    return (p + rnd) >> s


def _check(name: str, v: np.ndarray, lo: int, hi: int) -> None:
    if v.size and (v.min() < lo or v.max() > hi):
        raise ValueError(f"{name} out of range [{lo}, {hi}]: min {v.min()}, max {v.max()}")


def eltwise_input(a: npt.ArrayLike, b: npt.ArrayLike, ma: npt.ArrayLike, mb: npt.ArrayLike,
                  shift: int) -> np.ndarray:
    """The input stage of ADD and LAYERNORM (:class:`hw.isa.EltwiseBody`): two int8 tensors
    rescaled per channel and summed,
    ``x = clamp(round(a * ma / 2**shift) + round(b * mb / 2**shift), -2**15, 2**15 - 1)``
    (each product rounded by :func:`round_shift`; :data:`hw.isa.ELTWISE_X_BITS` = 16).

    Parameters
    ----------
    a, b : array_like of int8
        Shape ``(R, N)``.
    ma, mb : array_like of int
        Per channel ``(N,)``, each in ``0 .. 2**31 - 1`` (unsigned, the low 31 bits of their
        accumulator words).
    shift : int
        0..63.

    Returns
    -------
    numpy.ndarray
        int64, shape ``(R, N)``, in ``[-2**15, 2**15)``.

    Raises
    ------
    ValueError
        For mismatched shapes or a value out of range.
    """
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    ma = np.asarray(ma, dtype=np.int64)
    mb = np.asarray(mb, dtype=np.int64)
    if a.shape != b.shape or a.ndim != 2 or ma.shape != (a.shape[1],) or mb.shape != ma.shape:
        raise ValueError(f"shapes do not match: a {a.shape}, b {b.shape}, ma {ma.shape}, "
                         f"mb {mb.shape}")
    for name, v, lo, hi in (("a", a, -128, 127), ("b", b, -128, 127),
                            ("ma", ma, 0, (1 << 31) - 1), ("mb", mb, 0, (1 << 31) - 1)):
        _check(name, v, lo, hi)
    if not 0 <= shift <= 63:
        raise ValueError(f"shift must be in 0..63, got {shift}")
    # |a * ma| <= 2**38, so the rounding constant of any shift up to 63 acts as for shift 39
    s = min(int(shift), 40)
    x = round_shift(a * ma, s) + round_shift(b * mb, s)
    lim = 1 << (ELTWISE_X_BITS - 1)
    return np.clip(x, -lim, lim - 1)


def _out_round(v: np.ndarray) -> np.ndarray:
    """``clamp((v + 2**(F - 1)) >> F, -128, 127)`` with ``F = ELTWISE_OUT_FRAC_BITS``."""
    f = ELTWISE_OUT_FRAC_BITS
    return np.clip((v + (1 << (f - 1))) >> f, -128, 127).astype(np.int8)


def add_int(a: npt.ArrayLike, b: npt.ArrayLike, ma: npt.ArrayLike, mb: npt.ArrayLike,
            shift: int) -> np.ndarray:
    """ADD (residual addition of two int8 tensors with different per-channel scales,
    :class:`hw.isa.EltwiseBody`), bit for bit:
    ``out = clamp((x + 2**7) >> 8, -128, 127)`` with ``x`` = :func:`eltwise_input`, i.e.
    ``x`` carries :data:`hw.isa.ELTWISE_OUT_FRAC_BITS` (8) fraction bits of the output step.

    For real values ``a * s_a[c] + b * s_b[c]`` quantized to ``s_o[c]``: ``ma[c] / 2**shift =
    256 * s_a[c] / s_o[c]`` and ``mb[c] / 2**shift = 256 * s_b[c] / s_o[c]``.

    Returns
    -------
    numpy.ndarray
        int8, shape ``(R, N)``.
    """
    return _out_round(eltwise_input(a, b, ma, mb, shift))


def layernorm_row_constants(s: int, q: int, n: int) -> tuple[int, int, int]:
    """LAYERNORM's per-row constants from the exact row sums ``S = sum x``, ``Q = sum x**2``
    over ``N`` elements (what the row unit of :class:`hw.vector.EltwiseEngine` computes).

    ``D = N * Q - S**2 = N**2 * var`` (exact, >= 0). For ``D > 0`` an even shift brings it to
    ``D' = D * 4**-e`` in ``[2**28, 2**30)`` (``e = floor((bitlen(D) - 29) / 2)``, which may
    be negative; a right shift truncates), then ``R = floor(N * 2**32 / isqrt(D'))`` (in
    ``[N * 2**17, N * 2**18)``), so that ``N / sqrt(D) = 1 / std ~= R / 2**(32 + e)``. The mean
    is ``mu = floor((S * 2**8 + N // 2) / N)`` (8 fraction bits, round half up). For ``D == 0``
    (all elements of the row equal) ``R = e = 0``.

    The integer square root is the digit-by-digit (restoring) method, one result bit per step
    (Warren, *Hacker's Delight*, 2nd ed., sec. 11-1), and the reciprocal a restoring
    division; the scheme -- integer mean and variance, an integer square root, the reciprocal
    of the standard deviation as a fixed-point factor -- is I-BERT's integer LayerNorm (Kim et
    al., ICML 2021, arXiv:2101.01321, sec. 3.5 and its Algorithm 4), with the variance
    normalised to a fixed range first so that the factor keeps 15 significant bits for any
    variance.

    Parameters
    ----------
    s, q : int
        Row sums; ``q >= 0``.
    n : int
        Elements, ``1 .. LN_MAX_ELEMS``.

    Returns
    -------
    (R, e, mu) : tuple of int
    """
    if not 1 <= n <= LN_MAX_ELEMS:
        raise ValueError(f"n must be in 1..{LN_MAX_ELEMS}, got {n}")
    s, q, n = int(s), int(q), int(n)
    d = n * q - s * s
    if d < 0:
        raise ValueError(f"N * Q - S**2 = {d} < 0: not the sums of one row")
    mu = ((s << LN_MEAN_FRAC_BITS) + n // 2) // n
    if d == 0:
        return 0, 0, mu
    e = (d.bit_length() - (LN_VAR_BITS - 1)) // 2
    dn = d >> (2 * e) if e >= 0 else d << (-2 * e)
    return (n << LN_RECIP_SHIFT) // math.isqrt(dn), e, mu


def layernorm_int(a: npt.ArrayLike, b: npt.ArrayLike, ma: npt.ArrayLike, mb: npt.ArrayLike,
                  shift: int, gamma: npt.ArrayLike, beta: npt.ArrayLike,
                  g_shift: int) -> np.ndarray:
    """LAYERNORM (:class:`hw.isa.EltwiseBody`) bit for bit: LayerNorm over each row of
    ``x = eltwise_input(a, b, ma, mb, shift)`` (the residual sum, or one input with ``mb =
    0``), then per-channel scale and bias.

    Per row, with the row constants of :func:`layernorm_row_constants` (``S``, ``Q`` over the
    row's ``N`` elements)::

        c  = x * 2**8 - mu                                   (x - mean, 8 fraction bits)
        t  = round(c * R / 2**ln_norm_shift(e))              (x_hat * 2**12)
        gp = round(t * gamma / 2**g_shift)
        out = clamp((gp + beta + 2**7) >> 8, -128, 127)

    So with real output scale ``s_y[c]``: ``gamma[c] / 2**g_shift = 2**-4 * g[c] / s_y[c]``
    (``g`` the real LayerNorm weight) and ``beta[c] = round(2**8 * b[c] / s_y[c])``.

    Parameters
    ----------
    a, b, ma, mb, shift
        As :func:`eltwise_input`; ``N = a.shape[1]`` in ``1 .. LN_MAX_ELEMS``.
    gamma : array_like of int
        ``(N,)``, ``|gamma| <= 2**31 - 1`` (sign and magnitude in the accumulator word).
    beta : array_like of int
        ``(N,)``, int32.
    g_shift : int
        0..63.

    Returns
    -------
    numpy.ndarray
        int8, shape ``(R, N)``.

    Raises
    ------
    ValueError
        For mismatched shapes or a value out of range.
    """
    x = eltwise_input(a, b, ma, mb, shift)
    r_rows, n = x.shape
    if not 1 <= n <= LN_MAX_ELEMS:
        raise ValueError(f"rows must have 1..{LN_MAX_ELEMS} elements, got {n}")
    g = np.asarray(gamma, dtype=np.int64)
    bt = np.asarray(beta, dtype=np.int64)
    if g.shape != (n,) or bt.shape != (n,):
        raise ValueError(f"gamma and beta must have shape ({n},), got {g.shape}, {bt.shape}")
    _check("gamma", g, -(1 << 31) + 1, (1 << 31) - 1)
    _check("beta", bt, -(1 << 31), (1 << 31) - 1)
    if not 0 <= g_shift <= 63:
        raise ValueError(f"g_shift must be in 0..63, got {g_shift}")
    out = np.zeros((r_rows, n), np.int8)
    gs = min(int(g_shift), 52)   # |t * gamma| < 2**50: larger shifts round alike
    for i in range(r_rows):
        row = x[i]
        r, e, mu = layernorm_row_constants(int(row.sum()), int((row * row).sum()), n)
        c = (row << LN_MEAN_FRAC_BITS) - mu
        t = round_shift(c * r, ln_norm_shift(e))
        gp = round_shift(t * g, gs)
        out[i] = _out_round(gp + bt)
    return out


# -- GELU ----------------------------------------------------------------------------------------

def gelu_fixed(y: npt.ArrayLike) -> np.ndarray:
    """GELU in the fixed-point domain of :data:`hw.isa.GELU_FRAC_BITS` (``F = 8``):
    ``g = max(y, 0) - C[i]`` with ``C`` = :func:`hw.isa.gelu_table` and
    ``i = (|y| + 2**(F - K - 1)) >> (F - K)`` (``K = GELU_TABLE_STEP_BITS``: ``|y|`` rounded
    to the table's step), ``C[i] = 0`` for ``i >= GELU_TABLE_ENTRIES``.

    Parameters
    ----------
    y : array_like of int
        Values in ``[-2**15, 2**15)`` (units ``2**-F``).

    Returns
    -------
    numpy.ndarray
        int64, same shape.
    """
    y = np.asarray(y, dtype=np.int64)
    table = np.asarray(gelu_table(), dtype=np.int64)
    k = GELU_FRAC_BITS - GELU_TABLE_STEP_BITS
    idx = (np.abs(y) + (1 << (k - 1))) >> k
    c = np.where(idx < GELU_TABLE_ENTRIES, table[np.minimum(idx, GELU_TABLE_ENTRIES - 1)], 0)
    return np.maximum(y, 0) - c


def gelu_int(acc: npt.ArrayLike, bias: npt.ArrayLike, m1: npt.ArrayLike, s1: npt.ArrayLike,
             m2: npt.ArrayLike, s2: npt.ArrayLike) -> np.ndarray:
    """GELU (opcode GELU, :class:`hw.isa.RequantBody`) bit for bit: requantization into the
    fixed-point GELU domain, the table GELU, requantization to int8.

    Per element, with per-channel parameters::

        y = clamp(round((acc + bias) * m1 / 2**s1), -2**15, 2**15 - 1)    (units 2**-8)
        g = gelu_fixed(y)
        out = clamp(round(g * m2 / 2**s2), -128, 127)

    So ``m1 / 2**s1 = 2**8 * s_acc[c]`` and ``m2 / 2**s2 = 2**-8 / s_out[c]``.

    Parameters
    ----------
    acc : array_like of int32
        ``(R, N)``.
    bias : array_like of int32
        ``(N,)``.
    m1, m2 : array_like of int
        ``(N,)``, ``0 .. 2**31 - 1``.
    s1, s2 : array_like of int
        ``(N,)``, ``0 .. 63``.

    Returns
    -------
    numpy.ndarray
        int8, ``(R, N)``.
    """
    a = np.asarray(acc, dtype=np.int64)
    bias = np.asarray(bias, dtype=np.int64)
    m1, s1 = np.asarray(m1, dtype=np.int64), np.asarray(s1, dtype=np.int64)
    m2, s2 = np.asarray(m2, dtype=np.int64), np.asarray(s2, dtype=np.int64)
    for name, v, lo, hi in (("acc", a, -(1 << 31), (1 << 31) - 1),
                            ("bias", bias, -(1 << 31), (1 << 31) - 1),
                            ("m1", m1, 0, (1 << 31) - 1), ("m2", m2, 0, (1 << 31) - 1),
                            ("s1", s1, 0, 63), ("s2", s2, 0, 63)):
        _check(name, v, lo, hi)
    x = (a + bias).astype(object)      # |x * m1| < 2**63, its rounding constant may not be
    rnd = np.array([(1 << int(v)) >> 1 for v in np.broadcast_to(s1, a.shape[-1:])], object)
    y = (x * m1.astype(object) + rnd) >> s1.astype(object)
    lim = 1 << (GELU_X_BITS - 1)
    y = np.clip(np.asarray(y, dtype=object), -lim, lim - 1).astype(np.int64) if y.size else \
        np.zeros(a.shape, np.int64)
    g = gelu_fixed(y)
    out = round_shift(g * m2, np.minimum(s2, 48))     # |g * m2| < 2**47: larger round alike
    return np.clip(out, -128, 127).astype(np.int8)
