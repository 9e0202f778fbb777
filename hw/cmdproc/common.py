"""Layouts and small circuits shared by the parts of the command processor."""

from amaranth import Cat, Module, Signal, Value
from amaranth.lib import data

from hw.config import NPUConfig
from hw.isa import ENGINE_NAMES, OPCODE_BODY, OPCODE_ENGINE, Body, Command, Flags, Opcode

__all__ = ["QueueEntry", "FetchEntry", "ErrorReport", "RunningCommand", "SemIncrement", "ENGINES",
           "round_robin", "sem_reached", "engine_payload", "engine_wait", "used_bits"]


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


class SemIncrement(data.Struct):
    """One source of semaphore increments: in a cycle with ``en`` high, ``sem[sem] += 1``,
    done by command ``index`` of ``queue``."""
    en: 1
    sem: 8
    queue: 8
    index: 32


#: engine port name -> the opcodes it runs (from hw.isa.OPCODE_ENGINE)
ENGINES = {name: tuple(op for op, engine in OPCODE_ENGINE.items() if engine == name)
           for name in ENGINE_NAMES}


def used_bits(layout) -> int:
    """Bits of ``layout`` below its trailing reserved fields (names starting with ``_``):
    what a command of that layout carries."""
    return max((f.offset + f.width for name, f in data.Layout.cast(layout)
                if not name.startswith("_")), default=0)


def _sem_bits(config: NPUConfig) -> int:
    return max(1, (config.n_sems - 1).bit_length())


def engine_payload(config: NPUConfig, engine: str | None = None) -> data.StructLayout:
    """The narrow payload an engine queue stores of a command of ``engine`` (a name of
    :data:`ENGINES`; None: any opcode), derived from the ISA layouts: ``opcode`` (when the
    engine runs several), ``flags``, ``signal_sem`` (``log2(n_sems)`` bits: the fetch
    reported larger ids as ``BAD_SEM``), the command ``index`` and the ``body``: the low
    :func:`used_bits` of the :class:`hw.isa.Body` members of the engine's opcodes
    (:data:`hw.isa.OPCODE_BODY`), the widest of them. A new opcode or field in ``hw.isa``
    is carried without a change here."""
    ops = ENGINES[engine] if engine is not None else tuple(Opcode)
    body = max((used_bits(data.Layout.cast(Body)[OPCODE_BODY[op]].shape)
                for op in ops if op in OPCODE_BODY), default=0)
    fields = {"flags": Flags, "signal_sem": _sem_bits(config), "index": 32}
    if len(ops) > 1:
        fields["opcode"] = Opcode
    if body:
        fields["body"] = body
    return data.StructLayout(fields)


def engine_wait(config: NPUConfig) -> data.StructLayout:
    """The semaphore wait of a queued command (kept apart from :func:`engine_payload`: it is
    read for every queue's head)."""
    return data.StructLayout({"waits": 1, "wait_sem": _sem_bits(config), "wait_value": 32})


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
