"""The whole encoder as command streams (sw/jobs/encoder.py) and its kernels: the linear
kernel's GELU epilogue, the LAYERNORM/ADD kernel over row tiles, the device-resident
attention launch; bit-exact against the golden model on the functional and performance
models."""

import numpy as np
import pytest

from hw.config import NPUConfig
from hw.isa import Opcode
from sw.golden import add_int, gelu_int, layernorm_int, matmul_int
from sw.jobs.encoder import OPS, format_encoder_report, run_encoder_job
from sw.kernels.eltwise import eltwise_launch, pack_add_params, pack_layernorm_params
from sw.kernels.linear import linear_launch, pack_activations
from sw.model import ModelBackend
from sw.perf import PerfBackend
from sw.runtime import Device


@pytest.mark.parametrize("backend", [ModelBackend, PerfBackend], ids=["model", "perf"])
@pytest.mark.parametrize("layers", [1, 6])
def test_encoder_is_bit_exact(backend, layers):
    cfg = NPUConfig()
    r = run_encoder_job(backend(cfg), config=cfg.to_dict(), seq_len=8, n_layers=layers)
    assert r["bit_exact"], [k for k, v in r["exact"].items() if not v]
    assert len(r["exact"]) == 1 + 5 * layers          # x0 and five tensors per layer
    assert r["cosine"] > 0.99 and r["cosine"] == r["golden_cosine"]
    assert [o["op"] for o in r["ops"]] == ["ln0", *OPS * layers]
    timed = backend is PerfBackend
    assert all((o["cycles"] > 0) == timed for o in r["ops"])
    if timed:
        assert r["total"]["cycles"] == sum(p["cycles"] for p in r["per_layer"])
        assert 0 < r["total"]["utilization"] < 1
    assert "bit-exact with the golden model: yes" in format_encoder_report(r)


def test_encoder_pads_keys_and_runs_on_4x4():
    """4x4 (96 element blocks per LayerNorm, several row tiles), a padded sequence (masked
    keys, pooling over the valid tokens only)."""
    cfg = NPUConfig(rows=4, cols=4)
    r = run_encoder_job(ModelBackend(cfg), config=cfg.to_dict(), text="Short words.",
                        seq_len=12, fill="pad", n_layers=2)
    assert r["bit_exact"] and r["kv_len"] < r["tokens"] == 12


def test_encoder_rejects_lengths_off_the_array():
    cfg = NPUConfig()
    with pytest.raises(ValueError, match="multiples of cols"):
        run_encoder_job(ModelBackend(cfg), config=cfg.to_dict(), seq_len=12, n_layers=0)
    with pytest.raises(ValueError, match="layers must be in 0..6"):
        run_encoder_job(ModelBackend(cfg), config=cfg.to_dict(), seq_len=8, n_layers=7)


@pytest.mark.parametrize("double_buffer", [True, False])
def test_linear_gelu_epilogue(double_buffer):
    """GELU instead of REQUANT at the end of a linear layer (four parameter rows per N block),
    ragged M, K, N, both plans: bit-exact with gelu_int of the exact product."""
    cfg = NPUConfig()
    rng = np.random.default_rng(5)
    m, k, n = 19, 44, 37
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    w = rng.integers(-128, 128, (k, n), dtype=np.int8)
    bias = rng.integers(-5000, 5000, n)
    m1 = rng.integers(1 << 29, 1 << 30, n)
    s1 = rng.integers(34, 38, n)
    m2 = rng.integers(1 << 29, 1 << 30, n)
    s2 = rng.integers(33, 36, n)
    dev = Device(ModelBackend(cfg))
    s = dev.default_stream
    job = linear_launch(s, a, w, bias, m1, s1, gelu=(m2, s2), double_buffer=double_buffer)
    assert job.plan.gelu and job.plan.p_rows == 4
    s.synchronize()
    want = gelu_int(matmul_int(a, w), bias, m1, s1, m2, s2)
    assert np.array_equal(job.output(), want)
    assert len(np.unique(want)) > 20                     # not a saturated or constant output
    with pytest.raises(ValueError, match="relu and gelu"):
        linear_launch(s, a, w, bias, m1, s1, relu=True, gelu=(m2, s2))
    with pytest.raises(ValueError, match="s2 outside"):
        linear_launch(s, a, w, bias, m1, s1, gelu=(m2, s2 + 64))


@pytest.mark.parametrize("backend", [ModelBackend, PerfBackend], ids=["model", "perf"])
@pytest.mark.parametrize("opcode", [Opcode.LAYERNORM, Opcode.ADD])
def test_eltwise_kernel_over_row_tiles(backend, opcode):
    """LAYERNORM / ADD over 45 rows of 384 channels in a small scratchpad region: several
    double-buffered row tiles (the last one short), negative gammas, an all-equal row."""
    cfg = NPUConfig()
    rng = np.random.default_rng(9)
    m, n = 45, 384
    a = rng.integers(-128, 128, (m, n), dtype=np.int8)
    b = rng.integers(-128, 128, (m, n), dtype=np.int8)
    a[3], b[3] = 7, -2
    ma, mb = rng.integers(1 << 20, 1 << 22, (2, n))
    gamma = rng.integers(1 << 19, 1 << 21, n) * rng.choice([-1, 1], n)
    beta = rng.integers(-(1 << 12), 1 << 12, n)
    dev = Device(backend(cfg))
    s = dev.default_stream
    sems = {x: dev.alloc_semaphore() for x in "LRS"}
    bufs = [s.upload(pack_activations(cfg, x)) for x in (a, b)]
    out = s.alloc(len(pack_activations(cfg, a).tobytes()))
    if opcode == Opcode.LAYERNORM:
        p = s.upload(pack_layernorm_params(cfg, ma, mb, gamma, beta))
        want = layernorm_int(a, b, ma, mb, 16, gamma, beta, 20)
    else:
        p = s.upload(pack_add_params(cfg, ma, mb))
        want = add_int(a, b, ma, mb, 16)
    region = (100, 6 * 48 * 8)               # 8 rows per tile: 6 tiles
    n_cmds = eltwise_launch(s, opcode, *bufs, p, out, m=m, n=n, shift=16, g_shift=20,
                            sems=sems, spad_region=region, acc_row=5)
    assert n_cmds == 1 + 6 * 4
    s.synchronize()
    got = dev.download(out, np.int8, (48, m, 8)).transpose(1, 0, 2).reshape(m, n)
    assert np.array_equal(got, want)
    with pytest.raises(ValueError, match="do not fit"):
        eltwise_launch(s, opcode, *bufs, p, out, m=m, n=n, shift=16, sems=sems,
                       spad_region=(0, 100))
