"""Number formats: int4 packing, the MXINT8 quantizer (hand vectors from OCP MX v1.0 §5.3.4,
§5.4.1, §6.3 with microxcaling's choices), the MX alignment and dot product of the golden model."""

from fractions import Fraction

import numpy as np
import pytest

from sw.golden import matmul_formats, matmul_int, mx_align, mx_in_exact_range
from sw.quant_formats import (
    dequantize_mxint8,
    int4_channel_scales,
    mx_alignment_base,
    mx_shared_exponents,
    pack_int4,
    quantize_int4,
    quantize_mxint8,
    unpack_int4,
)


def _block(*values: float) -> np.ndarray:
    """One MX block of 32 float32 values, the rest zero."""
    out = np.zeros(32, np.float32)
    out[:len(values)] = values
    return out


# -- int4 ------------------------------------------------------------------------------------

def test_int4_nibble_order_by_hand():
    # row 2r in the low nibble, row 2r + 1 in the high nibble, two's complement
    w = np.array([[-8, 7, 1], [3, -1, -2], [5, 0, -7]])
    packed = pack_int4(w)
    assert packed.dtype == np.uint8
    assert packed.tolist() == [[0x38, 0xF7, 0xE1], [0x05, 0x00, 0x09]]
    assert np.array_equal(unpack_int4(packed, 3), w)


def test_int4_round_trip_and_range():
    rng = np.random.default_rng(1)
    for k in (1, 2, 7, 16):
        w = rng.integers(-8, 8, (k, 5))
        assert np.array_equal(unpack_int4(pack_int4(w), k), w)
    with pytest.raises(ValueError, match="-8..7"):
        pack_int4(np.array([[8]]))
    with pytest.raises(ValueError, match="fewer"):
        unpack_int4(np.zeros((1, 2), np.uint8), 3)


def test_int4_quantizer_by_hand():
    x = np.array([[0.7, -0.7, 0.05, -0.05, 0.15, 1.0]]).T     # one channel of max 1.0
    s = int4_channel_scales(x, axis=1)
    assert s == pytest.approx([1 / 7])
    # 0.7 * 7 = 4.9 -> 5; 0.05 * 7 = 0.35 -> 0; 0.15 * 7 = 1.05 -> 1; ties toward +inf:
    q = quantize_int4(x, s, axis=1)
    assert q[:, 0].tolist() == [5, -5, 0, 0, 1, 7]
    tie = quantize_int4(np.array([0.5, -0.5, -1.5, 9.0, -9.0]), 1.0)
    assert tie.tolist() == [1, 0, -1, 7, -8]


# -- MXINT8 quantizer: hand vectors -----------------------------------------------------------

def test_mx_rounding_ties_away_from_zero():
    # max 1.0 -> X = 2**0 (byte 127); element = round(v * 64), ties away from zero
    # (microxcaling "nearest"): 0.5 -> 1 (even: 0), 1.5 -> 2, -2.5 -> -3 (even: -2, half up: -2)
    q, x = quantize_mxint8(_block(1.0, 1 / 128, -1 / 128, 3 / 128, -5 / 128, 0.3, -0.3))
    assert x.tolist() == [127]
    # 0.3 * 64 = 19.2 -> 19 (as float32: 19.200000762...)
    assert q[:7].tolist() == [64, 1, -1, 2, -3, 19, -19]


def test_mx_saturation_never_minus_128():
    # floor(log2(1.999)) = 0: 1.999 * 64 = 127.94 -> 128 saturates to 127; -128 is never emitted
    q, x = quantize_mxint8(_block(1.999, -1.999, -1.9921875))
    assert x.tolist() == [127]
    assert q[:3].tolist() == [127, -127, -127]
    # a power of two is its own exponent: max 2.0 -> X = 2**1, 2.0 -> 64, 1.0 -> 32
    q, x = quantize_mxint8(_block(2.0, 1.0, -0.75))
    assert x.tolist() == [128] and q[:3].tolist() == [64, 32, -24]


