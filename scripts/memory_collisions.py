"""Same-cycle same-row collisions between a write and a read of a busy engine on the tile's
scratchpad and accumulator (the evidence behind ``no_rw_check`` in :data:`hw.local_mem.RAM_ATTRS`).

    .venv/bin/python scripts/memory_collisions.py --config 8x8 --dram bp50 --seed 50000 --streams 25
    .venv/bin/python scripts/memory_collisions.py --vcd waves/npu_run.vcd

Runs a batch of fuzz streams (``cosim.fuzz.jobs:fuzz_batch``, no shrinking) on the RTL with a
VCD, or reads a given VCD of the NPU, and counts per (read port, write port) the rising clock
edges at which the memory's write port writes a row (its first writer with ``en`` and, if it
has one, ``ready``; :func:`hw.tile.compute_tile.write_arbiter`) while a non-transparent read
port of a busy engine (its ``engine.busy``; the DMA's read ports always count) has ``en`` and
the same address. An idle engine's read port keeps ``en`` at 1 and its data is not used. Exit
1 if there is a collision.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from cosim.waves.signals import find_npu_scope
from cosim.waves.vcd import ClockSampler, read_header, stream

#: Writers of each memory in the arbiter's priority order: (name, en, addr, ready or None).
WRITERS = {
    "acc": [("matrix", "matrix.acc_wr__en", "matrix.acc_wr__addr", None),
            ("vector", "vector.acc_wr__en", "vector.acc_wr__addr", "vector.acc_wr__ready"),
            ("dma", "acc_w__en", "acc_w__addr", "acc_w__ready")],
    "spad": [("vector", "vector.spad_wr__en", "vector.spad_wr__addr", None),
             ("dma", "spad_w__en", "spad_w__addr", "spad_w__ready")],
}
#: Non-transparent read ports: (name, en, addr, the engine's busy or None).
READERS = {
    "acc": [("dma", "acc_r__en", "acc_r__addr", None),
            ("vector", "vector.acc_rd__en", "vector.acc_rd__addr", "vector.engine__busy")],
    "spad": [("matrix activations", "matrix.spad_rd__en", "matrix.spad_rd__addr",
              "matrix.engine__busy"),
             ("matrix weights", "matrix.spad_w_rd__en", "matrix.spad_w_rd__addr",
              "matrix.engine__busy"),
             ("dma", "spad_r__en", "spad_r__addr", None),
             ("vector", "vector.spad_rd__en", "vector.spad_rd__addr", "vector.engine__busy")],
}


def count_collisions(vcd: Path) -> tuple[int, Counter, dict]:
    """``(cycles, collisions, first cycle of each)`` of a VCD of the NPU; keys
    ``(memory, reader, writer)``."""
    header = read_header(vcd)
    npu = find_npu_scope(header)
    tile = npu + ".tile."
    names = {n for ports in (*WRITERS.values(), *READERS.values()) for p in ports
             for n in p[1:] if n}
    var = {n: header.find(tile + n) for n in names}
    clock = header.get(f"{npu}.clk") or header.find(f"{npu.rsplit('.', 1)[0]}.clk")
    counts: Counter = Counter()
    first: dict = {}

    def on_cycle(cycle: int, _time: int, values: dict) -> None:
        def v(name):
            return 1 if name is None else (values.get(var[name].id) or 0)
        for mem, writers in WRITERS.items():
            hit = next((w for w in writers if v(w[1]) and v(w[3])), None)
            if hit is None:
                continue
            row = v(hit[2])
            for reader, en, addr, busy in READERS[mem]:
                if v(en) and v(busy) and v(addr) == row:
                    key = (mem, reader, hit[0])
                    counts[key] += 1
                    first.setdefault(key, cycle)

    sampler = ClockSampler(clock, var.values(), on_cycle)
    stream(vcd, header, [clock, *var.values()], sampler.step, with_previous=True)
    return sampler.cycles, counts, first


def main(argv: list[str] | None = None) -> int:
    from cosim.cli.args import int_at_least, parse_config, parse_dram

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vcd", type=Path, help="read this VCD of the NPU instead of running "
                    "fuzz streams")
    ap.add_argument("--config", type=parse_config, default="8x8",
                    help="configuration of the fuzz streams (default 8x8)")
    ap.add_argument("--dram", type=parse_dram, default="ideal",
                    help="DRAM timing of the fuzz streams (default ideal)")
    ap.add_argument("--seed", type=int_at_least(0), default=50000,
                    help="first seed (default 50000)")
    ap.add_argument("--streams", type=int_at_least(1), default=25,
                    help="fuzz streams, one simulation with a VCD (default 25; the first run "
                    "of a configuration builds its traced simulator, minutes)")
    args = ap.parse_args(argv)
    if args.vcd is not None and not args.vcd.is_file():
        ap.error(f"--vcd {args.vcd}: no such file")
    vcd, what = args.vcd, f"{args.vcd}"
    if vcd is None:
        from cosim.tb.harness import run_job
        seeds = list(range(args.seed, args.seed + args.streams))
        run = run_job(args.config, "cosim.fuzz.jobs:fuzz_batch",
                      {"seeds": seeds, "shrink_failures": False}, waves=True,
                      name=f"collisions_{args.seed}", dram=args.dram)
        vcd = Path(run.waves)
        what = (f"{args.streams} fuzz streams (seeds {seeds[0]}..{seeds[-1]}) on "
                f"{args.config.name} under DRAM {args.dram.name}")
    try:
        cycles, counts, first = count_collisions(vcd)
    finally:
        if args.vcd is None:        # the VCD is large; its sidecar goes with it
            vcd.unlink(missing_ok=True)
            vcd.with_suffix(".waves.json").unlink(missing_ok=True)
    print(f"{what}: {cycles} cycles, {sum(counts.values())} collisions")
    for (mem, reader, writer), n in sorted(counts.items()):
        print(f"  {mem}: {reader} read meets {writer} write: {n} (first at cycle "
              f"{first[(mem, reader, writer)]})")
    return 1 if counts else 0


if __name__ == "__main__":
    sys.exit(main())
