"""Profiles from the hardware command trace (:mod:`sw.runtime.profile`) on the performance
model, which implements the trace CSRs and counters as the RTL does (the same checks run on the
RTL in ``tests/cosim/test_profile_rtl.py``), and their Perfetto and PNG export."""

import json

import numpy as np
import pytest

from hw.config import NPUConfig
from hw.isa import (
    ACCEPT_CYCLES,
    ENGINE_NAMES,
    ErrorCode,
    LocalMem,
    command_busy_cycles,
    matmul_busy_cycles,
    matmul_issue_cycles,
)
from sw.model import ModelBackend
from sw.perf import PerfBackend
from sw.runtime import CommandList, Device, NPUError, UntimedCounterError
from sw.runtime.profile import Profile, Profiler, unwrap_cycles
from sw.runtime.profile_export import TIME_UNIT, perfetto_trace, timeline_png, write_perfetto
from tests.support import profile_jobs
from tests.support.trace_schema import check_document, check_text

SMALL = NPUConfig.parse("4x4,trace_depth=8")
M, K, N = 16, 32, 48        # 45 loads, 58 matmuls on 4x4: several FIFOs' worth of each


def run(config: NPUConfig = SMALL, **kw) -> tuple[Profile, dict, dict]:
    r = profile_jobs.layer_of_two_gemms(PerfBackend(config), config=config.to_dict(),
                                        m=kw.pop("m", M), k=kw.pop("k", K), n=kw.pop("n", N),
                                        **kw)
    assert r["bit_exact"]
    return Profile.from_dict(r["profile"]), profile_jobs.decoded_records(r["records"]), r


@pytest.fixture(scope="module")
def small_run():
    return run()


# -- unwrapping -------------------------------------------------------------------------------

@pytest.mark.parametrize("start, end, now", [
    (10, 20, 20),                                   # read in the cycle it retired
    (10, 20, 20 + 2**32 - 1),                       # the oldest end that is still exact
    (2**32 - 5, 2**32 + 7, 2**32 + 9),              # the command straddles the wrap
    (2**32 + 3, 2**32 + 8, 2**33 + 1),              # both after a wrap, read after the next
    (5 * 2**32 - 1, 5 * 2**32, 5 * 2**32),          # ends exactly on a wrap
    (0, 2**32 - 1, 2**32 - 1),                      # the longest command
])
def test_unwrap_cycles_recovers_the_64_bit_cycles(start, end, now):
    assert unwrap_cycles(start & 0xFFFF_FFFF, end & 0xFFFF_FFFF, now) == (start, end)


def test_unwrap_cycles_on_random_entries():
    rng = np.random.default_rng(3)
    for _ in range(2000):
        end = int(rng.integers(0, 2**40))
        start = end - int(rng.integers(0, 2**31))
        now = end + int(rng.integers(0, 2**32))
        assert unwrap_cycles(start % 2**32, end % 2**32, now) == (start, end)


# -- the profile against the hardware counters -------------------------------------------------

@pytest.mark.parametrize("config, kw", [
    (SMALL, {}),
    (SMALL, {"skip_cycles": 2**32 - 3000}),       # CYCLES[31:0] wraps in the middle of the run
    (SMALL, {"failing_stream": True}),            # a queue fails and is reset meanwhile
    (NPUConfig(), {"m": 8, "k": 64, "n": 512}),   # the default 64-deep FIFO: 267 matmuls
], ids=["depth8", "wrap", "queue-reset", "8x8-depth64"])
def test_every_engine_command_appears_once_as_the_counters_saw_it(config, kw):
    profile, records, r = run(config, **kw)
    ran = errors = None
    if r["failed"]:
        f = r["failed"]
        assert ErrorCode(f["code"]) == ErrorCode.BAD_DRAM_ADDR
        ran = {f["queue"]: f["index"] + 1}          # the load and the failing store ran
        errors = {(f["queue"], f["index"]): ErrorCode(f["code"])}
    profile_jobs.check_profile(profile, records, ran=ran, errors=errors)
    profile_jobs.check_regions(profile, records)
    retired = [profile.counters[f"retired.{e}"] for e in ENGINE_NAMES]
    assert max(retired) > 4 * config.trace_depth     # the FIFOs had to be drained on the way
    if "skip_cycles" in kw:                           # the run crosses the wrap
        assert min(s.start for s in profile.slices) < 2**32 < max(s.end for s in profile.slices)


