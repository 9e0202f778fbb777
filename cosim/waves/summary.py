"""Summary of a waveform (VCD or FST) of an NPU run: engine busy timelines, commands, stalls
and AXI traffic, sampled at the rising edges of the clock (:func:`summarize`).

Cycles are absolute: the rising edge at time ``t`` ends cycle ``ceil(t / period) - 1``
(:func:`cosim.waves.vcd.edge_cycles`), the cycle numbering of the co-simulation
(``RtlBackend.cycle``, ``npu run --waves-from``), whatever window of the run the file holds;
values are sampled just before the edge. The signals are those of
:mod:`cosim.waves.signals` (named probes, AXI port, ``csr.cycles``, resource stall copies);
every figure is counted as the performance counter of the same name counts it
(:func:`hw.top.counter_events`, :mod:`cosim.waves.tally`).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

from cosim.waves.signals import NpuSignals, locate_signals
from cosim.waves.tally import EngineStats, Tally, Window
from cosim.waves.vcd import (
    EdgeSampler,
    VcdEmptyError,
    VcdError,
    VcdHeader,
    VcdSignalError,
    changes,
    edge_cycles,
    read_header,
    selection,
)

__all__ = ["EngineStats", "Summary", "summarize"]


@dataclass
class Summary:
    """What :func:`summarize` measured.

    Attributes
    ----------
    file : Path
    scope : str
    timescale_s : Fraction
        Seconds per VCD time unit.
    period : int
        Clock period in file time units (between the first two rising edges).
    first_cycle : int
        First cycle counted (absolute, see the module docstring).
    cycles : int
        Cycles counted (rising edges in the window).
    dma_busy, overlap : int
        Cycles with the load or the store engine busy; with one of them and the matrix
        engine busy.
    engines : dict
        Engine name -> :class:`EngineStats`.
    handshakes : dict
        AXI channel -> beats/transfers with ``valid & ready``.
    r_bytes : int
        Bytes read: R handshakes x bytes per beat.
    w_bytes : int
        Bytes written: set bits of ``wstrb`` over W handshakes.
    r_bytes_by_id : dict
        ``rid`` -> bytes read.
    bus_bytes : int
        Bytes per data beat.
    dma_busy, overlap : int
    counter_window : (int, int) or None
        The window in ``CYCLES`` values, when summarised by counter.
    end_cycle : int
        One past the last cycle counted.
    """
    file: Path
    scope: str
    timescale_s: Fraction
    period: int
    first_cycle: int
    cycles: int
    engines: dict[str, EngineStats]
    handshakes: dict[str, int]
    r_bytes: int
    w_bytes: int
    r_bytes_by_id: dict[int, int]
    bus_bytes: int
    dma_busy: int = 0
    overlap: int = 0
    counter_window: tuple[int, int] | None = None
    end_cycle: int = 0

    def utilization(self, engine: str) -> float:
        """Busy cycles / cycles of ``engine`` (0.0 for an empty window)."""
        return self.engines[engine].busy_cycles / self.cycles if self.cycles else 0.0

    def figures(self) -> dict[str, int]:
        """Flat integer figures, named as the counters they are checked against.

        Keys: ``cycles``, ``busy.<engine>``, ``commands.<engine>``, ``retired.<engine>``,
        ``stall.<engine>.<reason>`` (the pairs whose sources are in the file),
        ``dma_busy`` and ``overlap`` (when the load, store and matrix engines are in the
        file), ``axi.<channel>`` (handshakes), ``bytes_read``, ``bytes_written``.
        """
        out = {"cycles": self.cycles}
        for name, e in self.engines.items():
            out[f"busy.{name}"] = e.busy_cycles
            out[f"commands.{name}"] = e.commands
            out[f"retired.{name}"] = e.retired
            for reason, n in e.stalls.items():
                out[f"stall.{name}.{reason}"] = n
        if {"load", "store", "matrix"} <= set(self.engines):
            out["dma_busy"] = self.dma_busy
            out["overlap"] = self.overlap
        for ch, n in self.handshakes.items():
            out[f"axi.{ch}"] = n
        out["bytes_read"] = self.r_bytes
        out["bytes_written"] = self.w_bytes
        return out

    def records(self) -> list[dict]:
        """Command records of all engines, by start cycle (see :class:`EngineStats`)."""
        recs = [r for e in self.engines.values() for r in e.records]
        return sorted(recs, key=lambda r: (r["start_cycle"], r["engine"]))

    def to_dict(self) -> dict:
        """JSON-ready summary (figures, utilizations, intervals, period in ns)."""
        return {
            "file": str(self.file), "scope": self.scope,
            "period_ns": None if self.period is None
            else float(self.period * self.timescale_s * 10**9),
            "first_cycle": self.first_cycle, "end_cycle": self.end_cycle,
            "counter_window": self.counter_window,
            "figures": self.figures(),
            "utilization": {k: self.utilization(k) for k in self.engines},
            "intervals": {k: e.intervals for k, e in self.engines.items()},
            "bytes_per_cycle": {"r": self.r_bytes / self.cycles if self.cycles else 0.0,
                                "w": self.w_bytes / self.cycles if self.cycles else 0.0},
            "r_bytes_by_id": {str(k): v for k, v in self.r_bytes_by_id.items()},
            "bus_bytes": self.bus_bytes,
        }

    def format(self, width: int = 60) -> str:
        """Human-readable report with a text timeline ``width`` characters wide."""
        c = max(self.cycles, 1)
        period = "?" if self.period is None else f"{float(self.period * self.timescale_s * 1e9):g}"
        # every window is printed first..last, both counted (the counted ones are [a, b))
        cycles = f"cycles {self.first_cycle}..{self.end_cycle - 1}"
        lines = [f"{self.file}: scope {self.scope}, clock period {period} ns, "
                 f"{self.cycles} cycles ({cycles}"
                 + (f"; CYCLES {self.counter_window[0]}..{self.counter_window[1] - 1}"
                    if self.counter_window else "") + ")", "",
                 f"{'engine':<8} {'busy':>8} {'util':>7} {'cmds':>5} {'done':>5}  timeline "
                 f"({cycles}, "
                 f"'#' busy, '+' >50%, '.' some)"]
        for name, e in self.engines.items():
            unk = f" (+{e.unknown_cycles} x)" if e.unknown_cycles else ""
            lines.append(f"{name:<8} {e.busy_cycles:>8} {e.busy_cycles / c:>7.1%} "
                         f"{e.commands:>5} {e.retired:>5}  |{self._bar(e.intervals, width)}|"
                         + unk)
        if {"load", "store", "matrix"} <= set(self.engines):
            lines.append(f"DMA busy {self.dma_busy} cycles ({self.dma_busy / c:.1%}), "
                         f"overlapping the matrix engine {self.overlap} ({self.overlap / c:.1%})")
        stalled = [(n, e.stalls) for n, e in self.engines.items() if e.stalls]
        if stalled:
            lines += ["", "stall cycles (sem: idle, every queued head waits on a semaphore; "
                          "others: busy and waiting)"]
            for n, st in stalled:
                lines.append(f"{n:<8} " + ", ".join(f"{r} {v}" for r, v in st.items()))
        lines += ["", "AXI     handshakes  per cycle"]
        for ch, n in self.handshakes.items():
            lines.append(f"{ch.upper():<8} {n:>10}  {n / c:.4f}")
        lines += ["",
                  f"bytes read    {self.r_bytes:>10}  ({self.r_bytes / c:.3f} B/cycle, "
                  f"{self.bus_bytes} B/beat)",
                  f"bytes written {self.w_bytes:>10}  ({self.w_bytes / c:.3f} B/cycle, "
                  "strobed bytes)"]
        if len(self.r_bytes_by_id) > 1 or self.r_bytes_by_id:
            lines.append("bytes read by AXI id: " + ", ".join(
                f"{k}: {v}" for k, v in sorted(self.r_bytes_by_id.items())))
        return "\n".join(lines)

    def _bar(self, intervals: list[tuple[int, int]], width: int) -> str:
        if not self.cycles:
            return " " * width
        lo, n = self.first_cycle, max(self.end_cycle - self.first_cycle, 1)
        busy = [0.0] * width
        for a, b in intervals:
            for col in range((a - lo) * width // n, min(width, ((b - lo) * width - 1) // n + 1)):
                c0 = lo + col * n / width
                c1 = lo + (col + 1) * n / width
                busy[col] += max(0.0, min(b, c1) - max(a, c0)) / (c1 - c0)
        return "".join("#" if f >= 0.999 else "+" if f > 0.5 else "." if f > 0 else " "
                       for f in busy)


def _check_window(unit: str, start: int | None, end: int | None) -> None:
    if unit not in ("cycle", "counter"):
        raise ValueError(f"unit must be 'cycle' or 'counter', not {unit!r}")
    for name, x in (("start", start), ("end", end)):
        if x is not None and x < 0:
            raise ValueError(f"the window's {name} {x} is negative (cycles start at 0)")
    if unit == "counter" and (start is None or end is None):
        raise ValueError("a window in counter cycles needs both start and end")
    if unit == "counter" and start < 1:
        raise ValueError(f"a window in counter cycles starts after reset (start >= 1, not "
                         f"{start}): CYCLES also reads 0 during reset")
    if start is not None and end is not None and end <= start:
        raise ValueError(f"the window [{start}, {end}) is empty")


class _Edges:
    """Batches of sampled rising edges with their absolute cycles: the first edges wait
    until the second gives the period."""

    def __init__(self, path: Path, header: VcdHeader, sig: NpuSignals, fast: bool):
        signals = [v for v in sig.all() if v is not sig.rdata]   # only its width is used
        self.ids = selection(signals)
        self.slot = {ident: k for k, ident in enumerate(self.ids)}
        self.sampler = EdgeSampler(len(self.ids), self.slot[sig.clock.id])
        self.path, self.header, self.fast = path, header, fast
        self.period: int | None = None
        self.first_edge: int | None = None
        self.seen: tuple[int, int] | None = None        # cycles of the file's first, last edge

    def __iter__(self):
        waiting: list[tuple[np.ndarray, np.ndarray]] = []
        for batch in changes(self.path, self.header, self.ids, fast=self.fast):
            times, samples = self.sampler.feed(batch)
            if not len(times):
                continue
            if self.period is None:
                waiting.append((times, samples))
                times = np.concatenate([t for t, _ in waiting])
                if len(times) < 2:
                    continue
                self.period = int(times[1] - times[0])
                if self.period <= 0:
                    raise VcdError(f"{self.path}: the clock's rising edges at {times[0]} and "
                                   f"{times[1]} give no period")
                samples = np.concatenate([s for _, s in waiting])
                waiting = []
            cyc = edge_cycles(times, self.period)
            self.seen = (self.seen[0] if self.seen else int(cyc[0]), int(cyc[-1]))
            yield cyc, samples


def summarize(path: Path | str, *, start: int | None = None, end: int | None = None,
              scope: str | None = None, unit: str = "cycle", fast: bool = True) -> Summary:
    """Read a waveform of an NPU run (VCD or FST) and measure engine activity, stalls and
    AXI traffic.

    Parameters
    ----------
    path : Path or str
    start, end : int, optional
        The window ``[start, end)``: absolute cycles (``unit="cycle"``, see the module
        docstring; the file may hold any window of the run), or values of the NPU's
        ``CYCLES`` counter sampled at the edges (``unit="counter"``, needs ``csr.cycles`` in
        the file; the window of a counter snapshot pair is ``[before["cycles"],
        after["cycles"])``).
    scope : str, optional
        The NPU instance scope (found automatically by default).
    unit : {"cycle", "counter"}
    fast : bool
        ``False`` reads every line with the checked reader (same results; for cross-checks).

    Returns
    -------
    Summary

    Raises
    ------
    ValueError
        For an unknown ``unit``, an empty window, or ``unit="counter"`` without both ends or
        with ``start < 1``.
    VcdFormatError
        If the file is malformed (with the line).
    VcdProbeError
        If the file lacks the named probes (it predates them; the message names them).
    VcdSignalError
        If another required signal is missing.
    VcdEmptyError
        If the file has fewer than two rising edges of the clock (empty or header only), or
        no cycle of the file is in the window.
    VcdError
        With ``unit="counter"``, if the file does not hold every cycle of the window.
    """
    _check_window(unit, start, end)
    path = Path(path)
    header = read_header(path)
    sig = locate_signals(header, scope)
    by_counter = unit == "counter"
    if by_counter and sig.cycles is None:
        raise VcdSignalError(f"{sig.scope}.csr.cycles", (v.path for v in header.vars
                                                         if v.name.startswith("cycles")))
    edges = _Edges(path, header, sig, fast)
    window = Window(start, end, edges.slot[sig.cycles.id] if by_counter else None)
    tally = Tally(sig, edges.slot, window)
    for cyc, samples in edges:
        tally.feed(cyc, samples)
        if window.done:
            break
    _check_counted(path, sig, edges, tally, start, end, unit)
    engines = tally.finish()
    return Summary(path, sig.scope, header.timescale_s, edges.period, tally.first,
                   tally.cycles, engines, tally.handshakes, tally.r_bytes, tally.w_bytes,
                   tally.r_by_id, tally.bus_bytes, tally.dma_busy, tally.overlap,
                   (start, end) if by_counter else None, tally.last + 1)


def _check_counted(path: Path, sig: NpuSignals, edges: _Edges, tally: Tally,
                   start: int | None, end: int | None, unit: str) -> None:
    if edges.period is None:
        raise VcdEmptyError(f"{path}: fewer than two rising edges of {sig.clock.path}: "
                            "nothing to summarize (an empty or header-only file?)")
    if unit == "counter" and tally.cycles != end - start:
        raise VcdError(f"{path}: the counter window [{start}, {end}) has {end - start} "
                       f"cycles, the file holds {tally.cycles} of them (the traced run did "
                       "not reach the counters' cycle count or the file does not hold it)")
    if not tally.cycles:
        first, last = edges.seen if edges.seen else (None, None)
        if start is not None and end is not None:
            window = f"[{start}, {end})"
        else:
            window = f"from cycle {start} on" if start is not None else f"before cycle {end}"
        # the reading stops at the window's end: the file's last cycle is known only if the
        # window was still open at the end of the file
        held = (f"the file starts at cycle {first}" if end is not None and end <= first
                else f"the file holds cycles {first}..{last}")
        raise VcdEmptyError(f"{path}: no cycle of the file is in the window {window} "
                            f"({held})")
