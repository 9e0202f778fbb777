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

import numpy as np
import pytest

from sw.dram import CHANNELS, DramTiming, stall_draws
from sw.perf.beats import BeatScheduler, TokenBucket
from sw.perf.draws import BLOCK, StallDraws
from sw.perf.events import ARBITRATE, DECIDE, EventQueue
from sw.perf.memory import CP, DMA, ReadChannel, WriteChannel

BEAT = 8          # bus bytes


# -- the per-cycle reference -----------------------------------------------------------------------

def naive_memory(timing, reads, writes, busy, n_cycles):
    """Per-cycle dram.sv behind the round-robin arbiter.

    ``reads[m]``: manager ``m``'s read bursts ``(earliest cycle, beats)``, each requested from
    the cycle after the previous one's AR handshake; ``busy[m]``: cycles in which ``m``'s
    RREADY is low. ``writes[m]``: write bursts ``(earliest cycle, [cycle beat j is valid])``,
    AWVALID from the cycle after the previous AW handshake. Returns per read burst ``(mgr,
    accept, [load edges], [take cycles])`` and per write burst ``(mgr, aw, [W cycles], b)``,
    in DRAM order.
    """
    draws = {ch: list(islice(stall_draws(timing, ch), n_cycles)) for ch in CHANNELS}
    num, den = timing.bw_fraction or (0, 1)
    beat_tok, cap = BEAT * den, BEAT * den + num
    tokens = cap
    rd_lat, wr_lat = timing.read_latency, timing.write_latency
    # managers
    r_pend = {m: list(v) for m, v in reads.items()}
    r_from = dict.fromkeys(reads, 0)
    w_pend = {m: [(e, list(v)) for e, v in bs] for m, bs in writes.items()}
    w_from = dict.fromkeys(writes, 0)
    w_beats = {m: [] for m in writes}       # beats to send: [valid from, burst record]
    # arbiter
    ar_locked, ar_held, ar_last = False, 0, 0
    w_busy, w_owner, aw_done, w_done, w_last_owner = False, 0, False, False, 0
    # DRAM
    queue = []                              # read queue: (due, record)
    r_busy, r_cur, r_left, rvalid, vis = False, None, 0, False, None
    wstate, w_cur, w_left = "IDLE", None, 0
    bq = []                                 # B queue: (due, record); BREADY is always high
    r_out, w_out = [], []
    for c in range(n_cycles):
        st = {ch: draws[ch][c] for ch in CHANNELS}
        tok_ok = num == 0 or tokens >= beat_tok
        # -- combinational -------------------------------------------------------------------------
        arv = {m: bool(r_pend[m]) and c >= max(r_pend[m][0][0], r_from[m]) for m in reads}
        pick = next((m for m in ((ar_last + 1) % 2, ar_last) if arv.get(m)), None)
        ar_sel = ar_held if ar_locked else pick
        arvalid = ar_sel is not None and arv.get(ar_sel, False)
        arready = len(queue) != 16 and not st["ar"]
        rready = vis is not None and c not in busy.get(vis[0], ())
        r_take = (not rvalid or rready) and r_busy and not st["r"] and tok_ok
        awv = {m: bool(w_pend[m]) and c >= max(w_pend[m][0][0], w_from[m]) for m in writes}
        aw_pick = next((m for m in ((w_last_owner + 1) % 2, w_last_owner) if awv.get(m)), None)
        bus_awvalid = w_busy and awv.get(w_owner, False) and not aw_done
        awready = wstate == "IDLE" and len(bq) != 16 and not st["aw"]
        head = w_beats[w_owner][0] if w_busy and w_beats[w_owner] else None
        bus_wvalid = w_busy and not w_done and head is not None and c >= head[0]
        wready = wstate == "W_DATA" and not st["w"] and tok_ok
        w_take = bus_wvalid and wready
        b_due_now = bool(bq) and c >= bq[0][0]
        bvalid = b_due_now and not st["b"]          # never shown and not taken: BREADY high
        w_last_fire = w_take and w_left == 0
        # -- edge ----------------------------------------------------------------------------------
        tokens = min(cap, tokens + num - (int(r_take) + int(w_take)) * beat_tok)
        if bvalid:                                       # BREADY is high
            bq.pop(0)[1][3] = c
        aw_fire = bus_awvalid and awready
        if wstate == "IDLE" and aw_fire:
            _, valid = w_pend[w_owner].pop(0)
            rec = [w_owner, c, [], None]
            w_out.append(rec)
            w_beats[w_owner] += [[v, rec] for v in valid]
            w_from[w_owner] = c + 1
            wstate, w_cur, w_left = "W_DATA", rec, len(valid) - 1
        elif wstate == "W_DATA" and w_take:
            w_beats[w_owner].pop(0)
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
            _, beats = r_pend[ar_sel].pop(0)
            rec = [ar_sel, c, [], [], beats]
            r_out.append(rec)
            queue.append((c + rd_lat - 2, rec))
            r_from[ar_sel] = c + 1
        elif arvalid:
            ar_locked, ar_held = True, ar_sel
        if rvalid and rready:
            vis[3].append(c)
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
        if not (any(r_pend.values()) or queue or r_busy or rvalid or any(w_pend.values())
                or w_busy or wstate != "IDLE" or bq):
            break                                        # everything answered
    return ([(m, a, loads, takes) for m, a, loads, takes, _ in r_out],
            [(m, aw, ws, b) for m, aw, ws, b in w_out])


