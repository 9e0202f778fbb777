"""Writes VCD files shaped like a traced NPU run (``tb_top.u_npu...``) with known activity,
for the waveform tool tests: every figure of :func:`cosim.waves.summarize` can be computed
naively from the per-cycle table that produced the file.

With ``counters=True`` the file also holds the sources of the performance counters that
:func:`cosim.waves.summarize` re-derives (``csr.cycles``, the engine queues' FIFO heads,
stop/flush and semaphores, the NPU-level resource stall sources), with random
values, and :func:`expected_figures` counts the stalls naively from them.

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
N_QUEUES = 2        # queues of the generated engine FIFOs (counters=True)
N_SEMS = 4
RESET_CYCLES = 3    # csr.cycles stays 0 for the first cycles, then counts
#: resource stall sources (signals of the NPU scope): row name -> (engine, reason)
STALL_FIELDS = {"stall_load_dram_read": ("load", "dram_read"),
                "stall_load_spad": ("load", "spad"), "stall_load_acc": ("load", "acc"),
                "stall_store_dram_write": ("store", "dram_write"),
                "stall_vector_acc": ("vector", "acc")}


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


def _queue_entry(rng: random.Random) -> int:
    """Random bits of a :class:`hw.cmdproc.QueueEntry` whose header may wait."""
    from hw.isa import encode
    wait = rng.random() < 0.7
    header = {"opcode": 3, "flags": {"wait": int(wait), "signal": rng.randrange(2)},
              "wait_sem": rng.randrange(N_SEMS), "wait_value": rng.randrange(5),
              "signal_sem": rng.randrange(N_SEMS)}
    cmd = int.from_bytes(encode({"header": header, "body": {"raw": rng.getrandbits(64)}}),
                         "little")
    return cmd | rng.getrandbits(32) << 256


def random_cycles(n: int, seed: int = 0, *, burst: int = 1, counters: bool = False
                  ) -> list[dict[str, int]]:
    """Per-cycle values: engine busy runs with a done pulse at the end, random AXI
    handshakes, ``wstrb`` and ``rid``. ``burst`` stretches busy runs (fewer commands).
    ``counters`` adds the counter sources (see the module docstring)."""
    rng = random.Random(seed)
    rows: list[dict[str, int]] = []
    left = dict.fromkeys(ENGINES, 0)
    index = 0
    for c in range(n):
        row: dict[str, int] = {}
        if counters:
            row["csr.cycles"] = max(0, c - RESET_CYCLES)
            sems = sum(rng.randrange(4) << (32 * s) for s in range(N_SEMS))
            for e in ENGINES:
                row[f"{e}_queue.stop"] = int(rng.random() < 0.1)
                row[f"{e}_queue.flush"] = 2 * int(rng.random() < 0.05)
                row[f"{e}_queue.sems"] = sems
                for q in range(N_QUEUES):
                    row[f"{e}_queue.fifo{q}.r_rdy"] = int(rng.random() < 0.6)
                    row[f"{e}_queue.fifo{q}.r_data"] = _queue_entry(rng)
            for name in STALL_FIELDS:
                row[name] = int(rng.random() < 0.3)
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


def _width(name: str) -> int:
    if name in WIDTHS:
        return WIDTHS[name]
    for suffix, w in ((".r_data", 288), (".sems", 32 * N_SEMS), (".stop", N_QUEUES),
                      (".flush", N_QUEUES), ("csr.cycles", 64), ("index", 32), ("opcode", 8)):
        if name.endswith(suffix):
            return w
    return 1


def _var(code: str, name: str, w: int) -> str:
    return f"$var wire {w} {code} {name} $end" if w == 1 else \
        f"$var wire {w} {code} {name} [{w - 1}:0] $end"


def write_npu_vcd(path: Path, rows: list[dict[str, int]]) -> Path:
    """Write ``rows`` (from :func:`random_cycles`) as a VCD; returns ``path``."""
    counters = "csr.cycles" in rows[0]
    ids = _ids()
    clk = next(ids)
    code: dict[str, str] = {}
    decl: list[str] = ["$version tests/support/npu_vcd_gen.py $end", "$timescale 1ns $end",
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
    if counters:
        code["csr.cycles"] = next(ids)
        decl += ["$scope module csr $end", _var(code["csr.cycles"], "cycles", 64),
                 "$upscope $end"]
        for name in STALL_FIELDS:
            code[name] = next(ids)
            decl.append(_var(code[name], name, 1))
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
        if counters:
            for sig in ("stop", "flush", "sems"):
                name = f"{e}_queue.{sig}"
                code[name] = next(ids)
                decl.append(_var(code[name], sig, _width(name)))
            for q in range(N_QUEUES):
                decl.append(f"$scope module fifo{q} $end")
                for sig in ("r_rdy", "r_data"):
                    name = f"{e}_queue.fifo{q}.{sig}"
                    code[name] = next(ids)
                    decl.append(_var(code[name], sig, _width(name)))
                decl.append("$upscope $end")
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
                        w = _width(name)
                        out.append(f"{v}{code[name]}" if w == 1 else f"b{v:b} {code[name]}")
            if c == 0:
                out.append(f"b0 {code['mem__rdata']}")
                out.append("$end")
            f.write("\n".join(out) + "\n")
            if c < len(rows):
                f.write(f"#{10 * c + 5}\n0{clk}\n")
    return path


def _sem_stall(row: dict[str, int], e: str) -> int:
    """The ``sem`` stall definition (hw.isa.STALL_REASONS), from the row's values."""
    from hw.isa import decode
    if row[f"{e}__busy"]:
        return 0
    ready = blocked = False
    for q in range(N_QUEUES):
        live = (row[f"{e}_queue.fifo{q}.r_rdy"] and not row[f"{e}_queue.stop"] >> q & 1
                and not row[f"{e}_queue.flush"] >> q & 1)
        if not live:
            continue
        raw = row[f"{e}_queue.fifo{q}.r_data"] & ((1 << 256) - 1)
        h = decode(raw.to_bytes(32, "little")).header
        sem = row[f"{e}_queue.sems"] >> (32 * h.wait_sem) & 0xFFFF_FFFF
        if not h.flags.wait or sem >= h.wait_value:
            ready = True
        else:
            blocked = True
    return int(blocked and not ready)


