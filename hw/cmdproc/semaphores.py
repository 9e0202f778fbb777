"""The semaphore file of the command processor (:class:`SemaphoreFile`)."""

from amaranth import Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hw.cmdproc.common import SemIncrement
from hw.config import NPUConfig
from hw.isa import SemLast

__all__ = ["SemaphoreFile"]


class SemaphoreFile(wiring.Component):
    """``n_sems`` global 32-bit semaphores (wrapping modulo 2**32) with a record of what last
    incremented each (:class:`hw.isa.SemLast`).

    Every cycle, each semaphore adds the number of sources of ``inc`` whose ``en`` is high
    and whose ``sem`` names it (several sources may hit one semaphore in the same cycle); its
    ``sem_last`` takes the queue and the low 24 bits of the command index of the hitting
    source with the highest index in ``inc``. A host write (``set``) replaces the value at
    the same clock edge: increments in that cycle are lost and ``sem_last`` is unchanged;
    ``clear`` zeroes every value and record and wins over both. All updates take effect at the
    clock edge (the values read one cycle later).

    Parameters
    ----------
    config : NPUConfig
        ``n_sems``.
    n_sources : int
        Number of increment sources.

    Ports
    -----
    inc : ``In(ArrayLayout(SemIncrement, n_sources))``
    set : ``In(n_sems)``, set_value : ``In(32)``
        Host write: bit ``s`` of ``set`` makes ``sem[s] := set_value``.
    clear : ``In(1)``
        Zero every semaphore and its record.
    sems : ``Out(ArrayLayout(32, n_sems))``
    sem_last : ``Out(ArrayLayout(SemLast, n_sems))``
    """

    def __init__(self, config: NPUConfig, n_sources: int):
        self.config = config
        self.n_sources = n_sources
        super().__init__({
            "inc": In(data.ArrayLayout(SemIncrement, n_sources)),
            "set": In(config.n_sems), "set_value": In(32),
            "clear": In(1),
            "sems": Out(data.ArrayLayout(32, config.n_sems)),
            "sem_last": Out(data.ArrayLayout(SemLast, config.n_sems)),
        })

    def elaborate(self, platform):
        m = Module()
        records = self._records(m)
        for s in range(self.config.n_sems):
            self._semaphore(m, s, records)
        return m

    def _records(self, m: Module) -> list:
        """Per source: its enable (a named signal: Amaranth's lowering copies a shared
        expression at each use, here 2 * n_sems uses) and the ``SemLast`` it would record."""
        records = []
        for i in range(self.n_sources):
            inc = self.inc[i]
            en = Signal(name=f"sem_inc_en{i}")
            rec = Signal(SemLast, name=f"sem_inc_rec{i}")
            m.d.comb += [en.eq(inc.en), rec.index.eq(inc.index), rec.queue.eq(inc.queue),
                         rec.valid.eq(1)]
            records.append((en, inc.sem, rec))
        return records

    def _semaphore(self, m: Module, s: int, records: list) -> None:
        """Semaphore ``s``: clear, else host write, else add this cycle's hits."""
        hits = []
        for i, (en, sem, _) in enumerate(records):
            hit = Signal(name=f"sem{s}_hit{i}")
            m.d.comb += hit.eq(en & (sem == s))
            hits.append(hit)
        with m.If(self.clear):
            m.d.sync += [self.sems[s].eq(0), self.sem_last[s].eq(0)]
        with m.Elif(self.set[s]):
            m.d.sync += self.sems[s].eq(self.set_value)
        with m.Else():
            m.d.sync += self.sems[s].eq(self.sems[s] + sum(hits))
            for hit, (_, _, rec) in zip(hits, records, strict=True):
                with m.If(hit):
                    m.d.sync += self.sem_last[s].eq(rec)
