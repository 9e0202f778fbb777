"""The NPU on a ULX3S 85F board (Lattice ECP5 LFE5U-85F): on-chip DRAM and a UART host link.

:class:`NPUBoard` wraps :class:`hw.top.NPU` for the board:

* ``mem`` (AXI4 manager) goes to :class:`AXI4RAM`, ``config.dram_bytes`` of block RAM that
  stands in for device DRAM (the NPU checks every DRAM address against ``dram_bytes``);
* ``csr`` (AXI4-Lite) is driven by :class:`UartCsrBridge` from the FTDI serial port
  (``uart`` resource 0, 115200 baud 8N1), the documented host interface below;
* ``irq`` lights LED 0; LED 7 blinks with the clock (alive);
* the ``sync`` clock comes from an ECP5 PLL (``EHXPLLL``) fed by the board's 25 MHz
  oscillator, at ``clock_hz`` (default :data:`DEFAULT_CLOCK_HZ`, below the design's routed
  Fmax); the domain is held in reset until the PLL locks, its reset on a global network.

Host protocol of the UART bridge (bytes, big-endian fields)::

    write:  'W' (0x57), addr[15:8], addr[7:0], data[31:24], data[23:16], data[15:8], data[7:0]
            -> reply 'K' (0x4B) after the AXI4-Lite write response
    read:   'R' (0x52), addr[15:8], addr[7:0]
            -> reply data[31:24], data[23:16], data[15:8], data[7:0]

Any other first byte is ignored. Addresses are CSR byte addresses (:class:`hw.isa.Csr`).
Device memory is reached only through the NPU's DMA: a host loads it with the DMA-free
``$readmemh`` path of the simulator, not on the board; a board runtime would add a second
AXI manager for host access to the RAM (not built).

:func:`cosim.fpga.board.build_board` elaborates the wrapper with ``amaranth-boards``'
``ULX3S_85F_Platform`` and
runs its Yosys/nextpnr/ecppack flow (the ``yowasp-*`` tools, found by
:func:`cosim.fpga.find_tool`).
"""

from hw.board.axi_ram import AXI4RAM
from hw.board.npu_board import BOARD_CONFIG, DEFAULT_CLOCK_HZ, NPUBoard
from hw.board.pll import BOARD_CLOCK_HZ, PLL_PFD_HZ, PLL_VCO_HZ, ecp5_pll
from hw.board.uart import UartCsrBridge, UartRx, UartTx

__all__ = ["AXI4RAM", "UartRx", "UartTx", "UartCsrBridge", "NPUBoard", "BOARD_CLOCK_HZ",
           "BOARD_CONFIG", "DEFAULT_CLOCK_HZ", "PLL_PFD_HZ", "PLL_VCO_HZ", "ecp5_pll"]
