"""Number formats of the MATMUL operands: how a weight tile and an activation tile are laid out
in the scratchpad for each format, defined once for the hardware, the models, the timing and
the kernels.

Formats (fields ``w_fmt`` and ``a_fmt`` of :class:`hw.isa.MatmulBody`; 0 everywhere is the
original int8 x int8 MATMUL):

* :attr:`WeightFormat.INT8`: weight tile ``j`` is ``rows`` scratchpad rows, row ``k`` holding
  ``W[k, 0:cols]`` (int8).
* :attr:`WeightFormat.INT4`: two K rows per scratchpad row, ``ceil(rows / 2)`` rows per tile.
  Byte ``n`` of packed row ``r`` holds ``W[2r, n]`` in its low nibble and ``W[2r + 1, n]`` in
  its high nibble, each a signed 4-bit two's complement value (-8..7); with an odd ``rows``
  the last high nibble is not read. The packing order is defined by
  :func:`sw.quant_formats.pack_int4` (its one home); the matrix engine reads packed row
  ``k >> 1`` in the cycle it would read weight row ``k`` and takes nibble ``k & 1``, so the
  weight load takes the same cycles as for int8 and DRAM and the scratchpad hold half the
  bytes.
* :attr:`WeightFormat.MXINT8`: OCP Microscaling MXINT8 (OCP MX v1.0, §5.2 Table 1 and §5.3.4:
  8-bit two's complement elements with an implied scale of ``2**-6``; §5.4.1 the E8M0 shared
  scale): ``rows`` element rows as for int8, then one *exponent row* whose byte ``n`` is the
  E8M0 scale ``X[n]`` of column ``n`` for this tile (``rows + 1`` rows per tile).
* :attr:`ActFormat.MXINT8`: activations in MXINT8: before each group of ``G =
  spad_row_bytes`` activation rows of a tile (counted from the tile's first row) one exponent
  row whose byte ``b`` is the E8M0 scale of activation row ``g * G + b``; the tile is
  ``m + ceil(m / G)`` rows, exponent row first.

A MATMUL whose ``w_fmt`` or ``a_fmt`` is MXINT8 is an *MX command*. The MX block of the spec is
32 elements along K (§5.2 Table 1: ``k = 32``); a K tile of the array (``rows`` elements) must
lie in one block, which the kernels arrange (``32 % rows == 0``); the hardware itself only sees one
scale per tile. Alignment of the per-tile sums by their exponents (applied in the array's
exponent stage, :class:`hw.tile.SystolicArray`) is :func:`sw.golden.mx_align`: tile ``j``
adds ``align(P_j[i, n], xa_j[i] + xw_j[n] - x_base)`` to the accumulator, where ``P_j`` is the
exact int sum of the tile's products, ``xa`` the activation's E8M0 byte (127, i.e. ``2**0``,
for int8 activations), ``xw`` the weight's (127 for int8 and int4 weights).

MX commands exist only on configurations with ``NPUConfig.mx`` (the array's exponent stage);
elsewhere, and for the reserved ``w_fmt`` 3 and for ``flags.transpose`` with weights other than
int8, the MATMUL fails with ``BAD_SIZE`` (``error_addr`` 0).
"""

from __future__ import annotations

import enum

__all__ = ["WeightFormat", "ActFormat", "X_BASE_BITS", "is_mx", "format_error",
           "weight_tile_rows", "act_tile_rows", "act_row_offset", "act_exp_rows",
           "matmul_lead"]

#: Width of :class:`hw.isa.MatmulBody`'s ``x_base`` field (the MX alignment base, 0..1023).
X_BASE_BITS = 10


class WeightFormat(enum.IntEnum):
    """``w_fmt`` of a MATMUL: the format of its weight tiles."""
    INT8 = 0
    INT4 = 1
    MXINT8 = 2


class ActFormat(enum.IntEnum):
    """``a_fmt`` of a MATMUL: the format of its activation tiles."""
    INT8 = 0
    MXINT8 = 1


def is_mx(w_fmt: int, a_fmt: int) -> bool:
    """Whether a MATMUL with these formats is an MX command (exponent rows, the exponent stage)."""
    return w_fmt == WeightFormat.MXINT8 or a_fmt == ActFormat.MXINT8


def format_error(config, w_fmt: int, a_fmt: int, transpose: bool) -> bool:
    """Whether a MATMUL with these formats fails with ``BAD_SIZE`` on ``config``: the reserved
    ``w_fmt`` 3, an MX command without ``config.mx``, or ``transpose`` with weights that are not
    int8."""
    if w_fmt not in WeightFormat.__members__.values():
        return True
    if is_mx(w_fmt, a_fmt) and not config.mx:
        return True
    return bool(transpose) and w_fmt != WeightFormat.INT8


def weight_tile_rows(config, w_fmt: int) -> int:
    """Scratchpad rows of one weight tile: ``rows`` (int8), ``ceil(rows / 2)`` (int4), ``rows +
    1`` (MXINT8: the exponent row last)."""
    if w_fmt == WeightFormat.INT4:
        return (config.rows + 1) // 2
    if w_fmt == WeightFormat.MXINT8:
        return config.rows + 1
    return config.rows


def act_exp_rows(config, m: int, a_fmt: int) -> int:
    """Exponent rows of an activation tile of ``m`` rows: ``ceil(m / spad_row_bytes)`` for
    MXINT8, else 0."""
    if a_fmt != ActFormat.MXINT8:
        return 0
    g = config.spad_row_bytes
    return (m + g - 1) // g


def act_tile_rows(config, m: int, a_fmt: int) -> int:
    """Scratchpad rows of one activation tile of ``m`` rows: ``m``, plus
    :func:`act_exp_rows` for MXINT8."""
    return m + act_exp_rows(config, m, a_fmt)


def act_row_offset(config, i: int, a_fmt: int) -> int:
    """Offset of activation row ``i`` in its tile: ``i``, or ``i + i // G + 1`` for MXINT8 (an
    exponent row before each group of ``G = spad_row_bytes`` rows)."""
    if a_fmt != ActFormat.MXINT8:
        return i
    return i + i // config.spad_row_bytes + 1


def matmul_lead(w_fmt: int, a_fmt: int) -> int:
    """Cycles by which an MX command's activation stream starts later in each K tile than an
    int8 one's (1 for MX commands, else 0): the first activation row is read in issue cycle
    ``lead`` (an MXINT8 tile reads its first exponent row in cycle 0), so the weight swap is one
    cycle later and the weight exponent row, read after the ``rows`` weight rows, is still
    written in time for it (see :class:`hw.tile.SystolicArray`'s rules)."""
    return 1 if is_mx(w_fmt, a_fmt) else 0
