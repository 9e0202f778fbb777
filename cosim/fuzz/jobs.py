"""Jobs of the fuzzer (:func:`cosim.tb.harness.run_job` runs them in one simulation): a batch of
seeded scenarios (:func:`fuzz_batch`) and the replay of reproducer files
(:func:`replay`), each on the RTL beside the functional model and the performance model in
the same process, so that only verdicts (and shrunk reproducers) leave the simulation.
"""

from __future__ import annotations

from collections import Counter

from cosim.fuzz.check import Checker, Verdict, command_counts, shrink
from cosim.fuzz.generate import GeneratorSettings, generate
from cosim.fuzz.scenario import Scenario
from sw.model import ModelBackend

__all__ = ["fuzz_batch", "run_seeds", "replay", "make_checker", "summarize"]

_MAX_TEXTS = 8


def make_checker(device, config, dram_timing=None, *, perf: bool = True,
                 timed_exact: bool = False) -> tuple[Checker, str | None]:
    """A :class:`Checker` for ``device``; the performance model joins unless ``perf`` is
    false or it refuses the setup (``NotImplementedError``). Returns the checker and why the
    performance model is left out."""
    model = ModelBackend(config)
    perf_backend, why = None, None
    if perf:
        from sw.perf import PerfBackend
        try:
            perf_backend = PerfBackend(config, dram=dram_timing)
        except NotImplementedError as e:
            why = str(e)
    else:
        why = "not asked for"
    return Checker(device, model, perf_backend, timed_exact=timed_exact), why


def _failing(v: Verdict) -> bool:
    """A real failure: the model ran cleanly and a backend differs or hangs."""
    if v.hang is not None:
        return not v.hang.startswith("model")
    return any("generator meant" not in m for m in v.mismatches)


def _entry(seed: int, scenario: Scenario, v: Verdict) -> dict:
    return {"seed": seed, "ok": v.ok, "hang": v.hang, "mismatches": v.mismatches[:_MAX_TEXTS],
            "timed": v.timed[:_MAX_TEXTS],
            "n_mismatches": len(v.mismatches), "commands": dict(command_counts(scenario)),
            "errors": dict(v.errors), "queues": len(scenario.queues), "cycles": v.cycles,
            "perf": v.perf_run, "seconds": v.seconds, "fault": scenario.fault is not None,
            "wraps": any(len(scenario.queue_commands(q.queue)) >= q.ring_size
                         for q in scenario.queues),
            "failing_queues": sum(v.errors.values()), "irq_pin": v.irq_pin,
            "translated_queues": len(scenario.vm["queues"]) if scenario.vm else 0,
            "page_faults": _page_faults(scenario)}


def _page_faults(scenario: Scenario) -> dict:
    """The planted page faults by ``kind/action`` (translated mode)."""
    faults = scenario.vm["faults"].values() if scenario.vm else ()
    return dict(Counter(f"{f['kind']}/{f['action']}" for f in faults))


def fuzz_batch(backend, *, seeds: list[int], settings: dict | None = None,
               perf: bool = True, shrink_failures: bool = True,
               timed_exact: bool = False) -> dict:
    """Generate, run and compare one scenario per seed on ``backend`` (the RTL) and the
    models; shrink the failing ones (:func:`run_seeds`)."""
    checker, why = make_checker(backend, backend.config, getattr(backend, "dram_timing", None),
                                perf=perf, timed_exact=timed_exact)
    return run_seeds(checker, backend.config, seeds, settings, why, shrink_failures)


def run_seeds(checker: Checker, config, seeds: list[int], settings: dict | None = None,
              perf_skipped: str | None = None, shrink_failures: bool = True) -> dict:
    """One scenario per seed through ``checker``.

    Returns
    -------
    dict
        ``{"results": [per seed: ok, mismatches, commands by kind, errors by code, ...],
        "reproducers": [scenario dicts, shrunk when the failure allows], "perf_skipped":
        why the performance model did not run, or None, "batch_mismatches": what
        :meth:`Checker.whole_check` found after the batch}``.
    """
    gs = GeneratorSettings(**(settings or {}))
    results, repros = [], []
    for seed in seeds:
        scenario = generate(config, seed, gs)
        v = checker.check(scenario)
        results.append(_entry(seed, scenario, v))
        if v.ok:
            if v.timed:     # a timing-model difference: the stream as it is, not shrunk
                scenario.note = f"seed {seed}, timed: {'; '.join(v.timed[:3])}"
                repros.append(scenario.to_dict())
            continue
        if shrink_failures and _failing(v):
            scenario = shrink(scenario, lambda s: _failing(checker.check(s)))
            v = checker.check(scenario)
        scenario.note = f"seed {seed}: {'; '.join((v.mismatches or [v.hang or ''])[:3])}"
        repros.append(scenario.to_dict())
    return {"results": results, "reproducers": repros, "perf_skipped": perf_skipped,
            "batch_mismatches": checker.whole_check()}


def replay(backend, *, scenarios: list[dict], perf: bool = True,
           timed_exact: bool = False) -> list[dict]:
    """Run reproducer scenarios (:meth:`Scenario.to_dict`) on every backend; per scenario
    the mismatches (empty when the backends agree), the timing differences between the RTL
    and the performance model (``timed``, with ``timed_exact``) and the errors by code."""
    checker, _ = make_checker(backend, backend.config, getattr(backend, "dram_timing", None),
                              perf=perf, timed_exact=timed_exact)
    out = []
    for d in scenarios:
        s = Scenario.from_dict(d)
        v = checker.check(s)
        out.append({"ok": v.ok, "mismatches": v.mismatches, "timed": v.timed, "hang": v.hang,
                    "errors": dict(v.errors), "perf": v.perf_run})
    return out


def summarize(results: list[dict]) -> dict:
    """Totals of :func:`fuzz_batch` results: streams, mismatching, hangs, commands by kind,
    errors by code."""
    kinds, codes = Counter(), Counter()
    for r in results:
        kinds.update(r["commands"])
        codes.update(r["errors"])
    return {"streams": len(results), "mismatching": sum(1 for r in results if r["n_mismatches"]),
            "timed_differences": sum(1 for r in results if r.get("timed")),
            "hangs": sum(1 for r in results if r["hang"]),
            "commands": dict(sorted(kinds.items())), "errors": dict(sorted(codes.items())),
            "with_perf": sum(1 for r in results if r["perf"]),
            "with_fault": sum(1 for r in results if r["fault"]),
            "with_ring_wrap": sum(1 for r in results if r["wraps"]),
            "with_several_failing_queues": sum(1 for r in results if r["failing_queues"] > 1),
            "with_irq_pin_high": sum(1 for r in results if r["irq_pin"]),
            "with_translated_queues": sum(1 for r in results if r.get("translated_queues")),
            "page_faults": dict(sorted(sum((Counter(r.get("page_faults", {}))
                                            for r in results), Counter()).items())),
            "queues": dict(sorted(Counter(r["queues"] for r in results).items()))}
