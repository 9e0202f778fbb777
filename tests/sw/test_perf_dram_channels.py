"""The performance model's DRAM channels under backpressure and a bandwidth limit, against a
naive per-cycle transcription of ``cosim/tb/dram.sv`` and the AXI arbiter (``hw.bus.arbiter``).

:func:`naive_memory` evaluates, cycle by cycle, the combinational signals of the two managers,
the arbiter and the DRAM model, then the registers at the edge -- the read queue, the beat
generator, the write FSM, the B queue, the token bucket and the per-channel stall decisions of
:func:`sw.dram.stall_draws`. The model's :class:`~sw.perf.memory.ReadChannel`,
:class:`~sw.perf.memory.WriteChannel` and :class:`~sw.perf.beats.BeatScheduler` run the same
requests event by event; every handshake (AR, each R beat's load and take, AW, each W beat, B)
must be in the same cycle.
"""

from itertools import islice
from types import SimpleNamespace

import numpy as np
import pytest

from hw.config import NPUConfig
from hw.isa import ErrorCode, LocalMem
from sw.dram import CHANNELS, DramTiming, stall_draws
from sw.perf import timing as T
from sw.perf.beats import BeatScheduler, TokenBucket
from sw.perf.dma import LoadChannel, StoreChannel
from sw.perf.draws import BLOCK, StallDraws
from sw.perf.events import ARBITRATE, DECIDE, EventQueue
from sw.perf.ledger import Ledger
from sw.perf.memory import CP, DMA, ReadChannel, WriteChannel
from sw.perf.ports import BusyList

BEAT = 8          # bus bytes


class _Queue:
    def __init__(self):
        self.done = None

    def set_done(self, done):
        self.done = done


# -- the per-cycle reference ---------------------------------------------------------------------

class FixedReader:
    """A read manager: bursts ``(earliest cycle, beats)``, each requested (ARVALID) from the
    cycle after the previous one's handshake; it takes a beat once it has been visible for
    ``per`` cycles (``per - 1`` cycles of work), never in a ``busy`` cycle."""

    def __init__(self, bursts, busy=(), per=1):
        self.pend = list(bursts)
        self.busy = set(busy)
        self.per = per
        self.start = 0

    def arvalid(self, c):
        return bool(self.pend) and c >= max(self.pend[0][0], self.start)

    def on_ar(self, c):
        self.start = c + 1
        return self.pend.pop(0)[1]

    def rready(self, c, visible):
        return c >= visible + self.per - 1 and c not in self.busy

    def on_r(self, c, last):
        pass

    def edge(self, c, rvalid, arready):
        pass

    def done(self):
        return not self.pend


class FixedWriter:
    """A write manager: bursts ``(earliest cycle, [cycle from which beat j is valid])``, AWVALID
    from the cycle after the previous AW handshake."""

    def __init__(self, bursts):
        self.pend = [(e, list(v)) for e, v in bursts]
        self.beats = []
        self.start = 0

    def awvalid(self, c):
        return bool(self.pend) and c >= max(self.pend[0][0], self.start)

    def on_aw(self, c):
        self.start = c + 1
        _, valid = self.pend.pop(0)
        self.beats += valid
        return len(valid)

    def wvalid(self, c):
        return bool(self.beats) and c >= self.beats[0]

    def on_w(self, c):
        self.beats.pop(0)

    def on_b(self, c):
        pass

    def edge(self, c, awready, wready, bvalid):
        pass

    def done(self):
        return not self.pend and not self.beats


