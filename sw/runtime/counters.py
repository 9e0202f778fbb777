"""Performance counters and the engines' command trace, as the host reads them."""

from __future__ import annotations

from dataclasses import dataclass

from hw.isa import (
    COUNTER_BITS,
    COUNTER_NAMES,
    ENGINE_NAMES,
    TIMING_COUNTERS,
    Csr,
    TraceInfo,
    counter_csr,
    trace_csr,
    unpack_fields,
)
from sw.backend import Backend
from sw.runtime.errors import NPUError, UntimedCounterError

__all__ = ["TraceRecord", "Counters", "read_counters", "read_trace", "drain_trace"]


@dataclass(frozen=True)
class TraceRecord:
    """One engine command from the hardware's command trace (``Csr.TRACE_*``).

    ``start``/``end`` are the low 32 bits of ``CYCLES`` when the engine took the command and
    when it retired it (logical time on the untimed model); ``index`` is the low 24 bits of
    the command's index in its queue.
    """
    engine: str
    queue: int
    index: int
    start: int
    end: int


class Counters(dict[str, int]):
    """One snapshot of the performance counters, by stable dotted name (see
    :data:`hw.isa.COUNTER_NAMES` for the exact definitions):

    ==========================  ========  ==================================================
    name                        unit      what
    ==========================  ========  ==================================================
    ``cycles``                  cycles    ``CYCLES`` at the snapshot (64-bit)
    ``busy.<engine>``           cycles    the engine holds a command (take to ``done``)
    ``retired.<engine>``        commands  commands the engine finished (with or without error)
    ``stall.<engine>.<reason>`` cycles    stalls, reasons of :data:`hw.isa.STALL_REASONS`,
                                          pairs of :data:`hw.isa.ENGINE_STALLS`
    ``dma_busy``                cycles    the load or the store DMA channel is busy
    ``overlap``                 cycles    a DMA channel and the matrix engine both busy
    ``bytes_read``              bytes     read on the DRAM port (R beats x bus bytes)
    ``bytes_written``           bytes     written on the DRAM port (strobed bytes)
    ==========================  ========  ==================================================

    ``<engine>`` is one of ``load``, ``store``, ``matrix``, ``vector``. Values are absolute
    (free-running since reset, 32-bit, ``cycles`` 64-bit); subtract two snapshots for the
    events in between: ``after - before`` gives a :class:`Counters` of differences modulo
    each counter's width (exact for intervals shorter than 2**32 cycles or bytes). All values
    of one snapshot are taken at the same clock edge (``Csr.CNT_SNAPSHOT``); the difference of
    snapshots taken at cycles ``s1 < s2`` counts the cycles ``s1 <= c < s2``.

    On an untimed backend (``timed`` False: the functional model) only ``retired.*`` and
    ``bytes_*`` are present; asking for a timing counter raises :class:`UntimedCounterError`
    (``get`` returns its default, ``in`` is False).
    """

    def __init__(self, values: dict[str, int], *, timed: bool = True) -> None:
        super().__init__(values)
        self.timed = timed

    def __missing__(self, key: str) -> int:
        if not self.timed and key in TIMING_COUNTERS:
            raise UntimedCounterError(f"{key!r} is a timing counter; this backend is untimed "
                                      "(the functional model has no cycles)")
        raise KeyError(key)

    def __sub__(self, other: Counters) -> Counters:
        """``self - other``, counter by counter, modulo each counter's width.

        Raises
        ------
        ValueError
            If one snapshot is from a timed backend and the other from an untimed one (two
            different devices: their difference means nothing).
        """
        if not isinstance(other, Counters):
            return NotImplemented
        if self.timed != other.timed:
            kinds = {True: "a timed backend (rtl or perf)", False: "an untimed backend (model)"}
            raise ValueError(f"cannot subtract a snapshot from {kinds[other.timed]} from one "
                             f"from {kinds[self.timed]}: take both on the same device")
        return Counters({k: (v - other[k]) % (1 << COUNTER_BITS[k]) for k, v in self.items()},
                        timed=self.timed)

    def __reduce__(self):
        return (type(self), (dict(self),), {"timed": self.timed})



def read_counters(backend: Backend) -> Counters:
    """Snapshot of the performance counters (see :class:`Counters` for names and units).

    Writes ``CNT_SNAPSHOT`` (every counter is copied at that one clock edge), then reads
    the snapshot registers, so the values are consistent with each other however long
    the reads take. On an untimed backend (``backend.timed`` False, the functional
    model) the timing counters are left out.
    """
    rd = backend.csr_read
    timed = bool(getattr(backend, "timed", True))
    backend.csr_write(Csr.CNT_SNAPSHOT, 1)
    values = {}
    if timed:
        lo = rd(Csr.CNT_CYCLES_LO)
        values["cycles"] = rd(Csr.CNT_CYCLES_HI) << 32 | lo
    for name in COUNTER_NAMES:
        if timed or name not in TIMING_COUNTERS:
            values[name] = rd(counter_csr(name))
    return Counters(values, timed=timed)


def read_trace(backend: Backend, trace_depth: int) -> list[TraceRecord]:
    """Drain the engines' command trace FIFOs (``TRACE_INFO``, :class:`hw.isa.TraceInfo`),
    oldest first per engine; returns them sorted by start.

    Raises
    ------
    NPUError
        If a trace FIFO overflowed (entries were lost; it is cleared by ``CONTROL``); the
        message gives ``trace_depth`` (entries per engine).
    """
    rd = backend.csr_read
    out = []
    for e, name in enumerate(ENGINE_NAMES):
        while True:
            info = unpack_fields(TraceInfo, rd(trace_csr(e, Csr.TRACE_INFO)))
            if info.overflow:
                raise NPUError(f"the {name} engine's command trace overflowed "
                               f"({trace_depth} entries); drain it sooner")
            if not info.valid:
                break
            out.append(_pop_entry(backend, e, info))
    return sorted(out, key=lambda r: (r.start, r.end))


def drain_trace(backend: Backend, engine: int) -> tuple[list[TraceRecord], bool]:
    """Pop every entry of engine ``engine``'s trace FIFO (index in :data:`hw.isa.ENGINE_NAMES`),
    whether or not it overflowed.

    Returns
    -------
    records : list of TraceRecord
        Oldest first.
    overflowed : bool
        The FIFO's sticky overflow flag (``TraceInfo.overflow``): entries were dropped since
        the last ``CONTROL`` because the FIFO was full. Which ones, the caller must work out
        (e.g. ``retired.<engine>`` minus the records it collected).
    """
    rd = backend.csr_read
    out, overflowed = [], False
    while True:
        info = unpack_fields(TraceInfo, rd(trace_csr(engine, Csr.TRACE_INFO)))
        overflowed |= bool(info.overflow)
        if not info.valid:
            return out, overflowed
        out.append(_pop_entry(backend, engine, info))


def _pop_entry(backend: Backend, engine: int, info) -> TraceRecord:
    """The oldest entry of ``engine``'s FIFO, whose ``TRACE_INFO`` is ``info``; pops it."""
    rd = backend.csr_read
    record = TraceRecord(ENGINE_NAMES[engine], info.queue, info.index,
                         rd(trace_csr(engine, Csr.TRACE_START)),
                         rd(trace_csr(engine, Csr.TRACE_END)))
    backend.csr_write(trace_csr(engine, Csr.TRACE_POP), 1)
    return record
