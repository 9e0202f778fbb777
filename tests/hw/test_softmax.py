"""Attention hardware in Amaranth's simulator against deliberately naive scalar models:
SOFTMAX (masks, any row length, fully masked rows, out-of-range exponents), MATMUL with
``flags.transpose`` and REQUANT with ``flags.row_scale``."""

import math
from fractions import Fraction

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.config import NPUConfig
from hw.isa import ACCEPT_CYCLES, ROW_SCALE_SHIFT, Command, ErrorCode, Opcode, timing
from hw.tile import ComputeTile
from tests.hw.test_tile import (
    model_requant,
    pack,
    read_rows,
    requant_params,
    unpack,
    write_rows,
)

CONFIGS = [NPUConfig(rows=4, cols=4, spad_rows=128, acc_rows=128),
           NPUConfig(rows=8, cols=8, spad_rows=128, acc_rows=128)]
IDS = [c.name for c in CONFIGS]
#: and a lane count that is not a power of two: the row max's fold steps pair lanes 2j and
#: 2j + 1 of 5, then 3, then 2
ODD = NPUConfig(rows=2, cols=5, spad_rows=128, acc_rows=128)


# -- naive models -------------------------------------------------------------------------------

def naive_exp(n: int) -> int:
    """round(127 * 2**(-n/16)) through the 16-entry table and a shift; 0 beyond q >= 8."""
    q, f = divmod(n, 16)
    if q >= 8:
        return 0
    entry = math.floor(127 * 128 * 2.0 ** (-f / 16) + 0.5)
    return (entry + (1 << (q + 6))) >> (q + 7)


