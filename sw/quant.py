"""Symmetric int8 quantization, fixed-point requantization and error metrics (int4 and MXINT8:
:mod:`sw.quant_formats`).

Conventions (the one rounding rule of the project)
--------------------------------------------------
* **Symmetric, zero-point 0.** A real tensor ``x`` is represented as ``q * scale`` with
  ``q`` int8 and ``scale = max|x| / 127`` (per tensor, or per channel along one axis).
  This is the symmetric special case (``Z = 0``) of the affine scheme of Jacob et al. 2018,
  "Quantization and Training of Neural Networks for Efficient Integer-Arithmetic-Only
  Inference" (CVPR), eq. (1).
* **Round to nearest, ties toward +infinity** everywhere: ``floor(v + 1/2)``. The hardware's
  requantization (``y = (x*M + 2**(shift-1)) >> shift`` with an arithmetic, i.e. floor, shift)
  rounds that way, and :func:`quantize` uses the same rule so there is only one. (gemmlowp's
  ``RoundingDivideByPOT`` rounds ties away from zero instead; the difference is only on exact
  ties.) Truncation instead of rounding costs about 7 dB SQNR on the real workload.
* **Fixed-point multiplier.** A real multiplier ``r`` is ``M / 2**shift`` with
  ``M`` in ``[2**30, 2**31)`` (a Q0.31 value in [0.5, 1) as in gemmlowp's
  ``QuantizeMultiplier`` and Jacob et al. 2018 §2.2, eq. (6)) and ``shift`` in ``0..63``.
  Unlike gemmlowp, the hardware does not use a rounding doubling high multiply followed by a
  rounding right shift (two roundings); it computes the exact product ``x * M`` in 64 bits
  and rounds once, which is at least as accurate.

Checked arithmetic
------------------
* **Scales.** Every helper that takes or makes a scale or a real multiplier rejects a
  negative or non-finite one with :class:`ScaleError` (a ``ValueError``). A zero scale is
  legal (a channel of all-zero weights has one): a zero real multiplier gives multiplier 0
  (as gemmlowp's ``QuantizeMultiplier``), values of 0 quantize to 0 with a zero scale, and a
  non-zero value cannot be quantized with it (:class:`ScaleError`).
* **Accumulation.** An int8 x int8 dot product of length ``K`` fits the int32 accumulator for
  every input iff ``K * 128 * 128 <= 2**31 - 1``: ``K <= MAX_EXACT_K = 131071``
  (:func:`max_exact_k`; the most positive product is ``(-128) * (-128) = 2**14``, the most
  negative ``-128 * 127`` is smaller in magnitude). A longer accumulation could wrap: the
  golden model (:func:`sw.golden.matmul_int`) and the linear kernel reject it with
  :class:`AccumulatorOverflowError` (:func:`check_accumulation`) instead of splitting K,
  because the hardware cannot add two int32 partial sums beyond 32 bits and a split would no
  longer match the golden result.
* **Integer parameters.** The kernels' integer parameters (biases, fixed-point multipliers and
  shifts, ...) and the golden model's (:func:`requantize`, :mod:`sw.golden`: its integer
  tensors too) go through :func:`check_int_values` (:func:`check_multipliers`,
  :func:`check_shifts`: the one home of the ``0..MULTIPLIER_MAX`` and ``0..SHIFT_MAX`` rules
  of the vector unit's REQUANT), which refuses a non-integer value with ``TypeError`` and a
  value outside its range with ``ValueError`` instead of truncating or wrapping it.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

__all__ = [
    "INT8_MIN", "INT8_MAX", "INT32_MIN", "INT32_MAX", "INT64_MIN", "INT64_MAX",
    "MULTIPLIER_MIN", "MULTIPLIER_MAX",
    "SHIFT_MAX", "MAX_EXACT_K",
    "ScaleError", "AccumulatorOverflowError", "max_exact_k", "check_accumulation",
    "check_int_values", "check_int_array", "check_multipliers", "check_shifts",
    "tensor_scale", "channel_scales", "quantize", "dequantize",
    "quantize_multiplier", "quantize_multipliers", "requantize", "sqnr_db", "cosine",
]

INT8_MIN = -128
INT8_MAX = 127
INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
MULTIPLIER_MIN = 1 << 30        #: smallest non-zero fixed-point multiplier
MULTIPLIER_MAX = (1 << 31) - 1  #: largest fixed-point multiplier
SHIFT_MAX = 63                  #: largest right shift of the vector unit


class ScaleError(ValueError):
    """A scale or real multiplier that is negative, not finite, or cannot be represented."""


class AccumulatorOverflowError(ValueError):
    """An accumulation long enough that the int32 accumulator could wrap (see
    :func:`check_accumulation`)."""


def max_exact_k(a_bits: int = 8, w_bits: int = 8, acc_bits: int = 32) -> int:
    """Longest dot product of signed ``a_bits`` x ``w_bits`` integers whose sum fits a signed
    ``acc_bits`` accumulator for every input: ``(2**(acc_bits-1) - 1) // (2**(a_bits-1) *
    2**(w_bits-1))``, 131071 for int8 x int8 into int32 (the largest product is
    ``(-2**(a_bits-1)) * (-2**(w_bits-1))``; the most negative one, ``-2**(a_bits-1) *
    (2**(w_bits-1) - 1)``, is smaller in magnitude and ``-2**(acc_bits-1)`` is representable).
    """
    return ((1 << (acc_bits - 1)) - 1) // ((1 << (a_bits - 1)) * (1 << (w_bits - 1)))


#: Longest int8 x int8 accumulation the int32 accumulator holds exactly (:func:`max_exact_k`).
MAX_EXACT_K = max_exact_k()


def check_accumulation(k: int) -> None:
    """Check that an int8 x int8 dot product of length ``k`` cannot wrap the int32
    accumulator.

    Raises
    ------
    AccumulatorOverflowError
        If ``k > MAX_EXACT_K`` (131071): some inputs would give a sum ``>= 2**31``.
    """
    if k > MAX_EXACT_K:
        raise AccumulatorOverflowError(
            f"K={k} > {MAX_EXACT_K}: an int8 x int8 sum over K can reach K * 128 * 128 = "
            f"{k * 128 * 128} >= 2**31 and wrap the int32 accumulator")


def _index(shape: tuple, flat: int) -> str:
    """`` at index ...`` of element ``flat`` of an array of ``shape`` ('' for a scalar)."""
    if not shape:
        return ""
    idx = np.unravel_index(flat, shape)
    return f" at index {int(idx[0]) if len(idx) == 1 else tuple(int(i) for i in idx)}"


def _not_integer(x: object) -> bool:
    """True if ``x`` (an element of an object array) is not an integer value."""
    if isinstance(x, (bool, np.bool_)):
        return True
    if isinstance(x, (int, np.integer)):
        return False
    try:
        f = float(x)          # type: ignore[arg-type]
    except (TypeError, ValueError):
        return True
    return not (math.isfinite(f) and f.is_integer())


_HINT = ("; real scales become fixed-point multipliers and shifts with "
         "sw.quant.quantize_multipliers")


def check_int_values(name: str, value: npt.ArrayLike, lo: int, hi: int, *,
                     shape: tuple[int, ...] | None = None, hint: str = "") -> np.ndarray:
    """``value`` as an int64 array, checked: the one place a kernel's integer parameter
    (bias, multiplier, shift, field value) is validated before anything is uploaded.

    Accepts integer arrays (any integer dtype) and float arrays (any float dtype) whose values
    are all integral (``3.0`` is ``3``); refuses anything that is not an integer instead of
    truncating it (``0.9`` is not ``0``). The range check is exact for every dtype (the bounds
    are never rounded to the array's precision: float32 ``2**31`` is outside ``0..2**31-1``).

    Parameters
    ----------
    name : str
        The argument's name, for the messages.
    lo, hi : int
        Inclusive range.
    shape : tuple of int, optional
        Required shape (``()`` for a scalar); default: any.
    hint : str
        Appended to the ``TypeError`` message.

    Raises
    ------
    ValueError
        Wrong shape, or a value outside ``[lo, hi]`` (the message names ``name``, the range,
        the first bad value and its index).
    TypeError
        A non-integer value (a non-integral or non-finite float, a bool, a string, ...).
    """
    if (type(value) is int or isinstance(value, np.integer)) and lo <= value <= hi \
            and (shape is None or tuple(shape) == ()):
        return np.array(value, np.int64)        # a scalar in range: the common case, quickly
    arr = np.asarray(value)
    if shape is not None and arr.shape != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {arr.shape}")
    if arr.size == 0:
        return np.zeros(arr.shape, np.int64)
    kind = arr.dtype.kind
    if kind == "f":
        bad = ~(np.isfinite(arr) & (arr == np.floor(arr)))
    elif kind == "O":
        bad = np.array([_not_integer(x) for x in arr.flat]).reshape(arr.shape)
    elif kind in "iu":
        bad = None
        info = np.iinfo(arr.dtype)
        if lo <= info.min and info.max <= hi:       # in range by its type (the golden
            return arr.astype(np.int64)             # model's large int8/int32 tensors)
    else:
        raise TypeError(f"{name} must {'be an integer' if arr.ndim == 0 else 'hold integers'}, "
                        f"got dtype {arr.dtype}{hint}")
    if bad is not None and bad.any():
        i = int(np.flatnonzero(bad)[0])
        x = arr.flat[i]
        x = x.item() if isinstance(x, np.generic) else x
        what = "be an integer" if arr.ndim == 0 else "hold integers"
        raise TypeError(f"{name} must {what}, got {x!r}{_index(arr.shape, i)} "
                        f"(dtype {arr.dtype}){hint}")
    if kind == "O":
        vals = [int(x) for x in arr.flat]
        oob = np.array([v < lo or v > hi for v in vals]).reshape(arr.shape)
    elif lo <= int(arr.min()) and int(arr.max()) <= hi:
        # two reductions, no temporaries; compared as Python ints, which is exact: a float
        # array compared with ``lo``/``hi`` directly would round them to its dtype (2**31 - 1
        # is 2**31 in float32, 2**63 - 1 is 2**63 in float64; float16 overflows)
        return arr.astype(np.int64)
    elif kind == "f":                               # (error path) exact, element by element
        oob = np.array([not lo <= int(x) <= hi for x in arr.flat]).reshape(arr.shape)
    else:
        oob = (arr < lo) | (arr > hi)
    if oob.any():
        i = int(np.flatnonzero(oob)[0])
        v = arr.flat[i]
        v = int(v) if kind in "iuO" else float(v)
        raise ValueError(f"{name} outside [{lo}, {hi}]: got {v}{_index(arr.shape, i)}")
    if kind == "O":
        return np.array(vals, np.int64).reshape(arr.shape)
    return arr.astype(np.int64)


def check_multipliers(name: str, value: npt.ArrayLike, *,
                      shape: tuple[int, ...] | None = None) -> np.ndarray:
    """Fixed-point multipliers (REQUANT's ``0..MULTIPLIER_MAX``, :class:`hw.isa.RequantBody`)
    as int64, checked by :func:`check_int_values` (its ``ValueError``/``TypeError``; the
    ``TypeError`` points to :func:`quantize_multipliers`)."""
    return check_int_values(name, value, 0, MULTIPLIER_MAX, shape=shape, hint=_HINT)


def check_shifts(name: str, value: npt.ArrayLike, *,
                 shape: tuple[int, ...] | None = None) -> np.ndarray:
    """Right shifts of the vector unit (``0..SHIFT_MAX``) as int64, checked as
    :func:`check_multipliers`."""
    return check_int_values(name, value, 0, SHIFT_MAX, shape=shape, hint=_HINT)


def _check_scales(scale: npt.ArrayLike, what: str = "scale") -> np.ndarray:
    """``scale`` as float64, or :class:`ScaleError` if any is negative or not finite."""
    s = np.asarray(scale, dtype=np.float64)
    if not np.all(np.isfinite(s)):
        raise ScaleError(f"{what}s must be finite, got {scale!r}")
    if np.any(s < 0):
        raise ScaleError(f"{what}s must be >= 0, got {scale!r}")
    return s


def tensor_scale(x: npt.ArrayLike) -> float:
    """Per-tensor symmetric scale ``max|x| / 127``.

    Parameters
    ----------
    x : array_like of float
        Any shape.

    Returns
    -------
    float
        The scale (real units per int8 step). An all-zero (or empty) tensor gets ``1.0`` so that
        the scale is always positive and usable as a divisor.

    Raises
    ------
    ScaleError
        If ``x`` holds a non-finite value (the scale would not be finite).
    """
    a = np.asarray(x, dtype=np.float64)
    m = float(np.max(np.abs(a))) if a.size else 0.0
    _check_scales(m, "tensor scale (max |x|)")
    return m / INT8_MAX if m > 0 else 1.0


def channel_scales(x: npt.ArrayLike, axis: int) -> np.ndarray:
    """Per-channel symmetric scales ``max|x| / 127`` over all axes but ``axis``.

    Parameters
    ----------
    x : array_like of float
        Any shape with at least one dimension.
    axis : int
        The channel axis (e.g. ``0`` for a PyTorch ``(out, in)`` weight, giving one scale per
        output channel).

    Returns
    -------
    numpy.ndarray
        float64, shape ``(x.shape[axis],)``. All-zero channels get ``1.0``.

    Raises
    ------
    ScaleError
        If a channel holds a non-finite value (its scale would not be finite).
    """
    a = np.asarray(x, dtype=np.float64)
    axis = axis % a.ndim
    other = tuple(i for i in range(a.ndim) if i != axis)
    m = np.max(np.abs(a), axis=other) if other else np.abs(a)
    _check_scales(m, "channel scale (max |x|)")
    return np.where(m > 0, m / INT8_MAX, 1.0)


def _broadcast_scale(scale: npt.ArrayLike, ndim: int, axis: int | None) -> np.ndarray:
    s = np.asarray(scale, dtype=np.float64)
    if s.ndim == 0 or axis is None:
        return s
    shape = [1] * ndim
    shape[axis % ndim] = s.shape[0]
    return s.reshape(shape)


def quantize(x: npt.ArrayLike, scale: npt.ArrayLike, axis: int | None = None) -> np.ndarray:
    """Quantize to int8: ``clamp(floor(x / scale + 1/2), -128, 127)``.

    Round to nearest with ties toward +infinity (the project's rounding rule, the same as the
    hardware's requantization). Values beyond the calibrated range saturate.

    Parameters
    ----------
    x : array_like of float
        Any shape.
    scale : float or array_like of float
        ``>= 0`` and finite. A scalar (per tensor) or a vector of length ``x.shape[axis]``
        (per channel). A zero scale quantizes values of 0 to 0 (an all-zero channel).
    axis : int, optional
        The channel axis when ``scale`` is a vector; default: the last axis.

    Returns
    -------
    numpy.ndarray
        int8, same shape as ``x``.

    Raises
    ------
    ScaleError
        If a scale is negative or not finite, or a non-zero value has a zero scale.
    """
    return _quantize(x, scale, axis, INT8_MIN, INT8_MAX)


def _quantize(x: npt.ArrayLike, scale: npt.ArrayLike, axis: int | None, lo: int,
              hi: int) -> np.ndarray:
    """``clamp(floor(x / scale + 1/2), lo, hi)`` as int8 (see :func:`quantize`)."""
    a = np.asarray(x, dtype=np.float64)
    s = _check_scales(scale)
    if s.ndim and axis is None:
        axis = -1
    s = _broadcast_scale(s, a.ndim, axis)
    zero = s == 0
    if np.any(zero & (a != 0)):
        raise ScaleError(f"a non-zero value cannot be quantized with a zero scale ({scale!r})")
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(zero, 0.0, np.floor(a / np.where(zero, 1.0, s) + 0.5))
    return np.clip(q, lo, hi).astype(np.int8)


def dequantize(q: npt.ArrayLike, scale: npt.ArrayLike, axis: int | None = None) -> np.ndarray:
    """Real value of quantized data: ``q * scale``.

    Parameters
    ----------
    q : array_like of int
        Any shape (int8 values, or int32 accumulators with ``scale`` = product of scales).
    scale : float or array_like of float
        ``>= 0`` and finite; scalar or per-channel vector along ``axis`` (default: the last
        axis).
    axis : int, optional
        Channel axis of a vector ``scale``.

    Returns
    -------
    numpy.ndarray
        float64, same shape as ``q``.

    Raises
    ------
    ScaleError
        If a scale is negative or not finite.
    """
    a = np.asarray(q, dtype=np.float64)
    s = _check_scales(scale)
    if s.ndim and axis is None:
        axis = -1
    return a * _broadcast_scale(s, a.ndim, axis)


def quantize_multiplier(real_multiplier: float) -> tuple[int, int]:
    """Fixed-point representation ``real ≈ multiplier / 2**shift`` of a real multiplier.

    Follows gemmlowp's ``QuantizeMultiplier`` (Jacob et al. 2018, §2.2): write
    ``real = f * 2**e`` with ``f`` in [0.5, 1), then ``multiplier = round(f * 2**31)`` (ties to
    +inf) in ``[2**30, 2**31)`` and ``shift = 31 - e``. If rounding gives ``2**31`` the result is
    renormalised to ``(2**30, shift - 1)``.

    Error bound: because ``multiplier >= 2**30`` and it is rounded to the nearest integer,
    ``|multiplier / 2**shift - real| <= 2**-(shift + 1)``, i.e. a relative error of at most
    ``2**-31`` (about 4.7e-10).

    Parameters
    ----------
    real_multiplier : float
        ``0`` or a value in about ``[2**-33, 2**31)`` (the range ``multiplier / 2**shift`` covers
        with ``shift`` in 0..63).

    Returns
    -------
    (multiplier, shift) : tuple of int
        ``multiplier`` in ``[2**30, 2**31)``, or ``0`` (with ``shift = 0``) for ``real == 0``;
        ``shift`` in ``0..63``.

    Raises
    ------
    ScaleError
        If ``real_multiplier`` is negative, not finite, too large (``shift`` would be negative)
        or too small to represent with ``shift <= 63``.
    """
    r = float(real_multiplier)
    if not math.isfinite(r):
        raise ScaleError(f"real multiplier must be finite, got {real_multiplier!r}")
    if r < 0:
        raise ScaleError(f"real multiplier must be >= 0, got {real_multiplier!r}")
    if r == 0:
        return 0, 0
    f, e = math.frexp(r)              # r = f * 2**e, 0.5 <= f < 1, exact
    m = math.floor(f * (1 << 31) + 0.5)  # f * 2**31 is exact in binary64
    shift = 31 - e
    if m == 1 << 31:
        m >>= 1
        shift -= 1
    if shift < 0:
        raise ScaleError(
            f"real multiplier {real_multiplier!r} is too large: needs shift {shift} < 0 "
            f"(representable maximum is (2**31 - 1) / 2**0)")
    if shift > SHIFT_MAX:
        raise ScaleError(
            f"real multiplier {real_multiplier!r} is too small: needs shift {shift} > "
            f"{SHIFT_MAX} (smallest representable value is 2**30 / 2**63 = 2**-33)")
    return m, shift


def quantize_multipliers(real_multipliers: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Vector form of :func:`quantize_multiplier`.

    Parameters
    ----------
    real_multipliers : array_like of float
        Shape ``(N,)``.

    Returns
    -------
    (multiplier, shift) : tuple of numpy.ndarray
        Both int64, shape ``(N,)``.

    Raises
    ------
    ScaleError
        As :func:`quantize_multiplier`, for the first bad element.
    """
    r = np.asarray(real_multipliers, dtype=np.float64).reshape(-1)
    pairs = [quantize_multiplier(float(v)) for v in r]
    mult = np.array([p[0] for p in pairs], dtype=np.int64)
    shift = np.array([p[1] for p in pairs], dtype=np.int64)
    return mult, shift


def check_int_array(name: str, value: npt.ArrayLike, lo: int, hi: int) -> np.ndarray:
    """:func:`check_int_values` for a large integer tensor of the golden model: an integer
    array whose dtype holds only values in ``[lo, hi]`` (int8 or int32 data in the int32
    range, ...) is returned as it is (no check, no copy, its dtype kept); anything else as
    :func:`check_int_values` returns it (int64), with its errors."""
    if isinstance(value, np.ndarray) and value.dtype.kind in "iu":
        info = np.iinfo(value.dtype)
        if lo <= info.min and info.max <= hi:
            return value
    return check_int_values(name, value, lo, hi)


def requantize(acc: npt.ArrayLike, bias: npt.ArrayLike, multiplier: npt.ArrayLike,
               shift: npt.ArrayLike, relu: bool = False) -> np.ndarray:
    """int32 accumulators to int8, exactly as the vector unit does (``RequantBody``).

    For every element, with per-channel parameters broadcast along the last axis::

        x = acc + bias                                  (33-bit, no wrap)
        y = (x * multiplier + (2**(shift-1) if shift else 0)) >> shift   (floor shift)
        out = clamp(y, -128, 127), then max(out, 0) if relu

    i.e. round to nearest with ties toward +infinity, saturation, optional ReLU.

    Exact for all int32 ``acc``/``bias``, ``multiplier`` in ``0..2**31-1`` and ``shift`` in
    ``0..63``: ``|x * multiplier| < 2**63`` but adding the rounding constant can exceed int64,
    so the int64 fast path is used only when a bound proves it cannot overflow; otherwise the
    arithmetic is done in Python integers (numpy ``dtype=object``).

    Parameters
    ----------
    acc : array_like of int
        int32 values, shape ``(..., N)``.
    bias : array_like of int
        int32 values, shape ``(N,)`` (or broadcastable to ``acc``).
    multiplier : array_like of int
        Values in ``0..2**31-1``, broadcastable to ``acc``.
    shift : array_like of int
        Values in ``0..63``, broadcastable to ``acc``.
    relu : bool
        Clamp negative outputs to zero.

    Returns
    -------
    numpy.ndarray
        int8, shape of ``acc`` broadcast with the parameters.

    Raises
    ------
    ValueError
        If a value is outside the ranges above.
    TypeError
        If a value is not an integer (a real multiplier such as 0.7 is not one:
        :func:`quantize_multipliers` makes them); integral floats (``3.0``) are taken
        (:func:`check_int_values`); if ``relu`` is not a bool.
    """
    if not isinstance(relu, (bool, np.bool_)):     # relu="no" was taken as true
        raise TypeError(f"relu must be a bool, not {relu!r}")
    a = check_int_array("acc", acc, INT32_MIN, INT32_MAX)
    b = check_int_array("bias", bias, INT32_MIN, INT32_MAX)
    m = check_multipliers("multiplier", multiplier)
    s = check_shifts("shift", shift)
    x = np.add(a, b, dtype=np.int64)  # |x| <= 2**32, exact in int64
    xmax = int(np.max(np.abs(x))) if x.size else 0
    mmax = int(m.max()) if m.size else 0
    smax = int(s.max()) if s.size else 0
    rmax = (1 << smax) >> 1
    if xmax * mmax + rmax < (1 << 63):
        rnd = np.where(s > 0, np.left_shift(np.int64(1), np.maximum(s - 1, 0)), 0)
        y = (x * m + rnd) >> s
    else:
        xo = x.astype(object)
        so = np.broadcast_to(s, np.broadcast_shapes(x.shape, s.shape)).astype(object)
        rnd = np.vectorize(lambda k: (1 << k) >> 1, otypes=[object])(so)
        y = (xo * m.astype(object) + rnd) >> so
        y = np.array([min(max(v, INT8_MIN), INT8_MAX) for v in y.ravel()],
                     dtype=np.int64).reshape(y.shape)
    y = np.minimum(np.maximum(y, INT8_MIN), INT8_MAX)      # np.clip, without its overhead
    if relu:
        y = np.maximum(y, 0)
    return y.astype(np.int8)


def sqnr_db(ref: npt.ArrayLike, test: npt.ArrayLike) -> float:
    """Signal-to-quantization-noise ratio ``10 log10(sum(ref**2) / sum((ref - test)**2))``.

    Parameters
    ----------
    ref, test : array_like of float
        Same shape; ``ref`` is the float reference, ``test`` the dequantized result.

    Returns
    -------
    float
        dB; ``inf`` if the two are identical.
    """
    r = np.asarray(ref, dtype=np.float64)
    t = np.asarray(test, dtype=np.float64)
    if r.shape != t.shape:
        raise ValueError(f"shapes differ: {r.shape} vs {t.shape}")
    noise = float(np.sum((r - t) ** 2))
    signal = float(np.sum(r ** 2))
    if noise == 0:
        return math.inf
    if signal == 0:
        return -math.inf
    return 10.0 * math.log10(signal / noise)


def cosine(ref: npt.ArrayLike, test: npt.ArrayLike) -> float:
    """Cosine similarity of the flattened arrays, ``<ref, test> / (|ref| |test|)``.

    Returns
    -------
    float
        In [-1, 1]; ``nan`` if either is all zero.
    """
    r = np.asarray(ref, dtype=np.float64).ravel()
    t = np.asarray(test, dtype=np.float64).ravel()
    if r.shape != t.shape:
        raise ValueError(f"shapes differ: {r.shape} vs {t.shape}")
    den = float(np.linalg.norm(r) * np.linalg.norm(t))
    return float(np.dot(r, t) / den) if den else math.nan
