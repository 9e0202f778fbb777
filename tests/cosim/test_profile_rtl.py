"""Profiles from the hardware command trace on the Verilator RTL (default 8x8 configuration,
64-entry trace FIFOs), and ``npu run --trace`` / ``--trace-png`` end to end."""

import json

import pytest

from cosim.cli import main
from cosim.tb.harness import run_job
from hw.config import NPUConfig
from hw.isa import ErrorCode
from sw.runtime.profile import Profile
from tests.support import profile_jobs
from tests.support.trace_schema import check_text

CONFIG = NPUConfig()


def test_profile_on_the_rtl_is_the_counters_view():
    """Two GEMMs in a layer region (267 matmuls, several in flight at once, and 297 loads:
    more than four FIFOs' worth of each) while a second queue fails and is reset; every
    engine command appears once, with the cycles the busy and retired counters saw, the
    MATMULs exactly as :class:`hw.isa.MatmulTimeline` schedules them."""
    r = run_job(CONFIG, "tests.support.profile_jobs:layer_of_two_gemms",
                {"config": CONFIG.to_dict(), "m": 8, "k": 64, "n": 512,
                 "failing_stream": True}, name="profile_layer").result
    assert r["bit_exact"]
    profile = Profile.from_dict(r["profile"])
    records = profile_jobs.decoded_records(r["records"])
    f = r["failed"]
    assert ErrorCode(f["code"]) == ErrorCode.BAD_DRAM_ADDR
    profile_jobs.check_profile(profile, records, ran={f["queue"]: f["index"] + 1},
                               errors={(f["queue"], f["index"]): ErrorCode(f["code"])})
    profile_jobs.check_regions(profile, records)
    assert profile.counters["retired.matrix"] > 4 * CONFIG.trace_depth
    assert profile.counters["retired.load"] > CONFIG.trace_depth


@pytest.fixture
def perf_for_rtl(monkeypatch):
    """``npu run``'s RTL path with the job run in-process on the performance model (the RTL
    run of the whole job is ``make run``'s; the job itself is checked on the RTL above)."""
    from sw.jobs import minilm_block
    from sw.perf import PerfBackend

    def run_on_rtl(config, job, args, **kw):
        return getattr(minilm_block, job.split(":")[1])(PerfBackend(config), **args)
    monkeypatch.setattr("cosim.tb.harness.run_on_rtl", run_on_rtl)


def test_npu_run_writes_the_trace_and_the_png(perf_for_rtl, tmp_path, capsys):
    trace, png, out = tmp_path / "t" / "run.json", tmp_path / "run.png", tmp_path / "r.json"
    assert main(["run", "--qkv-only", "--trace", str(trace), "--trace-png", str(png),
                 "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"wrote {trace}" in text and f"wrote {png}" in text and "WARNING" not in text
    doc = check_text(trace.read_text(encoding="utf-8"))
    summary = doc["otherData"]["engines"]
    assert doc["otherData"]["lost"] == 0
    # 204 MATMULs (one per run of K blocks since MATMUL k_len): several FIFOs' worth
    assert summary["matrix"]["commands"] == summary["matrix"]["retired"] > 3 * CONFIG.trace_depth
    regions = [ev["name"] for ev in doc["traceEvents"] if ev.get("cat") == "region"]
    assert regions == ["query", "key", "value"]
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert "profile" not in json.loads(out.read_text())       # the figures stay small


def test_npu_run_trace_needs_a_timed_backend(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--backend", "model", "--trace", "x.json"])
    assert "need a timed backend" in capsys.readouterr().err