class NaiveLoad:
    """The DMA load (``hw.dma.LoadMover``) as a read manager, cycle by cycle: ARs from ``t +
    3``, one per cycle while fewer than ``outstanding`` bursts are in flight; one step per
    cycle while RVALID (a chunk, or the prime of a shifted row), a step that completes a local
    row held while the port is ``busy``; a beat is taken with its last step; after a burst's
    last beat its flush steps (``tail``) go one per cycle without an R beat. Counts
    ``stall.load.dram_read`` and the local-port stall by their definitions (``LoadMover``).
    ``bursts``: per burst ``(steps per beat, tail steps, steps that complete a local row)``."""

    def __init__(self, t, bursts, busy, outstanding):
        self.t, self.bursts, self.busy = t, bursts, set(busy)
        self.outstanding = outstanding
        self.nxt = self.inflight = 0
        self.b = self.j = self.step = 0         # visible beat: burst, beat, steps taken
        self.idx = [0] * len(bursts)            # steps taken per burst
        self.tail = 0                           # flush steps left before the next burst
        self.dram_stall = self.local_stall = 0
        self.finish = None

    def arvalid(self, c):
        return c >= self.t + 3 and self.nxt < len(self.bursts) and self.inflight < self.outstanding

    def on_ar(self, c):
        self.nxt += 1
        self.inflight += 1
        return len(self.bursts[self.nxt - 1][0])

    def _held(self, c):
        return self.idx[self.b] in self.bursts[self.b][2] and c in self.busy

    def rready(self, c, visible):
        return (not self.tail and not self._held(c)
                and self.step + 1 == self.bursts[self.b][0][self.j])

    def edge(self, c, rvalid, arready):
        valid = rvalid or self.tail > 0
        hold = valid and self._held(c)
        self.local_stall += hold
        self.dram_stall += ((self.arvalid(c) and not arready)
                            or (self.inflight > 0 and not rvalid)) and not hold
        if self.tail and not hold:
            self.idx[self.b] += 1
            self.tail -= 1
            if not self.tail:
                self._next_burst(c)
        elif rvalid and not hold:
            self.idx[self.b] += 1
            self.step += 1

    def on_r(self, c, last):
        self.step = 0
        self.j += 1
        if last:
            self.inflight -= 1
            self.tail = self.bursts[self.b][1]
            if not self.tail:
                self._next_burst(c)

    def _next_burst(self, c):
        self.b, self.j = self.b + 1, 0
        if self.b == len(self.bursts):
            self.finish = c + T.DMA_DONE_AFTER_LAST

    def done(self):
        return self.finish is not None


def load_steps(burst):
    """``NaiveLoad``'s description of a :class:`hw.isa.timing.Burst`: its steps per beat, its
    flush steps and the steps whose chunk completes a local row (every ``L / G``-th chunk of
    the DRAM row and its last), from the row's chunks directly."""
    row = burst.layout
    per_beat = burst.steps_per_beat()
    skip = int(burst.prime)
    need = set()
    for i in range(skip, sum(per_beat) + burst.tail):
        chunk = burst.first_chunk + i - skip
        if (chunk + 1) % row.period == 0 or chunk == row.chunks - 1:
            need.add(i)
    return per_beat, burst.tail, need


class NaiveStore:
    """The DMA store (``hw.dma`` store mover) as a write manager, cycle by cycle: local reads of
    one chunk per cycle from ``t + 3`` while the 4-deep W buffer holds at most 2 beats, a beat
    in the buffer 2 cycles after the read of its last chunk; AWVALID from ``t + 3`` and the
    cycle after each AW handshake while fewer than ``outstanding`` bursts await B. Counts
    ``stall.store.dram_write`` by its definition."""

    def __init__(self, t, beats_chunks, bursts, outstanding):
        self.t, self.bursts, self.outstanding = t, list(bursts), outstanding
        self.chunks = [k for k, n in enumerate(beats_chunks) for _ in range(n)]
        self.in_buffer = []                     # (beat, in the buffer from)
        self.i = 0                              # next chunk to read
        self.last_read = None
        self.aw, self.b, self.V, self.W = [], [], [], []
        self.stall = 0
        self.finish = None

    def _in_flight(self, c):
        return len(self.aw) - sum(1 for b in self.b if b < c)

    def awvalid(self, c):
        return (c >= self.t + 3 and len(self.aw) < len(self.bursts)
                and self._in_flight(c) < self.outstanding)

    def on_aw(self, c):
        self.aw.append(c)
        return self.bursts[len(self.aw) - 1]

    def wvalid(self, c):
        return bool(self.in_buffer) and self.in_buffer[0][1] <= c

    def on_w(self, c):
        self.in_buffer.pop(0)
        self.W.append(c)

    def on_b(self, c):
        self.b.append(c)
        if len(self.b) == len(self.bursts):
            self.finish = c + T.DMA_DONE_AFTER_LAST

    def edge(self, c, awready, wready, bvalid):
        all_sent = (self.i == len(self.chunks) and not self.in_buffer
                    and (self.last_read is None or c > self.last_read + 1))
        self.stall += ((self.awvalid(c) and not awready) or (self.wvalid(c) and not wready)
                       or (all_sent and self._in_flight(c) > 0 and not bvalid))
        level = sum(1 for _, f in self.in_buffer if f <= c)
        if self.i < len(self.chunks) and level <= 2 and c >= self.t + 3:
            k = self.chunks[self.i]
            if self.i == len(self.chunks) - 1 or self.chunks[self.i + 1] != k:
                self.in_buffer.append((k, c + 2))
                self.V.append(c + 2)
            self.i += 1
            self.last_read = c

    def done(self):
        return self.finish is not None


