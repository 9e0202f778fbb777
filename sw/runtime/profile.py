"""Profiles of whole runs from the hardware's command trace, without waveforms.

Every engine keeps a FIFO of the commands it retired (``Csr.TRACE_*``,
:class:`hw.isa.TraceEntry`: queue, low 24 bits of the command's index in its queue, and
``CYCLES[31:0]`` in the cycle the engine took the command and in the cycle of its ``done``),
``trace_depth`` entries deep (:class:`hw.config.NPUConfig`, 64 by default). A
:class:`Profiler` (``Device(backend, profile=True)``) turns them into a :class:`Profile` of
the whole run:

* **Draining.** The profiler sees every command the streams submit (their records), so it
  knows how many commands of each engine are not collected yet. While that number is at most
  ``trace_depth`` for every engine, no FIFO can overflow and it reads nothing. Otherwise it
  drains the FIFOs at the runtime's waiting points (every wake-up of ``Device._wait_until``,
  whose wait it caps at a horizon), before every ring write and at region boundaries. The
  horizon is half the least time in which ``trace_depth + 1`` of the uncollected commands of
  one engine could retire: :func:`hw.isa.retire_window_cycles` of the ``trace_depth + 1``
  smallest :func:`hw.isa.command_retire_cycles` (their sum less the
  :func:`hw.isa.engine_in_flight` largest; for the matrix engine, which holds several
  MATMULs and retires them as fast as their back-to-back period, the period
  :func:`hw.isa.matmul_issue_cycles`; for the others ``busy + ACCEPT_CYCLES`` under the
  ideal DRAM, which no DRAM timing beats). The commands are assumed to succeed: a failing
  one may be faster, and stops its queue.
* **Nothing is dropped silently.** What could not be collected anyway (host work between
  waiting points that outlasts the horizon, an engine retiring faster than a drain pops
  entries -- four CSR accesses each --, a ``CONTROL`` reset) is counted: per engine,
  ``retired.<engine>`` over the profile (counter snapshots at its start and its end) minus
  the entries collected that retired within it (:meth:`Profile.engine_summary`, ``lost``).
  The FIFO's sticky overflow flag is reported too (:attr:`Profile.overflowed`).
* **Overlap.** The matrix engine holds several MATMULs at once
  (:class:`hw.isa.MatmulTimeline`), so its slices overlap; ``busy.matrix`` is the union of
  their spans, and so is ``busy_slices`` (:meth:`Profile.engine_summary`).
* **Unwrapping.** Entries hold 32-bit cycles; each drain reads the 64-bit ``CYCLES`` after
  its last entry and unwraps against it (:func:`unwrap_cycles`).
* **Naming.** Each entry is matched to its command in the stream's record (engines retire the
  commands of one queue in order), so a slice carries its opcode and fields; a command that
  a queue reset caught inside its engine (it still retires) is matched among the commands
  the reset dropped. An entry the runtime has no record of is kept, named ``unknown``.
* **Regions.** :meth:`Device.region` records the host's entry and exit cycles (the cycle
  counter, so timed backends only), nested (a layer region around kernel regions).

Export: :mod:`sw.runtime.profile_export` (Perfetto JSON, PNG timeline).
"""

from __future__ import annotations

import contextlib
import functools
import heapq
from collections import defaultdict, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hw.config import NPUConfig
from hw.isa import (
    ENGINE_NAMES,
    OPCODE_ENGINE,
    Opcode,
    TraceInfo,
    command_retire_cycles,
    decode,
    field_max,
    retire_window_cycles,
)
from sw.runtime.counters import Counters, TraceRecord, drain_trace
from sw.runtime.errors import UntimedCounterError

if TYPE_CHECKING:
    from sw.runtime.device import Device

__all__ = ["Slice", "Region", "Profile", "Profiler", "unwrap_cycles"]

_MASK32 = (1 << 32) - 1
_INDEX_MASK = field_max(TraceInfo, "index")   #: the trace keeps the index's low 24 bits


def unwrap_cycles(start32: int, end32: int, now: int) -> tuple[int, int]:
    """The 64-bit ``(start, end)`` cycles of a trace entry whose 32-bit ``TRACE_START`` /
    ``TRACE_END`` are ``start32`` / ``end32``, read before the 64-bit ``CYCLES`` was ``now``.

    Exact if the entry retired less than 2**32 cycles before ``now`` and the command took
    less than 2**32 cycles: ``end`` is the latest cycle ``<= now`` that is ``end32`` modulo
    2**32, ``start`` the latest ``<= end`` that is ``start32``.
    """
    end = now - ((now - end32) & _MASK32)
    return end - ((end32 - start32) & _MASK32), end


