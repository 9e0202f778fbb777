"""The recorder and the pure Verilator C++ replay harness (:mod:`cosim.tb.replay`) on a tiny job:
the replay must reproduce the cocotb run bit for bit (every sampled CSR/handshake value and
every DRAM dump) and reach the same cycle count, and a tampered recording must be caught.
No assertion on speed (benchmarks are not tests)."""

import struct

import pytest

from cosim.tb.harness import run_job
from cosim.tb.replay import (
    _EVENT,
    OP_CHECK,
    OP_DRIVE,
    OP_DUMP,
    OP_LOAD,
    build_native,
    read_recording,
    run_native,
)
from hw.config import NPUConfig

CONFIG = NPUConfig()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, worker_id):
    # one run directory per xdist worker: each worker runs this module fixture itself
    rec = tmp_path_factory.mktemp("replay") / "tiny_gemm.rec"
    r = run_job(CONFIG, "cosim.bench:gemm_sweep_job", {"sizes": [16]},
                name=f"test_replay_{worker_id}", record=rec)
    assert r.result["gemm"][0]["bit_exact"]
    return r, rec, build_native(CONFIG)


def test_recording_holds_the_host_activity(recorded):
    r, path, _ = recorded
    rec = read_recording(path)
    assert rec.cycles == r.cycles == r.recording["cycles"]
    ops = [e[1] for e in rec.events]
    for op in (OP_DRIVE, OP_CHECK, OP_LOAD, OP_DUMP):
        assert op in ops
    assert [e[0] for e in rec.events] == sorted(e[0] for e in rec.events)
    assert rec.events[-1][0] <= rec.end_step
    assert {"rst", "csr__awaddr", "csr__rdata", "irq", "bd_op"} <= set(rec.signals)
    assert r.recording["events"] == len(rec.events)


def test_native_replay_matches_cocotb_bit_for_bit(recorded):
    r, path, build = recorded
    n = run_native(build.exe, path)
    rec = read_recording(path)
    assert n.ok, n.first_mismatch
    assert n.mismatches == 0 and n.raw["reached_end"]
    assert n.cycles == r.cycles
    # every sampled output and every DRAM dump (the GEMM result included) was compared
    assert n.checks == sum(1 for e in rec.events if e[1] in (OP_CHECK, OP_DUMP))
    assert n.raw["dump_bytes"] > 16 * 16


def _tamper(src, dst, want_op, change) -> None:
    """Copy the recording ``src`` to ``dst`` with the last event of kind ``want_op`` changed."""
    raw = bytearray(src.read_bytes())
    rec = read_recording(src)
    off = 40 + sum(8 + len(s) + (-len(s) % 8) for s in rec.signals)
    last = None
    for step, op, sig, value, data in rec.events:
        if op == want_op:
            last = (off, step, op, sig, value, data)
        off += _EVENT.size + len(data) + (-len(data) % 8)
    assert last is not None
    change(raw, *last)
    dst.write_bytes(bytes(raw))


def test_replay_detects_a_wrong_csr_value(recorded, tmp_path):
    _, path, build = recorded

    def flip(raw, off, step, op, sig, value, data):
        struct.pack_into("<Q", raw, off + 16, value ^ 1)

    _tamper(path, tmp_path / "bad_check.rec", OP_CHECK, flip)
    n = run_native(build.exe, tmp_path / "bad_check.rec")
    assert not n.ok and n.mismatches == 1 and "recorded" in n.first_mismatch


def test_replay_detects_a_wrong_dram_result(recorded, tmp_path):
    _, path, build = recorded

    def flip(raw, off, step, op, sig, value, data):
        i = off + _EVENT.size + data.index(b"\n") - 1   # last digit of the first word
        raw[i] = ord("1") if raw[i] != ord("1") else ord("2")

    _tamper(path, tmp_path / "bad_dump.rec", OP_DUMP, flip)
    n = run_native(build.exe, tmp_path / "bad_dump.rec")
    assert not n.ok and "DRAM dump differs" in n.first_mismatch


def test_recording_needs_the_internal_clock(tmp_path):
    with pytest.raises(ValueError, match="internal clock"):
        run_job(CONFIG, "tests.support.cosim_jobs:smoke", name="x", internal_clock=False,
                record=tmp_path / "x.rec")


def test_bench_native_section(recorded):
    from cosim.bench import format_bench, measure_native

    r, path, _ = recorded
    nat = measure_native(CONFIG, r, path)
    assert nat["replay_matches"] and nat["cycles_agree"] and nat["mismatches"] == 0
    assert nat["cycles_cocotb"] == nat["cycles_native"] == r.cycles
    for key in ("cocotb_cycles_per_second", "native_cycles_per_second", "ratio", "ratio_cpu"):
        assert nat[key] is not None and nat[key] > 0
    res = {"backend": "rtl", "gemm": {}, "attention": None, "build": None,
           "cosim_speed": {"runs": [{"run": "gemm 8x8", "cycles": r.cycles,
                                     "job_seconds": r.job_seconds,
                                     "cycles_per_second": r.cycles / r.job_seconds}],
                           "verilator_cpp_harness": nat}}
    table = format_bench(res)
    assert "ratio cocotb / native" in table and "replay matches bit for bit" in table
