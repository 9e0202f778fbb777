"""FPGA flows: reproducible Verilog bundle, lint, Icarus, ECP5 synthesis, report parsers.

Tool runs use the smallest configuration (2x2, 16-row memories); its tile is synthesized for
ECP5 by default (about 1 CPU-minute), the whole NPU only with ``NPU_FPGA_SLOW=1``. The
parsers are tested on saved tool output in ``tests/data/`` (Yosys 0.70 ``stat -json`` and
log lines, nextpnr 0.11 ``--report`` JSON and log), so they run without the tools. The
memory-mapping log is from the real 2x2 NPU; the stat and nextpnr files are from a miniature
with the NPU's hierarchy (``npu > tile > matrix > array`` and a scratchpad;
``tests/data/mini_npu_gen.py.txt``) so that they stay small. Larger configurations are for
``make area`` / ``npu area``, never for tests.
"""

import gc
import importlib
import json
import os
import shutil
import subprocess
import sys
import time
import types
import warnings
from pathlib import Path

import pytest

from cosim.fpga import (
    TILE_MEMORIES,
    FpgaToolError,
    Resources,
    ToolMissingError,
    block_of,
    check_memories,
    compile_icarus,
    find_tool,
    format_area_table,
    format_congestion,
    lint_verilator,
    nextpnr_progress,
    parse_congestion,
    parse_memory_mapping,
    parse_nextpnr_log,
    parse_nextpnr_report,
    parse_yosys_stat,
    run_logged,
    synthesize,
    write_pnr_harness,
    write_verilog,
)
from cosim.fpga.synth import _abc9_error
from hw.board import PLL_PFD_HZ, PLL_VCO_HZ, NPUBoard, ecp5_pll
from hw.config import NPUConfig

DATA = Path(__file__).parents[1] / "data"
SMALLEST = NPUConfig(rows=2, cols=2, spad_rows=16, acc_rows=16)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return write_verilog(SMALLEST, tmp_path_factory.mktemp("fpga") / SMALLEST.name)


# -- Verilog bundle -----------------------------------------------------------------------------

def test_bundle_files_and_reproducible(bundle, tmp_path):
    assert bundle.filelist.read_text() == "npu.v\n"
    desc = json.loads(bundle.config_json.read_text())
    assert desc["top"] == "npu"
    assert desc["parameters"] == SMALLEST.to_dict()
    assert desc["derived"]["spad_bytes"] == SMALLEST.spad_bytes
    assert "module npu(" in bundle.verilog.read_text()

    again = write_verilog(SMALLEST, tmp_path / "again")   # a fresh conversion, no cache
    for a, b in ((bundle.verilog, again.verilog), (bundle.filelist, again.filelist),
                 (bundle.config_json, again.config_json)):
        assert a.read_bytes() == b.read_bytes(), f"{a.name} differs between two runs"


# -- lint and Icarus ----------------------------------------------------------------------------

def test_verilator_lint_clean(bundle):
    result = lint_verilator(bundle.verilog)
    assert result.clean, f"lint findings {result.messages}, see {result.log}"


def test_verilator_lint_reports_findings(tmp_path):
    # the waivers are scoped to generated files: a hand-written file is fully linted
    bad = tmp_path / "bad.v"
    bad.write_text("module bad(input wire [7:0] a, output wire [3:0] y);\n"
                   "  assign y = a;\nendmodule\n")
    result = lint_verilator(bad, top="bad")
    assert not result.clean
    assert result.messages.get("WIDTHTRUNC") == 1


@pytest.mark.skipif(shutil.which("iverilog") is None,
                    reason="Icarus Verilog not installed (apt-get install -y iverilog)")
def test_icarus_compiles(bundle):
    result = compile_icarus(bundle.verilog)
    assert result.clean, f"iverilog said {result.messages}, see {result.log}"


def test_missing_tool_is_a_typed_error():
    with pytest.raises(ToolMissingError, match="not found"):
        find_tool("no-such-fpga-tool")


def test_tool_failure_names_the_log(tmp_path):
    broken = tmp_path / "broken.v"
    broken.write_text("module npu(; endmodule\n")
    with pytest.raises(FpgaToolError) as info:
        synthesize(broken, "generic", out_dir=tmp_path / "synth")
    assert info.value.log_path is not None and info.value.log_path.is_file()
    assert str(info.value.log_path) in str(info.value)


