"""Every kind of waveform the project writes, read by two independent readers and opened in
GTKWave: the tests' NPU-shaped VCD and a window cut from it, the co-simulation's VCD of the
stand-in design (and its FST), the NPU's VCD of a whole run, of a kernel window, of a
cycle window and of a ``--waves-scope`` run, and the VCD Amaranth's simulator writes of the
board build (:class:`hw.board.NPUBoard`, a CSR read over its UART).

For each: the project's reader (fast and checked paths) and vcdvcd agree on the values and
the clock edges (:func:`checks.readers_agree`); where ``gtkwave`` and ``xvfb-run`` are
installed, GTKWave opens it with its save file without a parse error, shows every signal of
the save file, zoomed to the file, with the kernel markers (:func:`checks.check_in_gtkwave`;
without them, :func:`test_gtkwave_is_installed` is skipped with the reason). The NPU runs
also check the absolute cycles ``npu run`` reports (the run's ``.waves.json``).

The NPU files' save files show every group of :data:`cosim.waves.GTKW_GROUPS` (no name
missing: ports, named probes, counter sources).
"""

import subprocess

import numpy as np
import pytest
from amaranth.sim import Simulator

from cosim.build import NPU_SCOPE
from cosim.tb.harness import run_job
from cosim.waves import cut, summarize, write_gtkw
from cosim.waves.vcd import EdgeSampler, changes, edge_cycles, read_header, time_range
from hw.board import NPUBoard
from hw.config import NPUConfig
from hw.isa import CSR_ID_VALUE, Csr
from tests.hw.test_board import BAUD, DIVISOR, SMALL, Host
from tests.support.npu_vcd_gen import random_cycles, write_npu_vcd
from tests.waves.checks import (
    GTKWAVE_MISSING,
    HAVE_GTKWAVE,
    check_in_gtkwave,
    readers_agree,
    rising_edges,
    theirs,
)

STANDIN = "tests.support.cosim_standin:StandIn"
NPU_JOB = "tests.support.rtl_jobs:attention_cases"
NPU_ARGS = {"cases": [{"seq": 8, "heads": 1, "d": 8, "mask": "none"}]}


def test_gtkwave_is_installed():
    if not HAVE_GTKWAVE:
        pytest.skip(GTKWAVE_MISSING + ": the GTKWave checks of this module are not run")
    r = subprocess.run(["xvfb-run", "-a", "gtkwave", "--version"], capture_output=True,
                       text=True, check=False)
    assert "GTKWave Analyzer" in r.stdout, r.stdout + r.stderr


def _gtkwave(wave, tmp_path, **kw):
    if HAVE_GTKWAVE:
        return check_in_gtkwave(wave, tmp_path, **kw)
    return None


def _sample(header, every: int):
    """The vars of the NPU scope and every ``every``-th var elsewhere (aliases once)."""
    seen, out = set(), []
    for k, v in enumerate(header.vars):
        if v.id in seen:
            continue
        if v.scope == NPU_SCOPE or v.scope == "tb_top" or k % every == 0:
            seen.add(v.id)
            out.append(v)
    return out


def _file_cycles(path):
    """(first, last) absolute cycle of the rising edges of the NPU's clock in a file."""
    header = read_header(path)
    clock = header.find(f"{NPU_SCOPE}.clk")
    sampler = EdgeSampler(1, 0)
    edges = np.concatenate([sampler.feed(b)[0] for b in changes(path, header, [clock.id])])
    period = int(edges[1] - edges[0])
    assert period == 10_000                       # 10 ns in the file's 1 ps
    cyc = edge_cycles(edges, period)
    return int(cyc[0]), int(cyc[-1])


def test_generated_npu_vcd_and_a_cut(tmp_path):
    vcd = write_npu_vcd(tmp_path / "gen.vcd", random_cycles(600, seed=3, counters=True))
    header = read_header(vcd)
    clock = header.find("tb_top.u_npu.clk")
    assert readers_agree(vcd, header.vars, clock) > 1000
    regions = [{"name": "load", "occurrence": 1, "start_cycle": 50, "end_cycle": 90},
               {"name": "mm", "occurrence": 1, "start_cycle": 200, "end_cycle": 500}]
    view = _gtkwave(vcd, tmp_path, regions=regions, clock_period_ns=10)
    if view is not None:
        assert view["markers"] == {"A": 500, "B": 2000}        # 1 ns units, 10 ns cycles
    part = cut(vcd, tmp_path / "part.vcd", 100, 300).out
    assert readers_agree(part, read_header(part).vars, clock) > 100
    _gtkwave(part, tmp_path)


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    return run_job(NPUConfig(), "tests.support.cosim_jobs:regions", {"names": ["a", "b"]},
                   name="kinds_standin", design=STANDIN, waves=True)


