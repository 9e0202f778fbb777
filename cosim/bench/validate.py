"""Validation of the performance model (:mod:`sw.perf`) against the RTL, counter by counter.

Every workload of :data:`sw.perf.corpus.WORKLOADS` runs on both backends -- the Verilated RTL
through :func:`cosim.tb.harness.run_job` and :class:`sw.perf.PerfBackend` in this process -- as the
same job (:func:`corpus_job`): a fresh :class:`sw.runtime.Device`, a counter snapshot, the
workload, a second snapshot. The difference of the snapshots (every counter of
:data:`hw.isa.COUNTER_NAMES` and ``cycles``) is compared:

* **timing counters** (``cycles``, busy, stall, ``dma_busy``, ``overlap``): relative error
  ``|model - rtl| / rtl``; a counter passes if ``|model - rtl| <= max(REL_TOL * rtl,
  ABS_TOL)``: the absolute tolerance (:data:`ABS_TOL` cycles) is for counters whose RTL value
  is 0 or small, where a relative error means little;
* **untimed counters** (``retired.*``, ``bytes_*``) must be equal;
* the workload's own results (kernel cycles from the runtime, bit-exactness, output digests)
  are reported beside them, and digests must be equal.

Targets (ideal DRAM): mean absolute error of ``cycles`` <= 1% and maximum <= 3% over the
corpus, every busy and stall counter within tolerance.

Command line::

    python -m cosim.bench.validate --json out.json [--quick] [--only NAME ...] [--dram TIMING]

writes per workload the RTL and model counters, the error of each counter, the worst counter,
the model's speed (modelled cycles per wall second, the backend's own time and the whole
job's), and the corpus summary.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from hw.config import NPUConfig
from hw.isa import COUNTER_NAMES, TIMING_COUNTERS
from sw.dram import DramTiming, DramTimingError
from sw.perf.corpus import WORKLOADS
from sw.runtime import Device, NPUError

__all__ = ["WORKLOADS", "QUICK", "CI", "CI_UNDER_DRAM", "CI_DRAM", "CI_BACKPRESSURE",
           "corpus_job", "compare",
           "run_validation", "measure_speed", "summarize", "REL_TOL", "ABS_TOL",
           "CYCLES_MEAN_TOL", "CYCLES_MAX_TOL", "main"]

#: Relative tolerance of every timing counter.
REL_TOL = 0.03
#: Absolute tolerance (cycles) of timing counters, for those whose RTL value is 0 or small.
ABS_TOL = 16
#: Corpus targets on ``cycles``: mean and maximum relative error.
CYCLES_MEAN_TOL = 0.01
CYCLES_MAX_TOL = 0.03


#: The subset the CI test runs (``tests/cosim/test_perf_validation.py``): every group but the
#: main job, small enough for a minute or two of co-simulation (19 workloads).
CI = ("gemm_1x8x8", "gemm_5x20x11", "gemm_17x33x9", "gemm_64x64x64", "gemm_serial_16x64x24",
      "attention_L8_causal", "attention_L32_padding", "two_streams_events", "barriers_8_rounds",
      "processor_commands", "ring_wrap_16", "random_stream", "matmul_back_to_back",
      "dma_edges", "softmax_rows", "transformer_ops", "errors_recovery", "reset_sweep",
      "reset_sweep_full_fifos")
#: The CI subset that also runs under :data:`CI_DRAM` (stores, loads, fences and host polling
#: under read and write latency).
CI_UNDER_DRAM = ("gemm_17x33x9", "attention_L8_causal", "two_streams_events", "dma_edges",
                 "random_stream", "processor_commands", "reset_sweep", "transformer_ops")
#: The non-ideal DRAM timing of the CI (odd latencies: nothing lines up by chance).
CI_DRAM = "latency=37,wlatency=23"
#: DRAM timings with backpressure and bandwidth limits the CI runs :data:`CI_UNDER_DRAM` under:
#: the ``jitter`` preset (a bandwidth limit R and W share, backpressure on every channel),
#: ``bp50`` (R only: R beats timed one by one without the shared bucket), and a bandwidth
#: limit alone at a rate that is not a whole number of bytes per cycle.
CI_BACKPRESSURE = ("jitter", "bp50", "bw=3.3,wlatency=5")
#: A faster subset (``--quick``).
QUICK = CI[:6]


# -- the job (runs on the RTL in the simulator, and in-process on the model) ---------------------

def corpus_job(backend, *, names: list[str], trace: bool = False) -> dict:
    """Run the workloads ``names`` one after the other on ``backend``; per workload the counter
    difference over it, its own results, and (``trace``) the engine trace read afterwards."""
    out = {}
    for name in names:
        w = WORKLOADS[name]
        device = Device(backend)
        if trace:
            device.read_trace()
        before = device.counters()
        t0 = time.perf_counter()
        info = w.run(device)
        wall = time.perf_counter() - t0
        delta = device.counters() - before
        rec = {"counters": dict(delta), "info": info, "wall_seconds": wall}
        if trace:
            try:
                rec["trace"] = [[t.engine, t.queue, t.index, t.start, t.end]
                                for t in device.read_trace()]
            except NPUError as e:          # the trace FIFO overflowed (on both backends)
                rec["trace"] = str(e)
        out[name] = rec
    return out


# -- comparison ---------------------------------------------------------------------------------

def counter_error(name: str, rtl: int, model: int) -> dict:
    """Error of one counter: ``{"rtl", "model", "diff", "rel", "ok"}`` (see the module
    docstring for the tolerances)."""
    diff = model - rtl
    rel = abs(diff) / rtl if rtl else (0.0 if diff == 0 else None)
    ok = abs(diff) <= max(REL_TOL * rtl, ABS_TOL) if name in TIMING_COUNTERS else diff == 0
    return {"rtl": rtl, "model": model, "diff": diff, "rel": rel, "ok": ok}


def compare(rtl: dict, model: dict) -> dict:
    """Per-counter errors of one workload (records of :func:`corpus_job`)."""
    errors = {n: counter_error(n, rtl["counters"][n], model["counters"][n])
              for n in ("cycles", *COUNTER_NAMES)}
    timing = [(n, e) for n, e in errors.items() if n in TIMING_COUNTERS and n != "cycles"]
    worst = max(timing, key=lambda x: (not x[1]["ok"], abs(x[1]["diff"])))
    same_digest = rtl["info"].get("digest") == model["info"].get("digest")
    same_trace = rtl.get("trace") == model.get("trace")
    return {"errors": errors, "cycles_error": errors["cycles"]["rel"],
            "worst_counter": {"name": worst[0], **worst[1]},
            "ok": all(e["ok"] for e in errors.values()) and same_digest and same_trace,
            "same_results": same_digest, "same_trace": same_trace}


def summarize(rows: dict) -> dict:
    """Corpus summary: mean and max ``cycles`` error, failing counters, pass/fail."""
    errs = [r["compare"]["cycles_error"] for r in rows.values()]
    failing = {name: [n for n, e in r["compare"]["errors"].items() if not e["ok"]]
               for name, r in rows.items() if not r["compare"]["ok"]}
    mean, worst = (sum(errs) / len(errs), max(errs)) if errs else (0.0, 0.0)
    return {"workloads": len(rows), "cycles_mean_abs_error": mean, "cycles_max_abs_error": worst,
            "failing": failing,
            "ok": mean <= CYCLES_MEAN_TOL and worst <= CYCLES_MAX_TOL and not failing}


def _run_model(config: NPUConfig, names: list[str], trace: bool,
               dram: DramTiming | None = None) -> tuple[dict, dict]:
    from sw.perf import PerfBackend
    backend = PerfBackend(config, dram=dram)
    t0 = time.perf_counter()
    res = corpus_job(backend, names=names, trace=trace)
    wall = time.perf_counter() - t0
    cycles = sum(r["counters"]["cycles"] for r in res.values())
    return res, {"modelled_cycles": backend.cycle, "workload_cycles": cycles,
                 "wall_seconds": wall, "backend_seconds": backend.sim_seconds,
                 "events": backend.machine.eq.events_run}


def measure_speed(repeats: int = 3, dram: DramTiming | str | None = None) -> dict:
    """Modelled cycles per wall-second of :class:`sw.perf.PerfBackend` on the main job (the
    layer-0 attention block at L = 32 on the default 8x8) under DRAM timing ``dram`` (default
    ideal), best of ``repeats`` runs: in the backend's calls (the simulation and the
    functional model's execution of the commands), and over the whole job (with its
    quantization, float reference and golden check). Also the share of the functional
    execution, the backend's CPU seconds (less sensitive to other load on the machine), and a
    calibration of the machine (a pure-Python loop of 10**7 additions)."""
    dram = DramTiming.parse(dram)
    import sw.perf.cmdproc as cmdproc
    from sw.jobs.minilm_block import run_attention_job
    from sw.models.minilm import load_minilm
    from sw.perf import PerfBackend
    load_minilm()
    config = NPUConfig()
    execute = cmdproc.execute_engine
    best = None
    for _ in range(repeats):
        spent = [0.0]

        def timed(model, cmd, spent=spent):
            t0 = time.perf_counter()
            try:
                return execute(model, cmd)
            finally:
                spent[0] += time.perf_counter() - t0
        backend = PerfBackend(config, dram=dram)
        cmdproc.execute_engine = timed
        try:
            t0 = time.perf_counter()
            run_attention_job(backend, config=config.to_dict(), seq_len=32)
            job = time.perf_counter() - t0
        finally:
            cmdproc.execute_engine = execute
        run = {"backend_seconds": backend.sim_seconds, "job_seconds": job,
               "backend_cpu_seconds": backend.sim_cpu_seconds,
               "functional_seconds": spent[0], "modelled_cycles": backend.cycle,
               "events": backend.machine.eq.events_run,
               "beat_retimes": backend.machine.beats.retimes}
        if best is None or run["backend_seconds"] < best["backend_seconds"]:
            best = run
    t0 = time.perf_counter()
    x = 0
    for i in range(10 ** 7):
        x += i
    best["calibration_loop_seconds"] = time.perf_counter() - t0
    best["dram"] = dram.name
    best["cycles_per_backend_second"] = best["modelled_cycles"] / best["backend_seconds"]
    best["cycles_per_backend_cpu_second"] = (best["modelled_cycles"]
                                             / best["backend_cpu_seconds"])
    best["cycles_per_job_second"] = best["modelled_cycles"] / best["job_seconds"]
    best["timing_only_cycles_per_second"] = best["modelled_cycles"] / (
        best["backend_seconds"] - best["functional_seconds"])
    return best


def run_validation(names: list[str] | None = None, *, trace: bool = False,
                   name: str = "validate", dram: DramTiming | str | None = None) -> dict:
    """Run ``names`` (default: all of :data:`WORKLOADS`) on the RTL and the model, both with
    DRAM timing ``dram`` (default: ideal); return the comparison document (see the module
    docstring)."""
    from cosim.tb.harness import run_job
    dram = DramTiming.parse(dram)
    names = list(WORKLOADS) if names is None else list(names)
    by_config: dict[str, list[str]] = {}
    for n in names:
        by_config.setdefault(json.dumps(WORKLOADS[n].config, sort_keys=True), []).append(n)
    rows, runs = {}, []
    for key, group in by_config.items():
        config = NPUConfig(**json.loads(key))
        t0 = time.perf_counter()
        rtl = run_job(config, "cosim.bench.validate:corpus_job",
                      {"names": group, "trace": trace}, name=f"{name}_{config.name}",
                      dram=dram)
        rtl_wall = time.perf_counter() - t0
        model, speed = _run_model(config, group, trace, dram)
        runs.append({"config": config.name, "workloads": group, "rtl_cycles": rtl.cycles,
                     "rtl_job_seconds": rtl.job_seconds, "rtl_wall_seconds": rtl_wall,
                     "model": speed})
        for n in group:
            rows[n] = {"group": WORKLOADS[n].group, "config": config.name,
                       "rtl": rtl.result[n], "model": model[n],
                       "compare": compare(rtl.result[n], model[n])}
    return {"summary": summarize(rows), "runs": runs, "workloads": rows,
            "tolerances": {"rel": REL_TOL, "abs_cycles": ABS_TOL,
                           "cycles_mean": CYCLES_MEAN_TOL, "cycles_max": CYCLES_MAX_TOL},
            "dram": dram.to_dict() | {"name": dram.name}}


def format_table(doc: dict) -> str:
    """Fixed-width table: per workload RTL cycles, model cycles, error, worst counter."""
    lines = [f"{'workload':<30}{'RTL cycles':>11}{'model':>11}{'error':>9}  worst counter"]
    for name, r in doc["workloads"].items():
        e = r["compare"]["errors"]["cycles"]
        w = r["compare"]["worst_counter"]
        if w["diff"] == 0:
            worst = "every counter exact"
        else:
            rel = "-" if w["rel"] is None else f"{100 * w['rel']:.2f}%"
            worst = f"{w['name']} {w['rtl']}->{w['model']} ({rel})"
        flag = "" if r["compare"]["ok"] else "  FAIL"
        lines.append(f"{name:<30}{e['rtl']:>11}{e['model']:>11}{100 * e['rel']:>8.3f}%  "
                     f"{worst}{flag}")
    s = doc["summary"]
    lines.append(f"cycles error: mean {100 * s['cycles_mean_abs_error']:.3f}%, max "
                 f"{100 * s['cycles_max_abs_error']:.3f}% over {s['workloads']} workloads; "
                 f"{'PASS' if s['ok'] else 'FAIL'}")
    sp = doc.get("speed")
    if sp:
        lines.append(f"model speed on the main job ({sp['modelled_cycles']} cycles, DRAM "
                     f"{sp['dram']}): "
                     f"{sp['cycles_per_backend_second'] / 1e6:.2f} M cycles per second in the "
                     f"backend ({sp['backend_seconds']:.2f} s, of which the functional model's "
                     f"arithmetic {sp['functional_seconds']:.2f} s; "
                     f"{sp['cycles_per_backend_cpu_second'] / 1e6:.2f} M per CPU second), "
                     f"{sp['cycles_per_job_second'] / 1e6:.2f} M per second of the whole job")
    return "\n".join(lines)


def _dram_arg(text: str) -> DramTiming:
    try:
        return DramTiming.parse(text)
    except DramTimingError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m cosim.bench.validate",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--json", type=Path, help="write the comparison document here")
    p.add_argument("--quick", action="store_true", help="only the quick subset")
    p.add_argument("--only", nargs="+", metavar="NAME", help="only these workloads")
    p.add_argument("--trace", action="store_true", help="also compare engine traces")
    p.add_argument("--dram", type=_dram_arg, default=None, metavar="TIMING",
                   help="DRAM timing of both sides: a preset (ideal, lat100, ...) or "
                   "key=value pairs (sw.dram.DramTiming.parse); default ideal")
    p.add_argument("--no-speed", action="store_true", help="skip the speed measurement")
    ns = p.parse_args(argv)
    names = ns.only or (list(QUICK) if ns.quick else None)
    unknown = [n for n in names or [] if n not in WORKLOADS]
    if unknown:
        p.error(f"unknown workloads {unknown}; known: {', '.join(WORKLOADS)}")
    doc = run_validation(names, trace=ns.trace, dram=ns.dram)
    if not ns.no_speed:
        doc["speed"] = measure_speed(dram=ns.dram)
    print(format_table(doc))
    if ns.json:
        ns.json.parent.mkdir(parents=True, exist_ok=True)
        ns.json.write_text(json.dumps(doc, indent=1))
    return 0 if doc["summary"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
