"""Command processor: fetches commands from a ring buffer in DRAM, decodes them and dispatches
them to the engines' queues; runs the synchronization commands itself.

Decoupled access/execute (DESIGN.md): each engine (DMA load, DMA store, matrix, vector) has a
FIFO of commands and runs them in order; engines run concurrently. A command's header can make
it wait until ``sem[wait_sem] >= wait_value`` before it starts and increment
``sem[signal_sem]`` when it retires; that is the only ordering across engines. ``FENCE`` waits
until every earlier command of the queue has retired, writes its value to DRAM and raises the
fence interrupt.

Errors (unknown opcode, bad semaphore id, bad ring or fence address, AXI error, or an error an
engine reports) are reported through ``err_set`` to the CSR block, which latches the first one
and raises ``error``; the queue then stops fetching and issuing. ``clear`` flushes the engine
FIFOs, zeroes the semaphores, resets the command index and sets head := tail.
"""

from amaranth import Cat, Module, ResetInserter, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from .bus import AXI_BURST_INCR, AXI_RESP_OKAY, AXI4Signature, EngineSignature
from .config import NPUConfig
from .isa import COMMAND_BYTES, ENGINE_NAMES, OPCODE_ENGINE, Command, ErrorCode, Opcode

__all__ = ["CommandProcessor", "EngineQueue", "QueueEntry"]


class QueueEntry(data.Struct):
    """A command on its way to an engine, with its index in the queue (for error reports)."""
    cmd: Command
    index: 32