def test_standin_vcd(standin, tmp_path):
    header = read_header(standin.waves)
    clock = header.find(f"{NPU_SCOPE}.clk")
    assert readers_agree(standin.waves, _sample(header, 1), clock) > 500
    # the regions of the sidecar are the job's own spans, absolute cycles
    spans = [[r["start_cycle"], r["end_cycle"]] for r in standin.waves_info["regions"]]
    assert spans == [*standin.result["a"], *standin.result["b"]]
    assert tuple(standin.waves_info["cycles"]) == _file_cycles(standin.waves)
    view = _gtkwave(standin.waves, tmp_path)           # markers from the sidecar
    if view is not None:
        assert sorted(view["markers"].values()) == [s * 10_000 for s, _ in spans]


def test_standin_fst(standin, tmp_path):
    """The same run traced to FST (pywellen reads it) equals vcdvcd's reading of the VCD."""
    if not subprocess.run(["g++", "-print-file-name=liblz4.so"], capture_output=True,
                          text=True, check=False).stdout.strip().startswith("/"):
        pytest.skip("FST needs liblz4-dev (apt-get install liblz4-dev)")
    fst = run_job(NPUConfig(), "tests.support.cosim_jobs:regions", {"names": ["a", "b"]},
                  name="kinds_standin_fst", design=STANDIN, waves=True, waves_format="fst")
    assert fst.waves.suffix == ".fst" and fst.result == standin.result
    vcd_header = read_header(standin.waves)
    header = read_header(fst.waves)
    assert header.format == "fst"
    assert {v.path for v in header.vars} == {v.path for v in vcd_header.vars}
    clock = vcd_header.find(f"{NPU_SCOPE}.clk")
    assert readers_agree(fst.waves, _sample(vcd_header, 1), clock, vcd_twin=standin.waves) \
        > 500
    assert fst.waves.stat().st_size < standin.waves.stat().st_size / 2
    assert fst.waves_info["cycles"] == standin.waves_info["cycles"]
    _gtkwave(fst.waves, tmp_path)


def _npu(name, **kw):
    return run_job(NPUConfig(), NPU_JOB, NPU_ARGS, name=name, **kw)


def _check_npu(run, tmp_path, every=40):
    assert run.result["cases"][0]["bit_exact"]
    header = read_header(run.waves)
    assert not [v.path for v in header.vars if v.name.startswith("$") or ":" in v.base]
    clock = header.find(f"{NPU_SCOPE}.clk")
    assert readers_agree(run.waves, _sample(header, every), clock) > 100
    assert tuple(run.waves_info["cycles"]) == _file_cycles(run.waves)
    assert write_gtkw(run.waves, tmp_path / "notes.gtkw")[1] == []   # every group's names
    _gtkwave(run.waves, tmp_path)
    return header