def test_entries_the_host_did_not_drain_are_counted_as_lost(monkeypatch):
    """A host that never drains (polling switched off): each FIFO keeps its oldest
    ``trace_depth`` entries, and the profile says exactly how many of the others it lost."""
    monkeypatch.setattr(Profiler, "poll", lambda self, incoming=(): None)
    profile, _, _ = run()
    summary = profile.engine_summary()
    for e in ENGINE_NAMES:
        retired = profile.counters[f"retired.{e}"]
        assert summary[e]["commands"] == min(retired, SMALL.trace_depth)
        assert summary[e]["lost"] == retired - summary[e]["commands"]
    assert set(profile.overflowed) == {e for e in ENGINE_NAMES
                                       if profile.counters[f"retired.{e}"] > SMALL.trace_depth}
    assert profile.lost == sum(v["lost"] for v in summary.values()) > 0
    assert f"WARNING: {profile.lost} trace entries lost" in profile.report()
    assert perfetto_trace(profile)["otherData"]["lost"] == profile.lost


def test_a_trace_depth_the_device_was_not_told_shows_as_lost_entries():
    """The CSRs do not report ``trace_depth``: a runtime that assumes 64 on an 8-deep FIFO
    does not drain in time, and says so."""
    backend = PerfBackend(SMALL)
    device = Device(backend, profile=True)              # no expected_config: assumes 64
    assert device.profiler.depth == 64
    rng = np.random.default_rng(1)
    a, w, b, mu, sh = profile_jobs.random_linear_operands(rng, M, K, N)
    from sw.kernels.linear import linear_with_stats
    linear_with_stats(device, a, w, b, mu, sh)
    profile = device.profiler.finish()
    assert profile.lost > 0 and "matrix" in profile.overflowed
    assert device.profiler is None


# -- the runtime's side ------------------------------------------------------------------------

def test_profiling_needs_a_timed_backend():
    with pytest.raises(UntimedCounterError, match="timed backend"):
        Device(ModelBackend(NPUConfig()), profile=True)


def test_read_trace_is_refused_while_the_profiler_drains_the_trace():
    device = Device(PerfBackend(SMALL), SMALL, profile=True)
    with pytest.raises(NPUError, match="profiler drains"):
        device.read_trace()
    device.profiler.finish()
    assert device.read_trace() == []


def test_engine_summary_counts_the_union_of_overlapping_slices():
    """``busy_slices`` counts each cycle in which one or more slices hold a command once
    (``start + 1 .. end``, clipped to the profile's ``begin .. end - 1``), as
    ``busy.matrix`` counts overlapping MATMULs: random spans that overlap, nest, share one
    cycle, touch or stand apart, against a set of cycles."""
    from sw.runtime.counters import Counters
    from sw.runtime.profile import Slice
    rng = np.random.default_rng(5)
    for _ in range(300):
        begin, end = 100, 100 + int(rng.integers(1, 200))
        starts = np.sort(rng.integers(begin - 30, end + 10, int(rng.integers(0, 8))))
        slices = tuple(Slice("matrix", 0, i, int(a), int(a + rng.integers(1, 40)))
                       for i, a in enumerate(starts))
        held = {c for sl in slices for c in range(sl.start + 1, sl.end + 1) if begin <= c < end}
        counters = Counters({f"{k}.{e}": 0 for k in ("busy", "retired") for e in ENGINE_NAMES})
        profile = Profile(SMALL, begin, end, slices, (), counters)
        assert profile.engine_summary()["matrix"]["busy_slices"] == len(held), slices


def test_profile_round_trips_through_json(small_run):
    profile = small_run[0]
    again = Profile.from_dict(json.loads(json.dumps(profile.to_dict())))
    assert again == profile
    assert again.engine_summary() == profile.engine_summary()


# -- export ------------------------------------------------------------------------------------

