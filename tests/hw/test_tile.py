"""ComputeTile in Amaranth's simulator: MATMUL and REQUANT against naive integer models.

The test plays the DMA: it fills the memories through the tile's DMA write ports, issues
commands on the engine ports, and reads the memories back through the DMA read ports.
"""

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.config import NPUConfig
from hw.isa import ACCEPT_CYCLES, Command, ErrorCode, Opcode, timing
from hw.tile import ComputeTile

CONFIGS = [
    NPUConfig(rows=4, cols=4, spad_rows=64, acc_rows=64),
    NPUConfig(rows=4, cols=8, spad_rows=64, acc_rows=64),
    NPUConfig(rows=8, cols=8, spad_rows=64, acc_rows=64),
]
IDS = [c.name for c in CONFIGS]


def matmul_period(cfg, m):
    """Cycles from a MATMUL's accept to its done, both counted (what :func:`command` counts)."""
    return timing.matmul_busy_cycles(cfg, m) + ACCEPT_CYCLES


# -- naive models -----------------------------------------------------------------------------

def wrap32(v: int) -> int:
    return (v + 2**31) % 2**32 - 2**31


def model_matmul(cfg, spad, acc, a_row, w_row, acc_row, m, accumulate, transpose=False):
    """acc[acc_row + i][n] (+)= sum_k A[i][k] * W[k][n], int32 wrap; elements >= cols -> 0.
    ``transpose``: W[k][n] = spad[w_row + n][k]."""
    for i in range(m):
        out = [0] * cfg.acc_row_elems
        for n in range(cfg.cols):
            s = 0
            for k in range(cfg.rows):
                w = spad[w_row + n][k] if transpose else spad[w_row + k][n]
                s += spad[a_row + i][k] * w
            out[n] = wrap32((acc[acc_row + i][n] if accumulate else 0) + s)
        acc[acc_row + i] = out


def model_requant(cfg, spad, acc, acc_row, spad_row, n_rows, param_row, relu):
    """Scalar Python transcription of the RequantBody docstring."""
    bias, mult, shift = acc[param_row], acc[param_row + 1], acc[param_row + 2]
    for i in range(n_rows):
        out = [0] * cfg.spad_row_bytes
        for j in range(cfg.cols):
            x = acc[acc_row + i][j] + bias[j]
            mj, sj = mult[j] % 2**31, shift[j] % 64
            rnd = (1 << (sj - 1)) if sj else 0
            y = (x * mj + rnd) >> sj
            y = max(-128, min(127, y))
            out[j] = max(y, 0) if relu else y
        spad[spad_row + i] = out


# -- DMA-side and command-side drivers --------------------------------------------------------

def pack(values, bits):
    return sum((int(v) % 2**bits) << (bits * j) for j, v in enumerate(values))


def unpack(word, bits, n):
    out = []
    for j in range(n):
        v = (word >> (bits * j)) % 2**bits
        out.append(v - 2**bits if v >= 2**(bits - 1) else v)
    return out


async def write_rows(ctx, port, bits, first, rows):
    for i, row in enumerate(rows):
        ctx.set(port.en, 1)
        ctx.set(port.addr, first + i)
        ctx.set(port.data, pack(row, bits))
        await ctx.tick()
    ctx.set(port.en, 0)


async def read_rows(ctx, port, bits, n_elems, first, count):
    rows = []
    for i in range(count):
        ctx.set(port.addr, first + i)
        await ctx.tick()
        rows.append(unpack(ctx.get(port.data), bits, n_elems))
    return rows


async def command(ctx, port, opcode, body, **flags):
    """Issue one command; return (error, error_addr, cycles from accept to done inclusive)."""
    kind = {Opcode.MATMUL: "matmul", Opcode.REQUANT: "requant"}.get(opcode, "matmul")
    cmd = Command.const({"header": {"opcode": opcode, "flags": flags}, "body": {kind: body}})
    assert ctx.get(port.cmd.ready) and not ctx.get(port.busy)
    ctx.set(port.cmd.payload, cmd)
    ctx.set(port.cmd.valid, 1)
    await ctx.tick()
    ctx.set(port.cmd.valid, 0)
    cycles = 1
    while True:
        # (the matrix engine may take the next command meanwhile: tests/hw/test_timing.py)
        assert ctx.get(port.busy)
        cycles += 1
        if ctx.get(port.done):
            break
        await ctx.tick()
        assert cycles < 10_000, "command never retired"
    error, error_addr = ErrorCode(ctx.get(port.error)), ctx.get(port.error_addr)
    await ctx.tick()
    assert not ctx.get(port.done) and not ctx.get(port.busy)
    return error, error_addr, cycles


