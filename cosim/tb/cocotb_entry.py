"""The cocotb test module that :func:`cosim.tb.harness.run_job` runs in the simulator process.

It reads the run description from the JSON file named by ``NPU_COSIM_SPEC`` (config, job,
args, clock, waveform window, DRAM timing), starts the clock, resets the design, builds an
:class:`RtlBackend`, calls the job ``function(backend, **args)`` in a
:func:`cocotb.task.bridge` thread and writes the outcome to ``NPU_COSIM_RESULT``:
``{"ok": true, "result": ..., "cycles": ..., "regions": {kernel name: count}, "region_log":
[{"name", "occurrence", "start_cycle", "end_cycle"}, ...]}`` or
``{"ok": false, "error": ..., "traceback": ...}``. A failing job also fails the cocotb test.
On ^C (SIGINT, which a terminal sends to the simulator too) the simulator writes
``{"ok": false, "interrupted": true, ...}`` and exits at once with status 130.

``tb_top.trace_on`` (read only by traced builds) is 1 for the whole run without a window; with
``waves_window = {"from": cycle, "to": cycle or None}`` it is 1 over those absolute cycles; with
``{"kernel": name, "occurrence": n}`` over the ``n``-th :meth:`RtlBackend.region` of that name.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import time
import traceback
from pathlib import Path

import cocotb
from cocotb.clock import Clock
from cocotb.simtime import convert, get_sim_time
from cocotb.task import bridge
from cocotb.triggers import Timer

from cosim.tb.rtl_backend import CLOCK_PERIOD_NS, RtlBackend
from hw.config import NPUConfig
from sw.dram import DramTiming

RESET_CYCLES = 4


async def _cycle_window(dut, first: int, last: int | None) -> None:
    """Drive ``trace_on`` high over the absolute cycles ``[first, last)``: from the start of
    cycle ``first`` to half a cycle after the rising edge that ends cycle ``last - 1``, so
    that edge is in the file (the waveform tools then count cycles ``first .. last - 1``)."""
    delay = first * CLOCK_PERIOD_NS - get_sim_time("ns")
    if delay > 0:
        await Timer(delay, "ns")
    dut.trace_on.value = 1
    if last is not None:
        await Timer((last - first) * CLOCK_PERIOD_NS + CLOCK_PERIOD_NS // 2, "ns")
        dut.trace_on.value = 0


def _violation_or_none(backend):
    """The protocol checkers' finding, if the backend exists and saw one."""
    try:
        return backend.axi_violation
    except Exception:  # reporting only: the job's own error is what matters
        return None


def _load_job(spec: str):
    module_name, _, func = spec.partition(":")
    if not func:
        raise ValueError(f"job must be 'module:function', got {spec!r}")
    return getattr(importlib.import_module(module_name), func)


def _exit_on_interrupt(result_path: Path):
    """A SIGINT handler: report the interruption and end the simulator at once. Left to
    cocotb, the KeyboardInterrupt cancels the test in its scheduler while the job's bridge
    thread waits on the simulator, which then never exits (seen with ``npu fuzz --jobs 2``)."""
    def handler(signum, frame) -> None:
        result_path.write_text(json.dumps({"ok": False, "interrupted": True,
                                           "error": "KeyboardInterrupt", "traceback": ""}))
        os._exit(130)
    return handler


@cocotb.test()
async def run_job(dut) -> None:
    spec = json.loads(Path(os.environ["NPU_COSIM_SPEC"]).read_text())
    result_path = Path(os.environ["NPU_COSIM_RESULT"])
    signal.signal(signal.SIGINT, _exit_on_interrupt(result_path))
    outcome: dict = {"ok": False, "error": "SimulatorError",
                     "traceback": "the job did not start"}
    backend = None
    try:
        config = NPUConfig(**spec["config"])
        if not spec.get("internal_clock"):
            Clock(dut.clk, CLOCK_PERIOD_NS, "ns").start()
        window = spec.get("waves_window") or {}
        dut.trace_on.value = 0 if window else 1
        if "from" in window:
            cocotb.start_soon(_cycle_window(dut, window["from"], window.get("to")))
        kernel = (window["kernel"], window.get("occurrence", 1)) if "kernel" in window else None
        recorder = None
        if spec.get("record"):
            from cosim.tb.replay import Recorder
            recorder = Recorder()
        dram = DramTiming.from_dict(spec["dram"]) if spec.get("dram") else DramTiming()
        backend = RtlBackend(dut, config, dram_file=Path(spec["dram_file"]), recorder=recorder,
                             trace_kernel=kernel, dram_timing=dram)
        backend.drive_reset(1)
        # release reset mid-cycle (falling edge), away from the rising edge that samples it
        await Timer(RESET_CYCLES * CLOCK_PERIOD_NS + CLOCK_PERIOD_NS // 2, "ns")
        backend.drive_reset(0)
        job = _load_job(spec["job"])
        # Import the runtime (and with it Amaranth, through hw.isa: about a second) before the
        # clock starts, so that the job's wall time measures simulation and host work only.
        importlib.import_module("sw.runtime")
        t0, c0 = time.perf_counter(), time.process_time()
        result = await bridge(job)(backend, **spec["args"])
        seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
        json.dumps(result)  # must be JSON-serialisable: fail here, with the job's name
        if backend.axi_violation is not None:
            raise AssertionError(str(backend.axi_violation))
        if backend.dram_protocol_errors:
            raise AssertionError(f"the DRAM model saw {backend.dram_protocol_errors} AXI "
                                 "protocol violations (see the simulation log)")
        outcome = {"ok": True, "result": result, "cycles": backend.cycle, "seconds": seconds,
                   "cpu_seconds": cpu_seconds, "regions": backend.regions,
                   "region_log": backend.region_log}
        if recorder is not None:
            outcome["recording"] = recorder.write(
                Path(spec["record"]), end_step=get_sim_time("step"),
                period_steps=convert(CLOCK_PERIOD_NS, "ns", to="step"),
                meta={"job": spec["job"], "args": spec["args"], "config": spec["config"],
                      "design": spec.get("design"), "dram": dram.to_dict()})
    except BaseException as e:
        error = f"{type(e).__name__}: {e}"
        violation = _violation_or_none(backend)
        if violation is not None and not isinstance(e, AssertionError):
            error += f" (and {violation})"
        outcome = {"ok": False, "error": error, "traceback": traceback.format_exc()}
        raise
    finally:
        result_path.write_text(json.dumps(outcome))
