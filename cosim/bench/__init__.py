"""``npu bench``: GEMM roofline sweep, attention-block utilization, co-simulation speed and
Verilator build times, as one JSON document and a printed table.

What is measured
----------------
* **GEMM**: ``M = K = N = size``, random int8 operands, the double-buffered linear kernel
  (:func:`sw.kernels.linear.linear_with_stats`), one RTL simulation per configuration that
  loops over the sizes (:func:`gemm_sweep_job`). Per size: cycles (launch to completion),
  utilization ``MACs / (cycles * PEs)``, the busy counters of the engines over the kernel
  (``Device.counters()``: load/store/matrix/vector busy, DMA busy, DMA-and-matrix
  overlap; ``None`` on the untimed model), every counter of the kernel (``counters``: also
  retired commands, stalls and the bytes read and written on the DRAM port, the latter also on
  the model) and bit-exactness against :func:`sw.golden.linear_int`.
* **Roofline bound** (:func:`roofline`, :mod:`cosim.bench.roofline`, which also has the
  measured points and the plot): ``min(1, bw * OI / PEs)`` with ``OI = MACs / bytes`` where
  ``bytes`` is the least DRAM traffic any kernel must move: int8 ``A`` (M*K) + int8 ``W``
  (K*N) + int8 output (M*N) (not counted: the per-channel parameters, 12 bytes per output
  channel, the command ring and padding), and ``bw`` the memory roof of the run's DRAM timing
  (:func:`cosim.bench.roofline.memory_roof`): the bus or the DRAM bandwidth, whichever is
  lower, the read latency through Little's law with the kernel's own burst lengths (the
  :class:`cosim.bench.bursts.BurstProfile` of its DMA commands, counted from the host side by
  :class:`cosim.bench.bursts.BurstTap`), the DRAM model's idle cycle per burst and the
  backpressure of the run. ``machine_bound`` is the same without the kernel's bursts (bursts
  as long as the DMA makes them): the gap between the two is what short bursts cost. The
  kernel's actual DRAM traffic from its tiling plan (activations and weights as often as the
  tiling reloads them, rows padded to ``spad_row_bytes``, parameters per step) is reported
  beside it as ``kernel_dram_bytes``, and the planner's timing-model estimate as
  ``plan.estimated_cycles``, and the bound of that traffic as ``traffic_bound`` (the same
  memory roof, the tiling's bytes in place of the least ones). ``roofline_path`` of
  :func:`run_bench` draws every measured kernel (actual DRAM bytes from the counters)
  against the roofs of its configuration and DRAM timing.
* **Attention**: :func:`sw.jobs.minilm_block.run_attention_job` (all-MiniLM-L6-v2 layer 0) at
  ``seq_len`` on the RTL of the first configuration; per-stage cycles and utilization.
* **Co-simulation speed**: simulated cycles per wall second of the full NPU under cocotb +
  Verilator, ``RunResult.cycles / RunResult.job_seconds`` per run (includes the host-side
  Python of the runtime and of cocotb), and per GEMM size (kernel cycles / wall time of that
  kernel).
* **Ratio to a pure Verilator C++ harness** (``cosim_speed.verilator_cpp_harness``): the GEMM
  sweep of the first configuration is recorded while it runs under cocotb (every pin value the
  host drove or sampled and every DRAM backdoor file, with its simulated time; see
  :mod:`cosim.tb.replay`), then replayed by ``cosim/native/main.cpp`` linked against the same
  compiled Verilator model, which checks every sampled output and DRAM dump against the
  recording and runs to the same end cycle. Reported: cocotb and native cycles per second
  (wall time, and CPU time, which other processes on the machine disturb less), their ratio
  (target: cocotb >= 0.5x native), the number of checks, and the native build time. Native
  time covers the replay loop only; cocotb time is the whole job (runtime, numpy, golden
  check, recording), so the ratio is what the Python side costs end to end.
* **Build time**: a throwaway configuration (the first one with ``n_sems`` changed, so it has
  its own build directory and the shared caches are not wiped) has its build directory
  removed, then: Verilog generation (Amaranth), the clean Verilator build, and a second,
  cached :func:`cosim.build.build_sim` call are timed.
"""

