"""The value-change body of a VCD: checked line by line (:class:`VcdBody`), streamed through
vcdvcd (:func:`stream`) and sampled at clock edges (:class:`ClockSampler`). The rules are
listed in :mod:`cosim.waves.vcd`."""

from __future__ import annotations

import sys
import types
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import vcdvcd

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

__all__ = ["VcdBody", "format_change", "stream", "ClockSampler", "MAX_LINE_WARNINGS"]

#: Malformed lines warned about one by one; the others are counted in one last warning.
MAX_LINE_WARNINGS = 10

_SCALAR = "01xXzZ"
_VECTOR = "bBrRsS"
_BODY_KEYWORDS = ("$dumpvars", "$dumpall", "$dumpon", "$dumpoff", "$end")

Item = tuple[str, object, object]


def format_change(ident: str, value: str) -> str:
    """The VCD line of a value change (``value`` with its prefix, as in :class:`VcdBody`):
    ``"1!"``, ``"b0101 #"``."""
    return f"{value}{ident}\n" if value[0] in _SCALAR else f"{value} {ident}\n"


class VcdBody:
    """The lines of a VCD file, checked: a context manager and a one-pass iterator of items.

    Items, in file order:

    * ``("header", line, None)``: a line up to ``$enddefinitions``, as read;
    * ``("time", t, None)``: a timestamp ``#t`` (``int``, file units);
    * ``("change", ident, value)``: a value change of identifier code ``ident``, ``value``
      with its prefix (``"1"``, ``"b0101"``, ``"r36.6"``, ``"sIDLE"``); a vector wider than
      its variable is already truncated to its low bits;
    * ``("other", line, None)``: anything else valid in a body (``$dumpvars``, ``$end``,
      comments, blank lines), as read.

    Changes written on a ``#`` or ``$dumpvars`` line come as separate items.

    Parameters
    ----------
    path : Path or str
    header : VcdHeader
        From :func:`cosim.waves.vcd.read_header` of the same file.

    Attributes
    ----------
    chars : int
        Characters read so far, header included (bytes, for an ASCII file).
    lineno : int
        1-based number of the line last read.

    Warns
    -----
    VcdSkippedLineWarning
        For each malformed line, skipped (the first :data:`MAX_LINE_WARNINGS`, then one
        warning with the count of the others).
    VcdWidthWarning
        Once per variable that gets a value wider than its declared size.

    Raises
    ------
    VcdFormatError
        On a bad time or a time going backwards (with the line number).
    """

    def __init__(self, path: Path | str, header: VcdHeader):
        self.path = Path(path)
        self.header = header
        self.chars = 0
        self.lineno = 0
        self._vars = {i: vs[0] for i, vs in header.by_id.items()}
        self._last_time: int | None = None
        self._in_comment = False
        self._widened: set[str] = set()
        self._skipped: list[int] = []
        self._reported = False
        # closed by __exit__: VcdBody is the context manager of its file
        self._f = open(self.path, encoding="utf-8", errors="surrogateescape",  # noqa: SIM115
                       newline="")

    def __enter__(self) -> VcdBody:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._f.close()
        if exc_type is None or not issubclass(exc_type, (Warning, VcdError)):
            self._report_skipped()

    def __iter__(self) -> Iterator[Item]:
        end = self.header.end_line
        for line in self._f:
            self.lineno += 1
            self.chars += len(line)
            if self.lineno <= end:
                yield ("header", line, None)
                continue
            if self._in_comment:
                self._in_comment = "$end" not in line
                yield ("other", line, None)
                continue
            s = line.strip()
            c = s[:1]
            if not c:
                yield ("other", line, None)
            elif c in _SCALAR:
                item = self._scalar(s, line)
                if item is not None:
                    yield item
            elif c in _VECTOR:
                item = self._vector(s.split(), line)
                if item is not None:
                    yield item
            elif c == "#":
                toks = s.split()
                yield ("time", self._time(toks[0]), None)
                if len(toks) > 1:
                    yield from self._changes(toks[1:], line)
            elif c == "$":
                yield from self._keyword(s, line)
            else:
                self._skip(line, "not a time, value change or keyword")
        self._report_skipped()

    # -- one line ---------------------------------------------------------------------------

    def _time(self, tok: str) -> int:
        digits = tok[1:]
        if not (digits.isascii() and digits.isdigit()):
            raise VcdFormatError(self.path, self.lineno, f"bad time {tok!r}")
        t = int(digits)
        if self._last_time is not None and t < self._last_time:
            raise VcdFormatError(self.path, self.lineno, f"time goes backwards "
                                                         f"({self._last_time} then {t})")
        self._last_time = t
        return t

    def _keyword(self, s: str, line: str) -> list[Item]:
        toks = s.split()
        if toks[0] == "$comment":
            self._in_comment = "$end" not in s
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

    def _report_skipped(self) -> None:
        more = self._skipped[MAX_LINE_WARNINGS:]
        if more and not self._reported:
            self._reported = True
            warnings.warn(VcdSkippedLineWarning(
                f"{self.path}: {len(more)} more malformed lines skipped (lines {more[0]} .. "
                f"{more[-1]}; {len(self._skipped)} in all)"), stacklevel=2)


