"""hw.isa.timing against :class:`hw.dma.DMA` in Amaranth's simulator, driving the
co-simulation's ideal DRAM (a register-exact transcription of ``cosim/tb/dram.sv``,
:mod:`tests.support.ideal_dram`) with ideal local memories: busy cycles of loads and stores
(counted on ``busy`` as the ``busy.load``/``busy.store`` counters count them), the burst
decomposition (every AR/AW on the bus), size-zero and failing commands, on bus widths where the
local row is wider than, as wide as and narrower than a beat."""

import random

import pytest
from amaranth.sim import Simulator

from hw.config import NPUConfig
from hw.dma import DMA
from hw.isa import ACCEPT_CYCLES, Command, ErrorCode, LocalMem, Opcode, encode, timing
from tests.support.ideal_dram import IdealDram, IdealLocalMemories

SPAD, ACC = LocalMem.SPAD, LocalMem.ACC
LOAD, STORE = Opcode.DMA_LOAD, Opcode.DMA_STORE
CONFIGS = {
    "8x8": NPUConfig(),                                          # beat 8 B: spad 8 B, acc 32 B
    "4x4": NPUConfig(rows=4, cols=4),                            # spad 4 B, acc 16 B
    "bus32": NPUConfig(axi_data_bits=32, dram_bytes=1 << 20),    # beat 4 B: spad 8 B, acc 32 B
    "bus128-out4": NPUConfig(rows=2, cols=2, axi_data_bits=128, dram_bytes=1 << 20,
                             dma_outstanding=4),                 # beat 16 B: spad 2 B, acc 8 B
    "bus256-out3": NPUConfig(axi_data_bits=256, dram_bytes=1 << 20, dma_outstanding=3),
    "8x8-out2-burst16": NPUConfig(dma_outstanding=2, dma_max_burst_beats=16),
}


def body(addr, stride, row_bytes, n_rows, mem=SPAD, local_row=0, local_stride=None):
    return dict(dram_addr=addr, dram_stride=stride, row_bytes=row_bytes, n_rows=n_rows,
                local_row=local_row, mem=mem,
                local_stride=local_stride if local_stride is not None else row_bytes and 1)


def local_bytes(cfg, mem):
    return cfg.acc_row_bytes if mem == ACC else cfg.spad_row_bytes


