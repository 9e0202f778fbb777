"""Waveform tools for NPU runs: summary (engine busy timelines, AXI traffic), counter
cross-check, windowing (cut) and the GTKWave save file.

Everything streams (see :mod:`cosim.waves.vcd`): memory depends on the number of signals and of
commands, not on the length of the file.

Signals used, relative to the NPU instance scope (found as the scope that holds
``mem__arvalid`` and a ``cmdproc`` child; ``tb_top.u_npu`` under the cosim testbench):

* ``clk``: cycles are counted at its rising edges (``0`` -> ``1``); cycle ``n`` is the
  ``n``-th rising edge of the file, counted from 0, and values are sampled just before it;
* ``cmdproc.<engine>__busy``, ``cmdproc.<engine>__done``, ``cmdproc.<engine>__cmd__valid``,
  ``cmdproc.<engine>__cmd__ready`` for every engine port of the command processor
  (found by the pattern ``cmdproc.(\\w+)__busy``: load, store, matrix, vector today);
* ``cmdproc.<engine>_queue.cur_index`` and ``cur_opcode`` (optional: command records);
* ``mem__{ar,r,aw,w,b}{valid,ready}``, ``mem__wstrb``, ``mem__rdata`` (its width gives the
  bytes per R beat), ``mem__rid`` (optional: R bytes per AXI id);
* ``csr.cycles`` (optional): the NPU's ``CYCLES`` counter, for windows given in counter cycles
  (``unit="counter"``);
* the performance counters' sources (optional), to re-derive every counter of
  :data:`hw.isa.COUNTER_NAMES` from first principles:

  - ``sem`` stalls: per engine, ``cmdproc.<engine>_queue.fifo<q>.r_rdy`` / ``.r_data`` (the
    head command of queue ``q`` in the engine's FIFO, a :class:`hw.cmdproc.QueueEntry`),
    ``cmdproc.<engine>_queue.stop`` / ``.flush`` and ``.sems`` (the semaphore values): the
    head's wait is decoded and compared with the semaphore here, in Python;
  - resource stalls: the NPU-level copies of the fields of the ``stall`` ports of ``dma``
    and ``tile`` (``stall_load_dram_read`` ..., :func:`hw.top.stall_source_name` of the pairs
    of :data:`hw.top.RESOURCE_STALLS`), counted while the engine is busy.

Counters and the VCD of the same run agree exactly (:func:`check_counters`,
:func:`check_counter_snapshots`): a snapshot of the counters taken in the cycle in which
``CYCLES`` reads ``s`` counts the cycles ``c < s``, so the difference of two snapshots equals
the figures of :func:`summarize` over the cycles whose sampled ``csr.cycles`` is in
``[before["cycles"], after["cycles"])``.
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

from cosim.waves.vcd import (
    ClockSampler,
    VcdError,
    VcdFormatError,
    VcdHeader,
    VcdSignalError,
    VcdVar,
    read_header,
    stream,
    to_int,
)
from hw.cmdproc import QueueEntry
from hw.isa import COUNTER_BITS
from hw.top import RESOURCE_STALLS, stall_source_name

__all__ = [
    "find_npu_scope", "NpuSignals", "locate_signals", "EngineStats", "Summary", "summarize",
    "CounterCheck", "check_counters", "counter_delta", "check_counter_snapshots", "cut",
    "CutResult", "write_gtkw", "gtkw_text", "GTKW_GROUPS",
]

AXI_CHANNELS = ("ar", "r", "aw", "w", "b")


def find_npu_scope(header: VcdHeader) -> str:
    """Dotted scope of the NPU instance: the one holding ``mem__arvalid`` and a ``cmdproc``
    child (the shortest, if several).

    Raises
    ------
    VcdSignalError
        If no scope has both.
    """
    scopes = set(header.scopes)
    hits = sorted((v.scope for v in header.vars
                   if v.name == "mem__arvalid" and f"{v.scope}.cmdproc" in scopes),
                  key=lambda s: (s.count("."), s))
    if not hits:
        raise VcdSignalError("<npu>.mem__arvalid", (v.path for v in header.vars
                                                    if v.name.endswith("arvalid")))
    return hits[0]


def _queue_entry_fields() -> tuple[int, int, int]:
    """Bit offsets in a :class:`hw.cmdproc.QueueEntry` of ``flags.wait``, ``wait_sem`` and
    ``wait_value`` (from the layouts, so nothing is re-declared here)."""
    from amaranth.lib import data

    from hw.isa import Command, Flags, Header
    cmd = data.Layout.cast(QueueEntry)["cmd"].offset
    hdr = cmd + data.Layout.cast(Command)["header"].offset
    h = data.Layout.cast(Header)
    wait = hdr + h["flags"].offset + data.Layout.cast(Flags)["wait"].offset
    return wait, hdr + h["wait_sem"].offset, hdr + h["wait_value"].offset


_WAIT_BIT, _WAIT_SEM, _WAIT_VALUE = _queue_entry_fields()


@dataclass(frozen=True)
class SemStallSignals:
    """What the ``sem`` stall of one engine is derived from (see the module docstring).

    Attributes
    ----------
    heads : list of (VcdVar, VcdVar)
        Per queue: ``r_rdy`` and ``r_data`` of its FIFO in front of the engine.
    stop, flush, sems : VcdVar
    """
    heads: list[tuple[VcdVar, VcdVar]]
    stop: VcdVar
    flush: VcdVar
    sems: VcdVar

    def all(self) -> list[VcdVar]:
        return [v for pair in self.heads for v in pair] + [self.stop, self.flush, self.sems]


@dataclass(frozen=True)
class EngineSignals:
    """The command port of one engine, as seen at the command processor."""
    busy: VcdVar
    done: VcdVar | None
    cmd_valid: VcdVar | None
    cmd_ready: VcdVar | None
    cur_index: VcdVar | None
    cur_opcode: VcdVar | None
    sem: SemStallSignals | None = None


@dataclass(frozen=True)
class NpuSignals:
    """Where the summary's signals are in one VCD.

    Attributes
    ----------
    scope : str
        The NPU instance.
    clock : VcdVar
    engines : dict
        Engine name -> :class:`EngineSignals`, in file order.
    axi : dict
        Channel (``ar``, ``r``, ``aw``, ``w``, ``b``) -> ``(valid, ready)``.
    wstrb, rdata : VcdVar
    rid : VcdVar or None
    cycles : VcdVar or None
        The NPU's ``CYCLES`` counter (``csr.cycles``).
    stalls : dict
        Resource stall counter name (``stall.<engine>.<reason>``) -> its 1-bit source.
    """
    scope: str
    clock: VcdVar
    engines: dict[str, EngineSignals]
    axi: dict[str, tuple[VcdVar, VcdVar]]
    wstrb: VcdVar
    rdata: VcdVar
    rid: VcdVar | None
    cycles: VcdVar | None = None
    stalls: dict[str, VcdVar] = field(default_factory=dict)

    def all(self) -> list[VcdVar]:
        out = [self.clock, self.wstrb, self.rdata] + ([self.rid] if self.rid else [])
        out += [self.cycles] if self.cycles else []
        for e in self.engines.values():
            out += [s for s in (e.busy, e.done, e.cmd_valid, e.cmd_ready, e.cur_index,
                                e.cur_opcode) if s is not None]
            out += e.sem.all() if e.sem else []
        for valid, ready in self.axi.values():
            out += [valid, ready]
        out += list(self.stalls.values())
        return list(dict.fromkeys(out))

    @property
    def bus_bytes(self) -> int:
        """Bytes per AXI data beat."""
        return self.rdata.width // 8


def locate_signals(header: VcdHeader, scope: str | None = None) -> NpuSignals:
    """Find the NPU's signals in a VCD header (see the module docstring for the names).

    Raises
    ------
    VcdSignalError
        If a required signal is missing (the message names it and similar ones).
    """
    s = find_npu_scope(header) if scope is None else scope
    clock = header.get(f"{s}.clk") or header.find(f"{s.rsplit('.', 1)[0]}.clk")
    engines: dict[str, EngineSignals] = {}
    busy = header.match(re.escape(f"{s}.cmdproc.") + r"(\w+?)__busy")
    # keep engine ports that have a queue (the processor also holds a queue's own
    # ``engine__busy``); without queue scopes, keep every ``<name>__busy``
    queued = [v for v in busy if f"{v.base}".removesuffix("__busy") + "_queue" in header.scopes]
    for v in queued or busy:
        name = v.name.removesuffix("__busy")
        p = f"{s}.cmdproc.{name}"
        q = f"{s}.cmdproc.{name}_queue"
        engines[name] = EngineSignals(v, header.get(f"{p}__done"), header.get(f"{p}__cmd__valid"),
                                      header.get(f"{p}__cmd__ready"), header.get(f"{q}.cur_index"),
                                      header.get(f"{q}.cur_opcode"), _sem_signals(header, q))
    if not engines:
        raise VcdSignalError(f"{s}.cmdproc.<engine>__busy",
                             (v.path for v in header.vars if v.name.endswith("busy")))
    axi = {ch: (header.find(f"{s}.mem__{ch}valid"), header.find(f"{s}.mem__{ch}ready"))
           for ch in AXI_CHANNELS}
    stalls = {}
    for engine, reason in RESOURCE_STALLS:
        v = header.get(f"{s}.{stall_source_name(engine, reason)}")
        if v is not None and engine in engines:
            stalls[f"stall.{engine}.{reason}"] = v
    return NpuSignals(s, clock, engines, axi, header.find(f"{s}.mem__wstrb"),
                      header.find(f"{s}.mem__rdata"), header.get(f"{s}.mem__rid"),
                      header.get(f"{s}.csr.cycles"), stalls)


def _sem_signals(header: VcdHeader, queue_scope: str) -> SemStallSignals | None:
    """The sem-stall sources of one engine queue, or None if the file lacks any of them."""
    heads = []
    q = 0
    while (rdy := header.get(f"{queue_scope}.fifo{q}.r_rdy")) is not None:
        data_ = header.get(f"{queue_scope}.fifo{q}.r_data")
        if data_ is None:
            return None
        heads.append((rdy, data_))
        q += 1
    rest = [header.get(f"{queue_scope}.{n}") for n in ("stop", "flush", "sems")]
    if not heads or any(v is None for v in rest):
        return None
    return SemStallSignals(heads, *rest)


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
        Commands taken (``cmd.valid & cmd.ready``).
    retired : int
        ``done`` pulses.
    records : list of dict
        One per retired command: ``{engine, index, opcode, start_cycle, end_cycle}`` (index
        and opcode ``None`` if the queue's ``cur_index``/``cur_opcode`` are not in the file).
    stalls : dict
        Stall reason -> cycles, for the reasons whose sources are in the file (``sem`` from
        the engine queue's FIFO heads and semaphores, the others from the ``stall`` ports).
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
        """Command records of all engines, by start cycle (queue 0: one hardware queue)."""
        recs = [dict(r, queue=0) for e in self.engines.values() for r in e.records]
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
    VcdSignalError
        If a required signal is missing.
    VcdError
        With ``unit="counter"``, if the file does not hold every cycle of the window.
    """
    if unit not in ("cycle", "counter"):
        raise ValueError(f"unit must be 'cycle' or 'counter', not {unit!r}")
    by_counter = unit == "counter"
    if by_counter and (start is None or end is None):
        raise ValueError("a window in counter cycles needs both start and end")
    if by_counter and start < 1:
        raise ValueError(f"a window in counter cycles starts after reset (start >= 1, not "
                         f"{start}): CYCLES also reads 0 during reset")
    path = Path(path)
    header = read_header(path)
    sig = locate_signals(header, scope)
    if by_counter and sig.cycles is None:
        raise VcdSignalError(f"{sig.scope}.csr.cycles", (v.path for v in header.vars
                                                         if v.name.startswith("cycles")))
    lo = 0 if start is None else start
    hi = end
    engines = {name: EngineStats() for name in sig.engines}
    for name, e in sig.engines.items():
        if e.sem is not None:
            engines[name].stalls["sem"] = 0
    for key in sig.stalls:
        _, name, reason = key.split(".")
        engines[name].stalls[reason] = 0
    open_since: dict[str, int | None] = dict.fromkeys(sig.engines)
    taken_at: dict[str, int] = {}
    hs = dict.fromkeys(AXI_CHANNELS, 0)
    totals = {"r": 0, "w": 0, "cycles": 0, "last": lo - 1, "first": -1, "dma": 0,
              "overlap": 0}
    r_by_id: dict[int, int] = {}
    bus_bytes = sig.bus_bytes
    eng = [(name, e.busy.id, e.done.id if e.done else None,
            e.cmd_valid.id if e.cmd_valid else None, e.cmd_ready.id if e.cmd_ready else None,
            e.cur_index.id if e.cur_index else None, e.cur_opcode.id if e.cur_opcode else None)
           for name, e in sig.engines.items()]
    sem_src = [(name, [(r.id, d.id) for r, d in e.sem.heads], e.sem.stop.id, e.sem.flush.id,
                e.sem.sems.id) for name, e in sig.engines.items() if e.sem is not None]
    res_src = []
    for key, var in sig.stalls.items():
        _, name, reason = key.split(".")
        res_src.append((engines[name].stalls, reason, sig.engines[name].busy.id, var.id))
    busy_ids = {name: e.busy.id for name, e in sig.engines.items()}
    dma_ids = [busy_ids.get(n) for n in ("load", "store", "matrix")]
    chans = [(ch, v.id, r.id) for ch, (v, r) in sig.axi.items()]
    wstrb_id, rid_id = sig.wstrb.id, sig.rid.id if sig.rid else None
    cycles_id = sig.cycles.id if sig.cycles else ""

    def on_cycle(cycle: int, time: int, vals: dict[str, str]) -> None:
        if by_counter:
            now = to_int(vals[cycles_id])
            if now is None or now < lo:
                return
            if now >= hi:
                raise _Stop
        else:
            if cycle < lo:
                return
            if hi is not None and cycle >= hi:
                raise _Stop
        totals["cycles"] += 1
        totals["last"] = cycle
        if totals["first"] < 0:
            totals["first"] = cycle
        for name, busy, done, cv, cr, idx, opc in eng:
            st = engines[name]
            b = vals[busy]
            if b == "1":
                st.busy_cycles += 1
                if open_since[name] is None:
                    open_since[name] = cycle
            else:
                if b != "0":
                    st.unknown_cycles += 1
                if open_since[name] is not None:
                    st.intervals.append((open_since[name], cycle))
                    open_since[name] = None
            if cv is not None and vals[cv] == "1" and vals[cr] == "1":
                st.commands += 1
                taken_at[name] = cycle
            if done is not None and vals[done] == "1":
                st.retired += 1
                st.records.append({
                    "engine": name,
                    "index": to_int(vals[idx]) if idx else None,
                    "opcode": to_int(vals[opc]) if opc else None,
                    "start_cycle": taken_at.pop(name, lo), "end_cycle": cycle + 1})
        if None not in dma_ids:
            load, store, matrix = (vals[i] == "1" for i in dma_ids)
            if load or store:
                totals["dma"] += 1
                totals["overlap"] += matrix
        for name, heads, stop, flush, sems in sem_src:
            if vals[busy_ids[name]] == "0" and _sem_stalled(vals, heads, stop, flush, sems):
                engines[name].stalls["sem"] += 1
        for stalls, reason, busy, bit in res_src:
            if vals[busy] == "1" and vals[bit] == "1":
                stalls[reason] += 1
        for ch, v, r in chans:
            if vals[v] == "1" and vals[r] == "1":
                hs[ch] += 1
                if ch == "r":
                    totals["r"] += bus_bytes
                    if rid_id is not None:
                        k = to_int(vals[rid_id])
                        r_by_id[k] = r_by_id.get(k, 0) + bus_bytes
                elif ch == "w":
                    strb = to_int(vals[wstrb_id])
                    totals["w"] += bin(strb).count("1") if strb is not None else 0

    sampler = ClockSampler(sig.clock, sig.all(), on_cycle)
    with contextlib.suppress(_Stop):
        stream(path, header, sig.all(), sampler.step, with_previous=True)
    if by_counter and totals["cycles"] != hi - lo:
        raise VcdError(f"{path}: the counter window [{lo}, {hi}) has {hi - lo} cycles, the "
                       f"file holds {totals['cycles']} of them (CYCLES x, or outside the dump)")
    last = totals["last"] + 1
    for name, since in open_since.items():
        if since is not None:
            engines[name].intervals.append((since, last))
    first = totals["first"] if by_counter and totals["first"] >= 0 else lo
    return Summary(path, sig.scope, header.timescale_s, sampler.period, first, totals["cycles"],
                   engines, hs, totals["r"], totals["w"], r_by_id, bus_bytes, totals["dma"],
                   totals["overlap"], (lo, hi) if by_counter else None)


