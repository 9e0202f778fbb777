"""Quantization of the number formats beside int8 (:mod:`hw.isa.formats`): int4 weights
(per-channel scales, two per byte) and OCP Microscaling MXINT8 (shared E8M0 block scales),
following Microsoft's ``microxcaling`` where the spec leaves a choice. The int8 scales,
multipliers and requantization they build on are in :mod:`sw.quant`."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from hw.isa import (
    E8M0_BIAS,
    E8M0_NAN,
    INT4_MAX,
    INT4_MIN,
    MX_BLOCK,
    MXINT8_FRAC_BITS,
    MXINT8_MAX,
)
from sw.quant import INT8_MAX, _quantize, channel_scales

__all__ = ["int4_channel_scales", "quantize_int4", "pack_int4", "unpack_int4",
           "mx_shared_exponents", "quantize_mxint8", "dequantize_mxint8", "mx_alignment_base"]


# -- int4 weights ---------------------------------------------------------------------------------

def int4_channel_scales(x: npt.ArrayLike, axis: int) -> np.ndarray:
    """Per-channel symmetric int4 scales ``max|x| / 7`` over all axes but ``axis`` (all-zero
    channels get 1.0), as :func:`channel_scales` does for int8.

    Returns
    -------
    numpy.ndarray
        float64, shape ``(x.shape[axis],)``.

    Raises
    ------
    ScaleError
        If a channel holds a non-finite value.
    """
    return channel_scales(x, axis) * INT8_MAX / INT4_MAX


def quantize_int4(x: npt.ArrayLike, scale: npt.ArrayLike, axis: int | None = None) -> np.ndarray:
    """Quantize to int4 values ``clamp(floor(x / scale + 1/2), -8, 7)`` (the project's rounding
    rule, as :func:`quantize`), returned in an int8 array (one value per element, not packed:
    :func:`pack_int4` packs them).

    Parameters and errors as :func:`quantize`.

    Returns
    -------
    numpy.ndarray
        int8 with values in -8..7, same shape as ``x``.
    """
    return _quantize(x, scale, axis, INT4_MIN, INT4_MAX)


def pack_int4(w: npt.ArrayLike) -> np.ndarray:
    """Pack int4 values two per byte along axis 0 (K): **the one definition of the nibble
    order** (the matrix engine's weight load, :mod:`hw.isa.formats`, reads this layout).

    Byte ``[r, n]`` = ``(w[2r, n] & 0xF) | (w[2r + 1, n] & 0xF) << 4``: row ``2r`` in the low
    nibble, row ``2r + 1`` in the high nibble, each in 4-bit two's complement; an odd number of
    rows is padded with a 0 high nibble.

    Parameters
    ----------
    w : array_like of int
        Shape ``(K, ...)``, values in -8..7.

    Returns
    -------
    numpy.ndarray
        uint8, shape ``(ceil(K / 2), ...)``.

    Raises
    ------
    ValueError
        If a value is outside -8..7.
    """
    a = np.asarray(w, dtype=np.int64)
    if a.size and (a.min() < INT4_MIN or a.max() > INT4_MAX):
        raise ValueError(f"int4 values must be in {INT4_MIN}..{INT4_MAX}, got "
                         f"{a.min()}..{a.max()}")
    if a.shape[0] % 2:
        a = np.concatenate([a, np.zeros((1, *a.shape[1:]), np.int64)])
    lo, hi = a[0::2] & 0xF, a[1::2] & 0xF
    return (lo | hi << 4).astype(np.uint8)


def unpack_int4(packed: npt.ArrayLike, k: int) -> np.ndarray:
    """Inverse of :func:`pack_int4`: the first ``k`` int4 rows of ``packed`` (uint8 or int8
    bytes, shape ``(ceil(k / 2), ...)``), sign-extended.

    Returns
    -------
    numpy.ndarray
        int8, shape ``(k, ...)``, values in -8..7.

    Raises
    ------
    ValueError
        If ``packed`` has fewer than ``ceil(k / 2)`` rows.
    """
    p = np.asarray(packed).astype(np.uint8).astype(np.int64)
    if p.shape[0] < (k + 1) // 2:
        raise ValueError(f"{p.shape[0]} packed rows hold fewer than {k} int4 rows")
    nib = np.empty((2 * p.shape[0], *p.shape[1:]), np.int64)
    nib[0::2], nib[1::2] = p & 0xF, p >> 4
    return (((nib ^ 8) - 8)[:k]).astype(np.int8)


# -- OCP Microscaling (MX) MXINT8 -----------------------------------------------------------------

def _blocks(x: np.ndarray, axis: int) -> tuple[np.ndarray, int]:
    """``x`` with ``axis`` moved last and split into blocks of :data:`MX_BLOCK` (zero-padded):
    shape ``(..., n_blocks, MX_BLOCK)``; and the original length of ``axis``."""
    a = np.moveaxis(x, axis, -1)
    n = a.shape[-1]
    nb = -(-n // MX_BLOCK)
    pad = np.zeros((*a.shape[:-1], nb * MX_BLOCK), dtype=a.dtype)
    pad[..., :n] = a
    return pad.reshape(*a.shape[:-1], nb, MX_BLOCK), n


def mx_shared_exponents(x: npt.ArrayLike, axis: int = -1) -> np.ndarray:
    """E8M0 shared scales of MXINT8 blocks of :data:`MX_BLOCK` (32) elements along ``axis``
    (OCP MX v1.0 §6.3, conversion from scalar floats): ``X = 2**(floor(log2(max_i |V_i|)) -
    emax_elem)`` with ``emax_elem = 0`` for INT8 (§5.3.4: its largest normal magnitude is
    ``1 + 63/64 < 2``), encoded as ``floor(log2 max) + 127`` (§5.4.1).

    The choices the spec leaves open follow Microsoft's microxcaling (``mx/mx_ops.py``,
    ``_shared_exponents`` and ``_quantize_mx``): an all-zero block (and a block of zeros of
    either sign) takes the exponent of the smallest normal FP32, ``-126`` (byte 1); exponents
    below ``-127`` clamp to ``-127`` (byte 0); a block holding an Inf or a NaN gets the NaN
    scale 0xFF (microxcaling: an exponent above the scale's ``emax`` 127 becomes NaN).
    ``floor(log2(.))`` is exact here (``numpy.frexp``); microxcaling's ``torch.log2`` in float32
    can round a value within ``2**-24`` below a power of two up to it, which gives that block
    the next exponent.

    Parameters
    ----------
    x : array_like of float
        Converted to float32 first (the spec converts from FP32 scalars; microxcaling works
        on float32 tensors).
    axis : int
        The blocked axis (K); a length that is not a multiple of 32 leaves the last block short
        (padded with zeros, which do not change its maximum).

    Returns
    -------
    numpy.ndarray
        uint8, ``x``'s shape with ``axis`` replaced by ``ceil(len / 32)`` blocks (moved to the
        same position).
    """
    a = np.asarray(x, dtype=np.float32).astype(np.float64)
    axis = axis % a.ndim
    b, _ = _blocks(a, axis)
    finite = np.all(np.isfinite(b), axis=-1)
    amax = np.max(np.abs(np.where(np.isfinite(b), b, 0.0)), axis=-1)
    _, e = np.frexp(amax)                     # amax = f * 2**e, 0.5 <= f < 1
    exp = np.where(amax > 0, e - 1, -126)     # floor(log2(amax)); zero: FP32 min normal
    exp = np.maximum(exp, -E8M0_BIAS)
    out = np.where(finite, exp + E8M0_BIAS, E8M0_NAN).astype(np.uint8)
    return np.moveaxis(out, -1, axis)


def quantize_mxint8(x: npt.ArrayLike, axis: int = -1) -> tuple[np.ndarray, np.ndarray]:
    """Convert to MXINT8 (OCP MX v1.0 §6.3): blocks of 32 along ``axis`` share the E8M0 scale
    ``X`` of :func:`mx_shared_exponents`; element ``i`` is ``P_i = V_i / X`` in the INT8
    element format (§5.3.4: two's complement, implied scale ``2**-6``), i.e. the integer
    ``round(V_i / X * 64)``.

    Rounding and saturation follow microxcaling (§6.3 recommends clamping to the element's
    largest magnitude; as read in a clause-by-clause conformance list, not in the spec PDF,
    §5.3.4 names roundTiesToEven for INT8 conversion, which this does not do), with
    ``_quantize_elemwise_core``'s ``round="nearest"`` and ``saturate_normals=True``: round
    half away from zero (``sign(v) * floor(|v| + 1/2)``, not the project's ties-to-+infinity
    rule, which applies to the hardware's own requantization), then clamp to
    ``+-127`` (the largest element magnitude ``1 + 63/64``: -128 is never emitted). Zeros of
    either sign give 0. A block with the NaN scale gets elements 0 (the whole block is NaN
    by §5.1; :func:`dequantize_mxint8` gives NaN for it).

    Parameters
    ----------
    x : array_like of float
        Any shape; converted to float32 first.
    axis : int
        The blocked axis.

    Returns
    -------
    q : numpy.ndarray
        int8, shape of ``x``, values in -127..127.
    scales : numpy.ndarray
        uint8 E8M0 bytes, see :func:`mx_shared_exponents`.
    """
    a = np.asarray(x, dtype=np.float32).astype(np.float64)
    axis = axis % a.ndim
    scales = mx_shared_exponents(a, axis)
    b, n = _blocks(a, axis)
    s = np.moveaxis(scales, axis, -1).astype(np.int64)
    nan = s == E8M0_NAN
    # V / X * 2**6, exact: a power-of-two scaling of a float32 value in float64
    v = np.ldexp(np.where(np.isfinite(b), b, 0.0),
                 (MXINT8_FRAC_BITS - np.where(nan, E8M0_BIAS, s) + E8M0_BIAS)[..., None])
    q = np.sign(v) * np.floor(np.abs(v) + 0.5)
    q = np.clip(q, -MXINT8_MAX, MXINT8_MAX)
    q = np.where(nan[..., None], 0, q).astype(np.int8)
    q = q.reshape(*q.shape[:-2], -1)[..., :n]
    return np.moveaxis(q, -1, axis), scales


def dequantize_mxint8(q: npt.ArrayLike, scales: npt.ArrayLike, axis: int = -1) -> np.ndarray:
    """Real values of MXINT8 data: ``q * 2**(X - 127 - 6)`` per block (NaN for a block with the
    NaN scale 0xFF, OCP MX v1.0 §5.1 and §5.4.1).

    Returns
    -------
    numpy.ndarray
        float64, shape of ``q``.
    """
    qa = np.asarray(q, dtype=np.float64)
    axis = axis % qa.ndim
    s = np.repeat(np.asarray(scales, dtype=np.int64), MX_BLOCK, axis=axis)
    s = np.take(s, np.arange(qa.shape[axis]), axis=axis)
    out = np.ldexp(qa, np.where(s == E8M0_NAN, 0, s) - E8M0_BIAS - MXINT8_FRAC_BITS)
    return np.where(s == E8M0_NAN, np.nan, out)


def mx_alignment_base(xa: npt.ArrayLike | None, xw: npt.ArrayLike | None, *, k: int,
                      tile_k: int, a_max: int = MXINT8_MAX, w_max: int = MXINT8_MAX) -> int:
    """The smallest MX alignment base ``x_base`` (:func:`sw.golden.matmul_formats`) for which no
    accumulation of an ``(M, k) @ (k, N)`` product with these block scales can wrap the int32
    accumulator, whatever the elements: every K tile's sum is at most ``tile_k * a_max *
    w_max`` in magnitude, aligned by ``2**(xa + xw - x_base)`` (plus 1/2 when rounded), so
    ``x_base`` is chosen with ``max over (i, n) of sum_j tile_k * a_max * w_max * 2**(xa[i, j] +
    xw[j, n] - x_base) + T <= 2**31 - 1`` (``T`` tiles). The smallest such base keeps the most
    precision: tiles whose exponent sum reaches ``x_base`` are exact (the exact range).

    Parameters
    ----------
    xa : array_like of uint8, optional
        ``(M, ceil(k / 32))`` activation block scales (None: int8 activations, 127).
    xw : array_like of uint8, optional
        ``(ceil(k / 32), N)`` weight block scales (None: 127).
    k : int
        The reduction length.
    tile_k : int
        The array's ``rows`` (K per tile), dividing 32.
    a_max, w_max : int
        Largest element magnitudes (127 for MXINT8, 128 for int8, 8 for int4).

    Returns
    -------
    int
        ``x_base`` in 0..1023.

    Raises
    ------
    ValueError
        If ``tile_k`` does not divide 32 or a scale is NaN (0xFF).
    """
    if tile_k < 1 or MX_BLOCK % tile_k:
        raise ValueError(f"tile_k={tile_k} must divide the MX block ({MX_BLOCK})")
    nb = -(-k // MX_BLOCK)
    tiles = -(-k // tile_k)
    ea = (np.full((1, nb), E8M0_BIAS) if xa is None
          else np.asarray(xa, dtype=np.int64).reshape(-1, nb))
    ew = (np.full((nb, 1), E8M0_BIAS) if xw is None
          else np.asarray(xw, dtype=np.int64).reshape(nb, -1))
    if np.any(ea == E8M0_NAN) or np.any(ew == E8M0_NAN):
        raise ValueError("an MX operand has the NaN scale (0xFF)")
    per_block = np.array([min(MX_BLOCK, k - b * MX_BLOCK) for b in range(nb)])
    tiles_in = -(-per_block // tile_k)                   # K tiles of each block
    ca, cw = int(ea.max()), int(ew.max())
    s = (np.exp2(ea - ca) * tiles_in) @ np.exp2(ew - cw)  # sum over tiles, relative
    need = (math.log2(tile_k * a_max * w_max * float(s.max())) + ca + cw
            - math.log2((1 << 31) - 1 - tiles))
    return int(min(max(math.ceil(need + 1e-9), 0), (1 << 10) - 1))
