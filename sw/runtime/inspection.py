"""The device's CSR helpers for inspection and debugging (:class:`DeviceInspection`, a base
of :class:`sw.runtime.Device`): the cycle counter, semaphore values and host writes, what last
signalled a semaphore, performance counters, the command trace, a status snapshot and the
deadlock report."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hw.isa import (
    Csr,
    Opcode,
    SemLast,
    decode,
    queue_csr,
    sem_csr,
    sem_last_csr,
    sem_reached,
    unpack_fields,
)
from sw.runtime.commands import describe_command
from sw.runtime.counters import Counters, TraceRecord, read_counters, read_trace
from sw.runtime.errors import NPUError
from sw.runtime.sync import SEM_MODULUS, BlockedCommand

if TYPE_CHECKING:
    from sw.backend import Backend
    from sw.runtime.streams import Stream
    from sw.runtime.sync import Semaphore

__all__ = ["DeviceInspection"]


class DeviceInspection:
    """CSR reads and writes of a :class:`sw.runtime.Device` for inspection and debugging
    (the device's ``backend``, ``config``, ``streams``, ``default_stream``, ``profiler`` and
    pool semaphores)."""

    backend: Backend
    streams: dict[int, Stream]
    _sems_live: dict[int, Semaphore]

    def cycles(self) -> int:
        """The device's 64-bit cycle counter (reading ``CYCLES_LO`` latches ``CYCLES_HI``);
        always 0 on the untimed model."""
        lo = self.backend.csr_read(Csr.CYCLES_LO)
        hi = self.backend.csr_read(Csr.CYCLES_HI)
        return hi << 32 | lo

    def semaphore(self, sem: int) -> int:
        """Current value of semaphore ``sem`` (its CSR, :func:`hw.isa.sem_csr`).

        Raises
        ------
        ValueError
            If the semaphore does not exist.
        """
        if not 0 <= sem < self.config.n_sems:
            raise ValueError(f"semaphore {sem} does not exist (n_sems={self.config.n_sems})")
        return self.backend.csr_read(sem_csr(sem))

    def set_semaphore(self, sem: int, value: int) -> None:
        """Host write of semaphore ``sem`` (its CSR at :func:`hw.isa.sem_csr`): it holds
        ``value`` from then on; ``SEM_LAST`` is not changed. For initialisation, and for
        tests that drive a semaphore across its 2**32 wrap.

        A pool semaphore in use (:meth:`alloc_semaphore`, events, the barrier) moves with
        it: its targets shift so that everything signalled so far counts as reached (an
        event recorded and completed stays completed; one never recorded still waits for
        its first recording).

        Raises
        ------
        ValueError
            If the semaphore does not exist or ``value`` is not in ``0 .. 2**32 - 1``.
        NPUError
            If ``sem`` is a pool semaphore in use with signals still pending (it does not
            hold its target yet): the write would lose them.
        """
        if not 0 <= value < SEM_MODULUS:
            raise ValueError(f"semaphore value {value!r} is not in 0 .. {SEM_MODULUS - 1}")
        current = self.semaphore(sem)
        live = self._sems_live.get(sem)
        if live is not None:
            if current != live.target():
                raise NPUError(f"semaphore {sem} has signals pending (holds {current}, its "
                               f"owner expects {live.target()}); synchronize first")
            live.base = (value - live.issued) % SEM_MODULUS
        self.backend.csr_write(sem_csr(sem), value)

    def last_signal(self, sem: int) -> tuple[int, int] | None:
        """``(queue, command index)`` of what last incremented ``sem`` (``SEM_LAST``), or None
        if nothing did since the last ``CONTROL`` clear."""
        last = unpack_fields(SemLast, self.backend.csr_read(sem_last_csr(sem)))
        return (last.queue, last.index) if last.valid else None

    def counters(self) -> Counters:
        """Snapshot of the performance counters (:func:`sw.runtime.counters.read_counters`;
        see :class:`Counters` for names and units). On an untimed backend (the functional
        model) the timing counters are left out."""
        return read_counters(self.backend)

    def read_trace(self) -> list[TraceRecord]:
        """Drain the engines' command trace FIFOs, oldest first per engine, sorted by start.

        Raises
        ------
        NPUError
            If a trace FIFO overflowed (entries were lost; it is cleared by ``CONTROL``), or
            the device is profiling (:attr:`profiler` drains the trace).
        """
        if self.profiler is not None:
            raise NPUError("the device's profiler drains the command trace; read it from "
                           "device.profiler.finish()")
        return read_trace(self.backend, self.config.trace_depth)

    def status(self) -> dict[str, int]:
        """Debug snapshot: STATUS, the default stream's HEAD and TAIL, IRQ_STATUS, every
        stream's Q_STATUS/HEAD/TAIL and every semaphore."""
        rd = self.backend.csr_read
        q0 = self.default_stream.queue
        snap = {"STATUS": rd(Csr.STATUS), "HEAD": rd(queue_csr(q0, Csr.HEAD)),
                "TAIL": rd(queue_csr(q0, Csr.TAIL)), "IRQ_STATUS": rd(Csr.IRQ_STATUS)}
        for q in sorted(self.streams):
            if q != q0:
                snap[f"q{q}.STATUS"] = rd(queue_csr(q, Csr.Q_STATUS))
                snap[f"q{q}.HEAD"] = rd(queue_csr(q, Csr.HEAD))
                snap[f"q{q}.TAIL"] = rd(queue_csr(q, Csr.TAIL))
        for s in range(self.config.n_sems):
            snap[f"sem{s}"] = rd(sem_csr(s))
        return snap

    def diagnose(self) -> list[BlockedCommand]:
        """Deadlock report: for each stream, its first submitted command (since its last
        reset) whose semaphore wait is not satisfied (:func:`hw.isa.sem_reached`), with the
        semaphore's value and what last signalled it. A waiter is never more than 2**31
        signals ahead, so such a command has not started; it blocks its stream (a ``WAIT``
        or fence) or its engine's FIFO for that stream."""
        sems = [self.semaphore(s) for s in range(self.config.n_sems)]
        blocked = []
        for q, stream in sorted(self.streams.items()):
            for i, raw in enumerate(stream._record):
                h = decode(raw).header
                if not (h.flags.wait or h.opcode == Opcode.WAIT):
                    continue
                sem, value = h.wait_sem, h.wait_value
                if sem < len(sems) and not sem_reached(sems[sem], value):
                    blocked.append(BlockedCommand(q, i, describe_command(raw), sem, value,
                                                  sems[sem], self.last_signal(sem)))
                    break
        return blocked
