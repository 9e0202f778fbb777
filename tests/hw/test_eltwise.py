"""ADD, LAYERNORM and GELU on the compute tile in Amaranth's simulator, against the golden
model and against deliberately naive scalar models written here (Python integers, one element
at a time, the ISA text transcribed; the square root and the reciprocal by ``math``/floats
checked to be exact): random blocks on 4x4 and 8x8, all-equal LayerNorm rows (variance 0),
GELU's input extremes, saturating residual sums, the busy cycles of
:mod:`hw.isa.timing`, and every error."""

import math

import numpy as np
import pytest

from hw.config import NPUConfig
from hw.isa import ACCEPT_CYCLES, LN_MAX_ELEMS, ErrorCode, Opcode, gelu_table, timing
from sw.golden import add_int, gelu_int, layernorm_int
from tests.hw.test_softmax import issue, random_memories, run_tile

CONFIGS = [NPUConfig(rows=4, cols=4, spad_rows=128, acc_rows=128),
           NPUConfig(rows=8, cols=8, spad_rows=128, acc_rows=128)]
IDS = [c.name for c in CONFIGS]


# -- naive models --------------------------------------------------------------------------------

def rshift(p: int, s: int) -> int:
    """round(p / 2**s), ties up, as a Python integer."""
    return (p + (1 << s >> 1)) >> s


def naive_x(a: int, b: int, ma: int, mb: int, shift: int) -> int:
    return max(-(1 << 15), min((1 << 15) - 1, rshift(a * ma, shift) + rshift(b * mb, shift)))


def naive_add(a, b, ma, mb, shift):
    return [[max(-128, min(127, (naive_x(x, y, p, q, shift) + 128) >> 8))
             for x, y, p, q in zip(ra, rb, ma, mb, strict=True)]
            for ra, rb in zip(a, b, strict=True)]


def naive_layernorm(a, b, ma, mb, shift, gamma, beta, g_shift):
    out = []
    for ra, rb in zip(a, b, strict=True):
        x = [naive_x(u, v, p, q, shift) for u, v, p, q in zip(ra, rb, ma, mb, strict=True)]
        n, s, q = len(x), sum(x), sum(v * v for v in x)
        d = n * q - s * s
        mu = math.floor(s * 256 / n + 0.5)            # exact: s * 256 / n is a float of < 53 bits
        if d:
            e = 0
            while d >= 4**(15 + e):                   # d / 4**e below 2**30
                e += 1
            while d < 4**(14 + e):                    # and at least 2**28
                e -= 1
            dn = d // 4**e if e >= 0 else d * 4**(-e)
            root = int(math.sqrt(dn))
            root -= root * root > dn
            root += (root + 1) ** 2 <= dn
            r = (n << 32) // root
        else:
            r = e = 0
        row = []
        for v, g, bt in zip(x, gamma, beta, strict=True):
            t = rshift(((v << 8) - mu) * r, 28 + e)
            row.append(max(-128, min(127, (rshift(t * g, g_shift) + bt + 128) >> 8)))
        out.append(row)
    return out


def naive_gelu(acc, bias, m1, s1, m2, s2):
    table = gelu_table()
    out = []
    for row in acc:
        o = []
        for v, bi, p, sa, q, sb in zip(row, bias, m1, s1, m2, s2, strict=True):
            y = max(-(1 << 15), min((1 << 15) - 1, rshift((v + bi) * p, sa)))
            i = (abs(y) + 4) >> 3
            g = max(y, 0) - (table[i] if i < len(table) else 0)
            o.append(max(-128, min(127, rshift(g * q, sb))))
        out.append(o)
    return out


def test_gelu_table_entries_by_hand():
    """Every entry is round(256 u Phi(-u)) at u = i / 32, computed here with erf (not erfc),
    round half up; a few by hand: u = 0.25 -> 64 * 0.40129 = 25.68 -> 26; u = 1 -> 256 *
    0.158655 = 40.62 -> 41; u = 3.96875 -> 0.037 -> 0."""
    table = gelu_table()
    assert len(table) == 128
    for i, v in enumerate(table):
        u = i / 32
        assert v == math.floor(256 * u * (1 - 0.5 * (1 + math.erf(u / math.sqrt(2)))) + 0.5), i
    assert (table[0], table[8], table[32], table[127]) == (0, 26, 41, 0)


