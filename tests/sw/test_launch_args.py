"""The kernels' ``*_launch`` entry points refuse a device argument they cannot use, before
anything is allocated, uploaded, counted or launched (:mod:`sw.kernels.device_args`): a buffer
smaller than the layout the kernel reads or writes (by one byte), a freed buffer or semaphore,
a buffer or semaphore of another device; they take buffers of exactly their layout."""

import re

import numpy as np
import pytest

from hw.config import NPUConfig
from hw.isa import Opcode
from sw.golden import layernorm_int, linear_int
from sw.kernels.attention import attention_launch, attention_with_stats, pack_attention_params
from sw.kernels.eltwise import eltwise_launch, pack_layernorm_params
from sw.kernels.linear import linear_launch, pack_activations, pack_weights, plan_linear
from sw.model import ModelBackend
from sw.perf.backend import PerfBackend
from sw.runtime import Device, NPUError
from tests.support.device_state import device_state


def _linear(dev: Device):
    """linear_launch with a packed activation buffer ``a``, a ``w_buf`` and caller's
    ``sems``."""
    c, s = dev.config, dev.default_stream
    rng = np.random.default_rng(0)
    m, k, n = 16, 40, 24
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    w = rng.integers(-128, 128, (k, n), dtype=np.int8)
    bias = rng.integers(-1000, 1000, n)
    mult, shift = np.full(n, 1 << 20), np.full(n, 28)
    plan = plan_linear(c, m, k, n, double_buffer=True, dram=dev.dram_timing)
    bufs = {"a": s.upload(pack_activations(c, a)), "w_buf": s.upload(pack_weights(c, plan, w))}
    sems = {f"sems[{x!r}]": dev.alloc_semaphore() for x in "LMRS"}

    def launch(b, sm):
        job = linear_launch(s, b["a"], w, bias, mult, shift, m=m, plan=plan, w_buf=b["w_buf"],
                            sems={x: sm[f"sems[{x!r}]"] for x in "LMRS"})
        s.synchronize()
        return job.output()
    return bufs, sems, launch, linear_int(a, w, bias, mult, shift)


