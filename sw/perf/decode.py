"""Fast decoding of commands into plain records, from the layouts of :mod:`hw.isa`.

:func:`hw.isa.decode` returns a lazy :class:`hw.isa.CommandView`, whose every field access walks
the layout (about 1.5 us); the performance model decodes each command once into
:class:`Decoded` (header fields as attributes, the opcode's body as a namespace of ints), with
offsets and widths read from the same ``data.Struct`` definitions -- nothing is declared twice.
"""

from __future__ import annotations

from amaranth.lib import data

from hw.isa import (
    COMMAND_BYTES,
    OPCODE_ENGINE,
    Command,
    DmaBody,
    FenceBody,
    Flags,
    Header,
    MatmulBody,
    Opcode,
    RequantBody,
    SoftmaxBody,
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
    """A small read-only view class of ``layout``: each field a property that shifts and
    masks the stored bits (so a field costs only when it is read)."""
    def field(off: int, mask: int) -> property:
        return property(lambda self: (self._bits >> off) & mask)
    members = {n: field(off, mask) for n, off, mask in _table(layout)}
    members["__slots__"] = ("_bits",)
    members["__init__"] = lambda self, bits: setattr(self, "_bits", bits)
    members["__repr__"] = lambda self: f"{name}(" + ", ".join(
        f"{n}={getattr(self, n)}" for n, _, _ in _table(layout)) + ")"
    return type(name, (), members)


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
_BODIES = {
    Opcode.DMA_LOAD.value: _view_class("DmaBody", DmaBody),
    Opcode.DMA_STORE.value: _view_class("DmaBody", DmaBody),
    Opcode.MATMUL.value: _view_class("MatmulBody", MatmulBody),
    Opcode.REQUANT.value: _view_class("RequantBody", RequantBody),
    Opcode.SOFTMAX.value: _view_class("SoftmaxBody", SoftmaxBody),
    Opcode.FENCE.value: _view_class("FenceBody", FenceBody),
}
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
    d.flags = _FlagsView(flag_bits)
    d.engine = _ENGINE.get(op)
    d.waits = bool(flag_bits >> _W_BIT & 1) or op == _WAIT_OP
    d.signals = bool(flag_bits >> _S_BIT & 1) or op == _SIGNAL_OP
    d.wait_sem = (bits >> _WAIT_SEM_OFF) & 0xFF
    d.signal_sem = (bits >> _SIGNAL_SEM_OFF) & 0xFF
    d.wait_value = (bits >> _WAIT_VALUE_OFF) & 0xFFFF_FFFF
    view = _BODIES.get(op)
    d.body = None if view is None else view(bits >> _BODY_OFFSET)
    return d
