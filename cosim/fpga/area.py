"""``npu area``: the FPGA cost of one configuration per family, and its printed table.

:func:`area` chains the flows (Verilog bundle, flat synthesis with the per-block table,
optionally a hierarchy-preserving synthesis, and for ECP5 place and route) into one
:class:`AreaRow`; :func:`format_area_table` prints rows and their per-block breakdown.
"""

from __future__ import annotations

import difflib
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cosim.build import design_blocks
from cosim.fpga.blocks import BLOCKS_METHOD, KEY_BLOCKS, TILE_MEMORIES
from cosim.fpga.harness import harness_cost
from cosim.fpga.pnr import ECP5_DEVICE, ECP5_PACKAGE, PNR_FREQ_MHZ, PNR_SEED, place_route
from cosim.fpga.synth import FAMILIES, check_memories, synthesize
from cosim.fpga.tools import FpgaToolError
from cosim.fpga.verilog import write_verilog
from hw.config import NPUConfig

__all__ = ["AreaRow", "BlockNotFoundError", "area", "check_block", "format_area_table"]


class BlockNotFoundError(ValueError):
    """``npu area --block`` names no block of the configuration's design."""


@dataclass
class AreaRow:
    """One row of ``npu area``: a configuration's cost on one family.

    ``seconds`` holds the wall time of each step (``verilog``, ``synth``, ``synth_hier``,
    ``pnr``). ``blocks`` is the per-block table of the flat synthesis
    (:func:`blocks_from_netlist`, method in ``blocks_method``); ``blocks_hier`` that of the
    optional hierarchy-preserving synthesis (``synth_ecp5 -noflatten -noabc9``, per module).
    ``memories_not_in_bram`` lists every memory Yosys did not put in block RAM (small FIFOs in
    LUT RAM are normal); ``memory_problems`` is :func:`check_memories` of the tile's memories
    (ECP5 and iCE40; empty when they are in RAM primitives). ``notes`` are the synthesis
    runs' :attr:`SynthResult.notes` (e.g. an ABC9 failure and the fallback to ABC).
    ``congestion`` is router2's overuse per block when routing did not finish
    (:func:`~cosim.fpga.pnr.parse_congestion`; ``error`` then has it in one line).
    ``seed`` is nextpnr's placement seed (None without place and route). ``block`` is the
    block synthesized on its own (:func:`area`'s ``block``), None for the whole NPU.
    """
    config: str
    family: str
    lut4: int
    ff: int
    dsp: int
    bram: int
    lutram: int
    fmax_mhz: float | None = None
    fmax_routed: bool = True
    critical_block: str | None = None
    critical_path: dict = field(default_factory=dict)
    memories_not_in_bram: list[str] = field(default_factory=list)
    memory_problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    harness: dict[str, int] = field(default_factory=dict)
    blocks: dict[str, dict] = field(default_factory=dict)
    blocks_method: str = ""
    blocks_hier: dict[str, dict] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    congestion: dict | None = None
    directory: str = ""
    seed: int | None = None
    block: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def _pnr_dir(netlist: Path, seed: int) -> Path:
    """Where :func:`area` has nextpnr write for placement seed ``seed``: the netlist's folder
    for :data:`PNR_SEED`, else its sub-folder ``seed<N>``."""
    return netlist.parent if seed == PNR_SEED else netlist.parent / f"seed{seed}"


def check_block(config: NPUConfig, block: str, out_dir: Path | None = None) -> str:
    """The module :func:`area` would synthesize for ``block`` of ``config`` (its Verilog
    bundle written into ``out_dir`` as :func:`area` writes it, cached).

    Raises
    ------
    BlockNotFoundError
        As :func:`area`.
    """
    return _find_block(write_verilog(config, out_dir).verilog, block, config.name)


def _find_block(verilog: Path, block: str, config: str) -> str:
    """The module of ``block``: its exact name, or its one variant ``block$N``.

    Raises
    ------
    BlockNotFoundError
        No such block (the message lists the close names and every block), or ``block``
        names several variants.
    """
    names = ["npu", *(f"npu.{b}" for b in design_blocks(verilog))]
    if block in names:
        return block
    variants = [n for n in names if n.split("$")[0] == block]
    if len(variants) == 1:
        return variants[0]
    if variants:
        raise BlockNotFoundError(f"{block!r} has {len(variants)} variants in {config}: give "
                                 f"one of {', '.join(variants)}")
    plain = sorted({n.split("$")[0] for n in names})
    close = difflib.get_close_matches(block, plain, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(close)}?" if close else "."
    raise BlockNotFoundError(f"no block {block!r} in {config}{hint} Blocks: "
                             + ", ".join(plain))


