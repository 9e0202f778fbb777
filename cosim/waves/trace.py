"""Timelines of NPU runs: Perfetto/Chrome trace JSON, a PNG timeline and a roofline plot.

The input is a plain list of command records, one dict per command::

    {"queue": 0, "index": 3, "engine": "load", "opcode": 1,
     "start_cycle": 84, "end_cycle": 105}

(``end_cycle`` exclusive). They can come from the hardware trace buffer, from the functional
model, or from a VCD (:meth:`cosim.waves.Summary.records`). ``opcode`` may be an int, a name
or ``None``; ``index`` may be ``None``.

The trace opens in https://ui.perfetto.dev and ``chrome://tracing``: process "Queues" has one
track per hardware queue, process "Engines" one track per engine, and every command is a
slice on both. Commands of one queue run concurrently on different engines, so a queue
whose commands overlap gets extra tracks ("queue 0 #2", ...): slices on one track never
overlap, which every trace viewer renders correctly.

Plots use matplotlib's Agg backend (no display needed).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["REQUIRED_KEYS", "validate_records", "chrome_trace", "write_chrome_trace",
           "timeline_png", "RooflinePoint", "gemm_point", "roofline_png"]

REQUIRED_KEYS = ("queue", "index", "engine", "opcode", "start_cycle", "end_cycle")

_PID_QUEUES, _PID_ENGINES = 1, 2


def _opcode_name(opcode: object) -> str:
    if opcode is None:
        return "cmd"
    if isinstance(opcode, str):
        return opcode
    try:
        from hw.isa import Opcode
        return Opcode(opcode).name
    except (ValueError, ImportError):
        return f"op{opcode:#04x}" if isinstance(opcode, int) else str(opcode)


def validate_records(records: Iterable[dict]) -> list[dict]:
    """Check command records and return them sorted by (start, end, engine).

    Raises
    ------
    ValueError
        If a record lacks a key of :data:`REQUIRED_KEYS` or ends before it starts (the
        message shows the record).
    """
    out = []
    for r in records:
        missing = [k for k in REQUIRED_KEYS if k not in r]
        if missing:
            raise ValueError(f"command record {r!r} lacks {', '.join(missing)}")
        if not isinstance(r["start_cycle"], int) or not isinstance(r["end_cycle"], int):
            raise ValueError(f"command record {r!r}: start_cycle/end_cycle must be integers")
        if r["end_cycle"] < r["start_cycle"]:
            raise ValueError(f"command record {r!r} ends before it starts")
        out.append(r)
    return sorted(out, key=lambda r: (r["start_cycle"], r["end_cycle"], str(r["engine"])))


def _lanes(records: list[dict]) -> list[int]:
    """Greedy interval partitioning: lane per record so that lanes never overlap."""
    ends: list[int] = []
    lanes = []
    for r in records:
        for i, e in enumerate(ends):
            if e <= r["start_cycle"]:
                ends[i] = r["end_cycle"]
                lanes.append(i)
                break
        else:
            ends.append(r["end_cycle"])
            lanes.append(len(ends) - 1)
    return lanes


def chrome_trace(records: Iterable[dict], *, cycle_ns: float = 1.0,
                 metadata: dict | None = None) -> dict:
    """Build a Chrome/Perfetto trace (the JSON object format with ``traceEvents``).

    Parameters
    ----------
    records : iterable of dict
        Command records (see the module docstring).
    cycle_ns : float
        Nanoseconds per cycle. The default 1.0 makes the viewer's nanoseconds read as
        cycles; give the real clock period (e.g. 10.0) for wall-clock time.
    metadata : dict, optional
        Stored under ``otherData`` (configuration, run name, counters...).

    Returns
    -------
    dict
        ``{"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}``; ``ts`` and
        ``dur`` are in microseconds as the format requires; every slice carries its cycles
        in ``args``.

    Raises
    ------
    ValueError
        On a malformed record (see :func:`validate_records`) or ``cycle_ns <= 0``.
    """
    if not cycle_ns > 0:
        raise ValueError(f"cycle_ns must be positive, not {cycle_ns!r}")
    recs = validate_records(records)
    us = cycle_ns / 1000.0
    events: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": _PID_QUEUES, "tid": 0,
         "args": {"name": "Queues"}},
        {"ph": "M", "name": "process_sort_index", "pid": _PID_QUEUES, "tid": 0,
         "args": {"sort_index": 0}},
        {"ph": "M", "name": "process_name", "pid": _PID_ENGINES, "tid": 0,
         "args": {"name": "Engines"}},
        {"ph": "M", "name": "process_sort_index", "pid": _PID_ENGINES, "tid": 0,
         "args": {"sort_index": 1}},
    ]
    slices: list[dict] = []
    tids: dict[tuple[int, str], int] = {}

    def track(pid: int, label: str) -> int:
        key = (pid, label)
        if key not in tids:
            tid = len([k for k in tids if k[0] == pid]) + 1
            tids[key] = tid
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                           "args": {"name": label}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                           "args": {"sort_index": tid}})
        return tids[key]

    def add(pid: int, label: str, group: list[dict]) -> None:
        for r, lane in zip(group, _lanes(group), strict=True):
            tid = track(pid, label if lane == 0 else f"{label} #{lane + 1}")
            op = _opcode_name(r["opcode"])
            name = op if r["index"] is None else f"{op} #{r['index']}"
            slices.append({
                "ph": "X", "name": name, "cat": str(r["engine"]), "pid": pid, "tid": tid,
                "ts": r["start_cycle"] * us,
                "dur": (r["end_cycle"] - r["start_cycle"]) * us,
                "args": {k: r[k] for k in REQUIRED_KEYS} | {
                    "cycles": r["end_cycle"] - r["start_cycle"]},
            })

    for q in sorted({r["queue"] for r in recs}, key=str):
        add(_PID_QUEUES, f"queue {q}", [r for r in recs if r["queue"] == q])
    for e in sorted({str(r["engine"]) for r in recs}):
        add(_PID_ENGINES, e, [r for r in recs if str(r["engine"]) == e])
    slices.sort(key=lambda ev: (ev["pid"], ev["tid"], ev["ts"]))
    return {"traceEvents": events + slices, "displayTimeUnit": "ns",
            "otherData": dict(metadata or {}) | {"cycle_ns": cycle_ns}}


def write_chrome_trace(path: Path | str, records: Iterable[dict], **kwargs) -> Path:
    """Write :func:`chrome_trace` as JSON to ``path``; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(chrome_trace(records, **kwargs), indent=None))
    return path


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def timeline_png(path: Path | str, records: Iterable[dict], *, title: str = "NPU timeline",
                 busy: dict[str, Sequence[tuple[int, int]]] | None = None) -> Path:
    """Draw the command timeline (one row per engine, one bar per command) to a PNG.

    Parameters
    ----------
    path : Path or str
    records : iterable of dict
        Command records.
    title : str
    busy : dict, optional
        Engine -> busy intervals ``[(start, end), ...]`` in cycles (e.g.
        :attr:`cosim.waves.EngineStats.intervals`), drawn as thin bars under the commands.

    Returns
    -------
    Path
    """
    plt = _pyplot()
    recs = validate_records(records)
    engines = sorted({str(r["engine"]) for r in recs} | set(busy or {}))
    fig, ax = plt.subplots(figsize=(12, 1.0 + 0.6 * max(len(engines), 1)))
    colors = plt.get_cmap("tab10")
    for row, e in enumerate(engines):
        mine = [r for r in recs if str(r["engine"]) == e]
        ax.broken_barh([(r["start_cycle"], max(r["end_cycle"] - r["start_cycle"], 0.5))
                        for r in mine], (row - 0.3, 0.45), facecolors=colors(row % 10),
                       edgecolors="white", linewidth=1.0)
        if busy and e in busy:
            ax.broken_barh([(a, b - a) for a, b in busy[e]], (row + 0.2, 0.12),
                           facecolors="0.3")
    ax.set_yticks(range(len(engines)), engines)
    ax.set_ylim(-0.6, len(engines) - 0.4)
    ax.invert_yaxis()
    ax.set_xlabel("cycle")
    ax.set_title(title + ("  (thin bars: busy signal)" if busy else ""))
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


