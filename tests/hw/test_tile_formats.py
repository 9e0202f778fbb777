"""The matrix engine's number formats (int4 weights, MXINT8 weights and activations) in
Amaranth's simulator: back-to-back MATMUL streams in every format against the functional
model's engine (:class:`sw.model.engines.Engines`, whose arithmetic is :mod:`sw.golden`, itself
checked against hand vectors in ``tests/sw/test_formats.py``) and against
:class:`hw.isa.timing.MatmulTimeline` cycle for cycle."""

import numpy as np
import pytest

from hw.config import NPUConfig
from hw.isa import ActFormat, Command, ErrorCode, Opcode, WeightFormat, timing
from hw.isa.formats import act_tile_rows, format_error, weight_tile_rows
from sw.model.engines import CommandError, Engines
from tests.hw.test_tile import simulate

CONFIGS = [
    NPUConfig(rows=4, cols=4, spad_rows=128, acc_rows=64, mx=1),
    NPUConfig(rows=8, cols=8, spad_rows=128, acc_rows=64, mx=1),
    NPUConfig(rows=4, cols=8, spad_rows=128, acc_rows=64, mx=1),
    NPUConfig(rows=4, cols=4, spad_rows=64, acc_rows=64),          # no exponent stage
    NPUConfig(rows=3, cols=5, spad_rows=64, acc_rows=64),          # odd rows: int4 padding
]
IDS = [c.name for c in CONFIGS]


