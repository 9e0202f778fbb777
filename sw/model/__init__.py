"""Functional (ISA-level) model of the NPU: the ``model`` backend of the runtime.

:class:`ModelBackend` implements :class:`sw.backend.Backend` with the register map of
:class:`hw.isa.Csr` and the command semantics documented in :mod:`hw.isa`, in plain Python and
numpy. It holds a device DRAM image, the scratchpad and the accumulator, and executes commands
the moment the host rings a doorbell. Arithmetic comes from :mod:`sw.golden` /
:mod:`sw.quant`, so the model is bit-exact with the golden reference by construction.

Model-specific behaviour (what is not cycle-accurate, and the choices where the ISA text leaves
room; the RTL must agree with these for the differential tests):

* **Untimed.** Commands run to completion inside the ``TAIL`` write. ``CYCLES_LO``/``CYCLES_HI``
  read 0; :meth:`ModelBackend.wait_irq` returns at once with the current ``irq`` level.
* **In-order execution per queue.** Engines do not overlap; each queue's commands execute in
  ring order. A command whose wait (``flags.wait`` or a ``WAIT`` opcode) is not satisfied when
  it is reached blocks its queue there: ``HEAD`` stays on it and ``STATUS.busy`` stays 1. The
  queue resumes on the next doorbell write or when another queue's command increments a
  semaphore. In a single in-order queue such a wait can only be satisfied by a later
  doorbell after work from another queue, so a program that waits for its own later signals
  deadlocks here exactly as it would on hardware with one engine; the runtime reports it as a
  timeout. (The hardware's engines are decoupled, so it also runs streams whose waits refer
  to later commands of the same queue; kernels meant for both backends only wait on earlier
  commands.) ``BARRIER`` is a no-op here (everything earlier has retired).
* **Several queues** (``n_queues``): each has its ring, ``WINDOW_BASE``/``WINDOW_LIMIT``
  (``0`` = no limit; ring fetch, fence and DMA addresses outside are ``WINDOW`` errors, checked
  after ``BAD_DRAM_ADDR``, ``ERR_ADDR`` the first offending row or slot) and its own error
  latch (``Q_ERR_*``); an error stops its queue only. ``QUEUE_RESET`` bit ``q`` resets queue
  ``q`` alone (``HEAD := TAIL``, index 0, error cleared; the global ``ERR_*`` too if they name
  it). ``Q_FETCHED`` reads the commands retired (the hardware counts fetched ones).
* **Trace and counters.** The engine trace FIFOs hold ``trace_depth`` entries each, one per
  command the engine retired, whether it failed or not (as the hardware), with
  *logical* time: a global counter incremented per retired engine command (``start`` = its
  value, ``end`` = ``start + 1``), so order is exact and durations are not. ``CYCLES`` reads
  0; a ``FENCE`` with ``timestamp`` writes 0. ``SEM_LAST`` as the hardware.
* **Performance counters** (``Csr.CNT_*``, snapshot on a ``CNT_SNAPSHOT`` write as the
  hardware): the timing counters (:data:`hw.isa.TIMING_COUNTERS`: cycles, busy, stalls, DMA
  busy, overlap) read 0, and :meth:`sw.runtime.Device.counters` leaves them out
  (``timed = False``). The untimed ones count what the commands do at the ISA level:
  ``retired.<engine>`` +1 for every engine command that passed the fetch checks (opcode,
  semaphore ids) and reached its engine, whether the engine then reports an error or not;
  ``bytes_read`` +32 for every command read from a ring (counted when it executes or fails,
  not while it waits) and, per DMA load row, whole bus beats from the row's first byte
  aligned down to its last byte aligned up; ``bytes_written`` the bytes of every DMA store
  row and 4 per fence. These equal the hardware's counters once every submitted command has
  retired, in programs without errors and queue resets (the hardware fetches ahead, so it
  also reads commands that an error or a reset later drops).
* ``WAIT`` always waits on ``(wait_sem, wait_value)`` and ``SIGNAL`` always increments
  ``signal_sem``; setting ``flags.wait``/``flags.signal`` on them as well has no extra effect
  (the wait/increment happens once). Semaphores are 32-bit and wrap on increment; a wait is
  satisfied when :func:`hw.isa.sem_reached` says so (``(value - target) mod 2**32 < 2**31``,
  serial-number arithmetic), as on the hardware. A host write to a semaphore's CSR sets it
  (``SEM_LAST`` unchanged) and runs the queues at once, so a wait it satisfies is released
  inside the write.
* **Command index.** ``ERR_CMD`` is the number of commands the queue consumed since its last
  reset, ``CONTROL`` bit 0 (``HEAD := TAIL``, index := 0; as :mod:`hw.cmdproc`). Writing
  ``RING_BASE``/``RING_SIZE`` does not move ``HEAD``/``TAIL``. On an error ``HEAD`` stays on the
  failing command if the error was found at fetch, and is one past it after a FENCE's or an
  engine's error (:func:`hw.isa.error_stage`; the hardware may be two past an engine's error,
  having fetched ahead).
* **Error checks** happen before anything is written (no partial transfers; a bus fault is
  the exception, below); order and
  ``ERR_ADDR`` as the RTL engines (:mod:`hw.cmdproc`, :mod:`hw.dma`, :mod:`hw.tile`,
  :mod:`hw.vector`): ``BAD_OPCODE`` (the command's DRAM address), ``BAD_SEM`` (the semaphore
  id; wait checked before signal), then per opcode. DMA (any byte address, stride and
  length; ``ceil(row_bytes / L)`` local rows per DRAM row):
  ``BAD_DRAM_ADDR`` (start of the first DRAM row that does not fit), ``BAD_LOCAL_ADDR`` (the
  first local row, in transfer order, outside the memory: ``max(row, depth)``). MATMUL:
  ``flags.transpose`` on a non-square array or a number format the configuration does not
  have (``BAD_SIZE``, 0; :func:`hw.isa.format_error`), A rows, W rows (tiles of the operands'
  formats, :mod:`hw.isa.formats`), then accumulator rows. SOFTMAX: overlapping P blocks
  (``BAD_SIZE``, ``stride``), score rows, P rows, scale
  rows (``max(start, depth)``). REQUANT: accumulator
  rows, scratchpad rows, the three parameter rows, then (``flags.row_scale``) the scale rows.
  FENCE: ``MISALIGNED`` then ``BAD_DRAM_ADDR`` (the fence address). A DMA with
  ``n_rows == 0`` or ``row_bytes == 0`` and a MATMUL/REQUANT with ``m``/``n_rows == 0`` do
  nothing, are not checked, and still complete. A DMA ``mem`` field other than ``ACC`` (the
  undefined encodings 2 and 3 included) addresses the scratchpad, as the RTL decodes it.
* **Ring checks** at fetch: ``RING_BASE`` not 32-byte aligned is ``MISALIGNED`` (opcode 0,
  ``ERR_ADDR`` = ring base); a slot outside DRAM is ``BAD_DRAM_ADDR``. Before those, a ring
  whose ``RING_SIZE`` is not a power of two in ``[2, MAX_RING_SIZE]``, or whose ``HEAD`` or
  ``TAIL`` lies outside it, is ``BAD_SIZE`` once ``HEAD != TAIL`` (opcode 0, ``ERR_ADDR`` =
  ring base; :func:`hw.isa.ring_is_bad`).
* **Bus faults** (:meth:`ModelBackend.set_bus_fault`, :mod:`sw.model.faults`): the bursts a
  range rule selects fail as on the co-simulation's DRAM model, with the ISA's
  ``AXI_ERROR`` behaviour (:class:`hw.isa.ErrorCode`): a ring fetch fails before decode
  (opcode 0, the slot address; ``bytes_read`` +32), a DMA runs to its end (a load keeps the
  local rows completed before the first failing burst, a store writes every other burst)
  and reports the first failing burst's address, a fence writes nothing. The bursts are
  those of :func:`hw.isa.dma_bursts`. The count rule (``mode="nth"``) depends on the bus
  order across queues and is refused (``NotImplementedError``).
* **Virtual memory** (:mod:`hw.isa.vm`): a queue whose ``Q_VM`` enables translation has
  virtual DMA addresses. Each DMA channel keeps a TLB (:class:`hw.isa.TlbModel`) that the
  model fills in execution order, so ``tlb.<channel>.hits`` / ``.misses`` / ``.faults`` and the
  walks' ``bytes_read`` (one beat per entry read) equal the hardware's when the channel sees
  the commands in the same order (one translating queue, or queues ordered by semaphores);
  walk cycles are timing. A page fault cuts the transfer at the faulting burst (a load keeps
  the rows completed before it, a store writes the bursts before it), keeps the command for
  ``Q_RESUME`` (``resume`` runs it again first, ``skip`` retires it as a DMA of zero rows).
  ``TLB_INVALIDATE`` drops the TLB entries when it executes. Bus faults are not modelled on
  translated DMA (``NotImplementedError``). The ring and the fence words of such a queue are
  virtual too: each slot and fence word is translated by a page walk (the fetch's TLB and
  its ``tlb.fetch.*`` counters are timing, as is whether its walks' beats are read, so the
  model counts none of them); a ring slot that faults is reported as a ring error (opcode
  0, the slot's virtual address) and fetched again after ``Q_RESUME``; a fence that faults
  writes nothing and runs again on ``resume``, or retires unwritten (signalling, no
  interrupt) on ``skip``.
* REQUANT parameters: the multiplier is the low 31 bits and the shift the low 6 bits of their
  accumulator words (the register widths of the vector unit).
* ``CONTROL`` bit 0 resets every queue, clears every error latch, zeroes the semaphores,
  ``SEM_LAST`` and the traces; ``IRQ_STATUS.ERROR`` is cleared separately
  (write 1). Unmapped CSRs read 0 and ignore writes; writes to read-only CSRs are ignored.

Modules: :mod:`sw.model.backend` (CSRs, queues, semaphores, errors, trace, counters) and
:mod:`sw.model.engines` (the engines' execution).
"""

from sw.model.backend import ModelBackend

__all__ = ["ModelBackend"]
