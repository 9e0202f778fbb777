"""Summary of a VCD of an NPU run: engine busy timelines, commands, stalls and AXI traffic,
streamed at the rising edges of the clock (:func:`summarize`).

Cycle ``n`` is the ``n``-th rising edge (``0`` -> ``1``) of ``clk`` in the file, counted from
0; values are sampled just before it. The signals are those of :mod:`cosim.waves.signals`
(named probes, AXI port, ``csr.cycles``, resource stall copies); every figure is counted as
the performance counter of the same name counts it (:func:`hw.top.counter_events`).
"""

from __future__ import annotations

import contextlib
from collections import deque
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

from cosim.waves.signals import AXI_CHANNELS, EngineProbes, NpuSignals, locate_signals
from cosim.waves.vcd import ClockSampler, VcdError, VcdSignalError, read_header, stream, to_int

__all__ = ["EngineStats", "Summary", "summarize"]

@dataclass
class EngineStats:
    """Activity of one engine over the summarised window.

    Attributes
    ----------
    busy_cycles : int
        Cycles with ``busy`` high.
    unknown_cycles : int
        Cycles with ``busy`` x/z (e.g. during ``$dumpoff``).
    intervals : list of (int, int)
        Busy periods ``[start, end)`` in cycles.
    commands : int
        Commands taken (the ``take`` probe).
    retired : int
        ``done`` pulses.
    records : list of dict
        One per retired command: ``{engine, index, opcode, start_cycle, end_cycle, queue}``
        (index, opcode and queue from the probes in the ``done`` cycle; ``None`` if x).
    stalls : dict
        Stall reason -> cycles: ``sem`` (the ``sem_stall`` probe), then the resource reasons
        whose ``stall_<engine>_<reason>`` sources are in the file, counted while busy.
    """
    busy_cycles: int = 0
    unknown_cycles: int = 0
    intervals: list[tuple[int, int]] = field(default_factory=list)
    commands: int = 0
    retired: int = 0
    records: list[dict] = field(default_factory=list)
    stalls: dict[str, int] = field(default_factory=dict)


