"""The CLI rejects bad arguments up front, with one-line messages (no build, no traceback)."""

import argparse
import contextlib
import os
import signal
import sys

import pytest

from cosim.cli import main
from cosim.cli.args import attention_len, gemm_shape, int_at_least, seq_len
from hw.config import NPUConfig


@pytest.mark.parametrize("argv", [["fuzz", "--bogus"], ["run", "--block", "--bogus"],
                                  ["waves", "gtkw", "x.vcd", "--bogus"]])
def test_unknown_arguments_are_named_by_their_subcommand(argv, capsys):
    """argparse names an unknown flag of a subcommand with the top level's usage (``npu:
    error``); it is the subcommand's."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    head = "npu " + " ".join(a for a in argv if a in ("fuzz", "run", "waves", "gtkw"))
    assert f"{head}: error: unrecognized arguments: --bogus" in err
    assert f"usage: {head}" in err



@pytest.mark.parametrize("argv, message", [
    (["--config", "3x3x3"], "expected ROWSxCOLS"),
    (["--config", "8x8,rows=4"], "unknown parameter 'rows'"),
    (["--config", "8x8,spad_rows"], "is not key=value"),
    (["--config", "8x8,n_sems=8,n_sems=4"], "n_sems is given twice"),
    (["--config", "40x40"], "2..32"),
    (["--config", "4x8"], "square array"),
    (["--seq-len", "0"], "1..512"),
    (["--seq-len", "513"], "1..512"),
    (["--text", " "], "--text is empty"),
    (["--qkv-only", "--causal"], "--causal applies to --block, not to --qkv-only"),
    # --seq-len is the encoder's too (it said "applies to the attention block")
    (["--qkv-only", "--seq-len", "8"], "--seq-len applies to --block and the encoder, not to "
     "--qkv-only"),
    (["--causal"], "--causal applies to --block, not to the encoder"),
    (["--weights", "int4"], "--weights applies to --block, not to the encoder"),
    (["--layers", "7"], "expected a layer count in 0..6"),
    (["--layers", "x"], "expected a layer count in 0..6"),
    (["--block", "--layers", "2"], "--layers applies to the encoder"),
    (["--block", "--qkv-only"], "exclude each other"),
    # the job's own checks (the CLI made them too), L named as the option that sets it
    (["--seq-len", "12"], "the encoder needs a sequence length that is a multiple of cols=8, "
     "L=12 is not (L: --seq-len)\n"),
    (["--config", "16x16", "--seq-len", "24"], "the encoder needs a sequence length that "
     "is a multiple of cols=16, L=24 is not (L: --seq-len)\n"),
    # the condition no L can meet comes first (it was said only after --seq-len 36)
    (["--config", "12x12"], "the encoder needs cols to divide the head size 32, cols=12 does "
     "not (the attention block alone runs on any square array: npu run --block, sweep "
     "workload minilm-block:L)\n"),
    (["--config", "7x7"], "the encoder needs cols to divide the hidden size 384, 7x7 has "
     "cols=7"),
    # what the job needs from the configuration, before the build
    (["--config", "8x8,n_queues=1"],
     "the encoder needs 2 hardware queues (a stream on each), 8x8,n_queues=1 has 1"),
    (["--backend", "model", "--config", "8x8,n_queues=1"], "the encoder needs 2 hardware"),
    (["--backend", "model", "--config", "8x8,n_sems=1"],
     "the encoder needs 7 pool semaphores at once, 8x8,n_sems=1 leaves none"),
    (["--backend", "model", "--block", "--config", "8x8,n_sems=4"],
     "the attention block needs 4 pool semaphores at once, 8x8,n_sems=4 leaves 3"),
    # the kernels' own fit checks, before the build (--block spad_rows=16 failed after it)
    (["--block", "--config", "8x8,spad_rows=16"],
     "L=32, d=32 does not fit the local memories of 8x8_spad_rows16 (L: --seq-len, 32 by "
     "default)\n"),
    (["--backend", "model", "--block", "--seq-len", "16", "--config", "8x8,acc_rows=16"],
     "L=16, d=32 does not fit the local memories of 8x8_acc_rows16"),
    (["--backend", "model", "--config", "8x8,spad_rows=64", "--layers", "0"],
     "48 element blocks need at least 288 scratchpad rows (one row of each of six tensor "
     "tiles), the scratchpad has 64"),
    # the LayerNorms' parameters (failed after the build, naming no configuration field)
    (["--backend", "model", "--config", "8x8,acc_rows=64"],
     "LAYERNORM of 48 element blocks needs 192 parameter rows from accumulator row 0, "
     "acc_rows=64"),
    (["--waves-kernel", "query"], "--waves-kernel applies to --block and --qkv-only, not to "
     "the encoder"),
    (["--backend", "model", "--waves"], "--waves: tracing needs --backend rtl"),
    # named the option given (it said --waves for any of them)
    (["--block", "--backend", "model", "--waves-kernel", "query"],
     "--waves-kernel: tracing needs --backend rtl"),
    (["--backend", "perf", "--waves-from", "5"], "--waves-from/--waves-to: tracing needs"),
    (["--block", "--waves-kernel", "query", "--waves-to", "9"], "exclude each other"),
    (["--block", "--waves-kernel", "query:0"], "NAME:N with N >= 1"),
    (["--block", "--waves-kernel", "nosuch"],
     "no kernel 'nosuch' in this run; kernels: query, key"),
    (["--waves-kernel", "ffn1_gelu"], "--waves-kernel applies to --block and --qkv-only"),
    (["--qkv-only", "--waves-kernel", "softmax"], "kernels: query, key, value"),
    (["--waves-from", "10", "--waves-to", "5"], "need 0 <= from < to, got from 10, to 5"),
    (["--waves-from", "-1"], "need 0 <= from < to, got from -1, to no end"),   # said "None"
    (["--json", "/"], "is a folder"),
    (["--json", "/dev/null/r.json"], "/dev/null is not a folder"),
    (["--backend", "perf", "--trace", "/dev/null/t.json"], "/dev/null is not a folder"),
    # a folder that exists but takes no new file (even as root): refused before the run
    (["--backend", "perf", "--json", "/proc/npu-kit-run.json"], "cannot be written"),
    (["--backend", "perf", "--trace-png", "/tmp/npu-kit-trace.txt"], "the image format is"),
])
def test_run_rejects_bad_arguments(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["run", *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_run_layer_count_is_the_encoders(monkeypatch, capsys):
    """--layers takes its range and default from the encoder's layer count
    (sw.models.encoder.N_LAYERS; it had a literal 6 in three places): with four layers, 5 is
    refused, and --block refuses --layers 3 but not --layers 4 (the default, not given)."""
    import sw.models.encoder
    from cosim.cli import _check_job_options, _subcommand, build_parser

    monkeypatch.setattr(sw.models.encoder, "N_LAYERS", 4)
    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "--layers", "5"])
    assert "expected a layer count in 0..4" in capsys.readouterr().err
    assert parser.parse_args(["run"]).layers == 4
    args = parser.parse_args(["run", "--block", "--layers", "4"])
    _check_job_options(_subcommand(parser, args), args)
    args = parser.parse_args(["run", "--block", "--layers", "3"])
    with pytest.raises(SystemExit):
        _check_job_options(_subcommand(parser, args), args)
    assert "--layers applies to the encoder, not to --block" in capsys.readouterr().err


def test_run_reports_runtime_errors_in_one_line(capsys):
    assert main(["run", "--backend", "model", "--config", "8x8,dram_bytes=4096"]) == 2
    err = capsys.readouterr().err
    assert "OutOfMemoryError" in err and "Traceback" not in err
    # and says what to change
    assert ("(device DRAM: dram_bytes=4096; give a larger one in --config, e.g. "
            "8x8,dram_bytes=8192)") in err


@pytest.fixture
def no_build(monkeypatch):
    """``npu run`` on the RTL stops where the Verilator build would start."""
    import cosim.tb.harness

    def build(*args, **kwargs):
        raise AssertionError("reached the Verilator build")
    monkeypatch.setattr(cosim.tb.harness, "run_job", build)


@pytest.mark.parametrize("argv, message", [
    # the job's DRAM need, measured on the functional model (failed in the allocator)
    (["--qkv-only", "--config", "8x8,dram_bytes=65536"],
     "the Q/K/V projection job needs dram_bytes=262144 or more, 8x8,dram_bytes=65536 has "
     "dram_bytes=65536 (on the functional model it runs out of DRAM at dram_bytes=131072 and "
     "runs at 262144)"),
    # MX blocks of 32 elements that K tiles of 6 rows straddle (failed as the job started)
    (["--block", "--config", "6x6,mx=1", "--weights", "mxint8"],
     "MXINT8 needs K tiles inside the 32-element MX blocks: rows must divide 32, 6x6,mx=1 "
     "has rows=6"),
    # the encoder's attention reads each head's blocks from the projections' output: with
    # cols not dividing the head size 32 it ran and was not bit-exact (cosine 0.107 at 6x6)
    (["--config", "6x6", "--seq-len", "30"],
     "the encoder needs cols to divide the head size 32, cols=6 does not"),
    (["--config", "12x12", "--seq-len", "36", "--backend", "perf"],
     "the encoder needs cols to divide the head size 32, cols=12 does not"),
    # a length the local memories cannot hold: the refusal names the largest that fits (a
    # user tried lengths down from 512 one by one)
    (["--seq-len", "504"], "does not fit the local memories of 8x8 (L: --seq-len; the largest "
                           "L 8x8's local memories take is 496)"),
    (["--seq-len", "500"], "L=500 is not (L: --seq-len; the largest L 8x8's local memories take "
     "is 496)"),
    (["--block", "--config", "4x4", "--seq-len", "250"],
     "the largest L 4x4's local memories take is 248"),
])
def test_run_refuses_before_the_build(argv, message, no_build, capsys):
    """What the job cannot run is refused before the Verilator build, not after it."""
    with pytest.raises(SystemExit) as exc:
        main(["run", *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize("state", ["built", "verilog", "build"])
def test_run_says_it_builds_only_when_it_will(state, no_build, monkeypatch, capsys):
    """The banner said that a first run builds the simulator on every run, built or not, and
    after a hardware edit that left the Verilog as it was (a 10 s regeneration)."""
    import cosim.build
    monkeypatch.setattr(cosim.build, "sim_build_state", lambda config, **kw: state,
                        raising=False)     # absent before: fail on the banner, not here
    with pytest.raises(AssertionError, match="reached the Verilator build"):
        main(["run", "--layers", "0"])
    err = capsys.readouterr().err
    assert "co-simulating the 8x8 NPU on Verilator" in err
    assert ("building its simulator first, for this configuration: one to two minutes"
            in err) is (state == "build")
    assert ("regenerating its Verilog, about 10 s, then rebuilding its simulator only if the "
            "Verilog changed" in err) is (state == "verilog")
    assert ("build" in err) is (state != "built")


def test_run_with_a_small_dram_that_holds_the_job_goes_on(no_build, capsys):
    with pytest.raises(AssertionError, match="reached the Verilator build"):
        main(["run", "--qkv-only", "--config", "8x8,dram_bytes=262144"])
    # the check says what it does while it runs (it was silent for up to half a minute)
    assert ("checking that the Q/K/V projection job fits dram_bytes=262144 on the functional "
            "model") in capsys.readouterr().err


def test_run_names_the_configuration_as_config_takes_it(capsys):
    """The report names the NPU as ``--config`` spells it (it printed
    ``4x4_dma_outstanding2``, which ``--config`` refuses)."""
    assert main(["run", "--backend", "perf", "--qkv-only",
                 "--config", "4x4,dma_outstanding=2"]) == 0
    assert "NPU 4x4,dma_outstanding=2 (perf backend)" in capsys.readouterr().out


def test_run_names_no_python_error_class(monkeypatch, capsys):
    """A ValueError of the run prints its message alone."""
    import sw.jobs.encoder as encoder

    def job(*args, **kwargs):
        raise ValueError("planted: the job refuses")
    monkeypatch.setattr(encoder, "run_encoder_job", job)
    assert main(["run", "--backend", "model", "--layers", "0"]) == 2
    err = capsys.readouterr().err
    assert err == "npu run: error: planted: the job refuses\n"


def _no_build(monkeypatch):
    """Make building or running the simulator fail the test."""
    import cosim.build as build
    import cosim.tb.harness as harness

    def built(*args, **kwargs):
        raise AssertionError("reached the simulator's build or run")
    for module, name in ((build, "build_sim"), (harness, "build_sim"), (harness, "run_job")):
        monkeypatch.setattr(module, name, built)


def test_run_refuses_an_unknown_waves_scope_block_before_anything_is_built(monkeypatch,
                                                                          capsys):
    """``--waves-scope`` with a block the design lacks fails as the arguments are checked,
    with the design's blocks (:func:`cosim.build.design_blocks`): it failed only after
    ``npu run`` had said that it was building the simulator."""
    from cosim.build import design_blocks, generate_verilog
    _no_build(monkeypatch)
    with pytest.raises(SystemExit) as e:
        main(["run", "--waves-scope", "dma,dmaa", "--layers", "0"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "co-simulating" not in err and "building" not in err
    named = [b for b in design_blocks(generate_verilog(NPUConfig())) if "$" not in b]
    assert "cmdproc" in named and "dma.load_mover" in named
    assert err.splitlines()[-1] == ("npu run: error: waves scope: no block 'dmaa' in the "
                                    f"design; did you mean 'dma'? blocks: {', '.join(named)}")


@pytest.mark.parametrize("current", [True, False])
def test_run_takes_the_design_blocks_as_waves_scope(current, monkeypatch, capsys):
    """The design's blocks pass; the check says so when it must generate the Verilog first
    (about 10 s)."""
    import cosim.build as build
    from cosim.cli import build_parser
    _no_build(monkeypatch)
    monkeypatch.setattr(build, "verilog_current", lambda config: current)
    args = build_parser().parse_args(["run", "--waves-scope", "dma.load_mover,cmdproc",
                                      "--layers", "0"])
    args.check_args(args)
    assert args.waves and args.waves_scope == ["dma.load_mover", "cmdproc"]
    said = "generating the 8x8 NPU's Verilog to check --waves-scope" in capsys.readouterr().err
    assert said != current


@pytest.mark.parametrize("argv, message", [
    (["area", "--json", "/"], "is a folder"),
    (["area", "--freq", "-1"], "argument --freq: must be > 0, got -1"),
    (["area", "--timeout", "-1"], "argument --timeout: must be > 0, got -1"),
    (["area", "--no-pnr", "--no-route"], "give one of them"),
    (["area", "--config", "2x2", "4x4", "2x2,n_queues=4"],
     "names the same configuration twice: 2x2"),
    (["waves", "summarize", "x.vcd", "--width", "-5"], "must be >= 10, got -5"),
    (["waves"], "the following arguments are required: COMMAND"),
    # an output folder that does not exist (said "no such file"), before the input is read
    (["waves", "gtkw", "x.vcd", "-o", "/nonexistent/dir/x.gtkw"],
     "npu waves gtkw: error: -o /nonexistent/dir/x.gtkw: the output folder /nonexistent/dir "
     "does not exist"),
    (["waves", "gtkw", "x.vcd", "-o", "/dev/null/x.gtkw"],
     "the output folder /dev/null is not a folder"),
    (["waves", "gtkw", "x.vcd", "-o", "/"], "-o /: is a folder, give a file name"),
    (["waves", "cut", "x.vcd", "--from", "1", "--to", "2", "-o", "/nonexistent/c.vcd"],
     "-o /nonexistent/c.vcd: the output folder /nonexistent does not exist"),
    (["waves", "trace", "x.vcd", "--png", "/nonexistent/t.png"],
     "--png /nonexistent/t.png: the output folder /nonexistent does not exist"),
    (["waves", "summarize", "x.vcd", "--json", "/nonexistent/s.json"],
     "--json /nonexistent/s.json: the output folder /nonexistent does not exist"),
    (["sweep", "--workload", "gemm:8x8x8", "--backend", "rtl", "--find",
      "latency=3..400:slowdown<=5%"], "--backend rtl do not apply"),
    (["area", "--device", "xyz"], "invalid choice: 'xyz'"),
    # a device of another family (ice40 and generic are synthesis only) was ignored
    (["area", "--family", "ice40", "--device", "25k"],
     "--device 25k: --family ice40 is synthesis only and takes no device; the devices are "
     "ECP5's, for place and route with --family ecp5: 12k, 25k, 45k, 85k, um-25k"),
    (["area", "--family", "generic", "--device", "85k"], "--family generic is synthesis only"),
    # named the devices as the line above does (it named none)
    (["area", "--no-pnr", "--device", "45k"], "--device 45k is the part nextpnr-ecp5 places "
     "on: not with --no-pnr; the devices are ECP5's, for place and route with --family ecp5: "
     "12k, 25k, 45k, 85k, um-25k"),
    # nextpnr's options without nextpnr were ignored
    (["area", "--family", "ice40", "--freq", "30"],
     "--freq is for nextpnr's place and route: not with --family ice40 (synthesis only)"),
    (["area", "--family", "generic", "--no-route"], "--no-route is for nextpnr's place"),
    (["area", "--seed", str(2**64)], "must be <= 18446744073709551615"),
    (["area", "--seed", "-1"], "must be >= 0, got -1"),
    (["area", "--no-pnr", "--seed", "1"], "--seed is for nextpnr's place and route: not with "
                                          "--no-pnr"),
    (["waves", "trace", "w.vcd", "--cycle-ns", "0"], "argument --cycle-ns: must be > 0, got 0"),
    (["area", "--no-pnr", "--freq", "25"], "--freq is for nextpnr's place and route: not with "
     "--no-pnr"),
    (["area", "--block", "npu.tile", "--seed", "2"], "--seed is for nextpnr's place and route: "
     "not with --block (synthesis only)"),
    (["area", "--block", "npu.tile", "--device", "45k"], "--device 45k is the part nextpnr-ecp5 "
     "places on: not with --block"),
    (["bench", "--json", "/"], "is a folder"),
    (["bench", "--sizes", "0"], "must be >= 1, got 0"),
    (["bench", "--sizes", "-64"], "must be >= 1, got -64"),
    (["bench", "--attention-len", "9999"], "got 9999 (or 0: no attention block)"),
    (["bench", "--attention-len", "-1"], "(or 0: no attention block)"),
    # the same configuration twice ran twice into one table row and one JSON key
    (["bench", "--configs", "8x8", "8x8,dma_outstanding=4"],
     "--configs names 8x8 more than once"),
    (["bench", "--configs", "8x4"], "must be square"),
    (["fuzz", "--backend", "perf", "--timed-exact"], "not with --backend perf"),
    (["fuzz", "--backend", "model", "--timed-exact"], "not with --backend perf"),
    (["fuzz", "--backend", "bogus"], "argument --backend: backend 'bogus': expected rtl or "
     "perf (model: perf's former name)"),
    (["fuzz", "--vm", "--config", "8x8,tlb_entries=0"], "has no TLB"),
    (["fuzz", "--seed", "-1"], "must be >= 0, got -1"),
    # DRAM timings under which streams would outlast the hang budget (--backend model, one
    # stream: without the check the run would be short and report false hangs)
    (["fuzz", "--backend", "model", "--streams", "1", "--dram", "stall=0.99999"],
     "DRAM timing stall=0.99999: too slow to fuzz: a stream may take up to 99,999x"),
    (["fuzz", "--backend", "model", "--streams", "1", "--dram", "bw=0.001"],
     "allows 100x at 48 commands per queue"),
    (["fuzz", "--backend", "model", "--streams", "1", "--dram", "ddr,bw=1",
      "--max-commands", "2000"], "allows 2.4x at 2000 commands per queue"),
    (["fuzz", "--max-commands", "2001"], "argument --max-commands: must be <= 2000, got 2001 "
     "(a stream's time grows faster than linearly in its commands)"),
    (["fuzz", "--json", "/"], "is a folder"),
    # the format axis ran the workload's named format in int8 instead, silently
    (["sweep", "--workload", "gemm:64x64x64@int4", "--weights", "int8"],
     "gemm:64x64x64@int4 names its own: give one or the other"),
    (["sweep", "--workload", "gemm:64x64x64@int4", "--activations", "int8"], "names its own"),
    (["sweep", "--workload", "gemm:8x8x8", "--synth-timeout", "-1"],
     "argument --synth-timeout: must be > 0, got -1"),
    (["sweep", "--workload", "gemm:8x8x8", "--pnr", "--freq", "-5"],
     "argument --freq: must be > 0, got -5"),
    (["bench", "--validate", "--backend", "perf"], "--backend does not apply"),
    (["run", "--dram", ""], "empty DRAM timing"),
    (["bench", "--backend", "perf", "--roofline", "/tmp/r.jpq"], "the image format is"),
    (["sweep", "--workload", "gemm:8x8x8", "--no-area", "--out", "/dev/null/sweep"],
     "/dev/null is not a folder"),
    # an --out that cannot be a folder failed after the Verilog generation, synthesis or
    # build (npu board: with a traceback)
    (["verilog", "--out", "/dev/null"], "--out /dev/null: /dev/null is not a folder"),
    (["area", "--out", "/dev/null/fpga"], "--out /dev/null/fpga: /dev/null is not a folder"),
    (["area", "--no-pnr", "--out", "/proc/npu-kit-area"], "/proc cannot be written"),
    (["board", "--out", "/dev/null", "--no-bitstream"], "/dev/null is not a folder"),
])
def test_fpga_and_bench_reject_bad_arguments_before_work(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["area", "--no-pnr", "--no-route"], "give one of them"),
    (["bench", "--validate", "--configs", "4x4"], "--configs does not apply"),
    (["fuzz", "--timed-exact", "--backend", "model"], "not with --backend perf"),
    (["fuzz", "--vm", "--config", "4x4,tlb_entries=0"], "has no TLB"),
    (["run", "--backend", "perf", "--trace", "t.vcd"], "is a waveform's suffix"),
])
def test_a_refused_command_makes_no_json_folder(argv, message, tmp_path, capsys):
    """``--json``'s check makes the file's folder; a command refused for another reason (two
    flags that conflict, a bad ``--trace`` beside it) made it before it was refused."""
    folder = tmp_path / "new"
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--json", str(folder / "a.json")])
    assert exc.value.code == 2 and message in capsys.readouterr().err
    assert not folder.exists()


@pytest.mark.parametrize("given, backend", [(None, "rtl"), ("rtl", "rtl"), ("perf", "perf"),
                                            ("model", "perf")])
def test_fuzz_names_its_models_only_backend_perf_as_the_other_subcommands(given, backend):
    """``npu fuzz --backend perf``: the functional against the performance model, no RTL (the
    performance model is ``perf`` in ``npu run``, ``bench`` and ``sweep``); ``model``, its
    former name, is still taken, as ``perf``."""
    from cosim.cli import build_parser
    argv = ["fuzz"] + ([] if given is None else ["--backend", given])
    assert build_parser().parse_args(argv).backend == backend


def test_fuzz_help_names_perf_and_its_former_name():
    from cosim.cli import build_parser
    fuzz = next(a for a in build_parser()._actions
                if isinstance(a, argparse._SubParsersAction)).choices["fuzz"]
    text = " ".join(fuzz.format_help().split())
    assert "--backend {rtl,perf}" in text
    assert "perf: the functional model against the performance model, no RTL" in text
    assert "model: perf's former name" in text


@pytest.mark.parametrize("argv, flag", [
    (["verilog"], "--out"), (["area"], "--out"), (["board"], "--out"), (["area"], "--json"),
    (["run"], "--json"), (["run"], "--trace"), (["run"], "--trace-png"), (["bench"], "--json"),
    (["bench"], "--roofline"), (["fuzz"], "--json"),
    (["sweep", "--workload", "gemm:8x8x8"], "--out"),
    (["sweep", "--workload", "gemm:8x8x8"], "--cache"),
    (["waves", "trace", "x.vcd"], "-o/--out"), (["waves", "trace", "x.vcd"], "--png"),
    (["waves", "summarize", "x.vcd"], "--json"),
])
def test_an_empty_output_path_is_refused_as_it_is_parsed(argv, flag, capsys):
    """``--out ''`` wrote into the current folder, ``--json ''`` was ignored."""
    from cosim.cli import build_parser
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args([*argv, flag.split("/")[0], ""])
    assert e.value.code == 2
    assert (f"argument {flag}: the path is empty; give a name"
            in capsys.readouterr().err)


@pytest.mark.parametrize("argv, flag, name", [
    (["run", "--backend", "perf", "--block"], "--trace", "x.vcd"),
    (["run"], "--json", "x.fst"), (["bench", "--backend", "perf"], "--json", "x.VCD"),
])
def test_report_outputs_refuse_a_waveform_name(argv, flag, name, tmp_path, capsys):
    """``npu run --trace x.vcd`` wrote a Perfetto JSON named as a waveform (npu waves
    trace -o x.vcd is refused)."""
    with pytest.raises(SystemExit) as e:
        main([*argv, flag, str(tmp_path / name)])
    assert e.value.code == 2
    assert (f"{name}: {name[1:]} is a waveform's suffix and this writes no waveform"
            in capsys.readouterr().err)
    assert not (tmp_path / name).exists()


@pytest.mark.parametrize("argv", [["trace", "-o"], ["gtkw", "-o"], ["summarize", "--json"]])
def test_waves_keep_the_runs_record(argv, tmp_path, capsys):
    """``trace -o <stem>.waves.json`` overwrote the run's record, and gtkw then wrote a save
    file without markers."""
    (tmp_path / "w.vcd").write_text("$timescale 1ns $end\n")
    record = tmp_path / "w.waves.json"
    record.write_text('{"cycles": [0, 1]}\n')
    with pytest.raises(SystemExit) as e:
        main(["waves", argv[0], str(tmp_path / "w.vcd"), argv[1], str(record)])
    assert e.value.code == 2
    assert "w.waves.json: that is the run's record beside the waveform" in \
        capsys.readouterr().err
    assert record.read_text() == '{"cycles": [0, 1]}\n'


def test_waves_refuse_the_input_as_output(tmp_path, monkeypatch, capsys):
    """``-o``/``--json`` naming the input waveform overwrote it (exit 0); a ``.waves.json``
    of the wrong shape gave a traceback."""
    monkeypatch.chdir(tmp_path)
    wave = tmp_path / "w.vcd"
    wave.write_text("$timescale 1ns $end\n")
    for argv in (["trace", "w.vcd", "-o", "w.vcd"], ["summarize", "w.vcd", "--json", "./w.vcd"],
                 ["gtkw", "w.vcd", "-o", str(wave), "--force"], ["cut", "w.vcd", "--from", "0",
                                                                 "--to", "1", "-o", "w.vcd"]):
        with pytest.raises(SystemExit) as e:
            main(["waves", *argv])
        assert e.value.code == 2, argv
        assert "that is the input waveform" in capsys.readouterr().err, argv
    assert wave.read_text() == "$timescale 1ns $end\n"
    from cosim.waves import load_regions
    for text in ("[1, 2]", '{"regions": 5}', "{not json", '{"regions": [{"name": "x"}]}'):
        (tmp_path / "w.waves.json").write_text(text)
        with pytest.raises(ValueError, match="w.waves.json"):
            load_regions(wave)
    (tmp_path / "w.waves.json").write_text(
        '{"regions": [{"name": "qkv", "start_cycle": 5}], "clock_period_ns": 10}')
    assert load_regions(wave) == ([{"name": "qkv", "start_cycle": 5}], 10)


@pytest.mark.parametrize("argv, flag", [
    (["trace", "w.vcd", "-o", "c.vcd"], "-o"),
    (["gtkw", "w.vcd", "-o", "c.VCD", "--force"], "-o"),
    (["gtkw", "w.vcd", "-o", "c.fst"], "-o"),
    (["summarize", "w.vcd", "--json", "c.fst"], "--json"),
])
def test_waves_refuse_a_waveform_name_for_other_outputs(argv, flag, tmp_path, monkeypatch,
                                                        capsys):
    """``trace -o c.vcd`` overwrote another waveform with JSON, ``gtkw -o c.vcd --force``
    with a save file."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "w.vcd").write_text("$timescale 1ns $end\n")
    other = tmp_path / argv[argv.index(flag) + 1]
    other.write_text("another waveform\n")
    with pytest.raises(SystemExit) as e:
        main(["waves", *argv])
    assert e.value.code == 2
    suffix = other.suffix.lower()
    assert (f"{flag} {other.name}: {suffix} is a waveform's suffix and this writes no "
            "waveform; give another file name") in capsys.readouterr().err
    assert other.read_text() == "another waveform\n"


