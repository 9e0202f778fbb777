"""Streams, events, windows, per-queue errors, ring wrap and DMA/compute overlap: the jobs of
:mod:`tests.runtime_jobs` on the Verilator RTL (default configuration, 4 queues) and on the
functional model. Timing claims (overlap, concurrency, trace cycles) are checked on the RTL;
the model checks the same semantics in logical time."""

import pytest

from cosim.harness import run_job
from hw.config import NPUConfig
from sw.model import ModelBackend
from tests import runtime_jobs

CONFIG = NPUConfig()


@pytest.fixture(params=["rtl", "model"])
def backend(request):
    return request.param


def run(backend: str, job: str, **args) -> dict:
    if backend == "model":
        return getattr(runtime_jobs, job)(ModelBackend(CONFIG), **args)
    return run_job(CONFIG, f"tests.runtime_jobs:{job}", args, name=f"runtime_{job}").result


def test_event_dependency_between_concurrent_gemms(backend):
    r = run(backend, "event_dependency")
    assert r["correct"] == {"a": True, "b": True, "c": True}
    assert min(r["n_trace"].values()) > 0
    assert r["dependency_honoured"], f"GEMM C started at {r['c_start']} before A ended " \
                                     f"at {r['a_end']}"
    if backend == "rtl":
        assert r["a_b_overlap"], "the two independent GEMMs did not run concurrently"
        # events bracket GEMM A: their timestamps span its traced commands
        assert r["event_elapsed"] >= r["a_end"] - r["a_start"] > 0
    else:
        assert r["event_elapsed"] == 0                  # the untimed model


def test_unrecorded_event_times_out_naming_the_semaphore(backend):
    r = run(backend, "unrecorded_event")
    assert r["raised"]
    assert r["blocked"] == [{"queue": 1, "index": 0, "sem": r["sem"], "value": 1,
                             "current": 0, "last_signal": None}]
    assert f"semaphore {r['sem']} >= 1" in r["message"] and "never signalled" in r["message"]
    assert not r["query"] and r["works_after"]


def test_dma_outside_window_fails_alone_and_changes_nothing(backend):
    r = run(backend, "window_violation")
    assert r["raised"] and r["code"] == "WINDOW" and r["queue"] == 1 and r["index"] == 1
    assert r["address"] == r["expected_address"]
    assert r["changed_outside"] == 0 and r["victim_intact"] and r["third_command_skipped"]
    assert r["others_ok"] == {"gemm": True, "copy": True}
    assert r["works_after"]


def test_ring_wrap_and_full_ring_execute_in_order(backend):
    r = run(backend, "ring_wrap")
    assert r["sem"] == 40 and r["n_traced"] == 40 and r["load_indices_in_order"]
    assert r["submitted"] == 81 > r["ring_commands"]


def test_double_buffered_linear_overlaps_dma_with_compute(backend):
    r = run(backend, "overlap")
    ser, dbl = r["serialized"], r["double_buffered"]
    assert ser["bit_exact"] and dbl["bit_exact"] and dbl["double_buffer"]
    if backend == "rtl":
        assert dbl["overlap"] >= 0.5 * dbl["dma_busy"], r
        assert ser["overlap"] == 0, r                       # the serialized chain never overlaps
        assert dbl["cycles"] < ser["cycles"], r
