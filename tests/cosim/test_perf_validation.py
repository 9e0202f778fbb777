"""The performance model against the RTL, counter by counter, on the CI subset of the
validation corpus (:data:`cosim.bench.validate.CI`, 19 workloads of every group but the main
job; the whole corpus is ``python -m cosim.bench.validate``).

One co-simulation of the default 8x8 NPU (ideal DRAM) runs every workload in turn; the same
job then runs on :class:`sw.perf.PerfBackend`. Tolerances are the bench's: every timing
counter within 3% or :data:`cosim.bench.validate.ABS_TOL` cycles, untimed counters equal,
``cycles`` within 1% on average and 3% at worst, the same results (output digests) and the
same engine traces (start and end cycle of every command, as the RTL's trace FIFOs report
them).

A second test runs a subset under read and write latency (:data:`cosim.bench.validate.CI_DRAM`),
and the same subset runs under backpressure and bandwidth limits
(:data:`cosim.bench.validate.CI_BACKPRESSURE`: the ``jitter`` and ``bp50`` presets, a limit of
3.3 bytes per cycle).
Each test is one simulation with its own run directory (a module fixture would run once per
pytest-xdist worker, and two simulations must not share a run directory).
"""

import pytest

from cosim.bench.validate import (
    ABS_TOL,
    CI,
    CI_BACKPRESSURE,
    CI_DRAM,
    CI_UNDER_DRAM,
    CYCLES_MAX_TOL,
    CYCLES_MEAN_TOL,
    REL_TOL,
    _run_model,
    compare,
    counter_error,
    summarize,
)
from cosim.tb.harness import run_job
from hw.config import NPUConfig
from hw.isa import COUNTER_NAMES

CONFIG = NPUConfig()


def check_against_rtl(names, dram=None, run_name="perf_validation"):
    rtl = run_job(CONFIG, "cosim.bench.validate:corpus_job", {"names": list(names), "trace": True},
                  name=run_name, dram=dram).result
    model, speed = _run_model(CONFIG, list(names), trace=True, dram=dram)
    assert speed["workload_cycles"] > 0
    rows, problems = {}, []
    for name in names:
        c = compare(rtl[name], model[name])
        rows[name] = {"compare": c}
        bad = {k: (e["rtl"], e["model"]) for k, e in c["errors"].items() if not e["ok"]}
        if bad:
            problems.append(f"{name}: counters outside {REL_TOL:.0%} / {ABS_TOL} cycles "
                            f"(rtl, model): {bad}")
        if not c["same_results"]:
            problems.append(f"{name}: results differ: {rtl[name]['info']} vs "
                            f"{model[name]['info']}")
        if not c["same_trace"]:
            problems.append(f"{name}: engine traces differ")
    assert not problems, "\n".join(problems)
    s = summarize(rows)
    assert s["cycles_mean_abs_error"] <= CYCLES_MEAN_TOL
    assert s["cycles_max_abs_error"] <= CYCLES_MAX_TOL
    assert s["ok"], s["failing"]


def test_ci_corpus_matches_the_rtl_counter_by_counter():
    check_against_rtl(CI)


def test_ci_subset_matches_the_rtl_under_dram_latency():
    """Read latency 37 and write-response latency 23 (``sw.dram.DramTiming``) on both sides."""
    check_against_rtl(CI_UNDER_DRAM, CI_DRAM, "perf_validation_latency")


@pytest.mark.parametrize("dram", CI_BACKPRESSURE)
def test_ci_subset_matches_the_rtl_under_backpressure_and_bandwidth_limits(dram):
    """Random backpressure (the DRAM model's seeded draws, the same on both sides) and token-
    bucket bandwidth limits, every counter and trace as under ideal timing."""
    check_against_rtl(CI_UNDER_DRAM, dram, f"perf_validation_{dram.split(',')[0].replace('=', '')}")


def _record(cycles: int, **counters: int) -> dict:
    values = dict.fromkeys(COUNTER_NAMES, 1000) | counters
    return {"counters": {"cycles": cycles, **values}, "info": {"digest": "d"}, "trace": []}


def test_errors_and_summary_by_hand():
    """Hand-computed errors: relative errors are magnitudes whichever side is faster, so a
    model 2% fast and one 1% slow average to 1.5%, not 0.5% (a signed error would let fast
    and slow workloads cancel, and a model that is too fast never fail the maximum)."""
    e = counter_error("cycles", 10000, 9800)
    assert e == {"rtl": 10000, "model": 9800, "diff": -200, "rel": 0.02, "ok": True}
    assert counter_error("cycles", 10000, 9600)["ok"] is False          # 4% > REL_TOL
    assert counter_error("busy.load", 100, 116)["ok"] is True            # ABS_TOL cycles
    assert counter_error("busy.load", 100, 117)["ok"] is False
    assert counter_error("retired.load", 5, 6)["ok"] is False            # untimed: exact
    assert counter_error("stall.load.dram_read", 0, 0)["rel"] == 0.0
    assert counter_error("stall.load.dram_read", 0, 3)["rel"] is None
    rows = {"fast": {"compare": compare(_record(10000), _record(9800))},
            "slow": {"compare": compare(_record(10000), _record(10100))}}
    assert rows["fast"]["compare"]["cycles_error"] == pytest.approx(0.02)
    s = summarize(rows)
    assert s["cycles_mean_abs_error"] == pytest.approx(0.015)
    assert s["cycles_max_abs_error"] == pytest.approx(0.02)
    assert not s["ok"] and not s["failing"]                 # over CYCLES_MEAN_TOL (1%) only


def test_cli_rejects_a_bad_dram_timing_before_any_run(capsys):
    from cosim.bench.validate import main
    with pytest.raises(SystemExit) as e:
        main(["--dram", "bogus", "--only", "gemm_64x64x64"])
    assert e.value.code == 2 and "unknown DRAM preset" in capsys.readouterr().err
