"""Smoke runs of the large configurations (16x16, 32x32) on Verilator: one small GEMM job and
one small attention job each, bit-exact against the golden and the functional model.

Opt-in, because the clean Verilator build is the cost: about 2 CPU-minutes for 16x16 and
about 10 for 32x32 (the runs themselves take seconds). Set ``NPU_LARGE_RTL`` to the
configurations to run, e.g. ``NPU_LARGE_RTL=16x16`` or ``NPU_LARGE_RTL=16x16,32x32``.
"""

import os

import pytest

from cosim.tb.harness import run_job
from hw.config import NPUConfig
from sw.model import ModelBackend
from tests.support import rtl_jobs

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


def _check_against_models(config, job: str, args: dict, key: str, label: str) -> None:
    """Run ``tests.support.rtl_jobs:<job>`` on the RTL and on the model: golden-exact and equal."""
    rtl = run_job(config, f"tests.support.rtl_jobs:{job}", args, name=f"large_{job}_{config.name}")
    model = getattr(rtl_jobs, job)(ModelBackend(config), **args)[key]
    for r, m in zip(rtl.result[key], model, strict=True):
        assert r["bit_exact"], f"RTL differs from the golden model for {r[label]}"
        assert r["digest"] == m["digest"], f"RTL and functional model differ for {r[label]}"


def test_large_gemm_bit_exact(config):
    _check_against_models(config, "linear_shapes", {"shapes": SHAPES}, "shapes", "shape")


def test_large_attention_bit_exact(config):
    _check_against_models(config, "attention_cases", {"cases": ATTENTION}, "cases", "case")
