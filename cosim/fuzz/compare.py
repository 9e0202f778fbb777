"""Compare what backends did with a scenario, under what the ISA guarantees
(:func:`compare`; the guarantees are written in :mod:`cosim.fuzz`'s docstring and in
``hw/isa/__init__.py``).

Exact on every backend: DRAM and local memory (less the words timestamp fences write), each
queue's ``TAIL`` and error report (code, opcode, command index, address), ``QUEUE_ERRORS``,
``IRQ_STATUS`` and the interrupt pin, semaphores and ``SEM_LAST``, the retired counters and
``bytes_written``; per engine and queue, the order of the trace entries. Within the rules:
the ``HEAD`` of a stopped queue, ``ERR_*`` (one of the queues' errors), ``bytes_read`` (the
hardware reads ahead of a failing command, :func:`read_ahead_bytes`). Between the RTL and the
performance model more can be compared exactly (:func:`compare_timed`, ``--timed-exact``).

Translated scenarios (``scenario.vm``): the page faults the host handled (queue, code,
opcode, command index, virtual address, action) exactly, and on the model as planted; a
handled fault may be ``ERR_*``; a faulted DMA is traced twice (the fault, then the run
again or the skip). ``bytes_read`` and the TLB counters are left out of the functional
model's comparison (its TLBs see the commands in execution order, the hardware's in bus
order, and it does not model the fetch's walks); between the RTL and the performance model
they stay exact.
"""

from __future__ import annotations

import numpy as np

from cosim.fuzz.execute import Outcome
from cosim.fuzz.layout import ARENA_BASE
from cosim.fuzz.scenario import Scenario
from hw.isa import COMMAND_BYTES, ENGINE_NAMES, OPCODE_ENGINE, error_stage

__all__ = ["compare", "compare_timed", "expected_traces", "failure_kind", "read_ahead_bytes",
           "plural"]

_MAX_RANGES = 4
_ENGINE_OF = {op.value: engine for op, engine in OPCODE_ENGINE.items()}


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """``n`` and ``noun``, plural (``nouns``, default ``noun + "s"``) unless ``n`` is 1:
    ``1 stream``, ``3 streams``, ``0 hangs`` (for the fuzzer's messages)."""
    return f"{n} {noun}" if n == 1 else f"{n} {nouns or noun + 's'}"


def failure_kind(error: list) -> str:
    """:func:`hw.isa.error_stage` of a queue error ``[code, opcode, index, addr]``:
    ``"fetch"``, ``"fence"`` or ``"engine"``."""
    return error_stage(error[0], error[1])


def _head_ok(error: list | None, head: int, tail: int, ring: int, model: bool) -> bool:
    """``HEAD`` after the stream: at ``TAIL`` for a queue without an error; for a stopped
    queue, on the failing command (fetch error), after it (fence), or one or two after it (an
    engine error: the hardware may have fetched the following BARRIER before the stop; the
    model, which does not fetch ahead, one after it)."""
    if error is None:
        return head == tail
    i = error[2] % ring
    kind = failure_kind(error)
    allowed = {i} if kind == "fetch" else {(i + 1) % ring} if kind == "fence" or model \
        else {(i + 1) % ring, (i + 2) % ring}
    return head in allowed


def _ranges(mask: np.ndarray) -> list[str]:
    idx = np.flatnonzero(np.diff(np.concatenate(([0], mask.view(np.int8), [0]))))
    pairs = list(zip(idx[::2], idx[1::2], strict=True))
    out = [f"[{ARENA_BASE + a:#x}, {ARENA_BASE + b:#x})" for a, b in pairs[:_MAX_RANGES]]
    return out + ([f"... {len(pairs) - _MAX_RANGES} more"] if len(pairs) > _MAX_RANGES else [])


def _dram(scenario: Scenario, a: Outcome, b: Outcome, timed: bool) -> list[str]:
    x, y = np.frombuffer(a.dram, np.uint8), np.frombuffer(b.dram, np.uint8)
    if x.shape != y.shape:
        return [f"dram: {len(a.dram)} vs {len(b.dram)} bytes"]
    diff = x != y
    if not timed:
        for c in scenario.commands:
            if c.timestamp_addr is not None:
                diff[c.timestamp_addr - ARENA_BASE:c.timestamp_addr - ARENA_BASE + 4] = False
    if diff.any():
        return [f"dram/local memory: {plural(int(diff.sum()), 'byte')} differing at "
                f"{', '.join(_ranges(diff))}"]
    return []


