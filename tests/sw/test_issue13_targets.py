"""Issue 13's performance targets on the 8x8 default, measured on the performance model
(cycle-exact with the RTL: ``python -m cosim.bench.validate``, under ``ideal`` and
``jitter``). Cycles are simulated, not wall time, so these are exact and deterministic.
The targets not met yet (64³ and the GEMV at >= 95% of their roofline bound) are in the
README's bench table and the issue's notes, not asserted here."""

import numpy as np
import pytest

from cosim.bench import _operands
from hw.config import NPUConfig
from sw.golden import linear_int
from sw.jobs.minilm_block import run_attention_job
from sw.kernels.linear import linear_with_stats
from sw.perf import PerfBackend
from sw.runtime import Device

CONFIG = NPUConfig()


def _gemm_utilization(size: int, dram: str) -> float:
    args = _operands(np.random.default_rng(0), size, size, size)
    out, stats = linear_with_stats(Device(PerfBackend(CONFIG, dram=dram)), *args)
    np.testing.assert_array_equal(out, linear_int(*args))
    return stats.utilization


@pytest.mark.parametrize("size,dram,target", [
    (64, "ideal", 0.90),        # 4,500 cycles: 91.0%
    (128, "ideal", 0.95),       # 97.1%
    (256, "ideal", 0.95),       # 99.4%
    (512, "ideal", 0.95),       # 99.8%
    (512, "lat100", 0.90),      # 99.8%
])
def test_square_gemm_utilization(size, dram, target):
    """MAC utilization of the square int8 GEMMs of the bench (``npu bench --backend perf``)."""
    assert _gemm_utilization(size, dram) >= target


def test_main_job_block_under_read_latency():
    """The main job's layer-0 block at L = 32 reaches >= 80% under ideal memory and takes at
    most 10% more cycles at 100 cycles of DRAM read latency (354,590 and 375,455: +5.9%)."""
    r = {d: run_attention_job(PerfBackend(CONFIG, dram=d), config=CONFIG.to_dict(), seq_len=32)
         for d in ("ideal", "lat100")}
    assert all(x["bit_exact"] for x in r.values())
    cycles = {d: sum(s["cycles"] for s in x["stages"]) for d, x in r.items()}
    macs = sum(s["macs"] for s in r["ideal"]["stages"])
    assert macs / (cycles["ideal"] * CONFIG.n_pes) >= 0.80
    assert cycles["lat100"] <= 1.10 * cycles["ideal"]
