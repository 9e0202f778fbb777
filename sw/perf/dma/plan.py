"""The bursts of a DMA command and what the channels' timing needs of each (its steps, the
local rows they complete), computed once per command shape (:mod:`sw.perf.dma`)."""

from __future__ import annotations

from hw.config import NPUConfig
from hw.isa import LocalMem, VmWord, unpack_fields
from sw.perf import timing as T
from sw.perf.timing import Burst

#: later than any cycle
BIG = 1 << 62


class Geometry:
    """Which load steps of a burst complete a local row (``G = min(L, beat)``-byte chunks;
    the steps of a burst are in :class:`hw.isa.timing.Burst`, the row layout in
    :class:`hw.isa.timing.DmaRow`)."""

    def __init__(self, config: NPUConfig, body, mem: LocalMem) -> None:
        beat = config.axi_data_bytes
        local = config.acc_row_bytes if mem == LocalMem.ACC else config.spad_row_bytes
        self.g = min(local, beat)
        self.beat = beat
        self.body = body
        #: chunks per local row: every ``period``-th completes one (L >= beat: one chunk per
        #: beat; L < beat: every chunk)
        self.period = local // self.g

    def pattern(self, burst: Burst) -> dict:
        """``walk`` arguments for the burst's steps: ``phase`` (chunks of its local row before
        its first chunk, modulo ``period``), ``skip`` (its prime) and ``force`` (the step of
        the row's last chunk when it completes a partial local row)."""
        row = burst.layout
        skip = int(burst.prime)
        force = None
        if burst.row_last and row.chunks % self.period:
            force = row.chunks - 1 - burst.first_chunk + skip
        return {"phase": burst.first_chunk % self.period, "skip": skip, "force": force}

    def pattern_from(self, pattern: dict, before: int) -> dict:
        """``pattern`` (of a burst's steps) for the steps from step ``before`` on (a beat's,
        timed beat by beat, or the flush word's)."""
        phase, skip, force = pattern["phase"], pattern["skip"], pattern["force"]
        if before >= skip:
            phase, skip = (phase + before - skip) % self.period, 0
        else:
            skip -= before
        force = force - before if force is not None and force >= before else None
        return {"phase": phase, "skip": skip, "force": force}

    def needs_port(self, pattern: dict, i: int) -> bool:
        """Whether step ``i`` of ``pattern`` completes a local row (the rule of
        :func:`sw.perf.ports.walk`)."""
        skip, force = pattern["skip"], pattern["force"]
        return i == force or (i >= skip and (pattern["phase"] + i - skip) % self.period
                              == self.period - 1)


def _targets(burst: Burst) -> tuple[int, ...]:
    """Step indices of the burst's first R handshake, its last, and its last step (the tail)."""
    total, last = burst.steps, burst.last_steps
    out = (total - 1,) if burst.beats == 1 else (total - last - 1, total - 1)
    return out + ((total + burst.tail - 1,) if burst.tail else ())


class _Shape:
    """What the load channel's timing needs of one burst, computed once (a transfer's plan is
    cached per command, :class:`Plan`): its beats, load ``steps`` (to its last R handshake)
    and ``tail`` (flush word), :meth:`Geometry.pattern`, :func:`_targets`, the load steps of
    each beat and the steps before each beat, and (:attr:`plain_ends`) the runs of beats that
    are one step each with no flush word behind."""

    __slots__ = ("beats", "steps", "tail", "pattern", "targets", "per_beat", "before",
                 "_plain")

    def __init__(self, burst: Burst, geo: Geometry) -> None:
        self.beats, self.steps, self.tail = burst.beats, burst.steps, burst.tail
        self.pattern = geo.pattern(burst)
        self.targets = _targets(burst)
        self.per_beat = per_beat = burst.steps_per_beat()
        before, total = [], 0
        for n in per_beat:
            before.append(total)
            total += n
        self.before = before
        self._plain: list[int] | None = None

    @property
    def plain_ends(self) -> list[int]:
        """Per beat ``i``, the end of the run of beats from ``i`` that are one load step each
        and leave no flush word behind: such a beat is taken in the cycle its step goes."""
        ends = self._plain
        if ends is None:
            n, per_beat = self.beats, self.per_beat
            ends = [0] * n
            j = n - 1 if self.tail else n
            for i in range(n - 1, -1, -1):
                if per_beat[i] != 1 or i >= j:
                    j = i
                ends[i] = j
            self._plain = ends
        return ends


