"""``npu sweep``: the command line of :mod:`cosim.bench.sweep` and :mod:`cosim.bench.find`."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

__all__ = ["add_parser"]

_DESCRIPTION = """\
Sweep NPU designs over workloads on the performance model (sw.perf), with ECP5 area per
hardware configuration, SQNR against float32, sampled RTL checks, and a Pareto front of
cycles against LUT4.

The grid: every --base configuration with every combination of the hardware axes given
(--array, --spad-rows, --acc-rows, --axi-bits, --outstanding, --queues), times every --dram
timing, times every --workload. Syntheses are per hardware configuration (DRAM timings and
workloads multiply points, not syntheses). Results are cached by what determines them
(--cache), so an interrupted sweep resumes and a grown grid only runs its new points.

Workloads: gemm:MxKxN (float operands quantized to int8, SQNR against the float product),
minilm-block:L (MiniLM layer-0 self-attention on L tokens of real text; square arrays),
minilm:L (the whole six-layer forward pass, SQNR of the sentence embedding; square arrays,
L a multiple of cols, int8 only; about 10 s a point on the model at L=32). A workload may
name its number format, gemm:1x384x1536@int4, minilm-block:32@mxint8+mxint8
(weights+activations), or --weights/--activations run every workload in each format (a
format axis; not with a workload that names its format; MXINT8 needs a configuration with
mx=1; points a configuration cannot run are reported as unsupported).

Outputs in --out: sweep.json (everything, with counters and stages), sweep.csv, table.txt,
pareto.png (and roofline.png with --roofline); the table is printed.

--find PARAM=LO..HI:GOAL answers a requirement question by bisection instead of sweeping,
for every configuration of the grid, DRAM timing and workload (see --find below and
cosim/bench/find.py).

Tasks run on Ray: a local instance with one worker per core by default (--workers), or an
existing cluster (--address); --workers 0 runs them in this process.
"""

_EPILOG = """\
examples:
  npu sweep --array 8x8 16x16 --spad-rows 1024 4096 --outstanding 2 4 \\
            --dram ideal lat100 latency=200 --workload gemm:64x64x64 gemm:1x384x1536 \\
            minilm-block:32 --rtl 6
  npu sweep --base 8x8 16x16 --workload minilm-block:128 --no-area \\
            --find 'latency=3..4000:slowdown<=5%' 'bw=0.25..64:slowdown<=5%'
  npu sweep --base 8x8,mx=1 --weights int8 int4 mxint8 --dram ideal ddr \\
            --workload gemm:1x384x1536 minilm-block:32 --no-area
  npu sweep --array 8x8 16x16 --outstanding 2 4 --dram ideal lat100 --workload minilm:32 \\
            --no-area
