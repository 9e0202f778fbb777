"""DMA engine: 2-D strided transfers between device DRAM (AXI4) and the local memories.

Two independent channels run concurrently on one AXI4 manager port:

* **load** (``DMA_LOAD``): DRAM -> scratchpad or accumulator, on the AR/R channels;
* **store** (``DMA_STORE``): scratchpad or accumulator -> DRAM, on the AW/W/B channels.

The transfer of a :class:`~hw.isa.DmaBody` is ``n_rows`` DRAM rows; DRAM row ``r`` is
``row_bytes`` bytes at ``dram_addr + r * dram_stride`` and is a straight little-endian byte
copy of ``row_bytes // L`` consecutive local rows starting at ``local_row + r * local_stride``
(``L`` = ``spad_row_bytes`` or ``acc_row_bytes``; byte ``b`` of a local row is bits
``[8b+7:8b]`` of the row word).
"""

from amaranth import Cat, Const, Elaboratable, Module, Mux, Signal
from amaranth.lib import data, memory, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from hw.bus import AXI_BURST_INCR, ArbitratedWriteSignature, AXI4Signature, EngineSignature
from hw.config import NPUConfig
from hw.isa import MAX_BURST_BEATS, PAGE_BYTES, DmaBody, ErrorCode, LocalMem

# PAGE_BYTES (4 KiB, no burst crosses it) and MAX_BURST_BEATS (256) are defined in
# hw.isa.timing (ARM IHI 0022, A3.4.1), with the burst decomposition and the DMA's cycles.
__all__ = ["DMA", "DmaStall", "PAGE_BYTES", "MAX_BURST_BEATS"]
#: Depth of the store channel's buffer of assembled W beats.
_W_BUFFER_DEPTH = 4


#: Layout of :attr:`DMA.stall` (one bit per stall reason, valid every cycle).
DmaStall = data.StructLayout({"load_dram": 1, "load_spad": 1, "load_acc": 1, "store_dram": 1})


def _log2(n: int) -> int:
    return n.bit_length() - 1


