"""AXI4 arbiter: several AXI4 managers share one AXI4 manager port.

Each manager's transactions get the manager's index as their ID on the shared port (the
managers' own ID outputs are ignored), and R and B responses are routed back by that ID.
Read addresses are single-handshake transfers, so the AR channel is re-arbitrated after every
handshake. A write burst holds the write channels from its AW request until its WLAST
handshake, so W beats never interleave (AMBA AXI4, ARM IHI 0022, A5.1: AXI4 removed write
interleaving). Arbitration is round-robin on both channels. The arbiter adds no latency and no
registers on the data path.
"""

from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.bus import AXI4Signature

__all__ = ["AXI4Arbiter"]


class AXI4Arbiter(wiring.Component):
    """Round-robin arbiter of ``n`` AXI4 managers onto one AXI4 port.

    Parameters
    ----------
    signature : AXI4Signature
        Signature of every port; ``id_width`` must hold ``n - 1``.
    n : int
        Number of managers, >= 2.

    Ports
    -----
    ``m0 .. m{n-1}``: ``In(signature)``, the managers; ``bus``: ``Out(signature)``.

    Raises
    ------
    ValueError
        If ``n < 2`` or the ID width cannot hold ``n - 1``.
    """

    def __init__(self, signature: AXI4Signature, n: int):
        if n < 2:
            raise ValueError(f"an arbiter needs at least 2 managers, not {n}")
        if (n - 1) >= (1 << signature.id_width):
            raise ValueError(f"id_width={signature.id_width} cannot tell {n} managers apart")
        self.n = n
        members = {f"m{i}": In(signature) for i in range(n)}
        members["bus"] = Out(signature)
        super().__init__(members)

    def managers(self):
        return [getattr(self, f"m{i}") for i in range(self.n)]

    def elaborate(self, platform):
        m = Module()
        mgrs = self.managers()
        bus = self.bus
        n = self.n

        # -- read address: round-robin, held stable while a request waits for ARREADY -------
        ar_sel = Signal(range(n))
        ar_locked = Signal()   # a request is presented and has not been accepted yet
        ar_last = Signal(range(n))
        ar_pick = Signal(range(n))
        # round-robin: search in order starting after the last granted manager (the last
        # matching m.If in the unrolled loop wins, so iterate from the farthest candidate)
        with m.Switch(ar_last):
            for last in range(n):
                with m.Case(last):
                    for k in reversed(range(1, n + 1)):
                        idx = (last + k) % n
                        with m.If(mgrs[idx].arvalid):
                            m.d.comb += ar_pick.eq(idx)
        m.d.comb += ar_sel.eq(ar_pick)
        ar_held = Signal(range(n))
        with m.If(ar_locked):
            m.d.comb += ar_sel.eq(ar_held)
        with m.Switch(ar_sel):
            for i, mg in enumerate(mgrs):
                with m.Case(i):
                    m.d.comb += [
                        bus.arid.eq(i), bus.araddr.eq(mg.araddr), bus.arlen.eq(mg.arlen),
                        bus.arsize.eq(mg.arsize), bus.arburst.eq(mg.arburst),
                        bus.arvalid.eq(mg.arvalid), mg.arready.eq(bus.arready),
                    ]
        with m.If(bus.arvalid & bus.arready):
            m.d.sync += [ar_locked.eq(0), ar_last.eq(ar_sel)]
        with m.Elif(bus.arvalid):
            m.d.sync += [ar_locked.eq(1), ar_held.eq(ar_sel)]

        # -- read data: routed by RID --------------------------------------------------------
        for i, mg in enumerate(mgrs):
            hit = bus.rid == i
            m.d.comb += [
                mg.rid.eq(0), mg.rdata.eq(bus.rdata), mg.rresp.eq(bus.rresp),
                mg.rlast.eq(bus.rlast), mg.rvalid.eq(bus.rvalid & hit),
            ]
            with m.If(hit):
                m.d.comb += bus.rready.eq(mg.rready)

        # -- write address + data: one burst at a time, AW request to WLAST -------------------
        w_busy = Signal()        # a manager owns the write channels
        w_owner = Signal(range(n))
        aw_done = Signal()       # the owner's AW handshake happened
        w_done = Signal()        # the owner's WLAST handshake happened
        w_last_owner = Signal(range(n))
        aw_pick = Signal(range(n))
        aw_any = Signal()
        with m.Switch(w_last_owner):
            for last in range(n):
                with m.Case(last):
                    for k in reversed(range(1, n + 1)):
                        idx = (last + k) % n
                        with m.If(mgrs[idx].awvalid):
                            m.d.comb += [aw_pick.eq(idx), aw_any.eq(1)]
        with m.If(~w_busy & aw_any):
            m.d.sync += [w_busy.eq(1), w_owner.eq(aw_pick), aw_done.eq(0), w_done.eq(0)]
        with m.If(w_busy):
            with m.Switch(w_owner):
                for i, mg in enumerate(mgrs):
                    with m.Case(i):
                        m.d.comb += [
                            bus.awid.eq(i), bus.awaddr.eq(mg.awaddr), bus.awlen.eq(mg.awlen),
                            bus.awsize.eq(mg.awsize), bus.awburst.eq(mg.awburst),
                            bus.awvalid.eq(mg.awvalid & ~aw_done),
                            mg.awready.eq(bus.awready & ~aw_done),
                            bus.wdata.eq(mg.wdata), bus.wstrb.eq(mg.wstrb),
                            bus.wlast.eq(mg.wlast), bus.wvalid.eq(mg.wvalid & ~w_done),
                            mg.wready.eq(bus.wready & ~w_done),
                        ]
            aw_fire = bus.awvalid & bus.awready
            w_fire_last = bus.wvalid & bus.wready & bus.wlast
            aw_now = aw_done | aw_fire
            w_now = w_done | w_fire_last
            with m.If(aw_now & w_now):
                m.d.sync += [w_busy.eq(0), w_last_owner.eq(w_owner)]
            with m.Else():
                m.d.sync += [aw_done.eq(aw_now), w_done.eq(w_now)]

        # -- write response: routed by BID ---------------------------------------------------
        for i, mg in enumerate(mgrs):
            hit = bus.bid == i
            m.d.comb += [mg.bid.eq(0), mg.bresp.eq(bus.bresp), mg.bvalid.eq(bus.bvalid & hit)]
            with m.If(hit):
                m.d.comb += bus.bready.eq(mg.bready)

        return m
