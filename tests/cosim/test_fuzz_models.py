"""The fuzzer's own parts without the RTL: the generator (reproducible, every opcode and error
kind, JSON round trip), the comparison rules (each catches a planted difference), shrinking,
and the functional model against the performance model on a few streams."""

import json

import pytest

from cosim.fuzz import Checker, GeneratorSettings, Scenario, generate, run_scenario, shrink
from cosim.fuzz.check import command_counts
from cosim.fuzz.compare import _head_ok, compare, failure_kind
from cosim.fuzz.layout import ARENA_BASE
from hw.config import NPUConfig
from hw.isa import ErrorCode, Opcode
from sw.model import ModelBackend
from sw.perf import PerfBackend

CFG = NPUConfig()
CFG4 = NPUConfig(rows=4, cols=4)
VM = GeneratorSettings(p_vm=0.6)


def test_generator_is_reproducible_and_round_trips():
    a, b = generate(CFG, 7), generate(CFG, 7)
    assert a.to_dict() == b.to_dict()
    assert generate(CFG, 8).to_dict() != a.to_dict()
    again = Scenario.from_dict(json.loads(json.dumps(a.to_dict())))
    assert [c.raw() for c in again.commands] == [c.raw() for c in a.commands]


@pytest.mark.parametrize("config", [CFG, CFG4], ids=["8x8", "4x4"])
def test_generator_covers_every_opcode_and_error(config):
    kinds, codes, faults, wraps, queues = set(), set(), 0, 0, set()
    planted = set()
    for seed in range(400):
        # every fourth stream in translated mode: queues in contexts, planted page faults
        s = generate(config, seed, VM if seed % 4 == 0 else GeneratorSettings())
        kinds |= set(command_counts(s))
        codes |= {c.expect for c in s.commands if c.expect}
        if s.vm:
            codes |= {f["code"] for f in s.vm["faults"].values()}
            planted |= {(f["kind"], f["action"]) for f in s.vm["faults"].values()}
        faults += s.fault is not None
        queues.add(len(s.queues))
        wraps += any(len(s.queue_commands(q.queue)) >= q.ring_size for q in s.queues)
    assert kinds >= {op.name for op in Opcode} | {"BAD_OPCODE"}
    want = {e.value for e in ErrorCode if e != ErrorCode.NONE}
    if config.rows == config.cols:
        assert codes == want
    # both kinds on every client (ring fetch, load, store, fence), resumed and skipped
    assert planted == {("ring_not_mapped", "resume")} | {
        (f"{w}_not_mapped", a) for w in ("load", "store", "fence") for a in ("resume", "skip")
    } | {(f"{w}_permission", "skip") for w in ("load", "store", "fence")}
    assert faults > 20 and wraps > 50 and queues == set(range(1, config.n_queues + 1))


@pytest.mark.parametrize("config", [CFG, CFG4], ids=["8x8", "4x4"])
def test_generator_eltwise_outputs_clear_of_their_inputs(config):
    """Every ADD/LAYERNORM the generator means to be valid keeps its output rows off its input
    rows (the ISA's BAD_SIZE otherwise); 400 scenarios, several hundred such commands."""
    from hw.isa import decode
    seen = 0
    for seed in range(400):
        for c in generate(config, seed).commands:
            view = decode(c.raw())
            if view.header.opcode not in (Opcode.ADD, Opcode.LAYERNORM) or c.expect:
                continue
            b = view.body.eltwise
            span = (b.n_blocks - 1) * b.stride + b.n_rows
            for start in (b.a_row, b.b_row):
                assert b.out_row >= start + span or start >= b.out_row + span, (seed, b)
            seen += 1
    assert seen > 300


def _outcomes(seed: int):
    s = generate(CFG, seed)
    m = run_scenario(ModelBackend(CFG), s)
    return s, m, run_scenario(ModelBackend(CFG), s)


def test_compare_catches_planted_differences():
    s, a, b = _outcomes(3)
    assert compare(s, a, b, "model") == []
    b.dram = bytes([b.dram[0] ^ 1]) + b.dram[1:]
    assert any("dram/local memory: 1 byte differing at" in m for m in compare(s, a, b, "model"))
    _, _, b = _outcomes(3)
    b.sems[0] += 1
    assert any(m.startswith("sems") for m in compare(s, a, b, "model"))
    _, _, b = _outcomes(3)
    b.counters["retired.matrix"] += 1
    assert any("retired.matrix" in m for m in compare(s, a, b, "model"))
    _, _, b = _outcomes(3)
    q = next(iter(b.queues))
    b.queues[q]["head"] = (b.queues[q]["head"] + 1) % 64
    assert any("HEAD" in m for m in compare(s, a, b, "model"))
    _, _, b = _outcomes(3)
    e = next(i for i, t in enumerate(b.traces) if len(t) > 1)
    b.traces[e] = b.traces[e][1:]
    assert any("trace" in m for m in compare(s, a, b, "model"))


