"""The NPU wrapped for the ULX3S 85F (see :mod:`hw.board`)."""


from amaranth import Cat, ClockDomain, Instance, Module, Signal
from amaranth.lib import io, wiring
from amaranth.lib.wiring import In, Out

from hw.board.axi_ram import AXI4RAM
from hw.board.pll import BOARD_CLOCK_HZ, ecp5_pll
from hw.board.uart import UartCsrBridge
from hw.config import NPUConfig
from hw.top import NPU

#: Default configuration of the board build (``npu board``): the smallest array, one command
#: queue, 8 semaphores: 17k LUT4, routed in about 3 minutes. Larger designs did not route:
#: the 4x4 NPU stalled in nextpnr's router2 at about 30,000 overused wires with the default
#: 4 queues and 16 semaphores, and at about 6,000 with one queue.
BOARD_CONFIG = "2x2,spad_rows=64,acc_rows=64,dram_bytes=16384,n_queues=1,n_sems=8,trace_depth=16"

#: Default clock of the NPU on the board, from the PLL: below the routed Fmax of the board
#: build (see the README's FPGA section).
DEFAULT_CLOCK_HZ = 12_500_000


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
