"""Layouts and small circuits shared by the parts of the command processor."""

from amaranth import Cat, Module, Signal, Value
from amaranth.lib import data

from hw.isa import ENGINE_NAMES, OPCODE_ENGINE, Command

__all__ = ["QueueEntry", "FetchEntry", "ErrorReport", "RunningCommand", "SemIncrement", "ENGINES",
           "round_robin", "sem_reached"]


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