# -- streaming through vcdvcd ----------------------------------------------------------------

def _open_source(source, mode: str = "r"):
    """Stands for the builtin ``open`` in vcdvcd's parser: ``vcd_path`` is a line source."""
    return source


def _vcdvcd_init() -> types.FunctionType:
    """vcdvcd's own ``VCDVCD.__init__`` (its parser), with ``open`` bound to
    :func:`_open_source`, so it reads the checked lines of :class:`VcdBody` instead of
    opening the file itself."""
    init = vcdvcd.VCDVCD.__init__
    if init.__code__.co_freevars:
        raise ImportError(f"vcdvcd {getattr(vcdvcd, '__version__', '?')}: VCDVCD.__init__ "
                          "has a closure; cosim.waves.vcd cannot feed it checked lines")
    scope = dict(vars(sys.modules[vcdvcd.VCDVCD.__module__]), open=_open_source)
    return types.FunctionType(init.__code__, scope, "__init__", init.__defaults__)


class _Reader(vcdvcd.VCDVCD):
    """vcdvcd's parser reading a line source, with string values (``sHello``) read like
    vectors."""

    _VECTOR_VALUE_CHANGE = vcdvcd.VCDVCD._VECTOR_VALUE_CHANGE | {"s", "S"}
    __init__ = _vcdvcd_init()


class _LineSource:
    """The file object vcdvcd reads: ``readline()`` and ``close()``."""

    def __init__(self, lines: Iterator[str]):
        self._lines = lines

    def readline(self) -> str:
        return next(self._lines, "")

    def close(self) -> None:
        pass


def _vcdvcd_lines(header: VcdHeader, ids: list[str], body: VcdBody) -> Iterator[str]:
    """What vcdvcd parses: one ``$var`` per selected identifier code (named ``v<k>``), then
    the checked times and the changes of those codes, one per line (every line of the file is
    checked, selected or not)."""
    for k, ident in enumerate(ids):
        v = header.by_id[ident][0]
        yield f"$var {v.kind} {v.width} {ident} v{k} $end\n"
    yield "$enddefinitions $end\n"
    wanted = set(ids)
    for kind, a, b in body:
        if kind == "change":
            if a in wanted:
                yield format_change(a, b)
        elif kind == "time":
            yield f"#{a}\n"


class _Callbacks(vcdvcd.StreamParserCallbacks):
    def __init__(self, on_step, with_previous: bool):
        self.on_step = on_step
        self.with_previous = with_previous
        self.previous: dict[str, str] = {}

    def value(self, vcd, time, value, identifier_code, cur_sig_vals):
        # called before vcdvcd stores the new value: keep the first old value per timestamp
        if identifier_code not in self.previous:
            self.previous[identifier_code] = cur_sig_vals[identifier_code]

    def time(self, vcd, time, cur_sig_vals):
        # vcdvcd calls this at each '#' line with the time that just ended (and once more at
        # the end of the file); the first call precedes any '#' and carries the initial 'x'.
        try:
            if self.with_previous:
                self.on_step(time, cur_sig_vals, self.previous)
            else:
                self.on_step(time, cur_sig_vals)
        except Exception as e:  # the caller's own exception, not a parse error
            raise _FromCallback(e) from e
        self.previous = {}


