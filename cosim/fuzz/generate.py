"""The seeded generator of fuzz scenarios (:func:`generate`).

A scenario runs 1..``n_queues`` queues. Each command is drawn from every opcode (DMA load and
store, MATMUL, REQUANT, SOFTMAX, FENCE with values and timestamps and interrupts, NOP, WAIT,
SIGNAL, BARRIER), with semaphore waits and signals across queues. Some queues get a window, a
small ring that the stream wraps several times, a semaphore that starts near ``2**32``; some
scenarios a bus fault. A share of commands is invalid, of every error kind of
:class:`hw.isa.ErrorCode`.

The streams are built so that what the ISA guarantees decides the result (``docs`` in
:mod:`cosim.fuzz`): every pair of commands that touch the same bytes or rows (one of them
writing) is ordered by *happens-before* -- the engine FIFO of one queue, a processor command
before everything after it in its queue, a BARRIER/FENCE after everything before it, a
semaphore wait after the signals it counts -- where each semaphore is signalled by one
chain of ordered commands (one queue and one engine). The generator tracks happens-before as
bit sets, and orders a racing command with a BARRIER (same queue), a ``flags.wait`` on an own
signal, or a WAIT on the producer's signal (another queue); a command it cannot order is
dropped. An invalid command is bracketed by BARRIERs and ends its queue's stream: everything
before it retired, nothing after it is fetched. Waits only count signals that are certain to
happen (earlier in the generation order, of commands that succeed), so no stream deadlocks.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from cosim.fuzz.commands import CommandMaker
from cosim.fuzz.layout import MAX_RING, Layout
from cosim.fuzz.scenario import FuzzCommand, QueueSetup, Scenario
from hw.config import NPUConfig
from hw.isa import COMMAND_BYTES, OPCODE_ENGINE, ErrorCode, IrqBit, Opcode
from sw.model.faults import BusFault

__all__ = ["generate", "GeneratorSettings"]

E = ErrorCode
_WORD = 1 << 32


@dataclass(frozen=True)
class GeneratorSettings:
    """Knobs of :func:`generate` (probabilities per command unless said otherwise)."""
    max_commands: int = 48          #: per queue
    p_bad_queue: float = 0.35       #: a queue gets one invalid command
    p_fault: float = 0.25           #: per scenario: a bus fault (data or fetch)
    p_window: float = 0.3           #: per queue
    p_signal: float = 0.3
    p_wait: float = 0.15
    p_handoff: float = 0.15         #: a store into a shared slot, or a load of a filled one


@dataclass
class _Cmd:
    queue: int
    fields: dict
    engine: str
    kind: str
    foot: list = field(default_factory=list)   # (space, lo, hi, write)
    expect: int = 0
    signal: tuple | None = None                # (sem, count after it)
    ts_addr: int | None = None


class _Gen:
    """State of one scenario's generation."""

    def __init__(self, config: NPUConfig, seed: int, settings: GeneratorSettings) -> None:
        self.cfg = config
        self.lay = Layout(config)
        self.lay.check()
        self.rng = random.Random(seed)
        self.s = settings
        self.cmds: list[_Cmd] = []
        self.anc: list[int] = []                    # happens-before ancestors, bit sets
        self.by_queue: dict[int, list[int]] = {}
        self.last_engine: dict[tuple[int, str], int] = {}
        self.last_proc: dict[int, int] = {}
        self.chain_sem: dict[tuple[int, str], int] = {}
        self.free_sems = list(range(config.n_sems))
        self.rng.shuffle(self.free_sems)
        self.signallers: dict[int, list[int]] = {}  # sem -> command ids, in chain order
        self.sem_init: dict[int, int] = {}
        self.slots: list[tuple[int, int, int]] = []  # filled shared slots: (lo, hi, producer)
        self.next_slot = self.lay.shared[0]
        self.dead: set[int] = set()
        self.fault: BusFault | None = None
        self.fault_queue: int | None = None

    # -- happens-before -----------------------------------------------------------------

    def _preds(self, q: int, engine: str, fields: dict, valid: bool = True) -> int:
        """Ancestors a command would have if appended to queue ``q`` now (an invalid one
        never waits)."""
        anc = 0
        preds = []
        if engine != "processor" and (q, engine) in self.last_engine:
            preds.append(self.last_engine[(q, engine)])
        if q in self.last_proc:
            preds.append(self.last_proc[q])
        op = fields["header"]["opcode"]
        if op in (Opcode.BARRIER, Opcode.FENCE, Opcode.TLB_INVALIDATE):
            preds.extend(self.by_queue.get(q, []))
        w = fields["header"]
        if valid and (w.get("flags", {}).get("wait") or op == Opcode.WAIT):
            preds.append(self._signaller_of_wait(w["wait_sem"], w["wait_value"]))
        for p in preds:
            anc |= self.anc[p] | (1 << p)
        return anc

    def _signaller_of_wait(self, sem: int, target: int) -> int:
        count = (target - self.sem_init.get(sem, 0)) % _WORD
        return self.signallers[sem][count - 1]

    def _races(self, anc: int, foot: list, q: int) -> list[int]:
        """Earlier commands that conflict with footprint ``foot`` and are not ordered."""
        out = []
        for i, c in enumerate(self.cmds):
            if anc >> i & 1 or not c.foot:
                continue
            if any(a[0] == b[0] and a[1] < b[2] and b[1] < a[2] and (a[3] or b[3])
                   for a in foot for b in c.foot):
                out.append(i)
        return out

    # -- appending ------------------------------------------------------------------------

    def _append(self, c: _Cmd) -> int:
        i = len(self.cmds)
        anc = self._preds(c.queue, c.engine, c.fields, c.expect == 0)
        self.cmds.append(c)
        self.anc.append(anc)
        self.by_queue.setdefault(c.queue, []).append(i)
        if c.engine == "processor":
            self.last_proc[c.queue] = i
        else:
            self.last_engine[(c.queue, c.engine)] = i
        if c.signal is not None and c.expect == 0:
            self.signallers.setdefault(c.signal[0], []).append(i)
        return i

    def _proc(self, q: int, op: Opcode, **header) -> None:
        self._append(_Cmd(q, {"header": {"opcode": op, **header}}, "processor", op.name))

    def barrier(self, q: int) -> None:
        self._proc(q, Opcode.BARRIER)

    def _sem_for(self, q: int, engine: str) -> int | None:
        key = (q, engine)
        if key not in self.chain_sem:
            if not self.free_sems:
                return None
            s = self.free_sems.pop()
            self.chain_sem[key] = s
            r = self.rng.random()
            self.sem_init[s] = 0 if r < 0.5 else self.rng.randint(1, 99) if r < 0.75 \
                else _WORD - self.rng.randint(1, 7)
        return self.chain_sem[key]

    def _count(self, s: int) -> int:
        return len(self.signallers.get(s, []))

    def _target(self, s: int, count: int) -> int:
        return (self.sem_init.get(s, 0) + count) % _WORD

    def add(self, q: int, fields: dict, foot: list, signal: bool, wait: bool,
            handoff_from: int | None = None) -> bool:
        """Append a valid command (ordering it against the commands it races with); returns
        whether it was added."""
        op = fields["header"]["opcode"]
        engine = OPCODE_ENGINE[op]
        fields["header"].setdefault("flags", {})
        if handoff_from is not None:          # a WAIT on the producer's signal first
            s, count = self.cmds[handoff_from].signal
            self._proc(q, Opcode.WAIT, wait_sem=s, wait_value=self._target(s, count))
        elif wait:
            self._random_wait(fields)
        anc = self._preds(q, engine, fields)
        racing = self._races(anc, foot, q)
        if racing:
            if any(self.cmds[i].queue != q for i in racing):
                return False
            last = racing[-1]
            sig = self.cmds[last].signal
            if sig is not None and not fields["header"]["flags"].get("wait") \
                    and self.rng.random() < 0.5:
                fields["header"]["flags"]["wait"] = 1
                fields["header"]["wait_sem"] = sig[0]
                fields["header"]["wait_value"] = self._target(sig[0], sig[1])
            else:
                self.barrier(q)
            anc = self._preds(q, engine, fields)
            if self._races(anc, foot, q):
                return False
        c = _Cmd(q, fields, engine, op.name, foot)
        if signal or op == Opcode.SIGNAL:
            s = self._sem_for(q, engine)
            if s is None and op == Opcode.SIGNAL:
                return False
            if s is not None:
                fields["header"]["flags"]["signal"] = 1
                fields["header"]["signal_sem"] = s
                c.signal = (s, self._count(s) + 1)
        self._append(c)
        return True

    def _random_wait(self, fields: dict) -> None:
        sems = [s for s, lst in self.signallers.items() if lst]
        if not sems:
            return
        s = self.rng.choice(sems)
        count = self.rng.randint(1, self._count(s))
        h = fields["header"]
        h["flags"]["wait"] = 1
        h["wait_sem"], h["wait_value"] = s, self._target(s, count)

    def add_bad(self, q: int, fields: dict, code: ErrorCode, foot: list | None = None,
                kind: str | None = None) -> None:
        """Append an invalid command, bracketed by BARRIERs; the queue's stream ends."""
        ids = self.by_queue.get(q, [])
        if not ids or self.cmds[ids[-1]].kind != "BARRIER":
            self.barrier(q)
        op = fields["header"]["opcode"]
        engine = OPCODE_ENGINE.get(op, "processor") if isinstance(op, Opcode) else "processor"
        name = kind or (op.name if isinstance(op, Opcode) else f"opcode {op:#x}")
        self._append(_Cmd(q, fields, engine, name, foot or [], expect=code.value))
        self.barrier(q)
        self.dead.add(q)

    def position(self, q: int) -> int:
        """Index of the next command of queue ``q``."""
        return len(self.by_queue.get(q, []))

    def scenario(self, seed: int, queues: list[QueueSetup], irq_enable: int) -> Scenario:
        cmds = [FuzzCommand(c.queue, c.fields, c.kind, c.expect, c.ts_addr) for c in self.cmds]
        fault = None
        if self.fault is not None:
            f = self.fault
            fault = {"mode": f.mode, "reads": f.reads, "writes": f.writes, "resp": f.resp,
                     "lo": f.lo, "hi": f.hi, "nth": f.nth}
        return Scenario(self.cfg.to_dict(), seed, queues, cmds,
                        {s: v for s, v in self.sem_init.items()}, irq_enable, fault)


