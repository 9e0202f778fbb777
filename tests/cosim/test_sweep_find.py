"""``npu sweep --find``: the bisection against known monotone functions, the questions'
parsing, the reference points, and one real question on the performance model."""

import json
import math

import pytest

from cosim.bench.find import FindError, format_answers, parse_question, point_for, run_find, search
from cosim.bench.workloads import parse_workload
from cosim.cli import main
from hw.config import NPUConfig
from sw.dram import DramTiming

IDEAL = DramTiming.parse("ideal")
GEMM = parse_workload("gemm:8x16x8")


def drive(q, ok):
    """Run :func:`search` with ``ok(value) -> bool``; the outcome and every value asked."""
    gen, asked = search(q), []
    try:
        values = next(gen)
        while True:
            asked += values
            values = gen.send({v: ok(v) for v in values})
    except StopIteration as stop:
        return stop.value, asked


@pytest.mark.parametrize("edge", [0.3, 1.0, 3.7, 7.99, 41.0])
def test_bandwidth_bisection(edge):
    q = parse_question("bw=0.25..64:slowdown<=5%")
    out, asked = drive(q, lambda v: v >= edge)
    meet, fail = out["bracket"]
    assert out["status"] == "found" and out["answer"] == meet
    assert fail < edge <= meet and meet / fail <= 1 + q.tol
    assert len(asked) <= 2 + math.ceil(math.log2(math.log(256) / math.log(1 + q.tol))) + 1


@pytest.mark.parametrize("edge", [3, 4, 150, 1234, 4999])
def test_latency_bisection_finds_the_largest(edge):
    q = parse_question("latency=3..5000:slowdown<=5%", tol=1e-9)     # exact
    out, asked = drive(q, lambda v: v <= edge)
    assert out == {"status": "found", "answer": edge, "bracket": [edge, edge + 1]}
    assert len(asked) <= 2 + math.ceil(math.log2(5000))
    coarse, _ = drive(parse_question("latency=3..5000:slowdown<=5%"), lambda v: v <= 1234)
    meet, fail = coarse["bracket"]
    assert meet <= 1234 < fail and fail - meet <= max(1, 0.02 * meet)


def test_power_of_two_and_list_domains():
    q = parse_question("spad_rows=64..65536:compute-bound")
    assert q.domain() == [1 << e for e in range(6, 17)]
    out, _ = drive(q, lambda v: v >= 2048)
    assert out == {"status": "found", "answer": 2048, "bracket": [2048, 1024]}
    q = parse_question("axi_data_bits=32..256:util>=50%")
    assert q.domain() == [32, 64, 128, 256] and q.threshold == 0.5
    assert drive(q, lambda v: v >= 128)[0]["answer"] == 128


def test_met_everywhere_or_nowhere():
    q = parse_question("latency=3..900:slowdown<=5%")
    assert drive(q, lambda v: True)[0] == {"status": "everywhere", "answer": 900,
                                          "bracket": [900, None]}
    assert drive(q, lambda v: False)[0] == {"status": "nowhere", "answer": None,
                                           "bracket": [None, 3]}


def test_question_parsing():
    q = parse_question("bw=0.5..16:slowdown=5%")
    assert (q.param, q.lo, q.hi, q.goal, q.threshold) == ("bw", 0.5, 16, "slowdown", 0.05)
    assert q.is_dram and q.more_is_better and q.domain() is None
    assert not parse_question("latency=3..9:compute-bound").more_is_better
    for bad in ("bw=1..0.5:slowdown<=5%", "bw:slowdown", "latency=1..9:slowdown<=5%",
                "n_queues=0..4:compute-bound", "spad_rows=20..30:compute-bound"):
        with pytest.raises(FindError):
            parse_question(bad)


@pytest.mark.parametrize("text, message", [
    ("latency=1..400:slowdown<=5%", "latency=1: must be an integer in 3..65535"),
    ("latency=3..100000000:slowdown<=5%", "latency=100000000: must be an integer"),
    ("bw=0.001..100000:slowdown<=5%", "bw=100000: must be in [0.001, 1024] bytes per cycle"),
    ("spad_rows=1..64:compute-bound", "spad_rows=1: must be a power of two in 16..65536"),
    ("n_queues=1..99:compute-bound", "n_queues=99: must be in 1..16"),
])
def test_out_of_range_questions_say_the_parameter_as_asked(text, message):
    """An out-of-range end was named by the internal field (read_latency=1,
    bytes_per_cycle=100000.0, NPUConfig.spad_rows=1), not as the question wrote it."""
    with pytest.raises(FindError) as e:
        parse_question(text)
    assert str(e.value).startswith(f"--find {text!r}: {message}")
    for internal in ("read_latency", "bytes_per_cycle", "NPUConfig"):
        assert internal not in str(e.value)


