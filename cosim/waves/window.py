"""Windowing: copy a window of a VCD (in absolute clock cycles or time units) into a smaller,
self-contained VCD (:func:`cut`)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import numpy as np

from cosim.waves.signals import locate_signals
from cosim.waves.vcd import (
    ClockSampler,
    VcdBody,
    VcdError,
    VcdHeader,
    VcdVar,
    edge_cycles,
    format_change,
    read_header,
    stream,
)

__all__ = ["CutResult", "cut"]


@dataclass(frozen=True)
class CutResult:
    """What :func:`cut` wrote.

    Attributes
    ----------
    out : Path
    start_time, end_time : int
        The times the cut holds, in VCD time units (inclusive): from its first timestamp (the
        window's start, or the source's first time if that is later) to the window's end, or
        the source's last time if that is earlier.
    bytes_in, bytes_out : int
        Bytes read from the source (up to the window end) and written.
    cycles : tuple of int, optional
        For a window in cycles: the first and last cycle it holds (fewer than asked where the
        source begins later or ends earlier); None for a window in time units.
    """
    out: Path
    start_time: int
    end_time: int
    bytes_in: int
    bytes_out: int
    cycles: tuple[int, int] | None = None


def _clock_timing(path: Path, header: VcdHeader, clock: VcdVar) -> tuple[int, int]:
    """(first rising edge, period) of ``clock`` in time units, from the first edges."""
    edges: list[int] = []

    class _Enough(Exception):
        pass

    sampler = ClockSampler(clock, [], lambda c, t, v: edges.append(t))

    def step(t: int, vals: dict[str, str], previous: dict[str, str]) -> None:
        sampler.step(t, vals, previous)
        if len(edges) >= 2:
            raise _Enough

    with contextlib.suppress(_Enough):
        stream(path, header, [clock], step, with_previous=True)
    if len(edges) < 2:
        raise VcdError(f"{path}: clock {clock.path} has fewer than two rising edges; "
                       "give the window in time units")
    return edges[0], edges[1] - edges[0]


def _check_window(start: int, end: int, unit: str) -> None:
    if unit not in ("cycle", "time"):
        raise ValueError(f"unit must be 'cycle' or 'time', not {unit!r}")
    if start < 0:
        raise ValueError(f"window start {start} is negative (cycles and VCD times start at 0)")
    if end < start:
        raise ValueError(f"window end {end} is before its start {start}")
    if unit == "cycle" and end == start:      # [start, end): no cycle
        raise ValueError(f"the cycle window {start}..{end} is empty (its end is excluded: "
                         f"--to {start + 1} for cycle {start} alone)")


def _cycle_clock(src: Path, header: VcdHeader, clock: str | None) -> tuple[int, int, int]:
    """``(first, period, c0)``: the time of the first rising edge of the clock, the period,
    and the cycle that edge ends; the edge that ends cycle ``c`` is at
    ``first + (c - c0) * period``."""
    clk = header.find(clock) if clock else locate_signals(header).clock
    first, period = _clock_timing(src, header, clk)
    return first, period, int(edge_cycles(np.array([first]), period)[0])


class _Cutter:
    """Writes the window while :class:`VcdBody` items come in: the header with a comment,
    then (at the first time in the window) a ``$dumpvars`` of every value, then the window's
    own changes."""

    def __init__(self, header: VcdHeader, out: TextIO, t0: int, t1: int, comment: str):
        self.vars = {i: vs[0] for i, vs in header.by_id.items()}
        self.end_line = header.end_line
        self.out, self.t0, self.t1, self.comment = out, t0, t1, comment
        self.state: dict[str, str] = {}   # identifier code -> value without its prefix
        self.emitting = False
        self.before: int | None = None    # last timestamp before the window
        self.first: int | None = None     # the $dumpvars' timestamp (the cut's first)
        self.last: int | None = None      # last timestamp written
        self.file_end: int | None = None  # the file's last timestamp, if it ends in the window

    def run(self, body: VcdBody) -> None:
        for kind, a, b in body:
            if kind == "header":
                if body.lineno == self.end_line:
                    self.out.write(self.comment)
                self.out.write(a)
            elif kind == "time":
                if a > self.t1:
                    if self.before is None and not self.emitting:
                        raise ValueError(f"the window {self.t0}..{self.t1} (time units) ends "
                                         f"before the file's first time #{a}")
                    break
                self.time(a)
            elif kind == "change":
                self.state[a] = b[1:] if len(b) > 1 else b
                if self.emitting:
                    self.out.write(format_change(a, b))
            elif self.emitting:
                self.out.write(a)
        else:
            if not self.emitting:
                last = ("has no timestamps" if self.before is None
                        else f"ends at #{self.before}")
                raise ValueError(f"the window {self.t0}..{self.t1} (time units) starts after "
                                 f"the file's end (it {last})")
            self.file_end = self.last
        if not self.emitting:
            self.dump_state(self.t0 if self.before is None else self.before)

    def time(self, t: int) -> None:
        if not self.emitting and t >= self.t0:
            self.emitting = True
            # the values at the window's start: those of the last time before it, or (the
            # window opens before the file) the file's first
            at = t if self.before is None else self.before
            self.dump_state(at)
            if at == t:         # no earlier time: do not repeat the timestamp
                return
        if self.emitting:
            self.out.write(f"#{t}\n")
            self.last = t
        else:
            self.before = t

    def dump_state(self, t: int) -> None:
        out = self.out
        self.first = self.last = t
        out.write(f"#{t}\n$dumpvars\n")
        for ident, var in self.vars.items():
            v = self.state.get(ident)
            if var.kind == "string":
                if v is not None:
                    out.write(f"s{v} {ident}\n")
            elif var.kind == "real":
                out.write(f"r{v if v is not None else '0'} {ident}\n")
            elif var.width == 1 and (v is None or len(v) == 1):
                out.write(f"{v or 'x'}{ident}\n")
            else:
                out.write(f"b{v or 'x'} {ident}\n")
        out.write("$end\n")


def cut(src: Path | str, dst: Path | str, start: int, end: int, *, unit: str = "cycle",
        clock: str | None = None) -> CutResult:
    """Copy a window of a VCD into a smaller, self-contained VCD.

    The header is copied unchanged (plus a ``$comment`` naming the window). A ``$dumpvars``
    at the last timestamp before the window gives every variable the value it holds when the
    window opens (so a rising edge at the window start stays an edge), then the value changes
    inside the window follow, one per line; times stay absolute, and so do cycles. For
    cycles, the window holds the rising edges that end cycles ``start .. end - 1``, so
    ``summarize(cut_file)`` equals ``summarize(src, start=start, end=end)``.
    The source is streamed once and reading stops at the window end; memory holds one value
    per identifier code.

    Parameters
    ----------
    src, dst : Path or str
    start, end : int
        In absolute cycles (``unit="cycle"``, numbered as by :func:`cosim.waves.summarize`;
        the window is ``[start, end)``) or VCD time units (``unit="time"``;
        ``[start, end]``).
    unit : {"cycle", "time"}
    clock : str, optional
        Dotted clock name for ``unit="cycle"`` (default: the NPU's ``clk``).

    Returns
    -------
    CutResult

    Warns
    -----
    VcdSkippedLineWarning, VcdWidthWarning
        As :class:`cosim.waves.vcd.VcdBody` (a skipped line is not copied).

    Raises
    ------
    ValueError
        If ``start < 0``, ``end < start`` (or ``end == start`` in cycles: an empty window),
        ``unit`` is unknown, ``dst`` is ``src``, or the
        window lies outside the file's times (``dst`` is then left as it was).
    VcdFormatError, VcdSignalError
    """
    src, dst = Path(src), Path(dst)
    _check_window(start, end, unit)
    if dst.exists() and dst.resolve() == src.resolve():
        raise ValueError(f"{dst} is the file being cut: give another output")
    header = read_header(src)
    if header.format != "vcd":
        raise VcdError(f"{src}: cut copies VCD text; this is an {header.format.upper()} file "
                       "(trace the window with npu run --waves-from/--waves-to instead)")
    if unit == "time":
        t0, t1 = start, end
    else:
        first, period, c0 = _cycle_clock(src, header, clock)
        t0, t1 = first + (start - c0) * period, first + (end - c0) * period - 1
    comment = f"$comment window {t0}..{t1} ({start}..{end} {unit}s) of {src.name} $end\n"
    part = dst.with_name(dst.name + ".part")    # dst is replaced only by a whole cut
    try:
        with VcdBody(src, header) as body, \
                open(part, "w", encoding="utf-8", errors="surrogateescape") as out:
            cutter = _Cutter(header, out, t0, t1, comment)
            cutter.run(body)
        part.replace(dst)
    finally:
        part.unlink(missing_ok=True)
    held = (max(t0, cutter.first), t1 if cutter.file_end is None else min(t1, cutter.file_end))
    cycles = None
    if unit == "cycle":     # the rising edges the cut holds
        cycles = (max(start, c0), min(end - 1, c0 + (held[1] - first) // period))
    return CutResult(dst, *held, body.chars, dst.stat().st_size, cycles)
