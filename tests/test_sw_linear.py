"""sw.kernels.linear on the functional model: bit-exact against sw.golden for awkward shapes,
tiling of M and K, errors."""

import numpy as np
import pytest

from hw.config import NPUConfig
from sw.golden import linear_int
from sw.kernels.linear import linear, linear_with_stats, plan_linear
from sw.model import ModelBackend
from sw.quant import quantize_multipliers
from sw.runtime import Device

DEFAULT = NPUConfig()
SMALL_ARRAY = NPUConfig(rows=4, cols=4)
TINY_SPAD = NPUConfig(rows=4, cols=4, spad_rows=64, acc_rows=16)
TINY_SPAD_8 = NPUConfig(spad_rows=64, acc_rows=16)


def operands(m: int, k: int, n: int, seed: int):
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    w = rng.integers(-128, 128, (k, n), dtype=np.int8)
    acc_std = 128 * 128 / 3 * np.sqrt(k)
    bias = rng.integers(-int(acc_std), int(acc_std) + 1, n).astype(np.int32)
    mult, shift = quantize_multipliers(50 / acc_std * rng.uniform(0.5, 2.0, n))
    return a, w, bias, mult, shift


CASES = [
    (DEFAULT, 1, 384, 9), (DEFAULT, 7, 33, 384), (DEFAULT, 33, 9, 8), (DEFAULT, 384, 8, 7),
    (DEFAULT, 9, 384, 33), (DEFAULT, 8, 1, 1),
    (SMALL_ARRAY, 1, 7, 9), (SMALL_ARRAY, 33, 384, 8), (SMALL_ARRAY, 384, 33, 7),
    (SMALL_ARRAY, 7, 9, 384), (SMALL_ARRAY, 9, 8, 33),
    (TINY_SPAD, 33, 384, 9), (TINY_SPAD_8, 33, 384, 9), (TINY_SPAD_8, 384, 7, 1),
]


@pytest.mark.parametrize(("config", "m", "k", "n"), CASES,
                         ids=[f"{c.name}-{m}x{k}x{n}" for c, m, k, n in CASES])
def test_linear_bit_exact(config, m, k, n):
    dev = Device(ModelBackend(config), config)
    a, w, bias, mult, shift = operands(m, k, n, seed=m * 1000 + k * 10 + n)
    relu = (m + n) % 2 == 1
    before = dev.memory_stats()
    out, stats = linear_with_stats(dev, a, w, bias, mult, shift, relu=relu)
    want = linear_int(a, w, bias, mult, shift, relu=relu)
    assert out.dtype == np.int8 and out.shape == (m, n)
    np.testing.assert_array_equal(out, want)
    assert np.mean(np.abs(want.astype(int)) < 127) > 0.05  # not everything saturated
    assert stats.macs == m * k * n and stats.cycles == 0 and stats.utilization is None
    assert stats.n_commands > 0
    assert dev.memory_stats() == before  # every buffer freed


def test_tiling_uses_several_m_tiles_and_k_chunks():
    p = plan_linear(TINY_SPAD, 33, 384, 9)
    assert p.m_tile < 33 and p.k_chunk < p.kb
    assert p.o_base + p.m_tile <= TINY_SPAD.spad_rows
    p = plan_linear(DEFAULT, 384, 384, 384)
    assert p.k_chunk == p.kb and p.m_tile < 384  # whole K resident, M tiled
    assert p.kb * 8 + p.kb * p.m_tile + p.m_tile <= DEFAULT.spad_rows


def test_linear_repeated_and_after_error_keeps_working():
    dev = Device(ModelBackend(TINY_SPAD_8), TINY_SPAD_8)
    for seed in range(3):
        a, w, bias, mult, shift = operands(10, 20, 12, seed)
        np.testing.assert_array_equal(linear(dev, a, w, bias, mult, shift),
                                      linear_int(a, w, bias, mult, shift))


def test_linear_rejects_bad_operands():
    dev = Device(ModelBackend(TINY_SPAD_8), TINY_SPAD_8)
    a, w, bias, mult, shift = operands(2, 3, 4, 0)
    with pytest.raises(ValueError, match="int8"):
        linear(dev, a.astype(np.int16), w, bias, mult, shift)
    with pytest.raises(ValueError, match="shapes"):
        linear(dev, a, w[:2], bias, mult, shift)
    with pytest.raises(ValueError, match="shift"):
        linear(dev, a, w, bias, mult, shift + 64)
