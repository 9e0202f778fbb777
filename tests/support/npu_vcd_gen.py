"""Writes VCD files shaped like a traced NPU run (``tb_top.u_npu...``) with known activity,
for the waveform tool tests: every figure of :func:`cosim.waves.summarize` can be computed
naively from the per-cycle table that produced the file.

The NPU scope holds what the tools read: the named probes ``probe_<engine>_<field>`` of
:data:`hw.top.PROBE_FIELDS` (with engine activity that follows the probes' rules: a command
is taken while idle, ``busy`` follows, ``done`` pulses in the last busy cycle, ``queue``,
``index`` and ``opcode`` hold from the take, ``sem_stall`` only while idle) and the AXI port.
With ``counters=True`` it also holds the optional counter sources (``csr.cycles``, the
resource stall copies ``stall_<engine>_<reason>``). A ``cmdproc`` scope holds decoys: nets
named like the command processor's internal ones (engine ports, queue FIFO heads) with
random values unrelated to the probes, so a tool that read them would get other figures.

The clock is high at 0 and rises every 10 time units (1 ns timescale, like the cosim
testbench's internal clock); the values of cycle ``c`` are set at time ``10 * c`` (after the
previous rising edge, as a flip-flop output would) and sampled at the rising edge
``10 * (c + 1)``.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

from hw.top import PROBE_FIELDS, RESOURCE_STALLS, probe_name, stall_source_name

ENGINES = ("load", "store", "matrix", "vector")
CHANNELS = ("ar", "r", "aw", "w", "b")
BUS_BYTES = 8
N_QUEUES = 3        # queues the generated commands come from
RESET_CYCLES = 3    # csr.cycles stays 0 for the first cycles, then counts
#: resource stall sources (signals of the NPU scope): name -> (engine, reason)
STALL_FIELDS = {stall_source_name(e, r): (e, r) for e, r in RESOURCE_STALLS}
#: decoy nets of the command processor (relative to ``cmdproc``): name -> width
DECOYS = {**{f"{e}__{s}": 1 for e in ENGINES for s in ("busy", "done", "cmd__valid",
                                                         "cmd__ready")},
          **{f"{e}_queue.fifo0.{s}": w for e in ENGINES for s, w in (("r_rdy", 1),
                                                                       ("r_data", 288))},
          "sem_stall": 4}
WIDTHS = {"mem__wstrb": 8, "mem__rid": 4, "mem__rdata": 64, "csr.cycles": 64,
          **{probe_name(e, f): w for e in ENGINES for f, w in PROBE_FIELDS.items()},
          **{f"cmdproc.{n}": w for n, w in DECOYS.items()}}


def p(engine: str, field: str) -> str:
    """Row key of a probe (its name in the NPU scope)."""
    return probe_name(engine, field)


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


def _engine_cycle(row: dict[str, int], e: str, left: int, rng: random.Random, burst: int,
                  index: int) -> tuple[int, int]:
    """One engine's probes in one cycle; returns (cycles left of its command, next index)."""
    take = left == 0 and rng.random() < 0.2
    row[p(e, "take")] = int(take)
    if take:
        left = rng.randint(1, 6) * burst
        row[p(e, "queue")] = rng.randrange(N_QUEUES)
        row[p(e, "index")] = index
        row[p(e, "opcode")] = ENGINES.index(e) + 1
        index = (index + rng.choice([1, 1, 1, 1 << 20])) % (1 << PROBE_FIELDS["index"])
    row[p(e, "busy")] = int(left > 0 and not take)
    row[p(e, "done")] = int(left == 1 and not take)
    row[p(e, "sem_stall")] = int(not row[p(e, "busy")] and not take and rng.random() < 0.4)
    if left and not take:
        left -= 1
    return left, index


def random_cycles(n: int, seed: int = 0, *, burst: int = 1, counters: bool = False
                  ) -> list[dict[str, int]]:
    """Per-cycle values: engine commands (probes), random AXI handshakes, ``wstrb`` and
    ``rid``, random decoys. ``burst`` stretches busy runs (fewer commands). ``counters``
    adds the counter sources (see the module docstring)."""
    rng = random.Random(seed)
    rows: list[dict[str, int]] = []
    left = dict.fromkeys(ENGINES, 0)
    index = 0
    for c in range(n):
        row: dict[str, int] = {}
        if counters:
            row["csr.cycles"] = max(0, c - RESET_CYCLES)
            for name in STALL_FIELDS:
                row[name] = int(rng.random() < 0.3)
        for e in ENGINES:
            if c == 0:                      # the record probes' reset values
                row.update({p(e, f): 0 for f in ("queue", "index", "opcode")})
            left[e], index = _engine_cycle(row, e, left[e], rng, burst, index)
        for ch in CHANNELS:
            row[f"mem__{ch}valid"] = int(rng.random() < 0.5)
            row[f"mem__{ch}ready"] = int(rng.random() < 0.7)
        row["mem__wstrb"] = rng.choice([0xFF, 0x0F, 0x01, 0x80])
        row["mem__rid"] = rng.choice([0, 1])
        for name, w in DECOYS.items():
            row[f"cmdproc.{name}"] = rng.getrandbits(w)
        rows.append(row)
    return rows


