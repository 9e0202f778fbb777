"""What :func:`cosim.waves.summarize` counts, cycle by cycle, from the values sampled at the
clock's rising edges (:class:`cosim.waves.vcd.EdgeSampler`), a batch of cycles at a time with
numpy. Every figure is counted as the performance counter of the same name counts it
(:func:`hw.top.counter_events`); the per-cycle rules are those of the old per-cycle loop:

* a cycle with ``busy`` 1 is busy, with ``busy`` x unknown; a busy interval opens at its
  first busy cycle and closes at the first cycle counted that is not busy;
* ``take`` counts a command and opens it; ``done`` retires the oldest open one (the matrix
  engine holds several, retired in order), with the ``index``, ``opcode`` and ``queue``
  probes of that cycle; a command taken before the window starts at the window's first
  cycle;
* ``sem_stall`` counts a ``sem`` stall; a resource stall source counts while busy;
* an AXI channel moves a beat when ``valid`` and ``ready`` are both 1.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from cosim.waves.signals import AXI_CHANNELS, EngineProbes, NpuSignals
from cosim.waves.vcd import UNKNOWN

__all__ = ["EngineStats", "Tally", "Window"]


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
        Busy periods ``[start, end)`` in absolute cycles.
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


class Window:
    """Which sampled cycles count: absolute cycles in ``[lo, hi)`` (``counter`` None), or
    cycles whose sampled ``CYCLES`` value (slot ``counter``) is in ``[lo, hi)``. Counting
    stops at the first cycle past the window."""

    def __init__(self, lo: int | None, hi: int | None, counter: int | None = None):
        self.lo, self.hi, self.counter = lo, hi, counter
        self.done = False

    def admit(self, cyc: np.ndarray, samples: np.ndarray) -> np.ndarray:
        """Mask of the rows that count (sets :attr:`done` past the window)."""
        now = cyc if self.counter is None else samples[:, self.counter]
        known = now != UNKNOWN if self.counter is not None else np.ones(len(now), bool)
        keep = known.copy()
        if self.hi is not None:
            past = np.flatnonzero(known & (now >= self.hi))
            if len(past):
                self.done = True
                keep[past[0]:] = False
        if self.lo is not None:
            keep &= now >= self.lo
        return keep


def _count(mask: np.ndarray) -> int:
    return int(np.count_nonzero(mask))


def _value(v: int) -> int | None:
    return None if v == UNKNOWN else int(v)


class _EngineTally:
    """One engine's probes, a batch of cycles at a time."""

    def __init__(self, name: str, probes: EngineProbes, slot: dict[str, int],
                 stalls: dict[str, int]):
        self.name = name
        self.stats = EngineStats(stalls={"sem": 0} | dict.fromkeys(stalls, 0))
        self.busy, self.done, self.take = (slot[p.id] for p in (probes.busy, probes.done,
                                                                 probes.take))
        self.sem = slot[probes.sem_stall.id]
        self.record_slots = [slot[p.id] for p in (probes.index, probes.opcode, probes.queue)]
        self.resource = list(stalls.items())    # (reason, slot)
        self.open_since: int | None = None
        #: take cycles of the commands in the engine, oldest first (the matrix engine holds
        #: several; they retire in order)
        self.taken_at: deque[int] = deque()

    def feed(self, cyc: np.ndarray, s: np.ndarray, first: int) -> None:
        st = self.stats
        busy = s[:, self.busy] == 1
        st.busy_cycles += _count(busy)
        st.unknown_cycles += _count(~busy & (s[:, self.busy] != 0))
        was = np.empty_like(busy)
        was[0] = self.open_since is not None
        was[1:] = busy[:-1]
        for r in np.flatnonzero(busy != was).tolist():
            if busy[r]:
                self.open_since = int(cyc[r])
            else:
                st.intervals.append((self.open_since, int(cyc[r])))
                self.open_since = None
        st.stalls["sem"] += _count(s[:, self.sem] == 1)
        for reason, slot in self.resource:
            st.stalls[reason] += _count(busy & (s[:, slot] == 1))
        take, done = s[:, self.take] == 1, s[:, self.done] == 1
        st.commands += _count(take)
        for r in np.flatnonzero(take | done).tolist():
            if done[r]:                 # the oldest command; a take this cycle is newer
                self.retire(int(cyc[r]), s[r], first)
            if take[r]:
                self.taken_at.append(int(cyc[r]))

    def retire(self, cycle: int, row: np.ndarray, first: int) -> None:
        index, opcode, queue = (_value(row[k]) for k in self.record_slots)
        start = self.taken_at.popleft() if self.taken_at else first
        self.stats.retired += 1
        self.stats.records.append({"engine": self.name, "index": index, "opcode": opcode,
                                   "start_cycle": start, "end_cycle": cycle + 1,
                                   "queue": queue})

    def close(self, cycle: int) -> None:
        """End a busy interval still open before ``cycle``."""
        if self.open_since is not None:
            self.stats.intervals.append((self.open_since, cycle))
            self.open_since = None


