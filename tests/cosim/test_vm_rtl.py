"""Device virtual memory on the Verilator RTL (default 8x8 configuration, 16-entry TLBs): the
acceptance jobs of :mod:`tests.support.vm_jobs` (isolation, recovery, invalidation, stress)
give the functional model's results, and their TLB counters (walk cycles included) are the
performance model's."""

import pytest

from cosim.tb.harness import run_job
from hw.config import NPUConfig
from hw.isa import walk_cycles, walk_delay
from sw.dram import DramTiming
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


@pytest.mark.parametrize("dram", ["ideal", "lat100"])
def test_walk_timing_rules_on_rtl(dram):
    """The walk timing of :mod:`hw.isa.vm` (``walk_cycles``, ``walk_delay``), which the
    performance model uses, holds on the RTL: a single-beat load on an idle bus."""
    rtl = run_job(CONFIG, "tests.support.vm_jobs:walk_timing", name=f"vm_walk_{dram}",
                  dram=dram).result
    check_walk_timing(rtl, DramTiming.parse(dram).read_latency)
    assert rtl == vm_jobs.walk_timing(PerfBackend(CONFIG, dram=dram))


def check_walk_timing(r: dict, latency: int) -> None:
    base = r["physical"]["busy.load"]
    assert r["miss"] == {"busy.load": base + walk_delay([latency] * 2), "tlb.load.hits": 0,
                         "tlb.load.misses": 1, "tlb.load.faults": 0,
                         "tlb.load.walk_cycles": walk_cycles([latency] * 2)}
    assert r["hit"] == {"busy.load": base, "tlb.load.hits": 1, "tlb.load.misses": 0,
                        "tlb.load.faults": 0, "tlb.load.walk_cycles": 0}
    f = r["fault_level1"]
    assert (f["tlb.load.misses"], f["tlb.load.faults"], f["tlb.load.walk_cycles"]) == \
        (1, 1, walk_cycles([latency]))