def test_run_tool_raises_on_exit_status_and_timeout(tmp_path):
    import sys

    from cosim.fpga.tools import run_logged, run_tool
    fail = [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"]
    with pytest.raises(FpgaToolError, match="exit status 3") as info:
        run_tool(fail, tmp_path / "fail.log", what="fake tool")
    assert "boom" in str(info.value) and info.value.log_path == tmp_path / "fail.log"
    assert (tmp_path / "fail.log").read_text().startswith("# " + sys.executable)
    # the lower level reports the status instead (the lint reads its findings from the log)
    status, seconds = run_logged(fail, tmp_path / "fail2.log", what="fake tool")
    assert status == 3 and seconds > 0
    with pytest.raises(FpgaToolError, match="slow tool timed out after 0.2 s"):
        run_tool([sys.executable, "-c", "import time; time.sleep(30)"], tmp_path / "slow.log",
                 what="slow tool", timeout=0.2)


def test_unknown_family():
    with pytest.raises(ValueError, match="family"):
        synthesize(Path("npu.v"), "virtex")


# -- ECP5 synthesis of the smallest configuration -----------------------------------------------

@pytest.mark.skipif(
    os.environ.get("NPU_FPGA_SLOW") != "1",
    reason="ECP5 synthesis of the whole 2x2 NPU takes minutes (about 3 min of Yosys CPU with "
           "classic ABC; the command processor's queues dominate); the tile alone is "
           "synthesized by default (test_synth_ecp5_smallest_tile); set NPU_FPGA_SLOW=1")
def test_synth_ecp5_smallest(bundle):
    # classic ABC: Yosys 0.70's ABC9 spends ~10 min on this netlist and then fails an
    # assertion (synthesize() would fall back to ABC by itself, after that attempt)
    result = synthesize(bundle.verilog, "ecp5", abc9=False)
    assert result.mapper == "abc" and result.notes == []
    assert result.total.lut4 > 0 and result.total.ff > 0
    # 2x2 array: 4 int8 x int8 products plus the requantizer's multipliers on DSP blocks
    assert result.total.dsp >= 4
    # one write port per memory: scratchpad and accumulator in block RAM, one copy per read
    # port (spad: 2, acc: 3)
    names = {m.name: m for m in result.memories}
    assert {"npu.tile.spad", "npu.tile.acc"} <= set(names)
    assert check_memories(result.memories) == []
    assert result.total.bram >= 5
    assert result.blocks["npu.tile.matrix.array"].dsp == SMALLEST.rows * SMALLEST.cols
    assert result.netlist.is_file()


def test_abc9_error_detection():
    log = ("2.46. Executing ABC9 pass.\n2.46.18.7. Executing ABC_OPS_REINTEGRATE pass (x).\n"
           "ERROR: Assert `GetSize(a) == GetSize(b)' failed in rtlil.cc:3091.\n")
    assert _abc9_error(log).startswith("ERROR: Assert")
    assert _abc9_error(log.replace("ERROR", "Info")) is None
    other = "2.46. Executing ABC9 pass.\n2.47. Executing CHECK pass.\nERROR: Found 1 problem.\n"
    assert _abc9_error(other) is None
    assert _abc9_error("2.3. Executing PROC pass.\nERROR: x\n") is None


def test_synth_ecp5_smallest_tile(bundle):
    """ECP5 synthesis (``synth_ecp5``, ABC9) of the smallest tile, run by default.

    The tile holds everything whose mapping matters: the PE array's multipliers must become
    MULT18X18D blocks and the scratchpad and accumulator DP16KD block RAM (one write port
    each). The whole NPU (``test_synth_ecp5_smallest``) adds the command processor, DMA and
    CSRs and takes several minutes.
    """
    result = synthesize(bundle.verilog, "ecp5", top="npu.tile")
    assert check_memories(result.memories) == []
    mems = {m.name: m for m in result.memories}
    assert all("16KD" in mems[name].cell for name in TILE_MEMORIES)   # DP16KD, PDPW16KD
    assert result.cells.get("DP16KD", 0) >= 2
    array = result.blocks["npu.tile.matrix.array"]
    assert array.dsp == SMALLEST.rows * SMALLEST.cols    # one MULT18X18D per PE
    assert result.cells.get("MULT18X18D", 0) >= array.dsp
    assert result.blocks["npu.tile.spad"].bram >= 1 and result.blocks["npu.tile.acc"].bram >= 1
    # no read-during-write emulation for the non-transparent ports (hw.local_mem.RAM_ATTRS,
    # no_rw_check): the accumulator's only flip-flops are the matrix engine's transparency
    # bypass (a row and a match bit; with the emulation 329 FF on this configuration, not 65),
    # the scratchpad has none of its own
    assert result.blocks["npu.tile.acc"].ff <= SMALLEST.acc_row_bytes * 8 + 1
    assert result.blocks["npu.tile.spad"].ff == 0
    assert result.blocks["npu.tile"] == result.total


# -- parsers on saved output --------------------------------------------------------------------

def test_parse_yosys_stat_hierarchy():
    stat = json.loads((DATA / "yosys_stat_hier.json").read_text())
    blocks, design = parse_yosys_stat(stat)
    assert design == blocks["npu"]
    # a parent block includes its children
    tile, array = blocks["npu.tile"], blocks["npu.tile.matrix.array"]
    for cell, n in array.items():
        assert tile.get(cell, 0) >= n
    assert not any(k.lstrip("\\").startswith("npu.") for k in design)  # instances expanded
    r = Resources.from_cells("ecp5", design)
    assert r.lut4 == design.get("LUT4", 0) + 2 * design.get("CCU2C", 0)
    assert r.ff == design.get("TRELLIS_FF", 0)


def test_parse_yosys_stat_rejects_other_json():
    with pytest.raises(ValueError, match="stat -json"):
        parse_yosys_stat({"foo": 1})
    with pytest.raises(ValueError, match="'top'"):
        parse_yosys_stat({"modules": {"\\a": {"num_cells_by_type": {}}}}, top="top")


def test_parse_memory_mapping():
    log = (DATA / "yosys_ecp5_libmap.log").read_text()
    mems = {m.name: m for m in parse_memory_mapping(log)}
    assert mems["npu.tile.spad"].kind == "logic"
    assert mems["npu.tile.acc"].kind == "logic"
    fifo = [m for name, m in mems.items() if "fifo" in name]
    assert fifo and all(m.kind == "lutram" for m in fifo)
    assert not any(name.startswith("$") or ".$" in name for name in mems)
    synthetic = "mapping memory npu.tile.spad via $__ECP5_PDPW16KD_\n"
    assert parse_memory_mapping(synthetic)[0].kind == "bram"


def test_check_memories():
    # the old tile (several write ports per memory): both memories became flip-flops
    old = parse_memory_mapping((DATA / "yosys_ecp5_libmap.log").read_text())
    problems = check_memories(old)
    assert len(problems) == 2 and all("flip-flops" in p for p in problems)
    # one write port per memory (4x4, 4096 x 32-bit scratchpad, 1024 x 128-bit accumulator)
    new = parse_memory_mapping((DATA / "yosys_ecp5_libmap_4x4.log").read_text())
    assert {m.name: m.kind for m in new if m.name in TILE_MEMORIES} == dict.fromkeys(
        TILE_MEMORIES, "bram")
    assert check_memories(new) == [] and check_memories(new, lutram_ok=False) == []
    # a memory with no mapping line (renamed, or turned into registers before mapping) fails
    assert check_memories(new, ("npu.tile.gone",)) == [
        "npu.tile.gone: no memory mapping in the synthesis log"]
    lut = parse_memory_mapping("mapping memory npu.tile.spad via $__TRELLIS_DPR16X4_\n"
                               "mapping memory npu.tile.acc via $__DP16KD_\n")
    assert check_memories(lut) == [
        "npu.tile.spad: mapped to lutram ($__TRELLIS_DPR16X4_), not block RAM"]
    assert check_memories(lut, lutram_ok=True) == []


def test_parse_nextpnr_report():
    report = json.loads((DATA / "nextpnr_report.json").read_text())
    parsed = parse_nextpnr_report(report)
    assert 1.0 < parsed["fmax_mhz"] < 1000.0
    used, available = parsed["utilization"]["TRELLIS_COMB"]
    assert 0 < used <= available
    crit = parsed["critical_path"]
    assert crit["block"].startswith("npu")
    assert crit["delay_ns"] == pytest.approx(crit["logic_ns"] + crit["routing_ns"], abs=0.01)


def test_parse_nextpnr_log():
    parsed = parse_nextpnr_log((DATA / "nextpnr.log").read_text())
    assert parsed["fmax_mhz"] is not None
    # the post-route figure (the last one printed) wins
    report = parse_nextpnr_report(json.loads((DATA / "nextpnr_report.json").read_text()))
    assert parsed["fmax_mhz"] == pytest.approx(report["fmax_mhz"], abs=0.01)
    assert "TRELLIS_COMB" in parsed["utilization"]


def _heatmaps(folder: Path) -> Path:
    """router2's heatmaps of two iterations (12: a saved one of the 4x4 NPU, trimmed to its
    400 most overused nets and some of the harness' and counters'; 2: a stand-in), as
    ``--router2-heatmap congestion/iter`` names them."""
    folder.mkdir(exist_ok=True)
    shutil.copyfile(DATA / "router2_congestion_by_net_12.csv",
                    folder / "iter_congestion_by_net_12.csv")
    (folder / "iter_congestion_by_net_2.csv").write_text("dut.dma.load_control.x[0],99999\n")
    (folder / "iter_congestion_by_wiretype_12.csv").write_text("type,bound=0\n")
    return folder


def test_parse_congestion_sums_overuse_per_block(tmp_path):
    rows = [line.rsplit(",", 1) for line in
            (DATA / "router2_congestion_by_net_12.csv").read_text().splitlines()]
    c = parse_congestion(_heatmaps(tmp_path / "congestion"))
    assert c["iteration"] == 12                 # the last iteration, not the last file name
    assert c["overuse"] == sum(int(n) for _, n in rows)
    assert sum(c["blocks"].values()) == c["overuse"]
    harness = sum(int(n) for name, n in rows if not name.startswith("dut."))
    assert harness and c["blocks"]["harness"] == harness
    # Yosys' $<n> suffix (``counters$558.count_...``) does not hide the block
    counters = sum(int(n) for name, n in rows if name.startswith("dut.counters$"))
    assert counters and c["blocks"]["npu.counters"] == counters
    fetch = sum(int(n) for name, n in rows if name.startswith("dut.cmdproc.fetch."))
    assert sum(n for b, n in c["blocks"].items() if b.startswith("npu.cmdproc.fetch")) == fetch
    line = format_congestion(c)
    cmdproc = sum(n for b, n in c["blocks"].items() if b.startswith("npu.cmdproc"))
    assert line.startswith(f"router2 overuse at iteration 12 ({c['overuse']:,} net-wires) by "
                           f"block: cmdproc {100 * cmdproc / c['overuse']:.0f}% (fetch ")
    assert ", csr " in line and "top level" in line and "harness" in line
    assert parse_congestion(tmp_path / "none") is None
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "iter_congestion_by_net_3.csv").write_text("dut.csr.x[0],0\n")
    assert parse_congestion(empty) is None


