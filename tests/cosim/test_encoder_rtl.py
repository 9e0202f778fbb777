"""The encoder's first layer on the RTL (Verilator, 8x8, L=8): bit-exact with the golden
model, and every operation's cycles (FENCE timestamps) equal to the performance model's."""

from cosim.tb.harness import run_job
from hw.config import NPUConfig
from sw.jobs.encoder import run_encoder_job
from sw.perf import PerfBackend


def test_encoder_layer_on_rtl_matches_golden_and_perf_model():
    cfg = NPUConfig()
    args = {"config": cfg.to_dict(), "seq_len": 8, "n_layers": 1}
    rtl = run_job(cfg, "sw.jobs.encoder:run_encoder_job", args, name="encoder_L8").result
    assert rtl["bit_exact"], [k for k, v in rtl["exact"].items() if not v]
    perf = run_encoder_job(PerfBackend(cfg), **args)
    assert [(o["op"], o["cycles"]) for o in rtl["ops"]] == \
        [(o["op"], o["cycles"]) for o in perf["ops"]]
    assert rtl["total"]["cycles"] > 0


def test_eltwise_row_tiles_on_rtl():
    """The LAYERNORM kernel's double-buffered row tiles on the RTL (a load of tile t + 2 must
    wait for the store of tile t: the models apply a command's data at once, the RTL reads
    and writes row by row), same output and cycles as the performance model."""
    from tests.support import rtl_jobs
    cfg = NPUConfig()
    args = {"opcode": "LAYERNORM"}
    rtl = run_job(cfg, "tests.support.rtl_jobs:eltwise_row_tiles", args,
                  name="eltwise_row_tiles").result
    perf = rtl_jobs.eltwise_row_tiles(PerfBackend(cfg), **args)
    assert rtl["bit_exact"] and rtl["digest"] == perf["digest"]
    assert rtl["cycles"] == perf["cycles"] > 0
