"""The DRAM model's timing parameters (``cosim/tb/dram.sv``, :mod:`sw.dram`), each measured on
its pins: ``npu_dram`` alone on Verilator, driven and sampled every cycle by
:mod:`tests.support.dram_pins` under plusargs from :meth:`sw.dram.DramTiming.to_plusargs`.

Measured: read latency (AR handshake to first R handshake) and its pipelining across
outstanding bursts; write-response latency (last W to B) and its pipelining; bandwidth over
long bursts (R alone, W alone, R and W sharing the bucket); backpressure per channel, cycle
for cycle against :func:`sw.dram.stall_draws` and within binomial 5-sigma bounds of the
probability; reproducibility for a seed; data and AXI handshake rules under jitter.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import random
from pathlib import Path

import pytest

from cosim.build import BUILD_ROOT, TB_DIR, _locked, _runner_class, verilator_root
from cosim.tb.harness import PYTHONWARNINGS, _repo_on_sys_path
from sw.dram import CHANNELS, DramTiming, stall_draws

BUS_BYTES = 8                       # DATA_BITS = 64
OUTSTANDING = 16
PARAMETERS = {"DATA_BITS": 8 * BUS_BYTES, "ADDR_BITS": 32, "ID_BITS": 4,
              "BYTES": "64'd1048576", "OUTSTANDING": OUTSTANDING}
TB_BUILD = BUILD_ROOT / "dram-tb"


def _build() -> Path:
    """Verilator build of ``npu_dram`` alone (cached on a hash of dram.sv and the options)."""
    build_dir = TB_BUILD / "sim"
    with _locked(TB_BUILD / ".lock"):
        h = hashlib.sha256((TB_DIR / "dram.sv").read_bytes())
        h.update(json.dumps([PARAMETERS, str(verilator_root())]).encode())
        stamp = build_dir / "build.hash"
        if (build_dir / "npu_dram").is_file() and stamp.is_file() \
                and stamp.read_text() == h.hexdigest():
            return build_dir
        runner = _runner_class()()
        runner.public_all = True
        runner.build(sources=[TB_DIR / "dram.sv"], hdl_toplevel="npu_dram",
                     build_dir=build_dir, parameters=PARAMETERS,
                     build_args=["-CFLAGS", "-O2", "-Wno-fatal", "-Wno-lint", "-Wno-style"],
                     timescale=("1ns", "1ps"), log_file=build_dir / "build.log")
        stamp.write_text(h.hexdigest())
    return build_dir


def run_pins(scenarios: list[dict], dram: str, name: str) -> list[dict]:
    """Run ``scenarios`` (see :mod:`tests.support.dram_pins`) on ``npu_dram`` under ``dram``;
    return one trace per scenario."""
    build_dir = _build()
    run_dir = TB_BUILD / "runs" / name
    run_dir.mkdir(parents=True, exist_ok=True)
    spec, result = run_dir / "spec.json", run_dir / "result.json"
    spec.write_text(json.dumps({"scenarios": scenarios}))
    result.unlink(missing_ok=True)
    # a failed cocotb test makes the runner exit; result.json says why
    with _repo_on_sys_path(), contextlib.suppress(SystemExit):
        _runner_class()().test(
            test_module="tests.support.dram_pins", hdl_toplevel="npu_dram",
            hdl_toplevel_lang="verilog", build_dir=build_dir, test_dir=run_dir,
            plusargs=DramTiming.parse(dram).to_plusargs(),
            extra_env={"NPU_DRAM_TB_SPEC": str(spec), "NPU_DRAM_TB_RESULT": str(result),
                       "PYTHONWARNINGS": PYTHONWARNINGS},
            results_xml=str(run_dir / "results.xml"), log_file=run_dir / "sim.log",
            timescale=("1ns", "1ps"))
    out = json.loads(result.read_text())
    assert out["ok"], f"{out['error']}\n{out.get('traceback', '')}"
    assert out["prot_errors"] == 0
    return out["scenarios"]


# -- traffic ------------------------------------------------------------------------------------

def reads(n: int, beats: int, *, at=0, spacing: int = 0, base: int = 0) -> list[dict]:
    """``n`` read bursts of ``beats`` beats, each in its own 4 KiB page."""
    return [{"addr": base + i * 4096, "len": beats - 1, "at": at + i * spacing}
            for i in range(n)]


def writes(n: int, beats: int, *, at=0, spacing: int = 0, base: int = 0x80000,
           seed: int = 0, strobes: bool = False) -> list[dict]:
    """``n`` write bursts of random data (and random strobes if ``strobes``)."""
    rng = random.Random(seed)
    return [{"addr": base + i * 4096, "len": beats - 1, "at": at + i * spacing,
             "data": [rng.getrandbits(8 * BUS_BYTES) for _ in range(beats)],
             "strb": [rng.getrandbits(BUS_BYTES) if strobes else (1 << BUS_BYTES) - 1
                      for _ in range(beats)]}
            for i in range(n)]


def handshakes(tr: dict, valid: str, ready: str) -> list[int]:
    """Samples (cycles) at which ``valid`` and ``ready`` were both high."""
    return [k for k, (v, r) in enumerate(zip(tr["trace"][valid], tr["trace"][ready],
                                             strict=True)) if v == r == "1"]


def bursts_of_beats(tr: dict) -> list[list[int]]:
    """R beat samples grouped per burst (RLAST closes a burst)."""
    out, cur = [], []
    for k, _id, _data, _resp, last in tr["r_beats"]:
        cur.append(k)
        if last:
            out.append(cur)
            cur = []
    assert not cur
    return out


def last_w_samples(tr: dict, sc: dict) -> list[int]:
    """Sample of each write burst's last W handshake."""
    w = handshakes(tr, "wvalid", "wready")
    out, i = [], 0
    for b in sc["writes"]:
        i += b["len"] + 1
        out.append(w[i - 1])
    assert i == len(w)
    return out


