"""Top level of the NPU: CSR block, command processor, DMA, compute tile, AXI arbiter.

One clock domain (``sync``). External ports:

* ``csr``: AXI4-Lite subordinate, 32-bit, 12-bit byte address (host MMIO, map in
  :class:`hw.isa.Csr`);
* ``mem``: AXI4 manager to device DRAM. IDs: 0 = DMA, 1 = command processor (ring fetch and
  fence writes, and the page walks of the fetch's translator), 2 and 3 = the page walkers of
  the DMA's load and store channels (with ``tlb_entries > 0``; reads only). Reads with the
  same ID must return in order;
* ``irq``: level interrupt (fence completion, error).

Performance counters (:mod:`hw.counters`, CSRs ``Csr.CNT_*``): :func:`connect_counters` wires
the signal behind each definition of :data:`hw.isa.COUNTER_NAMES`.
"""

from amaranth import Module, Mux, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.bus import AXI4LiteSignature, AXI4Signature
from hw.bus.arbiter import AXI4Arbiter
from hw.cmdproc import CommandProcessor
from hw.config import NPUConfig
from hw.counters import PerfCounters, cycle_counter
from hw.csr import CSR_ADDR_BITS, CsrBlock
from hw.dma import DMA
from hw.isa import COUNTER_NAMES, ENGINE_NAMES, TLB_CLIENTS, TLB_COUNTERS
from hw.tile import ComputeTile

__all__ = ["NPU", "connect_csr", "connect_counters", "counter_events", "RESOURCE_STALLS",
           "stall_source_name", "PROBE_FIELDS", "probe_name", "make_probes", "connect_probes"]

#: Named probes: signals of the NPU scope, kept in the Verilog and the VCD whatever the blocks
#: inside do, which the waveform tools (:mod:`cosim.waves`) read instead of internal nets. Per
#: engine ``e`` of :data:`hw.isa.ENGINE_NAMES`, ``probe_<e>_<field>`` (:func:`probe_name`), with
#: the field's width in bits:
#:
#: * ``busy``: the engine's ``busy`` (as counted by ``busy.<e>``);
#: * ``done``: the engine's ``done`` pulse (one per retired command, ``retired.<e>``);
#: * ``take``: the engine takes a command in this cycle (its command handshake);
#: * ``sem_stall``: the ``sem`` stall condition of :data:`hw.isa.STALL_REASONS`
#:   (``stall.<e>.sem``);
#: * ``queue``, ``index``, ``opcode``: queue, command index and opcode of the command the
#:   engine runs (valid while ``busy`` and in the ``done`` cycle).
PROBE_FIELDS = {"busy": 1, "done": 1, "take": 1, "sem_stall": 1, "queue": 8, "index": 32,
                "opcode": 8}


def probe_name(engine: str, field: str) -> str:
    """Name of a named probe of the NPU scope (``probe_matrix_busy``), see
    :data:`PROBE_FIELDS`.

    Raises
    ------
    KeyError
        For an unknown engine or field.
    """
    if engine not in ENGINE_NAMES or field not in PROBE_FIELDS:
        raise KeyError(f"no probe {engine!r}/{field!r}: engines {ENGINE_NAMES}, fields "
                       f"{tuple(PROBE_FIELDS)}")
    return f"probe_{engine}_{field}"


def make_probes() -> dict[str, dict[str, Signal]]:
    """The named probe signals (unconnected): ``probes[engine][field]``, named by
    :func:`probe_name`, widths from :data:`PROBE_FIELDS`."""
    return {e: {f: Signal(width, name=probe_name(e, f)) for f, width in PROBE_FIELDS.items()}
            for e in ENGINE_NAMES}


def connect_probes(m: Module, probes: dict, cp: CommandProcessor) -> None:
    """Drive the named probes of :func:`make_probes` from the command processor's engine
    ports (``busy``, ``done``, the command handshake), its ``sem_stall`` and ``running``."""
    for e, name in enumerate(ENGINE_NAMES):
        port, p = getattr(cp, name), probes[name]
        running = cp.running[e]
        m.d.comb += [
            p["busy"].eq(port.busy), p["done"].eq(port.done),
            p["take"].eq(port.cmd.valid & port.cmd.ready), p["sem_stall"].eq(cp.sem_stall[e]),
            p["queue"].eq(running.queue), p["index"].eq(running.index),
            p["opcode"].eq(running.opcode),
        ]

