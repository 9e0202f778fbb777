"""The engines of the functional model: DMA load and store, the matrix engine (systolic array),
the vector unit (requantization, softmax) and the fence write, over the model's DRAM image,
scratchpad and accumulator.

Each engine command is checked completely before anything is written (no partial transfers);
the error order and ``ERR_ADDR`` of each check are those of the RTL engines, as listed in
:mod:`sw.model`. Arithmetic comes from :mod:`sw.golden` / :mod:`sw.quant`.
"""

from __future__ import annotations

import numpy as np

from hw.config import NPUConfig
from hw.isa import CommandView, ErrorCode, LocalMem, Opcode
from sw.golden import requantize_rows, softmax_int
from sw.quant import requantize

__all__ = ["CommandError", "Engines"]

Window = tuple[int, int]  #: DRAM window ``[base, limit)`` of the issuing queue (bytes)


class CommandError(Exception):
    """A command failed with ``code``; ``addr`` is what the device reports in ``ERR_ADDR``."""

    def __init__(self, code: ErrorCode, addr: int) -> None:
        super().__init__(code, addr)
        self.code = code
        self.addr = addr


class Engines:
    """The local memories, the DRAM image and the engine commands that work on them.

    Parameters
    ----------
    config : NPUConfig
    counters : dict of str to int
        The model's live untimed counters; ``bytes_read`` and ``bytes_written`` are
        incremented here (DMA beats and bytes, fence words).

    Attributes
    ----------
    dram : bytearray
        Device DRAM, ``config.dram_bytes`` bytes.
    spad : numpy.ndarray
        Scratchpad, int8, shape ``(spad_rows, spad_row_bytes)``.
    acc : numpy.ndarray
        Accumulator, int32, shape ``(acc_rows, acc_row_elems)``.
    """

    def __init__(self, config: NPUConfig, counters: dict[str, int]) -> None:
        self.config = config
        self.counters = counters
        self.dram = bytearray(config.dram_bytes)
        self.spad = np.zeros((config.spad_rows, config.spad_row_bytes), dtype=np.int8)
        self.acc = np.zeros((config.acc_rows, config.acc_row_elems), dtype=np.int32)

    def execute(self, op: Opcode, cmd: CommandView, window: Window) -> None:
        """Run the engine part of command ``cmd`` (opcode ``op``); the processor-only opcodes
        (NOP, WAIT, SIGNAL, BARRIER) do nothing here.

        Raises
        ------
        CommandError
            If the command fails its checks; nothing was written.
        """
        flags, body = cmd.header.flags, cmd.body
        if op in (Opcode.DMA_LOAD, Opcode.DMA_STORE):
            # the undefined encodings of ``mem`` (2, 3) address the scratchpad, as in the RTL
            mem = LocalMem.ACC if body.dma.mem is LocalMem.ACC else LocalMem.SPAD
            self.dma(body.dma, mem, load=op == Opcode.DMA_LOAD, window=window)
        elif op == Opcode.MATMUL:
            self.matmul(body.matmul, accumulate=bool(flags.accumulate),
                        transpose=bool(flags.transpose))
        elif op == Opcode.REQUANT:
            self.requant(body.requant, relu=bool(flags.relu), row_scale=bool(flags.row_scale))
        elif op == Opcode.SOFTMAX:
            self.softmax(body.softmax)
        elif op == Opcode.FENCE:
            self.fence(body.fence, window)

    # -- DMA ------------------------------------------------------------------------------------

    def _local(self, mem: LocalMem) -> tuple[int, int]:
        """``(row bytes, depth)`` of a local memory."""
        c = self.config
        if mem == LocalMem.SPAD:
            return c.spad_row_bytes, c.spad_rows
        return c.acc_row_bytes, c.acc_rows

    def _check_dma(self, body: CommandView, mem: LocalMem, window: Window) -> None:
        """The DMA checks in the RTL's order: ``BAD_SIZE``, ``MISALIGNED`` (address, then
        stride), ``BAD_DRAM_ADDR``, ``WINDOW``, then ``BAD_LOCAL_ADDR``."""
        c = self.config
        local_row_bytes, depth = self._local(mem)
        n_rows, row_bytes = body.n_rows, body.row_bytes
        addr, stride = body.dram_addr, body.dram_stride
        if row_bytes % local_row_bytes:
            raise CommandError(ErrorCode.BAD_SIZE, addr)
        align = min(local_row_bytes, c.axi_data_bytes)
        if addr % align:
            raise CommandError(ErrorCode.MISALIGNED, addr)
        if stride % align:  # the first misaligned row address is that of row 1
            raise CommandError(ErrorCode.MISALIGNED, addr + stride)
        rows = _row_starts(addr, stride, n_rows)   # in increasing order: the first bad one
        for row_addr in rows:
            if row_addr + row_bytes > c.dram_bytes:
                raise CommandError(ErrorCode.BAD_DRAM_ADDR, row_addr)
        win_base, win_limit = window
        for row_addr in rows:   # then the issuing queue's window
            if row_addr < win_base or row_addr + row_bytes > win_limit:
                raise CommandError(ErrorCode.WINDOW, row_addr)
        lrows = row_bytes // local_row_bytes
        for first in _row_starts(body.local_row, body.local_stride, n_rows):
            if first + lrows > depth:
                raise CommandError(ErrorCode.BAD_LOCAL_ADDR, max(first, depth))

    def dma(self, body: CommandView, mem: LocalMem, load: bool, window: Window) -> None:
        """DMA_LOAD (``load``) or DMA_STORE of a :class:`hw.isa.DmaBody` on memory ``mem``.

        Counts ``bytes_read`` per load row in whole bus beats (the row start aligned down to
        its end aligned up) and ``bytes_written`` per store row in bytes.
        """
        n_rows, row_bytes = body.n_rows, body.row_bytes
        if n_rows == 0 or row_bytes == 0:
            return
        self._check_dma(body, mem, window)
        local_row_bytes, _ = self._local(mem)
        lrows = row_bytes // local_row_bytes
        addr, stride = body.dram_addr, body.dram_stride
        beat = self.config.axi_data_bytes
        if load:
            for r in range(n_rows):
                row_addr = addr + r * stride
                beats = -(-(row_addr + row_bytes) // beat) - row_addr // beat
                self.counters["bytes_read"] += beat * beats
        else:
            self.counters["bytes_written"] += n_rows * row_bytes
        dram = np.frombuffer(self.dram, dtype=np.uint8)
        local_mem, dtype = (self.spad, np.int8) if mem == LocalMem.SPAD else (self.acc, "<i4")
        for r in range(n_rows):
            row_addr = addr + r * stride
            first = body.local_row + r * body.local_stride
            local = local_mem[first:first + lrows].reshape(-1)
            if load:
                local[:] = dram[row_addr:row_addr + row_bytes].view(dtype)
            else:
                dram[row_addr:row_addr + row_bytes] = local.astype(dtype).view(np.uint8)

    # -- matrix engine --------------------------------------------------------------------------

    def matmul(self, body: CommandView, accumulate: bool, transpose: bool = False) -> None:
        """MATMUL (:class:`hw.isa.MatmulBody`): int8 x int8 into int32, wrapping; the sum of
        ``k_len + 1`` tiles along K."""
        c = self.config
        m = body.m
        if m == 0:
            return
        if transpose and c.rows != c.cols:
            raise CommandError(ErrorCode.BAD_SIZE, 0)
        blocks = body.k_len + 1
        for row, n, depth in ((body.a_row, blocks * m, c.spad_rows),
                              (body.w_row, blocks * c.rows, c.spad_rows)):
            if row + n > depth:
                raise CommandError(ErrorCode.BAD_LOCAL_ADDR, max(row, depth))
        if body.acc_row + m > c.acc_rows:
            raise CommandError(ErrorCode.BAD_LOCAL_ADDR, max(body.acc_row, c.acc_rows))
        out = np.zeros((m, c.cols), dtype=np.int64)
        for j in range(blocks):
            a0, w0 = body.a_row + j * m, body.w_row + j * c.rows
            a = self.spad[a0:a0 + m, :c.rows].astype(np.int64)
            if transpose:  # array column n <- spad row w_row + n (rows == cols)
                w = self.spad[w0:w0 + c.cols, :c.rows].astype(np.int64).T
            else:
                w = self.spad[w0:w0 + c.rows, :c.cols].astype(np.int64)
            out += a @ w
        dst = self.acc[body.acc_row:body.acc_row + m]
        if accumulate:
            out = out + dst[:, :c.cols]
        dst[:, :c.cols] = out.astype(np.int32)  # wraps modulo 2**32
        dst[:, c.cols:] = 0

    # -- vector unit ----------------------------------------------------------------------------

    def requant(self, body: CommandView, relu: bool, row_scale: bool = False) -> None:
        """REQUANT (:class:`hw.isa.RequantBody`); the multiplier is the low 31 bits and the
        shift the low 6 bits of their accumulator words (the vector unit's register
        widths)."""
        c = self.config
        n = body.n_rows
        if n == 0:
            return
        if body.acc_row + n > c.acc_rows:
            raise CommandError(ErrorCode.BAD_LOCAL_ADDR, max(body.acc_row, c.acc_rows))
        if body.spad_row + n > c.spad_rows:
            raise CommandError(ErrorCode.BAD_LOCAL_ADDR, max(body.spad_row, c.spad_rows))
        if body.param_row + 3 > c.acc_rows:
            raise CommandError(ErrorCode.BAD_LOCAL_ADDR, max(body.param_row, c.acc_rows))
        n_scale = (n - 1) // c.cols + 1
        if row_scale and body.scale_row + n_scale > c.acc_rows:
            raise CommandError(ErrorCode.BAD_LOCAL_ADDR, max(body.scale_row, c.acc_rows))
        p = self.acc[body.param_row:body.param_row + 3, :c.cols].astype(np.int64)
        bias = p[0]
        mult = p[1] & 0x7FFF_FFFF
        shift = p[2] & 0x3F
        acc = self.acc[body.acc_row:body.acc_row + n, :c.cols]
        if row_scale:
            recip = self.acc[body.scale_row:body.scale_row + n_scale, :c.cols].astype(np.int64)
            recip = recip.reshape(-1)[:n] & 0x7FFF_FFFF
            out = requantize_rows(acc, recip, bias, mult, shift, relu=relu)
        else:
            out = requantize(acc, bias, mult, shift, relu=relu)
        dst = self.spad[body.spad_row:body.spad_row + n]
        dst[:, :c.cols] = out
        dst[:, c.cols:] = 0

    def softmax(self, body: CommandView) -> None:
        """SOFTMAX (:class:`hw.isa.SoftmaxBody`) with :func:`sw.golden.softmax_int`."""
        c = self.config
        n, nb, stride = body.n_rows, body.n_blocks, body.stride
        if n == 0 or nb == 0:
            return
        span = (nb - 1) * stride + n
        for start, depth in ((body.acc_row, c.acc_rows), (body.spad_row, c.spad_rows)):
            if start + span > depth:
                raise CommandError(ErrorCode.BAD_LOCAL_ADDR, max(start, depth))
        n_scale = (n - 1) // c.cols + 1
        if body.scale_row + n_scale > c.acc_rows:
            raise CommandError(ErrorCode.BAD_LOCAL_ADDR, max(body.scale_row, c.acc_rows))
        blocks = [body.acc_row + b * stride for b in range(nb)]
        scores = np.concatenate([self.acc[r:r + n, :c.cols] for r in blocks], axis=1)
        p, _, recip = softmax_int(scores, mult=body.mult, shift=body.shift, kv_len=body.kv_len,
                                  causal=bool(body.causal), q_offset=body.q_offset)
        for b in range(nb):
            dst = self.spad[body.spad_row + b * stride:body.spad_row + b * stride + n]
            dst[:, :c.cols] = p[:, b * c.cols:(b + 1) * c.cols]
            dst[:, c.cols:] = 0
        rec = np.zeros(n_scale * c.cols, np.int64)
        rec[:n] = recip
        dst = self.acc[body.scale_row:body.scale_row + n_scale]
        dst[:, :c.cols] = rec.reshape(n_scale, c.cols).astype(np.int32)
        dst[:, c.cols:] = 0

    # -- fence ----------------------------------------------------------------------------------

    def fence(self, body: CommandView, window: Window) -> None:
        """FENCE's write (:class:`hw.isa.FenceBody`): ``value``, or with ``timestamp`` the
        cycle counter, which is 0 on the untimed model. The interrupt is the caller's."""
        addr = body.addr
        if addr % 4:
            raise CommandError(ErrorCode.MISALIGNED, addr)
        if addr + 4 > self.config.dram_bytes:
            raise CommandError(ErrorCode.BAD_DRAM_ADDR, addr)
        win_base, win_limit = window
        if addr < win_base or addr + 4 > win_limit:
            raise CommandError(ErrorCode.WINDOW, addr)
        value = 0 if body.timestamp else body.value
        self.dram[addr:addr + 4] = value.to_bytes(4, "little")
        self.counters["bytes_written"] += 4


def _row_starts(first: int, stride: int, n_rows: int) -> list[int]:
    """Start of each of ``n_rows`` rows ``stride`` apart; one row when the stride is 0 (every
    row is the same, so the first check decides)."""
    return [first] if stride == 0 else [first + r * stride for r in range(n_rows)]