def naive_memory(timing, managers, n_cycles, beat=8):
    """Per-cycle dram.sv behind the round-robin arbiter (``hw.bus.arbiter``).

    ``managers``: per manager index a ``(reader, writer)`` (either None) with the interfaces
    of :class:`FixedReader` and :class:`FixedWriter`. Returns per read burst ``(mgr, accept,
    [load edges], [take cycles])`` and per write burst ``(mgr, aw, [W cycles], b)``, in DRAM
    order.
    """
    draws = {ch: list(islice(stall_draws(timing, ch), n_cycles)) for ch in CHANNELS}
    num, den = timing.bw_fraction or (0, 1)
    beat_tok, cap = beat * den, beat * den + num
    tokens = cap
    rd_lat, wr_lat = timing.read_latency, timing.write_latency
    rd = {m: r for m, (r, _) in managers.items() if r is not None}
    wr = {m: w for m, (_, w) in managers.items() if w is not None}
    ar_locked, ar_held, ar_last = False, 0, 0
    w_busy, w_owner, aw_done, w_done, w_last_owner = False, 0, False, False, 0
    queue = []                              # read queue: (due, record)
    r_busy, r_cur, r_left, rvalid, vis = False, None, 0, False, None
    wstate, w_cur, w_left = "IDLE", None, 0
    bq = []                                 # B queue: (due, record); BREADY is always high
    r_out, w_out = [], []
    for c in range(n_cycles):
        st = {ch: draws[ch][c] for ch in CHANNELS}
        tok_ok = num == 0 or tokens >= beat_tok
        # -- combinational ----------------------------------------------------------------------
        arv = {m: r.arvalid(c) for m, r in rd.items()}
        pick = next((m for m in ((ar_last + 1) % 2, ar_last) if arv.get(m)), None)
        ar_sel = ar_held if ar_locked else pick
        arvalid = ar_sel is not None and arv.get(ar_sel, False)
        arready = len(queue) != 16 and not st["ar"]
        rready = rvalid and rd[vis[0]].rready(c, vis[2][-1] + 1)
        r_take = (not rvalid or rready) and r_busy and not st["r"] and tok_ok
        awv = {m: w.awvalid(c) for m, w in wr.items()}
        aw_pick = next((m for m in ((w_last_owner + 1) % 2, w_last_owner) if awv.get(m)), None)
        bus_awvalid = w_busy and awv.get(w_owner, False) and not aw_done
        awready = wstate == "IDLE" and len(bq) != 16 and not st["aw"]
        bus_wvalid = w_busy and not w_done and wr[w_owner].wvalid(c)
        wready = wstate == "W_DATA" and not st["w"] and tok_ok
        w_take = bus_wvalid and wready
        bvalid = bool(bq) and c >= bq[0][0] and not st["b"]
        w_last_fire = w_take and w_left == 0
        for m, r in rd.items():                          # the manager's view of its pins
            r.edge(c, rvalid and vis[0] == m, ar_sel == m and arready)
        for m, w in wr.items():
            own = w_busy and w_owner == m
            w.edge(c, own and awready and not aw_done, own and wready and not w_done,
                   bvalid and bq[0][1][0] == m)
        # -- edge -----------------------------------------------------------------------------
        tokens = min(cap, tokens + num - (int(r_take) + int(w_take)) * beat_tok)
        if bvalid:
            rec = bq.pop(0)[1]
            rec[3] = c
            wr[rec[0]].on_b(c)
        aw_fire = bus_awvalid and awready
        if wstate == "IDLE" and aw_fire:
            rec = [w_owner, c, [], None]
            w_out.append(rec)
            wstate, w_cur, w_left = "W_DATA", rec, wr[w_owner].on_aw(c) - 1
        elif wstate == "W_DATA" and w_take:
            wr[w_owner].on_w(c)
            w_cur[2].append(c)
            if w_left == 0:
                bq.append((c + wr_lat, w_cur))
                wstate = "TURN"
            w_left -= 1
        elif wstate == "TURN":
            wstate = "IDLE"
        if w_busy:
            aw_now, w_now = aw_done or aw_fire, w_done or w_last_fire
            if aw_now and w_now:
                w_busy, w_last_owner = False, w_owner
            else:
                aw_done, w_done = aw_now, w_now
        elif aw_pick is not None:
            w_busy, w_owner, aw_done, w_done = True, aw_pick, False, False
        if arvalid and arready:
            ar_locked, ar_last = False, ar_sel
            rec = [ar_sel, c, [], [], rd[ar_sel].on_ar(c)]
            r_out.append(rec)
            queue.append((c + rd_lat - 2, rec))
        elif arvalid:
            ar_locked, ar_held = True, ar_sel
        if rvalid and rready:
            vis[3].append(c)
            rd[vis[0]].on_r(c, len(vis[3]) == vis[4])
        fetch = not r_busy and queue and c >= queue[0][0]
        if not rvalid or rready:
            if r_take:
                rvalid, vis = True, r_cur
                r_cur[2].append(c)
                r_left -= 1
                if r_left < 0:
                    r_busy = False
            else:
                rvalid, vis = False, None
        if fetch:
            _, r_cur = queue.pop(0)
            r_busy, r_left = True, r_cur[4] - 1
        if not (queue or r_busy or rvalid or w_busy or wstate != "IDLE" or bq
                or not all(x.done() for x in (*rd.values(), *wr.values()))):
            break                                        # everything answered
    return ([(m, a, loads, takes) for m, a, loads, takes, _ in r_out],
            [(m, aw, ws, b) for m, aw, ws, b in w_out])


