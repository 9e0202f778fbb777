"""Co-simulation layer on the stand-in design: DRAM model protocol, backdoor, harness.

Each test is one Verilator simulation run through :func:`cosim.tb.harness.run_job`; the checks
run inside the simulator (``tests/support/cosim_jobs.py``) and come back as the job's result or as a
:class:`CosimJobError` carrying the failing assertion's traceback.
"""

import time

import pytest

from cosim.build import WAVES_ROOT, CosimBuildError, build_sim, sim_build_state
from cosim.tb.harness import CosimJobError, run_job, run_on_rtl, waves_dir
from hw.config import NPUConfig
from hw.isa import CSR_ID_VALUE
from tests.support.cosim_jobs import STATUS_BRESP, STATUS_RRESP

DESIGN = "tests.support.cosim_standin:StandIn"
CONFIG = NPUConfig()


def run(job: str, args: dict | None = None, *, name: str, **kw):
    return run_job(CONFIG, f"tests.support.cosim_jobs:{job}", args, name=name, design=DESIGN, **kw)


def test_build_is_cached(tmp_path, monkeypatch):
    build_sim(CONFIG, design=DESIGN)
    assert sim_build_state(CONFIG, design=DESIGN) == "built"    # what npu run's banner asks
    again = build_sim(CONFIG, design=DESIGN)
    assert again.cached
    assert (again.build_dir / "tb_top").is_file()
    import cosim.build
    # a hardware source edited (its digest changes): the Verilog is regenerated first
    real = cosim.build._verilog_plan
    monkeypatch.setattr(cosim.build, "_verilog_plan",
                        lambda *a, **k: (*real(*a, **k)[:2], "edited"))
    assert sim_build_state(CONFIG, design=DESIGN) == "verilog"
    monkeypatch.setattr(cosim.build, "_verilog_plan", real)
    monkeypatch.setattr(cosim.build, "BUILD_ROOT", tmp_path)     # nothing built there
    assert sim_build_state(CONFIG, design=DESIGN) == "build"


def test_csr_id_and_cycles():
    r = run("smoke", name="test_cosim_smoke")
    assert r.result["id"] == CSR_ID_VALUE
    assert 0 < r.result["cycle"] <= r.cycles < 100


@pytest.mark.parametrize("wide", [False, True], ids=["bus64", "bus128"])
def test_dram_bursts_wstrb_outstanding(wide):
    config = NPUConfig(axi_data_bits=128, dram_bytes=1 << 20) if wide else CONFIG
    cases = [
        dict(src=0x0000, dst=0x8000, beats=5, burst=1, max_out=1),       # single beats
        dict(src=0x1000, dst=0x9000, beats=100, burst=16, max_out=4),    # last burst partial
        dict(src=0x2000, dst=0xA000, beats=600, burst=256, max_out=4),   # 256-beat bursts
        dict(src=0x4000, dst=0xC000, beats=64, burst=8, max_out=8, wstrb=0x5A),  # WSTRB
        dict(src=0x6000, dst=0xE000, beats=64, burst=8, max_out=1, wstrb=0x81),
    ]
    r = run_job(config, "tests.support.cosim_jobs:copy_cases", {"cases": cases},
                name=f"test_cosim_copy_{config.name}", design=DESIGN)
    assert all(c["status"] == 0 for c in r.result)
    assert [c["max_seen"] for c in r.result][1] >= 2, "reads were never outstanding"
    assert r.result[3]["max_seen"] >= 4
    assert r.result[0]["max_seen"] == 1


def test_dram_out_of_range_is_an_error_response():
    r = run("out_of_range", name="test_cosim_out_of_range")
    assert r.result == {"read": STATUS_RRESP, "write": STATUS_BRESP, "ok": 0}


def test_4k_crossing_fails_the_run():
    with pytest.raises(CosimJobError, match="AXI protocol violations"):
        run("crosses_4k", name="test_cosim_4k")


def test_backdoor_roundtrip_unaligned():
    r = run("backdoor_roundtrip", name="test_cosim_backdoor")
    assert r.result == {"refused": 6}


def test_csr_timeout_raises():
    r = run("csr_timeout", name="test_cosim_csr_timeout").result
    assert "not answered within 50 cycles" in r["message"]
    assert 50 <= r["cycles"] <= 53
    assert r["id"] == CSR_ID_VALUE


def test_job_exception_comes_back_with_traceback():
    with pytest.raises(CosimJobError) as info:
        run_on_rtl(CONFIG, "tests.support.cosim_jobs:fail", {"message": "boom"},
                   name="test_cosim_fail", design=DESIGN)
    assert info.value.error == "ValueError: boom"
    assert "cosim_jobs.py" in info.value.job_traceback
    assert "in fail" in info.value.job_traceback
    assert info.value.log_path.is_file()


def test_interrupted_simulator_ends_and_the_run_is_an_interrupt():
    """^C reaching the simulator ends it at once and comes back as a KeyboardInterrupt, not
    a failed job with cocotb's traceback (npu fuzz printed one; with --jobs 2 cocotb
    cancelled the job, whose thread then kept the simulator from ever exiting)."""
    t0 = time.perf_counter()
    with pytest.raises(KeyboardInterrupt, match="simulation of test_cosim_interrupt "
                                                "interrupted"):
        run("interrupt_self", name="test_cosim_interrupt")
    assert time.perf_counter() - t0 < 60


def test_job_result_must_be_json():
    with pytest.raises(CosimJobError, match="TypeError"):
        run("not_json", name="test_cosim_not_json")


def test_unknown_design_is_a_build_error():
    with pytest.raises(CosimBuildError, match="no_such_module"):
        build_sim(CONFIG, design="tests.no_such_module:X")


def test_waves_go_to_waves_dir(monkeypatch):
    """Runs write waves/<name>.vcd, and the test suite's runs a temporary directory instead
    (tests/conftest.py sets NPU_WAVES_DIR): never the repository's waves/."""
    r = run("smoke", name="test_cosim_waves", waves=True)
    assert r.waves is not None and r.waves.name == "test_cosim_waves.vcd"
    assert r.waves.parent == waves_dir() != WAVES_ROOT
    monkeypatch.delenv("NPU_WAVES_DIR")
    assert waves_dir() == WAVES_ROOT and WAVES_ROOT.name == "waves"
    head = r.waves.read_text(errors="replace")[:200_000]
    assert "csr__awvalid" in head and "u_dram" in head
    assert not (r.run_dir / "dump.vcd").exists()


def test_concurrent_runs_of_one_name_get_their_own_directories(tmp_path):
    """Two runs of one job name at once (two ``npu run`` in one checkout) must not share the
    run directory: its DRAM image and result file would mix (both once came out not
    bit-exact). The second takes ``<name>.2``; the name is free again after the first."""
    from cosim.tb.harness import _claim_run_dir
    with _claim_run_dir(tmp_path / "npu_run") as a, _claim_run_dir(tmp_path / "npu_run") as b:
        assert (a.name, b.name) == ("npu_run", "npu_run.2")
        with _claim_run_dir(tmp_path / "npu_run") as c:
            assert c.name == "npu_run.3"
    with _claim_run_dir(tmp_path / "npu_run") as d:
        assert d.name == "npu_run"
