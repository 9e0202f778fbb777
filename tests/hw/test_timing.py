"""hw.isa.timing against the compute engines in Amaranth's simulator: the busy cycles of
MATMUL, REQUANT (with and without ``flags.row_scale``) and SOFTMAX, counted on the engine's
``busy`` output exactly as the ``busy.<engine>`` counter counts them, equal to the formulas
for every size in a range, for size zero and for failing commands, on several array sizes.
(Back-to-back MATMULs, which overlap: ``tests/hw/test_tile.py::test_matmul_back_to_back``.)"""

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.config import NPUConfig
from hw.isa import ACCEPT_CYCLES, Command, ErrorCode, Opcode, timing
from hw.tile import ComputeTile

CONFIGS = [
    NPUConfig(rows=4, cols=4, spad_rows=128, acc_rows=128),
    NPUConfig(rows=4, cols=8, spad_rows=128, acc_rows=128),
    NPUConfig(rows=8, cols=4, spad_rows=128, acc_rows=128),
    NPUConfig(rows=8, cols=8, spad_rows=128, acc_rows=128),
]
IDS = [c.name for c in CONFIGS]


async def busy_cycles(ctx, port, opcode, kind, body, *, overlaps=False, **flags):
    """Issue one command on an idle engine port; return (error, busy cycles, accept): busy
    cycles counted on ``busy`` from the handshake's next cycle to ``done`` inclusive, and the
    cycles from the handshake to the first cycle the engine takes a command again. Only an
    engine that ``overlaps`` (the matrix engine) may take one while it is busy."""
    cmd = Command.const({"header": {"opcode": opcode, "flags": flags}, "body": {kind: body}})
    ctx.set(port.cmd.payload, cmd)
    ctx.set(port.cmd.valid, 1)
    _, _, ready, busy = await ctx.tick().sample(port.cmd.ready, port.busy)
    assert ready and not busy, "the engine was not idle"
    ctx.set(port.cmd.valid, 0)
    count, period, error, accept = 0, 1, None, None
    while True:
        _, _, busy, done, err, ready = await ctx.tick().sample(port.busy, port.done,
                                                              port.error, port.cmd.ready)
        if ready and accept is None:
            assert overlaps or not busy, "took a command while busy"
            accept = period
        if ready and not busy and error is not None:
            return error, count, accept
        period += 1
        count += busy
        if done:
            assert error is None, "one command, one done"
            error = ErrorCode(err)
        assert period < 100_000, "command never retired"


