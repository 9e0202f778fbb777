"""npu: the command-line front end of the co-design kit.

npu run          runs the main job: all-MiniLM-L6-v2's whole six-layer forward pass on real
                 text (``--layers N`` fewer; ``--block`` layer 0's attention block alone), on
                 the co-simulated RTL, the performance model (``--backend perf``, seconds,
                 same cycles) or the functional model, under a DRAM timing (``--dram``), and
                 prints cycles and MAC utilization per layer and operation, the sentence
                 embedding's cosine against float32 and bit-exactness.
npu verilog      writes the NPU's Verilog, a file list and a JSON description per configuration
                 (``--lint``: Verilator lint and Icarus compile).
npu area         FPGA cost per configuration: LUT4/FF/DSP/BRAM, Fmax, critical block.
npu board        the NPU on a ULX3S 85F, through to a bitstream.
npu bench        GEMM roofline sweep, attention utilization, co-simulation speed, build time;
                 ``--validate``: the performance model against the RTL, counter by counter.
npu sweep        designs x DRAM timings x workloads on the performance model: cycles, area,
                 SQNR, RTL checks, Pareto front; ``--find`` answers requirement questions.
npu fuzz         differential fuzzer: seeded streams on the functional model, the performance
                 model and the RTL, compared; failures shrunk to reproducer files.
npu waves        summarize, cut, group and export VCD waveforms of runs.
"""

import argparse
import contextlib
import json
import os
import sys
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

from cosim.cli.args import (
    CONFIG_HELP,
    DRAM_HELP,
    check_dram_arg,
    check_json_arg,
    dram_line,
    help_text,
    output_path,
    parse_config,
    parse_dram,
    seq_len,
)
from cosim.tb.harness import CosimError, CosimJobError
from hw.config import NPUConfig
from sw.backend import BackendError
from sw.dram import DramTiming
from sw.runtime import NPUError, OutOfMemoryError

__all__ = ["main", "build_parser", "parse_config"]


def _layers(most: int):
    """The ``--layers`` type: a layer count in ``0..most``."""
    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            n = -1
        if not 0 <= n <= most:
            raise argparse.ArgumentTypeError(f"{text!r}: expected a layer count in 0..{most}")
        return n
    return parse


def _blocks(text: str) -> list[str]:
    """``--waves-scope``: comma-separated block names (checked against the design's by
    :func:`_check_waves_scope`, once the configuration is known)."""
    names = [n.strip() for n in text.split(",")]
    if not all(names) or any(not n.replace(".", "").replace("_", "").replace("$", "").isalnum()
                             for n in names):
        raise argparse.ArgumentTypeError(f"{text!r}: expected block names such as "
                                         "dma,cmdproc")
    return names


def _run_job(args: argparse.Namespace):
    """The job of ``npu run``: its module, function name, report formatter and arguments."""
    from sw.jobs import encoder, minilm_block

    job_args = {"text": args.text, "config": args.config.to_dict()}
    workload = minilm_block
    if args.qkv_only:
        job, fmt = "run_qkv_job", workload.format_report
    elif args.block:
        job, fmt = "run_attention_job", workload.format_attention_report
        job_args |= {"seq_len": args.seq_len, "causal": args.causal, "fill": args.fill,
                     "weights": args.weights, "activations": args.activations}
        if args.vm:
            job_args["virtual_memory"] = True
    else:
        workload = encoder
        job, fmt = "run_encoder_job", encoder.format_encoder_report
        job_args |= {"seq_len": args.seq_len, "fill": args.fill, "n_layers": args.layers}
    if args.trace or args.trace_png:
        job_args["profile"] = True
    return workload, job, fmt, job_args


