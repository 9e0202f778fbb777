"""cocotb test module of the AXI protocol checkers' test design (``axi_checker_tb.sv``).

Runs every scenario of :mod:`tests.cosim.axi_checker.scenarios`; between scenarios the design
is reset with every VALID low and the checkers' counts cleared. The outcome of every
scenario (violation count, first rule) goes to the
JSON file named by ``AXI_CHECKER_RESULT`` for the pytest side to judge.
"""

from __future__ import annotations

import json
import os

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly

from tests.cosim.axi_checker.scenarios import IDLE, SCENARIOS

_LITE_INPUTS = ("awaddr", "awvalid", "awready", "wdata", "wstrb", "wvalid", "wready", "bresp",
                "bvalid", "bready", "araddr", "arvalid", "arready", "rdata", "rresp", "rvalid",
                "rready")
_FULL_INPUTS = (*_LITE_INPUTS, "awid", "awlen", "awsize", "awburst", "wlast", "bid", "arid",
                "arlen", "arsize", "arburst", "rid", "rlast")


def _inputs(dut, port: str) -> list[str]:
    return [f"{port}_{n}" for n in (_FULL_INPUTS if port == "m" else _LITE_INPUTS)]


async def _reset(dut) -> None:
    for port in ("m", "l"):
        for name in _inputs(dut, port):
            getattr(dut, name).value = 0
    dut.rst.value = 1
    dut.clear.value = 1
    await FallingEdge(dut.clk)
    await FallingEdge(dut.clk)
    dut.rst.value = 0
    dut.clear.value = 0


async def _run(dut, port: str, cycles: list[dict]) -> dict:
    await _reset(dut)
    for cycle in cycles:
        dut.rst.value = cycle.get("rst", 0)
        for name, value in cycle.items():
            if name != "rst":
                getattr(dut, f"{port}_{name}").value = value
        await FallingEdge(dut.clk)     # the rising edge in between checked this cycle
    dut.rst.value = 0
    for name, value in IDLE.items():
        getattr(dut, f"{port}_{name}").value = value
    await FallingEdge(dut.clk)
    await FallingEdge(dut.clk)
    await ReadOnly()
    return {"errors": int(getattr(dut, f"{port}_errors").value),
            "rule": int(getattr(dut, f"{port}_first_rule").value)}


@cocotb.test()
async def scenarios(dut) -> None:
    """Run every scenario of :data:`SCENARIOS` and record what the checker reported."""
    cocotb.start_soon(Clock(dut.clk, 10, "ns").start())
    out = {}
    for name, (port, cycles, _) in SCENARIOS.items():
        out[name] = await _run(dut, port, cycles)
        await FallingEdge(dut.clk)
    with open(os.environ["AXI_CHECKER_RESULT"], "w") as f:
        json.dump(out, f)