# -- latency ------------------------------------------------------------------------------------

LATENCY_CASES = ["ideal", "latency=17,wlatency=9", "latency=100,wlatency=50"]


def _latency_scenarios() -> list[dict]:
    return [{"reads": reads(6, 4, at=5, spacing=300)},          # one at a time
            {"reads": reads(10, 4)},                            # back to back: 10 outstanding
            {"writes": writes(6, 4, at=5, spacing=300)},
            {"writes": writes(10, 4)}]


@pytest.fixture(scope="module", params=LATENCY_CASES)
def latency_run(request, worker_id):
    timing = DramTiming.parse(request.param)
    scs = _latency_scenarios()
    name = f"latency_{timing.read_latency}_{timing.write_latency}_{worker_id}"
    return timing, scs, run_pins(scs, request.param, name)


def test_read_latency_from_ar_to_first_r(latency_run):
    timing, scs, trs = latency_run
    ar = handshakes(trs[0], "arvalid", "arready")
    firsts = [b[0] for b in bursts_of_beats(trs[0])]
    assert len(ar) == len(firsts) == 6
    assert [f - a for a, f in zip(ar, firsts, strict=True)] == [timing.read_latency] * 6


def test_read_latency_is_pipelined_across_outstanding_bursts(latency_run):
    """Back-to-back ARs: each burst starts at its own AR + latency, or one idle cycle after
    the previous burst's last beat, whichever is later; not one latency after the other."""
    timing, scs, trs = latency_run
    ar = handshakes(trs[1], "arvalid", "arready")
    bursts = bursts_of_beats(trs[1])
    assert ar == list(range(len(ar)))              # 10 < 16 outstanding: one AR per cycle
    prev_last = -10
    for a, beats in zip(ar, bursts, strict=True):
        assert beats[0] == max(a + timing.read_latency, prev_last + 2)
        assert beats == list(range(beats[0], beats[0] + 4))      # one beat per cycle
        prev_last = beats[-1]
    assert bursts[-1][-1] - ar[0] == timing.read_latency + 10 * 5 - 2