from __future__ import annotations

import dataclasses
import json
import platform
import shutil
import time
from pathlib import Path

import numpy as np
import numpy.random  # numpy imports it lazily; load it before the timed job

from cosim.bench.bursts import BurstProfile, BurstTap
from cosim.bench.roofline import (
    Roof,
    RooflinePoint,
    attainable,
    gemm_point,
    memory_roof,
    roofline,
    roofline_png,
)
from hw.config import NPUConfig
from hw.isa import ENGINE_NAMES
from sw.dram import DramTiming
from sw.golden import linear_int
from sw.kernels.linear import linear_with_stats
from sw.runtime import Device

__all__ = ["gemm_sweep_job", "roofline", "kernel_dram_bytes", "measure_build", "run_bench",
           "format_bench", "FULL_SIZES", "QUICK_SIZES", "attainable", "RooflinePoint",
           "gemm_point", "roofline_png", "bench_roofline_points", "BENCH_BACKENDS"]

#: Backends :func:`run_bench` runs on: the co-simulated RTL, the untimed functional model and
#: the performance model (:class:`sw.perf.PerfBackend`).
BENCH_BACKENDS = ("rtl", "model", "perf")

FULL_SIZES = (64, 128, 256, 512)
QUICK_SIZES = (64, 128)


# -- analytic figures --------------------------------------------------------------------------

def kernel_dram_bytes(config: NPUConfig, plan) -> dict:
    """DRAM bytes the linear kernel's command stream moves for ``plan`` (padded rows,
    activations and weights as often as the tiling reloads them, parameters per step, the
    output): :func:`sw.kernels.linear.linear_dram_bytes`."""
    from sw.kernels.linear import linear_dram_bytes
    return linear_dram_bytes(config, plan)


# -- the job (runs inside the simulator, or in-process on the model) -----------------------------

def _operands(rng: np.random.Generator, m: int, k: int, n: int):
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    w = rng.integers(-128, 128, (k, n), dtype=np.int8)
    bias = rng.integers(-(1 << 16), 1 << 16, n, dtype=np.int32)
    mult = rng.integers(1 << 30, 1 << 31, n, dtype=np.int64)
    shift = np.full(n, 26 + int(np.log2(64 * 64 * np.sqrt(k))), dtype=np.int64)
    return a, w, bias, mult, shift


def gemm_sweep_job(backend, *, sizes: list[int], seed: int = 0,
                   shapes: list[list[int]] = ()) -> dict:
    """Run one square int8 GEMM per size, then one GEMM per ``(M, K, N)`` of ``shapes``, on
    ``backend`` with the double-buffered linear kernel; return cycles, utilization, busy
    counters and bit-exactness per GEMM (``size`` is None for a non-square shape)."""
    tap = BurstTap(backend, backend.config)
    device = Device(tap, expected_config=backend.config)
    cfg = device.config
    rng = np.random.default_rng(seed)
    rows = []
    for shape in [(s, s, s) for s in sizes] + [tuple(x) for x in shapes]:
        m, k, n = shape
        size = m if m == k == n else None
        a, w, bias, mult, shift = _operands(rng, m, k, n)
        before, bursts0 = device.counters(), tap.snapshot()
        t0 = time.perf_counter()
        out, st = linear_with_stats(device, a, w, bias, mult, shift, double_buffer=True)
        wall = time.perf_counter() - t0
        d = device.counters() - before
        bursts = tap.snapshot() - bursts0
        p = st.plan
        rows.append({
            "size": size, "shape": [m, k, n], "cycles": st.cycles, "macs": st.macs,
            "utilization": st.utilization, "commands": st.n_commands,
            "bit_exact": bool(np.array_equal(out, linear_int(a, w, bias, mult, shift))),
            "busy": {e: d.get(f"busy.{e}") for e in ENGINE_NAMES},
            "dma_busy": d.get("dma_busy"), "overlap": d.get("overlap"), "counters": dict(d),
            "plan": {"m_tile": p.m_tile, "kb": p.kb, "nb": p.nb, "k_chunk": p.k_chunk,
                     "n_group": p.n_group, "double_buffer": p.double_buffer,
                     "estimated_cycles": p.est_cycles},
            "kernel_dram_bytes": kernel_dram_bytes(cfg, p), "bursts": bursts.to_dict(),
            "wall_seconds": round(wall, 3),
        })
    return {"backend": backend.name, "config_name": cfg.spec, "gemm": rows}


