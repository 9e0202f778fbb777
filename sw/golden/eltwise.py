"""Golden integer reference of the element-wise ADD and LAYERNORM."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from hw.isa import (
    ELTWISE_OUT_FRAC_BITS,
    ELTWISE_X_BITS,
    LN_MAX_ELEMS,
    LN_MEAN_FRAC_BITS,
    LN_RECIP_SHIFT,
    LN_VAR_BITS,
    ln_norm_shift,
)
from sw.golden.core import _round_shift
from sw.quant import (
    INT8_MAX,
    INT8_MIN,
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    check_int_values,
    check_multipliers,
    check_shifts,
)


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
    TypeError
        A non-integer value (:func:`sw.quant.check_int_values`).
    """
    a = check_int_values("a", a, INT8_MIN, INT8_MAX)
    b = check_int_values("b", b, INT8_MIN, INT8_MAX)
    ma = check_multipliers("ma", ma)
    mb = check_multipliers("mb", mb)
    if a.shape != b.shape or a.ndim != 2 or ma.shape != (a.shape[1],) or mb.shape != ma.shape:
        raise ValueError(f"shapes do not match: a {a.shape}, b {b.shape}, ma {ma.shape}, "
                         f"mb {mb.shape}")
    shift = check_shifts("shift", shift, shape=())
    # |a * ma| <= 2**38, so the rounding constant of any shift up to 63 acts as for shift 39
    s = np.int64(min(int(shift), 40))
    x = _round_shift(a * ma, s) + _round_shift(b * mb, s)
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
        Row sums (int64); ``q >= 0``.
    n : int
        Elements, ``1 .. LN_MAX_ELEMS``.

    Returns
    -------
    (R, e, mu) : tuple of int

    Raises
    ------
    ValueError, TypeError
        A value outside the ranges above or not an integer, or sums no row has.
    """
    return _row_constants(int(check_int_values("s", s, INT64_MIN, INT64_MAX, shape=())),
                          int(check_int_values("q", q, 0, INT64_MAX, shape=())),
                          int(check_int_values("n", n, 1, LN_MAX_ELEMS, shape=())))


def _row_constants(s: int, q: int, n: int) -> tuple[int, int, int]:
    """:func:`layernorm_row_constants` of Python ints in its ranges, unchecked (a row's own
    sums)."""
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
    TypeError
        A non-integer value (:func:`sw.quant.check_int_values`).
    """
    x = eltwise_input(a, b, ma, mb, shift)
    r_rows, n = x.shape
    if not 1 <= n <= LN_MAX_ELEMS:
        raise ValueError(f"rows must have 1..{LN_MAX_ELEMS} elements, got {n}")
    g = check_int_values("gamma", gamma, -INT32_MAX, INT32_MAX)
    bt = check_int_values("beta", beta, INT32_MIN, INT32_MAX)
    if g.shape != (n,) or bt.shape != (n,):
        raise ValueError(f"gamma and beta must have shape ({n},), got {g.shape}, {bt.shape}")
    g_shift = check_shifts("g_shift", g_shift, shape=())
    out = np.zeros((r_rows, n), np.int8)
    gs = np.int64(min(int(g_shift), 52))   # |t * gamma| < 2**50: larger shifts round alike
    for i in range(r_rows):
        row = x[i]
        r, e, mu = _row_constants(int(row.sum()), int((row * row).sum()), n)
        c = (row << LN_MEAN_FRAC_BITS) - mu
        t = _round_shift(c * r, np.int64(ln_norm_shift(e)))
        gp = _round_shift(t * g, gs)
        out[i] = _out_round(gp + bt)
    return out
