"""FST files (Verilator's ``--trace-fst``, GTKWave's compressed format) through pywellen, the
Rust reader behind the Surfer viewer.

FST is binary and block-compressed: there are no text lines to check, so pywellen reads the
body as it is. The header becomes a :class:`cosim.waves.vcd.VcdHeader` whose identifier codes
are pywellen's signal numbers (``"17"``); vectors get the range ``[width-1:0]`` in their path,
as Verilator declares them.
"""

from __future__ import annotations

import contextlib
import queue
import re
import threading
from collections.abc import Iterator, Sequence
from fractions import Fraction
from pathlib import Path

from cosim.waves.vcd.body import Value
from cosim.waves.vcd.header import VcdFormatError, VcdHeader, VcdVar
from cosim.waves.vcd.scan import Changes

__all__ = ["read_fst_header", "fst_changes", "fst_time_range"]

_BATCH = 1 << 16                # changes per Changes batch
_SIGNAL_RE = re.compile(r"SignalId\((\d+)\)")


def _pywellen():
    import pywellen
    return pywellen


def _open(path: Path):
    """A pywellen waveform in streaming mode (pywellen panics on a missing file: checked
    here first)."""
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    try:
        return _pywellen().Waveform(str(path), multi_threaded=True, stream_only=True)
    except (KeyboardInterrupt, SystemExit, MemoryError):
        raise
    except BaseException as e:          # pywellen reports a bad file as a panic too
        raise VcdFormatError(path, None, f"pywellen cannot read this FST file: "
                                         f"{type(e).__name__}: {e}") from None


def _signal(var) -> str:
    return _SIGNAL_RE.fullmatch(str(var.signal_id)).group(1)


def read_fst_header(path: Path | str) -> VcdHeader:
    """The declarations of an FST file.

    Raises
    ------
    FileNotFoundError
    VcdFormatError
        If pywellen cannot read it.
    """
    path = Path(path)
    w = _open(path)
    ts = w.timescale
    exp = ts.unit.to_exponent() if ts is not None else 0
    seconds = Fraction(ts.factor if ts is not None else 1) * Fraction(10) ** exp
    unit = {0: "s", -3: "ms", -6: "us", -9: "ns", -12: "ps", -15: "fs"}.get(exp, f"e{exp} s")
    header = VcdHeader(path, seconds, f"{ts.factor if ts is not None else 1} {unit}",
                       format="fst")
    arrays: set[str] = set()
    for line, v in enumerate(w.all_vars(), 1):
        var = _var(v, line, arrays)
        header.vars.append(var)
        header.by_id.setdefault(var.id, []).append(var)
    header.scopes = [s.full_name for s in w.all_scopes() if s.full_name not in arrays]
    return header


def _var(v, line: int, arrays: set[str]) -> VcdVar:
    """A pywellen variable as the VCD reader names it: an element of an unpacked array,
    which pywellen puts in a scope of the array's name (``mem.[3]``), is ``mem[3]`` of the
    enclosing scope, as Verilator writes it in a VCD."""
    scope, _, name = v.full_name.rpartition(".")
    if name.startswith("[") and scope:
        arrays.add(scope)
        scope, _, array = scope.rpartition(".")
        name = array + name
    full = f"{scope}.{name}" if scope else name
    kind = v.var_type.lower()
    width = 1 if v.is_string or v.is_real else int(v.bitwidth or 1)
    vector = width > 1 and not (v.is_real or v.is_string)
    rng = f"[{width - 1}:0]" if vector else ""
    return VcdVar(full + rng, full, scope, name + rng, _signal(v),
                  "real" if v.is_real else "string" if v.is_string else kind, width,
                  width - 1 if vector else None, 0 if vector else None, line, full + rng)


class _Stop(Exception):
    """Raised in the pywellen callback to end streaming early."""


def fst_changes(path: Path, header: VcdHeader, ids: Sequence[str], *,
                to_time: int | None = None) -> Iterator[Changes]:
    """The changes of the signals ``ids`` (slot ``k`` is ``ids[k]``) of an FST file, in time
    order, in batches. pywellen streams in a thread of its own; at most a few batches wait.

    Raises
    ------
    VcdFormatError
        If pywellen fails on the body.
    """
    w = _open(path)
    slot_of = {f"SignalId({c})": s for s, c in enumerate(ids)}
    include, seen = [], set()
    for v in w.all_vars():
        key = str(v.signal_id)
        if key in slot_of and key not in seen:
            seen.add(key)
            include.append(v)
    out: queue.Queue = queue.Queue(maxsize=4)
    stop = threading.Event()

    def produce() -> None:
        times: list[int] = []
        slots: list[int] = []
        values: list[Value] = []

        def flush() -> None:
            out.put(Changes.build(times, slots, values))
            times.clear()
            slots.clear()
            values.clear()

        def on_change(t: int, sid, value) -> None:
            if stop.is_set():
                raise _Stop
            times.append(t)
            slots.append(slot_of[str(sid)])
            values.append(value.lower() if isinstance(value, str) and header.by_id[
                ids[slots[-1]]][0].kind != "string" else value)
            if len(times) >= _BATCH:
                flush()

        try:
            if include:
                w.stream_changes(on_change, include)
            flush()
            out.put(None)
        except _Stop:
            out.put(None)
        except BaseException as e:      # handed to the consumer
            out.put(e)

    thread = threading.Thread(target=produce, name=f"pywellen {path.name}", daemon=True)
    thread.start()
    try:
        while (item := out.get()) is not None:
            if isinstance(item, BaseException):
                raise VcdFormatError(path, None, f"pywellen failed on the FST body: "
                                                 f"{type(item).__name__}: {item}")
            yield item
            if to_time is not None and len(item) and item.times[-1] > to_time:
                break
    finally:
        stop.set()
        while thread.is_alive():
            with contextlib.suppress(queue.Empty):
                out.get(timeout=0.05)


def fst_time_range(path: Path) -> tuple[int, int]:
    """(start, end) time of an FST file, from its header block (FST block 0: type byte,
    8-byte section length, then start and end time as big-endian 64-bit integers).

    Raises
    ------
    VcdFormatError
        If the file does not start with an FST header block.
    """
    with open(path, "rb") as f:
        head = f.read(25)
    if len(head) < 25 or head[0] != 0:
        raise VcdFormatError(path, None, "not an FST file (no header block)")
    return int.from_bytes(head[9:17], "big"), int.from_bytes(head[17:25], "big")