# -- analysis ---------------------------------------------------------------------------------

def _analyse_gemm(config: NPUConfig, row: dict, dram: DramTiming) -> dict:
    """Add the roofline bounds under ``dram`` (with the kernel's bursts, and the machine's),
    the ratio and busy fractions to one GEMM row."""
    bursts = BurstProfile.from_dict(row["bursts"])
    rl = roofline(config, *row["shape"], dram=dram, bursts=bursts)
    kb = row["kernel_dram_bytes"]
    reads, writes = kb["total"] - kb["out"], kb["out"]
    traffic = memory_roof(config, reads, writes, dram, bursts)["bytes_per_cycle"]
    traffic_bound = attainable(rl["macs"] / (reads + writes), config.n_pes,
                               traffic) / config.n_pes
    row = dict(row, roofline=rl, traffic_bound=traffic_bound,
               machine_bound=roofline(config, *row["shape"], dram=dram)["bound"])
    u = row["utilization"]
    row["util_over_bound"] = None if u is None else u / rl["bound"]
    c = row["cycles"]
    if c:
        row["fractions"] = {
            "matrix_busy": row["busy"]["matrix"] / c, "dma_busy": row["dma_busy"] / c,
            "overlap": row["overlap"] / c, "vector_busy": row["busy"]["vector"] / c,
            # cycles where the array is busy but not computing useful MACs (pipeline fill and
            # drain, padding): busy-cycle MAC rate versus the peak
            "matrix_busy_efficiency": (row["macs"] / (row["busy"]["matrix"] * config.n_pes)
                                       if row["busy"]["matrix"] else None),
        }
        row["sim_cycles_per_second"] = (c / row["wall_seconds"] if row["wall_seconds"]
                                        else None)
        kb = row["kernel_dram_bytes"]["total"]
        row["kernel_bus_bytes_per_cycle"] = kb / c
    else:
        row["fractions"] = None
        row["sim_cycles_per_second"] = None
        row["kernel_bus_bytes_per_cycle"] = None
    row["why"] = _explain(row)
    return row


def _explain(row: dict) -> str:
    f = row["fractions"]
    if not f:
        return "untimed backend"
    if f["matrix_busy"] >= 0.9 and (f["matrix_busy_efficiency"] or 0) < 0.9:
        return "array busy but under-filled (pipeline fill/drain per MATMUL)"
    if f["matrix_busy"] < 0.9:
        exposed_dma = f["dma_busy"] - f["overlap"]
        if exposed_dma > 0.1:
            return f"matrix idle {1 - f['matrix_busy']:.0%}; DMA not hidden {exposed_dma:.0%}"
        return f"matrix idle {1 - f['matrix_busy']:.0%} (launch/sync/vector/ordering)"
    return "near peak"


# -- build timing -----------------------------------------------------------------------------

