"""The attention kernel twice beside another stream's work with every semaphore started at
2**32 - 1 by the host write, on the RTL (4x4, Verilator): every wait of the job crosses the
wrap (job: :func:`tests.support.runtime_jobs.attention_beside_stream` with ``near_wrap``;
the same job from 0 is in :mod:`tests.cosim.test_attention_rtl`)."""

from cosim.tb.harness import run_job
from hw.config import NPUConfig
from sw.model import ModelBackend
from tests.support import runtime_jobs

CONFIG = NPUConfig(rows=4, cols=4)


def test_attention_twice_beside_another_stream_across_the_wrap():
    args = {"seq": 9, "heads": 2, "d": 8, "near_wrap": True}
    rtl = run_job(CONFIG, "tests.support.runtime_jobs:attention_beside_stream", args,
                  name="attention_beside_stream_wrap").result
    model = runtime_jobs.attention_beside_stream(ModelBackend(CONFIG), **args)
    want = {"attention": [True, True], "linear": [True, True], "copies": [True, True],
            "gated_until_event": {"copy_untouched": True, "stream_busy": True},
            "semaphores_exact": True}
    assert rtl == want | {"overlap": True}, rtl
    assert model == want | {"overlap": False}