class Memories:
    """The test's copy of both memories (lists of rows of Python ints) and DMA accessors."""

    def __init__(self, cfg, dut):
        self.cfg, self.dut = cfg, dut
        self.spad = [[0] * cfg.spad_row_bytes for _ in range(cfg.spad_rows)]
        self.acc = [[0] * cfg.acc_row_elems for _ in range(cfg.acc_rows)]

    async def upload(self, ctx):
        await write_rows(ctx, self.dut.spad_w, 8, 0, self.spad)
        await write_rows(ctx, self.dut.acc_w, 32, 0, self.acc)

    async def check(self, ctx, what=""):
        cfg = self.cfg
        spad = await read_rows(ctx, self.dut.spad_r, 8, cfg.spad_row_bytes, 0, cfg.spad_rows)
        acc = await read_rows(ctx, self.dut.acc_r, 32, cfg.acc_row_elems, 0, cfg.acc_rows)
        for i in range(cfg.spad_rows):
            assert spad[i] == self.spad[i], f"{what}: spad row {i}"
        for i in range(cfg.acc_rows):
            assert acc[i] == self.acc[i], f"{what}: acc row {i}"


def simulate(cfg, testbench):
    dut = ComputeTile(cfg)
    mem = Memories(cfg, dut)
    sim = Simulator(dut)
    sim.add_clock(1e-6)

    async def tb(ctx):
        await testbench(ctx, dut, mem)

    sim.add_testbench(tb)
    sim.run()


def random_int8_rows(rng, n, width, used):
    x = rng.integers(-128, 128, size=(n, width))
    x[:, used:] = 0
    x[0, 0], x[-1, 0] = -128, 127
    return x.tolist()


# -- MATMUL -----------------------------------------------------------------------------------

@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_matmul(cfg):
    rng = np.random.default_rng(cfg.rows * 10 + cfg.cols)
    width = cfg.spad_row_bytes

    async def tb(ctx, dut, mem):
        mem.spad[:] = random_int8_rows(rng, cfg.spad_rows, width, max(cfg.rows, cfg.cols))
        mem.spad[0] = [-128] * width    # extreme activations and weights
        mem.spad[1:1 + cfg.rows] = [[-128] * width] * cfg.rows
        acc = rng.integers(-2**31, 2**31, size=(cfg.acc_rows, cfg.acc_row_elems))
        acc[:4] = 2**31 - 1             # accumulate across the int32 wrap
        mem.acc[:] = acc.tolist()
        await mem.upload(ctx)
        # (a_row, w_row, acc_row, m, accumulate)
        steps = [
            (0, 1, 0, 1, True),         # -128 * -128 summed, onto 2**31 - 1: wraps
            (0, 1, 1, 1, False),
            (5, 20, 2, 2, True),
            (9, 3, 10, 7, False),
            (9, 40, 10, 7, True),
            (12, 50, 20, 40, False),
            (20, 0, 20, 40, True),
            (0, 60 - cfg.rows, 3, 2, True),
            (63, 64 - cfg.rows, 63, 1, True),   # last rows of both memories
        ]
        for a_row, w_row, acc_row, m, accumulate in steps:
            body = {"a_row": a_row, "w_row": w_row, "acc_row": acc_row, "m": m}
            error, _, cycles = await command(ctx, dut.matrix, Opcode.MATMUL, body,
                                             accumulate=accumulate)
            assert error == ErrorCode.NONE
            assert cycles == matmul_period(cfg, m)
            model_matmul(cfg, mem.spad, mem.acc, a_row, w_row, acc_row, m, accumulate)
            await mem.check(ctx, f"MATMUL {body} accumulate={accumulate}")

    simulate(cfg, tb)


