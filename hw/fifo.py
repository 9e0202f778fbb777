"""A first-word fall-through FIFO whose storage maps to block RAM (:class:`BlockRamFIFO`)."""

from amaranth import Elaboratable, Module, Mux, Signal
from amaranth.lib.memory import Memory

from hw.local_mem import RAM_ATTRS

__all__ = ["BlockRamFIFO"]


class BlockRamFIFO(Elaboratable):
    """A synchronous first-word fall-through FIFO of ``depth`` entries of ``width`` bits,
    with the ports of :class:`amaranth.lib.fifo.SyncFIFOBuffered` that the command
    processor's traces use (``w_data``, ``w_en``, ``w_rdy``; ``r_data``, ``r_rdy``,
    ``r_en``; ``level``).

    The entries are a :class:`~amaranth.lib.memory.Memory` of ``depth`` words with one write
    port and one synchronous read port that is *not* transparent, and the read port's own
    data register is the output. The read port loads the oldest entry still in the memory
    when the output is empty or being read (``r_en`` with ``r_rdy``). An entry written in
    cycle ``t`` counts in the memory from ``t + 1``, so it is on ``r_data`` with ``r_rdy``
    from ``t + 2`` at the earliest (as with ``SyncFIFOBuffered``), and the read port never
    reads the address being written (they are equal only while the memory is empty or
    full). The memory therefore takes :data:`hw.local_mem.RAM_ATTRS`: block RAM at any
    depth, without the logic that emulates the read-during-write rule (on ECP5 that held
    every write back a cycle: a register per data bit in front of the RAM).

    Parameters
    ----------
    width : int
        Bits per entry.
    depth : int
        Entries the FIFO holds, the one on the output included (``w_rdy`` is low while it
        holds ``depth``).

    Raises
    ------
    ValueError
        If ``width < 1`` or ``depth < 2``.
    """

    def __init__(self, width: int, depth: int):
        for bad, what in ((not isinstance(width, int) or width < 1,
                           f"width must be a positive integer, not {width!r}"),
                          (not isinstance(depth, int) or depth < 2,
                           f"depth must be an integer >= 2, not {depth!r}")):
            if bad:
                self._MustUse__silence = True       # not elaboratable: no unused warning
                raise ValueError(what)
        self.width, self.depth = width, depth
        self.w_data = Signal(width)
        self.w_en = Signal()
        self.w_rdy = Signal()
        self.r_data = Signal(width)
        self.r_en = Signal()
        self.r_rdy = Signal()
        self.level = Signal(range(depth + 1))

    def elaborate(self, platform):
        m = Module()
        depth = self.depth
        m.submodules.storage = mem = Memory(shape=self.width, depth=depth, init=[],
                                            attrs=RAM_ATTRS)
        wr = mem.write_port()
        rd = mem.read_port(domain="sync")          # not transparent: no bypass
        wp = Signal(range(depth))
        rp = Signal(range(depth))
        stored = Signal(range(depth + 1))          # entries in the memory, output excluded

        def step(ptr):
            return Mux(ptr == depth - 1, 0, ptr + 1)

        write = self.w_en & self.w_rdy
        pop = self.r_en & self.r_rdy
        load = (stored != 0) & (~self.r_rdy | pop)
        m.d.comb += [
            self.w_rdy.eq(self.level != depth),
            wr.addr.eq(wp), wr.data.eq(self.w_data), wr.en.eq(write),
            rd.addr.eq(rp), rd.en.eq(load), self.r_data.eq(rd.data),
        ]
        m.d.sync += [stored.eq(stored + write - load), self.level.eq(self.level + write - pop)]
        with m.If(write):
            m.d.sync += wp.eq(step(wp))
        with m.If(load):
            m.d.sync += [rp.eq(step(rp)), self.r_rdy.eq(1)]
        with m.Elif(pop):
            m.d.sync += self.r_rdy.eq(0)
        return m