def measure_build(config: NPUConfig) -> dict:
    """Clean and cached Verilator build times on a throwaway copy of ``config``.

    The copy differs in ``n_sems`` (so it has its own ``build/<name>/``); only that directory is
    removed."""
    from cosim.build import BUILD_ROOT, build_sim, design_tag, generate_verilog

    throwaway = dataclasses.replace(config, n_sems=15 if config.n_sems != 15 else 14)
    tag_dir = BUILD_ROOT / design_tag(throwaway)
    if tag_dir.name in ("", ".") or tag_dir.parent != BUILD_ROOT:
        raise RuntimeError(f"refusing to remove {tag_dir}")
    shutil.rmtree(tag_dir, ignore_errors=True)
    t0 = time.perf_counter()
    generate_verilog(throwaway)
    verilog_s = time.perf_counter() - t0
    clean = build_sim(throwaway)
    cached = build_sim(throwaway)
    return {"config_name": throwaway.spec, "build_dir": str(tag_dir),
            "verilog_seconds": round(verilog_s, 2),
            "verilator_clean_seconds": round(clean.seconds, 2), "clean_was_cached": clean.cached,
            "clean_total_seconds": round(verilog_s + clean.seconds, 2),
            "cached_seconds": round(cached.seconds, 3), "cached_was_cached": cached.cached}


# -- driver -----------------------------------------------------------------------------------

def measure_native(config: NPUConfig, run, recording: Path, *,
                   clean_build: bool = False) -> dict:
    """Build the native harness (``clean_build``: even if cached, to time it) and replay
    ``recording`` of the cocotb run ``run`` (a :class:`cosim.tb.harness.RunResult`); the speeds,
    their ratio and the replay checks."""
    from cosim.tb.replay import build_native, run_native

    b = build_native(config, force=clean_build)
    n = run_native(b.exe, recording)
    c_wall = run.cycles / run.job_seconds if run.job_seconds else None
    c_cpu = run.cycles / run.job_cpu_seconds if run.job_cpu_seconds else None
    n_wall = n.cycles / n.wall_seconds if n.wall_seconds else None
    n_cpu = n.cycles / n.cpu_seconds if n.cpu_seconds else None
    ratio = c_wall / n_wall if c_wall and n_wall else None
    rec = run.recording or {}
    return {
        "job": "GEMM sweep (this bench's run on the first configuration)",
        "config_name": config.spec,
        "cycles_cocotb": run.cycles, "cycles_native": n.cycles,
        "cycles_agree": run.cycles == n.cycles,
        "replay_matches": n.ok and run.cycles == n.cycles,
        "checks": n.checks, "mismatches": n.mismatches, "first_mismatch": n.first_mismatch,
        "recording": {k: rec.get(k) for k in ("events", "counts", "payload_bytes",
                                              "file_bytes", "path")},
        "cocotb_wall_seconds": round(run.job_seconds, 3),
        "cocotb_cpu_seconds": (round(run.job_cpu_seconds, 3)
                               if run.job_cpu_seconds is not None else None),
        "native_wall_seconds": round(n.wall_seconds, 3),
        "native_cpu_seconds": round(n.cpu_seconds, 3),
        "cocotb_cycles_per_second": c_wall, "native_cycles_per_second": n_wall,
        "cocotb_cpu_cycles_per_second": c_cpu, "native_cpu_cycles_per_second": n_cpu,
        "ratio": ratio, "ratio_cpu": c_cpu / n_cpu if c_cpu and n_cpu else None,
        "target_ratio": 0.5, "meets_target": ratio is not None and ratio >= 0.5,
        "native_build_seconds": round(b.seconds, 2), "native_build_cached": b.cached,
        "native_build": "cosim/native/main.cpp compiled with the model's flags (-O2) and "
                        "linked against the cocotb build's compiled model (Vtop__ALL.a, "
                        "verilated*.o); the model itself is built once, by the cocotb build",
    }


