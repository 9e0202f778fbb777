"""Device virtual memory on the Verilator RTL (default 8x8 configuration, 16-entry TLBs): the
acceptance jobs of :mod:`tests.support.vm_jobs` (isolation, recovery, invalidation, stress)
give the functional model's results, and their TLB counters (walk cycles included) are the
performance model's."""

import pytest

from cosim.tb.harness import run_job
from hw.config import NPUConfig
from sw.model import ModelBackend
from sw.perf import PerfBackend
from tests.support import vm_jobs

CONFIG = NPUConfig()
JOBS = {"smoke": {}, "isolation": {}, "recovery": {}, "invalidation": {},
        "stress": {"seed": 3, "steps": 60}}


@pytest.mark.parametrize("job", list(JOBS))
def test_vm_job_on_rtl_as_on_the_models(job):
    args = JOBS[job]
    rtl = run_job(CONFIG, f"tests.support.vm_jobs:{job}", args, name=f"vm_{job}").result
    model = getattr(vm_jobs, job)(ModelBackend(CONFIG), **args)
    perf = getattr(vm_jobs, job)(PerfBackend(CONFIG), **args)
    assert {k: v for k, v in rtl.items() if k != "counters"} == \
        {k: v for k, v in model.items() if k != "counters"}
    # the untimed TLB counters are the model's; every one, walk cycles too, the perf model's
    assert {k: rtl["counters"][k] for k in model["counters"]} == model["counters"]
    assert rtl["counters"] == perf["counters"]
