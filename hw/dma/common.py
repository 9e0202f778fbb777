"""Constants, layouts and helpers shared by the parts of the DMA."""

from amaranth import Mux
from amaranth.lib import data

from hw.config import NPUConfig
from hw.isa import MAX_BURST_BEATS, PAGE_BYTES, LocalMem

__all__ = ["PAGE_BYTES", "MAX_BURST_BEATS", "W_BUFFER_DEPTH", "DmaStall", "TlbEvents",
           "LocalGeometry",
           "by_mem", "log2"]

# PAGE_BYTES (4 KiB, no burst crosses it) and MAX_BURST_BEATS (256) are defined in
# hw.isa.timing (ARM IHI 0022, A3.4.1), with the burst decomposition and the DMA's cycles.
#: Depth of the store channel's buffer of assembled W beats.
W_BUFFER_DEPTH = 4


#: Layout of :attr:`DMA.stall` (one bit per stall reason, valid every cycle).
DmaStall = data.StructLayout({"load_dram": 1, "load_spad": 1, "load_acc": 1, "store_dram": 1})

#: Layout of :attr:`DMA.tlb`: per channel, the counter events of its translator
#: (:class:`hw.dma.translate.Translator`, ``tlb.<client>.*`` of :data:`hw.isa.COUNTER_NAMES`).
TlbEvents = data.StructLayout({f"{c}_{e}": 1 for c in ("load", "store")
                               for e in ("hits", "misses", "walk_cycles", "faults")})


def log2(n: int) -> int:
    """log2 of a power of two."""
    return n.bit_length() - 1


class LocalGeometry:
    """Static facts about one local memory as seen by the DMA."""

    def __init__(self, cfg: NPUConfig, mem: LocalMem):
        self.mem = mem
        self.row_bytes = cfg.spad_row_bytes if mem == LocalMem.SPAD else cfg.acc_row_bytes
        self.depth = cfg.spad_rows if mem == LocalMem.SPAD else cfg.acc_rows
        self.chunk_bytes = min(self.row_bytes, cfg.axi_data_bytes)      # G
        self.chunks_per_row = self.row_bytes // self.chunk_bytes         # L / G
        self.log2_row = log2(self.row_bytes)
        self.log2_chunk = log2(self.chunk_bytes)


def by_mem(is_acc, spad, acc):
    """``acc`` if the transfer addresses the accumulator, else ``spad``."""
    return Mux(is_acc, acc, spad)