# -- the model, with test managers -----------------------------------------------------------------

class _Receiver:
    """The model of :class:`FixedReader`: takes a beat ``per - 1`` cycles after it is visible,
    at the first cycle outside its busy spans. With ``notice``, a span is announced to it
    (and the read channel retimes) only ``notice`` cycles before it starts."""

    def __init__(self, rc, spans=(), notice=None, per=1):
        self.rc = rc
        self.per = per
        self.known = set() if notice is not None else {c for a, b in spans for c in range(a, b)}

    def announce(self, a, b):
        self.known.update(range(a, b))
        live = [s for s in self.rc.bursts if not s.done and s.owner is self]
        if live:
            self.rc.reschedule(live[0], a)

    def _take(self, c):
        c += self.per - 1
        while c in self.known:
            c += 1
        return c

    def consume(self, served):
        c = served.v0 - 1
        v = None
        for _ in range(served.beats):
            v = c + 1
            c = self._take(v)
        return v, c

    def r_take(self, served, i, visible):
        return self._take(visible)

    def r_plain(self, served, i, visible):
        """The beat-timing fast path (``BeatScheduler`` runs of beats): with ``per == 1`` the
        beats visible before the next busy cycle are taken at once."""
        if self.per != 1 or visible in self.known:
            return i, 0
        later = [c for c in self.known if c > visible]
        return served.beats, min(later) if later else 1 << 62

    def r_plain_taken(self, served, i, j, last):
        assert last == served.takes[j - 1] and all(
            served.takes[k] == served.loads[k] + 1 for k in range(i, j))

    def burst_done(self, served):
        pass