def run(cfg, program):
    dut = ComputeTile(cfg)
    out = []

    async def tb(ctx):
        out.extend(await program(ctx, dut))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    return out


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_matmul_busy_cycles(cfg):
    ms = [1, 2, 3, cfg.rows - 1, cfg.rows, cfg.rows + 1, cfg.cols + 3, 31, 64, 100]
    cases = [(dict(a_row=0, w_row=100, acc_row=0, m=m), {"accumulate": m % 2}, ErrorCode.NONE)
             for m in ms]
    cases += [
        (dict(a_row=0, w_row=100, acc_row=0, m=0), {}, ErrorCode.NONE),             # size zero
        (dict(a_row=120, w_row=0, acc_row=0, m=9), {}, ErrorCode.BAD_LOCAL_ADDR),
        (dict(a_row=0, w_row=0, acc_row=125, m=9), {}, ErrorCode.BAD_LOCAL_ADDR),
        (dict(a_row=0, w_row=0, acc_row=0, m=5), {"transpose": 1},
         ErrorCode.NONE if cfg.rows == cfg.cols else ErrorCode.BAD_SIZE),
        (dict(a_row=0, w_row=0, acc_row=0, m=3, k_len=3), {}, ErrorCode.NONE),
        (dict(a_row=0, w_row=8, acc_row=0, m=cfg.cols + 3, k_len=1), {}, ErrorCode.NONE),
        (dict(a_row=0, w_row=0, acc_row=0, m=40, k_len=3), {}, ErrorCode.BAD_LOCAL_ADDR),
    ]

    async def program(ctx, dut):
        res = [await busy_cycles(ctx, dut.matrix, Opcode.MATMUL, "matmul", b, overlaps=True,
                                 **f) for b, f, _ in cases]
        res.append(await busy_cycles(ctx, dut.matrix, Opcode.REQUANT, "matmul", cases[0][0],
                                     overlaps=True))
        return res

    results = run(cfg, program)
    for (body, _, want_error), (error, busy, period) in zip(cases, results[:-1], strict=True):
        failed = want_error != ErrorCode.NONE
        assert error == want_error, body
        assert busy == timing.matmul_busy_cycles(cfg, body["m"], k_blocks=body.get("k_len", 0) + 1,
                                                 error=failed), body
        # the engine takes the next command as soon as this one left its check stage
        assert period == timing.MatmulTimeline(cfg).take(0, body["m"], error=failed).accept_from
        assert period == 3 < busy + ACCEPT_CYCLES or failed or body["m"] == 0
    error, busy, _ = results[-1]
    assert error == ErrorCode.BAD_OPCODE and busy == timing.matmul_busy_cycles(cfg, 7, error=True)


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_requant_busy_cycles(cfg):
    sizes = [1, 2, cfg.cols - 1, cfg.cols, cfg.cols + 1, 2 * cfg.cols, 2 * cfg.cols + 1, 37, 90]
    cases = []
    for n in sizes:
        for row_scale in (0, 1):
            cases.append((dict(acc_row=0, spad_row=0, n_rows=n, param_row=100, scale_row=103),
                          {"row_scale": row_scale, "relu": n % 2}, ErrorCode.NONE))
    cases += [
        (dict(acc_row=0, spad_row=0, n_rows=0, param_row=127, scale_row=127), {"row_scale": 1},
         ErrorCode.NONE),                                                          # size zero
        (dict(acc_row=120, spad_row=0, n_rows=9, param_row=100), {}, ErrorCode.BAD_LOCAL_ADDR),
        (dict(acc_row=0, spad_row=0, n_rows=9, param_row=126), {}, ErrorCode.BAD_LOCAL_ADDR),
        (dict(acc_row=0, spad_row=0, n_rows=9, param_row=100, scale_row=127), {"row_scale": 1},
         ErrorCode.BAD_LOCAL_ADDR if cfg.cols < 9 else ErrorCode.NONE),
    ]

    async def program(ctx, dut):
        return [await busy_cycles(ctx, dut.vector, Opcode.REQUANT, "requant", b, **f)
                for b, f, _ in cases]

    for (body, flags, want_error), (error, busy, period) in zip(cases, run(cfg, program),
                                                                strict=True):
        assert error == want_error, body
        want = timing.requant_busy_cycles(cfg, body["n_rows"],
                                          row_scale=bool(flags.get("row_scale")),
                                          error=want_error != ErrorCode.NONE)
        assert (busy, period) == (want, want + ACCEPT_CYCLES), (body, flags)


@pytest.mark.parametrize("cfg", CONFIGS[::3], ids=IDS[::3])
def test_softmax_busy_cycles(cfg):
    c = cfg.cols
    base = dict(acc_row=0, spad_row=0, stride=16, scale_row=120, kv_len=3 * c, q_offset=0,
                mult=40000, shift=16, causal=0)
    shapes = [(1, 1), (1, 2), (2, 1), (3, 3), (c - 1, 2), (c, 1), (c + 1, 4), (2 * c + 1, 1),
              (5, 7)]
    cases = [(base | dict(n_rows=r, n_blocks=b, causal=r % 2), ErrorCode.NONE)
             for r, b in shapes]
    cases += [
        (base | dict(n_rows=0, n_blocks=3), ErrorCode.NONE),                  # size zero
        (base | dict(n_rows=3, n_blocks=0), ErrorCode.NONE),
        (base | dict(n_rows=3, n_blocks=2, acc_row=cfg.acc_rows - 10), ErrorCode.BAD_LOCAL_ADDR),
        (base | dict(n_rows=3, n_blocks=2, scale_row=cfg.acc_rows), ErrorCode.BAD_LOCAL_ADDR),
    ]

    async def program(ctx, dut):
        return [await busy_cycles(ctx, dut.vector, Opcode.SOFTMAX, "softmax", b)
                for b, _ in cases]

    for (body, want_error), (error, busy, period) in zip(cases, run(cfg, program), strict=True):
        assert error == want_error, body
        want = timing.softmax_busy_cycles(cfg, body["n_rows"], body["n_blocks"],
                                          error=want_error != ErrorCode.NONE)
        assert (busy, period) == (want, want + ACCEPT_CYCLES), body