def generate(config: NPUConfig, seed: int,
             settings: GeneratorSettings = GeneratorSettings()) -> Scenario:
    """A reproducible scenario for ``config`` from ``seed`` (see the module docstring).

    Raises
    ------
    ValueError
        If the fuzz arena (:mod:`cosim.fuzz.layout`) does not fit ``config``.
    """
    g = _Gen(config, seed, settings)
    rng = g.rng
    n = rng.randint(1, config.n_queues)
    qids = sorted(rng.sample(range(config.n_queues), n))
    setups = []
    maker = CommandMaker(g)
    for q in qids:
        size = rng.choice([4, 8, 16, 32, MAX_RING])
        win = rng.random() < settings.p_window
        lo = g.lay.region(q)
        setups.append(QueueSetup(q, lo, size, lo if win else 0,
                                 g.lay.private(q)[1] if win else 0))
        maker.windowed[q] = win
    maker.plan_faults(qids, {s.queue: s.ring_size for s in setups})
    budget = {q: rng.randint(1, settings.max_commands) for q in qids}
    bad_at = {q: rng.randrange(budget[q]) for q in qids
              if rng.random() < settings.p_bad_queue}
    live = list(qids)
    while live:
        q = rng.choice(live)
        if q in g.dead or g.position(q) >= budget[q]:
            live.remove(q)
            continue
        if q in bad_at and g.position(q) >= bad_at[q]:
            maker.bad(q)
            continue
        maker.valid(q)
    irq = rng.choice([0, IrqBit.FENCE, IrqBit.ERROR, IrqBit.FENCE | IrqBit.ERROR])
    return g.scenario(seed, setups, irq)


def ring_slot(setup: QueueSetup, position: int) -> int:
    """DRAM address of the ring slot command ``position`` of a queue is fetched from."""
    return setup.ring_base + (position % setup.ring_size) * COMMAND_BYTES

