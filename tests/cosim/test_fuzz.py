"""The differential fuzzer on the RTL: a CI subset of fixed seeds on 8x8 and 4x4 (the
functional model, the performance model and the RTL agree, the performance model's timing
too; the whole DRAM and local memories agree after each batch), and the replay of every
reproducer in ``tests/data/fuzz/``.

Run: ``pytest tests/cosim/test_fuzz.py``. The full campaigns are ``npu fuzz`` (see
:mod:`cosim.fuzz.campaign`).
"""

import json
from collections import defaultdict
from pathlib import Path

import pytest

from cosim.fuzz.jobs import summarize
from cosim.tb.harness import run_job
from hw.config import NPUConfig

REPRO_DIR = Path(__file__).parent.parent / "data" / "fuzz"
#: (configuration, first seed, streams): the CI subset
CI = [(NPUConfig(), 0, 40), (NPUConfig(rows=4, cols=4), 5000, 24)]


@pytest.mark.parametrize("config,first,n", CI, ids=[c.name for c, _, _ in CI])
def test_ci_subset(config, first, n):
    r = run_job(config, "cosim.fuzz.jobs:fuzz_batch",
                {"seeds": list(range(first, first + n)), "timed_exact": True},
                name=f"fuzz_ci_{config.name}")
    res = r.result
    total = summarize(res["results"])
    failures = [(x["seed"], x["hang"], x["mismatches"][:3]) for x in res["results"]
                if not x["ok"]]
    assert not failures, failures
    # and the performance model's timing is the RTL's, trace entry by trace entry
    assert [(x["seed"], x["timed"][:2]) for x in res["results"] if x["timed"]] == []
    assert res["batch_mismatches"] == []
    assert total["with_perf"] == n            # ideal DRAM: the performance model ran
    assert total["hangs"] == 0 and total["streams"] == n
    assert len(total["errors"]) >= 5          # a spread of error kinds was exercised


def test_timing_is_exact_under_random_backpressure():
    """Under ``bp50`` (R withheld at random, drawn per cycle from reset) the performance model
    matches the RTL in timing too, trace entry by trace entry (``--timed-exact``). Each
    scenario sets the bus fault first, which takes a cycle on the RTL; when the model spent
    none there, it ran every stream a cycle early against the same draws, and 8 of these 10
    streams differed by up to 9 cycles."""
    r = run_job(NPUConfig(), "cosim.fuzz.jobs:fuzz_batch",
                {"seeds": list(range(777000, 777010)), "timed_exact": True,
                 "shrink_failures": False}, name="fuzz_timed_bp50", dram="bp50")
    res = r.result["results"]
    assert [(x["seed"], x["timed"][:2]) for x in res if x["timed"] or not x["ok"]] == []
    assert summarize(res)["with_perf"] == 10


def _reproducers() -> dict:
    by_config = defaultdict(list)
    for path in sorted(REPRO_DIR.glob("*.json")):
        d = json.loads(path.read_text())
        by_config[json.dumps(d["config"], sort_keys=True)].append((path.name, d))
    return by_config


def test_there_are_reproducers():
    assert sum(len(v) for v in _reproducers().values()) >= 2


@pytest.mark.parametrize("dram", ["ideal", "jitter"])
@pytest.mark.parametrize("config_key", list(_reproducers()))
def test_reproducers_replay(config_key, dram):
    """Every reproducer on the RTL and both models, under the ideal DRAM and under jitter (the
    timing several of them were found under; the performance model times it too), with the
    RTL's and the performance model's timing compared exactly (``--timed-exact``)."""
    files = _reproducers()[config_key]
    config = NPUConfig(**json.loads(config_key))
    r = run_job(config, "cosim.fuzz.jobs:replay",
                {"scenarios": [d for _, d in files], "timed_exact": True},
                name=f"fuzz_replay_{config.name}_{dram}", dram=dram)
    for (name, _), out in zip(files, r.result, strict=True):
        # ok: the backends agree, and every command failed as its file says
        assert out["ok"] and out["perf"], (name, out)
        assert out["timed"] == [], (name, out["timed"][:2])
