"""``npu bench``: GEMM roofline sweep, attention utilization, co-simulation speed and build
time (:mod:`cosim.bench`); ``--validate``, the performance model against the RTL
(:mod:`cosim.bench.validate`)."""

import argparse
import sys
from functools import partial
from pathlib import Path

from cosim.cli.args import (
    DRAM_HELP,
    attention_len,
    check_dram_arg,
    check_json_arg,
    dram_line,
    gemm_shape,
    int_at_least,
    output_path,
    parse_config,
    parse_dram,
)
from hw.config import NPUConfig
from sw.dram import DramTiming

__all__ = ["add_parser"]


def _cmd_bench(args: argparse.Namespace) -> int:
    from cosim.bench import FULL_SIZES, QUICK_SIZES, format_bench, run_bench

    if args.validate:
        return _cmd_validate(args)
    configs = args.configs or ([NPUConfig()] if args.quick
                               else [NPUConfig(), NPUConfig(rows=16, cols=16)])
    sizes = args.sizes or list(QUICK_SIZES if args.quick else FULL_SIZES)
    attn = args.attention_len if args.attention_len is not None else (32 if args.quick else 128)
    res = run_bench(configs, sizes, shapes=args.shapes or (), attention_len=attn,
                    backend=args.backend,
                    build_timing=not args.no_build_timing, native=not args.no_native,
                    progress=lambda m: print(m, file=sys.stderr, flush=True),
                    json_path=Path(args.json) if args.json else None, dram=args.dram,
                    roofline_path=Path(args.roofline) if args.roofline else None)
    print(dram_line(args.dram, args.backend))
    print(format_bench(res))
    for path in (args.json, args.roofline):
        if path:
            print(f"wrote {path}")
    exact = all(r["bit_exact"] for g in res["gemm"].values() for r in g["rows"])
    native = res["cosim_speed"]["verilator_cpp_harness"]
    replay_ok = not isinstance(native, dict) or native["replay_matches"]
    return 0 if (exact and replay_ok and (res["attention"] is None
                                           or res["attention"]["bit_exact"])) else 1


def _cmd_validate(args: argparse.Namespace) -> int:
    """``npu bench --validate``: :func:`cosim.bench.validate.main` with these options."""
    from cosim.bench import validate

    argv = ["--dram", args.dram.spec()]
    if args.quick:
        argv.append("--quick")
    if args.workloads:
        argv += ["--only", *args.workloads]
    if args.json:
        argv += ["--json", args.json]
    print(f"DRAM timing: {args.dram.describe()}", flush=True)
    return validate.main(argv)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``npu bench`` to the subcommands ``sub``."""
    be = sub.add_parser(
        "bench", help="GEMM roofline sweep, attention utilization, co-sim speed, build time",
        description="Square int8 GEMMs (double-buffered linear kernel) per size and "
                    "configuration with utilization, roofline bound and engine busy counters; "
                    "the MiniLM attention block; simulated cycles per second under cocotb and "
                    "its ratio to a pure Verilator C++ replay of the same run; clean and "
                    "cached Verilator build time (see cosim/bench). Exit 1 if a result is "
                    "not bit-exact or the replay does not match.")
    be.add_argument("--quick", action="store_true",
                    help="sizes 64 128 on 8x8, attention at L=32 (unless given)")
    be.add_argument("--sizes", type=int_at_least(1), nargs="+", metavar="N",
                    help="GEMM sizes M=K=N (default 64 128 256 512)")
    be.add_argument("--shapes", type=gemm_shape, nargs="+", metavar="M,K,N",
                    help="further GEMMs after the square sizes, e.g. 1,384,1536 (a GEMV)")
    be.add_argument("--configs", type=parse_config, nargs="+", metavar="CFG",
                    help="configurations (default 8x8 16x16); attention runs on the first")
    be.add_argument("--attention-len", type=attention_len, metavar="L",
                    help="attention block sequence length (default 128, --quick 32; 0 skips)")
    be.add_argument("--backend", choices=("rtl", "perf", "model"), default="rtl",
                    help="rtl: co-simulation (default); perf: the performance model (no "
                         "co-simulation speed or build timing); model: the untimed functional "
                         "model (for testing the bench itself)")
    be.add_argument("--roofline", type=output_path, metavar="PNG",
                    help="also draw the measured GEMMs against the compute and memory roofs "
                         "of their configuration and DRAM timing (rtl and perf)")
    be.add_argument("--validate", action="store_true",
                    help="instead: validate the performance model against the RTL, counter "
                         "by counter, on the corpus of sw/perf/corpus.py (python -m "
                         "cosim.bench.validate; with --quick its quick subset, --workloads to "
                         "choose, --dram for both sides, --json for the document); exit 1 if "
                         "a counter is out of tolerance")
    be.add_argument("--workloads", nargs="+", metavar="NAME",
                    help="with --validate: only these corpus workloads")
    be.add_argument("--no-build-timing", action="store_true",
                    help="skip the clean/cached Verilator build timing")
    be.add_argument("--no-native", action="store_true",
                    help="skip the replay of the GEMM run in the pure Verilator C++ harness")
    be.add_argument("--json", type=output_path, metavar="PATH",
                    help="write the figures as JSON to PATH (rewritten after every step)")
    be.add_argument("--dram", type=parse_dram, default=DramTiming(), metavar="PRESET|k=v,...",
                    help=DRAM_HELP)
    be.set_defaults(func=_cmd_bench, check_args=partial(_check_bench_args, be))


def _check_bench_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Reject bad ``npu bench`` arguments before any build (``--json``'s folder, made by its
    check, last)."""
    _check_bench_flags(parser, args)
    check_json_arg(parser, args)


def _check_bench_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.validate:
        given = [flag for flag, v in (("--sizes", args.sizes), ("--configs", args.configs),
                                      ("--attention-len", args.attention_len),
                                      ("--roofline", args.roofline),
                                      ("--backend", args.backend != "rtl" or None))
                 if v is not None]
        if given:
            parser.error(f"--validate runs its own corpus on rtl and perf: {', '.join(given)} "
                         f"{'does' if len(given) == 1 else 'do'} not apply")
        from cosim.bench.validate import WORKLOADS
        unknown = [n for n in args.workloads or [] if n not in WORKLOADS]
        if unknown:
            parser.error(f"--workloads: unknown {', '.join(unknown)}; known: "
                         f"{', '.join(WORKLOADS)}")
        args.backend = "perf"       # both sides run; the model must time the DRAM
        check_dram_arg(parser, args)
        return
    if args.workloads:
        parser.error("--workloads applies to --validate")
    check_dram_arg(parser, args)
    if args.configs:
        specs = [c.spec for c in args.configs]
        same = sorted({s for s in specs if specs.count(s) > 1})
        if same:        # the table and the JSON are keyed by configuration
            parser.error(f"--configs names {', '.join(same)} more than once (a key=value equal "
                         "to the default is the default)")
    first = (args.configs or [None])[0]
    if args.attention_len != 0 and first is not None and first.rows != first.cols:
        parser.error(f"the attention block runs on the first --configs, which must be square "
                     f"(not {first.spec}); --attention-len 0 skips it")
    if args.roofline and args.backend == "model":
        parser.error("--roofline needs a timed backend (rtl or perf)")