def _local_backend(backend: str, config: NPUConfig, dram: DramTiming):
    """The in-process backend ``"model"`` or ``"perf"`` for ``config``."""
    if backend == "model":
        from sw.model import ModelBackend
        return ModelBackend(config)
    from sw.perf import PerfBackend
    return PerfBackend(config, dram=dram)


def _run_info(label: str, r) -> dict:
    return {"run": label, "cycles": r.cycles, "job_seconds": round(r.job_seconds, 2),
            "build_seconds": round(r.build_seconds, 2),
            "cycles_per_second": r.cycles / r.job_seconds if r.job_seconds else None}


def _bench_gemm(out: dict, cfg: NPUConfig, sizes: list[int], *, backend: str, seed: int,
                dram: DramTiming, record: bool, build_timing: bool, say,
                shapes: list[list[int]] = ()) -> None:
    """The GEMM sweep of one configuration into ``out["gemm"]`` (and its speed and, with
    ``record``, the native replay into ``out["cosim_speed"]``)."""
    if backend != "rtl":
        res = gemm_sweep_job(_local_backend(backend, cfg, dram), sizes=sizes, seed=seed,
                             shapes=shapes)
        run_info = None
    else:
        from cosim.build import BUILD_ROOT, design_tag
        from cosim.tb.harness import run_job
        rec = BUILD_ROOT / design_tag(cfg) / "runs" / "bench_gemm" / "gemm.rec" if record else None
        job = {"sizes": sizes, "seed": seed, "shapes": shapes}
        r = run_job(cfg, "cosim.bench:gemm_sweep_job", job, name="bench_gemm", record=rec,
                    dram=dram)
        res = r.result
        if rec is not None:
            say(f"replaying the recorded run ({r.recording['events']} events, "
                f"{r.cycles} cycles) in the pure Verilator C++ harness...")
            out["cosim_speed"]["verilator_cpp_harness"] = measure_native(
                cfg, r, rec, clean_build=build_timing)
        run_info = _run_info(f"gemm {cfg.spec}", r)
        out["cosim_speed"]["runs"].append(run_info)
    out["gemm"][cfg.spec] = {"rows": [_analyse_gemm(cfg, row, dram) for row in res["gemm"]],
                             "n_pes": cfg.n_pes, "run": run_info}


def _bench_attention(out: dict, cfg: NPUConfig, seq_len: int, *, backend: str,
                     dram: DramTiming) -> None:
    args = {"config": cfg.to_dict(), "seq_len": seq_len}
    if backend != "rtl":
        from sw.jobs.minilm_block import run_attention_job
        res, run_info = run_attention_job(_local_backend(backend, cfg, dram), **args), None
    else:
        from cosim.tb.harness import run_job
        r = run_job(cfg, "sw.jobs.minilm_block:run_attention_job", args,
                    name=f"bench_attention_L{seq_len}", dram=dram)
        res = r.result
        run_info = _run_info(f"attention L={seq_len} {cfg.spec}", r)
        out["cosim_speed"]["runs"].append(run_info)
    out["attention"] = {"config_name": cfg.spec, "seq_len": seq_len, "kv_len": res["kv_len"],
                        "stages": res["stages"], "bit_exact": res["bit_exact"],
                        "sqnr_db": res["sqnr_db"], "run": run_info}


def _gemm_list(sizes, shapes) -> str:
    """The GEMMs of a sweep in words, only the kinds there are: ``"sizes 64, 128; shapes
    1x384x1536"``."""
    parts = [f"sizes {', '.join(map(str, sizes))}"] if sizes else []
    if shapes:
        parts.append(f"shapes {', '.join('x'.join(map(str, s)) for s in shapes)}")
    return "; ".join(parts) or "no GEMM"