def test_command_busy_cycles_dispatches_on_the_encoded_command():
    from sw.runtime import CommandList
    cfg = NPUConfig()
    cmds = CommandList()
    cmds.matmul(a_row=0, w_row=0, acc_row=0, m=17)
    cmds.requant(acc_row=0, spad_row=0, n_rows=12, param_row=0, scale_row=40)
    cmds.softmax(acc_row=0, spad_row=0, n_rows=5, n_blocks=3, stride=5, scale_row=0,
                 kv_len=24, mult=1, shift=0)
    cmds.dma_load(mem=0, dram_addr=4096 - 16, dram_stride=64, row_bytes=64, n_rows=3,
                  local_row=0, local_stride=8)
    cmds.dma_store(mem=1, dram_addr=0, dram_stride=0, row_bytes=64, n_rows=2, local_row=0,
                   local_stride=2)
    cmds.nop()
    want = [timing.matmul_busy_cycles(cfg, 17),
            timing.requant_busy_cycles(cfg, 12, row_scale=True),
            timing.softmax_busy_cycles(cfg, 5, 3),
            timing.dma_load_busy_cycles(cfg, 4096 - 16, 64, 64, 3),
            timing.dma_store_busy_cycles(cfg, 0, 0, 64, 2, mem=1)]
    assert [timing.command_busy_cycles(cfg, c.raw) for c in list(cmds)[:5]] == want
    assert want == [17 + 8 + 8 + 5, 2 * 12 + 16, 2 + 5 * (2 * 3 + 44 + 3),
                    6 + (2 + 6 + 8 + 8) + 4, 2 * 8 + 2 * 2 + 5]
    assert timing.command_busy_cycles(cfg, cmds[0].raw, ErrorCode.BAD_LOCAL_ADDR) == 3
    with pytest.raises(ValueError, match="does not run on an engine"):
        timing.command_busy_cycles(cfg, cmds[5].raw)


@pytest.mark.parametrize("shape", [(2, 2), (4, 4), (8, 8), (4, 8), (8, 4), (2, 32), (32, 2),
                                   (16, 16), (32, 32), (3, 7)])
def test_in_flight_limit_never_delays_back_to_back_matmuls(shape):
    """``matmul_in_flight`` is enough: MATMULs offered back to back (each as soon as the engine
    can take it) are taken in the same cycles as with no limit at all, for every size around
    ``rows``, ``cols`` and their maximum and for several K blocks; one place fewer delays
    some."""
    rows, cols = shape
    cfg = NPUConfig(rows=rows, cols=cols)
    big = max(rows, cols)

    limit = timing.matmul_in_flight(cfg)

    def takes(places, m, k_blocks):
        line = timing.MatmulTimeline(cfg)
        line._limit = places            # the in-flight limit under test
        t, out = 0, []
        for _ in range(3 * limit + 4):
            out.append(t)
            t = line.take(t, m, k_blocks=k_blocks).accept_from
        return out

    sizes = sorted({1, 2, rows - 1, rows, cols - 1, cols, big, big + 1, 2 * big + 3} - {0})
    delayed = False
    for m in sizes:
        for k_blocks in (1, 2, 3):
            assert takes(limit, m, k_blocks) == takes(1 << 20, m, k_blocks), (m, k_blocks)
            delayed |= takes(limit - 1, m, k_blocks) != takes(1 << 20, m, k_blocks)
    assert delayed, "the limit is not tight"


@pytest.mark.parametrize("shape", [(2, 2), (8, 8), (4, 8), (8, 4), (3, 7)])
def test_matmul_write_spans_and_runs(shape):
    """Each MATMUL's accumulator writes: ``m`` rows per K block, block ``j`` issued ``j *
    max(m, rows, cols)`` cycles after block 0, the last write the cycle before ``done`` for a
    command alone; ``write_runs`` is ``writes`` with adjacent spans joined (one run when the
    blocks write back to back), for commands back to back and apart, failing and empty."""
    rows, cols = shape
    cfg = NPUConfig(rows=rows, cols=cols)
    big = max(rows, cols)
    rng = np.random.default_rng(rows * 31 + cols)
    line, t = timing.MatmulTimeline(cfg), 0
    for _ in range(200):
        m = int(rng.choice([0, 1, rows, cols, big, big + 1, 2 * big + 3]))
        k_blocks, error = int(rng.integers(1, 5)), bool(rng.random() < 0.1)
        t = max(t, line.accept_from()) + (0 if rng.random() < 0.7 else int(rng.integers(60)))
        idle = not line._done or t > line._done[-1]       # every earlier one retired
        times = line.take(t, m, k_blocks=k_blocks, error=error)
        writes = times.writes
        if error or m == 0:
            assert writes == () and times.write_runs == ()
            continue
        period = timing.matmul_issue_cycles(cfg, m, k_blocks) // k_blocks
        assert period == big if m <= big else period == m
        assert len(writes) == k_blocks
        assert all(b - a == m for a, b in writes)
        assert [a - writes[0][0] for a, _ in writes] == [j * period for j in range(k_blocks)]
        if idle:                       # alone: done the cycle after its last write
            assert writes[-1][1] - t == timing.matmul_busy_cycles(cfg, m, k_blocks=k_blocks)
            assert times.done == writes[-1][1]
        joined: list[list[int]] = []
        for a, b in writes:
            if joined and a <= joined[-1][1]:
                joined[-1][1] = max(joined[-1][1], b)
            else:
                joined.append([a, b])
        assert times.write_runs == tuple(tuple(x) for x in joined)


