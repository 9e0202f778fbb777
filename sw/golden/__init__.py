"""Golden integer reference: what the hardware computes, bit for bit, in plain numpy.

Used by the functional model (:mod:`sw.model`) and by tests that compare the model and the RTL
against it. Every function states the exact integer semantics (widths, wrap, rounding).
"""

from sw.golden.core import (
    attention_head_int,
    exp2_int,
    linear_int,
    matmul_int,
    requantize_rows,
    round_shift,
    row_reciprocal,
    softmax_int,
)
from sw.golden.eltwise import (
    add_int,
    eltwise_input,
    layernorm_int,
    layernorm_row_constants,
)
from sw.golden.formats import linear_formats, matmul_formats, mx_align, mx_in_exact_range
from sw.golden.gelu import gelu_fixed, gelu_int

__all__ = ["matmul_int", "linear_int", "exp2_int", "softmax_int", "row_reciprocal",
           "requantize_rows", "attention_head_int", "mx_align", "matmul_formats",
           "mx_in_exact_range", "linear_formats", "round_shift", "eltwise_input", "add_int",
           "layernorm_row_constants", "layernorm_int", "gelu_fixed", "gelu_int"]