def _sem_stalled(vals: dict[str, str], heads: list[tuple[str, str]], stop_id: str,
                 flush_id: str, sems_id: str) -> bool:
    """The ``sem`` stall condition of an idle engine (:data:`hw.isa.STALL_REASONS`), from its
    FIFO heads: none ready, and some live queue's head waits on an unsatisfied semaphore."""
    stop, flush = to_int(vals[stop_id]), to_int(vals[flush_id])
    if stop is None or flush is None:
        return False
    blocked = False
    sems = None
    for q, (rdy, rdata) in enumerate(heads):
        if vals[rdy] != "1" or (stop >> q) & 1 or (flush >> q) & 1:
            continue
        entry = to_int(vals[rdata])
        if entry is None:
            return False
        if not (entry >> _WAIT_BIT) & 1:
            return False                    # a ready head: the engine is not stalled
        if sems is None:
            sems = to_int(vals[sems_id])
            if sems is None:
                return False
        sem = (entry >> _WAIT_SEM) & 0xFF
        if (sems >> (32 * sem)) & 0xFFFF_FFFF >= (entry >> _WAIT_VALUE) & 0xFFFF_FFFF:
            return False
        blocked = True
    return blocked


class _Stop(Exception):
    """Raised from a callback to end streaming at the window end."""