def _cmd_run(args: argparse.Namespace) -> int:
    workload, job, fmt, job_args = _run_job(args)
    start = time.perf_counter()
    if args.backend == "model":
        from sw.model import ModelBackend
        result = getattr(workload, job)(ModelBackend(args.config), **job_args)
    elif args.backend == "perf":
        from sw.perf import PerfBackend
        backend = PerfBackend(args.config, dram=args.dram)
        result = getattr(workload, job)(backend, **job_args)
        result["model_seconds"] = round(backend.sim_seconds, 2)
        result["modelled_cycles"] = backend.cycle
    else:
        from cosim.build import sim_build_state
        from cosim.tb.harness import run_job
        state = sim_build_state(args.config, waves=args.waves, waves_format=args.waves_format)
        build = {"built": "",
                 "verilog": " (the hardware sources changed: regenerating its Verilog, about "
                            "10 s, then rebuilding its simulator only if the Verilog changed)",
                 "build": " (building its simulator first, for this configuration"
                          f"{', traced' if args.waves else ''}: one to two minutes)"}[state]
        print(f"co-simulating the {args.config.spec} NPU on Verilator{build}...",
              file=sys.stderr)
        run = run_job(args.config, f"{workload.__name__}:{job}", job_args,
                      waves=args.waves, name="npu_run", waves_window=args.waves_window,
                      dram=args.dram, waves_format=args.waves_format,
                      waves_scope=args.waves_scope)
        result = run.result
        if run.waves is not None:
            result["waves"] = _waves_line(run)
    result["wall_seconds"] = round(time.perf_counter() - start, 2)
    result["dram"] = args.dram.to_dict()
    if "profile" in result:
        from sw.runtime.profile_export import write_outputs
        print(write_outputs(result.pop("profile"), args.trace, args.trace_png))
    print(dram_line(args.dram, args.backend))
    print(fmt(result))
    if "waves" in result:
        print(result["waves"])
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.json}")
    ok = (all(k["bit_exact"] for k in result.get("kernels", []))
          and result.get("bit_exact", True))
    return 0 if ok else 1


def _waves_line(run) -> str:
    """Where the waveform of ``npu run`` went and which absolute cycles it holds."""
    info = run.waves_info or {}
    cycles = info.get("cycles")
    span = f"absolute cycles {cycles[0]}..{cycles[1]}" if cycles else "no cycle (empty)"
    window = info.get("window") or {}
    if "kernel" in window:
        what = f"kernel {window['kernel']}:{window['occurrence']}"
    elif window:
        what = f"cycles {window['from']}..{'end' if window['to'] is None else window['to']}"
    else:
        what = "the whole run"
    if info.get("scope"):
        what += f", blocks {','.join(info['scope'])}"
    size = run.waves.stat().st_size / 1e6
    from cosim.waves import foreign_gtkw, npu_gtkw
    gtkw, ours = run.waves.with_suffix(".gtkw"), npu_gtkw(run.waves)
    rewritten = info.get("gtkw", [])
    if foreign_gtkw(gtkw):          # saved from GTKWave: kept, and npu waves gtkw keeps it
        groups = (f"{ours}, rewritten for this waveform" if str(ours) in rewritten
                  else f"npu waves gtkw {run.waves} -o {ours}")
        save = (f"{gtkw} (not written by npu waves gtkw: kept; the NPU's signal groups: "
                f"{groups})")
    elif rewritten:
        save = f"{', '.join(rewritten)} (rewritten for this waveform)"
    else:
        save = f"npu waves gtkw {run.waves}"
    return (f"waveform: {run.waves} ({info.get('format', 'vcd').upper()}, {size:.1f} MB, "
            f"{what}): {span}; save file: {save}")


