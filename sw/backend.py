"""The small interface between the device runtime and whatever executes the commands.

A backend is the transport a driver would have to real hardware: 32-bit MMIO on the CSR port,
bulk access to device DRAM, and waiting for the interrupt line. The runtime (:mod:`sw.runtime`)
only ever talks to a :class:`Backend`; it never touches simulator handles.

Implementations: :class:`sw.model.ModelBackend` (functional ISA model, instant) and
:class:`cosim.tb.rtl_backend.RtlBackend` (cocotb + Verilator).
"""

from typing import Protocol, runtime_checkable

__all__ = ["Backend", "BackendError"]


class BackendError(RuntimeError):
    """The transport itself failed (bad address on the host side, simulator gone)."""


@runtime_checkable
class Backend(Protocol):
    name: str  #: "model" or "rtl"
    #: Whether the device counts cycles. An untimed backend (the functional model) reads 0
    #: from ``CYCLES`` and the timing counters; ``Device.counters()`` leaves those out.
    timed: bool
    #: A timed backend also has ``dram_timing`` (a :class:`sw.dram.DramTiming`): the timing its
    #: DRAM runs under, which :class:`sw.runtime.Device` keeps and the kernels plan for.

    def csr_read(self, offset: int) -> int:
        """Read the 32-bit CSR at byte ``offset`` (see :class:`hw.isa.Csr`)."""
        ...

    def csr_write(self, offset: int, value: int) -> None:
        """Write the 32-bit CSR at byte ``offset``."""
        ...

    def mem_write(self, addr: int, data: bytes) -> None:
        """Write ``data`` into device DRAM at byte address ``addr`` (host backdoor; any
        alignment). Raises :class:`BackendError` outside the DRAM."""
        ...

    def mem_read(self, addr: int, size: int) -> bytes:
        """Read ``size`` bytes of device DRAM at byte address ``addr`` (host backdoor)."""
        ...

    def wait_irq(self, max_cycles: int) -> bool:
        """Let the device run until ``irq`` is high or ``max_cycles`` clock cycles passed.

        Returns ``True`` if ``irq`` is high on return. A backend that executes commands
        synchronously (the functional model) returns at once.
        """
        ...
