"""Splitting a checked transfer into AXI4 bursts (:class:`BurstGen`) and walking its chunks
in transfer order (:class:`Walker`)."""

from amaranth import Cat, Const, Elaboratable, Module, Mux, Signal

from hw.config import NPUConfig
from hw.dma.common import MAX_BURST_BEATS, PAGE_BYTES, LocalGeometry, by_mem, log2
from hw.isa import LocalMem

__all__ = ["BurstGen", "Walker"]


class BurstGen(Elaboratable):
    """Splits the DRAM rows of a checked transfer into AXI4 INCR bursts, in order.

    Output ``valid``/``addr``/``len`` follow AXI address-channel rules: once ``valid`` is high,
    it and the burst stay until ``ready``. ``room`` (from the consumer) must not fall while
    ``valid`` waits, which holds for a FIFO that only this generator fills.
    Burst = min(256, beats to the next 4 KiB boundary, beats left in the row).
    """

    def __init__(self, body, *, beat_bytes: int, addr_width: int):
        self.body = body
        self.beat_bytes = beat_bytes
        self.start = Signal()
        self.room = Signal()
        self.valid = Signal()
        self.ready = Signal()
        self.addr = Signal(addr_width)
        self.len = Signal(8)        # AxLEN = beats - 1
        self.idle = Signal()

    def elaborate(self, platform):
        m = Module()
        body = self.body
        beat = self.beat_bytes
        lb = log2(beat)
        page_beats = PAGE_BYTES // beat

        rows_left = Signal(16)
        row_addr = Signal(32)
        beat_addr = Signal(32)
        beats_left = Signal(17)     # beats left in the current row

        def aligned(addr):
            return Cat(Const(0, lb), addr[lb:])

        def row_beats(addr):
            return (addr[:lb] + body.row_bytes + (beat - 1)) >> lb

        to_page = Signal(range(page_beats + 1))
        limit = Signal(range(MAX_BURST_BEATS + 1))     # min(256, beats to the 4 KiB boundary)
        n = Signal(range(MAX_BURST_BEATS + 1))         # beats in this burst
        m.d.comb += [
            to_page.eq(page_beats - beat_addr[lb:12]),
            limit.eq(Mux(to_page < MAX_BURST_BEATS, to_page, MAX_BURST_BEATS)),
            n.eq(Mux(beats_left < limit, beats_left, limit)),
        ]

        m.d.comb += [
            self.idle.eq(rows_left == 0),
            self.valid.eq(~self.idle & self.room),
            self.addr.eq(beat_addr),
            self.len.eq(n - 1),
        ]

        next_row = Signal(32)
        m.d.comb += next_row.eq(row_addr + body.dram_stride)
        with m.If(self.start):
            m.d.sync += [
                rows_left.eq(body.n_rows),
                row_addr.eq(body.dram_addr),
                beat_addr.eq(aligned(body.dram_addr)),
                beats_left.eq(row_beats(body.dram_addr)),
            ]
        with m.Elif(self.valid & self.ready):
            with m.If(beats_left == n):
                m.d.sync += [
                    rows_left.eq(rows_left - 1),
                    row_addr.eq(next_row),
                    beat_addr.eq(aligned(next_row)),
                    beats_left.eq(row_beats(next_row)),
                ]
            with m.Else():
                m.d.sync += [
                    beat_addr.eq(beat_addr + (n << lb)),
                    beats_left.eq(beats_left - n),
                ]
        return m


