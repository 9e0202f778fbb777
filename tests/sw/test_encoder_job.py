"""The whole encoder as command streams (sw/jobs/encoder.py) and its kernels: the linear
kernel's GELU epilogue, the LAYERNORM/ADD kernel over row tiles, the device-resident
attention launch; bit-exact against the golden model on the functional and performance
models."""

import numpy as np
import pytest

from hw.config import NPUConfig
from hw.isa import Opcode
from sw.golden import gelu_int, matmul_int
from sw.jobs.encoder import (
    OPS,
    QUEUES,
    SEMAPHORES,
    check_config,
    format_encoder_report,
    run_encoder_job,
)
from sw.kernels.eltwise import eltwise_launch, pack_add_params, pack_layernorm_params
from sw.kernels.linear import linear_launch
from sw.model import ModelBackend
from sw.perf import PerfBackend
from sw.runtime import Device
from tests.support import rtl_jobs
from tests.support.device_state import device_state


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


def test_encoder_layers_take_the_same_cycles_on_the_perf_model():
    """The six layers have the same shapes, so their cycles agree to within 2% (8x8, L=32,
    ideal DRAM): the host waits on an event between layers and must wake when it completes
    (it once slept to the end of its timeout, making two layers 49M cycles instead of 1M
    while staying bit-exact), and the whole pass stays above 85% MAC utilization (90.6%)."""
    cfg = NPUConfig()
    r = run_encoder_job(PerfBackend(cfg), config=cfg.to_dict(), seq_len=32)
    layers = [p["cycles"] for p in r["per_layer"][1:]]
    assert len(layers) == 6 and max(layers) < 1.02 * min(layers), layers
    assert r["total"]["utilization"] > 0.85, r["total"]


def test_encoder_pads_keys_and_runs_on_4x4():
    """4x4 (96 element blocks per LayerNorm, several row tiles), a padded sequence (masked
    keys, pooling over the valid tokens only)."""
    cfg = NPUConfig(rows=4, cols=4)
    r = run_encoder_job(ModelBackend(cfg), config=cfg.to_dict(), text="Short words.",
                        seq_len=12, fill="pad", n_layers=2)
    assert r["bit_exact"] and r["kv_len"] < r["tokens"] == 12


def test_encoder_says_how_many_queues_and_semaphores_it_needs_and_that_many_suffice():
    """The encoder needs two streams and seven pool semaphores: with fewer it says so (not
    "all 1 hardware queues have a stream" or "all 0 pool semaphores in use" from inside the
    run); with ``QUEUES`` queues and ``SEMAPHORES`` pool semaphores it runs."""
    one = NPUConfig(n_queues=1)
    with pytest.raises(ValueError, match="^the encoder needs 2 hardware queues .*, "
                                         "8x8,n_queues=1 has 1$"):
        run_encoder_job(ModelBackend(one), config=one.to_dict(), seq_len=8, n_layers=0)
    for n_sems, left in ((1, "none"), (SEMAPHORES, SEMAPHORES - 1)):
        few = NPUConfig(n_sems=n_sems)
        with pytest.raises(ValueError, match=f"^the encoder needs {SEMAPHORES} pool semaphores "
                                             f"at once, 8x8,n_sems={n_sems} leaves {left} "):
            run_encoder_job(ModelBackend(few), config=few.to_dict(), seq_len=8, n_layers=0)
    cfg = NPUConfig(n_queues=QUEUES, n_sems=SEMAPHORES + 1)
    assert run_encoder_job(ModelBackend(cfg), config=cfg.to_dict(), seq_len=8,
                           n_layers=1)["bit_exact"]


def test_encoder_rejects_lengths_off_the_array():
    cfg = NPUConfig()
    with pytest.raises(ValueError, match="a sequence length that is a multiple of cols=8, "
                                         "L=12 is not"):
        run_encoder_job(ModelBackend(cfg), config=cfg.to_dict(), seq_len=12, n_layers=0)
    with pytest.raises(ValueError, match="layers must be in 0..6"):
        run_encoder_job(ModelBackend(cfg), config=cfg.to_dict(), seq_len=8, n_layers=7)


