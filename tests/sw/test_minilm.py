"""sw.models.minilm: the real workload's loader and the int8 Q/K/V projections on the model
backend."""

import numpy as np
import pytest

from hw.config import NPUConfig
from sw.kernels.linear import linear
from sw.model import ModelBackend
from sw.models.minilm import (
    DEFAULT_CALIBRATION_TEXT,
    DEFAULT_EVAL_TEXT,
    PROJECTIONS,
    calibrate_qkv,
    evaluate,
    load_minilm,
)
from sw.runtime import Device


@pytest.fixture(scope="module")
def model():
    return load_minilm()


def test_loader_shapes(model):
    assert model.hidden == 384 and model.config["num_attention_heads"] == 12
    assert model.tensors["embeddings.word_embeddings.weight"].shape == (30522, 384)
    ids = model.token_ids(DEFAULT_EVAL_TEXT)
    assert ids[0] == 101 and ids[-1] == 102 and len(ids) < 128  # no padding to 128
    x = model.embed(DEFAULT_EVAL_TEXT)
    assert x.shape == (len(ids), 384) and x.dtype == np.float32
    np.testing.assert_allclose(x.mean(axis=1), model.tensors["embeddings.LayerNorm.bias"].mean(),
                               atol=0.05)
    for name in PROJECTIONS:
        w, b = model.projection(name)
        assert w.shape == (384, 384) and b.shape == (384,) and w.dtype == np.float32
    assert DEFAULT_EVAL_TEXT not in DEFAULT_CALIBRATION_TEXT


def test_qkv_projections_on_device_sqnr(model):
    quant = calibrate_qkv(model)
    x = model.embed(DEFAULT_EVAL_TEXT)
    # A 16x16 array needs 4x fewer commands than 8x8 (encoding through hw.isa.encode costs
    # ~0.5 ms per command); the result is bit-exact with the golden model on any config.
    cfg = NPUConfig(rows=16, cols=16)
    dev = Device(ModelBackend(cfg), cfg)
    for name, q in quant.items():
        x_q = q.quantize_input(x)
        out = linear(dev, x_q, q.w, q.bias, q.multiplier, q.shift)
        np.testing.assert_array_equal(out, q.golden(x_q))
        sqnr, cos = evaluate(q, x, *model.projection(name), out)
        assert sqnr >= 28.0, f"{name}: SQNR {sqnr:.2f} dB"
        assert cos >= 0.998, f"{name}: cosine {cos:.5f}"


def test_block_jobs_say_how_many_semaphores_they_need_and_that_many_suffice():
    """The projections and the attention block hold ``SEMAPHORES`` pool semaphores at once:
    with fewer they say so before any work (not "all 0 pool semaphores in use" from inside
    the run); with that many they run."""
    from sw.jobs.minilm_block import SEMAPHORES, run_attention_job, run_qkv_job
    few = NPUConfig(n_sems=SEMAPHORES)
    with pytest.raises(ValueError, match=f"^the attention block needs {SEMAPHORES} pool "
                                         f"semaphores at once, 8x8,n_sems={SEMAPHORES} leaves "
                                         f"{SEMAPHORES - 1} "):
        run_attention_job(ModelBackend(few), config=few.to_dict(), seq_len=8)
    none = NPUConfig(n_sems=1)
    with pytest.raises(ValueError, match="^each Q/K/V projection needs .*, 8x8,n_sems=1 "
                                         "leaves none "):
        run_qkv_job(ModelBackend(none), config=none.to_dict())
    cfg = NPUConfig(n_sems=SEMAPHORES + 1)
    assert run_attention_job(ModelBackend(cfg), config=cfg.to_dict(), seq_len=8)["bit_exact"]