class _Writer:
    """The model of :class:`FixedWriter`."""

    def __init__(self, wc, mgr, bursts):
        self.wc, self.mgr = wc, mgr
        self.bursts = list(bursts)
        self.k = 0
        self.grants = []

    def issue(self, after):
        if self.k < len(self.bursts):
            start, valid = self.bursts[self.k]
            self.wc.request(self.mgr, max(start, after), self, (self.k, valid), len(valid))
            self.k += 1

    def w_begin(self, grant):
        self.grants.append(grant)
        self.issue(grant.aw + 1)

    def w_valid(self, grant, i):
        return grant.tag[1][i]

    def w_taken(self, grant, i, cycle):
        pass

    def w_rewind(self, grant, i, t):
        pass

    def response(self, grant):
        pass


def _expand(s):
    """Per-beat loads and takes of a burst timed in closed form by :class:`_Receiver`."""
    loads, takes = [], []
    c = s.v0 - 1
    for _ in range(s.beats):
        loads.append(c)
        c = s.owner._take(c + 1)
        takes.append(c)
    return loads, takes


class _Model:
    """The model's channels with test managers, recording what the naive run records."""

    def __init__(self, timing, beat=8):
        self.eq = EventQueue()
        beats = BeatScheduler(self.eq, timing, beat)
        self.rc = ReadChannel(self.eq, timing, beats)
        self.wc = WriteChannel(self.eq, timing, beats)
        self.served = []
        self.writers = []

    def reader(self, m, bursts, owner):
        queue = list(bursts)

        def issue(after):
            if queue:
                start, n = queue.pop(0)
                self.rc.request(m, max(start, after), n, owner, None,
                                lambda c, s: (self.served.append(s), issue(c + 1)))
        issue(0)

    def writer(self, m, bursts):
        w = _Writer(self.wc, m, bursts)
        self.writers.append(w)
        w.issue(0)

    def run(self):
        self.eq.run_through(20_000, ARBITRATE)

    def records(self, served=None, grants=None):
        served = self.served if served is None else served
        r = [(s.mgr, s.accept, s.loads, s.takes) if s.loads is not None
             else (s.mgr, s.accept, *_expand(s)) for s in served]
        if grants is None:
            grants = sorted((g for w in self.writers for g in w.grants), key=lambda g: g.aw)
        return r, [(g.mgr, g.aw, g.ws, g.b) for g in grants]


def model_memory(timing, reads, writes, spans, notice, per=1):
    mod = _Model(timing)
    owners = {DMA: _Receiver(mod.rc, spans, notice, per), CP: _Receiver(mod.rc)}
    if notice is not None:
        for a, b in spans:
            mod.eq.at(a - notice, DECIDE, owners[DMA].announce, a, b)
    for m in reads:
        mod.reader(m, reads[m], owners[m])
    for m, bs in writes.items():
        mod.writer(m, bs)
    mod.run()
    return mod.records()


def naive_fixed(timing, reads, writes, spans, per=1):
    busy = {c for a, b in spans for c in range(a, b)}
    managers = {DMA: (FixedReader(reads[DMA], busy, per), FixedWriter(writes[DMA])),
                CP: (FixedReader(reads[CP]), FixedWriter(writes[CP]))}
    return naive_memory(timing, managers, 20_000)


def scenario(rng, n_reads=6, n_writes=4):
    reads = {m: [(int(rng.integers(0, 60)) + 9 * i, int(rng.integers(1, 9)))
                 for i in range(int(rng.integers(2, n_reads)))] for m in (DMA, CP)}
    writes = {}
    for m in (DMA, CP):
        bursts, t = [], 0
        for _ in range(int(rng.integers(1, n_writes))):
            t += int(rng.integers(0, 40))
            n = int(rng.integers(1, 6)) if m == DMA else 1
            valid = sorted(t + int(x) for x in rng.integers(0, 30, n))
            bursts.append((t, valid))
        writes[m] = bursts
    spans, t = [], 20
    for _ in range(8):
        a = t + int(rng.integers(2, 30))
        spans.append((a, a + int(rng.integers(1, 6))))
        t = spans[-1][1]
    return reads, writes, spans


TIMINGS = [
    "ideal",
    "bp50",
    "latency=7,wlatency=4,ar_stall=0.4,aw_stall=0.4,b_stall=0.5,seed=3",
    "r_stall=0.3,w_stall=0.6,seed=11",
    "bw=4,seed=5",
    "bw=2.5,latency=5",
    "bw=6,latency=20,wlatency=10,stall=0.25,seed=1",     # the jitter preset
    "bw=11,stall=0.3,seed=9",
    "bw=0.7,r_stall=0.2,wlatency=3,seed=2",
    "ddr",
]


