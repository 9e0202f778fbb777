"""cocotb test module: the DRAM model (``npu_dram``) alone, driven and watched on its pins.

:func:`tests.cosim.test_dram_timing.run_pins` builds ``npu_dram`` as the simulation top and
runs this module with a JSON spec (``NPU_DRAM_TB_SPEC``) of scenarios; the DRAM timing comes
from the simulator's plusargs, as in the full-NPU runs. Each scenario starts from a reset, so
sample ``k`` of a scenario is cycle ``k`` of :func:`sw.dram.stall_draws`.

A scenario is ``{"reads": [{"addr", "len", "at"}...], "writes": [{"addr", "len", "data",
"strb", "at"}...], "rready": READY, "bready": READY, "max_cycles": N}``: read and write
bursts (INCR, full-width beats, ID = index mod 16) issued in order, each no earlier than
sample ``at``; W beats are offered from the cycle their burst's AW is offered (W may lead AW).
``READY`` is ``1`` (always ready) or ``{"p": P, "seed": S}`` (low with probability P per
cycle, Python's ``random``). The scenario ends when every R beat and B response arrived.

The drivers and the monitor are one loop: drive the inputs after a falling edge, sample every
pin in the ReadOnly phase before the rising edge that takes the handshakes. The result
(``NPU_DRAM_TB_RESULT``) per scenario: one ``"0"/"1"`` string per valid/ready pin, one
character per cycle; the R beats ``[sample, id, data, resp, last]``; the B responses
``[sample, id, resp]``; and ``"cycles"``.
"""

from __future__ import annotations

import json
import os
import random
import traceback
from pathlib import Path

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge

PINS = ("arvalid", "arready", "rvalid", "rready", "awvalid", "awready", "wvalid", "wready",
        "bvalid", "bready")
INPUTS = ("awid", "awaddr", "awlen", "awsize", "awburst", "awvalid", "wdata", "wstrb", "wlast",
          "wvalid", "bready", "arid", "araddr", "arlen", "arsize", "arburst", "arvalid",
          "rready", "bd_op", "bd_first", "bd_last")


class _Ready:
    """A READY pattern: always high, or low with probability ``p`` each cycle."""

    def __init__(self, spec) -> None:
        self.p = 0.0 if spec in (1, None) else float(spec["p"])
        self.rng = random.Random(0 if spec in (1, None) else spec["seed"])

    def __call__(self) -> int:
        return int(not (self.p and self.rng.random() < self.p))


class _Scenario:
    """State of the drivers and the recorded trace of one scenario."""

    def __init__(self, dut, sc: dict) -> None:
        self.dut = dut
        self.reads, self.writes = list(sc.get("reads", [])), list(sc.get("writes", []))
        self.rready, self.bready = _Ready(sc.get("rready", 1)), _Ready(sc.get("bready", 1))
        self.max_cycles = int(sc.get("max_cycles", 200_000))
        self.ar_i = self.aw_i = self.w_burst = self.w_beat = 0
        self.beats_expected = sum(r["len"] + 1 for r in self.reads)
        self.trace = {p: [] for p in PINS}
        self.r_beats: list = []
        self.b_resps: list = []

    def done(self) -> bool:
        return len(self.r_beats) == self.beats_expected and len(self.b_resps) == len(self.writes)

    def drive(self, k: int) -> None:
        d = self.dut
        ar = self.reads[self.ar_i] if self.ar_i < len(self.reads) else None
        if ar is not None and ar["at"] <= k:
            d.arid.value, d.araddr.value, d.arlen.value = self.ar_i % 16, ar["addr"], ar["len"]
            d.arvalid.value = 1
        else:
            d.arvalid.value = 0
        aw = self.writes[self.aw_i] if self.aw_i < len(self.writes) else None
        d.awvalid.value = int(aw is not None and aw["at"] <= k)
        if aw is not None:
            d.awid.value, d.awaddr.value, d.awlen.value = self.aw_i % 16, aw["addr"], aw["len"]
        wb = self.writes[self.w_burst] if self.w_burst < len(self.writes) else None
        if wb is not None and wb["at"] <= k and self.w_burst <= self.aw_i:
            d.wdata.value, d.wstrb.value = wb["data"][self.w_beat], wb["strb"][self.w_beat]
            d.wlast.value = int(self.w_beat == wb["len"])
            d.wvalid.value = 1
        else:
            d.wvalid.value = 0
        d.rready.value = self.rready()
        d.bready.value = self.bready()

    def sample(self, k: int) -> None:
        d = self.dut
        v = {p: int(getattr(d, p).value) for p in PINS}
        for p in PINS:
            self.trace[p].append("1" if v[p] else "0")
        if v["arvalid"] and v["arready"]:
            self.ar_i += 1
        if v["awvalid"] and v["awready"]:
            self.aw_i += 1
        if v["wvalid"] and v["wready"]:
            self.w_beat += 1
            if self.w_beat > self.writes[self.w_burst]["len"]:
                self.w_burst, self.w_beat = self.w_burst + 1, 0
        if v["rvalid"] and v["rready"]:
            self.r_beats.append([k, int(d.rid.value), int(d.rdata.value), int(d.rresp.value),
                                 int(d.rlast.value)])
        if v["bvalid"] and v["bready"]:
            self.b_resps.append([k, int(d.bid.value), int(d.bresp.value)])

    def result(self, cycles: int) -> dict:
        return {"cycles": cycles, "trace": {p: "".join(s) for p, s in self.trace.items()},
                "r_beats": self.r_beats, "b_resps": self.b_resps}


async def _reset(dut) -> None:
    for name in INPUTS:
        getattr(dut, name).value = 0
    dut.arsize.value = dut.awsize.value = (len(dut.wstrb) - 1).bit_length()
    dut.arburst.value = dut.awburst.value = 1
    dut.rst.value = 1
    for _ in range(3):
        await RisingEdge(dut.clk)
    await FallingEdge(dut.clk)
    dut.rst.value = 0


async def _run(dut, sc: dict) -> dict:
    await _reset(dut)
    s = _Scenario(dut, sc)
    k = 0
    while not s.done():
        if k >= s.max_cycles:
            raise TimeoutError(f"scenario not finished after {k} cycles: {len(s.r_beats)} of "
                               f"{s.beats_expected} R beats, {len(s.b_resps)} of "
                               f"{len(s.writes)} B responses")
        s.drive(k)
        await ReadOnly()
        s.sample(k)
        await FallingEdge(dut.clk)
        k += 1
    return s.result(k)


@cocotb.test()
async def dram_pins(dut) -> None:
    spec = json.loads(Path(os.environ["NPU_DRAM_TB_SPEC"]).read_text())
    out_path = Path(os.environ["NPU_DRAM_TB_RESULT"])
    outcome: dict = {"ok": False, "error": "did not start"}
    try:
        Clock(dut.clk, 10, "ns").start()
        results = [await _run(dut, sc) for sc in spec["scenarios"]]
        outcome = {"ok": True, "scenarios": results, "prot_errors": int(dut.prot_errors.value)}
    except BaseException as e:
        outcome = {"ok": False, "error": f"{type(e).__name__}: {e}",
                   "traceback": traceback.format_exc()}
        raise
    finally:
        out_path.write_text(json.dumps(outcome))
