"""DMA timing, in cycles (:class:`hw.dma.DMA`): the row layout and burst split of a transfer
and the busy cycles of DMA_LOAD / DMA_STORE under the co-simulation's ideal DRAM, as
:mod:`hw.isa.timing` states its conventions (everything here is re-exported there).

Pure Python; derived from the DMA's FSMs and data paths (``hw/dma``) and checked for exact
equality against the RTL block on a register-exact transcription of ``cosim/tb/dram.sv``
(``tests/hw/test_dma_timing.py``) and against the Verilator NPU
(``tests/cosim/test_npu_rtl.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

from hw.isa.commands import ErrorCode, LocalMem, Opcode

if TYPE_CHECKING:
    from hw.config import NPUConfig

__all__ = [
    "PAGE_BYTES", "MAX_BURST_BEATS", "DRAM_READ_LATENCY", "DmaRow", "Burst", "dma_bursts",
    "dma_local_rows", "dma_load_busy_cycles", "dma_store_busy_cycles", "dma_busy_cycles",
    "dma_error_busy_cycles", "dma_estimate_cycles",
]

#: An AXI4 burst must not cross a 4 KiB address boundary (ARM IHI 0022, A3.4.1).
PAGE_BYTES = 4096
#: Longest AXI4 INCR burst (AxLEN is 8 bits; ARM IHI 0022, A3.4.1).
MAX_BURST_BEATS = 256
#: ``cosim/tb/dram.sv``: cycles from a read burst's AR handshake to its first R beat when the
#: DRAM is idle (the AR is queued at the handshake edge, moved to the beat generator at the
#: next edge, whose ``RVALID`` register is loaded at the one after).
DRAM_READ_LATENCY = 3


# -- DMA: row layout and bursts -------------------------------------------------------------------

class DmaRow:
    """How one DRAM row of a checked DMA transfer moves through the DMA (:mod:`hw.dma`).

    The row is ``row_bytes`` bytes at any byte address ``addr``. Its DRAM beats (``beats``,
    beat-aligned, the first one at ``addr`` aligned down) carry it at lane ``a = addr %
    axi_data_bytes``. The DMA moves data in ``G = min(local_row_bytes, axi_data_bytes)``-byte
    *chunks*, one per cycle, of the row's ``chunks = ceil(row_bytes / G)`` (the last one
    partial when ``G`` does not divide ``row_bytes``). Chunks live in *words*: the row shifted
    down by ``s = a % G`` bytes, so that it starts at the ``G``-aligned lane ``a - s`` of word
    0 (``words`` of them); with ``s == 0`` the words are the beats.

    A *step* is one cycle of the channel's data path:

    * load (``hw.dma.align.Unpacker``): with ``s > 0``, beat 0 is taken alone (one step, the
      *prime*) and word ``w`` is read with beat ``w + 1``; if the row has as many words as
      beats, its last word is shifted out of the held beat with no R beat (*flush*: its
      chunks are :attr:`load_tail` steps after the row's last R handshake). A beat is taken
      with its last step. With ``s == 0`` word ``w`` is beat ``w``.
    * store (``hw.dma.align.Packer``): DRAM beat ``k`` is made of the top ``s`` bytes of
      word ``k - 1`` and the rest of word ``k``, ready with the last chunk of word ``k``; if
      the row has one beat more than words, the last beat takes one extra step (the *flush
      slot*, which reads nothing).

    Chunk ``c`` completes a local row (load: the local write) iff ``(c + 1) % (L / G) == 0``
    or it is the row's last chunk (a partial last local row, zero-filled on a load).
    """

    __slots__ = ("addr", "row_bytes", "beat", "local", "g", "period", "a", "s", "base", "beats",
                 "words", "chunks", "load_flush", "store_flush")

    def __init__(self, addr: int, row_bytes: int, beat: int, local_row_bytes: int) -> None:
        self.addr, self.row_bytes, self.beat = addr, row_bytes, beat
        self.local = local_row_bytes
        self.g = g = min(local_row_bytes, beat)
        self.period = local_row_bytes // g          #: chunks per local row
        self.a = a = addr % beat
        self.s = s = a % g
        self.base = base = a - s                    #: lane of the row's first byte in word 0
        self.beats = -(-(a + row_bytes) // beat)
        self.words = -(-(base + row_bytes) // beat)
        self.chunks = -(-row_bytes // g)
        self.load_flush = s > 0 and self.words == self.beats
        self.store_flush = s > 0 and self.beats == self.words + 1

    def chunks_before(self, w: int) -> int:
        """Chunks of the row in words ``0 .. w - 1``."""
        return min(self.chunks, max(0, -(-(w * self.beat - self.base) // self.g)))

    def word_chunks(self, w: int) -> int:
        return self.chunks_before(w + 1) - self.chunks_before(w)

    def load_steps(self, k0: int, k1: int) -> int:
        """Load steps of the row's DRAM beats ``k0 .. k1 - 1`` (the prime included, the flush
        excluded)."""
        if self.s == 0:
            return self.chunks_before(k1) - self.chunks_before(k0)
        return (k0 == 0) + self.chunks_before(k1 - 1) - self.chunks_before(max(k0, 1) - 1)

    def load_beat_steps(self, k: int) -> int:
        if self.s == 0:
            return self.word_chunks(k)
        return 1 if k == 0 else self.word_chunks(k - 1)

    def store_beat_steps(self, k: int) -> int:
        return 1 if k == self.words else self.word_chunks(k)

    def load_first_chunk(self, k0: int) -> int:
        """Row index of the first chunk that the load steps of beat ``k0`` on move."""
        return self.chunks_before(k0 if self.s == 0 else max(k0 - 1, 0))

    def strobes(self, k: int) -> int:
        """Bytes of the row in its DRAM beat ``k`` (the beat's WSTRB bits)."""
        lo = k * self.beat
        return max(0, min(lo + self.beat, self.a + self.row_bytes) - max(lo, self.a))

    def per_beat(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """:meth:`load_beat_steps`, :meth:`store_beat_steps` and :meth:`strobes` of each of
        the row's beats, in order. The layout depends on the address only through ``a``, so
        these are computed once per ``(a, row_bytes, beat, local_row_bytes)``."""
        return _row_per_beat(self.a, self.row_bytes, self.beat, self.local)


@lru_cache(maxsize=1024)
def _row_per_beat(a: int, row_bytes: int, beat: int,
                  local_row_bytes: int) -> tuple[tuple[int, ...], ...]:
    row = DmaRow(a, row_bytes, beat, local_row_bytes)
    beats = range(row.beats)
    return (tuple(row.load_beat_steps(k) for k in beats),
            tuple(row.store_beat_steps(k) for k in beats),
            tuple(row.strobes(k) for k in beats))


@dataclass(frozen=True)
class Burst:
    """One AXI4 INCR burst of a DMA transfer (:func:`dma_bursts`): beats ``k0 .. k0 + beats -
    1`` of DRAM row ``row``, whose layout (:class:`DmaRow`) gives the steps of each beat.

    Attributes
    ----------
    addr : int
        Address of its first beat (bytes, aligned to the beat: ``AxADDR``).
    beats : int
        Beats (``AxLEN + 1``), 1 .. ``dma_max_burst_beats``.
    row : int
        DRAM row of the transfer it belongs to.
    k0 : int
        Index of its first beat among the row's beats.
    layout : DmaRow
        The row's layout (not compared).
    """
    addr: int
    beats: int
    row: int
    k0: int
    layout: DmaRow = field(compare=False, repr=False)

    @property
    def row_last(self) -> bool:
        """It carries the row's last beat."""
        return self.k0 + self.beats == self.layout.beats

    # -- load -----------------------------------------------------------------------------

    @property
    def steps(self) -> int:
        """Load steps up to and including the handshake of its last R beat."""
        return self.layout.load_steps(self.k0, self.k0 + self.beats)

    @property
    def first_steps(self) -> int:
        """Load steps of its first beat (its R handshake is the last of them)."""
        return self.layout.load_beat_steps(self.k0)

    @property
    def last_steps(self) -> int:
        """Load steps of its last beat (``first_steps`` when ``beats == 1``)."""
        return self.layout.load_beat_steps(self.k0 + self.beats - 1)

    @property
    def tail(self) -> int:
        """Load steps after its last R handshake (the row's flush word; 0 unless
        :attr:`row_last`)."""
        row = self.layout
        return row.word_chunks(row.words - 1) if self.row_last and row.load_flush else 0

    @property
    def prime(self) -> bool:
        """Its first load step takes the row's first beat and moves no chunk."""
        return self.k0 == 0 and self.layout.s > 0

    @property
    def first_chunk(self) -> int:
        """Row index of the first chunk its load steps move."""
        return self.layout.load_first_chunk(self.k0)

    def steps_per_beat(self) -> list[int]:
        """Load steps of each beat (:meth:`DmaRow.load_beat_steps`), in order."""
        return list(self.layout.per_beat()[0][self.k0:self.k0 + self.beats])

    # -- store ----------------------------------------------------------------------------

    def store_steps_per_beat(self) -> list[int]:
        """Store steps (local reads, or the flush slot; :meth:`DmaRow.store_beat_steps`) of
        each beat, in order."""
        return list(self.layout.per_beat()[1][self.k0:self.k0 + self.beats])

    def strobes_per_beat(self) -> list[int]:
        """WSTRB bits set in each beat (bytes written; :meth:`DmaRow.strobes`)."""
        return list(self.layout.per_beat()[2][self.k0:self.k0 + self.beats])

    @property
    def one_step_per_beat(self) -> bool:
        """Every beat is one chunk (local rows at least a beat wide): one store step each."""
        return self.layout.g == self.layout.beat


def _local_row_bytes(config: NPUConfig, mem) -> int:
    return config.acc_row_bytes if LocalMem(mem) == LocalMem.ACC else config.spad_row_bytes


def dma_local_rows(config: NPUConfig, row_bytes: int, mem: LocalMem = LocalMem.SPAD) -> int:
    """Local rows that one DRAM row of ``row_bytes`` bytes maps onto: ``ceil(row_bytes /
    local_row_bytes)`` (the last one partial when the local row does not divide it)."""
    return -(-row_bytes // _local_row_bytes(config, mem))


def dma_bursts(config: NPUConfig, dram_addr: int, dram_stride: int, row_bytes: int,
               n_rows: int, mem: LocalMem = LocalMem.SPAD) -> list[Burst]:
    """The AXI4 bursts of a checked DMA transfer, in bus order (:class:`hw.dma.DMA`, "Bus";
    ``BurstGen`` in ``hw/dma/bursts.py``).

    DRAM row ``r`` is ``row_bytes`` bytes at ``dram_addr + r * dram_stride``, any byte address
    and length; rows are never merged. Each row is cut into as few INCR bursts as the rules
    allow: at most ``config.dma_max_burst_beats`` (<= :data:`MAX_BURST_BEATS`) beats, never
    across a :data:`PAGE_BYTES` boundary (ARM IHI 0022, A3.4.1); burst = min(max burst, beats
    to the next 4 KiB boundary, beats left in the row). Its first beat address is the row
    start aligned down to the beat; partial first and last beats count in ``beats``.

    Parameters
    ----------
    dram_addr, dram_stride, row_bytes : int
        Bytes, as in :class:`hw.isa.DmaBody` (the transfer passed the DMA's checks).
    n_rows : int
    mem : LocalMem
        Local memory, for the chunk size ``G`` of the row layouts.

    Returns
    -------
    list of Burst
        Empty when ``n_rows == 0`` or ``row_bytes == 0``.
    """
    beat = config.axi_data_bytes
    local = _local_row_bytes(config, mem)
    max_burst = config.dma_max_burst_beats
    out = []
    for r in range(n_rows if row_bytes else 0):
        start = dram_addr + r * dram_stride
        row = DmaRow(start, row_bytes, beat, local)
        a = start - start % beat
        k = 0
        while k < row.beats:
            to_page = (PAGE_BYTES - a % PAGE_BYTES) // beat
            n = min(max_burst, to_page, row.beats - k)
            out.append(Burst(addr=a, beats=n, row=r, k0=k, layout=row))
            a += n * beat
            k += n
    return out


# -- DMA: cycles ----------------------------------------------------------------------------------

#: DMA control states before the transfer starts: ``Check-shape``, ``Check-range`` (the
#: movers start at its edge; ``ARVALID``/``AWVALID`` are high in the next cycle).
_DMA_CHECKS = 2
#: ``done`` comes 2 cycles after the last R beat / B response (or the last load step): the
#: in-flight FIFO empties at that edge, ``finished`` is seen in the ``Transfer`` state one
#: cycle later, then ``Done``.
_DMA_TAIL = 2


def dma_load_busy_cycles(config: NPUConfig, dram_addr: int, dram_stride: int, row_bytes: int,
                         n_rows: int, mem: LocalMem = LocalMem.SPAD) -> int:
    """Busy cycles of a successful DMA_LOAD under the ideal DRAM (``cosim/tb/dram.sv``), with
    every local write granted (no ``stall.load_spad``/``load_acc``).

    Derivation, cycle 0 being the first ``Transfer`` cycle (handshake + 3), over the bursts of
    :func:`dma_bursts`, ``D = dma_outstanding``:

    * AR of burst ``b`` (``BurstGen``: one per cycle while the in-flight FIFO of depth ``D``
      has room; a slot frees the cycle after the last beat of burst ``b - D`` was taken):
      ``ar[b] = max(ar[b-1] + 1, c[b-D] + 1)``, ``ar[0] = 0``;
    * the DRAM moves burst ``b`` from its queue to the beat generator in cycle
      ``ld[b] = max(v_last[b-1], ar[b] + 1)`` (the generator is free from the cycle in which
      the previous burst's last beat is shown);
    * its first beat is shown in ``v[b] = max(c[b-1], ld[b] + 1) + 1`` (the ``RVALID``
      register reloads when its beat is taken or none is shown), so one idle cycle separates
      bursts unless the previous last beat was held;
    * the DMA runs one step per cycle (:class:`DmaRow`), from ``x[b] = max(v[b], c[b-1] +
      tail[b-1] + 1)`` (after the previous row's flush steps), and takes a beat with its last
      step, so the burst's last beat is shown in ``v_last[b] = x[b] + steps - last_steps``
      (``v[b]`` for one beat) and taken in ``c[b] = x[b] + steps - 1``.

    Busy = ``3 + (c[last] + tail[last]) + 2`` (checks, then :data:`_DMA_TAIL`). For local rows
    at least a beat wide, rows at beat-aligned addresses and bursts of ``n`` beats this is one
    beat per cycle plus one cycle per burst. A size-zero transfer takes 2
    (:func:`dma_error_busy_cycles`).
    """
    bursts = dma_bursts(config, dram_addr, dram_stride, row_bytes, n_rows, mem)
    if not bursts:
        return _DMA_CHECKS
    d = config.dma_outstanding
    ar: list[int] = []
    c: list[int] = []
    c_prev = v_last_prev = None
    free = 0                    # first cycle the data path may take a step
    for b, burst in enumerate(bursts):
        a = 0 if b == 0 else ar[-1] + 1
        if b >= d:
            a = max(a, c[b - d] + 1)
        ar.append(a)
        if c_prev is None:
            v = a + DRAM_READ_LATENCY
        else:
            ld = max(v_last_prev, a + 1)
            v = max(c_prev, ld + 1) + 1
        x = max(v, free)
        v_last_prev = v if burst.beats == 1 else x + burst.steps - burst.last_steps
        c_prev = x + burst.steps - 1
        free = c_prev + burst.tail + 1
        c.append(c_prev)
    return _DMA_CHECKS + 1 + (free - 1) + _DMA_TAIL


#: Depth of the store channel's W beat FIFO and the level up to which it reads a local chunk
#: (``W_BUFFER_DEPTH`` in ``hw/dma``: a read is issued only if the FIFO is sure to have room).
_W_BUFFER_DEPTH = 4
_W_READ_LEVEL = _W_BUFFER_DEPTH - 2


def dma_store_busy_cycles(config: NPUConfig, dram_addr: int, dram_stride: int, row_bytes: int,
                          n_rows: int, mem: LocalMem = LocalMem.SPAD) -> int:
    """Busy cycles of a successful DMA_STORE under the ideal DRAM (``cosim/tb/dram.sv``).

    Derivation, cycle 0 being the first ``Transfer`` cycle (handshake + 3):

    * the DRAM takes one write burst at a time: AW in its idle state, the burst's beats in
      its data state (``WREADY``), B in its response state (one cycle: the DMA's ``BREADY`` is
      always high), idle again; so the AW of burst ``b + 1`` is accepted 2 cycles after the
      last W beat of burst ``b`` (the DMA's ``AWVALID`` is already high: at most one burst
      waits for B, fewer than ``dma_outstanding``), and the AW of burst 0 in cycle 0;
    * the DMA takes one store step per cycle (a local chunk read, or a flush slot; see
      :class:`DmaRow`) from cycle 0 while its W FIFO holds at most :data:`_W_READ_LEVEL`
      beats; a beat whose last step is in cycle ``x`` is in the FIFO (``WVALID``) from
      ``x + 2``;
    * W beat ``j`` goes in ``max(its FIFO cycle, previous W + 1, AW of its burst + 1)``.

    Busy = ``3 + (last W + 1) + 2`` (B one cycle after the last W, then
    :data:`_DMA_TAIL`). When the local row is at least a beat wide (one step per beat) the
    data never waits after the first beat, and this is ``beats + 2 * bursts + 5``: one beat
    per cycle plus 2 cycles per burst (B and AW), computed in closed form. Otherwise the
    steps are walked one by one (``O(beats)``). A size-zero transfer takes 2.
    """
    bursts = dma_bursts(config, dram_addr, dram_stride, row_bytes, n_rows, mem)
    if not bursts:
        return _DMA_CHECKS
    if bursts[0].one_step_per_beat:
        beats = sum(b.beats for b in bursts)
        # last W = 1 + beats + 2 * (bursts - 1): the first beat is in the FIFO in cycle 2
        last_w = 1 + beats + 2 * (len(bursts) - 1)
    else:
        last_w = _store_last_w(bursts)
    return _DMA_CHECKS + 1 + last_w + 1 + _DMA_TAIL


def _store_last_w(bursts: list[Burst]) -> int:
    """Cycle of the last W beat of a store (cycle 0: first ``Transfer`` cycle), step by step
    (see :func:`dma_store_busy_cycles`)."""
    landed: list[int] = []     # cycle each beat enters the FIFO's level
    w: list[int] = []          # cycle each beat is taken on W
    x = 0                      # next cycle a step may be taken
    aw = 0                     # AW cycle of the current burst
    w_prev = -1
    consumed = 0               # beats taken on W before cycle x (monotone pointer)
    for burst in bursts:
        for j, k in enumerate(burst.store_steps_per_beat()):
            for _ in range(k):
                while True:
                    while consumed < len(w) and w[consumed] < x:
                        consumed += 1
                    level = sum(1 for t in landed[consumed:] if t <= x)
                    if level <= _W_READ_LEVEL:
                        break
                    x += 1
                x += 1
            landed.append(x + 1)                 # last step in x - 1
            start = aw + 1 if j == 0 else w_prev + 1
            w_prev = max(landed[-1], start)
            w.append(w_prev)
        aw = w_prev + 2
    return w_prev


def dma_error_busy_cycles(config: NPUConfig, error: ErrorCode, dram_addr: int,
                          dram_stride: int, row_bytes: int, n_rows: int, local_row: int = 0,
                          local_stride: int = 0, mem: LocalMem = LocalMem.SPAD, *,
                          window: tuple[int, int] = (0, 0)) -> int:
    """Busy cycles of a DMA command (load or store) that moves nothing: size zero
    (``error`` ``NONE`` with ``n_rows == 0`` or ``row_bytes == 0``) or failing with ``error``.

    Control FSM (``Control`` in ``hw/dma/control.py``): size zero is decided in
    ``Check-shape`` and retires through ``Done``: 2. ``BAD_DRAM_ADDR``, ``WINDOW`` and
    ``BAD_LOCAL_ADDR`` are decided in ``Check-range`` from the extent of the whole transfer;
    ``Find-bad-row`` then visits rows ``0 .. j`` (one per cycle), ``j`` being the first row
    that fails that check, and retires through ``Done``: ``4 + j``. ``AXI_ERROR`` transfers
    run to the end: use :func:`dma_load_busy_cycles` / :func:`dma_store_busy_cycles`. The DMA
    takes any byte address and length, so it never fails with ``MISALIGNED`` or ``BAD_SIZE``.

    Parameters
    ----------
    window : (int, int)
        The issuing queue's DRAM window ``(base, limit)`` (``limit == 0``: no limit), for
        ``WINDOW``.

    Raises
    ------
    ValueError
        If ``error`` is ``NONE`` for a transfer that moves data, ``AXI_ERROR``, an error the
        DMA does not raise, or a range error that no row of the transfer has.
    """
    error = ErrorCode(error)
    if error == ErrorCode.NONE:
        if n_rows and row_bytes:
            raise ValueError("the transfer moves data: use dma_load/store_busy_cycles")
        return _DMA_CHECKS
    base, limit = window
    limit = limit or 1 << 32
    rows_per = dma_local_rows(config, row_bytes, mem)
    depth = config.acc_rows if LocalMem(mem) == LocalMem.ACC else config.spad_rows
    bad = {
        ErrorCode.BAD_DRAM_ADDR: lambda a, _: a + row_bytes > config.dram_bytes,
        ErrorCode.WINDOW: lambda a, _: a < base or a + row_bytes > limit,
        ErrorCode.BAD_LOCAL_ADDR: lambda _, lrow: lrow + rows_per > depth,
    }.get(error)
    if bad is None:
        raise ValueError(f"the DMA does not retire early with {error.name}")
    for j in range(n_rows):
        if bad(dram_addr + j * dram_stride, local_row + j * local_stride):
            return _DMA_CHECKS + (j + 1) + 1
    raise ValueError(f"no row of the transfer fails the {error.name} check")


def dma_busy_cycles(config: NPUConfig, opcode: Opcode, body, error: ErrorCode = ErrorCode.NONE,
                    *, window: tuple[int, int] = (0, 0)) -> int:
    """Busy cycles of a DMA_LOAD or DMA_STORE whose body ``body`` has the
    :class:`hw.isa.DmaBody` field names as attributes (a :class:`hw.isa.CommandView`, a
    dataclass, a namespace); ``error`` is the error it retires with (``NONE``: success or
    size zero). Dispatches to :func:`dma_load_busy_cycles`, :func:`dma_store_busy_cycles` or
    :func:`dma_error_busy_cycles`.

    Raises
    ------
    ValueError
        For an opcode other than DMA_LOAD / DMA_STORE, or as :func:`dma_error_busy_cycles`.
    """
    args = (body.dram_addr, body.dram_stride, body.row_bytes, body.n_rows)
    error = ErrorCode(error)
    if error not in (ErrorCode.NONE, ErrorCode.AXI_ERROR) or not (body.n_rows and body.row_bytes):
        return dma_error_busy_cycles(config, error, *args, body.local_row, body.local_stride,
                                     body.mem, window=window)
    if Opcode(opcode) == Opcode.DMA_LOAD:
        return dma_load_busy_cycles(config, *args, body.mem)
    if Opcode(opcode) == Opcode.DMA_STORE:
        return dma_store_busy_cycles(config, *args, body.mem)
    raise ValueError(f"{opcode!r} is not a DMA opcode")


# -- the planner's address-free estimate ----------------------------------------------------------

#: Cycles the planner adds to the beats of each DMA command (:func:`dma_estimate_cycles`):
#: its checks and tail (5), the AR latency (3) and about as many cycles again until the next
#: command of the engine arrives (its fetch shares the read channel with the previous
#: transfer's bursts), as measured on the co-simulation.
_DMA_ESTIMATE_OVERHEAD = 12


def dma_estimate_cycles(config: NPUConfig, row_bytes: int, n_rows: int) -> int:
    """The linear planner's estimate of one DMA command of ``n_rows`` rows of ``row_bytes``,
    load or store, without addresses: ``12 + n_rows * (beats + bursts)`` with the beats and
    bursts of a page-aligned row (:func:`dma_bursts` at address 0): one beat per cycle, one
    idle cycle per burst (the ideal DRAM's gap between read bursts), a fixed overhead.

    It ranks tilings; it is *not* the timing of a command (loads of rows at least a beat wide
    take ``dma_load_busy_cycles + 6`` of it, other commands differ by their address, their
    local row size and the store handshakes).
    """
    bursts = dma_bursts(config, 0, 0, row_bytes, 1)
    return _DMA_ESTIMATE_OVERHEAD + n_rows * sum(b.beats + 1 for b in bursts)
