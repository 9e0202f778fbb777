"""One differential check: a scenario on the functional model, the performance model and a
third backend (the RTL), compared (:func:`check`); and the minimal reproducer of a failing
scenario (:func:`shrink`).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from cosim.fuzz.compare import compare, compare_timed, plural
from cosim.fuzz.execute import MAX_CYCLES, HangError, run_scenario, whole_state
from cosim.fuzz.scenario import Scenario
from hw.isa import ErrorCode, Opcode

__all__ = ["Checker", "Verdict", "shrink", "command_counts"]

_NAMES = {op.value: op.name for op in Opcode}


def command_counts(scenario: Scenario) -> Counter:
    """Commands by kind: the opcode name, or ``BAD_OPCODE`` for an undefined opcode."""
    return Counter(_NAMES.get(c.opcode, "BAD_OPCODE") for c in scenario.commands)


@dataclass
class Verdict:
    """The result of :meth:`Checker.check`."""
    mismatches: list[str] = field(default_factory=list)
    #: RTL against the performance model beyond the guarantees (``timed_exact``): a
    #: difference of the timing model, reported apart, not a failure of the stream
    timed: list[str] = field(default_factory=list)
    hang: str | None = None
    errors: Counter = field(default_factory=Counter)     # ErrorCode name -> queues failing
    perf_run: bool = False
    irq_pin: bool = False                               # the model's, at the end
    cycles: int = 0
    seconds: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.mismatches and self.hang is None


class Checker:
    """Runs scenarios on a reference model, a performance model (if it times this DRAM) and
    a device backend, reusing each backend from one scenario to the next.

    Parameters
    ----------
    device : Backend or None
        The backend under test (an :class:`~cosim.tb.rtl_backend.RtlBackend` in a
        simulation), or None to compare the two models only.
    model, perf : Backend
        The functional model and the performance model (``perf`` None: not run).
    timed_exact : bool
        Also compare the device and the performance model exactly (cycles, timestamps).
    """

    def __init__(self, device, model, perf, *, timed_exact: bool = False,
                 max_cycles: int = MAX_CYCLES) -> None:
        self.device, self.model, self.perf = device, model, perf
        self.timed_exact = timed_exact
        self.max_cycles = max_cycles

    def _run(self, backend, scenario: Scenario, name: str, v: Verdict):
        t0 = time.perf_counter()
        try:
            return run_scenario(backend, scenario, max_cycles=self.max_cycles,
                                trace_cycles=self.timed_exact)
        except HangError as e:
            v.hang = v.hang or f"{name}: {e}"
            return None
        finally:
            v.seconds[name] = v.seconds.get(name, 0.0) + time.perf_counter() - t0

    def check(self, scenario: Scenario) -> Verdict:
        """Run ``scenario`` on every backend and compare (:mod:`cosim.fuzz.compare`)."""
        v = Verdict()
        ref = self._run(self.model, scenario, "model", v)
        if ref is None:
            return v
        v.mismatches += compare(scenario, ref, None, "model")
        v.irq_pin = ref.irq_pin
        for q in ref.queues.values():
            if q["error"]:
                v.errors[ErrorCode(q["error"][0]).name] += 1
        for f in ref.vm_faults:             # page faults the host resumed or skipped
            v.errors[ErrorCode(f[1]).name] += 1
        perf = dev = None
        if self.perf is not None:
            perf = self._run(self.perf, scenario, "perf", v)
            v.perf_run = perf is not None
            if perf is not None:
                v.mismatches += compare(scenario, ref, perf, "perf")
        if self.device is not None:
            dev = self._run(self.device, scenario, "rtl", v)
            if dev is not None:
                v.mismatches += compare(scenario, ref, dev, "rtl")
                v.cycles = dev.cycles
                if self.timed_exact and perf is not None:
                    v.timed += compare_timed(scenario, dev, perf)
        return v


    def whole_check(self) -> list[str]:
        """After a batch: all of DRAM and both local memories, whole, on every backend
        (:func:`cosim.fuzz.execute.whole_state`); a difference is a write outside every
        stream's arena and partitions, which no stream's own comparison could see. A dump
        that does not finish (a device a stream left wedged) is reported here too, so the
        batch's per-stream results are kept."""
        config = self.model.config
        ref = np.frombuffer(whole_state(self.model, config), np.uint8)
        out = []
        for name, b in (("perf", self.perf), ("rtl", self.device)):
            if b is None:
                continue
            try:
                state = whole_state(b, config)
            except HangError as e:      # reported with the batch's results, not instead
                out.append(f"whole DRAM/local memory after the batch: the dump did not "
                           f"finish on {name} ({e})")
                continue
            diff = np.flatnonzero(np.frombuffer(state, np.uint8) != ref)
            if diff.size:
                out.append(f"whole DRAM/local memory after the batch: "
                           f"{plural(diff.size, 'byte')} differing on {name}, the first at "
                           f"{int(diff[0]):#x}")
        return out


def _removable(scenario: Scenario, i: int) -> bool:
    """Commands a shrink may drop: not the ones that order others (BARRIER, WAIT, FENCE, a
    command that waits) -- dropping those could make the stream racy, whose results may
    legitimately differ; a dropped signaller shows as a hang of the model and is refused."""
    c = scenario.commands[i]
    keep = (Opcode.BARRIER.value, Opcode.WAIT.value, Opcode.FENCE.value)
    return c.opcode not in keep and not c.fields["header"].get("flags", {}).get("wait")


def shrink(scenario: Scenario, fails: Callable[[Scenario], bool], *,
           max_tests: int = 400) -> Scenario:
    """The smallest scenario found that still ``fails``: whole queues first, then the
    removable commands (:func:`_removable`) by delta debugging (Zeller and Hildebrandt,
    "Simplifying and Isolating Failure-Inducing Input", TSE 2002), each candidate first
    checked on the models by ``fails`` itself (it must be legal: no hang, the generator's
    predictions hold)."""
    tests = 0
    best = scenario
    for s in list(best.queues):
        if len(best.queues) == 1 or tests >= max_tests:
            break
        cand = replace(best, queues=[x for x in best.queues if x.queue != s.queue],
                       commands=[c for c in best.commands if c.queue != s.queue])
        tests += 1
        if fails(cand):
            best = cand
    n = 2
    while tests < max_tests:
        idx = [i for i in range(len(best.commands)) if _removable(best, i)]
        if not idx:
            break
        size = max(1, len(idx) // n)
        chunks = [idx[k:k + size] for k in range(0, len(idx), size)]
        reduced = False
        for chunk in chunks:
            drop = set(chunk)
            cand = replace(best, commands=[c for i, c in enumerate(best.commands)
                                           if i not in drop])
            tests += 1
            if fails(cand):
                best, reduced = cand, True
                n = max(n - 1, 2)
                break
            if tests >= max_tests:
                break
        if not reduced:
            if size == 1:
                break
            n = min(2 * n, len(idx))
    return best