def test_perfetto_trace_is_valid_and_holds_every_command(small_run, tmp_path):
    profile = small_run[0]
    path = write_perfetto(profile, tmp_path / "run.json")
    doc = check_text(path.read_text(encoding="utf-8"))
    assert "displayTimeUnit" not in doc and doc["otherData"]["time_unit"] == TIME_UNIT
    events = doc["traceEvents"]
    tracks = {(ev["pid"], ev["tid"]): ev["args"]["name"] for ev in events
              if ev["ph"] == "M" and ev["name"] == "thread_name"}
    # an engine's track and its lanes ("matrix", "matrix #2", ...: MATMULs overlap)
    by_track: dict[str, list] = {name.split(" #")[0]: [] for name in tracks.values()}
    for ev in events:
        if ev["ph"] == "X":
            by_track[tracks[(ev["pid"], ev["tid"])].split(" #")[0]].append(ev)
            assert type(ev["ts"]) is int and type(ev["dur"]) is int      # exact cycles
    assert set(by_track) == {"regions", *ENGINE_NAMES}
    for e in ENGINE_NAMES:
        mine = sorted((s for s in profile.slices if s.engine == e), key=lambda s: s.start)
        assert sorted((ev["ts"], ev["name"], ev["dur"]) for ev in by_track[e]) == \
            [(s.start, s.name, s.cycles) for s in mine]
        assert len(by_track[e]) == profile.counters[f"retired.{e}"]
        held = set().union(*(range(ev["ts"] + 1, ev["ts"] + ev["dur"] + 1)
                             for ev in by_track[e]))
        assert len(held) == profile.counters[f"busy.{e}"]       # the union: MATMULs overlap
        assert all(ev["args"]["command"].startswith(ev["name"].split()[0])
                   for ev in by_track[e])
    lanes = sorted(n for n in tracks.values() if n.startswith("matrix"))
    assert len(lanes) > 1 and lanes == ["matrix", *(f"matrix #{k}" for k in
                                                    range(2, len(lanes) + 1))]
    assert [(ev["name"], ev["ts"], ev["ts"] + ev["dur"]) for ev in by_track["regions"]] == \
        [(r.name, r.enter, r.exit) for r in profile.regions]
    sort = {ev["tid"]: ev["args"]["sort_index"] for ev in events
            if ev["name"] == "thread_sort_index"}
    assert min(sort, key=sort.get) == next(t for (_, t), n in tracks.items() if n == "regions")
    names = {t: n for (_, t), n in tracks.items()}
    shown = [names[t] for t in sorted(sort, key=sort.get)]          # lanes under their engine
    assert [n.split(" #")[0] for n in shown] == ["regions", "load", "store",
                                                 *["matrix"] * len(lanes), "vector"]


def test_slice_args_carry_the_command_fields(small_run):
    doc = perfetto_trace(small_run[0])
    mm = next(ev for ev in doc["traceEvents"] if ev["name"].startswith("MATMUL"))
    assert {"a_row", "w_row", "acc_row", "m", "queue", "index", "busy_cycles"} <= set(mm["args"])
    load = next(ev for ev in doc["traceEvents"] if ev["name"].startswith("DMA_LOAD"))
    assert load["args"]["mem"] in ("SPAD", "ACC") and load["args"]["n_rows"] > 0


def test_unicode_region_names_are_written_without_escapes(tmp_path):
    backend = PerfBackend(SMALL)
    device = Device(backend, SMALL, profile=True)
    with device.region("Schicht ü"):
        device.synchronize()
    text = write_perfetto(device.profiler.finish(), tmp_path / "u.json").read_text("utf-8")
    assert "Schicht ü" in check_text(text)["traceEvents"][-1]["name"]


def _shifted(ev: dict) -> dict:
    """A slice starting inside ``ev`` and ending after it: improperly nested."""
    return {**ev, "ts": ev["ts"] + 1, "dur": ev["dur"] + 5}


@pytest.mark.parametrize("breakage, message", [
    (lambda d: d["traceEvents"].append(_shifted(d["traceEvents"][-1])), "overlaps"),
    (lambda d: d["traceEvents"].pop(2), "no thread_name"),
    (lambda d: d["traceEvents"][-1].update(ts=float("nan")), "bad ts|Out of range|NaN"),
    (lambda d: d["traceEvents"][-1].update(pid="1"), "pid/tid"),
    (lambda d: d["traceEvents"][0].update(args={}), "needs args.name"),
    (lambda d: d.update(displayTimeUnit="cycles"), "displayTimeUnit"),
])
def test_the_trace_checker_rejects_what_perfetto_would(small_run, breakage, message):
    doc = json.loads(json.dumps(perfetto_trace(small_run[0])))
    check_document(doc)
    breakage(doc)
    with pytest.raises((AssertionError, ValueError), match=message):
        check_document(doc)