def test_place_route_reports_congestion_when_routing_fails(tmp_path, monkeypatch):
    """A routing failure (or timeout) raises RoutingFailed with the last heatmap's blocks;
    ``npu area`` keeps them in its row; a failure without heatmaps is the tool's error."""
    area_mod = importlib.import_module("cosim.fpga.area")   # cosim.fpga.area is the function
    pnr = importlib.import_module("cosim.fpga.pnr")

    heatmaps = {"write": True}

    def fake_run_tool(cmd, log, *, cwd, what, timeout=None, progress=None):
        i = cmd.index("--router2-heatmap")
        prefix = Path(cwd) / cmd[i + 1]
        if progress:
            progress("Info:     iter=3 wires=753789 overused=24863 overuse=25900 archfail=NA")
            progress("Info: Checksum: 0x1234")
        if heatmaps["write"]:
            _heatmaps(prefix.parent)
        raise FpgaToolError(f"{what} timed out after {timeout} s", Path(cwd) / "pnr.log")

    monkeypatch.setattr(pnr, "find_tool", lambda name: name)
    monkeypatch.setattr(pnr, "run_tool", fake_run_tool)
    netlist = tmp_path / "netlist.json"
    netlist.write_text("{}")
    said = []
    with pytest.raises(pnr.RoutingFailed) as e:
        pnr.place_route(netlist, timeout=60, progress=said.append)
    assert said == ["router2 iteration 3: 24,863 overused wires"]
    assert e.value.congestion["iteration"] == 12
    assert "timed out after 60 s" in str(e.value) and "by block: cmdproc" in str(e.value)
    assert e.value.log_path == tmp_path / "pnr.log"
    heatmaps["write"] = False                   # e.g. placement failed: nothing to add
    with pytest.raises(FpgaToolError) as e:
        pnr.place_route(netlist)
    assert not isinstance(e.value, pnr.RoutingFailed)
    assert not (tmp_path / "congestion" / "iter_congestion_by_net_12.csv").exists()

    heatmaps["write"] = True
    flat = types.SimpleNamespace(
        netlist=netlist, seconds=1.0, notes=[], memories=[], memories_not_in_bram=[],
        blocks={}, total=types.SimpleNamespace(lut4=1, ff=1, dsp=0, bram=0, lutram=0))
    monkeypatch.setattr(area_mod, "synthesize", lambda *a, **k: flat)
    monkeypatch.setattr(area_mod, "harness_cost", lambda text: {})
    monkeypatch.setattr(area_mod, "check_memories", lambda memories, required=None: [])
    said.clear()
    row = area_mod.area(NPUConfig(rows=2, cols=2, n_queues=1), out_dir=tmp_path / "v",
                        blocks=False, progress=said.append)
    assert said == ["synthesized in 1 s; placing and routing on ECP5 85k with nextpnr-ecp5",
                    "router2 iteration 3: 24,863 overused wires"]
    assert row.congestion["iteration"] == 12 and "by block: cmdproc" in row.error
    assert "by block: cmdproc" in format_area_table([row])
    # another placement seed keeps its files apart (seed 1's stay where they were)
    row = area_mod.area(NPUConfig(rows=2, cols=2, n_queues=1), out_dir=tmp_path / "v",
                        blocks=False, seed=5)
    assert row.seed == 5 and str(tmp_path / "seed5" / "pnr.log") in row.error
    assert (tmp_path / "seed5" / "congestion").is_dir() and (tmp_path / "congestion").is_dir()


