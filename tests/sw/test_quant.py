"""sw.quant: scales, rounding, fixed-point multipliers and exact requantization."""

import math
import re
import warnings

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


def test_requantize_relu_must_be_a_bool():
    """``relu="no"`` was taken as true (ReLU applied); a numpy bool is a bool."""
    assert requantize([-5], 0, 1 << 30, 30, relu=np.bool_(False)).tolist() == [-5]
    for bad in ("no", 0, None):
        with pytest.raises(TypeError, match="relu must be a bool"):
            requantize([-5], 0, 1 << 30, 30, relu=bad)


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


# -- checked scales ----------------------------------------------------------------------------

BAD_SCALES = [-1.0, -1e-300, math.nan, math.inf, -math.inf]


@pytest.mark.parametrize("bad", BAD_SCALES, ids=str)
def test_every_scale_helper_rejects_negative_and_non_finite(bad):
    from sw.quant import ScaleError, quantize_multipliers
    x = np.array([[0.5, -1.0], [2.0, 0.0]])
    calls = [
        lambda: quantize(x, bad),
        lambda: quantize(x, [1.0, bad], axis=1),
        lambda: dequantize(np.array([1, 2]), bad),
        lambda: dequantize(np.array([[1, 2]]), [bad, 1.0]),
        lambda: quantize_multiplier(bad),
        lambda: quantize_multipliers([0.25, bad]),
    ]
    if not bad < 0:                         # a scale computed from the data is never negative
        calls += [lambda: tensor_scale([1.0, bad]),
                  lambda: channel_scales(np.array([[1.0, bad], [2.0, 3.0]]), axis=0)]
    for call in calls:
        with pytest.raises(ScaleError) as info:
            call()
        assert isinstance(info.value, ValueError)   # and still a ValueError, as before


def test_zero_scale_is_legal():
    """A zero scale (a channel of all-zero weights) gives multiplier 0 (as gemmlowp), and
    quantizes zeros to zero; only a non-zero value with a zero scale is an error."""
    from sw.quant import ScaleError, quantize_multipliers
    assert quantize_multiplier(0.0) == (0, 0)
    assert quantize_multiplier(-0.0) == (0, 0)
    mult, shift = quantize_multipliers([0.0, 0.5, 0.0])
    assert mult.tolist() == [0, 1 << 30, 0] and shift.tolist() == [0, 31, 0]
    x = np.array([[0.0, 1.0], [0.0, -2.0]])          # channel 0 is all zero
    q = quantize(x, [0.0, 2 / 127], axis=1)
    assert q.tolist() == [[0, 64], [0, -127]]
    assert quantize(np.zeros(3), 0.0).tolist() == [0, 0, 0]
    assert dequantize(np.array([5, -3]), 0.0).tolist() == [0.0, 0.0]
    with pytest.raises(ScaleError, match="zero scale"):
        quantize(np.array([0.0, 1e-30]), 0.0)
    # all-zero data still gets the usable scale 1.0 (unchanged)
    assert tensor_scale(np.zeros(4)) == 1.0


def test_quantize_multiplier_renormalises_when_the_mantissa_rounds_to_2_31():
    """f * 2**31 rounds up to 2**31 just below a power of two: the result must be 2**30 with
    one less shift (the value ~1.0), never 2**30 with the old shift (0.5) or 2**31."""
    # 1 - 2**-40: f = 1 - 2**-40, e = 0, f * 2**31 = 2**31 - 2**-9 -> 2**31
    assert quantize_multiplier(1 - 2.0**-40) == (1 << 30, 30)
    m, s = quantize_multiplier(1 - 2.0**-40)
    assert m / 2**s == 1.0
    # the tie 2**31 - 1/2 rounds up (ties toward +inf): renormalised
    assert quantize_multiplier(1 - 2.0**-32) == (1 << 30, 30)
    # just below the tie: not renormalised, the largest multiplier
    assert quantize_multiplier(1 - 3 * 2.0**-33) == ((1 << 31) - 1, 31)
    assert quantize_multiplier(1 - 2.0**-31) == ((1 << 31) - 1, 31)
    # the same at other exponents
    assert quantize_multiplier(0.5 - 2.0**-45) == (1 << 30, 31)
    assert quantize_multiplier(2.0**20 * (1 - 2.0**-40)) == (1 << 30, 10)
    # at the top of the range the renormalised shift would be negative: rejected
    from sw.quant import ScaleError
    assert quantize_multiplier(2.0**31 - 1) == ((1 << 31) - 1, 0)
    with pytest.raises(ScaleError, match="too large"):
        quantize_multiplier(2.0**31 - 2.0**-22)


# -- the int32 accumulation bound ---------------------------------------------------------------