@pytest.mark.parametrize("shape", [(2, 2), (4, 4), (8, 8), (4, 8), (8, 4), (2, 32), (3, 7)])
def test_retire_window_bounds_every_run_of_matmul_retirements(shape):
    """``retire_window_cycles`` of ``matmul_retire_cycles`` is a lower bound of the cycles of
    every run of consecutive retirements on :class:`MatmulTimeline` (random sizes, K blocks,
    failing and empty commands, taken back to back or after a pause); and it is the most
    a MATMUL can count: equal MATMULs of ``m >= max(rows, cols)`` back to back retire
    exactly ``matmul_retire_cycles`` apart, a failing one 1 cycle after a long one."""
    rows, cols = shape
    cfg = NPUConfig(rows=rows, cols=cols)
    big = max(rows, cols)
    rng = np.random.default_rng(rows * 97 + cols)
    sizes = [0, 1, 2, rows, cols, big, big + 1, 2 * big + 3]
    for _ in range(60):
        line, t, retired = timing.MatmulTimeline(cfg), 0, []
        for _ in range(24):
            m = int(rng.choice(sizes)) if rng.random() < 0.7 else int(rng.integers(1, 3 * big))
            k_blocks, error = int(rng.integers(1, 4)), bool(rng.random() < 0.15)
            t = max(t, line.accept_from()) + (0 if rng.random() < 0.8 else int(rng.integers(30)))
            times = line.take(t, m, k_blocks=k_blocks, error=error)
            retired.append((times.done,
                            timing.matmul_retire_cycles(cfg, m, k_blocks=k_blocks, error=error)))
            t = times.accept_from
        for i, (first, _) in enumerate(retired):
            for j in range(i, len(retired)):     # the tightest window: first - 1 .. last
                window = retired[j][0] - (first - 1)
                bound = timing.retire_window_cycles(cfg, "matrix",
                                                    [b for _, b in retired[i:j + 1]])
                assert window >= bound, (i, j, retired)

    m = 2 * big + 1
    line, t, dones = timing.MatmulTimeline(cfg), 0, []
    for _ in range(12):
        times = line.take(t, m, k_blocks=2)
        dones.append(times.done)
        t = times.accept_from
    period = timing.matmul_retire_cycles(cfg, m, k_blocks=2)
    assert period == timing.matmul_issue_cycles(cfg, m, 2) == 2 * m
    assert {b - a for a, b in zip(dones[4:], dones[5:], strict=False)} == {period}
    line = timing.MatmulTimeline(cfg)
    long = line.take(0, 3 * big, k_blocks=3)
    failing = line.take(long.accept_from, 5, error=True)
    assert failing.done == long.done + 1
    assert timing.matmul_retire_cycles(cfg, 5, error=True) == 0
    assert timing.matmul_retire_cycles(cfg, 0, k_blocks=3) == 0


def test_command_retire_cycles_dispatches_on_the_encoded_command():
    """The matrix engine's from ``matmul_retire_cycles`` (k_len counted), every other
    engine's ``busy + ACCEPT_CYCLES``; the window leaves out ``engine_in_flight`` terms."""
    from sw.runtime import CommandList
    cfg = NPUConfig()
    cmds = CommandList()
    cmds.matmul(a_row=0, w_row=0, acc_row=0, m=17, k_blocks=3)
    cmds.requant(acc_row=0, spad_row=0, n_rows=12, param_row=0, scale_row=40)
    cmds.dma_load(mem=0, dram_addr=64, dram_stride=64, row_bytes=64, n_rows=3, local_row=0,
                  local_stride=1)
    mm, rq, load = (c.raw for c in cmds)
    assert timing.command_retire_cycles(cfg, mm) == 3 * 17 == timing.matmul_issue_cycles(
        cfg, 17, 3)
    assert timing.command_retire_cycles(cfg, mm, ErrorCode.BAD_SIZE) == 0
    for raw in (rq, load):
        assert timing.command_retire_cycles(cfg, raw) == \
            timing.command_busy_cycles(cfg, raw) + ACCEPT_CYCLES
    assert timing.retire_window_cycles(cfg, "load", [5, 9, 7]) == 5 + 7
    assert timing.retire_window_cycles(cfg, "matrix", range(1, 9)) == 1 + 2 + 3 == \
        sum(range(1, 9 - timing.matmul_in_flight(cfg)))
    assert timing.retire_window_cycles(cfg, "matrix", [4, 4]) == 0
