"""``hw.arith``: :func:`saturate` equals the two-compare clamp, :func:`below` the compare
with a constant and :func:`past_end` ``v + step > limit``, for every boundary and its
neighbours and random values of every size, in Amaranth's simulator."""

import numpy as np
import pytest
from amaranth.hdl import Module, Signal, signed, unsigned
from amaranth.sim import Simulator

from hw.arith import below, past_end, saturate


def _values(rng, width: int, signed_: bool, marks: list[int]) -> list[int]:
    lo, hi = (-(1 << (width - 1)), (1 << (width - 1)) - 1) if signed_ else (0, (1 << width) - 1)
    vals = {lo, hi, 0, 1, -1 if signed_ else 2}
    for x in marks:
        vals.update(x + d for d in (-2, -1, 0, 1, 2))
    for _ in range(300):
        bits = int(rng.integers(1, width + 1))
        vals.add(int(rng.integers(-(1 << (bits - 1)), 1 << (bits - 1))) if signed_
                 else int(rng.integers(0, 1 << bits)))
    return sorted(x for x in vals if lo <= x <= hi)


def _check(width: int, signed_: bool, build, expect, values: list[int]):
    m = Module()
    v = Signal(signed(width) if signed_ else unsigned(width))
    out = build(v)
    y = Signal(out.shape())
    m.d.comb += y.eq(out)
    sim = Simulator(m)
    bad = []

    async def bench(ctx):
        for x in values:
            ctx.set(v, x)
            got = ctx.get(y)
            if got != expect(x):
                bad.append((x, got, expect(x)))
    sim.add_testbench(bench)
    sim.run()
    assert not bad, bad[:5]


@pytest.mark.parametrize("width,bits", [(64, 8), (64, 16), (64, 33), (41, 16), (9, 8),
                                        (45, 8), (8, 8), (5, 8), (2, 1)])
def test_saturate_is_the_clamp(width, bits):
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    values = _values(np.random.default_rng(width * 100 + bits), width, True, [lo, hi])
    _check(width, True, lambda v: saturate(v, bits), lambda x: min(max(x, lo), hi), values)


@pytest.mark.parametrize("width,limit,signed_", [(41, 26, False), (41, 32, False),
                                                 (41, 1, False), (5, 26, False),
                                                 (12, 4095, False), (33, 4, True),
                                                 (33, 1, True), (6, 40, True), (1, 1, True)])
def test_below_is_the_compare(width, limit, signed_):
    values = _values(np.random.default_rng(width + limit), width, signed_, [limit, 2 * limit])
    _check(width, signed_, lambda v: below(v, limit), lambda x: int(x < limit), values)


@pytest.mark.parametrize("width,step,limit", [(33, 32, 1 << 32), (33, 32, 1 << 24),
                                              (32, 4, 1 << 24), (12, 4, 1 << 24),
                                              (24, 32, 1 << 24), (8, 1, 64), (8, 64, 64),
                                              (5, 64, 64), (4, 32, 64), (3, 1, 1)])
def test_past_end_is_the_compare(width, step, limit):
    values = _values(np.random.default_rng(width + step), width, False,
                     [limit - step, limit, limit + step])
    _check(width, False, lambda v: past_end(v, step, limit),
           lambda x: int(x + step > limit), values)


def test_bad_arguments_are_refused():
    with pytest.raises(TypeError, match="signed value"):
        saturate(Signal(8), 4)
    with pytest.raises(ValueError, match="positive"):
        saturate(Signal(signed(8)), 0)
    with pytest.raises(ValueError, match="positive"):
        below(Signal(8), 0)
    with pytest.raises(ValueError, match="power of two"):
        past_end(Signal(8), 3, 64)
    with pytest.raises(ValueError, match="above limit"):
        past_end(Signal(8), 128, 64)
    with pytest.raises(ValueError, match="unsigned"):
        past_end(Signal(signed(8)), 4, 64)
