"""SystolicArray in Amaranth's simulator against a naive row-by-row numpy model."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.tile.systolic_array import SystolicArray


def random_int8(rng, shape):
    """Random int8 with the extremes -128 and 127 forced in."""
    x = rng.integers(-128, 128, size=shape, dtype=np.int64)
    flat = x.reshape(-1)
    flat[0], flat[-1] = -128, 127
    return x


def naive_model(rows, cols, schedule):
    """Expected output rows, in order, for a cycle schedule (see ``run``).

    Row by row, with plain Python integer loops: the weights that a row sees are the shadow
    weights as of the last swap at or before that row.
    """
    shadow = [[0] * cols for _ in range(rows)]
    active = [[0] * cols for _ in range(rows)]
    out = []
    for cycle in schedule:
        if cycle.get("swap"):
            active = [row[:] for row in shadow]
        if cycle.get("a") is not None:
            a = cycle["a"]
            out.append([sum(int(a[k]) * active[k][n] for k in range(rows)) for n in range(cols)])
        if cycle.get("w") is not None:
            addr, w = cycle["w"]
            shadow[addr] = [int(v) for v in w]
    return out


def run(dut, schedule):
    """Drive one schedule entry per cycle, then drain; return [(cycle, row)] of outputs.

    A schedule entry is a dict with optional keys ``a`` (activation row), ``swap`` (bool) and
    ``w`` ((row index, weight row)).
    """
    got = []

    async def testbench(ctx):
        for t in range(len(schedule) + dut.latency + 2):
            cycle = schedule[t] if t < len(schedule) else {}
            a, w = cycle.get("a"), cycle.get("w")
            ctx.set(dut.i_valid, a is not None)
            ctx.set(dut.i_swap, bool(cycle.get("swap")))
            if a is not None:
                ctx.set(dut.i_a, [int(v) for v in a])
            ctx.set(dut.w_en, w is not None)
            if w is not None:
                ctx.set(dut.w_addr, w[0])
                ctx.set(dut.w_data, [int(v) for v in w[1]])
            if ctx.get(dut.o_valid):
                got.append((t, [int(v) for v in ctx.get(dut.o_c)]))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()
    return got


def check(rows, cols, schedule):
    dut = SystolicArray(rows, cols)
    got = run(dut, schedule)
    want = naive_model(rows, cols, schedule)
    in_cycles = [t for t, c in enumerate(schedule) if c.get("a") is not None]
    assert [t for t, _ in got] == [t + dut.latency for t in in_cycles], "latency"
    assert [row for _, row in got] == want


@pytest.mark.parametrize("rows,cols", [(2, 2), (3, 5), (5, 3), (8, 8), (2, 17)])
def test_stream_with_overlapped_weight_swap(rows, cols):
    """Load W1, stream rows back to back while W2 loads into the shadow, swap to W2 with no
    bubble, then stream with random bubbles, then swap to W3 and stream again."""
    rng = np.random.default_rng(rows * 100 + cols)
    w1, w2, w3 = (random_int8(rng, (rows, cols)) for _ in range(3))
    w1[:] = -128  # extreme products: -128 * -128 summed over a whole column
    schedule = [{"w": (k, w1[k])} for k in range(rows)]
    # Stream 1 under W1; W2 loads in row order from cols - 1 cycles after the swap.
    n1 = rows + cols + 2
    a1 = random_int8(rng, (n1, rows))
    a1[0] = -128
    start = len(schedule)
    schedule += [{"a": a1[i], "swap": i == 0} for i in range(n1)]
    for k in range(rows):
        schedule[start + cols - 1 + k]["w"] = (k, w2[k])
    # Stream 2 under W2, directly after stream 1; W3 loads in reverse row order with gaps.
    n2 = 2 * (rows + cols) + 4
    a2 = random_int8(rng, (n2, rows))
    start = len(schedule)
    schedule += [{"a": a2[i], "swap": i == 0} if i < 3 or rng.random() < 0.7 else {}
                 for i in range(n2)]
    for j, k in enumerate(reversed(range(rows))):
        schedule[start + cols - 1 + rows - 1 + 2 * j]["w"] = (k, w3[k])
    schedule += [{}] * 3
    # Stream 3 under W3.
    a3 = random_int8(rng, (5, rows))
    schedule += [{"a": a3[i], "swap": i == 0} for i in range(5)]
    check(rows, cols, schedule)


def test_single_rows_and_idle_swap():
    """Isolated rows; a swap on a bubble cycle (no row) still takes effect for later rows."""
    rows, cols = 3, 4
    rng = np.random.default_rng(7)
    w1, w2 = random_int8(rng, (rows, cols)), random_int8(rng, (rows, cols))
    schedule = [{"w": (k, w1[k])} for k in range(rows)] + [{"swap": True}]
    schedule += [{"a": random_int8(rng, rows)}, {}, {}, {"a": random_int8(rng, rows)}]
    schedule += [{}] * (rows + cols) + [{"w": (k, w2[k])} for k in range(rows)]
    schedule += [{"a": random_int8(rng, rows), "swap": True}, {"a": random_int8(rng, rows)}]
    check(rows, cols, schedule)


@pytest.mark.parametrize("rows,cols", [(1, 4), (4, 33), (True, 4)])
def test_bad_size(rows, cols):
    with pytest.raises((TypeError, ValueError), match="SystolicArray"):
        SystolicArray(rows, cols)