@dataclass(frozen=True)
class Slice:
    """One engine command of a profile.

    Attributes
    ----------
    engine : str
        One of :data:`hw.isa.ENGINE_NAMES`.
    queue, index : int
        Hardware queue and index of the command in it (since the queue's last reset; the
        trace's low 24 bits if ``command`` is None).
    start, end : int
        64-bit cycles: the engine took the command in ``start`` and pulsed ``done`` in
        ``end``; it holds the command in ``start + 1 .. end`` (its span), so the engine's
        ``busy`` is high then. Slices of the matrix engine overlap (it holds several
        MATMULs); those of the other engines do not.
    command : bytes or None
        The encoded command (:data:`hw.isa.COMMAND_BYTES` bytes), None if unknown.
    """
    engine: str
    queue: int
    index: int
    start: int
    end: int
    command: bytes | None = None

    @property
    def cycles(self) -> int:
        """Cycles the engine held the command (``end - start``); what it adds to
        ``busy.<engine>`` when no other command of the engine overlaps it."""
        return self.end - self.start

    @property
    def opcode(self) -> str:
        """The opcode's name (``"unknown"`` without a command)."""
        return "unknown" if self.command is None else _opcode_name(self.command)

    @property
    def name(self) -> str:
        """``"MATMUL q0#17"``: opcode, queue and index."""
        return f"{self.opcode} q{self.queue}#{self.index}"


@dataclass(frozen=True)
class Region:
    """A :meth:`Device.region` of a profile: host-side cycles of entering and leaving the
    ``with`` block (the cycle counter, read right after entering and right before leaving);
    ``depth`` 0 for an outermost region, 1 for one inside it, ..."""
    name: str
    depth: int
    enter: int
    exit: int


@dataclass(frozen=True)
class Profile:
    """A run's engine commands and regions, with the counters over the same span.

    Attributes
    ----------
    config : NPUConfig
    begin, end : int
        Cycles of the counter snapshots at the start and at the end of the profile.
    slices : tuple of Slice
        Every engine command collected, sorted by (start, engine).
    regions : tuple of Region
        Sorted by (enter, depth).
    counters : Counters
        The counters' differences from ``begin`` to ``end`` (see :class:`Counters`).
    overflowed : tuple of str
        Engines whose trace FIFO reported an overflow (``TraceInfo.overflow``).
    """
    config: NPUConfig
    begin: int
    end: int
    slices: tuple[Slice, ...]
    regions: tuple[Region, ...]
    counters: Counters
    overflowed: tuple[str, ...] = ()

    def engine_summary(self) -> dict[str, dict[str, int]]:
        """Per engine: ``commands`` (slices), ``retired`` (``retired.<engine>`` over the
        profile), ``lost`` (``retired`` minus the slices that retired in ``begin <= end <
        self.end``: entries the FIFO dropped or a reset cleared), ``busy`` (``busy.<engine>``)
        and ``busy_slices`` (the cycles inside the profile in which a slice's span holds
        one or more commands: the union, as ``busy.<engine>`` counts overlapping MATMULs).
        ``busy_slices == busy`` when nothing was lost and no command was still running at
        the end."""
        out = {}
        for e in ENGINE_NAMES:
            mine = [s for s in self.slices if s.engine == e]
            inside = sum(1 for s in mine if self.begin <= s.end < self.end)
            busy = _union_cycles((max(s.start + 1, self.begin), min(s.end, self.end - 1))
                                 for s in mine)
            retired = self.counters[f"retired.{e}"]
            out[e] = {"commands": len(mine), "retired": retired, "lost": retired - inside,
                      "busy": self.counters[f"busy.{e}"], "busy_slices": busy}
        return out

    @property
    def lost(self) -> int:
        """Engine commands retired during the profile whose trace entry was not collected."""
        return sum(v["lost"] for v in self.engine_summary().values())

    def report(self) -> str:
        """A fixed-width per-engine table of :meth:`engine_summary`, with a loud line if
        entries were lost."""
        lines = [f"profile from the hardware command trace ({self.config.name}, cycles "
                 f"{self.begin}..{self.end}): {len(self.slices)} engine commands, "
                 f"{len(self.regions)} regions",
                 f"{'engine':<8}{'commands':>10}{'retired':>10}{'lost':>6}{'busy':>12}"
                 f"{'in slices':>12}"]
        for e, v in self.engine_summary().items():
            lines.append(f"{e:<8}{v['commands']:>10}{v['retired']:>10}{v['lost']:>6}"
                         f"{v['busy']:>12}{v['busy_slices']:>12}")
        if self.lost or self.overflowed:
            lines.append(f"WARNING: {self.lost} trace entries lost (FIFO overflow flag: "
                         f"{', '.join(self.overflowed) or 'none'}); the timeline misses them")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """JSON-serialisable form (commands as hex); :meth:`from_dict` reads it back."""
        return {
            "config": self.config.to_dict(), "begin": self.begin, "end": self.end,
            "counters": dict(self.counters), "overflowed": list(self.overflowed),
            "slices": [[s.engine, s.queue, s.index, s.start, s.end,
                        None if s.command is None else s.command.hex()] for s in self.slices],
            "regions": [[r.name, r.depth, r.enter, r.exit] for r in self.regions],
        }

    @classmethod
    def from_dict(cls, d: dict) -> Profile:
        """The :class:`Profile` of :meth:`to_dict`'s output.

        Raises
        ------
        KeyError, ValueError, TypeError
            On a malformed dictionary.
        """
        slices = tuple(Slice(e, int(q), int(i), int(a), int(b),
                             None if c is None else bytes.fromhex(c))
                       for e, q, i, a, b, c in d["slices"])
        regions = tuple(Region(str(n), int(k), int(a), int(b)) for n, k, a, b in d["regions"])
        return cls(NPUConfig(**d["config"]), int(d["begin"]), int(d["end"]), slices, regions,
                   Counters({k: int(v) for k, v in d["counters"].items()}),
                   tuple(d["overflowed"]))