def back_to_back_commands(cfg, rng, n):
    """A random MATMUL stream for :func:`test_matmul_back_to_back`: ``(opcode, body, flags)``.

    Sizes around ``rows``, ``cols`` and ``max(rows, cols)`` (where the issue stage's length
    switches from the weight load to ``m``); 1 to 3 K blocks per command (``k_len`` 0 to 2);
    K chains (the same accumulator rows, accumulate);
    a command whose first row is the previous one's last row (written in the cycle it is read
    again); transposed weights on square arrays; failing and empty commands in between."""
    big = max(cfg.rows, cfg.cols)
    sizes = [1, 2, cfg.rows - 1, cfg.rows, cfg.cols + 1, big, big + 1, 2 * big + 3]
    out, prev = [], None
    for _ in range(n):
        kind = rng.choice(["run"] * 6 + ["chain", "adjacent"] * 2 + ["error"] * 2 + ["empty"])
        m = int(rng.choice(sizes))
        span = int(rng.choice([1, 1, 2, 3]))           # K blocks
        body = {"a_row": int(rng.integers(0, cfg.spad_rows - span * m)),
                "w_row": int(rng.integers(0, cfg.spad_rows - span * big)),
                "acc_row": int(rng.integers(0, cfg.acc_rows - m)), "m": m, "k_len": span - 1}
        flags = {"accumulate": int(rng.integers(0, 2)),
                 "transpose": int(cfg.rows == cfg.cols and rng.integers(0, 4) == 0)}
        op = Opcode.MATMUL
        if kind == "chain" and prev is not None:
            body.update(acc_row=prev["acc_row"], m=prev["m"])
            flags["accumulate"] = 1
        elif kind == "adjacent" and prev is not None and prev["m"] >= big:
            body["acc_row"] = prev["acc_row"] + prev["m"] - 1
            body["m"] = min(body["m"], cfg.acc_rows - body["acc_row"])
            flags["accumulate"] = 1
        elif kind == "error":
            op, body = rng.choice([
                (Opcode.MATMUL, body | {"a_row": cfg.spad_rows - 1, "m": 3}),
                (Opcode.MATMUL, body | {"acc_row": cfg.acc_rows - 1, "m": 2}),
                # K blocks past the end of the scratchpad (activations, then weights)
                (Opcode.MATMUL, body | {"a_row": cfg.spad_rows - 7, "m": 3, "k_len": 2}),
                (Opcode.MATMUL, body | {"a_row": 0, "w_row": cfg.spad_rows - 2 * cfg.rows,
                                        "m": 1, "k_len": 2}),
                (Opcode.REQUANT, body)])
            if cfg.rows != cfg.cols and rng.integers(0, 2):
                op, flags["transpose"] = Opcode.MATMUL, 1
        elif kind == "empty":
            body["m"] = 0
        out.append((op, body, flags))
        if op == Opcode.MATMUL and body["m"]:
            prev = body
    return out