def test_timestamp_words_are_not_compared():
    for seed in range(40):
        s, a, b = _outcomes(seed)
        ts = [c.timestamp_addr for c in s.commands if c.timestamp_addr is not None]
        if ts:
            off = ts[0] - ARENA_BASE
            b.dram = b.dram[:off] + bytes(4 * [0xA5]) + b.dram[off + 4:]
            assert compare(s, a, b, "model") == []
            return
    pytest.fail("no stream with a timestamp fence in 40 seeds")


def test_head_rules():
    assert failure_kind([ErrorCode.BAD_OPCODE.value, 0x55, 3, 0]) == "fetch"
    assert failure_kind([ErrorCode.AXI_ERROR.value, 0, 3, 0]) == "fetch"
    assert failure_kind([ErrorCode.AXI_ERROR.value, Opcode.FENCE.value, 3, 0]) == "fence"
    assert failure_kind([ErrorCode.BAD_SIZE.value, Opcode.DMA_LOAD.value, 3, 0]) == "engine"
    # a bus fault of a DMA is the engine's; a ring check (opcode 0) is found at fetch
    assert failure_kind([ErrorCode.AXI_ERROR.value, Opcode.DMA_STORE.value, 3, 0]) == "engine"
    assert failure_kind([ErrorCode.WINDOW.value, 0, 3, 0]) == "fetch"
    assert failure_kind([ErrorCode.MISALIGNED.value, 0, 3, 0]) == "fetch"
    assert failure_kind([ErrorCode.BAD_SEM.value, Opcode.FENCE.value, 3, 0]) == "fetch"


def test_head_rules_wrap_around_the_ring():
    """Where ``HEAD`` may stop after an error, modulo the ring (``error[2]`` counts commands
    since the queue's reset, so it runs past the ring size)."""
    ring = 8
    fence = [ErrorCode.MISALIGNED.value, Opcode.FENCE.value, 15, 0x102]   # slot 7
    engine = [ErrorCode.BAD_SIZE.value, Opcode.DMA_LOAD.value, 6, 0]
    fetch = [ErrorCode.BAD_OPCODE.value, 0x55, 7, 0]

    def allowed(error, model=False):
        return {h for h in range(2 * ring) if _head_ok(error, h, 3, ring, model)}

    assert allowed(fence) == {0} and allowed(fence, model=True) == {0}
    assert allowed(engine) == {7, 0} and allowed(engine, model=True) == {7}
    assert allowed([*engine[:2], 7, 0]) == {0, 1}
    assert allowed(fetch) == {7}
    assert allowed(None) == {3}


def test_shrink_finds_a_small_failing_stream():
    s = generate(CFG, 11)
    target = next(c for c in s.commands if c.opcode == Opcode.MATMUL.value)

    def fails(cand: Scenario) -> bool:
        return any(c is target for c in cand.commands)

    small = shrink(s, fails)
    assert fails(small) and len(small.commands) < len(s.commands) // 2
    assert len(small.queues) == 1


def test_models_agree_on_a_few_streams():
    checker = Checker(None, ModelBackend(CFG), PerfBackend(CFG))
    for seed in range(6):
        v = checker.check(generate(CFG, seed, GeneratorSettings(max_commands=24)))
        assert v.ok and v.perf_run, (seed, v.mismatches, v.hang)


def test_models_agree_on_translated_streams():
    """Translated mode: queues in contexts with random mappings and planted page faults
    (resumed or skipped), the functional against the performance model; every planted fault
    is handled as planted (the model's prediction check)."""
    checker = Checker(None, ModelBackend(CFG), PerfBackend(CFG))
    handled = 0
    for seed in range(40):
        s = generate(CFG, seed, GeneratorSettings(max_commands=24, p_vm=0.7))
        v = checker.check(s)
        assert v.ok and v.perf_run, (seed, v.mismatches, v.hang)
        handled += sum(v.errors[c.name] for c in (ErrorCode.PAGE_NOT_MAPPED,
                                                  ErrorCode.PAGE_PERMISSION))
    assert handled > 15


ODD = [NPUConfig(axi_data_bits=128, n_queues=2, cmd_fifo_depth=1, dma_outstanding=4),
       NPUConfig(rows=4, cols=8, n_queues=3, n_sems=8, trace_depth=16, fetch_depth=1),
       NPUConfig(axi_data_bits=32, cmd_fifo_depth=3, fetch_depth=16)]