class _FromCallback(Exception):
    pass


def stream(path: Path | str, header: VcdHeader, signals: Iterable[VcdVar],
           on_step: Callable[..., None], *, to_time: int | None = None,
           with_previous: bool = False) -> None:
    """Stream the value changes of ``signals`` through vcdvcd, calling ``on_step`` once per
    timestamp with the state at the end of it.

    Parameters
    ----------
    path : Path or str
    header : VcdHeader
        From :func:`cosim.waves.vcd.read_header` of the same file.
    signals : iterable of VcdVar
        What to track; aliases of one identifier code are read once.
    on_step : callable
        ``on_step(time, values)``: ``time`` in file units, ``values`` maps identifier code to
        the current value string (``'x'`` until first set; vectors without their ``b``). It
        is called with non-decreasing times, possibly twice with the same time (once at the
        very start). The dict is vcdvcd's live state: copy what must outlive the call.
    with_previous : bool
        Call ``on_step(time, values, previous)`` instead, where ``previous`` maps the
        identifier codes that changed at ``time`` to their value at the end of the previous
        timestamp (see :class:`ClockSampler`).
    to_time : int, optional
        Stop after this time (file units).

    Warns
    -----
    VcdSkippedLineWarning, VcdWidthWarning
        As :class:`VcdBody`.

    Raises
    ------
    VcdFormatError
        On a bad time or a time going backwards (with the line number).
    """
    ids = sorted({v.id for v in signals})
    cb = _Callbacks(on_step, with_previous)
    with VcdBody(path, header) as body:
        source = _LineSource(_vcdvcd_lines(header, ids, body))
        try:
            _Reader(source, signals=[f"v{k}" for k in range(len(ids))], store_tvs=False,
                    callbacks=cb, to_time=to_time)
        except _FromCallback as e:
            raise e.args[0] from None
        except (VcdError, Warning):
            raise
        except Exception as e:  # vcdvcd itself failed on a line this module let through
            raise VcdFormatError(path, body.lineno, f"vcdvcd failed: {type(e).__name__}: "
                                                    f"{e}") from e


class ClockSampler:
    """Sample signals at the rising edges of a clock, from :func:`stream`'s steps
    (``stream(..., sampler.step, with_previous=True)``).

    The value a flip-flop sees at a rising edge at time ``t`` is the one settled before ``t``:
    the state at the end of the previous timestamp. For each rising edge (``0`` -> ``1``),
    ``on_cycle(cycle, time, values)`` is called with ``values`` mapping identifier code to
    that pre-edge value string; ``cycle`` counts rising edges from 0. An edge from or to
    ``x`` is not a cycle (a clock that is unknown, e.g. in ``$dumpoff``, counts nothing).
    Cost per edge is one copy of the tracked values; between edges, nothing.

    Parameters
    ----------
    clock : VcdVar
    signals : iterable of VcdVar
    on_cycle : callable
    """

    def __init__(self, clock: VcdVar, signals: Iterable[VcdVar],
                 on_cycle: Callable[[int, int, dict[str, str]], None]):
        self.clock_id = clock.id
        self.on_cycle = on_cycle
        self.cycles = 0
        self.first_edge: int | None = None
        self.last_edge: int | None = None
        self.period: int | None = None

    def step(self, time: int, values: dict[str, str], previous: dict[str, str]) -> None:
        """Feed one :func:`stream` step (``with_previous=True``)."""
        clk_id = self.clock_id
        if clk_id in previous and previous[clk_id] == "0" and values[clk_id] == "1":
            if self.last_edge is not None and self.period is None:
                self.period = time - self.last_edge
            if self.first_edge is None:
                self.first_edge = time
            self.last_edge = time
            before = values.copy()
            before.update(previous)
            self.on_cycle(self.cycles, time, before)
            self.cycles += 1
