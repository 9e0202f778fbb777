"""The linear kernel in every number format on the functional and performance models: bit-exact
with :func:`sw.golden.linear_formats`; int4 halves the weight bytes; the typed errors."""

import numpy as np
import pytest

from hw.config import NPUConfig
from hw.isa import ActFormat, WeightFormat
from sw.golden import linear_formats, matmul_formats, matmul_int
from sw.kernels.linear import Formats, linear_dram_bytes, linear_with_stats, plan_linear
from sw.model import ModelBackend
from sw.perf import PerfBackend
from sw.quant import quantize_multipliers
from sw.quant_formats import mx_alignment_base, quantize_mxint8
from sw.runtime import Device

CONFIGS = [NPUConfig(rows=4, cols=4, spad_rows=256, acc_rows=64, mx=1),
           NPUConfig(rows=8, cols=8, mx=1),
           NPUConfig(rows=4, cols=8, spad_rows=512, acc_rows=128, mx=1)]

#: (weights, activations)
COMBOS = [(WeightFormat.INT4, ActFormat.INT8), (WeightFormat.MXINT8, ActFormat.INT8),
          (WeightFormat.MXINT8, ActFormat.MXINT8), (WeightFormat.INT8, ActFormat.MXINT8),
          (WeightFormat.INT4, ActFormat.MXINT8)]


def operands(rng, cfg, m, k, n, wf, af):
    """Random quantized operands of a layer in formats ``wf``/``af`` (with the MX scales and
    base), its requantization parameters, and :class:`Formats`."""
    if af == ActFormat.MXINT8:
        a, a_exp = quantize_mxint8(rng.standard_normal((m, k))
                                   * np.exp2(rng.integers(-2, 3, (m, 1))), axis=1)
        a[rng.integers(0, m), :min(k, 32)] = 0              # an all-zero block
    else:
        a, a_exp = rng.integers(-128, 128, (m, k), dtype=np.int8), None
    if wf == WeightFormat.MXINT8:
        w, w_exp = quantize_mxint8(rng.standard_normal((k, n)) * 0.05
                                   * np.exp2(rng.integers(-4, 4, (1, n))), axis=0)
    elif wf == WeightFormat.INT4:
        w, w_exp = rng.integers(-8, 8, (k, n), dtype=np.int8), None
    else:
        w, w_exp = rng.integers(-128, 128, (k, n), dtype=np.int8), None
    mx = wf == WeightFormat.MXINT8 or af == ActFormat.MXINT8
    amax = 127 if af == ActFormat.MXINT8 else 128
    wmax = {WeightFormat.INT8: 128, WeightFormat.INT4: 8, WeightFormat.MXINT8: 127}[wf]
    x_base = mx_alignment_base(a_exp, w_exp, k=k, tile_k=cfg.rows, a_max=amax,
                               w_max=wmax) if mx else 0
    fmt = Formats(weights=wf, activations=af, w_exp=w_exp, a_exp=a_exp, x_base=x_base)
    # multipliers that map each column's accumulators onto about +-100 (unsaturated outputs)
    acc = matmul_formats(a, w, tile_k=cfg.rows, xa=a_exp if af else None,
                         xw=w_exp if wf == WeightFormat.MXINT8 else None,
                         x_base=x_base) if mx else matmul_int(a, w)
    peak = np.maximum(np.abs(acc).max(axis=0), 1)
    bias = (rng.integers(-20, 20, n) * peak / 100).astype(np.int64)
    mult, shift = quantize_multipliers(100 / peak)
    return a, w, bias, mult, shift, fmt


def golden(cfg, a, w, bias, mult, shift, fmt):
    return linear_formats(a, w, bias, mult, shift, tile_k=cfg.rows, weights=fmt.weights,
                          activations=fmt.activations, w_exp=fmt.w_exp, a_exp=fmt.a_exp,
                          x_base=fmt.x_base)


