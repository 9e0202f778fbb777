"""Performance counter block: event counters in block RAM with an atomic snapshot.

Which events are counted, and what each one means, is defined once by
:data:`hw.isa.COUNTER_NAMES` (names, units, definitions) and wired up in
:func:`hw.top.connect_counters` (the signals behind each definition). This block only counts:
counter ``i`` adds ``inc[i]`` at every clock edge, wrapping modulo 2**32; a ``snapshot`` pulse
takes every counter and the 64-bit cycle count at the same edge, and the CSR block reads the
snapshot through one memory read port (``Csr.CNT_*``).

How (a hybrid counter array: small counters in registers, periodically folded into wide
ones in a memory, as in Shah, Iyer, Prabhakar and McKeown, "Maintaining statistics counters
in router line cards", IEEE Micro 22(1), 2002): the 32-bit counts live in a memory of
``N = len(COUNTER_NAMES)`` words; beside it each counter has a small pending count of the
increments since it was last folded in. One counter is
folded in per cycle, round-robin, so a pending count holds at most ``N`` cycles of
increments (``N * axi_data_bytes``, a few bits). The value of counter ``i`` is always
``count[i] + pending[i]``.

The inputs (increments, snapshot pulse, cycle count) are registered first, so everything below runs
one cycle behind them. A snapshot in cycle ``s`` moves every pending count into a second set of
small registers (``pending_snap``) at the edge ending ``s + 1`` and restarts the pending counts;
over the ``N`` cycles after that (``busy`` high for all ``N + 1``, :data:`hw.isa.SNAPSHOT_CYCLES`)
the round-robin visits every counter once more and writes ``count + pending_snap`` -- the counter's
value in cycle ``s`` -- into the snapshot memory. The snapshot is as atomic as copying all counters
at one edge; only reading it must wait for the ``N + 1`` cycles, which the CSR block does by holding
the ``CNT_SNAPSHOT`` write's response. The point is the FPGA: ``2 * N * 32`` flip-flops of counts
and snapshots and an ``N``-input 32-bit read multiplexer become two memories and ``2 * N`` narrow
pending counts.
"""

from amaranth import Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.config import NPUConfig
from hw.isa import COUNTER_NAMES

__all__ = ["PerfCounters", "COUNTER_WIDTH", "cycle_counter"]

#: Width of every event counter (bits); ``cycles`` is 64-bit (the CSR block's ``CYCLES``).
COUNTER_WIDTH = 32


def cycle_counter(m: Module, width: int, name: str) -> Signal:
    """A free-running ``width``-bit cycle count, 0 in the first cycle after reset and one up at
    every edge: the CSR block's ``CYCLES`` (:attr:`hw.isa.Csr.CYCLES_LO`), and the copies of it
    made for blocks far from the CSR block (by :class:`hw.cmdproc.CommandProcessor` for its
    engine queues and fence, by :func:`hw.top.connect_counters` for the counter block's
    ``cycles``), equal to ``CYCLES`` modulo ``2**width`` in every cycle. Register duplication:
    a 64-bit count fanned out to blocks all over the chip costs more routing than a counter per
    block."""
    count = Signal(width, name=name)
    m.d.sync += count.eq(count + 1)
    return count


