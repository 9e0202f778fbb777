"""The AXI protocol checkers of the testbench (``cosim/tb/axi_checker.sv``) on a small test
design that drives their inputs directly: every rule fails when it is broken, legal traffic
(stalls, W before AW, several IDs, AW and W in one cycle) is silent, and the rule table of
:mod:`cosim.tb.axi_rules` is the one the SystemVerilog prints.

The checkers' silence on the whole suite is checked by every full-NPU run: a violation fails
the run (:mod:`cosim.tb.cocotb_entry`); :func:`test_a_violation_fails_a_full_npu_run` shows
that path on the stand-in design.
"""

import contextlib
import json
import re
from pathlib import Path

import pytest

from cosim.build import BUILD_ROOT, ROOT, _locked, _runner_class
from cosim.tb.axi_rules import AXI_LITE_RULES, AXI_RULES, AxiViolation
from cosim.tb.harness import CosimJobError, run_job
from hw.config import NPUConfig
from tests.cosim.axi_checker.scenarios import SCENARIOS

HERE = Path(__file__).parent / "axi_checker"
CHECKER = ROOT / "cosim" / "tb" / "axi_checker.sv"


@pytest.fixture(scope="module")
def outcomes() -> dict:
    build_dir = BUILD_ROOT / "axi_checker"
    runner = _runner_class()()
    runner.public_all = True
    with _locked(build_dir / ".lock"):
        runner.build(sources=[CHECKER, HERE / "axi_checker_tb.sv"], hdl_toplevel="axi_checker_tb",
                     build_dir=build_dir, build_args=["-Wno-fatal", "-Wno-lint", "-Wno-style"],
                     timescale=("1ns", "1ps"), log_file=build_dir / "build.log")
    result = build_dir / "result.json"
    result.unlink(missing_ok=True)
    with contextlib.suppress(SystemExit):   # the runner exits when the cocotb test fails
        runner.test(test_module="tests.cosim.axi_checker.checker_cocotb",
                    hdl_toplevel="axi_checker_tb", build_dir=build_dir, test_dir=build_dir,
                    extra_env={"AXI_CHECKER_RESULT": str(result)},
                    results_xml=str(build_dir / "results.xml"), log_file=build_dir / "sim.log",
                    timescale=("1ns", "1ps"))
    assert result.is_file(), f"the checker simulation wrote no result (see {build_dir})"
    return json.loads(result.read_text())


def test_every_rule_has_a_scenario():
    broken = {(port, rule) for port, _, rule in SCENARIOS.values() if rule}
    assert broken == {("m", r) for r in AXI_RULES} | {("l", r) for r in AXI_LITE_RULES}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenario(outcomes, name):
    _, _, rule = SCENARIOS[name]
    got = outcomes[name]
    if rule == 0:
        assert got == {"errors": 0, "rule": 0}, f"legal traffic flagged: {got}"
    else:
        assert got["errors"] >= 1 and got["rule"] == rule, \
            f"{name}: expected rule {rule} {AXI_RULES[rule][0]}, got {got}"


def test_rule_table_matches_the_checker_source():
    text = CHECKER.read_text()
    names = dict(re.findall(r"(\d+): return \"(\w+)\";", text))
    assert {int(k): v for k, v in names.items()} == {k: v[0] for k, v in AXI_RULES.items()}
    assert "localparam int N_RULES = 19;" in text and max(AXI_RULES) == 19


def test_violation_report_names_port_rule_and_cycle():
    v = AxiViolation.from_pins(3, 64 + 9, 1234)
    assert (v.port, v.rule, v.cycle, v.count) == ("csr", 9, 1234, 3)
    assert "cycle 1234" in str(v) and "B_DROP" in str(v) and "csr port" in str(v)


def test_a_violation_fails_a_full_npu_run():
    """A 4 KiB-crossing burst of the stand-in design fails its run with the rule and cycle."""
    with pytest.raises(CosimJobError, match=r"at cycle \d+ on the mem port: rule 11 AR_4K"):
        run_job(NPUConfig(), "tests.support.cosim_jobs:crosses_4k", name="test_checker_4k",
                design="tests.support.cosim_standin:StandIn")