@pytest.mark.parametrize("line, said", [
    ("Info: Running main analytical placer, max placement attempts per cell = 433165461.",
     "placing (HeAP)"),
    ("Info: HeAP Placer Time: 244.84s", "HeAP done in 245 s"),
    ("Info: Running simulated annealing placer for refinement.",
     "refining the placement (simulated annealing)"),
    ("Info: SA placement time 512.01s", "placement refined in 512 s"),
    ("Info: Max frequency for clock '$glbnet$clk$TRELLIS_IO_IN': 23.62 MHz (FAIL at 25.00 MHz)",
     "Fmax 23.6 MHz (target 25.0)"),
    ("Info: Running router2...", "routing (router2)"),
    ("Info:     iter=12 wires=791805 overused=5527 overuse=5612 archfail=NA",
     "router2 iteration 12: 5,527 overused wires"),
    ("Info: Router2 time 1021.50s", "routed in 1022 s"),
    ("ERROR: Failed to route arc 3 of net 'x'.", "error: Failed to route arc 3 of net 'x'."),
    ("Info:     at iteration #10: temp = 0.000000, timing cost = 1234, wirelen = 5678", None),
    ("Info: Packing LUTs...", None),
])
def test_nextpnr_progress_lines(line, said):
    assert nextpnr_progress(line) == said


def test_run_logged_passes_lines_while_the_tool_runs(tmp_path):
    """``progress`` gets each line as the tool writes it (not only at the end); a timeout
    stops the tool and still passes what it wrote."""
    script = ("import sys, time\n"
              "for i in range(int(sys.argv[1])):\n"
              "    time.sleep(float(sys.argv[2]) * (i > 0))\n"
              "    print(f'line {i}', flush=True)\n")      # the last line just before exit
    got = []
    t0 = time.perf_counter()
    code, seconds = run_logged([sys.executable, "-c", script, "4", "0.4"], tmp_path / "a.log",
                               what="fake", progress=lambda s: got.append(
                                   (s, time.perf_counter() - t0)), poll_s=0.05)
    assert code == 0 and [s for s, _ in got] == [f"line {i}" for i in range(4)]
    assert got[0][1] < seconds - 0.5            # the first line came while the tool ran
    assert (tmp_path / "a.log").read_text().endswith("".join(f"{s}\n" for s, _ in got))
    got.clear()
    with pytest.raises(FpgaToolError, match="fake timed out after 1.0 s"):
        run_logged([sys.executable, "-c", script, "100", "0.2"], tmp_path / "b.log",
                   what="fake", timeout=1.0, progress=lambda s: got.append((s, 0)), poll_s=0.1)
    assert 2 <= len(got) <= 7 and got[0][0] == "line 0"
    size = (tmp_path / "b.log").stat().st_size
    time.sleep(0.6)
    assert (tmp_path / "b.log").stat().st_size == size      # the tool was stopped


@pytest.mark.parametrize("cell, block", [
    ("tile.matrix.array.pe0_1_psum_TRELLIS_FF_Q", "npu.tile.matrix.array"),
    ("$flatten\\tile.\\vector.$mul$npu.v:123$45", "npu.tile.vector"),
    ("csr_rdata_TRELLIS_FF_Q", "npu"),
    ("tile.matrix.array.$1_MULT18X18D_P9", "npu.tile.matrix.array"),
    ("tile.spad.0.0", "npu.tile.spad"),
    ("dut.tile.vector.p_TRELLIS_FF_Q", "npu.tile.vector"),
    ("npu.tile.vector.requant.x[0]_TRELLIS_FF_Q_6", "npu.tile.vector.requant"),   # board
])
def test_block_of(cell, block):
    assert block_of(cell) == block


