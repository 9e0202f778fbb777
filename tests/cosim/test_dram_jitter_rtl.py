"""The linear and attention kernels on the RTL under non-ideal DRAM timing (:mod:`sw.dram`):
``jitter`` (latency, a bandwidth limit below the bus and random backpressure on every AXI
channel) and ``ddr`` (DDR4-like latency and bandwidth), on 8x8 and 4x4. Memory that answers
late and out of step is what exposes ordering bugs (a missing semaphore wait, a DMA that
assumes R data arrives in the cycle after AR): every result must stay bit-exact against the
golden model and equal to the functional model's.

Also: the timing reaches the simulator (log line, more cycles), and a run recorded under
``jitter`` replays cycle for cycle in the native C++ harness (which takes the timing from the
recording).
"""

import pytest

from cosim.tb.harness import default_dram, run_job
from cosim.tb.replay import build_native, run_native
from hw.config import NPUConfig
from hw.isa import COMMAND_BYTES
from sw.dram import DramTiming
from sw.model import ModelBackend
from tests.cosim.test_attention_rtl import SMALL
from tests.cosim.test_npu_rtl import SHAPES
from tests.support import rtl_jobs

CONFIGS = {"8x8": NPUConfig(), "4x4": NPUConfig(rows=4, cols=4)}
PRESETS = ["jitter", "ddr"]


def _timing_in_log(run, timing: DramTiming) -> None:
    log = (run.run_dir / "sim.log").read_text(errors="replace")
    assert run.dram == timing
    assert f"read latency {timing.read_latency}, write latency {timing.write_latency}" in log


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("name", list(CONFIGS))
def test_linear_bit_exact_under_dram_timing(name, preset):
    config = CONFIGS[name]
    run = run_job(config, "tests.support.rtl_jobs:linear_shapes", {"shapes": SHAPES},
                  name=f"linear_shapes_{name}_{preset}", dram=preset)
    _timing_in_log(run, DramTiming.parse(preset))
    model = rtl_jobs.linear_shapes(ModelBackend(config), shapes=SHAPES)["shapes"]
    for r, m in zip(run.result["shapes"], model, strict=True):
        assert r["bit_exact"], f"RTL differs from the golden model for {r['shape']}"
        assert r["digest"] == m["digest"], f"RTL and functional model differ for {r['shape']}"


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("name", list(CONFIGS))
def test_attention_bit_exact_under_dram_timing(name, preset):
    config = CONFIGS[name]
    run = run_job(config, "tests.support.rtl_jobs:attention_cases", {"cases": SMALL},
                  name=f"attention_small_{name}_{preset}", dram=preset)
    _timing_in_log(run, DramTiming.parse(preset))
    model = rtl_jobs.attention_cases(ModelBackend(config), cases=SMALL)["cases"]
    for r, m in zip(run.result["cases"], model, strict=True):
        assert r["bit_exact"], f"RTL differs from the golden model for {r['case']}"
        assert r["digest"] == m["digest"], f"RTL and functional model differ for {r['case']}"


def test_double_buffered_tilings_bit_exact_under_jitter():
    """The hand-picked overlapping tilings (see test_npu_rtl): with jittered memory the DMA,
    the array and the vector unit overlap differently than with ideal memory."""
    from tests.sw.test_linear import DEFAULT, FORCED
    cases = [[m, k, n, kw] for c, m, k, n, kw, _ in FORCED if c == DEFAULT]
    run = run_job(DEFAULT, "tests.support.rtl_jobs:linear_plans", {"cases": cases},
                  name="linear_plans_8x8_jitter", dram="jitter")
    model = rtl_jobs.linear_plans(ModelBackend(DEFAULT), cases=cases)["cases"]
    for r, m in zip(run.result["cases"], model, strict=True):
        assert r["bit_exact"] and r["digest"] == m["digest"], r["shape"]


def test_read_latency_lengthens_a_run_and_default_dram_applies():
    config = NPUConfig()
    ideal = run_job(config, "tests.support.rtl_jobs:dma_edge_cases", name="dma_edges_ideal")
    with default_dram("lat100") as timing:
        slow = run_job(config, "tests.support.rtl_jobs:dma_edge_cases", name="dma_edges_lat100")
    assert ideal.dram.is_ideal and slow.dram == timing == DramTiming(read_latency=100)
    # the command fetch and the DMA load each wait at least one read latency more, less the
    # beats of the second fetch burst (at most fetch_depth commands), which under ideal memory
    # delayed the load's beats on the shared R channel and under lat100 are read meanwhile
    overlap = config.fetch_depth * COMMAND_BYTES // config.axi_data_bytes
    assert slow.result["cycles"] >= ideal.result["cycles"] + 2 * (100 - 3) - overlap
    assert {k: v for k, v in slow.result.items() if k != "cycles"} == \
        {k: v for k, v in ideal.result.items() if k != "cycles"}


def test_native_replay_of_a_jitter_recording(tmp_path_factory, worker_id):
    config = NPUConfig()
    rec = tmp_path_factory.mktemp("replay_jitter") / "gemm.rec"
    run = run_job(config, "cosim.bench:gemm_sweep_job", {"sizes": [16]},
                  name=f"replay_jitter_{worker_id}", record=rec, dram="jitter")
    assert run.result["gemm"][0]["bit_exact"] and run.recording["dram"]["name"] == "jitter"
    exe = build_native(config).exe
    same = run_native(exe, rec)
    assert same.ok and same.cycles == run.cycles, same.first_mismatch
    assert same.raw["dram_plusargs"] == DramTiming.parse("jitter").to_plusargs()
    other = run_native(exe, rec, dram="jitter,seed=2")    # other stalls: the replay diverges
    assert not other.ok and other.mismatches > 0
