"""VCD declarations (header), values, and the errors and warnings of :mod:`cosim.waves.vcd`
(the format rules this reader follows are listed there)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

__all__ = [
    "VcdError", "VcdFormatError", "VcdSignalError", "VcdValueError", "VcdEmptyError",
    "VcdWarning",
    "VcdSkippedLineWarning", "VcdWidthWarning", "VcdVar", "VcdHeader", "read_header",
    "parse_timescale", "to_int", "to_float", "is_fst",
]

_UNITS = {"s": Fraction(1), "ms": Fraction(1, 10**3), "us": Fraction(1, 10**6),
          "ns": Fraction(1, 10**9), "ps": Fraction(1, 10**12), "fs": Fraction(1, 10**15)}
_TIMESCALE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*(s|ms|us|ns|ps|fs)\s*$")
_RANGE_RE = re.compile(r"^\[(-?\d+)(?::(-?\d+))?\]$")
_NAME_RANGE_RE = re.compile(r"^(.+)\[(-?\d+):(-?\d+)\]$")
_UNKNOWN_BITS = "xXzZ"
_BIT_CHARS = "01" + _UNKNOWN_BITS


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


class VcdValueError(VcdError, ValueError):
    """A value cannot be read as asked: the integer of a ``string`` or ``real`` variable, a
    bit string with characters other than 0/1/x/z, a real that is not a number."""


class VcdEmptyError(VcdError):
    """The file (or the window asked for) holds nothing to measure: no value changes, or
    fewer than two rising edges of the clock, or no cycle inside the window."""


class VcdWarning(UserWarning):
    """Base class of the warnings of this module (the file is read, with a repair)."""


class VcdSkippedLineWarning(VcdWarning):
    """A malformed body line was skipped (the message has its line number and text)."""


class VcdWidthWarning(VcdWarning):
    """A vector value was wider than its variable and was truncated to its low bits (one
    warning per variable)."""


def _unescape(name: str) -> str:
    """A name as the design calls it: surrounding white space, the backslash of an escaped
    identifier (``\\foo[3]``) and the trailing backslash some writers (Vivado:
    ``\\<const0>\\``) end it with, removed."""
    name = name.strip()
    if name.startswith("\\"):
        name = name[1:]
        if len(name) > 1 and name.endswith("\\"):
            name = name[:-1]
    return name


@dataclass(frozen=True)
class VcdVar:
    """One ``$var`` declaration.

    Attributes
    ----------
    path : str
        Dotted full name, escape backslashes removed, range appended without a space
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
        The name as written (scopes and name joined by dots, escapes and range kept).
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

    def to_int(self, value: str | int | None, *, signed: bool = False) -> int | None:
        """The integer of one of this variable's values (:func:`to_int` with its width):
        unsigned, or two's complement with ``signed=True``; ``None`` if a bit is x/z.

        Raises
        ------
        VcdValueError
            For a ``string`` or ``real`` variable, or a value that is not a bit string.
        """
        if self.kind in ("string", "real"):
            raise VcdValueError(f"{self.path} is a {self.kind} variable, it has no integer "
                                f"value (value {value!r}); use VcdVar.value")
        return to_int(value, signed=signed, width=self.width if self.width > 0 else None)

    def value(self, value: str | int | float | None) -> int | float | str | None:
        """One of this variable's values, read by its kind: ``float`` for ``real``
        (:func:`to_float`), the text for ``string``, else the unsigned integer
        (:meth:`to_int`). ``None`` when unknown (x/z, or never set).

        Raises
        ------
        VcdValueError
            If the value does not fit the kind.
        """
        if self.kind == "real":
            return to_float(value)
        if self.kind == "string":
            return value
        return self.to_int(value)


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
        Line of ``$enddefinitions`` (0 for an FST file).
    format : str
        ``"vcd"``, or ``"fst"`` for an FST file (read through pywellen,
        :mod:`cosim.waves.vcd.fst`; its identifier codes are pywellen's signal numbers).
    """
    file: Path
    timescale_s: Fraction
    timescale: str
    vars: list[VcdVar] = field(default_factory=list)
    by_id: dict[str, list[VcdVar]] = field(default_factory=dict)
    scopes: list[str] = field(default_factory=list)
    end_line: int = 0
    format: str = "vcd"

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
            tail = _unescape(name.rsplit(".", 1)[-1])
            raise VcdSignalError(name, (v.path for v in self.vars if tail in v.name))
        return hit

    def get(self, name: str) -> VcdVar | None:
        """Like :meth:`find`, but ``None`` when missing."""
        # each dotted part unescaped; a trailing backslash also ends an escaped scope name
        # that holds dots (``top.\\gen.blk\\.x`` is ``top.gen.blk.x``)
        key = ".".join(_unescape(p).removesuffix("\\") for p in name.split("."))
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
        If the text is not a number followed by s, ms, us, ns, ps or fs, or the number is
        zero (every time would be 0 s).
    """
    m = _TIMESCALE_RE.match(text)
    if not m:
        raise VcdFormatError(file, line, f"bad $timescale {text.strip()!r} (expected e.g. "
                                         "'1ns', '10 ps', '100 fs')")
    mag = Fraction(m.group(1))
    if mag == 0:
        raise VcdFormatError(file, line, f"zero $timescale {text.strip()!r}: every time "
                                         "would be 0 s (expected e.g. '1ns', '10 ps')")
    return mag * _UNITS[m.group(2)], f"{m.group(1)} {m.group(2)}"


class _Declarations:
    """State of :func:`read_header` while it reads the declarations."""

    def __init__(self, path: Path, f):
        self.path = path
        self.header = VcdHeader(path, Fraction(1), "1 s")
        self.hier: list[str] = []        # unescaped scope names
        self.raw_hier: list[str] = []    # as written
        self.toks = ((tok, lineno) for lineno, line in enumerate(f, 1) for tok in line.split())

    def section(self, keyword: str, start: int) -> tuple[list[str], int]:
        """Tokens up to the next ``$end``, and its line."""
        body, last = [], start
        for tok, lineno in self.toks:
            if tok == "$end":
                return body, lineno
            body.append(tok)
            last = lineno
        raise VcdFormatError(self.path, start, f"{keyword} is never closed by $end "
                                               f"(file ends at line {last})")

    def run(self) -> VcdHeader:
        for tok, lineno in self.toks:
            if tok == "$enddefinitions":
                self.section(tok, lineno)
                if self.hier:
                    raise VcdFormatError(self.path, lineno, "$enddefinitions inside scope "
                                         f"{'.'.join(self.hier)!r} (missing $upscope)")
                self.header.end_line = lineno
                return self.header
            self.declaration(tok, lineno)
        raise VcdFormatError(self.path, None, "no $enddefinitions (empty or truncated file?)")

    def declaration(self, tok: str, lineno: int) -> None:
        if tok in ("$date", "$version", "$comment"):
            self.section(tok, lineno)
        elif tok == "$timescale":
            body, _ = self.section(tok, lineno)
            self.header.timescale_s, self.header.timescale = parse_timescale(
                " ".join(body), file=self.path, line=lineno)
        elif tok == "$scope":
            self.scope(*self.section(tok, lineno), lineno)
        elif tok == "$upscope":
            self.section(tok, lineno)
            if not self.hier:
                raise VcdFormatError(self.path, lineno, "$upscope without an open $scope")
            self.hier.pop()
            self.raw_hier.pop()
        elif tok == "$var":
            self.var(*self.section(tok, lineno), lineno)
        elif tok.startswith("$"):
            raise VcdFormatError(self.path, lineno, f"unexpected {tok!r} in the header")
        else:
            raise VcdFormatError(self.path, lineno, f"unexpected {tok!r} in the header "
                                                    "(value changes before $enddefinitions?)")

    def scope(self, body: list[str], end: int, lineno: int) -> None:
        if len(body) != 2:
            raise VcdFormatError(self.path, lineno, f"$scope needs a type and a name, got "
                                                    f"{' '.join(body)!r}")
        if end != lineno:
            raise VcdFormatError(self.path, lineno, "$scope split across lines")
        self.raw_hier.append(body[1])
        self.hier.append(_unescape(body[1]))
        self.header.scopes.append(".".join(self.hier))

    def var(self, body: list[str], end: int, lineno: int) -> None:
        v = _parse_var(body, lineno, end, self.hier, self.raw_hier, self.path)
        prev = self.header.by_id.get(v.id)
        if prev and prev[0].width != v.width:
            raise VcdFormatError(self.path, lineno, f"identifier {v.id!r} declared {v.width} "
                                 f"bits wide, but {prev[0].width} at line {prev[0].line}")
        self.header.vars.append(v)
        self.header.by_id.setdefault(v.id, []).append(v)


def is_fst(path: Path | str) -> bool:
    """Whether ``path`` is an FST file (its first block is an FST header block, type 0;
    a VCD is text).

    Raises
    ------
    FileNotFoundError
        If the file does not exist.
    """
    with open(path, "rb") as f:
        return f.read(1) == b"\x00"


def read_header(path: Path | str) -> VcdHeader:
    """Read the declarations of a VCD file (stops at ``$enddefinitions``), or of an FST file
    (through pywellen, :func:`cosim.waves.vcd.fst.read_fst_header`).

    Parameters
    ----------
    path : Path or str

    Returns
    -------
    VcdHeader
        Without a ``$timescale``, the unit is 1 s.

    Raises
    ------
    VcdFormatError
        On an unknown or unterminated section, a malformed ``$var``/``$scope``/
        ``$timescale``, a zero timescale, unbalanced scopes, a missing ``$enddefinitions``
        or an identifier code re-declared with a different width (the message has the line
        number).
    FileNotFoundError
        If the file does not exist.
    """
    path = Path(path)
    if is_fst(path):
        from cosim.waves.vcd.fst import read_fst_header
        return read_fst_header(path)
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        return _Declarations(path, f).run()


def _parse_var(body: list[str], lineno: int, end: int, hier: list[str], raw_hier: list[str],
               path: Path) -> VcdVar:
    if len(body) < 4:
        raise VcdFormatError(path, lineno, f"$var needs type, size, identifier and name, got "
                                           f"{' '.join(body)!r}")
    if end != lineno:
        raise VcdFormatError(path, lineno, "$var split across lines")
    kind, size, ident, raw_name, *rest = body
    try:
        width = int(size)
    except ValueError:
        raise VcdFormatError(path, lineno, f"$var size {size!r} is not a number") from None
    if width < 0:
        raise VcdFormatError(path, lineno, f"$var size {width} is negative")
    name = _unescape(raw_name)
    base_name, msb, lsb = name, None, None
    if rest:
        m = _RANGE_RE.match("".join(rest))
        if not m:
            raise VcdFormatError(path, lineno, f"bad range {' '.join(rest)!r} after "
                                               f"{raw_name!r}")
        msb = int(m.group(1))
        lsb = int(m.group(2)) if m.group(2) is not None else msb
        name = name + "".join(rest)
    elif not raw_name.startswith("\\") and (m := _NAME_RANGE_RE.match(name)):
        # an attached [msb:lsb] is a range only if it spans the declared width; anything
        # else (x[0], mem[3], a[1:0] of 4 bits) is part of the name
        hi, lo = int(m.group(2)), int(m.group(3))
        if abs(hi - lo) + 1 == width:
            base_name, msb, lsb = m.group(1), hi, lo
    scope = ".".join(hier)
    full = f"{scope}.{name}" if scope else name
    base = f"{scope}.{base_name}" if scope else base_name
    raw_scope = ".".join(raw_hier)
    reference = raw_name + "".join(rest)
    reference = f"{raw_scope}.{reference}" if raw_scope else reference
    return VcdVar(full, base, scope, name, ident, kind, width, msb, lsb, lineno, reference)


# -- values --------------------------------------------------------------------------------

def to_int(value: str | int | None, *, signed: bool = False, width: int | None = None
           ) -> int | None:
    """Integer value of a VCD scalar or vector value; ``None`` if a bit is x/z.

    ``value`` is a canonical value (an ``int``, or a bit string with x/z bits, see
    :func:`cosim.waves.vcd.canonical`) or a bit string as written: ``"1"``, ``"0101"``,
    ``"b0101"``. A string shorter than the variable is zero-extended, as the VCD format says
    for a leading 0 or 1 (a leading x/z extends as x/z, which is unknown anyway: ``None``).

    Parameters
    ----------
    value : str, int or None
        ``None`` (never set) gives ``None``.
    signed : bool
        Read the ``width`` bits as two's complement.
    width : int, optional
        The variable's declared size in bits (:attr:`VcdVar.width`); needed for
        ``signed=True``. A longer value keeps its low ``width`` bits.

    Raises
    ------
    VcdValueError
        If the value is not a bit value (e.g. the text of a ``string`` variable, a float, a
        negative ``int``).
    ValueError
        If ``signed=True`` without a ``width``, or ``width < 1``.
    """
    if value is None:
        return None
    if width is not None and width < 1:
        raise ValueError(f"width must be at least 1 bit, not {width}")
    if signed and width is None:
        raise ValueError("the signed reading of a value needs its variable's width (a "
                         "VCD value may be written shorter than the variable)")
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        n = value if width is None else value & ((1 << width) - 1)
        return n - (1 << width) if signed and n >> (width - 1) else n
    if not isinstance(value, str):
        raise VcdValueError(f"{value!r} is not a VCD bit value")
    bits = value[1:] if value[:1] in ("b", "B") else value
    if not bits or bits.strip(_BIT_CHARS):
        raise VcdValueError(f"{value!r} is not a VCD bit string (0, 1, x, z)")
    if width is not None:
        bits = bits[-width:]
    if bits.strip("01"):
        return None                     # an x or z bit
    n = int(bits, 2)
    if signed and len(bits) == width and n >> (width - 1):
        n -= 1 << width
    return n


def to_float(value: str | float | None) -> float | None:
    """Value of a ``real`` variable (a ``float``, or its text: ``"36.6"``, ``"-1.5e3"``, with
    or without its ``r``); ``None`` if unknown (``x``/``z``, or ``None``: never set).

    Raises
    ------
    VcdValueError
        If the text is not a number.
    """
    if value is None:
        return None
    if isinstance(value, float):
        return value
    if not isinstance(value, str):
        raise VcdValueError(f"{value!r} is not a real value")
    text = value[1:] if value[:1] in ("r", "R") else value
    if text in ("x", "X", "z", "Z"):
        return None
    try:
        return float(text)
    except ValueError:
        raise VcdValueError(f"{value!r} is not a real value") from None