def test_naive_gelu_table_is_the_erf_gelu():
    """The table reproduces GELU(x) = x Phi(x) within 0.01 on a fine grid (F = 8)."""
    for k in range(-2048, 2048):
        y = k
        i = (abs(y) + 4) >> 3
        table = gelu_table()
        g = (max(y, 0) - (table[i] if i < len(table) else 0)) / 256
        x = y / 256
        assert abs(g - 0.5 * x * (1 + math.erf(x / math.sqrt(2)))) < 0.0097


# -- helpers ---------------------------------------------------------------------------------------

def blocked(mem, row, stride, n, nb, c):
    return [sum((list(mem[row + blk * stride + i][:c]) for blk in range(nb)), [])
            for i in range(n)]


def params(acc, first, per, nb, c):
    """Parameter ``k`` of every channel: ``out[k][blk * c + j] = acc[first + per*blk + k][j]``."""
    return [sum((list(acc[first + per * blk + k][:c]) for blk in range(nb)), [])
            for k in range(per)]


def u31(v):
    return v % (1 << 31)


def sign_mag(v):
    mag = v % (1 << 31)
    return -mag if v < 0 else mag


def run(cfg, acc, spad, cmds):
    async def program(ctx, dut):
        res = []
        for op, kind, body in cmds:
            res.append(await issue(ctx, dut.vector, op, kind, body))
        return res
    return run_tile(cfg, acc, spad, program)


# -- ADD and LAYERNORM -----------------------------------------------------------------------------

