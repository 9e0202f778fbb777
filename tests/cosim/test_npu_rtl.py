"""Full-NPU tests: the generated Verilog on Verilator, driven by cocotb through the runtime.

Each test runs one job of :mod:`tests.support.rtl_jobs` inside one simulation (one Verilator
build per configuration, cached in ``build/``), and where it makes sense the same job on the
functional model, so RTL, model and golden integer reference are compared on the same command
streams.
"""

import pytest

from cosim.tb.harness import run_job
from hw.config import NPUConfig
from hw.isa import ENGINE_NAMES, OPCODE_ENGINE, decode, timing
from sw.model import ModelBackend
from sw.perf import PerfBackend
from tests.support import rtl_jobs

CONFIGS = {"8x8": NPUConfig(), "4x4": NPUConfig(rows=4, cols=4)}

# M, K, N mixed from {1, 7, 8, 9, 33, 384}; every shape has K > rows (several K passes into
# the accumulator) except the K=7/8 ones, which check K padding.
SHAPES = [
    [1, 7, 8], [7, 8, 9], [8, 9, 7], [9, 33, 1], [33, 1, 9], [1, 384, 33],
    [9, 384, 8], [33, 33, 33], [384, 9, 7], [7, 33, 384], [384, 33, 9], [8, 384, 9],
]


@pytest.fixture(params=list(CONFIGS), scope="module")
def config(request) -> NPUConfig:
    return CONFIGS[request.param]


def test_linear_bit_exact_on_rtl_and_model(config):
    run = run_job(config, "tests.support.rtl_jobs:linear_shapes", {"shapes": SHAPES},
                  name=f"linear_shapes_{config.name}")
    rtl = run.result["shapes"]
    model = rtl_jobs.linear_shapes(ModelBackend(config), shapes=SHAPES)["shapes"]
    perf = rtl_jobs.linear_shapes(PerfBackend(config), shapes=SHAPES)["shapes"]
    for r, m, p in zip(rtl, model, perf, strict=True):
        assert r["bit_exact"], f"RTL differs from the golden model for {r['shape']}"
        assert r["digest"] == m["digest"], f"RTL and functional model differ for {r['shape']}"
        # two-sided: no faster than the array's peak, no longer than the whole simulation,
        # and exactly the cycle-exact performance model's count (ideal DRAM)
        mm, kk, nn = r["shape"]
        assert mm * kk * nn / config.n_pes <= r["cycles"] <= run.cycles, r
        assert 0 < r["utilization"] <= 1, r
        assert (r["cycles"], r["utilization"]) == (p["cycles"], p["utilization"]), (r, p)
    assert sum(r["cycles"] for r in rtl) <= run.cycles
    assert any(r["k_passes"] >= 8 for r in rtl)          # long accumulations over K
    assert any(r["m_tiles"] >= 1 and r["shape"][0] == 384 for r in rtl)
    assert sum(r["saturated"] for r in rtl) > 0            # saturation is exercised
    assert run.cycles > 0


def test_double_buffered_tilings_on_rtl_and_model():
    """The hand-picked double-buffered tilings of ``tests.sw.test_linear`` (K chunks, N groups,
    overlapping accumulator tiles, one output tile, one activation buffer, weights loaded once,
    parameter loads ordered after stores, ragged M/K/N) on the 8x8 RTL: a missing semaphore
    wait would show here as a wrong result, never on the in-order model."""
    from tests.sw.test_linear import DEFAULT, FORCED
    cases = [[m, k, n, kw] for c, m, k, n, kw, _ in FORCED if c == DEFAULT]
    run = run_job(DEFAULT, "tests.support.rtl_jobs:linear_plans", {"cases": cases},
                  name="linear_plans_8x8")
    rtl = run.result["cases"]
    model = rtl_jobs.linear_plans(ModelBackend(DEFAULT), cases=cases)["cases"]
    for r, m in zip(rtl, model, strict=True):
        assert r["bit_exact"], f"RTL differs from the golden model for {r['shape']}"
        assert r["digest"] == m["digest"] and r["cycles"] > 0
    assert run.result["free_bytes_after"] == \
        rtl_jobs.linear_plans(ModelBackend(DEFAULT), cases=[])["free_bytes_after"]


def test_dma_crossing_4k_and_zero_length(config):
    result = run_job(config, "tests.support.rtl_jobs:dma_edge_cases",
                     name=f"dma_edges_{config.name}").result
    assert result["crosses_4k"]
    assert result["copied"] and result["nothing_else_changed"]
    assert result["semaphore"] == 5          # all five commands retired, zero-length included
    assert result == rtl_jobs.dma_edge_cases(ModelBackend(config)) | {"cycles": result["cycles"]}


