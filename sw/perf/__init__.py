"""The performance model of the NPU: a third backend (``perf``) behind :class:`sw.backend.Backend`.

It executes the same command streams as the functional model (:mod:`sw.model`), producing the
same bytes in DRAM, with the hardware's decoupled semantics (per-engine queues running
concurrently, ordered by semaphores) and the RTL's timing at command and burst granularity,
in an event-driven simulation (:mod:`sw.perf.events`): ring fetch (:mod:`sw.perf.fetch`), the
stages and engine queues (:mod:`sw.perf.cmdproc`), the semaphore unit
(:mod:`sw.perf.semaphores`), the DMA with its outstanding reads, bursts and 4 KiB splits
(:mod:`sw.perf.dma`), the engines (:mod:`sw.perf.engines`; cycle schedules in
:mod:`sw.perf.timing`, on :mod:`hw.isa.timing`), the AXI arbiter and the DRAM model
(:mod:`sw.perf.memory`), and what the host's own accesses cost (:mod:`sw.perf.host`).

It reports the hardware's performance counters through the same CSRs, so
:meth:`sw.runtime.Device.counters` works unchanged and the model is validated against the RTL
counter by counter (``python -m cosim.bench.validate``)::

    from sw.perf import PerfBackend
    dev = Device(PerfBackend(NPUConfig()))
"""

from sw.perf.backend import PerfBackend

__all__ = ["PerfBackend"]
