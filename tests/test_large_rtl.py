"""Smoke runs of the large configurations (16x16, 32x32) on Verilator: one small GEMM job and
one small attention job each, bit-exact against the golden and the functional model.

Opt-in, because the clean Verilator build is the cost: about 3 CPU-minutes for 16x16 and
about 10 for 32x32 (the runs themselves take seconds). Set ``NPU_LARGE_RTL`` to the
configurations to run, e.g. ``NPU_LARGE_RTL=16x16`` or ``NPU_LARGE_RTL=16x16,32x32``.
"""

import os

import pytest

from cosim.harness import run_job
from hw.config import NPUConfig
from sw.model import ModelBackend
from tests import rtl_jobs

CONFIGS = {"16x16": NPUConfig(rows=16, cols=16), "32x32": NPUConfig(rows=32, cols=32)}
ENABLED = {name.strip() for name in os.environ.get("NPU_LARGE_RTL", "").split(",")}

SHAPES = [[1, 16, 16], [17, 40, 33]]
ATTENTION = [{"seq": 20, "heads": 1, "d": 32, "mask": "causal"},
             {"seq": 9, "heads": 2, "d": 32, "mask": "padding"}]


@pytest.fixture(params=list(CONFIGS), scope="module")
def config(request) -> NPUConfig:
    if request.param not in ENABLED:
        pytest.skip(f"set NPU_LARGE_RTL={request.param} to build and run the {request.param} NPU")
    return CONFIGS[request.param]


def test_large_gemm_bit_exact(config):
    rtl = run_job(config, "tests.rtl_jobs:linear_shapes", {"shapes": SHAPES},
                  name=f"large_linear_{config.name}").result["shapes"]
    model = rtl_jobs.linear_shapes(ModelBackend(config), shapes=SHAPES)["shapes"]
    for r, m in zip(rtl, model, strict=True):
        assert r["bit_exact"], f"RTL differs from the golden model for {r['shape']}"
        assert r["digest"] == m["digest"], f"RTL and functional model differ for {r['shape']}"


def test_large_attention_bit_exact(config):
    rtl = run_job(config, "tests.rtl_jobs:attention_cases", {"cases": ATTENTION},
                  name=f"large_attention_{config.name}").result["cases"]
    model = rtl_jobs.attention_cases(ModelBackend(config), cases=ATTENTION)["cases"]
    for r, m in zip(rtl, model, strict=True):
        assert r["bit_exact"], f"RTL differs from the golden model for {r['case']}"
        assert r["digest"] == m["digest"], f"RTL and functional model differ for {r['case']}"
