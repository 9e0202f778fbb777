"""``npu run --dram`` and ``npu bench --dram``: bad timings are rejected up front with the
parser's message, the outputs state the timing, and a bench under ``jitter`` stays bit-exact
and its native replay (which takes the timing from the recording) matches."""

import json

import pytest

from cosim.cli import main


@pytest.mark.parametrize("argv, message", [
    (["run", "--dram", "dddr"], "unknown DRAM preset 'dddr'"),
    (["run", "--dram", "latency=2"], "argument --dram: latency=2: must be an integer in 3..65535"),
    (["fuzz", "--dram", "latency=-1"], "argument --dram: latency=-1: must be an integer in "),
    (["bench", "--dram", "stall=1.5"], "[0, 1)"),
    # bw=0 in words (it said "(or None for no limit)", a word --dram does not take)
    (["run", "--dram", "bw=0"], "argument --dram: bw=0: must be in [0.001, 1024] bytes per "
     "cycle (that would let no data through); for no bandwidth limit leave bw out or give "
     "bw=none"),
    (["run", "--backend", "model", "--dram", "jitter"], "--dram needs --backend rtl"),
    (["bench", "--backend", "model", "--dram", "lat100"], "--dram needs --backend rtl"),
])
def test_bad_dram_arguments_are_rejected_before_work(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_dram_help_says_how_to_give_no_bandwidth_limit():
    from cosim.cli.args import DRAM_HELP
    from sw.dram import DramTiming

    assert "bw (bytes/cycle; none: no limit)" in DRAM_HELP
    assert DramTiming.parse("bw=none").bytes_per_cycle is None


def test_bench_under_jitter_states_it_and_replays(tmp_path, capsys):
    out = tmp_path / "bench.json"
    status = main(["bench", "--configs", "4x4", "--sizes", "16", "--attention-len", "0",
                   "--no-build-timing", "--dram", "jitter,seed=3", "--json", str(out)])
    text = capsys.readouterr().out
    assert status == 0, text
    res = json.loads(out.read_text())
    assert res["dram"]["spec"].endswith("seed=3") and res["dram"]["name"] == "jitter,seed=3"
    assert "DRAM timing: jitter,seed=3 (latency=20," in text
    assert res["gemm"]["4x4"]["rows"][0]["bit_exact"]
    nat = res["cosim_speed"]["verilator_cpp_harness"]
    assert nat["replay_matches"] and nat["cycles_native"] == nat["cycles_cocotb"]