def test_npu_whole_run_and_scope_run(tmp_path):
    """A whole run, then --waves-scope dma,cmdproc: those blocks and the NPU's own signals
    only, and much smaller."""
    whole = _npu("kinds_npu_whole", waves=True)
    _check_npu(whole, tmp_path)
    assert whole.waves_info["cycles"] == [0, whole.cycles - 1]
    names = [r["name"] for r in whole.waves_info["regions"]]
    assert names == ["scores", "softmax", "context"]

    run = _npu("kinds_npu_scope", waves_scope=["dma", "cmdproc"])
    assert run.result == whole.result
    header = _check_npu(run, tmp_path, every=5)
    # exactly the whole run's signals of those blocks' subtrees, of tb_top and the NPU scope
    # themselves, and the cycle counter: nothing of the chosen blocks lost, nothing else kept
    blocks = (f"{NPU_SCOPE}.dma.", f"{NPU_SCOPE}.cmdproc.")
    kept = {v.path for v in read_header(whole.waves).vars
            if v.scope in ("tb_top", NPU_SCOPE) or (v.scope + ".").startswith(blocks)
            or v.path == f"{NPU_SCOPE}.csr.cycles[63:0]"}
    assert {v.path for v in header.vars} == kept
    assert any(v.scope.startswith(f"{NPU_SCOPE}.dma.") for v in header.vars)
    # the command processor's FIFOs and ring state are most of the design's nets (8x8:
    # 9382 of 11636 vars kept, the file 63% of the whole run's)
    assert run.waves.stat().st_size < 0.75 * whole.waves.stat().st_size
    assert run.waves_info["cycles"] == whole.waves_info["cycles"]
    with pytest.raises(ValueError, match=r"no block 'dmx'.*blocks: .*cmdproc.*dma"):
        _npu("kinds_npu_scope_bad", waves_scope=["dmx"])


def test_npu_scope_typo_is_refused_before_any_build(monkeypatch):
    """A misspelt ``--waves-scope`` block is refused from the generated Verilog, before the
    traced Verilator build (minutes) that it would otherwise wait for."""
    import cosim.tb.harness as harness

    def no_build(*args, **kwargs):
        raise AssertionError("built before checking the scope")
    monkeypatch.setattr(harness, "build_sim", no_build)
    with pytest.raises(ValueError, match=r"no block 'dmx'"):
        run_job(NPUConfig(), "tests.support.format_jobs:gemv_formats", name="scope_typo",
                waves_scope=["dmx"])


def test_npu_kernel_window(tmp_path):
    run = _npu("kinds_npu_kernel", waves_window={"kernel": "softmax", "occurrence": 1})
    _check_npu(run, tmp_path, every=20)
    region = next(r for r in run.waves_info["regions"] if r["name"] == "softmax")
    first, last = run.waves_info["cycles"]
    assert region["start_cycle"] <= first <= region["start_cycle"] + 1
    assert region["end_cycle"] - 2 <= last < region["end_cycle"]
    # the file starts within the kernel's first cycle: its marker sits at the file's start
    text = write_gtkw(run.waves, tmp_path / "k.gtkw")[0].read_text()
    marks = next(ln for ln in text.splitlines() if ln.startswith("*")).split()[2:]
    assert marks[0] == str(time_range(run.waves, read_header(run.waves))[0])
    assert set(marks[1:]) == {"-1"} and "[markername] Asoftmax\n" in text


def test_npu_cycle_window(tmp_path):
    run = _npu("kinds_npu_cycles", waves_window={"from": 300, "to": 500})
    _check_npu(run, tmp_path, every=20)
    assert run.waves_info["cycles"] == [300, 499]        # the window [300, 500) exactly


def test_board_simulation_vcd(tmp_path):
    """The board build in Amaranth's simulator (``Simulator.write_vcd``): escaped names
    (``\\storage[0]``), ``$`` in scope names (``trace$63``), a 1 fs timescale."""
    board = NPUBoard(SMALL, clock_hz=DIVISOR * BAUD, baud=BAUD)
    host, got = Host(board), {}

    async def tb(ctx):
        await ctx.tick().repeat(10)
        got["id"] = await host.read(ctx, Csr.ID)

    sim = Simulator(board)
    sim.add_clock(1e-8)
    sim.add_testbench(host.listen, background=True)
    sim.add_testbench(tb)
    vcd = tmp_path / "board.vcd"
    with sim.write_vcd(str(vcd)):
        sim.run()
    assert got == {"id": CSR_ID_VALUE}
    header = read_header(vcd)
    clock = header.find("bench.top.npu.clk")
    assert readers_agree(vcd, _sample(header, 10), clock) > 1000
    # its clock rises at 5, 15, ... ns: the first edge ends cycle 0, one cycle per edge
    edges = rising_edges(theirs(vcd, [clock])[clock.path])
    s = summarize(vcd)
    assert (s.first_cycle, s.end_cycle, s.period) == (0, len(edges), 10**7)  # 1 fs units
    assert write_gtkw(vcd, tmp_path / "notes.gtkw")[1] == []
    _gtkwave(vcd, tmp_path)
