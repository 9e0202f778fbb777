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
  measured points and the plot): ``min(1, bw * OI / PEs)`` with ``bw`` = AXI data bytes
  per cycle (one beat per cycle; reads and writes counted against the same ``bw``, which is
  conservative if the bus could read and write at once) and ``OI = MACs / bytes`` where
  ``bytes`` is the least DRAM traffic any kernel must move: int8 ``A`` (M*K) + int8 ``W``
  (K*N) + int8 output (M*N). Not counted: the per-channel parameters (bias, multiplier,
  shift; 12 bytes per output channel), the command ring and padding. The kernel's actual
  DRAM traffic from its tiling plan (activations and weights as often as the tiling reloads
  them, rows padded to ``spad_row_bytes``, parameters per step) is reported beside it as
  ``kernel_dram_bytes``, and the planner's timing-model estimate as
  ``plan.estimated_cycles``.
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

from cosim.bench.roofline import RooflinePoint, attainable, gemm_point, roofline, roofline_png
from hw.config import NPUConfig
from hw.isa import ENGINE_NAMES
from sw.golden import linear_int
from sw.kernels.linear import linear_with_stats
from sw.runtime import Device

__all__ = ["gemm_sweep_job", "roofline", "kernel_dram_bytes", "measure_build", "run_bench",
           "format_bench", "FULL_SIZES", "QUICK_SIZES", "attainable", "RooflinePoint",
           "gemm_point", "roofline_png"]

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
    device = Device(backend)
    cfg = device.config
    rng = np.random.default_rng(seed)
    rows = []
    for shape in [(s, s, s) for s in sizes] + [tuple(x) for x in shapes]:
        m, k, n = shape
        size = m if m == k == n else None
        a, w, bias, mult, shift = _operands(rng, m, k, n)
        before = device.counters()
        t0 = time.perf_counter()
        out, st = linear_with_stats(device, a, w, bias, mult, shift, double_buffer=True)
        wall = time.perf_counter() - t0
        d = device.counters() - before
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
            "kernel_dram_bytes": kernel_dram_bytes(cfg, p),
            "wall_seconds": round(wall, 3),
        })
    return {"backend": backend.name, "config_name": cfg.name, "gemm": rows}


# -- analysis ---------------------------------------------------------------------------------

