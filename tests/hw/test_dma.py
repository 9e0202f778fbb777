# amaranth: UnusedElaboratable=no
"""Block tests of :class:`hw.dma.DMA` in Amaranth's simulator.

The DMA runs against a deliberately naive AXI4 subordinate (a ``bytearray``, optional seeded
random stalls on every channel) and naive local memories (Python lists) behind its four memory
ports (the write ports optionally denied at random, as the tile's arbiter does); results are
compared with a naive Python model of the transfer, byte for byte: a DRAM row of any byte
address and length is a straight copy of ``ceil(row_bytes / L)`` local rows (a load zero-fills
the rest of a partial last local row; a store strobes exactly the row's bytes). The model also
checks the bus rules on every beat: bursts of at most ``dma_max_burst_beats`` beats that never
cross 4 KiB, INCR, full beat size, ID 0, valid held with stable payload until ready, WLAST
where the burst ends; and the ``stall`` status bits against what it sees on the bus and the
memory ports.
"""

import random
from collections import deque
from dataclasses import dataclass, replace

import pytest
from amaranth.sim import Simulator

from hw.bus import AXI_BURST_INCR, AXI_RESP_OKAY, AXI_RESP_SLVERR
from hw.config import NPUConfig
from hw.dma import DMA, PAGE_BYTES
from hw.isa import Command, ErrorCode, LocalMem, Opcode

CONFIGS = {
    "default": NPUConfig(),                                     # 64-bit bus, spad 8 B, acc 32 B
    "4x4": NPUConfig(rows=4, cols=4),                           # spad 4 B (< beat), acc 16 B
    "bus32": NPUConfig(axi_data_bits=32, dram_bytes=1 << 20),   # spad 8 B, acc 32 B (> beat)
    "bus128": NPUConfig(rows=2, cols=2, axi_data_bits=128, dram_bytes=1 << 20,
                        dma_outstanding=4),                     # spad 2 B, acc 8 B
    "bus256": NPUConfig(axi_data_bits=256, dram_bytes=1 << 20),  # spad 8 B, acc 32 B (= beat)
    "burst16": NPUConfig(dma_max_burst_beats=16, dma_outstanding=3),  # AXI3-sized bursts
}


# -- naive reference model ----------------------------------------------------------------------

@dataclass(frozen=True)
class Transfer:
    dram_addr: int
    dram_stride: int
    row_bytes: int
    n_rows: int
    local_row: int
    local_stride: int
    mem: LocalMem

    def command(self, opcode: Opcode):
        return Command.const({"header": {"opcode": opcode}, "body": {"dma": {
            "dram_addr": self.dram_addr, "dram_stride": self.dram_stride,
            "row_bytes": self.row_bytes, "n_rows": self.n_rows, "local_row": self.local_row,
            "local_stride": self.local_stride, "mem": self.mem}}})


def local_row_bytes(cfg: NPUConfig, mem: LocalMem) -> int:
    return cfg.spad_row_bytes if mem == LocalMem.SPAD else cfg.acc_row_bytes


def local_depth(cfg: NPUConfig, mem: LocalMem) -> int:
    return cfg.spad_rows if mem == LocalMem.SPAD else cfg.acc_rows