@pytest.mark.parametrize("spec", TIMINGS)
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("notice, per", [(None, 1), (3, 3)])
def test_channels_match_a_per_cycle_dram_sv(spec, seed, notice, per):
    """Two managers reading and writing; the DMA's beats take ``per`` cycles and it may hold
    them (with ``notice``, its busy cycles become known only shortly before)."""
    timing = DramTiming.parse(spec)
    rng = np.random.default_rng(seed)
    reads, writes, spans = scenario(rng)
    want_r, want_w = naive_fixed(timing, reads, writes, spans, per)
    assert sum(len(v) for v in reads.values()) == len(want_r)      # the horizon was enough
    assert all(b is not None for *_, b in want_w)
    assert model_memory(timing, reads, writes, spans, notice, per) == (want_r, want_w)


@pytest.mark.parametrize("spec", ["latency=90,wlatency=70",
                                  "latency=90,wlatency=70,stall=0.3,bw=5"])
def test_channels_fill_the_read_queue_and_the_b_queue(spec):
    """More than 16 read bursts waiting for their latency (ARREADY falls) and more than 16
    write bursts awaiting B (AWREADY falls)."""
    timing = DramTiming.parse(spec)
    reads = {DMA: [(0, 2)] * 14, CP: [(0, 1)] * 10}
    writes = {DMA: [(0, [0])] * 24, CP: [(5, [5])] * 3}
    want_r, want_w = naive_fixed(timing, reads, writes, [])
    accepts = sorted(a for _, a, _, _ in want_r)
    assert accepts[16] - accepts[15] > 10                 # the 17th waited for room
    bs = sorted(b for *_, b in want_w)
    aws = sorted(aw for _, aw, _, _ in want_w)
    assert aws[16] > bs[0]                                # the 17th AW waited for a B
    assert model_memory(timing, reads, writes, [], None) == (want_r, want_w)


@pytest.mark.parametrize("spec", ["ar_stall=0.7,seed=4", "b_stall=0.8,seed=6", "stall=0.6,bw=3"])
def test_channels_under_heavy_address_and_response_backpressure(spec):
    """ARVALID waits while ARREADY is mostly low: the arbiter stays on the request it showed
    even when the other manager's comes meanwhile (the DMA has a backlog, the command
    processor's requests come now and then); B responses pile up behind a withheld BVALID (one
    per cycle, in order)."""
    timing = DramTiming.parse(spec)
    reads = {DMA: [(0, 1 + i % 3) for i in range(12)], CP: [(7 * i + 3, 1) for i in range(8)]}
    writes = {DMA: [(0, [0])] * 10, CP: [(4 * i, [4 * i]) for i in range(6)]}
    want = naive_fixed(timing, reads, writes, [])
    assert model_memory(timing, reads, writes, [], None) == want


def test_channels_overlap_reads_and_writes_under_a_shared_bandwidth_limit():
    """The bandwidth limit is one bucket for R and W: writes slow down reads (the scenarios
    above would pass with two separate buckets if R and W never overlapped)."""
    timing = DramTiming.parse("bw=4")
    reads = {DMA: [(0, 8), (0, 8), (0, 8)], CP: []}
    writes = {DMA: [(0, list(range(16)))], CP: []}
    alone = naive_fixed(timing, reads, {DMA: [], CP: []}, [])[0]
    both_r, both_w = naive_fixed(timing, reads, writes, [])
    assert both_r[-1][3][-1] > alone[-1][3][-1] + 8
    assert model_memory(timing, reads, writes, [], None) == (both_r, both_w)


# -- the DMA's load and store channels under backpressure, with competing traffic ------------------

def _body(addr, stride, row_bytes, n_rows, mem):
    return SimpleNamespace(dram_addr=addr, dram_stride=stride, row_bytes=row_bytes,
                           n_rows=n_rows, local_row=0, local_stride=1, mem=mem.value)


