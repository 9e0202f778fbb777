"""Streaming VCD reading on top of vcdvcd, made robust to what real files contain.

The value-change body is read by :mod:`vcdvcd` with ``store_tvs=False`` and a callback, so
memory holds one current value per *selected* identifier code and never grows with the file
(vcdvcd reads the file line by line). The header (everything up to ``$enddefinitions``) is
small; it is parsed here, because vcdvcd's header handling is not good enough for tools:

* **timescale**: every form is accepted (``1ns``, ``1 ns``, ``10ps``, ``100 fs``, split across
  lines); a malformed one is a :class:`VcdFormatError` with its line number (vcdvcd raises a
  bare ``KeyError``/``IndexError``);
* **escaped names** (``\\foo[3]``): vcdvcd keeps the backslash in the reference; here
  :attr:`VcdVar.path` drops it;
* **bracketed names** (``bus [7:0]`` and ``bus[7:0]``): both become ``bus[7:0]``; the range is
  parsed into :attr:`VcdVar.msb`/:attr:`VcdVar.lsb` and :meth:`VcdHeader.find` takes the name
  with or without it;
* **aliases** (several ``$var`` sharing one identifier code) are kept together
  (:attr:`VcdHeader.by_id`) and read once;
* ``$var``/``$scope`` declarations split across lines (vcdvcd needs one line each) are
  rejected with a clear error naming the line, since the body reader would misread them.

Handled in the body (where vcdvcd falls short):

* **string variables** (``$var string``, values ``sHello !``): vcdvcd silently drops the ``s``
  lines; :class:`_Reader` registers ``s``/``S`` as a value-change prefix so they arrive;
* **x/z and wide vectors**: values are the binary strings of the file (``"b"`` removed,
  possibly shorter than the width, possibly holding ``x``/``z``); :func:`to_int` extends
  them as the VCD standard says (a leading ``x``/``z`` extends, ``0``/``1`` zero-extends) and
  returns ``None`` for anything unknown;
* ``$dumpoff``/``$dumpon``: writers put an ``x`` for every variable after ``$dumpoff``;
  those arrive as ordinary changes, so a signal reads unknown (``None``) while dumping is off;
* **malformed body** (bad time, a vector change without identifier, time going backwards):
  vcdvcd raises bare exceptions without a position; this module re-scans the file and raises
  :class:`VcdFormatError` with the first bad line.

Times are integers in the file's timescale unit (:attr:`VcdHeader.timescale_s` seconds each).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import vcdvcd

__all__ = [
    "VcdError", "VcdFormatError", "VcdSignalError", "VcdVar", "VcdHeader",
    "read_header", "parse_timescale", "stream", "to_int", "ClockSampler",
]

_UNITS = {"s": Fraction(1), "ms": Fraction(1, 10**3), "us": Fraction(1, 10**6),
          "ns": Fraction(1, 10**9), "ps": Fraction(1, 10**12), "fs": Fraction(1, 10**15)}
_TIMESCALE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*(s|ms|us|ns|ps|fs)\s*$")
_RANGE_RE = re.compile(r"^\[(-?\d+)(?::(-?\d+))?\]$")
_NAME_RANGE_RE = re.compile(r"^(.*?)\[(-?\d+)(?::(-?\d+))?\]$")


class VcdError(Exception):
    """Base class of the errors of this module."""


class VcdFormatError(VcdError):
    """The file is not a VCD this reader understands.

    Attributes
    ----------
    path : Path
    line : int or None
        1-based line number of the offending line, when known.
    """

    def __init__(self, path: Path | str, line: int | None, message: str):
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {message}")
        self.path = Path(path)
        self.line = line


class VcdSignalError(VcdError, KeyError):
    """A signal asked for is not in the file. ``str()`` lists the closest names."""

    def __init__(self, name: str, candidates: Iterable[str] = ()):
        cands = list(candidates)[:8]
        hint = ("; similar: " + ", ".join(cands)) if cands else ""
        super().__init__(f"no signal {name!r} in the VCD{hint}")
        self.name = name

    def __str__(self) -> str:  # KeyError would repr() the message
        return self.args[0]


@dataclass(frozen=True)
class VcdVar:
    """One ``$var`` declaration.

    Attributes
    ----------
    path : str
        Dotted full name, escape backslash removed, range appended without a space
        (``tb_top.u_npu.mem__rdata[63:0]``).
    base : str
        ``path`` without the range (``tb_top.u_npu.mem__rdata``).
    scope : str
        Dotted scope (``tb_top.u_npu``).
    name : str
        Last component of ``path``.
    id : str
        Identifier code; aliases share it.
    kind : str
        ``wire``, ``reg``, ``string``, ``real``, ``integer``, ...
    width : int
        Declared size in bits (1 for ``string`` by convention).
    msb, lsb : int or None
        The declared range, if any.
    line : int
        Line of the declaration.
    reference : str
        The name vcdvcd gives the same variable (needed to select it there).
    """
    path: str
    base: str
    scope: str
    name: str
    id: str
    kind: str
    width: int
    msb: int | None
    lsb: int | None
    line: int
    reference: str


@dataclass
class VcdHeader:
    """The declarations of a VCD file.

    Attributes
    ----------
    file : Path
    timescale_s : Fraction
        Seconds per time unit of the file.
    timescale : str
        As written, normalised (``"1 ps"``).
    vars : list of VcdVar
        In file order.
    by_id : dict
        Identifier code -> the variables declared with it (aliases).
    scopes : list of str
        Dotted scope names in file order.
    end_line : int
        Line of ``$enddefinitions``.
    """
    file: Path
    timescale_s: Fraction
    timescale: str
    vars: list[VcdVar] = field(default_factory=list)
    by_id: dict[str, list[VcdVar]] = field(default_factory=dict)
    scopes: list[str] = field(default_factory=list)
    end_line: int = 0

    def find(self, name: str) -> VcdVar:
        """The variable called ``name`` (full dotted path, with or without its range, with or
        without escape backslashes).

        Raises
        ------
        VcdSignalError
            If there is none (the message lists similar names).
        """
        hit = self.get(name)
        if hit is None:
            tail = name.rsplit(".", 1)[-1].lstrip("\\")
            raise VcdSignalError(name, (v.path for v in self.vars if tail in v.name))
        return hit

    def get(self, name: str) -> VcdVar | None:
        """Like :meth:`find`, but ``None`` when missing."""
        key = ".".join(p.lstrip("\\") for p in name.split("."))
        for v in self.vars:
            if key in (v.path, v.base):
                return v
        return None

    def match(self, pattern: str | re.Pattern[str]) -> list[VcdVar]:
        """Variables whose ``base`` matches the regular expression (``re.fullmatch``)."""
        rx = re.compile(pattern) if isinstance(pattern, str) else pattern
        return [v for v in self.vars if rx.fullmatch(v.base)]

    def scope_vars(self, scope: str) -> list[VcdVar]:
        """Variables declared directly in ``scope``."""
        return [v for v in self.vars if v.scope == scope]


def parse_timescale(text: str, *, file: Path | str = "<vcd>", line: int | None = None
                    ) -> tuple[Fraction, str]:
    """Parse a ``$timescale`` body such as ``1ns``, ``1 ns``, ``10ps`` or ``100 fs``.

    Returns
    -------
    (Fraction, str)
        Seconds per time unit, and the normalised text (``"10 ps"``).

    Raises
    ------
    VcdFormatError
        If the text is not a number followed by s, ms, us, ns, ps or fs.
    """
    m = _TIMESCALE_RE.match(text)
    if not m:
        raise VcdFormatError(file, line, f"bad $timescale {text.strip()!r} (expected e.g. "
                                         "'1ns', '10 ps', '100 fs')")
    mag = Fraction(m.group(1))
    return mag * _UNITS[m.group(2)], f"{m.group(1)} {m.group(2)}"


def _header_tokens(f, path: Path) -> Iterator[tuple[str, int]]:
    for lineno, line in enumerate(f, 1):
        for tok in line.split():
            yield tok, lineno


def read_header(path: Path | str) -> VcdHeader:
    """Read the declarations of a VCD file (stops at ``$enddefinitions``).

    Parameters
    ----------
    path : Path or str

    Returns
    -------
    VcdHeader

    Raises
    ------
    VcdFormatError
        On an unknown or unterminated section, a malformed ``$var``/``$scope``/
        ``$timescale``, unbalanced scopes, a missing ``$enddefinitions`` or an identifier
        code re-declared with a different width (the message has the line number).
    FileNotFoundError
        If the file does not exist.
    """
    path = Path(path)
    header = VcdHeader(path, Fraction(1), "1 s")
    hier: list[str] = []        # normalised scope names
    raw_hier: list[str] = []    # as vcdvcd sees them
    seen_timescale = False
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        toks = _header_tokens(f, path)

        def section(keyword: str, start: int) -> tuple[list[str], int]:
            body, last = [], start
            for tok, lineno in toks:
                if tok == "$end":
                    return body, lineno
                body.append(tok)
                last = lineno
            raise VcdFormatError(path, start, f"{keyword} is never closed by $end "
                                              f"(file ends at line {last})")

        for tok, lineno in toks:
            if tok == "$enddefinitions":
                section(tok, lineno)
                if hier:
                    raise VcdFormatError(path, lineno, f"$enddefinitions inside scope "
                                                       f"{'.'.join(hier)!r} (missing $upscope)")
                header.end_line = lineno
                if not seen_timescale:
                    header.timescale_s, header.timescale = Fraction(1), "1 s"
                return header
            if tok in ("$date", "$version", "$comment"):
                section(tok, lineno)
            elif tok == "$timescale":
                body, _ = section(tok, lineno)
                header.timescale_s, header.timescale = parse_timescale(
                    " ".join(body), file=path, line=lineno)
                seen_timescale = True
            elif tok == "$scope":
                body, end = section(tok, lineno)
                if len(body) != 2:
                    raise VcdFormatError(path, lineno, f"$scope needs a type and a name, got "
                                                       f"{' '.join(body)!r}")
                if end != lineno:
                    raise VcdFormatError(path, lineno, "$scope split across lines (vcdvcd "
                                                       "reads one declaration per line)")
                raw_hier.append(body[1])
                hier.append(body[1].lstrip("\\"))
                header.scopes.append(".".join(hier))
            elif tok == "$upscope":
                section(tok, lineno)
                if not hier:
                    raise VcdFormatError(path, lineno, "$upscope without an open $scope")
                hier.pop()
                raw_hier.pop()
            elif tok == "$var":
                body, end = section(tok, lineno)
                header_var = _parse_var(body, lineno, end, hier, raw_hier, path)
                prev = header.by_id.get(header_var.id)
                if prev and prev[0].width != header_var.width:
                    raise VcdFormatError(path, lineno, f"identifier {header_var.id!r} declared "
                                                       f"{header_var.width} bits wide, but "
                                                       f"{prev[0].width} at line {prev[0].line}")
                header.vars.append(header_var)
                header.by_id.setdefault(header_var.id, []).append(header_var)
            elif tok.startswith("$"):
                raise VcdFormatError(path, lineno, f"unexpected {tok!r} in the header")
            else:
                raise VcdFormatError(path, lineno, f"unexpected {tok!r} in the header "
                                                   "(value changes before $enddefinitions?)")
    raise VcdFormatError(path, None, "no $enddefinitions (empty or truncated file?)")


def _parse_var(body: list[str], lineno: int, end: int, hier: list[str], raw_hier: list[str],
               path: Path) -> VcdVar:
    if len(body) < 4:
        raise VcdFormatError(path, lineno, f"$var needs type, size, identifier and name, got "
                                           f"{' '.join(body)!r}")
    if end != lineno:
        raise VcdFormatError(path, lineno, "$var split across lines (vcdvcd reads one "
                                           "declaration per line)")
    kind, size, ident, raw_name, *rest = body
    try:
        width = int(size)
    except ValueError:
        raise VcdFormatError(path, lineno, f"$var size {size!r} is not a number") from None
    if width < 0:
        raise VcdFormatError(path, lineno, f"$var size {width} is negative")
    name = raw_name.lstrip("\\")
    msb = lsb = None
    if rest:
        m = _RANGE_RE.match("".join(rest))
        if not m:
            raise VcdFormatError(path, lineno, f"bad range {' '.join(rest)!r} after "
                                               f"{raw_name!r}")
        msb = int(m.group(1))
        lsb = int(m.group(2)) if m.group(2) is not None else msb
        base_name, name = name, name + "".join(rest)
    elif not raw_name.startswith("\\") and (m := _NAME_RANGE_RE.match(name)) and m.group(1):
        msb = int(m.group(2))
        lsb = int(m.group(3)) if m.group(3) is not None else msb
        base_name = m.group(1)
    else:
        base_name = name
    scope = ".".join(hier)
    full = f"{scope}.{name}" if scope else name
    base = f"{scope}.{base_name}" if scope else base_name
    raw_scope = ".".join(raw_hier)
    reference = raw_name + "".join(rest)
    reference = f"{raw_scope}.{reference}" if raw_scope else reference
    return VcdVar(full, base, scope, name, ident, kind, width, msb, lsb, lineno, reference)


# -- values --------------------------------------------------------------------------------

def to_int(value: str | None) -> int | None:
    """Integer value of a VCD scalar or vector value string; ``None`` if any bit is x/z.

    ``"1"``, ``"0101"``, ``"b0101"`` are accepted; a vector shorter than its width is
    zero-extended (the caller has nothing else to do: a leading x/z would have extended as
    x/z, which is unknown anyway).
    """
    if value is None:
        return None
    if value[:1] in ("b", "B"):
        value = value[1:]
    try:
        return int(value, 2)
    except ValueError:
        return None


# -- body ----------------------------------------------------------------------------------

class _Reader(vcdvcd.VCDVCD):
    """vcdvcd's parser, with string values (``sHello !``) read like vectors."""

    _VECTOR_VALUE_CHANGE = vcdvcd.VCDVCD._VECTOR_VALUE_CHANGE | {"s", "S"}