def expected_error(cfg, op, body, flags):
    """(error, error_addr) of a MATMUL-port command, in the engine's order of checks."""
    if op != Opcode.MATMUL:
        return ErrorCode.BAD_OPCODE, 0
    m = body["m"]
    blocks = body.get("k_len", 0) + 1
    if m == 0:
        return ErrorCode.NONE, 0
    if flags.get("transpose") and cfg.rows != cfg.cols:
        return ErrorCode.BAD_SIZE, 0
    for start, count, depth in ((body["a_row"], blocks * m, cfg.spad_rows),
                                (body["w_row"], blocks * cfg.rows, cfg.spad_rows),
                                (body["acc_row"], m, cfg.acc_rows)):
        if start + count > depth:
            return ErrorCode.BAD_LOCAL_ADDR, max(start, depth)
    return ErrorCode.NONE, 0


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_matmul_back_to_back(cfg):
    """A stream of MATMULs offered as the command processor does (as soon as the engine takes
    one, at most ``matmul_in_flight`` taken and not retired; sometimes after a pause): every
    handshake and every ``done`` in the cycle :class:`hw.isa.timing.MatmulTimeline` gives, the
    errors in order, and both memories equal to the naive model run command by command."""
    rng = np.random.default_rng(77 + cfg.rows * 10 + cfg.cols)
    cmds = back_to_back_commands(cfg, rng, 60)
    limit = timing.matmul_in_flight(cfg)

    async def tb(ctx, dut, mem):
        width = cfg.spad_row_bytes
        mem.spad[:] = random_int8_rows(rng, cfg.spad_rows, width, width)
        mem.acc[:] = rng.integers(-2**31, 2**31, size=(cfg.acc_rows, cfg.acc_row_elems)).tolist()
        await mem.upload(ctx)
        port = dut.matrix
        takes, dones, errors = [], [], []
        earliest = [0]          # first cycle the driver offers each command
        in_flight, i, cycle, pause = 0, 0, 0, 0
        while len(dones) < len(cmds):
            offer = i < len(cmds) and in_flight < limit and pause == 0
            if offer:
                op, body, flags = cmds[i]
                ctx.set(port.cmd.payload, Command.const(
                    {"header": {"opcode": op, "flags": flags}, "body": {"matmul": body}}))
            ctx.set(port.cmd.valid, offer)
            _, _, ready, done, err, addr = await ctx.tick().sample(
                port.cmd.ready, port.done, port.error, port.error_addr)
            if offer and ready:
                takes.append(cycle)
                in_flight += 1
                i += 1
                pause = int(rng.integers(1, 6)) if rng.integers(0, 6) == 0 else 0
                earliest.append(cycle + 1 + pause)
            elif pause:
                pause -= 1
            if done:
                dones.append(cycle)
                errors.append((ErrorCode(err), addr if err else 0))
                in_flight -= 1
            cycle += 1
            assert cycle < 20_000, "the stream never finished"
        ctx.set(port.cmd.valid, 0)
        await ctx.tick()
        assert not ctx.get(port.busy)

        line = timing.MatmulTimeline(cfg)
        for k, (op, body, flags) in enumerate(cmds):
            assert errors[k] == expected_error(cfg, op, body, flags), (k, cmds[k])
            failed = errors[k][0] != ErrorCode.NONE
            t = line.take(takes[k], body["m"], k_blocks=body["k_len"] + 1, error=failed)
            assert dones[k] == t.done, (k, cmds[k])
            if k + 1 < len(cmds):
                # taken in the first cycle both the driver offers it and the engine can
                assert takes[k + 1] == max(t.accept_from, earliest[k + 1]), (k, cmds[k])
            if op == Opcode.MATMUL and not failed:
                for j in range(body["k_len"] + 1):     # block j adds to block j - 1
                    model_matmul(cfg, mem.spad, mem.acc, body["a_row"] + j * body["m"],
                                 body["w_row"] + j * cfg.rows, body["acc_row"], body["m"],
                                 flags["accumulate"] or j > 0, flags["transpose"])
        assert sum(e != ErrorCode.NONE for e, _ in errors) >= 3
        await mem.check(ctx, "back-to-back MATMULs")

    simulate(cfg, tb)


# -- REQUANT ----------------------------------------------------------------------------------