class DMA(wiring.Component):
    """DMA engine with a load and a store channel (see the module docstring for the mapping).

    Parameters
    ----------
    config : NPUConfig

    Members
    -------
    load : ``In(EngineSignature())``
        ``DMA_LOAD`` commands (DRAM -> local memory).
    store : ``In(EngineSignature())``
        ``DMA_STORE`` commands (local memory -> DRAM).
    bus : ``Out(AXI4Signature(...))``
        AXI4 manager. All transactions use ID 0, ``AxBURST`` = INCR and
        ``AxSIZE`` = log2(``axi_data_bytes``).
    spad_w, acc_w : ``In(ArbitratedWriteSignature(...))``
        Write requests to the scratchpad and the accumulator (used by the load channel), see
        :class:`hw.bus.ArbitratedWriteSignature`: a row is written at the clock edge iff
        ``en & ready``. ``ready`` is the grant of the memory's shared write port (low while a
        writer of higher priority, the vector unit or the matrix engine, writes); while it is
        low the load channel keeps ``en``/``addr``/``data`` and holds the R beat that completes
        the row (RREADY low), so no data is lost or reordered (see *Local write stalls*).
    spad_r, acc_r : ``In(memory.ReadPort.Signature(...))``
        Synchronous read ports (data the cycle after ``en``; used by the store channel).
        ``en`` is driven every cycle; the DMA re-reads instead of relying on the port holding
        its data. Read ports are never shared, so the store channel never waits for them.
    stall : ``Out(DmaStall)``
        Why a channel is not moving data in this cycle, one bit per reason, for performance
        counters (count the cycles each bit is high):

        * ``load_spad`` / ``load_acc``: the load channel has an R beat (RVALID high, no bus
          error seen in the command) whose chunk completes a local row of the scratchpad /
          accumulator, and that memory's ``ready`` is low (a writer of higher priority has the
          write port), so the beat is held (RREADY low). A beat with an error response is held
          like any other (its row is not written, but the hold is decided before RRESP is
          looked at).
        * ``load_dram``: the load channel is waiting on DRAM: ARVALID high and ARREADY low, or
          read bursts in flight and RVALID low; and neither ``load_spad`` nor ``load_acc`` is
          high. (Cycles where a beat is present but not yet consumed because it feeds several
          local rows, one per cycle, are not stalls.)
        * ``store_dram``: the store channel is waiting on DRAM: AWVALID high and AWREADY low,
          or WVALID high and WREADY low, or every W beat of the command has been sent (no local
          row left to read, beat buffer empty) and B responses are still outstanding.

        All bits are 0 while a channel is idle or checking a command.

    Command ports
    -------------
    Each channel follows the stream rules of :mod:`amaranth.lib.stream` on ``cmd``: it takes
    one command at a time (``ready`` only while idle), holds ``busy`` from the cycle after the
    handshake to its ``done`` pulse (inclusive), and pulses ``done`` for one cycle with
    ``error``/``error_addr`` valid in that cycle. The two channels are independent.

    Checks, in this order, before any bus traffic (an error retires the command without
    touching DRAM or local memory):

    1. ``n_rows == 0`` or ``row_bytes == 0``: nothing to move, retires with ``NONE`` (the other
       fields are not checked);
    2. ``row_bytes % L != 0``: ``BAD_SIZE`` (``error_addr`` = ``dram_addr``);
    3. ``dram_addr`` or ``dram_stride`` not a multiple of ``G = min(L, axi_data_bytes)``:
       ``MISALIGNED`` (``error_addr`` = the first misaligned row address, ``dram_addr`` or
       ``dram_addr + dram_stride``);
    4. a byte of a row outside ``[0, dram_bytes)``: ``BAD_DRAM_ADDR``, ``error_addr`` = the
       address of the first offending row (low 32 bits);
    5. a byte of a row outside the issuing queue's window ``[window_base, window_limit)``
       (latched with the command; ``window_limit == 0`` means no limit): ``WINDOW``,
       ``error_addr`` = the address of the first offending row;
    6. a local row outside the memory: ``BAD_LOCAL_ADDR``, ``error_addr`` = the first local row
       index, in transfer order, that is outside the memory (``>= depth``).

    Checks 4 and 5 use one multiplier each (extent of the last row, no wrap); when they fail, a
    search of one cycle per row finds the first offending row (error path only).

    An AXI SLVERR/DECERR response makes the command retire with ``AXI_ERROR`` and
    ``error_addr`` = the start address of the first failing burst. The transfer still runs to
    its end so that every burst completes on the bus; after the error a load writes no more
    local rows (a store goes on writing the checked DRAM range).

    Bus
    ---
    Each DRAM row is split into as few INCR bursts as the rules allow: at most
    :data:`MAX_BURST_BEATS` beats, never across a :data:`PAGE_BYTES` boundary (both from the
    AMBA AXI spec, ARM IHI 0022). A row may start or end mid-beat (addresses aligned to ``G``):
    the first beat address is aligned down; a load ignores the bytes outside the row, a store
    writes partial beats with partial WSTRB and never writes a byte outside the row. Rows are
    never merged into one burst. Loads keep up to ``dma_outstanding`` read bursts in flight (R
    data returns in order for one ID); stores keep up to ``dma_outstanding`` write bursts
    waiting for B and retire only after the last B response. W data never waits for AW
    (ARM IHI 0022 A3.3.1).

    Local write stalls
    ------------------
    Each local memory has one write port (so that it maps to FPGA block RAM), shared by the
    DMA load channel and the engines (see :class:`hw.tile.ComputeTile`), with the DMA last in
    priority. A chunk that completes a local row is written only when that memory's ``ready``
    is high; otherwise the chunk waits with its R beat held (RREADY low, ``en``/``addr``/
    ``data`` held; ``stall.load_spad``/``load_acc`` high). The hold is decided from ``ready``
    and the chunk position alone, so RREADY never depends on RVALID or the R payload. Chunks
    that only fill the row assembly register (``L > beat``, not the last beat of the row) never
    wait; the assembly register is updated only when its chunk is taken, so multi-beat rows
    stay intact. The AR channel keeps issuing bursts while a beat is held (up to
    ``dma_outstanding`` in flight).

    Throughput and latency
    ----------------------
    Data moves in ``G``-byte chunks, one chunk per cycle in steady state: when ``L < beat`` a
    beat feeds ``beat / L`` local rows over as many cycles (RREADY low meanwhile); when
    ``L > beat``, ``L / beat`` beats make one local row write. On an otherwise ideal bus,
    every cycle in which a load's local write is denied (``stall.load_spad``/``load_acc``)
    adds one cycle to the load. ARVALID/AWVALID rise 3 cycles after the command handshake;
    ``done`` comes 2 cycles after the last R beat (load) or the last B response (store). A
    zero-length command or a ``BAD_SIZE``/``MISALIGNED`` error retires 2 cycles after the
    handshake, a range error after 3 + (rows searched) cycles. The exact busy cycles of every
    command under the co-simulation's ideal DRAM: :mod:`hw.isa.timing`.
    """

    def __init__(self, config: NPUConfig):
        if not isinstance(config, NPUConfig):
            raise TypeError(f"config must be an NPUConfig, not {config!r}")
        self.config = config
        cfg = config
        super().__init__({
            "load": In(EngineSignature()),
            "store": In(EngineSignature()),
            "bus": Out(AXI4Signature(addr_width=cfg.axi_addr_bits,
                                     data_width=cfg.axi_data_bits,
                                     id_width=cfg.axi_id_bits)),
            "spad_w": In(ArbitratedWriteSignature(addr_width=_log2(cfg.spad_rows),
                                                  shape=cfg.spad_row_bytes * 8)),
            "acc_w": In(ArbitratedWriteSignature(addr_width=_log2(cfg.acc_rows),
                                                 shape=cfg.acc_row_bytes * 8)),
            "spad_r": In(memory.ReadPort.Signature(addr_width=_log2(cfg.spad_rows),
                                                   shape=cfg.spad_row_bytes * 8)),
            "acc_r": In(memory.ReadPort.Signature(addr_width=_log2(cfg.acc_rows),
                                                  shape=cfg.acc_row_bytes * 8)),
            "stall": Out(DmaStall),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config

        # -- load channel: command checks, then AR bursts and R data into local rows ---------
        m.submodules.load_control = load_control = _Control(cfg, self.load)
        m.submodules.load_mover = load_mover = _LoadMover(
            cfg, load_control, self.bus, {LocalMem.SPAD: self.spad_w, LocalMem.ACC: self.acc_w})

        # -- store channel: command checks, then local rows into W beats, AW bursts, B -------
        m.submodules.store_control = store_control = _Control(cfg, self.store)
        m.submodules.store_mover = store_mover = _StoreMover(
            cfg, store_control, self.bus, {LocalMem.SPAD: self.spad_r, LocalMem.ACC: self.acc_r})

        m.d.comb += [
            self.stall.load_dram.eq(load_mover.stall_dram),
            self.stall.load_spad.eq(load_mover.stall_local[LocalMem.SPAD]),
            self.stall.load_acc.eq(load_mover.stall_local[LocalMem.ACC]),
            self.stall.store_dram.eq(store_mover.stall_dram),
        ]
        return m


class _Local:
    """Static facts about one local memory as seen by the DMA."""

    def __init__(self, cfg: NPUConfig, mem: LocalMem):
        self.mem = mem
        self.row_bytes = cfg.spad_row_bytes if mem == LocalMem.SPAD else cfg.acc_row_bytes
        self.depth = cfg.spad_rows if mem == LocalMem.SPAD else cfg.acc_rows
        self.chunk_bytes = min(self.row_bytes, cfg.axi_data_bytes)      # G
        self.chunks_per_row = self.row_bytes // self.chunk_bytes         # L / G
        self.log2_row = _log2(self.row_bytes)
        self.log2_chunk = _log2(self.chunk_bytes)


def _by_mem(is_acc, spad, acc):
    return Mux(is_acc, acc, spad)


class _Control(Elaboratable):
    """One channel's command handling: take, check, start the mover, retire.

    ``body`` holds the taken command for the whole transfer; the mover reads it. The mover
    sees ``start`` for one cycle and raises ``finished`` once its bus traffic is over.
    """

    def __init__(self, cfg: NPUConfig, port):
        self.cfg = cfg
        self.port = port
        self.spad = _Local(cfg, LocalMem.SPAD)
        self.acc = _Local(cfg, LocalMem.ACC)
        self.body = Signal(DmaBody)
        self.is_acc = Signal()
        self.start = Signal()
        self.finished = Signal()           # from the mover
        self.bus_error = Signal()          # from the mover, valid with finished
        self.bus_error_addr = Signal(32)   # from the mover, valid with finished

    def elaborate(self, platform):
        m = Module()
        cfg, port, body = self.cfg, self.port, self.body
        spad, acc = self.spad, self.acc
        is_acc = self.is_acc
        m.d.comb += is_acc.eq(body.mem == LocalMem.ACC)

        error = Signal(ErrorCode)
        error_addr = Signal(32)
        m.d.comb += [port.error.eq(error), port.error_addr.eq(error_addr)]

        # Command-derived quantities (the body register is stable after the handshake).
        local_rows = Signal(16)     # local rows per DRAM row
        m.d.comb += local_rows.eq(_by_mem(is_acc, body.row_bytes >> spad.log2_row,
                                          body.row_bytes >> acc.log2_row))
        depth = _by_mem(is_acc, spad.depth, acc.depth)
        zero = (body.n_rows == 0) | (body.row_bytes == 0)
        bad_size = _by_mem(is_acc, body.row_bytes[:spad.log2_row] != 0,
                           body.row_bytes[:acc.log2_row] != 0)
        addr_misaligned = _by_mem(is_acc, body.dram_addr[:spad.log2_chunk] != 0,
                                  body.dram_addr[:acc.log2_chunk] != 0)
        stride_misaligned = _by_mem(is_acc, body.dram_stride[:spad.log2_chunk] != 0,
                                    body.dram_stride[:acc.log2_chunk] != 0)

        last_row = Signal(16)
        m.d.comb += last_row.eq(body.n_rows - 1)
        dram_span = Signal(48)      # (n_rows - 1) * dram_stride
        local_span = Signal(32)     # (n_rows - 1) * local_stride
        row_dram = Signal(34)       # search for the first bad row
        row_local = Signal(34)
        win_base = Signal(32)       # the issuing queue's DRAM window, latched with the command
        win_limit = Signal(33)

        with m.FSM(name="control") as fsm:
            with m.State("Idle"):
                m.d.comb += port.cmd.ready.eq(1)
                with m.If(port.cmd.valid):
                    m.d.sync += [
                        body.eq(port.cmd.payload.body.dma),
                        win_base.eq(port.window_base),
                        win_limit.eq(Mux(port.window_limit == 0, 1 << 32, port.window_limit)),
                    ]
                    m.next = "Check-shape"

            with m.State("Check-shape"):
                m.d.sync += [
                    dram_span.eq(last_row * body.dram_stride),
                    local_span.eq(last_row * body.local_stride),
                ]
                with m.If(zero):
                    m.d.sync += [error.eq(ErrorCode.NONE), error_addr.eq(0)]
                    m.next = "Done"
                with m.Elif(bad_size):
                    m.d.sync += [error.eq(ErrorCode.BAD_SIZE), error_addr.eq(body.dram_addr)]
                    m.next = "Done"
                with m.Elif(addr_misaligned | stride_misaligned):
                    m.d.sync += [
                        error.eq(ErrorCode.MISALIGNED),
                        error_addr.eq(Mux(addr_misaligned, body.dram_addr,
                                          body.dram_addr + body.dram_stride)),
                    ]
                    m.next = "Done"
                with m.Else():
                    m.next = "Check-range"

            with m.State("Check-range"):
                dram_end = body.dram_addr + dram_span + body.row_bytes     # exclusive, no wrap
                local_end = body.local_row + local_span + local_rows       # exclusive, no wrap
                m.d.sync += [row_dram.eq(body.dram_addr), row_local.eq(body.local_row)]
                with m.If(dram_end > cfg.dram_bytes):
                    m.d.sync += error.eq(ErrorCode.BAD_DRAM_ADDR)
                    m.next = "Find-bad-row"
                with m.Elif((body.dram_addr < win_base) | (dram_end > win_limit)):
                    m.d.sync += error.eq(ErrorCode.WINDOW)
                    m.next = "Find-bad-row"
                with m.Elif(local_end > depth):
                    m.d.sync += error.eq(ErrorCode.BAD_LOCAL_ADDR)
                    m.next = "Find-bad-row"
                with m.Else():
                    m.d.comb += self.start.eq(1)
                    m.next = "Transfer"

            with m.State("Find-bad-row"):
                # Error path only: walk the rows until the first one that is out of range.
                with m.If(error == ErrorCode.BAD_DRAM_ADDR):
                    with m.If(row_dram + body.row_bytes > cfg.dram_bytes):
                        m.d.sync += error_addr.eq(row_dram)
                        m.next = "Done"
                    with m.Else():
                        m.d.sync += row_dram.eq(row_dram + body.dram_stride)
                with m.Elif(error == ErrorCode.WINDOW):
                    with m.If((row_dram < win_base) | (row_dram + body.row_bytes > win_limit)):
                        m.d.sync += error_addr.eq(row_dram)
                        m.next = "Done"
                    with m.Else():
                        m.d.sync += row_dram.eq(row_dram + body.dram_stride)
                with m.Else():
                    with m.If(row_local + local_rows > depth):
                        m.d.sync += error_addr.eq(Mux(row_local > depth, row_local, depth))
                        m.next = "Done"
                    with m.Else():
                        m.d.sync += row_local.eq(row_local + body.local_stride)

            with m.State("Transfer"), m.If(self.finished):
                m.d.sync += [
                    error.eq(Mux(self.bus_error, ErrorCode.AXI_ERROR, ErrorCode.NONE)),
                    error_addr.eq(Mux(self.bus_error, self.bus_error_addr, 0)),
                ]
                m.next = "Done"

            with m.State("Done"):
                m.d.comb += port.done.eq(1)
                m.next = "Idle"

        m.d.comb += port.busy.eq(~fsm.ongoing("Idle"))
        return m


class _BurstGen(Elaboratable):
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
        lb = _log2(beat)
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


class _Walker(Elaboratable):
    """Walks the ``G``-byte chunks of a checked transfer in transfer order, one per ``step``.

    For the current chunk it gives: ``off``, its byte offset in its bus beat; ``lrow``, its
    local row; ``sub``, which ``G``-byte part of the local row it is (non-zero only when
    ``L > beat``); ``beat_end``, it is the last chunk used from its beat; ``local_end``, it is
    the last chunk of its local row; ``burst_last``, its beat is the last of an AXI burst (same
    splitting rule as :class:`_BurstGen`).
    """

    def __init__(self, body, is_acc, *, cfg: NPUConfig):
        self.body = body
        self.is_acc = is_acc
        self.beat_bytes = cfg.axi_data_bytes
        self.spad = _Local(cfg, LocalMem.SPAD)
        self.acc = _Local(cfg, LocalMem.ACC)
        lb = _log2(self.beat_bytes)
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
        lb = _log2(beat)
        page_beats = PAGE_BYTES // beat

        rows_left = Signal(16)
        chunks_left = Signal(16)            # in the current DRAM row, this one included
        row_lo = Signal(12)                 # DRAM row address within its 4 KiB page
        lbase = Signal(16)                  # first local row of the current DRAM row
        beat_idx = Signal(12 - lb)          # beat within its 4 KiB page
        burst_beats = Signal(8)             # beats of the current burst before this one

        chunk = _by_mem(is_acc, spad.chunk_bytes, acc.chunk_bytes)
        row_chunks = _by_mem(is_acc, body.row_bytes >> spad.log2_chunk,
                             body.row_bytes >> acc.log2_chunk)
        last_chunk = chunks_left == 1
        m.d.comb += [
            self.valid.eq(rows_left != 0),
            self.beat_end.eq((self.off + chunk == beat) | last_chunk),
            self.local_end.eq(self.sub == _by_mem(is_acc, spad.chunks_per_row - 1,
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


class _LoadMover(Elaboratable):
    """Load data path: AR bursts from :class:`_BurstGen`, R beats cut into local rows.

    A chunk that completes a local row waits (R beat held) while its memory's ``ready`` is
    low. ``stall_local[mem]`` and ``stall_dram`` are the :attr:`DMA.stall` bits.
    """

    def __init__(self, cfg: NPUConfig, control: _Control, bus, write_ports: dict):
        self.cfg = cfg
        self.control = control
        self.bus = bus
        self.write_ports = write_ports
        self.stall_local = {mem: Signal(name=f"stall_{mem.name.lower()}")
                            for mem in write_ports}
        self.stall_dram = Signal()

    def elaborate(self, platform):
        m = Module()
        cfg, ctl, bus = self.cfg, self.control, self.bus
        beat = cfg.axi_data_bytes

        m.submodules.bursts = bursts = _BurstGen(ctl.body, beat_bytes=beat,
                                                 addr_width=cfg.axi_addr_bits)
        m.submodules.walker = walker = _Walker(ctl.body, ctl.is_acc, cfg=cfg)
        # Start address of every read burst in flight (R returns in order for one ID).
        m.submodules.in_flight = in_flight = SyncFIFO(width=cfg.axi_addr_bits,
                                                      depth=cfg.dma_outstanding)
        m.d.comb += [bursts.start.eq(ctl.start), walker.start.eq(ctl.start)]

        # -- AR ------------------------------------------------------------------------------
        m.d.comb += [
            bursts.room.eq(in_flight.w_rdy),
            bus.arid.eq(0),
            bus.araddr.eq(bursts.addr),
            bus.arlen.eq(bursts.len),
            bus.arsize.eq(_log2(beat)),
            bus.arburst.eq(AXI_BURST_INCR),
            bus.arvalid.eq(bursts.valid),
            bursts.ready.eq(bus.arready),
            in_flight.w_en.eq(bursts.valid & bus.arready),
            in_flight.w_data.eq(bursts.addr),
        ]

        # -- R: one chunk per cycle; after an error just drain ---------------------------------
        error = Signal()
        error_addr = Signal(32)
        r_take = bus.rvalid & bus.rready
        want = Signal()         # the current chunk is wanted (its beat may not be here yet)
        hold = Signal()         # ... and it completes a local row whose write port is taken
        chunk_go = Signal()
        write = Signal()
        m.d.comb += [
            want.eq(walker.valid & ~error),
            chunk_go.eq(bus.rvalid & want & ~hold),
            walker.step.eq(chunk_go),
            bus.rready.eq(error | (walker.valid & walker.beat_end & ~hold)),
            in_flight.r_en.eq(r_take & bus.rlast),
            write.eq(bus.rvalid & want & ~bus.rresp[1]),
        ]
        with m.If(ctl.start):
            m.d.sync += error.eq(0)
        with m.Elif(r_take & bus.rresp[1] & ~error):
            m.d.sync += [error.eq(1), error_addr.eq(in_flight.r_data)]

        holds = []
        for mem, port in self.write_ports.items():
            local = _Local(cfg, mem)
            selected = ctl.is_acc if mem == LocalMem.ACC else ~ctl.is_acc
            # this chunk writes a local row (only the last chunk of a row when L > beat)
            row_done = walker.local_end if local.row_bytes > beat else Const(1)
            mem_hold = Signal(name=f"hold_{mem.name.lower()}")
            m.d.comb += [
                mem_hold.eq(want & selected & row_done & ~port.ready),
                self.stall_local[mem].eq(bus.rvalid & mem_hold),
                port.addr.eq(walker.lrow),
                port.en.eq(write & selected & row_done),
            ]
            holds.append(mem_hold)
            if local.row_bytes == beat:
                m.d.comb += port.data.eq(bus.rdata)
            elif local.row_bytes < beat:
                m.d.comb += port.data.eq(bus.rdata.word_select(walker.off[local.log2_row:],
                                                               local.row_bytes * 8))
            else:
                # Several beats per local row: keep all but the last, write with the last.
                held = Signal((local.row_bytes - beat) * 8, name=f"held_{mem.name.lower()}")
                with m.If(chunk_go & selected & ~walker.local_end):
                    m.d.sync += held.word_select(walker.sub, beat * 8).eq(bus.rdata)
                m.d.comb += port.data.eq(Cat(held, bus.rdata))
        m.d.comb += hold.eq(Cat(*holds).any())
        m.d.comb += self.stall_dram.eq(
            ((bus.arvalid & ~bus.arready) | (in_flight.r_rdy & ~bus.rvalid))
            & ~(bus.rvalid & hold))

        m.d.comb += [
            ctl.finished.eq(bursts.idle & ~in_flight.r_rdy),
            ctl.bus_error.eq(error),
            ctl.bus_error_addr.eq(error_addr),
        ]
        return m


class _StoreMover(Elaboratable):
    """Store data path: local rows read into W beats (with WSTRB), AW bursts, B responses.

    Local reads are issued only when the W beat buffer is sure to have room one cycle later,
    so the read data never has to wait. ``stall_dram`` is :attr:`DMA.stall` ``.store_dram``.
    """

    def __init__(self, cfg: NPUConfig, control: _Control, bus, read_ports: dict):
        self.cfg = cfg
        self.control = control
        self.bus = bus
        self.read_ports = read_ports
        self.stall_dram = Signal()

    def elaborate(self, platform):
        m = Module()
        cfg, ctl, bus = self.cfg, self.control, self.bus
        beat = cfg.axi_data_bytes

        m.submodules.bursts = bursts = _BurstGen(ctl.body, beat_bytes=beat,
                                                 addr_width=cfg.axi_addr_bits)
        m.submodules.walker = walker = _Walker(ctl.body, ctl.is_acc, cfg=cfg)
        # Start address of every write burst waiting for its B response.
        m.submodules.in_flight = in_flight = SyncFIFO(width=cfg.axi_addr_bits,
                                                      depth=cfg.dma_outstanding)
        w_beat = data.StructLayout({"data": beat * 8, "strb": beat, "last": 1})
        m.submodules.w_beats = w_beats = SyncFIFO(width=w_beat.size, depth=_W_BUFFER_DEPTH)
        m.d.comb += [bursts.start.eq(ctl.start), walker.start.eq(ctl.start)]

        # -- AW ------------------------------------------------------------------------------
        m.d.comb += [
            bursts.room.eq(in_flight.w_rdy),
            bus.awid.eq(0),
            bus.awaddr.eq(bursts.addr),
            bus.awlen.eq(bursts.len),
            bus.awsize.eq(_log2(beat)),
            bus.awburst.eq(AXI_BURST_INCR),
            bus.awvalid.eq(bursts.valid),
            bursts.ready.eq(bus.awready),
            in_flight.w_en.eq(bursts.valid & bus.awready),
            in_flight.w_data.eq(bursts.addr),
        ]

        # -- Read local rows: one chunk per cycle while the beat buffer has room -------------
        read = Signal()
        m.d.comb += [
            read.eq(walker.valid & (w_beats.level <= _W_BUFFER_DEPTH - 2)),
            walker.step.eq(read),
        ]
        for mem, port in self.read_ports.items():
            selected = ctl.is_acc if mem == LocalMem.ACC else ~ctl.is_acc
            m.d.comb += [port.addr.eq(walker.lrow), port.en.eq(read & selected)]

        # -- Place the chunk (read data of the previous cycle) into the W beat ---------------
        s2_valid = Signal()
        s2_off = Signal.like(walker.off)
        s2_sub = Signal.like(walker.sub)
        s2_beat_end = Signal()
        s2_burst_last = Signal()
        m.d.sync += [
            s2_valid.eq(read),
            s2_off.eq(walker.off),
            s2_sub.eq(walker.sub),
            s2_beat_end.eq(walker.beat_end),
            s2_burst_last.eq(walker.burst_last),
        ]
        asm_data = Signal(beat * 8)
        asm_strb = Signal(beat)
        beat_data = Signal(beat * 8)
        beat_strb = Signal(beat)
        m.d.comb += [beat_data.eq(asm_data), beat_strb.eq(asm_strb)]
        for mem, port in self.read_ports.items():
            local = _Local(cfg, mem)
            selected = ctl.is_acc if mem == LocalMem.ACC else ~ctl.is_acc
            with m.If(selected):
                if local.row_bytes == beat:
                    m.d.comb += [beat_data.eq(port.data), beat_strb.eq((1 << beat) - 1)]
                elif local.row_bytes < beat:
                    index = s2_off[local.log2_row:]
                    all_bytes = (1 << local.row_bytes) - 1
                    m.d.comb += [
                        beat_data.word_select(index, local.row_bytes * 8).eq(port.data),
                        beat_strb.word_select(index, local.row_bytes).eq(all_bytes),
                    ]
                else:
                    m.d.comb += [
                        beat_data.eq(port.data.word_select(s2_sub, beat * 8)),
                        beat_strb.eq((1 << beat) - 1),
                    ]
        with m.If(ctl.start):
            m.d.sync += asm_strb.eq(0)
        with m.Elif(s2_valid):
            with m.If(s2_beat_end):
                m.d.sync += asm_strb.eq(0)
            with m.Else():
                m.d.sync += [asm_data.eq(beat_data), asm_strb.eq(beat_strb)]
        w_in = data.View(w_beat, w_beats.w_data)
        m.d.comb += [
            w_beats.w_en.eq(s2_valid & s2_beat_end),
            w_in.data.eq(beat_data),
            w_in.strb.eq(beat_strb),
            w_in.last.eq(s2_burst_last),
        ]

        # -- W (never waits for AW) ----------------------------------------------------------
        w_out = data.View(w_beat, w_beats.r_data)
        m.d.comb += [
            bus.wvalid.eq(w_beats.r_rdy),
            bus.wdata.eq(w_out.data),
            bus.wstrb.eq(w_out.strb),
            bus.wlast.eq(w_out.last),
            w_beats.r_en.eq(bus.wready),
        ]

        # -- B -------------------------------------------------------------------------------
        error = Signal()
        error_addr = Signal(32)
        m.d.comb += [bus.bready.eq(1), in_flight.r_en.eq(bus.bvalid)]
        with m.If(ctl.start):
            m.d.sync += error.eq(0)
        with m.Elif(bus.bvalid & bus.bresp[1] & ~error):
            m.d.sync += [error.eq(1), error_addr.eq(in_flight.r_data)]

        all_sent = ~walker.valid & ~s2_valid & ~w_beats.r_rdy
        m.d.comb += self.stall_dram.eq((bus.awvalid & ~bus.awready) | (bus.wvalid & ~bus.wready)
                                       | (all_sent & in_flight.r_rdy & ~bus.bvalid))
        m.d.comb += [
            ctl.finished.eq(bursts.idle & ~in_flight.r_rdy & ~walker.valid & ~s2_valid
                            & ~w_beats.r_rdy),
            ctl.bus_error.eq(error),
            ctl.bus_error_addr.eq(error_addr),
        ]
        return m
