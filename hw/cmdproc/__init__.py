"""Command processor: fetches commands from ``n_queues`` ring buffers in DRAM, decodes them once
and dispatches them to per-engine command stores; runs the synchronization commands itself.

Structure (DESIGN.md, decoupled access/execute, several streams), one module each:

* **Fetch** (:mod:`hw.cmdproc.fetch`, :class:`FetchUnit`) arbitrates round-robin among the
  queues that have commands in their ring beyond their prefetch buffer, room in it and no
  error latched. It reads up to ``fetch_depth`` 32-byte commands per AXI burst (bounded by
  ``TAIL``, the ring's end, the queue's window, the DRAM and the 4 KiB rule) into the queue's
  prefetch buffer, decoding each one's destination as it arrives; the first slot is checked
  (ring alignment, DRAM range, window) before the burst. Its *loader* takes one buffered
  command a cycle, in order per queue: an engine command into its engine's store, a
  processor command into the queue's stage, or a fetch error (unknown opcode, bad semaphore
  id, bus fault, ring check) reported for that command; ``HEAD`` advances then. It also
  executes fences (below).
* **Stage** (:mod:`hw.cmdproc.stage`, :class:`Stage`; one processor command per queue):
  ``NOP``, ``WAIT``, ``SIGNAL``, ``BARRIER`` and ``FENCE`` execute from the stage. While a
  queue's stage is occupied the loader takes no command of that queue, so a ``WAIT`` blocks
  only its own queue.
* **Engines** (:mod:`hw.cmdproc.engine_queue`, :class:`EngineQueue`): every engine has one
  command store (LUT RAM) of ``cmd_fifo_depth`` commands per queue, in the engine's narrow
  payload (:func:`~hw.cmdproc.common.engine_payload`, derived from the ISA layouts); the
  engine takes the next command round-robin among the queues whose head command is ready
  (its semaphore wait satisfied, queue not stopped). A command waiting on a semaphore in
  queue A therefore never blocks queue B on the same engine (no head-of-line blocking);
  within a queue and an engine, order is kept.
* **Semaphores** (:mod:`hw.cmdproc.semaphores`, :class:`SemaphoreUnit`) are global (shared
  by all queues) 32-bit counters that wrap modulo 2**32, in distributed RAM; every
  completion with ``signal`` set increments ``sem[signal_sem]`` and records (queue, command
  index) in ``sem_last`` (:class:`hw.isa.SemLast`), through one increment port (a stream):
  one increment a cycle, the engines first (load, store, matrix, vector), then the stages
  (queue order), then the fence; a source whose increment waits holds its command (an
  engine its in-flight record, a stage its command, the fence its FSM). A taken increment
  waits in one register and is applied the next cycle without a host write, so it shows two
  cycles after its handshake at the earliest; ``sem_clear`` drops it. The host may set a
  value (``sem_set``; no increment is applied in that cycle).
  A wait for ``target`` is satisfied when ``(sem - target) mod 2**32 < 2**31``
  (:func:`hw.isa.sem_reached`): the unit keeps a registered ready bit per waiting head (each
  engine's queue heads, each stage), loaded through a lookup when the head changes and
  updated by one compare with the changing value when its semaphore changes.
* ``BARRIER`` waits until every earlier command of its queue retired (and its own semaphore
  wait, if any); ``FENCE`` does the same and then writes ``value`` (or the cycle counter, with
  ``body.fence.timestamp``) to DRAM and optionally raises the fence interrupt. Fence writes
  share the bus with fetch; a ready fence goes first.

:class:`CommandProcessor` (:mod:`hw.cmdproc.processor`) wires them together.

Errors (unknown opcode, bad semaphore id, bad ring or fence address, window violation, AXI
error, or an error an engine reports) are reported per queue on ``err_set``/``err_info`` to the
CSR block, which latches them; ``stop[q]`` then stops fetching and issuing for queue ``q``
only. ``qclear[q]`` resets queue ``q``: its prefetch buffer, engine store entries and stage are
dropped, ``head := tail``, its command index restarts at 0; a command of that queue already
inside an engine runs to its end but neither signals nor reports an error. ``sem_clear``
zeroes the semaphores.
"""

from hw.cmdproc.common import (
    ENGINES,
    ErrorReport,
    QueueEntry,
    RunningCommand,
)
from hw.cmdproc.engine_queue import EngineQueue
from hw.cmdproc.fetch import FetchUnit
from hw.cmdproc.processor import CommandProcessor
from hw.cmdproc.semaphores import SemaphoreUnit
from hw.cmdproc.stage import Stage
from hw.isa import TraceEntry

__all__ = ["CommandProcessor", "EngineQueue", "FetchUnit", "Stage", "SemaphoreUnit",
           "QueueEntry", "ErrorReport", "RunningCommand", "TraceEntry", "ENGINES"]