@pytest.mark.parametrize("dram", ["ideal", "jitter"])
def test_dma_odd_addresses_and_lengths(config, dram):
    """Any byte address, stride and length on the NPU (loads, exact stores, whole-row stores
    that show the zero fill), both memories, under ideal and jittered DRAM: every byte of the
    region as the naive expectation and as the functional model."""
    result = run_job(config, "tests.support.rtl_jobs:dma_odd_bytes",
                     name=f"dma_odd_{config.name}_{dram}", dram=dram).result
    assert result["exact"]
    assert result["semaphore"] == result["commands"] == 30
    model = rtl_jobs.dma_odd_bytes(ModelBackend(config))
    assert result == model | {"cycles": result["cycles"]}
    if dram == "ideal":     # the performance model times the prime, flush words and slots
        assert rtl_jobs.dma_odd_bytes(PerfBackend(config))["cycles"] == result["cycles"]


def test_unknown_opcode_raises_typed_error_and_device_recovers():
    result = run_job(NPUConfig(), "tests.support.rtl_jobs:unknown_opcode",
                     name="unknown_opcode").result
    assert result["raised"], "the runtime did not raise on an unknown opcode"
    assert result["code"] == "BAD_OPCODE" and result["index"] == 1 and result["opcode"] == 0x7F
    assert "command #1" in result["message"] and "BAD_OPCODE" in result["message"]
    assert result["works_after"]


@pytest.mark.parametrize("seed", [1, 2])
def test_random_command_streams_match_model(config, seed):
    rtl = run_job(config, "tests.support.rtl_jobs:raw_stream", {"seed": seed},
                  name=f"raw_stream_{config.name}_{seed}").result
    model = rtl_jobs.raw_stream(ModelBackend(config), seed=seed)
    assert rtl["nonzero_bytes"] > 0
    assert rtl == model


def _timing_cases(cfg: NPUConfig) -> list:
    """One command of each engine and size class; DMA rows that cross 4 KiB, start and end
    mid-beat (4x4: scratchpad rows narrower than a beat), exceed 256 beats, or are empty."""
    srb, arb = cfg.spad_row_bytes, cfg.acc_row_bytes

    def dma(method, mem, addr, stride, row_bytes, n_rows, local_row=0):
        lrow = cfg.acc_row_bytes if mem else srb
        return [method, {"mem": mem, "dram_addr": addr, "dram_stride": stride,
                         "row_bytes": row_bytes, "n_rows": n_rows, "local_row": local_row,
                         "local_stride": max(1, row_bytes // lrow)}]
    cases = [
        ["matmul", {"a_row": 0, "w_row": 64, "acc_row": 0, "m": m}] for m in (1, 13, 100, 0)]
    cases += [["requant", {"acc_row": 0, "spad_row": 200, "n_rows": n, "param_row": 300,
                           "scale_row": s}] for n, s in ((1, None), (21, None), (21, 310))]
    cases.append(["softmax", {"acc_row": 0, "spad_row": 0, "n_rows": 5, "n_blocks": 3,
                              "stride": 8, "scale_row": 400, "kv_len": 20, "mult": 30000,
                              "shift": 15}])
    for method in ("dma_load", "dma_store"):
        cases += [
            dma(method, 0, 0, srb, srb, 1),
            dma(method, 0, 4096 - 3 * srb, 5 * srb, 5 * srb, 4),        # crosses 4 KiB
            dma(method, 0, 8192 + 4, 3 * srb + 4, 3 * srb, 6) if srb < 8 else
            dma(method, 0, 8192 + srb, 3 * srb, 2 * srb, 6),             # mid-beat rows
            dma(method, 0, 16384 + 64, 0, 300 * 8 // srb * srb, 1),      # > 256 beats
            dma(method, 1, 24576 - arb, 2 * arb, 2 * arb, 7, 500),
            dma(method, 1, 0, arb, 0, 3),                                # size zero
        ]
    return cases


def test_engine_timing_on_rtl(config):
    """Every engine's busy cycles on the Verilator NPU (with ``cosim/tb/dram.sv``), counted by
    the ``busy.<engine>`` counter, equal :mod:`hw.isa.timing` for one command of each kind."""
    from sw.runtime import CommandList
    cases = _timing_cases(config)
    run = run_job(config, "tests.support.rtl_jobs:engine_timing", {"cases": cases},
                  name=f"engine_timing_{config.name}")
    for (method, fields), got in zip(cases, run.result["cases"], strict=True):
        cmds = CommandList()
        getattr(cmds, method)(**fields)
        view = decode(cmds[0].raw)
        engine = OPCODE_ENGINE[view.header.opcode]
        want = {f"busy.{e}": 0 for e in ENGINE_NAMES} | {f"retired.{e}": 0 for e in ENGINE_NAMES}
        want[f"busy.{engine}"] = timing.command_busy_cycles(config, view)
        want[f"retired.{engine}"] = 1
        assert got == want, (method, fields)
