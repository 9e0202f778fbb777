"""Run a fuzz scenario on any backend through its CSRs and DRAM (:func:`run_scenario`) and
return what the device did (:class:`Outcome`).

The host side is the same on every backend: empty every ring (``HEAD = TAIL = 0``), fill the
arena and the local memories from the scenario's seed (a prologue on queue 0 loads the
scratchpad and the accumulator from the dump area), reset the device (``CONTROL``), set the
rings, windows, semaphores and ``IRQ_ENABLE``, the bus fault, then write the commands into
the rings and ring the doorbells, queue by queue, as far as each ring has room (a full ring
waits for ``HEAD`` to move: the streams wrap around). It waits until every queue is idle or
stopped by an error, reads every register the comparison needs, then stores the local
memories into the dump area (an epilogue on queue 0) and reads the arena back.

Translated mode (``scenario.vm``): the prologue ends with a ``TLB_INVALIDATE`` of every entry
(the TLBs outlive ``CONTROL``, and address-space ids are reused from stream to stream); the
host writes the page tables (on zeroed table pages), each translated queue's ``Q_VM`` and its
virtual ``RING_BASE``.
While it waits (for ring space or for the end), a queue stopped by its planted page fault
is handled once: the report is recorded (:attr:`Outcome.vm_faults`), the page is mapped if
the plan resumes, and ``Q_RESUME`` resumes or skips.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from cosim.fuzz.layout import ARENA_BASE, CONTROL_RING, Layout
from cosim.fuzz.scenario import Scenario
from hw.config import NPUConfig
from hw.isa import (
    COMMAND_BYTES,
    COUNTER_NAMES,
    ENGINE_NAMES,
    PAGE_FAULTS,
    TIMING_COUNTERS,
    VM_PAGE_BYTES,
    Csr,
    ErrorWord,
    IrqBit,
    LocalMem,
    Opcode,
    QueueErrorWord,
    ResumeWord,
    SemLast,
    TraceInfo,
    counter_csr,
    encode,
    pack_fields,
    queue_csr,
    sem_csr,
    sem_last_csr,
    trace_csr,
    unpack_fields,
)
from sw.dram import DramTiming
from sw.model.faults import BusFault

__all__ = ["run_scenario", "whole_state", "Outcome", "HangError", "UNTIMED_COUNTERS",
           "MAX_CYCLES", "MAX_SLOWDOWN", "check_dram"]

UNTIMED_COUNTERS = tuple(c for c in COUNTER_NAMES if c not in TIMING_COUNTERS)
POLL_FIRST, POLL_MAX = 32, 1024

#: The hang budget: a scenario that waits more cycles than this in all (prologue, stream,
#: epilogue) is a hang. Under ideal DRAM the longest of 40 streams at the default 48
#: commands per queue takes 18,757 cycles in all on 8x8 and 37,526 on 32x32 (performance
#: model, which matches the RTL cycle for cycle); 623,086 at 2,000 commands per queue (22
#: streams, 8x8).
MAX_CYCLES = 4_000_000
#: The slowest DRAM (:meth:`sw.dram.DramTiming.slowdown`) the hang budget allows at the
#: default 48 commands per queue, proportionally less for longer streams (:func:`check_dram`).
#: Measured on the performance model, 40 streams each: at a slowdown of 100 the longest stream
#: took 825,000 cycles in all (stall=0.99), 902,000 (bw=0.08), 1,702,000 (latency=29700) on 8x8 and
#: 2,684,000 (stall=0.99, 20 streams) on 32x32; at bw=0.01 (800) 24 of 40 streams hung.
MAX_SLOWDOWN = 100


def check_dram(dram: DramTiming, config: NPUConfig, max_commands: int) -> None:
    """Refuse a DRAM timing under which streams of up to ``max_commands`` commands per queue
    could outlast the hang budget (:data:`MAX_CYCLES`) and be reported as hangs: its
    :meth:`~sw.dram.DramTiming.slowdown` must be at most :data:`MAX_SLOWDOWN` x 48 /
    ``max_commands`` (:data:`MAX_SLOWDOWN` up to 48).

    Raises
    ------
    ValueError
        Saying how slow the timing is, what the budget allows and why.
    """
    from cosim.fuzz.generate import GeneratorSettings
    default = GeneratorSettings.max_commands
    limit = MAX_SLOWDOWN * min(1.0, default / max_commands)
    slowdown = dram.slowdown(config.axi_data_bytes)
    if slowdown > limit:
        raise ValueError(
            f"DRAM timing {dram.name}: too slow to fuzz: a stream may take up to "
            f"{slowdown:,.0f}x as long as under ideal DRAM, but the hang budget (a stream "
            f"that waits more than {MAX_CYCLES:,} cycles is a hang) allows {limit:g}x at "
            f"{max_commands} commands per queue: slow streams would be reported as hangs; "
            "give a faster timing or fewer commands per queue")


class HangError(RuntimeError):
    """The device made no progress within the scenario's cycle budget."""


