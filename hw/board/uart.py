"""UART 8N1 receiver, transmitter and the UART-to-AXI4-Lite CSR bridge of the board build
(protocol in :mod:`hw.board`)."""


from amaranth import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.bus import AXI4LiteSignature
from hw.csr import CSR_ADDR_BITS


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
