"""Attention in software: the kernel on the functional model against the golden integer
reference, the softmax reference's edge cases, and the accuracy of the quantized MiniLM
attention block against float32 (L=128, evaluation text != calibration text)."""

import numpy as np
import pytest

from hw.config import NPUConfig
from sw.golden import exp2_int, row_reciprocal, softmax_int
from sw.kernels.attention import plan_attention
from sw.model import ModelBackend
from tests.support import rtl_jobs


def test_softmax_reference_edges():
    s = np.array([[5, 3, 1, -(2**31)], [0, 0, 0, 0]], np.int64)
    p, sums, recip = softmax_int(s, mult=1 << 16, shift=16, kv_len=3)
    assert p[0, 0] == 127 and p[0, 3] == 0                      # max -> 127, masked -> 0
    assert list(p[1, :3]) == [127] * 3 and sums[1] == 381
    p, sums, recip = softmax_int(s, mult=1, shift=0, kv_len=0)   # fully masked rows
    assert not p.any() and not sums.any() and not recip.any()
    assert exp2_int([16 * 8 - 1, 16 * 8, 10**9]).tolist()[1:] == [0, 0]  # beyond the range: 0
    assert row_reciprocal([127])[0] == (2**32 + 63) // 127


@pytest.mark.parametrize("config", [NPUConfig(), NPUConfig(rows=4, cols=4)], ids=["8x8", "4x4"])
def test_attention_kernel_matches_golden_on_model(config):
    cases = [{"seq": s, "heads": 2, "d": 20, "mask": m}
             for s in (1, 7, 17) for m in ("none", "causal", "padding")]
    cases.append({"seq": 6, "heads": 1, "d": 32, "mask": "padding", "kv_len": 0})
    res = rtl_jobs.attention_cases(ModelBackend(config), cases=cases)["cases"]
    assert all(r["bit_exact"] for r in res)
    assert res[-1]["all_zero"]


def test_attention_needs_square_array():
    with pytest.raises(ValueError, match="square"):
        plan_attention(NPUConfig(rows=4, cols=8), 8, 32)


def test_minilm_attention_block_accuracy_l128():
    from sw.models.attention_block import (
        calibrate_block,
        dequantize_output,
        embed_ids,
        float_block,
        golden_block,
        tokens_for_length,
    )
    from sw.models.minilm import DEFAULT_CALIBRATION_TEXT, DEFAULT_EVAL_TEXT, load_minilm
    from sw.quant import sqnr_db

    assert DEFAULT_EVAL_TEXT not in DEFAULT_CALIBRATION_TEXT
    model = load_minilm()
    bq = calibrate_block(model)
    ids, kv = tokens_for_length(model, DEFAULT_EVAL_TEXT, 128)
    x = embed_ids(model, ids)
    ref = float_block(model, x, kv)["output"]
    out = dequantize_output(bq, golden_block(bq, x, kv)["output"])
    assert sqnr_db(ref, out) >= 25.0