@dataclass
class Outcome:
    """What one backend did with a scenario (every field is compared, see
    :mod:`cosim.fuzz.compare`)."""
    queues: dict = field(default_factory=dict)      # q -> head, tail, error (or None), fetched
    first_error: list | None = None                 # ERR_* [code, queue, opcode, cmd, addr]
    queue_errors: int = 0
    irq_status: int = 0
    irq_pin: bool = False
    sems: list = field(default_factory=list)
    sem_last: list = field(default_factory=list)    # [queue, index] or None per semaphore
    traces: list = field(default_factory=list)      # per engine: [queue, index(, start, end)]
    trace_overflow: list = field(default_factory=list)
    counters: dict = field(default_factory=dict)    # untimed counter deltas
    dram: bytes = b""                               # [ARENA_BASE, layout.end)
    cycles: int = 0                                 # the device's cycles over the stream
    #: page faults the host handled: [queue, code, opcode, index, address, action]
    vm_faults: list = field(default_factory=list)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("dram")
        return d


def _int(v) -> int:
    """A register field as a plain int (enum fields come back as their member)."""
    return int(getattr(v, "value", v))


def _bytes_of(seed: int, n: int) -> bytes:
    return np.random.default_rng([seed, 0x5EED]).integers(0, 256, n, np.uint8).tobytes()


