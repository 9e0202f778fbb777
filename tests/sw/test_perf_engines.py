"""Engine timing of the performance model against the engines themselves in Amaranth's
simulator: the cycle of ``done`` after the take, and the cycles of every local-memory write
(which the DMA load channel yields to), for MATMUL, REQUANT and SOFTMAX, with and without the
accumulator's write port taken away from the softmax engine."""

from types import SimpleNamespace

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.config import NPUConfig
from hw.isa import Command, ErrorCode, Opcode, matmul_busy_cycles, matmul_in_flight
from hw.tile import MatrixEngine
from hw.vector import VectorUnit
from sw.perf import timing as T
from sw.perf.engines import MatrixEngine as PerfMatrix
from sw.perf.engines import VectorEngine as PerfVector
from sw.perf.ledger import Ledger
from sw.perf.ports import BusyList

CONFIGS = [NPUConfig(rows=4, cols=4, spad_rows=64, acc_rows=64),
           NPUConfig(rows=4, cols=8, spad_rows=64, acc_rows=64),
           NPUConfig(rows=8, cols=8, spad_rows=64, acc_rows=64)]


def run_engine(dut, commands, watch, *, port_busy=frozenset(), cycles=2000):
    """Issue ``commands`` (``(opcode, body, flags)``) one after the other, each as soon as the
    engine is ready; return per command ``(take, done)`` and the cycles each watched write
    enable was high (``watch``: name -> signal). ``port_busy``: cycles in which the VectorUnit's
    ``acc_wr.ready`` is low."""
    out, writes = [], {name: [] for name in watch}
    sim = Simulator(dut)
    sim.add_clock(1e-6)

    async def tb(ctx):
        pending = list(commands)
        take = None
        for c in range(cycles):
            if hasattr(dut, "acc_wr") and hasattr(dut.acc_wr, "ready"):
                ctx.set(dut.acc_wr.ready, int(c not in port_busy))
            if take is None and pending and ctx.get(dut.engine.cmd.ready):
                op, body, flags = pending.pop(0)
                kind = {Opcode.MATMUL: "matmul", Opcode.REQUANT: "requant",
                        Opcode.SOFTMAX: "softmax", Opcode.GELU: "requant",
                        Opcode.ADD: "eltwise", Opcode.LAYERNORM: "eltwise"}[op]
                ctx.set(dut.engine.cmd.payload, Command.const(
                    {"header": {"opcode": op, "flags": flags}, "body": {kind: body}}))
                ctx.set(dut.engine.cmd.valid, 1)
                take = c
            else:
                ctx.set(dut.engine.cmd.valid, 0)
            for name, sig in watch.items():
                if ctx.get(sig):
                    writes[name].append(c)
            if ctx.get(dut.engine.done):
                out.append((take, c))
                take = None
                if not pending:
                    return
            await ctx.tick()
        raise AssertionError("commands did not retire")
    sim.add_testbench(tb)
    sim.run()
    return out, writes


class _Queue:
    def __init__(self):
        self.done = []
        self.free_from = []

    def set_done(self, done, free_from=None):
        self.done.append(done)
        self.free_from.append(done + 1 if free_from is None else free_from)


def _cmd(op, body, flags=None):
    body = {"w_fmt": 0, "a_fmt": 0, **body}
    return SimpleNamespace(opcode=op.value, body=SimpleNamespace(**body),
                           flags=SimpleNamespace(**{"row_scale": 0, **(flags or {})}))


def _spans(busy: BusyList):
    return sorted((a, b) for a, b, _ in busy.spans)


def _cycles(spans):
    return [c for a, b in spans for c in range(a, b)]


def run_matmuls(dut, commands, limit, cycles=3000):
    """Offer ``commands`` (MATMUL bodies) back to back, as the command processor does: each
    in the first cycle the engine is ready with fewer than ``limit`` commands taken and not
    retired. Returns the take cycles, the done cycles and the accumulator write cycles."""
    takes, dones, writes = [], [], []
    sim = Simulator(dut)
    sim.add_clock(1e-6)

    async def tb(ctx):
        i = 0
        for c in range(cycles):
            offer = i < len(commands) and len(takes) - len(dones) < limit
            if offer:
                ctx.set(dut.engine.cmd.payload, Command.const(
                    {"header": {"opcode": Opcode.MATMUL}, "body": {"matmul": commands[i]}}))
            ctx.set(dut.engine.cmd.valid, offer)
            _, _, ready, done, wr = await ctx.tick().sample(
                dut.engine.cmd.ready, dut.engine.done, dut.acc_wr.en)
            if offer and ready:
                takes.append(c)
                i += 1
            if done:
                dones.append(c)
            if wr:
                writes.append(c)
            if len(dones) == len(commands):
                return
        raise AssertionError("commands did not retire")
    sim.add_testbench(tb)
    sim.run()
    return takes, dones, writes