def test_mx_zero_blocks_and_negative_zero():
    # an all-zero block (either sign) takes FP32's min-normal exponent -126 (byte 1)
    for z in (0.0, -0.0):
        q, x = quantize_mxint8(np.full(32, z, np.float32))
        assert x.tolist() == [1] and not q.any()
    q, x = quantize_mxint8(_block(-0.0, 0.25))
    assert x.tolist() == [125] and q[:2].tolist() == [0, 64]


def test_mx_exponent_limits():
    # largest finite block: 1.5 * 2**127 -> X = 2**127 (byte 254), element 1.5 * 64 = 96
    q, x = quantize_mxint8(_block(1.5 * 2.0 ** 127, -(2.0 ** 120)))
    assert x.tolist() == [254] and q[:2].tolist() == [96, -1]    # 2**-7 * 64 = 0.5 -> -1
    # 2**-127 (FP32 subnormal): X = 2**-127 (byte 0), element 64
    q, x = quantize_mxint8(_block(2.0 ** -127))
    assert x.tolist() == [0] and q[0] == 64
    # below 2**-127 the exponent clamps at -127: 2**-130 -> 2**-3 * 64 = 8; 2**-149 -> 0
    q, x = quantize_mxint8(_block(2.0 ** -130, 2.0 ** -149, -(2.0 ** -136)))
    assert x.tolist() == [0] and q[:3].tolist() == [8, 0, 0]     # -2**-9*64 = -0.125 -> 0


def test_mx_nan_scale():
    q, x = quantize_mxint8(np.stack([_block(np.inf, 1.0), _block(np.nan), _block(1.0)]), axis=1)
    assert x[:, 0].tolist() == [255, 255, 127]
    assert not q[:2].any()
    v = dequantize_mxint8(q, x, axis=1)
    assert np.isnan(v[:2]).all() and v[2, 0] == 1.0


def test_mx_blocks_along_axis_and_short_last_block():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((40, 3)).astype(np.float32)
    q, x = quantize_mxint8(a, axis=0)
    assert q.shape == (40, 3) and x.shape == (2, 3)
    qt, xt = quantize_mxint8(a.T, axis=1)
    assert np.array_equal(qt.T, q) and np.array_equal(xt.T, x)
    assert np.array_equal(x[1], mx_shared_exponents(a[32:], axis=0)[0])
    # dequantized error within half an element step of each block
    step = np.exp2(x.astype(np.float64) - 127 - 6)
    err = np.abs(dequantize_mxint8(q, x, axis=0) - a)
    assert np.all(err <= np.repeat(step, 32, axis=0)[:40] / 2 + 1e-30)


# -- alignment and the dot product ---------------------------------------------------------------

def test_mx_align_by_hand():
    assert mx_align(11, 7) == 1408
    assert mx_align(5, -1) == 3          # 2.5 -> 3
    assert mx_align(-5, -1) == -2        # -2.5 -> -2 (ties toward +inf)
    assert mx_align(3, -2) == 1          # 0.75 -> 1
    assert mx_align(-3, -2) == -1
    assert mx_align(1, 31) == -(2 ** 31)  # wraps as the int32 accumulator
    assert mx_align(1, 32) == 0 and mx_align(5, 900) == 0
    assert mx_align(2 ** 20 - 1, -21) == 0 and mx_align(-(2 ** 20), -21) == 0
    assert mx_align(2 ** 19, -20) == 1