# -- counters ------------------------------------------------------------------------------

@dataclass(frozen=True)
class CounterCheck:
    """Result of :func:`check_counters`.

    Attributes
    ----------
    matched : dict
        Name -> value, equal in both.
    mismatched : dict
        Name -> ``(vcd_value, counter_value)``.
    unchecked : list of str
        Counters the VCD summary has no figure for.
    """
    matched: dict[str, int]
    mismatched: dict[str, tuple[int, int]]
    unchecked: list[str]

    @property
    def ok(self) -> bool:
        return not self.mismatched

    def format(self) -> str:
        lines = [f"counters: {len(self.matched)} equal, {len(self.mismatched)} different, "
                 f"{len(self.unchecked)} not measurable from the VCD"]
        lines += [f"  MISMATCH {k}: vcd {a} != counter {b} (diff {a - b:+d})"
                  for k, (a, b) in sorted(self.mismatched.items())]
        if self.unchecked:
            lines.append("  unchecked: " + ", ".join(self.unchecked))
        return "\n".join(lines)


def _flatten(d: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def check_counters(summary: Summary, counters: dict) -> CounterCheck:
    """Compare the summary's figures with hardware counter values of the same run.

    Parameters
    ----------
    summary : Summary
    counters : dict
        Counter name -> integer value; nested dicts are flattened with ``.``
        (``{"busy": {"load": 12}}`` is ``busy.load``). Names as in :meth:`Summary.figures`.

    Returns
    -------
    CounterCheck
        Exact equality is expected for every name both sides have.

    Raises
    ------
    TypeError
        If a counter value is not an integer.
    """
    figs = summary.figures()
    matched, mismatched, unchecked = {}, {}, []
    for k, v in _flatten(counters).items():
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"counter {k!r} must be an integer, not {v!r}")
        if k not in figs:
            unchecked.append(k)
        elif figs[k] == v:
            matched[k] = v
        else:
            mismatched[k] = (figs[k], v)
    return CounterCheck(matched, mismatched, unchecked)