def local_rows(cfg: NPUConfig, t: Transfer) -> int:
    """Local rows per DRAM row: ceil(row_bytes / L)."""
    return -(-t.row_bytes // local_row_bytes(cfg, t.mem))


def expected_error(cfg: NPUConfig, t: Transfer) -> tuple[ErrorCode, int]:
    """The error code and error_addr the DMA must report (NONE, 0 for a good transfer)."""
    if t.n_rows == 0 or t.row_bytes == 0:
        return ErrorCode.NONE, 0
    for r in range(t.n_rows):
        addr = t.dram_addr + r * t.dram_stride
        if any(not 0 <= a < cfg.dram_bytes for a in (addr, addr + t.row_bytes - 1)):
            return ErrorCode.BAD_DRAM_ADDR, addr & 0xFFFF_FFFF
    for r in range(t.n_rows):
        first = t.local_row + r * t.local_stride
        for row in range(first, first + local_rows(cfg, t)):
            if row >= local_depth(cfg, t.mem):
                return ErrorCode.BAD_LOCAL_ADDR, row
    return ErrorCode.NONE, 0


def rows_of(cfg: NPUConfig, t: Transfer):
    """(DRAM byte address, bytes, local row) of every local row of the transfer, in order; the
    last local row of a DRAM row holds fewer than L bytes when L does not divide row_bytes."""
    L = local_row_bytes(cfg, t.mem)
    for r in range(t.n_rows):
        for j in range(local_rows(cfg, t)):
            yield (t.dram_addr + r * t.dram_stride + j * L, min(L, t.row_bytes - j * L),
                   t.local_row + r * t.local_stride + j)


def reference_load(cfg, t, dram, local):
    for addr, n, row in rows_of(cfg, t):
        local[t.mem][row] = int.from_bytes(dram[addr:addr + n], "little")   # the rest is 0


def reference_store(cfg, t, dram, local):
    L = local_row_bytes(cfg, t.mem)
    for addr, n, row in rows_of(cfg, t):
        dram[addr:addr + n] = local[t.mem][row].to_bytes(L, "little")[:n]


def row_byte_addresses(t: Transfer) -> list[int]:
    """Every DRAM byte address of the transfer, row by row (a store strobes exactly these)."""
    return [t.dram_addr + r * t.dram_stride + i for r in range(t.n_rows)
            for i in range(t.row_bytes)]


def reference_bursts(cfg, t):
    """Fewest bursts: split each row at 4 KiB boundaries and every dma_max_burst_beats."""
    A = cfg.axi_data_bytes
    bursts = []
    for r in range(t.n_rows):
        start = t.dram_addr + r * t.dram_stride
        beat = start - start % A
        end = start + t.row_bytes
        while beat < end:
            n = min(cfg.dma_max_burst_beats, (PAGE_BYTES - beat % PAGE_BYTES) // A,
                    -(-(end - beat) // A))
            bursts.append((beat, n - 1))
            beat += n * A
    return bursts


# -- naive models of the environment -------------------------------------------------------------

class Environment:
    """AXI4 subordinate over a bytearray plus local memories as Python lists.

    ``stall`` is the probability that a ready or a new valid of the model is held low in a
    cycle (seeded). ``r_latency`` is the number of cycles after an AR before its first R beat may
    go. Reads of a beat, and writes of a burst, that touch ``[bad_lo, bad_hi)`` get SLVERR
    (a failing write burst writes nothing). ``deny`` is the probability that a local write
    port's ``ready`` is low in a cycle (a higher-priority writer has the port); a row is
    written only on ``en & ready``. ``stall_counts`` counts the cycles each ``stall`` bit of
    the DMA was high.
    """

    def __init__(self, cfg: NPUConfig, *, seed=0, stall=0.0, r_latency=0, bad=(0, 0),
                 deny=0.0):
        self.cfg = cfg
        self.rng = random.Random(seed)
        self.deny_rng = random.Random(f"deny{seed}")
        self.stall = stall
        self.r_latency = r_latency
        self.bad = bad
        self.deny = deny
        self.stall_counts = dict.fromkeys(("load_dram", "load_spad", "load_acc", "store_dram"), 0)
        self.denied_writes = 0
        self.dram = bytearray(self.rng.randbytes(cfg.dram_bytes))
        self.local = {
            mem: [self.rng.getrandbits(8 * local_row_bytes(cfg, mem))
                  for _ in range(local_depth(cfg, mem))]
            for mem in LocalMem}
        self.ars, self.aws = [], []
        self.strobed: list[int] = []    # DRAM byte address of every strobed byte, in order
        self.max_reads_in_flight = 0
        self.cycles = 0

    def go(self):
        return self.stall == 0 or self.rng.random() >= self.stall

    def is_bad(self, lo, hi):
        return lo < self.bad[1] and self.bad[0] < hi

    def check_address(self, kind, addr, length, size, burst, id_):
        A = self.cfg.axi_data_bytes
        assert id_ == 0, f"{kind} id {id_}"
        assert burst == AXI_BURST_INCR and 1 << size == A, f"{kind} burst {burst} size {size}"
        assert addr % A == 0, f"{kind} address {addr:#x} not beat-aligned"
        assert length + 1 <= self.cfg.dma_max_burst_beats, f"{kind} of {length + 1} beats"
        assert addr // PAGE_BYTES == (addr + (length + 1) * A - 1) // PAGE_BYTES, \
            f"{kind} {addr:#x}+{length + 1} beats crosses 4 KiB"
        assert addr + (length + 1) * A <= self.cfg.dram_bytes, f"{kind} {addr:#x} outside DRAM"

    async def run(self, ctx, dut):
        """Serve the DMA's bus and memory ports forever, checking every cycle."""
        self._start(dut)
        while True:
            self._drive(ctx)
            _, _, *v = await ctx.tick().sample(*self.watched.values())
            self.cycles += 1
            s = self._sampled(v)
            self._check_stalls(s)
            self._check_stable(s)
            self._read_channels(s)
            self._write_channels(s)
            self._local_memories(ctx, s)

    def _start(self, dut):
        bus = dut.bus
        self.bus = bus
        self.reads = deque()        # [addr, len, cycles until the first beat may go]
        self.r_beat = 0
        self.r_out = None           # R beat being offered: (data, resp, last)
        self.writes = deque()       # accepted AW
        self.w_beats = []           # accepted W beats of the oldest unfinished burst
        self.w_done = deque()       # beats of complete bursts waiting for their AW
        self.b_pending = deque()
        self.b_out = None
        self.pending = {}           # channel -> payload offered without ready (must stay)
        self.writes_open = 0        # write bursts accepted on AW, B response not yet taken
        self.ports_w = {LocalMem.SPAD: dut.spad_w, LocalMem.ACC: dut.acc_w}
        self.ports_r = {LocalMem.SPAD: dut.spad_r, LocalMem.ACC: dut.acc_r}
        # every signal sampled at the clock edge, by the name _sampled gives its value
        names = ("arvalid araddr arlen arsize arburst arid rready awvalid awaddr awlen awsize "
                 "awburst awid wvalid wdata wstrb wlast bready")
        self.watched = {name: getattr(bus, name) for name in names.split()}
        for bit in ("load_dram", "load_spad", "load_acc", "store_dram"):
            self.watched[f"stall_{bit}"] = getattr(dut.stall, bit)
        for mem in LocalMem:
            w, r = self.ports_w[mem], self.ports_r[mem]
            self.watched.update({(mem, "w_en"): w.en, (mem, "w_addr"): w.addr,
                                 (mem, "w_data"): w.data, (mem, "r_en"): r.en,
                                 (mem, "r_addr"): r.addr})

    def _drive(self, ctx):
        """This cycle's outputs of the subordinate and the memories."""
        bus, A = self.bus, self.cfg.axi_data_bytes
        self.ready = {"AR": self.go(), "AW": self.go(), "W": self.go()}
        ctx.set(bus.arready, self.ready["AR"])
        ctx.set(bus.awready, self.ready["AW"])
        ctx.set(bus.wready, self.ready["W"])
        self.w_ready = {mem: not (self.deny and self.deny_rng.random() < self.deny)
                        for mem in LocalMem}
        for mem in LocalMem:
            ctx.set(self.ports_w[mem].ready, self.w_ready[mem])
        self.reads_open = bool(self.reads)
        for rd in self.reads:
            rd[2] = max(0, rd[2] - 1)
        if self.r_out is None and self.reads and self.reads[0][2] == 0 and self.go():
            addr, length, _ = self.reads[0]
            beat_addr = addr + self.r_beat * A
            resp = AXI_RESP_SLVERR if self.is_bad(beat_addr, beat_addr + A) else AXI_RESP_OKAY
            self.r_out = (int.from_bytes(self.dram[beat_addr:beat_addr + A], "little"), resp,
                          int(self.r_beat == length))
        ctx.set(bus.rvalid, self.r_out is not None)
        if self.r_out is not None:
            ctx.set(bus.rdata, self.r_out[0])
            ctx.set(bus.rresp, self.r_out[1])
            ctx.set(bus.rlast, self.r_out[2])
        if self.b_out is None and self.b_pending and self.go():
            self.b_out = self.b_pending.popleft()
        ctx.set(bus.bvalid, self.b_out is not None)
        ctx.set(bus.bresp, self.b_out or 0)

    def _sampled(self, values) -> dict:
        s = dict(zip(self.watched, values, strict=True))
        s["mem"] = {mem: {k: s[(mem, k)] for k in ("w_en", "w_addr", "w_data", "r_en", "r_addr")}
                    for mem in LocalMem}
        return s

    def _check_stalls(self, s):
        """The stall status bits, from what is visible on the ports."""
        rvalid, bvalid = self.r_out is not None, self.b_out is not None
        for mem, bit in ((LocalMem.SPAD, s["stall_load_spad"]),
                         (LocalMem.ACC, s["stall_load_acc"])):
            name = mem.name.lower()
            w_en = s["mem"][mem]["w_en"]
            if w_en and not self.w_ready[mem]:
                self.denied_writes += 1
                assert bit, f"{mem.name} write denied but stall.load_{name} low"
                assert not s["rready"], "R beat taken while its local write was denied"
            if bit:
                # the held word is an R beat's, or a row's last word shifted out of the beat
                # held before (no R beat: then it writes, there is no RRESP to fail)
                assert not s["rready"] and not self.w_ready[mem], \
                    f"stall.load_{name} without a held word and a denied port"
                if not rvalid or self.r_out[1] == AXI_RESP_OKAY:
                    assert w_en, f"stall.load_{name} without a write"
        load_local = s["stall_load_spad"] or s["stall_load_acc"]
        waiting = (s["arvalid"] and not self.ready["AR"]) or (self.reads_open and not rvalid)
        assert s["stall_load_dram"] == (waiting and not load_local), "stall.load_dram"
        if ((s["awvalid"] and not self.ready["AW"]) or (s["wvalid"] and not self.ready["W"])):
            assert s["stall_store_dram"], "store_dram low while AW or W waits"
        elif s["stall_store_dram"]:
            assert self.writes_open and not bvalid and not s["wvalid"], \
                "store_dram high without waiting for AW, W or B"
        for name in self.stall_counts:
            self.stall_counts[name] += s[f"stall_{name}"]

    def _check_stable(self, s):
        """Valid must stay, with the same payload, until ready."""
        for name, valid, payload in (
                ("AR", s["arvalid"], (s["araddr"], s["arlen"])),
                ("AW", s["awvalid"], (s["awaddr"], s["awlen"])),
                ("W", s["wvalid"], (s["wdata"], s["wstrb"], s["wlast"]))):
            if name in self.pending:
                assert valid and payload == self.pending[name], f"{name} dropped before ready"
                del self.pending[name]
            if valid and not self.ready[name]:
                self.pending[name] = payload

    def _read_channels(self, s):
        """AR and R handshakes."""
        if s["arvalid"] and self.ready["AR"]:
            self.check_address("AR", s["araddr"], s["arlen"], s["arsize"], s["arburst"],
                               s["arid"])
            self.ars.append((s["araddr"], s["arlen"]))
            self.reads.append([s["araddr"], s["arlen"], self.r_latency])
        if self.r_out is not None and s["rready"]:
            if self.r_out[2]:
                self.reads.popleft()
                self.r_beat = 0
            else:
                self.r_beat += 1
            self.r_out = None
        self.max_reads_in_flight = max(self.max_reads_in_flight, len(self.reads))

    def _write_channels(self, s):
        """AW, W and B handshakes; a burst is written once both its AW and its W beats are
        in (a failing burst writes nothing)."""
        A = self.cfg.axi_data_bytes
        if s["awvalid"] and self.ready["AW"]:
            self.check_address("AW", s["awaddr"], s["awlen"], s["awsize"], s["awburst"],
                               s["awid"])
            self.aws.append((s["awaddr"], s["awlen"]))
            self.writes.append((s["awaddr"], s["awlen"]))
            self.writes_open += 1
        if s["wvalid"] and self.ready["W"]:
            self.w_beats.append((s["wdata"], s["wstrb"]))
            if s["wlast"]:
                self.w_done.append(self.w_beats)
                self.w_beats = []
        while self.writes and self.w_done:
            (addr, length), beats = self.writes.popleft(), self.w_done.popleft()
            assert len(beats) == length + 1, f"WLAST after {len(beats)} beats, AWLEN {length}"
            if self.is_bad(addr, addr + len(beats) * A):
                self.b_pending.append(AXI_RESP_SLVERR)
                continue
            for i, (data, strb) in enumerate(beats):
                raw = data.to_bytes(A, "little")
                for b in range(A):
                    if strb >> b & 1:
                        self.dram[addr + i * A + b] = raw[b]
                        self.strobed.append(addr + i * A + b)
            self.b_pending.append(AXI_RESP_OKAY)
        if self.b_out is not None and s["bready"]:
            self.b_out = None
            self.writes_open -= 1

    def _local_memories(self, ctx, s):
        """Synchronous read (old data), then write."""
        for mem in LocalMem:
            p = s["mem"][mem]
            if p["r_en"]:
                ctx.set(self.ports_r[mem].data, self.local[mem][p["r_addr"]])
            if p["w_en"] and self.w_ready[mem]:
                self.local[mem][p["w_addr"]] = p["w_data"]


async def run_command(ctx, port, cmd, *, limit=20000):
    """Offer one command, wait for ``done``; check ``busy``. Returns (error, error_addr, cycles)."""
    ctx.set(port.cmd.payload, cmd)
    ctx.set(port.cmd.valid, 1)
    while True:
        _, _, ready = await ctx.tick().sample(port.cmd.ready)
        if ready:
            break
    ctx.set(port.cmd.valid, 0)
    for cycles in range(1, limit):
        _, _, done, error, error_addr, busy, ready = await ctx.tick().sample(
            port.done, port.error, port.error_addr, port.busy, port.cmd.ready)
        assert busy and not ready
        if done:
            return error, error_addr, cycles
    raise AssertionError(f"command did not retire in {limit} cycles")


def simulate(cfg, env, *testbenches):
    dut = DMA(cfg)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    async def environment(ctx):
        await env.run(ctx, dut)
    sim.add_testbench(environment, background=True)
    for tb in testbenches:
        async def bench(ctx, tb=tb):
            await tb(ctx, dut)
        sim.add_testbench(bench)
    sim.run()


def run_and_check(cfg, env, jobs, *, expect_traffic=True):
    """Run (opcode, Transfer) jobs one after the other; compare with the reference each time."""
    results = []

    async def tb(ctx, dut):
        for opcode, t in jobs:
            dram, local = bytearray(env.dram), {m: list(v) for m, v in env.local.items()}
            n_ar, n_aw, n_strobed = len(env.ars), len(env.aws), len(env.strobed)
            port = dut.load if opcode == Opcode.DMA_LOAD else dut.store
            error, error_addr, cycles = await run_command(ctx, port, t.command(opcode))
            want = expected_error(cfg, t)
            assert (error, error_addr) == want, f"{opcode.name} {t}"
            results.append((error, cycles))
            moves = want[0] == ErrorCode.NONE and t.n_rows and t.row_bytes
            if moves:
                (reference_load if opcode == Opcode.DMA_LOAD else reference_store)(
                    cfg, t, dram, local)
                new = env.ars[n_ar:] if opcode == Opcode.DMA_LOAD else env.aws[n_aw:]
                assert new == reference_bursts(cfg, t), f"bursts of {t}"
                if opcode == Opcode.DMA_STORE and not env.bad[1]:
                    # every byte of every row strobed once, in order, and no other byte
                    assert env.strobed[n_strobed:] == row_byte_addresses(t), f"WSTRB of {t}"
            else:
                assert (len(env.ars), len(env.aws)) == (n_ar, n_aw), f"bus traffic for {t}"
            assert env.dram == dram, f"DRAM differs after {opcode.name} {t}"
            for mem in LocalMem:
                assert env.local[mem] == local[mem], f"{mem.name} differs after {t}"

    simulate(cfg, env, tb)
    return results


def random_transfer(cfg, rng, mem, *, max_rows=4, max_local_rows=6, odd=False):
    """A random 2-D transfer that passes the checks. ``odd``: any byte address, stride and
    length; otherwise G-aligned addresses and whole local rows (the transfers the DMA took
    before it took any byte address)."""
    A = cfg.axi_data_bytes
    L = local_row_bytes(cfg, mem)
    G = min(L, A)
    unit = 1 if odd else G
    row_bytes = rng.randint(1, L * max_local_rows) if odd else L * rng.randint(1, max_local_rows)
    n_rows = rng.randint(1, max_rows)
    stride = unit * rng.randint(-(-row_bytes // unit), -(-row_bytes // unit) + 3)
    # near a 4 KiB boundary now and then, anywhere otherwise
    if rng.random() < 0.3:
        addr = PAGE_BYTES * rng.randint(1, 8) - (rng.randint(1, 8 * G) if odd
                                                 else G * rng.randint(1, 8))
    else:
        addr = unit * rng.randrange(cfg.dram_bytes // 4 // unit)
    lrows = -(-row_bytes // L)
    local_stride = rng.randint(lrows, lrows + 2)
    local_row = rng.randrange(local_depth(cfg, mem) - n_rows * local_stride - lrows)
    return Transfer(addr, stride, row_bytes, n_rows, local_row, local_stride, mem)


# -- tests --------------------------------------------------------------------------------------

def random_jobs(cfg, rng: random.Random, n: int, *, odd: bool = False) -> list:
    """``n`` random transfers (:func:`random_transfer`): loads and stores in pairs,
    alternating the accumulator and the scratchpad."""
    return [(Opcode.DMA_LOAD if i % 4 < 2 else Opcode.DMA_STORE,
             random_transfer(cfg, rng, LocalMem.SPAD if i % 2 else LocalMem.ACC, odd=odd))
            for i in range(n)]


@pytest.mark.parametrize("stall", [0.0, 0.4], ids=["nostall", "stall"])
@pytest.mark.parametrize("name", CONFIGS)
def test_random_transfers(name, stall):
    """Loads and stores, SPAD and ACC, 2-D strides, mid-beat rows, near 4 KiB boundaries."""
    cfg = CONFIGS[name]
    jobs = random_jobs(cfg, random.Random(f"{name}{stall}"), 12)
    env = Environment(cfg, seed=len(jobs), stall=stall, r_latency=2 if stall else 0)
    run_and_check(cfg, env, jobs)


@pytest.mark.parametrize("name", CONFIGS)
def test_long_rows_split_at_4k_and_256_beats(name):
    """A row crossing a 4 KiB boundary, and one longer than 256 beats within a page."""
    cfg = CONFIGS[name]
    A = cfg.axi_data_bytes
    acc = cfg.acc_row_bytes
    crossing = Transfer(PAGE_BYTES * 3 - 5 * min(acc, A), 0, acc * (1000 // acc), 1, 4, 0,
                        LocalMem.ACC)
    long_bytes = min(PAGE_BYTES, 300 * A) // acc * acc
    long = Transfer(PAGE_BYTES * 5, 0, long_bytes, 2, 0, long_bytes // acc, LocalMem.ACC)
    env = Environment(cfg, seed=3, stall=0.2)
    jobs = [(Opcode.DMA_LOAD, crossing), (Opcode.DMA_STORE, crossing),
            (Opcode.DMA_LOAD, long), (Opcode.DMA_STORE, replace(long, dram_addr=PAGE_BYTES * 9))]
    run_and_check(cfg, env, jobs)
    lengths = [length for _, length in env.ars + env.aws]
    assert max(lengths) + 1 == min(cfg.dma_max_burst_beats, PAGE_BYTES // A)
    assert len(env.ars) > 2 and len(env.aws) > 2


@pytest.mark.parametrize("name", ["default", "bus128"])
def test_reads_in_flight_and_throughput(name):
    """Several read bursts in flight; one chunk of G bytes per cycle with an ideal bus."""
    cfg = CONFIGS[name]
    A = cfg.axi_data_bytes
    L = cfg.spad_row_bytes
    G = min(L, A)
    # many one-beat rows, with read latency: needs bursts in flight to keep up
    rows = Transfer(0x1000, A, L, 64, 0, 1, LocalMem.SPAD)
    env = Environment(cfg, seed=1, r_latency=2 * cfg.dma_outstanding)
    run_and_check(cfg, env, [(Opcode.DMA_LOAD, rows)])
    assert env.max_reads_in_flight == cfg.dma_outstanding
    env = Environment(cfg, seed=1)
    ((_, load_cycles),) = run_and_check(cfg, env, [(Opcode.DMA_LOAD, rows)])
    print("64 one-beat rows:", load_cycles, "cycles")
    assert load_cycles <= 64 + 6, load_cycles
    # one long row each way, ideal bus
    n_bytes = 2048
    big = Transfer(0x2000, 0, n_bytes, 1, 0, 0, LocalMem.SPAD)
    env = Environment(cfg, seed=2)
    results = run_and_check(cfg, env, [(Opcode.DMA_LOAD, big), (Opcode.DMA_STORE, big)])
    for _, cycles in results:
        print(f"{n_bytes} bytes in one row: {cycles} cycles, {n_bytes // G} chunks")
        assert cycles <= n_bytes // G + 12, (cycles, n_bytes // G)


@pytest.mark.parametrize("name", ["default", "4x4"])
def test_zero_length(name):
    cfg = CONFIGS[name]
    env = Environment(cfg, seed=4, stall=0.3)
    jobs = []
    for opcode in (Opcode.DMA_LOAD, Opcode.DMA_STORE):
        for mem in LocalMem:
            jobs.append((opcode, Transfer(0x100, 64, 64, 0, 0, 1, mem)))
            jobs.append((opcode, Transfer(0x100, 64, 0, 5, 0, 1, mem)))
            # zero-length commands are not checked further
            jobs.append((opcode, Transfer(0xFFFF_FFFF, 3, 0, 5, 0xFFFF, 1, mem)))
    results = run_and_check(cfg, env, jobs)
    assert all(err == ErrorCode.NONE and cycles <= 3 for err, cycles in results)
    assert env.ars == env.aws == []


def error_transfers(cfg):
    A = cfg.axi_data_bytes
    top = cfg.dram_bytes
    out = []
    for mem in LocalMem:
        L = local_row_bytes(cfg, mem)
        G = min(L, A)
        depth = local_depth(cfg, mem)
        out += [
            (ErrorCode.BAD_DRAM_ADDR, Transfer(top - L + 1, L, L, 1, 0, 2, mem)),
            (ErrorCode.BAD_DRAM_ADDR, Transfer(top - 3 * L - 1, L + 1, L + 1, 3, 0, 2, mem)),
            (ErrorCode.BAD_DRAM_ADDR, Transfer(top, 0, L, 1, 0, 1, mem)),
            (ErrorCode.BAD_DRAM_ADDR, Transfer(top - L, L, 2 * L, 1, 0, 2, mem)),
            (ErrorCode.BAD_DRAM_ADDR, Transfer(top - 10 * L, 3 * L, L, 5, 0, 1, mem)),
            (ErrorCode.BAD_DRAM_ADDR, Transfer(0xFFFF_FFFF & -L, 0xFFFF_FFFF & -L, L, 7, 0, 1,
                                               mem)),
            (ErrorCode.BAD_DRAM_ADDR, Transfer(0, 0xFFFF_FFFF & -L, L, 3, 0, 1, mem)),
            (ErrorCode.BAD_LOCAL_ADDR, Transfer(0, L, L, 1, depth, 1, mem)),
            (ErrorCode.BAD_LOCAL_ADDR, Transfer(0, 4 * L, 4 * L, 1, depth - 2, 4, mem)),
            (ErrorCode.BAD_LOCAL_ADDR, Transfer(0, L, L, 9, depth - 20, 4, mem)),
            (ErrorCode.BAD_LOCAL_ADDR, Transfer(0, 0, L, 0xFFFF, 0xFFFF, 0xFFFF, mem)),
            # a partial last local row counts: ceil(row_bytes / L) local rows
            (ErrorCode.BAD_LOCAL_ADDR, Transfer(G // 2, 3, 2 * L + 1, 1, depth - 2, 1, mem)),
        ]
    return out


@pytest.mark.parametrize("name", CONFIGS)
def test_errors(name):
    """Each check fails with the right code and error_addr, before any bus or memory access."""
    cfg = CONFIGS[name]
    env = Environment(cfg, seed=5)
    cases = error_transfers(cfg)
    jobs = []
    for code, t in cases:
        assert expected_error(cfg, t)[0] == code, t     # the case tests what it says
        jobs += [(Opcode.DMA_LOAD, t), (Opcode.DMA_STORE, t)]
    results = run_and_check(cfg, env, jobs)
    assert [err for err, _ in results] == [code for code, _ in cases for _ in range(2)]
    assert env.ars == env.aws == []


@pytest.mark.parametrize("name", ["default", "4x4", "bus32"])
def test_transfers_ending_exactly_at_the_end_of_dram(name):
    """The last bytes of DRAM are in range: a transfer whose last row ends at ``dram_bytes``
    (one row, 2-D strided, several local rows per DRAM row) moves its data, SPAD and ACC,
    load and store (the error table only has transfers one row beyond the end)."""
    cfg = CONFIGS[name]
    top = cfg.dram_bytes
    jobs = []
    for mem in LocalMem:
        L = local_row_bytes(cfg, mem)
        for t in (Transfer(top - L, L, L, 1, 3, 1, mem),
                  Transfer(top - 2 * L - 3 * 4 * L, 4 * L, 2 * L, 4, 0, 2, mem)):
            assert t.dram_addr + (t.n_rows - 1) * t.dram_stride + t.row_bytes == top
            assert expected_error(cfg, t) == (ErrorCode.NONE, 0), t
            jobs += [(Opcode.DMA_LOAD, t), (Opcode.DMA_STORE, t)]
    env = Environment(cfg, seed=6)
    results = run_and_check(cfg, env, jobs)
    assert [err for err, _ in results] == [ErrorCode.NONE] * len(jobs)
    assert env.ars and env.aws

@pytest.mark.parametrize("name", ["default", "bus32"])
def test_axi_slverr(name):
    """SLVERR on R and on B: AXI_ERROR with the failing burst's address; the bus drains and
    the next command works."""
    cfg = CONFIGS[name]
    A = cfg.axi_data_bytes
    L = cfg.acc_row_bytes
    bad_lo = 0x3000 + L - A   # last beat of row 4 (the beat that completes a local row)
    env = Environment(cfg, seed=6, stall=0.3, r_latency=1, bad=(bad_lo, bad_lo + A))
    t = Transfer(0x3000 - 8 * L, 2 * L, L, 12, 0, 1, LocalMem.ACC)
    good = Transfer(0x8000, L, L, 4, 200, 1, LocalMem.ACC)
    failing_bursts = [(a, n) for a, n in reference_bursts(cfg, t)
                      if env.is_bad(a, a + (n + 1) * A)]
    results = []

    # a load writes the rows before the failing beat and none from it on
    dram, local = bytearray(env.dram), {m: list(v) for m, v in env.local.items()}
    reference_load(cfg, replace(t, n_rows=4), dram, local)
    loaded = []

    async def tb(ctx, dut):
        for port, opcode in ((dut.load, Opcode.DMA_LOAD), (dut.store, Opcode.DMA_STORE)):
            results.append(await run_command(ctx, port, t.command(opcode)))
            if opcode == Opcode.DMA_LOAD:
                loaded.append(list(env.local[LocalMem.ACC]))
            results.append(await run_command(ctx, port, good.command(opcode)))

    simulate(cfg, env, tb)
    first = failing_bursts[0][0]
    assert [(e, a) for e, a, _ in results] == [
        (ErrorCode.AXI_ERROR, first), (ErrorCode.NONE, 0),
        (ErrorCode.AXI_ERROR, first), (ErrorCode.NONE, 0)]
    assert loaded[0] == local[LocalMem.ACC]
    # every burst of the failing transfers was still completed on the bus
    assert env.ars[:len(reference_bursts(cfg, t))] == reference_bursts(cfg, t)
    assert env.aws[:len(reference_bursts(cfg, t))] == reference_bursts(cfg, t)


@pytest.mark.parametrize("name", ["default", "4x4", "bus32"])
def test_concurrent_load_and_store(name):
    """Both channels at once, on disjoint memory; both results right, and they overlapped."""
    cfg = CONFIGS[name]
    env = Environment(cfg, seed=7, stall=0.25, r_latency=1)
    Ls, La = cfg.spad_row_bytes, cfg.acc_row_bytes
    load = Transfer(0x1000 + min(Ls, cfg.axi_data_bytes), 3 * Ls * 4, Ls * 4, 6, 10, 5,
                    LocalMem.SPAD)
    store = Transfer(0x9000, La * 3, La * 2, 6, 40, 2, LocalMem.ACC)
    dram, local = bytearray(env.dram), {m: list(v) for m, v in env.local.items()}
    reference_load(cfg, load, dram, local)
    reference_store(cfg, store, dram, local)
    busy_both = []
    results = {}

    async def run(ctx, dut, opcode, t):
        port = dut.load if opcode == Opcode.DMA_LOAD else dut.store
        results[opcode] = await run_command(ctx, port, t.command(opcode))

    async def watch(ctx, dut):
        for _ in range(400):
            _, _, a, b = await ctx.tick().sample(dut.load.busy, dut.store.busy)
            busy_both.append(a and b)

    simulate(cfg, env,
             lambda ctx, dut: run(ctx, dut, Opcode.DMA_LOAD, load),
             lambda ctx, dut: run(ctx, dut, Opcode.DMA_STORE, store),
             watch)
    assert [r[0] for r in results.values()] == [ErrorCode.NONE] * 2
    assert env.dram == dram
    assert env.local == local
    assert sum(busy_both) > 20


def test_rejects_bad_config():
    with pytest.raises(TypeError, match="NPUConfig"):
        DMA({"rows": 8})


def test_converts_to_verilog():
    from amaranth.back import verilog
    text = verilog.convert(DMA(NPUConfig()), name="dma")
    assert "module dma" in text


@pytest.mark.parametrize("name", CONFIGS)
def test_load_with_denied_writes(name):
    """The local write ports are denied at random (as the tile's arbiter does while an engine
    writes): every row still arrives intact and in order, the R beat is held while its write
    is denied, multi-beat rows are still assembled, and the stall bits say why (checked every
    cycle by the environment)."""
    cfg = CONFIGS[name]
    rng = random.Random(f"deny{name}")
    jobs = [(Opcode.DMA_LOAD, random_transfer(cfg, rng, mem))
            for mem in (LocalMem.SPAD, LocalMem.ACC, LocalMem.SPAD, LocalMem.ACC)]
    jobs.append((Opcode.DMA_STORE, random_transfer(cfg, rng, LocalMem.ACC)))
    env = Environment(cfg, seed=8, stall=0.2, r_latency=1, deny=0.5)
    run_and_check(cfg, env, jobs)
    assert env.denied_writes > 0
    counts = env.stall_counts
    assert counts["load_spad"] > 0 and counts["load_acc"] > 0, counts
    assert counts["load_dram"] > 0 and counts["store_dram"] > 0, counts


@pytest.mark.parametrize("name", ["default", "4x4", "bus32"])
@pytest.mark.parametrize("mem", list(LocalMem), ids=lambda m: m.name)
def test_denied_write_costs_one_cycle(name, mem):
    """On an ideal bus each cycle a load's local write is denied costs exactly one cycle, and
    the load_spad/load_acc bit counts those cycles."""
    cfg = CONFIGS[name]
    L = local_row_bytes(cfg, mem)
    t = Transfer(0x1000, 0, 16 * L, 1, 0, 0, mem)
    ((_, free),) = run_and_check(cfg, Environment(cfg, seed=9), [(Opcode.DMA_LOAD, t)])
    env = Environment(cfg, seed=9, deny=0.3)
    ((_, denied),) = run_and_check(cfg, env, [(Opcode.DMA_LOAD, t)])
    bit = "load_acc" if mem == LocalMem.ACC else "load_spad"
    assert env.stall_counts[bit] == env.denied_writes > 0
    assert denied == free + env.stall_counts[bit]


# -- any byte address and length -----------------------------------------------------------------

def odd_transfers(cfg, mem):
    """Rows at every byte lane of a beat, lengths around the chunk, the beat and the local row
    (1 byte, partial last local rows), odd strides, rows crossing 4 KiB at odd addresses."""
    A = cfg.axi_data_bytes
    L = local_row_bytes(cfg, mem)
    G = min(L, A)
    lengths = sorted({1, G - 1, G + 1, L - 1, L + 1, A + 1, 2 * L + 3, 3 * A + 5, 5 * L - 1})
    out = []
    for i, n in enumerate(x for x in lengths if x > 0):
        lane = (3 * i + 1) % A                         # every lane comes up, 0 included
        lrows = -(-n // L)
        out.append(Transfer(0x1000 + 64 * A * i + lane, n + (2 * i + 1) % 7, n, 3, 8 * i,
                            lrows + i % 2, mem))
    out += [
        Transfer(PAGE_BYTES * 3 - 3, 0, 7, 1, 2, 1, mem),                     # 3 | 4 bytes
        Transfer(PAGE_BYTES * 5 - 5 * A - 1, 0, 10 * A + 3, 1, 40, 1, mem),   # odd, crosses
        Transfer(PAGE_BYTES * 7 - 1, PAGE_BYTES + 1, 2, 3, 60, 1, mem),      # 1 | 1 byte
    ]
    return out


@pytest.mark.parametrize("name", CONFIGS)
def test_odd_addresses_and_lengths(name):
    """Any byte address, stride and length, loads and stores, both memories, held to the byte:
    DRAM and both local memories equal the naive model everywhere (a load zero-fills a partial
    last local row and writes no other row; a store strobes every byte of its rows exactly once
    and nothing else), and the bursts are the fewest that the 4 KiB and burst-length rules
    allow."""
    cfg = CONFIGS[name]
    jobs = []
    for mem in LocalMem:
        for t in odd_transfers(cfg, mem):
            jobs += [(Opcode.DMA_LOAD, t), (Opcode.DMA_STORE, replace(t, local_row=t.local_row
                                                                      + 1))]
    env = Environment(cfg, seed=9)
    results = run_and_check(cfg, env, jobs)
    assert all(err == ErrorCode.NONE for err, _ in results)


@pytest.mark.parametrize("stall", [0.0, 0.4], ids=["nostall", "stall"])
@pytest.mark.parametrize("name", ["default", "4x4", "bus32", "bus128"])
def test_random_odd_transfers(name, stall):
    """Random transfers of any byte address, stride and length, with and without bus stalls
    and denied local writes."""
    cfg = CONFIGS[name]
    jobs = random_jobs(cfg, random.Random(f"odd{name}{stall}"), 14, odd=True)
    env = Environment(cfg, seed=len(jobs) + 1, stall=stall, r_latency=2 if stall else 0,
                      deny=0.3 if stall else 0.0)
    run_and_check(cfg, env, jobs)


@pytest.mark.parametrize("max_burst", [16, 256])
def test_burst_length_limit(max_burst):
    """``dma_max_burst_beats``: long rows (aligned and odd) are cut into bursts of exactly that
    many beats where no 4 KiB boundary comes first, on both channels."""
    cfg = NPUConfig(dma_max_burst_beats=max_burst, dram_bytes=1 << 20)
    A = cfg.axi_data_bytes
    page_beats = PAGE_BYTES // A
    rows = [Transfer(PAGE_BYTES * 2, 0, PAGE_BYTES, 1, 0, 0, LocalMem.SPAD),
            Transfer(PAGE_BYTES * 4 + 3, 0, 2 * PAGE_BYTES - 7, 1, 0, 0, LocalMem.ACC)]
    env = Environment(cfg, seed=10, stall=0.1)
    jobs = [(op, t) for t in rows for op in (Opcode.DMA_LOAD, Opcode.DMA_STORE)]
    run_and_check(cfg, env, jobs)
    for log in (env.ars, env.aws):
        lengths = [n + 1 for _, n in log]
        assert max(lengths) == min(max_burst, page_beats)
        # the page-aligned row: nothing but full bursts
        first = lengths[:page_beats // min(max_burst, page_beats)]
        assert first == [min(max_burst, page_beats)] * len(first)
        assert sum(lengths) == page_beats + (2 * PAGE_BYTES - 7 + 3 + A - 1) // A


def test_rejects_bad_burst_limit():
    with pytest.raises(ValueError, match="dma_max_burst_beats"):
        NPUConfig(dma_max_burst_beats=257)
    with pytest.raises(ValueError, match="dma_max_burst_beats"):
        NPUConfig(dma_max_burst_beats=0)
