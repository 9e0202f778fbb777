"""Top level of the NPU: CSR block, command processor, DMA, compute tile, AXI arbiter.

One clock domain (``sync``). External ports:

* ``csr``: AXI4-Lite subordinate, 32-bit, 12-bit byte address (host MMIO, map in
  :class:`hw.isa.Csr`);
* ``mem``: AXI4 manager to device DRAM. IDs: 0 = DMA, 1 = command processor (ring fetch and
  fence writes). Reads with the same ID must return in order;
* ``irq``: level interrupt (fence completion, error).
"""

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .axi_arbiter import AXI4Arbiter
from .bus import AXI4LiteSignature, AXI4Signature
from .cmdproc import CommandProcessor
from .config import NPUConfig
from .csr import CSR_ADDR_BITS, CsrBlock
from .dma import DMA
from .tile import ComputeTile

__all__ = ["NPU", "connect_csr"]


def connect_csr(m: Module, csr: CsrBlock, cp: CommandProcessor) -> None:
    """Wire the CSR block to the command processor (ring, window, error, semaphore, trace
    and counter signals)."""
    m.d.comb += [
        cp.ring_base.eq(csr.ring_base), cp.ring_size.eq(csr.ring_size), cp.tail.eq(csr.tail),
        cp.window_base.eq(csr.window_base), cp.window_limit.eq(csr.window_limit),
        csr.head.eq(cp.head), csr.fetched.eq(cp.fetched), csr.busy.eq(cp.busy),
        cp.stop.eq(csr.stop), cp.qclear.eq(csr.qclear), cp.sem_clear.eq(csr.sem_clear),
        csr.err_set.eq(cp.err_set), csr.err_info.eq(cp.err_info),
        csr.fence_irq.eq(cp.fence_irq),
        csr.sems.eq(cp.sems), csr.sem_last.eq(cp.sem_last),
        cp.cycles.eq(csr.cycles[:32]),
        csr.perf.eq(cp.perf),
        csr.trace.eq(cp.trace), csr.trace_valid.eq(cp.trace_valid),
        csr.trace_overflow.eq(cp.trace_overflow), cp.trace_pop.eq(csr.trace_pop),
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
        m.submodules.arbiter = arbiter = AXI4Arbiter(self.mem_signature, 2)

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

        # -- memory bus: DMA is manager 0, command processor manager 1 ------------------------
        wiring.connect(m, dma.bus, arbiter.m0)
        wiring.connect(m, cp.bus, arbiter.m1)
        wiring.connect(m, arbiter.bus, wiring.flipped(self.mem))
        return m
