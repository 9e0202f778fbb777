"""Command lists: the builder that encodes commands through :func:`hw.isa.encode`, and the
one-line description of an encoded command used in error messages and deadlock reports."""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from hw.isa import (
    COMMAND_BYTES,
    ActFormat,
    LocalMem,
    Opcode,
    WeightFormat,
    body_fields,
    decode,
    encode,
)
from sw.runtime.errors import CommandFieldError

__all__ = ["Command", "CommandList", "Wait", "describe_command"]

#: :func:`hw.isa.encode`'s message for a value that does not fit its field
_ENCODE_RANGE = re.compile(r"field '(\w+)' = (-?\d+) does not fit in (\d+) unsigned bits")
#: the runtime's name of each header field (the other fields are named as their arguments)
_HEADER_ARGS = {"wait_sem": "wait sem", "wait_value": "wait value", "signal_sem": "signal sem"}


#: MATMUL fields left out of :func:`describe_command` when 0 (int8, no MX).
_FORMAT_FIELDS = ("w_fmt", "a_fmt", "x_base")


def describe_command(raw: bytes) -> str:
    """One-line human-readable decoding of an encoded command, e.g.
    ``"MATMUL a_row=0 w_row=8 acc_row=0 m=4 [wait sem0>=3, signal sem0, accumulate]"``."""
    cmd = decode(raw)
    h = cmd.header
    op = h.opcode
    if not isinstance(op, Opcode):
        return f"opcode {op:#04x} (unknown), raw {raw.hex()}"
    parts = [op.name]
    for name, value in body_fields(cmd).items():
        if name in _FORMAT_FIELDS and value == 0:
            continue        # an int8 MATMUL reads as before the formats
        fmt = {"w_fmt": WeightFormat, "a_fmt": ActFormat}.get(name)
        if fmt is not None and value in set(fmt):
            value = fmt(value).name
        if isinstance(value, enum.Enum):
            value = value.name
        elif name.endswith("addr"):
            value = f"{value:#x}"
        parts.append(f"{name}={value}")
    notes = []
    if h.flags.wait or op == Opcode.WAIT:
        notes.append(f"wait sem{h.wait_sem}>={h.wait_value}")
    if h.flags.signal or op == Opcode.SIGNAL:
        notes.append(f"signal sem{h.signal_sem}")
    for flag in ("irq", "accumulate", "relu", "transpose", "row_scale"):
        if getattr(h.flags, flag):
            notes.append(flag)
    if notes:
        parts.append("[" + ", ".join(notes) + "]")
    return " ".join(parts)


@dataclass(frozen=True)
class Command:
    """One encoded command: the :data:`hw.isa.COMMAND_BYTES` bytes and their description."""
    raw: bytes

    @property
    def description(self) -> str:
        return describe_command(self.raw)


#: ``(semaphore, value)``: start once the semaphore reached ``value``
#: (:func:`hw.isa.sem_reached`: ``(sem - value) mod 2**32 < 2**31``, wrap-safe)
Wait = tuple[int, int] | None