class _Callbacks(vcdvcd.StreamParserCallbacks):
    def __init__(self, on_step, with_previous: bool):
        self.on_step = on_step
        self.last = None
        self.with_previous = with_previous
        self.previous: dict[str, str] = {}

    def value(self, vcd, time, value, identifier_code, cur_sig_vals):
        # called before vcdvcd stores the new value: keep the first old value per timestamp
        if identifier_code not in self.previous:
            self.previous[identifier_code] = cur_sig_vals[identifier_code]

    def time(self, vcd, time, cur_sig_vals):
        # vcdvcd calls this at each '#' line with the time that just ended (and once more at
        # the end of the file); the first call precedes any '#' and carries the initial 'x'.
        if self.last is not None and time < self.last:
            raise _Backwards(time, self.last)
        self.last = time
        try:
            if self.with_previous:
                self.on_step(time, cur_sig_vals, self.previous)
            else:
                self.on_step(time, cur_sig_vals)
        except Exception as e:  # the caller's own exception, not a parse error
            raise _FromCallback(e) from e
        self.previous = {}


class _Backwards(Exception):
    pass


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
        From :func:`read_header` of the same file.
    signals : iterable of VcdVar
        What to track; aliases of one identifier code are read once.
    on_step : callable
        ``on_step(time, values)``: ``time`` in file units, ``values`` maps identifier code to
        the current value string (``'x'`` until first set). It is called with non-decreasing
        times, possibly twice with the same time (once at the very start). The dict is
        vcdvcd's live state: copy what must outlive the call.
    with_previous : bool
        Call ``on_step(time, values, previous)`` instead, where ``previous`` maps the
        identifier codes that changed at ``time`` to their value at the end of the previous
        timestamp (see :class:`ClockSampler`).
    to_time : int, optional
        Stop after this time (file units).

    Raises
    ------
    VcdFormatError
        On a malformed body (with the line number).
    """
    refs = sorted({header.by_id[v.id][0].reference for v in signals})
    cb = _Callbacks(on_step, with_previous)
    try:
        try:
            _Reader(str(path), signals=refs, store_tvs=False, callbacks=cb, to_time=to_time)
        except BaseException as e:
            _close_vcdvcd_file(e)
            raise
    except _Backwards as e:
        raise _locate(path, header, f"time goes backwards ({e.args[1]} then {e.args[0]})") \
            from None
    except _FromCallback as e:
        raise e.args[0] from None
    except Exception as e:  # vcdvcd raises bare ValueError/IndexError/Exception
        raise _locate(path, header, f"vcdvcd failed: {type(e).__name__}: {e}") from e


def _close_vcdvcd_file(exc: BaseException) -> None:
    """vcdvcd opens the file without ``with``; when it is left by an exception (a parse
    error, or a callback stopping early) close it here instead of leaking it until garbage
    collection (a ResourceWarning)."""
    tb = exc.__traceback__
    while tb is not None:
        f = tb.tb_frame.f_locals.get("vcd_file")
        if f is not None and hasattr(f, "close"):
            f.close()
        tb = tb.tb_next


def _locate(path: Path | str, header: VcdHeader, fallback: str) -> VcdFormatError:
    """Find the first malformed body line (only called once something went wrong)."""
    last_time = None
    in_section = None
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        for lineno, line in enumerate(f, 1):
            if lineno <= header.end_line:
                continue
            for tok in (line.split() if line[:1] == "#" else [line.strip()]):
                if not tok:
                    continue
                c = tok[0]
                if in_section:
                    if tok.endswith("$end") or tok == "$end":
                        in_section = None
                    continue
                if c == "#":
                    try:
                        t = int(tok[1:])
                    except ValueError:
                        return VcdFormatError(path, lineno, f"bad time {tok!r}")
                    if last_time is not None and t < last_time:
                        return VcdFormatError(path, lineno, f"time goes backwards "
                                                            f"({last_time} then {t})")
                    last_time = t
                elif c in "01xXzZ":
                    if len(tok) < 2:
                        return VcdFormatError(path, lineno, f"value change {tok!r} without an "
                                                            "identifier code")
                elif c in "bBrRsS":
                    if len(tok.split()) != 2:
                        return VcdFormatError(path, lineno, f"vector change {tok!r} needs a "
                                                            "value and an identifier code")
                elif c == "$":
                    if tok.split()[0] == "$comment" and "$end" not in tok:
                        in_section = "$comment"
                elif line[:1] != "#":
                    return VcdFormatError(path, lineno, f"unexpected {tok[:40]!r}")
    return VcdFormatError(path, None, fallback)


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