def _var(code: str, name: str, w: int) -> str:
    return f"$var wire {w} {code} {name} $end" if w == 1 else \
        f"$var wire {w} {code} {name} [{w - 1}:0] $end"


def _declarations(names: list[str], clk: str, ids: Iterator[str]) -> tuple[list[str],
                                                                            dict[str, str]]:
    """Header lines declaring the row names (dotted names become scopes of ``u_npu``), in
    alphabetical order within each scope as Verilator writes them (so the engines' probes
    are not in the order of :data:`ENGINES`)."""
    code = {name: next(ids) for name in names}
    decl = ["$version tests/support/npu_vcd_gen.py $end", "$timescale 1ns $end",
            "$scope module tb_top $end", f"$var wire 1 {clk} clk $end",
            "$scope module u_npu $end", f"$var wire 1 {clk} clk $end"]
    open_scopes: list[str] = []
    for name in sorted(names, key=lambda n: (n.split(".")[:-1], n)):  # as Verilator sorts
        *scopes, leaf = name.split(".")
        while open_scopes and open_scopes != scopes[:len(open_scopes)]:
            decl.append("$upscope $end")
            open_scopes.pop()
        for s in scopes[len(open_scopes):]:
            decl.append(f"$scope module {s} $end")
            open_scopes.append(s)
        decl.append(_var(code[name], leaf, WIDTHS.get(name, 1)))
    decl += ["$upscope $end"] * len(open_scopes)
    decl += ["$upscope $end", "$upscope $end", "$enddefinitions $end"]
    return decl, code


def write_npu_vcd(path: Path, rows: list[dict[str, int]]) -> Path:
    """Write ``rows`` (from :func:`random_cycles`) as a VCD; returns ``path``."""
    ids = _ids()
    clk = next(ids)
    names = list(rows[0]) + ["mem__rdata"]
    decl, code = _declarations(names, clk, ids)
    cur: dict[str, int] = {}
    with open(path, "w") as f:
        f.write("\n".join(decl) + "\n")
        for c in range(len(rows) + 1):
            out = [f"#{10 * c}"] + (["$dumpvars"] if c == 0 else []) + [f"1{clk}"]
            for name, v in (rows[c].items() if c < len(rows) else ()):
                if cur.get(name) != v:
                    cur[name] = v
                    out.append(f"{v}{code[name]}" if WIDTHS.get(name, 1) == 1
                               else f"b{v:b} {code[name]}")
            if c == 0:
                out += [f"b0 {code['mem__rdata']}", "$end"]
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
        out[f"busy.{e}"] = sum(r[p(e, "busy")] for r in rows)
        out[f"commands.{e}"] = sum(r[p(e, "take")] for r in rows)
        out[f"retired.{e}"] = sum(r[p(e, "done")] for r in rows)
        out[f"stall.{e}.sem"] = sum(r[p(e, "sem_stall")] for r in rows)
    out["dma_busy"] = sum(r[p("load", "busy")] | r[p("store", "busy")] for r in rows)
    out["overlap"] = sum((r[p("load", "busy")] | r[p("store", "busy")]) & r[p("matrix", "busy")]
                         for r in rows)
    if rows and "csr.cycles" in rows[0]:
        for name, (e, reason) in STALL_FIELDS.items():
            out[f"stall.{e}.{reason}"] = sum(r[name] & r[p(e, "busy")] for r in rows)
    for ch in CHANNELS:
        out[f"axi.{ch}"] = sum(r[f"mem__{ch}valid"] & r[f"mem__{ch}ready"] for r in rows)
    out["bytes_read"] = BUS_BYTES * out["axi.r"]
    out["bytes_written"] = sum(bin(r["mem__wstrb"]).count("1") for r in rows
                               if r["mem__wvalid"] & r["mem__wready"])
    return out


def expected_records(rows: list[dict[str, int]], start: int = 0, end: int | None = None
                     ) -> list[dict]:
    """The command records :meth:`cosim.waves.Summary.records` must report: one per ``done``
    in the window, with the ``queue``/``index``/``opcode`` probes' values held at that cycle
    and the cycle of the last ``take`` before it (``start`` if none in the window)."""
    out = []
    end = len(rows) if end is None else end
    for e in ENGINES:
        held: dict[str, int] = {}
        taken = None
        for c, row in enumerate(rows[:end]):
            held.update({f: row[p(e, f)] for f in ("queue", "index", "opcode")
                         if p(e, f) in row})
            if c < start:
                continue
            if row[p(e, "take")]:
                taken = c
            if row[p(e, "done")]:
                out.append({"engine": e, "index": held["index"], "opcode": held["opcode"],
                            "start_cycle": start if taken is None else taken,
                            "end_cycle": c + 1, "queue": held["queue"]})
                taken = None
    return sorted(out, key=lambda r: (r["start_cycle"], r["engine"]))
