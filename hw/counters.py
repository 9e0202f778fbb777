"""Performance counter block: free-running event counters with an atomic snapshot.

Which events are counted, and what each one means, is defined once by
:data:`hw.isa.COUNTER_NAMES` (names, units, definitions) and wired up in
:func:`hw.top.connect_counters` (the signals behind each definition). This block only counts:
counter ``i`` adds ``inc[i]`` at every clock edge, wrapping modulo 2**32; a ``snapshot`` pulse
copies every counter and the 64-bit cycle count into the snapshot registers that the CSR
block reads (``Csr.CNT_*``), all at the same edge.
"""

from amaranth import Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hw.config import NPUConfig
from hw.isa import COUNTER_NAMES

__all__ = ["PerfCounters", "COUNTER_WIDTH"]

#: Width of every event counter (bits); ``cycles`` is 64-bit (the CSR block's ``CYCLES``).
COUNTER_WIDTH = 32


class PerfCounters(wiring.Component):
    """One 32-bit counter per name of :data:`hw.isa.COUNTER_NAMES`, plus snapshot registers.

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
        One-cycle pulse: at the end of this cycle ``values`` and ``cycles_snap`` take the
        current counts (not including this cycle's increments) and ``cycles``.
    values : ``Out(ArrayLayout(32, len(COUNTER_NAMES)))``
        The counts at the last snapshot (0 before the first).
    cycles_snap : ``Out(64)``
        ``cycles`` at the last snapshot.

    So a snapshot in cycle ``s`` holds, for every counter, the sum of its increments over the
    cycles ``c < s`` since reset (modulo 2**32), and ``cycles_snap = cycles(s)``.
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
            "values": Out(data.ArrayLayout(COUNTER_WIDTH, n)),
            "cycles_snap": Out(64),
        })

    def elaborate(self, platform):
        m = Module()

        # -- live counters: add every cycle ----------------------------------------------------
        live = []
        for i, name in enumerate(COUNTER_NAMES):
            count = Signal(COUNTER_WIDTH, name=f"count_{name.replace('.', '_')}")
            m.d.sync += count.eq(count + self.inc[i])
            live.append(count)

        # -- snapshot: everything at the same edge ---------------------------------------------
        with m.If(self.snapshot):
            m.d.sync += self.cycles_snap.eq(self.cycles)
            for i, count in enumerate(live):
                m.d.sync += self.values[i].eq(count)
        return m
