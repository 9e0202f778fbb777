"""``npu sweep``: a grid of NPU configurations x DRAM timings x workloads, on the performance
model, with FPGA area, accuracy, sampled RTL checks, a table, JSON, CSV and a Pareto plot.

The grid
--------
:class:`Grid`: base configurations (``NPUConfig`` specs), hardware axes that replace fields of
each base (``array`` = ``rows x cols``, ``spad_rows``, ``acc_rows``, ``axi_data_bits``,
``dma_outstanding``, ``n_queues``; :data:`AXES`), DRAM timings (:class:`sw.dram.DramTiming`
presets or ``key=value`` specs) and workloads (:mod:`cosim.bench.workloads`). The hardware
configurations are the distinct products of bases and axes; a *point* is a hardware
configuration x a DRAM timing x a workload.

What each point gets
--------------------
* model cycles, utilization (``MACs / (cycles * PEs)``) and the honest roofline of the run
  (:func:`cosim.bench.sweep_tasks.roofline_figures`) from :class:`sw.perf.PerfBackend` under the
  point's DRAM timing (with ``backend="rtl"`` from the co-simulated RTL instead);
* SQNR (dB) against float32 and bit-exactness against the golden model;
* FPGA area of its hardware configuration: ECP5 synthesis (``synth_ecp5`` with classic ABC for
  every configuration alike, ``cosim.fpga.area``), LUT4, FF, MULT18X18D, DP16KD; once per
  hardware configuration (DRAM timings and workloads multiply points, not syntheses), cached;
  placement and routing (Fmax) only with ``pnr``;
* on ``rtl`` sampled points (:func:`sample_rtl`), RTL cycles on the co-simulation under the same
  DRAM timing, and the model's error ``(model - rtl) / rtl`` on them.

Every result is cached on disk by what determines it (:mod:`cosim.bench.sweep_cache`), so an
interrupted sweep resumes and a grown grid computes only its new points. The tasks run on Ray
(:mod:`cosim.bench.sweep_ray`) or, with ``workers=0``, in this process; each result records
its task's wall and CPU seconds, and the sweep sums the CPU seconds of all its results, cached
or not (:func:`cpu_seconds`): what a fresh run costs, whatever the machine's load.
"""

from __future__ import annotations

import itertools
import math
import random
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from cosim.bench.sweep_cache import ResultCache, key_hash, task_key
from cosim.bench.sweep_ray import InlineExecutor, RayExecutor, Task
from cosim.bench.sweep_tasks import with_roofline
from cosim.bench.workloads import Workload
from cosim.build import BUILD_ROOT
from cosim.fpga.pnr import PNR_FREQ_MHZ
from hw.config import NPUConfig
from sw.dram import DramTiming

__all__ = ["AXES", "BACKENDS", "Grid", "Point", "SweepOptions", "run_sweep", "sample_rtl",
           "plan_tasks", "point_tasks", "DEFAULT_CACHE", "make_executor", "evaluate_points"]

#: Hardware axes of the grid: name -> the NPUConfig fields it sets.
AXES = {"array": ("rows", "cols"), "spad_rows": ("spad_rows",), "acc_rows": ("acc_rows",),
        "axi_data_bits": ("axi_data_bits",), "dma_outstanding": ("dma_outstanding",),
        "n_queues": ("n_queues",)}
#: Where a point's cycles come from (:attr:`SweepOptions.backend`).
BACKENDS = ("perf", "rtl")
#: Default cache folder.
DEFAULT_CACHE = BUILD_ROOT / "sweep" / "cache"


@dataclass(frozen=True)
class Point:
    """One point of the grid: a hardware configuration, a DRAM timing and a workload."""
    config: NPUConfig
    dram: DramTiming
    workload: Workload

    @property
    def label(self) -> str:
        return f"{self.config.spec} / {self.dram.name} / {self.workload.name}"