@pytest.mark.parametrize("config", ODD, ids=[c.name for c in ODD])
def test_ci_subset_models_on_other_configurations(config):
    """The CI subset's model half: the functional against the performance model on
    configurations without a cached RTL build (128-bit bus, depth-1 stores, a non-square
    array, 3 queues, 8 semaphores, a 16-entry trace that overflows, one command per fetch
    burst; a 32-bit bus with fetch bursts of up to 16 commands)."""
    from cosim.fuzz.jobs import make_checker, run_seeds, summarize
    checker, why = make_checker(None, config)
    res = run_seeds(checker, config, list(range(9000, 9150)), perf_skipped=why)
    total = summarize(res["results"])
    assert why is None and total["with_perf"] == 150
    assert total["mismatching"] == 0 and total["hangs"] == 0, \
        [r["mismatches"][:2] for r in res["results"] if not r["ok"]]
    assert res["batch_mismatches"] == []


@pytest.mark.parametrize("config", [CFG, CFG4], ids=["8x8", "4x4"])
def test_model_meets_the_generator_predictions(config):
    """Every invalid command fails with the code it was drawn for, every valid one succeeds
    (the functional model against the generator's intent), and ERR_* and the traces follow
    the rules, over many seeds."""
    m = ModelBackend(config)
    bad = []
    for seed in range(100_000, 100_250):
        s = generate(config, seed)
        out = compare(s, run_scenario(m, s), None, "model")
        if out:
            bad.append((seed, out[:2]))
    assert not bad, bad


def test_the_slowest_dram_fuzzing_takes_runs_without_hangs():
    """``check_dram``'s bound is where the hang budget holds: at the largest slowdown it takes
    (100, bw=0.08 on a 64-bit bus) the performance model (the RTL's timing) runs streams and
    the end-of-batch dump without a hang; at 8x that (bw=0.01), refused, streams hang."""
    from cosim.fuzz.execute import check_dram
    from cosim.fuzz.jobs import make_checker, run_seeds
    from sw.dram import DramTiming
    edge, slow = DramTiming.parse("bw=0.08"), DramTiming.parse("bw=0.01")
    assert edge.slowdown(CFG.axi_data_bytes) == 100
    check_dram(edge, CFG, 48)
    with pytest.raises(ValueError, match="too slow to fuzz"):
        check_dram(slow, CFG, 48)
    res = run_seeds(make_checker(None, CFG, edge)[0], CFG, list(range(6)), shrink_failures=False)
    assert all(r["hang"] is None for r in res["results"]) and not res["batch_mismatches"]
    res = run_seeds(make_checker(None, CFG, slow)[0], CFG, [0], shrink_failures=False)
    assert "no progress" in res["results"][0]["hang"]


def test_a_hung_end_of_batch_dump_is_reported_not_raised(monkeypatch):
    """A device that a stream left wedged hangs the end-of-batch dump: the batch reports it
    among its mismatches and keeps its per-stream results (it used to raise and lose them)."""
    import cosim.fuzz.check as check_mod
    from cosim.fuzz.execute import HangError
    from cosim.fuzz.jobs import make_checker, run_seeds
    from sw.perf import PerfBackend
    real = check_mod.whole_state

    def wedged(backend, config):
        if isinstance(backend, PerfBackend):
            raise HangError("prologue/epilogue: no progress after 4000000 cycles")
        return real(backend, config)
    monkeypatch.setattr(check_mod, "whole_state", wedged)
    checker, _ = make_checker(None, CFG)
    res = run_seeds(checker, CFG, [1, 2])
    assert len(res["results"]) == 2
    (msg,) = res["batch_mismatches"]
    assert "did not finish on perf" in msg and "no progress" in msg


@pytest.mark.parametrize("backend", ["perf", "model"])
def test_a_perf_campaign_runs_the_two_models_only(backend, monkeypatch):
    """``backend="perf"`` (as the performance model is named in ``npu run``, ``bench`` and
    ``sweep``; ``"model"``, its former name, still taken) runs the models' batches, no RTL
    (any name but ``"model"`` ran the RTL), and the totals name it ``perf``."""
    import cosim.fuzz.campaign as campaign
    from sw.dram import DramTiming
    batches = []
    monkeypatch.setattr(campaign, "_model_batch",
                        lambda config, seeds, settings, dram: batches.append(seeds) or
                        {"results": [], "reproducers": [], "perf_skipped": None,
                         "batch_mismatches": []})
    monkeypatch.setattr(campaign, "_rtl_batch", lambda *a, **k: pytest.fail("ran the RTL"))
    total = campaign.run_campaign(CFG, 3, dram=DramTiming(), backend=backend, batch=2)
    assert batches == [[0, 1], [2]] and total["backend"] == "perf"