def _attention(dev: Device):
    c, s = dev.config, dev.default_stream
    rng = np.random.default_rng(1)
    seq, heads, d = 16, 2, 16
    q, k, v = rng.integers(-128, 128, (3, seq, heads * d), dtype=np.int8)
    om, osh = np.full(heads * d, 1 << 30), np.full(heads * d, 12)
    score = {"score_mult": [300] * heads, "score_shift": [12] * heads}
    want, _ = attention_with_stats(dev, q, k, v, heads=heads, out_mult=om, out_shift=osh,
                                   **score)
    bufs = {f"{x}_buf": s.upload(pack_activations(c, t))
            for x, t in zip("qkv", (q, k, v), strict=True)}
    bufs["p_buf"] = s.upload(pack_attention_params(c, heads, d, om, osh))
    bufs["o_buf"] = s.alloc(bufs["q_buf"].nbytes)

    def launch(b, sm):
        attention_launch(s, *(b[f"{x}_buf"] for x in "qkvpo"), seq=seq, heads=heads,
                         head_dim=d, sem=sm["sem"], **score)
        s.synchronize()
        o = dev.download(b["o_buf"], np.int8, (heads * d // c.cols, seq, c.spad_row_bytes))
        return o[:, :, :c.cols].transpose(1, 0, 2).reshape(seq, heads * d)
    return bufs, {"sem": dev.alloc_semaphore()}, launch, want


def _layernorm(dev: Device):
    c, s = dev.config, dev.default_stream
    rng = np.random.default_rng(2)
    m, n = 12, 48
    a, b = rng.integers(-128, 128, (2, m, n), dtype=np.int8)
    ma, mb = rng.integers(1 << 20, 1 << 22, (2, n))
    gamma, beta = rng.integers(1 << 19, 1 << 21, n), rng.integers(-(1 << 12), 1 << 12, n)
    bufs = {"a_buf": s.upload(pack_activations(c, a)), "b_buf": s.upload(pack_activations(c, b)),
            "p_buf": s.upload(pack_layernorm_params(c, ma, mb, gamma, beta)),
            "o_buf": s.alloc(pack_activations(c, a).nbytes)}
    sems = {f"sems[{x!r}]": dev.alloc_semaphore() for x in "LRS"}

    def launch(bf, sm):
        eltwise_launch(s, Opcode.LAYERNORM, bf["a_buf"], bf["b_buf"], bf["p_buf"], bf["o_buf"],
                       m=m, n=n, shift=16, g_shift=20,
                       sems={x: sm[f"sems[{x!r}]"] for x in "LRS"})
        s.synchronize()
        o = dev.download(bf["o_buf"], np.int8, (n // c.cols, m, c.spad_row_bytes))
        return o[:, :, :c.cols].transpose(1, 0, 2).reshape(m, n)
    return bufs, sems, launch, layernorm_int(a, b, ma, mb, 16, gamma, beta, 20)


KERNELS = {"linear": _linear, "attention": _attention, "layernorm": _layernorm}
BACKENDS = {"model": ModelBackend, "perf": PerfBackend}


@pytest.mark.parametrize("backend", BACKENDS.values(), ids=BACKENDS.keys())
@pytest.mark.parametrize("kernel", KERNELS.values(), ids=KERNELS.keys())
def test_launch_takes_buffers_of_exactly_their_layout(kernel, backend):
    dev = Device(backend(NPUConfig()))
    bufs, sems, launch, want = kernel(dev)
    np.testing.assert_array_equal(launch(bufs, sems), want)


FAULTS = ("short", "freed", "other_device")


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("backend", BACKENDS.values(), ids=BACKENDS.keys())
@pytest.mark.parametrize("kernel", KERNELS.values(), ids=KERNELS.keys())
def test_launch_refuses_an_unusable_buffer_before_anything(kernel, backend, fault):
    """Each buffer argument in turn one byte short, freed, or of another device: refused with
    a typed error naming it; no memory, semaphore or command is used and no semaphore counted
    (a short buffer ran and read or wrote past it, a freed one wrote into whatever reused its
    memory)."""
    dev = Device(backend(NPUConfig()))
    other = Device(backend(NPUConfig()))
    bufs, sems, launch, _ = kernel(dev)
    for name, buf in bufs.items():
        if fault == "short":
            bad = dev.default_stream.alloc(buf.nbytes - 1)
            error, message = ValueError, (rf"^{name} too small for .*: needs {buf.nbytes} "
                                          rf"bytes \(.*\), got {buf.nbytes - 1}$")
        elif fault == "freed":
            bad = dev.default_stream.alloc(buf.nbytes)
            bad.free()
            error, message = NPUError, rf"^{name} \({buf.nbytes} bytes at .*\) was freed$"
        else:
            bad = other.alloc(buf.nbytes)
            error, message = ValueError, rf"^{name} is a buffer of another device"
        before = device_state(dev)
        with pytest.raises(error, match=message):
            launch({**bufs, name: bad}, sems)
        assert device_state(dev) == before
        assert all(s.issued == 0 for s in sems.values())
        if not bad.freed:
            bad.free()


@pytest.mark.parametrize("fault", FAULTS[1:])
@pytest.mark.parametrize("backend", BACKENDS.values(), ids=BACKENDS.keys())
@pytest.mark.parametrize("kernel", KERNELS.values(), ids=KERNELS.keys())
def test_launch_refuses_an_unusable_semaphore_before_anything(kernel, backend, fault):
    """A freed semaphore (its id may be another owner's now) or one of another device."""
    dev = Device(backend(NPUConfig()))
    other = Device(backend(NPUConfig()))
    bufs, sems, launch, _ = kernel(dev)
    for name in sems:
        if fault == "freed":
            bad = dev.alloc_semaphore()
            bad.free()
            error, message = NPUError, rf"^{re.escape(name)} \(semaphore {bad.id}\) was freed$"
        else:
            bad = other.alloc_semaphore()
            error, message = ValueError, rf"^{re.escape(name)} is a semaphore of another device"
        before = device_state(dev)
        with pytest.raises(error, match=message):
            launch(bufs, {**sems, name: bad})
        assert device_state(dev) == before
        assert all(s.issued == 0 for s in (*sems.values(), bad))