def test_reference_points():
    q = parse_question("latency=3..900:slowdown<=5%")
    c, d = point_for(q, NPUConfig(), DramTiming.parse("lat100"), None)
    assert d.read_latency == 3 and c == NPUConfig()
    assert point_for(q, NPUConfig(), IDEAL, 250)[1].read_latency == 250
    q = parse_question("bw=0.5..16:slowdown<=5%")
    assert point_for(q, NPUConfig(), DramTiming.parse("ddr"), None)[1].bytes_per_cycle is None
    q = parse_question("spad_rows=64..4096:compute-bound")
    assert point_for(q, NPUConfig(), IDEAL, None)[0].spad_rows == 4096
    assert point_for(q, NPUConfig(), IDEAL, 128)[0].spad_rows == 128


def test_run_find_against_a_known_model():
    """``evaluate`` is a made-up machine whose cycles grow past a latency knee and below a
    bandwidth knee; the answers are where 5% slowdown falls on those curves."""
    asked = []

    def cycles(config: NPUConfig, dram: DramTiming) -> float:
        base = 1000 * (64 // config.n_pes)
        lat = base * (1 + max(0, dram.read_latency - 200) / 1000)
        bw = dram.bytes_per_cycle
        return lat * (max(1.0, 6 / bw) if bw else 1.0)

    def evaluate(batch):
        asked.append(len(batch))
        return [{"status": "ok", "cycles": cycles(c, d), "utilization": None,
                 "roofline": {"compute_bound": c.spad_rows >= 512}} for c, d, _ in batch]

    qs = [parse_question("latency=3..5000:slowdown<=5%", tol=1e-9),
          parse_question("bw=0.25..64:slowdown<=5%"),
          parse_question("spad_rows=64..8192:compute-bound")]
    configs = [NPUConfig(), NPUConfig(rows=4, cols=4)]
    answers = run_find(qs, configs, [IDEAL], [GEMM], evaluate)
    assert len(answers) == 6
    by = {(a["param"], a["config"]): a for a in answers}
    for spec in ("8x8", "4x4"):
        lat = by["latency", spec]
        assert lat["answer"] == 250 and lat["wanted"] == "largest"       # 1 + 50/1000 = 1.05
        assert lat["reference_cycles"] == cycles(NPUConfig.parse(spec), IDEAL)
        bw = by["bw", spec]
        meet, fail = bw["bracket"]
        assert fail < 6 / 1.05 <= meet and bw["wanted"] == "smallest"
        assert by["spad_rows", spec]["answer"] == 512
    # the six bisections ran side by side: far fewer batches than evaluations
    assert len(asked) < sum(len(a["evaluations"]) for a in answers) / 3
    text = format_answers(answers)
    assert "largest latency = 250 cycles (251 does not meet it)" in text
    assert "smallest spad_rows = 512 (256 does not meet it)" in text


def test_find_on_the_performance_model(tmp_path, capsys):
    """A real question, answered on the model: the read latency at which a small GEMM on the
    4x4 falls 5% behind its ideal-memory cycles; checked at the answer and one cycle past it
    (exact bisection)."""
    from cosim.bench.sweep_tasks import model_point

    out = tmp_path / "o"
    argv = ["sweep", "--base", "4x4", "--workload", GEMM.name, "--workers", "0",
            "--no-progress", "--find", "latency=3..400:slowdown<=5%", "--tol", "0.000001",
            "--cache", str(tmp_path / "c"), "--out", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    (a,) = json.loads((out / "find.json").read_text())["answers"]
    assert a["status"] == "found"
    meet, fail = a["bracket"]
    assert fail == meet + 1
    ref = model_point("4x4", "ideal", GEMM.name)["cycles"]
    assert a["reference_cycles"] == ref
    assert model_point("4x4", f"latency={meet}", GEMM.name)["cycles"] <= 1.05 * ref
    assert model_point("4x4", f"latency={fail}", GEMM.name)["cycles"] > 1.05 * ref
    assert f"largest latency = {meet} cycles" in text