@pytest.mark.parametrize("spec, seq_len, message", [
    ("4x8", 32, "the encoder needs a square array (the transposed K load), got 4x8"),
    ("7x7", 28, "the encoder needs cols to divide the hidden size 384, 7x7 has cols=7"),
    # the head size first: no L helps a 12x12 (L=36 would only hit it next)
    ("12x12", 32, "the encoder needs cols to divide the head size 32, cols=12 does not (the "
     "attention block alone runs on any square array: npu run --block, sweep workload "
     "minilm-block:L)"),
    ("8x8", 12, "the encoder needs a sequence length that is a multiple of cols=8, L=12 is "
     "not"),
])
def test_check_config_says_what_the_encoder_needs(spec, seq_len, message):
    """The job's own check, one condition at a time, in the words ``npu run`` shows (the CLI
    made these checks a second time, with clearer messages than the job's)."""
    with pytest.raises(ValueError) as e:
        check_config(NPUConfig.parse(spec), seq_len)
    assert str(e.value) == message


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
    double-buffered row tiles (the last one short), negative gammas, an all-equal row (the
    RTL runs the same job in tests/cosim/test_encoder_rtl.py)."""
    r = rtl_jobs.eltwise_row_tiles(backend(NPUConfig()), opcode=opcode.name)
    assert r["bit_exact"] and r["commands"] == 1 + 6 * 4


def test_eltwise_kernel_rejects_what_does_not_fit():
    cfg = NPUConfig()
    dev = Device(ModelBackend(cfg))
    s = dev.default_stream
    sems = {x: dev.alloc_semaphore() for x in "LRS"}
    buf = s.alloc(1 << 16)
    with pytest.raises(ValueError, match="48 element blocks need at least 288 scratchpad "
                       "rows .*the region has 100"):
        eltwise_launch(s, Opcode.LAYERNORM, buf, buf, buf, buf, m=45, n=384, shift=16,
                       sems=sems, spad_region=(0, 100))
    with pytest.raises(ValueError, match="LAYERNORM of 48 element blocks needs 192 parameter "
                       "rows from accumulator row 900, acc_rows=1024"):
        eltwise_launch(s, Opcode.LAYERNORM, buf, buf, buf, buf, m=45, n=384, shift=16,
                       sems=sems, acc_row=900)
    with pytest.raises(ValueError, match="LAYERNORM or ADD"):
        eltwise_launch(s, Opcode.GELU, buf, buf, buf, buf, m=8, n=384, shift=16, sems=sems)
    # a region past the scratchpad ran and failed on the device (BAD_LOCAL_ADDR); fractional
    # rows and counts ran or failed deep inside
    before = device_state(dev)
    for over, error, message in (
            ({"spad_region": (4090, 100)}, ValueError, r"region \(4090, 100\) is outside"),
            ({"spad_region": (0, 5000)}, ValueError, "is outside"),
            ({"spad_region": (10.5, 100)}, TypeError, "two integers"),
            ({"acc_row": 2.5}, TypeError, "acc_row must be an integer, got 2.5"),
            ({"acc_row": -1}, ValueError, "from accumulator row -1"),
            ({"m": 15.5}, TypeError, "m must be an integer, got 15.5"),
            ({"n": 16.0}, TypeError, "n must be an integer, got 16.0")):
        with pytest.raises(error, match=message):
            eltwise_launch(s, Opcode.ADD, buf, buf, buf, buf, shift=16, sems=sems,
                           **{"m": 8, "n": 16, **over})
    assert device_state(dev) == before and all(x.issued == 0 for x in sems.values())
    with pytest.raises(ValueError, match="gamma outside"):
        pack_layernorm_params(cfg, [1], [1], [1 << 31], [0])


@pytest.mark.parametrize("opcode", [Opcode.LAYERNORM, Opcode.ADD])
@pytest.mark.parametrize("over,error,message", [
    ({"shift": 64}, ValueError, r"shift outside \[0, 63\]: got 64"),
    ({"shift": -1}, ValueError, r"shift outside \[0, 63\]: got -1"),
    ({"g_shift": 99}, ValueError, r"g_shift outside \[0, 63\]: got 99"),
    ({"shift": 16.5}, TypeError, "shift must be an integer, got 16.5"),
    ({"g_shift": True}, TypeError, "g_shift must be an integer, got dtype bool"),
], ids=["shift64", "shift-1", "g_shift99", "shift16.5", "g_shift_bool"])
def test_eltwise_launch_refuses_bad_shifts_before_launching(opcode, over, error, message):
    dev = Device(ModelBackend(NPUConfig()))
    s = dev.default_stream
    sems = {x: dev.alloc_semaphore() for x in "LRS"}
    buf = s.alloc(1 << 16)
    before = device_state(dev)
    with pytest.raises(error, match=message):
        eltwise_launch(s, opcode, buf, buf, buf, buf, m=8, n=16,
                       **{"shift": 16, "g_shift": 20, **over}, sems=sems)
    assert device_state(dev) == before and all(x.issued == 0 for x in sems.values())
    assert eltwise_launch(s, opcode, buf, buf, buf, buf, m=8, n=16, shift=16.0, g_shift=20,
                          sems=sems) == 5        # an integral float shift is accepted


@pytest.mark.parametrize("args,error,message", [
    ({"ma": [0.5, 1]}, TypeError, "ma must hold integers, got 0.5 at index 0.*"
     "quantize_multipliers"),
    ({"mb": [1, -1]}, ValueError, r"mb outside \[0, 2147483647\]: got -1 at index 1"),
    ({"mb": [1, 2**31]}, ValueError, r"mb outside \[0, 2147483647\]: got 2147483648"),
    ({"gamma": [1, 2.5]}, TypeError, "gamma must hold integers, got 2.5 at index 1"),
    ({"gamma": [1, -(1 << 31)]}, ValueError, r"gamma outside \[-2147483647, 2147483647\]"),
    ({"beta": [0, 0.9]}, TypeError, "beta must hold integers, got 0.9"),
    ({"beta": [0, 0, 0]}, ValueError, r"must share a shape \(N,\), got ma \(2,\), mb "
     r"\(2,\), gamma \(2,\), beta \(3,\)"),
], ids=["ma_float", "mb_neg", "mb_big", "gamma_float", "gamma_min", "beta_float", "shapes"])
def test_eltwise_params_refuse_bad_values(args, error, message):
    cfg = NPUConfig()
    kw = {"ma": [1, 2], "mb": [3, 4], "gamma": [5, -6], "beta": [7, 8], **args}
    with pytest.raises(error, match=message):
        pack_layernorm_params(cfg, **kw)
    if set(args) <= {"ma", "mb"}:
        with pytest.raises(error, match=message):
            pack_add_params(cfg, kw["ma"], kw["mb"])
    good = pack_layernorm_params(cfg, [1, 2], [3, 4], [5, -6], [7, 8])
    assert np.array_equal(pack_layernorm_params(cfg, [1.0, 2.0], [3, 4], [5.0, -6.0],
                                                np.array([7, 8], np.int8)), good)


def test_npu_run_encoder_prints_the_table_and_traces_its_regions(tmp_path, capsys):
    """`npu run --layers 1` on the performance model: exit 0 (bit-exact), the per-operation
    table, and a Perfetto trace whose layer and operation regions come from the FENCE
    timestamps and hold the engine commands."""
    import json

    from cosim.cli import main
    trace = tmp_path / "t.json"
    assert main(["run", "--backend", "perf", "--layers", "1", "--seq-len", "8",
                 "--trace", str(trace), "--json", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    assert "ffn1_gelu" in out and "bit-exact with the golden model: yes" in out
    ev = json.loads(trace.read_text())
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    names = [e["name"] for e in ev if e.get("ph") == "X"]
    for region in ("embedding", "layer 0", *OPS):
        assert names.count(region) == 1, region
    r = json.loads((tmp_path / "r.json").read_text())
    span = [o for o in r["ops"] if o["op"] == "qkv"][0]
    assert span["end"] - span["start"] == span["cycles"] > 0