def naive_softmax(cfg, acc, spad, b):
    """Scalar transcription of hw.isa.SoftmaxBody; updates ``acc`` and ``spad`` in place."""
    c = cfg.cols
    recips = []
    for i in range(b["n_rows"]):
        scores, keys = [], []
        for blk in range(b["n_blocks"]):
            for j in range(c):
                scores.append(acc[b["acc_row"] + blk * b["stride"] + i][j])
                keys.append(blk * c + j)
        ok = [k < b["kv_len"] and (not b["causal"] or k <= b["q_offset"] + i) for k in keys]
        mx = max((s for s, v in zip(scores, ok, strict=True) if v), default=None)
        ps = []
        for s, v in zip(scores, ok, strict=True):
            if not v:
                ps.append(0)
                continue
            shift = b["shift"]
            n = ((mx - s) * b["mult"] + ((1 << shift) >> 1)) >> shift
            ps.append(naive_exp(n))
        for blk in range(b["n_blocks"]):
            row = [0] * cfg.spad_row_bytes
            row[:c] = ps[blk * c:(blk + 1) * c]
            spad[b["spad_row"] + blk * b["stride"] + i] = row
        total = sum(ps)
        recips.append((2**32 + total // 2) // total if total else 0)
    for g in range(0, len(recips), c):
        row = [0] * cfg.acc_row_elems
        for j, r in enumerate(recips[g:g + c]):
            row[j] = r - 2**32 if r >= 2**31 else r
        acc[b["scale_row"] + g // c] = row


def naive_row_scaled_requant(cfg, acc, spad, b, relu):
    """Scalar transcription of hw.isa.RequantBody with ``flags.row_scale``; updates ``spad``.
    Returns how often the 33-bit row-scale clamp and an exact tie of the final rounding hit."""
    bias, mult, shift = acc[b["param_row"]:b["param_row"] + 3]
    clamps = ties = 0
    for i in range(b["n_rows"]):
        r = acc[b["scale_row"] + i // cfg.cols][i % cfg.cols] % 2**31
        out = [0] * cfg.spad_row_bytes
        for j in range(cfg.cols):
            x = acc[b["acc_row"] + i][j] + bias[j]
            scaled = (x * r + 2**15) >> 16
            x = max(-2**32, min(2**32 - 1, scaled))
            clamps += x != scaled
            mj, sj = mult[j] % 2**31, shift[j] % 64
            ties += sj > 0 and (x * mj) % 2**sj == 2**(sj - 1)
            y = max(-128, min(127, (x * mj + ((1 << sj) >> 1)) >> sj))
            out[j] = max(y, 0) if relu else y
        spad[b["spad_row"] + i] = out
    return clamps, ties


# -- harness ------------------------------------------------------------------------------------

async def issue(ctx, port, opcode, kind, body, **flags):
    cmd = Command.const({"header": {"opcode": opcode, "flags": flags}, "body": {kind: body}})
    ctx.set(port.cmd.payload, cmd)
    ctx.set(port.cmd.valid, 1)
    await ctx.tick()
    ctx.set(port.cmd.valid, 0)
    cycles = 1
    while not ctx.get(port.done):
        cycles += 1
        await ctx.tick()
        assert cycles < 200_000
    cycles += 1
    error, addr = ErrorCode(ctx.get(port.error)), ctx.get(port.error_addr)
    await ctx.tick()
    return error, addr, cycles


def run_tile(cfg, acc_init, spad_init, program):
    """Fill the memories, run ``program(ctx, dut)`` (returns a list), read both memories."""
    dut = ComputeTile(cfg)
    out = {}

    async def tb(ctx):
        await write_rows(ctx, dut.acc_w, 32, 0, acc_init)
        await write_rows(ctx, dut.spad_w, 8, 0, spad_init)
        out["results"] = await program(ctx, dut)
        ctx.set(dut.acc_r.en, 1)
        ctx.set(dut.spad_r.en, 1)
        out["acc"] = await read_rows(ctx, dut.acc_r, 32, cfg.acc_row_elems, 0, cfg.acc_rows)
        out["spad"] = await read_rows(ctx, dut.spad_r, 8, cfg.spad_row_bytes, 0, cfg.spad_rows)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    return out


def random_memories(cfg, rng, score_range):
    acc = [[int(v) for v in rng.integers(-score_range, score_range, cfg.acc_row_elems)]
           for _ in range(cfg.acc_rows)]
    spad = [[int(v) for v in rng.integers(-128, 128, cfg.spad_row_bytes)]
            for _ in range(cfg.spad_rows)]
    return acc, spad


@pytest.mark.parametrize("cfg", [*CONFIGS, ODD], ids=[*IDS, ODD.name])
def test_softmax_matches_naive_model(cfg):
    c = cfg.cols
    rng = np.random.default_rng(cfg.cols)
    acc, spad = random_memories(cfg, rng, 3000)
    acc[5] = [-(2**31)] * cfg.acc_row_elems   # extreme scores: exponents far out of range
    acc[6] = [2**31 - 1] * cfg.acc_row_elems
    bodies = [
        # rows, blocks, stride, kv_len, causal, q_offset
        dict(n_rows=5, n_blocks=3, stride=5, kv_len=3 * c - 1, causal=0, q_offset=0),
        dict(n_rows=3, n_blocks=2, stride=4, kv_len=2 * c, causal=1, q_offset=2),
        dict(n_rows=c + 1, n_blocks=1, stride=c + 1, kv_len=c, causal=0, q_offset=0),
        dict(n_rows=2, n_blocks=2, stride=2, kv_len=0, causal=0, q_offset=0),  # fully masked
        dict(n_rows=4, n_blocks=2, stride=4, kv_len=2 * c, causal=1, q_offset=0),
    ]
    for b in bodies:
        b.update(acc_row=int(rng.integers(0, 8)), spad_row=int(rng.integers(0, 40)),
                 scale_row=100, mult=int(rng.integers(1 << 15, 1 << 16)),
                 shift=int(rng.integers(14, 20)))
    bodies[4]["acc_row"] = 3   # covers rows 5 and 6
    bodies[4]["shift"] = 0     # n huge: every non-max exponent out of range -> 0
    # small scores and mult / 2**shift = 1/2, 3/2: exponents in range (p mostly non-zero) and
    # an exact tie x.5 in the exponent's rounding for every odd difference d = m_i - s
    tie_rows = 2 * (c + 2)
    for r in range(30, 30 + tie_rows):
        acc[r] = [int(v) for v in rng.integers(-60, 61, cfg.acc_row_elems)]
    for mult, shift in ((8, 4), (3, 1)):
        bodies.append(dict(n_rows=c + 2, n_blocks=2, stride=c + 2, kv_len=2 * c, causal=0,
                           q_offset=0, acc_row=30, spad_row=60,
                           scale_row=100, mult=mult, shift=shift))

    acc_init_copy = [list(r) for r in acc]

    async def program(ctx, dut):
        res = []
        for b in bodies:
            res.append(await issue(ctx, dut.vector, Opcode.SOFTMAX, "softmax", b))
            # read back the outputs of this command before the next overwrites them
            ctx.set(dut.acc_r.en, 1)
            ctx.set(dut.spad_r.en, 1)
            res.append((await read_rows(ctx, dut.acc_r, 32, cfg.acc_row_elems, 0, cfg.acc_rows),
                         await read_rows(ctx, dut.spad_r, 8, cfg.spad_row_bytes, 0,
                                         cfg.spad_rows)))
            ctx.set(dut.acc_r.en, 0)
            ctx.set(dut.spad_r.en, 0)
        return res

    out = run_tile(cfg, acc, spad, program)
    res = out["results"]
    for k, b in enumerate(bodies):
        error, _, cycles = res[2 * k]
        got_acc, got_spad = res[2 * k + 1]
        assert error == ErrorCode.NONE
        assert cycles == timing.softmax_busy_cycles(cfg, b["n_rows"], b["n_blocks"]) + ACCEPT_CYCLES
        naive_softmax(cfg, acc, spad, b)
        assert got_spad == spad, f"P differs for {b}"
        assert got_acc == acc, f"reciprocals differ for {b}"
        if b["kv_len"] == 0:        # fully masked: every P is 0
            rows = [got_spad[b["spad_row"] + blk * b["stride"] + i]
                    for blk in range(b["n_blocks"]) for i in range(b["n_rows"])]
            assert all(v == 0 for row in rows for v in row[:c])
    ties = 0
    for b in bodies[5:]:
        rows = [acc_init_copy[r][:c] for r in range(30, 30 + tie_rows)]
        for i in range(b["n_rows"]):
            row = rows[i] + rows[b["stride"] + i]
            ties += sum((max(row) - v) * b["mult"] % (1 << b["shift"]) == 1 << (b["shift"] - 1)
                        for v in row)
    assert ties >= 4 * c, "the test data must contain exact ties of the exponent's rounding"


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_softmax_errors(cfg):
    acc, spad = random_memories(cfg, np.random.default_rng(0), 10)
    base = dict(acc_row=0, spad_row=0, n_rows=4, n_blocks=2, stride=4, scale_row=0, kv_len=8,
                q_offset=0, mult=1, shift=0, causal=0)
    cases = [
        (dict(acc_row=cfg.acc_rows - 5), ErrorCode.BAD_LOCAL_ADDR, cfg.acc_rows),
        (dict(spad_row=cfg.spad_rows + 3), ErrorCode.BAD_LOCAL_ADDR, cfg.spad_rows + 3),
        (dict(scale_row=cfg.acc_rows), ErrorCode.BAD_LOCAL_ADDR, cfg.acc_rows),
        (dict(n_rows=0, acc_row=cfg.acc_rows), ErrorCode.NONE, 0),
    ]

    async def program(ctx, dut):
        return [await issue(ctx, dut.vector, Opcode.SOFTMAX, "softmax", base | over)
                for over, _, _ in cases]

    out = run_tile(cfg, acc, spad, program)
    for (_, code, addr), (error, error_addr, _) in zip(cases, out["results"], strict=True):
        assert (error, error_addr) == (code, addr)
    assert out["acc"] == acc and out["spad"] == spad   # nothing written


def naive_row_scaled_requant_element(x_acc: int, bias: int, recip: int, mult: int,
                                     shift: int) -> int:
    """REQUANT with ``flags.row_scale`` for one element, transcribed from
    :class:`hw.isa.RequantBody` in exact rationals: both stages round to nearest with ties
    toward +infinity, ``floor(v + 1/2)``, and saturate (the row scale to 33 bits, the output
    to int8)."""
    x = math.floor(Fraction((x_acc + bias) * recip, 1 << ROW_SCALE_SHIFT) + Fraction(1, 2))
    x = max(-2**32, min(2**32 - 1, x))
    y = math.floor(Fraction(x * mult, 1 << shift) + Fraction(1, 2)) if shift else x * mult
    return max(-128, min(127, y))


def tie_row_scale_operands(cfg, rng, n_rows: int):
    """Accumulators, bias, reciprocals and per-channel multipliers for which the row-scale
    rounding shows: small values (most outputs unsaturated) and reciprocals 1/2, 1/4, 3/4 of
    ``2**ROW_SCALE_SHIFT`` (exact ties ``x.5`` for odd, resp. ``x = 2 mod 4``, products) besides
    random ones; channels 0, 1 pass the scaled value through unchanged (``2**30 / 2**30``),
    the others halve it (``2**30 / 2**31``: ties of the second stage too) or scale by a random
    multiplier in [1/2, 1)."""
    c, e = cfg.cols, cfg.acc_row_elems
    half = 1 << (ROW_SCALE_SHIFT - 1)
    fixed = [half, half >> 1, 3 * (half >> 1)]
    recips = [fixed[i % 3] if i % 4 else int(rng.integers(half >> 2, 2 * half))
              for i in range(n_rows)]
    acc = [[int(v) for v in rng.integers(-170, 171, e)] for _ in range(n_rows)]
    bias = [int(v) for v in rng.integers(-9, 10, e)]
    mult = [1 << 30] * e
    shift = [30 if j < 2 else 31 for j in range(e)]
    for j in range(2, c, 3):
        mult[j] = int(rng.integers(1 << 30, 1 << 31))
    return acc, bias, recips, mult, shift


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_transposed_matmul_and_row_scaled_requant(cfg):
    c = cfg.cols
    rng = np.random.default_rng(7)
    acc, spad = random_memories(cfg, rng, 1 << 20)
    recips = [int(v) for v in rng.integers(0, 1 << 26, 2 * c)]
    acc[40] = recips[:c] + [0] * (cfg.acc_row_elems - c)
    acc[41] = recips[c:] + [0] * (cfg.acc_row_elems - c)
    acc[50] = [int(v) for v in rng.integers(-1000, 1000, cfg.acc_row_elems)]        # bias
    acc[51] = [int(v) for v in rng.integers(1 << 30, 1 << 31, cfg.acc_row_elems)]   # mult
    acc[52] = [int(v) for v in rng.integers(40, 48, cfg.acc_row_elems)]             # shift
    n_rows = c + 3
    # a second REQUANT over data that leaves the rounding visible: rows 100.., scale rows
    # 70.., parameters 90..92, output to scratchpad rows 100..
    n_ties = 3 * c + 3
    t_acc, t_bias, t_recips, t_mult, t_shift = tie_row_scale_operands(cfg, rng, n_ties)
    acc[100:100 + n_ties] = t_acc
    for g in range(-(-n_ties // c)):
        chunk = t_recips[g * c:(g + 1) * c]
        acc[70 + g] = chunk + [0] * (cfg.acc_row_elems - len(chunk))
    acc[90:93] = [t_bias, t_mult, t_shift]
    # a third over int32 extremes, where the row scale saturates to 33 bits and the output
    # (multiplier 1, shift 26 or 27: at most +-64) shows by how much: data rows 12.., scale
    # row 42, parameters 93..95, output to scratchpad rows 30..
    s_acc = [[int(v) for v in rng.integers(-(1 << 31), 1 << 31, cfg.acc_row_elems)]
             for _ in range(c)]
    s_acc[0][:2] = [-(1 << 31), (1 << 31) - 1]
    s_recips = [int(v) for v in rng.integers(1 << 15, 1 << 18, c)]
    s_recips[0] = (1 << 31) - 1
    s_bias = [int(v) for v in rng.integers(-(1 << 31), 1 << 31, cfg.acc_row_elems)]
    s_bias[:2] = [-(1 << 31), (1 << 31) - 1]
    s_shift = [26 + j % 2 for j in range(cfg.acc_row_elems)]
    acc[12:12 + c] = s_acc
    acc[42] = s_recips + [0] * (cfg.acc_row_elems - c)
    acc[93:96] = [s_bias, [1] * cfg.acc_row_elems, s_shift]

    async def program(ctx, dut):
        r1 = await issue(ctx, dut.matrix, Opcode.MATMUL, "matmul",
                         dict(a_row=0, w_row=20, acc_row=60, m=5), transpose=1)
        r2 = await issue(ctx, dut.vector, Opcode.REQUANT, "requant",
                         dict(acc_row=0, spad_row=80, n_rows=n_rows, param_row=50,
                              scale_row=40), row_scale=1)
        r3 = await issue(ctx, dut.vector, Opcode.REQUANT, "requant",
                         dict(acc_row=100, spad_row=100, n_rows=n_ties, param_row=90,
                              scale_row=70), row_scale=1)
        r4 = await issue(ctx, dut.vector, Opcode.REQUANT, "requant",
                         dict(acc_row=12, spad_row=30, n_rows=c, param_row=93, scale_row=42),
                         row_scale=1)
        return [r1, r2, r3, r4]

    out = run_tile(cfg, acc, spad, program)
    (e1, _, _), (e2, _, cyc2), (e3, _, cyc3), (e4, _, _) = out["results"]
    assert e1 == e2 == e3 == e4 == ErrorCode.NONE
    assert cyc2 == timing.requant_busy_cycles(cfg, n_rows, row_scale=True) + ACCEPT_CYCLES
    assert cyc3 == timing.requant_busy_cycles(cfg, n_ties, row_scale=True) + ACCEPT_CYCLES
    for i in range(5):            # W[k, n] = spad[20 + n][k]
        want = [sum(spad[i][k] * spad[20 + n][k] for k in range(cfg.rows)) for n in range(c)]
        assert out["acc"][60 + i][:c] == want
    for i in range(n_rows):       # large values: mostly saturated
        for j in range(c):
            y = naive_row_scaled_requant_element(acc[i][j], acc[50][j], recips[i], acc[51][j],
                                         acc[52][j])
            assert out["spad"][80 + i][j] == y, (i, j)
    unsaturated = ties = 0
    for i in range(n_ties):       # small values: the rounding of both stages is visible
        for j in range(c):
            y = naive_row_scaled_requant_element(t_acc[i][j], t_bias[j], t_recips[i], t_mult[j],
                                         t_shift[j])
            assert out["spad"][100 + i][j] == y, (i, j, t_acc[i][j], t_recips[i])
            unsaturated += -128 < y < 127
            tie = ((t_acc[i][j] + t_bias[j]) * t_recips[i]) % (1 << ROW_SCALE_SHIFT) \
                == 1 << (ROW_SCALE_SHIFT - 1)
            ties += tie and j < 2 and -128 < y < 127     # a tie seen unchanged at the output
    assert unsaturated >= 0.8 * n_ties * c, "the test data must leave most outputs unsaturated"
    assert ties >= 8, "the test data must contain exact ties of the row scale"
    clamped = 0
    for i in range(c):            # the row scale's 33-bit saturation, both signs
        for j in range(c):
            y = naive_row_scaled_requant_element(s_acc[i][j], s_bias[j], s_recips[i], 1,
                                                 s_shift[j])
            assert out["spad"][30 + i][j] == y, (i, j, s_acc[i][j], s_recips[i])
            x = (s_acc[i][j] + s_bias[j]) * s_recips[i] >> ROW_SCALE_SHIFT
            clamped += not -(1 << 32) <= x < 1 << 32
    assert c <= clamped <= c * c - c, "the test data must reach the 33-bit clamp, not always"


def test_transpose_needs_square_array():
    cfg = NPUConfig(rows=4, cols=8, spad_rows=64, acc_rows=64)
    acc, spad = random_memories(cfg, np.random.default_rng(1), 10)

    async def program(ctx, dut):
        return [await issue(ctx, dut.matrix, Opcode.MATMUL, "matmul",
                            dict(a_row=0, w_row=0, acc_row=0, m=2), transpose=1)]

    out = run_tile(cfg, acc, spad, program)
    assert out["results"][0][:2] == (ErrorCode.BAD_SIZE, 0)
    assert out["acc"] == acc


def test_exp_table_edges():
    from sw.golden import exp2_int
    n = np.arange(0, 16 * 9 + 5)
    assert list(exp2_int(n)) == [naive_exp(int(v)) for v in n]
    assert exp2_int([0])[0] == 127 and exp2_int([16 * 8])[0] == 0
    assert unpack(pack([1, -1], 8), 8, 2) == [1, -1]


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_requant_and_softmax_share_the_multiplier(cfg):
    """SOFTMAX, row-scaled REQUANTs (their two passes through the shared multiplier) and a plain
    REQUANT back to back, each right after the other, against the naive models: the row-scale
    clamp, int8 saturation, ReLU and ties all occur; every command takes its timing."""
    c, elems = cfg.cols, cfg.acc_row_elems
    rng = np.random.default_rng(11 + c)
    acc, spad = random_memories(cfg, rng, 1 << 31)
    for i in range(0, 24, 2):      # small rows (with a reciprocal near 2**16): ties, no clamp
        acc[i] = [int(v) for v in rng.integers(-300, 300, elems)]
    acc[1] = [-(2**31)] * elems
    acc[3] = [2**31 - 1] * elems
    acc[60:63] = requant_params(rng, c, elems)
    acc[63:66] = [[0] * elems, [1] * elems, [1] * elems]           # x / 2: ties for odd x
    recips = [int(v) for v in rng.integers(1 << 15, 1 << 17, 3 * c)]
    recips[1], recips[3], recips[5] = 2**31 - 1, 0, 2**31 - 1
    for g in range(3):
        acc[70 + g] = recips[g * c:(g + 1) * c] + [2**31] * (elems - c)   # bit 31 ignored
    sm = dict(acc_row=80, spad_row=90, n_rows=3, n_blocks=2, stride=3, scale_row=75,
              kv_len=2 * c, causal=0, q_offset=0, mult=40000, shift=12)
    rs = dict(acc_row=0, spad_row=10, n_rows=2 * c + 3, param_row=60, scale_row=70)
    rs_half = rs | dict(param_row=63, spad_row=40)
    plain = dict(acc_row=0, spad_row=50, n_rows=c + 1, param_row=60)
    steps = [("softmax", sm, {}), ("requant", rs, {"row_scale": 1}),
             ("requant", rs_half, {"row_scale": 1, "relu": 1}), ("requant", plain, {}),
             ("softmax", sm | dict(causal=1), {}), ("requant", rs, {"row_scale": 1})]

    async def program(ctx, dut):
        res = []
        for kind, body, flags in steps:
            op = Opcode.SOFTMAX if kind == "softmax" else Opcode.REQUANT
            res.append(await issue(ctx, dut.vector, op, kind, body, **flags))
            ctx.set(dut.acc_r.en, 1)
            ctx.set(dut.spad_r.en, 1)
            res.append((await read_rows(ctx, dut.acc_r, 32, elems, 0, cfg.acc_rows),
                        await read_rows(ctx, dut.spad_r, 8, cfg.spad_row_bytes, 0,
                                        cfg.spad_rows)))
            ctx.set(dut.acc_r.en, 0)
            ctx.set(dut.spad_r.en, 0)
        return res

    out = run_tile(cfg, acc, spad, program)["results"]
    clamps = ties = 0
    for k, (kind, body, flags) in enumerate(steps):
        error, _, cycles = out[2 * k]
        got_acc, got_spad = out[2 * k + 1]
        assert error == ErrorCode.NONE
        if kind == "softmax":
            naive_softmax(cfg, acc, spad, body)
            want = timing.softmax_busy_cycles(cfg, body["n_rows"], body["n_blocks"])
        elif flags.get("row_scale"):
            cl, ti = naive_row_scaled_requant(cfg, acc, spad, body, flags.get("relu", 0))
            clamps, ties = clamps + cl, ties + ti
            want = timing.requant_busy_cycles(cfg, body["n_rows"], row_scale=True)
        else:
            model_requant(cfg, spad, acc, body["acc_row"], body["spad_row"], body["n_rows"],
                          body["param_row"], False)
            want = timing.requant_busy_cycles(cfg, body["n_rows"])
        assert cycles == want + ACCEPT_CYCLES, (kind, body)
        assert got_spad == spad, f"scratchpad differs after {kind} {body} {flags}"
        assert got_acc == acc, f"accumulator differs after {kind} {body} {flags}"
    assert clamps > 10 and ties > 10, (clamps, ties)
    outputs = [v for i in range(rs["n_rows"]) for v in spad[rs["spad_row"] + i][:c]]
    assert -128 in outputs and 127 in outputs and len(set(outputs)) > 8
