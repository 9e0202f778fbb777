"""The differential fuzzer: seeded command streams on the functional model, the performance
model and the RTL, compared under what the ISA guarantees.

Modules: :mod:`~cosim.fuzz.generate` (scenarios, with :mod:`~cosim.fuzz.commands` drawing
the commands and :mod:`~cosim.fuzz.layout` placing them), :mod:`~cosim.fuzz.execute` (the
host side on any backend), :mod:`~cosim.fuzz.compare` (the rules), :mod:`~cosim.fuzz.check`
(one differential check, shrinking), :mod:`~cosim.fuzz.jobs` (batches inside one simulation),
:mod:`~cosim.fuzz.campaign` (``npu fuzz``). Reproducers are :class:`~cosim.fuzz.scenario.Scenario`
JSON files; ``tests/data/fuzz/`` holds every one found, replayed by
``tests/cosim/test_fuzz.py``.

What is compared, and why only that, is the ISA's statement of what concurrent work
guarantees (``hw/isa/__init__.py``, "Concurrency"): exact where the result does not depend on
timing, within a rule where it does.
"""

from cosim.fuzz.check import Checker, Verdict, shrink
from cosim.fuzz.execute import HangError, Outcome, run_scenario
from cosim.fuzz.generate import GeneratorSettings, generate
from cosim.fuzz.scenario import Scenario

__all__ = ["generate", "GeneratorSettings", "Scenario", "run_scenario", "Outcome", "HangError",
           "Checker", "Verdict", "shrink"]
