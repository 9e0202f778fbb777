"""The vector unit's shared multiplier (:class:`hw.vector.RoundingMultiplier`) in Amaranth's
simulator against a naive model: ``(a * b + 2**(s - 1)) >> s`` in Python integers, for the
extreme operands, ties on both sides of zero, every shift, and a stream of requests with gaps
(latency, one result per cycle, tags)."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.isa import VECTOR_MUL_LATENCY
from hw.vector import RoundingMultiplier
from hw.vector.rounding_multiplier import MUL_A_BITS, MUL_B_BITS

A_MIN, A_MAX = -(1 << (MUL_A_BITS - 1)), (1 << (MUL_A_BITS - 1)) - 1
B_MAX = (1 << MUL_B_BITS) - 1


def naive(a: int, b: int, s: int) -> int:
    """Round to nearest, ties toward +infinity, exact."""
    return (a * b + ((1 << s) >> 1)) >> s


def operands(rng, lanes: int, n: int) -> list[list[tuple[int, int, int]]]:
    """``n`` requests of ``lanes`` lanes: extremes, ties, then random values of every size."""
    special = [(A_MIN, B_MAX, 0), (A_MAX, B_MAX, 0), (A_MIN, B_MAX, 63), (A_MAX, B_MAX, 63),
               (A_MIN, B_MAX, 1), (A_MAX, B_MAX, 62), (-1, 1, 1), (1, 1, 1), (-3, 1, 1),
               (3, 1, 1), (-5, 3, 2), (5, 3, 2), (-(1 << 15), 1, 16), (1 << 15, 1, 16),
               (A_MIN, 0, 5), (0, B_MAX, 7), (-1, B_MAX, 31), ((1 << 17) - 1, (1 << 17) - 1, 17),
               (-(1 << 17), (1 << 17), 34), ((1 << 17), (1 << 17) - 1, 3)]
    flat = list(special)
    while len(flat) < n * lanes:
        bits = int(rng.integers(1, MUL_A_BITS + 1))
        a = int(rng.integers(-(1 << (bits - 1)), 1 << (bits - 1)))
        b = int(rng.integers(0, 1 << int(rng.integers(1, MUL_B_BITS + 1))))
        flat.append((a, b, int(rng.integers(0, 64))))
    return [flat[k * lanes:(k + 1) * lanes] for k in range(n)]


@pytest.mark.parametrize("lanes", [1, 4])
def test_rounding_multiplier_matches_naive_model(lanes):
    rng = np.random.default_rng(lanes)
    requests = operands(rng, lanes, 120)
    gaps = [int(g) for g in rng.integers(0, 3, len(requests))]   # idle cycles before each
    dut = RoundingMultiplier(lanes, tag_width=7)
    seen = []

    async def tb(ctx):
        issued, schedule = [], []
        for req, gap in zip(requests, gaps, strict=True):
            schedule += [None] * gap + [req]
        schedule += [None] * (VECTOR_MUL_LATENCY + 2)
        for cycle, req in enumerate(schedule):
            ctx.set(dut.i.valid, req is not None)
            if req is not None:
                for j, (a, b, s) in enumerate(req):
                    ctx.set(dut.i.payload.lane[j].a, a)
                    ctx.set(dut.i.payload.lane[j].b, b)
                    ctx.set(dut.i.payload.lane[j].shift, s)
                ctx.set(dut.i.payload.tag, len(issued) % 128)
                issued.append(cycle)
            if ctx.get(dut.o.valid):
                seen.append((cycle, ctx.get(dut.o.payload.tag),
                             [ctx.get(dut.o.payload.y[j]) for j in range(lanes)]))
            await ctx.tick()
        seen.append(issued)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    sim.run()
    issued = seen.pop()
    assert len(seen) == len(requests)
    for k, ((cycle, tag, ys), req) in enumerate(zip(seen, requests, strict=True)):
        assert cycle == issued[k] + VECTOR_MUL_LATENCY
        assert tag == k % 128
        assert ys == [naive(a, b, s) for a, b, s in req], req


@pytest.mark.parametrize("bad", [0, -1, 2.0])
def test_rounding_multiplier_rejects_bad_parameters(bad):
    with pytest.raises(ValueError, match="lanes must be a positive integer"):
        RoundingMultiplier(bad, 1)
    with pytest.raises(ValueError, match="tag_width must be a positive integer"):
        RoundingMultiplier(1, bad)