@dataclass(frozen=True)
class Grid:
    """The sweep's grid (see the module docstring).

    Parameters
    ----------
    bases : tuple of NPUConfig
    axes : dict
        Axis name (:data:`AXES`) -> values: ``(rows, cols)`` pairs for ``array``, integers
        otherwise.
    drams : tuple of DramTiming
    workloads : tuple of Workload
    seed : int
        Seed of the GEMM operands (the same at every point).
    """
    bases: tuple[NPUConfig, ...] = (NPUConfig(),)
    axes: dict = field(default_factory=dict)
    drams: tuple[DramTiming, ...] = (DramTiming(name="ideal"),)
    workloads: tuple[Workload, ...] = ()
    seed: int = 0

    def configs(self) -> list[NPUConfig]:
        """The distinct hardware configurations, in grid order.

        Raises
        ------
        ValueError
            If an axis is unknown or a combination is not a valid :class:`NPUConfig` (the
            message names the base and the values).
        """
        unknown = [a for a in self.axes if a not in AXES]
        if unknown:
            raise ValueError(f"unknown grid axes {unknown}; axes: {', '.join(AXES)}")
        names = list(self.axes)
        out: dict[NPUConfig, None] = {}
        for base in self.bases:
            for values in itertools.product(*(self.axes[n] for n in names)):
                changes = {}
                for name, value in zip(names, values, strict=True):
                    fields = AXES[name]
                    changes |= dict(zip(fields, value if len(fields) > 1 else (value,),
                                        strict=True))
                try:
                    out[replace(base, **changes)] = None
                except ValueError as e:
                    point = ", ".join(
                        f"{n}={'x'.join(map(str, v)) if isinstance(v, tuple) else v}"
                        for n, v in zip(names, values, strict=True))
                    raise ValueError(f"grid point {point} (on base {base.spec}): {e}") from None
        return list(out)

    def points(self) -> list[Point]:
        """Every point: configurations x DRAM timings x workloads."""
        return [Point(c, d, w) for c in self.configs() for d in self.drams
                for w in self.workloads]


@dataclass
class SweepOptions:
    """How to run a sweep.

    Attributes
    ----------
    area : bool
        Synthesize every hardware configuration (ECP5).
    pnr, route : bool
        Also place (and route) for Fmax.
    freq_mhz : float
        Place-and-route target clock.
    synth_timeout : float or None
        Seconds before one tool run is stopped.
    rtl : int
        RTL-checked points (:func:`sample_rtl`).
    rtl_configs : int or None
        Hardware configurations the RTL points are spread over (default ``ceil(rtl / 3)``:
        each costs a Verilator build).
    workers : int or None
        Local Ray workers (default one per core); 0 runs everything in this process.
    address : str or None
        An existing Ray cluster.
    backend : str
        Where each point's cycles come from: ``"perf"`` (the performance model, default) or
        ``"rtl"`` (every point co-simulated: slow).
    cache_dir : Path
    progress : bool
        Show a progress bar (tqdm, on stderr) and a line per finished synthesis or RTL run.
    """
    area: bool = True
    pnr: bool = False
    route: bool = True
    freq_mhz: float = PNR_FREQ_MHZ
    synth_timeout: float | None = None
    rtl: int = 0
    rtl_configs: int | None = None
    workers: int | None = None
    address: str | None = None
    backend: str = "perf"
    cache_dir: Path = DEFAULT_CACHE
    progress: bool = True


def sample_rtl(points: list[Point], n: int, *, n_configs: int | None = None,
               seed: int = 0) -> list[Point]:
    """``n`` points for RTL checks: ``n_configs`` hardware configurations (default
    ``ceil(n / 3)``; each needs a Verilator build of one to four minutes) drawn at random
    (``seed``), then points of those configurations in turn, each new point differing from the
    ones already taken in workload and DRAM timing where it can. Deterministic for a seed."""
    if n <= 0 or not points:
        return []
    rng = random.Random(seed)
    configs = list(dict.fromkeys(p.config for p in points))
    k = min(len(configs), n_configs or math.ceil(n / 3))
    chosen = rng.sample(configs, k)
    pools = {c: [p for p in points if p.config == c] for c in chosen}
    for pool in pools.values():
        rng.shuffle(pool)
    taken: list[Point] = []
    while len(taken) < n and any(pools.values()):
        for c in chosen:
            pool = pools[c]
            if not pool or len(taken) >= n:
                continue
            seen = {(p.workload, p.dram) for p in taken}
            seen_w = {p.workload for p in taken if p.config == c}
            pool.sort(key=lambda p: ((p.workload, p.dram) in seen, p.workload in seen_w))
            taken.append(pool.pop(0))
    return taken


# -- planning ------------------------------------------------------------------------------------

def _point_key(p: Point, seed: int, backend: str = "perf") -> dict:
    """Cache key of ``p``'s result on ``backend`` (``perf``: kind ``point``; ``rtl``: kind
    ``rtl``)."""
    return task_key("point" if backend == "perf" else "rtl", config=p.config.to_dict(),
                    dram=p.dram.spec(), workload=p.workload.name, format=p.workload.fmt,
                    seed=seed)


def point_tasks(p: Point, seed: int, backend: str = "perf") -> list[Task]:
    """The tasks that give ``p``'s result on ``backend``: one model run, or (``rtl``) the
    Verilator build of its configuration (not cached: :func:`cosim.build.build_sim` caches
    it) and the co-simulation in its own run directory, which waits for the build."""
    key = _point_key(p, seed, backend)
    h = key_hash(key)
    args = {"config": p.config.spec, "dram": p.dram.spec(), "workload": p.workload.name,
            "seed": seed}
    if backend == "perf":
        return [Task(h, "point", args, f"model {p.label}", key)]
    build = f"build:{p.config.spec}"
    return [Task(build, "build", {"config": p.config.spec}, f"Verilator build {p.config.spec}"),
            Task(h, "rtl", args | {"name": f"sweep_{h[:12]}"}, f"RTL {p.label}", key,
                 after=[build])]