def test_format_area_table():
    from cosim.fpga import AreaRow
    row = AreaRow("2x2", "ecp5", 100, 50, 4, 0, 8, fmax_mhz=61.5, critical_block="npu.tile",
                  memories_not_in_bram=["npu.tile.spad (logic)"], seconds={"synth": 1.0})
    row.blocks = {"npu": vars(Resources(100, 50, 4)), "npu.tile.spad": vars(Resources(bram=2)),
                  "npu.tile.matrix.array": vars(Resources(40, 20, 4))}
    row.blocks_method = "by cell name"
    text = format_area_table([row])
    assert "61.5" in text and "npu.tile.spad (logic)" in text
    assert "PE array" in text and "scratchpad" in text and "method: by cell name" in text
    assert "~" not in text
    # the total less its blocks (here npu.tile.* are below npu.tile, which is not listed)
    own = next(line for line in text.splitlines() if "top level, no block" in line)
    assert own.split()[-5:] == ["100", "50", "4", "0", "0"]
    row.blocks["npu"] = vars(Resources(100, 50, 4, 2))
    row.blocks["npu.tile"] = vars(Resources(60, 20, 4, 2))
    row.blocks["npu.dma"] = vars(Resources(30, 10))
    own = next(line for line in format_area_table([row]).splitlines() if "no block" in line)
    assert own.split()[-5:] == ["10", "20", "0", "0", "0"]
    placed = AreaRow("4x4", "ecp5", 100, 50, 4, 0, 8, fmax_mhz=19.47, fmax_routed=False)
    text = format_area_table([row, placed])
    assert "~19.5" in text and "estimate after placement" in text


def test_blocks_from_netlist():
    from cosim.fpga import blocks_from_netlist
    top = {"attributes": {"top": "00000000000000000000000000000001"}, "cells": {
        "dut": {"type": "$scopeinfo"},
        "dut.tile": {"type": "$scopeinfo"},
        "dut.tile.matrix": {"type": "$scopeinfo"},
        "dut.tile.matrix.array": {"type": "$scopeinfo"},
        "dut.tile.matrix.array.pe0_0_psum_TRELLIS_FF_Q": {"type": "TRELLIS_FF"},
        "dut.tile.matrix.array.$1_MULT18X18D_P9": {"type": "MULT18X18D"},
        # a struct field's dots are not a block: the cell counts for the enclosing block
        "dut.tile.matrix.cmd.body.x_LUT4_Z": {"type": "LUT4"},
        "dut.tile.spad.0.0": {"type": "DP16KD"},
        "dut.tile.acc.1.0": {"type": "DP16KD"},
        "dut.tile.acc_rdata_CCU2C_S0": {"type": "CCU2C"},
        "$abc$123$lut": {"type": "LUT4"},          # no hierarchy left: top only
        "outs_q_TRELLIS_FF_Q": {"type": "TRELLIS_FF"},   # the P&R harness
    }}
    blocks = blocks_from_netlist({"modules": {"pnr_top": top, "npu": {"cells": {}}}}, "ecp5")
    assert blocks["npu.tile.matrix.array"] == Resources(lut4=0, ff=1, dsp=1)
    assert blocks["npu.tile.matrix"] == Resources(lut4=1, ff=1, dsp=1)
    assert blocks["npu.tile.spad"].bram == 1 and blocks["npu.tile.acc"].bram == 1
    assert blocks["npu.tile"] == Resources(lut4=3, ff=1, dsp=1, bram=2)
    assert blocks["npu"] == Resources(lut4=4, ff=2, dsp=1, bram=2)
    assert "npu.tile.matrix.cmd" not in blocks


def test_blocks_from_netlist_by_source_line():
    """A register of a sub-block that drives its parent's wire carries the parent's name
    after ``flatten``: its source line (inside the sub-block's Verilog module) places it,
    and the LUTs named after it (its next-state logic) go with it; the ``$<n>`` Amaranth
    adds to a clashing block name is left out of the listing."""
    from cosim.fpga import blocks_from_netlist

    def scope(first, last):
        return {"type": "$scopeinfo", "attributes": {"module_src": f"npu.v:{first}.1-{last}.9"}}
    top = {"attributes": {"top": "00000000000000000000000000000001"}, "cells": {
        "cmdproc": scope(100, 900),
        "cmdproc.semaphores": scope(1000, 1900),
        "cmdproc.stage$12": scope(2000, 2900),
        # the semaphore file's register, named after the parent's port it drives
        "cmdproc.sems[0]_TRELLIS_FF_Q": {"type": "TRELLIS_FF", "attributes": {
            "src": "npu.v:1234.3-1235.20|/share/lattice/cells_map_trellis.v:68.1-68.9"}},
        "cmdproc.sems[0]_TRELLIS_FF_Q_DI_LUT4_Z": {"type": "LUT4", "attributes": {
            "src": "/share/lattice/cells_map_trellis.v:124.33-125.56"}},
        "cmdproc.sems[0]_TRELLIS_FF_Q_DI_LUT4_Z_D_CCU2C_S1": {"type": "CCU2C"},
        "cmdproc.stage$12.valid_TRELLIS_FF_Q": {"type": "TRELLIS_FF", "attributes": {
            "src": "npu.v:2500.3-2501.20"}},
        "cmdproc.other_LUT4_Z": {"type": "LUT4"},
    }}
    blocks = blocks_from_netlist({"modules": {"npu": top}}, "ecp5")
    assert blocks["npu.cmdproc.semaphores"] == Resources(lut4=3, ff=1)
    assert blocks["npu.cmdproc.stage"] == Resources(ff=1)
    assert blocks["npu.cmdproc"] == Resources(lut4=4, ff=2)