@dataclass(frozen=True)
class RooflinePoint:
    """One measured kernel on the roofline.

    Attributes
    ----------
    name : str
    macs : int
        Useful multiply-accumulates.
    dram_bytes : int
        Bytes moved between DRAM and the NPU (AXI R + W).
    cycles : int
        Cycles the kernel took.
    """
    name: str
    macs: int
    dram_bytes: int
    cycles: int

    @property
    def intensity(self) -> float:
        """Operational intensity, MACs per DRAM byte."""
        return self.macs / self.dram_bytes if self.dram_bytes else float("inf")

    @property
    def performance(self) -> float:
        """Achieved MACs per cycle."""
        return self.macs / self.cycles if self.cycles else 0.0


def gemm_point(name: str, m: int, k: int, n: int, dram_bytes: int, cycles: int
               ) -> RooflinePoint:
    """Roofline point of an ``(M, K) x (K, N)`` GEMM: ``M*K*N`` MACs over ``dram_bytes``."""
    return RooflinePoint(name, m * k * n, dram_bytes, cycles)


def roofline_png(path: Path | str, points: Iterable[RooflinePoint], *, rows: int, cols: int,
                 bytes_per_cycle: float, title: str = "NPU roofline") -> Path:
    """Draw a roofline (Williams, Waterman, Patterson, CACM 2009) in cycle units.

    Roofs: compute ``rows * cols`` MACs/cycle (one MAC per PE per cycle); memory
    ``bytes_per_cycle * I`` for operational intensity ``I`` (MACs/byte). Each point sits at
    ``(macs / dram_bytes, macs / cycles)``.

    Parameters
    ----------
    path : Path or str
    points : iterable of RooflinePoint
    rows, cols : int
        Systolic array size.
    bytes_per_cycle : float
        Peak DRAM bandwidth in bytes/cycle (e.g. AXI data width / 8 for one direction).
    title : str

    Returns
    -------
    Path

    Raises
    ------
    ValueError
        If a size or the bandwidth is not positive.
    """
    if rows <= 0 or cols <= 0 or not bytes_per_cycle > 0:
        raise ValueError(f"rows, cols and bytes_per_cycle must be positive, got {rows}, "
                         f"{cols}, {bytes_per_cycle}")
    plt = _pyplot()
    pts = list(points)
    peak = rows * cols
    ridge = peak / bytes_per_cycle
    xs = [p.intensity for p in pts if p.intensity != float("inf")] + [ridge]
    lo, hi = min(xs + [ridge]) / 8, max(xs + [ridge]) * 8
    fig, ax = plt.subplots(figsize=(7, 5))
    ax.loglog([lo, ridge, hi], [bytes_per_cycle * lo, peak, peak], "k-", lw=2,
              label=f"roof: {peak} MACs/cycle, {bytes_per_cycle:g} B/cycle")
    ax.axvline(ridge, color="0.6", ls=":", lw=1)
    for p in pts:
        ax.loglog([p.intensity], [p.performance], "o", ms=7,
                  label=f"{p.name}: {p.performance:.2f} MACs/cycle "
                        f"({p.performance / peak:.0%} of peak), I={p.intensity:.2f}")
    ax.set_xlabel("operational intensity (MACs / DRAM byte)")
    ax.set_ylabel("performance (MACs / cycle)")
    ax.set_title(f"{title} ({rows}x{cols} array)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
