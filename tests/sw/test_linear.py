"""sw.kernels.linear on the functional model: bit-exact against sw.golden for awkward shapes,
tiling of M and K (the serialized and the double-buffered plans, hand-picked tilings that
exercise every feature of the double-buffered stream), race checks of the command streams,
errors."""

from types import SimpleNamespace

import numpy as np
import pytest

from hw.config import NPUConfig
from hw.isa import (
    ACCEPT_CYCLES,
    OPCODE_ENGINE,
    LocalMem,
    MatmulTimeline,
    Opcode,
    command_busy_cycles,
    decode,
    matmul_busy_cycles,
    matmul_retire_cycles,
)
from sw.golden import linear_int
from sw.kernels.linear import (
    build_linear_commands,
    build_linear_commands_double_buffered,
    double_buffered_plan,
    linear,
    linear_dram_bytes,
    linear_launch,
    linear_with_stats,
    matmul_cycles,
    matmul_latency,
    plan_linear,
)
from sw.model import ModelBackend
from sw.quant import quantize_multipliers
from sw.runtime import CommandList, Device
from tests.support.device_state import device_state
from tests.support.stream_order import assert_ordered

DEFAULT = NPUConfig()
SMALL_ARRAY = NPUConfig(rows=4, cols=4)
TINY_SPAD = NPUConfig(rows=4, cols=4, spad_rows=64, acc_rows=16)
TINY_SPAD_8 = NPUConfig(spad_rows=64, acc_rows=16)


def operands(m: int, k: int, n: int, seed: int):
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    w = rng.integers(-128, 128, (k, n), dtype=np.int8)
    acc_std = 128 * 128 / 3 * np.sqrt(k)
    bias = rng.integers(-int(acc_std), int(acc_std) + 1, n).astype(np.int32)
    mult, shift = quantize_multipliers(50 / acc_std * rng.uniform(0.5, 2.0, n))
    return a, w, bias, mult, shift


CASES = [
    (DEFAULT, 1, 384, 9), (DEFAULT, 7, 33, 384), (DEFAULT, 33, 9, 8), (DEFAULT, 384, 8, 7),
    (DEFAULT, 9, 384, 33), (DEFAULT, 8, 1, 1),
    (SMALL_ARRAY, 1, 7, 9), (SMALL_ARRAY, 33, 384, 8), (SMALL_ARRAY, 384, 33, 7),
    (SMALL_ARRAY, 7, 9, 384), (SMALL_ARRAY, 9, 8, 33),
    (TINY_SPAD, 33, 384, 9), (TINY_SPAD_8, 33, 384, 9), (TINY_SPAD_8, 384, 7, 1),
]


@pytest.mark.parametrize(("config", "m", "k", "n"), CASES,
                         ids=[f"{c.name}-{m}x{k}x{n}" for c, m, k, n in CASES])
def test_linear_bit_exact(config, m, k, n):
    dev = Device(ModelBackend(config), config)
    a, w, bias, mult, shift = operands(m, k, n, seed=m * 1000 + k * 10 + n)
    relu = (m + n) % 2 == 1
    before = dev.memory_stats()
    out, stats = linear_with_stats(dev, a, w, bias, mult, shift, relu=relu)
    want = linear_int(a, w, bias, mult, shift, relu=relu)
    assert out.dtype == np.int8 and out.shape == (m, n)
    np.testing.assert_array_equal(out, want)
    assert np.mean(np.abs(want.astype(int)) < 127) > 0.05  # not everything saturated
    assert stats.macs == m * k * n and stats.cycles == 0 and stats.utilization is None
    assert stats.n_commands > 0
    assert dev.memory_stats() == before  # every buffer freed


def test_tiling_uses_several_m_tiles_and_k_chunks():
    p = plan_linear(TINY_SPAD, 33, 384, 9)
    assert p.m_tile < 33 and p.k_chunk < p.kb
    assert p.o_base + p.m_tile <= TINY_SPAD.spad_rows
    p = plan_linear(DEFAULT, 384, 384, 384)
    assert p.k_chunk == p.kb and p.m_tile < 384  # whole K resident, M tiled
    assert p.kb * 8 + p.kb * p.m_tile + p.m_tile <= DEFAULT.spad_rows