def requant_params(rng, cols, elems):
    """bias, multiplier, shift rows that hit ties, saturation, shift 0 and large shifts."""
    bias = rng.integers(-2**31, 2**31, size=elems)
    mult = rng.integers(0, 2**31, size=elems)
    shift = rng.integers(0, 64, size=elems)
    special = [  # (bias, multiplier, shift)
        (0, 1, 1),                  # x / 2: a tie for every odd x
        (0, 3, 2),                  # 3x / 4: ties when 3x = 2 mod 4
        (0, 1, 0),                  # shift 0: plain clamp, saturates both sides
        (-2**31, 2**31 - 1, 63),    # largest multiplier and shift, most negative bias
        (2**31 - 1, 2**31 - 1, 40),
        (7, 0, 5),                  # multiplier 0
        (0, 5, 3),                  # 5x / 8: ties when 5x = 4 mod 8
        (0, 2**30, 31),             # x / 2: a tie for every odd x, through a 31-bit shift
    ]
    for j, (b, mlt, s) in enumerate(special[:cols]):
        bias[j], mult[j], shift[j] = b, mlt, s
    shift[cols:] = 0x7FFFFFC0       # ignored columns; and upper bits of shift are ignored
    shift[:cols] += rng.integers(0, 2, size=cols) * 64 * 3
    mult[cols - 1] += 2**31         # bit 31 of the multiplier is ignored
    return [bias.tolist(), [wrap32(int(v)) for v in mult], [wrap32(int(v)) for v in shift]]


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_requant(cfg):
    rng = np.random.default_rng(1000 + cfg.rows * 10 + cfg.cols)
    elems = cfg.acc_row_elems

    async def tb(ctx, dut, mem):
        mem.spad[:] = random_int8_rows(rng, cfg.spad_rows, cfg.spad_row_bytes,
                                       cfg.spad_row_bytes)
        small = rng.integers(-300, 300, size=(32, elems))     # rounding and ties
        big = rng.integers(-2**31, 2**31, size=(24, elems))   # saturation
        big[0], big[1] = -2**31, 2**31 - 1
        mem.acc[:56] = small.tolist() + big.tolist()
        mem.acc[56:59] = requant_params(rng, cfg.cols, elems)
        mem.acc[59:62] = [[0] * elems, [1] * elems, [1] * elems]    # x / 2 everywhere
        await mem.upload(ctx)
        steps = [  # (acc_row, spad_row, n_rows, param_row, relu)
            (0, 0, 1, 56, False),
            (1, 3, 2, 56, True),
            (0, 8, 56, 56, False),
            (0, 5, 40, 56, True),
            (0, 0, 32, 59, False),
            (40, 63, 1, 61 - 2, True),
        ]
        ties = 0
        for acc_row, spad_row, n_rows, param_row, relu in steps:
            body = {"acc_row": acc_row, "spad_row": spad_row, "n_rows": n_rows,
                    "param_row": param_row}
            error, _, cycles = await command(ctx, dut.vector, Opcode.REQUANT, body, relu=relu)
            assert error == ErrorCode.NONE
            assert cycles == timing.requant_busy_cycles(cfg, n_rows) + ACCEPT_CYCLES
            model_requant(cfg, mem.spad, mem.acc, acc_row, spad_row, n_rows, param_row, relu)
            await mem.check(ctx, f"REQUANT {body} relu={relu}")
            b, mlt, s = mem.acc[param_row:param_row + 3]
            for i in range(n_rows):
                for j in range(cfg.cols):
                    sj = s[j] % 64
                    x = (mem.acc[acc_row + i][j] + b[j]) * (mlt[j] % 2**31)
                    ties += sj > 0 and x % 2**sj == 2**(sj - 1) and -128 <= x >> sj <= 127
        assert ties > 20, "the test data must contain exact ties"

    simulate(cfg, tb)


# -- both engines at once ---------------------------------------------------------------------

def test_engines_run_concurrently():
    cfg = CONFIGS[1]
    rng = np.random.default_rng(5)

    async def tb(ctx, dut, mem):
        mem.spad[:] = random_int8_rows(rng, cfg.spad_rows, cfg.spad_row_bytes,
                                       cfg.spad_row_bytes)
        mem.acc[:] = rng.integers(-5000, 5000, size=(cfg.acc_rows, cfg.acc_row_elems)).tolist()
        mem.acc[40:43] = [[3] * 8, [2**20] * 8, [22] * 8]
        await mem.upload(ctx)
        mat = {"header": {"opcode": Opcode.MATMUL}, "body": {"matmul": {
            "a_row": 0, "w_row": 30, "acc_row": 0, "m": 20}}}
        req = {"header": {"opcode": Opcode.REQUANT}, "body": {"requant": {
            "acc_row": 20, "spad_row": 40, "n_rows": 20, "param_row": 40}}}
        for port, fields in ((dut.matrix, mat), (dut.vector, req)):
            ctx.set(port.cmd.payload, Command.const(fields))
            ctx.set(port.cmd.valid, 1)
        await ctx.tick()
        ctx.set(dut.matrix.cmd.valid, 0)
        ctx.set(dut.vector.cmd.valid, 0)
        done = set()
        for _ in range(200):
            for name in ("matrix", "vector"):
                port = getattr(dut, name)
                if ctx.get(port.done):
                    assert ErrorCode(ctx.get(port.error)) == ErrorCode.NONE
                    done.add(name)
            if len(done) == 2:
                break
            await ctx.tick()
        assert done == {"matrix", "vector"}
        await ctx.tick()
        model_matmul(cfg, mem.spad, mem.acc, 0, 30, 0, 20, False)
        model_requant(cfg, mem.spad, mem.acc, 20, 40, 20, 40, False)
        await mem.check(ctx, "concurrent MATMUL and REQUANT")

    simulate(cfg, tb)