def run_bench(configs: list[NPUConfig], sizes: list[int], *, attention_len: int = 128,
              backend: str = "rtl", build_timing: bool = True, seed: int = 0,
              native: bool = True, progress=None, json_path: Path | None = None,
              dram: DramTiming | str | None = None, roofline_path: Path | None = None,
              shapes: list[list[int]] = ()) -> dict:
    """Run the whole bench; ``json_path`` is rewritten after every step (a long run keeps
    what it has). ``shapes``: further GEMMs ``(M, K, N)`` after the square sizes (e.g. a
    GEMV, ``M = 1``).

    Parameters
    ----------
    backend : str
        One of :data:`BENCH_BACKENDS`: ``"rtl"`` (co-simulation), ``"model"`` (untimed) or
        ``"perf"`` (the performance model; no co-simulation speed or build timing).
    native : bool
        RTL only: record the first configuration's GEMM run and replay it in the pure
        Verilator C++ harness (:func:`measure_native`).
    dram : DramTiming or str, optional
        DRAM timing of every run (RTL and perf) and of the roofline bound; default ideal.
    roofline_path : Path, optional
        Write the roofline plot of the measured GEMMs there (PNG; timed backends only).

    Raises
    ------
    ValueError
        On an unknown backend, or a DRAM timing other than ideal on the untimed model.
    """
    if backend not in BENCH_BACKENDS:
        raise ValueError(f"backend must be one of {BENCH_BACKENDS}, got {backend!r}")
    dram = DramTiming.parse(dram)
    if backend == "model" and not dram.is_ideal:
        raise ValueError("the functional model is untimed: DRAM timing needs rtl or perf")

    def say(msg: str) -> None:
        if progress:
            progress(msg)

    out: dict = {
        "backend": backend, "sizes": list(sizes), "shapes": [list(x) for x in shapes],
        "configs": [c.spec for c in configs],
        "host": {"machine": platform.machine(), "python": platform.python_version()},
        "dram": dram.to_dict(),
        "roofline_definition": (
            "bound = min(1, bw * OI / PEs); OI = MACs / (A + W + output bytes, int8, unpadded; "
            "parameters and commands not counted); bw = (R + W) / max((R + W) / min(bus, "
            "dram bw), R / read_bw, W / write_bw), read_bw = min(bus * b / ((b + 1) / "
            "(1 - r_stall)), dma_outstanding * b * bus / (read_latency + b - 1)) for the "
            "kernel's mean read burst of b beats (Little's law), write_bw likewise; "
            "machine_bound: the same with the longest bursts and no inter-burst cycle "
            "(cosim/bench/roofline.py)"),
        "gemm": {}, "attention": None, "cosim_speed": {"runs": []}, "build": None,
    }
    out["cosim_speed"]["verilator_cpp_harness"] = (
        f"not measured ({backend} backend)" if backend != "rtl"
        else "not measured (disabled)" if not native else "not measured (yet)")

    def dump() -> None:
        if json_path:
            json_path.parent.mkdir(parents=True, exist_ok=True)
            json_path.write_text(json.dumps(out, indent=2) + "\n")

    if backend == "rtl" and build_timing:
        say(f"timing a clean Verilator build of a throwaway {configs[0].spec} copy...")
        out["build"] = measure_build(configs[0])
        dump()

    for ci, cfg in enumerate(configs):
        say(f"GEMM sweep: {_gemm_list(sizes, shapes)} on {cfg.spec} ({backend}, "
            f"DRAM {dram.name})...")
        _bench_gemm(out, cfg, list(sizes), backend=backend, seed=seed, dram=dram,
                    record=backend == "rtl" and native and ci == 0, build_timing=build_timing,
                    say=say, shapes=[list(x) for x in shapes])
        dump()

    if attention_len:
        say(f"MiniLM attention block L={attention_len} on {configs[0].spec} ({backend})...")
        _bench_attention(out, configs[0], attention_len, backend=backend, dram=dram)
        dump()
    runs = out["cosim_speed"]["runs"]
    if runs:
        tot_c = sum(r["cycles"] for r in runs)
        tot_s = sum(r["job_seconds"] for r in runs)
        out["cosim_speed"]["overall_cycles_per_second"] = tot_c / tot_s if tot_s else None
    if roofline_path is not None and backend != "model":
        out["roofline_png"] = str(roofline_png(
            roofline_path, bench_roofline_points(out, configs),
            title=f"npu bench: GEMM kernels ({backend}, DRAM {dram.name})"))
    dump()
    return out