class Walker(Elaboratable):
    """Walks the ``G``-byte chunks of a checked transfer in transfer order, one per ``step``.

    For the current chunk it gives: ``off``, its byte offset in its bus beat; ``lrow``, its
    local row; ``sub``, which ``G``-byte part of the local row it is (non-zero only when
    ``L > beat``); ``beat_end``, it is the last chunk used from its beat; ``local_end``, it is
    the last chunk of its local row; ``burst_last``, its beat is the last of an AXI burst (same
    splitting rule as :class:`BurstGen`).
    """

    def __init__(self, body, is_acc, *, cfg: NPUConfig):
        self.body = body
        self.is_acc = is_acc
        self.beat_bytes = cfg.axi_data_bytes
        self.spad = LocalGeometry(cfg, LocalMem.SPAD)
        self.acc = LocalGeometry(cfg, LocalMem.ACC)
        lb = log2(self.beat_bytes)
        self.start = Signal()
        self.step = Signal()
        self.valid = Signal()
        self.off = Signal(lb)
        self.lrow = Signal(16)
        self.sub = Signal(range(max(2, self.spad.chunks_per_row, self.acc.chunks_per_row)))
        self.beat_end = Signal()
        self.local_end = Signal()
        self.burst_last = Signal()

    def elaborate(self, platform):
        m = Module()
        body, is_acc = self.body, self.is_acc
        spad, acc = self.spad, self.acc
        beat = self.beat_bytes
        lb = log2(beat)
        page_beats = PAGE_BYTES // beat

        rows_left = Signal(16)
        chunks_left = Signal(16)            # in the current DRAM row, this one included
        row_lo = Signal(12)                 # DRAM row address within its 4 KiB page
        lbase = Signal(16)                  # first local row of the current DRAM row
        beat_idx = Signal(12 - lb)          # beat within its 4 KiB page
        burst_beats = Signal(8)             # beats of the current burst before this one

        chunk = by_mem(is_acc, spad.chunk_bytes, acc.chunk_bytes)
        row_chunks = by_mem(is_acc, body.row_bytes >> spad.log2_chunk,
                             body.row_bytes >> acc.log2_chunk)
        last_chunk = chunks_left == 1
        m.d.comb += [
            self.valid.eq(rows_left != 0),
            self.beat_end.eq((self.off + chunk == beat) | last_chunk),
            self.local_end.eq(self.sub == by_mem(is_acc, spad.chunks_per_row - 1,
                                                  acc.chunks_per_row - 1)),
            self.burst_last.eq(last_chunk | (beat_idx == page_beats - 1)
                               | (burst_beats == MAX_BURST_BEATS - 1)),
        ]

        next_row_lo = Signal(12)
        next_lbase = Signal(16)
        m.d.comb += [
            next_row_lo.eq(row_lo + body.dram_stride[:12]),
            next_lbase.eq(lbase + body.local_stride),
        ]
        with m.If(self.start):
            m.d.sync += [
                rows_left.eq(body.n_rows),
                chunks_left.eq(row_chunks),
                row_lo.eq(body.dram_addr[:12]),
                self.off.eq(body.dram_addr[:lb]),
                beat_idx.eq(body.dram_addr[lb:12]),
                burst_beats.eq(0),
                lbase.eq(body.local_row),
                self.lrow.eq(body.local_row),
                self.sub.eq(0),
            ]
        with m.Elif(self.step):
            with m.If(last_chunk):
                m.d.sync += [
                    rows_left.eq(rows_left - 1),
                    chunks_left.eq(row_chunks),
                    row_lo.eq(next_row_lo),
                    self.off.eq(next_row_lo[:lb]),
                    beat_idx.eq(next_row_lo[lb:12]),
                    burst_beats.eq(0),
                    lbase.eq(next_lbase),
                    self.lrow.eq(next_lbase),
                    self.sub.eq(0),
                ]
            with m.Else():
                m.d.sync += [
                    chunks_left.eq(chunks_left - 1),
                    self.off.eq(self.off + chunk),
                ]
                with m.If(self.beat_end):
                    m.d.sync += [
                        beat_idx.eq(beat_idx + 1),
                        burst_beats.eq(Mux(self.burst_last, 0, burst_beats + 1)),
                    ]
                with m.If(self.local_end):
                    m.d.sync += [self.sub.eq(0), self.lrow.eq(self.lrow + 1)]
                with m.Else():
                    m.d.sync += self.sub.eq(self.sub + 1)
        return m
