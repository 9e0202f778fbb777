"""A fuzz campaign (:func:`run_campaign`, behind ``npu fuzz``): ``streams`` seeded scenarios in
batches, each batch one simulation (:func:`cosim.fuzz.jobs.fuzz_batch` on the RTL with the
functional and the performance model beside it), or on the two models alone
(``backend="perf"``; ``"model"``, its former name, is still taken); totals, wall time and
the reproducers of every failure. Interrupted (^C), it raises :class:`CampaignInterrupted`
with the totals of the batches that finished.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cosim.fuzz.compare import plural
from cosim.fuzz.jobs import make_checker, run_seeds, summarize
from cosim.fuzz.scenario import Scenario
from hw.config import NPUConfig
from sw.dram import DramTiming

__all__ = ["run_campaign", "write_reproducers", "CampaignInterrupted", "BACKENDS",
           "backend_name"]

#: The campaign's backends: ``rtl``, the RTL beside the functional and the performance model;
#: ``perf``, the functional against the performance model, no RTL (``perf`` as in ``npu run``,
#: ``npu bench`` and ``npu sweep``).
BACKENDS = ("rtl", "perf")

#: Former backend names, still taken: ``model`` was ``perf``'s.
_FORMER_NAMES = {"model": "perf"}


def backend_name(name: str) -> str:
    """The backend ``name`` stands for: one of :data:`BACKENDS` (a former name, ``model``,
    gives ``perf``).

    Raises
    ------
    ValueError
        ``name`` is neither a backend nor a former name.
    """
    backend = _FORMER_NAMES.get(name, name)
    if backend not in BACKENDS:
        former = ", ".join(f"{k}: {v}'s former name" for k, v in _FORMER_NAMES.items())
        raise ValueError(f"backend {name!r}: expected {' or '.join(BACKENDS)} ({former})")
    return backend


class CampaignInterrupted(KeyboardInterrupt):
    """^C during :func:`run_campaign`: ``total`` holds the totals of the batches that had
    finished (with ``"interrupted"``: the batches asked for and the seed ranges finished), or
    None if none had."""

    def __init__(self, total: dict | None) -> None:
        super().__init__("fuzz campaign interrupted")
        self.total = total


def _model_batch(config: NPUConfig, seeds: list[int], settings: dict | None,
                 dram: DramTiming) -> dict:
    """The functional model against the performance model, no device."""
    checker, why = make_checker(None, config, dram)
    return run_seeds(checker, config, seeds, settings, why)


def _rtl_batch(config: NPUConfig, seeds: list[int], settings: dict | None,
               dram: DramTiming, name: str, timed_exact: bool, shrink: bool = True) -> dict:
    from cosim.tb.harness import run_job
    r = run_job(config, "cosim.fuzz.jobs:fuzz_batch",
                {"seeds": seeds, "settings": settings, "timed_exact": timed_exact,
                 "shrink_failures": shrink},
                name=name, dram=dram)
    out = dict(r.result)
    out["sim_seconds"] = r.job_seconds
    return out


def write_reproducers(repros: list[dict], directory: Path, tag: str) -> list[str]:
    """Write each reproducer scenario to ``directory/<tag>_seed<seed>.json``; returns the
    paths."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for d in repros:
        s = Scenario.from_dict(d)
        path = directory / f"{tag}_seed{s.seed}.json"
        s.save(path)
        paths.append(str(path))
    return paths


