"""The cocotb test module that :func:`cosim.harness.run_job` runs in the simulator process.

It reads the run description from the JSON file named by ``NPU_COSIM_SPEC`` (config, job,
args, clock), starts the clock, resets the design, builds an :class:`RtlBackend`, calls the
job ``function(backend, **args)`` in a :func:`cocotb.task.bridge` thread and writes the
outcome to ``NPU_COSIM_RESULT``: ``{"ok": true, "result": ..., "cycles": ...}`` or
``{"ok": false, "error": ..., "traceback": ...}``. A failing job also fails the cocotb test.
"""

from __future__ import annotations

import importlib
import json
import os
import time
import traceback
from pathlib import Path

import cocotb
from cocotb.clock import Clock
from cocotb.task import bridge
from cocotb.triggers import Timer

from cosim.rtl_backend import CLOCK_PERIOD_NS, RtlBackend
from hw.config import NPUConfig

RESET_CYCLES = 4


def _load_job(spec: str):
    module_name, _, func = spec.partition(":")
    if not func:
        raise ValueError(f"job must be 'module:function', got {spec!r}")
    return getattr(importlib.import_module(module_name), func)


@cocotb.test()
async def run_job(dut) -> None:
    spec = json.loads(Path(os.environ["NPU_COSIM_SPEC"]).read_text())
    result_path = Path(os.environ["NPU_COSIM_RESULT"])
    outcome: dict = {"ok": False, "error": "SimulatorError",
                     "traceback": "the job did not start"}
    try:
        config = NPUConfig(**spec["config"])
        if not spec.get("internal_clock"):
            Clock(dut.clk, CLOCK_PERIOD_NS, "ns").start()
        dut.rst.value = 1
        backend = RtlBackend(dut, config, dram_file=Path(spec["dram_file"]))
        # release reset mid-cycle (falling edge), away from the rising edge that samples it
        await Timer(RESET_CYCLES * CLOCK_PERIOD_NS + CLOCK_PERIOD_NS // 2, "ns")
        dut.rst.value = 0
        job = _load_job(spec["job"])
        t0 = time.perf_counter()
        result = await bridge(job)(backend, **spec["args"])
        seconds = time.perf_counter() - t0
        json.dumps(result)  # must be JSON-serialisable: fail here, with the job's name
        if backend.dram_protocol_errors:
            raise AssertionError(f"the DRAM model saw {backend.dram_protocol_errors} AXI "
                                 "protocol violations (see the simulation log)")
        outcome = {"ok": True, "result": result, "cycles": backend.cycle, "seconds": seconds}
    except BaseException as e:
        outcome = {"ok": False, "error": f"{type(e).__name__}: {e}",
                   "traceback": traceback.format_exc()}
        raise
    finally:
        result_path.write_text(json.dumps(outcome))
