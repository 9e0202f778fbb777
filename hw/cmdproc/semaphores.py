"""The shared semaphore unit of the command processor (:class:`SemaphoreUnit`)."""

from amaranth import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.cmdproc.common import sem_increment, sem_reached, sem_wait
from hw.config import NPUConfig
from hw.isa import SemLast

__all__ = ["SemaphoreUnit"]


class SemaphoreUnit(wiring.Component):
    """``n_sems`` global 32-bit semaphores (wrapping modulo 2**32), what last incremented each
    (:class:`hw.isa.SemLast`), and the registered "ready" bit of every waiting head.

    **Storage.** The values and records are two memories of ``n_sems`` words with one write
    port (distributed RAM on an FPGA: every read port is a copy of the 16-word RAM, no
    ``n_sems``:1 multiplexer); a valid bit per semaphore makes ``clear`` a one-cycle operation
    (a semaphore not written since reads 0).

    **One change a cycle.** In each cycle at most one semaphore changes, at the clock edge:
    ``clear`` (every value and record 0), else a host write (``set``: ``sem[set_sem] :=
    set_value``; ``sem_last`` unchanged), else the pending increment (adds 1 to its ``sem``
    and records ``(queue, index)`` in its ``sem_last``).

    **Increment register.** An increment taken on ``inc`` (a stream) goes into one register,
    the pending increment, so no path runs from the engines' ``done`` through the sources'
    merge into the values and the ready bits. It is applied in the next cycle without
    ``set`` (a host write holds it: it is applied after the write). ``clear`` drops it (the
    ``CONTROL`` reset it belongs to also withdraws every increment not yet taken, so the
    semaphores are 0 after it). ``inc.ready`` is high, outside a ``clear`` cycle, when the
    register is empty or is applied in this cycle: an increment taken in cycle ``c`` shows
    from ``c + 2`` at the earliest.

    **Ready bits** (registered compares). Waiter ``w`` (a queue's head in an engine's store,
    or a queue's stage) shows the wait of its current head on ``head[w]`` and holds
    ``ready[w]``: at every clock edge, ``ready[w] := load_ok[w]`` if ``load[w]`` (its head
    changes at this edge; the waiter computes ``load_ok`` with a lookup port, below), else,
    if this cycle's change hits the semaphore the head waits on, ``ready[w] := (new value -
    target) mod 2**32 < 2**31`` (:func:`hw.isa.sem_reached`: one compare per waiter with the
    one changing value, no lookup). So ``ready[w]`` always equals the wait test of the current
    head with the current values (1 for a head without wait), a register: a change in cycle
    ``c`` shows in ``ready`` from ``c + 1``, as the value itself does.

    **Lookups.** ``look_ok[i]`` is the wait test of ``look[i]`` (1 without ``waits``) against
    the semaphore's value *after* this cycle's change (combinational): what a head loaded in
    this cycle must start from.

    Parameters
    ----------
    config : NPUConfig
        ``n_sems``, ``n_queues``.
    n_waiters : int
        Heads with a ready bit.
    n_lookups : int
        Lookup ports.

    Ports
    -----
    inc : ``In(stream.Signature(sem_increment(config)))``
        One increment a cycle (follows the stream rules; ``ready`` does not depend on
        ``valid``).
    set : ``In(1)``, set_sem : ``In(range(n_sems))``, set_value : ``In(32)``
        Host write.
    clear : ``In(1)``
        Zero every semaphore and record.
    rd_sem : ``In(range(n_sems))``, rd_value : ``Out(32)``, rd_last : ``Out(SemLast)``
        Read port (combinational) for the CSR block.
    look : ``In(ArrayLayout(sem_wait(config), n_lookups))``, look_ok : ``Out(n_lookups)``
    head : ``In(ArrayLayout(sem_wait(config), n_waiters))``, load, load_ok : ``In(n_waiters)``,
    ready : ``Out(n_waiters)``
    """

    def __init__(self, config: NPUConfig, n_waiters: int, n_lookups: int):
        if not isinstance(n_waiters, int) or n_waiters < 1:
            raise ValueError(f"n_waiters must be a positive integer, not {n_waiters!r}")
        if not isinstance(n_lookups, int) or n_lookups < 0:
            raise ValueError(f"n_lookups must be a non-negative integer, not {n_lookups!r}")
        self.config = config
        self.n_waiters = n_waiters
        self.n_lookups = n_lookups
        n = config.n_sems
        wait = sem_wait(config)
        super().__init__({
            "inc": In(stream.Signature(sem_increment(config))),
            "set": In(1), "set_sem": In(range(max(n, 2))), "set_value": In(32),
            "clear": In(1),
            "rd_sem": In(range(max(n, 2))), "rd_value": Out(32), "rd_last": Out(SemLast),
            "look": In(data.ArrayLayout(wait, max(n_lookups, 1))),
            "look_ok": Out(max(n_lookups, 1)),
            "head": In(data.ArrayLayout(wait, n_waiters)),
            "load": In(n_waiters), "load_ok": In(n_waiters),
            "ready": Out(n_waiters),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.config.n_sems
        last_layout = data.StructLayout({"index": 24, "queue": 7})
        m.submodules.values = values = Memory(shape=32, depth=n, init=[])
        m.submodules.records = records = Memory(shape=last_layout, depth=n, init=[])
        valid = Signal(n, name="sem_valid")            # written since the last clear
        last_valid = Signal(n, name="sem_last_valid")  # incremented since the last clear

        def value(sem):
            port = values.read_port(domain="comb")
            m.d.comb += port.addr.eq(sem)
            return Mux(valid.bit_select(sem, 1), port.data, 0)

        # -- the increment register ------------------------------------------------------------
        inc = Signal(sem_increment(self.config), name="inc_pending", reset_less=True)
        pending = Signal(name="inc_pending_valid")
        fire = Signal(name="inc_apply")         # the pending increment is applied now
        m.d.comb += [fire.eq(pending & ~self.set & ~self.clear),
                     self.inc.ready.eq((~pending | fire) & ~self.clear)]
        with m.If(self.clear):                  # a reset's clear drops it
            m.d.sync += pending.eq(0)
        with m.Elif(self.inc.ready):
            m.d.sync += [pending.eq(self.inc.valid), inc.eq(self.inc.payload)]

        # -- this cycle's change: clear, else the host write, else the pending increment -----
        chg = Signal(name="chg")                # some semaphore changes at this edge
        chg_all = self.clear                    # every one (to 0)
        chg_sem = Signal(range(max(n, 2)), name="chg_sem")
        chg_value = Signal(32, name="chg_value")
        m.d.comb += [
            chg.eq(self.clear | self.set | fire),
            chg_sem.eq(Mux(self.set, self.set_sem, inc.sem)),
            chg_value.eq(Mux(self.clear, 0, Mux(self.set, self.set_value,
                                                value(inc.sem) + 1))),
        ]
        w = values.write_port()
        m.d.comb += [w.addr.eq(chg_sem), w.data.eq(chg_value), w.en.eq(self.set | fire)]
        rw = records.write_port()
        m.d.comb += [rw.addr.eq(inc.sem), rw.data.index.eq(inc.index),
                     rw.data.queue.eq(inc.queue), rw.en.eq(fire)]
        with m.If(self.clear):
            m.d.sync += [valid.eq(0), last_valid.eq(0)]
        with m.Else():
            with m.If(self.set | fire):
                m.d.sync += valid.bit_select(chg_sem, 1).eq(1)
            with m.If(fire):
                m.d.sync += last_valid.bit_select(inc.sem, 1).eq(1)

        def hits(sem):
            return chg & (chg_all | (chg_sem == sem))

        # -- lookups: the wait test against the value after this cycle's change ------------
        for i in range(self.n_lookups):
            look = self.look[i]
            now = Signal(32, name=f"look{i}_value")
            m.d.comb += [
                now.eq(Mux(hits(look.sem), chg_value, value(look.sem))),
                self.look_ok[i].eq(~look.waits | sem_reached(now, look.target)),
            ]

        # -- ready bits: loaded with a new head, else compared with the changing value ------
        for i in range(self.n_waiters):
            head = self.head[i]
            ready = Signal(name=f"ready{i}", reset_less=True)   # loaded with every head
            m.d.comb += self.ready[i].eq(ready)
            with m.If(self.load[i]):
                m.d.sync += ready.eq(self.load_ok[i])
            with m.Elif(head.waits & hits(head.sem)):
                m.d.sync += ready.eq(sem_reached(chg_value, head.target))

        # -- the CSR block's read port --------------------------------------------------------
        rec = records.read_port(domain="comb")
        m.d.comb += [
            self.rd_value.eq(value(self.rd_sem)),
            rec.addr.eq(self.rd_sem),
        ]
        with m.If(last_valid.bit_select(self.rd_sem, 1)):
            m.d.comb += [self.rd_last.index.eq(rec.data.index),
                         self.rd_last.queue.eq(rec.data.queue), self.rd_last.valid.eq(1)]
        return m