def test_accumulation_bound_is_exact():
    from sw.quant import MAX_EXACT_K, AccumulatorOverflowError, check_accumulation, max_exact_k
    assert MAX_EXACT_K == max_exact_k() == 131071
    assert MAX_EXACT_K * 128 * 128 <= 2**31 - 1 < (MAX_EXACT_K + 1) * 128 * 128
    assert max_exact_k(4, 8, 32) == (2**31 - 1) // (8 * 128) == 2097151   # int4 weights
    assert max_exact_k(8, 8, 16) == 1
    check_accumulation(MAX_EXACT_K)
    with pytest.raises(AccumulatorOverflowError, match="K=131072") as info:
        check_accumulation(MAX_EXACT_K + 1)
    assert isinstance(info.value, ValueError)


def test_golden_rejects_an_accumulation_that_could_wrap():
    """The largest K that is fine gives the exact sum (2**31 - 2**14 with every product
    2**14, one step below the wrap); one more is rejected by matmul_int and linear_int."""
    from sw.quant import AccumulatorOverflowError
    k = 131071
    a = np.full((1, k), -128, dtype=np.int8)
    w = np.full((k, 2), -128, dtype=np.int8)
    w[:, 1] = 127
    assert matmul_int(a, w).tolist() == [[k * 16384, -k * 16256]]
    assert matmul_int(a, w)[0, 0] == 2**31 - 2**14
    out = linear_int(a, w, np.zeros(2, np.int32), np.full(2, 1 << 30), np.full(2, 31 + 25))
    assert out.tolist() == [[32, -32]]      # a wrapped sum would give -32 in column 0
    a1 = np.full((1, k + 1), -128, dtype=np.int8)
    w1 = np.full((k + 1, 1), -128, dtype=np.int8)
    with pytest.raises(AccumulatorOverflowError):
        matmul_int(a1, w1)
    with pytest.raises(AccumulatorOverflowError):
        linear_int(a1, w1, np.zeros(1, np.int32), np.full(1, 1 << 30), np.full(1, 40))


# -- the renormalisation branch of the multiplier derivations, dense and by hand -----------------

#: Scales at and around every power of two the multipliers cover (2**-33 .. 2**30): the power
#: itself, the largest doubles below it (the mantissa rounds to 2**31: the renormalisation
#: branch), the last ones that do not round up, and the tie between them.
def _boundary_scales(lo: int = -33, hi: int = 31) -> list[float]:
    out = []
    for e in range(lo, hi):
        p = 2.0**e
        for rel in (0.0, 2.0**-53, 2.0**-45, 2.0**-40, 2.0**-33, 2.0**-32, 3 * 2.0**-33,
                    2.0**-31, 2.0**-30):
            out.append(p * (1 - rel) if p * (1 - rel) >= 2.0**-33 else p)
        out.append(p * (1 + 2.0**-52))
    return out


def test_quantize_multipliers_by_hand_at_the_boundary():
    """Hand-computed (multiplier, shift) through the vector form: ``r = f * 2**e`` with
    ``f`` in [0.5, 1), ``M = floor(f * 2**31 + 1/2)``, ``shift = 31 - e``; when ``M`` reaches
    2**31 the pair is ``(2**30, shift - 1)``."""
    from sw.quant import quantize_multipliers
    cases = [
        (1 - 2.0**-40, 1 << 30, 30),        # f*2**31 = 2**31 - 2**-9 -> 2**31: renormalised
        (0.5 - 2.0**-45, 1 << 30, 31),      # e = -1: 2**31 - 2**-13 -> 2**31: renormalised
        (1 - 2.0**-32, 1 << 30, 30),        # the tie 2**31 - 1/2 rounds up: renormalised
        (1 - 3 * 2.0**-33, (1 << 31) - 1, 31),  # 2**31 - 3/4 -> 2**31 - 1: not renormalised
        (2.0**-33 * (1 + 2.0**-52), 1 << 30, 63),   # the smallest representable
        (0.75, 3 << 29, 31),                 # f = 3/4, e = 0
        (6.0, 3 << 29, 28),                  # f = 3/4, e = 3
        (2.0**30 * (1 - 2.0**-45), 1 << 30, 0),     # renormalised to shift 0 (top of range)
    ]
    mult, shift = quantize_multipliers([c[0] for c in cases])
    assert list(zip(mult.tolist(), shift.tolist(), strict=True)) == [c[1:] for c in cases]


def test_quantize_multipliers_within_rounding_on_a_dense_set():
    """For every scale of a dense set (boundaries of every power of two, a log-uniform sweep):
    ``M`` in [2**30, 2**31), ``shift`` in 0..63 and ``|M / 2**shift - r| <= 2**-(shift + 1)``
    (rounding to the nearest integer multiple of ``2**-shift``), checked in exact rationals."""
    from fractions import Fraction

    from sw.quant import quantize_multipliers
    rng = np.random.default_rng(19)
    reals = _boundary_scales() + list(2.0 ** rng.uniform(-33, 31, 3000))
    reals = [r for r in reals if r < 2.0**31 - 1]
    mult, shift = quantize_multipliers(reals)
    for r, m, s in zip(reals, mult.tolist(), shift.tolist(), strict=True):
        assert (1 << 30) <= m < (1 << 31) and 0 <= s <= 63, (r, m, s)
        assert abs(Fraction(m, 1 << s) - Fraction(r)) <= Fraction(1, 1 << (s + 1)), (r, m, s)