class _Host:
    def __init__(self, backend, config: NPUConfig, max_cycles: int) -> None:
        self.b = backend
        self.cfg = config
        self.lay = Layout(config)
        self.budget = max_cycles
        self.waited = 0
        self.run_cycles = getattr(backend, "run_cycles", None)
        self.vm_faults: dict = {}          # planted faults not handled yet (queue -> plan)
        self.handled: list = []

    def rd(self, off: int) -> int:
        return self.b.csr_read(off)

    def wr(self, off: int, value: int) -> None:
        self.b.csr_write(off, value)

    def batch(self, ops: list[tuple[int, int | None]]) -> list[int]:
        """CSR accesses in order (``value`` None: a read); one call into a simulator that
        offers ``csr_batch``. Returns the values read."""
        many = getattr(self.b, "csr_batch", None)
        if many is not None:
            return many(ops)
        out = []
        for off, value in ops:
            if value is None:
                out.append(self.b.csr_read(off))
            else:
                self.b.csr_write(off, value)
        return out

    def wait(self, poll: int, what: str) -> int:
        """Let the device run ``poll`` cycles (raises :class:`HangError` past the budget or
        on an untimed backend, where nothing would change); returns the next interval."""
        if self.run_cycles is None or self.waited >= self.budget:
            raise HangError(f"{what}: no progress after {self.waited} cycles")
        self.run_cycles(poll)
        self.waited += poll
        return min(2 * poll, POLL_MAX)

    def cycles(self) -> int:
        return self.rd(Csr.CYCLES_LO) | self.rd(Csr.CYCLES_HI) << 32

    # -- rings ----------------------------------------------------------------------------

    def zero_rings(self, queues: list[int] | None = None) -> None:
        """``HEAD = TAIL = 0`` on ``queues`` (default all), then ``CONTROL`` clear: an empty
        window makes any fetch fail, the queue reset then moves ``HEAD`` to the new ``TAIL``;
        the windows are open again after it. Translated queues are made physical first
        (``Q_VM`` 0: the empty window stops a fetch only then; a stream that ended in a hang
        must not leave queue 0 translated for the next prologue)."""
        queues = range(self.cfg.n_queues) if queues is None else queues
        ops = [(queue_csr(q, Csr.Q_VM), 0) for q in queues] if self.cfg.tlb_entries else []
        for q in queues:
            ops += [(queue_csr(q, Csr.WINDOW_BASE), 1), (queue_csr(q, Csr.WINDOW_LIMIT), 1),
                    (queue_csr(q, Csr.TAIL), 0)]
        ops += [(Csr.QUEUE_RESET, sum(1 << q for q in queues)), (Csr.CONTROL, 1)]
        for q in queues:
            ops += [(queue_csr(q, Csr.WINDOW_BASE), 0), (queue_csr(q, Csr.WINDOW_LIMIT), 0)]
        self.batch(ops + [(Csr.IRQ_STATUS, IrqBit.FENCE | IrqBit.ERROR)])

    @staticmethod
    def setup_ops(q: int, base: int, size: int, win: tuple[int, int]) -> list:
        return [(queue_csr(q, Csr.WINDOW_BASE), win[0]), (queue_csr(q, Csr.WINDOW_LIMIT), win[1]),
                (queue_csr(q, Csr.RING_BASE), base), (queue_csr(q, Csr.RING_SIZE), size)]

    def control_stream(self, raws: list[bytes]) -> None:
        """Run a few commands on queue 0 from the control ring, until it is idle."""
        self.b.mem_write(self.lay.control_ring, b"".join(raws))
        self.batch(self.setup_ops(0, self.lay.control_ring, CONTROL_RING, (0, 0))
                   + [(queue_csr(0, Csr.TAIL), len(raws))])
        poll = POLL_FIRST
        while True:
            busy, errors = self.batch([(Csr.QUEUE_BUSY, None), (Csr.QUEUE_ERRORS, None)])
            if errors & 1:
                raise RuntimeError("the fuzzer's own prologue/epilogue failed on queue 0")
            if not busy & 1:
                return
            poll = self.wait(poll, "prologue/epilogue")

    def local_transfers(self, load: bool, queues: list[int]) -> list[bytes]:
        """The local partitions of ``queues`` from/to their images in the dump area."""
        out = []
        op = Opcode.DMA_LOAD if load else Opcode.DMA_STORE
        for q in queues:
            for mem, (lo, hi), addr, row_bytes in (
                    (LocalMem.SPAD, self.lay.spad_part(q), self.lay.dump_of(q)[0],
                     self.cfg.spad_row_bytes),
                    (LocalMem.ACC, self.lay.acc_part(q), self.lay.dump_of(q)[1],
                     self.cfg.acc_row_bytes)):
                out.append(_copy_rows(op, mem, addr, lo, hi - lo, row_bytes))
        return out

    def whole_memories(self, load: bool, addr: int) -> list[bytes]:
        """The whole scratchpad and accumulator from/to DRAM at ``addr``."""
        op = Opcode.DMA_LOAD if load else Opcode.DMA_STORE
        spad = self.cfg.spad_rows * self.cfg.spad_row_bytes
        return [_copy_rows(op, LocalMem.SPAD, addr, 0, self.cfg.spad_rows,
                           self.cfg.spad_row_bytes),
                _copy_rows(op, LocalMem.ACC, addr + spad, 0, self.cfg.acc_rows,
                           self.cfg.acc_row_bytes)]

    # -- submission -----------------------------------------------------------------------

    def submit(self, scenario: Scenario) -> None:
        """Write every queue's commands into its ring as room allows, ringing the doorbell."""
        setups = {s.queue: s for s in scenario.queues}
        pending = {q: [c.raw() for c in scenario.queue_commands(q)] for q in setups}
        tail = dict.fromkeys(setups, 0)
        head = dict.fromkeys(setups, 0)
        poll = POLL_FIRST
        while any(pending.values()):
            moved = False
            for q, s in setups.items():
                if not pending[q]:
                    continue
                free = s.ring_size - 1 - (tail[q] - head[q]) % s.ring_size
                if free == 0:
                    head[q] = self.rd(queue_csr(q, Csr.HEAD))
                    free = s.ring_size - 1 - (tail[q] - head[q]) % s.ring_size
                n = min(free, len(pending[q]), s.ring_size - tail[q])
                if n <= 0:
                    continue
                chunk, pending[q] = pending[q][:n], pending[q][n:]
                self.b.mem_write(s.ring_base + tail[q] * COMMAND_BYTES, b"".join(chunk))
                tail[q] = (tail[q] + n) % s.ring_size
                self.wr(queue_csr(q, Csr.TAIL), tail[q])
                moved = True
            if not moved and not self.handle_faults():
                poll = self.wait(poll, "ring space")

    def quiesce(self, mask: int) -> None:
        poll = POLL_FIRST
        while True:
            busy, errors = self.batch([(Csr.QUEUE_BUSY, None), (Csr.QUEUE_ERRORS, None)])
            if any(errors >> q & 1 for q in self.vm_faults) and self.handle_faults():
                continue
            if not busy & ~errors & mask:
                return
            poll = self.wait(poll, "completion")

    def handle_faults(self) -> bool:
        """Handle the planted page faults that stopped their queue (see the module
        docstring); returns whether one was."""
        if not self.vm_faults:
            return False
        errors = self.rd(Csr.QUEUE_ERRORS)
        done = False
        for q, plan in list(self.vm_faults.items()):
            if not errors >> q & 1:
                continue
            code, qcmd, qaddr = self.batch([(queue_csr(q, Csr.Q_ERR_CODE), None),
                                            (queue_csr(q, Csr.Q_ERR_CMD), None),
                                            (queue_csr(q, Csr.Q_ERR_ADDR), None)])
            w = unpack_fields(QueueErrorWord, code)
            if _int(w.code) not in {c.value for c in PAGE_FAULTS}:
                continue                    # another error: the stream ends there
            del self.vm_faults[q]
            self.handled.append([q, _int(w.code), _int(w.opcode), qcmd, qaddr, plan["action"]])
            if plan["fix"] is not None:
                addr, word = plan["fix"]
                self.b.mem_write(addr, word.to_bytes(4, "little"))
            self.wr(queue_csr(q, Csr.Q_RESUME),
                    pack_fields(ResumeWord, {plan["action"]: 1}))
            done = True
        return done

    # -- reading the state ----------------------------------------------------------------

    def read_state(self, scenario: Scenario, out: Outcome, trace_cycles: bool) -> None:
        regs = (Csr.HEAD, Csr.TAIL, Csr.Q_FETCHED, Csr.Q_ERR_CODE, Csr.Q_ERR_CMD, Csr.Q_ERR_ADDR)
        glob = (Csr.QUEUE_ERRORS, Csr.ERR_CODE, Csr.ERR_CMD, Csr.ERR_ADDR, Csr.IRQ_STATUS)
        ops = [(queue_csr(s.queue, r), None) for s in scenario.queues for r in regs]
        ops += [(r, None) for r in glob]
        for s in range(self.cfg.n_sems):
            ops += [(sem_csr(s), None), (sem_last_csr(s), None)]
        vals = iter(self.batch(ops))
        per_queue = {s.queue: [next(vals) for _ in regs] for s in scenario.queues}
        out.queue_errors, code, cmd, addr, out.irq_status = (next(vals) for _ in glob)
        for q, (head, tail, fetched, qcode, qcmd, qaddr) in per_queue.items():
            err = None
            if out.queue_errors >> q & 1:
                w = unpack_fields(QueueErrorWord, qcode)
                err = [_int(w.code), _int(w.opcode), qcmd, qaddr]
            out.queues[q] = {"head": head, "tail": tail, "error": err, "fetched": fetched}
        if code:
            w = unpack_fields(ErrorWord, code)
            out.first_error = [_int(w.code), _int(w.queue), _int(w.opcode), cmd, addr]
        for _ in range(self.cfg.n_sems):
            out.sems.append(next(vals))
            last = unpack_fields(SemLast, next(vals))
            out.sem_last.append([int(last.queue), int(last.index)] if last.valid else None)
        out.irq_pin = bool(self.b.wait_irq(0))
        self._traces(out, trace_cycles)

    def _traces(self, out: Outcome, cycles: bool, chunk: int = 8) -> None:
        """Pop every engine's trace FIFO, ``chunk`` entries per call (a pop of an empty FIFO
        does nothing)."""
        regs = (Csr.TRACE_START, Csr.TRACE_END) if cycles else ()
        for e in range(len(ENGINE_NAMES)):
            entries, overflow, more = [], False, True
            while more and len(entries) <= self.cfg.trace_depth:
                ops = []
                for _ in range(chunk):
                    ops += [(trace_csr(e, Csr.TRACE_INFO), None)]
                    ops += [(trace_csr(e, r), None) for r in regs]
                    ops += [(trace_csr(e, Csr.TRACE_POP), 1)]
                vals = iter(self.batch(ops))
                for _ in range(chunk):
                    info = unpack_fields(TraceInfo, next(vals))
                    times = [next(vals) for _ in regs]
                    overflow = bool(info.overflow)
                    if not info.valid:
                        more = False
                        break
                    entries.append([int(info.queue), int(info.index), *times])
            out.traces.append(entries)
            out.trace_overflow.append(overflow)

    def counters(self) -> dict[str, int]:
        vals = self.batch([(Csr.CNT_SNAPSHOT, 1)]
                          + [(counter_csr(c), None) for c in UNTIMED_COUNTERS])
        return dict(zip(UNTIMED_COUNTERS, vals, strict=True))


