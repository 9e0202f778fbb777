"""Number formats on the full NPU (Verilator): linear layers with int4 weights and MXINT8
weights and activations, bit-exact with the golden model on 4x4 and 8x8 NPUs with the MX
exponent stage, the functional model's outputs and the performance model's cycles; the batch-1
GEMV with int4 weights against int8 weights under a bandwidth-limited DRAM."""

import pytest

from cosim.tb.harness import run_job
from hw.config import NPUConfig
from sw.model import ModelBackend
from sw.perf import PerfBackend
from tests.support import format_jobs

CONFIGS = {"4x4": NPUConfig(rows=4, cols=4, mx=1), "8x8": NPUConfig(mx=1)}

#: shapes with K not a multiple of the MX block (32) and of the array; M around the
#: scratchpad row (the MXINT8 activation groups)
SHAPES = [[1, 70, 9], [37, 100, 20], [9, 33, 17], [20, 64, 8]]
EDGES = ["limits", "zeros", "saturate"]


def _cases():
    out = []
    for i, (w, a) in enumerate(format_jobs.COMBOS):
        for j, shape in enumerate(SHAPES):
            out.append([*shape, w, a, None if (i + j) % 2 else EDGES[(i + j) % 3]])
        out.append([*SHAPES[i % len(SHAPES)], w, a, EDGES[i % 3]])
    return out


@pytest.mark.parametrize("name", list(CONFIGS))
def test_formats_bit_exact_on_rtl_and_models(name):
    config = CONFIGS[name]
    cases = _cases()
    run = run_job(config, "tests.support.format_jobs:linear_format_cases", {"cases": cases},
                  name=f"formats_{config.name}")
    rtl = run.result["cases"]
    model = format_jobs.linear_format_cases(ModelBackend(config), cases=cases)["cases"]
    perf = format_jobs.linear_format_cases(PerfBackend(config), cases=cases)["cases"]
    for r, m, p in zip(rtl, model, perf, strict=True):
        assert r["bit_exact"], f"RTL differs from the golden model for {r['case']}"
        assert r["digest"] == m["digest"] == p["digest"], r["case"]
        assert r["cycles"] == p["cycles"] > 0, (r, p)
        assert r["distinct"] > 3 or r["case"][5] == "saturate", r
    assert sum(r["saturated"] for r in rtl) > 50
    assert {r["case"][5] for r in rtl} >= set(EDGES)


@pytest.mark.parametrize("dram", ["bw=4.8", "ddr"])
def test_int4_gemv_speedup_on_rtl(dram):
    """M = 1, K = 384, N = 1536 with the weights streamed from DRAM: half the bytes read with
    int4. Measured on 8x8 (README "int4 GEMV"): 1.7500x under ``ddr`` (80 cycles of read
    latency, 4.8 B/cycle; issue 15 measured 1.817x before the int8 GEMV lost 191 commands and
    3.7% of its cycles; 1.752x before the semaphore unit's increment register, 16982d1) and
    1.768x under ``bw=4.8`` (the bandwidth alone), where int4 runs at
    the array's own M = 1 limit (8 cycles per weight tile) and int8 near its bandwidth bound,
    so the ratio cannot pass 8 / 4.8 by much. The thresholds sit just under those figures,
    and int4's own cycles are held too, so a regression of either format fails. The
    performance model's cycles are the RTL's."""
    config = CONFIGS["8x8"]
    rtl = run_job(config, "tests.support.format_jobs:gemv_formats", name="gemv_formats",
                  dram=dram).result
    perf = format_jobs.gemv_formats(PerfBackend(config, dram=dram))
    for f in ("int8", "int4"):
        assert rtl[f]["bit_exact"] and rtl[f]["cycles"] == perf[f]["cycles"], (f, rtl, perf)
    assert rtl["int4"]["bytes_read"] < 0.55 * rtl["int8"]["bytes_read"]
    speedup = rtl["int8"]["cycles"] / rtl["int4"]["cycles"]
    assert speedup >= (1.76 if dram == "bw=4.8" else 1.745), (dram, speedup)
    assert rtl["int4"]["cycles"] <= (74_700 if dram == "bw=4.8" else 80_400), rtl["int4"]