@pytest.mark.parametrize("name", ["x.fst", "x.vcd.gz", "x.gtkw"])
def test_waves_cut_writes_only_a_vcd(name, tmp_path, capsys):
    """``cut -o x.fst`` (or ``.vcd.gz``, ``.gtkw``) wrote VCD text under that name."""
    (tmp_path / "w.vcd").write_text("$timescale 1ns $end\n")
    with pytest.raises(SystemExit) as e:
        main(["waves", "cut", str(tmp_path / "w.vcd"), "--from", "0", "--to", "1",
              "-o", str(tmp_path / name)])
    assert e.value.code == 2
    assert f"{name}: this writes a VCD; give a .vcd name" in capsys.readouterr().err
    assert not (tmp_path / name).exists()


@pytest.mark.parametrize("argv", [["gtkw"], ["summarize"], ["trace"],
                                  ["cut", "--from", "0", "--to", "1"]])
def test_waves_refuse_a_folder_as_the_waveform(argv, tmp_path, capsys):
    """A folder given as the input said ``[Errno 21] Is a directory``."""
    with pytest.raises(SystemExit) as e:
        main(["waves", argv[0], str(tmp_path), *argv[1:]])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"{tmp_path} is a folder; give a waveform file (VCD or FST)" in err
    assert "Errno" not in err


