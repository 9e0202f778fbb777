"""A :class:`sw.runtime.profile.Profile` as a Perfetto trace and as a PNG timeline.

The trace is the JSON Trace Event Format (the "JSON Object Format" with ``traceEvents``,
https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU), which
https://ui.perfetto.dev, Perfetto's ``trace_processor`` and ``chrome://tracing`` open:

* one process, ``NPU <config>``; its threads (tracks) are, top to bottom, ``regions`` (the
  runtime's :meth:`Device.region` blocks, nested ones stacked under their parent) and one
  track per engine (``load``, ``store``, ``matrix``, ``vector``), named by ``"M"`` metadata
  events (``process_name``, ``thread_name``, ``*_sort_index``);
* **lanes.** The ``"X"`` events of one track must nest (Perfetto's slice tracker drops one
  that starts inside another and ends after it), but the matrix engine holds several
  MATMULs at once and retires them in order, so their slices overlap without nesting. An
  engine's slices are therefore put on lanes (greedy interval partitioning, the lowest free
  lane first, as :mod:`cosim.waves.trace` does): lane 1 is the engine's track, lane ``k``
  a track ``"<engine> #k"`` right under it; slices on one lane never overlap. The engines
  that run one command at a time need one lane;
* every engine command is an ``"X"`` (complete) event named after it (``"MATMUL q0#17"``),
  with ``args``: queue, index, cycles, the command's one-line description and its fields;
* **time unit: one microsecond of the trace is one NPU clock cycle.** ``ts`` and ``dur`` are
  integers in the format's unit (microseconds), so every reader places them exactly; there is
  no ``displayTimeUnit`` (Perfetto reads ``"ns"`` there as "timestamps are nanoseconds",
  the format's specification as a display hint only). ``otherData`` says so and carries the
  configuration and the per-engine summary (:meth:`Profile.engine_summary`).

The PNG (matplotlib, Agg, no display) has one row per region depth on top and one row per
engine below, one bar per command, the row split into the engine's lanes
(:func:`timeline_png`).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from hw.isa import ENGINE_NAMES, OPCODE_ENGINE, LocalMem, Opcode, body_fields, decode
from sw.runtime.commands import describe_command
from sw.runtime.profile import Profile, Slice

__all__ = ["perfetto_trace", "write_perfetto", "timeline_png", "write_outputs", "command_args",
           "TIME_UNIT"]

#: What a trace microsecond means (``otherData.time_unit``).
TIME_UNIT = "1 us of the trace = 1 NPU clock cycle"

_PID = 1
_TID_REGIONS = 1


def _tid(engine: str) -> int:
    return 2 + ENGINE_NAMES.index(engine)


def _lanes(slices: list[Slice]) -> list[int]:
    """The lane (0 first) of each of ``slices`` (one engine's, sorted by start): the lowest
    lane whose last slice ended by its start, so that slices of a lane never overlap."""
    ends: list[int] = []            # per lane, the end of its last slice
    out = []
    for s in slices:
        lane = next((k for k, end in enumerate(ends) if end <= s.start), len(ends))
        if lane == len(ends):
            ends.append(s.end)
        else:
            ends[lane] = s.end
        out.append(lane)
    return out


def _engine_lanes(profile: Profile) -> dict[str, list[tuple[Slice, int]]]:
    """Per engine, its slices by start cycle with their lanes (:func:`_lanes`)."""
    out = {}
    for e in ENGINE_NAMES:
        mine = sorted((s for s in profile.slices if s.engine == e), key=lambda s: s.start)
        out[e] = list(zip(mine, _lanes(mine), strict=True))
    return out


def _lane_tids(lanes: dict[str, list[tuple[Slice, int]]]) -> dict[tuple[str, int], int]:
    """The track of each (engine, lane), in display order (engine after engine, its lanes
    in order): lane 0 the engine's own, further lanes numbered after all engines' (so the
    engines' tracks keep their ids whatever the overlap)."""
    tids, extra = {}, 2 + len(ENGINE_NAMES)
    for e, placed in lanes.items():
        tids[(e, 0)] = _tid(e)
        for lane in range(1, 1 + max((k for _, k in placed), default=0)):
            tids[(e, lane)], extra = extra, extra + 1
    return tids


@functools.lru_cache(maxsize=4096)   # a run repeats its commands (same rows, new semaphores)
def command_args(raw: bytes) -> dict:
    """The fields of an encoded engine command for a slice's ``args``: the body's fields
    (enums by name), the semaphore wait and signal if flagged, the set flags, and
    ``command``, its :func:`sw.runtime.describe_command` line. The dict is shared between
    calls: do not modify it."""
    view = decode(raw)
    h = view.header
    args: dict = {"command": describe_command(raw)}
    if OPCODE_ENGINE.get(h.opcode, "processor") != "processor":
        for name, value in body_fields(view).items():
            args[name] = value.name if isinstance(value, LocalMem) else value
    if h.flags.wait:
        args["wait"] = f"sem{h.wait_sem}>={h.wait_value}"
    if h.flags.signal:
        args["signal"] = f"sem{h.signal_sem}"
    flags = [f for f in ("accumulate", "relu", "transpose", "row_scale") if getattr(h.flags, f)]
    if flags:
        args["flags"] = ",".join(flags)
    return args


def _slice_event(s: Slice, tid: int) -> dict:
    args = {"queue": s.queue, "index": s.index, "start_cycle": s.start, "end_cycle": s.end,
            "busy_cycles": s.cycles}
    if s.command is not None:
        args |= command_args(s.command)
    return {"name": s.name, "cat": s.engine, "ph": "X", "ts": s.start, "dur": s.cycles,
            "pid": _PID, "tid": tid, "args": args}


def _metadata(profile: Profile, tids: dict[tuple[str, int], int]) -> list[dict]:
    def meta(kind: str, tid: int, key: str, value: str | int) -> dict:
        return {"name": kind, "ph": "M", "pid": _PID, "tid": tid, "args": {key: value}}
    events = [meta("process_name", 0, "name", f"NPU {profile.config.name}"),
              meta("process_sort_index", 0, "sort_index", 0),
              meta("thread_name", _TID_REGIONS, "name", "regions"),
              meta("thread_sort_index", _TID_REGIONS, "sort_index", 0)]
    for order, ((e, lane), tid) in enumerate(tids.items(), start=1):
        name = e if lane == 0 else f"{e} #{lane + 1}"
        events += [meta("thread_name", tid, "name", name),
                   meta("thread_sort_index", tid, "sort_index", order)]
    return events


def perfetto_trace(profile: Profile) -> dict:
    """The profile as a Trace Event Format document (see the module docstring).

    Returns
    -------
    dict
        ``{"traceEvents": [...], "otherData": {...}}``: metadata events, then the regions
        (parents before the regions they contain), then the commands of each engine by
        start cycle, engine after engine, on their lanes (see the module docstring).
    """
    regions = [{"name": r.name, "cat": "region", "ph": "X", "ts": r.enter,
                "dur": r.exit - r.enter, "pid": _PID, "tid": _TID_REGIONS,
                "args": {"depth": r.depth, "enter_cycle": r.enter, "exit_cycle": r.exit,
                         "cycles": r.exit - r.enter}}
               for r in sorted(profile.regions, key=lambda r: (r.enter, -r.exit, r.depth))]
    lanes = _engine_lanes(profile)
    tids = _lane_tids(lanes)
    slices = [_slice_event(s, tids[(e, lane)]) for e, placed in lanes.items()
              for s, lane in placed]
    return {
        "traceEvents": _metadata(profile, tids) + regions + slices,
        "otherData": {
            "time_unit": TIME_UNIT, "config": profile.config.name,
            "begin_cycle": profile.begin, "end_cycle": profile.end,
            "engines": profile.engine_summary(), "lost": profile.lost,
            "overflowed": list(profile.overflowed),
            "source": "hardware command trace (Csr.TRACE_*) and Device.region",
        },
    }


def write_perfetto(profile: Profile, path: Path | str) -> Path:
    """Write :func:`perfetto_trace` as JSON to ``path`` (parent folders made); returns it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # UTF-8 as it is: Perfetto's JSON tokenizer does not take \u escapes in every version
    text = json.dumps(perfetto_trace(profile), separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)
    path.write_text(text + "\n", encoding="utf-8")
    return path


def timeline_png(profile: Profile, path: Path | str, *, title: str | None = None) -> Path:
    """Draw the profile to a PNG: a row per region depth on top (labelled bars), a row per
    engine below (a bar per command, coloured by opcode; the row split into the engine's
    lanes when its commands overlap, as in the Perfetto trace); x in cycles. Returns the
    path."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    depths = 1 + max((r.depth for r in profile.regions), default=-1)
    rows = [f"regions {d}" if depths > 1 else "regions" for d in range(depths)]
    rows += list(ENGINE_NAMES)
    fig = Figure(figsize=(14, 1.4 + 0.5 * len(rows)))
    ax = fig.subplots()
    span = max(profile.end - profile.begin, 1)
    for d in range(depths):
        mine = [r for r in profile.regions if r.depth == d]
        ax.broken_barh([(r.enter, r.exit - r.enter) for r in mine], (d - 0.4, 0.8),
                       facecolors="0.85", edgecolors="0.3", linewidth=0.6)
        for r in mine:
            if r.exit - r.enter > span / 40:
                ax.text((r.enter + r.exit) / 2, d, r.name, ha="center", va="center",
                        fontsize=7, clip_on=True)
    colors = {op: f"C{i}" for i, op in enumerate(op for op, e in OPCODE_ENGINE.items()
                                                 if e != "processor")}
    for row, placed in enumerate(_engine_lanes(profile).values(), start=depths):
        height = 0.7 / (1 + max((k for _, k in placed), default=0))
        by_bar: dict[tuple[str, int], list[tuple[int, int]]] = {}
        for s, lane in placed:
            by_bar.setdefault((s.opcode, lane), []).append((s.start, max(s.cycles, 1)))
        for (op, lane), bars in by_bar.items():
            color = colors.get(Opcode[op], "0.5") if op in Opcode.__members__ else "0.5"
            ax.broken_barh(bars, (row - 0.35 + lane * height, 0.9 * height),
                           facecolors=color, linewidth=0)
    ax.set_yticks(range(len(rows)), rows)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim(profile.begin, profile.end)
    ax.set_xlabel("cycle")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(handles=[Patch(color=c, label=op.name) for op, c in colors.items()],
              loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False)
    lost = f", {profile.lost} LOST" if profile.lost else ""
    ax.set_title(title or f"NPU {profile.config.name}: {len(profile.slices)} engine commands "
                          f"in cycles {profile.begin}..{profile.end}{lost}", fontsize=9)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def write_outputs(profile: Profile | dict, trace: Path | str | None = None,
                  png: Path | str | None = None) -> str:
    """Write the Perfetto trace and/or the PNG of ``profile`` (a :class:`Profile` or its
    :meth:`Profile.to_dict`); returns the report to print (:meth:`Profile.report` and the
    files written)."""
    if isinstance(profile, dict):
        profile = Profile.from_dict(profile)
    lines = [profile.report()]
    if trace:
        write_perfetto(profile, trace)
        lines.append(f"wrote {trace} (Perfetto trace, opens in ui.perfetto.dev; {TIME_UNIT})")
    if png:
        timeline_png(profile, png)
        lines.append(f"wrote {png}")
    return "\n".join(lines)
