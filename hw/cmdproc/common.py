"""Layouts and small circuits shared by the parts of the command processor."""

from amaranth import Cat, Const, Module, Signal, Value
from amaranth.lib import data

from hw.config import NPUConfig
from hw.isa import (
    ENGINE_NAMES,
    OPCODE_BODY,
    OPCODE_ENGINE,
    Body,
    Command,
    FenceBody,
    Flags,
    Opcode,
)

__all__ = ["QueueEntry", "FetchEntry", "ErrorReport", "RunningCommand", "ENGINES",
           "PROCESSOR_OPS", "round_robin", "sem_reached", "engine_payload", "sem_wait",
           "sem_increment", "command_wait", "used_bits", "priority_merge", "fence_body"]


class QueueEntry(data.Struct):
    """A command on its way to an engine, with its index in the queue (for error reports)."""
    cmd: Command
    index: 32


class FetchEntry(data.Struct):
    """A command in a queue's prefetch buffer, as its fetch burst delivered it."""
    cmd: Command
    bus_err: 1      #: the DRAM answered the burst with an error response (SLVERR/DECERR)
    multi: 1        #: the burst carried more than one command


class ErrorReport(data.Struct):
    """One error, as reported to the CSR block."""
    code: 8
    opcode: 8
    cmd: 32      #: command index in its queue
    addr: 32


class RunningCommand(data.Struct):
    """The command an engine runs (valid while its ``busy`` is high and in its ``done``
    cycle)."""
    queue: 8
    index: 32    #: command index in its queue
    opcode: 8


#: engine port name -> the opcodes it runs (from hw.isa.OPCODE_ENGINE)
ENGINES = {name: tuple(op for op, engine in OPCODE_ENGINE.items() if engine == name)
           for name in ENGINE_NAMES}
#: the opcodes the command processor runs itself, in its stages
PROCESSOR_OPS = tuple(op for op, engine in OPCODE_ENGINE.items() if engine == "processor")


def used_bits(layout) -> int:
    """Bits of ``layout`` below its trailing reserved fields (names starting with ``_``):
    what a command of that layout carries."""
    return max((f.offset + f.width for name, f in data.Layout.cast(layout)
                if not name.startswith("_")), default=0)


def _sem_bits(config: NPUConfig) -> int:
    return max(1, (config.n_sems - 1).bit_length())


def engine_payload(config: NPUConfig, engine: str | None = None) -> data.StructLayout:
    """The narrow payload an engine queue stores of a command of ``engine`` (a name of
    :data:`ENGINES`, or ``"processor"`` for the stages' :data:`PROCESSOR_OPS`; None: any
    opcode), derived from the ISA layouts: ``opcode`` (when the
    engine runs several), ``flags``, ``signal_sem`` (``log2(n_sems)`` bits: the fetch
    reported larger ids as ``BAD_SEM``), the command ``index`` and the ``body``: the low
    :func:`used_bits` of the :class:`hw.isa.Body` members of the engine's opcodes
    (:data:`hw.isa.OPCODE_BODY`), the widest of them. A new opcode or field in ``hw.isa``
    is carried without a change here."""
    ops = (tuple(Opcode) if engine is None else PROCESSOR_OPS if engine == "processor"
           else ENGINES[engine])
    body = max((used_bits(data.Layout.cast(Body)[OPCODE_BODY[op]].shape)
                for op in ops if op in OPCODE_BODY), default=0)
    fields = {"flags": Flags, "signal_sem": _sem_bits(config), "index": 32}
    if len(ops) > 1:
        fields["opcode"] = Opcode
    if body:
        fields["body"] = body
    return data.StructLayout(fields)


def sem_wait(config: NPUConfig) -> data.StructLayout:
    """The semaphore wait of a command: ``waits`` (``flags.wait``, or a ``WAIT``), the
    semaphore (``log2(n_sems)`` bits: the fetch reported larger ids as ``BAD_SEM``) and the
    target value. Engine stores keep it apart from :func:`engine_payload` (it is read for
    every queue's head); the semaphore unit's ready bits and lookups take it."""
    return data.StructLayout({"waits": 1, "sem": _sem_bits(config), "target": 32})


def command_wait(m: Module, config: NPUConfig, cmd, name: str) -> Signal:
    """The :func:`sem_wait` of a checked :class:`hw.isa.Command` ``cmd`` (a signal)."""
    hdr = cmd.header
    w = Signal(sem_wait(config), name=name)
    m.d.comb += [w.waits.eq(hdr.flags.wait | (hdr.opcode == Opcode.WAIT)),
                 w.sem.eq(hdr.wait_sem), w.target.eq(hdr.wait_value)]
    return w


def sem_increment(config: NPUConfig) -> data.StructLayout:
    """The payload of the semaphore unit's increment stream: ``sem[sem] += 1``, done by
    command ``index`` (its low 24 bits, as :class:`hw.isa.SemLast` records them) of
    ``queue``."""
    return data.StructLayout({"sem": _sem_bits(config), "queue": range(max(config.n_queues, 2)),
                              "index": 24})


def priority_merge(m: Module, sources: list, sink) -> None:
    """Connect the streams ``sources`` to the stream ``sink``, the first valid one in list
    order going through (fixed priority; a source's ``ready`` is high in the cycle its
    payload is taken)."""
    for i, src in enumerate(sources):
        first = ~Cat(s.valid for s in sources[:i]).any() if i else 1
        m.d.comb += src.ready.eq(sink.ready & first)
    for src in reversed(sources):
        with m.If(src.valid):
            m.d.comb += sink.payload.eq(src.payload)
    m.d.comb += sink.valid.eq(Cat(s.valid for s in sources).any())


def round_robin(m: Module, last: Signal, ready: list, n: int) -> tuple[Signal, Signal]:
    """Pick the first ``q`` with ``ready[q]`` after ``last`` (cyclically), combinationally.

    Returns ``(any, sel)``: some ``ready[q]`` is high; the picked ``q`` (0 if none).
    """
    any_ = Signal()
    sel = Signal(range(max(n, 2)))
    m.d.comb += any_.eq(Cat(*ready).any())
    with m.Switch(last):
        for lst in range(n):
            with m.Case(lst):
                order = [(lst + 1 + k) % n for k in range(n)]
                for q in reversed(order):
                    with m.If(ready[q]):
                        m.d.comb += sel.eq(q)
    return any_, sel


def sem_reached(value: Value, target: Value) -> Value:
    """Whether a semaphore holding ``value`` (32 bits) satisfies a wait for ``target``
    (32 bits): ``(value - target) mod 2**32 < 2**31``, i.e. bit 31 of the 32-bit difference is
    clear. One subtractor and a sign-bit test; the rule of :func:`hw.isa.sem_reached`
    (serial-number arithmetic, RFC 1982)."""
    return ~(value - target)[31]


def fence_body(payload) -> data.View:
    """The :class:`hw.isa.FenceBody` view of the ``body`` of a processor payload
    (:func:`engine_payload` ``(config, "processor")``: its used bits, zero-extended)."""
    size = data.Layout.cast(FenceBody).size
    body = Value.cast(payload.body)
    return FenceBody(Cat(body, Const(0, size - len(body))))