def _area_key(c: NPUConfig, o: SweepOptions) -> dict:
    return task_key("area", config=c.to_dict(), family="ecp5", mapper="abc", pnr=o.pnr,
                    route=o.route if o.pnr else None, freq_mhz=o.freq_mhz if o.pnr else None)


def _area_cost(c: NPUConfig) -> int:
    """Rough synthesis cost order (larger arrays and more queues first)."""
    return c.n_pes + 200 * c.n_queues + c.spad_rows // 64


def plan_tasks(grid: Grid, options: SweepOptions, cache: ResultCache
               ) -> tuple[list[Task], dict[str, dict], dict]:
    """The tasks of a sweep that are not cached, the cached results by task id, and the ids
    of each point's results (``{"points": {label: (result id, rtl check id or None)}, "area":
    {config spec: id}}``; the result is the model's, or the RTL's with ``backend="rtl"``).
    Tasks come longest first: syntheses, Verilator builds, RTL runs, model points."""
    points = grid.points()
    cached: dict[str, dict] = {}
    tasks: dict[str, Task] = {}
    ids: dict = {"points": {}, "area": {}}

    def add(new: list[Task]) -> None:
        done = new[-1]
        hit = cache.get(done.key)
        if hit is not None:
            cached[done.id] = hit
            return
        for t in new:
            tasks.setdefault(t.id, t)

    if options.area:
        for c in sorted(grid.configs(), key=_area_cost, reverse=True):
            key = _area_key(c, options)
            ids["area"][c.spec] = key_hash(key)
            add([Task(key_hash(key), "area", {
                "config": c.spec, "workdir": str(cache.workdir(key)), "pnr": options.pnr,
                "route": options.route, "freq_mhz": options.freq_mhz,
                "timeout": options.synth_timeout}, f"synthesis {c.spec}", key)])
    supported = [p for p in points if not p.workload.unsupported(p.config)]
    rtl = set(sample_rtl(supported, options.rtl, n_configs=options.rtl_configs,
                         seed=grid.seed)) if options.backend == "perf" else set()
    for p in points:
        if p not in supported:
            ids["points"][p.label] = (None, None)
            continue
        main = point_tasks(p, grid.seed, options.backend)
        check = point_tasks(p, grid.seed, "rtl") if p in rtl else None
        ids["points"][p.label] = (main[-1].id, check[-1].id if check else None)
        for new in (check, main):
            if new:
                add(new)
    order = {"area": 0, "build": 1, "rtl": 2, "point": 3}
    return sorted(tasks.values(), key=lambda t: order[t.kind]), cached, ids


# -- running ---------------------------------------------------------------------------------------

def make_executor(options: SweepOptions):
    """:class:`InlineExecutor` for ``workers == 0``, else a :class:`RayExecutor`."""
    if options.workers == 0 and options.address is None:
        return InlineExecutor()
    return RayExecutor(options.address, options.workers)


def _note(task: Task, res: dict) -> str | None:
    """A line for a finished synthesis, build or RTL run (points only advance the bar)."""
    if res.get("status") != "ok":
        return f"{task.label}: {res.get('error')}"
    if task.kind == "area":
        return (f"{task.label}: {res['lut4']} LUT4, {res['ff']} FF, {res['mult18']} MULT18X18D, "
                f"{res['dp16kd']} DP16KD ({res['wall_seconds']} s)")
    if task.kind == "build":
        return f"{task.label}: " + ("cached" if res["cached"] else f"{res['seconds']} s")
    if task.kind == "rtl":
        return f"{task.label}: {res['cycles']} cycles ({res['job_seconds']} s)"
    return None


def run_tasks(tasks: list[Task], cache: ResultCache, executor, *, progress: bool = True
              ) -> dict[str, dict]:
    """Run ``tasks`` on ``executor``, storing each cached result as it arrives; the results
    by task id."""
    results: dict[str, dict] = {}
    bar = None
    if progress and tasks:
        from tqdm import tqdm
        bar = tqdm(total=len(tasks), unit="task", file=sys.stderr, dynamic_ncols=True)

    def on_done(task: Task, res: dict) -> None:
        results[task.id] = res
        if task.key is not None and res.get("status") == "ok":
            cache.put(task.key, res)
        if bar is not None:
            note = _note(task, res)
            if note:
                bar.write(note, file=sys.stderr)
            bar.set_postfix_str(task.kind, refresh=False)
            bar.update(1)
    try:
        executor.run(tasks, on_done)
    finally:
        if bar is not None:
            bar.close()
    return results


