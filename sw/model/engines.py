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
from hw.isa import (
    E8M0_BIAS,
    LN_MAX_ELEMS,
    TLB_CLIENTS,
    VM_PAGE_BYTES,
    VM_PAGE_SHIFT,
    ActFormat,
    CommandView,
    DmaRow,
    ErrorCode,
    Fault,
    LocalMem,
    Opcode,
    TlbModel,
    VmWord,
    WeightFormat,
    act_row_offset,
    act_tile_rows,
    dma_bursts,
    eltwise_param_rows,
    fault_addr,
    format_error,
    is_mx,
    unpack_fields,
    walk,
    weight_tile_rows,
)
from sw.golden import add_int, gelu_int, layernorm_int, mx_align, requantize_rows, softmax_int
from sw.model.faults import BusFault
from sw.quant import requantize
from sw.quant_formats import unpack_int4

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
    fault : BusFault or None
        The bus fault the DRAM answers with (:mod:`sw.model.faults`); ``None``: none.
    """

    def __init__(self, config: NPUConfig, counters: dict[str, int]) -> None:
        self.config = config
        self.counters = counters
        self.fault: BusFault | None = None
        self.dram = bytearray(config.dram_bytes)
        self.spad = np.zeros((config.spad_rows, config.spad_row_bytes), dtype=np.int8)
        self.acc = np.zeros((config.acc_rows, config.acc_row_elems), dtype=np.int32)
        #: the TLB of each DMA channel (:mod:`hw.isa.vm`), filled in command order
        self.tlbs = ({c: TlbModel(config.tlb_entries) for c in TLB_CLIENTS}
                     if config.tlb_entries else {})

    def execute(self, op: Opcode, cmd: CommandView, window: Window, vm: int = 0) -> None:
        """Run the engine part of command ``cmd`` (opcode ``op``) of a queue whose ``Q_VM`` is
        ``vm``; the processor-only opcodes (NOP, WAIT, SIGNAL, BARRIER) do nothing here,
        TLB_INVALIDATE invalidates the TLBs.

        Raises
        ------
        CommandError
            If the command fails its checks (nothing was written) or takes a page fault
            (what it wrote before: :mod:`hw.isa.vm`).
        """
        flags, body = cmd.header.flags, cmd.body
        if op in (Opcode.DMA_LOAD, Opcode.DMA_STORE):
            # the undefined encodings of ``mem`` (2, 3) address the scratchpad, as in the RTL
            mem = LocalMem.ACC if body.dma.mem is LocalMem.ACC else LocalMem.SPAD
            self.dma(body.dma, mem, load=op == Opcode.DMA_LOAD, window=window, vm=vm)
        elif op == Opcode.TLB_INVALIDATE:
            for tlb in self.tlbs.values():
                tlb.invalidate(bool(body.tlb.all), body.tlb.asid)
        elif op == Opcode.MATMUL:
            self.matmul(body.matmul, accumulate=bool(flags.accumulate),
                        transpose=bool(flags.transpose))
        elif op == Opcode.REQUANT:
            self.requant(body.requant, relu=bool(flags.relu), row_scale=bool(flags.row_scale))
        elif op == Opcode.SOFTMAX:
            self.softmax(body.softmax)
        elif op == Opcode.GELU:
            self.gelu(body.requant)
        elif op in (Opcode.ADD, Opcode.LAYERNORM):
            self.eltwise(body.eltwise, op)
        elif op == Opcode.FENCE:
            self.fence(body.fence, window, vm)

    # -- DMA ------------------------------------------------------------------------------------

    def _local(self, mem: LocalMem) -> tuple[int, int]:
        """``(row bytes, depth)`` of a local memory."""
        c = self.config
        if mem == LocalMem.SPAD:
            return c.spad_row_bytes, c.spad_rows
        return c.acc_row_bytes, c.acc_rows

    def _check_dma(self, body: CommandView, mem: LocalMem, window: Window) -> None:
        """The DMA checks in the RTL's order: ``BAD_DRAM_ADDR``, ``WINDOW``, then
        ``BAD_LOCAL_ADDR`` (any byte address, stride and length is accepted)."""
        c = self.config
        local_row_bytes, depth = self._local(mem)
        n_rows, row_bytes = body.n_rows, body.row_bytes
        rows = _row_starts(body.dram_addr, body.dram_stride, n_rows)   # increasing: the first
        for row_addr in rows:                                          # bad one is reported
            if row_addr + row_bytes > c.dram_bytes:
                raise CommandError(ErrorCode.BAD_DRAM_ADDR, row_addr)
        win_base, win_limit = window
        for row_addr in rows:   # then the issuing queue's window
            if row_addr < win_base or row_addr + row_bytes > win_limit:
                raise CommandError(ErrorCode.WINDOW, row_addr)
        lrows = -(-row_bytes // local_row_bytes)
        for first in _row_starts(body.local_row, body.local_stride, n_rows):
            if first + lrows > depth:
                raise CommandError(ErrorCode.BAD_LOCAL_ADDR, max(first, depth))

    def dma(self, body: CommandView, mem: LocalMem, load: bool, window: Window,
            vm: int = 0) -> None:
        """DMA_LOAD (``load``) or DMA_STORE of a :class:`hw.isa.DmaBody` on memory ``mem``.

        DRAM row ``r`` (``row_bytes`` bytes at any byte address) is a byte copy of
        ``ceil(row_bytes / L)`` local rows; a load writes the bytes of a partial last local row
        beyond the DRAM row as 0, a store writes only the DRAM row's bytes.

        Counts ``bytes_read`` per load row in whole bus beats (the row start aligned down to
        its end aligned up) and ``bytes_written`` per store row in bytes.

        Under a bus fault (:attr:`fault`) the transfer runs to its end as on the RTL
        (:class:`hw.dma.DMA`): a load writes the local rows whose last byte arrived before
        the first failing burst and no row after it; a store writes every burst but the
        failing ones. Then it raises ``AXI_ERROR`` with the first failing burst's address.
        """
        n_rows, row_bytes = body.n_rows, body.row_bytes
        if n_rows == 0 or row_bytes == 0:
            return
        if self.tlbs and unpack_fields(VmWord, vm).enable:
            self._dma_virtual(body, mem, load, vm)
            return
        self._check_dma(body, mem, window)
        local_row_bytes, _ = self._local(mem)
        lrows = -(-row_bytes // local_row_bytes)
        addr, stride = body.dram_addr, body.dram_stride
        beat = self.config.axi_data_bytes
        if load:
            for r in range(n_rows):
                row_addr = addr + r * stride
                beats = -(-(row_addr + row_bytes) // beat) - row_addr // beat
                self.counters["bytes_read"] += beat * beats
        else:
            self.counters["bytes_written"] += n_rows * row_bytes
        failed = self._failing_bursts(body, mem, write=not load)
        local_mem, dtype = (self.spad, np.int8) if mem == LocalMem.SPAD else (self.acc, "<i4")
        if (not failed and (mem == LocalMem.SPAD or np.little_endian)
                and _disjoint(n_rows, body.local_stride if load else stride,
                              lrows if load else row_bytes)):
            # every row at once: no row overwrites another's destination, so the order of
            # the row copies below does not matter. Strided byte views of the DRAM rows and
            # of their local rows (the accumulator's words are little endian in DRAM: on a
            # big-endian host the loop below converts them)
            row_span = lrows * local_row_bytes
            dram_rows = np.ndarray((n_rows, row_bytes), np.uint8, self.dram, addr, (stride, 1))
            local_rows = np.ndarray((n_rows, row_span), np.uint8, local_mem,
                                    body.local_row * local_row_bytes,
                                    (body.local_stride * local_row_bytes, 1))
            if load:
                if row_span > row_bytes:
                    local_rows[:, row_bytes:] = 0
                local_rows[:, :row_bytes] = dram_rows
            else:
                dram_rows[...] = local_rows[:, :row_bytes]
            return
        dram = np.frombuffer(self.dram, dtype=np.uint8)
        for r in range(n_rows):
            row_addr = addr + r * stride
            first = body.local_row + r * body.local_stride
            if load:
                raw = np.zeros(lrows * local_row_bytes, dtype=np.uint8)
                raw[:row_bytes] = dram[row_addr:row_addr + row_bytes]
                stop = _load_cut(failed, r, row_addr, row_bytes, beat, local_row_bytes)
                local_mem[first:first + stop] = raw.view(dtype).reshape(lrows, -1)[:stop]
                if stop < lrows:
                    break
            else:
                keep = dram[row_addr:row_addr + row_bytes].copy()
                raw = local_mem[first:first + lrows].astype(dtype).view(np.uint8).reshape(-1)
                dram[row_addr:row_addr + row_bytes] = raw[:row_bytes]
                for b in failed:
                    if b.row == r:    # a failing write burst writes nothing
                        lo = max(b.addr, row_addr) - row_addr
                        hi = min(b.addr + b.beats * beat, row_addr + row_bytes) - row_addr
                        dram[row_addr + lo:row_addr + hi] = keep[lo:hi]
        if failed:
            raise CommandError(ErrorCode.AXI_ERROR, failed[0].addr)

    # -- DMA with translation (hw.isa.vm) --------------------------------------------------------

    def _dma_virtual(self, body: CommandView, mem: LocalMem, load: bool, vm: int) -> None:
        """A DMA of a queue with translation on (:mod:`hw.isa.vm`): virtual addresses checked
        only for wrapping past ``2**32`` (no window), every burst translated by the channel's
        TLB or a walk (whose entry reads count in ``bytes_read``), the transfer cut at the
        first burst that faults (a load keeps the rows completed before it, a store writes the
        bursts before it) and the fault raised with its virtual address."""
        c = self.config
        if self.fault is not None:
            raise NotImplementedError("bus faults are not modelled on translated DMA")
        local_row_bytes, depth = self._local(mem)
        n_rows, row_bytes = body.n_rows, body.row_bytes
        addr, stride = body.dram_addr, body.dram_stride
        for row_addr in _row_starts(addr, stride, n_rows):
            if row_addr + row_bytes > 1 << 32:
                raise CommandError(ErrorCode.BAD_DRAM_ADDR, row_addr)
        lrows = -(-row_bytes // local_row_bytes)
        for first in _row_starts(body.local_row, body.local_stride, n_rows):
            if first + lrows > depth:
                raise CommandError(ErrorCode.BAD_LOCAL_ADDR, max(first, depth))
        client = "load" if load else "store"
        tlb, asid = self.tlbs[client], unpack_fields(VmWord, vm).asid
        beat = c.axi_data_bytes
        bursts = dma_bursts(c, addr, stride, row_bytes, n_rows, mem)
        pages: dict[int, int] = {}        # virtual page -> physical page address
        fault = None                      # (burst index, code)
        for k, b in enumerate(bursts):
            vpn = b.addr >> VM_PAGE_SHIFT
            t = tlb.lookup(asid, vpn)
            if t is None:
                self.counters[f"tlb.{client}.misses"] += 1
                t, reads = walk(self._read_word, vm, b.addr, c.dram_bytes)
                self.counters["bytes_read"] += beat * len(reads)
                if isinstance(t, Fault):
                    fault = (k, t.code)
                    break
                tlb.fill(t)
            else:
                self.counters[f"tlb.{client}.hits"] += 1
            if not t.allows(write=not load):
                fault = (k, ErrorCode.PAGE_PERMISSION)
                break
            pages[vpn] = t.physical(vpn << VM_PAGE_SHIFT)
        cut = bursts[fault[0]] if fault else None
        dram = np.frombuffer(self.dram, dtype=np.uint8)

        def pieces(va: int, n: int):
            """(physical address, offset in the row, length) of each page piece."""
            off = 0
            while off < n:
                take = min(n - off, VM_PAGE_BYTES - (va + off) % VM_PAGE_BYTES)
                pa = pages[(va + off) >> VM_PAGE_SHIFT] + (va + off) % VM_PAGE_BYTES
                yield pa, off, take
                off += take

        local_mem, dtype = (self.spad, np.int8) if mem == LocalMem.SPAD else (self.acc, "<i4")
        if load:
            issued = bursts if cut is None else bursts[:fault[0]]
            self.counters["bytes_read"] += beat * sum(b.beats for b in issued)
        for r in range(n_rows):
            row_addr = addr + r * stride
            if cut is not None and r > cut.row:
                break
            first = body.local_row + r * body.local_stride
            if load:
                stop = _load_cut([cut] if cut else [], r, row_addr, row_bytes, beat,
                                 local_row_bytes)
                if stop:
                    raw = np.zeros(lrows * local_row_bytes, dtype=np.uint8)
                    avail = row_bytes if cut is None or r < cut.row else min(
                        row_bytes, stop * local_row_bytes)
                    for pa, off, n in pieces(row_addr, avail):
                        raw[off:off + n] = dram[pa:pa + n]
                    local_mem[first:first + stop] = raw.view(dtype).reshape(lrows, -1)[:stop]
            else:
                n = row_bytes if cut is None or r < cut.row else \
                    fault_addr(row_addr, cut.addr) - row_addr
                raw = local_mem[first:first + lrows].astype(dtype).view(np.uint8).reshape(-1)
                for pa, off, k in pieces(row_addr, n):
                    dram[pa:pa + k] = raw[off:off + k]
                self.counters["bytes_written"] += n
        if fault is not None:
            self.counters[f"tlb.{client}.faults"] += 1
            raise CommandError(fault[1], fault_addr(addr + cut.row * stride, cut.addr))

    def translates(self, vm: int) -> bool:
        """Whether a queue whose ``Q_VM`` is ``vm`` has virtual addresses."""
        return bool(self.tlbs) and bool(unpack_fields(VmWord, vm).enable)

    def translate_fetch(self, vm: int, va: int, write: bool) -> int:
        """The physical address of a ring slot (``write`` False) or a fence word of a
        translating queue, by a page walk (:func:`hw.isa.walk`). The fetch's TLB, its
        counters and its walks' bytes depend on how far the hardware's fetch reads ahead
        (``tlb.fetch.*`` are timing counters), so the model walks every time and counts none
        of them.

        Raises
        ------
        CommandError
            ``PAGE_NOT_MAPPED`` or ``PAGE_PERMISSION`` at ``va``.
        """
        t, _ = walk(self._read_word, vm, va, self.config.dram_bytes)
        if isinstance(t, Fault):
            raise CommandError(t.code, va)
        if not t.allows(write=write):
            raise CommandError(ErrorCode.PAGE_PERMISSION, va)
        return t.physical(va)

    def _read_word(self, pa: int) -> int:
        return int.from_bytes(self.dram[pa:pa + 4], "little")

    def _failing_bursts(self, body: CommandView, mem: LocalMem, write: bool) -> list:
        """The bursts of a checked transfer that the DRAM answers with an error, in bus
        order (:func:`hw.isa.dma_bursts`)."""
        if self.fault is None:
            return []
        beat = self.config.axi_data_bytes
        bursts = dma_bursts(self.config, body.dram_addr, body.dram_stride, body.row_bytes,
                            body.n_rows, mem)
        return [b for b in bursts if self.fault.hits(write, b.addr, b.beats, beat)]

    def fence_fails(self, addr: int) -> bool:
        """Whether the one-beat write burst of a fence to ``addr`` fails."""
        beat = self.config.axi_data_bytes
        return self.fault is not None and self.fault.hits(True, addr, 1, beat)

    def fetch_fails(self, slot_addr: int, n_bytes: int) -> bool:
        """Whether the read burst of a ring fetch (``n_bytes`` from ``slot_addr``) fails."""
        beat = self.config.axi_data_bytes
        return self.fault is not None and self.fault.hits(False, slot_addr, n_bytes // beat, beat)

    # -- matrix engine --------------------------------------------------------------------------

    def matmul(self, body: CommandView, accumulate: bool, transpose: bool = False) -> None:
        """MATMUL (:class:`hw.isa.MatmulBody`): the sum of ``k_len + 1`` tiles along K into
        int32, wrapping; int8, int4 and MXINT8 operands (:mod:`hw.isa.formats`), an MX
        command's tiles aligned by :func:`sw.golden.mx_align`."""
        c = self.config
        m = body.m
        if m == 0:
            return
        w_fmt, a_fmt = int(body.w_fmt), int(body.a_fmt)
        if (transpose and c.rows != c.cols) or format_error(c, w_fmt, a_fmt, transpose):
            raise CommandError(ErrorCode.BAD_SIZE, 0)
        blocks = body.k_len + 1
        w_tile = weight_tile_rows(c, w_fmt)
        a_tile = act_tile_rows(c, m, a_fmt)
        for row, n, depth in ((body.a_row, blocks * a_tile, c.spad_rows),
                              (body.w_row, blocks * w_tile, c.spad_rows)):
            if row + n > depth:
                raise CommandError(ErrorCode.BAD_LOCAL_ADDR, max(row, depth))
        if body.acc_row + m > c.acc_rows:
            raise CommandError(ErrorCode.BAD_LOCAL_ADDR, max(body.acc_row, c.acc_rows))
        # activation tiles: (blocks, m, rows) elements (MXINT8: skipping the exponent rows)
        a_tiles = self.spad[body.a_row:body.a_row + blocks * a_tile].reshape(blocks, a_tile, -1)
        offsets = [act_row_offset(c, i, a_fmt) for i in range(m)]
        a = a_tiles[:, offsets, :c.rows]
        w_tiles = self.spad[body.w_row:body.w_row + blocks * w_tile].reshape(blocks, w_tile, -1)
        if w_fmt == WeightFormat.INT4:
            w = np.stack([unpack_int4(t[:, :c.cols], c.rows) for t in w_tiles])
        elif transpose:   # array column n <- spad row w_row + n (rows == cols), per block
            w = w_tiles[:, :, :c.rows].transpose(0, 2, 1)
        else:
            w = w_tiles[:, :c.rows, :c.cols]
        if is_mx(w_fmt, a_fmt):
            out = self._mx_tiles(a, w, a_tiles, w_tiles, m, w_fmt, a_fmt, body.x_base)
        else:
            # The K blocks side by side make one product: A (m, blocks*rows) x W
            # (blocks*rows, cols). In float64 (BLAS) it is exact: |sum| <= blocks * rows *
            # 2**14 < 2**53; the accumulation wraps modulo 2**32 as in the accumulator.
            a2 = a.transpose(1, 0, 2).reshape(m, blocks * c.rows)
            w2 = w.reshape(blocks * c.rows, c.cols)
            out = (a2.astype(np.float64) @ w2.astype(np.float64)).astype(np.int64)
        out = out.astype(np.int32)
        dst = self.acc[body.acc_row:body.acc_row + m]
        if accumulate:
            dst[:, :c.cols] += out
        else:
            dst[:, :c.cols] = out
        if dst.shape[1] > c.cols:
            dst[:, c.cols:] = 0

    def _mx_tiles(self, a: np.ndarray, w: np.ndarray, a_tiles: np.ndarray, w_tiles: np.ndarray,
                  m: int, w_fmt: int, a_fmt: int, x_base: int) -> np.ndarray:
        """The sum over K tiles of each tile's exact product aligned by ``xa + xw - x_base``
        (the array's exponent stage), int64 modulo 2**32 (the caller wraps to int32)."""
        c = self.config
        p = np.einsum("bmk,bkn->bmn", a.astype(np.int64), w.astype(np.int64))
        if a_fmt == ActFormat.MXINT8:
            g = c.spad_row_bytes
            xa = np.stack([np.concatenate([t[q * (g + 1)].view(np.uint8)
                                           for q in range(-(-m // g))])[:m] for t in a_tiles])
        else:
            xa = np.full((len(a_tiles), m), E8M0_BIAS)
        if w_fmt == WeightFormat.MXINT8:
            xw = w_tiles[:, c.rows, :c.cols].view(np.uint8)
        else:
            xw = np.full((len(w_tiles), c.cols), E8M0_BIAS)
        d = xa.astype(np.int64)[:, :, None] + xw.astype(np.int64)[:, None, :] - int(x_base)
        return mx_align(p, d).sum(axis=0) & 0xFFFF_FFFF

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
        p = self.acc[body.param_row:body.param_row + 3, :c.cols]
        bias = p[0]                                # int32: in range by its type
        mult = p[1].astype(np.int64) & 0x7FFF_FFFF
        shift = p[2].astype(np.int64) & 0x3F
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
        """SOFTMAX (:class:`hw.isa.SoftmaxBody`) with :func:`sw.golden.softmax_int`, in the
        ISA's order: groups of ``cols`` rows, each group's scale row written before the next
        group's scores are read."""
        c = self.config
        n, nb, stride = body.n_rows, body.n_blocks, body.stride
        if n == 0 or nb == 0:
            return
        if nb > 1 and stride < n:     # overlapping P blocks
            raise CommandError(ErrorCode.BAD_SIZE, stride)
        span = (nb - 1) * stride + n
        for start, depth in ((body.acc_row, c.acc_rows), (body.spad_row, c.spad_rows)):
            if start + span > depth:
                raise CommandError(ErrorCode.BAD_LOCAL_ADDR, max(start, depth))
        n_scale = (n - 1) // c.cols + 1
        if body.scale_row + n_scale > c.acc_rows:
            raise CommandError(ErrorCode.BAD_LOCAL_ADDR, max(body.scale_row, c.acc_rows))
        for g in range(n_scale):
            first, rows = g * c.cols, min(c.cols, n - g * c.cols)
            self._softmax_group(body, first, rows, g)

    def _softmax_group(self, body: CommandView, first: int, rows: int, group: int) -> None:
        """Score rows ``first .. first + rows - 1`` of a SOFTMAX: P, then scale row
        ``scale_row + group``."""
        c = self.config
        nb, stride = body.n_blocks, body.stride
        blocks = [body.acc_row + b * stride + first for b in range(nb)]
        scores = np.concatenate([self.acc[r:r + rows, :c.cols] for r in blocks], axis=1)
        p, _, recip = softmax_int(scores, mult=body.mult, shift=body.shift, kv_len=body.kv_len,
                                  causal=bool(body.causal), q_offset=body.q_offset + first)
        for b in range(nb):
            row = body.spad_row + b * stride + first
            dst = self.spad[row:row + rows]
            dst[:, :c.cols] = p[:, b * c.cols:(b + 1) * c.cols]
            dst[:, c.cols:] = 0
        rec = np.zeros(self.config.acc_row_elems, np.int64)
        rec[:rows] = recip
        self.acc[body.scale_row + group] = rec.astype(np.int32)

    def gelu(self, body: CommandView) -> None:
        """GELU (:class:`hw.isa.RequantBody`'s GELU form) with :func:`sw.golden.gelu_int`:
        REQUANT's checks with four parameter rows."""
        c = self.config
        n = body.n_rows
        if n == 0:
            return
        for start, count, depth in ((body.acc_row, n, c.acc_rows), (body.spad_row, n, c.spad_rows),
                                    (body.param_row, 4, c.acc_rows)):
            if start + count > depth:
                raise CommandError(ErrorCode.BAD_LOCAL_ADDR, max(start, depth))
        p = self.acc[body.param_row:body.param_row + 4, :c.cols].astype(np.int64)
        shifts = p[2] & 0x3FFF
        out = gelu_int(self.acc[body.acc_row:body.acc_row + n, :c.cols], p[0],
                       p[1] & 0x7FFF_FFFF, shifts & 0x3F, p[3] & 0x7FFF_FFFF,
                       (shifts >> 8) & 0x3F)
        dst = self.spad[body.spad_row:body.spad_row + n]
        dst[:, :c.cols] = out
        dst[:, c.cols:] = 0

    def eltwise(self, body: CommandView, op: Opcode) -> None:
        """ADD or LAYERNORM (:class:`hw.isa.EltwiseBody`) with :func:`sw.golden.add_int` /
        :func:`sw.golden.layernorm_int`, checked in the ISA's order."""
        c = self.config
        n, nb, stride = body.n_rows, body.n_blocks, body.stride
        if n == 0 or nb == 0:
            return
        if nb > 1 and stride < n:
            raise CommandError(ErrorCode.BAD_SIZE, stride)
        if op == Opcode.LAYERNORM and nb * c.cols > LN_MAX_ELEMS:
            raise CommandError(ErrorCode.BAD_SIZE, nb)
        span = (nb - 1) * stride + n
        for start in (body.a_row, body.b_row):
            if body.out_row < start + span and start < body.out_row + span:
                raise CommandError(ErrorCode.BAD_SIZE, body.out_row)
        n_param = eltwise_param_rows(op, nb)
        for start, count, depth in ((body.a_row, span, c.spad_rows),
                                    (body.b_row, span, c.spad_rows),
                                    (body.out_row, span, c.spad_rows),
                                    (body.param_row, n_param, c.acc_rows)):
            if start + count > depth:
                raise CommandError(ErrorCode.BAD_LOCAL_ADDR, max(start, depth))

        def blocked(row: int) -> np.ndarray:       # (n, nb * cols): block b side by side
            return np.concatenate([self.spad[row + b * stride:row + b * stride + n, :c.cols]
                                   for b in range(nb)], axis=1)

        per = n_param // nb
        p = self.acc[body.param_row:body.param_row + n_param, :c.cols].astype(np.int64)
        p = p.reshape(nb, per, c.cols).transpose(1, 0, 2).reshape(per, nb * c.cols)
        a, b = blocked(body.a_row), blocked(body.b_row)
        ma, mb = p[0] & 0x7FFF_FFFF, p[1] & 0x7FFF_FFFF
        if op == Opcode.ADD:
            out = add_int(a, b, ma, mb, body.shift)
        else:
            mag = p[2] & 0x7FFF_FFFF
            gamma = np.where(p[2] < 0, -mag, mag)
            out = layernorm_int(a, b, ma, mb, body.shift, gamma, p[3], body.g_shift)
        for blk in range(nb):
            dst = self.spad[body.out_row + blk * stride:body.out_row + blk * stride + n]
            dst[:, :c.cols] = out[:, blk * c.cols:(blk + 1) * c.cols]
            dst[:, c.cols:] = 0

    # -- fence ----------------------------------------------------------------------------------

    def fence(self, body: CommandView, window: Window, vm: int = 0) -> None:
        """FENCE's write (:class:`hw.isa.FenceBody`): ``value``, or with ``timestamp`` the
        cycle counter, which is 0 on the untimed model. The interrupt is the caller's. With a
        translating ``vm`` the address is virtual (:meth:`translate_fetch`)."""
        addr = body.addr
        if addr % 4:
            raise CommandError(ErrorCode.MISALIGNED, addr)
        if self.translates(vm):
            addr = self.translate_fetch(vm, addr, write=True)
        else:
            if addr + 4 > self.config.dram_bytes:
                raise CommandError(ErrorCode.BAD_DRAM_ADDR, addr)
            win_base, win_limit = window
            if addr < win_base or addr + 4 > win_limit:
                raise CommandError(ErrorCode.WINDOW, addr)
        value = 0 if body.timestamp else body.value
        self.counters["bytes_written"] += 4
        if self.fence_fails(addr):
            raise CommandError(ErrorCode.AXI_ERROR, addr)   # nothing written
        self.dram[addr:addr + 4] = value.to_bytes(4, "little")


def _load_cut(failed: list, row: int, row_addr: int, row_bytes: int, beat: int,
              local_row_bytes: int) -> int:
    """How many local rows of DRAM row ``row`` a load writes before the first failing burst
    (``failed[0]``): all of a row before it, none after it, and in its row those whose last
    chunk the DMA moves with an R beat before the burst's first beat.

    A chunk of word ``w`` (:class:`hw.isa.timing.DmaRow`) moves with beat ``w``, or beat
    ``w + 1`` when the row is shifted (``s > 0``), and the flush word with the row's last beat
    (``hw.dma.align.Unpacker``: a word that uses a failing beat writes nothing, and nothing
    after it is written)."""
    lrows = -(-row_bytes // local_row_bytes)
    if not failed or row < failed[0].row:
        return lrows
    if row > failed[0].row:
        return 0
    row_layout = DmaRow(row_addr, row_bytes, beat, local_row_bytes)
    n = row_layout.chunks_before(row_layout.words)
    first_beat = row_addr - row_addr % beat
    period = row_layout.period
    for j in range(lrows):
        chunk = min((j + 1) * period, n) - 1          # the chunk that completes local row j
        w = 0
        while row_layout.chunks_before(w + 1) <= chunk:
            w += 1
        d = min(w + (row_layout.s > 0), row_layout.beats - 1)
        if first_beat + d * beat >= failed[0].addr:
            return j
    return lrows


def _disjoint(n_rows: int, stride: int, size: int) -> bool:
    """Whether ``n_rows`` blocks of ``size`` units ``stride`` apart do not overlap."""
    return n_rows == 1 or stride >= size


def _row_starts(first: int, stride: int, n_rows: int) -> list[int]:
    """Start of each of ``n_rows`` rows ``stride`` apart; one row when the stride is 0 (every
    row is the same, so the first check decides)."""
    return [first] if stride == 0 else [first + r * stride for r in range(n_rows)]