@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_add_and_layernorm_random_blocks(cfg):
    """Random inputs, parameters for unsaturated outputs, an all-zero LayerNorm row (variance
    0, output = beta), a row of saturating sums (ADD outputs at 127/-128); against
    the naive models, the golden model and the busy cycles."""
    c = cfg.cols
    rng = np.random.default_rng(c + 1)
    acc, spad = random_memories(cfg, rng, 1000)
    n, nb, stride = 6, 3, 7
    for blk in range(nb):                        # LN parameters at rows 0.., ADD's at 40..
        acc[4 * blk] = [int(v) for v in rng.integers(1 << 20, 1 << 21, cfg.acc_row_elems)]
        acc[4 * blk + 1] = [int(v) for v in rng.integers(1 << 20, 1 << 21, cfg.acc_row_elems)]
        acc[4 * blk + 2] = [int(v) * int(s) for v, s in zip(
            rng.integers(1 << 18, 1 << 21, cfg.acc_row_elems),
            rng.choice([-1, 1], cfg.acc_row_elems), strict=True)]
        acc[4 * blk + 2] = [v if v >= 0 else -v | -(1 << 31) for v in acc[4 * blk + 2]]
        acc[4 * blk + 3] = [int(v) for v in rng.integers(-5000, 5000, cfg.acc_row_elems)]
        acc[40 + 2 * blk] = [int(v) for v in rng.integers(1 << 18, 1 << 22, cfg.acc_row_elems)]
        acc[41 + 2 * blk] = [int(v) for v in rng.integers(1 << 18, 1 << 22, cfg.acc_row_elems)]
    for blk in range(nb):                        # row 0 of the sum all zero: variance 0
        spad[blk * stride] = [0] * cfg.spad_row_bytes
        spad[30 + blk * stride] = [0] * cfg.spad_row_bytes
    for blk in range(nb):                        # row 5: saturating ADD (a, b at the extremes)
        spad[blk * stride + 5] = [127, -128] * (cfg.spad_row_bytes // 2)
        spad[30 + blk * stride + 5] = [127, -128] * (cfg.spad_row_bytes // 2)
    add_b = dict(a_row=0, b_row=30, out_row=60, n_rows=n, n_blocks=nb, stride=stride,
                 param_row=40, shift=16, g_shift=0)
    ln_b = dict(add_b, out_row=80, param_row=0, shift=16, g_shift=20)
    sat_b = dict(add_b, out_row=100, shift=10)
    out = run(cfg, acc, spad, [(Opcode.ADD, "eltwise", add_b),
                               (Opcode.LAYERNORM, "eltwise", ln_b),
                               (Opcode.ADD, "eltwise", sat_b)])
    (e1, _, cyc1), (e2, _, cyc2), (e3, _, _) = out["results"]
    assert (e1, e2, e3) == (ErrorCode.NONE,) * 3
    assert cyc1 == timing.eltwise_busy_cycles(cfg, Opcode.ADD, n, nb) + ACCEPT_CYCLES
    assert cyc2 == timing.eltwise_busy_cycles(cfg, Opcode.LAYERNORM, n, nb) + ACCEPT_CYCLES
    a, b = blocked(spad, 0, stride, n, nb, c), blocked(spad, 30, stride, n, nb, c)
    pa = params(acc, 40, 2, nb, c)
    want = naive_add(a, b, [u31(v) for v in pa[0]], [u31(v) for v in pa[1]], 16)
    got = blocked(out["spad"], 60, stride, n, nb, c)
    assert got == want
    assert want == add_int(a, b, [u31(v) for v in pa[0]], [u31(v) for v in pa[1]], 16).tolist()
    assert sum(127 > v > -128 for v in sum(want, [])) == n * nb * c
    sat = naive_add(a, b, [u31(v) for v in pa[0]], [u31(v) for v in pa[1]], 10)
    assert blocked(out["spad"], 100, stride, n, nb, c) == sat
    assert {127, -128} <= set(sat[5]), "row 5 must saturate"
    pl = params(acc, 0, 4, nb, c)
    ln_args = ([u31(v) for v in pl[0]], [u31(v) for v in pl[1]], 16,
               [sign_mag(v) for v in pl[2]], pl[3], 20)
    want = naive_layernorm(a, b, *ln_args)
    got = blocked(out["spad"], 80, stride, n, nb, c)
    assert got == want
    assert want == layernorm_int(a, b, *ln_args).tolist()
    # variance 0: the normalised value is 0, the output is round(beta / 256)
    assert want[0] == [max(-128, min(127, (v + 128) >> 8)) for v in pl[3]]
    assert sum(127 > v > -128 for v in sum(want[1:5], [])) > 0.9 * 4 * nb * c
    # untouched bytes beyond cols are 0
    assert all(r[c:] == [0] * (cfg.spad_row_bytes - c) for r in out["spad"][60:60 + 20])


@pytest.mark.parametrize("cfg", CONFIGS[:1], ids=IDS[:1])
def test_layernorm_variance_range(cfg):
    """Rows whose variance spans the normalisation: one element apart (D tiny: e < 0), the
    extremes of the 16-bit input (D near 2**48: e > 0), a constant row at the clamp (all
    equal after it: variance 0, output = beta)."""
    c = cfg.cols
    rng = np.random.default_rng(3)
    acc, spad = random_memories(cfg, rng, 10)
    nb, n = 2, 4
    for blk in range(nb):
        acc[4 * blk] = [1 << 24] * cfg.acc_row_elems      # x = 256 * a
        acc[4 * blk + 1] = [1 << 24] * cfg.acc_row_elems  # + 256 * b, clamped to 16 bits
        acc[4 * blk + 2] = [1 << 20] * cfg.acc_row_elems
        acc[4 * blk + 3] = [int(v) for v in rng.integers(-300, 300, cfg.acc_row_elems)]
    rows_a = [[0] * (nb * c), [127, -128] * (nb * c // 2), [100] * (nb * c),
              [int(v) for v in rng.integers(-128, 128, nb * c)]]
    rows_a[0][3] = 1
    rows_b = [[0] * (nb * c), [127, -128] * (nb * c // 2), [100] * (nb * c),
              [0] * (nb * c)]
    for i in range(n):
        for blk in range(nb):
            spad[blk * n + i] = rows_a[i][blk * c:(blk + 1) * c] + [0] * (cfg.spad_row_bytes - c)
            spad[20 + blk * n + i] = rows_b[i][blk * c:(blk + 1) * c] + \
                [0] * (cfg.spad_row_bytes - c)
    body = dict(a_row=0, b_row=20, out_row=40, n_rows=n, n_blocks=nb, stride=n, param_row=0,
                shift=16, g_shift=20)
    out = run(cfg, acc, spad, [(Opcode.LAYERNORM, "eltwise", body)])
    assert out["results"][0][0] == ErrorCode.NONE
    pl = params(acc, 0, 4, nb, c)
    args = (pl[0], pl[1], 16, pl[2], pl[3], 20)
    want = naive_layernorm(rows_a, rows_b, *args)
    assert blocked(out["spad"], 40, n, n, nb, c) == want
    assert want == layernorm_int(rows_a, rows_b, *args).tolist()
    assert want[2] == [max(-128, min(127, (v + 128) >> 8)) for v in pl[3]]
    # one element apart: it alone is +sqrt(N - 1) standard deviations
    assert want[0][3] == max(-128, min(127, round(16 * math.sqrt(nb * c - 1) + pl[3][3] / 256)))


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_layernorm_small_variances(cfg):
    """40 rows of small integer sums (x = a + b, |x| from 1 to 80: the variance normalised
    upwards, e < 0, half of the rows with an odd bit length), output ~ 64 x_hat: the exact
    mean (its floor for negative sums) and the reciprocal's precision show in the outputs."""
    c = cfg.cols
    cfg = NPUConfig(rows=cfg.rows, cols=c, spad_rows=512, acc_rows=128)
    rng = np.random.default_rng(40 + c)
    acc, spad = random_memories(cfg, rng, 10)
    n, nb = 40, 3
    for blk in range(nb):
        acc[4 * blk] = acc[4 * blk + 1] = [1 << 16] * cfg.acc_row_elems
        acc[4 * blk + 2] = [1 << 22] * cfg.acc_row_elems
        acc[4 * blk + 3] = [0] * cfg.acc_row_elems
    rows_a, rows_b = [], []
    for i in range(n):
        lim = 1 + i
        rows_a.append([int(v) for v in rng.integers(-lim, lim + 1, nb * c)])
        rows_b.append([int(v) for v in rng.integers(-lim // 2, lim // 2 + 1, nb * c)])
        for blk in range(nb):
            pad = [0] * (cfg.spad_row_bytes - c)
            spad[blk * n + i] = rows_a[i][blk * c:(blk + 1) * c] + pad
            spad[130 + blk * n + i] = rows_b[i][blk * c:(blk + 1) * c] + pad
    body = dict(a_row=0, b_row=130, out_row=260, n_rows=n, n_blocks=nb, stride=n, param_row=0,
                shift=16, g_shift=20)
    out = run(cfg, acc, spad, [(Opcode.LAYERNORM, "eltwise", body)])
    assert out["results"][0][0] == ErrorCode.NONE
    pl = params(acc, 0, 4, nb, c)
    want = naive_layernorm(rows_a, rows_b, *(pl[0], pl[1], 16, pl[2], pl[3], 20))
    assert blocked(out["spad"], 260, n, n, nb, c) == want
    assert sum(127 > v > -128 for v in sum(want, [])) > 0.95 * n * nb * c


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_gelu_random_and_extremes(cfg):
    """GELU of random accumulator rows, of inputs at and beyond the 16-bit clamp of the GELU
    domain (|x| >= 128) and around the table's end (|x| = 4), with shifts in both bytes of the
    shift word and junk above them; against the naive model and the golden model."""
    c = cfg.cols
    rng = np.random.default_rng(c)
    acc, spad = random_memories(cfg, rng, 1 << 20)
    n = 12
    acc[100] = [int(v) for v in rng.integers(-100, 100, cfg.acc_row_elems)]           # bias
    acc[101] = [int(v) for v in rng.integers(1 << 29, 1 << 31, cfg.acc_row_elems)]    # m1
    acc[102] = [40 | (35 << 8) | (0x5A << 16)] * cfg.acc_row_elems                   # s1, s2
    acc[103] = [int(v) for v in rng.integers(1 << 29, 1 << 31, cfg.acc_row_elems)]    # m2
    acc[0] = [(1 << 31) - 1, -(1 << 31)] * (cfg.acc_row_elems // 2)   # clamp of the domain
    acc[1] = [1 << 21, -(1 << 21)] * (cfg.acc_row_elems // 2)         # |x| ~ 4: table end
    acc[2] = [0] * cfg.acc_row_elems
    acc[104:108] = [list(r) for r in acc[100:104]]        # second pass shifts 30..63
    acc[106] = [int(a) | (int(b) << 8) for a, b in zip(
        rng.integers(30, 48, cfg.acc_row_elems), rng.integers(30, 64, cfg.acc_row_elems),
        strict=True)]
    out = run(cfg, acc, spad, [(Opcode.GELU, "requant",
                                dict(acc_row=0, spad_row=50, n_rows=n, param_row=100)),
                               (Opcode.GELU, "requant",
                                dict(acc_row=0, spad_row=70, n_rows=n, param_row=104))])
    err, _, cycles = out["results"][0]
    assert err == ErrorCode.NONE
    assert cycles == timing.gelu_busy_cycles(cfg, n) + ACCEPT_CYCLES
    p = [r[:c] for r in acc[100:104]]
    args = (p[0], [u31(v) for v in p[1]], [v & 63 for v in p[2]], [u31(v) for v in p[3]],
            [(v >> 8) & 63 for v in p[2]])
    rows = [r[:c] for r in acc[:n]]
    want = naive_gelu(rows, *args)
    assert [r[:c] for r in out["spad"][50:50 + n]] == want
    assert want == gelu_int(rows, *args).tolist()
    assert set(want[0]) == {127, 0} or set(want[0]) <= {127, 0, -1}   # +big -> x, -big -> 0
    p = [r[:c] for r in acc[104:108]]
    args = (p[0], [u31(v) for v in p[1]], [v & 63 for v in p[2]], [u31(v) for v in p[3]],
            [(v >> 8) & 63 for v in p[2]])
    assert [r[:c] for r in out["spad"][70:70 + n]] == naive_gelu(rows, *args) == \
        gelu_int(rows, *args).tolist()
    assert sum(127 > v > -128 for v in sum(want[3:], [])) > 0.5 * 9 * c


# -- errors ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("cfg", CONFIGS[:1], ids=IDS[:1])
def test_eltwise_and_gelu_errors(cfg):
    """Each check in the ISA's order: nothing written, the busy cycles of
    :mod:`hw.isa.timing` (a failing ADD/LAYERNORM 7: the span's product first), the right
    address."""
    acc, spad = random_memories(cfg, np.random.default_rng(0), 10)
    sp, ac = cfg.spad_rows, cfg.acc_rows
    base = dict(a_row=0, b_row=20, out_row=40, n_rows=4, n_blocks=2, stride=4, param_row=0,
                shift=3, g_shift=3)
    big = LN_MAX_ELEMS // cfg.cols + 1
    cases = [
        (Opcode.ADD, "eltwise", dict(base, stride=3), ErrorCode.BAD_SIZE, 3),
        (Opcode.LAYERNORM, "eltwise", dict(base, n_blocks=big, stride=4, b_row=sp - 1),
         ErrorCode.BAD_SIZE, big),
        (Opcode.ADD, "eltwise", dict(base, out_row=27), ErrorCode.BAD_SIZE, 27),   # over b
        (Opcode.LAYERNORM, "eltwise", dict(base, out_row=0, a_row=7), ErrorCode.BAD_SIZE, 0),
        (Opcode.ADD, "eltwise", dict(base, a_row=sp - 7, param_row=ac), ErrorCode.BAD_LOCAL_ADDR,
         sp),
        (Opcode.ADD, "eltwise", dict(base, b_row=sp + 3), ErrorCode.BAD_LOCAL_ADDR, sp + 3),
        (Opcode.LAYERNORM, "eltwise", dict(base, out_row=sp - 7), ErrorCode.BAD_LOCAL_ADDR, sp),
        (Opcode.LAYERNORM, "eltwise", dict(base, param_row=ac - 7), ErrorCode.BAD_LOCAL_ADDR,
         ac),
        (Opcode.ADD, "eltwise", dict(base, param_row=ac - 4), ErrorCode.NONE, 0),  # 4 rows: ok
        (Opcode.GELU, "requant", dict(acc_row=0, spad_row=0, n_rows=2, param_row=ac - 3),
         ErrorCode.BAD_LOCAL_ADDR, ac),
        (Opcode.GELU, "requant", dict(acc_row=ac - 1, spad_row=0, n_rows=2, param_row=0),
         ErrorCode.BAD_LOCAL_ADDR, ac),
        (Opcode.ADD, "eltwise", dict(base, n_rows=0, stride=0), ErrorCode.NONE, 0),
        (Opcode.LAYERNORM, "eltwise", dict(base, n_blocks=0, out_row=0), ErrorCode.NONE, 0),
    ]
    spad_before = [list(r) for r in spad]
    out = run(cfg, acc, spad, [(op, kind, body) for op, kind, body, _, _ in cases])
    for (op, _, body, code, addr), (err, got_addr, cycles) in zip(cases, out["results"],
                                                                  strict=True):
        assert (err, got_addr) == (code, addr), (op, body)
        if op == Opcode.GELU:
            want = timing.gelu_busy_cycles(cfg, body["n_rows"], error=code != ErrorCode.NONE)
        else:
            want = timing.eltwise_busy_cycles(cfg, op, body["n_rows"], body["n_blocks"],
                                              error=code != ErrorCode.NONE)
        assert cycles == want + ACCEPT_CYCLES, (op, body)
        if code != ErrorCode.NONE and op != Opcode.GELU:
            assert cycles == 7 + ACCEPT_CYCLES
    changed = [i for i, (x, y) in enumerate(zip(spad_before, out["spad"], strict=True)) if x != y]
    assert changed == list(range(40, 44)) + list(range(44, 48)), changed  # the one valid ADD
