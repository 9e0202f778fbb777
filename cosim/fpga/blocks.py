"""Per-block resources of a flat Yosys netlist: which Amaranth block each cell belongs to.

:func:`blocks_from_netlist` counts the cells of a flattened synthesis netlist (the
place-and-route input) per Amaranth block, by hierarchical name, by source line, and for the
logic that reads a memory by what it feeds; :func:`cell_blocks` and :func:`net_blocks` give
the block of each cell and of each net (by its driver), :func:`block_of` the block of one
name. :class:`Resources` classifies cell counts per FPGA family. Used by
:mod:`cosim.fpga.synth` (the per-block table) and :mod:`cosim.fpga.pnr` (congestion per
block).
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TILE_MEMORIES", "KEY_BLOCKS", "BLOCKS_METHOD", "Resources", "blocks_from_netlist",
           "cell_blocks", "net_blocks", "block_of"]

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