def _add_run(sub: argparse._SubParsersAction) -> None:
    from sw.models.attention_block import MAX_POSITIONS
    from sw.models.encoder import N_LAYERS

    run = sub.add_parser(
        "run", help="run all-MiniLM-L6-v2's forward pass (or one block) on the NPU",
        description="Quantize all-MiniLM-L6-v2 (scales calibrated on other text, never on the "
                    "evaluation text) and run its whole forward pass on the NPU as command "
                    "streams: embedding LayerNorm, six layers of Q/K/V projections, attention "
                    "heads, output projection, residual + LayerNorm, FFN with GELU, residual "
                    "+ LayerNorm (--layers N: a prefix); the host pools and L2-normalises. "
                    "Reports per layer and per operation: cycles, MACs and utilization "
                    "(useful MACs / (cycles x PEs)); the sentence-embedding cosine against "
                    "float32; whether every tensor equals the golden integer model bit for "
                    "bit. --block runs layer 0's self-attention block alone (per stage: "
                    "cycles, SQNR, cosine). Exit status 1 if anything is not bit-exact.")
    run.add_argument("--backend", choices=("rtl", "perf", "model"), default="rtl",
                     help="rtl: cocotb + Verilator co-simulation of the generated Verilog "
                          "(default); perf: the event-driven performance model (sw.perf: the "
                          "same results and counters as the RTL in seconds, validated against "
                          "it by npu bench --validate); model: the instant, untimed "
                          "functional ISA model")
    run.add_argument("--config", type=parse_config, default=NPUConfig(),
                     help=f"array size and parameters, {CONFIG_HELP} "
                          "(default 8x8; e.g. 4x4 or 16x16,spad_rows=8192)")
    run.add_argument("--text", default=None,
                     help="evaluation sentence (default: a built-in sentence that is not "
                          "part of the calibration text)")
    run.add_argument("--seq-len", type=seq_len, default=None, metavar="L",
                     help=f"sequence length in tokens, 1..{MAX_POSITIONS}: the tokenized "
                          "text is truncated, or repeated (see --fill) to L tokens (default 32)")
    run.add_argument("--fill", choices=("repeat", "pad"), default=None,
                     help="reach --seq-len by repeating the text (default) or by [PAD] tokens "
                          "masked as keys (key-padding mask)")
    run.add_argument("--causal", action="store_true",
                     help="with --block: causal attention mask")
    run.add_argument("--vm", action="store_true",
                     help="with --block: run in a device context: virtual buffers, every "
                          "DMA translated by the TLBs (hw.isa.vm)")
    run.add_argument("--weights", choices=("int8", "int4", "mxint8"), default="int8",
                     help="with --block: number format of the four projections' weights: "
                          "int8 (per "
                          "channel), int4 (per channel, packed two per byte), mxint8 (OCP MX, "
                          "needs a configuration with mx=1) (default %(default)s)")
    run.add_argument("--activations", choices=("int8", "mxint8"), default="int8",
                     help="with --block: number format of the Q/K/V projections' input: "
                          "int8 (per tensor) "
                          "or mxint8 (with --weights mxint8) (default %(default)s)")
    run.add_argument("--layers", type=_layers(N_LAYERS), default=N_LAYERS, metavar="N",
                     help=f"run the first N encoder layers (0..{N_LAYERS}; 0: the embedding "
                          "LayerNorm only) (default %(default)s)")
    run.add_argument("--block", action="store_true",
                     help="run only layer 0's self-attention block (the earlier main job; "
                          "with --causal, --weights, --activations, --waves-kernel)")
    run.add_argument("--qkv-only", action="store_true",
                     help="run only layer 0's Q/K/V projections (the first main job)")
    run.add_argument("--json", type=output_path, metavar="PATH",
                     help="also write the figures as JSON to PATH (missing folders are made)")
    run.add_argument("--dram", type=parse_dram, default=DramTiming(), metavar="PRESET|k=v,...",
                     help=DRAM_HELP)
    run.add_argument("--waves", action="store_true",
                     help="write a VCD of the whole run to waves/npu_run.vcd (rtl only). Large and "
                          "slow: about 0.85 GB for --block at --seq-len 8 (the projections "
                          "dominate); prefer a window (--waves-kernel, --waves-from/--waves-to)")
    run.add_argument("--waves-kernel", metavar="NAME[:N]",
                     help="trace only the N-th (from 1, default 1) run of kernel NAME: query, key, "
                          "value, output (projections), scores, softmax, context (attention, "
                          "head by head); implies --waves")
    run.add_argument("--waves-from", type=int, metavar="CYCLE",
                     help="trace from this absolute clock cycle; implies --waves")
    run.add_argument("--waves-to", type=int, metavar="CYCLE",
                     help="trace up to this absolute clock cycle (default: the end); "
                          "implies --waves")
    run.add_argument("--waves-format", choices=("vcd", "fst"), default="vcd",
                     help="waveform format of a traced run (default vcd); fst is smaller "
                          "(see the README) and its build needs liblz4-dev")
    run.add_argument("--waves-scope", type=_blocks, metavar="BLOCK[,BLOCK...]",
                     help="trace only these blocks of the NPU (e.g. dma,cmdproc; dotted "
                          "paths such as dma.load_mover), plus its ports and named probes; "
                          "implies --waves")
    run.add_argument("--trace", type=output_path, metavar="FILE.json",
                     help="write a Perfetto trace of the run, no VCD needed (timed backends): "
                          "the engines' hardware command trace, one track per engine, a slice "
                          "per command, the kernel regions on top; 1 us in the viewer = 1 cycle. "
                          "On the RTL the host reads the engines' trace FIFOs over the CSR port "
                          "while it waits: the whole forward pass takes about 2.7x as long "
                          "(171 s against 63 s), --block about 1.4x; --backend perf about 1.3x")
    run.add_argument("--trace-png", type=output_path, metavar="FILE.png",
                     help="draw the same timeline to a PNG (timed backends)")
    run.set_defaults(func=_cmd_run, check_args=partial(_check_run_args, run))