def _traffic(rng):
    """The command processor's fetches and fence writes around the DMA's transfer."""
    reads = [(int(x), 4) for x in np.sort(rng.integers(95, 260, 16))]
    writes = [(int(x), [int(x)]) for x in np.sort(rng.integers(95, 260, 4))]
    return reads, writes


LOADS = [
    (NPUConfig(), LocalMem.SPAD, 0, 8, 8, 9),
    (NPUConfig(), LocalMem.ACC, 32, 64, 96, 6),
    (NPUConfig(dma_outstanding=4), LocalMem.ACC, 4096 - 40, 0, 5 * 32, 1),
    (NPUConfig(rows=4, cols=4), LocalMem.SPAD, 4, 16, 12, 7),       # 2 chunks per beat
    (NPUConfig(rows=4, cols=4, axi_data_bits=128), LocalMem.SPAD, 0, 0, 64, 3),   # 4 per beat
    # any byte address and length: primes, flush words, partial last local rows
    (NPUConfig(), LocalMem.SPAD, 3, 13, 21, 5),                     # flush word every row
    (NPUConfig(), LocalMem.ACC, 4096 - 37, 70, 45, 3),              # across a 4 KiB page
    (NPUConfig(rows=4, cols=4), LocalMem.SPAD, 5, 11, 10, 6),       # shifted chunks per beat
    (NPUConfig(dma_outstanding=4), LocalMem.SPAD, 6, 9, 7, 4),      # one partial local row
]
DMA_TIMINGS = ["bp50", "bw=4,seed=5", "bw=6,latency=20,wlatency=10,stall=0.25,seed=1",
               "bw=2.5,w_stall=0.5,b_stall=0.4,seed=8"]
#: stores also without a bandwidth limit: W timed burst by burst (``Writer.w_run``)
STORE_TIMINGS = [*DMA_TIMINGS, "w_stall=0.5,aw_stall=0.3,seed=2", "latency=9,wlatency=6"]


@pytest.mark.parametrize("spec", DMA_TIMINGS)
@pytest.mark.parametrize("cfg, mem, addr, stride, row_bytes, n_rows", LOADS)
@pytest.mark.parametrize("notice", [None, 4, 1])
def test_dma_load_matches_a_per_cycle_load(spec, cfg, mem, addr, stride, row_bytes, n_rows,
                                           notice):
    """The DMA load's bursts, beats, holds, ``done`` and stall counters; a port write planned
    only ``notice`` cycles before it holds a beat retimes the beats in flight (with 1, dense
    port writes: a beat retimed while its earlier chunks were held by a write that is over)."""
    timing = DramTiming.parse(spec)
    rng = np.random.default_rng(n_rows)
    cp_reads, cp_writes = _traffic(rng)
    if notice == 1:
        spans = [(104 + 4 * i, 105 + 4 * i + i % 2) for i in range(70)]
    else:
        spans = [(104 + 7 * i, 105 + 7 * i + i % 3) for i in range(40)]
    t = 100
    mod = _Model(timing, cfg.axi_data_bytes)
    port = BusyList(lambda: mod.eq.now)
    led = Ledger()
    ld = LoadChannel(cfg, mod.eq, mod.rc, led, {LocalMem.SPAD: [port], LocalMem.ACC: [port]},
                     lambda q: (0, 1 << 32))
    ld.queue = q = _Queue()
    for a, b in spans:
        if notice:
            mod.eq.at(a - notice, DECIDE, port.add, a, b)
        else:
            port.add(a, b)
    ld.start(SimpleNamespace(body=_body(addr, stride, row_bytes, n_rows, mem), queue=0), t,
             ErrorCode.NONE)
    job = ld.job
    mod.reader(CP, cp_reads, _Receiver(mod.rc))
    mod.writer(CP, cp_writes)
    mod.run()

    beat = cfg.axi_data_bytes
    load = NaiveLoad(t, [load_steps(b) for b in job.bursts],
                     {c for a, b in spans for c in range(a, b)}, cfg.dma_outstanding)
    want = naive_memory(timing, {DMA: (load, None),
                                 CP: (FixedReader(cp_reads), FixedWriter(cp_writes))},
                        20_000, beat)
    served = sorted(job.granted + mod.served, key=lambda s: s.accept)
    assert mod.records(served=served) == want
    assert q.done == load.finish
    counts = led.snapshot(load.finish + 5)
    reason = "stall.load.acc" if mem == LocalMem.ACC else "stall.load.spad"
    assert (counts["stall.load.dram_read"], counts[reason]) == (load.dram_stall, load.local_stall)
    assert counts["bytes_read"] == sum(b.beats for b in job.bursts) * beat