def expected_figures(rows: list[dict[str, int]], start: int = 0, end: int | None = None
                     ) -> dict[str, int]:
    """The figures :meth:`cosim.waves.Summary.figures` must report, computed naively."""
    rows = rows[start:end]
    out = {"cycles": len(rows)}
    for e in ENGINES:
        out[f"busy.{e}"] = sum(r[f"{e}__busy"] for r in rows)
        out[f"commands.{e}"] = sum(r[f"{e}__cmd__valid"] & r[f"{e}__cmd__ready"] for r in rows)
        out[f"retired.{e}"] = sum(r[f"{e}__done"] for r in rows)
    out["dma_busy"] = sum(r["load__busy"] | r["store__busy"] for r in rows)
    out["overlap"] = sum((r["load__busy"] | r["store__busy"]) & r["matrix__busy"] for r in rows)
    if rows and "csr.cycles" in rows[0]:
        for e in ENGINES:
            out[f"stall.{e}.sem"] = sum(_sem_stall(r, e) for r in rows)
        for name, (e, reason) in STALL_FIELDS.items():
            out[f"stall.{e}.{reason}"] = sum(r[name] & r[f"{e}__busy"] for r in rows)
    for ch in CHANNELS:
        out[f"axi.{ch}"] = sum(r[f"mem__{ch}valid"] & r[f"mem__{ch}ready"] for r in rows)
    out["bytes_read"] = BUS_BYTES * out["axi.r"]
    out["bytes_written"] = sum(bin(r["mem__wstrb"]).count("1") for r in rows
                               if r["mem__wvalid"] & r["mem__wready"])
    return out
