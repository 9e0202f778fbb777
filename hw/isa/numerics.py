"""Numerics constants of the vector unit, shared by the hardware, the golden model and the
kernels (one definition each)."""

import math

__all__ = ["MX_BLOCK", "E8M0_BIAS", "E8M0_NAN", "MXINT8_FRAC_BITS", "MXINT8_MAX", "INT4_MIN",
           "INT4_MAX", "ROW_SCALE_SHIFT", "SOFTMAX_RECIP_BITS", "SOFTMAX_EXP_FRAC_BITS",
           "SOFTMAX_EXP_GUARD_BITS", "SOFTMAX_EXP_MAX_SHIFT", "softmax_exp_table"]

#: OCP MX v1.0 §5.1: elements per block sharing one scale (``k``, 32 for every concrete format).
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