def _copy_rows(op: Opcode, mem: LocalMem, addr: int, first: int, rows: int,
               row_bytes: int) -> bytes:
    """One DMA command between local rows ``first .. first + rows - 1`` and DRAM at ``addr``
    (contiguous), in DRAM rows of at most 32 KiB."""
    chunk = max(1, min(rows, 32768 // row_bytes))
    while rows % chunk:
        chunk -= 1
    body = {"dram_addr": addr, "dram_stride": chunk * row_bytes, "row_bytes": chunk * row_bytes,
            "n_rows": rows // chunk, "local_row": first, "local_stride": chunk, "mem": mem}
    return encode({"header": {"opcode": op}, "body": {"dma": body}})


def whole_state(backend, config: NPUConfig) -> bytes:
    """All of DRAM after zeroing the arena and storing the whole scratchpad and accumulator
    at :data:`ARENA_BASE`: what a campaign compares at the end of a batch, to see bytes or
    rows changed outside every stream's arena and partitions."""
    h = _Host(backend, config, MAX_CYCLES)
    set_fault = getattr(backend, "set_bus_fault", None)
    if set_fault is not None:
        set_fault(None)
    h.zero_rings()
    backend.mem_write(ARENA_BASE, bytes(h.lay.end - ARENA_BASE))  # last stream's timestamps
    h.control_stream(h.whole_memories(False, ARENA_BASE))
    return backend.mem_read(0, config.dram_bytes)


def run_scenario(backend, scenario: Scenario, *, max_cycles: int = MAX_CYCLES,
                 trace_cycles: bool = False) -> Outcome:
    """Run ``scenario`` on ``backend`` (model, perf or RTL; its configuration must be the
    scenario's) and return the :class:`Outcome` (with the trace entries' start and end
    cycles if ``trace_cycles``).

    Raises
    ------
    HangError
        If the device does not finish within ``max_cycles`` cycles of waiting (or, on the
        untimed model, cannot progress at all).
    """
    cfg = scenario.npu_config
    h = _Host(backend, cfg, max_cycles)
    lay = h.lay
    set_fault = getattr(backend, "set_bus_fault", None)
    if set_fault is not None:
        set_fault(None)
    h.zero_rings()
    backend.mem_write(ARENA_BASE, _bytes_of(scenario.seed, lay.end - ARENA_BASE))
    qids = [s.queue for s in scenario.queues]
    prologue = h.local_transfers(True, qids)
    vm = scenario.vm
    if vm is not None:
        prologue.append(encode({"header": {"opcode": Opcode.TLB_INVALIDATE},
                                "body": {"tlb": {"all": 1}}}))
    h.control_stream(prologue)
    h.zero_rings([0])
    mask, ops = 0, []
    virtual = {} if vm is None else {int(q): v for q, v in vm["queues"].items()}
    if vm is not None:
        # zeroed table pages first: an entry the tables leave out is not mapped (the arena's
        # random bytes there made a valid entry in 1 of 3,000 streams measured, and a planted
        # "not mapped" fault then translated to some random page)
        for q in virtual:
            _, root, level0 = lay.vm_of(q)
            for page in (root, *level0):
                backend.mem_write(page, bytes(VM_PAGE_BYTES))
        for addr, word in vm["tables"]:
            backend.mem_write(addr, word.to_bytes(4, "little"))
        h.vm_faults = {int(q): f for q, f in vm["faults"].items()}
    for s in scenario.queues:
        v = virtual.get(s.queue)
        ring = s.ring_base if v is None else v["ring"]
        if v is not None:
            ops.append((queue_csr(s.queue, Csr.Q_VM), v["word"]))
        ops += h.setup_ops(s.queue, ring, s.ring_size, (s.window_base, s.window_limit))
        mask |= 1 << s.queue
    ops += [(sem_csr(int(sem)), value) for sem, value in scenario.sem_init.items()]
    h.batch(ops + [(Csr.IRQ_ENABLE, scenario.irq_enable)])
    before = h.counters()
    if scenario.fault is not None:
        if set_fault is None:
            raise TypeError(f"backend {backend!r} cannot inject bus faults")
        set_fault(BusFault(**scenario.fault))
    out = Outcome()
    c0 = h.cycles()
    h.submit(scenario)
    h.quiesce(mask)
    out.cycles = h.cycles() - c0
    out.vm_faults = sorted(h.handled)
    h.read_state(scenario, out, trace_cycles)
    if set_fault is not None:
        set_fault(None)
    h.zero_rings(sorted({0, *qids}))
    h.wr(Csr.IRQ_ENABLE, 0)
    epilogue = h.local_transfers(False, qids)
    h.control_stream(epilogue)
    # The counters are read after the epilogue, less what it did itself: a stopped queue's
    # fetch may still be on the bus when the streams are quiet (its beats count), and the
    # epilogue's own fetches wait for it.
    after = h.counters()
    own = {"bytes_read": COMMAND_BYTES * len(epilogue), "retired.store": len(epilogue),
           "bytes_written": len(qids) * sum(lay.part_bytes)}
    out.counters = {c: (after[c] - before[c] - own.get(c, 0)) % (1 << 32)
                    for c in UNTIMED_COUNTERS}
    out.dram = backend.mem_read(ARENA_BASE, lay.end - ARENA_BASE)
    return out