def test_waves_gtkw_refuses_a_folder_as_its_default_output(tmp_path, capsys):
    wave = tmp_path / "w.vcd"
    wave.write_text("$timescale 1ns $end\n")
    (tmp_path / "w.gtkw").mkdir()
    assert main(["waves", "gtkw", str(wave)]) == 2
    assert capsys.readouterr().err == (f"npu waves gtkw: {tmp_path / 'w.gtkw'} is a folder, "
                                       "not a file\n")


@pytest.mark.parametrize("clock", ["inf", "nan", "0", "-5"])
def test_board_refuses_a_clock_that_is_not_a_positive_number(clock, capsys):
    with pytest.raises(SystemExit) as e:
        main(["board", "--clock-mhz", clock, "--out", "/nonexistent/board"])
    assert e.value.code == 2 and "--clock-mhz" in capsys.readouterr().err


def test_board_rejects_a_clock_the_pll_cannot_make(capsys):
    assert main(["board", "--clock-mhz", "16", "--out", "/nonexistent/board"]) == 2
    assert "nearest: 15.62 MHz" in capsys.readouterr().err


def test_verilog_lint_without_icarus_skips_it(tmp_path, monkeypatch, capsys):
    import cosim.fpga.verilog

    real = cosim.fpga.verilog.find_tool

    def no_iverilog(name):
        if name == "iverilog":
            raise cosim.fpga.ToolMissingError("iverilog not found: apt-get install -y iverilog")
        return real(name)

    # compile_icarus looks the tool up in its own module
    monkeypatch.setattr(cosim.fpga.verilog, "find_tool", no_iverilog)
    assert main(["verilog", "--config", "2x2,spad_rows=16,acc_rows=16", "--lint",
                 "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "verilator: clean" in out and "icarus: skipped, iverilog not found" in out


@contextlib.contextmanager
def closed_pipe_stdout():
    """Standard output to a pipe whose reader has gone (``npu ... | head`` after ``head``
    exits), SIGPIPE ignored as Python starts (vcdvcd's import resets it to the default, which
    would end pytest); yields the stream."""
    read, write = os.pipe()
    os.close(read)
    handler, saved = signal.signal(signal.SIGPIPE, signal.SIG_IGN), sys.stdout
    try:
        with open(write, "w") as stream:
            sys.stdout = stream
            yield stream
    finally:
        sys.stdout = saved
        signal.signal(signal.SIGPIPE, handler)


def test_a_closed_output_pipe_ends_quietly(capsys):
    """``npu ... | head`` printed ``[Errno 32] Broken pipe`` (here: ``--help``, while the
    arguments are parsed)."""
    with closed_pipe_stdout() as stream:
        assert main(["--help"]) == 1
        stream.write("more")        # now to /dev/null: the exit's flush does not fail
    assert capsys.readouterr().err == ""


def test_help_texts_carry_no_rst_markup():
    """Every ``--help`` (``npu`` and each subcommand, nested ones too) is plain text: no
    ````literal````, ``:role:`` or ``::`` block marker from the docstrings it is made of."""
    import argparse
    import re

    from cosim.cli import build_parser

    def parsers(p):
        yield p
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for child in action.choices.values():
                    yield from parsers(child)
    seen = 0
    for p in parsers(build_parser()):
        text = p.format_help()
        assert "``" not in text and not re.search(r":\w+:`|::$", text, re.MULTILINE), \
            (p.prog, text)
        seen += 1
    assert seen >= 12    # npu, its 8 subcommands, the waves subcommands


def test_argument_types_take_both_ends_of_their_ranges():
    """Every range check is two-sided: each argument type takes the first and the last value
    of its range, and rejects one past each end."""
    ok = [(seq_len, "1", 1), (seq_len, "512", 512), (attention_len, "0", 0),
          (attention_len, "1", 1), (attention_len, "512", 512), (int_at_least(1), "1", 1),
          (int_at_least(0), "0", 0), (int_at_least(1, 9), "9", 9),
          (gemm_shape, "1,1,1", [1, 1, 1])]
    for parse, text, value in ok:
        assert parse(text) == value, (parse, text)
    bad = [(seq_len, "0"), (seq_len, "513"), (attention_len, "513"), (attention_len, "-1"),
           (int_at_least(1), "0"), (int_at_least(0), "-1"), (int_at_least(1, 9), "10"),
           (gemm_shape, "0,1,1")]
    for parse, text in bad:
        with pytest.raises(argparse.ArgumentTypeError):
            parse(text)


def test_waves_and_sweep_say_what_is_wrong_in_one_line(tmp_path, capsys):
    """A missing file names it (not a bare Errno); a counters file that is not JSON names the
    file; --find on a parameter the grid also sets is refused before any point runs."""
    assert main(["waves", "summarize", str(tmp_path / "none.vcd")]) == 2
    assert f"no such file: {tmp_path / 'none.vcd'}" in capsys.readouterr().err
    bad = tmp_path / "c.json"
    bad.write_text("{not json")
    from cosim.waves import load_counters
    with pytest.raises(ValueError, match=f"{bad}: not JSON"):
        load_counters(bad)
    for argv, message in [
        (["--dram", "latency=50", "--find", "latency=3..400:slowdown<=5%"],
         "bisects latency, which --dram latency=50 sets too"),
        (["--outstanding", "2", "4", "--find", "dma_outstanding=2..8:slowdown<=5%"],
         "bisects dma_outstanding, which the grid varies (--outstanding); give one value"),
        (["--base", "8x8", "8x8,n_queues=2", "--find", "n_queues=1..4:compute-bound"],
         "bisects n_queues, which the grid varies (--base)"),
    ]:
        with pytest.raises(SystemExit) as exc:     # refused with the other argument checks
            main(["sweep", "--base", "8x8", "--workload", "gemm:8x8x8", "--workers", "0",
                  "--out", str(tmp_path / "s"), *argv])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err


def test_interrupt_is_one_line(monkeypatch, capsys):
    import cosim.waves

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(cosim.waves, "summarize", interrupted)
    assert main(["waves", "summarize", "x.vcd"]) == 130
    err = capsys.readouterr().err
    assert "npu waves: interrupted" in err and "Traceback" not in err


def test_interrupt_while_the_arguments_are_checked_is_one_line(monkeypatch, capsys):
    """^C before the work (some checks load a model, make folders): one line, status 130."""
    import cosim.cli.args

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(cosim.cli.args, "check_json_arg", interrupted)
    assert main(["fuzz", "--json", "x.json"]) == 130
    err = capsys.readouterr().err
    assert err == "npu: interrupted\n"


def test_interrupt_while_npu_loads_is_one_line(monkeypatch, capsys):
    """^C while ``npu`` imports its packages (the first half second): one line, status 130
    (the console script imported cosim.cli before any handler, and printed a traceback)."""
    import subprocess
    import sys
    import tomllib
    from pathlib import Path

    from cosim.entry import main as npu

    root = Path(__file__).parents[2]
    scripts = tomllib.loads((root / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["npu"] == "cosim.entry:main"
    # the entry point's module loads nothing of the CLI before main runs
    loaded = subprocess.run([sys.executable, "-c", "import sys, cosim.entry; "
                             "print(sorted(m for m in sys.modules if m.startswith(('cosim.', "
                             "'hw', 'sw'))))"], cwd=root, capture_output=True, text=True,
                            check=True).stdout
    assert loaded.strip() == "['cosim.entry']"

    class Interrupt:            # a ^C while cosim.cli is imported
        def find_spec(self, name, path=None, target=None):
            if name == "cosim.cli":
                raise KeyboardInterrupt

    monkeypatch.delitem(sys.modules, "cosim.cli")
    monkeypatch.setattr(sys, "meta_path", [Interrupt(), *sys.meta_path])
    assert npu(["run", "--help"]) == 130
    assert capsys.readouterr().err == "npu: interrupted\n"


def test_version_is_the_installed_kits(capsys):
    """``npu --version`` (there was none): the version of the package metadata, of the
    distribution that pyproject.toml names."""
    import tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out == f"npu {project['project']['version']}\n"
    from cosim.cli import DISTRIBUTION
    assert project["project"]["name"] == DISTRIBUTION


def test_board_reports_a_failed_tool_in_one_line(monkeypatch, tmp_path, capsys):
    """A failed board build (synthesis, place and route, the bitstream) printed a traceback;
    it says what failed and where the log is, exit 1, as ``npu area``."""
    import cosim.fpga.board
    from cosim.fpga import FpgaToolError

    def fail(*args, **kwargs):
        raise FpgaToolError("nextpnr-ecp5 failed (exit 1)", tmp_path / "pnr.log")
    monkeypatch.setattr(cosim.fpga.board, "build_board", fail)
    assert main(["board", "--out", str(tmp_path / "b"), "--no-bitstream"]) == 1
    err = capsys.readouterr().err
    assert f"npu board: nextpnr-ecp5 failed (exit 1) (log: {tmp_path / 'pnr.log'})" in err
    assert "Traceback" not in err
