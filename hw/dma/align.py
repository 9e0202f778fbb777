"""Byte realignment between DRAM beats and the DMA's words (any byte address).

A DRAM row starts at byte lane ``a`` of its first beat. The DMA's chunk walk
(:class:`hw.dma.bursts.Walker`) works on *words*: the row shifted down by ``s = a % G`` bytes,
so that every chunk of ``G`` bytes lies inside one word. With ``s == 0`` (every address the
DMA took before it took any byte address) a word is a beat and nothing here adds a cycle.

* :class:`Unpacker` (load): word ``w`` is bytes ``s ..`` of beat ``w`` followed by the first
  ``s`` bytes of beat ``w + 1`` (R data returns in order, so beat ``w + 1`` is the one on the
  bus while beat ``w`` is held). The row's first beat is taken alone (the *prime*); a row
  whose last word needs no further beat (:attr:`Walker.load_flush`) shifts it out of the held
  beat with no R beat.
* :class:`Packer` (store): DRAM beat ``k`` is the top ``s`` bytes of word ``k - 1`` followed
  by the first ``beat - s`` bytes of word ``k``, strobes likewise; a row with one beat more
  than words (:attr:`Walker.store_flush`) sends its last beat from the held word alone, in a
  step of its own (:attr:`Walker.slot`). It also marks WLAST, counting beats with the split
  rule of :class:`hw.dma.bursts.BurstGen`.
"""

from amaranth import Cat, Const, Elaboratable, Module, Mux, Signal

from hw.dma.common import PAGE_BYTES, log2

__all__ = ["Unpacker", "Packer"]


def _bytes(n):
    """A byte count as a bit count (``n * 8``)."""
    return Cat(Const(0, 3), n)


class Unpacker(Elaboratable):
    """R beats into words for the load's chunk walk (see the module docstring).

    Inputs: ``walker`` (the load's :class:`~hw.dma.bursts.Walker`), ``rvalid``/``rdata``/
    ``r_take`` (the R handshake), ``consume`` (the walker takes the last chunk of the current
    word in this cycle, whether or not ``word_valid``: it is ANDed here), ``enable`` (low after
    a bus error: the channel only drains). Outputs: ``word``/``word_valid``, ``uses_r`` (the
    word includes the R beat on the bus, so its RRESP applies), ``rready`` (never a function
    of ``rvalid``).
    """

    def __init__(self, walker, *, beat_bytes: int):
        self.walker = walker
        self.beat_bytes = beat_bytes
        self.rvalid = Signal()
        self.rdata = Signal(beat_bytes * 8)
        self.r_take = Signal()
        self.consume = Signal()
        self.enable = Signal()
        self.word = Signal(beat_bytes * 8)
        self.word_valid = Signal()
        self.uses_r = Signal()
        self.rready = Signal()

    def elaborate(self, platform):
        m = Module()
        w = self.walker
        prev = Signal(self.beat_bytes * 8)     # the beat of the current word's first bytes
        primed = Signal()                       # prev holds a beat of the current row
        shifted = w.shift != 0
        prime = Signal()
        flush = Signal()
        m.d.comb += [
            prime.eq(self.enable & w.valid & shifted & ~primed),
            flush.eq(w.valid & shifted & primed & w.last_word & w.load_flush),
            self.uses_r.eq(~flush),
        ]
        aligned = Cat(prev, self.rdata).bit_select(_bytes(w.shift), self.beat_bytes * 8)
        with m.If(flush):
            m.d.comb += [self.word.eq(Cat(prev, Const(0, self.beat_bytes * 8))
                                      .bit_select(_bytes(w.shift), self.beat_bytes * 8)),
                         self.word_valid.eq(1)]
        with m.Elif(prime):
            m.d.comb += [self.rready.eq(1), self.word_valid.eq(0)]
        with m.Else():
            m.d.comb += [
                self.word.eq(Mux(shifted, aligned, self.rdata)),
                self.word_valid.eq(self.rvalid),
                self.rready.eq(self.consume),
            ]
        with m.If(w.start):
            m.d.sync += primed.eq(0)
        with m.Elif(w.step & w.last_chunk):
            m.d.sync += primed.eq(0)                # the row is done
        with m.Elif(self.r_take & prime):
            m.d.sync += primed.eq(1)
        with m.If(self.r_take):
            m.d.sync += prev.eq(self.rdata)
        return m


class Packer(Elaboratable):
    """Words into DRAM beats with strobes and WLAST for the store (see the module docstring).

    Driven by the store's second stage: ``emit`` (a word is complete, or a flush slot),
    ``slot`` (it is the flush slot: no word), ``word``/``strb`` (the word and its byte
    enables), and per row (registered with the step) ``shift``, ``first_word``,
    ``row_last`` (this beat is the row's last) and ``page_beat0`` (the row's first beat
    within its 4 KiB page, from the row address). Outputs, valid with ``emit``:
    ``beat``/``beat_strb``/``last``.
    """

    def __init__(self, *, beat_bytes: int, max_burst: int):
        self.beat_bytes = beat_bytes
        self.max_burst = max_burst
        lb = log2(beat_bytes)
        self.start = Signal()
        self.emit = Signal()
        self.slot = Signal()
        self.word = Signal(beat_bytes * 8)
        self.strb = Signal(beat_bytes)
        self.shift = Signal(lb)
        self.first_word = Signal()
        self.row_last = Signal()
        self.page_beat0 = Signal(12 - lb)
        self.beat = Signal(beat_bytes * 8)
        self.beat_strb = Signal(beat_bytes)
        self.last = Signal()

    def elaborate(self, platform):
        m = Module()
        nb = self.beat_bytes
        page_beats = PAGE_BYTES // nb

        # -- data and strobes ------------------------------------------------------------------
        prev = Signal(nb * 8)
        prev_strb = Signal(nb)
        cur = Mux(self.slot, 0, self.word)
        cur_strb = Mux(self.slot, 0, self.strb)
        new_row = self.first_word & ~self.slot     # the row's first beat: nothing held
        held_strb = Mux(new_row, 0, prev_strb)
        up = (nb - self.shift).as_unsigned()        # the beat starts at byte nb - s of (prev, cur)
        m.d.comb += [
            self.beat.eq(Cat(prev, cur).bit_select(_bytes(up), nb * 8)),
            self.beat_strb.eq(Cat(held_strb, cur_strb).bit_select(up, nb)),
        ]
        with m.If(self.emit):
            m.d.sync += [prev.eq(cur), prev_strb.eq(cur_strb)]

        # -- WLAST: the BurstGen split counted on the beats --------------------------------------
        page_beat = Signal(12 - log2(nb))           # of the next beat, within its page
        burst_beat = Signal(range(self.max_burst))  # beats of the current burst before it
        at_page = Mux(new_row, self.page_beat0, page_beat)
        in_burst = Mux(new_row, 0, burst_beat)
        m.d.comb += self.last.eq(self.row_last | (at_page == page_beats - 1)
                                 | (in_burst == self.max_burst - 1))
        with m.If(self.emit):
            m.d.sync += [page_beat.eq(at_page + 1),
                         burst_beat.eq(Mux(self.last, 0, in_burst + 1))]
        return m
