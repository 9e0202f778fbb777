"""Numerics constants of the vector unit, shared by the hardware, the golden model and the
kernels (one definition each)."""

import math

__all__ = ["MX_BLOCK", "E8M0_BIAS", "E8M0_NAN", "MXINT8_FRAC_BITS", "MXINT8_MAX", "INT4_MIN",
           "INT4_MAX", "ROW_SCALE_SHIFT", "SOFTMAX_RECIP_BITS", "SOFTMAX_EXP_FRAC_BITS",
           "SOFTMAX_EXP_GUARD_BITS", "SOFTMAX_EXP_MAX_SHIFT", "softmax_exp_table",
           "ELTWISE_X_BITS", "ELTWISE_OUT_FRAC_BITS", "LN_MEAN_FRAC_BITS", "LN_NORM_FRAC_BITS",
           "LN_RECIP_SHIFT", "LN_VAR_BITS", "LN_MAX_ELEMS", "ln_norm_shift", "GELU_FRAC_BITS",
           "GELU_X_BITS", "GELU_TABLE_STEP_BITS", "GELU_TABLE_ENTRIES", "gelu_table"]

#: OCP MX v1.0 §5.1: elements per block sharing one scale (``k``); §5.2 Table 1: 32 for every
#: concrete format.
MX_BLOCK = 32
#: §5.4.1: an E8M0 scale byte ``x`` is ``2**(x - E8M0_BIAS)``, ``x`` in 0..254 ...
E8M0_BIAS = 127
#: ... and 0xFF is NaN.
E8M0_NAN = 0xFF
#: §5.3.4: an MXINT8 element ``q`` (8-bit two's complement) is worth ``q * 2**-6``.
MXINT8_FRAC_BITS = 6
#: Largest MXINT8 element magnitude a conversion emits (microxcaling clamps to +-127: -128 is
#: never produced, the range stays symmetric).
MXINT8_MAX = 127
#: Range of an int4 weight (signed 4-bit two's complement).
INT4_MIN = -8
INT4_MAX = 7

#: REQUANT ``flags.row_scale``: the row reciprocal ``r_i`` is a fixed-point value with this many
#: fractional bits after the multiplication (``x * r_i >> ROW_SCALE_SHIFT``).
ROW_SCALE_SHIFT = 16
#: SOFTMAX reciprocal: ``r_i = floor((2**SOFTMAX_RECIP_BITS + sum_i // 2) / sum_i)`` (0 if the
#: row sum is 0), so ``x * r_i >> ROW_SCALE_SHIFT ~= x / sum_i * 2**16``.
SOFTMAX_RECIP_BITS = 32
#: SOFTMAX exponent: fractional bits ``F`` of the base-2 exponent (a ``2**F``-entry table).
SOFTMAX_EXP_FRAC_BITS = 4
#: SOFTMAX exponent: guard bits ``G`` of the table entries (``127 * 2**G * 2**(-f / 2**F)``).
SOFTMAX_EXP_GUARD_BITS = 7
#: SOFTMAX exponent: integer parts ``q >= SOFTMAX_EXP_MAX_SHIFT`` give exactly 0.
SOFTMAX_EXP_MAX_SHIFT = 8


def softmax_exp_table(frac_bits: int = SOFTMAX_EXP_FRAC_BITS,
                      guard_bits: int = SOFTMAX_EXP_GUARD_BITS) -> list[int]:
    """The SOFTMAX exponent table: ``round(127 * 2**guard_bits * 2**(-f / 2**frac_bits))`` for
    ``f < 2**frac_bits`` (round half up). Entry 0 is ``127 << guard_bits``."""
    return [math.floor(127 * (1 << guard_bits) * 2.0 ** (-f / (1 << frac_bits)) + 0.5)
            for f in range(1 << frac_bits)]


