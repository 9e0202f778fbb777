"""``npu``: the command-line front end of the co-design kit.

``npu run``      runs the main job: layer 0's Q, K and V projections of all-MiniLM-L6-v2 on
                 real text, on the co-simulated RTL (or the functional model), and prints cycles,
                 MAC utilization, SQNR/cosine against float32 and bit-exactness per kernel.
``npu verilog``  writes the NPU's Verilog for a configuration.
"""

import argparse
import json
import sys
import time
from pathlib import Path

from hw.config import NPUConfig

__all__ = ["main", "parse_config"]


def parse_config(text: str) -> NPUConfig:
    """Parse ``ROWSxCOLS[,key=value...]``, e.g. ``8x8`` or ``4x4,spad_rows=1024``.

    Raises
    ------
    argparse.ArgumentTypeError
        On a malformed string or a value :class:`NPUConfig` rejects (the message says which).
    """
    try:
        size, *rest = text.split(",")
        rows, cols = (int(v) for v in size.lower().split("x"))
        extra = {}
        for item in rest:
            key, value = item.split("=")
            if key not in NPUConfig.__dataclass_fields__:
                raise ValueError(f"unknown configuration parameter {key!r}; known: "
                                 + ", ".join(NPUConfig.__dataclass_fields__))
            extra[key] = int(value, 0)
        return NPUConfig(rows=rows, cols=cols, **extra)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"bad configuration {text!r}: {e}") from e


def _cmd_run(args: argparse.Namespace) -> int:
    from sw.workload import format_report, run_qkv_job

    job_args = {"text": args.text, "config": args.config.to_dict()}
    start = time.perf_counter()
    if args.backend == "model":
        from sw.model import ModelBackend
        result = run_qkv_job(ModelBackend(args.config), **job_args)
    else:
        from cosim.harness import run_on_rtl
        print(f"co-simulating the {args.config.name} NPU on Verilator "
              f"(first run builds it, about a minute)...", file=sys.stderr)
        result = run_on_rtl(args.config, "sw.workload:run_qkv_job", job_args,
                            waves=args.waves, name="npu_run")
    result["wall_seconds"] = round(time.perf_counter() - start, 2)
    print(format_report(result))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.json}")
    ok = all(k["bit_exact"] for k in result["kernels"])
    return 0 if ok else 1


def _cmd_verilog(args: argparse.Namespace) -> int:
    from cosim.build import generate_verilog

    for config in args.config:
        path = generate_verilog(config, out_dir=Path(args.out) / config.name)
        print(path)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="npu", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser(
        "run", help="run MiniLM layer-0 Q/K/V projections on the NPU",
        description="Quantize layer 0 of all-MiniLM-L6-v2 (scales calibrated on other text), "
                    "run its Q, K and V projections as int8 linear kernels on the NPU and "
                    "report, per kernel: cycles, MAC utilization (useful MACs / (cycles x "
                    "PEs)), SQNR (dB) and cosine against the float32 projections, and whether "
                    "the device output equals the golden integer model bit for bit. "
                    "Exit status 1 if any kernel is not bit-exact.")
    run.add_argument("--backend", choices=("rtl", "model"), default="rtl",
                     help="rtl: cocotb + Verilator co-simulation of the generated Verilog "
                          "(default); model: the instant functional ISA model")
    run.add_argument("--config", type=parse_config, default=NPUConfig(),
                     help="array size and parameters, ROWSxCOLS[,key=value...] "
                          "(default 8x8; e.g. 4x4 or 16x16,spad_rows=8192)")
    run.add_argument("--text", default=None,
                     help="evaluation sentence (default: a built-in sentence that is not "
                          "part of the calibration text)")
    run.add_argument("--json", metavar="PATH", help="also write the figures as JSON to PATH")
    run.add_argument("--waves", action="store_true",
                     help="write a VCD of the whole run to waves/npu_run.vcd (rtl only; "
                          "large and about 2x slower)")
    run.set_defaults(func=_cmd_run)

    ver = sub.add_parser("verilog", help="write the NPU's Verilog for one or more configurations",
                         description="Generate Verilog with amaranth.back.verilog into "
                                     "OUT/<config name>/npu.v (top module 'npu').")
    ver.add_argument("--config", type=parse_config, nargs="+", default=[NPUConfig()],
                     help="one or more configurations (default 8x8)")
    ver.add_argument("--out", default="build/verilog", help="output folder (default %(default)s)")
    ver.set_defaults(func=_cmd_verilog)

    args = parser.parse_args(argv)
    if getattr(args, "waves", False) and args.backend != "rtl":
        parser.error("--waves needs --backend rtl")
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
