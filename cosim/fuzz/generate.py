"""The seeded generator of fuzz scenarios (:func:`generate`).

A scenario runs 1..``n_queues`` queues. Each command is drawn from every opcode (DMA load and
store, MATMUL, REQUANT, SOFTMAX, FENCE with values and timestamps and interrupts, NOP, WAIT,
SIGNAL, BARRIER), with semaphore waits and signals across queues. Some queues get a window, a
small ring that the stream wraps several times, a semaphore that starts near ``2**32``; some
scenarios a bus fault. A share of commands is invalid, of every error kind of
:class:`hw.isa.ErrorCode`.

Translated mode (``p_vm > 0``, :mod:`hw.isa.vm`): some queues run in a context of their own
(an address-space id, page tables in the VM area of :mod:`cosim.fuzz.layout`) that maps the
whole arena at ``PA + delta`` for a random page-aligned ``delta`` per queue (64 KiB-aligned
runs sometimes carry the contiguous hint), so the queues' DMA, rings and fences use
different virtual addresses for the same bytes (the shared slots included). Such a queue may
get one planted page fault: its ring page not mapped (the first fetch faults), or the one
command that touches its fault page -- a load, a store or a fence -- finds the page not
mapped or without the permission. The host resumes the command after mapping the page, or
skips it (a permission fault is always skipped: the TLB may hold the entry without the
permission); which one is drawn here. Scenarios with a translated queue have no bus fault
(not modelled on translated DMA), and translated queues no window.

Status: the functional and performance models agree on translated streams
(``tests/cosim/test_fuzz_models.py``, ``npu fuzz --backend perf --vm``), and on the RTL
``npu fuzz --vm --streams 100 --no-shrink --timed-exact`` (8x8, ideal) finds no mismatch
and no timing difference (README, Known limits); the RTL fuzz test
(``tests/cosim/test_fuzz.py``) runs physical streams, and replays a translated reproducer.

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
from cosim.fuzz.layout import ARENA_BASE, MAX_RING, Layout
from cosim.fuzz.scenario import FuzzCommand, QueueSetup, Scenario
from hw.config import NPUConfig
from hw.isa import (
    COMMAND_BYTES,
    CONTIG_PAGES,
    OPCODE_ENGINE,
    PT_ENTRIES,
    PTE_BYTES,
    VM_PAGE_BYTES,
    VM_PAGE_SHIFT,
    VPN_BITS,
    ErrorCode,
    IrqBit,
    Opcode,
    Pte,
    VmWord,
    pack_fields,
)
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
    p_vm: float = 0.0               #: per queue: it runs in a context (translated mode)
    p_vm_fault: float = 0.7         #: per translated queue: a planted page fault


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

    def scenario(self, seed: int, queues: list[QueueSetup], irq_enable: int,
                 vm: dict | None = None) -> Scenario:
        deltas = {} if vm is None else {int(q): v["delta"] for q, v in vm["queues"].items()}
        cmds = [FuzzCommand(c.queue, _virtual(c.fields, deltas.get(c.queue)), c.kind, c.expect,
                            c.ts_addr) for c in self.cmds]
        fault = None
        if self.fault is not None:
            f = self.fault
            fault = {"mode": f.mode, "reads": f.reads, "writes": f.writes, "resp": f.resp,
                     "lo": f.lo, "hi": f.hi, "nth": f.nth}
        return Scenario(self.cfg.to_dict(), seed, queues, cmds,
                        {s: v for s, v in self.sem_init.items()}, irq_enable, fault, vm=vm)


def _virtual(fields: dict, delta: int | None) -> dict:
    """A command of a translated queue: its DMA and fence addresses moved by ``delta``."""
    if delta is None:
        return fields
    body = fields.get("body", {})
    if "dma" in body:
        fields = {**fields, "body": {"dma": {**body["dma"],
                                             "dram_addr": body["dma"]["dram_addr"] + delta}}}
    elif "fence" in body:
        fields = {**fields, "body": {"fence": {**body["fence"],
                                               "addr": body["fence"]["addr"] + delta}}}
    return fields


_VM_FAULTS = ("ring_not_mapped", "load_not_mapped", "store_not_mapped", "fence_not_mapped",
              "load_permission", "store_permission", "fence_permission")


def _vm_plan(g: _Gen, qids: list[int]) -> dict:
    """Which queues translate, their ``delta``, address-space id and planted fault."""
    rng, lay = g.rng, g.lay
    out = {}
    asids = rng.sample(range(1, 256), len(qids))
    span = lay.end - ARENA_BASE
    for q, asid in zip(qids, asids, strict=True):
        if rng.random() >= g.s.p_vm:
            continue
        unit = CONTIG_PAGES * VM_PAGE_BYTES if rng.random() < 0.5 else VM_PAGE_BYTES
        # the arena's virtual image stays in one 4 MiB level-1 entry pair and below 2**31
        lo = rng.randrange(1 << 20, (1 << 31) - span - (1 << 23), unit)
        delta = (lo - ARENA_BASE) // unit * unit
        fault = rng.choice(_VM_FAULTS) if rng.random() < g.s.p_vm_fault else None
        out[q] = {"delta": delta, "asid": asid, "fault": fault}
    return out


def _vm_tables(g: _Gen, plan: dict, planted: dict, setups: dict) -> dict:
    """The scenario's ``vm`` record: per translated queue its ``Q_VM``, ``delta``, ring
    address and planted fault (with the entry that fixes it), and every page-table word."""
    rng, lay = g.rng, g.lay
    tables: dict[int, int] = {}
    queues, faults = {}, {}
    for q, p in plan.items():
        fault_page, root, l0 = lay.vm_of(q)
        delta = p["delta"]
        kind = p["fault"] if (p["fault"] == "ring_not_mapped" or q in planted) else None
        ring_page = setups[q].ring_base // VM_PAGE_BYTES * VM_PAGE_BYTES
        level0 = {}
        entries = {}
        for pa in range(ARENA_BASE, lay.end, VM_PAGE_BYTES):
            if lay.vm_base <= pa < lay.control_ring and pa != fault_page:
                continue                                   # page tables: not mapped
            read = write = 1
            if pa == fault_page and kind:
                if kind.endswith("not_mapped"):
                    continue
                read, write = (0, 1) if kind.startswith("load") else (1, 0)
            if pa == ring_page and kind == "ring_not_mapped":
                continue
            entries[(pa + delta) >> VM_PAGE_SHIFT] = [pa >> VM_PAGE_SHIFT, read, write]
        for vpn, (ppn, r, w) in entries.items():
            run = range(vpn - vpn % CONTIG_PAGES, vpn - vpn % CONTIG_PAGES + CONTIG_PAGES)
            contig = (ppn - vpn) % CONTIG_PAGES == 0 and all(
                entries.get(v, [None])[0] == ppn + v - vpn and entries[v][1:] == [1, 1]
                for v in run)
            level0[vpn] = pack_fields(Pte, {"valid": 1, "read": r, "write": w, "ppn": ppn,
                                            "contig": int(contig)})
        vpn1s = sorted({v >> VPN_BITS for v in level0} | {
            ((fault_page + delta) >> VM_PAGE_SHIFT) >> VPN_BITS})
        if len(vpn1s) > len(l0):
            raise AssertionError("the arena's virtual image spans more than two level-0 tables")
        table_of = dict(zip(vpn1s, l0, strict=False))
        for vpn1, t in table_of.items():
            tables[root + PTE_BYTES * vpn1] = pack_fields(Pte, {"valid": 1,
                                                               "ppn": t >> VM_PAGE_SHIFT})
        for vpn, word in level0.items():
            tables[table_of[vpn >> VPN_BITS] + PTE_BYTES * (vpn & (PT_ENTRIES - 1))] = word
        queues[q] = {"word": pack_fields(VmWord, {"enable": 1, "asid": p["asid"],
                                                  "root": root >> VM_PAGE_SHIFT}),
                     "delta": delta, "ring": setups[q].ring_base + delta}
        if kind is None:
            continue
        if kind == "ring_not_mapped":
            page, index, opcode, addr = ring_page, 0, 0, setups[q].ring_base + delta
        else:
            f = planted[q]
            page, index, opcode, addr = fault_page, f["index"], f["opcode"], f["pa"] + delta
        vpn = (page + delta) >> VM_PAGE_SHIFT
        fix = [table_of[vpn >> VPN_BITS] + PTE_BYTES * (vpn & (PT_ENTRIES - 1)),
               pack_fields(Pte, {"valid": 1, "read": 1, "write": 1,
                                 "ppn": page >> VM_PAGE_SHIFT})]
        action = "skip" if kind.endswith("permission") or (
            kind != "ring_not_mapped" and rng.random() < 0.4) else "resume"
        code = (ErrorCode.PAGE_PERMISSION if kind.endswith("permission")
                else ErrorCode.PAGE_NOT_MAPPED)
        faults[q] = {"kind": kind, "code": code.value, "opcode": opcode, "index": index,
                     "addr": addr & 0xFFFF_FFFF, "action": action,
                     "fix": fix if action == "resume" else None}
    return {"queues": {str(q): v for q, v in queues.items()},
            "tables": sorted([a, w] for a, w in tables.items()),
            "faults": {str(q): v for q, v in faults.items()}}


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
    vm = _vm_plan(g, qids) if settings.p_vm > 0 and config.tlb_entries else {}
    for q in qids:
        size = rng.choice([4, 8, 16, 32, MAX_RING])
        win = q not in vm and rng.random() < settings.p_window
        lo = g.lay.region(q)
        setups.append(QueueSetup(q, lo, size, lo if win else 0,
                                 g.lay.private(q)[1] if win else 0))
        maker.windowed[q] = win
        maker.translated[q] = q in vm
    if not vm:              # (bus faults are not modelled on translated DMA)
        maker.plan_faults(qids, {s.queue: s.ring_size for s in setups})
    budget = {q: rng.randint(1, settings.max_commands) for q in qids}
    bad_at = {q: rng.randrange(budget[q]) for q in qids
              if rng.random() < settings.p_bad_queue}
    fault_at = {q: rng.randrange(budget[q]) for q, p in vm.items()
                if p["fault"] and p["fault"] != "ring_not_mapped"}
    live = list(qids)
    while live:
        q = rng.choice(live)
        if q in g.dead or g.position(q) >= budget[q]:
            live.remove(q)
            continue
        if q in fault_at and g.position(q) >= fault_at[q]:
            maker.vm_fault(q, vm[q]["fault"])
            del fault_at[q]
            continue
        if q in bad_at and g.position(q) >= bad_at[q]:
            maker.bad(q)
            continue
        maker.valid(q)
    irq = rng.choice([0, IrqBit.FENCE, IrqBit.ERROR, IrqBit.FENCE | IrqBit.ERROR])
    record = _vm_tables(g, vm, maker.vm_planted, {s.queue: s for s in setups}) if vm else None
    return g.scenario(seed, setups, irq, record)


def ring_slot(setup: QueueSetup, position: int) -> int:
    """DRAM address of the ring slot command ``position`` of a queue is fetched from."""
    return setup.ring_base + (position % setup.ring_size) * COMMAND_BYTES

