"""Attention on the RTL (Verilator): Q K^T with the transposed weight load, the integer softmax
engine and the row-scaled requantization, bit-exact against the golden model and the
functional model, for L in {1, 5, 8, 33, 128}, 1 and 12 heads, no mask, causal and key padding.

The small cases share one simulation per configuration; the L=128, 12-head case runs once.
"""

import pytest

from cosim.tb.harness import run_job
from hw.config import NPUConfig
from sw.model import ModelBackend
from tests.support import rtl_jobs

SMALL = [{"seq": s, "heads": h, "d": 32, "mask": mask}
         for s in (1, 5, 8, 33) for h, mask in ((1, "none"), (1, "causal"), (2, "padding"))]
SMALL += [{"seq": 12, "heads": 1, "d": 32, "mask": "padding", "kv_len": 0},   # fully masked
          {"seq": 9, "heads": 12, "d": 32, "mask": "causal"}]


def _check(rtl: list, model: list) -> None:
    for r, m in zip(rtl, model, strict=True):
        assert r["bit_exact"], f"RTL differs from the golden model for {r['case']}"
        assert r["digest"] == m["digest"], f"RTL and functional model differ for {r['case']}"
        assert all(c > 0 for c in r["cycles"].values()), r


@pytest.mark.parametrize("config", [NPUConfig(), NPUConfig(rows=4, cols=4)], ids=["8x8", "4x4"])
def test_attention_small_cases_bit_exact(config):
    run = run_job(config, "tests.support.rtl_jobs:attention_cases", {"cases": SMALL},
                  name=f"attention_small_{config.name}")
    model = rtl_jobs.attention_cases(ModelBackend(config), cases=SMALL)["cases"]
    rtl = run.result["cases"]
    _check(rtl, model)
    masked = [r for r in rtl if r["case"].get("kv_len") == 0]
    assert masked and masked[0]["all_zero"], "a fully masked row must give zeros"
    assert all(r["nonzero"] > 0 for r in rtl if r["case"].get("kv_len") != 0)


def test_attention_l128_12_heads_bit_exact():
    case = [{"seq": 128, "heads": 12, "d": 32, "mask": "none"}]
    run = run_job(NPUConfig(), "tests.support.rtl_jobs:attention_cases", {"cases": case},
                  name="attention_l128_h12")
    _check(run.result["cases"], rtl_jobs.attention_cases(ModelBackend(NPUConfig()),
                                                         cases=case)["cases"])