"""


def _int_list_type(name: str):
    def parse(text: str) -> int:
        try:
            return int(text, 0)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}: {text!r} is not an integer") from None
    return parse


def _array(text: str) -> tuple[int, int]:
    r, sep, c = text.lower().partition("x")
    if not sep or not r.isdigit() or not c.isdigit():
        raise argparse.ArgumentTypeError(f"--array {text!r}: expected ROWSxCOLS, e.g. 8x8")
    return int(r), int(c)


def _workload(text: str):
    from cosim.bench.workloads import WorkloadError, parse_workload
    try:
        return parse_workload(text)
    except WorkloadError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _question(text: str):
    from cosim.bench.find import FindError, parse_question
    try:
        return parse_question(text)
    except FindError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


#: The grid's hardware axes: NPUConfig field -> the option that gives its values.
_AXIS_FLAGS = {"spad_rows": "--spad-rows", "acc_rows": "--acc-rows",
               "axi_data_bits": "--axi-bits", "dma_outstanding": "--outstanding",
               "n_queues": "--queues"}


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``npu sweep`` to the subcommands ``sub``."""
    from cosim.bench.find import FIND_HELP
    from cosim.cli.args import (
        int_at_least,
        output_folder,
        parse_config,
        parse_dram,
        positive_float,
    )
    from cosim.fpga.pnr import PNR_FREQ_MHZ
    from hw.config import NPUConfig

    sw = sub.add_parser("sweep", help="sweep designs x workloads: cycles, area, SQNR, "
                        "Pareto front; --find for requirement questions",
                        description=_DESCRIPTION, epilog=_EPILOG,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    g = sw.add_argument_group("grid")
    g.add_argument("--base", type=parse_config, nargs="+", default=[NPUConfig()],
                   metavar="CFG", help="base configurations, ROWSxCOLS[,key=value...] "
                   "(default 8x8); the axes below replace their fields")
    g.add_argument("--array", type=_array, nargs="+", metavar="RxC", help="array sizes")
    for field, flag in _AXIS_FLAGS.items():
        g.add_argument(flag, type=_int_list_type(flag), nargs="+", dest=field, metavar="N",
                       help=f"values of {field}")
    g.add_argument("--dram", type=parse_dram, nargs="+", action="extend", metavar="TIMING",
                   help="DRAM timings: presets (ideal ddr hbm jitter lat100 bp50) or "
                   "key=value specs (latency=200,wlatency=40,bw=4,r_stall=0.3; see sw/dram.py), "
                   "or a preset with overrides (ddr,latency=200); "
                   "default ideal. The performance model times all of them as dram.sv does")
    g.add_argument("--workload", type=_workload, nargs="+", action="extend", required=True,
                   metavar="W",
                   help="gemm:MxKxN, minilm-block:L, minilm:L")
    g.add_argument("--weights", nargs="+", choices=("int8", "int4", "mxint8"), metavar="FMT",
                   help="weight formats to run every --workload in: int8 int4 mxint8 (a format "
                        "axis; MXINT8 needs mx=1 in the configuration, e.g. --base 8x8,mx=1)")
    g.add_argument("--activations", nargs="+", choices=("int8", "mxint8"), metavar="FMT",
                   help="activation formats to run every --workload in: int8 mxint8")
    g.add_argument("--seed", type=int_at_least(0), default=0,
                   help="seed of the GEMM operands (default 0)")
    a = sw.add_argument_group("area and RTL")
    a.add_argument("--no-area", action="store_true", help="skip synthesis")
    a.add_argument("--pnr", action="store_true",
                   help="also place and route (nextpnr-ecp5, LFE5U-85F) for Fmax: slow")
    a.add_argument("--no-route", action="store_true",
                   help="with --pnr: place only, Fmax is nextpnr's estimate")
    a.add_argument("--freq", type=positive_float, default=PNR_FREQ_MHZ,
                   help="P&R target MHz (default %(default)s)")
    a.add_argument("--synth-timeout", type=positive_float, metavar="MIN",
                   help="stop one synthesis (or P&R) after MIN minutes; the point is reported "
                   "without area")
    a.add_argument("--rtl", type=int, default=0, metavar="N",
                   help="check N sampled points on the co-simulated RTL (default 0)")
    a.add_argument("--rtl-configs", type=int, metavar="K",
                   help="spread the RTL points over K hardware configurations (default "
                   "ceil(N/3); each costs a Verilator build)")
    f = sw.add_argument_group("requirement questions")
    f.add_argument("--find", type=_question, nargs="+", action="extend", metavar="Q",
                   help=FIND_HELP)
    f.add_argument("--tol", type=float, default=0.02,
                   help="relative tolerance of --find's bisection (default 0.02)")
    r = sw.add_argument_group("running and output")
    r.add_argument("--backend", choices=("perf", "rtl"), default="perf",
                   help="where cycles come from: the performance model (default) or the "
                   "co-simulated RTL at every point (slow)")
    r.add_argument("--workers", type=int, metavar="N",
                   help="local Ray workers (default one per core); 0: no Ray, in this process")
    r.add_argument("--address", metavar="ADDR",
                   help="use an existing Ray cluster (e.g. auto or ray://host:10001)")
    r.add_argument("--cache", type=output_folder, metavar="DIR",
                   help="result cache (default build/sweep/cache)")
    r.add_argument("--out", type=output_folder, default=Path("build/sweep/out"), metavar="DIR",
                   help="output folder (default build/sweep/out)")
    r.add_argument("--roofline", action="store_true",
                   help="also draw roofline.png: every point against its configuration's "
                   "and DRAM timing's roofs")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    sw.set_defaults(func=_cmd_sweep, check_args=lambda args: _check(sw, args))


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    from cosim.bench.sweep import Grid
    from cosim.cli.args import check_out_dir
    from sw.dram import DramTiming
    if args.rtl < 0 or (args.rtl_configs is not None and args.rtl_configs < 1):
        parser.error("--rtl must be >= 0 and --rtl-configs >= 1")
    if args.workers is not None and args.workers < 0:
        parser.error("--workers must be >= 0")
    if args.workers == 0 and args.address:
        parser.error("--workers 0 runs without Ray; --address needs Ray")
    if args.no_route and not args.pnr:
        parser.error("--no-route applies to --pnr")
    if args.pnr and args.no_area:
        parser.error("--pnr places and routes the synthesized netlist: not with --no-area")
    if args.rtl_configs is not None and not args.rtl:
        parser.error("--rtl-configs spreads the --rtl points: give --rtl N as well")
    if args.find and (args.rtl or args.pnr or args.backend == "rtl"):
        parser.error("--find runs the performance model only: --rtl, --pnr and --backend rtl "
                     "do not apply")
    if not 0 < args.tol < 1:
        parser.error("--tol must be in (0, 1)")
    if args.backend == "rtl" and args.rtl:
        parser.error("--backend rtl runs every point on the RTL: --rtl does not apply")
    drams = tuple(args.dram or [DramTiming.parse("ideal")])
    if len(set(drams)) < len(drams):
        parser.error("--dram: the same timing given twice")
    axes = {k: v for k, v in (("array", args.array),
                              *((f, getattr(args, f)) for f in _AXIS_FLAGS)) if v}
    workloads = list(args.workload)
    if args.weights or args.activations:
        from cosim.bench.workloads import with_format
        named = [w.name for w in workloads if w.fmt != "int8"]
        if named:       # the axis would run them in its formats instead, silently
            parser.error(f"--weights/--activations run every workload in their formats; "
                         f"{', '.join(named)} names its own: give one or the other")
        workloads = [with_format(w, wf, af) for w in workloads
                     for wf in (args.weights or [w.weights])
                     for af in (args.activations or [w.activations])]
    args.grid = Grid(bases=tuple(args.base), axes=axes,
                     drams=drams,
                     workloads=tuple(dict.fromkeys(workloads)), seed=args.seed)
    try:
        args.grid.configs()
    except ValueError as e:
        parser.error(str(e))
    clash = _find_clash(args.find or (), args.grid)
    if clash:
        parser.error(clash)
    check_out_dir(parser, "--out", args.out)


def _options(args: argparse.Namespace):
    from cosim.bench.sweep import DEFAULT_CACHE, SweepOptions
    return SweepOptions(area=not args.no_area and not args.find, pnr=args.pnr,
                        route=not args.no_route, freq_mhz=args.freq,
                        synth_timeout=args.synth_timeout * 60 if args.synth_timeout else None,
                        rtl=args.rtl, rtl_configs=args.rtl_configs, workers=args.workers,
                        address=args.address, backend=args.backend,
                        cache_dir=args.cache or DEFAULT_CACHE,
                        progress=not args.no_progress)


def _cmd_sweep(args: argparse.Namespace) -> int:
    from cosim.bench.sweep import make_executor, run_sweep
    from cosim.bench.sweep_ray import RayStartError
    from cosim.fuzz.compare import plural

    options = _options(args)
    grid = args.grid
    print(f"npu sweep: {plural(len(grid.configs()), 'hardware configuration')} x "
          f"{plural(len(grid.drams), 'DRAM timing')} x {plural(len(grid.workloads), 'workload')} "
          f"= {plural(len(grid.points()), 'point')}", file=sys.stderr, flush=True)
    executor = None
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        if args.find:
            executor = make_executor(options)
            return _find(args, options, executor)
        return _report(args, run_sweep(grid, options))
    except KeyboardInterrupt:
        print(f"npu sweep: interrupted; finished results are cached in {options.cache_dir}: "
              "run the same command to resume", file=sys.stderr)
        return 130
    except RayStartError as e:
        print(f"npu sweep: error: {e}; --workers 0 runs without Ray", file=sys.stderr)
        return 2
    finally:
        signal.signal(signal.SIGTERM, previous)
        if executor is not None:
            executor.close()


def _interrupt(signum, frame) -> None:
    """SIGTERM stops a sweep as ^C does: Ray is shut down, finished results stay cached."""
    raise KeyboardInterrupt


def _where(workers: int | None) -> str:
    """Where the tasks ran: in the process (0, ``--workers 0``), on Ray workers, or nothing
    to say (None: every result came from the cache)."""
    if workers is None:
        return ""
    return f" on {workers} Ray worker{'s' * (workers != 1)}" if workers else \
        " in the process (--workers 0)"


def _report(args: argparse.Namespace, doc: dict) -> int:
    from cosim.bench.sweep_report import format_table, write_outputs

    paths = write_outputs(doc, args.out, roofline=args.roofline)
    print(format_table(doc["rows"]))
    run, cached = doc["tasks"]["run"], doc["tasks"]["cached"]
    n, workers = len(doc["rows"]), doc["workers"]
    print(f"\n{n} point{'s' * (n != 1)}; run now: {_counts(run)}; from the cache: "
          f"{_counts(cached)}; {doc['wall_seconds']:.0f} s wall"
          + _where(workers))
    cpu = doc["cpu_seconds"]
    if cpu:
        print(f"CPU time of these results (run now or cached): {sum(cpu.values()):.0f} s ("
              + ", ".join(f"{k} {v:.0f} s" for k, v in cpu.items()) + ")")
    errs = [r["model_error"] for r in doc["rows"] if r["model_error"] is not None]
    if errs:
        print(f"model error against the RTL on {len(errs)} points: mean |error| "
              f"{100 * sum(map(abs, errs)) / len(errs):.2f}%, max {100 * max(map(abs, errs)):.2f}%")
    if "pareto" in paths:
        print("* Pareto front of cycles against LUT4 per workload and DRAM timing")
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    failed = [r for r in doc["rows"] if r.get("status") == "error"]
    if failed:
        print(f"npu sweep: {len(failed)} of {len(doc['rows'])} points failed (see the table)",
              file=sys.stderr)
    unsupported = [r for r in doc["rows"] if r.get("status") == "unsupported"]
    if unsupported and len(unsupported) == len(doc["rows"]):
        print(f"npu sweep: no point can run: {unsupported[0]['error']}", file=sys.stderr)
        return 1
    bad = [r for r in doc["rows"] if r["bit_exact"] is False or r["rtl_bit_exact"] is False]
    if bad:
        print(f"npu sweep: {len(bad)} of {len(doc['rows'])} points not bit-exact with the "
              "golden model (see the table's SQNR column)", file=sys.stderr)
    return 1 if bad or failed else 0


#: how the report names each kind of sweep task: (one, several)
_TASK_NAMES = {"point": ("model point", "model points"), "rtl": ("RTL run", "RTL runs"),
               "build": ("Verilator build", "Verilator builds"),
               "area": ("synthesis", "syntheses")}


def _counts(d: dict) -> str:
    return ", ".join(f"{v} {_TASK_NAMES.get(k, (k, k))[v != 1]}" for k, v in d.items() if v) \
        or "nothing"


def _find_clash(questions, grid) -> str | None:
    """Why a ``--find`` question would silently override the grid: it bisects a DRAM field a
    ``--dram`` timing sets, or a hardware field the grid's configurations vary."""
    from cosim.bench.find import DRAM_PARAMS
    from sw.dram import DramTiming

    for q in questions:
        if q.is_dram:
            fld = DRAM_PARAMS[q.param][0]
            for d in grid.drams:
                if getattr(d, fld) != getattr(DramTiming(), fld):
                    return (f"--find {q.text!r} bisects {q.param}, which --dram {d.name} sets "
                            f"too; leave it out of --dram")
        elif len({getattr(c, q.param) for c in grid.configs()}) > 1:
            how = (_AXIS_FLAGS[q.param] if len(set(grid.axes.get(q.param, ()))) > 1
                   else "--base")
            return (f"--find {q.text!r} bisects {q.param}, which the grid varies ({how}); "
                    f"give one value (or none) for it")
    return None


def _find(args: argparse.Namespace, options, executor) -> int:
    import dataclasses

    from cosim.bench.find import format_answers, run_find
    from cosim.bench.sweep import Point, evaluate_points
    from cosim.bench.sweep_cache import ResultCache

    cache = ResultCache(options.cache_dir)
    grid = args.grid
    t0 = time.perf_counter()

    def evaluate(batch):
        pts = [Point(c, d, w) for c, d, w in batch]
        return evaluate_points(pts, seed=grid.seed, cache=cache, executor=executor,
                               progress=options.progress, backend=options.backend)
    questions = [dataclasses.replace(q, tol=args.tol) for q in args.find]
    answers = run_find(questions, grid.configs(), list(grid.drams), list(grid.workloads),
                       evaluate)
    print(format_answers(answers))
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "find.json"
    path.write_text(json.dumps({"answers": answers, "backend": options.backend,
                                "grid": [c.spec for c in grid.configs()],
                                "wall_seconds": time.perf_counter() - t0}, indent=1) + "\n")
    print(f"{time.perf_counter() - t0:.0f} s wall; wrote {path}")
    return 0
