"""Cross-check of hardware performance counters against a VCD of the same run.

Counters and the VCD agree exactly: a snapshot of the counters taken in the cycle in which
``CYCLES`` reads ``s`` counts the cycles ``c < s``, so the difference of two snapshots equals
the figures of :func:`cosim.waves.summarize` over the cycles whose sampled ``csr.cycles`` is
in ``[before["cycles"], after["cycles"])`` (:func:`check_counter_snapshots`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from cosim.waves.signals import AXI_CHANNELS
from cosim.waves.summary import Summary, summarize
from hw.isa import COUNTER_BITS, COUNTER_NAMES, ENGINE_NAMES

__all__ = ["CounterCheck", "check_counters", "counter_delta", "check_counter_snapshots",
           "load_counters", "KNOWN_COUNTERS", "counter_values"]

#: The names a counters file may hold: ``cycles``, the counter block's
#: (:data:`hw.isa.COUNTER_NAMES`), and the figures only the VCD has (commands taken per engine,
#: handshakes per AXI channel).
KNOWN_COUNTERS = ("cycles", *COUNTER_NAMES, *(f"commands.{e}" for e in ENGINE_NAMES),
                  *(f"axi.{ch}" for ch in AXI_CHANNELS))


@dataclass(frozen=True)
class CounterCheck:
    """Result of :func:`check_counters`.

    Attributes
    ----------
    matched : dict
        Name -> value, equal in both.
    mismatched : dict
        Name -> ``(vcd_value, counter_value)``.
    unchecked : list of str
        Known counters the VCD summary has no figure for (the TLB's; those of engines or
        stall sources the file does not hold).
    """
    matched: dict[str, int]
    mismatched: dict[str, tuple[int, int]]
    unchecked: list[str]

    @property
    def ok(self) -> bool:
        """No counter differs and at least one was compared (a check of only names the VCD
        cannot measure checked nothing)."""
        return not self.mismatched and bool(self.matched)

    def format(self) -> str:
        lines = [f"counters: {len(self.matched)} equal, {len(self.mismatched)} different, "
                 f"{len(self.unchecked)} not measurable from the VCD"]
        lines += [f"  MISMATCH {k}: vcd {a} != counter {b} (diff {a - b:+d})"
                  for k, (a, b) in sorted(self.mismatched.items())]
        if self.unchecked:
            lines.append("  unchecked: " + ", ".join(self.unchecked))
        if not self.matched and not self.mismatched:
            lines.append("  nothing compared: none of these names is a figure of the VCD "
                         "summary")
        return "\n".join(lines)


def _flatten(d: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def counter_values(counters: dict) -> dict[str, int]:
    """Counter name -> value of a counters object, nested dicts flattened with ``.``
    (``{"busy": {"load": 12}}`` is ``busy.load``).

    Raises
    ------
    ValueError
        If a name is not one of :data:`KNOWN_COUNTERS` (the message names it and lists
        them; a misspelt name was reported as unchecked and its check passed).
    TypeError
        If a counter value is not an integer.
    """
    values = _flatten(counters)
    unknown = [k for k in values if k not in KNOWN_COUNTERS]
    if unknown:
        raise ValueError(f"unknown counter{'s' if len(unknown) > 1 else ''} "
                         f"{', '.join(map(repr, unknown))}; the counters are: "
                         f"{', '.join(KNOWN_COUNTERS)}")
    for k, v in values.items():
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"counter {k!r} must be an integer, not {v!r}")
    return values


def check_counters(summary: Summary, counters: dict) -> CounterCheck:
    """Compare the summary's figures with hardware counter values of the same run.

    Parameters
    ----------
    summary : Summary
    counters : dict
        Counter name -> integer value; nested dicts are flattened with ``.``
        (``{"busy": {"load": 12}}`` is ``busy.load``). Names of :data:`KNOWN_COUNTERS`, as in
        :meth:`Summary.figures`.

    Returns
    -------
    CounterCheck
        Exact equality is expected for every name both sides have.

    Raises
    ------
    ValueError, TypeError
        As :func:`counter_values`.
    """
    figs = summary.figures()
    matched, mismatched, unchecked = {}, {}, []
    for k, v in counter_values(counters).items():
        if k not in figs:
            unchecked.append(k)
        elif figs[k] == v:
            matched[k] = v
        else:
            mismatched[k] = (figs[k], v)
    return CounterCheck(matched, mismatched, unchecked)


def counter_delta(before: dict, after: dict) -> dict[str, int]:
    """``after - before`` of two counter snapshots (``Device.counters()``, or their JSON),
    modulo each counter's width (:data:`hw.isa.COUNTER_BITS`; 32 bits for unknown names).

    Raises
    ------
    ValueError
        If a name is in one snapshot only, or a value is not an integer (the message names
        them).
    """
    for a, b, name in ((after, before, "'after'"), (before, after, "'before'")):
        missing = [k for k in a if k not in b]
        if missing:
            raise ValueError(f"counter snapshot pair: {', '.join(map(repr, missing))} in "
                             f"{name} only; give both snapshots the same names")
    out = {}
    for k, v in after.items():
        try:
            out[k] = (int(v) - int(before[k])) % (1 << COUNTER_BITS.get(k, 32))
        except (TypeError, ValueError):
            raise ValueError(f"counter snapshot pair: {k!r} is {before[k]!r} before and {v!r} "
                             "after; give integers") from None
    return out


def check_counter_snapshots(vcd: Path | str, before: dict, after: dict, *,
                            scope: str | None = None) -> tuple[Summary, CounterCheck]:
    """Check two counter snapshots of a traced run against its VCD, exactly.

    The window is ``[before["cycles"], after["cycles"])`` in the NPU's ``CYCLES`` (so the
    snapshots must come from a timed backend); every counter of the difference is compared
    with the figure re-derived from the VCD over those cycles.

    Returns
    -------
    (Summary, CounterCheck)

    Raises
    ------
    KeyError
        If a snapshot has no ``cycles``.
    ValueError, TypeError
        As :func:`counter_values`.
    VcdError, VcdFormatError, VcdSignalError
        As :func:`summarize` with ``unit="counter"``.
    """
    s = summarize(vcd, start=int(before["cycles"]), end=int(after["cycles"]), scope=scope,
                  unit="counter")
    return s, check_counters(s, counter_delta(before, after))


def load_counters(path: Path | str) -> dict:
    """Read a counters JSON file: an object of integers, possibly nested, or a snapshot pair
    ``{"before": {...}, "after": {...}}`` of ``Device.counters()`` (see
    :func:`check_counter_snapshots`).

    Raises
    ------
    ValueError
        If the file is not JSON, not an object, an empty object, or a snapshot pair without
        one of its halves or with a half that is not an object.
    """
    try:
        data = json.loads(Path(path).read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON ({e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: counters must be a JSON object")
    if not data:
        raise ValueError(f"{path}: no counters in it")
    halves = {"before", "after"} & set(data)
    if halves:
        if halves != {"before", "after"}:
            (missing,) = {"before", "after"} - halves
            raise ValueError(f"{path}: a snapshot pair needs 'before' and 'after'; it has no "
                             f"{missing!r}")
        for half in ("before", "after"):
            if not isinstance(data[half], dict):
                raise ValueError(f"{path}: {half!r} must be an object of counters, not "
                                 f"{json.dumps(data[half])}")
    return data
