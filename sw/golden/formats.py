"""Golden integer reference of the number formats: int4 weights and OCP MX block scaling
(MXINT8). Integer operands are checked as in :mod:`sw.golden.core`."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from hw.isa import (
    E8M0_BIAS,
    E8M0_NAN,
    MX_BLOCK,
    X_BASE_BITS,
    ActFormat,
    WeightFormat,
)
from sw.golden.core import matmul_int
from sw.quant import (
    INT8_MAX,
    INT8_MIN,
    INT64_MAX,
    INT64_MIN,
    check_int_array,
    check_int_values,
    requantize,
)

#: The largest ``x_base`` (:data:`hw.isa.X_BASE_BITS` wide)
_X_BASE_MAX = (1 << X_BASE_BITS) - 1
#: :func:`mx_align`'s tile sums: ``|p| < 2**21``
_TILE_SUM_MAX = (1 << 21) - 1


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

    Raises
    ------
    ValueError, TypeError
        A value outside the ranges above (``d``: int64), or not an integer.
    """
    p = check_int_values("p", p, -_TILE_SUM_MAX, _TILE_SUM_MAX)
    d = check_int_values("d", d, INT64_MIN, INT64_MAX)
    left = (p << np.clip(d, 0, 32)) & 0xFFFF_FFFF
    left = np.where(left >= 1 << 31, left - (1 << 32), left)
    r = np.clip(-d, 1, 40)
    right = (p + (np.int64(1) << (r - 1))) >> r
    return np.where(d >= 0, left, right)


def _tile_products(a: np.ndarray, w: np.ndarray, tile_k: int) -> tuple[int, np.ndarray]:
    """The number of K tiles ``T`` and the exact int64 product of each: ``(T, M, N)`` (K
    zero-padded to a multiple of ``tile_k``)."""
    (m, k), n = a.shape, w.shape[1]
    nt = -(-k // tile_k)
    ap = np.zeros((m, nt * tile_k), np.int64)
    ap[:, :k] = a
    wp = np.zeros((nt * tile_k, n), np.int64)
    wp[:k] = w
    return nt, np.einsum("mtk,tkn->tmn", ap.reshape(m, nt, tile_k), wp.reshape(nt, tile_k, n))


def _mx_operands(a: npt.ArrayLike, w: npt.ArrayLike, tile_k: int,
                 x_base: int) -> tuple[np.ndarray, np.ndarray, int, int]:
    """The checked operands, ``tile_k`` and ``x_base`` of :func:`matmul_formats`."""
    a = check_int_array("a", a, INT8_MIN, INT8_MAX)
    w = check_int_array("w", w, INT8_MIN, INT8_MAX)
    if a.ndim != 2 or w.ndim != 2 or a.shape[1] != w.shape[0]:
        raise ValueError(f"shapes do not match for a matmul: {a.shape} @ {w.shape}")
    tile_k = int(check_int_values("tile_k", tile_k, 1, MX_BLOCK, shape=()))
    if MX_BLOCK % tile_k:
        raise ValueError(f"tile_k={tile_k} must divide the MX block ({MX_BLOCK})")
    return a, w, tile_k, int(check_int_values("x_base", x_base, 0, _X_BASE_MAX, shape=()))


def _exponents(name: str, x: npt.ArrayLike | None) -> np.ndarray | None:
    """E8M0 bytes (0..255; the NaN byte is refused where they are used) as int64, checked."""
    return None if x is None else check_int_values(name, x, 0, E8M0_NAN)


def _tile_exponents(x: np.ndarray | None, n_tiles: int, tile_k: int, axis: int,
                    other: int) -> np.ndarray:
    """Per-K-tile E8M0 bytes from per-block ones (``axis`` = the block axis), 127 (``2**0``)
    when ``x`` is None (an int8 or int4 operand in an MX product)."""
    if x is None:
        shape = [other, n_tiles] if axis == 1 else [n_tiles, other]
        return np.full(shape, E8M0_BIAS, np.int64)
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
        For mismatched shapes, ``tile_k`` not dividing 32, a NaN scale, or a value outside
        its range (``a``, ``w``: int8; ``xa``, ``xw``: 0..255; ``x_base``: 0..1023).
    TypeError
        A non-integer value (:func:`sw.quant.check_int_values`).
    """
    a, w, tile_k, x_base = _mx_operands(a, w, tile_k, x_base)
    m, k = a.shape
    n = w.shape[1]
    nt, p = _tile_products(a, w, tile_k)
    ea = _tile_exponents(_exponents("xa", xa), nt, tile_k, 1, m)    # (M, T)
    ew = _tile_exponents(_exponents("xw", xw), nt, tile_k, 0, n)    # (T, N)
    d = ea.T[:, :, None] + ew[:, None, :] - x_base                  # (T, M, N)
    total = mx_align(p, d).sum(axis=0) & 0xFFFF_FFFF
    return np.where(total >= 1 << 31, total - (1 << 32), total).astype(np.int32)


def mx_in_exact_range(a: npt.ArrayLike, w: npt.ArrayLike, *, tile_k: int,
                      xa: npt.ArrayLike | None = None, xw: npt.ArrayLike | None = None,
                      x_base: int = 0) -> bool:
    """Whether every K tile with a non-zero sum has ``d >= 0`` in :func:`matmul_formats` (so
    the result is the exact dot product, no tile rounded); its errors."""
    a, w, tile_k, x_base = _mx_operands(a, w, tile_k, x_base)
    m, k = a.shape
    n = w.shape[1]
    nt, p = _tile_products(a, w, tile_k)
    d = (_tile_exponents(_exponents("xa", xa), nt, tile_k, 1, m).T[:, :, None]
         + _tile_exponents(_exponents("xw", xw), nt, tile_k, 0, n)[:, None, :] - x_base)
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

    Raises
    ------
    ValueError, TypeError
        As :func:`matmul_formats` (``w_exp``, ``a_exp`` for its ``xw``, ``xa``) or
        :func:`sw.quant.requantize`.
    """
    w_mx, a_mx = weights == WeightFormat.MXINT8, activations == ActFormat.MXINT8
    w_exp, a_exp = _exponents("w_exp", w_exp), _exponents("a_exp", a_exp)
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