def bench_roofline_points(res: dict, configs: list[NPUConfig]) -> list[RooflinePoint]:
    """The measured GEMMs of :func:`run_bench`'s result as roofline points: actual DRAM bytes
    (``bytes_read + bytes_written`` of the kernel's counters, ring fetches included) and
    cycles, against the machine roof of each configuration under the run's DRAM timing
    (:func:`memory_roof` of all its kernels' traffic together, without a burst profile)."""
    dram = DramTiming.from_dict(res["dram"])
    points = []
    for cfg in configs:
        rows = res["gemm"][cfg.spec]["rows"]
        reads = sum(r["counters"]["bytes_read"] for r in rows)
        writes = sum(r["counters"]["bytes_written"] for r in rows)
        bw = memory_roof(cfg, reads, writes, dram)["bytes_per_cycle"]
        roof = Roof(f"{cfg.spec}, {dram.name}", cfg.n_pes, bw)
        for r in rows:
            c = r["counters"]
            points.append(gemm_point(f"{cfg.spec} {'x'.join(map(str, r['shape']))}",
                                     *r["shape"], dram_bytes=c["bytes_read"]
                                     + c["bytes_written"], cycles=r["cycles"], roof=roof))
    return points


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _memory_label(mem: dict) -> str:
    """``"5.33 latency"``: the memory roof in B/cycle and what sets it."""
    why = "latency" if mem["latency_limited"] else mem["limit"]
    return f"{mem['bytes_per_cycle']:.2f} {why[:5]}"