class CommandList:
    """Builder of a command stream, encoded with :func:`hw.isa.encode`.

    Every method takes the header's synchronization arguments:

    wait : tuple of (int, int), optional
        ``(sem, value)``: the command starts once ``sem[sem]`` reached ``value``
        (``sem[sem] >= value`` in serial-number arithmetic, :func:`hw.isa.sem_reached`).
    signal : int, optional
        Semaphore incremented by one when the command retires.

    Field values are checked by :func:`hw.isa.encode` against the command layout: a value
    outside its field raises :class:`~sw.runtime.CommandFieldError` (a ``ValueError``) that
    names the command, the argument, the value and the field's range. A semaphore id is not
    checked against ``n_sems`` here (the device reports ``BAD_SEM``).
    """

    def __init__(self) -> None:
        self._commands: list[Command] = []

    def __len__(self) -> int:
        return len(self._commands)

    def __iter__(self) -> Iterator[Command]:
        return iter(self._commands)

    def __getitem__(self, i: int) -> Command:
        return self._commands[i]

    def extend(self, other: Iterable[Command]) -> None:
        """Append the commands of another list."""
        self._commands.extend(other)

    def append_raw(self, raw: bytes) -> None:
        """Append an already encoded command (for tests of malformed commands)."""
        if len(raw) != COMMAND_BYTES:
            raise ValueError(f"a command is {COMMAND_BYTES} bytes, got {len(raw)}")
        self._commands.append(Command(bytes(raw)))

    def _add(self, opcode: Opcode, body: dict | None, wait: Wait, signal: int | None,
             **flags: int) -> None:
        header: dict = {"opcode": opcode, "flags": dict(flags)}
        if wait is not None:
            header["flags"]["wait"] = 1
            header["wait_sem"], header["wait_value"] = wait
        if signal is not None:
            header["flags"]["signal"] = 1
            header["signal_sem"] = signal
        fields = {"header": header}
        if body is not None:
            fields["body"] = body
        try:
            raw = encode(fields)
        except ValueError as e:
            raise _field_error(opcode, e) from None
        self._commands.append(Command(raw))

    def _dma(self, opcode: Opcode, mem: LocalMem, dram_addr: int, dram_stride: int,
             row_bytes: int, n_rows: int, local_row: int, local_stride: int, wait: Wait,
             signal: int | None) -> None:
        body = {"dma": {"dram_addr": dram_addr, "dram_stride": dram_stride,
                        "row_bytes": row_bytes, "n_rows": n_rows, "local_row": local_row,
                        "local_stride": local_stride, "mem": LocalMem(mem)}}
        self._add(opcode, body, wait, signal)

    def dma_load(self, *, mem: LocalMem, dram_addr: int, dram_stride: int, row_bytes: int,
                 n_rows: int, local_row: int, local_stride: int, wait: Wait = None,
                 signal: int | None = None) -> None:
        """DRAM -> local memory, 2-D strided (see :class:`hw.isa.DmaBody`).

        Parameters
        ----------
        mem : LocalMem
            Scratchpad (rows of ``spad_row_bytes``) or accumulator (rows of ``acc_row_bytes``).
        dram_addr, dram_stride : int
            First DRAM row's byte address and the bytes between consecutive DRAM rows.
        row_bytes : int
            Bytes per DRAM row, a multiple of the local row size.
        n_rows : int
            Number of DRAM rows.
        local_row, local_stride : int
            First local row and the local rows between consecutive DRAM rows.
        """
        self._dma(Opcode.DMA_LOAD, mem, dram_addr, dram_stride, row_bytes, n_rows, local_row,
                  local_stride, wait, signal)

    def dma_store(self, *, mem: LocalMem, dram_addr: int, dram_stride: int, row_bytes: int,
                  n_rows: int, local_row: int, local_stride: int, wait: Wait = None,
                  signal: int | None = None) -> None:
        """Local memory -> DRAM, 2-D strided; parameters as :meth:`dma_load`."""
        self._dma(Opcode.DMA_STORE, mem, dram_addr, dram_stride, row_bytes, n_rows, local_row,
                  local_stride, wait, signal)

    def matmul(self, *, a_row: int, w_row: int, acc_row: int, m: int, accumulate: bool = False,
               transpose: bool = False, k_blocks: int = 1, w_fmt: int = 0, a_fmt: int = 0,
               x_base: int = 0, wait: Wait = None, signal: int | None = None) -> None:
        """``acc[acc_row+i] (+)= A[a_row+i] @ W[w_row:w_row+rows]`` for ``i < m`` (rows);
        ``transpose``: ``W[k, n] = spad[w_row + n][k]``; ``k_blocks`` (>= 1): the sum of that
        many tiles along K, tile ``j`` at ``a_row + j * m`` and ``w_row + j * rows`` (encoded
        as ``k_len = k_blocks - 1``, see :class:`hw.isa.MatmulBody`); ``w_fmt``, ``a_fmt``,
        ``x_base``: the operand formats (:mod:`hw.isa.formats`; tiles then span
        :func:`hw.isa.weight_tile_rows` and :func:`hw.isa.act_tile_rows` rows)."""
        body = {"matmul": {"a_row": a_row, "w_row": w_row, "acc_row": acc_row, "m": m,
                           "k_len": k_blocks - 1, "w_fmt": int(w_fmt), "a_fmt": int(a_fmt),
                           "x_base": x_base}}
        self._add(Opcode.MATMUL, body, wait, signal, accumulate=int(bool(accumulate)),
                  transpose=int(bool(transpose)))

    def requant(self, *, acc_row: int, spad_row: int, n_rows: int, param_row: int,
                relu: bool = False, scale_row: int | None = None, wait: Wait = None,
                signal: int | None = None) -> None:
        """``spad[spad_row+i] = requant(acc[acc_row+i])`` with parameters at ``param_row``;
        with ``scale_row``, each row is first scaled by its SOFTMAX reciprocal
        (``flags.row_scale``, see :class:`hw.isa.RequantBody`)."""
        body = {"requant": {"acc_row": acc_row, "spad_row": spad_row, "n_rows": n_rows,
                            "param_row": param_row, "scale_row": scale_row or 0}}
        self._add(Opcode.REQUANT, body, wait, signal, relu=int(bool(relu)),
                  row_scale=int(scale_row is not None))

    def softmax(self, *, acc_row: int, spad_row: int, n_rows: int, n_blocks: int, stride: int,
                scale_row: int, kv_len: int, mult: int, shift: int, causal: bool = False,
                q_offset: int = 0, wait: Wait = None, signal: int | None = None) -> None:
        """Integer softmax of ``n_rows`` score rows of ``n_blocks`` blocks (see
        :class:`hw.isa.SoftmaxBody`): P to ``spad_row``, reciprocals to ``scale_row``."""
        body = {"softmax": {"acc_row": acc_row, "spad_row": spad_row, "n_rows": n_rows,
                            "n_blocks": n_blocks, "stride": stride, "scale_row": scale_row,
                            "kv_len": kv_len, "q_offset": q_offset, "mult": mult,
                            "shift": shift, "causal": int(bool(causal))}}
        self._add(Opcode.SOFTMAX, body, wait, signal)

    def gelu(self, *, acc_row: int, spad_row: int, n_rows: int, param_row: int,
             wait: Wait = None, signal: int | None = None) -> None:
        """``spad[spad_row+i] = GELU(acc[acc_row+i])`` with four parameter rows at
        ``param_row`` (bias, m1, shifts ``s1 | s2 << 8``, m2; see :class:`hw.isa.RequantBody`
        and :func:`sw.golden.gelu_int`)."""
        body = {"requant": {"acc_row": acc_row, "spad_row": spad_row, "n_rows": n_rows,
                            "param_row": param_row}}
        self._add(Opcode.GELU, body, wait, signal)

    def _eltwise(self, opcode: Opcode, a_row: int, b_row: int, out_row: int, n_rows: int,
                 n_blocks: int, stride: int, param_row: int, shift: int, g_shift: int,
                 wait: Wait, signal: int | None) -> None:
        body = {"eltwise": {"a_row": a_row, "b_row": b_row, "out_row": out_row,
                            "n_rows": n_rows, "n_blocks": n_blocks, "stride": stride,
                            "param_row": param_row, "shift": shift, "g_shift": g_shift}}
        self._add(opcode, body, wait, signal)

    def add(self, *, a_row: int, b_row: int, out_row: int, n_rows: int, n_blocks: int,
            stride: int, param_row: int, shift: int, wait: Wait = None,
            signal: int | None = None) -> None:
        """ADD: ``out = requant(a * ma + b * mb)`` element-wise over ``n_rows`` rows of
        ``n_blocks`` blocks ``stride`` scratchpad rows apart, two parameter rows per block at
        ``param_row`` (see :class:`hw.isa.EltwiseBody`)."""
        self._eltwise(Opcode.ADD, a_row, b_row, out_row, n_rows, n_blocks, stride, param_row,
                      shift, 0, wait, signal)

    def layernorm(self, *, a_row: int, b_row: int, out_row: int, n_rows: int, n_blocks: int,
                  stride: int, param_row: int, shift: int, g_shift: int, wait: Wait = None,
                  signal: int | None = None) -> None:
        """LAYERNORM of ``a * ma + b * mb`` over each row's ``n_blocks`` blocks, four parameter
        rows per block at ``param_row`` (see :class:`hw.isa.EltwiseBody`)."""
        self._eltwise(Opcode.LAYERNORM, a_row, b_row, out_row, n_rows, n_blocks, stride,
                      param_row, shift, g_shift, wait, signal)

    def fence(self, *, addr: int, value: int = 0, irq: bool = False, timestamp: bool = False,
              wait: Wait = None, signal: int | None = None) -> None:
        """After all earlier commands of the queue retired: ``DRAM[addr] = value`` (32-bit;
        with ``timestamp`` the low 32 bits of the cycle counter instead), then irq."""
        body = {"fence": {"addr": addr, "value": value, "timestamp": int(bool(timestamp))}}
        self._add(Opcode.FENCE, body, wait, signal, irq=int(bool(irq)))

    def barrier(self, *, wait: Wait = None, signal: int | None = None) -> None:
        """Block the queue until all its earlier commands retired (a fence without the
        write); with ``signal``, increment that semaphore then."""
        self._add(Opcode.BARRIER, None, wait, signal)

    def wait(self, sem: int, value: int, *, signal: int | None = None) -> None:
        """Block the queue until ``sem[sem] >= value``."""
        self._add(Opcode.WAIT, None, (sem, value), signal)

    def signal(self, sem: int, *, wait: Wait = None) -> None:
        """Increment ``sem[sem]`` by one."""
        self._add(Opcode.SIGNAL, None, wait, sem)

    def nop(self, *, wait: Wait = None, signal: int | None = None) -> None:
        """Do nothing (still honours wait/signal)."""
        self._add(Opcode.NOP, None, wait, signal)

    def tlb_invalidate(self, *, asid: int | None = None, wait: Wait = None,
                       signal: int | None = None) -> None:
        """Once every earlier command of the queue retired, drop the TLB entries of address
        space ``asid``, or every entry if None (:mod:`hw.isa.vm`)."""
        body = {"tlb": {"all": 1} if asid is None else {"asid": asid}}
        self._add(Opcode.TLB_INVALIDATE, body, wait, signal)


def _field_error(opcode: Opcode, error: ValueError) -> CommandFieldError:
    """:func:`hw.isa.encode`'s ``ValueError`` as the runtime's typed error, naming the command,
    the argument (as the :class:`CommandList` method calls it), the value and the range."""
    match = _ENCODE_RANGE.search(str(error))
    if match is None:
        return CommandFieldError(f"{opcode.name}: {error}")
    name, value, bits = match[1], int(match[2]), int(match[3])
    arg = _HEADER_ARGS.get(name, name)
    return CommandFieldError(f"{opcode.name}: {arg}={value} does not fit in {bits} unsigned "
                             f"bits (field {name!r}: 0 .. {2**bits - 1})")