def dense(cfg, addr, stride, row_bytes, n_rows, mem=SPAD):
    """A transfer whose rows land on consecutive local rows."""
    return body(addr, stride, row_bytes, n_rows, mem, 0, row_bytes // local_bytes(cfg, mem))


def run(cfg, jobs):
    """Run ``(opcode, body)`` jobs one after the other on an idle DMA; per job the error, busy
    cycles, cycles from the handshake to the channel's next ``ready``, and the bursts it put
    on the bus."""
    dut = DMA(cfg)
    dram = IdealDram(dut.bus, cfg.dram_bytes, cfg.axi_data_bytes)
    local = IdealLocalMemories(dut, {SPAD: cfg.spad_rows, ACC: cfg.acc_rows})
    results = []

    async def tb(ctx):
        for op, b in jobs:
            port = dut.load if op == LOAD else dut.store
            n_ar, n_aw = len(dram.ars), len(dram.aws)
            ctx.set(port.cmd.payload, Command.const({"header": {"opcode": op},
                                                     "body": {"dma": b}}))
            ctx.set(port.cmd.valid, 1)
            _, _, ready = await ctx.tick().sample(port.cmd.ready)
            assert ready
            ctx.set(port.cmd.valid, 0)
            busy_count, period, error = 0, 1, None
            while True:
                _, _, busy, done, err, ready = await ctx.tick().sample(
                    port.busy, port.done, port.error, port.cmd.ready)
                if ready:
                    break
                period += 1
                busy_count += busy
                if done:
                    error = ErrorCode(err)
                assert period < 200_000
            bursts = dram.ars[n_ar:] if op == LOAD else dram.aws[n_aw:]
            other = dram.aws[n_aw:] if op == LOAD else dram.ars[n_ar:]
            assert not other, "traffic on the other channel"
            results.append((error, busy_count, period, bursts))

    sim = Simulator(dut)
    sim.add_clock(1e-8)

    async def memory(ctx):
        await dram.run(ctx)

    async def local_memory(ctx):
        await local.run(ctx)

    sim.add_testbench(memory, background=True)
    sim.add_testbench(local_memory, background=True)
    sim.add_testbench(tb)
    sim.run()
    return results


def check(cfg, jobs):
    for (op, b), (error, busy, period, bursts) in zip(jobs, run(cfg, jobs), strict=True):
        assert error == ErrorCode.NONE, (op.name, b)
        args = (cfg, b["dram_addr"], b["dram_stride"], b["row_bytes"], b["n_rows"], b["mem"])
        want_bursts = timing.dma_bursts(*args)
        assert bursts == [(x.addr, x.beats - 1) for x in want_bursts], (op.name, b)
        f = timing.dma_load_busy_cycles if op == LOAD else timing.dma_store_busy_cycles
        assert busy == f(*args), (op.name, b)
        assert period == busy + ACCEPT_CYCLES
        raw = encode({"header": {"opcode": op}, "body": {"dma": b}})
        assert timing.command_busy_cycles(cfg, raw) == busy


def directed(cfg):
    """4 KiB splits, rows over 256 beats, partial first/last beats, one-chunk rows, rows whose
    last beat is held (narrow local rows), short bursts that the outstanding-read limit
    paces, in both memories, as loads and as stores."""
    beat = cfg.axi_data_bytes
    jobs = []
    for mem in (SPAD, ACC):
        lb = local_bytes(cfg, mem)
        g = min(lb, beat)
        cases = [
            dense(cfg, 0, 0, lb, 1, mem),                               # one local row
            dense(cfg, 4096 - 2 * lb, 0, 4 * lb, 1, mem),               # crosses 4 KiB
            dense(cfg, 8192 - g, 8 * lb, 8 * lb, 3, mem),               # partial first beat
            dense(cfg, 4096, 3 * lb, 3 * lb, 5, mem),                   # ragged rows
            dense(cfg, 64, 0, (300 * beat // lb + 1) * lb, 1, mem),     # > 256 beats
            dense(cfg, 12288 - 5 * beat, lb, lb, 9, mem),               # many short bursts
            body(g, lb + g, lb, 7, mem, 0, 1),                          # mid-beat starts
            # any byte address and length: the prime, the load's flush word, the store's
            # flush beat, partial last chunks and local rows
            body(1, lb + 3, lb, 5, mem, 0, 1),
            body(3, 2 * beat + 1, 2 * beat - 1, 4, mem, 0, 2 * beat // lb + 1),
            body(beat - 1, 0, 2, 1, mem, 0, 1),                         # 1 | 1 byte
            body(4096 - 3, 0, 600 * beat // 256 + 5, 1, mem, 0,         # odd, crosses 4 KiB
                 (600 * beat // 256 + 5) // lb + 1),
            body(5, 7, 1, 9, mem, 0, 1),                                # 1-byte rows
            body(beat + 2, 3 * beat, 3 * beat - 2, 3, mem, 0, 3 * beat // lb + 1),
            # one-beat rows, each its own burst: with narrow local rows the DMA holds every
            # beat for several chunks, and the outstanding-read limit paces the ARs
            dense(cfg, 0, 2 * max(beat, lb), max(beat, lb), 8, mem),
        ]
        for c in cases:
            jobs += [(LOAD, c), (STORE, c)]
    return jobs


@pytest.mark.parametrize("name", CONFIGS)
def test_directed_transfers(name):
    cfg = CONFIGS[name]
    check(cfg, directed(cfg))


def random_odd_jobs(cfg, rng, n):
    """Any byte address, stride and length."""
    jobs = []
    for _ in range(n):
        mem = rng.choice([SPAD, ACC])
        lb = local_bytes(cfg, mem)
        row_bytes = rng.choice([1, rng.randint(1, 3 * lb), rng.randint(1, 700)])
        n_rows = rng.randint(1, 5)
        stride = rng.randint(row_bytes, row_bytes + 40)
        addr = (4096 * rng.randint(1, 8) - rng.randint(1, 300) if rng.random() < 0.5
                else rng.randrange(cfg.dram_bytes // 8))
        lrows = -(-row_bytes // lb)
        jobs.append((rng.choice([LOAD, STORE]),
                     body(addr, stride, row_bytes, n_rows, mem, 0, lrows)))
    return jobs


def random_jobs(cfg, rng, n):
    jobs = []
    for _ in range(n):
        mem = rng.choice([SPAD, ACC])
        lb = local_bytes(cfg, mem)
        g = min(lb, cfg.axi_data_bytes)
        row_bytes = lb * rng.choice([1, 2, 3, rng.randint(1, 40), rng.randint(1, 600 // lb + 1)])
        n_rows = rng.randint(1, 6)
        stride = g * rng.randint(row_bytes // g, row_bytes // g + 5)
        addr = (4096 * rng.randint(1, 8) - g * rng.randint(1, 40) if rng.random() < 0.5
                else g * rng.randrange(cfg.dram_bytes // 8 // g))
        jobs.append((rng.choice([LOAD, STORE]), dense(cfg, addr, stride, row_bytes, n_rows, mem)))
    return jobs


@pytest.mark.parametrize("name", CONFIGS)
def test_random_transfers(name):
    cfg = CONFIGS[name]
    check(cfg, random_jobs(cfg, random.Random(name), 24))


@pytest.mark.parametrize("name", CONFIGS)
def test_random_odd_transfers(name):
    cfg = CONFIGS[name]
    check(cfg, random_odd_jobs(cfg, random.Random(f"odd{name}"), 24))


def test_narrow_store_waits_for_its_beat_buffer():
    """Stores of local rows narrower than a beat whose beat buffer fills between bursts: the
    store channel stops reading local rows at 3 buffered beats, which shows one cycle later
    (the formula walks the chunks; without the buffer limit it is one cycle short)."""
    cfg = CONFIGS["4x4"]
    jobs = [(STORE, dense(cfg, 12260, 48, 32, 4)), (STORE, dense(cfg, 8076, 40, 40, 10)),
            (STORE, dense(cfg, 4, 12, 8, 10)), (STORE, dense(cfg, 4, 12, 4, 30))]
    check(cfg, jobs)


def test_size_zero_and_failing_commands():
    """Size zero retires after 2 cycles; range errors after 4 + the index of the first
    offending row (the DMA searches the rows one per cycle)."""
    cfg = NPUConfig(dram_bytes=1 << 16, spad_rows=64, acc_rows=32)
    jobs = [
        (body(0, 8, 0, 5), ErrorCode.NONE, 0),
        (body(0, 8, 8, 0), ErrorCode.NONE, 0),
        (body((1 << 16) - 11, 11, 11, 1), ErrorCode.NONE, None),         # fits to the byte
        (body((1 << 16) - 12, 11, 13, 1), ErrorCode.BAD_DRAM_ADDR, 0),
        (body(0, 0, 9, 2, SPAD, 62, 1), ErrorCode.BAD_LOCAL_ADDR, 1),   # 2 local rows each
        (body((1 << 16) - 8, 8, 8, 3), ErrorCode.BAD_DRAM_ADDR, 1),
        (body(0, 1 << 13, 8, 12), ErrorCode.BAD_DRAM_ADDR, 8),
        (body(0, 0, 8, 9, SPAD, 60, 1), ErrorCode.BAD_LOCAL_ADDR, 4),
        (body(0, 0, 64, 9, ACC, 0, 4), ErrorCode.BAD_LOCAL_ADDR, 8),
        (body(0, 0, 32, 3, ACC, 40, 1), ErrorCode.BAD_LOCAL_ADDR, 0),
    ]
    for op in (LOAD, STORE):
        results = run(cfg, [(op, b) for b, _, _ in jobs])
        for (b, want_error, j), (error, busy, period, bursts) in zip(jobs, results, strict=True):
            if j is None:                                               # a transfer that moves
                assert error == want_error and bursts, (op.name, b)
                continue
            assert error == want_error and not bursts, (op.name, b)
            args = (b["dram_addr"], b["dram_stride"], b["row_bytes"], b["n_rows"],
                    b["local_row"], b["local_stride"], b["mem"])
            want = timing.dma_error_busy_cycles(cfg, error, *args)
            assert (busy, period) == (want, want + ACCEPT_CYCLES), (op.name, b)
            assert want == (2 if error == ErrorCode.NONE else 4 + j)
    with pytest.raises(ValueError, match="no row"):
        timing.dma_error_busy_cycles(cfg, ErrorCode.BAD_DRAM_ADDR, 0, 8, 8, 2)
    for code in (ErrorCode.AXI_ERROR, ErrorCode.MISALIGNED, ErrorCode.BAD_SIZE):
        with pytest.raises(ValueError, match="does not retire early"):
            timing.dma_error_busy_cycles(cfg, code, 0, 8, 8, 2)


def test_window_error_search():
    """WINDOW: the first row outside the queue's window (base, limit) sets the search length."""
    cfg = NPUConfig()
    assert timing.dma_error_busy_cycles(cfg, ErrorCode.WINDOW, 0x1000, 0x100, 8, 10,
                                        window=(0x1000, 0x1400)) == 4 + 4
    assert timing.dma_error_busy_cycles(cfg, ErrorCode.WINDOW, 0x800, 0x100, 8, 10,
                                        window=(0x1000, 0)) == 4


def test_burst_decomposition_rules():
    """Bursts of a row: at most dma_max_burst_beats beats, never across 4 KiB, first beat
    aligned down, chunks of partial beats; matches a naive split of every row (G-aligned rows
    of whole local rows: one step per chunk). Any byte address and length: the same split,
    and every chunk of a row is one load step, plus the prime of a shifted row."""
    rng = random.Random(3)
    for cfg in CONFIGS.values():
        beat = cfg.axi_data_bytes
        for _ in range(300):
            mem = rng.choice([SPAD, ACC])
            lb = local_bytes(cfg, mem)
            g = min(lb, beat)
            row_bytes, n_rows = lb * rng.randint(1, 700), rng.randint(1, 4)
            addr, stride = g * rng.randrange(5000), g * rng.randrange(3000)
            bursts = timing.dma_bursts(cfg, addr, stride, row_bytes, n_rows, mem)
            naive = []
            for r in range(n_rows):
                start = addr + r * stride
                end = start + row_bytes

                def row_part(lo, hi, start=start, end=end):    # bytes of the row in [lo, hi)
                    return max(0, min(hi, end) - max(lo, start))

                a = start - start % beat
                while a < end:
                    n = 1               # grow the burst beat by beat while the rules allow
                    while (n < cfg.dma_max_burst_beats and a + n * beat < end
                           and (a + n * beat) % 4096):
                        n += 1
                    last = a + (n - 1) * beat
                    naive.append((a, n, r, row_part(a, a + beat) // g,
                                  row_part(last, last + beat) // g,
                                  row_part(a, a + n * beat) // g))
                    a += n * beat
            got = [(b.addr, b.beats, b.row, b.first_steps, b.last_steps, b.steps)
                   for b in bursts]
            assert got == naive
            # any byte address and length
            row_bytes, addr = rng.randint(1, 3000), rng.randrange(20000)
            stride = rng.randrange(5000)
            bursts = timing.dma_bursts(cfg, addr, stride, row_bytes, n_rows, mem)
            for r in range(n_rows):
                mine = [b for b in bursts if b.row == r]
                start = addr + r * stride
                assert mine[0].addr == start - start % beat
                assert sum(b.beats for b in mine) == -(-(start % beat + row_bytes) // beat)
                assert all(b.beats <= cfg.dma_max_burst_beats
                           and b.addr // 4096 == (b.addr + b.beats * beat - 1) // 4096
                           for b in mine)
                shifted = start % beat % g != 0
                assert sum(b.steps + b.tail for b in mine) == -(-row_bytes // g) + shifted
                assert sum(sum(b.strobes_per_beat()) for b in mine) == row_bytes
    assert timing.dma_bursts(NPUConfig(), 0, 8, 0, 4) == []


def test_per_beat_lists_are_the_row_layout_beat_by_beat():
    """``Burst.steps_per_beat``, ``store_steps_per_beat`` and ``strobes_per_beat`` (computed once
    per row shape and cached) equal the row layout's per-beat rules evaluated at each burst's
    own beats, for rows at any byte address and length (the cache must key on everything the
    layout depends on)."""
    rng = random.Random(11)
    for cfg in CONFIGS.values():
        beat = cfg.axi_data_bytes
        for _ in range(200):
            mem = rng.choice([SPAD, ACC])
            row_bytes, addr = rng.randint(1, 2500), rng.randrange(20000)
            bursts = timing.dma_bursts(cfg, addr, rng.randrange(5000), row_bytes,
                                       rng.randint(1, 3), mem)
            for b in bursts:
                row = timing.DmaRow(b.layout.addr, row_bytes, beat, local_bytes(cfg, mem))
                ks = range(b.k0, b.k0 + b.beats)
                assert b.steps_per_beat() == [row.load_beat_steps(k) for k in ks]
                assert b.store_steps_per_beat() == [row.store_beat_steps(k) for k in ks]
                assert b.strobes_per_beat() == [row.strobes(k) for k in ks]
                assert sum(b.steps_per_beat()) == b.steps