class PerfCounters(wiring.Component):
    """One 32-bit counter per name of :data:`hw.isa.COUNTER_NAMES` and a snapshot of them all.

    Parameters
    ----------
    config : NPUConfig
        ``axi_data_bytes`` sets the width of the increments (a byte counter adds up to one
        bus beat per cycle).

    Ports
    -----
    inc : ``In(ArrayLayout(range(axi_data_bytes + 1), len(COUNTER_NAMES)))``
        What each counter adds at the end of this cycle (index in ``COUNTER_NAMES``).
    cycles : ``In(64)``
        The free-running cycle counter (``CYCLES``).
    snapshot : ``In(1)``
        One-cycle pulse: the snapshot takes the counts of this cycle (not including its
        increments) and ``cycles``. Ignored while ``busy``.
    busy : ``Out(1)``
        The snapshot is being written: high for the :data:`hw.isa.SNAPSHOT_CYCLES` cycles
        after the ``snapshot`` pulse; the snapshot memory reads the new values from the cycle
        it falls.
    rd_index : ``In(range(len(COUNTER_NAMES)))``, rd_en : ``In(1)``
        Snapshot memory read port: with ``rd_en`` in cycle ``c``, ``rd_data`` holds counter
        ``rd_index``'s snapshot from cycle ``c + 1`` until the next read.
    rd_data : ``Out(32)``
    cycles_snap : ``Out(64)``
        ``cycles`` at the last snapshot (the new value by the time ``busy`` falls).

    So a snapshot in cycle ``s`` holds, for every counter, the sum of its increments over the
    cycles ``c < s`` since reset (modulo 2**32; 0 before the first snapshot), and
    ``cycles_snap = cycles(s)``.
    """

    def __init__(self, config: NPUConfig):
        if not isinstance(config, NPUConfig):
            raise TypeError(f"config must be an NPUConfig, not {config!r}")
        self.config = config
        n = len(COUNTER_NAMES)
        super().__init__({
            "inc": In(data.ArrayLayout(range(config.axi_data_bytes + 1), n)),
            "cycles": In(64),
            "snapshot": In(1),
            "busy": Out(1),
            "rd_index": In(range(n)),
            "rd_en": In(1),
            "rd_data": Out(COUNTER_WIDTH),
            "cycles_snap": Out(64),
        })

    def elaborate(self, platform):
        m = Module()
        n = len(COUNTER_NAMES)
        # a pending count holds the increments of at most n cycles (one visit every n)
        width = (n * self.config.axi_data_bytes).bit_length()

        m.submodules.counts = counts = Memory(shape=COUNTER_WIDTH, depth=n, init=[])
        m.submodules.snaps = snaps = Memory(shape=COUNTER_WIDTH, depth=n, init=[])
        count_rd = counts.read_port(transparent_for=())
        count_wr = counts.write_port()
        snap_wr = snaps.write_port()
        snap_rd = snaps.read_port(transparent_for=())
        # a reset clears registers, not memories: a word counts only once written since reset
        # (a visit writes every count; a snapshot round every snapshot)
        counted = Signal(n, name="counted")
        snapped = Signal(name="snapped")              # a snapshot was written since reset
        m.d.comb += [snap_rd.addr.eq(self.rd_index), snap_rd.en.eq(self.rd_en),
                     self.rd_data.eq(Mux(snapped, snap_rd.data, 0))]

        pending = [Signal(width, name=f"pending{i}") for i in range(n)]
        pending_snap = [Signal(width, name=f"pending_snap{i}") for i in range(n)]
        visit = Signal(range(n), name="visit")      # folded in this cycle (read last cycle)
        left = Signal(range(n + 1), name="snap_left")   # visits of the snapshot round to go
        # the inputs registered: the events come from all over the chip (the AXI handshakes
        # behind the byte counts), so none of their logic goes on into the pending counts;
        # the snapshot pulse and the cycle count are delayed alike, so the snapshot is the same
        inc = Signal.like(self.inc, name="inc_r")
        take = Signal(name="snapshot_r")
        cycles = Signal(64, name="cycles_r")
        m.d.sync += [inc.eq(self.inc), take.eq(self.snapshot & ~self.busy),
                     cycles.eq(self.cycles)]
        writing = Signal(name="snap_writing")           # the snapshot round runs
        m.d.comb += [writing.eq(left != 0), self.busy.eq(take | writing)]

        # -- the round-robin: read count[visit + 1] now, fold in count[visit] ------------------
        nxt = Mux(visit == n - 1, 0, visit + 1)
        m.d.sync += visit.eq(nxt)
        m.d.comb += count_rd.addr.eq(nxt)
        base = Signal(COUNTER_WIDTH, name="snap_value")     # count[visit] + pending_snap[visit]
        p_visit = Signal(width, name="pending_visit")
        s_visit = Signal(width, name="pending_snap_visit")
        with m.Switch(visit):
            for i in range(n):
                with m.Case(i):
                    m.d.comb += [p_visit.eq(pending[i]), s_visit.eq(pending_snap[i])]
        m.d.comb += [
            base.eq(Mux(counted.bit_select(visit, 1), count_rd.data, 0) + s_visit),
            count_wr.addr.eq(visit), count_wr.en.eq(1), count_wr.data.eq(base + p_visit),
            snap_wr.addr.eq(visit), snap_wr.en.eq(writing), snap_wr.data.eq(base),
        ]
        m.d.sync += counted.bit_select(visit, 1).eq(1)
        for i in range(n):
            here = visit == i
            with m.If(take):
                # the pending count of a counter folded in this cycle is already in count
                m.d.sync += [pending_snap[i].eq(Mux(here, 0, pending[i])),
                             pending[i].eq(inc[i])]
            with m.Elif(here):
                m.d.sync += [pending_snap[i].eq(0), pending[i].eq(inc[i])]
            with m.Else():
                m.d.sync += pending[i].eq(pending[i] + inc[i])

        # -- the snapshot round: the next n visits write the snapshot memory --------------------
        with m.If(take):
            m.d.sync += [left.eq(n), self.cycles_snap.eq(cycles)]
        with m.Elif(writing):
            m.d.sync += left.eq(left - 1)
            with m.If(left == 1):
                m.d.sync += snapped.eq(1)
        return m