def area(config: NPUConfig, *, family: str = "ecp5", pnr: bool = True, blocks: bool = True,
         hier: bool = False, out_dir: Path | None = None, freq_mhz: float = PNR_FREQ_MHZ,
         device: str = ECP5_DEVICE, package: str = ECP5_PACKAGE,
         timeout: float | None = None, route: bool = True, seed: int = PNR_SEED,
         abc9: bool | None = None, block: str | None = None,
         progress: Callable[[str], None] | None = None) -> AreaRow:
    """Synthesize (and for ECP5, place and route) one configuration; one :class:`AreaRow`.

    With ``pnr`` the flat synthesis is of :func:`write_pnr_harness`'s ``pnr_top`` (the NPU has
    more port bits than the package has pins); its cost is in :attr:`AreaRow.harness` and
    included in the totals (``ff`` exactly ``harness['ff']`` more, LUT4 about
    ``output_bits / 3`` more for the XOR tree).

    Steps: Verilog bundle; flat synthesis (totals, memory mapping, P&R netlist and, with
    ``blocks``, the per-block table by cell name); with ``hier`` also a hierarchy-preserving
    synthesis (per-module table, for comparison; slow); with ``pnr`` (ECP5 only) nextpnr for
    Fmax and the critical path. ``abc9`` chooses the ECP5 LUT mapper of the flat synthesis
    (:func:`synthesize`: None tries ABC9 and falls back to classic ABC; False maps with classic
    ABC at once, as a sweep does, so that every configuration is mapped alike). A failing P&R
    (e.g. the design does not fit the device) is recorded in :attr:`AreaRow.error`, not
    raised, so a sweep goes on; so is a
    tile memory that did not map to RAM primitives (:attr:`AreaRow.memory_problems`, see
    :func:`check_memories`; ``npu area`` then exits with status 1).

    ``progress`` (optional) is called with a short line at the start of each step and, while
    nextpnr runs, at each of its steps (:func:`~cosim.fpga.pnr.nextpnr_progress`). ``seed`` is
    nextpnr's placement seed (:func:`place_route`): a design near the device's routing limit
    can route with one seed and not with another. nextpnr's files go beside the netlist
    (``<out_dir>/ecp5-pnr/``), those of a seed other than :data:`PNR_SEED` into a folder of
    their own (``ecp5-pnr/seed<N>/``), so that runs of several seeds into one ``out_dir`` keep
    each one's log, report and congestion maps.

    ``block`` (``npu`` or ``npu.`` and a path of :func:`cosim.build.design_blocks`, e.g.
    ``npu.cmdproc.fetch``; a block elaborated in several variants has one module per variant,
    ``name$N``, and one with a single variant is also found without its ``$N``) synthesizes that
    block alone, as the top of its own design (into ``<out_dir>/<family>-block/<block>/``), and
    never places and routes (``pnr`` is ignored): seconds to two minutes where the whole NPU
    takes many minutes, for measuring a change to one block before and after. Its ports are the
    design's inputs and outputs, so nothing around it is optimized into it (constants it
    receives, outputs nothing reads) and its cells are mapped apart from the rest: its figure
    differs from its line in the whole NPU's table, either way (8x8 at a2c6f30, ECP5:
    ``npu.cmdproc`` 10,940 LUT4 alone against 7,940 in the whole NPU, ``npu.cmdproc.semaphores``
    1,805 against 2,054, ``npu.tile.vector`` 20,637 against 20,233). Compare a block alone with
    itself alone.

    Raises
    ------
    ToolMissingError
        If a tool is missing.
    FpgaToolError
        If synthesis fails.
    BlockNotFoundError
        ``block`` is not a block of the design (before synthesis starts).
    """
    t0 = time.perf_counter()
    bundle = write_verilog(config, out_dir)
    seconds = {"verilog": round(time.perf_counter() - t0, 2)}
    top = _find_block(bundle.verilog, block, config.name) if block is not None else "npu"
    pnr = pnr and block is None
    harness = pnr and family == "ecp5"
    flat = synthesize(bundle.verilog, family, top=top, harness=harness, timeout=timeout,
                      abc9=abc9, out_dir=None if block is None else
                      bundle.directory / f"{family}-block" / top.replace("$", "_"))
    seconds["synth"] = round(flat.seconds, 2)
    r = flat.total
    required = TILE_MEMORIES if block is None else tuple(
        n for n in TILE_MEMORIES if n == top or n.startswith(top + "."))
    row = AreaRow(config.name, family, r.lut4, r.ff, r.dsp, r.bram, r.lutram,
                  memories_not_in_bram=[f"{m.name} ({m.kind})"
                                        for m in flat.memories_not_in_bram],
                  memory_problems=(check_memories(flat.memories, required=required)
                                   if family != "generic" else []),
                  seconds=seconds, directory=str(bundle.directory),
                  harness=harness_cost(bundle.verilog.read_text()) if harness else {},
                  notes=[f"flat synthesis: {n}" for n in flat.notes],
                  block=block and top.split("$")[0])
    if blocks:
        row.blocks = {name: asdict(res) for name, res in sorted(flat.blocks.items())}
        row.blocks_method = BLOCKS_METHOD
    if hier:
        h = synthesize(bundle.verilog, family, top=top, hierarchy=True, timeout=timeout,
                       out_dir=None if block is None else
                       bundle.directory / f"{family}-hier-block" / top.replace("$", "_"))
        seconds["synth_hier"] = round(h.seconds, 2)
        row.blocks_hier = {name: asdict(res) for name, res in sorted(h.blocks.items())}
    if pnr and family == "ecp5":
        row.seed = seed
        if progress:
            progress(f"synthesized in {flat.seconds:.0f} s; placing"
                     f"{' and routing' if route else ''} on ECP5 {device} with nextpnr-ecp5")
        try:
            p = place_route(flat.netlist, device=device, package=package, freq_mhz=freq_mhz,
                            timeout=timeout, route=route, seed=seed, progress=progress,
                            out_dir=_pnr_dir(flat.netlist, seed))
        except FpgaToolError as e:
            row.error = str(e)      # the tool's last log lines and the log's path
            row.congestion = getattr(e, "congestion", None)   # routing did not finish
            seconds["pnr" if route else "place"] = None
        else:
            seconds["pnr" if route else "place"] = round(p.seconds, 2)
            row.fmax_mhz = p.fmax_mhz
            row.fmax_routed = p.routed
            row.critical_path = p.critical_path
            row.critical_block = p.critical_path.get("block")
    return row


