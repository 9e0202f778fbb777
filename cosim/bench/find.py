"""``npu sweep --find``: requirement questions answered by bisection over one parameter.

Syntax: ``PARAM=LO..HI:GOAL`` (:func:`parse_question`), asked for every base configuration,
workload and (for a hardware parameter) DRAM timing of the sweep, on the performance model.

``PARAM``
    A DRAM timing parameter -- ``bw`` (bytes/cycle, continuous), ``latency`` (read latency,
    cycles), ``wlatency`` (write-response latency, cycles) -- varied on the sweep's DRAM timing;
    or a hardware parameter -- ``spad_rows``, ``acc_rows`` (powers of two), ``dma_outstanding``,
    ``n_queues``, ``cmd_fifo_depth`` (integers), ``axi_data_bits`` (32, 64, 128, 256) -- varied
    on the base configuration.
``GOAL``
    ``slowdown<=X%`` (or ``slowdown=X%``): cycles at most ``(1 + X/100)`` times the
    reference's, where the reference is the same point with the parameter at its ideal value
    (``bw`` unlimited, ``latency`` 3, ``wlatency`` 1: "ideal memory") for a DRAM parameter, or
    at ``HI`` for a hardware parameter; ``compute-bound``: the honest roofline of the run
    (:func:`cosim.bench.sweep_tasks.roofline_figures`: its actual DRAM traffic against the
    memory roof of its DRAM timing and bursts) puts it right of the ridge; ``util>=X``:
    utilization at least ``X`` (a fraction, or ``X%``).

Which end is wanted follows from the parameter: for ``latency`` and ``wlatency`` (more is
worse) the answer is the *largest* value in ``[LO, HI]`` that meets the goal; for every other
parameter (more is better) the *smallest*. The goal is assumed monotone in the parameter
(bisection); both ends are evaluated first, so a goal met everywhere or nowhere in the range
says so instead of returning a bound. Continuous ``bw`` stops when the bracket is within the
relative tolerance ``tol`` (default 2%), integers when it is within ``tol`` or 1, powers of two
and lists when the bracket is two neighbours. Every evaluation is a cached point of the sweep
cache, so asking again (or with another goal) reuses runs.

Examples: ``bw=0.25..64:slowdown<=5%`` (the DRAM bandwidth at which the workload is within 5% of
its ideal-memory cycles), ``latency=3..5000:slowdown<=5%`` (the read latency at which it falls
5% behind), ``spad_rows=64..65536:compute-bound`` (the smallest scratchpad that keeps it
compute-bound).
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass

from hw.config import NPUConfig
from sw.dram import MIN_READ_LATENCY, MIN_WRITE_LATENCY, DramTiming

__all__ = ["Question", "FindError", "parse_question", "search", "DRAM_PARAMS",
           "HARDWARE_PARAMS", "run_find", "format_answers", "FIND_HELP"]

#: DRAM parameters: name -> (DramTiming field, ideal value, more is better).
DRAM_PARAMS = {"bw": ("bytes_per_cycle", None, True),
               "latency": ("read_latency", MIN_READ_LATENCY, False),
               "wlatency": ("write_latency", MIN_WRITE_LATENCY, False)}
#: Hardware parameters: name -> domain kind (``pow2``, ``int`` or a tuple of values).
HARDWARE_PARAMS = {"spad_rows": "pow2", "acc_rows": "pow2", "dma_outstanding": "int",
                   "n_queues": "int", "cmd_fifo_depth": "int",
                   "axi_data_bits": (32, 64, 128, 256)}

FIND_HELP = ("PARAM=LO..HI:GOAL, e.g. bw=0.25..64:slowdown<=5%% (smallest DRAM bandwidth, "
             "bytes/cycle, within 5%% of ideal-memory cycles), latency=3..5000:slowdown<=5%% "
             "(largest read latency within 5%%), spad_rows=64..65536:compute-bound (smallest "
             "scratchpad that keeps it compute-bound); PARAM: bw latency wlatency (DRAM, on "
             "each --dram) or spad_rows acc_rows dma_outstanding n_queues cmd_fifo_depth "
             "axi_data_bits (hardware, on each --base); GOAL: slowdown<=X%% | compute-bound | "
             "util>=X; asked for every base configuration and workload; repeatable")

_Q = re.compile(r"(?P<param>\w+)=(?P<lo>[0-9.]+)\.\.(?P<hi>[0-9.]+):(?P<goal>.+)")
_GOAL = re.compile(r"(slowdown<?=(?P<slow>[0-9.]+)%|(?P<cb>compute-bound)"
                   r"|util>=(?P<util>[0-9.]+)(?P<pct>%?))")


class FindError(ValueError):
    """A ``--find`` question that does not parse or whose range is invalid."""


@dataclass(frozen=True)
class Question:
    """A parsed ``--find`` question (see the module docstring)."""
    param: str
    lo: float
    hi: float
    goal: str                     # "slowdown", "compute-bound" or "util"
    threshold: float | None       # slowdown fraction or utilization
    text: str
    tol: float = 0.02

    @property
    def is_dram(self) -> bool:
        return self.param in DRAM_PARAMS

    @property
    def more_is_better(self) -> bool:
        return DRAM_PARAMS[self.param][2] if self.is_dram else True

    def domain(self) -> list | None:
        """The ordered candidate values of a discrete parameter (None for ``bw``)."""
        if self.param == "bw":
            return None
        kind = HARDWARE_PARAMS.get(self.param, "int")
        lo, hi = int(self.lo), int(self.hi)
        if kind == "pow2":
            return [1 << e for e in range(lo.bit_length() - 1, hi.bit_length())
                    if lo <= 1 << e <= hi]
        if isinstance(kind, tuple):
            return [v for v in kind if lo <= v <= hi]
        return list(range(lo, hi + 1))

    def ok(self, res: dict, ref: dict | None) -> bool:
        """Whether the model result ``res`` meets the goal (errors never do)."""
        if res.get("status") != "ok":
            return False
        if self.goal == "slowdown":
            return res["cycles"] <= (1 + self.threshold) * ref["cycles"]
        if self.goal == "compute-bound":
            return bool(res["roofline"]["compute_bound"])
        return res["utilization"] is not None and res["utilization"] >= self.threshold


def parse_question(text: str, *, tol: float = 0.02) -> Question:
    """Read ``PARAM=LO..HI:GOAL`` (module docstring).

    Raises
    ------
    FindError
        On bad syntax, an unknown parameter or goal, ``LO >= HI``, a range outside the
        parameter's, or a range with no candidate (e.g. no power of two in it).
    """
    m = _Q.fullmatch(text.replace(" ", ""))
    if not m:
        raise FindError(f"--find {text!r}: expected PARAM=LO..HI:GOAL, e.g. "
                        "bw=0.25..64:slowdown<=5%")
    param = m["param"]
    if param not in DRAM_PARAMS and param not in HARDWARE_PARAMS:
        raise FindError(f"--find {text!r}: unknown parameter {param!r}; parameters: "
                        f"{', '.join([*DRAM_PARAMS, *HARDWARE_PARAMS])}")
    try:
        lo, hi = float(m["lo"]), float(m["hi"])
    except ValueError:
        raise FindError(f"--find {text!r}: LO and HI must be numbers") from None
    if not 0 < lo < hi:
        raise FindError(f"--find {text!r}: need 0 < LO < HI")
    g = _GOAL.fullmatch(m["goal"])
    if not g:
        raise FindError(f"--find {text!r}: unknown goal {m['goal']!r}; goals: slowdown<=X%, "
                        "compute-bound, util>=X")
    if g["slow"] is not None:
        goal, thr = "slowdown", float(g["slow"]) / 100
    elif g["cb"]:
        goal, thr = "compute-bound", None
    else:
        goal, thr = "util", float(g["util"]) / (100 if g["pct"] else 1)
        if not 0 < thr <= 1:
            raise FindError(f"--find {text!r}: utilization goal {m['goal']!r} must lie in "
                            "(0, 1] or (0%, 100%]")
    if param != "bw" and (lo != int(lo) or hi != int(hi)):
        raise FindError(f"--find {text!r}: {param} takes integers")
    q = Question(param, lo, hi, goal, thr, text, tol)
    _check_range(q)
    return q


def _check_range(q: Question) -> None:
    dom = q.domain()
    if dom == []:
        raise FindError(f"--find {q.text!r}: no {q.param} value in {q.lo:g}..{q.hi:g}")
    for v in (q.lo, q.hi) if q.is_dram else (dom[0], dom[-1]):
        try:
            if q.is_dram:
                DramTiming(**{DRAM_PARAMS[q.param][0]: v if q.param == "bw" else int(v)})
            else:
                NPUConfig(**{q.param: v})
        except ValueError as e:
            # said as the question says it (latency, not DramTiming's read_latency; spad_rows,
            # not NPUConfig.spad_rows): the value, then why (NPUConfig's "field=value: why")
            why = getattr(e, "why", None) or str(e).partition(": ")[2] or str(e)
            shown = f"{v:g}" if q.param == "bw" else int(v)
            raise FindError(f"--find {q.text!r}: {q.param}={shown}: {why}") from None


def _round_bw(v: float) -> float:
    """3 significant digits (DRAM bandwidth candidates: stable cache keys, exact fractions)."""
    return float(f"{v:.3g}")


def search(q: Question):
    """The bisection as a generator: it yields the values to evaluate next (a list), is sent
    ``{value: ok}`` for them, and returns ``{"answer", "bracket", "status"}``: ``answer`` is
    the best-end value meeting the goal closest to failing (see the module docstring), the
    bracket ``[meets, fails]``; status ``"found"``, ``"everywhere"`` (met at the worst end
    too) or ``"nowhere"`` (not met even at the best end)."""
    if q.param == "bw":
        worst, best = q.lo, q.hi
    else:
        dom = q.domain()
        if not q.more_is_better:
            dom = dom[::-1]
        worst, best = dom[0], dom[-1]
    oks = yield [worst, best]
    if not oks[best]:
        return {"status": "nowhere", "answer": None, "bracket": [None, best]}
    if oks[worst]:
        return {"status": "everywhere", "answer": worst, "bracket": [worst, None]}
    fail, meet = worst, best
    if q.param == "bw":
        while meet / fail > 1 + q.tol:
            mid = _round_bw(math.sqrt(fail * meet))
            if mid in (fail, meet):
                break
            oks = yield [mid]
            fail, meet = (fail, mid) if oks[mid] else (mid, meet)
    else:
        i, j = 0, len(dom) - 1          # dom[i] fails, dom[j] meets
        while j - i > 1 and abs(dom[j] - dom[i]) > max(1, q.tol * min(dom[i], dom[j])):
            k = (i + j) // 2
            oks = yield [dom[k]]
            i, j = (i, k) if oks[dom[k]] else (k, j)
        fail, meet = dom[i], dom[j]
    return {"status": "found", "answer": meet, "bracket": [meet, fail]}


def point_for(q: Question, config: NPUConfig, dram: DramTiming, value) -> tuple:
    """The (configuration, DRAM timing) of the point where ``q``'s parameter is ``value``;
    ``value`` None: the reference (ideal memory, or ``HI`` for hardware)."""
    if q.is_dram:
        fld, ideal, _ = DRAM_PARAMS[q.param]
        v = ideal if value is None else (value if q.param == "bw" else int(value))
        name = f"{dram.name},{q.param}={'ideal' if value is None else f'{value:g}'}"
        return config, dataclasses.replace(dram, name=name, **{fld: v})
    v = q.domain()[-1] if value is None else int(value)
    return dataclasses.replace(config, **{q.param: v}), dram


def run_find(questions: list[Question], configs: list[NPUConfig], drams: list[DramTiming],
             workloads: list, evaluate) -> list[dict]:
    """Answer every question for every base configuration, workload and DRAM timing (one
    DRAM timing for DRAM questions: each of ``drams``), running the bisections side by side:
    each round, ``evaluate(list of (config, dram, workload))`` returns the model results of
    a batch (in parallel, cached). Returns one answer dict per (question, config, dram,
    workload)."""
    jobs = []
    for q in questions:
        for c in configs:
            for d in drams:
                for w in workloads:
                    if not w.unsupported(c):
                        jobs.append({"q": q, "config": c, "dram": d, "workload": w,
                                     "gen": search(q), "evals": [], "ref": None})
    refs = {id(j): point_for(j["q"], j["config"], j["dram"], None) for j in jobs
            if j["q"].goal == "slowdown"}
    batch = list(dict.fromkeys((*refs[id(j)], j["workload"]) for j in jobs if id(j) in refs))
    results = dict(zip(batch, evaluate(batch), strict=True)) if batch else {}
    for j in jobs:
        if id(j) in refs:
            j["ref"] = results[(*refs[id(j)], j["workload"])]
    asks = {id(j): next(j["gen"]) for j in jobs}
    answers = {}
    while asks:
        batch = list(dict.fromkeys(
            (*point_for(j["q"], j["config"], j["dram"], v), j["workload"])
            for j in jobs if id(j) in asks for v in asks[id(j)]))
        results = dict(zip(batch, evaluate(batch), strict=True))
        for j in jobs:
            if id(j) not in asks:
                continue
            oks = {}
            for v in asks[id(j)]:
                res = results[(*point_for(j["q"], j["config"], j["dram"], v), j["workload"])]
                oks[v] = j["q"].ok(res, j["ref"])
                j["evals"].append({"value": v, "cycles": res.get("cycles"), "ok": oks[v],
                                   "utilization": res.get("utilization"),
                                   "error": res.get("error")})
            try:
                asks[id(j)] = j["gen"].send(oks)
            except StopIteration as stop:
                answers[id(j)] = stop.value
                del asks[id(j)]
    return [_answer(j, answers[id(j)]) for j in jobs]


def _answer(j: dict, found: dict) -> dict:
    q, ref = j["q"], j["ref"]
    return {"question": q.text, "param": q.param, "goal": q.goal, "threshold": q.threshold,
            "config": j["config"].spec, "dram": j["dram"].name, "workload": j["workload"].name,
            "reference_cycles": ref.get("cycles") if ref else None, **found,
            "wanted": "largest" if not q.more_is_better else "smallest",
            "evaluations": sorted(j["evals"], key=lambda e: e["value"])}


def format_answers(answers: list[dict]) -> str:
    """One line per answer, then its evaluations."""
    lines = []
    for a in answers:
        unit = {"bw": " B/cycle", "latency": " cycles", "wlatency": " cycles"}.get(a["param"], "")
        head = f"{a['question']} on {a['config']}, DRAM {a['dram']}, {a['workload']}: "
        if a["status"] == "found":
            meet, fail = a["bracket"]
            head += (f"{a['wanted']} {a['param']} = {meet:g}{unit} "
                     f"({fail:g} does not meet it)")
        elif a["status"] == "everywhere":
            head += f"met over the whole range (even at {a['answer']:g}{unit})"
        else:
            head += f"not met in the range (not even at {a['bracket'][1]:g}{unit})"
        if a["reference_cycles"]:
            head += f"; reference {a['reference_cycles']} cycles"
        lines.append(head)
        for e in a["evaluations"]:
            ratio = (f" ({e['cycles'] / a['reference_cycles']:.3f}x)"
                     if a["reference_cycles"] and e["cycles"] else "")
            what = f"{e['cycles']} cycles{ratio}" if e["cycles"] else f"error: {e['error']}"
            lines.append(f"    {a['param']}={e['value']:g}: {what} "
                         f"{'meets' if e['ok'] else 'fails'}")
    return "\n".join(lines)
