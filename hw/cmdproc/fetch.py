"""Ring fetch, decode and fence writes of the command processor (:class:`FetchUnit`)."""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hw.bus import AXI_BURST_INCR, AXI_RESP_OKAY, AXI4Signature
from hw.cmdproc.common import ErrorReport, SemIncrement, round_robin
from hw.config import NPUConfig
from hw.isa import COMMAND_BYTES, Command, ErrorCode, Opcode

__all__ = ["FetchUnit"]


class FetchUnit(wiring.Component):
    """One FSM that fetches commands from the rings into the stages and executes fences.

    In ``IDLE`` it serves, round-robin, a queue whose stage holds a fence that may run
    (``fence_ready``, served first) or else a queue with a command in its ring (``head !=
    tail``), an empty stage, not stopped and not being reset. A fetch checks the slot address
    (ring alignment, DRAM range, the queue's window), reads the 32-byte command in one INCR
    burst, decodes it (AXI response, opcode, semaphore ids) and loads it into the stage
    (``push``); ``HEAD`` and ``Q_FETCHED`` advance then. A fence checks its address (alignment,
    DRAM range, window), writes ``value`` (or ``cycles`` with ``timestamp``) in one beat,
    waits for the B response, then pulses ``fence_done``, ``fence_irq`` (if ``flags.irq``) and
    its semaphore increment (``fence_inc``). A check or bus error pulses ``err`` (with
    ``err_info`` for queue ``queue``) and returns to ``IDLE``; a queue reset or stop during the
    work abandons it silently.

    Ports
    -----
    bus : ``Out(AXI4Signature(...))``
        Ring fetch and fence writes (the AR/R and AW/W/B channels, ID 0 here).
    ring_base, ring_size, tail, window_base, window_limit : ``In(ArrayLayout(32, n_queues))``
    head, fetched : ``Out(ArrayLayout(32, n_queues))``
        Next slot fetched; commands fetched since the queue's last reset.
    stop, qclear : ``In(n_queues)``
    cycles : ``In(32)``
        Fence timestamps.
    stage : ``In(ArrayLayout(Command, n_queues))``, stage_index : ``In(ArrayLayout(32,
    n_queues))``, stage_valid, fence_ready : ``In(n_queues)``
        The stages (:class:`~hw.cmdproc.stage.Stage`).
    queue : ``Out(range(n_queues))``
        The queue being fetched or fenced.
    push : ``Out(1)``, push_cmd : ``Out(Command)``, push_index : ``Out(32)``
        Load the stage of ``queue``.
    fence_done, fence_irq : ``Out(1)``, fence_inc : ``Out(SemIncrement)``
        The fence of ``queue`` completed.
    err : ``Out(1)``, err_info : ``Out(ErrorReport)``
        An error of ``queue`` (one-cycle pulse).
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
            "window_base": In(q32), "window_limit": In(q32),
            "head": Out(q32), "fetched": Out(q32),
            "stop": In(n), "qclear": In(n), "cycles": In(32),
            "stage": In(data.ArrayLayout(Command, n)), "stage_index": In(q32),
            "stage_valid": In(n), "fence_ready": In(n),
            "queue": Out(range(max(n, 2))),
            "push": Out(1), "push_cmd": Out(Command), "push_index": Out(32),
            "fence_done": Out(1), "fence_irq": Out(1), "fence_inc": Out(SemIncrement),
            "err": Out(1), "err_info": Out(ErrorReport),
            "active": Out(n),
        })

    def elaborate(self, platform):
        m = Module()
        f = _FetchState(self)
        self._address_checks(m, f)
        fences, fetches = self._arbiters(m)
        self._outputs(m, f)
        with m.FSM(name="fetch") as fsm:
            self._idle(m, f, fences, fetches)
            self._fetch(m, f)
            self._decode(m, f)
            self._fence(m, f)
        self._per_queue(m, fsm)
        return m

    # -- helpers -----------------------------------------------------------------------------

    def _address_checks(self, m: Module, f: _FetchState) -> None:
        """The slot address and the window of the current queue; abort on a reset."""
        cur = self.queue
        m.d.comb += [
            f.win_limit.eq(Mux(f.win_lim_raw == 0, 1 << 32, f.win_lim_raw)),
            f.slot_addr.eq(self.ring_base[cur] + self.head[cur] * COMMAND_BYTES),
        ]
        with m.If(f.bit(self.qclear)):
            m.d.sync += f.abort.eq(1)

    def _fail(self, m: Module, f: _FetchState, code, addr, index, op) -> None:
        m.d.comb += [self.err.eq(~f.abort & ~f.bit(self.qclear)), self.err_info.code.eq(code),
                     self.err_info.addr.eq(addr), self.err_info.cmd.eq(index),
                     self.err_info.opcode.eq(op)]
        m.next = "IDLE"

    def _gone(self, f: _FetchState):
        """The current queue was reset or stopped since the work began."""
        return f.abort | f.bit(self.qclear) | f.bit(self.stop)

    # -- states ------------------------------------------------------------------------------

    def _arbiters(self, m: Module) -> tuple:
        """Round-robin pickers of a queue with a ready fence and of a queue to fetch from;
        returns ``(any, sel, last)`` for each."""
        n = self.config.n_queues
        fetchable = [~self.stage_valid[q] & (self.head[q] != self.tail[q]) & ~self.stop[q]
                     & ~self.qclear[q] for q in range(n)]
        fetch_last = Signal(range(max(n, 2)))
        fence_last = Signal(range(max(n, 2)))
        any_fetch, fetch_sel = round_robin(m, fetch_last, fetchable, n)
        any_fence, fence_sel = round_robin(m, fence_last, list(self.fence_ready), n)
        return (any_fence, fence_sel, fence_last), (any_fetch, fetch_sel, fetch_last)

    def _outputs(self, m: Module, f: _FetchState) -> None:
        """What the stage and the semaphores see of the command (qualified by ``push`` and
        ``fence_inc.en``)."""
        m.d.comb += [
            self.push_cmd.eq(f.cmd), self.push_index.eq(self.fetched[self.queue]),
            self.fence_inc.sem.eq(f.cmd.header.signal_sem), self.fence_inc.queue.eq(self.queue),
            self.fence_inc.index.eq(f.fence_index),
        ]

    def _idle(self, m: Module, f: _FetchState, fences: tuple, fetches: tuple) -> None:
        """Pick a queue: a ready fence first, else a queue to fetch from."""
        n = self.config.n_queues
        any_fence, fence_sel, fence_last = fences
        any_fetch, fetch_sel, fetch_last = fetches
        with m.State("IDLE"):
            with m.If(any_fence):
                m.d.sync += [self.queue.eq(fence_sel), fence_last.eq(fence_sel), f.abort.eq(0)]
                with m.Switch(fence_sel):
                    for q in range(n):
                        with m.Case(q):
                            m.d.sync += [f.cmd.eq(self.stage[q]),
                                         f.fence_index.eq(self.stage_index[q])]
                m.next = "FENCE_CHECK"
            with m.Elif(any_fetch):
                m.d.sync += [self.queue.eq(fetch_sel), fetch_last.eq(fetch_sel), f.abort.eq(0)]
                m.next = "FETCH_CHECK"

    def _fetch(self, m: Module, f: _FetchState) -> None:
        """Check the slot address, then read the command in one burst."""
        cfg, bus = self.config, self.bus
        beat_bytes = cfg.axi_data_bytes
        n_beats = COMMAND_BYTES // beat_bytes
        index = self.fetched[self.queue]
        with m.State("FETCH_CHECK"):
            with m.If(self._gone(f)):
                m.next = "IDLE"
            with m.Elif(self.ring_base[self.queue][:5] != 0):
                self._fail(m, f, ErrorCode.MISALIGNED, self.ring_base[self.queue], index, 0)
            with m.Elif(f.slot_addr + COMMAND_BYTES > cfg.dram_bytes):
                self._fail(m, f, ErrorCode.BAD_DRAM_ADDR, f.slot_addr, index, 0)
            with m.Elif((f.slot_addr < f.win_base)
                        | (f.slot_addr + COMMAND_BYTES > f.win_limit)):
                self._fail(m, f, ErrorCode.WINDOW, f.slot_addr, index, 0)
            with m.Else():
                # the burst's address is latched: a queue reset or ring write while ARVALID
                # waits for ARREADY must not change it (AXI4, ARM IHI 0022, A3.2.1)
                m.d.sync += f.ar_addr.eq(f.slot_addr)
                m.next = "FETCH_ADDR"
        with m.State("FETCH_ADDR"):
            m.d.comb += [
                bus.arvalid.eq(1), bus.araddr.eq(f.ar_addr), bus.arlen.eq(n_beats - 1),
                bus.arsize.eq(beat_bytes.bit_length() - 1), bus.arburst.eq(AXI_BURST_INCR),
            ]
            m.d.sync += [f.beat.eq(0), f.resp_err.eq(0)]
            with m.If(bus.arready):
                m.next = "FETCH_DATA"
        with m.State("FETCH_DATA"):
            m.d.comb += bus.rready.eq(1)
            with m.If(bus.rvalid):
                m.d.sync += [
                    f.cmd.as_value().word_select(f.beat, cfg.axi_data_bits).eq(bus.rdata),
                    f.beat.eq(f.beat + 1),
                ]
                with m.If(bus.rresp != AXI_RESP_OKAY):
                    m.d.sync += f.resp_err.eq(1)
                with m.If(bus.rlast):
                    m.next = "DECODE"

    def _decode(self, m: Module, f: _FetchState) -> None:
        """Check the command; load it into the stage and advance ``HEAD``."""
        cfg = self.config
        hdr = f.cmd.header
        opcode = hdr.opcode
        cur = self.queue
        index = self.fetched[cur]
        with m.State("DECODE"):
            with m.If(self._gone(f)):
                m.next = "IDLE"
            with m.Elif(f.resp_err):    # the command never decoded: opcode 0
                self._fail(m, f, ErrorCode.AXI_ERROR, f.slot_addr, index, 0)
            with m.Elif(~opcode.as_value().matches(*(op.value for op in Opcode))):
                self._fail(m, f, ErrorCode.BAD_OPCODE, f.slot_addr, index, opcode)
            with m.Elif(f.waits & (hdr.wait_sem >= cfg.n_sems)):
                self._fail(m, f, ErrorCode.BAD_SEM, hdr.wait_sem, index, opcode)
            with m.Elif(f.signals & (hdr.signal_sem >= cfg.n_sems)):
                self._fail(m, f, ErrorCode.BAD_SEM, hdr.signal_sem, index, opcode)
            with m.Else():
                m.d.comb += self.push.eq(1)
                with m.Switch(cur):
                    for q in range(cfg.n_queues):
                        with m.Case(q):
                            m.d.sync += [
                                self.head[q].eq((self.head[q] + 1) & (self.ring_size[q] - 1)),
                                self.fetched[q].eq(self.fetched[q] + 1),
                            ]
                m.next = "IDLE"

    def _fence(self, m: Module, f: _FetchState) -> None:
        """Check the fence address, write the word, wait for the response."""
        cfg, bus = self.config, self.bus
        beat_bytes = cfg.axi_data_bytes
        hdr = f.cmd.header
        opcode = hdr.opcode
        fence = f.cmd.body.fence
        lane = fence.addr[:(beat_bytes.bit_length() - 1)] if beat_bytes > 4 else 0
        with m.State("FENCE_CHECK"):
            with m.If(self._gone(f)):
                m.next = "IDLE"
            with m.Elif(fence.addr[:2] != 0):
                self._fail(m, f, ErrorCode.MISALIGNED, fence.addr, f.fence_index, opcode)
            with m.Elif(fence.addr + 4 > cfg.dram_bytes):
                self._fail(m, f, ErrorCode.BAD_DRAM_ADDR, fence.addr, f.fence_index, opcode)
            with m.Elif((fence.addr < f.win_base) | (fence.addr + 4 > f.win_limit)):
                self._fail(m, f, ErrorCode.WINDOW, fence.addr, f.fence_index, opcode)
            with m.Else():
                m.d.sync += [f.aw_done.eq(0), f.w_done.eq(0),
                             f.word.eq(Mux(fence.timestamp, self.cycles, fence.value))]
                m.next = "FENCE_WRITE"
        with m.State("FENCE_WRITE"):
            m.d.comb += [
                bus.awvalid.eq(~f.aw_done), bus.awaddr.eq(fence.addr), bus.awlen.eq(0),
                bus.awsize.eq(beat_bytes.bit_length() - 1), bus.awburst.eq(AXI_BURST_INCR),
                bus.wvalid.eq(~f.w_done), bus.wlast.eq(1),
                bus.wdata.eq(f.word << (lane * 8)),
                bus.wstrb.eq(0xF << lane),
            ]
            aw_now = f.aw_done | bus.awready
            w_now = f.w_done | bus.wready
            with m.If(aw_now & w_now):
                m.next = "FENCE_RESPONSE"
            with m.Else():
                m.d.sync += [f.aw_done.eq(aw_now), f.w_done.eq(w_now)]
        with m.State("FENCE_RESPONSE"):
            m.d.comb += bus.bready.eq(1)
            with m.If(bus.bvalid):
                with m.If(bus.bresp != AXI_RESP_OKAY):
                    self._fail(m, f, ErrorCode.AXI_ERROR, fence.addr, f.fence_index, opcode)
                with m.Elif(f.abort | f.bit(self.qclear)):
                    m.next = "IDLE"
                with m.Else():
                    m.d.comb += [self.fence_irq.eq(hdr.flags.irq), self.fence_done.eq(1),
                                 self.fence_inc.en.eq(f.signals)]
                    m.next = "IDLE"

    def _per_queue(self, m: Module, fsm) -> None:
        """Queue reset: ``HEAD := TAIL``, the command count restarts; which queue is active."""
        for q in range(self.config.n_queues):
            with m.If(self.qclear[q]):
                m.d.sync += [self.head[q].eq(self.tail[q]), self.fetched[q].eq(0)]
            m.d.comb += self.active[q].eq(~fsm.ongoing("IDLE") & (self.queue == q))


class _FetchState:
    """Registers and wires of the FSM (names as in the VCD)."""

    def __init__(self, unit: FetchUnit):
        self.unit = unit
        self.abort = Signal(name="cur_abort")      # the current queue was reset meanwhile
        self.cmd = Signal(Command, name="cmd")
        self.fence_index = Signal(32, name="fence_index")
        self.beat = Signal(range(COMMAND_BYTES // unit.config.axi_data_bytes + 1), name="beat")
        self.resp_err = Signal(name="resp_err")
        self.aw_done = Signal(name="aw_done")
        self.w_done = Signal(name="w_done")
        self.word = Signal(32, name="fence_word")
        self.win_limit = Signal(33, name="win_limit")
        self.slot_addr = Signal(33, name="slot_addr")
        self.ar_addr = Signal(32, name="fetch_araddr")   # the fetch burst's AR address
        hdr = self.cmd.header
        self.signals = hdr.flags.signal | (hdr.opcode == Opcode.SIGNAL)
        self.waits = hdr.flags.wait | (hdr.opcode == Opcode.WAIT)
        self.win_base = unit.window_base[unit.queue]
        self.win_lim_raw = unit.window_limit[unit.queue]

    def bit(self, vec):
        """Bit ``queue`` of a per-queue vector."""
        return vec.bit_select(self.unit.queue, 1)
