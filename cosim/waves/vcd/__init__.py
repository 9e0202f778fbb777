"""Streaming reading of VCD and FST waveforms, fast where the file is regular and checked
line by line where it is not.

The header (everything up to ``$enddefinitions``) is small and is parsed here
(:func:`read_header`; an FST header through pywellen, :mod:`cosim.waves.vcd.fst`). The
value-change body is read in chunks (:func:`changes`, :func:`stream`): regular chunks are
scanned with numpy (:mod:`cosim.waves.vcd.scan`), every other chunk goes to the checked line
reader (:class:`LineChecker`, :class:`VcdBody`), so memory holds a few chunks and one current
value per *selected* identifier code, and never grows with the file. The rules the reader
follows, whichever path reads a line:

* **timescale**: every form is accepted (``1ns``, ``1 ns``, ``10ps``, ``100 fs``, split across
  lines); a malformed or zero one (``0ps``, which would make every time 0 s) is a
  :class:`VcdFormatError` naming it and its line;
* **escaped names** (``\\foo[3]``, and Vivado's ``\\<const0>\\`` with a trailing backslash):
  :attr:`VcdVar.path` has neither backslash, so a lookup by the real name works;
* **bracketed names**: a range given as its own token (``bus [7:0]``, ``bit [5]``), or
  attached to the name with a colon and matching the declared width (``bus[7:0]``), is parsed
  into :attr:`VcdVar.msb`/:attr:`VcdVar.lsb`; any other bracket (``x[0]`` of one bit, a memory
  word ``mem[3]``) is part of the name. :meth:`VcdHeader.find` takes a name with or without
  its range;
* **aliases** (several ``$var`` sharing one identifier code) are kept together
  (:attr:`VcdHeader.by_id`) and read once;
* ``$var``/``$scope`` declarations split across lines are rejected with a clear error naming
  the line.

In the body:

* a **malformed value-change line** (a vector without identifier code, bits that are not
  0/1/x/z, a real that is not a number, an undeclared identifier code, an unknown keyword) is
  skipped with a :class:`VcdSkippedLineWarning` naming its line number and text; the rest of
  the file is read. A bad time (``#12a``) or a time going backwards is a
  :class:`VcdFormatError` (every later time would be wrong);
* a vector value **wider than its declared size** is truncated to its low bits, as a Verilog
  integer constant larger than its size is truncated from the left (IEEE 1364-2005 3.5.1),
  with one :class:`VcdWidthWarning` per variable;
* value changes on a ``#`` or ``$dumpvars`` line (``#5 1! b10 "``) are read as if on lines
  of their own;
* **string variables** (``$var string``, values ``sHello``) and ``real`` variables are read;
* ``$dumpoff``/``$dumpon``: writers put an ``x`` for every variable after ``$dumpoff``; those
  arrive as ordinary changes, so a signal reads unknown while dumping is off.

Values are canonical (:func:`canonical`): an ``int`` for bits that are all 0 or 1, the
full-width bit string for bits with x or z, a ``float`` for a real, the text of a string.
:func:`to_int` (unsigned or two's complement), :func:`to_float` and :meth:`VcdVar.value` read
them; asking for the integer of a ``string`` or ``real`` variable is a
:class:`VcdValueError`.

Times are integers in the file's timescale unit (:attr:`VcdHeader.timescale_s` seconds each).
"""

from cosim.waves.vcd.body import (
    MAX_LINE_WARNINGS,
    ClockSampler,
    LineChecker,
    Value,
    VcdBody,
    canonical,
    format_change,
)
from cosim.waves.vcd.edges import UNKNOWN, EdgeSampler, edge_cycles
from cosim.waves.vcd.header import (
    VcdEmptyError,
    VcdError,
    VcdFormatError,
    VcdHeader,
    VcdSignalError,
    VcdSkippedLineWarning,
    VcdValueError,
    VcdVar,
    VcdWarning,
    VcdWidthWarning,
    is_fst,
    parse_timescale,
    read_header,
    to_float,
    to_int,
)
from cosim.waves.vcd.scan import Changes
from cosim.waves.vcd.source import changes, selection, stream, time_range

__all__ = [
    "VcdError", "VcdFormatError", "VcdSignalError", "VcdValueError", "VcdEmptyError",
    "VcdWarning", "EdgeSampler", "edge_cycles", "UNKNOWN",
    "VcdSkippedLineWarning", "VcdWidthWarning", "VcdVar", "VcdHeader", "read_header",
    "is_fst", "parse_timescale", "to_int", "to_float", "canonical", "Value", "LineChecker",
    "VcdBody", "format_change", "Changes", "changes", "selection", "stream", "time_range",
    "ClockSampler", "MAX_LINE_WARNINGS",
]