def _reader_netlist() -> dict:
    """A flat netlist (inside the P&R harness) whose LUTs are named after the semaphore
    unit's value memory, as ABC names a memory's readers: one chain feeds the CSR block's
    read-data register, one the semaphore unit's own register, one both, one the unit and
    its parent, one only a block RAM's write data."""
    def cell(kind, ins=(), outs=()):
        return {"type": kind, "port_directions": {"A": "input", "Z": "output"},
                "connections": {"A": list(ins), "Z": list(outs)}}
    mem = "dut.cmdproc.semaphores.values.0.0"
    cells = {
        "dut.cmdproc": {"type": "$scopeinfo"}, "dut.cmdproc.semaphores": {"type": "$scopeinfo"},
        "dut.csr": {"type": "$scopeinfo"}, "dut.tile": {"type": "$scopeinfo"},
        mem: cell("TRELLIS_DPR16X4", outs=[10]),
        # a chain of two LUTs to the CSR block's register: the CSR's read multiplexer
        f"{mem}_DO_1_LUT4_C": cell("LUT4", ins=[10], outs=[11]),
        f"{mem}_DO_1_LUT4_C_Z_LUT4_D": cell("LUT4", ins=[11, "0"], outs=[12]),
        "dut.csr.rdata_TRELLIS_FF_Q": cell("TRELLIS_FF", ins=[12], outs=[13]),
        # the semaphore unit's own compare
        f"{mem}_DO_2_LUT4_Z": cell("CCU2C", ins=[10], outs=[14]),
        "dut.cmdproc.semaphores.ready_TRELLIS_FF_Q": cell("TRELLIS_FF", ins=[14]),
        # shared by both: stays where its name puts it
        f"{mem}_DO_3_LUT4_Z": cell("LUT4", ins=[10], outs=[15]),
        "dut.csr.other_TRELLIS_FF_Q": cell("TRELLIS_FF", ins=[15]),
        "dut.cmdproc.semaphores.valid_TRELLIS_FF_Q": cell("TRELLIS_FF", ins=[15]),
        # feeds the semaphore unit and its parent: not moved above the memory's block
        f"{mem}_DO_5_LUT4_Z": cell("LUT4", ins=[10], outs=[17]),
        "dut.cmdproc.stage_valid_TRELLIS_FF_Q": cell("TRELLIS_FF", ins=[17]),
        "dut.cmdproc.semaphores.busy_TRELLIS_FF_Q": cell("TRELLIS_FF", ins=[17]),
        # feeds only a RAM's write data (its writer's logic), so nothing tells
        f"{mem}_DO_4_LUT4_Z": cell("LUT4", ins=[10], outs=[16]),
        "dut.tile.acc.0.0": cell("DP16KD", ins=[16]),
    }
    netnames = {"dut.csr.rdata": {"bits": [13, 12]}, "dut.sem_value": {"bits": [10]},
                "dut.x": {"bits": [11]}, "dut.mixed": {"bits": [14, 11]}}
    top = {"attributes": {"top": "00000000000000000000000000000001"}, "cells": cells,
           "netnames": netnames}
    return {"modules": {"pnr_top": top, "npu": {"cells": {}}}}


def test_blocks_from_netlist_places_a_memorys_readers_by_what_they_feed():
    """A LUT named after a memory's output is the logic that reads it: it counts for the
    block whose registers it feeds (the CSR's read multiplexer was counted in the semaphore
    unit), unless that block is the memory's own, above it, or unknown."""
    from cosim.fpga import blocks_from_netlist
    blocks = blocks_from_netlist(_reader_netlist(), "ecp5")
    assert blocks["npu.csr"] == Resources(lut4=2, ff=2)
    assert blocks["npu.cmdproc.semaphores"] == Resources(lut4=5, ff=3, lutram=1)
    assert blocks["npu.cmdproc"] == Resources(lut4=5, ff=4, lutram=1)
    assert blocks["npu"] == Resources(lut4=7, ff=6, bram=1, lutram=1)


def test_parse_congestion_by_the_block_that_drives_a_net(tmp_path):
    """With the placed netlist, an overused net counts for the block of its driver (the
    CSR's read-multiplexer nets are named after the semaphore memory); nets the netlist
    does not drive keep the block of their name."""
    folder = tmp_path / "congestion"
    folder.mkdir()
    (folder / "iter_congestion_by_net_4.csv").write_text(
        "dut.x,5\ndut.csr.rdata[1],2\ndut.csr.rdata[0],1\ndut.sem_value,3\n"
        "dut.mixed[0],7\ndut.mixed[1],9\ndut.dma.y[2],4\nins_q[0],1\n")
    by_name = parse_congestion(folder)["blocks"]
    assert by_name == {"npu": 24, "npu.csr": 3, "npu.dma": 4, "harness": 1}
    driven = parse_congestion(folder, _reader_netlist())["blocks"]
    assert driven == {"npu.csr": 17, "npu.cmdproc.semaphores": 10, "npu.dma": 4, "harness": 1}
    bad = tmp_path / "bad.json"
    bad.write_text("{}")                    # not a netlist: by names, no error
    assert parse_congestion(folder, bad)["blocks"] == by_name


