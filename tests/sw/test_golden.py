"""The golden model's integer parameters (biases, multipliers, shifts, integer tensors) go
through the kernels' checks (:func:`sw.quant.check_int_values`): a non-integral float is
refused with ``TypeError`` (a real multiplier 0.7 had become 0, a shift 30.9 30), a value
outside its range with ``ValueError``; integral floats (``3.0``) give the integers' result."""

import numpy as np
import pytest

from hw.isa import LN_MAX_ELEMS, WeightFormat
from sw import golden
from sw.quant import requantize

_R = np.random.default_rng(3)
_I32 = (-(1 << 31), (1 << 31) - 1)
_MULT = (0, (1 << 31) - 1)
_SHIFT = (0, 63)
_I8 = (-128, 127)
_INT64 = (None, None)       # no range of its own: only integrality is checked here


def _ints(lo, hi, shape):
    return _R.integers(lo, hi + 1, shape)


_N = 8
_ACC = _ints(-(1 << 20), 1 << 20, (4, _N))
_BIAS = _ints(-1000, 1000, _N)
_MULTS = _ints(1 << 30, 1 << 31, _N) >> 8
_SHIFTS = _ints(20, 40, _N)
_A8, _W8 = _ints(-128, 127, (4, 32)), _ints(-128, 127, (32, _N))
_XA, _XW = _ints(120, 135, (4, 1)), _ints(120, 135, (1, _N))

#: (function, keyword arguments of a valid call, {integer parameter: (lo, hi)})
CASES = [
    (requantize, {"acc": _ACC, "bias": _BIAS, "multiplier": _MULTS, "shift": _SHIFTS},
     {"acc": _I32, "bias": _I32, "multiplier": _MULT, "shift": _SHIFT}),
    (golden.linear_int, {"a": _A8.astype(np.int8), "w": _W8.astype(np.int8), "bias": _BIAS,
                         "multiplier": _MULTS, "shift": _SHIFTS},
     {"bias": _I32, "multiplier": _MULT, "shift": _SHIFT}),
    (golden.exp2_int, {"n": _ints(0, 5000, 20)}, {"n": (0, None)}),
    (golden.row_reciprocal, {"sums": _ints(0, 5000, 20)}, {"sums": (0, None)}),
    (golden.softmax_int, {"scores": _ACC, "mult": 40000, "shift": 20, "kv_len": 6,
                          "causal": True, "q_offset": 2},
     {"scores": _I32, "mult": (0, 65535), "shift": _SHIFT, "kv_len": (0, 65535),
      "q_offset": (0, (1 << 31) - 1)}),
    (golden.requantize_rows, {"acc": _ACC, "recip": _ints(0, 1 << 25, 4), "bias": _BIAS,
                              "multiplier": _MULTS, "shift": _SHIFTS},
     {"acc": _I32, "recip": _MULT, "bias": _I32, "multiplier": _MULT, "shift": _SHIFT}),
    (golden.attention_head_int,
     {"q": _A8[:, :8].astype(np.int8), "k": _A8[:, 8:16].astype(np.int8),
      "v": _A8[:, 16:24].astype(np.int8), "score_mult": 40000, "score_shift": 16,
      "out_mult": _MULTS, "out_shift": _SHIFTS - 8, "kv_len": 3},
     {"score_mult": (0, 65535), "score_shift": _SHIFT, "out_mult": _MULT, "out_shift": _SHIFT,
      "kv_len": (0, 4)}),
    (golden.round_shift, {"p": _ACC, "shift": _SHIFTS},
     {"p": (-(1 << 62) + 1, (1 << 62) - 1), "shift": (0, 62)}),
    (golden.eltwise_input, {"a": _A8, "b": _A8[::-1], "ma": _ints(0, 1 << 20, 32),
                            "mb": _ints(0, 1 << 20, 32), "shift": 12},
     {"a": _I8, "b": _I8, "ma": _MULT, "mb": _MULT, "shift": _SHIFT}),
    (golden.add_int, {"a": _A8, "b": _A8[::-1], "ma": _ints(0, 1 << 20, 32),
                      "mb": _ints(0, 1 << 20, 32), "shift": 12},
     {"a": _I8, "b": _I8, "ma": _MULT, "mb": _MULT, "shift": _SHIFT}),
    (golden.layernorm_row_constants, {"s": -12345, "q": 10**9, "n": 384},
     {"s": _INT64, "q": (0, None), "n": (1, LN_MAX_ELEMS)}),
    (golden.layernorm_int, {"a": _A8, "b": _A8[::-1], "ma": _ints(0, 1 << 12, 32),
                            "mb": _ints(0, 1 << 12, 32), "shift": 4,
                            "gamma": _ints(-(1 << 20), 1 << 20, 32), "beta": _ints(-999, 999, 32),
                            "g_shift": 20},
     {"a": _I8, "b": _I8, "ma": _MULT, "mb": _MULT, "shift": _SHIFT,
      "gamma": (-(1 << 31) + 1, (1 << 31) - 1), "beta": _I32, "g_shift": _SHIFT}),
    (golden.gelu_fixed, {"y": _ints(-(1 << 15), (1 << 15) - 1, 50)},
     {"y": (-(1 << 15), (1 << 15) - 1)}),
    (golden.gelu_int, {"acc": _ACC, "bias": _BIAS, "m1": _MULTS, "s1": _SHIFTS - 8,
                       "m2": _MULTS, "s2": _SHIFTS},
     {"acc": _I32, "bias": _I32, "m1": _MULT, "s1": _SHIFT, "m2": _MULT, "s2": _SHIFT}),
    (golden.mx_align, {"p": _ACC, "d": _ints(-40, 40, (4, _N))},
     {"p": (-(1 << 21) + 1, (1 << 21) - 1), "d": _INT64}),
    (golden.matmul_formats, {"a": _A8, "w": _W8, "tile_k": 8, "xa": _XA, "xw": _XW,
                             "x_base": 250},
     {"a": _I8, "w": _I8, "xa": (0, 255), "xw": (0, 255), "x_base": (0, 1023)}),
    (golden.mx_in_exact_range, {"a": _A8, "w": _W8, "tile_k": 8, "xa": _XA, "xw": _XW,
                                "x_base": 250},
     {"a": _I8, "w": _I8, "xa": (0, 255), "xw": (0, 255), "x_base": (0, 1023)}),
    (golden.linear_formats, {"a": _A8, "w": _W8, "bias": _BIAS, "multiplier": _MULTS,
                             "shift": _SHIFTS, "tile_k": 8, "weights": WeightFormat.MXINT8,
                             "w_exp": _XW, "x_base": 250},
     {"bias": _I32, "multiplier": _MULT, "shift": _SHIFT, "w_exp": (0, 255),
      "x_base": (0, 1023)}),
]

