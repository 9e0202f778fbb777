"""Ring fetch, the per-queue prefetch buffer and fence writes of the command processor
(:class:`FetchUnit`; the fence's FSM states are in :mod:`hw.cmdproc.fence`)."""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.arith import below, past_end
from hw.bus import AXI_BURST_INCR, AXI_RESP_OKAY, AXI4Signature
from hw.cmdproc.common import (
    ENGINES,
    ErrorReport,
    FetchEntry,
    command_wait,
    engine_payload,
    round_robin,
    sem_increment,
    sem_wait,
)
from hw.cmdproc.fence import fence_states
from hw.config import NPUConfig
from hw.dma.translate import Translator
from hw.isa import (
    COMMAND_BYTES,
    MAX_RING_SIZE,
    PAGE_BYTES,
    PAGE_FAULTS,
    TLB_COUNTERS,
    Command,
    ErrorCode,
    Opcode,
    VmWord,
)

__all__ = ["FetchUnit", "FetchEntry", "FetchTlbEvents"]

#: The fetch translator's counter events (``tlb.fetch.*``, :data:`hw.isa.COUNTER_NAMES`).
FetchTlbEvents = data.StructLayout(dict.fromkeys(TLB_COUNTERS, 1))


class FetchUnit(wiring.Component):
    """Fetches commands from the rings into per-queue prefetch buffers, loads them into the
    stages, and executes fences.

    **Fetch** (one FSM). In ``IDLE`` it serves, round-robin, a queue whose stage holds a fence
    that may run (``fence_ready``, served first) or else a queue with a command in its ring
    beyond what its buffer holds (``HEAD + count != TAIL``, or ``HEAD != TAIL`` for a ring in
    a state no ring can be, :func:`hw.isa.ring_is_bad`), room in its buffer, no ring error
    pending, not stopped and not being reset. ``FETCH_CHECK`` checks the ring (``RING_SIZE``,
    ``HEAD`` and ``TAIL``) and the first slot it reads (``RING_BASE +
    (HEAD + count) * 32``: ring alignment, DRAM range, the queue's window); on
    a failure it records the error for the loader (below) and reads nothing. Otherwise it
    reads ``k`` commands in one INCR burst, ``k`` the largest number that stays before
    ``TAIL`` and the end of the ring, inside the window and the DRAM, inside one 4 KiB page
    (AXI4, ARM IHI 0022, A3.4.1) and fits the buffer's free entries (at most
    ``fetch_depth``). Each command goes into the buffer with its last beat; the FSM is in
    ``IDLE`` again the cycle after the burst's last beat.

    **Loader**: each cycle it picks, round-robin, one queue whose stage is empty (not stopped
    or being reset) and whose buffer holds a command that has somewhere to go (or, empty, a
    ring error pending), and looks at the buffer's oldest entry: a burst error of a burst of
    several commands drops the queue's buffer, and its next ``fetch_depth`` fetches read one
    command each (so a bus fault is reported for the command whose 32 bytes the failing
    burst read, as with one command per burst); a burst error of a one-command burst, an
    unknown opcode or a bad semaphore id is reported as the error of that command (``err``;
    ``HEAD`` stays on it); a pending ring error is reported (address: ``RING_BASE`` for
    ``MISALIGNED`` and ``BAD_SIZE``, else the slot at ``HEAD``).
    Otherwise an engine command goes into its engine's queue (``dispatch``; a queue is picked
    only when its oldest command has room there) and a processor command into the stage
    (``push``), and ``HEAD`` and ``Q_FETCHED`` advance. Each command's destination is
    decoded once, as it goes into the buffer. So ``HEAD`` is the next slot taken in, as
    before the buffer: errors found at fetch are reported when the command would be taken
    in, in order, and the slots from ``HEAD`` to ``TAIL`` stay the device's.

    **Fence**: checks its address (alignment, DRAM range, window), writes ``value`` (or
    ``cycles`` with ``timestamp``) in one beat, waits for the B response, then pulses
    ``fence_done`` and ``fence_irq`` (if ``flags.irq``). A fence that signals offers its
    semaphore increment on ``fence_inc`` from the cycle after the B response
    (``FENCE_SIGNAL``) and completes in the cycle it is taken (a reset of its queue then
    withdraws it). A check or bus error is reported on ``err``.

    A queue reset (``qclear``) empties its buffer and ring error, ``HEAD := TAIL``; a burst
    already requested for it completes on the bus (its address stays stable: AXI4 A3.2.1)
    and its commands are dropped, as they are after the buffer was dropped for a bus error.

    **Translation** (``tlb_entries > 0``, :mod:`hw.isa.vm`): a queue whose ``Q_VM.enable`` is
    set (read when the FSM picks it) has a virtual ring and virtual fence addresses. Its
    checks drop the window, and the DRAM range becomes the 32-bit space (a fence's 4-byte
    aligned word always fits); the burst length is not limited by the window or the DRAM.
    The burst (``FETCH_ADDR``) or the fence write (``FENCE_WRITE``: AWVALID and WVALID) goes
    out once the fetch's own :class:`~hw.dma.translate.Translator` (a TLB and a walker,
    whose entry reads go out on this unit's AXI manager while the FSM waits) has translated
    its page with read (ring) or write (fence) permission. A page fault of a burst is
    recorded as the queue's ring error (reported by the loader in order, at the slot's
    virtual address; a reset meanwhile drops it); ``resume`` or ``skip`` of the queue clear
    a ring error that is a page fault, so the slot is fetched again (there is no command to
    skip). A page fault of a fence is reported as the fence's error and the fence stays in
    the stage: ``resume`` runs it again, ``skip`` retires it without writing (its semaphore
    is signalled, no interrupt).

    Ports
    -----
    bus : ``Out(AXI4Signature(...))``
        Ring fetch and fence writes (the AR/R and AW/W/B channels, ID 0 here).
    ring_base, ring_size, tail, window_base, window_limit : ``In(ArrayLayout(32, n_queues))``
    vm : ``In(ArrayLayout(32, n_queues))``
        Per-queue ``Q_VM`` (:class:`hw.isa.VmWord`).
    resume, skip : ``In(n_queues)``
        ``Q_RESUME`` pulses (see *Translation*).
    tlb_inv, tlb_inv_all : ``In(1)``, tlb_inv_asid : ``In(8)``
        ``TLB_INVALIDATE`` (for the fetch's TLB).
    tlb : ``Out(FetchTlbEvents)``
        The fetch translator's counter events (0 without translation hardware).
    head, fetched : ``Out(ArrayLayout(32, n_queues))``
        Next slot loaded into the stage; commands loaded since the queue's last reset.
    stop, qclear : ``In(n_queues)``
    cycles : ``In(32)``
        Fence timestamps.
    stage : ``In(ArrayLayout(engine_payload(config, "processor"), n_queues))``,
    stage_valid, fence_ready : ``In(n_queues)``
        The stages (:class:`~hw.cmdproc.stage.Stage`).
    queue : ``Out(range(n_queues))``
        The queue being fetched or fenced.
    push : ``Out(1)``, push_queue : ``Out(range(n_queues))``, push_cmd : ``Out(Command)``,
    push_index : ``Out(32)``, push_wait : ``Out(sem_wait(config))``
        Load the stage of ``push_queue`` (a processor command), or, with ``dispatch``, write
        the command into an engine's queue; ``push_wait`` is the command's semaphore wait
        (for the semaphore unit's lookup).
    room : ``In(ArrayLayout(n_queues, 4))``
        Per engine (order of :data:`~hw.cmdproc.common.ENGINES`) and queue: its engine queue
        takes a command (``EngineQueue.i[q].ready``).
    dispatch : ``Out(4)``
        One-hot: the command goes to that engine's queue for ``push_queue``.
    fence_done, fence_irq : ``Out(1)``
        The fence of ``queue`` completed.
    fence_inc : ``Out(stream.Signature(sem_increment(config)))``
    load_err : ``Out(1)``, load_err_info : ``Out(ErrorReport)``
        An error of the loader (one-cycle pulse), of queue ``push_queue``.
    fence_err : ``Out(1)``, fence_err_info : ``Out(ErrorReport)``
        An error of the fence (one-cycle pulse), of queue ``queue``.
    active : ``Out(n_queues)``
        Per queue: the FSM works on it (not ``IDLE``).
    """

    def __init__(self, config: NPUConfig):
        self.config = config
        n = config.n_queues
        q32 = data.ArrayLayout(32, n)
        super().__init__({
            "bus": Out(AXI4Signature(addr_width=config.axi_addr_bits,
                                     data_width=config.axi_data_bits,
                                     id_width=config.axi_id_bits)),
            "ring_base": In(q32), "ring_size": In(q32), "tail": In(q32),
            "window_base": In(q32), "window_limit": In(q32), "vm": In(q32),
            "resume": In(n), "skip": In(n),
            "tlb_inv": In(1), "tlb_inv_all": In(1), "tlb_inv_asid": In(8),
            "tlb": Out(FetchTlbEvents),
            "head": Out(q32), "fetched": Out(q32),
            "stop": In(n), "qclear": In(n), "cycles": In(32),
            "stage": In(data.ArrayLayout(engine_payload(config, "processor"), n)),
            "stage_valid": In(n), "fence_ready": In(n),
            "queue": Out(range(max(n, 2))),
            "push": Out(1), "push_queue": Out(range(max(n, 2))), "push_cmd": Out(Command),
            "push_index": Out(32), "push_wait": Out(sem_wait(config)),
            "room": In(data.ArrayLayout(n, len(ENGINES))), "dispatch": Out(len(ENGINES)),
            "fence_done": Out(1), "fence_irq": Out(1),
            "fence_inc": Out(stream.Signature(sem_increment(config))),
            "load_err": Out(1), "load_err_info": Out(ErrorReport),
            "fence_err": Out(1), "fence_err_info": Out(ErrorReport),
            "active": Out(n),
        })

    def elaborate(self, platform):
        m = Module()
        f = _FetchState(self)
        m.submodules.buffer = f.mem
        m.submodules.kinds = f.kind_mem
        self._translator(m, f)
        self._loader(m, f)
        fences, fetches = self._arbiters(m, f)
        with m.FSM(name="fetch") as fsm:
            self._idle(m, f, fences, fetches)
            self._fetch(m, f)
            fence_states(self, m, f)
        self._walker_bus(m, f)
        # a reset of the current queue, or its buffer dropped, while the FSM works on it:
        # the rest of the burst is dropped (the IDLE pick clears this)
        with m.If(~fsm.ongoing("IDLE") & (f.bit(self.qclear) | f.flush_cur)):
            m.d.sync += f.abort.eq(1)
        self._per_queue(m, f, fsm)
        return m

    # -- translation -------------------------------------------------------------------------

    def _translator(self, m: Module, f: _FetchState) -> None:
        """The fetch's TLB and walker (with ``tlb_entries > 0``), working for the queue the
        FSM picked (its ``Q_VM`` latched then)."""
        cfg = self.config
        if not cfg.tlb_entries:
            m.d.comb += f.translate.eq(0)
            return
        m.submodules.translator = tr = f.tr = Translator(cfg, write=None, bus=f.walk)
        m.d.comb += [
            f.translate.eq(VmWord(f.vm).enable), tr.vm.eq(f.vm),
            tr.vaddr.eq(f.addr), tr.row_addr.eq(f.addr),
            tr.inv.eq(self.tlb_inv), tr.inv_all.eq(self.tlb_inv_all),
            tr.inv_asid.eq(self.tlb_inv_asid),
            self.tlb.hits.eq(tr.ev_hit), self.tlb.misses.eq(tr.ev_miss),
            self.tlb.walk_cycles.eq(tr.ev_walk), self.tlb.faults.eq(tr.ev_fault),
        ]

    def _walker_bus(self, m: Module, f: _FetchState) -> None:
        """The walker's entry reads go out on this unit's AR/R channels: it reads only while
        the FSM waits for its translation (no burst of the unit is in flight then)."""
        if not self.config.tlb_entries:
            return
        bus, w = self.bus, f.walk
        m.d.comb += [w.arready.eq(bus.arready), w.rvalid.eq(bus.rvalid),
                     w.rdata.eq(bus.rdata), w.rresp.eq(bus.rresp), w.rlast.eq(bus.rlast),
                     w.rid.eq(bus.rid)]
        with m.If(w.arvalid):
            m.d.comb += [bus.arvalid.eq(1), bus.araddr.eq(w.araddr), bus.arlen.eq(w.arlen),
                         bus.arsize.eq(w.arsize), bus.arburst.eq(w.arburst)]
        with m.If(w.rready):
            m.d.comb += bus.rready.eq(1)

    # -- loader: prefetch buffer -> stage ------------------------------------------------------

    def _loader(self, m: Module, f: _FetchState) -> None:
        """One queue a cycle: the oldest buffered command into the empty stage, or its error."""
        cfg = self.config
        n, depth = cfg.n_queues, cfg.fetch_depth
        cand = []
        for q in range(n):
            kind = f.kind_rd[q].data
            room = Signal(name=f"front_room{q}")   # the oldest command has somewhere to go
            m.d.comb += room.eq((kind == 0) | Cat(
                (kind == e + 1) & self.room[e][q] for e in range(len(ENGINES))).any())
            cand.append(~self.stop[q] & ~self.qclear[q] & ~self.stage_valid[q]
                        & (((f.count[q] != 0) & room)
                           | ((f.count[q] == 0) & (f.ring_err[q] != ErrorCode.NONE))))
            m.d.comb += f.kind_rd[q].addr.eq(q * depth + (f.rp[q] if depth > 1 else 0))
        last = Signal(range(max(n, 2)), name="load_last")
        any_load, sel = round_robin(m, last, cand, n)
        kind = Signal(range(len(ENGINES) + 1), name="load_kind")
        with m.Switch(sel):
            for q in range(n):
                with m.Case(q):
                    m.d.comb += kind.eq(f.kind_rd[q].data)
        rd = f.rd
        entry = rd.data
        hdr = entry.cmd.header
        opcode = hdr.opcode
        waits = hdr.flags.wait | (opcode == Opcode.WAIT)
        signals = hdr.flags.signal | (opcode == Opcode.SIGNAL)
        slot = Signal(32, name="load_slot")
        index = self.fetched[sel]
        code = f.ring_err[sel]
        m.d.comb += [
            rd.addr.eq(sel * depth + (f.rp[sel] if depth > 1 else 0)),
            slot.eq(self.ring_base[sel] + self.head[sel] * COMMAND_BYTES),
            self.push_queue.eq(sel), self.push_cmd.eq(entry.cmd), self.push_index.eq(index),
            self.push_wait.eq(command_wait(m, cfg, entry.cmd, "load_wait")),
            f.load_info.cmd.eq(index),
        ]
        with m.If(any_load):
            m.d.sync += last.eq(sel)
            with m.If(f.count[sel] == 0):       # a ring error, reported in order
                whole = code.as_value().matches(ErrorCode.MISALIGNED, ErrorCode.BAD_SIZE)
                m.d.comb += [f.load_err.eq(1), f.load_info.code.eq(code),
                             f.load_info.addr.eq(Mux(whole, self.ring_base[sel], slot))]
            with m.Elif(entry.bus_err & entry.multi):
                m.d.comb += f.flush.eq(1)
            with m.Elif(entry.bus_err):         # the command never decoded: opcode 0
                m.d.comb += [f.load_err.eq(1), f.load_info.code.eq(ErrorCode.AXI_ERROR),
                             f.load_info.addr.eq(slot)]
            with m.Elif(~opcode.as_value().matches(*(op.value for op in Opcode))):
                m.d.comb += [f.load_err.eq(1), f.load_info.code.eq(ErrorCode.BAD_OPCODE),
                             f.load_info.addr.eq(slot), f.load_info.opcode.eq(opcode)]
            with m.Elif(waits & (hdr.wait_sem >= cfg.n_sems)):
                m.d.comb += [f.load_err.eq(1), f.load_info.code.eq(ErrorCode.BAD_SEM),
                             f.load_info.addr.eq(hdr.wait_sem), f.load_info.opcode.eq(opcode)]
            with m.Elif(signals & (hdr.signal_sem >= cfg.n_sems)):
                m.d.comb += [f.load_err.eq(1), f.load_info.code.eq(ErrorCode.BAD_SEM),
                             f.load_info.addr.eq(hdr.signal_sem),
                             f.load_info.opcode.eq(opcode)]
            with m.Else():
                m.d.comb += f.loaded.eq(1)
                with m.If(kind == 0):
                    m.d.comb += self.push.eq(1)
                for e in range(len(ENGINES)):
                    with m.If(kind == e + 1):
                        m.d.comb += self.dispatch[e].eq(1)
        m.d.comb += [f.load_sel.eq(sel), self.load_err.eq(f.load_err),
                     self.load_err_info.eq(f.load_info), self.fence_err.eq(f.fence_err),
                     self.fence_err_info.eq(f.fence_info)]

    # -- fetch FSM ---------------------------------------------------------------------------

    def _arbiters(self, m: Module, f: _FetchState) -> tuple:
        """Round-robin pickers of a queue with a ready fence and of a queue to fetch from;
        returns ``(any, sel, last)`` for each."""
        n, depth = self.config.n_queues, self.config.fetch_depth
        fetchable = [f.more[q] & (f.count[q] != depth)
                     & (f.ring_err[q] == ErrorCode.NONE) & ~self.stop[q] & ~self.qclear[q]
                     for q in range(n)]
        fetch_last = Signal(range(max(n, 2)))
        fence_last = Signal(range(max(n, 2)))
        any_fetch, fetch_sel = round_robin(m, fetch_last, fetchable, n)
        any_fence, fence_sel = round_robin(m, fence_last, list(self.fence_ready), n)
        return (any_fence, fence_sel, fence_last), (any_fetch, fetch_sel, fetch_last)

    def _idle(self, m: Module, f: _FetchState, fences: tuple, fetches: tuple) -> None:
        """Pick a queue: a ready fence first, else a queue to fetch from."""
        n = self.config.n_queues
        any_fence, fence_sel, fence_last = fences
        any_fetch, fetch_sel, fetch_last = fetches
        inc = self.fence_inc.payload
        m.d.comb += [inc.sem.eq(f.cmd.signal_sem), inc.queue.eq(self.queue),
                     inc.index.eq(f.cmd.index)]
        with m.State("IDLE"):
            if self.config.tlb_entries:
                m.d.comb += f.tr.start.eq(any_fence | any_fetch)
                m.d.sync += f.vm.eq(self.vm[Mux(any_fence, fence_sel, fetch_sel)])
            with m.If(any_fence):
                m.d.sync += [self.queue.eq(fence_sel), fence_last.eq(fence_sel), f.abort.eq(0)]
                with m.Switch(fence_sel):
                    for q in range(n):
                        with m.Case(q):
                            m.d.sync += f.cmd.eq(self.stage[q])
                m.next = "FENCE_CHECK"
            with m.Elif(any_fetch):
                m.d.sync += [self.queue.eq(fetch_sel), fetch_last.eq(fetch_sel), f.abort.eq(0)]
                m.next = "FETCH_CHECK"

    def _burst_length(self, m: Module, f: _FetchState) -> Signal:
        """Commands the burst from the current queue's first free slot reads (``>= 1`` when
        the slot passed its checks): the least of what the buffer, ``TAIL``, the ring's end,
        the window, the DRAM and the 4 KiB page allow, and 1 while ``single``.

        Each limit is clamped to ``fetch_depth`` without a wide carry chain (:func:`below`).
        The ring's end ``RING_SIZE - fhead`` is ``(mask & ~fhead) + 1`` (``fhead`` holds only
        bits of ``mask = RING_SIZE - 1``, so ``mask - fhead`` borrows nothing; with
        ``RING_SIZE`` 0 it is ``-fhead``, a number below ``fetch_depth`` whose low bits are
        the limit). The DRAM's end and the page's are counted as ``~slot + 1`` over the
        bits between: only the bits that count once the slot passed its checks (the burst's
        length is used only then: ``RING_BASE``, hence the slot, 32-byte aligned, a physical
        slot below ``dram_bytes``)."""
        cfg, cur = self.config, self.queue
        depth = cfg.fetch_depth
        shift = COMMAND_BYTES.bit_length() - 1
        slot, fhead, mask = f.slot_addr, f.fhead[cur], f.mask[cur]
        width = len(Signal(range(depth + 1)))

        def clamp(t):
            return Mux(below(t, depth), t, depth)

        def plus_one(r, wrap=0):    # min(r + 1, depth) of an unsigned r (or r + 1 if wrap)
            short = below(r, depth - 1) if depth > 1 else 0
            return Mux(wrap | short, r[:width] + 1, depth)

        limits = [
            clamp(depth - f.count[cur]),
            clamp((self.tail[cur] - fhead) & mask),
            plus_one(mask & ~fhead, wrap=mask[-1]),
            Mux(f.translate, depth, clamp(f.win_room >> shift)),       # physical only
            Mux(f.translate, depth,
                plus_one(~slot[shift:cfg.dram_bytes.bit_length() - 1])),
            plus_one(~slot[shift:PAGE_BYTES.bit_length() - 1]),
        ]
        k = Signal(range(depth + 1), name="burst_cmds")
        m.d.comb += k.eq(Mux(f.single[cur] != 0, 1, depth))
        for i, t in enumerate(limits):
            ti = Signal(range(depth + 1), name=f"burst_limit{i}")
            m.d.comb += ti.eq(t)
            k_next = Signal(range(depth + 1), name=f"burst_cmds{i}")
            m.d.comb += k_next.eq(Mux(ti < k, ti, k))
            k = k_next
        return k

    def _fetch(self, m: Module, f: _FetchState) -> None:
        """Check the first slot, then read ``k`` commands in one burst into the buffer."""
        cfg, bus = self.config, self.bus
        beat_bytes = cfg.axi_data_bytes
        bpc = COMMAND_BYTES // beat_bytes       # beats per command
        cur = self.queue
        k = self._burst_length(m, f)
        with m.State("FETCH_CHECK"):
            with m.If(f.gone() | ~f.bit(f.more)):
                m.next = "IDLE"
            with m.Elif(f.bit(f.bad)):
                m.d.comb += [f.chk_set.eq(1), f.chk_code.eq(ErrorCode.BAD_SIZE)]
                m.next = "IDLE"
            with m.Elif(self.ring_base[cur][:5] != 0):
                m.d.comb += [f.chk_set.eq(1), f.chk_code.eq(ErrorCode.MISALIGNED)]
                m.next = "IDLE"
            with m.Elif(Mux(f.translate, past_end(f.slot_addr, COMMAND_BYTES, 1 << 32),
                            past_end(f.slot_addr, COMMAND_BYTES, cfg.dram_bytes))):
                m.d.comb += [f.chk_set.eq(1), f.chk_code.eq(ErrorCode.BAD_DRAM_ADDR)]
                m.next = "IDLE"
            with m.Elif(~f.translate & ((f.slot_addr < f.win_base)
                                        | below(f.win_room, COMMAND_BYTES))):
                m.d.comb += [f.chk_set.eq(1), f.chk_code.eq(ErrorCode.WINDOW)]
                m.next = "IDLE"
            with m.Else():
                # the burst's address and length are latched: a queue reset or ring write
                # while ARVALID waits for ARREADY must not change them (AXI4, ARM IHI 0022,
                # A3.2.1)
                m.d.comb += f.single_dec.eq(f.single[cur] != 0)
                m.d.sync += [f.addr.eq(f.slot_addr), f.ar_len.eq(k * bpc - 1),
                             f.multi.eq(k != 1)]
                m.next = "FETCH_ADDR"
        with m.State("FETCH_ADDR"):
            # a translated queue's burst waits for its page (a walk keeps the FSM here even if
            # the queue is reset meanwhile: the burst then goes out and its commands are
            # dropped); a page fault is the queue's ring error
            go, paddr = f.present(m, 0, 1)
            m.d.comb += [
                bus.arvalid.eq(go), bus.araddr.eq(paddr), bus.arlen.eq(f.ar_len),
                bus.arsize.eq(beat_bytes.bit_length() - 1), bus.arburst.eq(AXI_BURST_INCR),
            ]
            if cfg.tlb_entries:
                m.d.comb += f.tr.handshake.eq(go & bus.arready)
            m.d.sync += [f.beat.eq(0), f.resp_err.eq(0)]
            with m.If(go & bus.arready):
                m.next = "FETCH_DATA"
            if cfg.tlb_entries:
                with m.Elif(f.tr.fault):
                    m.d.comb += [f.chk_set.eq(~f.abort & ~f.bit(self.qclear) & ~f.flush_cur),
                                 f.chk_code.eq(f.tr.fault_code)]
                    m.next = "IDLE"
        with m.State("FETCH_DATA"):
            m.d.comb += bus.rready.eq(1)
            err = f.resp_err | (bus.rresp != AXI_RESP_OKAY)
            with m.If(bus.rvalid):
                with m.If(f.beat == bpc - 1):
                    cmd = Cat(f.partial, bus.rdata) if bpc > 1 else bus.rdata
                    m.d.comb += [
                        f.wr.addr.eq(cur * cfg.fetch_depth
                                     + (f.wp[cur] if cfg.fetch_depth > 1 else 0)),
                        f.wr.data.eq(Cat(cmd, err, f.multi)),
                        f.wr.en.eq(~f.abort & ~f.bit(self.qclear) & ~f.flush_cur),
                        f.written.eq(f.wr.en),
                        f.kind_wr.addr.eq(f.wr.addr), f.kind_wr.en.eq(f.wr.en),
                        f.kind_wr.data.eq(self._kind(m, Command(cmd), err)),
                    ]
                    m.d.sync += [f.beat.eq(0), f.resp_err.eq(0)]
                with m.Else():
                    m.d.sync += [f.partial.word_select(f.beat, cfg.axi_data_bits).eq(bus.rdata),
                                 f.beat.eq(f.beat + 1), f.resp_err.eq(err)]
                with m.If(bus.rlast):
                    m.next = "IDLE"

    def _kind(self, m: Module, cmd, bus_err) -> Signal:
        """Decoded once, as the command goes into the buffer: ``1 + e`` for a command of
        engine ``e`` of :data:`ENGINES`, 0 for a processor command or one the loader reports
        (burst error, unknown opcode, bad semaphore id)."""
        cfg = self.config
        hdr = cmd.header
        opcode = hdr.opcode
        waits = hdr.flags.wait | (opcode == Opcode.WAIT)
        signals = hdr.flags.signal | (opcode == Opcode.SIGNAL)
        bad = (bus_err | (waits & (hdr.wait_sem >= cfg.n_sems))
               | (signals & (hdr.signal_sem >= cfg.n_sems)))
        kind = Signal(range(len(ENGINES) + 1), name="w_kind")
        for e, ops in enumerate(ENGINES.values()):
            with m.If(~bad & opcode.as_value().matches(*(op.value for op in ops))):
                m.d.comb += kind.eq(e + 1)
        return kind

    # -- per-queue registers -----------------------------------------------------------------

    def _per_queue(self, m: Module, f: _FetchState, fsm) -> None:
        """Buffer pointers and count, HEAD, Q_FETCHED, the pending ring error and the
        single-command fetches, per queue; which queue the FSM works on."""
        depth = self.config.fetch_depth
        # one command leaves the buffer a cycle (of queue push_queue): one increment each
        sel = self.push_queue
        head_next = Signal(32, name="head_next")
        fetched_next = Signal(32, name="fetched_next")
        m.d.comb += [head_next.eq((self.head[sel] + 1) & f.mask[sel]),
                     fetched_next.eq(self.fetched[sel] + 1)]
        for q in range(self.config.n_queues):
            written = f.written & (self.queue == q)
            loaded = f.loaded & (self.push_queue == q)
            flushed = f.flush & (f.load_sel == q)
            # a fence's page fault: skip retires it unwritten, resume runs it again
            with m.If(self.qclear[q] | (self.fence_done & (self.queue == q))
                      | self.resume[q]):
                m.d.sync += [f.fence_faulted[q].eq(0), f.fence_skip[q].eq(0)]
            with m.Elif(f.fence_fault & (self.queue == q)):
                m.d.sync += f.fence_faulted[q].eq(1)
            with m.Elif(self.skip[q] & f.fence_faulted[q]):
                m.d.sync += f.fence_skip[q].eq(1)
            with m.If(self.qclear[q]):
                m.d.sync += [self.head[q].eq(self.tail[q]), self.fetched[q].eq(0),
                             f.count[q].eq(0), f.rp[q].eq(0), f.wp[q].eq(0),
                             f.ring_err[q].eq(0), f.single[q].eq(0)]
            with m.Elif(flushed):
                m.d.sync += [f.count[q].eq(0), f.wp[q].eq(f.rp[q]), f.single[q].eq(depth)]
            with m.Else():
                m.d.sync += f.count[q].eq(f.count[q] + written - loaded)
                with m.If(written & (depth > 1)):
                    m.d.sync += f.wp[q].eq(f.wp[q] + 1)
                with m.If(loaded):
                    m.d.sync += [f.rp[q].eq(f.rp[q] + (depth > 1)),
                                 self.head[q].eq(head_next), self.fetched[q].eq(fetched_next)]
                with m.If((self.resume[q] | self.skip[q])
                          & f.ring_err[q].as_value().matches(*(c.value for c in PAGE_FAULTS))):
                    m.d.sync += f.ring_err[q].eq(0)     # fetched again (hw.isa.vm)
                with m.If(f.chk_set & (self.queue == q)):
                    m.d.sync += f.ring_err[q].eq(f.chk_code)
                with m.If(f.single_dec & (self.queue == q)):
                    m.d.sync += f.single[q].eq(f.single[q] - 1)
        cur = self.queue
        m.d.comb += [
            f.win_limit.eq(Mux(f.win_lim_raw == 0, 1 << 32, f.win_lim_raw)),
            f.slot_addr.eq(self.ring_base[cur] + f.fhead[cur] * COMMAND_BYTES),
            f.win_room.eq(f.win_limit - f.slot_addr),
        ]
        for q in range(self.config.n_queues):
            m.d.comb += [
                f.mask[q].eq(self.ring_size[q] - 1),
                f.fhead[q].eq((self.head[q] + f.count[q]) & f.mask[q]),
                f.bad[q].eq(_ring_bad(self.ring_size[q], f.mask[q][:32], self.head[q],
                                      self.tail[q])),
                # = Mux(bad, HEAD != TAIL, fetch_head != TAIL); as a Mux, ABC mapped the
                # standalone FetchUnit into 445 more LUT4 (6,009 against 5,564)
                f.more[q].eq(((f.fhead[q] != self.tail[q]) & ~f.bad[q])
                             | ((self.head[q] != self.tail[q]) & f.bad[q])),
                self.active[q].eq(~fsm.ongoing("IDLE") & (self.queue == q)),
            ]


