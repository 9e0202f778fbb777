"""Golden integer reference of GELU (fixed point, table correction)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from hw.isa import (
    GELU_FRAC_BITS,
    GELU_TABLE_ENTRIES,
    GELU_TABLE_STEP_BITS,
    GELU_X_BITS,
    gelu_table,
)
from sw.golden.core import _round_shift
from sw.quant import INT32_MAX, INT32_MIN, check_int_values, check_multipliers, check_shifts


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

    Raises
    ------
    ValueError, TypeError
        A value outside the range above, or not an integer.
    """
    lim = 1 << (GELU_X_BITS - 1)
    y = check_int_values("y", y, -lim, lim - 1)
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

    Raises
    ------
    ValueError, TypeError
        A value outside the ranges above, or not an integer.
    """
    a = check_int_values("acc", acc, INT32_MIN, INT32_MAX)
    bias = check_int_values("bias", bias, INT32_MIN, INT32_MAX)
    m1, s1 = check_multipliers("m1", m1), check_shifts("s1", s1)
    m2, s2 = check_multipliers("m2", m2), check_shifts("s2", s2)
    x = (a + bias).astype(object)      # |x * m1| < 2**63, its rounding constant may not be
    rnd = np.array([(1 << int(v)) >> 1 for v in np.broadcast_to(s1, a.shape[-1:])], object)
    y = (x * m1.astype(object) + rnd) >> s1.astype(object)
    lim = 1 << (GELU_X_BITS - 1)
    y = np.clip(np.asarray(y, dtype=object), -lim, lim - 1).astype(np.int64) if y.size else \
        np.zeros(a.shape, np.int64)
    g = gelu_fixed(y)
    out = _round_shift(g * m2, np.minimum(s2, 48))     # |g * m2| < 2**47: larger round alike
    return np.clip(out, -128, 127).astype(np.int8)