# -- one write port per memory: matrix, softmax and DMA write at once ---------------------------

async def dma_writes(ctx, port, bits, rows, *, gap=0):
    """Play the DMA load channel on an arbitrated write port: write ``rows`` (``(row, values)``)
    in order, each held until ``ready`` at a clock edge, ``gap`` idle cycles after each.
    Returns the number of cycles a write was denied."""
    denied = 0
    for addr, values in rows:
        ctx.set(port.en, 1)
        ctx.set(port.addr, addr)
        ctx.set(port.data, pack(values, bits))
        while True:
            _, _, ready = await ctx.tick().sample(port.ready)
            if ready:
                break
            denied += 1
        ctx.set(port.en, 0)
        for _ in range(gap):
            await ctx.tick()
    return denied


def test_shared_write_ports():
    """MATMULs, a SOFTMAX and DMA writes use the accumulator's one write port (and the
    softmax and the DMA the scratchpad's) in the same cycles: the matrix engine never waits,
    the softmax reciprocal write waits exactly the cycles ``stall.vector_acc`` counts, the DMA
    waits its turn, and every row ends up right."""
    from tests.hw.test_softmax import issue, naive_softmax
    cfg = NPUConfig(rows=4, cols=4, spad_rows=128, acc_rows=128)
    rng = np.random.default_rng(21)
    elems, width = cfg.acc_row_elems, cfg.spad_row_bytes
    n_mat, m = 6, 40
    sm = dict(acc_row=60, spad_row=100, n_rows=8, n_blocks=2, stride=8, scale_row=90,
              kv_len=7, causal=0, q_offset=0, mult=40000, shift=16)
    dma_acc = [(110 + i % 18, rng.integers(-2**31, 2**31, elems).tolist()) for i in range(60)]
    dma_spad = [(80 + i % 20, rng.integers(-128, 128, width).tolist()) for i in range(60)]

    dut = ComputeTile(cfg)
    mem = Memories(cfg, dut)
    mem.spad[:] = random_int8_rows(rng, cfg.spad_rows, width, width)
    mem.acc[:] = rng.integers(-3000, 3000, size=(cfg.acc_rows, elems)).tolist()
    want_spad = [list(r) for r in mem.spad]
    want_acc = [list(r) for r in mem.acc]
    naive_softmax(cfg, want_acc, want_spad, sm)
    for k in range(n_mat):
        model_matmul(cfg, want_spad, want_acc, k, 50 + 4 * k, 0, m, k > 0)
    for row, values in dma_acc:
        want_acc[row] = values
    for row, values in dma_spad:
        want_spad[row] = values
    state = {"uploaded": False, "vector_acc": 0}
    results = {}

    async def wait_upload(ctx):
        while not state["uploaded"]:
            await ctx.tick()

    async def matrix(ctx):
        await mem.upload(ctx)
        state["uploaded"] = True
        for k in range(n_mat):
            body = {"a_row": k, "w_row": 50 + 4 * k, "acc_row": 0, "m": m}
            error, _, cycles = await command(ctx, dut.matrix, Opcode.MATMUL, body,
                                             accumulate=k > 0)
            # the matrix engine's writes never wait
            assert (error, cycles) == (ErrorCode.NONE, matmul_period(cfg, m))
        results["matrix"] = True

    async def softmax(ctx):
        await wait_upload(ctx)
        # 40 cycles: its first reciprocal write lands 13 cycles into the fifth MATMUL's 40
        # row writes (with 20 it fell into the gap between two MATMULs and never waited)
        for _ in range(40):
            await ctx.tick()
        results["softmax"] = await issue(ctx, dut.vector, Opcode.SOFTMAX, "softmax", sm)

    async def dma_acc_writer(ctx):
        await wait_upload(ctx)
        results["dma_acc"] = await dma_writes(ctx, dut.acc_w, 32, dma_acc, gap=3)

    async def dma_spad_writer(ctx):
        await wait_upload(ctx)
        results["dma_spad"] = await dma_writes(ctx, dut.spad_w, 8, dma_spad, gap=3)

    async def watch(ctx):
        await wait_upload(ctx)
        async for _, _, stall in ctx.tick().sample(dut.stall.vector_acc):
            state["vector_acc"] += stall

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(matrix)
    sim.add_testbench(softmax)
    sim.add_testbench(dma_acc_writer)
    sim.add_testbench(dma_spad_writer)
    sim.add_testbench(watch, background=True)

    async def check(ctx):
        await wait_upload(ctx)
        while len(results) < 4:
            await ctx.tick()
        mem.spad, mem.acc = want_spad, want_acc
        await mem.check(ctx, "MATMUL + SOFTMAX + DMA writes")

    sim.add_testbench(check)
    sim.run()

    error, _, cycles = results["softmax"]
    assert error == ErrorCode.NONE
    # the reciprocal writes collided with MATMUL writes and waited exactly that long
    assert state["vector_acc"] > 0
    assert cycles == timing.softmax_busy_cycles(cfg, sm["n_rows"], sm["n_blocks"],
                                                acc_write_waits=state["vector_acc"]) + ACCEPT_CYCLES
    assert results["dma_acc"] > 0 and results["dma_spad"] > 0, results


