"""Checks of a configuration against a job before any work (before a Verilator build): the
hardware queues and pool semaphores it holds at once, and the device DRAM it needs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from hw.config import NPUConfig
from sw.backend import Backend
from sw.runtime.errors import OutOfMemoryError

__all__ = ["check_resources", "check_dram"]


def check_resources(config: NPUConfig, what: str, *, queues: int = 1,
                    semaphores: int = 0) -> None:
    """Refuse, before any work, a configuration with fewer hardware queues than ``what`` (a
    job, e.g. ``"the encoder"``) has streams at once (``queues``, one queue each, the
    device's default stream included), or fewer pool semaphores than it holds at once
    (``semaphores``; the pool of :meth:`Device.alloc_semaphore` is semaphores 1 to
    ``n_sems - 1``).

    Raises
    ------
    ValueError
        Saying what ``what`` needs and what ``config`` has.
    """
    if config.n_queues < queues:
        raise ValueError(f"{what} needs {queues} hardware queues (a stream on each), "
                         f"{config.spec} has {config.n_queues}")
    pool = config.n_sems - 1
    if pool < semaphores:
        raise ValueError(f"{what} needs {semaphores} pool semaphores at once, {config.spec} "
                         f"leaves {pool or 'none'} (semaphore 0 is not pooled)")


def check_dram(config: NPUConfig, what: str,
               run: Callable[[Backend, NPUConfig], object]) -> None:
    """Refuse, before a slow run (the RTL), a configuration whose device DRAM is too small
    for ``what`` (a job, e.g. ``"the encoder"``), with the smallest ``dram_bytes`` that holds
    it.

    ``run(backend, config)`` runs the job on ``backend``; it is run on the functional model
    (:class:`sw.model.ModelBackend`: the same runtime, allocator and allocations as on every
    backend, in seconds) at ``config.dram_bytes`` and, if it runs out of memory there
    (:class:`OutOfMemoryError`), at each larger power of two (the sizes ``dram_bytes`` can
    take) until it runs: the need is measured, not estimated.

    Raises
    ------
    ValueError
        Saying what ``what`` needs (the smallest ``dram_bytes`` it runs in) and what
        ``config`` has.
    """
    from sw.model import ModelBackend

    size, limit = config.dram_bytes, 1 << 31      # NPUConfig's largest dram_bytes
    while True:
        cfg = replace(config, dram_bytes=size,
                      axi_addr_bits=max(config.axi_addr_bits, size.bit_length() - 1))
        try:
            run(ModelBackend(cfg), cfg)
            break
        except OutOfMemoryError:
            if size == limit:
                raise ValueError(f"{what} does not fit even dram_bytes={limit} (the largest) "
                                 "on the functional model") from None
            size *= 2
    if size != config.dram_bytes:
        raise ValueError(f"{what} needs dram_bytes={size} or more, {config.spec} has "
                         f"dram_bytes={config.dram_bytes} (on the functional model it runs "
                         f"out of DRAM at dram_bytes={size // 2} and runs at {size})")
