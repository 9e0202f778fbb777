"""Fast decoding of commands into plain records, from the layouts of :mod:`hw.isa`.

:func:`hw.isa.decode` returns a lazy :class:`hw.isa.CommandView`, whose every field access walks
the layout (about 1.5 us); the performance model decodes each command once into
:class:`Decoded` (header fields as attributes, the opcode's body as a namespace of ints), with
offsets and widths read from the same ``data.Struct`` definitions -- nothing is declared twice.
"""

from __future__ import annotations

from collections import namedtuple

from amaranth.lib import data

from hw.isa import (
    COMMAND_BYTES,
    OPCODE_BODY,
    OPCODE_ENGINE,
    Body,
    Command,
    Flags,
    Header,
    Opcode,
)

__all__ = ["Decoded", "decode_command", "OPCODE_VALUES"]

OPCODE_VALUES = frozenset(op.value for op in Opcode)


def _table(layout) -> tuple[tuple[str, int, int], ...]:
    """``(name, offset, mask)`` of every field of ``layout`` (nested layouts as their raw
    value; ``_pad`` fields dropped)."""
    out = []
    for name, field in data.Layout.cast(layout):
        if not name.startswith("_"):
            out.append((name, field.offset, (1 << field.width) - 1))
    return tuple(out)


def _view_class(name: str, layout) -> type:
    """A small read-only record class of ``layout`` (a named tuple), built from the raw bits:
    every field an attribute, the shifts and masks done once, at decode."""
    table = _table(layout)
    record = namedtuple(name, [n for n, _, _ in table])
    make = record._make
    fields = tuple((off, mask) for _, off, mask in table)

    def decode(bits: int):
        return make([(bits >> off) & mask for off, mask in fields])
    return decode


_CMD = data.Layout.cast(Command)
_BODY_OFFSET = _CMD["body"].offset
_HDR = data.Layout.cast(Header)
_OP_OFF = _HDR["opcode"].offset
_FLAGS_OFF = _HDR["flags"].offset
_WAIT_SEM_OFF = _HDR["wait_sem"].offset
_SIGNAL_SEM_OFF = _HDR["signal_sem"].offset
_WAIT_VALUE_OFF = _HDR["wait_value"].offset
_FLAG = {n: off for n, off, _ in _table(Flags)}
_FlagsView = _view_class("Flags", Flags)
_BODIES = {op.value: _view_class(member, data.Layout.cast(Body)[member].shape)
           for op, member in OPCODE_BODY.items()}
_ENGINE = {op.value: (None if e == "processor" else e) for op, e in OPCODE_ENGINE.items()}
_WAIT_OP, _SIGNAL_OP = Opcode.WAIT.value, Opcode.SIGNAL.value
_W_BIT, _S_BIT = _FLAG["wait"], _FLAG["signal"]


class Decoded:
    """One command as the command processor sees it after decode.

    Attributes
    ----------
    queue, index : int
        Its queue and index there (commands fetched since the queue's last reset).
    opcode : int
    engine : str or None
        ``"load"``, ``"store"``, ``"matrix"``, ``"vector"``, or None for a processor command.
    waits, signals : bool
        The header's wait / signal (a ``WAIT`` opcode always waits, ``SIGNAL`` always
        signals).
    wait_sem, wait_value, signal_sem : int
    flags : view
        ``wait``, ``signal``, ``irq``, ``accumulate``, ``relu``, ``transpose``, ``row_scale``.
    body : view or None
        The opcode's body fields (attributes, read on access) (None for NOP/WAIT/SIGNAL/BARRIER).
    """

    __slots__ = ("queue", "index", "opcode", "engine", "waits", "signals", "wait_sem",
                 "wait_value", "signal_sem", "flags", "body", "slot_addr")

    def describe(self) -> str:
        return f"q{self.queue}#{self.index} op {self.opcode:#x}"


def decode_command(raw: bytes, queue: int, index: int, slot_addr: int) -> Decoded:
    """Decode :data:`hw.isa.COMMAND_BYTES` bytes fetched from ``slot_addr``.

    Raises
    ------
    ValueError
        If ``raw`` is not one command long.
    """
    if len(raw) != COMMAND_BYTES:
        raise ValueError(f"a command is {COMMAND_BYTES} bytes, got {len(raw)}")
    bits = int.from_bytes(raw, "little")
    d = Decoded()
    d.queue, d.index, d.slot_addr = queue, index, slot_addr
    op = (bits >> _OP_OFF) & 0xFF
    flag_bits = (bits >> _FLAGS_OFF) & 0xFF
    d.opcode = op
    flags = _FLAG_VIEWS.get(flag_bits)
    if flags is None:
        flags = _FLAG_VIEWS[flag_bits] = _FlagsView(flag_bits)
    d.flags = flags
    d.engine = _ENGINE.get(op)
    d.waits = bool(flag_bits >> _W_BIT & 1) or op == _WAIT_OP
    d.signals = bool(flag_bits >> _S_BIT & 1) or op == _SIGNAL_OP
    d.wait_sem = (bits >> _WAIT_SEM_OFF) & 0xFF
    d.signal_sem = (bits >> _SIGNAL_SEM_OFF) & 0xFF
    d.wait_value = (bits >> _WAIT_VALUE_OFF) & 0xFFFF_FFFF
    view = _BODIES.get(op)
    if view is None:
        d.body = None
    else:
        # a kernel issues the same bodies again and again (only the header's semaphore
        # values change): decoded once per opcode and body bits (records are immutable)
        key = (op, raw[_BODY_BYTE:])
        body = _BODY_VIEWS.get(key)
        if body is None:
            if len(_BODY_VIEWS) >= _VIEWS_LIMIT:
                _BODY_VIEWS.clear()
            body = _BODY_VIEWS[key] = view(bits >> _BODY_OFFSET)
        d.body = body
    return d


#: decoded flags per flag byte, decoded bodies per ``(opcode, body bytes)`` (bounded)
_FLAG_VIEWS: dict[int, tuple] = {}
_BODY_VIEWS: dict[tuple[int, bytes], tuple] = {}
_VIEWS_LIMIT = 1 << 14
assert _BODY_OFFSET % 8 == 0
_BODY_BYTE = _BODY_OFFSET // 8
