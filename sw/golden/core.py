"""Golden integer reference of the linear and attention kernels: int8 matmul, linear layer
with requantization, integer softmax, row requantization, one attention head.

Integer parameters and tensors are checked as the kernels check theirs
(:func:`sw.quant.check_int_values`): a non-integer value (``0.7``, ``True``) raises
``TypeError``, a value outside the range its docstring gives ``ValueError``; integral floats
(``3.0``) are taken.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from hw.isa import (
    ROW_SCALE_SHIFT,
    SOFTMAX_EXP_FRAC_BITS,
    SOFTMAX_EXP_GUARD_BITS,
    SOFTMAX_EXP_MAX_SHIFT,
    SOFTMAX_RECIP_BITS,
    SoftmaxBody,
    field_max,
    softmax_exp_table,
)
from sw.quant import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    check_accumulation,
    check_int_values,
    check_multipliers,
    check_shifts,
    requantize,
)

#: SOFTMAX's ``mult`` and ``kv_len`` fields (unsigned)
_SOFTMAX_MULT_MAX = field_max(SoftmaxBody, "mult")
_SOFTMAX_KV_LEN_MAX = field_max(SoftmaxBody, "kv_len")


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
        For mismatched shapes or dtypes, or a parameter outside its range.
    TypeError
        A non-integer parameter value (:func:`sw.quant.requantize`).
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

    Raises
    ------
    ValueError, TypeError
        A negative or non-integer ``n``.
    """
    n = check_int_values("n", n, 0, INT64_MAX)
    table = np.asarray(softmax_exp_table(frac_bits, guard_bits), dtype=np.int64)
    q = n >> frac_bits
    f = n & ((1 << frac_bits) - 1)
    qs = np.minimum(q, max_shift - 1) + guard_bits
    p = (table[f] + (np.int64(1) << (qs - 1))) >> qs
    return np.where(q < max_shift, p, 0)


def row_reciprocal(sums: npt.ArrayLike) -> np.ndarray:
    """SOFTMAX's per-row reciprocal ``floor((2**32 + s // 2) / s)``, 0 for ``s == 0``
    (round half up of ``2**32 / s``); int64. ``sums``: non-negative integers (ValueError,
    TypeError otherwise)."""
    s = check_int_values("sums", sums, 0, INT64_MAX)
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
        Keys ``>= kv_len`` are masked (default ``K``); 0..65535 (the command's field).
    causal : bool
        Mask key ``k`` of row ``i`` if ``k > q_offset + i``.
    q_offset : int
        Position of query row 0 (for the causal mask), ``0..2**31-1``.
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

    Raises
    ------
    ValueError, TypeError
        A value outside the ranges above, or not an integer.
    """
    s = check_int_values("scores", scores, INT32_MIN, INT32_MAX)
    mult = int(check_int_values("mult", mult, 0, _SOFTMAX_MULT_MAX, shape=()))
    shift = int(check_shifts("shift", shift, shape=()))
    q_offset = int(check_int_values("q_offset", q_offset, 0, INT32_MAX, shape=()))
    r, k = s.shape
    kv = k if kv_len is None else int(check_int_values("kv_len", kv_len, 0,
                                                       _SOFTMAX_KV_LEN_MAX, shape=()))
    key = np.arange(k)[None, :]
    valid = np.broadcast_to(key < kv, (r, k))
    if causal:
        valid = valid & (key <= q_offset + np.arange(r)[:, None])
    m = np.where(valid, s, np.iinfo(np.int64).min).max(axis=1, initial=np.iinfo(np.int64).min)
    d = np.where(valid, m[:, None] - s, 0)
    rnd = (1 << shift) >> 1
    n = (d * mult + rnd) >> shift
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

    Raises
    ------
    ValueError, TypeError
        A value outside the ranges above (``acc``, ``bias``: int32), or not an integer.
    """
    a = check_int_values("acc", acc, INT32_MIN, INT32_MAX)
    r = check_int_values("recip", recip, 0, INT32_MAX)
    b = check_int_values("bias", bias, INT32_MIN, INT32_MAX)
    m = check_multipliers("multiplier", multiplier)
    sh = check_shifts("shift", shift)
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
        SOFTMAX ``mult``/``shift`` (score units -> ``2**-F`` base-2 exponent units), 0..65535
        and 0..63.
    out_mult, out_shift : array_like of int
        Per output channel ``(dv,)``: real ``2**-16 * s_v[j] / s_out[j]``; 0..2**31-1 and
        0..63.
    kv_len : int, optional
        Valid keys, 0..L (default ``L``).
    causal : bool
        Causal mask (query ``i`` sees keys ``<= i``).

    Returns
    -------
    numpy.ndarray
        int8, shape ``(L, dv)``.

    Raises
    ------
    ValueError, TypeError
        A parameter outside the ranges above, or not an integer; operands as
        :func:`matmul_int`.
    """
    score_mult = check_int_values("score_mult", score_mult, 0, _SOFTMAX_MULT_MAX, shape=())
    score_shift = check_shifts("score_shift", score_shift, shape=())
    out_mult = check_multipliers("out_mult", out_mult)
    out_shift = check_shifts("out_shift", out_shift)
    if kv_len is not None:
        kv_len = check_int_values("kv_len", kv_len, 0, np.shape(q)[0], shape=())
    s = matmul_int(q, np.ascontiguousarray(np.asarray(k).T))
    p, _, recip = softmax_int(s, mult=score_mult, shift=score_shift, kv_len=kv_len,
                              causal=causal, exp=exp)
    o = matmul_int(p, v)
    dv = o.shape[1]
    return requantize_rows(o, recip, np.zeros(dv, np.int64), out_mult, out_shift)


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

    Raises
    ------
    ValueError, TypeError
        A value outside the ranges above, or not an integer.
    """
    lim = (1 << 62) - 1
    return _round_shift(check_int_values("p", p, -lim, lim),
                        check_int_values("shift", shift, 0, 62))


def _round_shift(p: np.ndarray, s: np.ndarray) -> np.ndarray:
    """:func:`round_shift` of int64 ``p`` and ``s`` in its ranges, unchecked (the golden
    model's own intermediate values)."""
    rnd = np.where(s > 0, np.left_shift(np.int64(1), np.maximum(s - 1, 0)), 0)
    return (p + rnd) >> s