def counter_delta(before: dict, after: dict) -> dict[str, int]:
    """``after - before`` of two counter snapshots (``Device.counters()``, or their JSON),
    modulo each counter's width (:data:`hw.isa.COUNTER_BITS`; 32 bits for unknown names).

    Raises
    ------
    KeyError
        If a name of ``after`` is missing in ``before``.
    """
    return {k: (int(v) - int(before[k])) % (1 << COUNTER_BITS.get(k, 32))
            for k, v in after.items()}


def check_counter_snapshots(vcd: Path | str, before: dict, after: dict, *,
                            scope: str | None = None) -> tuple[Summary, CounterCheck]:
    """Check two counter snapshots of a traced run against its VCD, exactly.

    The window is ``[before["cycles"], after["cycles"])`` in the NPU's ``CYCLES`` (so the
    snapshots must come from a timed backend); every counter of the difference is compared
    with the figure re-derived from the VCD over those cycles.

    Returns
    -------
    (Summary, CounterCheck)

    Raises
    ------
    KeyError
        If a snapshot has no ``cycles``.
    VcdError, VcdFormatError, VcdSignalError
        As :func:`summarize` with ``unit="counter"``.
    """
    s = summarize(vcd, start=int(before["cycles"]), end=int(after["cycles"]), scope=scope,
                  unit="counter")
    return s, check_counters(s, counter_delta(before, after))