@dataclass
class Summary:
    """What :func:`summarize` measured.

    Attributes
    ----------
    file : Path
    scope : str
    timescale_s : Fraction
        Seconds per VCD time unit.
    period : int or None
        Clock period in VCD time units (``None`` with fewer than two edges).
    first_cycle : int
        First cycle counted (index of a rising edge).
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
    """
    file: Path
    scope: str
    timescale_s: Fraction
    period: int | None
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
            "first_cycle": self.first_cycle, "counter_window": self.counter_window,
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
        lines = [f"{self.file}: scope {self.scope}, clock period {period} ns, "
                 f"{self.cycles} cycles (from cycle {self.first_cycle}"
                 + (f"; CYCLES {self.counter_window[0]}..{self.counter_window[1]}"
                    if self.counter_window else "") + ")", "",
                 f"{'engine':<8} {'busy':>8} {'util':>7} {'cmds':>5} {'done':>5}  timeline "
                 f"(cycles {self.first_cycle}..{self.first_cycle + self.cycles}, "
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
        lo, n = self.first_cycle, self.cycles
        busy = [0.0] * width
        for a, b in intervals:
            for col in range((a - lo) * width // n, min(width, ((b - lo) * width - 1) // n + 1)):
                c0 = lo + col * n / width
                c1 = lo + (col + 1) * n / width
                busy[col] += max(0.0, min(b, c1) - max(a, c0)) / (c1 - c0)
        return "".join("#" if f >= 0.999 else "+" if f > 0.5 else "." if f > 0 else " "
                       for f in busy)


class _Stop(Exception):
    """Raised from a callback to end streaming at the window end."""


class _Window:
    """Which sampled cycles count: rising-edge indices ``[lo, hi)`` (``cycles_id`` None), or
    cycles whose sampled ``CYCLES`` value is in ``[lo, hi)``."""

    def __init__(self, lo: int, hi: int | None, cycles_id: str | None):
        self.lo, self.hi, self.cycles_id = lo, hi, cycles_id

    def admits(self, cycle: int, vals: dict[str, str]) -> bool:
        """Whether ``cycle`` counts; raises :class:`_Stop` past the window."""
        now = cycle if self.cycles_id is None else to_int(vals[self.cycles_id])
        if now is None or now < self.lo:
            return False
        if self.hi is not None and now >= self.hi:
            raise _Stop
        return True


class _EngineTally:
    """Counts one engine's probes, cycle by cycle."""

    def __init__(self, name: str, probes: EngineProbes, stalls: dict[str, str], lo: int):
        self.name = name
        self.stats = EngineStats(stalls={"sem": 0} | dict.fromkeys(stalls, 0))
        self.busy, self.done, self.take = probes.busy.id, probes.done.id, probes.take.id
        self.sem = probes.sem_stall.id
        self.record_ids = (probes.index.id, probes.opcode.id, probes.queue.id)
        self.resource = list(stalls.items())    # (reason, source id)
        self.lo = lo
        self.open_since: int | None = None
        #: take cycles of the commands in the engine, oldest first (the matrix engine holds
        #: several; they retire in order)
        self.taken_at: deque[int] = deque()

    def sample(self, cycle: int, vals: dict[str, str]) -> None:
        st = self.stats
        busy = vals[self.busy]
        if busy == "1":
            st.busy_cycles += 1
            if self.open_since is None:
                self.open_since = cycle
        else:
            if busy != "0":
                st.unknown_cycles += 1
            self.close(cycle)
        if vals[self.done] == "1":          # the oldest command; a take this cycle is newer
            self.retire(cycle, vals)
        if vals[self.take] == "1":
            st.commands += 1
            self.taken_at.append(cycle)
        if vals[self.sem] == "1":
            st.stalls["sem"] += 1
        if busy == "1":
            for reason, bit in self.resource:
                if vals[bit] == "1":
                    st.stalls[reason] += 1

    def retire(self, cycle: int, vals: dict[str, str]) -> None:
        index, opcode, queue = (to_int(vals[i]) for i in self.record_ids)
        start = self.taken_at.popleft() if self.taken_at else self.lo
        self.stats.retired += 1
        self.stats.records.append({"engine": self.name, "index": index, "opcode": opcode,
                                   "start_cycle": start, "end_cycle": cycle + 1,
                                   "queue": queue})

    def close(self, cycle: int) -> None:
        """End a busy interval open before ``cycle``."""
        if self.open_since is not None:
            self.stats.intervals.append((self.open_since, cycle))
            self.open_since = None


class _Tally:
    """Everything :func:`summarize` counts, fed by :class:`ClockSampler` (``on_cycle``)."""

    def __init__(self, sig: NpuSignals, window: _Window):
        self.window = window
        self.engines = {}
        for name, probes in sig.engines.items():
            stalls = {key.split(".")[2]: v.id for key, v in sig.stalls.items()
                      if key.split(".")[1] == name}
            self.engines[name] = _EngineTally(name, probes, stalls, window.lo)
        busy = {name: e.busy.id for name, e in sig.engines.items()}
        self.dma_ids = [busy[n] for n in ("load", "store", "matrix")]
        self.chans = [(ch, v.id, r.id) for ch, (v, r) in sig.axi.items()]
        self.wstrb_id, self.rid_id = sig.wstrb.id, sig.rid.id if sig.rid else None
        self.bus_bytes = sig.bus_bytes
        self.handshakes = dict.fromkeys(AXI_CHANNELS, 0)
        self.r_bytes = self.w_bytes = self.dma_busy = self.overlap = 0
        self.r_by_id: dict[int, int] = {}
        self.cycles = 0
        self.first: int | None = None
        self.last = window.lo - 1

    def on_cycle(self, cycle: int, time: int, vals: dict[str, str]) -> None:
        if not self.window.admits(cycle, vals):
            return
        self.cycles += 1
        self.last = cycle
        if self.first is None:
            self.first = cycle
        for e in self.engines.values():
            e.sample(cycle, vals)
        load, store, matrix = (vals[i] == "1" for i in self.dma_ids)
        if load or store:
            self.dma_busy += 1
            self.overlap += matrix
        for ch, v, r in self.chans:
            if vals[v] == "1" and vals[r] == "1":
                self.handshakes[ch] += 1
                self.beat(ch, vals)

    def beat(self, ch: str, vals: dict[str, str]) -> None:
        """Bytes of one R or W handshake."""
        if ch == "r":
            self.r_bytes += self.bus_bytes
            if self.rid_id is not None:
                k = to_int(vals[self.rid_id])
                self.r_by_id[k] = self.r_by_id.get(k, 0) + self.bus_bytes
        elif ch == "w":
            strb = to_int(vals[self.wstrb_id])
            self.w_bytes += bin(strb).count("1") if strb is not None else 0

    def finish(self) -> dict[str, EngineStats]:
        """Close the busy intervals still open after the last cycle counted."""
        for e in self.engines.values():
            e.close(self.last + 1)
        return {name: e.stats for name, e in self.engines.items()}


def _check_window(unit: str, start: int | None, end: int | None) -> None:
    if unit not in ("cycle", "counter"):
        raise ValueError(f"unit must be 'cycle' or 'counter', not {unit!r}")
    if unit == "counter" and (start is None or end is None):
        raise ValueError("a window in counter cycles needs both start and end")
    if unit == "counter" and start < 1:
        raise ValueError(f"a window in counter cycles starts after reset (start >= 1, not "
                         f"{start}): CYCLES also reads 0 during reset")


def summarize(path: Path | str, *, start: int | None = None, end: int | None = None,
              scope: str | None = None, unit: str = "cycle") -> Summary:
    """Stream a VCD of an NPU run and measure engine activity, stalls and AXI traffic.

    Parameters
    ----------
    path : Path or str
    start, end : int, optional
        The window ``[start, end)``: rising-edge indices from 0 (``unit="cycle"``), or
        values of the NPU's ``CYCLES`` counter sampled at the edges (``unit="counter"``,
        needs ``csr.cycles`` in the file; the window of a counter snapshot pair is
        ``[before["cycles"], after["cycles"])``).
    scope : str, optional
        The NPU instance scope (found automatically by default).
    unit : {"cycle", "counter"}

    Returns
    -------
    Summary

    Raises
    ------
    ValueError
        For an unknown ``unit``, or ``unit="counter"`` without both ends or with
        ``start < 1``.
    VcdFormatError
        If the file is malformed (with the line).
    VcdProbeError
        If the VCD lacks the named probes (it predates them; the message names them).
    VcdSignalError
        If another required signal is missing.
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
    lo = 0 if start is None else start
    tally = _Tally(sig, _Window(lo, end, sig.cycles.id if by_counter else None))
    sampler = ClockSampler(sig.clock, sig.all(), tally.on_cycle)
    with contextlib.suppress(_Stop):
        stream(path, header, sig.all(), sampler.step, with_previous=True)
    if by_counter and tally.cycles != end - lo:
        raise VcdError(f"{path}: the counter window [{lo}, {end}) has {end - lo} cycles, the "
                       f"file holds {tally.cycles} of them (CYCLES x, or outside the dump)")
    engines = tally.finish()
    first = tally.first if by_counter and tally.first is not None else lo
    return Summary(path, sig.scope, header.timescale_s, sampler.period, first, tally.cycles,
                   engines, tally.handshakes, tally.r_bytes, tally.w_bytes, tally.r_by_id,
                   tally.bus_bytes, tally.dma_busy, tally.overlap,
                   (lo, end) if by_counter else None)
