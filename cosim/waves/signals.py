"""Where the waveform tools' signals are in a VCD of an NPU run.

The tools read only signals of the NPU instance scope that the hardware declares for them,
never the nets inside its blocks:

* the named probes of :data:`hw.top.PROBE_FIELDS`, ``probe_<engine>_<field>`` for every
  engine of :data:`hw.isa.ENGINE_NAMES` (:func:`hw.top.probe_name`), all of them required;
* ``clk`` (of the scope, or of its parent);
* the AXI DRAM port: ``mem__{ar,r,aw,w,b}{valid,ready}``, ``mem__wstrb``, ``mem__rdata`` (its
  width gives the bytes per beat), ``mem__rid`` (optional);
* ``csr.cycles`` (optional): the NPU's ``CYCLES`` counter;
* the resource stall copies ``stall_<engine>_<reason>`` of :data:`hw.top.RESOURCE_STALLS`
  (:func:`hw.top.stall_source_name`; optional).

A VCD written before the probes existed is refused with a :class:`VcdProbeError` that names
the missing probes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields

from cosim.waves.vcd import VcdHeader, VcdSignalError, VcdVar
from hw.isa import ENGINE_NAMES
from hw.top import PROBE_FIELDS, RESOURCE_STALLS, probe_name, stall_source_name

__all__ = ["AXI_CHANNELS", "VcdProbeError", "EngineProbes", "NpuSignals", "find_npu_scope",
           "locate_signals"]

AXI_CHANNELS = ("ar", "r", "aw", "w", "b")


class VcdProbeError(VcdSignalError):
    """The NPU scope of a VCD lacks named probes of :data:`hw.top.PROBE_FIELDS` (or has one
    of another width): the VCD predates them, or is not of an NPU run.

    Attributes
    ----------
    scope : str
    missing : list of str
        Missing probes (names in the scope).
    wrong_width : list of str
        Probes of another width than the contract's, with both widths.
    """

    def __init__(self, file: object, scope: str, missing: list[str],
                 wrong_width: Sequence[str] = ()):
        problems = []
        if missing:
            problems.append(f"lacks the named probes {', '.join(missing)}")
        if wrong_width:
            problems.append(f"has probes of the wrong width: {', '.join(wrong_width)}")
        Exception.__init__(
            self, f"{file}: the NPU scope {scope!r} {' and '.join(problems)}. The waveform "
            "tools read only these probes (hw.top.PROBE_FIELDS), not the command processor's "
            "internal nets: this VCD predates them (or is not of an NPU run); trace the run "
            "again with the current hardware")
        self.name = f"{scope}.{(list(missing) or list(wrong_width))[0]}"
        self.scope = scope
        self.missing = list(missing)
        self.wrong_width = list(wrong_width)


@dataclass(frozen=True)
class EngineProbes:
    """The named probes of one engine (:data:`hw.top.PROBE_FIELDS`)."""
    busy: VcdVar
    done: VcdVar
    take: VcdVar
    sem_stall: VcdVar
    queue: VcdVar
    index: VcdVar
    opcode: VcdVar

    def all(self) -> list[VcdVar]:
        return [getattr(self, f) for f in PROBE_FIELDS]


if {f.name for f in fields(EngineProbes)} != set(PROBE_FIELDS):
    raise AssertionError(f"EngineProbes {[f.name for f in fields(EngineProbes)]} does not "
                         f"match hw.top.PROBE_FIELDS {list(PROBE_FIELDS)}")


@dataclass(frozen=True)
class NpuSignals:
    """Where the tools' signals are in one VCD.

    Attributes
    ----------
    scope : str
        The NPU instance.
    clock : VcdVar
    engines : dict
        Engine name -> :class:`EngineProbes`, in the file's order of the ``busy`` probes.
    axi : dict
        Channel (``ar``, ``r``, ``aw``, ``w``, ``b``) -> ``(valid, ready)``.
    wstrb, rdata : VcdVar
    rid : VcdVar or None
    cycles : VcdVar or None
        The NPU's ``CYCLES`` counter (``csr.cycles``).
    stalls : dict
        Resource stall counter name (``stall.<engine>.<reason>``) -> its 1-bit source, in
        the order of :data:`hw.top.RESOURCE_STALLS`.
    """
    scope: str
    clock: VcdVar
    engines: dict[str, EngineProbes]
    axi: dict[str, tuple[VcdVar, VcdVar]]
    wstrb: VcdVar
    rdata: VcdVar
    rid: VcdVar | None
    cycles: VcdVar | None = None
    stalls: dict[str, VcdVar] = field(default_factory=dict)

    def all(self) -> list[VcdVar]:
        """Every signal to stream, once each."""
        out = [self.clock, self.wstrb, self.rdata] + ([self.rid] if self.rid else [])
        out += [self.cycles] if self.cycles else []
        for e in self.engines.values():
            out += e.all()
        for valid, ready in self.axi.values():
            out += [valid, ready]
        out += list(self.stalls.values())
        return list(dict.fromkeys(out))

    @property
    def bus_bytes(self) -> int:
        """Bytes per AXI data beat."""
        return self.rdata.width // 8


def find_npu_scope(header: VcdHeader) -> str:
    """Dotted scope of the NPU instance: the shortest that holds ``mem__arvalid`` and the
    named probes (or, in a VCD without probes, the shortest that holds ``mem__arvalid``).

    Raises
    ------
    VcdSignalError
        If no scope holds ``mem__arvalid``.
    """
    hits = sorted({v.scope for v in header.vars if v.name == "mem__arvalid"},
                  key=lambda s: (s.count("."), s))
    if not hits:
        raise VcdSignalError("<npu>.mem__arvalid", (v.path for v in header.vars
                                                    if v.name.endswith("arvalid")))
    probe = probe_name(ENGINE_NAMES[0], "busy")
    return next((s for s in hits if header.get(f"{s}.{probe}") is not None), hits[0])


def _engine_probes(header: VcdHeader, scope: str) -> dict[str, EngineProbes]:
    here: dict[str, VcdVar] = {}
    for v in header.scope_vars(scope):
        here.setdefault(v.base[len(scope) + 1:], v)
    found: dict[str, dict[str, VcdVar]] = {e: {} for e in ENGINE_NAMES}
    missing, wrong = [], []
    for e in ENGINE_NAMES:
        for f, width in PROBE_FIELDS.items():
            name = probe_name(e, f)
            v = here.get(name)
            if v is None:
                missing.append(name)
            elif v.width != width:
                wrong.append(f"{name} ({v.width} bits, not {width})")
            else:
                found[e][f] = v
    if missing or wrong:
        raise VcdProbeError(header.file, scope, missing, wrong)
    order = sorted(ENGINE_NAMES, key=lambda e: found[e]["busy"].line)
    return {e: EngineProbes(**found[e]) for e in order}


def locate_signals(header: VcdHeader, scope: str | None = None) -> NpuSignals:
    """Find the NPU's signals in a VCD header (see the module docstring for the names).

    Raises
    ------
    VcdProbeError
        If a named probe is missing or has another width than :data:`hw.top.PROBE_FIELDS`
        (the message names them: the VCD predates the probes).
    VcdSignalError
        If another required signal is missing (the message names it and similar ones).
    """
    s = find_npu_scope(header) if scope is None else scope
    clock = header.get(f"{s}.clk") or header.find(f"{s.rsplit('.', 1)[0]}.clk")
    engines = _engine_probes(header, s)
    axi = {ch: (header.find(f"{s}.mem__{ch}valid"), header.find(f"{s}.mem__{ch}ready"))
           for ch in AXI_CHANNELS}
    stalls = {}
    for engine, reason in RESOURCE_STALLS:
        v = header.get(f"{s}.{stall_source_name(engine, reason)}")
        if v is not None:
            stalls[f"stall.{engine}.{reason}"] = v
    return NpuSignals(s, clock, engines, axi, header.find(f"{s}.mem__wstrb"),
                      header.find(f"{s}.mem__rdata"), header.get(f"{s}.mem__rid"),
                      header.get(f"{s}.csr.cycles"), stalls)
