"""Digest of everything the performance model produces, to check that a change leaves it identical.

    .venv/bin/python scripts/perf_digest.py [--dram PRESET ...] [--only NAME ...]
        [--dump DIR] [--write FILE] [--check FILE]

Runs the validation corpus (:data:`sw.perf.corpus.WORKLOADS`, grouped by configuration as
:func:`cosim.bench.validate.run_validation` groups them) and the main job
(:func:`sw.jobs.minilm_block.run_attention_job`, 8x8, L = 32, as
:func:`cosim.bench.validate.measure_speed` runs it) on :class:`sw.perf.PerfBackend` under each
DRAM preset (default: all six), and records per workload: every counter delta, the workload's
own results (kernel cycles, output digests, error reports), the engine traces, the backend's
cycle and a SHA-256 of the whole DRAM image after it; for the main job its whole result
(stages, kernels, SQNR) and its DRAM image. Wall times are left out. The record of a preset is
hashed (SHA-256 of its canonical JSON).

A change that must not change the model (a speed-up, a refactoring of :mod:`sw.perf`,
:mod:`hw.isa.timing`, :mod:`sw.dram`, the functional model) is checked before and after::

    .venv/bin/python scripts/perf_digest.py --write /tmp/before.json     # on the old code
    .venv/bin/python scripts/perf_digest.py --check /tmp/before.json     # on the new code

``--check`` exits 1 naming the presets that differ; ``--dump DIR`` writes each preset's record
(``DIR/<preset>.json``) to find what changed with ``diff``. About 5 s per preset on one idle
core.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

PRESET_NAMES = ("ideal", "ddr", "jitter", "hbm", "lat100", "bp50")


def _sha(data) -> str:
    return hashlib.sha256(bytes(data)).hexdigest()


def record(dram: str, only: list[str] | None = None, main: bool = True) -> dict:
    """Everything the model produces on the corpus (and the main job) under ``dram``."""
    from cosim.bench.validate import corpus_job
    from hw.config import NPUConfig
    from sw.perf import PerfBackend
    from sw.perf.corpus import WORKLOADS

    names = list(WORKLOADS) if only is None else list(only)
    groups: dict[str, list[str]] = {}
    for n in names:
        groups.setdefault(json.dumps(WORKLOADS[n].config, sort_keys=True), []).append(n)
    out: dict = {"workloads": {}}
    for key, group in groups.items():
        backend = PerfBackend(NPUConfig(**json.loads(key)), dram=dram)
        for n in group:
            rec = corpus_job(backend, names=[n], trace=True)[n]
            rec.pop("wall_seconds")
            rec["cycle"] = backend.cycle
            rec["dram_sha256"] = _sha(backend.dram)
            out["workloads"][n] = rec
    if main:
        from sw.jobs.minilm_block import run_attention_job
        config = NPUConfig()
        backend = PerfBackend(config, dram=dram)
        r = run_attention_job(backend, config=config.to_dict(), seq_len=32)
        out["main_job"] = {"result": r, "cycle": backend.cycle,
                           "dram_sha256": _sha(backend.dram)}
    return out


def digest(rec: dict) -> str:
    return hashlib.sha256(json.dumps(rec, sort_keys=True, default=str).encode()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="scripts/perf_digest.py",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--dram", nargs="+", default=list(PRESET_NAMES), metavar="PRESET")
    p.add_argument("--only", nargs="+", metavar="NAME", help="only these corpus workloads "
                   "(and no main job)")
    p.add_argument("--dump", type=Path, metavar="DIR", help="write DIR/<preset>.json")
    p.add_argument("--write", type=Path, metavar="FILE", help="store the digests in FILE")
    p.add_argument("--check", type=Path, metavar="FILE", help="compare with the digests in FILE")
    ns = p.parse_args(argv)
    if ns.only and (ns.write or ns.check):
        p.error("--only records a subset: its digests are not the committed ones")
    expected = json.loads(ns.check.read_text()) if ns.check else {}
    got, bad = {}, []
    for preset in ns.dram:
        t0 = time.perf_counter()
        rec = record(preset, ns.only, main=ns.only is None)
        got[preset] = h = digest(rec)
        if ns.dump:
            ns.dump.mkdir(parents=True, exist_ok=True)
            (ns.dump / f"{preset}.json").write_text(json.dumps(rec, indent=1, sort_keys=True,
                                                               default=str))
        verdict = ""
        if ns.check:
            if preset not in expected:
                verdict = "  (no committed digest)"
                bad.append(preset)
            elif expected[preset] != h:
                verdict = "  DIFFERS"
                bad.append(preset)
            else:
                verdict = "  same"
        print(f"{preset:8s} {h[:16]}  {time.perf_counter() - t0:6.1f} s{verdict}", flush=True)
    if ns.write:
        old = json.loads(ns.write.read_text()) if ns.write.exists() else {}
        ns.write.write_text(json.dumps(old | got, indent=1, sort_keys=True) + "\n")
    if bad:
        print(f"differs from {ns.check}: {', '.join(bad)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