#: The distribution this kit is installed as (``[project] name`` in pyproject.toml).
DISTRIBUTION = "npu-kit"


def _version() -> str:
    """The installed kit's version (its package metadata)."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return f"(unknown: {DISTRIBUTION} is not installed; pip install -e .)"


def build_parser() -> argparse.ArgumentParser:
    """The ``npu`` argument parser: ``run``, then the FPGA subcommands (:mod:`cosim.cli.fpga`),
    ``bench``, ``sweep``, ``fuzz`` and ``waves``."""
    from cosim.cli.bench import add_parser as add_bench_parser
    from cosim.cli.fpga import add_parsers as add_fpga_parsers
    from cosim.cli.fuzz import add_parser as add_fuzz_parser
    from cosim.cli.sweep import add_parser as add_sweep_parser
    from cosim.cli.waves import add_parser as add_waves_parser

    parser = argparse.ArgumentParser(
        prog="npu", description=help_text(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_add_run, add_fpga_parsers, add_bench_parser):
        add(sub)
    add_sweep_parser(sub)
    add_fuzz_parser(sub)
    add_waves_parser(sub)
    return parser


def _subcommand(parser: argparse.ArgumentParser,
                args: argparse.Namespace) -> argparse.ArgumentParser:
    """The innermost (sub)command parser that ``args`` chose (``npu waves cut``: its own)."""
    while True:
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)),
                   None)
        if sub is None or getattr(args, sub.dest, None) not in sub.choices:
            return parser
        parser = sub.choices[getattr(args, sub.dest)]


def main(argv: list[str] | None = None) -> int:
    """Run ``npu`` with ``argv`` (default ``sys.argv[1:]``); return the exit status.

    Bad arguments exit with status 2 and a one-line message before any work (argparse's
    ``SystemExit``); typed errors of the run itself print one line and return 2; ^C prints
    one line and returns 130; a reader of the output that has gone (``npu ... | head``)
    ends the run quietly with status 1, the rest of the output discarded.
    """
    try:
        try:
            return _main(argv)
        finally:
            sys.stdout.flush()      # a closed pipe shows here, not at the interpreter's exit
    except BrokenPipeError:
        # as Python's "Note on SIGPIPE" advises: stdout to devnull, so that the exit's own
        # flush does not fail again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 1


def _main(argv: list[str] | None) -> int:
    """:func:`main` but a closed standard output."""
    try:
        parser = build_parser()
        args, unknown = parser.parse_known_args(argv)
        if unknown:     # said by the subcommand, with its usage (argparse: the top level's)
            _subcommand(parser, args).error(f"unrecognized arguments: {' '.join(unknown)}")
        if hasattr(args, "check_args"):
            args.check_args(args)
    except KeyboardInterrupt:       # ^C while the arguments are checked (some load a model)
        print("npu: interrupted", file=sys.stderr)
        return 130
    try:
        return args.func(args)
    except BrokenPipeError:     # main's (it is an OSError, but no error of the run)
        raise
    except (ValueError, OSError, NPUError, BackendError) as e:
        # typed errors the user can act on: one line, no traceback; the runtime's own error
        # classes are named (what a caller would catch), Python's are not
        kind = f"{type(e).__name__}: " if isinstance(e, (NPUError, BackendError)) else ""
        hint = ""
        config = getattr(args, "config", None)
        if isinstance(e, OutOfMemoryError) and isinstance(config, NPUConfig):
            hint = f" (device DRAM: dram_bytes={config.dram_bytes}"
            with contextlib.suppress(ValueError):       # no larger DRAM the configuration takes
                hint += (f"; give a larger one in --config, e.g. "
                         f"{replace(config, dram_bytes=2 * config.dram_bytes).spec}")
            hint += ")"
        print(f"npu {args.command}: error: {kind}{e}{hint}", file=sys.stderr)
        return 2
    except CosimJobError as e:
        # the job failed inside the simulator: its error, and where the full traceback is
        print(f"npu {args.command}: error on the RTL: {e.error} (traceback in {e.log_path})",
              file=sys.stderr)
        return 2
    except CosimError as e:
        # the simulation could not run or ended without a result: one line, log path in it
        print(f"npu {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"npu {args.command}: interrupted", file=sys.stderr)
        return 130


#: Kernel names of ``npu run`` for ``--waves-kernel`` (``Device.region`` names in
#: sw/jobs/minilm_block.py and sw/kernels/attention.py).
PROJECTION_KERNELS = ("query", "key", "value")
ATTENTION_KERNELS = (*PROJECTION_KERNELS, "scores", "softmax", "context", "output")


def _check_run_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Reject bad ``npu run`` arguments before minutes of build and simulation."""
    check_dram_arg(parser, args)
    if args.qkv_only and args.block:
        parser.error("--qkv-only and --block exclude each other")
    _check_job_options(parser, args)
    args.waves_window = _waves_window(parser, args)
    whole = args.waves                  # --waves itself (a window or scope sets it too)
    if args.waves_window is not None or args.waves_scope:
        args.waves = True
    if args.waves_format != "vcd" and not args.waves:
        parser.error("--waves-format applies to a traced run (--waves, --waves-kernel, "
                     "--waves-from/--waves-to, --waves-scope)")
    if args.waves and args.backend != "rtl":
        given = [flag for flag, on in (("--waves", whole), ("--waves-kernel", args.waves_kernel),
                                       ("--waves-scope", args.waves_scope)) if on]
        given.append("--waves-from/--waves-to")
        parser.error(f"{given[0]}: tracing needs --backend rtl")
    if args.waves_scope:
        _check_waves_scope(parser, args)
    if (args.trace or args.trace_png) and args.backend == "model":
        parser.error("--trace and --trace-png need a timed backend (the functional model has "
                     "no cycles)")
    if args.text is not None and not args.text.strip():
        parser.error("--text is empty")
    if (args.weights == "mxint8" or args.activations == "mxint8") and not args.config.mx:
        parser.error(f"mxint8 needs the MX exponent stage: --config {args.config.spec},mx=1")
    if args.activations == "mxint8" and args.weights != "mxint8":
        parser.error("--activations mxint8 needs --weights mxint8")
    default_len = args.seq_len is None
    if not args.qkv_only:       # the attention block and the encoder
        if args.config.rows != args.config.cols:
            parser.error(f"attention needs a square array (the transposed K load), got "
                         f"{args.config.rows}x{args.config.cols}; use --qkv-only for a "
                         "non-square array")
        args.seq_len = args.seq_len or 32
        args.fill = args.fill or "repeat"
    _check_job(parser, args, default_len=default_len)
    check_json_arg(parser, args)