def test_score_multiplier_renormalises_like_quantize_multiplier():
    """The SOFTMAX score multiplier (16-bit mantissa) has the same branch: a real multiplier
    just below a power of two rounds to 2**16 and must become ``(2**15, shift - 1)``."""
    import math
    from fractions import Fraction

    from hw.isa import SOFTMAX_EXP_FRAC_BITS
    from sw.models.attention_block import score_multiplier
    unit = math.log2(math.e) * (1 << SOFTMAX_EXP_FRAC_BITS) / math.sqrt(64)  # real per s_q*s_k
    # real = 1 - 2**-20: f * 2**16 = 2**16 - 2**-4 -> 2**16: (2**15, 15), the value 1.0
    assert score_multiplier((1 - 2.0**-20) / unit, 1.0, 64) == (1 << 15, 15)
    # real = 2**-4 * (1 - 2**-20): (2**15, 19)
    assert score_multiplier(2.0**-4 * (1 - 2.0**-20) / unit, 1.0, 64) == (1 << 15, 19)
    # real = 3/32: f = 3/4, e = -3: (3 * 2**14, 19)
    assert score_multiplier(3 / 32 / unit, 1.0, 64) == (3 << 14, 19)
    # real = 1 - 2**-16 (below the tie 2**16 - 1/2): the largest mantissa, not renormalised
    assert score_multiplier((1 - 2.0**-16) / unit, 1.0, 64) == ((1 << 16) - 1, 16)
    rng = np.random.default_rng(20)
    reals = _boundary_scales(-40, 16) + list(2.0 ** rng.uniform(-40, 16, 500))
    for real in reals:
        s_q = real / unit
        m, s = score_multiplier(s_q, 1.0, 64)
        # the real multiplier exactly as score_multiplier forms it (same float operations)
        r = Fraction(s_q * 1.0 * math.log2(math.e) * (1 << SOFTMAX_EXP_FRAC_BITS) / math.sqrt(64))
        assert (1 << 15) <= m < (1 << 16) and 0 <= s <= 63, (real, m, s)
        assert abs(Fraction(m, 1 << s) - r) <= Fraction(1, 1 << (s + 1)), (real, m, s)



_I64 = (-(1 << 63), (1 << 63) - 1)
_M = (0, (1 << 31) - 1)


@pytest.mark.parametrize("dtype, value, bounds, ok", [
    (np.float32, 2.0 ** 31, _M, False),             # 2**31 - 1 rounds to 2**31 in float32
    (np.float32, 2.0 ** 31 - 128, _M, True),        # the largest float32 below it
    (np.float32, -1.0, _M, False),
    (np.float64, 2.0 ** 63, _I64, False),           # 2**63 - 1 rounds to 2**63 in float64
    (np.float64, -(2.0 ** 63), _I64, True),
    (np.float64, 2.0 ** 63 - 1024, _I64, True),
    (np.float64, 2.0 ** 31, _M, False),
    (np.float16, 65504.0, _M, True),                 # float16's largest: no overflow warning
    (np.float16, 65504.0, (0, 63), False),
    (np.float16, -65504.0, (0, 63), False),
    (np.float16, 2048.0, (0, 2047), False),
    (np.float16, 64.0, (0, 63), False),
    (np.longdouble, 2.0 ** 63, _I64, False),
    (np.longdouble, 2.0 ** 31, _M, False),
])
def test_int_range_check_of_floats_is_exact(dtype, value, bounds, ok):
    """check_int_values compares a float array with its bounds exactly, whatever the array's
    precision: a bound the dtype cannot represent (2**31 - 1 in float32, 2**63 - 1 in float64)
    must not round onto the value just outside it, and no overflow warning escapes."""
    from sw.quant import check_int_values

    lo, hi = bounds
    arr = np.array([lo, lo, value], dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        if ok:
            out = check_int_values("x", arr, lo, hi)
            assert out.dtype == np.int64 and out.tolist() == [lo, lo, int(value)]
        else:
            with pytest.raises(ValueError, match=rf"x outside \[{lo}, {hi}\]: got "
                               rf"{re.escape(str(float(value)))} at index 2"):
                check_int_values("x", arr, lo, hi)


def test_float32_multiplier_of_2_31_is_refused_by_the_golden_model():
    """The trial's case: float32 2**31 (outside 0..2**31-1) was accepted by the golden model,
    which then disagreed with the device."""
    a = np.ones((2, 4), np.int8)
    w = np.ones((4, 8), np.int8)
    with pytest.raises(ValueError, match=r"outside \[0, 2147483647\]: got 2147483648"):
        linear_int(a, w, np.zeros(8, np.int32), np.full(8, 2 ** 31, np.float32), np.full(8, 40))
