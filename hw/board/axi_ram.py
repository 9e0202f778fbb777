"""AXI4 subordinate block RAM: device DRAM of the board build."""


from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In
from amaranth.utils import exact_log2

from hw.bus import AXI_RESP_OKAY, AXI4Signature


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