@pytest.mark.parametrize("mhz", [10, 12.5, 20, 25, 50])
def test_ecp5_pll_settings_in_range(mhz):
    p = ecp5_pll(25e6, mhz * 1e6)
    assert p["f_out_hz"] == 25e6 * p["CLKFB_DIV"] / p["CLKI_DIV"] == pytest.approx(mhz * 1e6)
    assert PLL_PFD_HZ[0] <= 25e6 / p["CLKI_DIV"] <= PLL_PFD_HZ[1]
    assert p["f_vco_hz"] == p["f_out_hz"] * p["CLKOP_DIV"]
    assert PLL_VCO_HZ[0] <= p["f_vco_hz"] <= PLL_VCO_HZ[1]
    assert p["CLKOP_CPHASE"] == (p["CLKOP_DIV"] - 1) // 2


def test_ecp5_pll_matches_ecppll():
    # "ecppll -i 12 -o 16" (Project Trellis), as checked in by olofk/serv (ecp5_evn_pll.v)
    p = ecp5_pll(12e6, 16e6)
    assert (p["CLKI_DIV"], p["CLKFB_DIV"], p["CLKOP_DIV"], p["CLKOP_CPHASE"]) == (3, 4, 37, 18)


def test_ecp5_pll_unreachable_frequency():
    # 25 * fb / clki = 16 needs clki = 25: a 1 MHz phase detector input, below 3.125 MHz
    with pytest.raises(ValueError, match=r"16 MHz from 25 MHz within 1% \(nearest: 15.62 MHz\)"):
        ecp5_pll(25e6, 16e6)


def test_board_elaborates_for_ulx3s_with_pll():
    from amaranth_boards.ulx3s import ULX3S_85F_Platform

    board = NPUBoard(NPUConfig(rows=2, cols=2, spad_rows=16, acc_rows=16, dram_bytes=4096),
                     clock_hz=20_000_000)
    assert board.clock_hz == 20e6 and board.divisor == round(20e6 / 115200)
    plan = ULX3S_85F_Platform().prepare(board, name="top")
    rtlil = plan.files["top.il"]
    assert "EHXPLLL" in rtlil and "DCCA" in rtlil    # the reset on a global network
    for name, value in ecp5_pll(25e6, 20e6).items():
        if name.isupper():
            assert f"parameter \\{name} {value}" in rtlil


def test_board_clock_the_pll_cannot_make():
    from amaranth_boards.ulx3s import ULX3S_85F_Platform

    board = NPUBoard(NPUConfig(rows=2, cols=2, spad_rows=16, acc_rows=16, dram_bytes=4096),
                     clock_hz=24_900_000)
    with pytest.raises(ValueError, match="nearest is 25000000 Hz"):
        ULX3S_85F_Platform().prepare(board, name="top")
    # the half-elaborated design is garbage now; its "never used" warnings are expected
    del board
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gc.collect()


