"""The whole table of error cases (:mod:`tests.support.error_jobs`) on the Verilator RTL, in
one simulation per configuration, against the functional model and the performance model:
error code, opcode, command index and address (global and per queue), STATUS, semaphores,
the interrupt and the clear, each exactly; HEAD as :mod:`hw.isa` defines it."""

import pytest

from cosim.tb.harness import run_job
from hw.config import NPUConfig
from hw.isa import Opcode, error_stage
from sw.model import ModelBackend
from sw.perf import PerfBackend
from tests.support import error_jobs

CONFIGS = {"8x8": NPUConfig(), "4x4": NPUConfig(rows=4, cols=4)}
EXACT = error_jobs.EXACT_FIELDS   #: the fields every implementation reports the same


@pytest.mark.parametrize("name", list(CONFIGS))
def test_error_table_on_rtl_as_on_the_models(name):
    config = CONFIGS[name]
    rtl = run_job(config, "tests.support.error_jobs:error_table",
                  name=f"error_table_{config.name}").result
    model = error_jobs.error_table(ModelBackend(config))
    perf = error_jobs.error_table(PerfBackend(config))
    cases = (error_jobs.error_cases(config) | error_jobs.window_cases(config)
             | error_jobs.vm_cases(config))
    assert set(rtl) == set(model) == set(cases) | set(error_jobs.ring_cases(config, 0))
    for case in error_jobs.ring_cases(config, 0):
        r = rtl[case]
        _, code, addr, index = error_jobs.ring_cases(config, r["first_slot"])[case]
        want = {"code": code.name, "queue": 0, "opcode": 0, "index": index, "address": addr,
                "irq": True, "status": 0b11, "sem0": index, "head": index, "cleared": True}
        assert {k: r[k] for k in want} == want, (case, r)
        assert r == model[case] == perf[case], (case, r, model[case], perf[case])
    for case, (_, code, addr, opcode) in sorted(cases.items()):
        r = rtl[case]
        op = opcode.value if isinstance(opcode, Opcode) else opcode
        if case == "bad_opcode":        # the table's address is that of ring slot 2
            addr += 32 * ((r["first_slot"] + 2) % error_jobs.RING_SLOTS - 2)
        want = {"code": code.name, "queue": 0, "opcode": op, "index": 2, "address": addr,
                "irq": True, "status": 0b11, "sem0": 2, "sem1": 0, "cleared": True}
        assert {k: r[k] for k in want} == want, (case, r)
        assert {k: r[k] for k in EXACT} == {k: model[case][k] for k in EXACT}, (case, r)
        # HEAD: on the failing command for an error found at fetch, one past it for a FENCE,
        # one or two past it for an engine's error (the BARRIER may have been fetched); one
        # past it on the model, which does not fetch ahead
        heads = {"fetch": (2,), "fence": (3,), "engine": (3, 4)}[error_stage(code.value, op)]
        assert r["head"] in heads and model[case]["head"] == heads[0], (case, r, model[case])
        assert r == perf[case], (case, r, perf[case])   # the cycle-exact performance model