#: Where each resource stall counter comes from: ``(engine, reason)`` -> ``(submodule,
#: field)``, the field of the ``stall`` port of the NPU's submodule ``dma`` (``DMA.stall``)
#: or ``tile`` (``ComputeTile.stall``). Pairs not listed have no source and no counter.
#: :func:`connect_counters` copies each field into a signal of the NPU named
#: :func:`stall_source_name` (kept in the Verilog and the VCD whatever the block does).
RESOURCE_STALLS = {
    ("load", "dram_read"): ("dma", "load_dram"),
    ("load", "spad"): ("dma", "load_spad"),
    ("load", "acc"): ("dma", "load_acc"),
    ("store", "dram_write"): ("dma", "store_dram"),
    ("vector", "acc"): ("tile", "vector_acc"),
}


def connect_csr(m: Module, csr: CsrBlock, cp: CommandProcessor) -> None:
    """Wire the CSR block to the command processor (ring, window, error, semaphore, trace
    and counter signals)."""
    m.d.comb += [
        cp.ring_base.eq(csr.ring_base), cp.ring_size.eq(csr.ring_size), cp.tail.eq(csr.tail),
        cp.window_base.eq(csr.window_base), cp.window_limit.eq(csr.window_limit),
        cp.vm.eq(csr.vm), cp.resume.eq(csr.resume), cp.skip.eq(csr.skip),
        csr.head.eq(cp.head), csr.fetched.eq(cp.fetched), csr.busy.eq(cp.busy),
        cp.stop.eq(csr.stop), cp.qclear.eq(csr.qclear), cp.sem_clear.eq(csr.sem_clear),
        cp.sem_set.eq(csr.sem_set), cp.sem_set_sem.eq(csr.sem_set_sem),
        cp.sem_set_value.eq(csr.sem_set_value),
        csr.err_set.eq(cp.err_set), csr.err_info.eq(cp.err_info),
        csr.fence_irq.eq(cp.fence_irq),
        cp.sem_rd.eq(csr.sem_rd), csr.sem_value.eq(cp.sem_value), csr.sem_last.eq(cp.sem_last),
        csr.trace.eq(cp.trace), csr.trace_valid.eq(cp.trace_valid),
        csr.trace_overflow.eq(cp.trace_overflow), cp.trace_pop.eq(csr.trace_pop),
    ]


def stall_source_name(engine: str, reason: str) -> str:
    """Name of the NPU-level copy of a resource stall source (``stall_load_dram_read``)."""
    return f"stall_{engine}_{reason}"


def counter_events(m: Module, cp: CommandProcessor, mem, dma_stall, tile_stall, dma_tlb
                   ) -> dict[str, Value]:
    """The per-cycle increment of every counter of :data:`hw.isa.COUNTER_NAMES`.

    Parameters
    ----------
    m : Module
        Gets the named copies of the resource stall sources (:func:`stall_source_name`).
    cp : CommandProcessor
        Engine ``busy``/``done`` (at the processor's engine ports) and ``sem_stall``.
    mem : AXI4 interface
        The NPU's DRAM port (R and W handshakes, ``wstrb``).
    dma_stall, tile_stall
        ``DMA.stall`` and ``ComputeTile.stall``.
    dma_tlb
        ``DMA.tlb``: the DMA translators' events (0 without translation hardware); the
        command fetch's are ``cp.tlb``.

    Resource stalls count only while their engine is busy (a stall is part of busy time).
    """
    busy = {e: getattr(cp, e).busy for e in ENGINE_NAMES}
    done = {e: getattr(cp, e).done for e in ENGINE_NAMES}
    ports = {"dma": dma_stall, "tile": tile_stall}
    bus_bytes = len(mem.wstrb)
    strobed = sum(mem.wstrb[i] for i in range(bus_bytes))
    dma_busy = busy["load"] | busy["store"]
    events = {
        "bytes_read": Mux(mem.rvalid & mem.rready, bus_bytes, 0),
        "bytes_written": Mux(mem.wvalid & mem.wready, strobed, 0),
        "dma_busy": dma_busy,
        "overlap": dma_busy & busy["matrix"],
    }
    for e, name in enumerate(ENGINE_NAMES):
        events[f"busy.{name}"] = busy[name]
        events[f"retired.{name}"] = done[name]
        events[f"stall.{name}.sem"] = cp.sem_stall[e]
    for (name, reason), (module, fld) in RESOURCE_STALLS.items():
        source = Signal(name=stall_source_name(name, reason))
        m.d.comb += source.eq(getattr(ports[module], fld))
        events[f"stall.{name}.{reason}"] = busy[name] & source
    for client in TLB_CLIENTS:
        for what in TLB_COUNTERS:
            events[f"tlb.{client}.{what}"] = (getattr(cp.tlb, what) if client == "fetch"
                                              else getattr(dma_tlb, f"{client}_{what}"))
    if set(events) != set(COUNTER_NAMES):
        raise AssertionError(f"counter definitions {sorted(events)} do not match "
                             f"COUNTER_NAMES {sorted(COUNTER_NAMES)}")
    return events