STORES = [
    (NPUConfig(), 0, 8, 8, 9),
    (NPUConfig(dma_outstanding=4), 0, 24, 16, 7),
    (NPUConfig(), 0, 0, 40 * 8, 1),
    (NPUConfig(rows=4, cols=4), 4, 12, 8, 5),                       # partial beats
]


@pytest.mark.parametrize("spec", STORE_TIMINGS)
@pytest.mark.parametrize("cfg, addr, stride, row_bytes, n_rows", STORES)
def test_dma_store_matches_a_per_cycle_store(spec, cfg, addr, stride, row_bytes, n_rows):
    """The DMA store's W buffer, W beats, B responses, ``done`` and stall counter, while the
    command processor's reads share the bandwidth (they retime W beats already timed)."""
    timing = DramTiming.parse(spec)
    rng = np.random.default_rng(n_rows + 1)
    cp_reads, cp_writes = _traffic(rng)
    t = 100
    mod = _Model(timing, cfg.axi_data_bytes)
    led = Ledger()
    st = StoreChannel(cfg, mod.eq, mod.wc, led, lambda q: (0, 1 << 32))
    st.queue = q = _Queue()
    jobs = []
    st.ledger.item = lambda it: (jobs.append(it), Ledger.item(led, it))
    st.start(SimpleNamespace(body=_body(addr, stride, row_bytes, n_rows, LocalMem.SPAD),
                             queue=0), t, ErrorCode.NONE)
    job = jobs[0]
    mod.reader(CP, cp_reads, _Receiver(mod.rc))
    mod.writer(CP, cp_writes)
    mod.run()
    store = NaiveStore(t, [n for n, _ in job.beats], [b.beats for b in job.bursts],
                       cfg.dma_outstanding)
    want_r, want_w = naive_memory(timing, {DMA: (None, store),
                                           CP: (FixedReader(cp_reads), FixedWriter(cp_writes))},
                                  20_000, cfg.axi_data_bytes)
    grants = sorted(job.grants + [g for w in mod.writers for g in w.grants], key=lambda g: g.aw)
    assert mod.records(grants=grants) == (want_r, want_w)
    assert (job.V, job.W) == (store.V, store.W)
    assert q.done == store.finish
    counts = led.snapshot(store.finish + 5)
    assert counts["stall.store.dram_write"] == store.stall


# -- the pieces ------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec", ["stall=0.3,seed=12345", "r_stall=0.99,seed=0", "ar_stall=0.5"])
def test_stall_draws_are_the_sequence_of_dram_sv(spec):
    timing = DramTiming.parse(spec)
    n = 2 * BLOCK + 100
    for ch in CHANNELS:
        want = list(islice(stall_draws(timing, ch), n + 3000))
        s = StallDraws(timing, ch)
        assert [s.stalled(c) for c in range(n)] == want[:n]
        for c in range(0, n, 37):
            f = s.next_free(c)
            assert not want[f] and not any(not x for x in want[c:f])


def test_token_bucket_matches_the_per_cycle_bucket():
    rng = np.random.default_rng(4)
    for bw in (0.5, 2.5, 4.8, 7.9, 12.0):
        timing = DramTiming(bytes_per_cycle=bw)
        num, den = timing.bw_fraction
        bucket = TokenBucket(timing, BEAT)
        tokens, cap, beat = BEAT * den + num, BEAT * den + num, BEAT * den
        for c in range(3000):
            want = rng.integers(0, 3)              # beats that want to go
            ok = tokens >= beat
            if want and ok:
                assert bucket.first_ok(c) == c
                bucket.take(c, int(want))
            elif want:
                assert bucket.first_ok(c) > c
            tokens = min(cap, tokens + num - (int(want) if ok else 0) * beat)
            assert bucket.level(c + 1) == tokens