def test_write_response_latency_from_last_w_to_b(latency_run):
    timing, scs, trs = latency_run
    last_w = last_w_samples(trs[2], scs[2])
    b = [k for k, _id, _resp in trs[2]["b_resps"]]
    assert [x - w for w, x in zip(last_w, b, strict=True)] == [timing.write_latency] * 6


def test_write_responses_are_pipelined(latency_run):
    """Back-to-back write bursts: the next AW one idle cycle after the last W (not after B),
    each B at its own last W + latency, in order."""
    timing, scs, trs = latency_run
    tr, sc = trs[3], scs[3]
    aw = handshakes(tr, "awvalid", "awready")
    last_w = last_w_samples(tr, sc)
    b = [k for k, _id, _resp in tr["b_resps"]]
    assert [x for _k, x, _r in tr["b_resps"]] == list(range(10))     # BID in order
    for i in range(1, 10):
        assert aw[i] == last_w[i - 1] + 2
    prev = -1
    for w, x in zip(last_w, b, strict=True):
        assert x == max(w + timing.write_latency, prev + 1)
        prev = x


# -- bandwidth ----------------------------------------------------------------------------------

def _rate(samples: list[int]) -> float:
    """Bytes per cycle of full beats at ``samples``: beats after the first over the span."""
    return (len(samples) - 1) * BUS_BYTES / (samples[-1] - samples[0])


@pytest.mark.parametrize("bw", [2.5, 6.0, 0.8])
def test_bandwidth_limit_over_long_bursts(bw, worker_id):
    """256-beat bursts: R alone, W alone, then R and W at once sharing the token bucket."""
    scs = [{"reads": reads(2, 256)}, {"writes": writes(2, 256)},
           {"reads": reads(2, 256), "writes": writes(2, 256)}]
    r_only, w_only, both = run_pins(scs, f"bw={bw}", f"bw_{bw}_{worker_id}")
    r = [k for k, *_ in r_only["r_beats"]]
    w = handshakes(w_only, "wvalid", "wready")
    # each span holds about 2 * 256 * 8 / bw cycles; the bucket adds at most one beat
    for samples in (r, w):
        assert abs(_rate(samples) - bw) <= bw * 1.5 * BUS_BYTES / (samples[-1] - samples[0])
    mixed = sorted([k for k, *_ in both["r_beats"]] + handshakes(both, "wvalid", "wready"))
    span = mixed[-1] - mixed[0]
    assert abs((len(mixed) - 1) * BUS_BYTES / span - bw) <= bw * 2.5 * BUS_BYTES / span
    # never more than the bucket allows over any window of 64 cycles
    per = [0] * (mixed[-1] + 1)
    for k in mixed:
        per[k] += BUS_BYTES
    for k in range(len(per) - 64):
        assert sum(per[k:k + 64]) <= 64 * bw + 3 * BUS_BYTES


def test_no_limit_is_one_beat_per_cycle_per_channel(worker_id):
    both = run_pins([{"reads": reads(2, 256), "writes": writes(2, 256)}], "ideal",
                    f"bw_none_{worker_id}")[0]
    r = [k for k, *_ in both["r_beats"]]
    w = handshakes(both, "wvalid", "wready")
    assert bursts_of_beats(both)[0] == list(range(r[0], r[0] + 256))
    assert w[:256] == list(range(w[0], w[0] + 256))
    assert _rate(r[:256]) == _rate(w[:256]) == BUS_BYTES


# -- backpressure -------------------------------------------------------------------------------

STALL_CASES = ["stall=0.3,seed=11", "ar_stall=0.1,r_stall=0.5,aw_stall=0.2,w_stall=0.45,"
               "b_stall=0.35,seed=3"]


@pytest.fixture(scope="module", params=STALL_CASES, ids=["all_0.3", "per_channel"])
def stall_run(request, worker_id):
    timing = DramTiming.parse(request.param)
    # spaced so that the AR queue rarely fills and the write channel is often idle
    sc = {"reads": reads(400, 4, spacing=12), "writes": writes(400, 2, spacing=12)}
    tr = run_pins([sc], request.param, f"stall_{request.param_index}_{worker_id}")[0]
    return timing, sc, tr