# -- errors -----------------------------------------------------------------------------------

def test_errors_write_nothing():
    cfg = CONFIGS[1]    # rows=4, cols=8, 64 rows each
    rng = np.random.default_rng(9)

    async def tb(ctx, dut, mem):
        mem.spad[:] = random_int8_rows(rng, 64, cfg.spad_row_bytes, cfg.spad_row_bytes)
        mem.acc[:] = rng.integers(-2**31, 2**31, size=(64, cfg.acc_row_elems)).tolist()
        await mem.upload(ctx)

        def matmul(a_row, w_row, acc_row, m):
            return (dut.matrix, Opcode.MATMUL,
                    {"a_row": a_row, "w_row": w_row, "acc_row": acc_row, "m": m})

        def requant(acc_row, spad_row, n_rows, param_row):
            return (dut.vector, Opcode.REQUANT, {"acc_row": acc_row, "spad_row": spad_row,
                                                 "n_rows": n_rows, "param_row": param_row})

        cases = [  # (command, expected error, expected error_addr)
            (matmul(60, 0, 0, 5), ErrorCode.BAD_LOCAL_ADDR, 64),
            (matmul(100, 0, 0, 1), ErrorCode.BAD_LOCAL_ADDR, 100),
            (matmul(0xFFFF, 0, 0, 0xFFFF), ErrorCode.BAD_LOCAL_ADDR, 0xFFFF),
            (matmul(0, 61, 0, 1), ErrorCode.BAD_LOCAL_ADDR, 64),
            (matmul(0, 64, 0, 1), ErrorCode.BAD_LOCAL_ADDR, 64),
            (matmul(0, 0, 63, 2), ErrorCode.BAD_LOCAL_ADDR, 64),
            (matmul(0, 0, 200, 1), ErrorCode.BAD_LOCAL_ADDR, 200),
            (matmul(100, 100, 100, 0), ErrorCode.NONE, 0),          # m = 0: nothing
            (requant(62, 0, 3, 0), ErrorCode.BAD_LOCAL_ADDR, 64),
            (requant(0, 60, 5, 0), ErrorCode.BAD_LOCAL_ADDR, 64),
            (requant(0, 70, 1, 0), ErrorCode.BAD_LOCAL_ADDR, 70),
            (requant(0, 0, 1, 62), ErrorCode.BAD_LOCAL_ADDR, 64),
            (requant(0, 0, 1, 0xFFFF), ErrorCode.BAD_LOCAL_ADDR, 0xFFFF),
            (requant(100, 100, 0, 100), ErrorCode.NONE, 0),         # n_rows = 0: nothing
        ]
        for port, opcode, body in ((dut.matrix, Opcode.REQUANT, {}),
                                   (dut.vector, Opcode.MATMUL, {})):
            error, addr, _ = await command(ctx, port, opcode, body)
            assert error == ErrorCode.BAD_OPCODE
        for (port, opcode, body), want_error, want_addr in cases:
            error, addr, cycles = await command(ctx, port, opcode, body)
            assert (error, addr) == (want_error, want_addr), body
            failed = want_error != ErrorCode.NONE
            busy = (timing.matmul_busy_cycles(cfg, body["m"], error=failed)
                    if opcode == Opcode.MATMUL else
                    timing.requant_busy_cycles(cfg, body["n_rows"], error=failed))
            assert cycles == busy + ACCEPT_CYCLES == (4 if opcode == Opcode.MATMUL else 3)
        await mem.check(ctx, "after failing commands")

    simulate(cfg, tb)