@pytest.mark.parametrize("cfg", CONFIGS, ids=[c.name for c in CONFIGS])
@pytest.mark.parametrize("combo", COMBOS, ids=[f"{w.name}-{a.name}" for w, a in COMBOS])
def test_linear_formats_on_the_model(cfg, combo):
    rng = np.random.default_rng(cfg.rows * 7 + cfg.cols + 31 * int(combo[0]) + int(combo[1]))
    dev = Device(ModelBackend(cfg), cfg)
    shapes = [(1, 70, 9), (37, 100, 20), (3, 33, 5), (20, 64, cfg.cols)]
    for m, k, n in shapes:
        a, w, bias, mult, shift, fmt = operands(rng, cfg, m, k, n, *combo)
        want = golden(cfg, a, w, bias, mult, shift, fmt)
        assert np.unique(want).size > min(8, want.size // 2), "saturated or constant"
        for db in (True, False):
            out, _ = linear_with_stats(dev, a, w, bias, mult, shift, double_buffer=db,
                                       formats=fmt)
            assert np.array_equal(out, want), (m, k, n, db)


def test_linear_formats_on_the_perf_model_tight_memories():
    """Small memories force K chunks and many M tiles (the MXINT8 activation layout per M
    tile, chunked weights of each format), on the performance model too."""
    cfg = NPUConfig(rows=4, cols=4, spad_rows=64, acc_rows=32, mx=1)
    rng = np.random.default_rng(5)
    for backend in (ModelBackend(cfg), PerfBackend(cfg)):
        dev = Device(backend, cfg)
        for combo in COMBOS:
            a, w, bias, mult, shift, fmt = operands(rng, cfg, 45, 150, 11, *combo)
            out, stats = linear_with_stats(dev, a, w, bias, mult, shift, formats=fmt)
            assert np.array_equal(out, golden(cfg, a, w, bias, mult, shift, fmt)), combo
            assert stats.plan.k_chunk < stats.plan.kb


def test_int4_on_odd_rows():
    """An odd ``rows``: the last packed row of each tile has a padding high nibble."""
    cfg = NPUConfig(rows=3, cols=5, spad_rows=128, acc_rows=64)
    rng = np.random.default_rng(9)
    for backend in (ModelBackend(cfg), PerfBackend(cfg)):
        dev = Device(backend, cfg)
        a, w, bias, mult, shift, fmt = operands(rng, cfg, 13, 40, 11, WeightFormat.INT4,
                                                ActFormat.INT8)
        out, stats = linear_with_stats(dev, a, w, bias, mult, shift, formats=fmt)
        assert np.array_equal(out, golden(cfg, a, w, bias, mult, shift, fmt))
        assert stats.plan.w_tile(cfg) == 2


def test_int4_halves_the_weight_traffic():
    cfg = NPUConfig()
    p8 = plan_linear(cfg, 1, 384, 1536, double_buffer=True)
    p4 = plan_linear(cfg, 1, 384, 1536, double_buffer=True, w_fmt=WeightFormat.INT4)
    b8, b4 = linear_dram_bytes(cfg, p8), linear_dram_bytes(cfg, p4)
    assert b8["w"] == 384 * 1536 and b4["w"] == 384 * 1536 // 2


def test_format_errors():
    cfg = NPUConfig(rows=4, cols=4, spad_rows=64, acc_rows=32)
    dev = Device(ModelBackend(cfg), cfg)
    a = np.zeros((2, 40), np.int8)
    w = np.zeros((40, 3), np.int8)
    p = (np.zeros(3, np.int64), np.zeros(3, np.int64), np.zeros(3, np.int64))
    with pytest.raises(ValueError, match="mx=0"):
        linear_with_stats(dev, a, w, *p, formats=Formats(weights=WeightFormat.MXINT8,
                                                        w_exp=np.zeros((2, 3), np.uint8)))
    with pytest.raises(ValueError, match="int4 weights must be in -8..7"):
        linear_with_stats(dev, a, w + 9, *p, formats=Formats(weights=WeightFormat.INT4))
    cfg = NPUConfig(rows=6, cols=4, mx=1)
    with pytest.raises(ValueError, match="must divide 32"):
        linear_with_stats(Device(ModelBackend(cfg), cfg), a, w, *p, formats=Formats(
            activations=ActFormat.MXINT8, a_exp=np.zeros((2, 2), np.uint8)))
    cfg = NPUConfig(rows=4, cols=4, mx=1)
    dev = Device(ModelBackend(cfg), cfg)
    with pytest.raises(ValueError, match=r"w_exp must have shape \(2, 3\)"):
        linear_with_stats(dev, a, w, *p, formats=Formats(weights=WeightFormat.MXINT8))
    with pytest.raises(ValueError, match="NaN"):
        linear_with_stats(dev, a, w, *p, formats=Formats(
            weights=WeightFormat.MXINT8, w_exp=np.full((2, 3), 255, np.uint8)))