def test_matmul_formats_by_hand():
    # one block: a = [1, 2], w = [3, 4]; 2**(127 + 130 - 250) = 2**7: (1*3 + 2*4) * 128
    a = np.array([[1, 2]], np.int8)
    w = np.array([[3], [4]], np.int8)
    out = matmul_formats(a, w, tile_k=8, xa=[[127]], xw=[[130]], x_base=250)
    assert out.tolist() == [[1408]]
    # two blocks (K = 33): the second (x 2**-1) rounds 5 / 2 half up to 3
    a = np.zeros((1, 33), np.int8)
    a[0, 0], a[0, 32] = 1, 5
    w = np.ones((33, 1), np.int8)
    out = matmul_formats(a, w, tile_k=4, xa=[[127, 126]], xw=[[127], [127]], x_base=254)
    assert out.tolist() == [[1 + 3]]
    # int8 operands (no scales) with x_base = 254 are the plain product
    rng = np.random.default_rng(3)
    a8 = rng.integers(-128, 128, (3, 20), dtype=np.int8)
    w8 = rng.integers(-128, 128, (20, 4), dtype=np.int8)
    assert np.array_equal(matmul_formats(a8, w8, tile_k=8, x_base=254), matmul_int(a8, w8))


def _exact(qa, xa, qw, xw) -> np.ndarray:
    """The real dot product of dequantized MX operands, as Fractions (exact)."""
    m, k = qa.shape
    n = qw.shape[1]
    out = np.empty((m, n), object)
    for i in range(m):
        for j in range(n):
            out[i, j] = sum(Fraction(int(qa[i, t]) * int(qw[t, j]))
                            * Fraction(2) ** (int(xa[i, t // 32]) + int(xw[t // 32, j]) - 266)
                            for t in range(k))
    return out


@pytest.mark.parametrize("tile_k", [4, 8, 32])
def test_mx_dot_product_exact_in_range(tile_k):
    rng = np.random.default_rng(tile_k)
    k = 70                                    # not a multiple of the block
    a = rng.standard_normal((4, k)) * np.exp2(rng.integers(-3, 3, (4, 1)))
    w = rng.standard_normal((k, 3)) * 0.05
    w[32:64] = 0                              # an all-zero block of weights
    qa, xa = quantize_mxint8(a, axis=1)
    qw, xw = quantize_mxint8(w, axis=0)
    xb = mx_alignment_base(xa, xw, k=k, tile_k=tile_k)
    out = matmul_formats(qa, qw, tile_k=tile_k, xa=xa, xw=xw, x_base=xb)
    exact = _exact(qa, xa, qw, xw)
    assert mx_in_exact_range(qa, qw, tile_k=tile_k, xa=xa, xw=xw, x_base=xb)
    scale = Fraction(2) ** (xb - 266)
    assert all(Fraction(int(v)) * scale == e for v, e in zip(out.ravel(), exact.ravel(),
                                                             strict=True))


def test_mx_alignment_base_never_wraps_at_the_limits():
    # every element at its largest magnitude, exponents at both ends of the E8M0 range
    k = 96
    qa = np.full((2, k), 127, np.int8)
    qa[1] = -127
    qw = np.full((k, 2), 127, np.int8)
    xa = np.array([[254, 0, 254], [0, 254, 0]])
    xw = np.array([[254, 0], [0, 254], [254, 254]])
    for tile_k in (4, 8):
        xb = mx_alignment_base(xa, xw, k=k, tile_k=tile_k)
        out = matmul_formats(qa, qw, tile_k=tile_k, xa=xa, xw=xw, x_base=xb)
        # no wrap: the outputs with exponent sums of 508 keep the sign of their exact value
        # and a large magnitude; (1, 0) has only sums of 254, 254 exponents below: rounds to 0
        assert out[0, 0] > 2 ** 29 and out[0, 1] > 2 ** 28 and out[1, 1] < -(2 ** 28)
        assert out[1, 0] == 0
        assert not mx_in_exact_range(qa, qw, tile_k=tile_k, xa=xa, xw=xw, x_base=xb)
        # one base lower can wrap (the choice is the smallest safe one)
        worst = matmul_formats(qa, qw, tile_k=tile_k, xa=xa, xw=xw, x_base=xb - 1)
        assert (worst[0] < 0).any() or (worst[1] > 0).any()


def test_nan_scale_refused():
    with pytest.raises(ValueError, match="NaN"):
        matmul_formats(np.zeros((1, 32), np.int8), np.zeros((32, 1), np.int8), tile_k=8,
                       xa=[[255]], x_base=254)
