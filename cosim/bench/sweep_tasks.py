"""The three kinds of work of ``npu sweep``, as plain functions of JSON values.

Each runs the same in the driver process or as a Ray task on any worker (arguments and results
are JSON values; nothing is shared but the files of the task's own ``workdir``):

* :func:`model_point`: one workload on the performance model (:class:`sw.perf.PerfBackend`);
* :func:`area_point`: ECP5 synthesis of one hardware configuration in its own folder
  (optionally placed and routed for Fmax);
* :func:`rtl_point`: one workload on the co-simulated RTL (the Verilator build of the
  configuration is shared and locked, :func:`cosim.build.build_sim`; the run directory is the
  task's own).

A failure that belongs to the point (a workload the configuration cannot run, a device error, a
tool failure) is returned as ``{"status": "error",
"error": ...}`` so the sweep goes on; only a bug raises.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from cosim.bench.bursts import BurstProfile
from cosim.bench.roofline import attainable, memory_roof
from cosim.fpga.pnr import PNR_FREQ_MHZ
from hw.config import NPUConfig
from sw.dram import DramTiming

__all__ = ["model_point", "area_point", "rtl_point", "roofline_figures", "with_roofline"]


def roofline_figures(config: NPUConfig, dram: DramTiming, res: dict) -> dict:
    """The honest roofline of a measured workload (``res`` of
    :func:`cosim.bench.workloads.workload_job`): its actual DRAM traffic (counters), the
    memory roof of that traffic under ``dram`` with the workload's bursts
    (:func:`cosim.bench.roofline.memory_roof`), its intensity, the bound on utilization and
    whether it is compute-bound (intensity at or right of the ridge)."""
    c = res["counters"]
    reads, writes = c.get("bytes_read", 0), c.get("bytes_written", 0)
    traffic = reads + writes
    mem = memory_roof(config, reads, writes, dram, BurstProfile.from_dict(res["bursts"]))
    bw = mem["bytes_per_cycle"]
    intensity = res["macs"] / traffic if traffic else float("inf")
    bound = attainable(intensity, config.n_pes, bw) / config.n_pes
    return {"dram_bytes": traffic, "intensity": intensity, "memory_bytes_per_cycle": bw,
            "memory_limit": "latency" if mem["latency_limited"] else mem["limit"],
            "ridge": config.n_pes / bw, "bound": bound, "compute_bound": bound >= 1.0}


def with_roofline(config: NPUConfig, dram: DramTiming, res: dict) -> dict:
    """``res`` (a model or RTL result) with its ``roofline`` computed afresh from its counters
    and bursts: the cache holds what was measured, and a change to the roofline's code (which
    does not key the cache) applies to cached results too. Errors are returned as they are."""
    if res.get("status") != "ok":
        return res
    return res | {"roofline": roofline_figures(config, dram, res)}


def model_point(config: str, dram: str, workload: str, seed: int = 0) -> dict:
    """``workload`` on the performance model of ``config`` (a spec) under ``dram`` (a spec):
    the workload's figures, its roofline (:func:`roofline_figures`) and the model's wall time;
    or ``{"status": "error", "error"}``."""
    from cosim.bench.workloads import WorkloadError, workload_job
    from sw.backend import BackendError
    from sw.perf import PerfBackend
    from sw.runtime import NPUError

    cfg, timing = NPUConfig.parse(config), DramTiming.parse(dram)
    t0 = time.perf_counter()
    try:
        backend = PerfBackend(cfg, dram=timing)
        res = workload_job(backend, workload=workload, seed=seed)
    except (WorkloadError, NotImplementedError, NPUError, BackendError, ValueError) as e:
        return {"status": "error", "error": f"{type(e).__name__}: {e}"}
    res.update(status="ok", seconds=round(time.perf_counter() - t0, 3),
               modelled_cycles=backend.cycle, roofline=roofline_figures(cfg, timing, res))
    return res


def area_point(config: str, workdir: str, *, pnr: bool = False, route: bool = True,
               freq_mhz: float = PNR_FREQ_MHZ, timeout: float | None = None) -> dict:
    """ECP5 synthesis (classic ABC mapping for every configuration alike) of ``config`` in
    ``workdir``; with ``pnr``, nextpnr-ecp5 placement (and routing with ``route``) for Fmax.

    Returns
    -------
    dict
        ``lut4``, ``ff``, ``mult18`` (MULT18X18D cells), ``dp16kd`` (DP16KD cells), ``dsp`` and
        ``bram`` (:class:`cosim.fpga.AreaRow`'s classes), ``lutram``, ``fmax_mhz``,
        ``fmax_routed``, ``seconds`` per step, ``notes``, ``memory_problems``; or ``{"status":
        "error", "error"}`` if a tool failed.
    """
    from cosim.fpga import FpgaToolError, ToolMissingError, area, parse_yosys_stat

    cfg = NPUConfig.parse(config)
    out = Path(workdir)
    t0 = time.perf_counter()
    try:
        row = area(cfg, pnr=pnr, route=route, blocks=False, out_dir=out, freq_mhz=freq_mhz,
                   timeout=timeout, abc9=False)
    except (FpgaToolError, ToolMissingError) as e:
        return {"status": "error", "error": f"{type(e).__name__}: {e}"}
    stat_dir = out / ("ecp5-pnr" if pnr else "ecp5")
    top = "pnr_top" if pnr else "npu"
    _, cells = parse_yosys_stat(json.loads((stat_dir / "stat.json").read_text()), top=top)
    return {"status": "ok" if row.error is None else "error", "error": row.error,
            "lut4": row.lut4, "ff": row.ff, "mult18": cells.get("MULT18X18D", 0),
            "dp16kd": cells.get("DP16KD", 0), "dsp": row.dsp, "bram": row.bram,
            "lutram": row.lutram, "fmax_mhz": row.fmax_mhz, "fmax_routed": row.fmax_routed,
            "harness": row.harness, "seconds": row.seconds, "notes": row.notes,
            "memory_problems": row.memory_problems,
            "wall_seconds": round(time.perf_counter() - t0, 1)}


def rtl_point(config: str, dram: str, workload: str, name: str, seed: int = 0) -> dict:
    """``workload`` on the co-simulated RTL of ``config`` under ``dram``, in the run directory
    ``build/<config>/runs/<name>``: the workload's figures plus ``job_seconds`` (also as
    ``seconds``), ``build_seconds``, ``sim_cycles`` (the whole simulation) and the roofline of
    the run (:func:`roofline_figures`); or ``{"status": "error", "error"}``."""
    from cosim.build import CosimBuildError
    from cosim.tb.harness import CosimError, run_job

    cfg = NPUConfig.parse(config)
    try:
        r = run_job(cfg, "cosim.bench.workloads:workload_job",
                    {"workload": workload, "seed": seed}, name=name, dram=dram)
    except (CosimError, CosimBuildError) as e:
        return {"status": "error", "error": f"{type(e).__name__}: {e}"}
    res = dict(r.result)
    res.update(status="ok", job_seconds=round(r.job_seconds, 2), seconds=round(r.job_seconds, 2),
               build_seconds=round(r.build_seconds, 2), sim_cycles=r.cycles,
               roofline=roofline_figures(cfg, DramTiming.parse(dram), res))
    return res
