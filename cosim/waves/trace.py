"""Timelines of NPU runs: Perfetto/Chrome trace JSON and a PNG timeline.

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

Plots use matplotlib's Agg backend (no display needed). The roofline plot of measured
kernels is :func:`cosim.bench.roofline.roofline_png`, beside the bench's bound.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = ["REQUIRED_KEYS", "validate_records", "chrome_trace", "write_chrome_trace",
           "timeline_png"]

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
        ``{"traceEvents": [...], "otherData": {...}}``; ``ts`` and ``dur`` are in
        microseconds as the format requires (no ``displayTimeUnit``: Perfetto reads its
        ``"ns"`` as "timestamps are nanoseconds" and would shrink the run 1000x); every slice
        carries its cycles in ``args``.

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
    return {"traceEvents": events + slices,
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