def test_a_campaign_refuses_an_unknown_backend_before_any_batch(monkeypatch):
    import cosim.fuzz.campaign as campaign
    from sw.dram import DramTiming
    for batch in ("_model_batch", "_rtl_batch"):
        monkeypatch.setattr(campaign, batch, lambda *a, **k: pytest.fail("ran a batch"))
    with pytest.raises(ValueError, match="backend 'functional': expected rtl or perf "
                       r"\(model: perf's former name\)"):
        campaign.run_campaign(CFG, 1, dram=DramTiming(), backend="functional")


def test_a_failing_batch_is_named(monkeypatch):
    """An exception inside one batch of a campaign carries which batch and seeds it was (the
    pool raises it only once the batches before it are done, after later ones printed)."""
    import cosim.fuzz.campaign as campaign
    from sw.dram import DramTiming
    real = campaign._model_batch

    def broken(config, seeds, settings, dram):
        if 3 in seeds:
            raise RuntimeError("planted")
        return real(config, seeds, settings, dram)
    monkeypatch.setattr(campaign, "_model_batch", broken)
    lines = []
    with pytest.raises(RuntimeError, match="planted") as info:
        campaign.run_campaign(CFG, 4, dram=DramTiming(), backend="model", batch=2,
                              progress=lines.append)
    assert "in fuzz batch 2/2 (seeds 2..3)" in info.value.__notes__
    assert any("batch 2/2 (seeds 2..3) failed: RuntimeError: planted" in s for s in lines)


@pytest.mark.parametrize("stop_at", [0, 1], ids=["first-batch", "second-batch"])
def test_an_interrupted_campaign_says_so_in_one_line_and_keeps_what_finished(
        stop_at, monkeypatch, capsys, tmp_path):
    """^C during ``npu fuzz``: one line, status 130, and ``--json`` gets the streams of the
    batches that finished (or the line says that none did and nothing was written)."""
    import cosim.fuzz.campaign as campaign
    from cosim.cli import main
    real, ran = campaign._model_batch, []

    def batch(config, seeds, settings, dram):
        if len(ran) == stop_at:
            raise KeyboardInterrupt
        ran.append(seeds)
        return real(config, seeds, settings, dram)
    monkeypatch.setattr(campaign, "_model_batch", batch)
    out = tmp_path / "f.json"
    assert main(["fuzz", "--backend", "model", "--config", "4x4", "--streams", "6", "--batch",
                 "2", "--no-shrink", "--json", str(out)]) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    if stop_at == 0:
        assert last == f"npu fuzz: interrupted before any batch finished; {out} not written"
        assert not out.exists()
    else:
        assert last == (f"npu fuzz: interrupted after 2 streams (0 mismatching, 0 hangs); "
                        f"{out} holds them")
        total = json.loads(out.read_text())
        assert total["streams"] == 2 and total["seeds"] == [0, 1]
        assert total["interrupted"] == {"batches": 3, "finished": [[0, 1]]}


def test_timing_differences_fail_a_timed_exact_campaign(monkeypatch, capsys):
    """``npu fuzz --timed-exact`` exits 1 when the RTL and the performance model differ only
    in timing (the help promises 1 unless every stream agrees)."""
    import cosim.fuzz.campaign as campaign
    from cosim.cli import main
    real = campaign.run_campaign

    def timed(*args, **kwargs):
        total = real(*args, **{**kwargs, "backend": "model", "timed_exact": False})
        total["timed"] = [{"seed": 0, "differences": ["trace: load #3 end 41 != 40"]}]
        total["timed_differences"] = 1
        return total
    monkeypatch.setattr(campaign, "run_campaign", timed)
    args = ["fuzz", "--streams", "1", "--config", "4x4", "--no-shrink"]
    assert main([*args, "--timed-exact"]) == 1
    out, err = capsys.readouterr()
    assert "load #3 end 41 != 40" in out
    # one stream, one hang or one difference is singular
    assert "npu fuzz: 1 stream on 4x4" in out and "0 hangs" in out
    assert "timing only (--timed-exact): 1 stream differing" in out
    assert "batch 1/1: 1 stream, 0 failing" in err


def test_an_exact_timed_campaign_says_so(monkeypatch, capsys):
    """A ``--timed-exact`` campaign without a timing difference says that timing was compared
    (not only the JSON's ``timed_differences: 0``)."""
    import cosim.fuzz.campaign as campaign
    from cosim.cli import main
    real = campaign.run_campaign
    monkeypatch.setattr(campaign, "run_campaign", lambda *a, **kw: real(
        *a, **{**kw, "backend": "model", "timed_exact": False}))
    args = ["fuzz", "--streams", "1", "--config", "4x4", "--no-shrink"]
    assert main([*args, "--timed-exact"]) == 0
    assert "timing (--timed-exact): the same in every stream" in capsys.readouterr().out
    assert main(args) == 0
    assert "--timed-exact" not in capsys.readouterr().out