class Plan:
    """The bursts of one DMA command (:func:`hw.isa.timing.dma_bursts`), its geometry and
    (loads) each burst's :class:`_Shape`, made on first use; kept per command shape by the
    channels (a kernel issues the same transfers again and again)."""

    __slots__ = ("bursts", "geo", "shapes", "_store")

    def __init__(self, bursts: list[Burst], geo: Geometry) -> None:
        self.bursts, self.geo = bursts, geo
        self.shapes: list[_Shape | None] = [None] * len(bursts)
        self._store: tuple | None = None

    def store_beats(self) -> tuple[list[tuple[int, int]], list[int]]:
        """A store's beats in transfer order, ``(steps: local reads or the flush slot, strobed
        bytes)``, and the index of each burst's first beat."""
        if self._store is None:
            beats: list[tuple[int, int]] = []
            first: list[int] = []
            for burst in self.bursts:
                first.append(len(beats))
                beats.extend(zip(burst.store_steps_per_beat(), burst.strobes_per_beat(),
                                 strict=True))
            self._store = (beats, first)
        return self._store

    def shape(self, k: int) -> _Shape:
        s = self.shapes[k]
        if s is None:
            burst = self.bursts[k]
            row = burst.layout
            # everything in a shape follows from the row's layout (its address only through
            # the lane a) and the burst's place in the row: shared by equal bursts
            key = (row.a, row.row_bytes, row.beat, row.local, burst.k0, burst.beats)
            s = _SHAPES.get(key)
            if s is None:
                if len(_SHAPES) >= PlanCache.LIMIT:
                    _SHAPES.clear()
                s = _SHAPES[key] = _Shape(burst, self.geo)
            self.shapes[k] = s
        return s


#: :class:`_Shape` per burst shape (bounded)
_SHAPES: dict[tuple, _Shape] = {}


class PlanCache:
    """:class:`Plan` per ``(dram_addr, dram_stride, row_bytes, n_rows, mem)`` of a DMA
    command (bounded: emptied when it holds :attr:`LIMIT` plans)."""

    LIMIT = 4096

    def __init__(self, config: NPUConfig) -> None:
        self.config = config
        self.plans: dict[tuple, Plan] = {}

    def get(self, body, mem: LocalMem) -> Plan:
        key = (body.dram_addr, body.dram_stride, body.row_bytes, body.n_rows, mem)
        plan = self.plans.get(key)
        if plan is None:
            if len(self.plans) >= self.LIMIT:
                self.plans.clear()
            bursts = T.dma_bursts(self.config, body.dram_addr, body.dram_stride,
                                  body.row_bytes, body.n_rows, mem)
            plan = self.plans[key] = Plan(bursts, Geometry(self.config, body, mem))
        return plan



def translated_vm(channel, cmd) -> int:
    """The ``Q_VM`` of a command's queue if it translates (latched with the command), else 0."""
    if channel.translator is None or channel.vm_of is None:
        return 0
    vm = channel.vm_of(cmd.queue)
    return vm if unpack_fields(VmWord, vm).enable else 0


def present_burst(channel, job, start: int, write: bool) -> None:
    """Burst ``job.next`` of a channel's transfer is presented from cycle ``start``: translated
    first if the queue translates (``channel.translator``, then ``channel._issue`` or, on a
    page fault, ``channel._fault``), else requested at once (``channel._issue``)."""
    if not job.vm:
        channel._issue(job, start)
        return
    burst, body = job.bursts[job.next], job.geo.body
    channel.translator.present(job.vm, burst.addr, body.dram_addr + burst.row * body.dram_stride,
                               write, start, lambda c, _pa: channel._issue(job, c),
                               lambda f, code, addr: channel._fault(job, f))
