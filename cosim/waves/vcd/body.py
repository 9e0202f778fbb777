"""The value-change body of a VCD read line by line and checked (:class:`LineChecker`,
:class:`VcdBody`), values in their canonical form (:func:`canonical`), and sampling at clock
edges (:class:`ClockSampler`). The rules are listed in :mod:`cosim.waves.vcd`.

This is the reader of record: every line is looked at, every malformed one is named. The fast
reader (:mod:`cosim.waves.vcd.scan`) hands it every stretch of a file that is not plainly
regular, so both give the same values, warnings and errors.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from cosim.waves.vcd.header import (
    VcdError,
    VcdFormatError,
    VcdHeader,
    VcdSkippedLineWarning,
    VcdValueError,
    VcdVar,
    VcdWidthWarning,
    to_float,
)

__all__ = ["LineChecker", "VcdBody", "canonical", "format_change", "ClockSampler",
           "MAX_LINE_WARNINGS", "Value"]

#: Malformed lines warned about one by one; the others are counted in one last warning.
MAX_LINE_WARNINGS = 10

_SCALAR = "01xXzZ"
_VECTOR = "bBrRsS"
_BODY_KEYWORDS = ("$dumpvars", "$dumpall", "$dumpon", "$dumpoff", "$end")

Item = tuple[str, object, object]
#: A value in canonical form (see :func:`canonical`).
Value = int | str | float | None


def format_change(ident: str, value: str) -> str:
    """The VCD line of a value change (``value`` with its prefix, as in :class:`VcdBody`):
    ``"1!"``, ``"b0101 #"``."""
    return f"{value}{ident}\n" if value[0] in _SCALAR else f"{value} {ident}\n"


def canonical(var: VcdVar, value: str) -> Value:
    """The canonical form of a value as written (with its prefix, e.g. ``"b0101"``, ``"1"``,
    ``"r2.5"``, ``"sIDLE"``), the form every reader of :mod:`cosim.waves.vcd` delivers:

    * bit values with every bit 0 or 1: the unsigned ``int``;
    * bit values with an x or z bit: the bit string of the variable's full width, lower
      case, extended on the left as the VCD format says (with 0 after a leading 0 or 1, else
      with the leading x or z: ``b1x`` of 4 bits is ``"001x"``, ``bx1`` is ``"xxx1"``);
    * real values (``r...``): the ``float`` (``None`` for ``rx``);
    * string values (``s...``): the text.

    Raises
    ------
    VcdValueError
        If a real is not a number.
    """
    prefix, text = value[0], value[1:]
    if prefix in "rR":
        return to_float(text)
    if prefix in "sS":
        return text
    bits = text if prefix in "bB" else value
    if not bits.strip("01"):
        return int(bits, 2)
    bits = bits.lower()
    fill = "0" if bits[0] in "01" else bits[0]
    return bits.rjust(max(var.width, 1), fill)


class LineChecker:
    """Checks value-change lines one at a time, with the state that spans lines (the last
    time, an open ``$comment``, the variables already warned about, the skipped lines).

    :meth:`lines` turns lines into items, in file order:

    * ``("time", t, None)``: a timestamp ``#t`` (``int``, file units);
    * ``("change", ident, value)``: a value change of identifier code ``ident``, ``value``
      with its prefix (``"1"``, ``"b0101"``, ``"r36.6"``, ``"sIDLE"``); a vector wider than
      its variable is already truncated to its low bits;
    * ``("other", line, None)``: anything else valid in a body (``$dumpvars``, ``$end``,
      comments, blank lines), as read.

    Changes written on a ``#`` or ``$dumpvars`` line come as separate items.

    Parameters
    ----------
    path : Path
        Named in the messages.
    header : VcdHeader

    Attributes
    ----------
    lineno : int
        1-based number of the line last read.
    last_time : int or None
    in_comment : bool
        Whether the last line left a ``$comment`` open.

    Warns
    -----
    VcdSkippedLineWarning
        For each malformed line, skipped (the first :data:`MAX_LINE_WARNINGS`, then one
        warning with the count of the others, from :meth:`finish`).
    VcdWidthWarning
        Once per variable that gets a value wider than its declared size.

    Raises
    ------
    VcdFormatError
        On a bad time or a time going backwards (with the line number).
    """

    def __init__(self, path: Path, header: VcdHeader):
        self.path = path
        self.header = header
        self.lineno = header.end_line
        self.last_time: int | None = None
        self.in_comment = False
        self._vars = {i: vs[0] for i, vs in header.by_id.items()}
        self._widened: set[str] = set()
        self._skipped: list[int] = []
        self._reported = False

    def lines(self, lines: Iterable[str], first: int | None = None) -> Iterator[Item]:
        """Items of ``lines``, the first of which is line ``first`` of the file (default:
        the line after the last one read)."""
        if first is not None:
            self.lineno = first - 1
        for line in lines:
            self.lineno += 1
            yield from self.line(line)

    def line(self, line: str) -> list[Item]:
        """Items of one line (the next of the file)."""
        if self.in_comment:
            self.in_comment = "$end" not in line
            return [("other", line, None)]
        s = line.strip()
        c = s[:1]
        if not c:
            return [("other", line, None)]
        if c in _SCALAR:
            return self._maybe(self._scalar(s, line))
        if c in _VECTOR:
            return self._maybe(self._vector(s.split(), line))
        if c == "#":
            toks = s.split()
            return [("time", self._time(toks[0]), None)] + (
                self._changes(toks[1:], line) if len(toks) > 1 else [])
        if c == "$":
            return self._keyword(s, line)
        self._skip(line, "not a time, value change or keyword")
        return []

    def finish(self) -> None:
        """Warn once about the malformed lines beyond the first :data:`MAX_LINE_WARNINGS`."""
        more = self._skipped[MAX_LINE_WARNINGS:]
        if more and not self._reported:
            self._reported = True
            warnings.warn(VcdSkippedLineWarning(
                f"{self.path}: {len(more)} more malformed lines skipped (lines {more[0]} .. "
                f"{more[-1]}; {len(self._skipped)} in all)"), stacklevel=2)

    # -- one line ---------------------------------------------------------------------------

    @staticmethod
    def _maybe(item: Item | None) -> list[Item]:
        return [] if item is None else [item]

    def _time(self, tok: str) -> int:
        digits = tok[1:]
        if not (digits.isascii() and digits.isdigit()):
            raise VcdFormatError(self.path, self.lineno, f"bad time {tok!r}")
        t = int(digits)
        if self.last_time is not None and t < self.last_time:
            raise VcdFormatError(self.path, self.lineno, f"time goes backwards "
                                                         f"({self.last_time} then {t})")
        self.last_time = t
        return t

    def _keyword(self, s: str, line: str) -> list[Item]:
        toks = s.split()
        if toks[0] == "$comment":
            self.in_comment = "$end" not in s
            return [("other", line, None)]
        if toks[0] not in _BODY_KEYWORDS:
            self._skip(line, f"{toks[0]!r} is not a keyword of the value-change section")
            return []
        if len(toks) == 1:
            return [("other", line, None)]
        # "$dumpvars 1! b0 # $end": the changes as if on lines of their own
        return [("other", toks[0] + "\n", None)] + self._changes(toks[1:], line)

    def _changes(self, toks: list[str], line: str) -> list[Item]:
        """Value changes (and ``$end``) written on one line with other things."""
        out: list[Item | None] = []
        i = 0
        while i < len(toks):
            tok = toks[i]
            if tok == "$end":
                out.append(("other", "$end\n", None))
            elif tok[0] in _VECTOR:
                out.append(self._vector(toks[i:i + 2], line))
                i += 1
            elif tok[0] in _SCALAR:
                out.append(self._scalar(tok, line))
            else:
                self._skip(line, f"{tok!r} is not a value change")
            i += 1
        return [item for item in out if item is not None]

    def _scalar(self, s: str, line: str) -> Item | None:
        ident = s[1:]
        if ident in self._vars:
            return ("change", ident, s[0])
        if len(ident.split()) != 1 or ident != ident.strip():
            self._skip(line, "a scalar change is a value and an identifier code, no space")
        else:
            self._undeclared(ident, line)
        return None

    def _vector(self, parts: list[str], line: str) -> Item | None:
        if len(parts) != 2:
            self._skip(line, "a vector, real or string change needs a value and an "
                             "identifier code")
            return None
        value, ident = parts
        var = self._vars.get(ident)
        if var is None:
            self._undeclared(ident, line)
            return None
        prefix, text = value[0], value[1:]
        if prefix in "bB":
            if not text or text.strip(_SCALAR):
                self._skip(line, "vector bits must be 0, 1, x or z")
                return None
            if 0 < var.width < len(text):
                value = prefix + self._fit(var, text, value)
        elif prefix in "rR":
            try:
                to_float(text)
            except VcdValueError:
                self._skip(line, f"real value {text!r} is not a number")
                return None
        elif not text:
            self._skip(line, "empty string value")
            return None
        return ("change", ident, value)

    def _undeclared(self, ident: str, line: str) -> None:
        self._skip(line, f"identifier code {ident!r} is not declared in the header")

    def _fit(self, var: VcdVar, bits: str, value: str) -> str:
        """``bits`` truncated to ``var``'s width (low bits kept), with one warning per
        variable."""
        if var.kind in ("real", "string"):
            return bits
        if var.id not in self._widened:
            self._widened.add(var.id)
            warnings.warn(VcdWidthWarning(
                f"{self.path}:{self.lineno}: value {value!r} of {var.path} has {len(bits)} "
                f"bits, more than its declared {var.width}: keeping the low {var.width} "
                "(IEEE 1364-2005 3.5.1); later values of this variable are truncated "
                "without a warning"), stacklevel=2)
        return bits[-var.width:]

    def _skip(self, line: str, reason: str) -> None:
        self._skipped.append(self.lineno)
        if len(self._skipped) <= MAX_LINE_WARNINGS:
            text = line.rstrip("\r\n")
            text = text if len(text) <= 80 else text[:77] + "..."
            warnings.warn(VcdSkippedLineWarning(
                f"{self.path}:{self.lineno}: skipped malformed line {text!r}: {reason}"),
                stacklevel=2)


class VcdBody:
    """The lines of a VCD file, checked: a context manager and a one-pass iterator of items.

    Items are those of :class:`LineChecker`, preceded by ``("header", line, None)`` for each
    line up to ``$enddefinitions``, as read.

    Parameters
    ----------
    path : Path or str
    header : VcdHeader
        From :func:`cosim.waves.vcd.read_header` of the same file (a VCD).

    Attributes
    ----------
    chars : int
        Characters read so far, header included (bytes, for an ASCII file).
    lineno : int
        1-based number of the line last read.

    Warns, Raises
    -------------
    As :class:`LineChecker`.
    """

    def __init__(self, path: Path | str, header: VcdHeader):
        self.path = Path(path)
        self.header = header
        self.chars = 0
        self._checker = LineChecker(self.path, header)
        self._header_lines = 0
        # closed by __exit__: VcdBody is the context manager of its file
        self._f = open(self.path, encoding="utf-8", errors="surrogateescape",  # noqa: SIM115
                       newline="")

    @property
    def lineno(self) -> int:
        return self._header_lines if self._header_lines < self.header.end_line \
            else self._checker.lineno

    def __enter__(self) -> VcdBody:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._f.close()
        if exc_type is None or not issubclass(exc_type, (Warning, VcdError)):
            self._checker.finish()

    def __iter__(self) -> Iterator[Item]:
        end = self.header.end_line
        for line in self._f:
            self.chars += len(line)
            if self._header_lines < end:
                self._header_lines += 1
                yield ("header", line, None)
                continue
            self._checker.lineno += 1
            yield from self._checker.line(line)
        self._checker.finish()


class ClockSampler:
    """Sample signals at the rising edges of a clock, from :func:`cosim.waves.vcd.stream`'s
    steps (``stream(..., sampler.step, with_previous=True)``).

    The value a flip-flop sees at a rising edge at time ``t`` is the one settled before ``t``:
    the state at the end of the previous timestamp. For each rising edge (``0`` -> ``1``),
    ``on_cycle(cycle, time, values)`` is called with ``values`` mapping identifier code to
    that pre-edge value (canonical, :func:`canonical`); ``cycle`` counts rising edges from 0.
    An edge from or to x is not a cycle (a clock that is unknown, e.g. in ``$dumpoff``,
    counts nothing). Cost per edge is one copy of the tracked values; between edges, nothing.

    Parameters
    ----------
    clock : VcdVar
    signals : iterable of VcdVar
    on_cycle : callable
    """

    def __init__(self, clock: VcdVar, signals: Iterable[VcdVar],
                 on_cycle: Callable[[int, int, dict[str, Value]], None]):
        self.clock_id = clock.id
        self.on_cycle = on_cycle
        self.cycles = 0
        self.first_edge: int | None = None
        self.last_edge: int | None = None
        self.period: int | None = None

    def step(self, time: int, values: dict[str, Value], previous: dict[str, Value]) -> None:
        """Feed one :func:`cosim.waves.vcd.stream` step (``with_previous=True``)."""
        clk_id = self.clock_id
        if clk_id in previous and previous[clk_id] == 0 and values[clk_id] == 1:
            if self.last_edge is not None and self.period is None:
                self.period = time - self.last_edge
            if self.first_edge is None:
                self.first_edge = time
            self.last_edge = time
            before = values.copy()
            before.update(previous)
            self.on_cycle(self.cycles, time, before)
            self.cycles += 1