# -- ADD and LAYERNORM (hw.isa.EltwiseBody)
#: Input stage of ADD and LAYERNORM: ``x = clamp(ra + rb)`` to this many signed bits, where
#: ``ra``, ``rb`` are the two rescaled int8 inputs.
ELTWISE_X_BITS = 16
#: ADD and the LAYERNORM output stage: the value before the last rounding carries this many
#: fraction bits of the int8 output step (``out = clamp((v + 2**(F - 1)) >> F, -128, 127)``).
ELTWISE_OUT_FRAC_BITS = 8
#: LAYERNORM: fraction bits ``P`` of the row mean ``mu = round(S * 2**P / N)``.
LN_MEAN_FRAC_BITS = 8
#: LAYERNORM: fraction bits of the normalised value ``t = (x - mean) / std * 2**F``.
LN_NORM_FRAC_BITS = 12
#: LAYERNORM: the row reciprocal is ``R = floor(N * 2**LN_RECIP_SHIFT / isqrt(D'))``.
LN_RECIP_SHIFT = 32
#: LAYERNORM: ``D = N * Q - S**2`` is normalised by an even shift to
#: ``D' in [2**(LN_VAR_BITS - 2), 2**LN_VAR_BITS)`` before its integer square root.
LN_VAR_BITS = 30
#: LAYERNORM: most elements per row (``n_blocks * cols``); more is ``BAD_SIZE``. Bounds the
#: row sums: ``|S| < 2**27``, ``Q < 2**42``, ``D < 2**54``.
LN_MAX_ELEMS = 4096


def ln_norm_shift(e: int) -> int:
    """LAYERNORM: right shift of the normalising pass ``t = (c * R + rnd) >> shift`` for the
    row's variance exponent ``e`` (``D = D' * 4**e``): ``LN_RECIP_SHIFT + LN_MEAN_FRAC_BITS + e
    - LN_NORM_FRAC_BITS`` (14 .. 41 for the ``D < 2**54`` of :data:`LN_MAX_ELEMS`)."""
    return LN_RECIP_SHIFT + LN_MEAN_FRAC_BITS + e - LN_NORM_FRAC_BITS


# -- GELU (REQUANT's body, opcode GELU) -----------------------------------------------------------
#: GELU: fraction bits of the fixed-point domain the first pass maps the accumulator into.
GELU_FRAC_BITS = 8
#: GELU: the first pass's result is clamped to this many signed bits (``|x| < 128`` real).
GELU_X_BITS = 16
#: GELU: the correction table is sampled every ``2**-GELU_TABLE_STEP_BITS`` (real units).
GELU_TABLE_STEP_BITS = 5
#: GELU: entries of the correction table (``u`` in ``[0, 4)``; beyond, the correction is 0:
#: ``4 * Phi(-4) < 1.3e-4``).
GELU_TABLE_ENTRIES = 4 << GELU_TABLE_STEP_BITS


def gelu_table(frac_bits: int = GELU_FRAC_BITS, step_bits: int = GELU_TABLE_STEP_BITS,
               entries: int = GELU_TABLE_ENTRIES) -> list[int]:
    """The GELU correction table: ``C[i] = round(2**frac_bits * u * Phi(-u))`` at
    ``u = i * 2**-step_bits`` (round half up), ``Phi`` the standard normal CDF.

    ``GELU(x) = x * Phi(x) = max(x, 0) - |x| * Phi(-|x|)``: the correction ``|x| Phi(-|x|)``
    is a bump (0 at 0, at most 0.17 near 0.75, below ``1.3e-4`` beyond 4), so a small table of
    it plus a ReLU gives GELU (the exact erf form of Hendrycks and Gimpel 2016). Entry 0 is 0;
    the largest (F = 8) is 44, so entries are 6 bits.
    """
    return [math.floor((1 << frac_bits) * u * 0.5 * math.erfc(u / math.sqrt(2)) + 0.5)
            for u in (i / (1 << step_bits) for i in range(entries))]
