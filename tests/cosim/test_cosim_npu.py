"""End-to-end smoke test of the real NPU (``hw.top.NPU``) on Verilator with the DRAM model."""

from cosim.tb.harness import run_job
from hw.config import NPUConfig
from sw.perf import PerfBackend
from tests.support import cosim_jobs


def test_fence_through_the_ring():
    r = run_job(NPUConfig(), "tests.support.cosim_jobs:fence_smoke", name="test_cosim_npu_fence")
    assert r.result["fence"] == 0xC0FFEE01
    assert r.result["head"] == 1
    # two-sided: inside the simulation, and exactly the cycle-exact performance model's
    # count for the same job (a ring fetch, the fence's write and its response)
    assert 0 < r.result["cycles_to_irq"] <= r.cycles
    assert r.result["cycles_to_irq"] == cosim_jobs.fence_smoke(PerfBackend(NPUConfig())
                                                               )["cycles_to_irq"]


def test_runtime_on_rtl():
    """sw.runtime.Device over RtlBackend: config discovery, upload, synchronize, download."""
    config = NPUConfig()
    r = run_job(config, "tests.support.cosim_jobs:runtime_roundtrip", name="test_cosim_npu_runtime")
    assert r.result["config"] == config.name
    assert 0 < r.result["sync_cycles"] <= r.cycles
    assert r.result["sync_cycles"] == cosim_jobs.runtime_roundtrip(PerfBackend(config)
                                                                   )["sync_cycles"]