def run_sweep(grid: Grid, options: SweepOptions, *, executor=None) -> dict:
    """Plan, run (what is not cached) and collect a sweep.

    Returns
    -------
    dict
        ``rows`` (:func:`cosim.bench.sweep_report.collect`), ``grid`` (its description),
        ``tasks`` (counts run and cached per kind), ``wall_seconds``, ``workers``.

    Raises
    ------
    ValueError
        For a bad grid, an unknown backend, or RTL checks with ``backend="rtl"``.
    KeyboardInterrupt
        Passed on after Ray was shut down; every finished result is in the cache.
    """
    from cosim.bench.sweep_report import collect

    if options.backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {options.backend!r}")
    if options.backend == "rtl" and options.rtl:
        raise ValueError("with backend 'rtl' every point is an RTL run: rtl checks do not apply")
    t0 = time.perf_counter()
    cache = ResultCache(options.cache_dir)
    tasks, results, ids = plan_tasks(grid, options, cache)
    counts = {"cached": _count(results.keys(), ids), "run": {}}
    own = executor is None and bool(tasks)
    if own:
        executor = make_executor(options)
    try:
        if tasks:
            results |= run_tasks(tasks, cache, executor, progress=options.progress)
    finally:
        if own:
            executor.close()
    for t in tasks:
        counts["run"][t.kind] = counts["run"].get(t.kind, 0) + 1
    return {"rows": collect(grid, results, ids), "tasks": counts,
            "cpu_seconds": cpu_seconds(results, ids),
            "grid": describe_grid(grid, options), "wall_seconds": time.perf_counter() - t0,
            "workers": getattr(executor, "workers", None) if tasks else None}


def evaluate_points(points: list[Point], *, seed: int, cache: ResultCache, executor,
                    progress: bool = True, backend: str = "perf") -> list[dict]:
    """Results of ``points`` on ``backend`` (``perf`` or ``rtl``; from the cache, or run on
    ``executor`` and cached), in order; a point its configuration cannot run gets
    ``{"status": "error"}``."""
    found: dict[str, dict] = {}
    tasks: dict[str, Task] = {}
    hashes = []
    for p in points:
        new = point_tasks(p, seed, backend)
        h = new[-1].id
        hashes.append(h)
        why = p.workload.unsupported(p.config)
        if why:
            found[h] = {"status": "error", "error": why}
        elif (hit := cache.get(new[-1].key)) is not None:
            found[h] = hit
        else:
            for t in new:
                tasks.setdefault(t.id, t)
    if tasks:
        found |= run_tasks(list(tasks.values()), cache, executor, progress=progress)
    return [with_roofline(p.config, p.dram, found[h]) for p, h in zip(points, hashes,
                                                                       strict=True)]


def cpu_seconds(results: dict[str, dict], ids: dict) -> dict:
    """CPU seconds (``task_cpu_seconds``) of every result of the sweep by kind, whether run now
    or taken from the cache (so what a fresh run costs), and ``build`` for the Verilator builds
    run now (a build is cached by :func:`cosim.build.build_sim`, not here)."""
    kinds = {a: "area" for a in ids["area"].values()}
    for m, r in ids["points"].values():
        kinds[m] = "point"
        if r:
            kinds[r] = "rtl"
    kinds |= {i: "build" for i in results if i.startswith("build:")}
    out: dict[str, float] = {}
    for i, kind in kinds.items():
        sec = (results.get(i) or {}).get("task_cpu_seconds")
        if sec is not None:
            out[kind] = round(out.get(kind, 0.0) + sec, 1)
    return out


def _count(done_ids, ids: dict) -> dict:
    done = set(done_ids)
    model = sum(1 for m, _ in ids["points"].values() if m in done)
    rtl = sum(1 for _, r in ids["points"].values() if r in done)
    area = sum(1 for a in ids["area"].values() if a in done)
    return {"point": model, "rtl": rtl, "area": area}


def describe_grid(grid: Grid, options: SweepOptions) -> dict:
    """JSON description of the grid and the options."""
    return {"bases": [c.spec for c in grid.bases],
            "axes": {k: [list(v) if isinstance(v, tuple) else v for v in vs]
                     for k, vs in grid.axes.items()},
            "drams": [d.to_dict() for d in grid.drams],
            "workloads": [w.name for w in grid.workloads], "seed": grid.seed,
            "configs": len(grid.configs()), "points": len(grid.points()),
            "area": options.area, "pnr": options.pnr, "route": options.route,
            "rtl": options.rtl, "backend": options.backend, "cache": str(options.cache_dir)}