# -- windowing -----------------------------------------------------------------------------

@dataclass(frozen=True)
class CutResult:
    """What :func:`cut` wrote.

    Attributes
    ----------
    out : Path
    start_time, end_time : int
        The window in VCD time units (inclusive).
    bytes_in, bytes_out : int
        Bytes read from the source (up to the window end) and written.
    """
    out: Path
    start_time: int
    end_time: int
    bytes_in: int
    bytes_out: int


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


def cut(src: Path | str, dst: Path | str, start: int, end: int, *, unit: str = "cycle",
        clock: str | None = None) -> CutResult:
    """Copy a window of a VCD into a smaller, self-contained VCD.

    The header is copied unchanged (plus a ``$comment`` naming the window). A ``$dumpvars``
    at the last timestamp before the window gives every variable the value it holds when the
    window opens (so a rising edge at the window start stays an edge), then the value changes
    inside the window follow; times stay absolute. For cycles, the window holds the rising
    edges ``start .. end - 1``, so ``summarize(cut_file)`` equals
    ``summarize(src, start=start, end=end)`` (with cycles renumbered from 0).
    The source is streamed once and reading stops at the window end; memory holds one value
    per identifier code.

    Parameters
    ----------
    src, dst : Path or str
    start, end : int
        In cycles (``unit="cycle"``: rising-edge indices of the clock, counted from 0; the
        window is ``[start, end)``) or VCD time units (``unit="time"``; ``[start, end]``).
    unit : {"cycle", "time"}
    clock : str, optional
        Dotted clock name for ``unit="cycle"`` (default: the NPU's ``clk``).

    Returns
    -------
    CutResult

    Raises
    ------
    ValueError
        If ``end < start`` or ``unit`` is unknown.
    VcdFormatError, VcdSignalError
    """
    src, dst = Path(src), Path(dst)
    if unit not in ("cycle", "time"):
        raise ValueError(f"unit must be 'cycle' or 'time', not {unit!r}")
    if end < start:
        raise ValueError(f"window end {end} is before its start {start}")
    header = read_header(src)
    if unit == "cycle":
        clk = header.find(clock) if clock else locate_signals(header).clock
        first, period = _clock_timing(src, header, clk)
        t0, t1 = first + start * period, first + end * period - 1
    else:
        t0, t1 = start, end
    widths = {i: vs[0] for i, vs in header.by_id.items()}
    state: dict[str, str] = {}
    n_in = 0
    with open(src, encoding="utf-8", errors="surrogateescape", newline="") as f, \
            open(dst, "w", encoding="utf-8", errors="surrogateescape") as out:
        for lineno, line in enumerate(f, 1):
            n_in += len(line)
            if lineno == header.end_line:
                out.write(f"$comment window {t0}..{t1} ({start}..{end} {unit}s) of {src.name} "
                          "$end\n")
                out.write(line)
                break
            out.write(line)
        emitting = False
        skipping_section = False
        before: int | None = None  # last timestamp before the window
        lineno = header.end_line

        def dump_state(t: int) -> None:
            out.write(f"#{t}\n$dumpvars\n")
            for ident, var in widths.items():
                v = state.get(ident)
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

        for line in f:
            lineno += 1
            n_in += len(line)
            c = line[:1]
            if c == "#":
                toks = line.split()
                try:
                    t = int(toks[0][1:])
                except ValueError:
                    raise VcdFormatError(src, lineno, f"bad time {toks[0]!r}") from None
                if t > t1:
                    break
                if not emitting and t >= t0:
                    emitting = True
                    at = t0 if before is None else before
                    dump_state(at)
                    if at == t:  # no earlier time: do not repeat the timestamp
                        toks[0] = ""
                        rest = " ".join(toks[1:])
                        for tok in toks[1:]:
                            _apply(state, tok, src, lineno)
                        if rest:
                            out.write(rest + "\n")
                        continue
                for tok in toks[1:]:
                    _apply(state, tok, src, lineno)
                if emitting:
                    out.write(line)
                else:
                    before = t
                continue
            if c in "01xXzZbBrRsS":
                _apply(state, line.strip(), src, lineno)
            elif c == "$" or skipping_section:
                s = line.strip()
                if s.startswith("$comment") and "$end" not in s:
                    skipping_section = True
                elif skipping_section and "$end" in s:
                    skipping_section = False
            if emitting:
                out.write(line)
        if not emitting:
            dump_state(t0 if before is None else before)
    return CutResult(dst, t0, t1, n_in, dst.stat().st_size)