@pytest.mark.parametrize("cfg", CONFIGS, ids=[c.name for c in CONFIGS])
def test_matmul_done_and_accumulator_writes(cfg):
    """Back-to-back MATMULs of sizes below, at and above ``max(rows, cols)`` and an empty
    one: the model's done cycles, its next-take cycles and its accumulator write cycles are
    the engine's."""
    dut = MatrixEngine(cfg)
    big = max(cfg.rows, cfg.cols)
    ms = [1, 5, 13, 0, big, big + 1, 2, 0, 1, 1, 3, big, big - 1]
    # then K blocks: 3 x 3 rows, 2 x big rows (written back to back: one span), 2 x big - 1
    # rows (one idle cycle between the blocks' writes: two spans)
    k_lens = [0] * 10 + [2, 1, 1]
    cmds = [{"a_row": 0, "w_row": 20, "acc_row": 0, "m": m, "k_len": k}
            for m, k in zip(ms, k_lens, strict=True)]
    takes, dones, writes = run_matmuls(dut, cmds, matmul_in_flight(cfg))
    busy = BusyList(lambda: 0)
    perf = PerfMatrix(cfg, busy)
    perf.queue = q = _Queue()
    for t, body in zip(takes, cmds, strict=True):
        perf.start(_cmd(Opcode.MATMUL, body), t, ErrorCode.NONE)
    assert q.done == dones
    assert q.free_from[:-1] == takes[1:]        # offered all the time: taken when it can be
    assert _cycles(_spans(busy)) == writes
    assert len(writes) == sum(m * (k + 1) for m, k in zip(ms, k_lens, strict=True))
    assert dones[0] - takes[0] == matmul_busy_cycles(cfg, 1)
    # the array never waits for weights once m >= max(rows, cols): rows written back to back
    i = ms.index(big)
    first = sum(ms[:i])
    assert writes[first + big] == writes[first + big - 1] + 1


@pytest.mark.parametrize("cfg", CONFIGS, ids=[c.name for c in CONFIGS])
def test_requant_done_and_scratchpad_writes(cfg):
    dut = VectorUnit(cfg)
    cases = [(1, 0), (7, 0), (9, 1), (2 * cfg.cols + 1, 1), (0, 0)]
    cmds = [(Opcode.REQUANT, {"acc_row": 0, "spad_row": 10, "n_rows": n, "param_row": 40,
                              "scale_row": 50}, {"row_scale": rs}) for n, rs in cases]
    done, writes = run_engine(dut, cmds, {"spad": dut.spad_wr.en})
    spad = BusyList(lambda: 0)
    perf = PerfVector(cfg, spad, BusyList(lambda: 0), BusyList(lambda: 0), Ledger(),
                      lambda: 0)
    perf.queue = q = _Queue()
    for (t, _), (n, rs) in zip(done, cases, strict=True):
        perf.start(_cmd(Opcode.REQUANT, {"n_rows": n}, {"row_scale": rs}), t, ErrorCode.NONE)
    assert q.done == [d for _, d in done]
    assert _cycles(_spans(spad)) == writes["spad"]


@pytest.mark.parametrize("cfg", CONFIGS, ids=[c.name for c in CONFIGS])
def test_gelu_add_layernorm_done_and_scratchpad_writes(cfg):
    """GELU, ADD and LAYERNORM back to back (one of each size zero, one failing): the
    model's done cycles and scratchpad write cycles are the engines'."""
    dut = VectorUnit(cfg)
    elt = {"a_row": 0, "b_row": 20, "out_row": 40, "param_row": 0, "shift": 3, "g_shift": 5}
    cmds = [(Opcode.GELU, {"acc_row": 0, "spad_row": 10, "n_rows": 5, "param_row": 40}, {}),
            (Opcode.ADD, {**elt, "n_rows": 3, "n_blocks": 2, "stride": 4}, {}),
            (Opcode.LAYERNORM, {**elt, "n_rows": 2, "n_blocks": 3, "stride": 5}, {}),
            (Opcode.GELU, {"acc_row": 0, "spad_row": 10, "n_rows": 0, "param_row": 40}, {}),
            (Opcode.ADD, {**elt, "n_rows": 1, "n_blocks": 1, "stride": 0}, {}),
            (Opcode.LAYERNORM, {**elt, "n_rows": 0, "n_blocks": 3, "stride": 5}, {}),
            (Opcode.ADD, {**elt, "out_row": 20, "n_rows": 1, "n_blocks": 1, "stride": 0}, {})]
    done, writes = run_engine(dut, cmds, {"spad": dut.spad_wr.en}, cycles=4000)
    spad = BusyList(lambda: 0)
    perf = PerfVector(cfg, spad, BusyList(lambda: 0), BusyList(lambda: 0), Ledger(),
                      lambda: 0)
    perf.queue = q = _Queue()
    for (t, _), (op, body, _) in zip(done, cmds, strict=True):
        error = ErrorCode.BAD_SIZE if body.get("out_row") == 20 else ErrorCode.NONE
        perf.start(_cmd(op, body), t, error)
    assert q.done == [d for _, d in done]
    assert _cycles(_spans(spad)) == writes["spad"]
    assert len(writes["spad"]) == 5 + 3 * 2 + 2 * 3 + 1


