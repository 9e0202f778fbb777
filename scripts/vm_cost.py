"""The cost of device virtual memory on the performance model (README "Device virtual memory").

    .venv/bin/python scripts/vm_cost.py [--dram ideal lat100] [--json OUT]

Runs the 512^3 GEMM (``linear_with_stats``, operands of :func:`sw.perf.corpus.linear_operands`,
seed 0) and the main job (``run_attention_job``, MiniLM block, L=32) on the default 8x8
(16-entry TLBs) with ``virtual_memory`` off and on, per DRAM preset, and prints per row the
cycles (the GEMM's launch-to-completion cycles, the job's stage-table total), the relative
cost and the ``tlb.*`` counter deltas of the translated run.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from hw.config import NPUConfig
from sw.dram import DramTiming
from sw.jobs.minilm_block import run_attention_job
from sw.kernels.linear import linear_with_stats
from sw.perf import PerfBackend
from sw.perf.corpus import linear_operands
from sw.runtime import Device


def _gemm(dram: DramTiming, vm: bool) -> tuple[int, dict]:
    dev = Device(PerfBackend(NPUConfig(), dram=dram), virtual_memory=vm)
    ops = linear_operands(np.random.default_rng(0), 512, 512, 512)
    before = dev.counters()
    _, st = linear_with_stats(dev, *ops)
    delta = dev.counters() - before
    return st.cycles, {k: v for k, v in delta.items() if k.startswith("tlb.") and v}


def _job(dram: DramTiming, vm: bool) -> tuple[int, dict]:
    r = run_attention_job(PerfBackend(NPUConfig(), dram=dram), config={}, seq_len=32,
                          virtual_memory=vm)
    assert r["bit_exact"]
    total = next(s["cycles"] for s in r["stages"] if s["name"] == "total")
    return total, {k: v for k, v in r.get("tlb", {}).items() if v}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dram", nargs="+", default=["ideal", "lat100"])
    p.add_argument("--json")
    args = p.parse_args()
    rows = []
    for name, run in (("GEMM 512^3", _gemm), ("MiniLM block, L=32", _job)):
        for preset in args.dram:
            dram = DramTiming.parse(preset)
            off, _ = run(dram, False)
            on, tlb = run(dram, True)
            row = {"workload": name, "dram": preset, "off": off, "translated": on,
                   "cost_percent": round(100 * (on - off) / off, 3), "tlb": tlb}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