def _ring_bad(size, mask, head, tail):
    """:func:`hw.isa.ring_is_bad` of ``RING_SIZE`` ``size`` (``mask = size - 1``), ``HEAD``
    ``head`` and ``TAIL`` ``tail``: a power of two has no bit in common with ``mask`` and one
    at or above bit 1, none above :data:`~hw.isa.MAX_RING_SIZE`'s; then ``x >= size`` is a
    bit of ``x`` outside ``mask``."""
    return ((size & mask).any() | ~size[1:].any() | size[MAX_RING_SIZE.bit_length():].any()
            | ((head | tail) & ~mask).any())


class _FetchState:
    """Registers, wires and the buffer of the fetch unit (names as in the VCD)."""

    def __init__(self, unit: FetchUnit):
        cfg = unit.config
        n, depth = cfg.n_queues, cfg.fetch_depth
        bpc = COMMAND_BYTES // cfg.axi_data_bytes
        self.unit = unit
        self.mem = Memory(shape=FetchEntry, depth=n * depth, init=[])
        self.wr = self.mem.write_port()
        self.rd = self.mem.read_port(domain="comb")
        # each entry's destination (see FetchUnit._kind), read at every queue's oldest entry
        self.kind_mem = Memory(shape=range(len(ENGINES) + 1), depth=n * depth, init=[])
        self.kind_wr = self.kind_mem.write_port()
        self.kind_rd = [self.kind_mem.read_port(domain="comb") for _ in range(n)]
        ptr = max(1, (depth - 1).bit_length())
        self.count = Signal(data.ArrayLayout(range(depth + 1), n), name="buf_count")
        self.rp = Signal(data.ArrayLayout(ptr, n), name="buf_rp")     # oldest entry
        self.wp = Signal(data.ArrayLayout(ptr, n), name="buf_wp")     # next entry written
        self.fhead = Signal(data.ArrayLayout(32, n), name="fetch_head")   # HEAD + count
        # RING_SIZE - 1, as a signed number (-1: RING_SIZE 0, every bit set)
        self.mask = Signal(data.ArrayLayout(signed(33), n), name="ring_mask")
        # fetch_head != TAIL; HEAD != TAIL if the ring is bad (its fetch then fails)
        self.more = Signal(n, name="ring_more")
        self.bad = Signal(n, name="ring_bad")       # hw.isa.ring_is_bad
        self.ring_err = Signal(data.ArrayLayout(ErrorCode, n), name="ring_err")
        self.single = Signal(data.ArrayLayout(range(depth + 1), n), name="single")
        self.abort = Signal(name="cur_abort")      # the burst's commands are dropped
        # the fence being executed (the stage's narrow payload)
        self.cmd = Signal(engine_payload(cfg, "processor"), name="cmd", reset_less=True)
        self.partial = Signal(max(1, (bpc - 1) * cfg.axi_data_bits), name="partial_cmd",
                              reset_less=True)
        self.beat = Signal(range(bpc + 1), name="beat")
        self.resp_err = Signal(name="resp_err")
        self.multi = Signal(name="burst_multi")
        # the fetch burst's AR address (a fence's AW address) and the burst's length
        self.addr = Signal(32, name="fetch_addr", reset_less=True)
        self.ar_len = Signal(8, name="fetch_arlen", reset_less=True)
        self.aw_done = Signal(name="aw_done")
        self.w_done = Signal(name="w_done")
        self.word = Signal(32, name="fence_word", reset_less=True)
        self.win_limit = Signal(33, name="win_limit")
        # translation (hw.isa.vm)
        self.vm = Signal(32, name="cur_vm")            # Q_VM of the queue worked on
        self.translate = Signal(name="cur_translate")
        self.tr = None
        self.walk = AXI4Signature(addr_width=cfg.axi_addr_bits, data_width=cfg.axi_data_bits,
                                  id_width=cfg.axi_id_bits).create(path=("walk",))
        self.fence_faulted = Signal(n, name="fence_faulted")  # its staged fence page-faulted
        self.fence_skip = Signal(n, name="fence_skip")        # ... and Q_RESUME.skip came
        self.fence_fault = Signal(name="fence_fault")         # wire: it faults now
        self.slot_addr = Signal(33, name="slot_addr")
        self.win_room = Signal(signed(34), name="win_room")    # window limit - slot_addr
        # wires
        self.written = Signal(name="buf_written")    # an entry goes into the buffer
        self.flush = Signal(name="buf_flush")        # the loader drops load_sel's buffer
        self.load_sel = Signal(range(max(n, 2)), name="load_sel")
        self.load_err = Signal(name="load_err")
        self.loaded = Signal(name="loaded")          # a command left the buffer
        self.load_info = Signal(ErrorReport, name="load_err_info")
        self.fence_err = Signal(name="fence_err")
        self.fence_info = Signal(ErrorReport, name="fence_err_info")
        self.chk_set = Signal(name="ring_err_set")
        self.chk_code = Signal(ErrorCode, name="ring_err_code")
        self.single_dec = Signal(name="single_dec")
        self.flush_cur = self.flush & (self.load_sel == unit.queue)
        self.signals = self.cmd.flags.signal | (self.cmd.opcode == Opcode.SIGNAL)
        lim = unit.window_limit[unit.queue]
        self.win_base = unit.window_base[unit.queue]
        self.win_lim_raw = lim

    def bit(self, vec):
        """Bit ``queue`` of a per-queue vector."""
        return vec.bit_select(self.unit.queue, 1)

    def gone(self):
        """The current queue was reset or stopped since the work began."""
        u = self.unit
        return self.abort | self.bit(u.qclear) | self.bit(u.stop)

    def present(self, m: Module, write: int, shown) -> tuple:
        """Present :attr:`addr` to the translator while ``shown`` (a translated queue); returns
        ``(go, paddr)``: the access may go out (at once for a physical queue), and where. The
        translator looks up that register in every state (no multiplexer by state in front of
        the TLB's compares; ``valid`` says when it counts)."""
        if not self.unit.config.tlb_entries:
            return 1, self.addr
        tr = self.tr
        m.d.comb += [tr.valid.eq(shown & self.translate), tr.need_write.eq(write)]
        return ~self.translate | tr.ok, Mux(self.translate, tr.paddr, self.addr)