@pytest.mark.parametrize("cfg", CONFIGS[:2], ids=[c.name for c in CONFIGS[:2]])
@pytest.mark.parametrize("busy_port", [False, True])
def test_softmax_rows_writes_and_waits_for_the_accumulator_port(cfg, busy_port):
    """With ``busy_port`` the matrix engine has the accumulator's write port in bursts of
    cycles that hit some reciprocal-row writes: the softmax waits exactly those cycles
    (``stall.vector.acc``), and the model knows it from the matrix engine's write cycles."""
    dut = VectorUnit(cfg)
    n_rows, nb = 2 * cfg.cols + 3, 2
    body = {"acc_row": 0, "spad_row": 0, "n_rows": n_rows, "n_blocks": nb, "stride": n_rows,
            "scale_row": 50, "kv_len": 5, "q_offset": 0, "mult": 1000, "shift": 8,
            "causal": 1}
    rng = np.random.default_rng(cfg.cols)
    matrix_spans = []
    if busy_port:
        for start in range(40, 1400, 97):
            w = int(rng.integers(20, 60))
            matrix_spans.append((start, start + w))
    busy_cycles = frozenset(_cycles(matrix_spans))
    done, writes = run_engine(dut, [(Opcode.SOFTMAX, body, {})],
                              {"spad": dut.spad_wr.en,
                               "recip": dut.acc_wr.en & dut.acc_wr.ready,
                               "wait": dut.acc_wr.en & ~dut.acc_wr.ready},
                              port_busy=busy_cycles, cycles=4000)
    (t, d), = done
    matrix = BusyList(lambda: 0)
    for a, b in matrix_spans:
        matrix.add(a, b)
    spad, acc, ledger = BusyList(lambda: 0), BusyList(lambda: 0), Ledger()
    perf = PerfVector(cfg, spad, acc, matrix, ledger, lambda: t)
    perf.queue = q = _Queue()
    perf.start(_cmd(Opcode.SOFTMAX, {"n_rows": n_rows, "n_blocks": nb}), t, ErrorCode.NONE)
    assert q.done[-1] == d
    assert _cycles(_spans(spad)) == writes["spad"]
    assert _cycles(_spans(acc)) == writes["recip"]
    stall = ledger.snapshot(d + 10)["stall.vector.acc"]
    assert stall == len(writes["wait"]) and (stall > 0) == busy_port
    if not busy_port:
        assert d - t == T.SOFTMAX_START + n_rows * T.softmax_row_cycles(cfg, nb)


def test_softmax_replans_when_a_later_matmul_takes_the_port():
    """A MATMUL taken while the SOFTMAX runs registers write cycles that hit a future
    reciprocal write: the softmax's ``done`` moves by exactly the wait."""
    cfg = CONFIGS[0]
    now = {"t": 0}
    matrix, spad, acc = (BusyList(lambda: now["t"]) for _ in range(3))
    ledger = Ledger()
    perf = PerfVector(cfg, spad, acc, matrix, ledger, lambda: now["t"])
    perf.queue = q = _Queue()
    nb, n_rows = 1, cfg.cols
    perf.start(_cmd(Opcode.SOFTMAX, {"n_rows": n_rows, "n_blocks": nb}), 0, ErrorCode.NONE)
    first = q.done[-1]
    recip = sorted(a for a, _, _ in acc.spans)
    assert recip == [first - 1]                       # one reciprocal row, in the last ROW_END
    now["t"] = 10
    matrix.add(recip[0] - 2, recip[0] + 5)            # the port is taken over that write
    assert q.done[-1] == first + 5
    assert sorted(a for a, _, _ in acc.spans) == [recip[0] + 5]
