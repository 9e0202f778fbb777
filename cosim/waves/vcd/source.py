"""One way in to the value changes of a waveform file, VCD or FST: :func:`changes` (batches,
for the tools) and :func:`stream` (a callback per timestamp), and :func:`time_range`."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from cosim.waves.vcd.body import Value
from cosim.waves.vcd.header import VcdFormatError, VcdHeader, VcdVar
from cosim.waves.vcd.scan import Changes, vcd_changes

__all__ = ["changes", "stream", "time_range", "selection"]


def selection(signals: Iterable[VcdVar]) -> list[str]:
    """The identifier codes of ``signals``, once each (aliases share one), in first-seen
    order: slot ``k`` of :func:`changes` is ``selection(signals)[k]``."""
    return list(dict.fromkeys(v.id for v in signals))


def changes(path: Path | str, header: VcdHeader, ids: list[str], *, fast: bool = True,
            to_time: int | None = None) -> Iterator[Changes]:
    """The value changes of the variables with identifier codes ``ids``, in file order, in
    batches (:class:`cosim.waves.vcd.scan.Changes`; slot ``k`` is ``ids[k]``).

    A VCD is read by :func:`cosim.waves.vcd.scan.vcd_changes` (numpy for regular chunks,
    the checked line reader for the rest; ``fast=False``: the checked reader throughout), an
    FST by pywellen (:func:`cosim.waves.vcd.fst.fst_changes`).

    Parameters
    ----------
    path : Path or str
    header : VcdHeader
        From :func:`cosim.waves.vcd.read_header` of the same file.
    ids : list of str
    fast : bool
    to_time : int, optional
        Stop reading after this time (file units; later changes may still be in the last
        batch).

    Warns
    -----
    VcdSkippedLineWarning, VcdWidthWarning
        As :class:`cosim.waves.vcd.VcdBody`.

    Raises
    ------
    VcdFormatError
        On a bad time or a time going backwards (with the line number), or an FST body
        pywellen cannot read.
    """
    path = Path(path)
    if header.format == "fst":
        from cosim.waves.vcd.fst import fst_changes
        return fst_changes(path, header, ids, to_time=to_time)
    return vcd_changes(path, header, ids, fast=fast, to_time=to_time)


def stream(path: Path | str, header: VcdHeader, signals: Iterable[VcdVar],
           on_step: Callable[..., None], *, to_time: int | None = None,
           with_previous: bool = False, fast: bool = True) -> None:
    """Stream the value changes of ``signals``, calling ``on_step`` once per timestamp at
    which one of them changes, with the state at the end of it.

    Parameters
    ----------
    path : Path or str
    header : VcdHeader
        From :func:`cosim.waves.vcd.read_header` of the same file.
    signals : iterable of VcdVar
        What to track; aliases of one identifier code are read once.
    on_step : callable
        ``on_step(time, values)``: ``time`` in file units (increasing), ``values`` maps
        identifier code to the current canonical value (:func:`cosim.waves.vcd.canonical`:
        an ``int``, a bit string with x/z, a ``float``, a text; ``None`` until first set).
        The dict is live state: copy what must outlive the call.
    with_previous : bool
        Call ``on_step(time, values, previous)`` instead, where ``previous`` maps the
        identifier codes that changed at ``time`` to their value at the end of the previous
        timestamp (see :class:`cosim.waves.vcd.ClockSampler`).
    to_time : int, optional
        Stop after this time (file units).
    fast : bool
        As :func:`changes`.

    Warns, Raises
    -------------
    As :func:`changes`.
    """
    ids = selection(signals)
    values: dict[str, Value] = dict.fromkeys(ids)
    previous: dict[str, Value] = {}
    now: int | None = None

    def flush() -> None:
        if with_previous:
            on_step(now, values, previous)
        else:
            on_step(now, values)

    for batch in changes(path, header, ids, fast=fast, to_time=to_time):
        times, slots = batch.times.tolist(), batch.slots.tolist()
        for i, (t, s) in enumerate(zip(times, slots, strict=True)):
            if to_time is not None and t > to_time:
                break
            if t != now:
                if now is not None:
                    flush()
                now = t
                previous = {}
            ident = ids[s]
            if ident not in previous:
                previous[ident] = values[ident]
            values[ident] = batch.value(i)
    if now is not None:
        flush()


def time_range(path: Path | str, header: VcdHeader) -> tuple[int, int] | None:
    """(first, last) timestamp of a waveform file in its time units, ``None`` if it has
    none (header only). Reads the start of the body and the end of the file only.

    Raises
    ------
    VcdFormatError
        If a timestamp there is malformed.
    """
    path = Path(path)
    if header.format == "fst":
        from cosim.waves.vcd.fst import fst_time_range
        return fst_time_range(path)
    first = _first_time(path, header)
    if first is None:
        return None
    return first, _last_time(path)


def _time_of(line: bytes, path: Path) -> int:
    digits = line.split()[0][1:]
    if not digits.isdigit():
        raise VcdFormatError(path, None, f"bad time {line.split()[0].decode(errors='replace')!r}")
    return int(digits)


def _first_time(path: Path, header: VcdHeader) -> int | None:
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, 1):
            if lineno > header.end_line and line.lstrip().startswith(b"#"):
                return _time_of(line.lstrip(), path)
    return None


def _last_time(path: Path) -> int:
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        block = 1 << 16
        while True:
            f.seek(max(0, size - block))
            tail = f.read()
            at = tail.rfind(b"\n#")
            if at >= 0 or block >= size:
                line = tail[at + 1:] if at >= 0 else tail.lstrip()
                return _time_of(line, path)
            block *= 4