_IDS = [f.__name__ for f, _, _ in CASES]
_PARAMS = [(f, kw, name, rng) for f, kw, ranges in CASES for name, rng in ranges.items()]
_PARAM_IDS = [f"{f.__name__}-{name}" for f, _, name, _ in _PARAMS]


def _with(value, x):
    """``value`` (a scalar or an array) with its first element replaced by ``x`` (a float64
    array if ``x`` is a float, else int64)."""
    if np.ndim(value) == 0:
        return x
    arr = np.array(value, dtype=np.float64 if isinstance(x, float) else np.int64)
    arr.flat[0] = x
    return arr


def _as_float(value):
    return float(value) if np.ndim(value) == 0 else np.asarray(value, np.float64)


@pytest.mark.parametrize("fn, kw, ranges", CASES, ids=_IDS)
def test_valid_calls_run(fn, kw, ranges):
    """The table's calls are valid (so that each refusal below is the parameter's)."""
    fn(**kw)


@pytest.mark.parametrize("fn, kw, name, rng", _PARAMS, ids=_PARAM_IDS)
def test_a_non_integral_float_is_refused(fn, kw, name, rng):
    v = kw[name]
    first = v if np.ndim(v) == 0 else np.asarray(v).flat[0]
    bad = float(first) + (0.5 if rng[1] is None or first < rng[1] else -0.5)
    with pytest.raises(TypeError, match=rf"^{name} must (be an integer|hold integers), got "
                       rf"{bad!r}"):
        fn(**{**kw, name: _with(v, bad)})


@pytest.mark.parametrize("fn, kw, name, rng", [p for p in _PARAMS if p[3] != _INT64],
                         ids=[i for i, p in zip(_PARAM_IDS, _PARAMS, strict=True)
                              if p[3] != _INT64])
def test_a_value_outside_its_range_is_refused(fn, kw, name, rng):
    lo, hi = rng
    for bad in (lo - 1 if lo is not None else None, hi + 1 if hi is not None else None):
        if bad is None:
            continue
        shown = rf"\[{lo}, {hi if hi is not None else 2**63 - 1}\]"
        with pytest.raises(ValueError, match=rf"^{name} outside {shown}: got {bad}"):
            fn(**{**kw, name: _with(kw[name], bad)})


@pytest.mark.parametrize("fn, kw, ranges", CASES, ids=_IDS)
def test_integral_floats_give_the_integers_result(fn, kw, ranges):
    want = fn(**kw)
    got = fn(**{**kw, **{name: _as_float(kw[name]) for name in ranges}})
    for w, g in zip(want if isinstance(want, tuple) else (want,),
                    got if isinstance(got, tuple) else (got,), strict=True):
        assert np.asarray(g).dtype == np.asarray(w).dtype
        np.testing.assert_array_equal(g, w)


def test_a_real_multiplier_is_refused_with_the_way_to_make_one():
    """``multiplier=0.7`` ran as 0 (every output 0)."""
    with pytest.raises(TypeError, match="multiplier must be an integer, got 0.7 .*"
                       "quantize_multipliers"):
        requantize(_ACC, 0, 0.7, 0)