def _fill(rng, cfg) -> np.ndarray:
    """Scratchpad contents: random bytes with runs of the extremes: exponent bytes 0, 254,
    255 and -128 / 127 elements, all-zero rows (zero tiles), packed nibbles 0x88 (-8, -8)."""
    spad = rng.integers(-128, 128, size=(cfg.spad_rows, cfg.spad_row_bytes))
    for r in rng.choice(cfg.spad_rows, size=cfg.spad_rows // 4, replace=False):
        spad[r] = rng.choice([0, -128, 127, -2, -1, 126, 0x88 - 256], size=cfg.spad_row_bytes)
    spad[rng.choice(cfg.spad_rows, size=6, replace=False)] = 0
    return spad.astype(np.int8)


def format_commands(cfg, rng, n):
    """A random MATMUL stream in every format: ``(body, flags)``; sizes around ``rows``,
    ``cols`` and ``spad_row_bytes`` (the MXINT8 groups), 1 to 3 K blocks, ``x_base`` over its
    whole range (left shifts to 32 and beyond, right shifts to 0), failing commands (bad rows,
    reserved format, MX without the stage, transposed int4)."""
    big = max(cfg.rows, cfg.cols)
    g = cfg.spad_row_bytes
    sizes = [1, 2, cfg.rows, big + 1, g - 1, g, g + 1, 2 * g + 3]
    out = []
    for _ in range(n):
        w_fmt = int(rng.choice([0, 1, 1, 2, 2]))
        a_fmt = int(rng.choice([0, 1]))
        m = int(rng.choice(sizes))
        span = int(rng.choice([1, 1, 2, 3]))
        a_tile = act_tile_rows(cfg, m, a_fmt)
        w_tile = weight_tile_rows(cfg, w_fmt)
        x_base = int(rng.choice([254, 230, 250, 260, 280, 0, 508, 1023,
                                 int(rng.integers(0, 1024))]))
        body = {"a_row": int(rng.integers(0, cfg.spad_rows - span * a_tile)),
                "w_row": int(rng.integers(0, cfg.spad_rows - span * w_tile)),
                "acc_row": int(rng.integers(0, cfg.acc_rows - m)), "m": m, "k_len": span - 1,
                "w_fmt": w_fmt, "a_fmt": a_fmt, "x_base": x_base}
        flags = {"accumulate": int(rng.integers(0, 2)), "transpose": 0}
        kind = rng.integers(0, 12)
        if kind == 0:
            body["a_row"] = cfg.spad_rows - a_tile            # K blocks past the end
            body["k_len"] = 1
        elif kind == 1:
            body["w_fmt"] = 3                                  # reserved
        elif kind == 2 and cfg.rows == cfg.cols:
            flags["transpose"] = 1
        out.append((body, flags))
    return out


def model_error(cfg, body, flags):
    if body["m"] == 0:
        return ErrorCode.NONE, 0
    if (flags["transpose"] and cfg.rows != cfg.cols) or format_error(
            cfg, body["w_fmt"], body["a_fmt"], flags["transpose"]):
        return ErrorCode.BAD_SIZE, 0
    return None


class _Body:
    """A MATMUL body as :meth:`Engines.matmul` reads it (attributes)."""

    def __init__(self, d):
        self.__dict__.update(d)


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_formats_back_to_back(cfg):
    rng = np.random.default_rng(15 + cfg.rows * 10 + cfg.cols + 100 * cfg.mx)
    cmds = format_commands(cfg, rng, 50)
    limit = timing.matmul_in_flight(cfg)
    model = Engines(cfg, {"bytes_read": 0, "bytes_written": 0})
    model.spad[:] = _fill(rng, cfg)
    model.acc[:] = rng.integers(-2**31, 2**31, size=model.acc.shape)

    async def tb(ctx, dut, mem):
        mem.spad[:] = model.spad.astype(int).tolist()
        mem.acc[:] = model.acc.astype(int).tolist()
        await mem.upload(ctx)
        port = dut.matrix
        takes, dones, errors = [], [], []
        in_flight, i, cycle = 0, 0, 0
        while len(dones) < len(cmds):
            offer = i < len(cmds) and in_flight < limit
            if offer:
                body, flags = cmds[i]
                ctx.set(port.cmd.payload, Command.const(
                    {"header": {"opcode": Opcode.MATMUL, "flags": flags},
                     "body": {"matmul": body}}))
            ctx.set(port.cmd.valid, offer)
            _, _, ready, done, err, addr = await ctx.tick().sample(
                port.cmd.ready, port.done, port.error, port.error_addr)
            if offer and ready:
                takes.append(cycle)
                in_flight += 1
                i += 1
            if done:
                dones.append(cycle)
                errors.append((ErrorCode(err), addr if err else 0))
                in_flight -= 1
            cycle += 1
            assert cycle < 50_000, "the stream never finished"
        ctx.set(port.cmd.valid, 0)
        await ctx.tick()

        line = timing.MatmulTimeline(cfg)
        n_mx = n_int4 = 0
        for k, (body, flags) in enumerate(cmds):
            try:
                model.matmul(_Body(body), accumulate=bool(flags["accumulate"]),
                             transpose=bool(flags["transpose"]))
                want = (ErrorCode.NONE, 0)
            except CommandError as e:
                want = (e.code, e.addr)
            assert errors[k] == want, (k, cmds[k])
            failed = want[0] != ErrorCode.NONE
            t = line.take(takes[k], body["m"], k_blocks=body["k_len"] + 1, error=failed,
                          w_fmt=body["w_fmt"], a_fmt=body["a_fmt"])
            assert dones[k] == t.done, (k, cmds[k])
            if k + 1 < len(cmds):
                assert takes[k + 1] == t.accept_from, (k, cmds[k])
            if not failed:
                n_mx += body["w_fmt"] == WeightFormat.MXINT8 or body["a_fmt"] == ActFormat.MXINT8
                n_int4 += body["w_fmt"] == WeightFormat.INT4
        mem.spad[:] = model.spad.astype(int).tolist()
        mem.acc[:] = model.acc.astype(int).tolist()
        await mem.check(ctx, "format MATMULs")
        assert n_int4 >= 5
        assert (n_mx >= 5) == bool(cfg.mx)

    simulate(cfg, tb)