def _analyse_gemm(config: NPUConfig, row: dict) -> dict:
    """Add the roofline bound, the ratio and busy fractions to one GEMM row."""
    rl = roofline(config, *row["shape"])
    row = dict(row, roofline=rl)
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
    return {"config_name": throwaway.name, "build_dir": str(tag_dir),
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
        "config_name": config.name,
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


def run_bench(configs: list[NPUConfig], sizes: list[int], *, attention_len: int = 128,
              backend: str = "rtl", build_timing: bool = True, seed: int = 0,
              native: bool = True, progress=None, json_path: Path | None = None,
              shapes: list[list[int]] = ()) -> dict:
    """Run the whole bench; ``json_path`` is rewritten after every step (a long run keeps
    what it has). ``native``: record the first configuration's GEMM run and replay it in the
    pure Verilator C++ harness (:func:`measure_native`). ``shapes``: further GEMMs
    ``(M, K, N)`` after the square sizes (e.g. a GEMV, ``M = 1``)."""
    def say(msg: str) -> None:
        if progress:
            progress(msg)

    out: dict = {
        "backend": backend, "sizes": list(sizes), "shapes": [list(x) for x in shapes],
        "configs": [c.name for c in configs],
        "host": {"machine": platform.machine(), "python": platform.python_version()},
        "roofline_definition": (
            "bound = min(1, bus_bytes_per_cycle * OI / PEs); bus_bytes_per_cycle = AXI data "
            "bytes (one beat per cycle, reads and writes against the same budget); OI = MACs / "
            "(A + W + output bytes, int8, unpadded; parameters and commands not counted)"),
        "gemm": {}, "attention": None, "cosim_speed": {"runs": []}, "build": None,
    }
    out["cosim_speed"]["verilator_cpp_harness"] = (
        "not measured (model backend)" if backend == "model"
        else "not measured (disabled)" if not native else "not measured (yet)")

    def dump() -> None:
        if json_path:
            json_path.parent.mkdir(parents=True, exist_ok=True)
            json_path.write_text(json.dumps(out, indent=2) + "\n")

    if backend == "rtl" and build_timing:
        say(f"timing a clean Verilator build of a throwaway {configs[0].name} copy...")
        out["build"] = measure_build(configs[0])
        dump()

    for ci, cfg in enumerate(configs):
        say(f"GEMM sweep {list(sizes)} {[list(x) for x in shapes]} on {cfg.name} ({backend})...")
        job_args = {"sizes": list(sizes), "seed": seed, "shapes": [list(x) for x in shapes]}
        if backend == "model":
            from sw.model import ModelBackend
            res = gemm_sweep_job(ModelBackend(cfg), **job_args)
            run_info = None
        else:
            from cosim.build import BUILD_ROOT, design_tag
            from cosim.tb.harness import run_job
            record = (BUILD_ROOT / design_tag(cfg) / "runs" / "bench_gemm" / "gemm.rec"
                      if native and ci == 0 else None)
            r = run_job(cfg, "cosim.bench:gemm_sweep_job", job_args, name="bench_gemm",
                        record=record)
            res = r.result
            if record is not None:
                say(f"replaying the recorded run ({r.recording['events']} events, "
                    f"{r.cycles} cycles) in the pure Verilator C++ harness...")
                out["cosim_speed"]["verilator_cpp_harness"] = measure_native(
                    cfg, r, record, clean_build=build_timing)
            run_info = {"run": f"gemm {cfg.name}", "cycles": r.cycles,
                        "job_seconds": round(r.job_seconds, 2),
                        "build_seconds": round(r.build_seconds, 2),
                        "cycles_per_second": r.cycles / r.job_seconds if r.job_seconds else None}
        out["gemm"][cfg.name] = {"rows": [_analyse_gemm(cfg, row) for row in res["gemm"]],
                                 "n_pes": cfg.n_pes, "run": run_info}
        if run_info:
            out["cosim_speed"]["runs"].append(run_info)
        dump()

    if attention_len:
        cfg = configs[0]
        say(f"MiniLM attention block L={attention_len} on {cfg.name} ({backend})...")
        args = {"config": cfg.to_dict(), "seq_len": attention_len}
        if backend == "model":
            from sw.jobs.minilm_block import run_attention_job
            from sw.model import ModelBackend
            res, run_info = run_attention_job(ModelBackend(cfg), **args), None
        else:
            from cosim.tb.harness import run_job
            r = run_job(cfg, "sw.jobs.minilm_block:run_attention_job", args,
                        name=f"bench_attention_L{attention_len}")
            res = r.result
            run_info = {"run": f"attention L={attention_len} {cfg.name}", "cycles": r.cycles,
                        "job_seconds": round(r.job_seconds, 2),
                        "build_seconds": round(r.build_seconds, 2),
                        "cycles_per_second": r.cycles / r.job_seconds if r.job_seconds else None}
            out["cosim_speed"]["runs"].append(run_info)
        out["attention"] = {"config_name": cfg.name, "seq_len": attention_len,
                            "kv_len": res["kv_len"], "stages": res["stages"],
                            "bit_exact": res["bit_exact"], "sqnr_db": res["sqnr_db"],
                            "run": run_info}
        dump()
    runs = out["cosim_speed"]["runs"]
    if runs:
        tot_c = sum(r["cycles"] for r in runs)
        tot_s = sum(r["job_seconds"] for r in runs)
        out["cosim_speed"]["overall_cycles_per_second"] = tot_c / tot_s if tot_s else None
    dump()
    return out


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def format_bench(res: dict) -> str:
    """The printed tables of :func:`run_bench`'s result."""
    lines = [f"npu bench ({res['backend']} backend)", "",
             "GEMM M=K=N=size, int8, double-buffered linear kernel; bound = roofline "
             "(A+W+out bytes, AXI bytes/cycle)",
             f"{'config':<8}{'size':>5}{'cycles':>10}{'util':>8}{'bound':>8}{'u/bnd':>7}"
             f"{'OI':>7}{'mat.busy':>9}{'dma.busy':>9}{'overlap':>8}{'B/cyc':>7}"
             f"{'kcyc/s':>8}  exact  note"]
    for name, g in res["gemm"].items():
        for r in g["rows"]:
            f = r["fractions"] or {}
            ratio = "-" if r["util_over_bound"] is None else f"{r['util_over_bound']:.2f}"
            bpc = "-" if r["kernel_bus_bytes_per_cycle"] is None \
                else f"{r['kernel_bus_bytes_per_cycle']:.2f}"
            sp = "-" if not r["sim_cycles_per_second"] \
                else f"{r['sim_cycles_per_second'] / 1e3:.1f}"
            label = r["size"] or "x".join(map(str, r["shape"]))
            lines.append(
                f"{name:<8}{label:>5}{r['cycles']:>10}{_pct(r['utilization']):>8}"
                f"{_pct(r['roofline']['bound']):>8}{ratio:>7}"
                f"{r['roofline']['operational_intensity']:>7.1f}"
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
        for r in sp["runs"]:
            lines.append(f"  {r['run']:<28}{r['cycles']:>10} cycles {r['job_seconds']:>8.1f} s "
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
                f"  {'':<28}{'wall cycles/s':>14}{'cpu cycles/s':>14}",
                f"  {'cocotb + Python runtime':<28}{cps(nat['cocotb_cycles_per_second']):>14}"
                f"{cps(nat['cocotb_cpu_cycles_per_second']):>14}",
                f"  {'native C++ replay':<28}{cps(nat['native_cycles_per_second']):>14}"
                f"{cps(nat['native_cpu_cycles_per_second']):>14}",
                f"  {'ratio cocotb / native':<28}{rat(nat['ratio']):>14}{rat(nat['ratio_cpu']):>14}"
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
