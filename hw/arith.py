"""Comparisons with constants that synthesize to LUTs, not carry chains.

Yosys maps ``$signed(v) > 127`` (any ``<``/``>`` with a constant) to an adder's carry chain as
wide as ``v``: on ECP5 one ``CCU2C`` (two LUT4s' worth) per two bits. The vector unit clamps
its lanes' 41- to 64-bit results this way several times per lane; 8x8, ``npu area --config
8x8 --no-pnr``: 1,753 of the vector unit's 4,695 ``CCU2C`` were such compares. A clamp to a
power-of-two range only needs to know whether the bits above the range are all equal to the
sign (OR and AND reductions, a LUT tree), which is what :func:`saturate` builds;
:func:`below` does the same for ``v < limit`` (the softmax exponent's range, the command
fetch's burst-length limits ``min(t, fetch_depth)`` of 32-bit distances); :func:`past_end`
does it for ``v + step > limit`` with powers of two (the command fetch's DRAM-range checks of a
ring slot and a fence address).
"""

from amaranth.hdl import Cat, Const, Mux, Value

__all__ = ["saturate", "below", "past_end"]


def saturate(v, bits: int) -> Value:
    """``clamp(v, -2**(bits - 1), 2**(bits - 1) - 1)`` of a signed value ``v``, as a
    ``signed(bits)`` value.

    ``v`` fits when its bits ``bits - 1`` up to its sign bit are all 0 or all 1; otherwise the
    result is the bound on ``v``'s side (the sign bit picks it). Equal to
    ``Mux(v > hi, hi, Mux(v < lo, lo, v))`` for every ``v``.

    Raises
    ------
    TypeError
        ``v`` is not a signed value (an unsigned value would need another bound).
    ValueError
        ``bits < 1``.
    """
    v = Value.cast(v)
    if not v.shape().signed:
        raise TypeError(f"saturate() needs a signed value, not {v.shape()!r}")
    if not isinstance(bits, int) or bits < 1:
        raise ValueError(f"bits must be a positive integer, not {bits!r}")
    if len(v) <= bits:                      # always fits: sign-extend
        return Cat(v, *([v[-1]] * (bits - len(v)))).as_signed()
    top = v[bits - 1:]
    sign = v[-1]
    bound = Cat(*([~sign] * (bits - 1)), sign)
    return Mux(top.all() | ~top.any(), v[:bits], bound).as_signed()


def below(v, limit: int) -> Value:
    """``v < limit`` of a value ``v`` (signed or unsigned) and a constant ``limit >= 1``: the
    sign, a reduction of ``v``'s bits from ``limit.bit_length()`` up and a compare of the low
    bits only.

    Raises
    ------
    ValueError
        ``limit < 1``.
    """
    v = Value.cast(v)
    if not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be a positive integer, not {limit!r}")
    if v.shape().signed:                    # negative: below; else the unsigned magnitude
        return v[-1] | below(v[:-1], limit) if len(v) > 1 else Const(1)    # -1 or 0
    k = limit.bit_length()
    if len(v) <= k:
        return v < limit
    return ~v[k:].any() & (v[:k] < limit)


def past_end(v, step: int, limit: int) -> Value:
    """``v + step > limit`` of an unsigned value ``v`` and powers of two ``1 <= step <=
    limit``: ``v`` has a bit at or above ``limit``'s, or lies in the last ``step - 1`` values
    below it (its bits from ``step``'s up to ``limit``'s all ones, a lower one set).

    Raises
    ------
    ValueError
        ``step`` or ``limit`` is not a power of two, or ``step > limit``, or ``v`` is signed.
    """
    v = Value.cast(v)
    if v.shape().signed:
        raise ValueError("past_end() needs an unsigned value")
    for name, x in (("step", step), ("limit", limit)):
        if not isinstance(x, int) or x < 1 or x & (x - 1):
            raise ValueError(f"{name} must be a power of two, not {x!r}")
    if step > limit:
        raise ValueError(f"step {step} is above limit {limit}")
    s, b = step.bit_length() - 1, limit.bit_length() - 1
    if s == b:
        return v.any()
    if len(v) < b:                          # v + step <= 2**(b - 1) - 1 + step < limit
        return Const(0)
    low = v[s:b].all() & v[:s].any() if s else Const(0)
    return v[b:].any() | low
