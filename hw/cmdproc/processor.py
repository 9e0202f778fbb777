"""The command processor: fetch unit, stages, engine queues and semaphore file wired together
(:class:`CommandProcessor`; the structure is described in :mod:`hw.cmdproc`)."""

from amaranth import Cat, Module
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.bus import AXI4Signature, EngineSignature
from hw.cmdproc.common import ENGINES, ErrorReport, RunningCommand, priority_merge, sem_increment
from hw.cmdproc.engine_queue import EngineQueue
from hw.cmdproc.fetch import FetchTlbEvents, FetchUnit
from hw.cmdproc.semaphores import SemaphoreUnit
from hw.cmdproc.stage import Stage
from hw.config import NPUConfig
from hw.counters import cycle_counter
from hw.isa import COMMAND_BYTES, SemLast, TraceEntry, engine_in_flight

__all__ = ["CommandProcessor"]


class CommandProcessor(wiring.Component):
    """Fetch, decode and dispatch for ``n_queues`` command queues (see :mod:`hw.cmdproc`).

    Ports
    -----
    bus : ``Out(AXI4Signature(...))``
        Ring fetch (INCR bursts of up to ``fetch_depth`` 32-byte commands) and fence writes
        (one beat).
    ring_base, ring_size, tail : ``In(ArrayLayout(32, n_queues))``
        Ring registers (see :class:`hw.isa.Csr`); ``ring_size`` is a power of two.
    head, fetched : ``Out(ArrayLayout(32, n_queues))``
        Next slot fetched; commands fetched since the queue's last reset.
    window_base, window_limit : ``In(ArrayLayout(32, n_queues))``
        Per-queue DRAM windows (``window_limit == 0``: no limit).
    vm : ``In(ArrayLayout(32, n_queues))``
        Per-queue context (``Q_VM``, :class:`hw.isa.VmWord`), passed to the engines with each
        command.
    resume, skip : ``In(n_queues)``
        ``Q_RESUME`` pulses per queue: the DMA channels' replay slots (:class:`EngineQueue`).
    tlb_inv, tlb_inv_all : ``Out(1)``, tlb_inv_asid : ``Out(8)``
        A ``TLB_INVALIDATE`` completes (one-cycle pulse; several queues' in one cycle
        invalidate every entry); the fetch's TLB takes it too.
    tlb : ``Out(FetchTlbEvents)``
        The command fetch's translator events (``tlb.fetch.*``).
    load, store, matrix, vector : ``Out(EngineSignature())``
        The engines.
    stop : ``In(n_queues)``
        Per queue: an error is latched in the CSR block; the queue stops.
    qclear : ``In(n_queues)``
        Per queue: reset pulse. ``sem_clear`` : ``In(1)``: zero the semaphores, their
        ``sem_last`` records and the traces.
    sem_set : ``In(1)``, sem_set_sem : ``In(range(n_sems))``, sem_set_value : ``In(32)``
        Host write of a semaphore (``sem[sem_set_sem] := sem_set_value`` at this clock edge;
        ``sem_last`` unchanged; a pending increment waits for the next cycle).
    err_set : ``Out(n_queues)``, err_info : ``Out(ArrayLayout(ErrorReport, n_queues))``
        Per-queue error reports to the CSR block (one-cycle pulses).
    fence_irq : ``Out(1)``
        One-cycle pulse when a fence with ``flags.irq`` has written its value.
    sem_rd : ``In(range(n_sems))``, sem_value : ``Out(32)``, sem_last : ``Out(SemLast)``
        Read port of the semaphores (combinational): the value of semaphore ``sem_rd`` and
        what last incremented it (:class:`hw.isa.SemLast`).
    busy : ``Out(n_queues)``
        Per queue: holds commands not yet retired.
    sem_stall : ``Out(4)``
        Per engine (order of :data:`ENGINES`): the ``sem`` stall condition of its
        :class:`EngineQueue` (for the counters of :mod:`hw.counters`).
    running : ``Out(ArrayLayout(RunningCommand, 4))``
        Per engine: queue, index and opcode of the command it runs (valid while its ``busy``
        is high and in its ``done`` cycle).
    trace, trace_valid, trace_overflow : per engine (``Out`` arrays of 4), trace_pop : ``In(4)``
        Read side of the engines' trace FIFOs.

    Latency: a command is fetched and staged in about ``32 / axi_data_bytes + 4`` cycles
    plus the DRAM read latency, the following commands of the same burst ``32 /
    axi_data_bytes`` cycles apart; fetch runs ahead of execution up to the prefetch buffer
    (``fetch_depth`` per queue), the stage and the FIFOs (``cmd_fifo_depth`` per queue and
    engine).
    """

    def __init__(self, config: NPUConfig):
        if COMMAND_BYTES % config.axi_data_bytes:
            raise ValueError(f"a {COMMAND_BYTES}-byte command is not a whole number of "
                             f"{config.axi_data_bytes}-byte beats")
        self.config = config
        n = config.n_queues
        q32 = data.ArrayLayout(32, n)
        n_eng = len(ENGINES)
        members = {
            "bus": Out(AXI4Signature(addr_width=config.axi_addr_bits,
                                     data_width=config.axi_data_bits,
                                     id_width=config.axi_id_bits)),
            "ring_base": In(q32), "ring_size": In(q32), "tail": In(q32),
            "window_base": In(q32), "window_limit": In(q32), "vm": In(q32),
            "resume": In(n), "skip": In(n),
            "tlb_inv": Out(1), "tlb_inv_all": Out(1), "tlb_inv_asid": Out(8),
            "tlb": Out(FetchTlbEvents),
            "head": Out(q32), "fetched": Out(q32),
            "stop": In(n), "qclear": In(n), "sem_clear": In(1),
            "sem_set": In(1), "sem_set_sem": In(range(max(config.n_sems, 2))),
            "sem_set_value": In(32),
            "err_set": Out(n), "err_info": Out(data.ArrayLayout(ErrorReport, n)),
            "fence_irq": Out(1),
            "sem_rd": In(range(max(config.n_sems, 2))), "sem_value": Out(32),
            "sem_last": Out(SemLast),
            "busy": Out(n),
            "sem_stall": Out(n_eng),
            "running": Out(data.ArrayLayout(RunningCommand, n_eng)),
            "trace": Out(data.ArrayLayout(TraceEntry, n_eng)),
            "trace_valid": Out(n_eng), "trace_overflow": Out(n_eng), "trace_pop": In(n_eng),
        }
        for name in ENGINES:
            members[name] = Out(EngineSignature())
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        cfg = self.config

        m.submodules.fetch = fetch = FetchUnit(cfg)
        m.submodules.stage = stage = Stage(cfg)
        queues = {}
        for name in ENGINES:
            m.submodules[f"{name}_queue"] = queues[name] = EngineQueue(
                cfg, in_flight=engine_in_flight(cfg, name), engine=name,
                replay=bool(cfg.tlb_entries) and name in ("load", "store"))
        n = cfg.n_queues
        # waiters: every engine's queue heads, then the stages; lookups: the loader's
        # command, then each engine's entry behind a taken head
        m.submodules.semaphores = sems = SemaphoreUnit(
            cfg, n_waiters=(len(ENGINES) + 1) * n, n_lookups=1 + len(ENGINES))

        # -- fetch: rings in, decoded commands into the stages, fence writes out ------------
        wiring.connect(m, fetch.bus, wiring.flipped(self.bus))
        self._connect_fetch(m, fetch, stage)

        # -- stages run processor commands; engine commands go to the engine queues --------
        idle = [Cat(eq.idle[q] for eq in queues.values()).all() for q in range(cfg.n_queues)]
        self._connect_stage(m, stage, idle)
        self._dispatch(m, fetch, queues)

        # -- engine queues: one per engine, in front of its port ------------------------------
        for e, (name, eq) in enumerate(queues.items()):
            self._connect_engine_queue(m, e, eq, getattr(self, name))

        # -- semaphores: one increment port (the engines, then the stages, then the fence,
        # in fixed priority), ready bits of every head, lookups -------------------------------
        inc = stream.Signature(sem_increment(cfg)).create(path=("sem_inc",))
        priority_merge(m, [eq.inc for eq in queues.values()]
                       + [stage.inc[q] for q in range(n)] + [fetch.fence_inc], inc)
        wiring.connect(m, inc, sems.inc)
        m.d.comb += [
            sems.clear.eq(self.sem_clear), sems.set.eq(self.sem_set),
            sems.set_sem.eq(self.sem_set_sem), sems.set_value.eq(self.sem_set_value),
            sems.rd_sem.eq(self.sem_rd), self.sem_value.eq(sems.rd_value),
            self.sem_last.eq(sems.rd_last),
            sems.look[0].eq(fetch.push_wait), stage.push_ok.eq(sems.look_ok[0]),
        ]
        waiters = [(eq.wait[q], eq.load[q], eq.load_ok[q], eq.ready[q])
                   for eq in queues.values() for q in range(n)]
        waiters += [(stage.wait[q], stage.load[q], stage.load_ok[q], stage.ready[q])
                    for q in range(n)]
        for w, (head, load, load_ok, ready) in enumerate(waiters):
            m.d.comb += [sems.head[w].eq(head), sems.load[w].eq(load),
                         sems.load_ok[w].eq(load_ok), ready.eq(sems.ready[w])]
        for e, eq in enumerate(queues.values()):
            m.d.comb += [sems.look[1 + e].eq(eq.look), eq.look_ok.eq(sems.look_ok[1 + e]),
                         eq.i_ok.eq(sems.look_ok[0])]

        # -- errors and status per queue ----------------------------------------------------
        self._errors(m, fetch, queues)
        for q in range(cfg.n_queues):
            m.d.comb += self.busy[q].eq(fetch.active[q] | stage.valid[q]
                                        | (self.head[q] != self.tail[q]) | ~idle[q])
        return m

    def _connect_fetch(self, m: Module, fetch: FetchUnit, stage: Stage) -> None:
        m.d.comb += [
            fetch.ring_base.eq(self.ring_base), fetch.ring_size.eq(self.ring_size),
            fetch.tail.eq(self.tail), fetch.window_base.eq(self.window_base),
            fetch.window_limit.eq(self.window_limit), fetch.vm.eq(self.vm),
            fetch.resume.eq(self.resume), fetch.skip.eq(self.skip),
            fetch.tlb_inv.eq(self.tlb_inv), fetch.tlb_inv_all.eq(self.tlb_inv_all),
            fetch.tlb_inv_asid.eq(self.tlb_inv_asid), self.tlb.eq(fetch.tlb),
            self.head.eq(fetch.head), self.fetched.eq(fetch.fetched),
            fetch.stop.eq(self.stop), fetch.qclear.eq(self.qclear),
            fetch.cycles.eq(cycle_counter(m, 32, "fetch_cycles")),
            fetch.stage.eq(stage.stage),
            fetch.stage_valid.eq(stage.valid), fetch.fence_ready.eq(stage.fence_ready),
            stage.queue.eq(fetch.queue), stage.push.eq(fetch.push),
            stage.push_queue.eq(fetch.push_queue),
            stage.push_cmd.eq(fetch.push_cmd), stage.push_index.eq(fetch.push_index),
            stage.fence_done.eq(fetch.fence_done),
            self.fence_irq.eq(fetch.fence_irq),
        ]

    def _connect_stage(self, m: Module, stage: Stage, idle: list) -> None:
        m.d.comb += [stage.stop.eq(self.stop), stage.qclear.eq(self.qclear),
                     stage.idle.eq(Cat(idle))]
        # TLB_INVALIDATE: several queues in one cycle drop every entry
        n = self.config.n_queues
        several = Cat(stage.tlb_inv[q] & (stage.tlb_inv[:q] != 0) for q in range(1, n)).any() \
            if n > 1 else 0
        m.d.comb += [self.tlb_inv.eq(stage.tlb_inv.any()),
                     self.tlb_inv_all.eq((stage.tlb_inv & stage.tlb_inv_all).any() | several)]
        for q in reversed(range(n)):
            with m.If(stage.tlb_inv[q]):
                m.d.comb += self.tlb_inv_asid.eq(stage.tlb_inv_asid[q])

    def _dispatch(self, m: Module, fetch: FetchUnit, queues: dict) -> None:
        """The fetch unit's loader writes an engine command into its engine's queue."""
        for e, eq in enumerate(queues.values()):
            for q in range(self.config.n_queues):
                port = eq.i[q]
                m.d.comb += [
                    port.valid.eq(fetch.dispatch[e] & (fetch.push_queue == q)),
                    port.payload.cmd.eq(fetch.push_cmd), port.payload.index.eq(fetch.push_index),
                    fetch.room[e][q].eq(port.ready),
                ]

    def _connect_engine_queue(self, m: Module, e: int, eq: EngineQueue, port) -> None:
        wiring.connect(m, eq.engine, wiring.flipped(port))
        m.d.comb += [
            eq.stop.eq(self.stop), eq.flush.eq(self.qclear),
            eq.clear_all.eq(self.sem_clear),
            eq.cycles.eq(cycle_counter(m, 32, f"{list(ENGINES)[e]}_cycles")),
            eq.windows_base.eq(self.window_base), eq.windows_limit.eq(self.window_limit),
            eq.vms.eq(self.vm), eq.resume.eq(self.resume), eq.skip.eq(self.skip),
            self.trace[e].eq(eq.trace), self.trace_valid[e].eq(eq.trace_valid),
            self.trace_overflow[e].eq(eq.trace_overflow), eq.trace_pop.eq(self.trace_pop[e]),
            self.sem_stall[e].eq(eq.sem_stall), self.running[e].eq(eq.running),
        ]

    def _errors(self, m: Module, fetch: FetchUnit, queues: dict) -> None:
        """Per queue: the first of its errors this cycle in the order the loader, the fence,
        then the engines (in :data:`ENGINES` order)."""
        sources = [(fetch.load_err, fetch.push_queue, fetch.load_err_info),
                   (fetch.fence_err, fetch.queue, fetch.fence_err_info)]
        sources += [(eq.err_set, eq.err_queue, eq.err_info) for eq in queues.values()]
        for q in range(self.config.n_queues):
            for valid, queue, report in reversed(sources):
                with m.If(valid & (queue == q)):
                    m.d.comb += [self.err_set[q].eq(1), self.err_info[q].eq(report)]
