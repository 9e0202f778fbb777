"""Timing of the DMA engine's two channels (:class:`hw.dma.DMA`), burst by burst: the load
channel (:mod:`sw.perf.dma.load`) and the store channel (:mod:`sw.perf.dma.store`), over the
bursts and per-burst step shapes of a command (:mod:`sw.perf.dma.plan`, from
:func:`hw.isa.timing.dma_bursts`).

Each command is a ledger :class:`~sw.perf.ledger.Item` that counts its stall cycles by the
definitions of ``DMA.stall`` and its bytes at the handshakes.
"""

from sw.perf.dma.load import LoadChannel
from sw.perf.dma.store import StoreChannel

__all__ = ["LoadChannel", "StoreChannel"]