def expected_traces(scenario: Scenario, errors: dict, handled: list = ()) -> list[dict]:
    """Per engine, per queue: the command indices the engine retires, in order (every
    engine command up to and including a failing one; nothing of a queue after a fetch or
    fence error; a DMA whose page fault was ``handled`` twice)."""
    out = [{} for _ in ENGINE_NAMES]
    twice = {(f[0], f[3]) for f in handled if _ENGINE_OF.get(f[2]) in ("load", "store")}
    for s in scenario.queues:
        err = errors.get(s.queue)
        stop = None if err is None else err[2] + (failure_kind(err) == "engine")
        for i, c in enumerate(scenario.queue_commands(s.queue)):
            if stop is not None and i >= stop:
                break
            engine = _ENGINE_OF.get(c.opcode)
            if engine is not None and engine != "processor":
                n = 2 if (s.queue, i) in twice else 1
                out[ENGINE_NAMES.index(engine)].setdefault(s.queue, []).extend([i] * n)
    return out


def _traces(scenario: Scenario, o: Outcome, name: str, depth: int) -> list[str]:
    errors = {q: v["error"] for q, v in o.queues.items()}
    out = []
    for e, (want, got) in enumerate(zip(expected_traces(scenario, errors, o.vm_faults),
                                        o.traces, strict=True)):
        total = sum(len(v) for v in want.values())
        if len(got) != min(total, depth) or o.trace_overflow[e] != (total > depth):
            entries = plural(len(got), "entry", "entries")
            out.append(f"{name}: trace of {ENGINE_NAMES[e]}: {entries}, overflow "
                       f"{o.trace_overflow[e]}; expected {total} retired (depth {depth})")
            continue
        for q in {*want, *(t[0] for t in got)}:
            mine = [t[1] for t in got if t[0] == q]
            if mine != want.get(q, [])[:len(mine)] or (total <= depth
                                                        and mine != want.get(q, [])):
                out.append(f"{name}: trace of {ENGINE_NAMES[e]}, queue {q}: {mine[:8]} vs "
                           f"expected {want.get(q, [])[:8]}")
    return out


def _queues(scenario: Scenario, a: Outcome, b: Outcome, b_name: str) -> list[str]:
    out = []
    for s in scenario.queues:
        qa, qb = a.queues[s.queue], b.queues[s.queue]
        for key in ("error", "tail"):
            if qa[key] != qb[key]:
                out.append(f"queue {s.queue}: {key} {qa[key]} (model) vs {qb[key]} ({b_name})")
        for o, name, model in ((a, "model", True), (b, b_name, b_name == "model")):
            q = o.queues[s.queue]
            if not _head_ok(q["error"], q["head"], q["tail"], s.ring_size, model):
                out.append(f"queue {s.queue}: HEAD {q['head']} on {name} breaks the rules "
                           f"(error {q['error']}, TAIL {q['tail']})")
    return out


def _first_error(o: Outcome, name: str) -> list[str]:
    errs = [[e[0], q, e[1], e[2], e[3]] for q, v in o.queues.items() if (e := v["error"])]
    errs += [[f[1], f[0], f[2], f[3], f[4]] for f in o.vm_faults]   # handled page faults
    if (o.first_error is None) != (not errs) or (errs and o.first_error not in errs):
        return [f"{name}: ERR_* {o.first_error} is not one of the queues' errors {errs}"]
    return []


def read_ahead_bytes(fetch_depth: int) -> int:
    """Most bytes the hardware may read from a stopped queue's ring beyond what the
    functional model (which does not fetch ahead) counts: the command after the failing one
    (a BARRIER, held in the stage), a prefetch buffer behind it (``fetch_depth`` commands),
    and a failed burst of several commands read again one command at a time (``fetch_depth``
    more)."""
    return COMMAND_BYTES * (2 * fetch_depth + 1)