def _union_cycles(spans: Iterable[tuple[int, int]]) -> int:
    """Cycles in the union of the inclusive spans ``first .. last`` (empty if ``last <
    first``)."""
    total, reach = 0, None          # reach: last cycle counted so far
    for first, last in sorted(spans):
        if last < first:
            continue
        if reach is not None and first <= reach:
            first = reach + 1
        if last >= first:
            total += last - first + 1
            reach = last
    return total


@functools.lru_cache(maxsize=4096)
def _opcode_name(raw: bytes) -> str:
    op = decode(raw).header.opcode
    return op.name if isinstance(op, Opcode) else f"opcode {op:#04x}"


@functools.lru_cache(maxsize=4096)
def _engine_and_bound(config: NPUConfig, raw: bytes) -> tuple[str | None, int]:
    """The engine of an encoded command (None for the command processor's own) and the
    least cycles it adds to a run of its engine's retirements
    (:func:`hw.isa.command_retire_cycles`, assuming it succeeds)."""
    view = decode(raw)
    op = view.header.opcode
    engine = OPCODE_ENGINE.get(op) if isinstance(op, Opcode) else None
    if engine not in ENGINE_NAMES:
        return None, 0
    return engine, command_retire_cycles(config, view)


class Profiler:
    """Collects a :class:`Profile` of everything a :class:`Device` runs from now on (see the
    module docstring); made by ``Device(backend, profile=True)`` as ``device.profiler``.

    Parameters
    ----------
    device : Device
        Best created right after the device's reset: commands submitted before the profiler
        are not named, and their entries are only collected if they are still in the FIFOs.
        Its ``config.trace_depth`` must be the hardware's (the CSRs do not report it: give
        the device its ``expected_config``); a deeper one than the hardware's shows as
        entries lost.

    Raises
    ------
    UntimedCounterError
        On an untimed backend (the functional model has no cycles to profile).
    """

    def __init__(self, device: Device) -> None:
        if not getattr(device.backend, "timed", True):
            raise UntimedCounterError("profiling needs a timed backend (rtl or perf): the "
                                      "functional model has no cycles")
        self.device = device
        self.depth = device.config.trace_depth
        self._before = device.counters()
        self._slices: list[Slice] = []
        self._regions: list[Region] = []
        self._open = 0
        #: (queue, engine) -> submitted commands not collected yet: (index, bound, raw)
        self._pending: dict[tuple[int, str], deque[tuple[int, int, bytes]]] = defaultdict(deque)
        self._uncollected = dict.fromkeys(ENGINE_NAMES, 0)
        self._scanned = {q: len(s._record) for q, s in device.streams.items()}
        self._reset_at: dict[int, int] = {}       #: queue -> cycle of its last reset
        #: (queue, engine) -> the commands uncollected at the queue's last reset
        self._killed: dict[tuple[int, str], deque[tuple[int, int, bytes]]] = {}
        self._overflowed: set[str] = set()
        self._drain_cycles = 0      #: duration of the last drain

    # -- collection ---------------------------------------------------------------------------

    def _scan(self) -> None:
        """Take the commands the streams submitted since the last scan."""
        cfg = self.device.config
        for q, stream in self.device.streams.items():
            record = stream._record
            for i in range(self._scanned.get(q, 0), len(record)):
                engine, bound = _engine_and_bound(cfg, record[i])
                if engine is not None:
                    self._pending[(q, engine)].append((i, bound, record[i]))
                    self._uncollected[engine] += 1
            self._scanned[q] = len(record)

    def poll(self, incoming: Iterable[bytes] = ()) -> int | None:
        """Drain the FIFOs if one could overflow, counting the encoded commands ``incoming``
        about to be submitted; return the horizon in cycles (how long the host may wait
        before the next poll), or None if no FIFO can overflow."""
        self._scan()
        more = dict.fromkeys(ENGINE_NAMES, 0)
        for raw in incoming:
            op = decode(raw).header.opcode
            if OPCODE_ENGINE.get(op) in more:
                more[OPCODE_ENGINE[op]] += 1
        if all(n + more[e] <= self.depth for e, n in self._uncollected.items()):
            return None
        self.drain()
        return self._horizon()

    def _horizon(self) -> int | None:
        """Half the least time in which ``depth + 1`` uncollected commands of one engine
        can retire (:func:`hw.isa.retire_window_cycles` of the ``depth + 1`` smallest
        bounds), less twice the last drain's duration (an engine's FIFO may have been read
        at its start, and the next drain may read it at its end)."""
        horizon = None
        for e in ENGINE_NAMES:
            if self._uncollected[e] <= self.depth:
                continue
            bounds = (b for (_, en), dq in self._pending.items() if en == e for _, b, _ in dq)
            least = retire_window_cycles(self.device.config, e,
                                         heapq.nsmallest(self.depth + 1, bounds))
            horizon = least if horizon is None else min(horizon, least)
        if horizon is None:
            return None
        return max(1, horizon // 2 - 2 * self._drain_cycles)

    def drain(self) -> None:
        """Pop every FIFO, then read ``CYCLES`` to unwrap the entries against."""
        began = self.device.cycles()
        records: list[TraceRecord] = []
        for e, name in enumerate(ENGINE_NAMES):
            got, overflowed = drain_trace(self.device.backend, e)
            records += got
            if overflowed:
                self._overflowed.add(name)
        now = self.device.cycles()
        self._drain_cycles = now - began
        self._slices += [self._resolve(r, now) for r in records]

    def _resolve(self, r: TraceRecord, now: int) -> Slice:
        """The slice of trace entry ``r``, matched to the oldest uncollected command of its
        queue and engine with that index."""
        start, end = unwrap_cycles(r.start, r.end, now)
        key = (r.queue, r.engine)
        killed = start < self._reset_at.get(r.queue, -1)     # started before its queue's reset
        dq = (self._killed if killed else self._pending).get(key, ())
        pos = next((k for k, (i, _, _) in enumerate(dq) if i & _INDEX_MASK == r.index), None)
        if pos is None:
            return Slice(r.engine, r.queue, r.index, start, end)
        for _ in range(pos):                 # older ones never ran: not in flight any more
            dq.popleft()
        index, _, raw = dq.popleft()
        if not killed:
            self._uncollected[r.engine] -= pos + 1
        return Slice(r.engine, r.queue, index, start, end, raw)

    def queue_reset(self, queues: Iterable[int]) -> None:
        """Before a reset of ``queues`` (``QUEUE_RESET`` or ``CONTROL``): collect what is in
        the FIFOs, then set the queues' uncollected commands aside (a reset drops them; one
        already inside its engine still retires, and its entry is named from them)."""
        self._scan()
        self.drain()
        now = self.device.cycles()
        for q in queues:
            for e in ENGINE_NAMES:
                self._killed[(q, e)] = dropped = self._pending.pop((q, e), deque())
                self._uncollected[e] -= len(dropped)
            self._scanned[q] = 0
            self._reset_at[q] = now

    @contextlib.contextmanager
    def region(self, name: str, inner: contextlib.AbstractContextManager) -> Iterator[None]:
        """Record a region around ``inner`` (the backend's own region hook)."""
        with inner:
            self.poll()
            depth, self._open = self._open, self._open + 1
            enter = self.device.cycles()
            try:
                yield
            finally:
                self._open = depth
                self._regions.append(Region(name, depth, enter, self.device.cycles()))
            self.poll()

    def finish(self) -> Profile:
        """Collect the rest, snapshot the counters and return the :class:`Profile`; the
        device stops profiling (``device.profiler`` becomes None)."""
        self._scan()
        self.drain()
        after = self.device.counters()
        self.drain()
        if self.device.profiler is self:
            self.device.profiler = None
        return Profile(
            config=self.device.config, begin=self._before["cycles"], end=after["cycles"],
            slices=tuple(sorted(self._slices, key=lambda s: (s.start, s.engine))),
            regions=tuple(sorted(self._regions, key=lambda r: (r.enter, r.depth))),
            counters=after - self._before, overflowed=tuple(sorted(self._overflowed)))