def format_area_table(rows: list[AreaRow]) -> str:
    """A plain-text table: one line per configuration, then the per-block breakdown."""
    w = max([28, *(len(_label(r)) for r in rows)])
    head = f"{'config':<{w}} {'family':<7} {'LUT4':>7} {'FF':>7} {'DSP':>4} {'BRAM':>5} " \
           f"{'LUTRAM':>6} {'Fmax MHz':>9}  critical block"
    lines = [head, "-" * len(head)]
    for r in rows:
        fmax = (f"{'' if r.fmax_routed else '~'}{r.fmax_mhz:.1f}" if r.fmax_mhz is not None
                else "-")
        fmax = f"{fmax:>9}"
        lines.append(f"{_label(r):<{w}} {r.family:<7} {r.lut4:>7} {r.ff:>7} {r.dsp:>4} "
                     f"{r.bram:>5} {r.lutram:>6} {fmax}  {r.critical_block or '-'}")
    if any(r.fmax_mhz is not None and not r.fmax_routed for r in rows):
        lines.append("~ Fmax: nextpnr's estimate after placement (not routed)")
    if any(r.block for r in rows):
        lines.append("a block synthesized alone: its ports are the design's inputs and outputs "
                     "(nothing around it optimized into it)")
    for r in rows:
        top = r.block or "npu"
        for problem in r.memory_problems:
            lines.append(f"{_label(r)}: MEMORY CHECK FAILED: {problem}")
        for note in r.notes:
            lines.append(f"{_label(r)}: {note}")
        if r.memories_not_in_bram:
            lines.append(f"{_label(r)}: memories not in block RAM: "
                         + ", ".join(r.memories_not_in_bram))
        if r.error:
            lines.append(f"{_label(r)}: {r.error}")
        if r.blocks:
            lines.append(f"\n{_label(r)} ({r.family}) per block, sub-blocks included:")
            lines.extend(_block_lines(r.blocks, top))
            lines.append(f"  method: {r.blocks_method}")
        if r.blocks_hier:
            lines.append(f"\n{_label(r)} ({r.family}) per module, hierarchy-preserving "
                         f"synthesis ({FAMILIES[r.family]} -noflatten"
                         f"{' -noabc9' if r.family == 'ecp5' else ''}):")
            lines.extend(_block_lines(r.blocks_hier, top))
        timing = ", ".join(f"{k} {v} s" if v is not None else f"{k} failed"
                           for k, v in r.seconds.items())
        lines.append(f"{_label(r)}: step times: {timing}")
    return "\n".join(lines)


def _label(r: AreaRow) -> str:
    return f"{r.config} {r.block}" if r.block else r.config


def _block_lines(blocks: dict[str, dict], top: str = "npu") -> list[str]:
    """The per-block table: :data:`KEY_BLOCKS` first (sub-blocks indented under their
    block), the logic no block holds (named after the top's own ports, e.g. the AXI
    manager's outputs), then every block up to 3 levels below ``top`` (the NPU, or the block
    synthesized alone), each with its sub-blocks."""
    lines = [f"  {'block':<22} {'path':<32} {'LUT4':>7} {'FF':>7} {'DSP':>4} {'BRAM':>5} "
             f"{'LUTRAM':>6}"]

    def line(label, name, b=None):
        b = blocks[name] if b is None else b
        lines.append(f"  {label:<22} {name:<32} {b['lut4']:>7} {b['ff']:>7} {b['dsp']:>4} "
                     f"{b['bram']:>5} {b['lutram']:>6}")
    depth = top.count(".")
    if top in blocks:
        line("total", top)
    for label, name in KEY_BLOCKS.items():
        if name in blocks and name != top:
            line(label, name)
    if top in blocks:                   # what no block holds: the total less its blocks
        own = dict(blocks[top])
        for name, b in blocks.items():
            if name.count(".") == depth + 1 and name.rsplit(".", 1)[0] == top:
                own = {k: v - b.get(k, 0) for k, v in own.items()}
        line("top level, no block", f"{top} (own cells)", own)
    lines.append("  every block (a block includes the blocks below it):")
    for name in blocks:
        if name != top and name.count(".") <= depth + 3:
            line("", name)
    return lines