def test_linear_repeated_and_after_error_keeps_working():
    dev = Device(ModelBackend(TINY_SPAD_8), TINY_SPAD_8)
    for seed in range(3):
        a, w, bias, mult, shift = operands(10, 20, 12, seed)
        np.testing.assert_array_equal(linear(dev, a, w, bias, mult, shift),
                                      linear_int(a, w, bias, mult, shift))


def test_linear_rejects_bad_operands():
    dev = Device(ModelBackend(TINY_SPAD_8), TINY_SPAD_8)
    a, w, bias, mult, shift = operands(2, 3, 4, 0)
    with pytest.raises(ValueError, match="int8"):
        linear(dev, a.astype(np.int16), w, bias, mult, shift)
    with pytest.raises(ValueError, match="shapes"):
        linear(dev, a, w[:2], bias, mult, shift)
    with pytest.raises(ValueError, match="shift"):
        linear(dev, a, w, bias, mult, shift + 64)


def _bad(n: int, at: int, value, base) -> np.ndarray:
    """``base`` (n,) with element ``at`` replaced by ``value`` (dtype widened as needed)."""
    out = np.asarray(base).astype(np.result_type(np.asarray(base).dtype, np.asarray(value)))
    out[at] = value
    return out


N_BAD = 4
_REAL = np.full(N_BAD, 1 / 2000)      # the real scale instead of quantize_multipliers' output
BAD_LINEAR_PARAMS = [
    # (argument, value, error, message)
    ("multiplier", _REAL, TypeError,
     r"multiplier must hold integers, got 0\.0005 at index 0 .*quantize_multipliers"),
    ("multiplier", ("at", 2, 2**20 + 0.99), TypeError, r"multiplier must hold integers, got "
     r"1048576\.99 at index 2"),
    ("bias", ("at", 1, 0.9), TypeError, r"bias must hold integers, got 0\.9 at index 1"),
    ("shift", ("at", 3, 30.9), TypeError, r"shift must hold integers, got 30\.9 at index 3"),
    ("shift", np.ones(N_BAD, bool), TypeError, "shift must hold integers, got dtype bool"),
    ("multiplier", np.full(N_BAD, np.nan), TypeError, "multiplier must hold integers, got nan"),
    ("multiplier", ("at", 0, -1), ValueError, r"multiplier outside \[0, 2147483647\]: got -1 "
     "at index 0"),
    ("multiplier", ("at", 1, 2**31), ValueError, r"multiplier outside \[0, 2147483647\]: got "
     "2147483648 at index 1"),
    ("multiplier", np.full(N_BAD, 2**70, dtype=object), ValueError,
     r"multiplier outside \[0, 2147483647\]: got 1180591620717411303424"),
    ("shift", ("at", 2, 64), ValueError, r"shift outside \[0, 63\]: got 64 at index 2"),
    ("shift", ("at", 0, -1), ValueError, r"shift outside \[0, 63\]: got -1 at index 0"),
    ("bias", ("at", 0, 2**31), ValueError, r"bias outside \[-2147483648, 2147483647\]: got "
     "2147483648"),
    ("multiplier", np.full(N_BAD + 1, 1 << 30), ValueError,
     r"multiplier must have shape \(4,\), got \(5,\)"),
    ("gelu", (np.full(N_BAD, 0.5), np.zeros(N_BAD, int)), TypeError,
     "gelu m2 must hold integers.*quantize_multipliers"),
    ("gelu", (np.full(N_BAD, 1 << 30), np.full(N_BAD, -1)), ValueError,
     r"gelu s2 outside \[0, 63\]: got -1"),
]


@pytest.mark.parametrize("arg,value,error,message", BAD_LINEAR_PARAMS,
                         ids=[f"{p[0]}-{i}" for i, p in enumerate(BAD_LINEAR_PARAMS)])