def _trials(tr: dict, sc: dict) -> dict[str, list[int]]:
    """Per channel, the cycles in which the model would assert its ready/valid unless the
    channel's generator withholds it (derived from the pins alone).

    AR: fewer than 16 bursts accepted and not finished (the queue has room). AW: the write
    channel is idle (the previous burst's last W two or more cycles ago) and fewer than 16
    responses are waiting. W: a burst's AW was taken and its last W was not. R: within a
    burst, from a beat's handshake to the next beat. B: from the cycle a response is due (last
    W + latency, after the previous B) to its handshake. The driver keeps RREADY and BREADY
    high, so every valid is taken in the cycle it rises."""
    t = tr["trace"]
    n = len(t["arvalid"])
    ar = set(handshakes(tr, "arvalid", "arready"))
    rlast = {b[-1] for b in bursts_of_beats(tr)}
    aw = set(handshakes(tr, "awvalid", "awready"))
    last_w = last_w_samples(tr, sc)
    b_at = [k for k, *_ in tr["b_resps"]]
    out: dict[str, list[int]] = {c: [] for c in CHANNELS}
    open_r = w_in = 0
    idle_from, lw_i, waiting = 0, 0, 0
    b_set = set(b_at)
    last_w_set = set(last_w)
    for k in range(n):
        if open_r < OUTSTANDING:
            out["ar"].append(k)
        if w_in == 0 and k >= idle_from and waiting < OUTSTANDING:
            out["aw"].append(k)
        if w_in:
            out["w"].append(k)
        open_r += (k in ar) - (k in rlast)
        if k in aw:
            w_in = 1
        if k in last_w_set:
            w_in, idle_from, lw_i = 0, k + 2, lw_i + 1
        waiting += (k in last_w_set) - (k in b_set)
    for beats in bursts_of_beats(tr):
        for c, nxt in zip(beats, beats[1:], strict=False):
            out["r"] += list(range(c + 1, nxt + 1))
    prev = -1
    for w, b in zip(last_w, b_at, strict=True):
        out["b"] += list(range(max(w + 1, prev + 1), b + 1))    # write latency 1
        prev = b
    return out


def _pin(tr: dict, ch: str, k: int) -> bool:
    """Whether ``ch``'s model-side signal (ARREADY, RVALID, AWREADY, WREADY, BVALID) was high
    in cycle ``k``."""
    name = {"ar": "arready", "r": "rvalid", "aw": "awready", "w": "wready", "b": "bvalid"}[ch]
    return tr["trace"][name][k] == "1"


def test_backpressure_follows_the_seeded_generators_cycle_for_cycle(stall_run):
    """In every cycle where only the generator decides, the pin is low exactly when
    :func:`sw.dram.stall_draws` says so (RVALID reflects the draw of the cycle before:
    it is registered)."""
    timing, sc, tr = stall_run
    trials = _trials(tr, sc)
    n = len(tr["trace"]["arvalid"])
    for ch in CHANNELS:
        draws = stall_draws(timing, ch)
        stalled = [next(draws) for _ in range(n)]
        lag = 1 if ch == "r" else 0
        bad = [k for k in trials[ch] if _pin(tr, ch, k) == stalled[k - lag]]
        assert len(trials[ch]) > 500, ch
        assert not bad, f"{ch}: pin disagrees with the generator at cycles {bad[:10]}"


def test_backpressure_rate_within_binomial_bounds(stall_run):
    timing, sc, tr = stall_run
    for ch, ks in _trials(tr, sc).items():
        assert len(ks) > 500, ch
        p, n = timing.stall(ch), len(ks)
        low = sum(not _pin(tr, ch, k) for k in ks)
        sigma = math.sqrt(n * p * (1 - p))
        assert abs(low - n * p) <= 5 * sigma, (ch, low / n, p, n)


