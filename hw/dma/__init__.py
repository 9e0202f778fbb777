"""DMA engine: 2-D strided transfers between device DRAM (AXI4) and the local memories.

Two independent channels run concurrently on one AXI4 manager port:

* **load** (``DMA_LOAD``): DRAM -> scratchpad or accumulator, on the AR/R channels;
* **store** (``DMA_STORE``): scratchpad or accumulator -> DRAM, on the AW/W/B channels.

The transfer of a :class:`~hw.isa.DmaBody` is ``n_rows`` DRAM rows; DRAM row ``r`` is
``row_bytes`` bytes at ``dram_addr + r * dram_stride`` (any byte address, stride and length)
and is a straight little-endian byte copy of ``ceil(row_bytes / L)`` consecutive local rows
starting at ``local_row + r * local_stride`` (``L`` = ``spad_row_bytes`` or
``acc_row_bytes``; byte ``b`` of a local row is bits ``[8b+7:8b]`` of the row word). When
``L`` does not divide ``row_bytes`` the last local row is partial: a load writes its bytes
beyond the DRAM row as 0, a store does not write them.

Modules: :mod:`hw.dma.engine` (:class:`DMA`, the two channels wired together),
:mod:`hw.dma.control` (command checks and retirement, per channel), :mod:`hw.dma.bursts`
(burst splitting and the chunk walk), :mod:`hw.dma.align` (byte realignment between beats
and the chunk walk's words), :mod:`hw.dma.load` and :mod:`hw.dma.store` (the data paths),
:mod:`hw.dma.common` (constants and layouts).
"""

from hw.dma.common import MAX_BURST_BEATS, PAGE_BYTES, DmaStall
from hw.dma.engine import DMA

__all__ = ["DMA", "DmaStall", "PAGE_BYTES", "MAX_BURST_BEATS"]
