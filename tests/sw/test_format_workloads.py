"""Number formats through the jobs and tools: the MiniLM block in each format (bit-exact,
accuracy ordering, weight bytes), workload names with formats, the ``npu`` format flags."""

import pytest

from cosim.bench.workloads import FORMATS, WorkloadError, parse_workload, with_format
from cosim.cli import main
from hw.config import NPUConfig
from sw.jobs.minilm_block import run_attention_job
from sw.model import ModelBackend

MX8 = NPUConfig(mx=1)


def test_minilm_block_in_every_format():
    res = {}
    for w, a in (("int8", "int8"), ("int4", "int8"), ("mxint8", "int8"), ("mxint8", "mxint8")):
        r = run_attention_job(ModelBackend(MX8), config=MX8.to_dict(), seq_len=16,
                              weights=w, activations=a)
        assert r["bit_exact"], (w, a)
        res[w, a] = r
    int8 = res["int8", "int8"]
    assert res["int4", "int8"]["weight_bytes"] * 2 == int8["weight_bytes"]
    # MXINT8 weights: one exponent row per 8-row K tile on the 8x8 array
    assert res["mxint8", "int8"]["weight_bytes"] * 8 == int8["weight_bytes"] * 9
    # int4 weights lose accuracy (TOOLCHAIN.md: 12-16 dB), MXINT8 keeps int8's
    assert res["int4", "int8"]["sqnr_db"] < int8["sqnr_db"] - 6
    assert res["mxint8", "int8"]["sqnr_db"] > int8["sqnr_db"] - 1
    assert res["mxint8", "mxint8"]["sqnr_db"] > int8["sqnr_db"]


def test_workload_format_names():
    assert parse_workload("gemm:1x384x1536").name == "gemm:1x384x1536"
    wl = parse_workload("gemm:1x384x1536@int4")
    assert (wl.fmt, wl.weights, wl.activations, wl.name) == (
        "int4", "int4", "int8", "gemm:1x384x1536@int4")
    wl = parse_workload("minilm-block:32@mxint8+mxint8")
    assert (wl.weights, wl.activations) == ("mxint8", "mxint8")
    assert with_format(parse_workload("gemm:8x8x8"), "int8", "mxint8").name == \
        "gemm:8x8x8@int8+mxint8"
    assert len(FORMATS) == 6
    with pytest.raises(WorkloadError, match="unknown format"):
        parse_workload("gemm:8x8x8@fp4")
    assert "mx=1" in parse_workload("gemm:8x8x8@mxint8").unsupported(NPUConfig())
    assert parse_workload("gemm:8x8x8@mxint8").unsupported(MX8) is None
    assert "rows must divide 32, 6x6,mx=1 has rows=6" in parse_workload(
        "gemm:8x8x8@mxint8").unsupported(NPUConfig(rows=6, cols=6, mx=1))
    assert "MXINT8 weights only" in parse_workload(
        "minilm-block:8@int4+mxint8").unsupported(MX8)


@pytest.mark.parametrize("argv, message", [
    (["--block", "--weights", "mxint8"], "mx=1"),
    (["--block", "--config", "8x8,mx=1", "--activations", "mxint8"], "needs --weights mxint8"),
    (["--weights", "mxint8"], "--weights applies to --block, not to the encoder"),
    (["--qkv-only", "--weights", "int4"], "--weights applies to --block, not to --qkv-only"),
])
def test_run_format_flags_refused(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["run", "--backend", "model", *argv])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