@pytest.mark.parametrize("double_buffer", [True, False], ids=["db", "ser"])
def test_linear_refuses_bad_parameters_before_launching(arg, value, error, message,
                                                        double_buffer):
    """Non-integer (a real scale as the multiplier, 0.9 as a bias: truncated to 0 before) and
    out-of-range parameters raise a typed error naming the argument, the range and the value,
    before anything is allocated, uploaded or launched."""
    dev = Device(ModelBackend(TINY_SPAD_8), TINY_SPAD_8)
    a, w, bias, mult, shift = operands(5, 12, N_BAD, 0)
    kw = {"bias": bias, "multiplier": mult, "shift": shift, "gelu": None}
    if isinstance(value, tuple) and isinstance(value[0], str):   # ("at", index, value)
        value = _bad(N_BAD, value[1], value[2], kw[arg])
    kw[arg] = value
    before = device_state(dev)
    with pytest.raises(error, match=message):
        linear_launch(dev.default_stream, a, w, double_buffer=double_buffer, **kw)
    assert device_state(dev) == before
    if arg != "gelu":       # linear_with_stats checks before it synchronizes (a FENCE)
        with pytest.raises(error, match=message):
            linear_with_stats(dev, a, w, kw["bias"], kw["multiplier"], kw["shift"],
                              double_buffer=double_buffer)
        assert device_state(dev) == before


def test_linear_accepts_integral_floats_and_any_integer_dtype():
    """Integral float parameters (``3.0``) and narrow or unsigned integer dtypes give the
    result of the int64 parameters."""
    dev = Device(ModelBackend(TINY_SPAD_8), TINY_SPAD_8)
    a, w, bias, mult, shift = operands(5, 12, N_BAD, 0)
    want = linear_int(a, w, bias, mult, shift)
    np.testing.assert_array_equal(
        linear(dev, a, w, bias.astype(np.float64), mult.astype(np.float64),
               shift.astype(np.float32)), want)
    np.testing.assert_array_equal(
        linear(dev, a, w, list(map(int, bias)), mult.astype(np.uint32), shift.astype(np.uint8)),
        want)


# -- the double-buffered tiling ----------------------------------------------------------------

class _Sem:
    """A pool semaphore stand-in that starts at 0 (for :func:`assert_ordered`)."""

    def __init__(self, sem_id: int) -> None:
        self.id = sem_id

    def target(self, n: int = 0) -> int:
        return n


def _stream(config, plan):
    buf = SimpleNamespace(addr=0)
    if plan.double_buffer:
        sems = {x: _Sem(i) for i, x in enumerate("LMRS")}
        return build_linear_commands_double_buffered(config, plan, buf, buf, buf, buf, False,
                                                     sems)[0]
    return build_linear_commands(config, plan, buf, buf, buf, buf, False, 0, 0)