def connect_counters(m: Module, counters: PerfCounters, csr: CsrBlock, cp: CommandProcessor,
                     mem, dma_stall, tile_stall, dma_tlb) -> None:
    """Wire the counter block: increments from :func:`counter_events`, cycle count and
    snapshot pulse from the CSR block, which reads the snapshot through the block's port."""
    events = counter_events(m, cp, mem, dma_stall, tile_stall, dma_tlb)
    for i, name in enumerate(COUNTER_NAMES):
        m.d.comb += counters.inc[i].eq(events[name])
    m.d.comb += [
        counters.cycles.eq(cycle_counter(m, 64, "counters_cycles")),
        counters.snapshot.eq(csr.snapshot),
        csr.snapshot_busy.eq(counters.busy), counters.rd_index.eq(csr.counter_index),
        counters.rd_en.eq(csr.counter_rd), csr.counter_value.eq(counters.rd_data),
        csr.counters_cycles.eq(counters.cycles_snap),
    ]


class NPU(wiring.Component):
    """The NPU.

    Parameters
    ----------
    config : NPUConfig
        Every width and depth derives from it.

    Raises
    ------
    TypeError
        If ``config`` is not an :class:`NPUConfig`.
    """

    def __init__(self, config: NPUConfig | None = None):
        config = NPUConfig() if config is None else config
        if not isinstance(config, NPUConfig):
            raise TypeError(f"config must be an NPUConfig, not {config!r}")
        self.config = config
        #: the named probes (:data:`PROBE_FIELDS`), ``probes[engine][field]``: for simulation
        #: testbenches; they are signals of the NPU's own scope, not ports
        self.probes = make_probes()
        self.mem_signature = AXI4Signature(addr_width=config.axi_addr_bits,
                                           data_width=config.axi_data_bits,
                                           id_width=config.axi_id_bits)
        super().__init__({
            "csr": In(AXI4LiteSignature(addr_width=CSR_ADDR_BITS)),
            "mem": Out(self.mem_signature),
            "irq": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config

        m.submodules.csr = csr = CsrBlock(cfg)
        m.submodules.cmdproc = cp = CommandProcessor(cfg)
        m.submodules.dma = dma = DMA(cfg)
        m.submodules.tile = tile = ComputeTile(cfg)
        m.submodules.arbiter = arbiter = AXI4Arbiter(self.mem_signature,
                                                     4 if cfg.tlb_entries else 2)
        m.submodules.counters = counters = PerfCounters(cfg)

        # -- host interface -------------------------------------------------------------------
        wiring.connect(m, wiring.flipped(self.csr), csr.bus)
        m.d.comb += self.irq.eq(csr.irq)
        connect_csr(m, csr, cp)

        # -- engines --------------------------------------------------------------------------
        wiring.connect(m, cp.load, dma.load)
        wiring.connect(m, cp.store, dma.store)
        wiring.connect(m, cp.matrix, tile.matrix)
        wiring.connect(m, cp.vector, tile.vector)
        for port in ("spad_w", "acc_w", "spad_r", "acc_r"):
            wiring.connect(m, getattr(dma, port), getattr(tile, port))

        # -- memory bus: DMA is manager 0, command processor 1, page walkers 2 and 3 ----------
        wiring.connect(m, dma.bus, arbiter.m0)
        wiring.connect(m, cp.bus, arbiter.m1)
        if cfg.tlb_entries:
            wiring.connect(m, dma.walk_load, arbiter.m2)
            wiring.connect(m, dma.walk_store, arbiter.m3)
        m.d.comb += [dma.tlb_inv.eq(cp.tlb_inv), dma.tlb_inv_all.eq(cp.tlb_inv_all),
                     dma.tlb_inv_asid.eq(cp.tlb_inv_asid)]
        wiring.connect(m, arbiter.bus, wiring.flipped(self.mem))

        # -- performance counters and named probes --------------------------------------------
        connect_counters(m, counters, csr, cp, self.mem, dma.stall, tile.stall, dma.tlb)
        connect_probes(m, self.probes, cp)
        return m