class Tally:
    """Everything :func:`cosim.waves.summarize` counts, fed the absolute cycles and sampled
    values of batches of rising edges (:meth:`feed`).

    Parameters
    ----------
    sig : NpuSignals
    slot : dict
        Identifier code -> column of the samples.
    window : Window
    """

    def __init__(self, sig: NpuSignals, slot: dict[str, int], window: Window):
        self.window = window
        self.engines = {}
        for name, probes in sig.engines.items():
            stalls = {key.split(".")[2]: slot[v.id] for key, v in sig.stalls.items()
                      if key.split(".")[1] == name}
            self.engines[name] = _EngineTally(name, probes, slot, stalls)
        busy = {name: slot[e.busy.id] for name, e in sig.engines.items()}
        self.dma = [busy.get(n) for n in ("load", "store", "matrix")]
        self.chans = [(ch, slot[v.id], slot[r.id]) for ch, (v, r) in sig.axi.items()]
        self.wstrb, self.rid = slot[sig.wstrb.id], slot[sig.rid.id] if sig.rid else None
        self.bus_bytes = sig.bus_bytes
        self.handshakes = dict.fromkeys(AXI_CHANNELS, 0)
        self.r_bytes = self.w_bytes = self.dma_busy = self.overlap = 0
        self.r_by_id: dict[int | None, int] = {}
        self.cycles = 0
        self.first: int | None = None
        self.last: int | None = None

    def feed(self, cyc: np.ndarray, samples: np.ndarray) -> None:
        """Count the admitted rows of one batch of edges."""
        keep = self.window.admit(cyc, samples)
        if not keep.any():
            return
        cyc, s = cyc[keep], samples[keep]
        self.cycles += len(cyc)
        if self.first is None:
            self.first = int(cyc[0])
        self.last = int(cyc[-1])
        for e in self.engines.values():
            e.feed(cyc, s, self.first)
        if None not in self.dma:
            load, store, matrix = (s[:, k] == 1 for k in self.dma)
            dma = load | store
            self.dma_busy += _count(dma)
            self.overlap += _count(dma & matrix)
        for ch, v, r in self.chans:
            beat = (s[:, v] == 1) & (s[:, r] == 1)
            self.handshakes[ch] += _count(beat)
            if ch == "r":
                self.read_beats(s[beat])
            elif ch == "w":
                strb = s[beat, self.wstrb]
                self.w_bytes += int(np.bitwise_count(
                    np.where(strb >= 0, strb, 0).astype(np.uint64)).sum())

    def read_beats(self, rows: np.ndarray) -> None:
        self.r_bytes += len(rows) * self.bus_bytes
        if self.rid is not None and len(rows):
            ids, counts = np.unique(rows[:, self.rid], return_counts=True)
            for k, n in zip(ids.tolist(), counts.tolist(), strict=True):
                key = _value(k)
                self.r_by_id[key] = self.r_by_id.get(key, 0) + n * self.bus_bytes

    def finish(self) -> dict[str, EngineStats]:
        """Close the busy intervals still open after the last cycle counted."""
        for e in self.engines.values():
            if self.last is not None:
                e.close(self.last + 1)
        return {name: e.stats for name, e in self.engines.items()}
