"""Fast reading of the value changes of selected variables from VCD text, with numpy, and the
checked reader for whatever is not plainly regular.

The body is read in chunks of about :data:`CHUNK_BYTES`, each cut just before a timestamp
line (so a chunk holds whole timestamps), and scanned with vectorized numpy
(:func:`_scan`); a chunk is taken as it is only if every line in it is of the plain forms

* ``#<digits>`` (up to 18 digits, times not decreasing, within and across chunks);
* ``0<id>`` / ``1<id>`` on a 1-bit variable;
* ``b<0 and 1 only> <id>`` no wider than its variable; ``r<number> <id>`` on a ``real``
  variable; ``s<text> <id>`` on a ``string`` variable;
* ``$dumpvars``, ``$dumpall``, ``$dumpon``, ``$dumpoff``, ``$end`` alone on a line, or an
  empty line;

with only printable ASCII, single spaces, declared identifier codes of up to 3 characters.
Any other chunk -- x or z bits, a malformed or undeclared line, a ``$comment``, a tab, a CR,
changes on a ``#`` line, a value too wide, a time going backwards -- goes, in file order, to
the checked line reader (:class:`cosim.waves.vcd.body.LineChecker`), which gives the warnings
and errors of :mod:`cosim.waves.vcd` with their line numbers and the same values. So both
readers agree everywhere (the tests check it), and a regular file is read at numpy speed.

Memory holds a few chunks and the changes of the selected variables of one chunk, whatever
the length of the file.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cosim.waves.vcd.body import LineChecker, Value, canonical
from cosim.waves.vcd.header import VcdHeader

__all__ = ["CHUNK_BYTES", "Changes", "vcd_changes"]

#: Bytes read per chunk (a chunk grows to hold at least one whole timestamp).
CHUNK_BYTES = 1 << 22

_MAX_ID = 3                     # identifier codes of up to 3 characters: dense table
_BASE = 95                      # printable ASCII 33..126 -> digits 1..94
_MAX_TIME_DIGITS = 18           # below 2**63
_MAX_INT_BITS = 63              # vector values read as int64; wider ones as Python ints

# line classes by first character
_OTHER, _SCALAR, _VECTOR, _REAL, _STRING, _TIME, _KEYWORD, _EMPTY = range(8)
_FIRST = np.zeros(256, np.uint8)
_FIRST[[ord("0"), ord("1")]] = _SCALAR
_FIRST[ord("b")] = _VECTOR
_FIRST[ord("r")] = _REAL
_FIRST[ord("s")] = _STRING
_FIRST[ord("#")] = _TIME
_FIRST[ord("$")] = _KEYWORD
_FIRST[ord("\n")] = _EMPTY
_KINDS = {"real": 1, "string": 2}           # everything else holds bits: 0
_KIND_OF_CLASS = np.array([-1, 0, 0, 1, 2, -1, -1, -1], np.int8)
_KEYWORDS = {b"$dumpvars", b"$dumpall", b"$dumpon", b"$dumpoff", b"$end"}


@dataclass
class Changes:
    """The changes of selected variables in one stretch of a file, in file order.

    Attributes
    ----------
    times : numpy.ndarray
        int64, file time units, not decreasing.
    slots : numpy.ndarray
        int32, index of the variable in the selection.
    ints : numpy.ndarray
        int64: the value when it is a known integer below ``2**63``, else -1 (and the value
        is in :attr:`objects`).
    objects : dict
        Position -> canonical value (:func:`cosim.waves.vcd.canonical`) for the others: bit
        strings with x or z, wider integers, reals, strings.
    """
    times: np.ndarray
    slots: np.ndarray
    ints: np.ndarray
    objects: dict[int, Value] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.times)

    def value(self, i: int) -> Value:
        """Canonical value of change ``i``."""
        return self.objects[i] if i in self.objects else int(self.ints[i])

    @classmethod
    def build(cls, times: list[int], slots: list[int], values: list[Value]) -> Changes:
        """From Python lists of canonical values."""
        ints = np.full(len(values), -1, np.int64)
        objects: dict[int, Value] = {}
        for i, v in enumerate(values):
            if type(v) is int and 0 <= v < 1 << 63:
                ints[i] = v
            else:
                objects[i] = v
        return cls(np.array(times, np.int64), np.array(slots, np.int32), ints, objects)


class _Tables:
    """Per identifier code (declared, in the header's order): width, kind, selected slot;
    and a dense table from the code's characters to its index."""

    def __init__(self, header: VcdHeader, ids: Sequence[str]):
        codes = list(header.by_id)
        self.ok = bool(codes) and all(
            0 < len(c) <= _MAX_ID and all(33 <= ord(ch) <= 126 for ch in c) for c in codes)
        if not self.ok:
            return
        self.index = np.full(_BASE ** _MAX_ID, -1, np.int32)
        for k, c in enumerate(codes):
            self.index[_dense(c)] = k
        first = [header.by_id[c][0] for c in codes]
        self.width = np.array([v.width for v in first], np.int64)
        self.kind = np.array([_KINDS.get(v.kind, 0) for v in first], np.int8)
        slot_of = {c: s for s, c in enumerate(ids)}
        self.slot = np.array([slot_of.get(c, -1) for c in codes], np.int32)


def _dense(code: str) -> int:
    return sum((ord(ch) - 32) * _BASE ** k for k, ch in enumerate(code))


@dataclass
class _Chunk:
    """What :func:`_scan` found in a regular chunk."""
    lines: int
    first_time: int | None
    last_time: int | None
    changes: Changes            # times -1: before the chunk's first timestamp


def _scan(data: memoryview, t: _Tables) -> _Chunk | None:
    """Scan one chunk (ending with a newline); ``None`` if it is not plainly regular.

    Per byte, only a few counts: newlines, control bytes, spaces, 0/1 digits. Per line, the
    first character and the four before the newline (the identifier code, and the space in
    front of it). Every byte that is not a 0/1 digit must be accounted for by the line
    structure, so every vector value holds 0s and 1s only.
    """
    a = np.frombuffer(data, np.uint8)
    if len(a) < 8:
        return None                         # too short to bother (and to look 4 bytes back)
    nl = np.flatnonzero(a == 10)
    n = len(nl)
    if not n or nl[-1] != len(a) - 1 or np.count_nonzero(a < 32) != n or a.max() > 126:
        return None                         # no newline at the end, tab, CR, non-ASCII
    starts = np.empty(n, np.int64)
    starts[0] = 0
    starts[1:] = nl[:-1] + 1
    cls = _FIRST[a[starts]]
    if not cls.all():
        return None                         # a line of no plain form
    lines = _Lines(a, starts, nl, cls)
    if not lines.ok or np.count_nonzero(a == 32) != lines.spaced:
        return None                         # no id after one space, or a space elsewhere
    ti, ki = np.flatnonzero(cls == _TIME), np.flatnonzero(cls == _KEYWORD)
    if len(ki) and not _keywords_ok(data, starts[ki], nl[ki]):
        return None
    times = _times(a, starts[ti], nl[ti])
    if times is None:
        return None
    other = len(a) - np.count_nonzero((a & 0xFE) == 48)     # bytes that are not 0 or 1
    if other != lines.other_bytes(data, len(ti), times[1], int((nl[ki] - starts[ki]).sum())):
        return None                         # a vector value with other than 0s and 1s
    found = lines.identify(t)
    if found is None:
        return None
    changes = lines.selected(data, a, t, found, ti, times[0])
    if changes is None:
        return None
    tv = times[0]
    return _Chunk(n, int(tv[0]) if len(tv) else None, int(tv[-1]) if len(tv) else None,
                  changes)


class _Lines:
    """Every line of a chunk split into value and identifier code (meaningful for the value
    changes, classes ``_SCALAR`` .. ``_STRING``; the other lines are masked out)."""

    def __init__(self, a: np.ndarray, s: np.ndarray, e: np.ndarray, cls: np.ndarray):
        self.cls = cls
        self.change = cls <= _STRING
        c1, c2, c3, c4 = (a[e - k] for k in (1, 2, 3, 4))   # short lines: masked garbage
        scalar = cls == _SCALAR
        spaced = self.change & ~scalar
        self.spaced = int(np.count_nonzero(spaced))
        length = np.where(scalar, e - s - 1,
                          np.where(c2 == 32, 1, np.where(c3 == 32, 2, 3 * (c4 == 32))))
        self.begin = s + 1
        self.end = np.where(spaced, e - length - 1, self.begin)
        self.ok = not (self.change & ((length < 1) | (length > _MAX_ID))).any() and not (
            spaced & (self.end <= self.begin)).any()
        if not self.ok:
            return
        d1, d2, d3 = (ch.astype(np.int32) - 32 for ch in (c1, c2, c3))
        code = np.where(length == 1, d1, np.where(length == 2, d2 + _BASE * d1,
                                                  d3 + _BASE * (d2 + _BASE * d1)))
        self.code = np.where(self.change, code, 0)
        other = [(ch & 0xFE) != 48 for ch in (c1, c2, c3)]
        self.id_other = int(np.count_nonzero(self.change & other[0])
                            + np.count_nonzero(self.change & (length > 1) & other[1])
                            + np.count_nonzero(self.change & (length > 2) & other[2]))

    def other_bytes(self, data: memoryview, n_time: int, time_digits: int,
                    keyword_bytes: int) -> int:
        """How many bytes are not 0/1 digits if every vector value is 0s and 1s: newlines,
        prefixes and spaces, identifier characters, time and keyword text, real and string
        values."""
        total = len(self.cls) + 2 * self.spaced + self.id_other + n_time + time_digits \
            + keyword_bytes
        for i in np.flatnonzero((self.cls == _REAL) | (self.cls == _STRING)).tolist():
            text = bytes(data[int(self.begin[i]):int(self.end[i])])
            total += len(text) - text.count(b"0") - text.count(b"1")
        return total

    def identify(self, t: _Tables) -> np.ndarray | None:
        """Index (into the header's codes) of each line's identifier (-1 for lines that are
        not value changes); None if one is undeclared, of the wrong kind, or a vector value
        is wider than its variable."""
        found = t.index[self.code]
        c = self.cls
        if (self.change & ((found < 0) | (t.kind[found] != _KIND_OF_CLASS[c]))).any():
            return None
        width = t.width[found]
        if ((c == _SCALAR) & (width != 1)).any():
            return None                     # a scalar change of a vector
        if ((c == _VECTOR) & (self.end - self.begin > width)).any():
            return None                     # too wide: the checked reader truncates, warns
        return found

    def selected(self, data: memoryview, a: np.ndarray, t: _Tables, found: np.ndarray,
                 ti: np.ndarray, tvals: np.ndarray) -> Changes | None:
        """The changes of the selected variables (None if a real is not a number)."""
        reals = np.flatnonzero(self.cls == _REAL)
        if len(reals) and not _reals_ok(data, self.begin[reals], self.end[reals]):
            return None
        slot = np.where(self.change, t.slot[found], -1)
        pick = np.flatnonzero(slot >= 0)
        c, slot = self.cls[pick], slot[pick]
        vbegin, vend = self.begin[pick], self.end[pick]
        at = np.searchsorted(ti, pick) - 1
        when = tvals[np.maximum(at, 0)] if len(tvals) else np.zeros(len(at), np.int64)
        when = np.where(at >= 0, when, -1)
        ints = np.full(len(pick), -1, np.int64)
        sc = c == _SCALAR
        ints[sc] = a[vbegin[sc] - 1].astype(np.int64) - 48
        vec = np.flatnonzero(c == _VECTOR)
        narrow = (vend[vec] - vbegin[vec]) <= 64
        ints[vec[narrow]] = _bit_values(a, vbegin[vec[narrow]], vend[vec[narrow]])
        objects: dict[int, Value] = {}
        for i in np.flatnonzero(c >= _REAL).tolist() + vec[~narrow].tolist() \
                + vec[narrow][ints[vec[narrow]] < 0].tolist():
            text = bytes(data[int(vbegin[i]):int(vend[i])]).decode("ascii")
            objects[i] = int(text, 2) if c[i] == _VECTOR else float(text) \
                if c[i] == _REAL else text
        return Changes(when.astype(np.int64), slot.astype(np.int32), ints, objects)


def _times(a: np.ndarray, first: np.ndarray, end: np.ndarray
           ) -> tuple[np.ndarray, int] | None:
    """The values of the time lines ``[first, end)`` (``#`` at ``first``), and how many of
    their digits are not 0/1; None if one is not ``#<digits>`` or times decrease."""
    first = first + 1
    length = end - first
    if ((length < 1) | (length > _MAX_TIME_DIGITS)).any():
        return None
    k = np.arange(_MAX_TIME_DIGITS)
    inside = k < length[:, None]
    digits = a[np.minimum(first[:, None] + k, len(a) - 1)].astype(np.int64) - 48
    if ((digits < 0) | (digits > 9))[inside].any():
        return None
    power = np.where(inside, length[:, None] - 1 - k, 0)
    values = (np.where(inside, digits, 0) * 10 ** power).sum(axis=1)
    if (np.diff(values) < 0).any():
        return None
    return values, int(np.count_nonzero(inside & (digits > 1)))


def _keywords_ok(data: memoryview, starts: np.ndarray, ends: np.ndarray) -> bool:
    return all(bytes(data[s:e]) in _KEYWORDS for s, e in zip(starts.tolist(), ends.tolist(),
                                                                strict=True))


def _reals_ok(data: memoryview, begin: np.ndarray, end: np.ndarray) -> bool:
    try:
        for s, e in zip(begin.tolist(), end.tolist(), strict=True):
            float(bytes(data[s:e]))
    except ValueError:
        return False
    return True


def _bit_values(a: np.ndarray, begin: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Values of the bit strings ``a[begin:end]`` (0s and 1s, at most 64) as int64; -1 for
    those of ``2**63`` or more."""
    if not len(begin):
        return np.zeros(0, np.int64)
    length = end - begin
    k = np.arange(int(length.max()), dtype=np.uint64)
    bits = (a[np.maximum(end[:, None] - 1 - k.astype(np.int64), 0)] - 48).astype(np.uint64)
    bits = np.where(k < length[:, None].astype(np.uint64), bits, np.uint64(0))
    v = (bits << k).sum(axis=1, dtype=np.uint64)
    out = v.astype(np.int64)
    out[v >= np.uint64(1 << 63)] = -1
    return out


# -- the file -----------------------------------------------------------------------------

def _chunks(f: io.BufferedReader, size: int) -> Iterator[memoryview]:
    """The body in chunks that end with a newline; every chunk but the first starts with a
    timestamp line (when the file has one often enough). The chunks are views of one
    buffer: each is valid until the next one is asked for."""
    buf = bytearray(2 * size)
    have = 0
    while True:
        if len(buf) - have < size:
            buf.extend(bytearray(size))                 # a timestamp longer than a chunk
        got = f.readinto(memoryview(buf)[have:have + size])
        if not got:
            if have:
                if buf[have - 1] != 10:
                    buf[have:have + 1] = b"\n"
                    have += 1
                yield memoryview(buf)[:have]
            return
        have += got
        cut = buf.rfind(b"\n#", 0, have) + 1
        if cut <= 0:
            continue
        yield memoryview(buf)[:cut]
        buf[:have - cut] = buf[cut:have]
        have -= cut


def _body_offset(f: io.BufferedReader, header: VcdHeader) -> None:
    """Seek ``f`` to the line after ``$enddefinitions``, lines split as the text readers of
    :func:`cosim.waves.vcd.read_header` and :class:`cosim.waves.vcd.VcdBody` split them (LF,
    CR and CRLF each end a line)."""
    lines = 0
    while lines < header.end_line:
        at = f.tell()
        line = f.readline()
        if not line:
            return
        if b"\r" not in line:
            lines += 1
            continue
        if line.endswith(b"\r") and f.peek(1)[:1] == b"\n":
            line += f.read(1)
        for m in re.finditer(rb"\r\n|\r|\n", line):
            lines += 1
            if lines == header.end_line:
                f.seek(at + m.end())
                return
        if not line.endswith((b"\r", b"\n")):
            lines += 1                                  # the last line, unterminated


def _checked(data: memoryview, checker: LineChecker, header: VcdHeader, slot_of: dict[str, int]
             ) -> Changes:
    """The changes of one chunk through the checked line reader."""
    times: list[int] = []
    slots: list[int] = []
    values: list[Value] = []
    now = checker.last_time or 0
    text = io.StringIO(bytes(data).decode("utf-8", "surrogateescape"), newline="")
    for kind, x, value in checker.lines(text):
        if kind == "time":
            now = x
        elif kind == "change" and x in slot_of:
            times.append(now)
            slots.append(slot_of[x])
            values.append(canonical(header.by_id[x][0], value))
    return Changes.build(times, slots, values)


def _keep_heap() -> None:
    """Ask glibc's malloc to keep freed memory (no trimming, no mmap below 256 MiB): the
    scan allocates and frees the same few megabytes of numpy temporaries per chunk, and
    with the default dynamic thresholds every chunk faulted them in again (measured on a
    2.5 GB VCD: 7 s of 21 s in the kernel, 0.2 s with this). Once per process; nothing on
    other C libraries."""
    global _heap_kept
    if _heap_kept:
        return
    _heap_kept = True
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    mallopt(-1, 1 << 30)            # M_TRIM_THRESHOLD
    mallopt(-3, 1 << 28)            # M_MMAP_THRESHOLD


_heap_kept = False


def vcd_changes(path: Path, header: VcdHeader, ids: Sequence[str], *, fast: bool = True,
                to_time: int | None = None, chunk_bytes: int = CHUNK_BYTES
                ) -> Iterator[Changes]:
    """The changes of the variables with identifier codes ``ids`` (slot ``k`` is ``ids[k]``),
    in file order, a chunk at a time.

    Parameters
    ----------
    path : Path
    header : VcdHeader
        Of the same VCD file.
    ids : sequence of str
    fast : bool
        Scan regular chunks with numpy (default); ``False`` reads every line with the
        checked reader (for cross-checks; same results).
    to_time : int, optional
        Stop after the first chunk that reaches past this time (the caller drops the
        changes after it).
    chunk_bytes : int

    Warns, Raises
    -------------
    As :class:`cosim.waves.vcd.body.LineChecker`.
    """
    checker = LineChecker(path, header)
    slot_of = {c: s for s, c in enumerate(ids)}
    tables = _Tables(header, ids) if fast else None
    scan = tables is not None and tables.ok
    if scan:
        _keep_heap()
    with open(path, "rb") as f:
        _body_offset(f, header)
        for data in _chunks(f, chunk_bytes):
            yield _take(data, _scan(data, tables) if scan else None, checker, header,
                        slot_of)
            if to_time is not None and checker.last_time is not None \
                    and checker.last_time > to_time:
                return
    checker.finish()


def _take(data: memoryview, chunk: _Chunk | None, checker: LineChecker, header: VcdHeader,
          slot_of: dict[str, int]) -> Changes:
    """A chunk's changes: the scan's, or the checked reader's if the scan refused the chunk,
    a ``$comment`` is open, or its first time is before the last one seen."""
    if chunk is None or checker.in_comment or (
            chunk.first_time is not None and checker.last_time is not None
            and chunk.first_time < checker.last_time):
        return _checked(data, checker, header, slot_of)
    ch = chunk.changes
    with contextlib.suppress(ValueError):
        ch.times[ch.times < 0] = checker.last_time or 0
    checker.lineno += chunk.lines
    if chunk.last_time is not None:
        checker.last_time = chunk.last_time
    return ch