# -- the model, with test managers -----------------------------------------------------------------

class _Receiver:
    """Takes a beat at the first cycle from its visibility outside its busy spans; spans are
    announced to it (and the read channel retimes) only ``notice`` cycles before they start."""

    def __init__(self, rc, spans=(), notice=None):
        self.rc = rc
        self.known = set() if notice is not None else {c for a, b in spans for c in range(a, b)}

    def announce(self, a, b):
        self.known.update(range(a, b))
        live = [s for s in self.rc.bursts if not s.done and s.owner is self]
        if live:
            self.rc.reschedule(live[0])

    def _take(self, c):
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

    def burst_done(self, served):
        pass


class _Writer:
    """Beat ``j`` of its burst valid from a fixed cycle."""

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


def model_memory(timing, reads, writes, spans, notice):
    eq = EventQueue()
    beats = BeatScheduler(eq, timing, BEAT)
    rc = ReadChannel(eq, timing, beats)
    wc = WriteChannel(eq, timing, beats)
    owners = {DMA: _Receiver(rc, spans, notice), CP: _Receiver(rc)}
    if notice is not None:
        for a, b in spans:
            eq.at(a - notice, DECIDE, owners[DMA].announce, a, b)
    got = []
    queues = {m: list(r) for m, r in reads.items()}

    def issue(m, after):
        if queues[m]:
            start, n = queues[m].pop(0)
            rc.request(m, max(start, after), n, owners[m], None,
                       lambda c, s, m=m: (got.append(s), issue(m, c + 1)))
    for m in reads:
        issue(m, 0)
    writers = {m: _Writer(wc, m, bs) for m, bs in writes.items()}
    for w in writers.values():
        w.issue(0)
    eq.run_through(20_000, ARBITRATE)
    r = [(s.mgr, s.accept, s.loads if s.loads is not None else None, s.takes) for s in got]
    if got and got[0].loads is None:                 # back to back: expand the closed form
        r = [(s.mgr, s.accept, *_expand(s)) for s in got]
    grants = sorted((g for w in writers.values() for g in w.grants), key=lambda g: g.aw)
    return r, [(g.mgr, g.aw, g.ws, g.b) for g in grants]


def _expand(s):
    """Per-beat loads and takes of a burst timed in closed form by :class:`_Receiver`."""
    loads, takes = [], []
    c = s.v0 - 1
    for _ in range(s.beats):
        loads.append(c)
        c = s.owner._take(c + 1)
        takes.append(c)
    return loads, takes


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
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("notice", [None, 3])
def test_channels_match_a_per_cycle_dram_sv(spec, seed, notice):
    timing = DramTiming.parse(spec)
    rng = np.random.default_rng(seed)
    reads, writes, spans = scenario(rng)
    busy = {DMA: {c for a, b in spans for c in range(a, b)}}
    want_r, want_w = naive_memory(timing, reads, writes, busy, 20_000)
    got_r, got_w = model_memory(timing, reads, writes, spans, notice)
    assert sum(len(v) for v in reads.values()) == len(want_r)      # the horizon was enough
    assert all(b is not None for *_, b in want_w)
    assert got_r == [(m, a, lo, ta) for m, a, lo, ta in want_r]
    assert got_w == want_w


def test_channels_overlap_reads_and_writes_under_a_shared_bandwidth_limit():
    """The bandwidth limit is one bucket for R and W: writes slow down reads (the scenarios
    above would pass with two separate buckets if R and W never overlapped)."""
    timing = DramTiming.parse("bw=4")
    reads = {DMA: [(0, 8), (0, 8), (0, 8)], CP: []}
    alone = naive_memory(timing, reads, {DMA: [], CP: []}, {}, 400)[0]
    writes = {DMA: [(0, list(range(16)))], CP: []}
    both_r, both_w = naive_memory(timing, reads, writes, {}, 400)
    assert both_r[-1][3][-1] > alone[-1][3][-1] + 8
    assert model_memory(timing, reads, writes, [], None) == (both_r, both_w)


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
