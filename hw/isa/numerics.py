"""Numerics constants of the vector unit, shared by the hardware, the golden model and the
kernels (one definition each)."""

import math

__all__ = ["ROW_SCALE_SHIFT", "SOFTMAX_RECIP_BITS", "SOFTMAX_EXP_FRAC_BITS",
           "SOFTMAX_EXP_GUARD_BITS", "SOFTMAX_EXP_MAX_SHIFT", "softmax_exp_table"]

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
