"""Components of the performance model against deliberately naive, cycle-by-cycle models of
the hardware they stand for: a queue's command store against the engine queue's RTL in
Amaranth's simulator, the DRAM read channel and the AR arbiter against a transliteration of
``cosim/tb/dram.sv`` and ``hw/bus/arbiter.py``, the DMA's chunk walk, burst split and store
buffer against per-cycle loops."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.config import NPUConfig
from hw.isa import ErrorCode, LocalMem
from sw.dram import DramTiming
from sw.perf import timing as T
from sw.perf.dma import StoreChannel
from sw.perf.events import ARBITRATE, EventQueue
from sw.perf.fifo import CommandFifo
from sw.perf.ledger import Ledger
from sw.perf.memory import CP, DMA, ReadChannel, WriteChannel
from sw.perf.ports import walk

# -- a queue's command store vs the engine queue's RTL -----------------------------------------


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
def test_store_timing_matches_the_engine_queue(depth):
    """:class:`CommandFifo` against :class:`hw.cmdproc.EngineQueue` (one queue, an engine that
    retires every cycle) in Amaranth's simulator: room, head and data cycle by cycle under
    random writes and takes, and the notices of a new head and of room again."""
    from hw.isa import Opcode, encode
    from tests.support.sem_harness import QueueWithSems

    rng = np.random.default_rng(depth)
    n = 400
    want_w = rng.random(n) < 0.6
    want_r = rng.random(n) < 0.45
    dut = QueueWithSems(NPUConfig(n_queues=1, cmd_fifo_depth=depth), in_flight=2,
                        engine="matrix")
    heads, spaces = set(), set()
    model = CommandFifo(depth, heads.add, spaces.add)
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    seen = {"w": 0, "r": 0}
    prev_w_rdy = [True]

    def command(token):
        return int.from_bytes(encode({"header": {"opcode": Opcode.MATMUL},
                                      "body": {"matmul": {"a_row": token}}}), "little")

    async def tb(ctx):
        token = 0
        ctx.set(dut.engine.done, 1)        # the engine retires a command every cycle
        for c in range(n):
            w_rdy, r_rdy = ctx.get(dut.i[0].ready), ctx.get(dut.engine.cmd.valid)
            assert w_rdy == model.w_rdy(c), f"room in cycle {c}"
            assert r_rdy == (model.head(c) is not None), f"head in cycle {c}"
            do_r = bool(want_r[c] and r_rdy)
            do_w = bool(want_w[c] and w_rdy)
            ctx.set(dut.engine.cmd.ready, do_r)
            ctx.set(dut.i[0].valid, do_w)
            ctx.set(dut.i[0].payload.as_value(), command(token))
            if r_rdy:      # the engine was told when this head became readable
                assert model.head(c).avail in heads
            if w_rdy and not prev_w_rdy[0]:   # and the loader when there was room again
                assert c in spaces, f"no room notice for cycle {c}"
            prev_w_rdy[0] = w_rdy
            if do_r:
                got = ctx.get(dut.engine.cmd.payload.body.matmul.a_row)
                assert got == model.take(c).cmd
                seen["r"] += 1
            if do_w:
                model.write(c, token)
                token += 1
                seen["w"] += 1
            await ctx.tick()
    sim.add_testbench(tb)
    sim.run()
    assert seen["w"] > 50 and seen["r"] > 50


def test_store_latency():
    fifo = CommandFifo(2, lambda c: None, lambda c: None)
    fifo.write(10, "a")
    assert fifo.head(10) is None and fifo.head(11).cmd == "a"     # the head a cycle later
    assert fifo.w_rdy(11)                                          # room for 2
    fifo.write(11, "b")
    assert not fifo.w_rdy(12)
    fifo.take(12)
    assert not fifo.w_rdy(12) and fifo.w_rdy(13) and fifo.head(13).cmd == "b"
    assert T.fifo_write_to_head(2) == 1 and T.fifo_write_to_head(1) == 1


# -- the DMA's chunk walk against a port ------------------------------------------------------

def naive_walk(x, n, period, phase, busy_cycles):
    times, holds = [], 0
    for i in range(n):
        if (phase + i) % period == period - 1:
            while x in busy_cycles:
                x += 1
                holds += 1
        times.append(x)
        x += 1
    return times, holds


@pytest.mark.parametrize("seed", range(6))
def test_walk_matches_a_cycle_by_cycle_walk(seed):
    rng = np.random.default_rng(seed)
    for _ in range(40):
        spans, t = [], int(rng.integers(0, 5))
        for _ in range(int(rng.integers(0, 6))):
            a = t + int(rng.integers(1, 12))
            b = a + int(rng.integers(1, 9))
            spans.append((a, b))
            t = b
        busy = {c for a, b in spans for c in range(a, b)}
        n = int(rng.integers(1, 60))
        period = int(rng.choice([1, 2, 4]))
        phase = int(rng.integers(0, period))
        x = int(rng.integers(0, 8))
        want, want_holds = naive_walk(x, n, period, phase, busy)
        targets = tuple(sorted({0, n - 1, int(rng.integers(0, n))}))
        got, holds = walk(x, n, period, phase, spans, targets)
        assert got == [want[i] for i in targets]
        assert sum(b - a for a, b in holds) == want_holds


# -- AXI bursts ---------------------------------------------------------------------------------

def naive_bursts(beat, addr, stride, row_bytes, n_rows):
    out = []
    for r in range(n_rows):
        a = addr + r * stride
        first = a - a % beat
        beats = (a % beat + row_bytes + beat - 1) // beat
        cur = []
        for j in range(beats):
            cur.append(first + j * beat)
            nxt = first + (j + 1) * beat
            if len(cur) == 256 or nxt % 4096 == 0 or j == beats - 1:
                out.append((r, cur[0], len(cur)))
                cur = []
    return out


@pytest.mark.parametrize("bus_bits", [32, 64, 128])
def test_bursts_split_at_256_beats_and_4k_and_never_merge_rows(bus_bits):
    cfg = NPUConfig(axi_data_bits=bus_bits)
    beat = cfg.axi_data_bytes
    cases = [(0, 0, 64, 1), (4096 - 40, 8, 80, 3), (8, 4096 * 3, 4096 * 2 + 24, 2),
             (100 * beat, 12 * beat, 300 * beat, 2), (4, 0, 4, 5), (4092, 4, 8, 1)]
    for addr, stride, row_bytes, n_rows in cases:
        got = T.dma_bursts(cfg, addr, stride, row_bytes, n_rows)
        want = naive_bursts(beat, addr, stride, row_bytes, n_rows)
        assert [(b.row, b.addr, b.beats) for b in got] == want


# -- the DRAM read channel and the AR arbiter vs dram.sv -------------------------------------------

class _Consumer:
    """A reader that takes every beat (the command processor) or one that cannot take a beat
    in its busy cycles (a DMA chunk that completes a local row)."""

    def __init__(self, busy_spans=()):
        self.busy = list(busy_spans)
        self.done = []

    def consume(self, served):
        times, _ = walk(served.v0, served.beats, 1, 0, self.busy,
                        (served.beats - 1,) if served.beats == 1 else
                        (served.beats - 2, served.beats - 1))
        if served.beats == 1:
            return served.v0, times[0]
        return times[0] + 1, times[1]

    def burst_done(self, served):
        self.done.append(served)


def naive_dram(requests, busy, n_cycles):
    """Cycle-by-cycle transliteration of dram.sv's read channel behind the round-robin AR
    arbiter. ``requests``: per manager a list of ``(earliest cycle, beats)`` issued in order,
    each after the previous one's handshake; ``busy[m]``: cycles manager ``m`` holds a beat.
    Returns per burst ``(mgr, accept, v0, v_last, c_last)`` in DRAM order."""
    pend = {m: list(reqs) for m, reqs in requests.items()}
    nxt_from = {m: 0 for m in requests}
    ar_last = 0
    queue = []                       # accepted, not loaded: [burst]
    bursts = []
    r_busy = rvalid = False
    cur = None                       # burst being output
    beat = 0
    vis = None                       # (burst, beat index) visible
    for c in range(n_cycles):
        # combinational: AR arbitration, R handshake
        valid = [m for m in (0, 1) if pend.get(m) and max(pend[m][0][0], nxt_from[m]) <= c]
        grant = None
        if valid:
            grant = valid[0] if len(valid) == 1 else (ar_last + 1) % 2
        take = rvalid and c not in busy[vis[0]["mgr"]]
        if take:
            b, j = vis
            if j == b["beats"] - 1:
                b["c_last"] = c
        # edge at the end of cycle c
        if grant is not None:
            _, beats = pend[grant].pop(0)
            b = {"mgr": grant, "accept": c, "beats": beats, "visible_from": c + 1}
            queue.append(b)
            bursts.append(b)
            ar_last = grant
            nxt_from[grant] = c + 1
        n_rvalid, n_vis, n_busy = rvalid, vis, r_busy
        if not rvalid or take:
            if r_busy:
                n_rvalid, n_vis = True, (cur, beat)
                if beat == 0:
                    cur["v0"] = c + 1
                if beat == cur["beats"] - 1:
                    cur["v_last"] = c + 1
                    n_busy = False
                beat += 1
            else:
                n_rvalid = False
        ready_q = [b for b in queue if b["visible_from"] <= c]
        if not r_busy and ready_q:
            cur = ready_q[0]
            queue.remove(cur)
            n_busy, beat = True, 0
        rvalid, vis, r_busy = n_rvalid, n_vis, n_busy
    return [(b["mgr"], b["accept"], b["v0"], b["v_last"], b["c_last"]) for b in bursts]


@pytest.mark.parametrize("seed", range(8))
def test_read_channel_matches_dram_sv(seed):
    rng = np.random.default_rng(seed)
    requests = {m: [(int(rng.integers(0, 40)) + 6 * i, int(rng.integers(1, 9)))
                    for i in range(int(rng.integers(3, 9)))] for m in (DMA, CP)}
    spans = []
    t = 0
    for _ in range(6):
        a = t + int(rng.integers(2, 20))
        spans.append((a, a + int(rng.integers(1, 6))))
        t = spans[-1][1]
    busy = {DMA: {c for a, b in spans for c in range(a, b)}, CP: set()}
    want = naive_dram(requests, busy, 600)

    eq = EventQueue()
    rc = ReadChannel(eq, DramTiming())
    owners = {DMA: _Consumer(spans), CP: _Consumer()}
    got = []
    queues = {m: list(r) for m, r in requests.items()}

    def issue(m, after):
        if queues[m]:
            start, beats = queues[m].pop(0)
            rc.request(m, max(start, after), beats, owners[m], None,
                       lambda c, s, m=m: (got.append(s), issue(m, c + 1)))
    for m in (DMA, CP):
        issue(m, 0)
    eq.run_through(700, ARBITRATE)
    assert [(s.mgr, s.accept, s.v0, s.v_last, s.c_last) for s in got] == want


# -- the DMA store channel: W buffer and write channel vs a per-cycle model -----------------

class _Queue:
    def __init__(self):
        self.done = None

    def set_done(self, done):
        self.done = done


def naive_store(t, beats_chunks, bursts):
    """Per-cycle DMA store (``hw.dma._StoreMover``) on an otherwise idle write channel and the
    ideal DRAM: local reads of one chunk per cycle from ``t + 3`` while the 4-deep W buffer
    holds at most 2 beats; a beat is in the buffer the cycle after the read of its last
    chunk; burst ``k``'s AW at ``t + 4`` for the first, else 2 cycles after the previous
    WLAST; its beats in W_DATA from AW + 1. Returns the W handshake cycles and ``done``."""
    chunks = [k for k, n in enumerate(beats_chunks) for _ in range(n)]
    first_of = np.cumsum([0] + [b for b in bursts])
    W = [None] * len(beats_chunks)
    V = [None] * len(beats_chunks)
    in_buffer = []           # (beat, readable from)
    i = 0                    # next chunk to read
    burst, aw = 0, t + 4
    w_next = 0               # next beat to send
    c = t + 3
    last_w = None
    while w_next < len(beats_chunks):
        level = sum(1 for _, f in in_buffer if f <= c)
        if i < len(chunks) and level <= 2:
            k = chunks[i]
            if i == len(chunks) - 1 or chunks[i + 1] != k:
                in_buffer.append((k, c + 2))
                V[k] = c + 2
            i += 1
        head = in_buffer[0] if in_buffer else None
        in_wdata = aw is not None and c >= aw + 1 and first_of[burst] <= w_next
        if head and head[1] <= c and in_wdata:
            W[head[0]] = c
            in_buffer.pop(0)
            w_next += 1
            if w_next == first_of[burst + 1]:
                last_w = c
                burst += 1
                aw = c + 2 if burst < len(bursts) else None
        c += 1
    return V, W, last_w + 1 + T.DMA_DONE_AFTER_LAST


@pytest.mark.parametrize("cfg, mem, addr, stride, row_bytes, n_rows", [
    (NPUConfig(), LocalMem.SPAD, 0, 8, 8, 6),
    (NPUConfig(), LocalMem.SPAD, 4096 - 24, 0, 64, 1),
    (NPUConfig(), LocalMem.SPAD, 0, 0, 300 * 8, 1),
    (NPUConfig(), LocalMem.ACC, 0, 64, 32, 3),
    (NPUConfig(rows=4, cols=4), LocalMem.SPAD, 4, 12, 8, 5),
    (NPUConfig(rows=4, cols=4, axi_data_bits=128), LocalMem.SPAD, 4, 0, 52, 2),
    # any byte address and length: flush slots, partial strobes
    (NPUConfig(), LocalMem.SPAD, 5, 11, 11, 4),
    (NPUConfig(rows=4, cols=4), LocalMem.SPAD, 7, 13, 6, 5),
    (NPUConfig(rows=4, cols=4, axi_data_bits=128), LocalMem.ACC, 4096 - 19, 0, 45, 1),
])
def test_store_beats_match_a_per_cycle_store(cfg, mem, addr, stride, row_bytes, n_rows):
    from types import SimpleNamespace
    eq = EventQueue()
    wc = WriteChannel(eq, DramTiming())
    st = StoreChannel(cfg, eq, wc, Ledger(), lambda q: (0, 1 << 32))
    st.queue = q = _Queue()
    body = SimpleNamespace(dram_addr=addr, dram_stride=stride, row_bytes=row_bytes,
                           n_rows=n_rows, local_row=0, local_stride=1, mem=mem.value)
    cmd = SimpleNamespace(body=body, queue=0)
    t = 100
    jobs = []
    orig_item = st.ledger.item
    st.ledger.item = lambda it: (jobs.append(it), orig_item(it))
    st.start(cmd, t, ErrorCode.NONE)
    eq.run_through(10_000, ARBITRATE)
    job = jobs[0]
    assert sum(n for _, n in job.beats) == n_rows * row_bytes     # strobed bytes
    want_v, want_w, want_done = naive_store(t, [n for n, _ in job.beats],
                                            [b.beats for b in job.bursts])
    assert want_v == job.V            # the W buffer's fill (the read side's throttling)
    assert want_w == job.W
    assert q.done == want_done


# -- the DMA load channel: bursts, chunks and holds vs a per-cycle model ------------------------

def naive_load(t, bursts, tails, needs, busy, outstanding):
    """Per-cycle DMA load (``hw.dma.LoadMover``) alone on the ideal DRAM (dram.sv): ARs from
    ``t + 3``, one per cycle while fewer than ``outstanding`` bursts are in flight; beats as
    dram.sv gives them; one step per cycle, a step that completes a local row held while the
    port is ``busy``; the beat is taken with its last step; after a burst's last beat its
    ``tails`` steps (a flush word) run with no beat, before the next burst's first step.
    ``bursts``: per burst its steps per beat; ``needs``: per burst the set of its step
    indices that need the port. Returns per burst ``(accept, v0, c_last)`` and ``done``."""
    n = len(bursts)
    accept, v0, c_last = [None] * n, [None] * n, [None] * n
    nxt, inflight, queue = 0, 0, []
    r_busy, rvalid, beat, cur, cur_vis = False, False, 0, None, None
    chunk = 0                       # steps taken of the visible beat
    idx = [0] * n                   # step index within the burst
    tail_left, tail_b, last_step = 0, None, None
    c = t
    while c_last[-1] is None or tail_left:
        ar = c >= t + 3 and nxt < n and inflight < outstanding
        take = False
        if tail_left:
            if not (idx[tail_b] in needs[tail_b] and c in busy):
                idx[tail_b] += 1
                tail_left -= 1
                last_step = c
        elif rvalid:
            b, j = cur_vis
            if not (idx[b] in needs[b] and c in busy):
                idx[b] += 1
                chunk += 1
                last_step = c
                if chunk == bursts[b][j]:
                    take, chunk = True, 0
                    if j == len(bursts[b]) - 1:
                        c_last[b] = c
                        tail_left, tail_b = tails[b], b
        # edge
        if ar:
            accept[nxt] = c
            queue.append((nxt, c + 1))
            nxt += 1
            inflight += 1
        if take and cur_vis[1] == len(bursts[cur_vis[0]]) - 1:
            inflight -= 1
        n_rvalid, n_vis, n_busy = rvalid, (cur_vis if rvalid else None), r_busy
        if not rvalid or take:
            if r_busy:
                n_rvalid, n_vis = True, (cur, beat)
                if beat == 0:
                    v0[cur] = c + 1
                beat += 1
                if beat == len(bursts[cur]):
                    n_busy = False
            else:
                n_rvalid = False
        ready = [q for q in queue if q[1] <= c]
        if not r_busy and ready:
            cur = ready[0][0]
            queue.remove(ready[0])
            n_busy, beat = True, 0
        rvalid, cur_vis, r_busy = n_rvalid, n_vis, n_busy
        c += 1
    return list(zip(accept, v0, c_last, strict=True)), last_step + T.DMA_DONE_AFTER_LAST


def step_needs(burst, period):
    """Step indices of a burst whose chunk completes a local row: every ``period``-th chunk of
    the row and its last; the prime (a shifted row's first step) moves no chunk."""
    row = burst.layout
    out = set()
    for i in range(burst.steps + burst.tail):
        c = burst.first_chunk + i - int(burst.prime)
        if c >= burst.first_chunk and ((c + 1) % period == 0 or c == row.chunks - 1):
            out.add(i)
    return out


@pytest.mark.parametrize("cfg, mem, addr, stride, row_bytes, n_rows", [
    (NPUConfig(), LocalMem.SPAD, 0, 8, 8, 9),
    (NPUConfig(), LocalMem.ACC, 4096 - 64, 0, 6 * 32, 1),
    (NPUConfig(), LocalMem.ACC, 4096 - 40, 0, 5 * 32, 1),            # crosses 4 KiB mid-row
    (NPUConfig(), LocalMem.ACC, 32, 64, 96, 6),
    (NPUConfig(rows=4, cols=4), LocalMem.SPAD, 4, 12, 8, 5),         # rows start mid-beat
    (NPUConfig(rows=4, cols=4), LocalMem.SPAD, 4, 16, 12, 7),        # first beat 1 chunk, last 2
    (NPUConfig(rows=4, cols=4), LocalMem.SPAD, 4, 0, 4 * 300, 1),
    (NPUConfig(rows=4, cols=4, axi_data_bits=128), LocalMem.SPAD, 12, 20, 24, 4),
    (NPUConfig(axi_data_bits=128), LocalMem.SPAD, 8, 40, 24, 6),
    (NPUConfig(axi_data_bits=128, dma_outstanding=4), LocalMem.ACC, 0, 96, 64, 5),
    # any byte address and length: primes, flush words, partial last chunks and local rows
    (NPUConfig(), LocalMem.SPAD, 3, 13, 11, 6),
    (NPUConfig(), LocalMem.ACC, 4096 - 37, 77, 70, 4),
    (NPUConfig(rows=4, cols=4), LocalMem.SPAD, 5, 9, 7, 8),
    (NPUConfig(rows=4, cols=4), LocalMem.ACC, 1, 0, 1, 3),
    (NPUConfig(axi_data_bits=128, dma_max_burst_beats=4), LocalMem.ACC, 9, 200, 150, 3),
])
@pytest.mark.parametrize("busy_port", [False, True])
def test_load_bursts_match_a_per_cycle_load(cfg, mem, addr, stride, row_bytes, n_rows,
                                            busy_port):
    from types import SimpleNamespace

    from sw.perf.dma import LoadChannel
    from sw.perf.ports import BusyList
    eq = EventQueue()
    rc = ReadChannel(eq, DramTiming())
    port = BusyList(lambda: eq.now)
    spans = [(104 + 5 * i, 105 + 5 * i + i % 3) for i in range(120)] if busy_port else []
    for a, b in spans:
        port.add(a, b)
    ld = LoadChannel(cfg, eq, rc, Ledger(), {LocalMem.SPAD: [port], LocalMem.ACC: [port]},
                     lambda q: (0, 1 << 32))
    ld.queue = q = _Queue()
    body = SimpleNamespace(dram_addr=addr, dram_stride=stride, row_bytes=row_bytes,
                           n_rows=n_rows, local_row=0, local_stride=1, mem=mem.value)
    t = 100
    ld.start(SimpleNamespace(body=body, queue=0), t, ErrorCode.NONE)
    job = ld.job
    eq.run_through(20_000, ARBITRATE)
    served = job.granted
    assert bool(sum(len(h) for h in job.holds.values())) == busy_port
    local = cfg.acc_row_bytes if mem == LocalMem.ACC else cfg.spad_row_bytes
    period = local // min(local, cfg.axi_data_bytes)        # chunks per local row
    want, want_done = naive_load(t, [b.steps_per_beat() for b in job.bursts],
                                 [b.tail for b in job.bursts],
                                 [step_needs(b, period) for b in job.bursts],
                                 {c for a, b in spans for c in range(a, b)},
                                 cfg.dma_outstanding)
    assert [(s.accept, s.v0, s.c_last) for s in served] == want
    assert q.done == want_done


@pytest.mark.parametrize("cfg", [NPUConfig(), NPUConfig(rows=4, cols=4),
                                 NPUConfig(axi_data_bits=128)])
def test_load_plans_are_kept_per_transfer_and_memory(cfg):
    """The load channel keeps each transfer's bursts and their shapes (its plan) per command:
    the same DRAM rows loaded into the scratchpad, then into the accumulator (other chunk
    sizes and local-row periods), then into the scratchpad again, each matches the per-cycle
    load of its own memory (busy port spans make the local-row periods matter)."""
    from types import SimpleNamespace

    from sw.perf.dma import LoadChannel
    from sw.perf.ports import BusyList
    eq = EventQueue()
    rc = ReadChannel(eq, DramTiming())
    port = BusyList(lambda: eq.now)
    ld = LoadChannel(cfg, eq, rc, Ledger(), {LocalMem.SPAD: [port], LocalMem.ACC: [port]},
                     lambda q: (0, 1 << 32))
    ld.queue = q = _Queue()
    t = 100
    for mem in (LocalMem.SPAD, LocalMem.ACC, LocalMem.SPAD):
        spans = [(t + 4 + 5 * i, t + 5 + 5 * i + i % 3) for i in range(60)]
        for a, b in spans:
            port.add(a, b)
        body = SimpleNamespace(dram_addr=5, dram_stride=200, row_bytes=70, n_rows=3,
                               local_row=0, local_stride=8, mem=mem.value)
        ld.start(SimpleNamespace(body=body, queue=0), t, ErrorCode.NONE)
        job = ld.job
        eq.run_through(t + 5000, ARBITRATE)
        local = cfg.acc_row_bytes if mem == LocalMem.ACC else cfg.spad_row_bytes
        period = local // min(local, cfg.axi_data_bytes)
        want, want_done = naive_load(t, [b.steps_per_beat() for b in job.bursts],
                                     [b.tail for b in job.bursts],
                                     [step_needs(b, period) for b in job.bursts],
                                     {c for a, b in spans for c in range(a, b)},
                                     cfg.dma_outstanding)
        assert [(s.accept, s.v0, s.c_last) for s in job.granted] == want, mem
        assert q.done == want_done
        t = eq.now + 10


def naive_store_stalls(t, beats_chunks, bursts, b_after, outstanding):
    """Per-cycle DMA store with a write-response latency ``b_after`` (dram.sv: B due that many
    cycles after the last W beat, one turn cycle before the next AW) and at most
    ``outstanding`` bursts awaiting B; counts ``stall.store.dram_write`` by its definition
    (``DMA.stall``): AWVALID & ~AWREADY, or WVALID & ~WREADY, or every beat sent with B
    responses outstanding and no BVALID. Returns ``(done, stall cycles)``."""
    chunks = [k for k, n in enumerate(beats_chunks) for _ in range(n)]
    first_of = np.cumsum([0] + list(bursts))
    in_buffer, i, w_next = [], 0, 0
    burst_aw, aw_hs, b_due, b_done = 0, [], [], 0       # next AW, AW cycles, B cycles
    granted_until = None            # the write channels are the DMA's (W_DATA) from here
    idle_from = t + 4               # first cycle the DRAM takes an AW (W_IDLE)
    arb_free, decided = t, None     # the arbiter grants in the cycle after it decides
    stall, c, done = 0, t + 1, None
    last_read = None
    while done is None:
        level = sum(1 for _, f in in_buffer if f <= c)
        read = i < len(chunks) and level <= 2 and c >= t + 3
        in_flight = len(aw_hs) - sum(1 for b in b_due if b < c)
        aw_valid = c >= t + 3 and burst_aw < len(bursts) and in_flight < outstanding and (
            not aw_hs or c > aw_hs[-1])
        if aw_valid and decided is None and c >= arb_free:
            decided = c
        aw_ready = (aw_valid and decided is not None and c > decided and c >= idle_from
                    and granted_until is None)
        head = in_buffer[0] if in_buffer and in_buffer[0][1] <= c else None
        cur = len(aw_hs) - 1
        w_ready = (granted_until is not None and head is not None
                   and first_of[cur] <= w_next < first_of[cur + 1])
        all_sent = i == len(chunks) and not in_buffer and (last_read is None or c > last_read + 1)
        b_now = c in b_due
        stall += ((aw_valid and not aw_ready) or (head is not None and not w_ready)
                  or (all_sent and in_flight > 0 and not b_now))
        if read:
            k = chunks[i]
            if i == len(chunks) - 1 or chunks[i + 1] != k:
                in_buffer.append((k, c + 2))
            i += 1
            last_read = c
        if aw_ready:
            aw_hs.append(c)
            burst_aw += 1
            granted_until = c
            decided = None
        if w_ready:
            in_buffer.pop(0)
            w_next += 1
            if w_next == first_of[cur + 1]:
                b_due.append(c + b_after)
                granted_until = None
                idle_from = c + 2           # W_TURN, then W_IDLE
                arb_free = c + 1            # released at WLAST
        if b_now:
            b_done += 1
            if b_done == len(bursts):
                done = c + T.DMA_DONE_AFTER_LAST
        c += 1
    return done, stall


@pytest.mark.parametrize("cfg, addr, stride, row_bytes, n_rows", [
    (NPUConfig(), 0, 8, 8, 9),
    (NPUConfig(dma_outstanding=4), 0, 24, 16, 7),
    (NPUConfig(), 0, 0, 300 * 8, 1),
    (NPUConfig(rows=4, cols=4, axi_data_bits=128), 4, 0, 52, 3),
    (NPUConfig(rows=4, cols=4), 3, 10, 9, 4),                  # flush slots
])
@pytest.mark.parametrize("b_after", [1, 5, 23])
def test_store_stall_counter_matches_a_per_cycle_store(cfg, addr, stride, row_bytes, n_rows,
                                                       b_after):
    from types import SimpleNamespace
    eq = EventQueue()
    wc = WriteChannel(eq, DramTiming(write_latency=b_after))
    led = Ledger()
    st = StoreChannel(cfg, eq, wc, led, lambda q: (0, 1 << 32))
    st.queue = q = _Queue()
    body = SimpleNamespace(dram_addr=addr, dram_stride=stride, row_bytes=row_bytes,
                           n_rows=n_rows, local_row=0, local_stride=1, mem=LocalMem.SPAD.value)
    jobs = []
    st.ledger.item = lambda it: (jobs.append(it), Ledger.item(led, it))
    t = 100
    st.start(SimpleNamespace(body=body, queue=0), t, ErrorCode.NONE)
    eq.run_through(20_000, ARBITRATE)
    job = jobs[0]
    done, stall = naive_store_stalls(t, [n for n, _ in job.beats], [b.beats for b in job.bursts],
                                     b_after, cfg.dma_outstanding)
    assert q.done == done
    assert led.snapshot(done + 5)["stall.store.dram_write"] == stall


def test_decoded_bodies_equal_the_layout_decode_for_every_opcode():
    """``sw.perf.decode.decode_command`` (bodies cached per bit pattern) gives every body
    field as :func:`hw.isa.decode` does, for each opcode with a body, the same body bits under
    different opcodes in turn (a cache keyed on the bits alone would hand one opcode's record
    to another) and again from the cache."""
    import enum

    from hw.isa import OPCODE_BODY, body_fields, decode
    from sw.perf.decode import decode_command
    rng = np.random.default_rng(5)
    for _ in range(20):
        body = rng.integers(0, 256, 24, dtype=np.uint8).tobytes()
        for op in [*OPCODE_BODY, *OPCODE_BODY]:
            raw = bytes([op.value, 0b11]) + rng.integers(0, 256, 6, dtype=np.uint8).tobytes() \
                + body
            got = decode_command(raw, 1, 7, 0x40)
            want = {k: v.value if isinstance(v, enum.Enum) else int(v)
                    for k, v in body_fields(decode(raw)).items()}
            assert {k: getattr(got.body, k) for k in want} == want, op
            assert (got.opcode, got.queue, got.index, got.slot_addr) == (op.value, 1, 7, 0x40)
