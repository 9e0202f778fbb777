"""Golden integer reference: what the hardware computes, bit for bit, in plain numpy.

Used by the functional model (:mod:`sw.model`) and by tests that compare the model and the RTL
against it. Every function states the exact integer semantics (widths, wrap, rounding).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from sw.quant import requantize

__all__ = ["matmul_int", "linear_int"]


def matmul_int(a: npt.ArrayLike, w: npt.ArrayLike) -> np.ndarray:
    """int8 x int8 matrix product with int32 accumulation and int32 wrap-around.

    The systolic array accumulates in 32-bit two's complement and wraps on overflow; since
    wrapping addition is associative, the result does not depend on the order of the K
    reduction or on how it is split into K passes (``flags.accumulate``).

    Parameters
    ----------
    a : array_like of int8
        Activations, shape ``(M, K)``.
    w : array_like of int8
        Weights, shape ``(K, N)``.

    Returns
    -------
    numpy.ndarray
        int32, shape ``(M, N)``: ``(a @ w) mod 2**32`` as a signed value.

    Raises
    ------
    ValueError
        If the shapes do not match or the dtypes are not int8.
    """
    a = np.asarray(a)
    w = np.asarray(w)
    if a.dtype != np.int8 or w.dtype != np.int8:
        raise ValueError(f"operands must be int8, got {a.dtype} and {w.dtype}")
    if a.ndim != 2 or w.ndim != 2 or a.shape[1] != w.shape[0]:
        raise ValueError(f"shapes do not match for a matmul: {a.shape} @ {w.shape}")
    # Exact in int64 for K < 2**49; the cast to int32 wraps modulo 2**32.
    return (a.astype(np.int64) @ w.astype(np.int64)).astype(np.int32)


def linear_int(a: npt.ArrayLike, w: npt.ArrayLike, bias: npt.ArrayLike,
               multiplier: npt.ArrayLike, shift: npt.ArrayLike,
               relu: bool = False) -> np.ndarray:
    """Quantized linear layer: :func:`matmul_int` then the vector unit's requantization.

    ``out = requantize(a @ w (int32 wrap), bias, multiplier, shift, relu)`` with the exact
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
    """
    acc = matmul_int(a, w)
    n = acc.shape[1]
    for name, v in (("bias", bias), ("multiplier", multiplier), ("shift", shift)):
        if np.shape(v) != (n,):
            raise ValueError(f"{name} must have shape ({n},), got {np.shape(v)}")
    return requantize(acc, bias, multiplier, shift, relu=relu)