def run_campaign(config: NPUConfig, streams: int, *, dram: DramTiming, first_seed: int = 0,
                 backend: str = "rtl", batch: int = 200, jobs: int = 1,
                 settings: dict | None = None, repro_dir: Path | None = None,
                 timed_exact: bool = False, shrink: bool = True,
                 progress: Callable[[str], None] | None = None) -> dict:
    """Run ``streams`` scenarios (seeds ``first_seed ..``) on ``backend`` (:data:`BACKENDS`:
    ``rtl`` or ``perf``; ``model`` is taken as ``perf``) and return the totals
    (``shrink=False``: failing streams are reported as they are, not shrunk on the RTL).

    Returns
    -------
    dict
        :func:`cosim.fuzz.jobs.summarize` totals plus ``config``, ``dram``, ``backend`` (its
        name in :data:`BACKENDS`),
        ``seeds``, ``wall_seconds``, ``perf_skipped``, ``failures`` (seed and first
        mismatches of each failing stream) and ``reproducers`` (files written).

    Raises
    ------
    ValueError
        ``backend`` is not a backend (:func:`backend_name`); before any batch runs.
    CampaignInterrupted
        On ^C (a ``KeyboardInterrupt``), with the totals of the batches that finished. With
        ``jobs=1`` the batches run in the calling thread, so ^C stops the running one at once
        (on the RTL the simulator gets the signal too); with more, the running batches end
        first (a simulator that got the ^C ends at once, a model batch runs to its end).
    """
    backend = backend_name(backend)
    t0 = time.perf_counter()
    seeds = list(range(first_seed, first_seed + streams))
    batches = [seeds[i:i + batch] for i in range(0, len(seeds), batch)]
    tag = f"{config.name}_{dram.name or 'custom'}"

    finished: dict[int, dict] = {}
    stop = threading.Event()            # ^C: no further batch starts

    def one(k: int) -> dict:
        if stop.is_set():
            raise KeyboardInterrupt
        try:
            if backend == "perf":
                res = _model_batch(config, batches[k], settings, dram)
            else:
                res = _rtl_batch(config, batches[k], settings, dram, f"fuzz_{tag}_{k}",
                                 timed_exact, shrink)
        except KeyboardInterrupt:       # (a simulator's ^C: the signal may reach this thread
            stop.set()                  # and the simulators before the main thread)
            raise
        except Exception as e:
            if stop.is_set():           # a simulator that ^C ended before it wrote a result:
                raise KeyboardInterrupt from None      # interrupted, not a failing batch
            # the pool raises a batch's exception only when the batches before it are done:
            # say which batch it was
            where = f"batch {k + 1}/{len(batches)} (seeds {batches[k][0]}..{batches[k][-1]})"
            e.add_note(f"in fuzz {where}")
            if progress:
                progress(f"{where} failed: {type(e).__name__}: {e}")
            raise
        finished[k] = res
        if progress:
            bad = sum(1 for r in res["results"] if not r["ok"])
            progress(f"batch {k + 1}/{len(batches)}: {plural(len(res['results']), 'stream')}, "
                     f"{bad} failing, {time.perf_counter() - t0:.0f} s since the start")
        return res

    def totals() -> dict:
        outs = [finished[k] for k in sorted(finished)]
        return _totals(outs, config, dram, backend, t0, repro_dir, tag)

    try:
        if jobs <= 1:
            for k in range(len(batches)):
                one(k)
        else:
            with ThreadPoolExecutor(max_workers=jobs) as pool:
                try:
                    list(pool.map(one, range(len(batches))))
                except KeyboardInterrupt:
                    stop.set()          # the running batches end, no other starts
                    raise
    except KeyboardInterrupt:
        if not finished:
            raise CampaignInterrupted(None) from None
        total = totals()
        total["interrupted"] = {"batches": len(batches), "finished": [
            [batches[k][0], batches[k][-1]] for k in sorted(finished)]}
        raise CampaignInterrupted(total) from None
    return totals()


def _totals(outs: list[dict], config: NPUConfig, dram: DramTiming, backend: str, t0: float,
            repro_dir: Path | None, tag: str) -> dict:
    """The campaign's totals over the batch results ``outs`` (see :func:`run_campaign`)."""
    results = [r for o in outs for r in o["results"]]
    repros = [d for o in outs for d in o["reproducers"]]
    total = summarize(results)
    total.update({
        "config": config.name, "dram": dram.to_dict(), "backend": backend,
        "seeds": [min(r["seed"] for r in results), max(r["seed"] for r in results)]
        if results else [],
        "wall_seconds": round(time.perf_counter() - t0, 1),
        "perf_skipped": next((o["perf_skipped"] for o in outs if o["perf_skipped"]), None),
        "failures": [{"seed": r["seed"], "hang": r["hang"], "mismatches": r["mismatches"][:4]}
                     for r in results if not r["ok"]],
        "timed": [{"seed": r["seed"], "differences": r["timed"][:4]}
                  for r in results if r.get("timed")],
        "batch_mismatches": [m for o in outs for m in o["batch_mismatches"]],
        "reproducers": write_reproducers(repros, repro_dir, tag) if repro_dir and repros else [],
        "seconds": {k: round(sum(r["seconds"].get(k, 0.0) for r in results), 1)
                    for k in ("model", "perf", "rtl")},
        "simulated_cycles": sum(r["cycles"] for r in results),
    })
    return total


def main_json(total: dict, path: Path | None) -> None:
    """Write the campaign's totals as JSON."""
    if path is not None:
        Path(path).write_text(json.dumps(total, indent=1) + "\n")