def test_pnr_harness_elaborates_with_reset_on_a_global(bundle):
    harness = write_pnr_harness(bundle.verilog)
    text = harness.read_text()
    assert "always @(posedge clk) rst_q <= {rst_q[0], rst};" in text
    assert "DCCA rst_dcca (.CLKI(rst_q[1]), .CE(1'b1), .CLKO(rst_global));" in text
    assert ".rst(rst_global)" in text
    # the WebAssembly Yosys reads below its working directory: run in the bundle's folder
    (bundle.directory / "check.ys").write_text(
        f"read_verilog -lib +/ecp5/cells_bb.v\nread_verilog -sv {bundle.verilog.name}\n"
        f"read_verilog -sv {harness.name}\nhierarchy -check -top pnr_top\n")
    run = subprocess.run([find_tool("yosys"), "-q", "check.ys"], cwd=bundle.directory,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.parametrize("family", ["generic", "ice40"])
def test_synth_pe_array_other_families(bundle, family):
    # the whole NPU takes minutes per family (`npu area --family ...`); the PE array shows
    # the flow and its cell classification work
    result = synthesize(bundle.verilog, family, top="npu.tile.matrix.array")
    assert result.total.lut4 > 0 and result.total.ff > 0
    assert result.mapper == ("abc" if family == "generic" else "")
    if family == "ice40":    # -dsp: one SB_MAC16 per PE (iCE40 UltraPlus)
        assert result.total.dsp == SMALLEST.rows * SMALLEST.cols
    else:                    # no DSP blocks: multipliers in LUTs
        assert result.total.dsp == 0


def test_parse_nextpnr_report_of_the_board_build():
    # saved from `npu board` (2x2, one queue, 12.5 MHz PLL clock): routed, with a critical path
    parsed = parse_nextpnr_report(json.loads((DATA / "nextpnr_report_board.json").read_text()))
    assert parsed["fmax_mhz"] == pytest.approx(34.86)
    assert parsed["utilization"]["MULT18X18D"] == (31, 156)
    crit = parsed["critical_path"]
    assert crit["block"] == crit["from_block"] == "npu.tile.vector.requant"
    assert crit["delay_ns"] == pytest.approx(28.687, abs=0.01)
    assert 1000 / crit["delay_ns"] == pytest.approx(parsed["fmax_mhz"], rel=0.01)


def test_area_sweep_goes_on_after_a_failed_configuration(tmp_path, monkeypatch, capsys):
    """``npu area`` with three configurations whose second one's synthesis fails: the other
    two are synthesized and printed (and in ``--json``), the failure is named, exit 1."""
    from cosim.cli import main
    from cosim.fpga import AreaRow

    def fake_area(config, **kw):
        if config.rows == 4:
            raise FpgaToolError("yosys timed out after 60 s", tmp_path / "synth.log")
        return AreaRow(config.name, "ecp5", 100 * config.rows, 50, 4, 0, 8)
    monkeypatch.setattr("cosim.fpga.area", fake_area)
    out = tmp_path / "a.json"
    assert main(["area", "--config", "2x2", "4x4", "8x8", "--no-pnr", "--out",
                 str(tmp_path / "v"), "--json", str(out)]) == 1
    captured = capsys.readouterr()
    assert "2x2" in captured.out and "8x8" in captured.out and "4x4 " not in captured.out
    assert "4x4: yosys timed out after 60 s" in captured.err
    assert "stopped with an error for 4x4" in captured.err
    assert [r["config"] for r in json.loads(out.read_text())] == ["2x2", "8x8"]


def test_area_passes_the_seed_to_place_and_route(tmp_path, monkeypatch):
    """``npu area --seed N`` reaches :func:`cosim.fpga.area` (and so nextpnr's ``--seed``);
    without it the seed is 1."""
    from cosim.cli import main
    from cosim.fpga import AreaRow

    seen = []

    def fake_area(config, **kw):
        seen.append(kw["seed"])
        return AreaRow(config.name, "ecp5", 100, 50, 4, 0, 8, seed=kw["seed"])
    monkeypatch.setattr("cosim.fpga.area", fake_area)
    for args, want in (([], 1), (["--seed", "7"], 7)):
        out = tmp_path / f"a{want}.json"
        assert main(["area", "--config", "2x2", *args, "--out", str(tmp_path / "v"),
                     "--json", str(out)]) == 0
        assert seen[-1] == want and json.loads(out.read_text())[0]["seed"] == want


def test_area_of_one_block_alone(tmp_path):
    """``npu area --block``: one block synthesized as the top of its own design, without place
    and route; its table lists it and its sub-blocks only, and a block without the tile's
    memories is not held to their check."""
    from cosim.fpga import area

    row = area(SMALLEST, block="npu.cmdproc.semaphores", out_dir=tmp_path / "v",
               pnr=True)     # ignored for a block
    assert row.block == "npu.cmdproc.semaphores" and row.config == SMALLEST.name
    assert row.seed is None and row.fmax_mhz is None and row.memory_problems == []
    assert set(row.blocks) == {"npu.cmdproc.semaphores", "npu.cmdproc.semaphores.values",
                               "npu.cmdproc.semaphores.records"}
    total = row.blocks["npu.cmdproc.semaphores"]
    assert (total["lut4"], total["ff"], total["lutram"]) == (row.lut4, row.ff, row.lutram)
    assert row.lut4 > 100 and row.ff > 0 and row.lutram > 0
    assert (tmp_path / "v" / "ecp5-block" / "npu.cmdproc.semaphores" / "netlist.json").is_file()
    text = format_area_table([row])
    assert text.splitlines()[2].startswith(f"{SMALLEST.name} npu.cmdproc.semaphores ")
    own = next(line for line in text.splitlines() if "no block" in line)
    assert own.split()[4:6] == ["npu.cmdproc.semaphores", "(own"]
    subs = [row.blocks[f"npu.cmdproc.semaphores.{m}"] for m in ("values", "records")]
    assert [int(x) for x in own.split()[-5:]] == [
        total[k] - sum(b[k] for b in subs) for k in ("lut4", "ff", "dsp", "bram", "lutram")]


def test_area_block_names_are_checked_before_synthesis(tmp_path, monkeypatch):
    """An unknown ``--block`` is refused with the close names and every block before Yosys
    runs; a block with one variant (``name$N`` in the Verilog) is found by its plain name,
    one with several must be named exactly."""
    from cosim.fpga import BlockNotFoundError, area
    from cosim.fpga.area import _find_block

    def no_synthesis(*args, **kw):
        raise AssertionError("synthesis ran")
    monkeypatch.setattr(sys.modules["cosim.fpga.area"], "synthesize", no_synthesis)
    with pytest.raises(BlockNotFoundError,
                       match=rf"no block 'npu\.cmdproc\.stag' in {SMALLEST.name}; did you "
                             r"mean npu\.cmdproc\.stage.*Blocks: npu, npu\.arbiter"):
        area(SMALLEST, block="npu.cmdproc.stag", out_dir=tmp_path / "v")
    v = tmp_path / "m.v"
    v.write_text("module npu(a);\nendmodule\nmodule \\npu.q.trace$3 (a);\nendmodule\n"
                 "module \\npu.r$1 (a);\nendmodule\nmodule \\npu.r$2 (a);\nendmodule\n")
    assert _find_block(v, "npu.q.trace", "c") == "npu.q.trace$3"
    assert _find_block(v, "npu.r$2", "c") == "npu.r$2"
    with pytest.raises(BlockNotFoundError, match=r"'npu\.r' has 2 variants in c: give one of "
                                                 r"npu\.r\$1, npu\.r\$2"):
        _find_block(v, "npu.r", "c")


def test_area_block_is_checked_in_every_configuration_before_any_synthesis(tmp_path,
                                                                          monkeypatch, capsys):
    """``npu area --block`` with several configurations: a block one of them lacks is refused
    before the first is synthesized (it had synthesized the first, then exited without its
    table)."""
    from cosim.cli import main

    def no_synthesis(*args, **kw):
        raise AssertionError("synthesis ran")
    monkeypatch.setattr(sys.modules["cosim.fpga.area"], "synthesize", no_synthesis)
    out = tmp_path / "v"
    assert main(["area", "--block", "npu.cmdproc.fetch.translator", "--config", "2x2",
                 "2x2,tlb_entries=0", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "no block 'npu.cmdproc.fetch.translator' in 2x2_tlb_entries0; did you mean " \
           "npu.cmdproc.fetch" in err and "synthesizing" not in err