def _apply(state: dict[str, str], tok: str, src: Path, lineno: int) -> None:
    if not tok:
        return
    c = tok[0]
    if c in "bBrRsS":
        parts = tok[1:].split()
        if len(parts) != 2:
            raise VcdFormatError(src, lineno, f"vector change {tok!r} needs a value and an "
                                              "identifier code")
        state[parts[1]] = parts[0]
    elif c in "01xXzZ":
        if len(tok) < 2:
            raise VcdFormatError(src, lineno, f"value change {tok!r} without an identifier")
        state[tok[1:]] = c


# -- GTKWave save file ---------------------------------------------------------------------

#: (group, [regular expressions over names relative to the NPU scope]); each pattern keeps
#: file order. Names starting with ``$`` (Amaranth temporaries) never match.
GTKW_GROUPS: list[tuple[str, list[str]]] = [
    ("Clock, reset, interrupt", [r"clk", r"rst", r"irq"]),
    ("Command processor", [r"cmdproc\.(busy|head|tail|fetch_state)",
                           r"cmdproc\.\w+__cmd__(valid|ready)",
                           r"cmdproc\.\w+__(busy|done|error)",
                           r"cmdproc\.\w+_queue\.(cur_index|cur_opcode|idle)"]),
    ("DMA load", [r"dma\.load__(busy|done|error)", r"dma\.load_control\.control_state",
                  r"dma\.load_mover\.(start|finished|idle|bus_error)"]),
    ("DMA store", [r"dma\.store__(busy|done|error)", r"dma\.store_control\.control_state",
                   r"dma\.store_mover\.(start|finished|idle|bus_error)"]),
    ("AXI AR", [r"mem__ar(valid|ready|id|addr|len|size|burst)"]),
    ("AXI R", [r"mem__r(valid|ready|id|data|resp|last)"]),
    ("AXI AW", [r"mem__aw(valid|ready|id|addr|len|size|burst)"]),
    ("AXI W", [r"mem__w(valid|ready|data|strb|last)"]),
    ("AXI B", [r"mem__b(valid|ready|id|resp)"]),
    ("Systolic array", [r"tile\.matrix__(busy|done|error)", r"tile\.matrix\.\w*_state"]),
    ("Vector unit", [r"tile\.vector__(busy|done|error)", r"tile\.vector\.(\w+\.)?\w*_state"]),
    ("Performance counters", [r"csr\.(cycles|snapshot)", r"cmdproc\.sem_stall",
                              r"stall_\w+"]),
]

