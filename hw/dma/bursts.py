"""Splitting a checked transfer into AXI4 bursts (:class:`BurstGen`) and walking its chunks
in transfer order (:class:`Walker`)."""

from amaranth import Cat, Const, Elaboratable, Module, Mux, Signal

from hw.config import NPUConfig
from hw.dma.common import PAGE_BYTES, LocalGeometry, by_mem, log2
from hw.isa import LocalMem

__all__ = ["BurstGen", "Walker"]


class BurstGen(Elaboratable):
    """Splits the DRAM rows of a checked transfer into AXI4 INCR bursts, in order.

    Output ``valid``/``addr``/``len`` follow AXI address-channel rules: once ``valid`` is high,
    it and the burst stay until ``ready``. ``room`` (from the consumer) must not fall while
    ``valid`` waits, which holds for a FIFO that only this generator fills.
    Burst = min(``max_burst``, beats to the next 4 KiB boundary, beats left in the row); a
    row's first beat is its start address aligned down to the beat (any byte address).
    """

    def __init__(self, body, *, beat_bytes: int, addr_width: int, max_burst: int):
        self.body = body
        self.beat_bytes = beat_bytes
        self.max_burst = max_burst
        self.start = Signal()
        self.stop = Signal()        # drop the rest of the transfer (after a page fault)
        self.room = Signal()
        self.valid = Signal()
        self.ready = Signal()
        self.addr = Signal(addr_width)
        self.len = Signal(8)        # AxLEN = beats - 1
        self.idle = Signal()
        self.row_addr = Signal(32)  # start of the row of the current burst

    def elaborate(self, platform):
        m = Module()
        body = self.body
        beat = self.beat_bytes
        lb = log2(beat)
        page_beats = PAGE_BYTES // beat
        max_burst = self.max_burst

        rows_left = Signal(16)
        row_addr = self.row_addr
        beat_addr = Signal(32)
        beats_left = Signal(17)     # beats left in the current row

        def aligned(addr):
            return Cat(Const(0, lb), addr[lb:])

        def row_beats(addr):
            return (addr[:lb] + body.row_bytes + (beat - 1)) >> lb

        to_page = Signal(range(page_beats + 1))
        limit = Signal(range(max_burst + 1))     # min(max_burst, beats to the 4 KiB boundary)
        n = Signal(range(max_burst + 1))         # beats in this burst
        m.d.comb += [
            to_page.eq(page_beats - beat_addr[lb:12]),
            limit.eq(Mux(to_page < max_burst, to_page, max_burst)),
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
        with m.If(self.stop):
            m.d.sync += rows_left.eq(0)
        with m.Elif(self.start):
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

    Row layout (as :class:`hw.isa.timing.DmaRow`): DRAM row ``r`` starts at byte lane ``a``
    of its first beat; the data path works on *words*, the row shifted down by ``s = a % G``
    bytes (:mod:`hw.dma.align`), in which the row starts at lane ``a - s`` (a multiple of
    ``G``); the row has ``ceil(row_bytes / G)`` chunks, the last one partial when ``G`` does
    not divide ``row_bytes``.

    For the current chunk it gives: ``off``, its byte offset in its word; ``lrow``, its local
    row; ``sub``, which ``G``-byte part of the local row it is (non-zero only when
    ``L > beat``); ``beat_end``, it is the last chunk of its word; ``local_end``, it completes
    its local row (the last ``G``-byte part, or the row's last chunk); ``last_chunk``, the
    last chunk of the DRAM row; ``last_word``, it is in the row's last word; ``first_word``,
    it is in the row's first word. Per row: ``shift`` (``s``), ``load_flush`` (the row has as
    many words as beats, ``s > 0``: the load's last word comes from the held beat alone),
    ``store_flush`` (one beat more than words: the store's last beat is a flush), and
    ``row_lo`` (the row address modulo 4 KiB).

    With ``store_slots`` the walk has one more step after the last chunk of a row with
    ``store_flush``: ``slot`` is high in it (no chunk; the store's flush beat).
    """

    def __init__(self, body, is_acc, *, cfg: NPUConfig, store_slots: bool = False):
        self.body = body
        self.is_acc = is_acc
        self.beat_bytes = cfg.axi_data_bytes
        self.store_slots = store_slots
        self.spad = LocalGeometry(cfg, LocalMem.SPAD)
        self.acc = LocalGeometry(cfg, LocalMem.ACC)
        lb = log2(self.beat_bytes)
        self.start = Signal()
        self.stop = Signal()        # drop the rest of the transfer (after a page fault)
        self.step = Signal()
        self.valid = Signal()
        self.off = Signal(lb)
        self.lrow = Signal(16)
        self.sub = Signal(range(max(2, self.spad.chunks_per_row, self.acc.chunks_per_row)))
        self.beat_end = Signal()
        self.local_end = Signal()
        self.last_chunk = Signal()
        self.first_word = Signal()
        self.last_word = Signal()
        self.slot = Signal()
        self.shift = Signal(lb)
        self.load_flush = Signal()
        self.store_flush = Signal()
        self.row_lo = Signal(12)

    def elaborate(self, platform):
        m = Module()
        body, is_acc = self.body, self.is_acc
        spad, acc = self.spad, self.acc
        beat = self.beat_bytes
        lb = log2(beat)

        rows_left = Signal(16)
        chunks_left = Signal(16)            # in the current DRAM row, this one included
        row_lo = self.row_lo                # DRAM row address within its 4 KiB page
        lbase = Signal(16)                  # first local row of the current DRAM row
        slot = self.slot

        chunk = by_mem(is_acc, spad.chunk_bytes, acc.chunk_bytes)
        row_chunks = by_mem(is_acc,
                            (body.row_bytes + spad.chunk_bytes - 1) >> spad.log2_chunk,
                            (body.row_bytes + acc.chunk_bytes - 1) >> acc.log2_chunk)

        def shift_of(lo):       # s = a % G
            return by_mem(is_acc, lo[:spad.log2_chunk], lo[:acc.log2_chunk])

        def base_of(lo):        # lane of the row's first byte in its first word: a - s
            return by_mem(is_acc, Cat(Const(0, spad.log2_chunk), lo[spad.log2_chunk:lb]),
                          Cat(Const(0, acc.log2_chunk), lo[acc.log2_chunk:lb]))

        # -- the current row's layout ----------------------------------------------------------
        end_lane = Signal(lb)               # lane of the row's last byte in its last beat
        m.d.comb += [
            self.shift.eq(shift_of(row_lo)),
            end_lane.eq(row_lo[:lb] + body.row_bytes - 1),
            self.store_flush.eq((self.shift != 0) & (end_lane < self.shift)),
            self.load_flush.eq((self.shift != 0) & (end_lane >= self.shift)),
        ]
        last_chunk = chunks_left == 1
        chunks_to_word_end = Signal(lb + 1)
        m.d.comb += chunks_to_word_end.eq(by_mem(is_acc, (beat - self.off) >> spad.log2_chunk,
                                                  (beat - self.off) >> acc.log2_chunk))
        m.d.comb += [
            self.valid.eq(rows_left != 0),
            self.last_chunk.eq(last_chunk & ~slot),
            self.beat_end.eq((self.off + chunk == beat) | last_chunk),
            self.local_end.eq((self.sub == by_mem(is_acc, spad.chunks_per_row - 1,
                                                   acc.chunks_per_row - 1)) | last_chunk),
            self.last_word.eq(chunks_left <= chunks_to_word_end),
        ]

        next_row_lo = Signal(12)
        next_lbase = Signal(16)
        m.d.comb += [
            next_row_lo.eq(row_lo + body.dram_stride[:12]),
            next_lbase.eq(lbase + body.local_stride),
        ]

        def begin_row(lo, local):
            return [
                chunks_left.eq(row_chunks),
                row_lo.eq(lo),
                self.off.eq(base_of(lo)),
                self.first_word.eq(1),
                lbase.eq(local),
                self.lrow.eq(local),
                self.sub.eq(0),
                slot.eq(0),
            ]

        row_done = Signal()
        if self.store_slots:
            m.d.comb += row_done.eq(slot | (last_chunk & ~self.store_flush))
        else:
            m.d.comb += row_done.eq(last_chunk)
        with m.If(self.stop):
            m.d.sync += rows_left.eq(0)
        with m.Elif(self.start):
            m.d.sync += [rows_left.eq(body.n_rows),
                         *begin_row(body.dram_addr[:12], body.local_row)]
        with m.Elif(self.step):
            with m.If(row_done):
                m.d.sync += [rows_left.eq(rows_left - 1), *begin_row(next_row_lo, next_lbase)]
            with m.Elif(last_chunk):
                m.d.sync += slot.eq(1)                  # the store's flush slot comes next
            with m.Else():
                m.d.sync += [
                    chunks_left.eq(chunks_left - 1),
                    self.off.eq(self.off + chunk),
                ]
                with m.If(self.beat_end):
                    m.d.sync += self.first_word.eq(0)
                with m.If(self.local_end):
                    m.d.sync += [self.sub.eq(0), self.lrow.eq(self.lrow + 1)]
                with m.Else():
                    m.d.sync += self.sub.eq(self.sub + 1)
        return m