def test_timeline_png(small_run, tmp_path):
    import matplotlib.image
    path = timeline_png(small_run[0], tmp_path / "run.png")
    image = matplotlib.image.imread(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert image.shape[0] > 200 and image.shape[1] > 1000


def test_back_to_back_matmuls_are_all_collected_at_their_period(tmp_path):
    """MATMULs with no waits retire every ``matmul_issue_cycles`` (16 on 8x8 for ``m = 16``),
    faster than ``matmul_busy_cycles + ACCEPT_CYCLES`` (37) apart: the profiler must drain
    the 64-deep FIFO at that pace (sized from its latency, it lost 5 of 384). The slices
    overlap, sit on separate Perfetto lanes that never overlap, and their union is
    ``busy.matrix``."""
    cfg = NPUConfig()
    device = Device(PerfBackend(cfg), cfg, profile=True)
    m, count = 2 * cfg.rows, 6 * cfg.trace_depth
    c = CommandList()
    for _ in range(count):
        c.matmul(a_row=0, w_row=4 * m, acc_row=0, m=m)
    device.run(c)
    profile = device.profiler.finish()
    records = {q: list(s._record) for q, s in device.streams.items()}
    profile_jobs.check_profile(profile, records)            # nothing lost, exact schedule
    ends = sorted(s.end for s in profile.slices)
    period = matmul_issue_cycles(cfg, m)
    assert min(b - a for a, b in zip(ends, ends[1:], strict=False)) == period
    assert period < matmul_busy_cycles(cfg, m) + ACCEPT_CYCLES
    assert len(profile.slices) == profile.counters["retired.matrix"] == count
    assert sum(s.cycles for s in profile.slices) > profile.counters["busy.matrix"]
    doc = check_text(write_perfetto(profile, tmp_path / "b2b.json").read_text("utf-8"))
    lanes = {ev["tid"] for ev in doc["traceEvents"] if ev["ph"] == "X"}
    assert len(lanes) > 1
    assert timeline_png(profile, tmp_path / "b2b.png").read_bytes()[:4] == b"\x89PNG"


def test_a_command_a_queue_reset_catches_inside_its_engine_is_kept():
    """A long DMA_LOAD is inside the load engine when its queue is reset: it still retires
    (and counts in ``retired.load``), so its slice must be there, named after it."""
    cfg = SMALL
    device = Device(PerfBackend(cfg), cfg, profile=True)
    s = device.create_stream()
    rows = 512
    buf = s.alloc(rows * cfg.spad_row_bytes)
    c = CommandList()
    for _ in range(3):
        c.dma_load(mem=LocalMem.SPAD, dram_addr=buf.addr, dram_stride=cfg.spad_row_bytes,
                   row_bytes=cfg.spad_row_bytes, n_rows=rows, local_row=0, local_stride=1)
    s.launch(c)
    device.backend.run_cycles(100)          # fetched and taken by the load engine
    s.reset()
    device.backend.run_cycles(2 * command_busy_cycles(cfg, c[0].raw))     # it finishes
    profile = device.profiler.finish()
    assert profile.counters["retired.load"] == 1 and profile.lost == 0
    (load,) = profile.slices
    assert (load.queue, load.index, load.opcode, load.command) == (s.queue, 0, "DMA_LOAD",
                                                                   c[0].raw)
    assert load.cycles == profile.counters["busy.load"] > rows


def test_an_entry_of_a_command_the_profiler_never_saw_is_kept_unnamed():
    """A profiler started while a command submitted before it runs: its entry is kept as
    an ``unknown`` slice (it counts in ``retired.load``), not dropped."""
    cfg = SMALL
    device = Device(PerfBackend(cfg), cfg)
    rows = 256
    buf = device.alloc(rows * cfg.spad_row_bytes)
    c = CommandList()
    c.dma_load(mem=LocalMem.SPAD, dram_addr=buf.addr, dram_stride=cfg.spad_row_bytes,
               row_bytes=cfg.spad_row_bytes, n_rows=rows, local_row=0, local_stride=1)
    device.launch(c)
    device.backend.run_cycles(50)           # taken by the load engine
    device.profiler = Profiler(device)
    device.synchronize()
    profile = device.profiler.finish()
    (load,) = profile.slices
    assert (load.engine, load.queue, load.command, load.name) == ("load", 0, None,
                                                                  f"unknown q0#{load.index}")
    assert profile.counters["retired.load"] == 1 and profile.lost == 0
    assert perfetto_trace(profile)["traceEvents"][-1]["name"] == load.name


def test_entries_left_from_the_last_kernel_are_drained_before_the_next_launch():
    """The first kernel leaves a full FIFO behind (``trace_depth`` loads, never more than it
    holds, so nothing needed draining). The next launch must drain it before it submits:
    its loads retire while the host is busy elsewhere for a while before it synchronizes."""
    cfg = SMALL
    device = Device(PerfBackend(cfg), cfg, profile=True)
    buf = device.alloc(64 * cfg.spad_row_bytes)

    def loads(count: int, rows: int) -> CommandList:
        c = CommandList()
        for _ in range(count):
            c.dma_load(mem=LocalMem.SPAD, dram_addr=buf.addr, dram_stride=cfg.spad_row_bytes,
                       row_bytes=cfg.spad_row_bytes, n_rows=rows, local_row=0, local_stride=1)
        return c
    device.run(loads(cfg.trace_depth, 1))
    second = loads(3 * cfg.trace_depth, 64)
    device.launch(second)
    busy_elsewhere = 3 * command_busy_cycles(cfg, second[0].raw)
    assert busy_elsewhere < cfg.trace_depth * command_busy_cycles(cfg, second[0].raw) // 2
    device.backend.run_cycles(busy_elsewhere)
    device.synchronize()
    profile = device.profiler.finish()
    assert profile.lost == 0 and profile.overflowed == ()
    assert len(profile.slices) == profile.counters["retired.load"] == 4 * cfg.trace_depth
