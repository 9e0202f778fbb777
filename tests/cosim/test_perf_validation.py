"""The performance model against the RTL, counter by counter, on the CI subset of the
validation corpus (:data:`cosim.bench.validate.CI`, 15 workloads of every group but the main
job; the whole corpus is ``python -m cosim.bench.validate``).

One co-simulation of the default 8x8 NPU (ideal DRAM) runs every workload in turn; the same
job then runs on :class:`sw.perf.PerfBackend`. Tolerances are the bench's: every timing
counter within 3% or :data:`cosim.bench.validate.ABS_TOL` cycles, untimed counters equal,
``cycles`` within 1% on average and 3% at worst, the same results (output digests) and the
same engine traces (start and end cycle of every command, as the RTL's trace FIFOs report
them)."""

import pytest

from cosim.bench.validate import (
    ABS_TOL,
    CI,
    CYCLES_MAX_TOL,
    CYCLES_MEAN_TOL,
    REL_TOL,
    _run_model,
    compare,
    summarize,
)
from cosim.tb.harness import run_job
from hw.config import NPUConfig

CONFIG = NPUConfig()


@pytest.fixture(scope="module")
def runs():
    rtl = run_job(CONFIG, "cosim.bench.validate:corpus_job", {"names": list(CI), "trace": True},
                  name="perf_validation").result
    model, speed = _run_model(CONFIG, list(CI), trace=True)
    assert speed["workload_cycles"] > 0
    return rtl, model


@pytest.mark.parametrize("name", CI)
def test_workload_counters_match_the_rtl(runs, name):
    rtl, model = runs
    c = compare(rtl[name], model[name])
    bad = {k: (e["rtl"], e["model"]) for k, e in c["errors"].items() if not e["ok"]}
    assert not bad, f"counters outside {REL_TOL:.0%} / {ABS_TOL} cycles: {bad}"
    assert c["same_results"], (rtl[name]["info"], model[name]["info"])
    assert c["same_trace"], "engine traces differ"


def test_corpus_cycles_error(runs):
    rtl, model = runs
    rows = {n: {"compare": compare(rtl[n], model[n])} for n in CI}
    s = summarize(rows)
    assert s["cycles_mean_abs_error"] <= CYCLES_MEAN_TOL
    assert s["cycles_max_abs_error"] <= CYCLES_MAX_TOL
    assert s["ok"], s["failing"]