def test_bad_config():
    with pytest.raises(TypeError, match="NPUConfig"):
        ComputeTile({"rows": 4})


# -- the default configuration, full-size memories --------------------------------------------

def test_default_config():
    """NPUConfig() as built (8x8, 4096 scratchpad rows, 1024 accumulator rows): one MATMUL and
    one REQUANT at the top of the memories, one boundary error; only touched rows read back."""
    cfg = NPUConfig()
    rng = np.random.default_rng(11)

    async def tb(ctx, dut, mem):
        a_row, w_row, acc_row, m = cfg.spad_rows - 5, cfg.spad_rows - 13, cfg.acc_rows - 8, 5
        mem.spad[w_row:] = random_int8_rows(rng, 13, cfg.spad_row_bytes, 8)
        mem.acc[acc_row:] = rng.integers(-2**31, 2**31, size=(8, 8)).tolist()
        mem.acc[acc_row + 5:] = [[0] * 8, [2**29] * 8, [37] * 8]
        await write_rows(ctx, dut.spad_w, 8, w_row, mem.spad[w_row:])
        await write_rows(ctx, dut.acc_w, 32, acc_row, mem.acc[acc_row:])
        body = {"a_row": a_row, "w_row": w_row, "acc_row": acc_row, "m": m}
        error, _, cycles = await command(ctx, dut.matrix, Opcode.MATMUL, body, accumulate=1)
        assert (error, cycles) == (ErrorCode.NONE, matmul_period(cfg, m))
        model_matmul(cfg, mem.spad, mem.acc, a_row, w_row, acc_row, m, True)
        body = {"acc_row": acc_row, "spad_row": 0, "n_rows": m, "param_row": acc_row + 5}
        error, _, _ = await command(ctx, dut.vector, Opcode.REQUANT, body, relu=1)
        assert error == ErrorCode.NONE
        model_requant(cfg, mem.spad, mem.acc, acc_row, 0, m, acc_row + 5, True)
        body = {"a_row": a_row, "w_row": w_row, "acc_row": acc_row, "m": 9}
        error, addr, _ = await command(ctx, dut.matrix, Opcode.MATMUL, body)
        assert (error, addr) == (ErrorCode.BAD_LOCAL_ADDR, cfg.spad_rows)
        # the accumulator (1024 rows) is shallower than the scratchpad (4096): each engine
        # checks every row range against its own memory's depth
        assert cfg.acc_rows < cfg.spad_rows
        for port, opcode, body, want in (
                (dut.matrix, Opcode.MATMUL,
                 {"a_row": 0, "w_row": w_row, "acc_row": acc_row, "m": 9}, cfg.acc_rows),
                (dut.vector, Opcode.REQUANT, {"acc_row": cfg.acc_rows - 2, "spad_row": 0,
                                              "n_rows": 5, "param_row": 0}, cfg.acc_rows),
                (dut.vector, Opcode.REQUANT, {"acc_row": 0, "spad_row": cfg.spad_rows - 2,
                                              "n_rows": 5, "param_row": 0}, cfg.spad_rows),
                (dut.vector, Opcode.REQUANT, {"acc_row": 0, "spad_row": 0, "n_rows": 1,
                                              "param_row": cfg.acc_rows - 2}, cfg.acc_rows)):
            error, addr, _ = await command(ctx, port, opcode, body)
            assert (error, addr) == (ErrorCode.BAD_LOCAL_ADDR, want), body
        assert await read_rows(ctx, dut.acc_r, 32, 8, acc_row, 8) == mem.acc[acc_row:]
        assert await read_rows(ctx, dut.spad_r, 8, 8, 0, m) == mem.spad[:m]
        assert await read_rows(ctx, dut.spad_r, 8, 8, w_row, 13) == mem.spad[w_row:]

    simulate(cfg, tb)
