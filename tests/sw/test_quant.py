"""sw.quant: scales, rounding, fixed-point multipliers and exact requantization."""

import math

import numpy as np
import pytest

from sw.golden import linear_int, matmul_int
from sw.quant import (
    channel_scales,
    cosine,
    dequantize,
    quantize,
    quantize_multiplier,
    requantize,
    sqnr_db,
    tensor_scale,
)


def naive_requant(x_acc: int, bias: int, mult: int, shift: int, relu: bool) -> int:
    """The RequantBody formula in plain Python integers."""
    x = x_acc + bias
    y = (x * mult + ((1 << (shift - 1)) if shift else 0)) >> shift
    y = min(max(y, -128), 127)
    return max(y, 0) if relu else y


def test_scales_and_quantize_round_trip():
    x = np.array([[-2.0, 1.0, 0.5], [4.0, -0.25, 0.0]])
    assert tensor_scale(x) == 4.0 / 127
    assert tensor_scale(np.zeros(3)) == 1.0
    np.testing.assert_allclose(channel_scales(x, axis=0), [2 / 127, 4 / 127])
    np.testing.assert_allclose(channel_scales(x, axis=1), [4 / 127, 1 / 127, 0.5 / 127])
    s = channel_scales(x, axis=0)
    q = quantize(x, s, axis=0)
    assert q.dtype == np.int8
    assert q[0, 0] == -127 and q[1, 0] == 127
    assert np.all(np.abs(dequantize(q, s, axis=0) - x) <= s[:, None] / 2 + 1e-12)


def test_quantize_ties_toward_plus_infinity_and_saturation():
    q = quantize(np.array([0.5, 1.5, -0.5, -1.5, 2.5, 1000.0, -1000.0]), 1.0)
    assert q.tolist() == [1, 2, 0, -1, 3, 127, -128]
    with pytest.raises(ValueError):
        quantize(np.ones(2), 0.0)


@pytest.mark.parametrize("real", [1e-9, 2.0**-33, 3e-5, 0.1, 0.3, 0.5, 0.999999999, 1.0,
                                  1.5, 12345.678, 2.0**31 - 1])
def test_quantize_multiplier_accuracy(real):
    m, s = quantize_multiplier(real)
    assert (1 << 30) <= m < (1 << 31) and 0 <= s <= 63
    assert abs(m / 2**s - real) <= 2.0 ** -(s + 1)
    assert abs(m / 2**s - real) / real <= 2.0**-31


def test_quantize_multiplier_random_accuracy():
    rng = np.random.default_rng(1)
    for real in 10.0 ** rng.uniform(-9, 9, 2000):
        m, s = quantize_multiplier(real)
        assert (1 << 30) <= m < (1 << 31) and 0 <= s <= 63
        assert abs(m / 2**s - real) / real <= 2.0**-31


def test_quantize_multiplier_edges():
    assert quantize_multiplier(0.0) == (0, 0)
    for bad in (-1e-3, math.inf, math.nan, 2.0**31, 2.0**-40):
        with pytest.raises(ValueError):
            quantize_multiplier(bad)


def test_requantize_matches_naive_random():
    rng = np.random.default_rng(2)
    n = 4000
    acc = rng.integers(-(1 << 31), 1 << 31, n)
    bias = rng.integers(-(1 << 31), 1 << 31, n)
    mult = rng.integers(0, 1 << 31, n)
    shift = rng.integers(0, 64, n)
    for relu in (False, True):
        got = requantize(acc, bias, mult, shift, relu=relu)
        want = [naive_requant(int(a), int(b), int(m), int(s), relu)
                for a, b, m, s in zip(acc, bias, mult, shift, strict=True)]
        assert got.tolist() == want


def test_requantize_small_values_ties_and_saturation():
    # With M = 2**30 and shift 31 the real multiplier is exactly 1/2: odd x are ties.
    x = np.arange(-300, 301)
    got = requantize(x, 0, 1 << 30, 31)
    want = [naive_requant(int(v), 0, 1 << 30, 31, False) for v in x]
    assert got.tolist() == want
    assert requantize(np.array([3, -3, 5, -5]), 0, 1 << 30, 31).tolist() == [2, -1, 3, -2]
    assert requantize(np.array([1000, -1000]), 0, 1 << 30, 30).tolist() == [127, -128]
    assert requantize(np.array([-5, 5]), 0, 1 << 30, 30, relu=True).tolist() == [0, 5]
    # shift 0: no rounding term.
    assert requantize(np.array([1, -1]), 0, 100, 0).tolist() == [100, -100]


def test_requantize_extremes_exact():
    lo, hi = -(1 << 31), (1 << 31) - 1
    cases = [(a, b, m, s) for a in (lo, hi, 0, -1) for b in (lo, hi, 0)
             for m in (0, 1, (1 << 31) - 1, 1 << 30) for s in (0, 1, 31, 32, 62, 63)]
    acc, bias, mult, shift = (np.array(v) for v in zip(*cases, strict=True))
    got = requantize(acc, bias, mult, shift)
    assert got.tolist() == [naive_requant(*c, False) for c in cases]
    with pytest.raises(ValueError):
        requantize(np.array([0]), 0, 1 << 31, 0)
    with pytest.raises(ValueError):
        requantize(np.array([0]), 0, 1, 64)


def test_golden_matmul_wraps_int32_and_linear():
    a = np.full((1, 70000), -128, dtype=np.int8)
    w = np.full((70000, 1), -128, dtype=np.int8)
    exact = 70000 * 128 * 128
    assert matmul_int(a, w)[0, 0] == ((exact + (1 << 31)) % (1 << 32)) - (1 << 31)
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, (5, 7), dtype=np.int8)
    w = rng.integers(-128, 128, (7, 3), dtype=np.int8)
    bias = np.array([1, -2, 3], dtype=np.int32)
    out = linear_int(a, w, bias, np.full(3, 1 << 30), np.full(3, 35), relu=False)
    acc = a.astype(np.int64) @ w.astype(np.int64) + bias
    want = [[naive_requant(int(v), 0, 1 << 30, 35, False) for v in row] for row in acc]
    assert out.tolist() == want


def test_metrics():
    ref = np.array([1.0, 2.0, 3.0])
    assert sqnr_db(ref, ref) == math.inf
    assert sqnr_db(ref, ref * 1.1) == pytest.approx(20.0)
    assert cosine(ref, 2 * ref) == pytest.approx(1.0)
    assert cosine(ref, -ref) == pytest.approx(-1.0)