def _features(config, plan) -> set[str]:
    p = plan
    m_tiles, n_groups = -(-p.m // p.m_tile), -(-p.nb // p.n_group)
    f = {"group"} if p.n_group > 1 else set()
    if p.k_chunk < p.kb:
        f.add("k_chunks")
    if 2 * p.n_group * p.m_tile > p.acc_span[1] - p.acc_span[0] and m_tiles * n_groups > 1:
        f.add("acc_overlap")
    if len(p.o_bases) == 1:
        f.add("one_out_tile")
    if len(p.a_bases) == 1 and m_tiles > 1:
        f.add("late_a")
    if len(p.w_bases) == 1:
        f.add("w_once")
    if p.m % p.m_tile and m_tiles > 1:
        f.add("ragged_m")
    if p.nb % p.n_group:
        f.add("ragged_group")
    for c in _stream(config, plan):   # a parameter load ordered after a store (no free matmul)
        v = decode(c.raw)
        if v.header.opcode == Opcode.DMA_LOAD and v.body.dma.mem == LocalMem.ACC \
                and v.header.flags.wait and v.header.wait_sem == 3:
            f.add("params_wait_store")
    return f


# Hand-picked tilings (config, M, K, N, double_buffered_plan arguments, features they exercise):
# ragged M/K/N everywhere (K % rows, N % cols, M % m_tile non-zero).
FORCED = [
    (DEFAULT, 37, 61, 19, dict(m_tile=16, k_chunk=3), {"k_chunks", "ragged_m"}),
    (DEFAULT, 50, 83, 37, dict(m_tile=20, k_chunk=4, n_group=2),
     {"k_chunks", "group", "ragged_group", "ragged_m"}),
    (DEFAULT, 1000, 20, 17, dict(m_tile=600, k_chunk=1), {"k_chunks", "acc_overlap", "ragged_m"}),
    (DEFAULT, 600, 20, 33, dict(m_tile=300, k_chunk=3, n_group=2),
     {"acc_overlap", "group", "ragged_group"}),
    (DEFAULT, 41, 30, 20, dict(m_tile=15, k_chunk=2, out_buffers=1), {"one_out_tile",
                                                                      "k_chunks", "ragged_m"}),
    (DEFAULT, 33, 27, 18, dict(m_tile=10, k_chunk=4, a_buffers=1), {"late_a", "ragged_m"}),
    (DEFAULT, 29, 27, 7, dict(m_tile=8, k_chunk=4, w_buffers=1), {"w_once", "ragged_m"}),
    (DEFAULT, 45, 5, 61, dict(m_tile=45, k_chunk=1, n_group=2, out_buffers=1),
     {"group", "one_out_tile"}),
    (DEFAULT, 9, 70, 1, dict(m_tile=9, k_chunk=9, snake=False), set()),
    (DEFAULT, 20, 8, 30, dict(m_tile=20, k_chunk=1), {"params_wait_store"}),
    (SMALL_ARRAY, 77, 150, 19, dict(m_tile=26, k_chunk=7, n_group=2),
     {"k_chunks", "group", "ragged_group", "ragged_m"}),
    (TINY_SPAD, 13, 50, 21, dict(m_tile=6, k_chunk=2), {"k_chunks", "acc_overlap",
                                                         "ragged_m"}),
    (TINY_SPAD_8, 11, 11, 27, dict(m_tile=6, k_chunk=2, a_buffers=1, out_buffers=1),
     {"late_a", "acc_overlap", "one_out_tile", "ragged_m"}),
]


@pytest.mark.parametrize(("config", "m", "k", "n", "kw", "features"), FORCED,
                         ids=[f"{c.name}-{m}x{k}x{n}-{'-'.join(sorted(f)) or 'plain'}"
                              for c, m, k, n, _, f in FORCED])
def test_double_buffered_tilings_bit_exact_and_race_free(config, m, k, n, kw, features):
    """Each hand-picked tiling exercises its features, has no race between engines, and is
    bit-exact with the golden model on the functional model."""
    plan = double_buffered_plan(config, m, k, n, **kw)
    assert features <= _features(config, plan)
    assert_ordered(config, _stream(config, plan))
    dev = Device(ModelBackend(config), config)
    a, w, bias, mult, shift = operands(m, k, n, seed=m + 7 * k + 13 * n)
    relu = m % 2 == 1
    out, stats = linear_with_stats(dev, a, w, bias, mult, shift, relu=relu, plan=plan)
    np.testing.assert_array_equal(out, linear_int(a, w, bias, mult, shift, relu=relu))
    assert stats.plan is plan


PLANNED = [(c, m, k, n) for c, m, k, n in CASES] + [
    (DEFAULT, 513, 40, 40), (DEFAULT, 1024, 25, 17), (DEFAULT, 130, 36, 37),
    (DEFAULT, 99, 108, 6), (TINY_SPAD, 90, 112, 24), (TINY_SPAD, 45, 4, 61),
    (NPUConfig(cmd_fifo_depth=1, acc_rows=64, spad_rows=1024), 70, 90, 30),
    (NPUConfig(rows=8, cols=4, acc_rows=32, spad_rows=512), 40, 50, 30),
]


@pytest.mark.parametrize(("config", "m", "k", "n"), PLANNED,
                         ids=[f"{c.name}-{m}x{k}x{n}" for c, m, k, n in PLANNED])
def test_planned_streams_are_race_free(config, m, k, n):
    """Whatever the planner picks (double-buffered or serialized) orders every conflicting
    access between engines."""
    plan = plan_linear(config, m, k, n, double_buffer=True)
    assert_ordered(config, _stream(config, plan))


def test_race_check_sees_a_missing_wait():
    plan = double_buffered_plan(DEFAULT, 37, 61, 19, m_tile=16, k_chunk=3)
    cmds = _stream(DEFAULT, plan)
    assert_ordered(DEFAULT, cmds)
    raw = [bytearray(c.raw) for c in cmds]
    requant = next(i for i, c in enumerate(cmds) if decode(c.raw).header.opcode == Opcode.REQUANT)
    raw[requant][1] &= ~1          # drop flags.wait of the first requantization
    broken = CommandList()
    for r in raw:
        broken.append_raw(bytes(r))
    with pytest.raises(AssertionError, match="race"):
        assert_ordered(DEFAULT, broken)


def test_plan_at_512():
    """512x512x512 on 8x8: M tiles of at least ``max(rows, cols)`` rows (back-to-back MATMULs
    then stream one row per cycle, with no per-command gap), K in chunks with the snake
    order, est. >= 95 % of peak; derived from the configuration."""
    p = plan_linear(DEFAULT, 512, 512, 512, double_buffer=True)
    assert p.double_buffer and p.m_tile >= 8 and p.k_chunk < p.kb and p.snake
    assert 0.95 <= 512 ** 3 / (p.est_cycles * DEFAULT.n_pes) <= 1
    assert matmul_cycles(DEFAULT, 512) == 512 and matmul_cycles(DEFAULT, 1) == 8
    # A smaller accumulator bounds the tile: two steps' tiles plus 2 x 3 parameter rows.
    small = NPUConfig(acc_rows=256)
    q = plan_linear(small, 512, 512, 512, double_buffer=True)
    assert q.n_group * q.m_tile < small.acc_rows - 6 * q.n_group


def test_plan_regions_and_estimate():
    """Regions offset every buffer; the estimate is positive and the DRAM bytes at least the
    operands once."""
    p = plan_linear(DEFAULT, 100, 200, 50, double_buffer=True, spad_region=(1000, 2000),
                    acc_region=(512, 512))
    rows = [*p.w_bases, *p.a_bases, *p.o_bases]
    assert min(rows) >= 1000 and p.param_rows[0] == 512 and p.acc_span == (512 + 6 * p.n_group,
                                                                           1024)
    assert_ordered(DEFAULT, _stream(DEFAULT, p))
    b = linear_dram_bytes(DEFAULT, p)
    assert b["a"] >= 100 * 25 * 8 and b["w"] >= 200 * 7 * 8 and b["out"] == 7 * 100 * 8
    # two-sided: at least the matrix engine's issue periods (every MATMUL back to back),
    # at most every command of the stream run one after another (no overlap at all)
    cmds = [decode(c.raw) for c in _stream(DEFAULT, p)]
    matrix = sum(matmul_retire_cycles(DEFAULT, v.body.matmul.m, k_blocks=v.body.matmul.k_len + 1)
                 for v in cmds if v.header.opcode == Opcode.MATMUL)
    serial = sum(command_busy_cycles(DEFAULT, v) for v in cmds
                 if OPCODE_ENGINE[v.header.opcode] != "processor")
    assert 0 < matrix <= p.est_cycles <= serial


def test_double_buffered_plan_rejects_what_does_not_fit():
    with pytest.raises(ValueError, match="scratchpad"):
        double_buffered_plan(DEFAULT, 4096, 64, 8, m_tile=512, k_chunk=8)
    with pytest.raises(ValueError, match="accumulator"):
        double_buffered_plan(DEFAULT, 2048, 8, 8, m_tile=1020, k_chunk=1)
    with pytest.raises(ValueError, match="k_chunk"):
        double_buffered_plan(DEFAULT, 8, 8, 8, m_tile=8, k_chunk=2)
    # batched parameters rotate out_buffers + 1 accumulator tiles (3 x 384 rows do not fit)
    with pytest.raises(ValueError, match="out_buffers \\+ 1 tiles"):
        double_buffered_plan(DEFAULT, 128, 8, 64, m_tile=128, k_chunk=1, n_group=3, p_steps=2)
    assert double_buffered_plan(DEFAULT, 128, 8, 64, m_tile=128, k_chunk=1, n_group=3).p_steps == 1
    dev = Device(ModelBackend(DEFAULT), DEFAULT)
    a, w, bias, mult, shift = operands(8, 8, 8, 0)
    with pytest.raises(ValueError, match="plan is for"):
        linear_with_stats(dev, a, w, bias, mult, shift,
                          plan=double_buffered_plan(DEFAULT, 9, 8, 8, m_tile=8, k_chunk=1))


def test_timing_model_matches_the_hardware_latencies():
    """The planner's MATMUL period is the matrix engine's steady state (MatmulTimeline: the
    cycles between the handshakes of back-to-back MATMULs), its latency the isolated busy
    cycles plus the accept cycle."""
    for cfg in (DEFAULT, SMALL_ARRAY, NPUConfig(rows=16, cols=8)):
        for m in (1, 7, 16, 512):
            line = MatmulTimeline(cfg)
            takes = [0]
            for _ in range(4):
                takes.append(line.take(takes[-1], m).accept_from)
            assert takes[-1] - takes[-2] == matmul_cycles(cfg, m) == max(m, cfg.rows, cfg.cols)
            assert matmul_latency(cfg, m) == matmul_busy_cycles(cfg, m) + ACCEPT_CYCLES


def test_kernel_accumulation_bound_matches_the_golden_model():
    """K = 131071 (the largest exact int32 accumulation) runs bit-exact with every product
    at 2**14; K = 131072 is rejected with AccumulatorOverflowError before anything is
    allocated, as sw.golden.linear_int rejects it."""
    from sw.quant import MAX_EXACT_K, AccumulatorOverflowError
    cfg = NPUConfig(rows=32, cols=32)
    dev = Device(ModelBackend(cfg), cfg)
    k = MAX_EXACT_K
    a = np.full((1, k), -128, dtype=np.int8)
    w = np.full((k, 2), -128, dtype=np.int8)
    w[:, 1] = 127
    params = (np.zeros(2, np.int32), np.full(2, 1 << 30), np.full(2, 31 + 25))
    out = linear(dev, a, w, *params)
    assert out.tolist() == linear_int(a, w, *params).tolist() == [[32, -32]]
    before = dev.memory_stats()
    a1 = np.zeros((1, k + 1), dtype=np.int8)
    w1 = np.zeros((k + 1, 2), dtype=np.int8)
    with pytest.raises(AccumulatorOverflowError):
        linear(dev, a1, w1, *params)
    with pytest.raises(AccumulatorOverflowError):
        linear_int(a1, w1, *params)
    assert dev.memory_stats() == before


def test_timer_accumulator_port_gaps():
    """A load into the accumulator writes its rows only in the cycles no MATMUL writes it
    (``Timer._acc_free_after``, by hand), and in a program it waits for the array's writes
    before it, not for those of a MATMUL that waits for it."""
    from sw.kernels.linear_ops import DmaOp, MatmulOp, Timer, dma_cycles, matmul_latency
    free_after = Timer._acc_free_after
    busy = [[10, 20], [25, 30]]
    ends = [b for _, b in busy]
    assert free_after(busy, ends, 5, 8) == 23       # 5 rows in 5..9, 3 in 20..22
    assert free_after(busy, ends, 0, 10) == 10      # all before the first span
    assert free_after(busy, ends, 12, 6) == 31      # 5 rows in 20..24, 1 in 30
    assert free_after(busy, ends, 40, 3) == 43
    c = DEFAULT
    rows = 6
    load = DmaOp(store=False, tag="p", mem=LocalMem.ACC, dram_addr=0, dram_stride=0,
                 row_bytes=rows * c.acc_row_bytes, n_rows=1, local_row=0, local_stride=0,
                 signal="L")
    first = MatmulOp(a_row=0, w_row=0, acc_row=100, m=64, accumulate=False, k_blocks=8)
    # streams right behind the first (if its writes counted, the load would wait for them)
    after = MatmulOp(a_row=0, w_row=0, acc_row=200, m=64, accumulate=False, k_blocks=8,
                     wait=("L", 1))
    timer = Timer(c)
    timer.run([first, load, after])
    mm_end = matmul_latency(c, 64, 8)            # the first MATMUL's last write
    assert dma_cycles(c, rows * c.acc_row_bytes, 1) < mm_end
    assert timer.done["L"] == [mm_end + rows]    # its rows after the array's last write
    # the same load before any MATMUL is not held
    timer = Timer(c)
    timer.run([load, after])
    assert timer.done["L"] == [dma_cycles(c, rows * c.acc_row_bytes, 1)]