_GTKW_BIT, _GTKW_HEX = "@28", "@22"
_GTKW_GROUP_BEGIN, _GTKW_GROUP_END = "@800200", "@1000200"


def gtkw_text(header: VcdHeader, *, vcd_path: Path | str | None = None,
              scope: str | None = None) -> tuple[str, list[str]]:
    """Text of a GTKWave save file grouping the NPU's signals, from the VCD's hierarchy.

    Parameters
    ----------
    header : VcdHeader
    vcd_path : Path or str, optional
        Written as ``[dumpfile]`` (default: the header's file).
    scope : str, optional
        NPU scope (found automatically by default).

    Returns
    -------
    (str, list of str)
        The file text, and the patterns of :data:`GTKW_GROUPS` that matched nothing (to show
        when the design changed).
    """
    s = find_npu_scope(header) if scope is None else scope
    rel = {}
    for v in header.vars:
        if v.path.startswith(s + ".") and not v.name.startswith("$"):
            rel.setdefault(v.base[len(s) + 1:], v)
    lines = ["[*] NPU signal groups, generated by cosim.waves.write_gtkw",
             f'[dumpfile] "{Path(vcd_path or header.file).resolve()}"',
             "[timestart] 0", "[size] 1600 900", "[signals_width] 320", "[sst_width] 260",
             "[sst_expanded] 1"]
    missing = []
    for group, patterns in GTKW_GROUPS:
        chosen: list[VcdVar] = []
        for pat in patterns:
            rx = re.compile(pat)
            hits = [v for name, v in rel.items() if rx.fullmatch(name) and v not in chosen]
            if not hits:
                missing.append(f"{group}: {pat}")
            chosen += hits
        if not chosen:
            continue
        lines += [_GTKW_GROUP_BEGIN, f"-{group}"]
        fmt = None
        for v in chosen:
            want = _GTKW_BIT if v.width == 1 else _GTKW_HEX
            if want != fmt:
                lines.append(want)
                fmt = want
            lines.append(v.path)
        lines += [_GTKW_GROUP_END, f"-{group}"]
    return "\n".join(lines) + "\n", missing


def write_gtkw(vcd: Path | str, out: Path | str | None = None) -> tuple[Path, list[str]]:
    """Write ``<vcd stem>.gtkw`` (or ``out``) beside a VCD of an NPU run.

    Returns
    -------
    (Path, list of str)
        The save file, and the group patterns that matched no signal.

    Raises
    ------
    VcdFormatError, VcdSignalError
    """
    vcd = Path(vcd)
    out = vcd.with_suffix(".gtkw") if out is None else Path(out)
    text, missing = gtkw_text(read_header(vcd), vcd_path=vcd)
    out.write_text(text)
    return out, missing


def load_counters(path: Path | str) -> dict:
    """Read a counters JSON file: an object of integers, possibly nested, or a snapshot pair
    ``{"before": {...}, "after": {...}}`` of ``Device.counters()`` (see
    :func:`check_counter_snapshots`)."""
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{path}: counters must be a JSON object")
    return data
