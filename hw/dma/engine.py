"""The DMA engine (:class:`DMA`): a load and a store channel on one AXI4 manager port."""

from amaranth import Module
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from hw.bus import ArbitratedWriteSignature, AXI4Signature, EngineSignature
from hw.config import NPUConfig
from hw.dma.common import DmaStall, TlbEvents, log2
from hw.dma.control import Control
from hw.dma.load import LoadMover
from hw.dma.store import StoreMover
from hw.dma.translate import Translator
from hw.isa import LocalMem

__all__ = ["DMA"]


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

        * ``load_spad`` / ``load_acc``: the load channel has a word (an R beat with RVALID
          high, or a row's last word shifted out of the beat taken before, see
          :mod:`hw.dma.align`; no bus error seen in the command) whose chunk completes a local
          row of the scratchpad / accumulator, and that memory's ``ready`` is low (a writer of
          higher priority has the write port), so the word is held (RREADY low). A beat with
          an error response is held like any other (its row is not written, but the hold is
          decided before RRESP is looked at).
        * ``load_dram``: the load channel is waiting on DRAM: ARVALID high and ARREADY low, or
          read bursts in flight and RVALID low; and neither ``load_spad`` nor ``load_acc`` is
          high. (Cycles where a beat is present but not yet consumed because it feeds several
          local rows, one per cycle, are not stalls; a cycle in which a shifted row's last
          word moves without a beat while RVALID is low is.)
        * ``store_dram``: the store channel is waiting on DRAM: AWVALID high and AWREADY low,
          or WVALID high and WREADY low, or every W beat of the command has been sent (no local
          row left to read, beat buffer empty) and B responses are still outstanding.

        All bits are 0 while a channel is idle or checking a command.
    walk_load, walk_store : ``Out(AXI4Signature(...))`` (with ``tlb_entries > 0``)
        The page walkers' AXI managers (reads of page-table entries, one beat each).
    tlb_inv, tlb_inv_all, tlb_inv_asid : ``In``
        ``TLB_INVALIDATE`` pulse, for both channels' TLBs (:mod:`hw.isa.vm`).
    tlb : ``Out(TlbEvents)``
        The translators' counter events.

    Virtual memory
    --------------
    With ``tlb_entries > 0`` each channel has a :class:`~hw.dma.translate.Translator` (a TLB
    and a page walker) between its burst generator and its address channel. A command whose
    queue's ``Q_VM.enable`` is set (latched with the command) has virtual DRAM addresses:
    check 2 becomes "a row wraps past ``2**32``" and check 3 is skipped; each burst goes out
    once its page is translated. A page fault stops the bursts; the command retires with it
    once the bursts already issued are done (:mod:`hw.isa.vm`).

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
    2. a byte of a row outside ``[0, dram_bytes)``: ``BAD_DRAM_ADDR``, ``error_addr`` = the
       address of the first offending row (low 32 bits);
    3. a byte of a row outside the issuing queue's window ``[window_base, window_limit)``
       (latched with the command; ``window_limit == 0`` means no limit): ``WINDOW``,
       ``error_addr`` = the address of the first offending row;
    4. a local row (``ceil(row_bytes / L)`` per DRAM row) outside the memory:
       ``BAD_LOCAL_ADDR``, ``error_addr`` = the first local row index, in transfer order,
       that is outside the memory (``>= depth``).

    Any byte address, stride and length is accepted: the DMA never reports ``MISALIGNED`` or
    ``BAD_SIZE``.

    Checks 2 and 3 use one multiplier each (extent of the last row, no wrap); when they fail, a
    search of one cycle per row finds the first offending row (error path only).

    An AXI SLVERR/DECERR response makes the command retire with ``AXI_ERROR`` and
    ``error_addr`` = the start address of the first failing burst. The transfer still runs to
    its end so that every burst completes on the bus; after the error a load writes no more
    local rows (a store goes on writing the checked DRAM range).

    Bus
    ---
    Each DRAM row is split into as few INCR bursts as the rules allow: at most
    ``dma_max_burst_beats`` (<= :data:`MAX_BURST_BEATS`) beats, never across a
    :data:`PAGE_BYTES` boundary (both from the AMBA AXI spec, ARM IHI 0022). A row may start
    and end at any byte: the first beat address is aligned down; a load ignores the bytes
    outside the row, a store writes the partial first and last beats with partial WSTRB and
    never writes a byte outside the row. Rows are never merged into one burst. Loads keep up
    to ``dma_outstanding`` read bursts in flight (R data returns in order for one ID); stores
    keep up to ``dma_outstanding`` write bursts waiting for B and retire only after the last B
    response. W data never waits for AW (ARM IHI 0022 A3.3.1).

    Byte alignment (:mod:`hw.dma.align`): the data paths move ``G = min(L, axi_data_bytes)``
    bytes per cycle within *words*, the row shifted by ``s = dram_addr % G`` (per row). With
    ``s == 0`` words are beats and nothing is added. Otherwise a load takes the row's first
    beat alone (one cycle) and, when the row's last word needs no further beat, shifts it out
    of the last one (one cycle per chunk, with RREADY low); a store whose row ends with a beat
    that holds only bytes of its last word sends that beat in a cycle of its own.

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
    ``done`` comes 2 cycles after the last R beat or the last word shifted out after it
    (load) or the last B response (store). A zero-length command retires 2 cycles after the
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
            "spad_w": In(ArbitratedWriteSignature(addr_width=log2(cfg.spad_rows),
                                                  shape=cfg.spad_row_bytes * 8)),
            "acc_w": In(ArbitratedWriteSignature(addr_width=log2(cfg.acc_rows),
                                                 shape=cfg.acc_row_bytes * 8)),
            "spad_r": In(memory.ReadPort.Signature(addr_width=log2(cfg.spad_rows),
                                                   shape=cfg.spad_row_bytes * 8)),
            "acc_r": In(memory.ReadPort.Signature(addr_width=log2(cfg.acc_rows),
                                                  shape=cfg.acc_row_bytes * 8)),
            "stall": Out(DmaStall),
            "tlb_inv": In(1), "tlb_inv_all": In(1), "tlb_inv_asid": In(8),
            "tlb": Out(TlbEvents),
            **({"walk_load": Out(AXI4Signature(addr_width=cfg.axi_addr_bits,
                                               data_width=cfg.axi_data_bits,
                                               id_width=cfg.axi_id_bits)),
                "walk_store": Out(AXI4Signature(addr_width=cfg.axi_addr_bits,
                                                data_width=cfg.axi_data_bits,
                                                id_width=cfg.axi_id_bits))}
               if cfg.tlb_entries else {}),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config

        # -- translators (virtual memory): a TLB and a walker per channel -------------------
        tr = {}
        if cfg.tlb_entries:
            for name in ("load", "store"):
                t = tr[name] = Translator(cfg, write=name == "store",
                                          bus=getattr(self, f"walk_{name}"))
                m.d.comb += [t.inv.eq(self.tlb_inv), t.inv_all.eq(self.tlb_inv_all),
                             t.inv_asid.eq(self.tlb_inv_asid)]
                for event, sig in (("hits", t.ev_hit), ("misses", t.ev_miss),
                                   ("walk_cycles", t.ev_walk), ("faults", t.ev_fault)):
                    m.d.comb += getattr(self.tlb, f"{name}_{event}").eq(sig)

        # -- load channel: command checks, then AR bursts and R data into local rows ---------
        m.submodules.load_control = load_control = Control(cfg, self.load)
        m.submodules.load_mover = load_mover = LoadMover(
            cfg, load_control, self.bus, {LocalMem.SPAD: self.spad_w, LocalMem.ACC: self.acc_w},
            tr.get("load"))

        # -- store channel: command checks, then local rows into W beats, AW bursts, B -------
        m.submodules.store_control = store_control = Control(cfg, self.store)
        m.submodules.store_mover = store_mover = StoreMover(
            cfg, store_control, self.bus, {LocalMem.SPAD: self.spad_r, LocalMem.ACC: self.acc_r},
            tr.get("store"))

        m.d.comb += [
            self.stall.load_dram.eq(load_mover.stall_dram),
            self.stall.load_spad.eq(load_mover.stall_local[LocalMem.SPAD]),
            self.stall.load_acc.eq(load_mover.stall_local[LocalMem.ACC]),
            self.stall.store_dram.eq(store_mover.stall_dram),
        ]
        return m
