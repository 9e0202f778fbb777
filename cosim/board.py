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

:func:`build_board` elaborates the wrapper with ``amaranth-boards``' ``ULX3S_85F_Platform`` and
runs its Yosys/nextpnr/ecppack flow (the ``yowasp-*`` tools, found by
:func:`cosim.fpga.find_tool`).
"""

import json
import os
import time
from pathlib import Path

from amaranth import Cat, ClockDomain, Instance, Module, Signal
from amaranth.lib import io, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from hw.bus import AXI_RESP_OKAY, AXI4LiteSignature, AXI4Signature
from hw.config import NPUConfig
from hw.csr import CSR_ADDR_BITS
from hw.top import NPU

from .fpga import FpgaToolError, find_tool, parse_nextpnr_log, parse_nextpnr_report

__all__ = ["AXI4RAM", "UartRx", "UartTx", "UartCsrBridge", "NPUBoard", "build_board",
           "BOARD_CLOCK_HZ", "BOARD_CONFIG", "DEFAULT_CLOCK_HZ", "ecp5_pll"]

#: The ULX3S oscillator.
BOARD_CLOCK_HZ = 25_000_000

#: Default configuration of the board build (``npu board``): the smallest array, one command
#: queue, 8 semaphores: 17k LUT4, routed in about 3 minutes. Larger designs did not route:
#: the 4x4 NPU stalled in nextpnr's router2 at about 30,000 overused wires with the default
#: 4 queues and 16 semaphores, and at about 6,000 with one queue.
BOARD_CONFIG = "2x2,spad_rows=64,acc_rows=64,dram_bytes=16384,n_queues=1,n_sems=8,trace_depth=16"

#: Default clock of the NPU on the board, from the PLL: below the routed Fmax of the board
#: build (see the README's FPGA section).
DEFAULT_CLOCK_HZ = 12_500_000

#: ECP5 PLL operating ranges in Hz: phase-detector input (CLKI / CLKI_DIV) and VCO
#: (Lattice FPGA-TN-02200, "ECP5 and ECP5-5G sysCLOCK PLL/DLL Design and Usage Guide",
#: and the same limits in Project Trellis' ``ecppll``).
PLL_PFD_HZ = (3.125e6, 400e6)
PLL_VCO_HZ = (400e6, 800e6)


def ecp5_pll(f_in_hz: float, f_out_hz: float) -> dict:
    """Divider settings of an ECP5 ``EHXPLLL`` with feedback from ``CLKOP``.

    With ``FEEDBK_PATH="CLKOP"`` the output is ``f_in * CLKFB_DIV / CLKI_DIV`` and the VCO runs
    at ``f_out * CLKOP_DIV`` (TN-02200); ``CLKOP_CPHASE = (CLKOP_DIV - 1) // 2`` as
    Project Trellis' ``ecppll`` writes it. Among the settings whose phase-detector and VCO
    frequencies are in range (:data:`PLL_PFD_HZ`, :data:`PLL_VCO_HZ`) the one closest to
    ``f_out_hz`` is returned (the first found on a tie), with ``CLKOP_DIV`` putting the VCO
    nearest the middle of its range.

    Parameters
    ----------
    f_in_hz, f_out_hz : float
        Input and wanted output frequency, Hz.

    Returns
    -------
    dict
        ``CLKI_DIV``, ``CLKFB_DIV``, ``CLKOP_DIV``, ``CLKOP_CPHASE`` and ``f_out_hz`` (the
        frequency achieved) and ``f_vco_hz``.

    Raises
    ------
    ValueError
        If no setting is within 1% of ``f_out_hz``.
    """
    best = None
    for clki in range(1, 129):
        if not PLL_PFD_HZ[0] <= f_in_hz / clki <= PLL_PFD_HZ[1]:
            continue
        for clkfb in range(1, 81):
            out = f_in_hz * clkfb / clki
            clkop = min((d for d in range(1, 129)
                         if PLL_VCO_HZ[0] <= out * d <= PLL_VCO_HZ[1]),
                        key=lambda d: abs(out * d - sum(PLL_VCO_HZ) / 2), default=None)
            if clkop is not None and (best is None or abs(out - f_out_hz) < best[0]):
                best = (abs(out - f_out_hz), clki, clkfb, clkop, out)
    if best is None or best[0] > 0.01 * f_out_hz:
        nearest = f" (nearest: {best[4] / 1e6:.4g} MHz)" if best else ""
        raise ValueError(f"no ECP5 PLL setting gives {f_out_hz / 1e6:g} MHz from "
                         f"{f_in_hz / 1e6:g} MHz within 1%{nearest}")
    _, clki, clkfb, clkop, out = best
    return {"CLKI_DIV": clki, "CLKFB_DIV": clkfb, "CLKOP_DIV": clkop,
            "CLKOP_CPHASE": (clkop - 1) // 2, "f_out_hz": out, "f_vco_hz": out * clkop}


class AXI4RAM(wiring.Component):
    """AXI4 subordinate: ``size`` bytes of on-chip RAM (block RAM), INCR bursts.

    One read burst and one write burst are served at a time (reads and writes concurrently);
    a read beat takes two cycles (address, data), a write beat one. Responses carry the
    request's ID and OKAY. Addresses wrap modulo ``size`` (the NPU never sends one outside
    ``[0, dram_bytes)``). The memory has one read and one write port, so it maps to block RAM.

    Parameters
    ----------
    signature : AXI4Signature
        The manager's port signature (sets address, data and ID widths).
    size : int
        Bytes, a power of two and a multiple of the data width in bytes.
    """

    def __init__(self, signature: AXI4Signature, size: int):
        beat = signature.data_width // 8
        if size & (size - 1) or size < beat:
            raise ValueError(f"AXI4RAM size must be a power of two >= {beat}, not {size}")
        self.size = size
        self.axi = signature
        super().__init__({"bus": In(signature)})

    def elaborate(self, platform):
        m = Module()
        bus = self.bus
        dw = self.axi.data_width
        beat_bits = exact_log2(dw // 8)
        depth = self.size // (dw // 8)
        m.submodules.mem = mem = Memory(shape=dw, depth=depth, init=[])
        wr = mem.write_port(granularity=8)
        rd = mem.read_port()
        word = exact_log2(depth)

        def index(addr):
            return addr[beat_bits:beat_bits + word] if word else 0

        # -- writes -----------------------------------------------------------------------------
        w_addr = Signal(self.axi.addr_width)
        w_id = Signal(self.axi.id_width)
        with m.FSM(name="write"):
            with m.State("AW"):
                m.d.comb += bus.awready.eq(1)
                with m.If(bus.awvalid):
                    m.d.sync += [w_addr.eq(bus.awaddr), w_id.eq(bus.awid)]
                    m.next = "W"
            with m.State("W"):
                m.d.comb += [bus.wready.eq(1), wr.addr.eq(index(w_addr)), wr.data.eq(bus.wdata),
                             wr.en.eq(bus.wstrb & bus.wvalid.replicate(dw // 8))]
                with m.If(bus.wvalid):
                    m.d.sync += w_addr.eq(w_addr + (dw // 8))
                    with m.If(bus.wlast):
                        m.next = "B"
            with m.State("B"):
                m.d.comb += [bus.bvalid.eq(1), bus.bid.eq(w_id), bus.bresp.eq(AXI_RESP_OKAY)]
                with m.If(bus.bready):
                    m.next = "AW"

        # -- reads ------------------------------------------------------------------------------
        r_addr = Signal(self.axi.addr_width)
        r_id = Signal(self.axi.id_width)
        r_left = Signal(8)
        m.d.comb += [rd.addr.eq(index(r_addr)), rd.en.eq(0), bus.rdata.eq(rd.data),
                     bus.rid.eq(r_id), bus.rresp.eq(AXI_RESP_OKAY), bus.rlast.eq(r_left == 0)]
        with m.FSM(name="read"):
            with m.State("AR"):
                m.d.comb += bus.arready.eq(1)
                with m.If(bus.arvalid):
                    m.d.sync += [r_addr.eq(bus.araddr), r_id.eq(bus.arid), r_left.eq(bus.arlen)]
                    m.next = "FETCH"
            with m.State("FETCH"):
                m.d.comb += rd.en.eq(1)
                m.next = "R"
            with m.State("R"):
                m.d.comb += bus.rvalid.eq(1)
                with m.If(bus.rready):
                    m.d.sync += [r_addr.eq(r_addr + (dw // 8)), r_left.eq(r_left - 1)]
                    m.next = "NEXT"
            with m.State("NEXT"):
                with m.If(r_left == 0xFF):     # the beat just sent was the last (rlast)
                    m.next = "AR"
                with m.Else():
                    m.d.comb += rd.en.eq(1)
                    m.next = "R"
        return m


class UartRx(wiring.Component):
    """8N1 UART receiver. ``data`` is valid for one cycle with ``valid``.

    Parameters
    ----------
    divisor : int
        Clock cycles per bit (``clock_hz // baud``), at least 4.
    """

    rx: In(1, init=1)
    data: Out(8)
    valid: Out(1)

    def __init__(self, divisor: int):
        if divisor < 4:
            raise ValueError(f"UART divisor must be >= 4, not {divisor}")
        self.divisor = divisor
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        rx = Signal(init=1)
        rx_meta = Signal(init=1)
        m.d.sync += [rx_meta.eq(self.rx), rx.eq(rx_meta)]   # synchronizer
        timer = Signal(range(self.divisor * 3 // 2 + 1))
        bits = Signal(8)
        count = Signal(range(9))
        with m.FSM(name="uart_rx"):
            with m.State("IDLE"):
                with m.If(~rx):
                    m.d.sync += [timer.eq(self.divisor * 3 // 2 - 1), count.eq(0)]
                    m.next = "BITS"
            with m.State("BITS"):
                m.d.sync += timer.eq(timer - 1)
                with m.If(timer == 0):
                    m.d.sync += [bits.eq(Cat(bits[1:], rx)), count.eq(count + 1),
                                 timer.eq(self.divisor - 1)]
                    with m.If(count == 7):
                        m.next = "STOP"
            with m.State("STOP"):
                m.d.sync += timer.eq(timer - 1)
                with m.If(timer == 0):
                    m.d.comb += self.valid.eq(rx)   # a framing error drops the byte
                    m.next = "IDLE"
        m.d.comb += self.data.eq(bits)
        return m


class UartTx(wiring.Component):
    """8N1 UART transmitter; takes ``data`` when ``valid & ready``.

    Parameters
    ----------
    divisor : int
        Clock cycles per bit.
    """

    tx: Out(1, init=1)
    data: In(8)
    valid: In(1)
    ready: Out(1)

    def __init__(self, divisor: int):
        self.divisor = divisor
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        shift = Signal(10, init=0x3FF)
        left = Signal(range(11))
        timer = Signal(range(self.divisor))
        m.d.comb += [self.tx.eq(shift[0]), self.ready.eq(left == 0)]
        with m.If(left == 0):
            with m.If(self.valid):
                m.d.sync += [shift.eq(Cat(0, self.data, 1)), left.eq(10),
                             timer.eq(self.divisor - 1)]
        with m.Elif(timer == 0):
            m.d.sync += [shift.eq(Cat(shift[1:], 1)), left.eq(left - 1),
                         timer.eq(self.divisor - 1)]
        with m.Else():
            m.d.sync += timer.eq(timer - 1)
        return m


class UartCsrBridge(wiring.Component):
    """Host access to the CSRs over a UART: the protocol in this module's docstring.

    Parameters
    ----------
    divisor : int
        Clock cycles per UART bit.

    Members
    -------
    rx : ``In(1)``, tx : ``Out(1)``
        UART lines.
    csr : ``Out(AXI4LiteSignature(addr_width=CSR_ADDR_BITS))``
        AXI4-Lite manager to the NPU's CSR block; one transaction at a time.
    """

    def __init__(self, divisor: int):
        self.divisor = divisor
        super().__init__({
            "rx": In(1, init=1), "tx": Out(1, init=1),
            "csr": Out(AXI4LiteSignature(addr_width=CSR_ADDR_BITS)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.uart_rx = urx = UartRx(self.divisor)
        m.submodules.uart_tx = utx = UartTx(self.divisor)
        m.d.comb += [urx.rx.eq(self.rx), self.tx.eq(utx.tx)]
        csr = self.csr

        opcode = Signal(8)
        frame = Signal(48)          # address (16) and data (32), shifted in MSB first
        got = Signal(range(7))
        reply = Signal(32)
        sent = Signal(range(5))
        aw_done = Signal()
        w_done = Signal()
        addr = frame[32:48]

        with m.FSM(name="bridge"):
            with m.State("OPCODE"):
                with m.If(urx.valid & ((urx.data == ord("W")) | (urx.data == ord("R")))):
                    m.d.sync += [opcode.eq(urx.data), got.eq(0), frame.eq(0)]
                    m.next = "ARGS"
            with m.State("ARGS"):
                with m.If(urx.valid):
                    m.d.sync += [frame.eq(Cat(urx.data, frame[:40])), got.eq(got + 1)]
                    with m.If((opcode == ord("R")) & (got == 1)):
                        # left-align the 16-bit address like a write's
                        m.d.sync += frame.eq(Cat(urx.data, frame[:8]) << 32)
                        m.next = "AR"
                    with m.If((opcode == ord("W")) & (got == 5)):
                        m.d.sync += [aw_done.eq(0), w_done.eq(0)]
                        m.next = "AW"
            with m.State("AW"):
                m.d.comb += [csr.awaddr.eq(addr), csr.awvalid.eq(~aw_done),
                             csr.wdata.eq(frame[:32]), csr.wstrb.eq(0xF),
                             csr.wvalid.eq(~w_done)]
                with m.If(csr.awready):
                    m.d.sync += aw_done.eq(1)
                with m.If(csr.wready):
                    m.d.sync += w_done.eq(1)
                with m.If((aw_done | csr.awready) & (w_done | csr.wready)):
                    m.next = "B"
            with m.State("B"):
                m.d.comb += csr.bready.eq(1)
                with m.If(csr.bvalid):
                    m.d.sync += [reply.eq(ord("K") << 24), sent.eq(3)]
                    m.next = "SEND"
            with m.State("AR"):
                m.d.comb += [csr.araddr.eq(addr), csr.arvalid.eq(1)]
                with m.If(csr.arready):
                    m.next = "RDATA"
            with m.State("RDATA"):
                m.d.comb += csr.rready.eq(1)
                with m.If(csr.rvalid):
                    m.d.sync += [reply.eq(csr.rdata), sent.eq(0)]
                    m.next = "SEND"
            with m.State("SEND"):
                m.d.comb += [utx.data.eq(reply[24:32]), utx.valid.eq(1)]
                with m.If(utx.ready):
                    m.d.sync += [reply.eq(reply << 8), sent.eq(sent + 1)]
                    with m.If(sent == 3):
                        m.next = "OPCODE"
        return m


class NPUBoard(wiring.Component):
    """Top level for a board: the NPU, :class:`AXI4RAM` as DRAM, the UART CSR bridge.

    Without a platform (``platform is None``, e.g. for Verilog or simulation) the UART and
    LED lines are the component's ports; with an ``amaranth-boards`` platform they are
    requested from it (``uart`` 0, ``led`` 0 and 7).

    Parameters
    ----------
    config : NPUConfig
        ``dram_bytes`` sets the on-chip RAM size (block RAM), so keep it small (16 KiB uses
        8 of the LFE5U-85F's 208 DP16KD).
    clock_hz : int
        Clock of the ``sync`` domain in Hz (sets the UART divisor). On the board it comes from
        a PLL (:func:`ecp5_pll`; elaboration raises ``ValueError`` unless the PLL makes exactly
        this frequency) unless it equals :data:`BOARD_CLOCK_HZ`, when the oscillator drives it.
    baud : int
    """

    rx: In(1, init=1)
    tx: Out(1, init=1)
    irq_led: Out(1)
    alive_led: Out(1)

    def __init__(self, config: NPUConfig, *, clock_hz: int = DEFAULT_CLOCK_HZ,
                 baud: int = 115200):
        if config.dram_bytes > (1 << 20):
            raise ValueError(f"NPUConfig.dram_bytes={config.dram_bytes}: on-chip DRAM of a "
                             "board build must be at most 1 MiB")
        self.config = config
        self.clock_hz = clock_hz
        self.divisor = round(clock_hz / baud)
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        m.submodules.npu = npu = NPU(self.config)
        m.submodules.dram = dram = AXI4RAM(npu.mem_signature, self.config.dram_bytes)
        m.submodules.host = host = UartCsrBridge(self.divisor)
        wiring.connect(m, npu.mem, dram.bus)
        wiring.connect(m, host.csr, npu.csr)

        alive = Signal(24)
        m.d.sync += alive.eq(alive + 1)
        m.d.comb += [host.rx.eq(self.rx), self.tx.eq(host.tx), self.irq_led.eq(npu.irq),
                     self.alive_led.eq(alive[-1])]
        if platform is not None:
            self._clock(m, platform)
            uart = platform.request("uart", 0, dir="-")
            m.submodules.uart_rx_buf = rx = io.Buffer("i", uart.rx)
            m.submodules.uart_tx_buf = tx = io.Buffer("o", uart.tx)
            m.submodules.led0_buf = led0 = io.Buffer("o", platform.request("led", 0, dir="-"))
            m.submodules.led7_buf = led7 = io.Buffer("o", platform.request("led", 7, dir="-"))
            m.d.comb += [self.rx.eq(rx.i), tx.o.eq(self.tx), led0.o.eq(self.irq_led),
                         led7.o.eq(self.alive_led)]
        return m

    def _clock(self, m: Module, platform) -> None:
        """The ``sync`` domain: the oscillator, or the PLL's ``CLKOP``.

        Its reset is held from configuration until the PLL locks (and two clock edges more),
        and reaches its thousands of flip-flops through a ``DCCA`` buffer on a global network
        rather than on fabric routing.
        """
        m.submodules.osc_buf = osc_buf = io.Buffer(
            "i", platform.request(platform.default_clk, 0, dir="-"))
        osc = osc_buf.i
        m.domains.sync = sync = ClockDomain("sync")
        locked = Signal(init=1)
        if self.clock_hz == BOARD_CLOCK_HZ:
            m.d.comb += sync.clk.eq(osc)
        else:
            pll = ecp5_pll(BOARD_CLOCK_HZ, self.clock_hz)
            if round(pll["f_out_hz"]) != self.clock_hz:
                raise ValueError(f"the ECP5 PLL cannot make {self.clock_hz} Hz from "
                                 f"{BOARD_CLOCK_HZ} Hz; the nearest is {pll['f_out_hz']:.0f} Hz")
            # nextpnr derives the CLKOP constraint from the oscillator's and the dividers
            m.submodules.pll = Instance(
                "EHXPLLL",
                a_FREQUENCY_PIN_CLKI=f"{BOARD_CLOCK_HZ / 1e6:g}",
                a_FREQUENCY_PIN_CLKOP=f"{self.clock_hz / 1e6:g}",
                p_PLLRST_ENA="DISABLED", p_INTFB_WAKE="DISABLED", p_STDBY_ENABLE="DISABLED",
                p_DPHASE_SOURCE="DISABLED", p_OUTDIVIDER_MUXA="DIVA", p_CLKOP_ENABLE="ENABLED",
                p_CLKI_DIV=pll["CLKI_DIV"], p_CLKFB_DIV=pll["CLKFB_DIV"],
                p_CLKOP_DIV=pll["CLKOP_DIV"], p_CLKOP_CPHASE=pll["CLKOP_CPHASE"],
                p_CLKOP_FPHASE=0, p_FEEDBK_PATH="CLKOP",
                i_CLKI=osc, i_CLKFB=sync.clk, o_CLKOP=sync.clk, o_LOCK=locked,
                i_RST=0, i_STDBY=0, i_PHASESEL0=0, i_PHASESEL1=0, i_PHASEDIR=1, i_PHASESTEP=1,
                i_PHASELOADREG=1, i_PLLWAKESYNC=0, i_ENCLKOP=0)
        hold = Signal(2, init=0b11, reset_less=True)    # 1 from configuration until lock
        m.d.sync += hold.eq(Cat(~locked, hold[0]))
        m.submodules.rst_dcca = Instance("DCCA", i_CLKI=hold[1], i_CE=1, o_CLKO=sync.rst)


def build_board(config: NPUConfig, *, out_dir: Path | str = "build/board",
                bitstream: bool = True, clock_hz: int = DEFAULT_CLOCK_HZ) -> dict:
    """Build :class:`NPUBoard` for the ULX3S 85F with amaranth-boards' Trellis flow.

    Runs Yosys (``synth_ecp5``), nextpnr-ecp5 (``--router router2``; the clock constraint is
    the board's 25 MHz oscillator, which nextpnr carries through the PLL to ``clock_hz``) and,
    with ``bitstream``, ecppack, all from the ``yowasp-*`` wheels. nextpnr fails the build
    when the routed design does not meet ``clock_hz``.

    Parameters
    ----------
    config : NPUConfig
    out_dir : Path or str
        Build folder (``top.v``, ``top.lpf``, ``top.json``, ``top.tim``, ``top.bit``).
    bitstream : bool
        Also pack the bitstream (``top.bit``); otherwise stop after place and route.
    clock_hz : int
        NPU clock from the PLL: the nearest frequency it makes (:func:`ecp5_pll`, which raises
        ``ValueError`` if none is within 1%).

    Returns
    -------
    dict
        ``config``, ``clock_mhz`` (achieved by the PLL), ``fmax_mhz`` (routed),
        ``utilization``, ``critical_path`` (:func:`cosim.fpga.parse_nextpnr_report`),
        ``seconds``, ``bitstream`` (path or None), ``log`` (nextpnr's log).

    Raises
    ------
    ToolMissingError
        If a yowasp tool or amaranth-boards is missing.
    FpgaToolError
        If the build fails (the message names the log).
    """
    try:
        from amaranth_boards.ulx3s import ULX3S_85F_Platform
    except ImportError as e:
        from .fpga import ToolMissingError
        raise ToolMissingError("amaranth-boards is not installed "
                               "(pip install amaranth-boards==0.0.21)") from e
    env = {"YOSYS": find_tool("yosys"), "NEXTPNR_ECP5": find_tool("nextpnr-ecp5"),
           "ECPPACK": find_tool("ecppack")}
    out_dir = Path(out_dir)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update({k: str(v) for k, v in env.items()})
    t0 = time.perf_counter()
    try:
        platform = ULX3S_85F_Platform()
        pll = ecp5_pll(BOARD_CLOCK_HZ, clock_hz)
        board = NPUBoard(config, clock_hz=round(pll["f_out_hz"]))
        plan = platform.build(board, name="top", build_dir=str(out_dir), do_build=False,
                              nextpnr_opts="--router router2 --report top.report.json")
        if not bitstream:
            # drop the ecppack step from the generated script
            script = "build_top.sh"
            text = plan.files[script]
            plan.files[script] = "\n".join(line for line in text.splitlines()
                                           if "ECPPACK" not in line) + "\n"
        try:
            plan.execute_local(str(out_dir))
        except Exception as e:
            raise FpgaToolError(f"board build failed: {type(e).__name__}: {e}",
                                out_dir / "top.tim") from e
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    seconds = time.perf_counter() - t0
    tim = out_dir / "top.tim"
    parsed = parse_nextpnr_log(tim.read_text(errors="replace")) if tim.is_file() else {}
    report = out_dir / "top.report.json"
    critical = (parse_nextpnr_report(json.loads(report.read_text()))["critical_path"]
                if report.is_file() else {})
    bit = out_dir / "top.bit"
    result = {
        "config": config.name,
        "board": "ULX3S 85F (LFE5U-85F-6BG381C)",
        "clock_mhz": board.clock_hz / 1e6,
        "fmax_mhz": parsed.get("fmax_mhz"),
        "utilization": {k: list(v) for k, v in parsed.get("utilization", {}).items()},
        "critical_path": critical,
        "seconds": round(seconds, 1),
        "bitstream": str(bit) if bitstream and bit.is_file() else None,
        "log": str(tim),
    }
    (out_dir / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    return result