class EngineQueue(wiring.Component):
    """In-order command FIFO in front of one engine, with semaphore wait and signal.

    The head command is offered to the engine once ``sem[wait_sem] >= wait_value`` (if its
    ``flags.wait`` is set) and while ``stop`` is low; one command is in the engine at a time.
    When the engine retires it: an error is reported on ``err_*``, otherwise ``sem_inc``
    pulses for ``sem_id`` if ``flags.signal`` was set.

    Ports
    -----
    i : ``In(stream.Signature(QueueEntry))``
        Commands from the decoder.
    engine : ``Out(EngineSignature())``
    sems : ``In(ArrayLayout(32, n_sems))``
    stop, flush : ``In(1)``
        Stop issuing (error latched); drop every queued command (not the one in the engine).
    sem_inc : ``Out(1)``, sem_id : ``Out(8)``
    err_set : ``Out(1)``, err_code, err_opcode, err_cmd, err_addr
    idle : ``Out(1)``
        No queued command and none in the engine.
    """

    def __init__(self, config: NPUConfig):
        self.config = config
        super().__init__({
            "i": In(stream.Signature(QueueEntry)),
            "engine": Out(EngineSignature()),
            "sems": In(data.ArrayLayout(32, config.n_sems)),
            "stop": In(1), "flush": In(1),
            "sem_inc": Out(1), "sem_id": Out(8),
            "err_set": Out(1), "err_code": Out(ErrorCode), "err_opcode": Out(8),
            "err_cmd": Out(32), "err_addr": Out(32),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        width = QueueEntry.as_shape().size
        m.submodules.fifo = q = ResetInserter(self.flush)(
            fifo.SyncFIFOBuffered(width=width, depth=self.config.cmd_fifo_depth))
        m.d.comb += [q.w_data.eq(self.i.payload), q.w_en.eq(self.i.valid),
                     self.i.ready.eq(q.w_rdy)]

        head = QueueEntry(q.r_data)
        hdr = head.cmd.header
        wait_ok = ~hdr.flags.wait | (self.sems[hdr.wait_sem] >= hdr.wait_value)

        in_engine = Signal()
        cur_index = Signal(32)
        cur_opcode = Signal(8)
        cur_signal = Signal()
        cur_sem = Signal(8)

        eng = self.engine
        m.d.comb += [
            eng.cmd.payload.eq(head.cmd),
            eng.cmd.valid.eq(q.r_rdy & wait_ok & ~self.stop & ~in_engine),
            q.r_en.eq(eng.cmd.valid & eng.cmd.ready),
            self.idle.eq(~q.r_rdy & ~in_engine),
        ]
        with m.If(eng.cmd.valid & eng.cmd.ready):
            m.d.sync += [
                in_engine.eq(1), cur_index.eq(head.index), cur_opcode.eq(hdr.opcode),
                cur_signal.eq(hdr.flags.signal), cur_sem.eq(hdr.signal_sem),
            ]
        with m.If(in_engine & eng.done):
            m.d.sync += in_engine.eq(0)
            with m.If(eng.error != ErrorCode.NONE):
                m.d.comb += [
                    self.err_set.eq(1), self.err_code.eq(eng.error),
                    self.err_opcode.eq(cur_opcode), self.err_cmd.eq(cur_index),
                    self.err_addr.eq(eng.error_addr),
                ]
            with m.Elif(cur_signal):
                m.d.comb += [self.sem_inc.eq(1), self.sem_id.eq(cur_sem)]
        return m


#: engine port name -> the opcodes it runs (from hw.isa.OPCODE_ENGINE)
ENGINES = {name: tuple(op for op, engine in OPCODE_ENGINE.items() if engine == name)
           for name in ENGINE_NAMES}


class CommandProcessor(wiring.Component):
    """Fetch, decode and dispatch for command queue 0.

    Ports
    -----
    bus : ``Out(AXI4Signature(...))``
        Ring fetch (one 32-byte INCR burst per command) and fence writes (one beat).
    ring_base, ring_size, tail : ``In(32)``; head : ``Out(32)``
        Ring registers (see :class:`hw.isa.Csr`); ``ring_size`` is a power of two.
    load, store, matrix, vector : ``Out(EngineSignature())``
        The engines.
    error, clear : ``In(1)``
        Error latched in the CSR block (stop); clear pulse.
    err_set, err_code, err_opcode, err_cmd, err_addr : ``Out``
        Error report to the CSR block (one-cycle pulse on ``err_set``).
    fence_irq : ``Out(1)``
        One-cycle pulse when a fence with ``flags.irq`` has written its value.
    sems : ``Out(ArrayLayout(32, n_sems))``
        Semaphore values.
    busy : ``Out(1)``
        The queue holds commands not yet retired.

    Latency: a command is fetched, decoded and dispatched in about ``32 / axi_data_bytes + 4``
    cycles plus the DRAM read latency; fetch runs ahead of execution up to the engine FIFO
    depth (``cmd_fifo_depth``).
    """

    def __init__(self, config: NPUConfig):
        if COMMAND_BYTES % config.axi_data_bytes:
            raise ValueError(f"a {COMMAND_BYTES}-byte command is not a whole number of "
                             f"{config.axi_data_bytes}-byte beats")
        self.config = config
        members = {
            "bus": Out(AXI4Signature(addr_width=config.axi_addr_bits,
                                     data_width=config.axi_data_bits,
                                     id_width=config.axi_id_bits)),
            "ring_base": In(32), "ring_size": In(32), "tail": In(32), "head": Out(32),
            "error": In(1), "clear": In(1),
            "err_set": Out(1), "err_code": Out(ErrorCode), "err_opcode": Out(8),
            "err_cmd": Out(32), "err_addr": Out(32),
            "fence_irq": Out(1),
            "sems": Out(data.ArrayLayout(32, config.n_sems)),
            "busy": Out(1),
        }
        for name in ENGINES:
            members[name] = Out(EngineSignature())
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        bus = self.bus
        beat_bytes = cfg.axi_data_bytes
        n_beats = COMMAND_BYTES // beat_bytes

        # -- engine queues --------------------------------------------------------------------
        queues = {}
        for name in ENGINES:
            eq = EngineQueue(cfg)
            m.submodules[f"{name}_queue"] = queues[name] = eq
            wiring.connect(m, eq.engine, wiring.flipped(getattr(self, name)))
            m.d.comb += [eq.sems.eq(self.sems), eq.stop.eq(self.error), eq.flush.eq(self.clear)]
        all_idle = Cat(q.idle for q in queues.values()).all()

        # -- error reporting: the decoder's own errors, else the first engine reporting -------
        dec_err = Signal()
        dec_code = Signal(ErrorCode)
        dec_addr = Signal(32)
        cmd_count = Signal(32)      # index of the command being fetched
        cmd = Signal(Command)
        hdr = cmd.header
        with m.If(dec_err):
            m.d.comb += [
                self.err_set.eq(1), self.err_code.eq(dec_code), self.err_opcode.eq(hdr.opcode),
                self.err_cmd.eq(cmd_count), self.err_addr.eq(dec_addr),
            ]
        for q in reversed(list(queues.values())):
            with m.If(q.err_set & ~dec_err):
                m.d.comb += [
                    self.err_set.eq(1), self.err_code.eq(q.err_code),
                    self.err_opcode.eq(q.err_opcode), self.err_cmd.eq(q.err_cmd),
                    self.err_addr.eq(q.err_addr),
                ]

        # -- semaphores -----------------------------------------------------------------------
        proc_inc = Signal()
        incs = [(q.sem_inc, q.sem_id) for q in queues.values()] + [(proc_inc, hdr.signal_sem)]
        for s in range(cfg.n_sems):
            total = sum((inc & (sid == s)) for inc, sid in incs)
            with m.If(self.clear):
                m.d.sync += self.sems[s].eq(0)
            with m.Else():
                m.d.sync += self.sems[s].eq(self.sems[s] + total)

        # -- fetch, decode, dispatch, execute -------------------------------------------------
        head_next = (self.head + 1) & (self.ring_size - 1)
        slot_addr = Signal(33)
        m.d.comb += slot_addr.eq(self.ring_base + self.head * COMMAND_BYTES)
        beat = Signal(range(n_beats + 1))
        resp_err = Signal()
        aw_done = Signal()      # fence write: AW handshake happened
        w_done = Signal()       # fence write: W handshake happened

        opcode = hdr.opcode
        waits = hdr.flags.wait | (opcode == Opcode.WAIT)
        signals = hdr.flags.signal | (opcode == Opcode.SIGNAL)
        wait_ok = ~waits | (self.sems[hdr.wait_sem] >= hdr.wait_value)
        fence = cmd.body.fence
        fence_lane = fence.addr[:(beat_bytes.bit_length() - 1)] if beat_bytes > 4 else 0

        def fail(code, addr=0):
            m.d.comb += [dec_err.eq(1), dec_code.eq(code), dec_addr.eq(addr)]
            m.next = "IDLE"

        def retire():
            m.d.sync += [self.head.eq(head_next), cmd_count.eq(cmd_count + 1)]
            m.next = "IDLE"

        with m.FSM(name="fetch") as fsm:
            with m.State("IDLE"):
                with m.If(~self.error & ~self.clear & (self.head != self.tail)):
                    with m.If(self.ring_base[:5] != 0):
                        fail(ErrorCode.MISALIGNED, self.ring_base)
                    with m.Elif(slot_addr + COMMAND_BYTES > cfg.dram_bytes):
                        fail(ErrorCode.BAD_DRAM_ADDR, slot_addr)
                    with m.Else():
                        m.next = "FETCH_ADDR"
            with m.State("FETCH_ADDR"):
                m.d.comb += [
                    bus.arvalid.eq(1), bus.araddr.eq(slot_addr), bus.arlen.eq(n_beats - 1),
                    bus.arsize.eq(beat_bytes.bit_length() - 1), bus.arburst.eq(AXI_BURST_INCR),
                ]
                m.d.sync += [beat.eq(0), resp_err.eq(0)]
                with m.If(bus.arready):
                    m.next = "FETCH_DATA"
            with m.State("FETCH_DATA"):
                m.d.comb += bus.rready.eq(1)
                with m.If(bus.rvalid):
                    m.d.sync += [
                        cmd.as_value().word_select(beat, cfg.axi_data_bits).eq(bus.rdata),
                        beat.eq(beat + 1),
                    ]
                    with m.If(bus.rresp != AXI_RESP_OKAY):
                        m.d.sync += resp_err.eq(1)
                    with m.If(bus.rlast):
                        m.next = "DECODE"
            with m.State("DECODE"):
                with m.If(resp_err):
                    fail(ErrorCode.AXI_ERROR, slot_addr)
                with m.Elif(self.error | self.clear):
                    m.next = "IDLE"
                with m.Elif(~opcode.as_value().matches(*(op.value for op in Opcode))):
                    fail(ErrorCode.BAD_OPCODE, slot_addr)
                with m.Elif(waits & (hdr.wait_sem >= cfg.n_sems)):
                    fail(ErrorCode.BAD_SEM, hdr.wait_sem)
                with m.Elif(signals & (hdr.signal_sem >= cfg.n_sems)):
                    fail(ErrorCode.BAD_SEM, hdr.signal_sem)
                with m.Elif(opcode.as_value().matches(
                        *(op.value for ops in ENGINES.values() for op in ops))):
                    m.next = "DISPATCH"
                with m.Else():
                    m.next = "SYNC_WAIT"
            with m.State("DISPATCH"):
                for name, ops in ENGINES.items():
                    q = queues[name]
                    m.d.comb += [q.i.payload.cmd.eq(cmd), q.i.payload.index.eq(cmd_count)]
                    with m.If(opcode.as_value().matches(*(op.value for op in ops))):
                        m.d.comb += q.i.valid.eq(~self.error & ~self.clear)
                        with m.If(self.error | self.clear):
                            m.next = "IDLE"
                        with m.Elif(q.i.ready):
                            retire()
            with m.State("SYNC_WAIT"):
                # processor commands: honour the wait; a fence also waits for all earlier work
                with m.If(self.error | self.clear):
                    m.next = "IDLE"
                with m.Elif(wait_ok & ((opcode != Opcode.FENCE) | all_idle)):
                    with m.If(opcode != Opcode.FENCE):
                        m.next = "SYNC_DONE"
                    with m.Elif(fence.addr[:2] != 0):
                        fail(ErrorCode.MISALIGNED, fence.addr)
                    with m.Elif(fence.addr + 4 > cfg.dram_bytes):
                        fail(ErrorCode.BAD_DRAM_ADDR, fence.addr)
                    with m.Else():
                        m.d.sync += [aw_done.eq(0), w_done.eq(0)]
                        m.next = "FENCE_WRITE"
            with m.State("FENCE_WRITE"):
                m.d.comb += [
                    bus.awvalid.eq(~aw_done), bus.awaddr.eq(fence.addr), bus.awlen.eq(0),
                    bus.awsize.eq(beat_bytes.bit_length() - 1), bus.awburst.eq(AXI_BURST_INCR),
                    bus.wvalid.eq(~w_done), bus.wlast.eq(1),
                    bus.wdata.eq(fence.value << (fence_lane * 8)),
                    bus.wstrb.eq(0xF << fence_lane),
                ]
                aw_now = aw_done | bus.awready
                w_now = w_done | bus.wready
                with m.If(aw_now & w_now):
                    m.next = "FENCE_RESPONSE"
                with m.Else():
                    m.d.sync += [aw_done.eq(aw_now), w_done.eq(w_now)]
            with m.State("FENCE_RESPONSE"):
                m.d.comb += bus.bready.eq(1)
                with m.If(bus.bvalid):
                    with m.If(bus.bresp != AXI_RESP_OKAY):
                        fail(ErrorCode.AXI_ERROR, fence.addr)
                    with m.Else():
                        m.d.comb += self.fence_irq.eq(hdr.flags.irq)
                        m.next = "SYNC_DONE"
            with m.State("SYNC_DONE"):
                m.d.comb += proc_inc.eq(signals)
                retire()

        with m.If(self.clear):
            m.d.sync += [self.head.eq(self.tail), cmd_count.eq(0)]

        m.d.comb += self.busy.eq(~fsm.ongoing("IDLE") | (self.head != self.tail) | ~all_idle)
        return m