def test_ideal_model_never_withholds(worker_id):
    sc = {"reads": reads(40, 8), "writes": writes(40, 8)}
    tr = run_pins([sc], "ideal", f"stall_none_{worker_id}")[0]
    for ch, ks in _trials(tr, sc).items():
        assert ks and all(_pin(tr, ch, k) for k in ks), ch


# -- reproducibility, data, AXI rules -----------------------------------------------------------

def _mixed(seed: int) -> dict:
    """24 write bursts of random length and offset (each in its own 4 KiB page) with full
    strobes, the same 24 again with random data and strobes, then (``then_reads``) the 24
    regions read back; RREADY and BREADY randomly low."""
    rng = random.Random(seed)
    ws = []
    for i in range(24):
        beats = rng.randint(1, 32)
        ws.append({"addr": i * 4096 + 8 * rng.randint(0, 512 - beats), "len": beats - 1,
                   "at": 0, "data": [rng.getrandbits(64) for _ in range(beats)],
                   "strb": [0xFF] * beats})
    ws += [dict(w, data=[rng.getrandbits(64) for _ in w["data"]],
                strb=[rng.getrandbits(8) for _ in w["data"]]) for w in ws]
    rs = [{"addr": w["addr"], "len": w["len"], "at": 0} for w in ws[:24]]
    return {"writes": ws, "rready": {"p": 0.3, "seed": seed}, "bready": {"p": 0.3, "seed": seed},
            "then_reads": rs}


def _jitter_pair(spec: str, worker_id: str, tag: str) -> list[dict]:
    sc = _mixed(5)
    first = {k: v for k, v in sc.items() if k != "then_reads"}
    readback = {"reads": sc["then_reads"], "rready": sc["rready"]}
    return run_pins([first, readback], spec, f"jitter_{tag}_{worker_id}")


@pytest.fixture(scope="module")
def jitter_runs(worker_id):
    return {"a": _jitter_pair("jitter", worker_id, "a"),
            "b": _jitter_pair("jitter", worker_id, "b"),
            "seed2": _jitter_pair("jitter,seed=2", worker_id, "seed2")}


def test_same_seed_same_cycles_other_seed_other_cycles(jitter_runs):
    a, b, c = jitter_runs["a"], jitter_runs["b"], jitter_runs["seed2"]
    assert a == b
    assert a[0]["trace"] != c[0]["trace"] and a[0]["cycles"] != c[0]["cycles"]
    # the data are the same whatever the seed
    assert [x[1:] for x in a[1]["r_beats"]] == [x[1:] for x in c[1]["r_beats"]]


def test_data_and_handshake_rules_under_jitter(jitter_runs):
    sc = _mixed(5)
    mem: dict[int, int] = {}
    for w in sc["writes"]:
        for i, (data, strb) in enumerate(zip(w["data"], w["strb"], strict=True)):
            word = (w["addr"] >> 3) + i
            old = mem.get(word, 0)
            mask = sum(0xFF << (8 * j) for j in range(8) if strb >> j & 1)
            mem[word] = (old & ~mask) | (data & mask)
    for tr in jitter_runs["a"]:
        t = tr["trace"]
        for valid, ready in (("rvalid", "rready"), ("bvalid", "bready")):
            for k in range(len(t[valid]) - 1):      # a valid not taken stays high
                if t[valid][k] == "1" and t[ready][k] == "0":
                    assert t[valid][k + 1] == "1", (valid, k)
    write_tr, read_tr = jitter_runs["a"]
    assert [x[1] for x in write_tr["b_resps"]] == [i % 16 for i in range(48)]
    assert all(x[2] == 0 for x in write_tr["b_resps"])
    beats = iter(read_tr["r_beats"])
    for i, r in enumerate(sc["then_reads"]):
        for j in range(r["len"] + 1):
            _k, rid, data, resp, last = next(beats)
            assert (rid, resp, last) == (i % 16, 0, int(j == r["len"]))
            assert data == mem[(r["addr"] >> 3) + j], (i, j)
    assert next(beats, None) is None
