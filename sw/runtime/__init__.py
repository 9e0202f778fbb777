"""Device runtime: memory, command lists, launch and synchronize, typed errors.

In the idiom of CUDA and PyOpenCL, but Pythonic::

    dev = Device(ModelBackend(NPUConfig()))
    buf = dev.upload(np.arange(64, dtype=np.int8))
    cmds = CommandList()
    cmds.dma_load(mem=LocalMem.SPAD, dram_addr=buf.addr, dram_stride=8, row_bytes=8,
                  n_rows=8, local_row=0, local_stride=1)
    dev.launch(cmds)
    cycles = dev.synchronize()

The runtime only talks to a :class:`sw.backend.Backend` (CSR read/write, DRAM read/write,
wait for the interrupt); it never touches simulator handles, so the same code drives the
functional model and the RTL.

Streams and events, as in CUDA::

    s0, s1 = dev.default_stream, dev.create_stream()
    s0.launch(kernel_a)
    done_a = s0.record()          # an Event: completes when s0's work so far retired
    s1.wait_event(done_a)         # s1's later work starts after that
    s1.launch(kernel_b)
    s1.synchronize(timeout=10**6) # DeviceTimeoutError with a deadlock report on timeout
    cycles = done_a.elapsed_cycles(s1.record())

Conventions
-----------
* One :class:`Stream` per hardware queue; its ring lives in device DRAM (in its private window
  if it has one). The device's default stream (queue 0 by default) serves
  :meth:`Device.launch` / :meth:`Device.synchronize`.
* Streams are ordered against each other only through events (semaphores); within a stream,
  each launch starts after the previous launches retired (a ``BARRIER``).
* :meth:`Stream.destroy` is ``cudaStreamDestroy``: its work still runs, and the queue, ring
  and context binding are released once the host has seen it retire (as a freed event's
  semaphore, :class:`~sw.runtime.sync.Deferred`).
* Every command written to a ring is recorded, so a device error can name the failing command
  by the index the device reports in ``Q_ERR_CMD`` (commands since the queue's last reset).
* After a device error the runtime resets the failing queue alone (``QUEUE_RESET``: its error
  cleared, its pending commands dropped) before raising :class:`DeviceError`; the other
  queues and the semaphores are untouched, so the device keeps working.
* Semaphore 0 is left to code that orders its commands by hand; events and kernels take
  semaphores from the device's pool (:meth:`Device.alloc_semaphore`).
* Semaphores are 32-bit and wrap; "reached" is always :func:`hw.isa.sem_reached` (serial-number
  arithmetic), so nothing needs a reset when a semaphore passes 2**31 or 2**32.

Virtual memory (:mod:`~sw.runtime.vm`, format and faults in :mod:`hw.isa.vm`)::

    ctx = dev.create_context()            # an address space: page tables in device DRAM
    s = dev.create_stream(context=ctx)    # its DMA addresses are ctx's virtual addresses
    a = s.upload(x)                       # virtual buffer, physical pages from anywhere
    other = dev.create_context()
    a_ro = ctx.share(a, other)            # the same pages, read-only, in another context
    try:
        s.synchronize()
    except PageFaultError as fault:       # queue, command index, virtual address, kind
        ctx.map(page_va, [page_pa])       # map it (or fault.stream.skip())
        fault.stream.resume()             # the faulted command runs again

Modules: :mod:`~sw.runtime.errors` (typed errors), :mod:`~sw.runtime.memory` (allocator,
buffers), :mod:`~sw.runtime.commands` (command lists), :mod:`~sw.runtime.counters` (counters,
trace), :mod:`~sw.runtime.sync` (semaphores, events, deadlock reports),
:mod:`~sw.runtime.streams`, :mod:`~sw.runtime.device` and :mod:`~sw.runtime.local` (the
local-memory rows of a kernel: launches on streams nothing orders may not overlap); every
public name is importable from :mod:`sw.runtime`. :mod:`~sw.runtime.profile` collects
profiles of runs from the engines' command trace (``Device(backend, profile=True)``),
:mod:`~sw.runtime.profile_export` writes them as Perfetto traces and PNG timelines.
"""

from sw.runtime.checks import check_dram, check_resources
from sw.runtime.commands import Command, CommandList, describe_command
from sw.runtime.counters import Counters, TraceRecord
from sw.runtime.device import Device
from sw.runtime.errors import (
    DEFAULT_TIMEOUT_CYCLES,
    CommandFieldError,
    ConfigMismatchError,
    ContextInUseError,
    DeviceError,
    DeviceTimeoutError,
    LocalMemoryConflictError,
    NPUError,
    OutOfMemoryError,
    OutOfSemaphoresError,
    PageFaultError,
    StreamDestroyedError,
    UntimedCounterError,
)
from sw.runtime.local import LocalUse
from sw.runtime.memory import Allocator, AllocatorStats, Buffer
from sw.runtime.streams import RING_POLL_CYCLES, RING_POLL_MAX_CYCLES, Stream
from sw.runtime.sync import BlockedCommand, Event, Semaphore
from sw.runtime.vm import Context, VirtualBuffer

__all__ = [
    "NPUError", "DeviceError", "OutOfMemoryError", "ConfigMismatchError", "DeviceTimeoutError",
    "AllocatorStats", "Allocator", "Buffer", "Command", "CommandList", "Device",
    "describe_command", "DEFAULT_TIMEOUT_CYCLES", "Stream", "Event", "Semaphore",
    "OutOfSemaphoresError", "TraceRecord", "Counters", "UntimedCounterError", "BlockedCommand",
    "CommandFieldError", "RING_POLL_CYCLES", "RING_POLL_MAX_CYCLES", "Context",
    "VirtualBuffer", "PageFaultError", "check_resources", "check_dram", "LocalUse",
    "LocalMemoryConflictError", "ContextInUseError", "StreamDestroyedError",
]