def format_bench(res: dict) -> str:
    """The printed tables of :func:`run_bench`'s result."""
    dram = res.get("dram", {}).get("name", "ideal")
    rows = [(name, r, r["size"] or "x".join(map(str, r["shape"])))
            for name, g in res["gemm"].items() for r in g["rows"]]
    # columns as wide as their longest entry (configuration names, GEMV shapes), one space apart
    cw = max([8] + [len(name) + 1 for name, _, _ in rows])
    sw = max([5] + [len(str(label)) for _, _, label in rows])
    lines = [f"npu bench ({res['backend']} backend, DRAM {dram})", "",
             "GEMM M=K=N=size, int8, double-buffered linear kernel; bound = roofline of A+W+out "
             "bytes under the run's DRAM timing and the kernel's bursts (traf: of the bytes "
             "the tiling moves; mach: longest bursts; mem: the memory roof in B/cycle and "
             "what limits it)",
             f"{'config':<{cw}}{'size':>{sw}}{'cycles':>10}{'util':>8}{'bound':>8}{'traf':>7}"
             f"{'mach':>7}"
             f"{'u/bnd':>7}{'OI':>7}{'mem':>13}{'mat.busy':>9}{'dma.busy':>9}{'overlap':>8}"
             f"{'B/cyc':>7}{'kcyc/s':>8}  exact  note"]
    for name, r, label in rows:
        f = r["fractions"] or {}
        ratio = "-" if r["util_over_bound"] is None else f"{r['util_over_bound']:.2f}"
        bpc = "-" if r["kernel_bus_bytes_per_cycle"] is None \
            else f"{r['kernel_bus_bytes_per_cycle']:.2f}"
        sp = "-" if not r["sim_cycles_per_second"] \
            else f"{r['sim_cycles_per_second'] / 1e3:.1f}"
        lines.append(
            f"{name:<{cw}}{label:>{sw}}{r['cycles']:>10}{_pct(r['utilization']):>8}"
            f"{_pct(r['roofline']['bound']):>8}{_pct(r.get('traffic_bound')):>7}"
            f"{_pct(r.get('machine_bound')):>7}"
            f"{ratio:>7}{r['roofline']['operational_intensity']:>7.1f}"
            f"{_memory_label(r['roofline']['memory']):>13}"
            f"{_pct(f.get('matrix_busy')):>9}{_pct(f.get('dma_busy')):>9}"
            f"{_pct(f.get('overlap')):>8}{bpc:>7}{sp:>8}  "
            f"{'yes' if r['bit_exact'] else 'NO':<5}  {r['why']}")
    lines.append("(mat.busy/dma.busy/overlap: fraction of the kernel's cycles; B/cyc: DRAM bytes "
                 "the kernel actually moves per cycle; kcyc/s: simulated kcycles per wall s)")
    att = res.get("attention")
    if att:
        lines += ["", f"MiniLM-L6 layer-0 attention block, L={att['seq_len']} on "
                      f"{att['config_name']} (bit-exact: {'yes' if att['bit_exact'] else 'NO'})",
                  f"{'stage':<13}{'cycles':>10}{'MACs':>12}{'util':>8}"]
        for s in att["stages"]:
            lines.append(f"{s['name']:<13}{s['cycles']:>10}{s['macs']:>12}"
                         f"{_pct(s['utilization']):>8}")
    sp = res["cosim_speed"]
    if sp["runs"]:
        lines += ["", "co-simulation speed (cocotb + Verilator, full NPU, whole job incl. host "
                      "Python)"]
        rw = max([28] + [len(r["run"]) + 1 for r in sp["runs"]])   # configuration names
        for r in sp["runs"]:
            lines.append(f"  {r['run']:<{rw}}{r['cycles']:>10} cycles {r['job_seconds']:>8.1f} s "
                         f"{r['cycles_per_second']:>9.0f} cycles/s")
        nat = sp["verilator_cpp_harness"]
        if isinstance(nat, dict):
            def cps(v) -> str:
                return "-" if v is None else f"{v:.0f}"

            def rat(v) -> str:
                return "-" if v is None else f"{v:.2f}x"

            lines += [
                f"  same run replayed in a pure Verilator C++ harness ({nat['config_name']}, "
                f"{nat['cycles_native']} cycles, {nat['checks']} checks, "
                + ("replay matches bit for bit, cycles agree)" if nat["replay_matches"]
                   else f"REPLAY MISMATCH: {nat['first_mismatch']})"),
                f"  {'':<{rw}}{'wall cycles/s':>14}{'cpu cycles/s':>14}",
                f"  {'cocotb + Python runtime':<{rw}}{cps(nat['cocotb_cycles_per_second']):>14}"
                f"{cps(nat['cocotb_cpu_cycles_per_second']):>14}",
                f"  {'native C++ replay':<{rw}}{cps(nat['native_cycles_per_second']):>14}"
                f"{cps(nat['native_cpu_cycles_per_second']):>14}",
                f"  {'ratio cocotb / native':<{rw}}{rat(nat['ratio']):>14}"
                f"{rat(nat['ratio_cpu']):>14}"
                f"   (target >= {nat['target_ratio']}x: "
                f"{'met' if nat['meets_target'] else 'NOT met'})",
                f"  native harness build: {nat['native_build_seconds']} s"
                + (" (cached)" if nat["native_build_cached"] else "")
                + " (main.cpp linked against the cocotb build's compiled model)"]
        else:
            lines.append(f"  pure Verilator C++ harness: {nat}")
    b = res.get("build")
    if b:
        lines += ["", f"Verilator build ({b['config_name']}, throwaway): Verilog "
                      f"{b['verilog_seconds']} s + Verilator clean {b['verilator_clean_seconds']} "
                      f"s = {b['clean_total_seconds']} s; cached {b['cached_seconds']} s"]
    return "\n".join(lines)