def _counters(a: Outcome, b: Outcome, b_name: str, fetch_depth: int,
              translated: bool = False) -> list[str]:
    out = []
    failures = sum(1 for v in a.queues.values() if v["error"])
    for k, va in a.counters.items():
        vb = b.counters[k]
        if translated and (k == "bytes_read" or k.startswith("tlb.")):
            continue
        if k == "bytes_read":
            extra = vb - va
            if not (0 <= extra <= read_ahead_bytes(fetch_depth) * failures
                    and extra % COMMAND_BYTES == 0):
                out.append(f"counter bytes_read: {va} (model) vs {vb} ({b_name})")
        elif va != vb:
            out.append(f"counter {k}: {va} (model) vs {vb} ({b_name})")
    return out


def _prediction(scenario: Scenario, a: Outcome) -> list[str]:
    """The model against what the generator meant: the failing command and its code, and
    the planted page faults (:mod:`cosim.fuzz.generate`), each handled once."""
    out = []
    if scenario.vm is not None:
        want = sorted([int(q), f["code"], f["opcode"], f["index"], f["addr"], f["action"]]
                      for q, f in scenario.vm["faults"].items())
        if a.vm_faults != want:
            out.append(f"page faults: the model handled {a.vm_faults}, the generator planted "
                       f"{want}")
    for s in scenario.queues:
        want = next(([i, c.expect] for i, c in enumerate(scenario.queue_commands(s.queue))
                     if c.expect), None)
        err = a.queues[s.queue]["error"]
        got = None if err is None else [err[2], err[0]]
        if got != want:
            out.append(f"queue {s.queue}: the model reports [index, code] {got}, the "
                       f"generator meant {want}")
    return out


def compare(scenario: Scenario, model: Outcome, other: Outcome | None, name: str) -> list[str]:
    """Mismatches between the model's outcome and ``other``'s (``name``: ``"rtl"`` or
    ``"perf"``), or, when ``other`` is None, of the model alone against the scenario (the
    generator's predictions, ``ERR_*``, the traces)."""
    depth = scenario.npu_config.trace_depth
    if other is None:
        return _prediction(scenario, model) + _first_error(model, "model") \
            + _traces(scenario, model, "model", depth)
    out = _dram(scenario, model, other, timed=False) + _queues(scenario, model, other, name)
    out += _first_error(other, name) + _traces(scenario, other, name, depth)
    out += _counters(model, other, name, scenario.npu_config.fetch_depth,
                     translated=scenario.vm is not None)
    for key in ("queue_errors", "irq_status", "irq_pin", "sems", "sem_last", "vm_faults"):
        if getattr(model, key) != getattr(other, key):
            out.append(f"{key}: {getattr(model, key)} (model) vs {getattr(other, key)} ({name})")
    return out


def compare_timed(scenario: Scenario, rtl: Outcome, perf: Outcome) -> list[str]:
    """Between the RTL and the performance model, beyond :func:`compare`: ``HEAD``,
    ``Q_FETCHED``, ``ERR_*``, every untimed counter exactly, and each trace entry's duration
    (``end - start``: both models time the engines from :mod:`hw.isa.timing`). Absolute
    cycles and fence timestamps are left out: they include the host's accesses, which the
    performance model times within its validation's tolerance, not exactly."""
    out = []
    a, b = rtl.to_dict(), perf.to_dict()
    for key in ("queues", "first_error", "counters", "trace_overflow"):
        if a[key] != b[key]:
            out.append(f"timed: {key}: {str(a[key])[:200]} (rtl) vs {str(b[key])[:200]} (perf)")
    for e, (x, y) in enumerate(zip(rtl.traces, perf.traces, strict=True)):
        dx = [(t[0], t[1], t[3] - t[2]) for t in x]
        dy = [(t[0], t[1], t[3] - t[2]) for t in y]
        if dx != dy:
            n = min(len(dx), len(dy))
            bad = next((i for i in range(n) if dx[i] != dy[i]), n)
            out.append(f"timed: trace of {ENGINE_NAMES[e]}: entry {bad}: "
                       f"{dx[bad] if bad < len(dx) else None} (rtl) vs "
                       f"{dy[bad] if bad < len(dy) else None} (perf), as (queue, index, "
                       "busy cycles)")
    return out