def _check_waves_scope(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``--waves-scope``'s blocks against the design's (those of its Verilog,
    :func:`cosim.tb.harness.check_waves_scope`), before the simulator's build: a typo fails at
    once, with the design's blocks."""
    from cosim.build import verilog_current
    from cosim.tb.harness import check_waves_scope
    if not verilog_current(args.config):
        print(f"generating the {args.config.spec} NPU's Verilog to check --waves-scope "
              "(about 10 s)...", file=sys.stderr, flush=True)
    try:
        check_waves_scope(args.config, args.waves_scope)
    except ValueError as e:
        parser.error(str(e))


#: The ``npu run`` options that only some jobs take: option -> the jobs (one home for the
#: "applies to" messages).
_JOB_OPTIONS = {"--seq-len": ("--block", "the encoder"), "--fill": ("--block", "the encoder"),
                "--causal": ("--block",), "--weights": ("--block",),
                "--activations": ("--block",), "--vm": ("--block",),
                "--layers": ("the encoder",), "--waves-kernel": ("--block", "--qkv-only")}


def _check_job_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse an option the chosen job (``--block``, ``--qkv-only`` or the encoder) does not
    take, naming the jobs that take it (:data:`_JOB_OPTIONS`); an option is given if its
    value is not the parser's default."""
    job = "--block" if args.block else "--qkv-only" if args.qkv_only else "the encoder"
    for flag, jobs in _JOB_OPTIONS.items():
        dest = flag[2:].replace("-", "_")
        if getattr(args, dest) != parser.get_default(dest) and job not in jobs:
            parser.error(f"{flag} applies to {' and '.join(jobs)}, not to {job}")


def _check_job(parser: argparse.ArgumentParser, args: argparse.Namespace, *,
               default_len: bool) -> None:
    """The job's own check of the configuration (the one it makes when it starts), here
    before the Verilator build and the calibration. A message about the sequence length
    ``L`` says that ``L`` is ``--seq-len`` (and its default if it was not given:
    ``default_len``)."""
    from sw.jobs import encoder, minilm_block
    from sw.runtime import check_dram

    def check(seq_len: int | None) -> None:
        if args.qkv_only or args.block:
            minilm_block.check_config(args.config, seq_len if args.block else None,
                                      weights=args.weights, activations=args.activations)
        else:
            encoder.check_config(args.config, seq_len, args.layers)
    try:
        check(args.seq_len)
        # a DRAM smaller than the default's (which holds the jobs at their default sizes):
        # the job's need measured on the functional model, seconds instead of a failure
        # after the Verilator build (the other backends fail as fast by themselves)
        if args.backend == "rtl" and args.config.dram_bytes < NPUConfig().dram_bytes:
            workload, job, _, job_args = _run_job(args)
            job_args.pop("profile", None)
            print(f"checking that {_JOB_NAMES[job]} fits dram_bytes={args.config.dram_bytes} "
                  "on the functional model (below the default DRAM; seconds)...",
                  file=sys.stderr, flush=True)
            check_dram(args.config, _JOB_NAMES[job], lambda backend, config: getattr(
                workload, job)(backend, **job_args | {"config": config.to_dict()}))
    except ValueError as e:
        note = ""
        if f"L={args.seq_len}" in str(e):
            note = f"L: --seq-len{f', {args.seq_len} by default' if default_len else ''}"
            largest = _largest_len(check)
            if largest is not None and largest < args.seq_len:
                note += f"; the largest L {args.config.spec}'s local memories take is {largest}"
            note = f" ({note})"
        parser.error(f"{e}{note}")


def _largest_len(check) -> int | None:
    """The largest sequence length (up to MiniLM's positions) that the job's configuration
    check ``check(L)`` accepts; None if it accepts none."""
    from sw.models.attention_block import MAX_POSITIONS
    for length in range(MAX_POSITIONS, 0, -1):
        with contextlib.suppress(ValueError):
            check(length)
            return length
    return None


#: What ``npu run``'s jobs are called in messages.
_JOB_NAMES = {"run_qkv_job": "the Q/K/V projection job",
              "run_attention_job": "the attention block", "run_encoder_job": "the encoder"}


def _waves_window(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict | None:
    """The trace window of ``--waves-kernel`` or ``--waves-from/--waves-to``; None without
    one (the whole run if ``--waves``, else no trace)."""
    if args.waves_kernel is not None:
        if args.waves_from is not None or args.waves_to is not None:
            parser.error("--waves-kernel and --waves-from/--waves-to exclude each other")
        name, _, nth = args.waves_kernel.partition(":")
        if not name or (nth and (not nth.isdigit() or int(nth) < 1)):
            parser.error(f"--waves-kernel {args.waves_kernel}: expected NAME or NAME:N "
                         "with N >= 1")
        kernels = PROJECTION_KERNELS if args.qkv_only else ATTENTION_KERNELS
        if name not in kernels:
            parser.error(f"--waves-kernel {args.waves_kernel}: no kernel {name!r} in this "
                         f"run; kernels: {', '.join(kernels)}")
        return {"kernel": name, "occurrence": int(nth or 1)}
    if args.waves_from is not None or args.waves_to is not None:
        first = args.waves_from or 0
        if first < 0 or (args.waves_to is not None and args.waves_to <= first):
            to = "no end" if args.waves_to is None else args.waves_to
            parser.error(f"--waves-from/--waves-to: need 0 <= from < to, got from {first}, "
                         f"to {to}")
        return {"from": first, "to": args.waves_to}
    return None


if __name__ == "__main__":
    sys.exit(main())
