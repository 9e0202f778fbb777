"""Writes VCD files shaped like a traced NPU run (``tb_top.u_npu...``) with known activity,
for the waveform tool tests: every figure of :func:`cosim.waves.summarize` can be computed
naively from the per-cycle table that produced the file.

The clock is high at 0 and rises every 10 time units (1 ns timescale, like the cosim
testbench's internal clock); the values of cycle ``c`` are set at time ``10 * c`` (after the
previous rising edge, as a flip-flop output would) and sampled at the rising edge
``10 * (c + 1)``.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

ENGINES = ("load", "store", "matrix", "vector")
CHANNELS = ("ar", "r", "aw", "w", "b")
BUS_BYTES = 8


def _ids() -> Iterator[str]:
    n = 0
    while True:
        k, s = n, ""
        while True:
            s += chr(33 + k % 94)
            k //= 94
            if not k:
                break
        yield s
        n += 1


def random_cycles(n: int, seed: int = 0, *, burst: int = 1) -> list[dict[str, int]]:
    """Per-cycle values: engine busy runs with a done pulse at the end, random AXI
    handshakes, ``wstrb`` and ``rid``. ``burst`` stretches busy runs (fewer commands)."""
    rng = random.Random(seed)
    rows: list[dict[str, int]] = []
    left = dict.fromkeys(ENGINES, 0)
    index = 0
    for _ in range(n):
        row: dict[str, int] = {}
        for e in ENGINES:
            take = left[e] == 0 and rng.random() < 0.2
            row[f"{e}__cmd__valid"] = int(take or rng.random() < 0.1)
            row[f"{e}__cmd__ready"] = int(left[e] == 0)
            if take:
                left[e] = rng.randint(1, 6) * burst
                row[f"{e}_queue.cur_opcode"] = ENGINES.index(e) + 1
                row[f"{e}_queue.cur_index"] = index
                index += 1
            row[f"{e}__busy"] = int(left[e] > 0 and not take)
            row[f"{e}__done"] = int(left[e] == 1 and not take)
            if left[e] and not take:
                left[e] -= 1
        for ch in CHANNELS:
            row[f"mem__{ch}valid"] = int(rng.random() < 0.5)
            row[f"mem__{ch}ready"] = int(rng.random() < 0.7)
        row["mem__wstrb"] = rng.choice([0xFF, 0x0F, 0x01, 0x80])
        row["mem__rid"] = rng.choice([0, 1])
        rows.append(row)
    return rows


WIDTHS = {"mem__wstrb": 8, "mem__rid": 4, "mem__rdata": 64}


def write_npu_vcd(path: Path, rows: list[dict[str, int]]) -> Path:
    """Write ``rows`` (from :func:`random_cycles`) as a VCD; returns ``path``."""
    ids = _ids()
    clk = next(ids)
    code: dict[str, str] = {}
    decl: list[str] = ["$version tests/npu_vcd_gen.py $end", "$timescale 1ns $end",
                       "$scope module tb_top $end", f"$var wire 1 {clk} clk $end",
                       "$scope module u_npu $end", f"$var wire 1 {clk} clk $end"]
    for ch in CHANNELS:
        for sig in ("valid", "ready"):
            name = f"mem__{ch}{sig}"
            code[name] = next(ids)
            decl.append(f"$var wire 1 {code[name]} {name} $end")
    for name, w in WIDTHS.items():
        code[name] = next(ids)
        decl.append(f"$var wire {w} {code[name]} {name} [{w - 1}:0] $end")
    decl.append("$scope module cmdproc $end")
    for e in ENGINES:
        for sig in ("busy", "done", "cmd__valid", "cmd__ready"):
            name = f"{e}__{sig}"
            code[name] = next(ids)
            decl.append(f"$var wire 1 {code[name]} {name} $end")
    # the processor also holds a queue's own port name, aliased to the load engine's busy
    decl.append(f"$var wire 1 {code['load__busy']} engine__busy $end")
    for e in ENGINES:
        decl.append(f"$scope module {e}_queue $end")
        for sig, w in (("cur_index", 32), ("cur_opcode", 8)):
            name = f"{e}_queue.{sig}"
            code[name] = next(ids)
            decl.append(f"$var wire {w} {code[name]} {sig} [{w - 1}:0] $end")
        decl.append(f"$var wire 1 {code[e + '__busy']} engine__busy $end")
        decl.append("$upscope $end")
    decl += ["$upscope $end", "$upscope $end", "$upscope $end", "$enddefinitions $end"]
    cur: dict[str, int] = {}
    with open(path, "w") as f:
        f.write("\n".join(decl) + "\n")
        for c in range(len(rows) + 1):
            out = [f"#{10 * c}"]
            if c == 0:
                out.append("$dumpvars")
            out.append(f"1{clk}")
            if c < len(rows):
                for name, v in rows[c].items():
                    if cur.get(name) != v:
                        cur[name] = v
                        w = WIDTHS.get(name, 32 if name.endswith("index") else
                                       8 if name.endswith("opcode") else 1)
                        out.append(f"{v}{code[name]}" if w == 1 else f"b{v:b} {code[name]}")
            if c == 0:
                out.append(f"b0 {code['mem__rdata']}")
                out.append("$end")
            f.write("\n".join(out) + "\n")
            if c < len(rows):
                f.write(f"#{10 * c + 5}\n0{clk}\n")
    return path


def expected_figures(rows: list[dict[str, int]], start: int = 0, end: int | None = None
                     ) -> dict[str, int]:
    """The figures :meth:`cosim.waves.Summary.figures` must report, computed naively."""
    rows = rows[start:end]
    out = {"cycles": len(rows)}
    for e in ENGINES:
        out[f"busy.{e}"] = sum(r[f"{e}__busy"] for r in rows)
        out[f"commands.{e}"] = sum(r[f"{e}__cmd__valid"] & r[f"{e}__cmd__ready"] for r in rows)
        out[f"retired.{e}"] = sum(r[f"{e}__done"] for r in rows)
    for ch in CHANNELS:
        out[f"axi.{ch}"] = sum(r[f"mem__{ch}valid"] & r[f"mem__{ch}ready"] for r in rows)
    out["bytes_read"] = BUS_BYTES * out["axi.r"]
    out["bytes_written"] = sum(bin(r["mem__wstrb"]).count("1") for r in rows
                               if r["mem__wvalid"] & r["mem__wready"])
    return out
